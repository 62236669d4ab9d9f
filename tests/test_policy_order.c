/* test_policy_order: under the `bsipipe` policy, with 4 CPU workers, random
 * plans run exactly as planned: every task on its planned worker, and each
 * worker's tasks in slot order, although tasks are submitted in random order
 * (later slots are often pushed long before earlier ones) and some depend on
 * tasks of other workers through shared STARPU_RW handles.
 *
 * Plans are built from a random global order of the tasks: each task gets a
 * random worker, its slot is its rank among that worker's tasks, and tasks
 * sharing a handle are submitted in global order (at the submission positions
 * the shuffle gave them), so data dependencies agree with slot order. */
#include "tests/policy_util.h"
#include "tests/check.h"

#include <stdatomic.h>

#define NW 4
#define NT 320
#define NH 6
#define ROUNDS 3

struct rec {
    int idx;
    int spin_us;
};

static bsipipe_plan_pos_t pos[NT];
static struct rec recs[NT];
static int handle_of[NT]; /* -1: no data */
static atomic_int ran_on[NT];
static atomic_int count[NW];
static int order[NW][NT];
static atomic_int wrong_worker_seen;

static void body(void *arg)
{
    const struct rec *r = arg;
    int w = starpu_worker_get_id();
    atomic_store(&ran_on[r->idx], w);
    if (w < 0 || w >= NW) {
        atomic_fetch_add(&wrong_worker_seen, 1);
        return;
    }
    int k = atomic_fetch_add(&count[w], 1);
    if (k < NT)
        order[w][k] = r->idx;
    double t0 = pu_now_us();
    while (pu_now_us() - t0 < r->spin_us) {
    }
}

static void cpu_none(void *buffers[], void *arg)
{
    (void)buffers;
    body(arg);
}

static void cpu_rw(void *buffers[], void *arg)
{
    long *v = (long *)STARPU_VARIABLE_GET_PTR(buffers[0]);
    (*v)++;
    body(arg);
}

static struct starpu_codelet cl_none = {
    .cpu_funcs = {cpu_none}, .nbuffers = 0, .name = "order_none"};
static struct starpu_codelet cl_rw = {
    .cpu_funcs = {cpu_rw}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "order_rw"};

static void shuffle(int *a, int n, unsigned long long *s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(pu_rand(s) % (unsigned)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* One round: plan NT tasks (global order = index), submit, wait, check. Slots
 * continue from `base[w]` (the policy numbers slots over its whole life). */
static void round_run(int round, unsigned long long *seed, long base[NW], starpu_data_handle_t h[NH],
                      long hval_expect[NH])
{
    long nslots[NW] = {0};
    for (int i = 0; i < NT; i++) {
        int w = (int)(pu_rand(seed) % NW);
        pos[i].worker = w;
        pos[i].slot = base[w] + nslots[w]++;
        handle_of[i] = (pu_rand(seed) % 3 == 0) ? (int)(pu_rand(seed) % NH) : -1;
        recs[i].idx = i;
        recs[i].spin_us = (int)(pu_rand(seed) % 200);
        atomic_store(&ran_on[i], -1);
        if (handle_of[i] >= 0)
            hval_expect[handle_of[i]]++;
    }
    for (int w = 0; w < NW; w++)
        atomic_store(&count[w], 0);

    /* random submission order, then tasks of each handle put back in global order */
    int sub[NT];
    for (int i = 0; i < NT; i++)
        sub[i] = i;
    shuffle(sub, NT, seed);
    for (int hh = 0; hh < NH; hh++) {
        int places[NT], tasks[NT], n = 0;
        for (int p = 0; p < NT; p++)
            if (handle_of[sub[p]] == hh) {
                places[n] = p;
                tasks[n] = sub[p];
                n++;
            }
        /* tasks[] sorted by global index (insertion sort; n is small) */
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && tasks[b - 1] > tasks[b]; b--) {
                int t = tasks[b];
                tasks[b] = tasks[b - 1];
                tasks[b - 1] = t;
            }
        for (int a = 0; a < n; a++)
            sub[places[a]] = tasks[a];
    }

    for (int p = 0; p < NT; p++) {
        int i = sub[p];
        struct starpu_task *t = starpu_task_create();
        t->cl = handle_of[i] >= 0 ? &cl_rw : &cl_none;
        if (handle_of[i] >= 0)
            t->handles[0] = h[handle_of[i]];
        t->cl_arg = &recs[i];
        t->sched_data = &pos[i];
        int rc = starpu_task_submit(t);
        CHECK(rc == 0, "round %d: submit task %d: %d", round, i, rc);
    }
    starpu_task_wait_for_all();

    int bad_worker = 0;
    for (int i = 0; i < NT; i++)
        if (atomic_load(&ran_on[i]) != pos[i].worker)
            bad_worker++;
    CHECK(bad_worker == 0, "round %d: %d tasks ran off their planned worker", round, bad_worker);
    for (int w = 0; w < NW; w++) {
        CHECK(atomic_load(&count[w]) == nslots[w], "round %d: worker %d ran %d tasks, planned %ld",
              round, w, atomic_load(&count[w]), nslots[w]);
        int out_of_order = 0, first_bad = -1;
        for (int k = 0; k < atomic_load(&count[w]) && k < NT; k++)
            if (pos[order[w][k]].worker != w || pos[order[w][k]].slot != base[w] + k) {
                if (first_bad < 0)
                    first_bad = k;
                out_of_order++;
            }
        CHECK(out_of_order == 0, "round %d: worker %d ran %d tasks out of slot order (first at %d: slot %ld)",
              round, w, out_of_order, first_bad, first_bad >= 0 ? pos[order[w][first_bad]].slot : -1L);
        base[w] += nslots[w];
        CHECK(bsipipe_policy_next_slot(w) == base[w], "round %d: next_slot(%d) = %ld, expected %ld",
              round, w, bsipipe_policy_next_slot(w), base[w]);
    }
}

int main(void)
{
    pu_watchdog(60);
    int rc = pu_start("test_policy_order", NW, "bsipipe");
    if (rc)
        return rc;

    long vals[NH] = {0}, expect[NH] = {0};
    starpu_data_handle_t h[NH];
    for (int i = 0; i < NH; i++)
        starpu_variable_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)&vals[i], sizeof(vals[i]));

    for (int w = 0; w < NW; w++)
        CHECK(bsipipe_policy_next_slot(w) == 0, "fresh policy waits for slot 0 on worker %d", w);
    CHECK(bsipipe_policy_next_slot(NW) == -1 && bsipipe_policy_next_slot(-1) == -1, "no such worker");

    unsigned long long seed = 0x9e3779b97f4a7c15ULL;
    long base[NW] = {0};
    for (int r = 0; r < ROUNDS; r++)
        round_run(r, &seed, base, h, expect);
    CHECK(atomic_load(&wrong_worker_seen) == 0, "a task ran on a non-CPU worker");

    for (int i = 0; i < NH; i++) {
        starpu_data_unregister(h[i]);
        CHECK(vals[i] == expect[i], "handle %d: %ld RW tasks ran, expected %ld", i, vals[i], expect[i]);
    }
    starpu_shutdown();
    CHECK(bsipipe_policy_next_slot(0) == -1, "policy inactive after shutdown");
    return check_finish("test_policy_order");
}
