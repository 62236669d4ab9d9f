/* engine_watchdog.c: the rendezvous as a dependency, and its watchdog.
 *
 * The `local` transport's rendezvous (a SEND completes only once its RECV
 * is posted) used to be a wait inside the SEND's codelet: the sending worker
 * sat in pthread_cond_timedwait until the peer posted. Now the wait is a
 * StarPU dependency: the SEND task carries a tag and depends on a second tag
 * that the RECV's codelet notifies right after posting. Until then StarPU
 * keeps the SEND out of the scheduler, so no worker runs it, and when it
 * runs its receive is posted: it copies and releases the RECV at once.
 *
 * The plan's send/recv order still holds. Under the in-order policy a device
 * cannot go past a SEND that is not ready (the next slot is that SEND), so
 * the device idles exactly where its worker used to block, and the naive
 * order (every device sends first) still deadlocks. Nothing waits in a
 * codelet any more, so the transport's own send-side watchdog cannot see it:
 * a thread of the engine's (this file), armed for each iteration and parked
 * between them (creating and joining one per iteration cost 120-210 µs of
 * a 1.2-1.4 ms iteration at w = 2 without device time), looks every
 * timeout/4 at each device's
 * next slot; a device held at a SEND whose receive is not posted for the
 * transport's timeout fires the watchdog (bsipipe_transport_expire) with
 * the same report as before, naming every held device and posted receive.
 * Under the other policies a held SEND does not hold its device; there the
 * thread fires when no task at all has ended for the timeout while some
 * SEND waits for its post. After firing, every post tag not yet notified is
 * notified: the held SENDs run, find the transport failed, return
 * -ETIMEDOUT, and the graph drains.
 *
 * A policy can also stall on its own: StarPU 1.3's modular-prandom, for one,
 * keeps ready tasks it never hands to a worker. Then no task ends, none is
 * running and no SEND is held; after the timeout the thread marks the
 * iteration stalled and wakes the engine, which waits for the iteration here
 * (engine_watchdog_wait) rather than in starpu_task_wait_for_all, and returns
 * -ETIMEDOUT naming the policy. Nothing can take the tasks back from StarPU,
 * so the engine is then left as it is (bsipipe_engine_destroy only says so).
 */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct engine_watchdog {
    struct engine_watchdog_end end; /* lock, done (also: parked), target: what a task's end touches */
    struct bsipipe_engine *e;
    pthread_t thread;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    int armed;           /* an iteration is being watched (engine_watchdog_start .. _stop) */
    int parked;          /* the thread saw armed = 0 and touches nothing of the iteration */
    int quit;            /* the engine is going: the thread ends */
    long *held_slot;     /* per device: the slot seen held at, -1 none */
    double *held_since;  /* per device: when first seen there */
    long ended_base;     /* e->tasks_ended when the iteration began */
    double armed_s;      /* when the target was set: the policy-stall clock starts there at the
                            earliest (a slow submission is not the policy's stall) */
    int stalled;         /* the policy stalled (under lock) */
    double stall_s;      /* how long nothing had ended */
    long stall_left;     /* tasks not ended then */
};

/* A policy stall ends the engine for good, so it is judged over at least
 * this long whatever the watchdog's timeout (a short --watchdog is meant for
 * SENDs; under ASan on 2 cores nothing was popped for 0.3 s at an
 * iteration's start without any stall). */
#define STALL_MIN_S 1.0

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The op that device d's worker waits for (in-order policy), or NULL. */
static const op_args_t *next_op(struct bsipipe_engine *e, int d, long *slot)
{
    *slot = bsipipe_policy_next_slot(e->workerid[d]);
    if (e->T > 1) /* TP: several tasks per op on each rank's worker; rank 0's map */
        return engine_tp_slot_op(e, d, *slot);
    long r = *slot - e->slot_base[d]; /* eager SENDs take no slot: map back to the op */
    return r >= 0 && r < e->n_slots[d] ? &e->args[d][e->slot_op[d][r]] : NULL;
}

