/* test_policy_wait: under the `bsipipe` policy a worker idles rather than run
 * a later slot early. Worker 1's slot 1 (task C) is ready at once; its slot 0
 * (task B) depends, through a STARPU_RW handle, on task A of worker 0, which
 * sleeps 50 ms and then waits for the main thread's go. While A holds B back,
 * C must not start; after the go, B runs before C. Three rounds check that
 * slot numbering continues across iterations. A last round checks running
 * ahead (bsipipe_plan_pos_t.ahead): C at B's slot + 1 with ahead = 1 runs
 * while A holds B back, D at B's slot + 2 (ahead = 0) still waits for B, and
 * the worker's order then skips C's slot. */
#include "tests/policy_util.h"
#include "tests/check.h"

#include <stdatomic.h>

#define ROUNDS 3

enum { TA, TB, TC, TD, NTASK };

static atomic_int started[NTASK], finished[NTASK], seq;
static int start_seq[NTASK], end_seq[NTASK], worker_of[NTASK];
static atomic_int go;

static void run(int which)
{
    worker_of[which] = starpu_worker_get_id();
    start_seq[which] = atomic_fetch_add(&seq, 1);
    atomic_store(&started[which], 1);
    if (which == TA) {
        pu_sleep_us(50000);
        double t0 = pu_now_us();
        while (!atomic_load(&go) && pu_now_us() - t0 < 10e6) /* the watchdog ends a hang */
            pu_sleep_us(1000);
    }
    end_seq[which] = atomic_fetch_add(&seq, 1);
    atomic_store(&finished[which], 1);
}

static void cpu_none(void *buffers[], void *arg)
{
    (void)buffers;
    run((int)(intptr_t)arg);
}

static void cpu_rw(void *buffers[], void *arg)
{
    (void)buffers;
    run((int)(intptr_t)arg);
}

static struct starpu_codelet cl_none = {.cpu_funcs = {cpu_none}, .nbuffers = 0, .name = "wait_none"};
static struct starpu_codelet cl_rw = {
    .cpu_funcs = {cpu_rw}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "wait_rw"};

static void submit(int which, bsipipe_plan_pos_t *pos, starpu_data_handle_t h)
{
    struct starpu_task *t = starpu_task_create();
    t->cl = h ? &cl_rw : &cl_none;
    if (h)
        t->handles[0] = h;
    t->cl_arg = (void *)(intptr_t)which;
    t->sched_data = pos;
    int rc = starpu_task_submit(t);
    CHECK(rc == 0, "submit %d: %d", which, rc);
}

int main(void)
{
    pu_watchdog(60);
    int rc = pu_start("test_policy_wait", 2, "bsipipe");
    if (rc)
        return rc;

    long v = 0;
    starpu_data_handle_t h;
    starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&v, sizeof(v));

    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < NTASK; i++) {
            atomic_store(&started[i], 0);
            atomic_store(&finished[i], 0);
            worker_of[i] = -1;
        }
        atomic_store(&go, 0);
        bsipipe_plan_pos_t pos[NTASK] = {
            [TA] = {0, r, 0},      /* worker 0, one slot per round */
            [TB] = {1, 2L * r, 0},  /* worker 1: B then C */
            [TC] = {1, 2L * r + 1, 0},
        };
        /* C (the later slot, ready at once) is pushed first; B is pushed only when A ends */
        submit(TC, &pos[TC], NULL);
        submit(TA, &pos[TA], h);
        submit(TB, &pos[TB], h);

        /* A sleeps 50 ms, then waits for go: once A runs, give C every chance to run early */
        double t0 = pu_now_us();
        while (!atomic_load(&started[TA]) && pu_now_us() - t0 < 10e6)
            pu_sleep_us(1000);
        CHECK(atomic_load(&started[TA]), "round %d: A started on worker 0", r);
        pu_sleep_us(100000);
        CHECK(!atomic_load(&started[TB]), "round %d: B waits for A", r);
        CHECK(!atomic_load(&started[TC]), "round %d: C (slot %ld) ran before slot %ld", r, pos[TC].slot,
              pos[TB].slot);
        CHECK(bsipipe_policy_next_slot(1) == 2L * r, "round %d: worker 1 waits for slot %ld (got %ld)", r,
              2L * r, bsipipe_policy_next_slot(1));
        atomic_store(&go, 1);
        starpu_task_wait_for_all();

        for (int i = TA; i <= TC; i++)
            CHECK(atomic_load(&finished[i]), "round %d: task %d ran", r, i);
        CHECK(worker_of[TA] == 0 && worker_of[TB] == 1 && worker_of[TC] == 1,
              "round %d: placement A:%d B:%d C:%d", r, worker_of[TA], worker_of[TB], worker_of[TC]);
        CHECK(start_seq[TB] > end_seq[TA], "round %d: B after A", r);
        CHECK(start_seq[TC] > end_seq[TB], "round %d: C (slot 1) started after B (slot 0) ended", r);
        CHECK(bsipipe_policy_next_slot(0) == r + 1, "round %d: next_slot(0) = %ld", r,
              bsipipe_policy_next_slot(0));
        CHECK(bsipipe_policy_next_slot(1) == 2L * r + 2, "round %d: next_slot(1) = %ld", r,
              bsipipe_policy_next_slot(1));
    }

    /* running ahead: worker 1 at slot 2R; B there (held by A), C at 2R+1 may go first, D at 2R+2 may not */
    for (int i = 0; i < NTASK; i++) {
        atomic_store(&started[i], 0);
        atomic_store(&finished[i], 0);
        worker_of[i] = -1;
    }
    atomic_store(&go, 0);
    long b = 2L * ROUNDS;
    bsipipe_plan_pos_t pos[NTASK] = {
        [TA] = {0, ROUNDS, 0},
        [TB] = {1, b, 0},
        [TC] = {1, b + 1, 1}, /* may run once worker 1 reached slot b */
        [TD] = {1, b + 2, 0},
    };
    submit(TD, &pos[TD], NULL);
    submit(TC, &pos[TC], NULL);
    submit(TA, &pos[TA], h);
    submit(TB, &pos[TB], h);
    double t0 = pu_now_us();
    while (!atomic_load(&finished[TC]) && pu_now_us() - t0 < 10e6)
        pu_sleep_us(1000);
    CHECK(atomic_load(&finished[TC]), "ahead: C (slot %ld, ahead 1) ran while B (slot %ld) was held", b + 1, b);
    pu_sleep_us(50000);
    CHECK(!atomic_load(&started[TB]) && !atomic_load(&started[TD]), "ahead: B waits for A, D (ahead 0) for B");
    CHECK(bsipipe_policy_next_slot(1) == b, "ahead: worker 1 still waits for slot %ld (got %ld)", b,
          bsipipe_policy_next_slot(1));
    atomic_store(&go, 1);
    starpu_task_wait_for_all();
    CHECK(atomic_load(&finished[TB]) && atomic_load(&finished[TD]), "ahead: B and D ran");
    CHECK(worker_of[TC] == 1 && worker_of[TD] == 1, "ahead: placement C:%d D:%d", worker_of[TC], worker_of[TD]);
    CHECK(start_seq[TD] > end_seq[TB], "ahead: D (slot %ld) started after B ended", b + 2);
    CHECK(bsipipe_policy_next_slot(1) == b + 3, "ahead: next_slot(1) = %ld, expected %ld (C's slot skipped)",
          bsipipe_policy_next_slot(1), b + 3);

    starpu_data_unregister(h);
    CHECK(v == 0, "RW handle untouched by the codelets");
    starpu_shutdown();
    return check_finish("test_policy_wait");
}
