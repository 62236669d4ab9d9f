/* engine_emulate.c: emulated device time. A compute task holds its worker
 * until a deadline: its entry time plus the cost model's duration of the op.
 *
 * Why not a plain nanosleep: a sleeping thread wakes late. Linux adds the
 * thread's timer slack (50 µs by default) and, on this kind of VM, the
 * wake-up itself takes 25-150 µs, more after a long sleep; measured, F and B
 * ops overran their duration by 150-230 µs (median). So each worker thread
 * sets its timer slack to 1 ns, sleeps (TIMER_ABSTIME) until its expected
 * lateness before the deadline and spins the rest. The lateness is a moving
 * average per thread, capped so that a preempted wake-up (machine under
 * load) cannot turn the tail into long spins that starve other workers. */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_sim.h"

#include <errno.h>
#include <sys/prctl.h>
#include <time.h>

enum {
    EMULATE_MARGIN_INIT_NS = 100000, /* before the first measurement */
    EMULATE_MARGIN_MAX_NS = 200000,  /* at most this much spinning per op */
};

static __thread int emulate_thread_ready;
static __thread long emulate_margin_ns; /* expected lateness of a wake-up */

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Holds the calling thread until `deadline` (CLOCK_MONOTONIC, ns). */
static void emulate_hold_until(long deadline)
{
    if (!emulate_thread_ready) {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* this thread: StarPU's worker */
        emulate_margin_ns = EMULATE_MARGIN_INIT_NS;
        emulate_thread_ready = 1;
    }
    long wake = deadline - emulate_margin_ns;
    if (wake > now_ns()) {
        struct timespec ts = {(time_t)(wake / 1000000000L), wake % 1000000000L};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
        long late = now_ns() - wake; /* 1/8 moving average, a margin above it */
        emulate_margin_ns += (late + late / 4 - emulate_margin_ns) / 8;
        if (emulate_margin_ns < 0)
            emulate_margin_ns = 0;
        if (emulate_margin_ns > EMULATE_MARGIN_MAX_NS)
            emulate_margin_ns = EMULATE_MARGIN_MAX_NS;
    }
    while (now_ns() < deadline) {
    }
}

int engine_emulate(struct bsipipe_engine *e, const bsipipe_op_t *op)
{
    if (e->o.emulate_flops <= 0)
        return 0;
    long start = now_ns();
    bsipipe_cost_model_t cost = bsipipe_cost_model_emulated(e->o.emulate_flops);
    emulate_hold_until(start + (long)(bsipipe_sim_op_cost(e->sched, &cost, op) * 1e9));
    return 1;
}

void engine_emulate_hold(double seconds)
{
    long start = now_ns();
    if (seconds > 0)
        emulate_hold_until(start + (long)(seconds * 1e9));
}
