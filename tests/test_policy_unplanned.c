/* test_policy_unplanned: under the `bsipipe` policy, tasks without a plan
 * position (sched_data NULL) run on any worker, mixed with planned tasks that
 * keep their order; tasks with an unusable position (worker out of range,
 * negative slot, a slot the worker already passed, a slot given twice) are
 * reported on stderr and still run, never hang. */
#include "tests/policy_util.h"
#include "tests/check.h"

#include <stdatomic.h>

#define NW 4
#define NFREE 200
#define NPLAN 100

static atomic_int ran_free, ran_bad;
static atomic_int count[NW];
static int order[NW][NPLAN];
static bsipipe_plan_pos_t pos[NPLAN];
static int idx[NPLAN];

static void cpu_free(void *buffers[], void *arg)
{
    (void)buffers;
    (void)arg;
    atomic_fetch_add(&ran_free, 1);
}

static void cpu_bad(void *buffers[], void *arg)
{
    (void)buffers;
    (void)arg;
    atomic_fetch_add(&ran_bad, 1);
}

static void cpu_plan(void *buffers[], void *arg)
{
    (void)buffers;
    int i = *(int *)arg;
    int w = starpu_worker_get_id();
    if (w >= 0 && w < NW) {
        int k = atomic_fetch_add(&count[w], 1);
        if (k < NPLAN)
            order[w][k] = i;
    }
}

static struct starpu_codelet cl_free = {.cpu_funcs = {cpu_free}, .nbuffers = 0, .name = "unplanned"};
static struct starpu_codelet cl_bad = {.cpu_funcs = {cpu_bad}, .nbuffers = 0, .name = "badpos"};
static struct starpu_codelet cl_plan = {.cpu_funcs = {cpu_plan}, .nbuffers = 0, .name = "planned"};

static void submit(struct starpu_codelet *cl, void *arg, bsipipe_plan_pos_t *p)
{
    struct starpu_task *t = starpu_task_create();
    t->cl = cl;
    t->cl_arg = arg;
    t->sched_data = p;
    int rc = starpu_task_submit(t);
    CHECK(rc == 0, "submit: %d", rc);
}

int main(void)
{
    pu_watchdog(60);
    int rc = pu_start("test_policy_unplanned", NW, "bsipipe");
    if (rc)
        return rc;

    /* planned tasks in reverse slot order, interleaved with unplanned ones */
    long nslots[NW] = {0};
    for (int i = 0; i < NPLAN; i++) {
        pos[i].worker = i % NW;
        pos[i].slot = nslots[i % NW]++;
        idx[i] = i;
    }
    int f = 0;
    for (int i = NPLAN - 1; i >= 0; i--) {
        submit(&cl_plan, &idx[i], &pos[i]);
        submit(&cl_free, NULL, NULL);
        f++;
    }
    for (; f < NFREE; f++)
        submit(&cl_free, NULL, NULL);
    starpu_task_wait_for_all();
    CHECK(atomic_load(&ran_free) == NFREE, "%d of %d unplanned tasks ran", atomic_load(&ran_free), NFREE);
    for (int w = 0; w < NW; w++) {
        CHECK(atomic_load(&count[w]) == nslots[w], "worker %d ran %d planned tasks of %ld", w,
              atomic_load(&count[w]), nslots[w]);
        int bad = 0;
        for (int k = 0; k < atomic_load(&count[w]) && k < NPLAN; k++)
            if (pos[order[w][k]].worker != w || pos[order[w][k]].slot != k)
                bad++;
        CHECK(bad == 0, "worker %d: %d planned tasks off order", w, bad);
        CHECK(bsipipe_policy_next_slot(w) == nslots[w], "next_slot(%d) = %ld", w, bsipipe_policy_next_slot(w));
    }

    /* unusable positions: each is reported on stderr and runs anyway */
    fprintf(stderr, "test_policy_unplanned: the next 'bsipipe policy:' errors are expected\n");
    static bsipipe_plan_pos_t bad[] = {
        {99, 0, 0},  /* worker out of range */
        {-1, 0, 0},  /* negative worker */
        {0, -5, 0},  /* negative slot */
        {1, 0, 0},   /* worker 1 already passed slot 0 */
    };
    int nbad = (int)(sizeof(bad) / sizeof(*bad));
    for (int i = 0; i < nbad; i++)
        submit(&cl_bad, NULL, &bad[i]);
    starpu_task_wait_for_all();
    CHECK(atomic_load(&ran_bad) == nbad, "%d of %d tasks with bad positions ran", atomic_load(&ran_bad), nbad);

    /* a slot given to two tasks: both run, the plan goes on */
    static bsipipe_plan_pos_t dup[3];
    long s = nslots[2];
    dup[0] = (bsipipe_plan_pos_t){2, s, 0};
    dup[1] = (bsipipe_plan_pos_t){2, s, 0};
    dup[2] = (bsipipe_plan_pos_t){2, s + 1, 0};
    atomic_store(&ran_bad, 0);
    for (int i = 2; i >= 0; i--)
        submit(&cl_bad, NULL, &dup[i]);
    starpu_task_wait_for_all();
    CHECK(atomic_load(&ran_bad) == 3, "%d of 3 tasks around a duplicate slot ran", atomic_load(&ran_bad));
    CHECK(bsipipe_policy_next_slot(2) == s + 2, "next_slot(2) = %ld after a duplicate", bsipipe_policy_next_slot(2));

    /* the same among tasks that may run ahead: all run, the order goes on past the slot */
    static bsipipe_plan_pos_t dup_ahead[4];
    s += 2;
    dup_ahead[0] = (bsipipe_plan_pos_t){2, s, 0};
    dup_ahead[1] = (bsipipe_plan_pos_t){2, s + 1, 1};
    dup_ahead[2] = (bsipipe_plan_pos_t){2, s + 1, 1};
    dup_ahead[3] = (bsipipe_plan_pos_t){2, s + 2, 0};
    atomic_store(&ran_bad, 0);
    for (int i = 3; i >= 0; i--)
        submit(&cl_bad, NULL, &dup_ahead[i]);
    starpu_task_wait_for_all();
    CHECK(atomic_load(&ran_bad) == 4, "%d of 4 tasks around a duplicate slot running ahead ran",
          atomic_load(&ran_bad));
    CHECK(bsipipe_policy_next_slot(2) == s + 3, "next_slot(2) = %ld after a duplicate running ahead (expected %ld)",
          bsipipe_policy_next_slot(2), s + 3);

    starpu_shutdown();
    return check_finish("test_policy_unplanned");
}
