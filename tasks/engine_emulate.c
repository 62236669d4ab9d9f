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
#include "base/bsipipe_error.h"

#include <errno.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
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

int engine_emulate(struct bsipipe_engine *e, const op_args_t *a)
{
    if (e->o.emulate_flops <= 0)
        return 0;
    long start = now_ns();
    emulate_hold_until(start + (long)(a->low->cost_s * 1e9)); /* the lowered bsipipe_sim_op_cost */
    return 1;
}

void engine_emulate_hold(double seconds)
{
    long start = now_ns();
    if (seconds > 0)
        emulate_hold_until(start + (long)(seconds * 1e9));
}

int engine_emulate_setup(struct bsipipe_engine *e)
{
    const bsipipe_cost_model_t *l = e->o.emulate_links;
    e->o.emulate_links = NULL; /* borrowed for create only */
    e->emu_cost = bsipipe_cost_model_emulated(e->o.emulate_flops > 0 ? e->o.emulate_flops : 1);
    if (!l)
        return 0;
    if (e->o.emulate_flops <= 0)
        return bsipipe_error_set(-EINVAL, "engine: emulate_links needs emulated device time (emulate_flops > 0, "
                                 "--emulate): with real compute the links are this machine's");
    if (e->o.mpi)
        return bsipipe_error_set(-EINVAL, "engine: emulate_links in one process only: across StarPU-MPI ranks "
                                 "the links are real (drop the emulated links, or run one process)");
    if (e->o.devices != BSIPIPE_DEVICES_CPU)
        return bsipipe_error_set(-EINVAL, "engine: emulate_links runs on CPU devices (--devices cpu)");
    if (l->async_send)
        return bsipipe_error_set(-EINVAL, "engine: emulate_links: the engine's SEND holds its device while its "
                                 "bytes move, so async_send cannot be emulated; set it to 0");
    if (!(l->intra_bandwidth >= 0 && l->inter_bandwidth >= 0 && l->intra_latency >= 0 && l->inter_latency >= 0))
        return bsipipe_error_set(-EINVAL, "engine: emulate_links: latencies and bandwidths must be 0 or more");
    int rc = bsipipe_links_create(e->sched, l, &e->links);
    if (rc < 0)
        return rc;
    /* The compute ops' model takes the links' fields (a TP collective's
     * charge); the device map is the links' own copy of it. */
    bsipipe_cost_model_t *c = &e->emu_cost;
    c->intra_latency = l->intra_latency;
    c->intra_bandwidth = l->intra_bandwidth;
    c->inter_latency = l->inter_latency;
    c->inter_bandwidth = l->inter_bandwidth;
    c->devices_per_node = l->devices_per_node;
    if (l->device_node) {
        if (!(e->emu_nodes = malloc(sizeof(int) * (size_t)e->W)))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        memcpy(e->emu_nodes, l->device_node, sizeof(int) * (size_t)e->W);
        c->device_node = e->emu_nodes;
    }
    c->shared_nic = l->shared_nic;
    pthread_mutex_init(&e->links_lock, NULL);
    e->links_t0 = now_ns();
    return 0;
}

void engine_emulate_free(struct bsipipe_engine *e)
{
    if (!e->links)
        return;
    bsipipe_links_destroy(e->links);
    pthread_mutex_destroy(&e->links_lock);
    e->links = NULL;
    free(e->emu_nodes);
    e->emu_nodes = NULL;
}

void engine_emulate_iteration_begin(struct bsipipe_engine *e)
{
    if (!e->links)
        return;
    pthread_mutex_lock(&e->links_lock);
    bsipipe_links_reset(e->links);
    e->links_t0 = now_ns();
    pthread_mutex_unlock(&e->links_lock);
}

/* Holds until the arrival that `move` gives for data ready now. */
static void links_hold(struct bsipipe_engine *e, int a, int b, double bytes, int sync)
{
    if (!e->links)
        return;
    pthread_mutex_lock(&e->links_lock);
    double ready = (now_ns() - e->links_t0) * 1e-9;
    double arrival = sync ? bsipipe_links_sync(e->links, a, b, bytes, ready)
                          : bsipipe_links_move(e->links, a, b, bytes, ready);
    long deadline = e->links_t0 + (long)(arrival * 1e9);
    pthread_mutex_unlock(&e->links_lock);
    emulate_hold_until(deadline);
}

void engine_emulate_send(struct bsipipe_engine *e, int a, int b, double bytes)
{
    links_hold(e, a, b, bytes, 0);
}

void engine_emulate_sync(struct bsipipe_engine *e, int a, int b, double bytes)
{
    links_hold(e, a, b, bytes, 1);
}