static int held_send(struct bsipipe_engine *e, const op_args_t *a)
{
    return a && a->op.kind == BSIPIPE_OP_SEND && a->op.channel >= 0 && a->op.channel < e->n_channels &&
           e->send_tagged[a->op.channel] && !bsipipe_transport_posted(e->transport, a->op.channel);
}

/* The local op that has been running longest (popped, not ended), or NULL. */
static const op_args_t *longest_running(struct bsipipe_engine *e, double *since)
{
    const op_args_t *found = NULL;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n && engine_local(e, d); i++) {
            const op_args_t *a = e->T > 1 ? engine_tp_op_args(e, d, i) : &e->args[d][i];
            if (e->mpi && a->op.kind == BSIPIPE_OP_RECV && a->op.peer >= 0 && !engine_local(e, a->op.peer))
                continue; /* another rank's message: a wait (the MPI watchdog's), not an op */
            double t = 1e-9 * (double)__atomic_load_n(&a->running_since, __ATOMIC_SEQ_CST);
            if (t > 0 && (!found || t < *since)) {
                found = a;
                *since = t;
            }
        }
    }
    return found;
}

static void fire(struct bsipipe_engine *e, long ch)
{
    bsipipe_transport_expire(e->transport, ch);
    engine_fail(e, BSIPIPE_EDEADLOCK);
    transport_local_release_posts(e); /* every held SEND may go (and fail) */
}

/* Watches one iteration, from arming to parking; lock held. */
static void watch_iteration(struct engine_watchdog *w)
{
    struct bsipipe_engine *e = w->e;
    double timeout = bsipipe_transport_timeout(e->transport);
    double period = timeout / 4 < 0.25 ? timeout / 4 : 0.25;
    double stall_after = timeout > STALL_MIN_S ? timeout : STALL_MIN_S;
    long ended = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
    double last_progress = mono_s();
    const op_args_t *warned = NULL; /* the slow op already reported */
    int stalled = 0;
    while (w->armed && !w->quit) {
        double until = mono_s() + period;
        struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&w->cond, &w->end.lock, &ts);
        if (!w->armed || w->quit)
            continue;
        double now = mono_s();
        long fired = -1, now_ended = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
        int held = 0;
        if (now_ended != ended) {
            ended = now_ended;
            last_progress = now;
        }
        if (bsipipe_transport_failed(e->transport)) { /* aborted or fired: held SENDs must drain */
            pthread_mutex_unlock(&w->end.lock);
            transport_local_release_posts(e);
            pthread_mutex_lock(&w->end.lock);
        } else if (e->inorder) {
            /* Note every held device first, so the report names them all. */
            for (int d = 0; d < e->W; d++) {
                long slot;
                const op_args_t *a = engine_local(e, d) ? next_op(e, d, &slot) : NULL;
                if (!held_send(e, a)) {
                    w->held_slot[d] = -1;
                    continue;
                }
                held = 1;
                if (w->held_slot[d] != slot) {
                    w->held_slot[d] = slot;
                    w->held_since[d] = now;
                }
                bsipipe_transport_note_held(e->transport, a->op.channel, d, a->name + 5, now - w->held_since[d]);
            }
            for (int d = 0; d < e->W && fired < 0; d++) {
                long slot;
                const op_args_t *a = w->held_slot[d] >= 0 ? next_op(e, d, &slot) : NULL;
                if (held_send(e, a) && slot == w->held_slot[d] && now - w->held_since[d] >= timeout)
                    fired = a->op.channel;
            }
        } else {
            if (now - last_progress >= timeout) {
                for (int d = 0; d < e->W; d++) {
                    int n;
                    bsipipe_schedule_device_ops(e->sched, d, &n);
                    for (int i = 0; i < n && engine_local(e, d); i++) {
                        const op_args_t *a = e->T > 1 ? engine_tp_op_args(e, d, i) : &e->args[d][i];
                        if (held_send(e, a)) { /* a SEND that ran had its post */
                            held = 1;
                            bsipipe_transport_note_held(e->transport, a->op.channel, d, a->name + 5,
                                                        now - last_progress);
                            if (fired < 0)
                                fired = a->op.channel;
                        }
                    }
                }
            }
        }
        /* The policy's own stall (one process): everything submitted, nothing
         * ended for the timeout, nothing running, no SEND held (or, once the
         * transport failed, the released SENDs never run either). */
        long running = __atomic_load_n(&e->tasks_popped, __ATOMIC_SEQ_CST) -
                       __atomic_load_n(&e->nr_ended, __ATOMIC_SEQ_CST);
        long target = __atomic_load_n(&w->end.target, __ATOMIC_SEQ_CST);
        double quiet_since = last_progress > w->armed_s ? last_progress : w->armed_s;
        if (!e->mpi && fired < 0 && !held && !stalled && target != LONG_MAX && now_ended < target && running <= 0 &&
            now - quiet_since >= stall_after) {
            stalled = w->stalled = 1;
            w->stall_s = now - quiet_since;
            w->stall_left = target - now_ended;
            engine_fail(e, -ETIMEDOUT);
            pthread_cond_broadcast(&w->end.done);
        }
        /* A SEND held because its peer is still computing is not a deadlock:
         * while any op runs, the wait is a slow op's (a --watchdog shorter
         * than one op), said once, and the clock restarts when it ends. */
        if (fired >= 0) {
            double since = 0;
            const op_args_t *run = longest_running(e, &since);
            if (run) {
                if (run != warned && now - since >= timeout) {
                    fprintf(stderr, "engine: watchdog: %s on device %d has been running for %.3g s, longer than "
                                    "the watchdog's %.3g s; a slow op, not a deadlock: waiting for it (raise "
                                    "--watchdog above one op's time to silence this)\n",
                            run->name, run->op.device, now - since, timeout);
                    warned = run;
                }
                for (int d = 0; d < e->W; d++)
                    if (w->held_slot[d] >= 0)
                        w->held_since[d] = now;
                last_progress = now;
                fired = -1;
            }
        }
        if (fired >= 0) {
            pthread_mutex_unlock(&w->end.lock);
            fire(e, fired);
            pthread_mutex_lock(&w->end.lock);
        }
    }
}

