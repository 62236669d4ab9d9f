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
 * a thread per iteration (this file) looks every timeout/4 at each device's
 * next slot; a device held at a SEND whose receive is not posted for the
 * transport's timeout fires the watchdog (bsipipe_transport_expire) with
 * the same report as before, naming every held device and posted receive.
 * Under the other policies a held SEND does not hold its device; there the
 * thread fires when no task at all has ended for the timeout while some
 * SEND waits for its post. After firing, every post tag not yet notified is
 * notified: the held SENDs run, find the transport failed, return
 * -ETIMEDOUT, and the graph drains.
 */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_error.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct engine_watchdog {
    struct bsipipe_engine *e;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    int stop;
    long *held_slot;     /* per device: the slot seen held at, -1 none */
    double *held_since;  /* per device: when first seen there */
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int engine_transfer_tagged(const struct bsipipe_engine *e, int a, int b)
{
    if (b < 0 || !engine_local(e, a) || !engine_local(e, b))
        return 0;
    return !engine_uses_nccl(e, a, b);
}

void engine_post_notify(struct bsipipe_engine *e, long ch)
{
    if (!e->post_notified || ch < 0 || ch >= e->n_channels)
        return;
    if (__atomic_exchange_n(&e->post_notified[ch], 1, __ATOMIC_ACQ_REL) == 0)
        starpu_tag_notify_from_apps((starpu_tag_t)engine_post_tag(e, ch));
}

/* After a failure (watchdog, abort): every held SEND may go (and fail). */
static void release_all_posts(struct bsipipe_engine *e)
{
    for (long ch = 0; ch < e->n_channels; ch++)
        engine_post_notify(e, ch);
}

/* The op that device d's worker waits for (in-order policy), or NULL. */
static const op_args_t *next_op(struct bsipipe_engine *e, int d, long *slot)
{
    *slot = bsipipe_policy_next_slot(e->workerid[d]);
    long i = *slot - e->slot_base[d];
    int n;
    bsipipe_schedule_device_ops(e->sched, d, &n);
    return i >= 0 && i < n ? &e->args[d][i] : NULL;
}

static int held_send(struct bsipipe_engine *e, const op_args_t *a)
{
    return a && a->op.kind == BSIPIPE_OP_SEND && a->op.channel >= 0 && a->op.channel < e->n_channels &&
           e->send_tagged[a->op.channel] && !bsipipe_transport_posted(e->transport, a->op.channel);
}

static void fire(struct bsipipe_engine *e, long ch)
{
    bsipipe_transport_expire(e->transport, ch);
    engine_fail(e, BSIPIPE_EDEADLOCK);
    release_all_posts(e);
}

static void *watchdog_main(void *arg)
{
    struct engine_watchdog *w = arg;
    struct bsipipe_engine *e = w->e;
    double timeout = bsipipe_transport_timeout(e->transport);
    double period = timeout / 4 < 0.25 ? timeout / 4 : 0.25;
    long ended = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
    double last_progress = mono_s();
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        double until = mono_s() + period;
        struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        if (w->stop)
            continue;
        if (bsipipe_transport_failed(e->transport)) { /* aborted elsewhere: held SENDs must drain */
            pthread_mutex_unlock(&w->lock);
            release_all_posts(e);
            pthread_mutex_lock(&w->lock);
            continue;
        }
        double now = mono_s();
        long fired = -1;
        if (e->inorder) {
            /* Note every held device first, so the report names them all. */
            for (int d = 0; d < e->W; d++) {
                long slot;
                const op_args_t *a = engine_local(e, d) ? next_op(e, d, &slot) : NULL;
                if (!held_send(e, a)) {
                    w->held_slot[d] = -1;
                    continue;
                }
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
            long now_ended = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
            if (now_ended != ended) {
                ended = now_ended;
                last_progress = now;
            } else if (now - last_progress >= timeout) {
                for (int d = 0; d < e->W; d++) {
                    int n;
                    bsipipe_schedule_device_ops(e->sched, d, &n);
                    for (int i = 0; i < n && engine_local(e, d); i++) {
                        const op_args_t *a = &e->args[d][i];
                        if (held_send(e, a)) { /* a SEND that ran had its post */
                            bsipipe_transport_note_held(e->transport, a->op.channel, d, a->name + 5,
                                                        now - last_progress);
                            if (fired < 0)
                                fired = a->op.channel;
                        }
                    }
                }
            }
        }
        if (fired >= 0) {
            pthread_mutex_unlock(&w->lock);
            fire(e, fired);
            pthread_mutex_lock(&w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int engine_watchdog_start(struct bsipipe_engine *e)
{
    e->wd = NULL;
    if (!e->transport || e->n_channels <= 0)
        return 0;
    struct engine_watchdog *w = calloc(1, sizeof *w);
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
    if (!rc && (rc = pthread_mutex_init(&w->lock, NULL)) != 0)
        pthread_cond_destroy(&w->cond);
    if (rc || !w->held_slot || !w->held_since) {
        free(w->held_slot);
        free(w->held_since);
        free(w);
        return bsipipe_error_set(-ENOMEM, "engine: cannot start the watchdog");
    }
    for (int d = 0; d < e->W; d++)
        w->held_slot[d] = -1;
    if ((rc = pthread_create(&w->thread, NULL, watchdog_main, w)) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w->held_slot);
        free(w->held_since);
        free(w);
        return bsipipe_error_set(-rc, "engine: cannot start the watchdog thread");
    }
    e->wd = w;
    return 0;
}

void engine_watchdog_stop(struct bsipipe_engine *e)
{
    struct engine_watchdog *w = e->wd;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w->held_slot);
    free(w->held_since);
    free(w);
    e->wd = NULL;
}

void engine_tags_begin(struct bsipipe_engine *e)
{
    static unsigned long long next_base = 0xB5B0000000000000ULL;
    unsigned long long span = 2ULL * (unsigned long long)(e->n_channels + 1);
    e->tag_base = __atomic_fetch_add(&next_base, span, __ATOMIC_SEQ_CST);
    for (long ch = 0; ch < e->n_channels; ch++) {
        e->post_notified[ch] = 0;
        e->send_tagged[ch] = 0;
    }
}

void engine_tags_abort(struct bsipipe_engine *e)
{
    release_all_posts(e);
}

void engine_tags_end(struct bsipipe_engine *e)
{
    for (long ch = 0; ch < e->n_channels; ch++) {
        starpu_tag_remove((starpu_tag_t)engine_send_tag(e, ch));
        starpu_tag_remove((starpu_tag_t)engine_post_tag(e, ch));
    }
}