static void *watchdog_main(void *arg)
{
    struct engine_watchdog *w = arg;
    pthread_mutex_lock(&w->end.lock);
    while (!w->quit) {
        if (w->armed) /* watch_reset cleared parked */
            watch_iteration(w);
        w->parked = 1; /* the engine's stop waits for this */
        pthread_cond_broadcast(&w->end.done);
        if (!w->quit && !w->armed)
            pthread_cond_wait(&w->cond, &w->end.lock);
    }
    pthread_mutex_unlock(&w->end.lock);
    return NULL;
}

/* The iteration's state of a watchdog about to be armed; lock held or the
 * thread not started. */
static void watch_reset(struct engine_watchdog *w)
{
    struct bsipipe_engine *e = w->e;
    for (int d = 0; d < e->W; d++)
        w->held_slot[d] = -1;
    w->ended_base = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
    w->end.target = LONG_MAX;
    w->armed_s = 0;
    w->stalled = 0;
    w->stall_s = 0;
    w->stall_left = 0;
    w->armed = 1;
    w->parked = 0;
}

int engine_watchdog_start(struct bsipipe_engine *e)
{
    e->wd = NULL;
    if (!e->transport)
        return 0;
    struct engine_watchdog *w = e->wd_thread;
    if (w) { /* parked since the last iteration: armed again */
        pthread_mutex_lock(&w->end.lock);
        watch_reset(w);
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->end.lock);
        __atomic_store_n(&e->wd, w, __ATOMIC_SEQ_CST);
        __atomic_store_n(&e->wd_end, &w->end, __ATOMIC_SEQ_CST);
        return 0;
    }
    w = calloc(1, sizeof *w);
    if (!w)
        return bsipipe_error_set(-ENOMEM, "engine: out of memory for the watchdog");
    w->e = e;
    w->held_slot = malloc(sizeof(long) * (size_t)e->W);
    w->held_since = calloc((size_t)e->W, sizeof(double));
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (!rc)
        rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (!rc && (rc = pthread_cond_init(&w->end.done, NULL)) != 0)
        pthread_cond_destroy(&w->cond);
    if (!rc && (rc = pthread_mutex_init(&w->end.lock, NULL)) != 0) {
        pthread_cond_destroy(&w->cond);
        pthread_cond_destroy(&w->end.done);
    }
    if (rc || !w->held_slot || !w->held_since) {
        free(w->held_slot);
        free(w->held_since);
        free(w);
        return bsipipe_error_set(-ENOMEM, "engine: cannot start the watchdog");
    }
    watch_reset(w);
    if ((rc = pthread_create(&w->thread, NULL, watchdog_main, w)) != 0) {
        pthread_mutex_destroy(&w->end.lock);
        pthread_cond_destroy(&w->cond);
        pthread_cond_destroy(&w->end.done);
        free(w->held_slot);
        free(w->held_since);
        free(w);
        return bsipipe_error_set(-rc, "engine: cannot start the watchdog thread");
    }
    e->wd_thread = w;
    __atomic_store_n(&e->wd, w, __ATOMIC_SEQ_CST);
    __atomic_store_n(&e->wd_end, &w->end, __ATOMIC_SEQ_CST);
    return 0;
}

int engine_watchdog_wait(struct bsipipe_engine *e)
{
    struct engine_watchdog *w = e->wd;
    if (!w) {
        starpu_task_wait_for_all();
        return 0;
    }
    pthread_mutex_lock(&w->end.lock);
    /* Stored before reading the count; a callback adds to the count before
     * reading the target: one of the two sees the other (sequential
     * consistency), so the last wake-up is not lost. */
    w->armed_s = mono_s();
    __atomic_store_n(&w->end.target, w->ended_base + e->tasks_submitted, __ATOMIC_SEQ_CST);
    while (!w->stalled && __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST) < w->end.target)
        pthread_cond_wait(&w->end.done, &w->end.lock);
    int stalled = w->stalled;
    double s = w->stall_s;
    long left = w->stall_left, total = e->tasks_submitted;
    pthread_mutex_unlock(&w->end.lock);
    if (!stalled) {
        starpu_task_wait_for_all();
        return 0;
    }
    e->hung = 1;
    const char *names[32];
    int n = bsipipe_engine_policies(names, 32);
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && i < 32 && len < sizeof list; i++) {
        int r = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        if (r < 0)
            break;
        len += (size_t)r;
    }
    return bsipipe_error_set(-ETIMEDOUT,
                             "engine: scheduling policy '%s' stalled: no task completed for %.3g s while %ld of the "
                             "iteration's %ld tasks were left, none of them running (the policy holds ready tasks "
                             "it never runs); the engine cannot run again; use one of: %s",
                             e->o.policy, s, left, total, list);
}

void engine_watchdog_stop(struct bsipipe_engine *e)
{
    struct engine_watchdog *w = e->wd;
    if (!w)
        return;
    pthread_mutex_lock(&w->end.lock);
    w->armed = 0;
    pthread_cond_signal(&w->cond);
    while (!w->parked) /* not in the middle of a check (fire, transport_local_release_posts run unlocked) */
        pthread_cond_wait(&w->end.done, &w->end.lock);
    pthread_mutex_unlock(&w->end.lock);
    /* A task StarPU still holds (e->hung) may end and call back: it finds no
     * watchdog armed, and the parked thread is left as it is. */
    __atomic_store_n(&e->wd_end, NULL, __ATOMIC_SEQ_CST);
    __atomic_store_n(&e->wd, NULL, __ATOMIC_SEQ_CST);
}

void engine_watchdog_free(struct bsipipe_engine *e)
{
    struct engine_watchdog *w = e->wd_thread;
    if (!w || e->hung)
        return;
    pthread_mutex_lock(&w->end.lock);
    w->quit = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->end.lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->end.done);
    pthread_mutex_destroy(&w->end.lock);
    pthread_cond_destroy(&w->cond);
    free(w->held_slot);
    free(w->held_since);
    free(w);
    e->wd = e->wd_thread = NULL;
    e->wd_end = NULL;
}

