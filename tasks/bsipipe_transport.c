/* bsipipe_transport.c: the `local` transport (see bsipipe_transport.h and
 * docs/transport.md).
 *
 * One mutex guards every channel; each channel has its own condition
 * variable (CLOCK_MONOTONIC), on which only its sender waits, so a post wakes
 * that sender alone (one shared variable woke every waiting sender on every
 * post and release, a herd of context switches on few cores). A channel goes through these states within an iteration:
 *
 *   idle --post--> posted --send arrives--> copying --copied--> done
 *   idle --send arrives--> (sender waits) --post--> copying --> done
 *
 * The copy (memcpy by the sending worker) runs outside the mutex, so
 * transfers between different pairs of devices proceed in parallel. The RECV
 * task's end dependency is released exactly once per posted channel: the one
 * thread that sets `claimed` (under the mutex) releases it, after dropping
 * the mutex (a release may run callbacks and push successor tasks).
 * `releasing` counts claims whose release has not returned yet; reset waits
 * for none.
 *
 * Watchdog: a send waits with pthread_cond_timedwait until its own deadline.
 * The first waiter whose deadline passes fails the transport: it writes the
 * report (every waiting send, every posted-but-unfilled receive), claims
 * every posted RECV that nobody has claimed, wakes all waiters and releases
 * the claimed tasks. After that, posts are released at once and sends return
 * -ETIMEDOUT at once. A copy already in progress is finished by its sender.
 * bsipipe_transport_abort() does the same by hand (fail_locked).
 */
#include "tasks/bsipipe_transport.h"

#include <starpu.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bsipipe_error.h"

#define NAME_MAX_LEN 96

/* A copy of an offered buffer kept for its post (bsipipe_transport_set_offer_staging). */
struct staging {
    void *p;
    size_t cap;
};

struct channel {
    /* RECV side */
    int posted;  /* post() was called */
    int claimed; /* someone took the duty of releasing the RECV task */
    int filled;  /* the data has been copied */
    int recv_waiting; /* a blocking RECV waits for the data (bsipipe_transport_wait_filled) */
    void *dst;
    size_t bytes;
    struct starpu_task *task;
    int recv_device;
    double post_time;
    char recv_what[NAME_MAX_LEN];
    /* SEND side */
    int send_state; /* 0 none, 1 waiting, 2 copying, 3 done (or gave up), 4 held before its task runs
                     * (the engine's dependency-based rendezvous: bsipipe_transport_note_held),
                     * 5 offered before its receive was posted (bsipipe_transport_offer) */
    const void *offer_src; /* state 5: what the post copies, and who hears of it */
    size_t offer_bytes;
    struct staging offer_staged; /* state 5 with staging: the transport's copy offer_src points into (p NULL: none) */
    bsipipe_transport_done_fn offer_done;
    void *offer_done_arg;
    int send_device;
    double send_start;
    char send_what[NAME_MAX_LEN];
};

struct bsipipe_transport {
    pthread_mutex_t mutex;
    pthread_cond_t *cond; /* per channel; kept apart from ch[], which reset clears */
    long n;
    double timeout_s;
    struct channel *ch;
    int failed;      /* read with __atomic_load_n by _failed() */
    char *report;    /* set when failed; NULL otherwise */
    long releasing;  /* claims whose release is still running */
    long waiting;    /* sends in their wait loop */
    long copying;    /* sends copying */
    uint64_t bytes;  /* __atomic */
    double wait_s;   /* summed time sends spent waiting for their post (mutex) */
    int staging;     /* offers ahead of their post are copied (set_offer_staging) */
    struct staging *spare; /* staging buffers no offer holds, reused (mutex) */
    long n_spare, cap_spare;
    double staged_bytes; /* bytes copied into staging (mutex) */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, NAME_MAX_LEN, "%s", src && *src ? src : "?");
}

int bsipipe_transport_create(long n_channels, double timeout_s, bsipipe_transport_t **out)
{
    if (!out)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_create: out is NULL");
    *out = NULL;
    if (n_channels <= 0)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_create: n_channels must be > 0 (got %ld)",
                                 n_channels);
    if (!(timeout_s > 0) || timeout_s > 1e7)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_create: timeout must be > 0 s (got %g)", timeout_s);
    bsipipe_transport_t *t = calloc(1, sizeof *t);
    if (!t)
        return bsipipe_error_set(-ENOMEM, "bsipipe_transport_create: out of memory");
    t->ch = calloc((size_t)n_channels, sizeof *t->ch);
    if (!t->ch) {
        free(t);
        return bsipipe_error_set(-ENOMEM, "bsipipe_transport_create: out of memory for %ld channels", n_channels);
    }
    t->n = n_channels;
    t->timeout_s = timeout_s;
    t->cond = calloc((size_t)n_channels, sizeof *t->cond);
    if (!t->cond) {
        free(t->ch);
        free(t);
        return bsipipe_error_set(-ENOMEM, "bsipipe_transport_create: out of memory for %ld channels", n_channels);
    }
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (!rc)
        rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    long n_init = 0;
    while (!rc && n_init < n_channels && !(rc = pthread_cond_init(&t->cond[n_init], &ca)))
        n_init++;
    pthread_condattr_destroy(&ca);
    if (!rc)
        rc = pthread_mutex_init(&t->mutex, NULL);
    if (rc) {
        while (n_init > 0)
            pthread_cond_destroy(&t->cond[--n_init]);
        free(t->cond);
        free(t->ch);
        free(t);
        return bsipipe_error_set(-rc, "bsipipe_transport_create: pthread initialisation failed (%s)", strerror(rc));
    }
    *out = t;
    return 0;
}

void bsipipe_transport_destroy(bsipipe_transport_t *t)
{
    if (!t)
        return;
    for (long i = 0; i < t->n; i++)
        pthread_cond_destroy(&t->cond[i]);
    free(t->cond);
    pthread_mutex_destroy(&t->mutex);
    for (long i = 0; i < t->n; i++) /* offers no post took */
        free(t->ch[i].offer_staged.p);
    for (long i = 0; i < t->n_spare; i++)
        free(t->spare[i].p);
    free(t->spare);
    free(t->report);
    free(t->ch);
    free(t);
}

/* ---- staging --------------------------------------------------------------------------- */

/* A spare staging buffer of at least `bytes` (the last one given back
 * first), or a new one; p NULL when out of memory. Mutex held. */
static struct staging staging_take_locked(bsipipe_transport_t *t, size_t bytes)
{
    for (long i = t->n_spare - 1; i >= 0; i--)
        if (t->spare[i].cap >= bytes) {
            struct staging s = t->spare[i];
            t->spare[i] = t->spare[--t->n_spare];
            return s;
        }
    return (struct staging){malloc(bytes > 0 ? bytes : 1), bytes};
}

/* Keeps a staging buffer (none when s.p is NULL) for a later offer. Mutex held. */
static void staging_give_locked(bsipipe_transport_t *t, struct staging s)
{
    if (!s.p)
        return;
    if (t->n_spare == t->cap_spare) {
        long cap = t->cap_spare ? 2 * t->cap_spare : 16;
        struct staging *grown = realloc(t->spare, (size_t)cap * sizeof *grown);
        if (!grown) { /* out of memory: not kept */
            free(s.p);
            return;
        }
        t->spare = grown;
        t->cap_spare = cap;
    }
    t->spare[t->n_spare++] = s;
}

int bsipipe_transport_set_offer_staging(bsipipe_transport_t *t, int on)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_set_offer_staging: transport is NULL");
    pthread_mutex_lock(&t->mutex);
    t->staging = on != 0;
    pthread_mutex_unlock(&t->mutex);
    return 0;
}

double bsipipe_transport_staged_bytes(bsipipe_transport_t *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mutex);
    double b = t->staged_bytes;
    pthread_mutex_unlock(&t->mutex);
    return b;
}

/* ---- report --------------------------------------------------------------------------- */

struct sbuf {
    char *s;
    size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (!b->s && b->cap == (size_t)-1)
        return; /* out of memory earlier */
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            free(b->s);
            b->s = NULL;
            b->cap = (size_t)-1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* Called with the mutex held. `head` starts the sentence. Returns a malloc'd
 * sentence (or NULL when out of memory). */
static char *build_report(bsipipe_transport_t *t, const char *head, double now)
{
    struct sbuf b = {0};
    sb_printf(&b, "%s: ", head);
    int first = 1;
    for (long i = 0; i < t->n; i++) {
        const struct channel *c = &t->ch[i];
        if (c->send_state != 1 && c->send_state != 4)
            continue;
        sb_printf(&b, "%sdevice %d waited %.1f s in SEND %s on channel %ld (%s)", first ? "" : "; ", c->send_device,
                  now - c->send_start, c->send_what, i,
                  c->posted ? "posted, not yet copied" : "receive not posted");
        first = 0;
    }
    for (long i = 0; i < t->n; i++) {
        const struct channel *c = &t->ch[i];
        if (c->send_state != 5)
            continue;
        sb_printf(&b, "%sdevice %d offered SEND %s on channel %ld %.1f s ago (receive not posted)", first ? "" : "; ",
                  c->send_device, c->send_what, i, now - c->send_start);
        first = 0;
    }
    for (long i = 0; i < t->n; i++) {
        const struct channel *c = &t->ch[i];
        if (!c->posted || c->filled || (c->send_state != 0 && c->send_state != 4))
            continue;
        sb_printf(&b, "%sdevice %d posted RECV %s on channel %ld %.1f s ago (no send arrived)", first ? "" : "; ",
                  c->recv_device, c->recv_what, i, now - c->post_time);
        first = 0;
    }
    if (first)
        sb_printf(&b, "no other transfer was pending");
    return b.s;
}

/* ---- post / send ---------------------------------------------------------------------- */

static void release_task(struct starpu_task *task)
{
    if (task)
        starpu_task_end_dep_release(task);
}

/* now_s() time `at` as a timespec for pthread_cond_timedwait (the conds use CLOCK_MONOTONIC). */
static struct timespec timespec_at(double at)
{
    struct timespec ts;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Fails the transport (mutex held, not yet failed): writes the report,
 * claims every posted RECV nobody has claimed (a copy in progress is
 * released by its sender), wakes every waiter. Returns the claimed tasks for
 * the caller to release after unlocking (release_claimed); *n: their number. */
static struct starpu_task **fail_locked(bsipipe_transport_t *t, const char *head, long *n)
{
    *n = 0;
    t->report = build_report(t, head, now_s());
    __atomic_store_n(&t->failed, 1, __ATOMIC_RELEASE);
    struct starpu_task **claimed = malloc((size_t)t->n * sizeof *claimed);
    for (long i = 0; i < t->n; i++) {
        struct channel *o = &t->ch[i];
        if (o->posted && !o->claimed && o->send_state != 2) {
            o->claimed = 1;
            if (claimed)
                claimed[(*n)++] = o->task;
            else
                release_task(o->task); /* out of memory: release under the mutex */
        }
    }
    t->releasing += *n;
    for (long i = 0; i < t->n; i++)
        if (t->ch[i].send_state == 1 || t->ch[i].recv_waiting)
            pthread_cond_broadcast(&t->cond[i]);
    return claimed;
}

/* Copies a send into channel ch's posted buffer and releases its RECV task,
 * then tells done (an eager send). Called with the mutex held, the channel
 * posted and unclaimed, the transport not failed; returns with it released. */
static int deliver_locked(bsipipe_transport_t *t, long ch, const void *src, size_t bytes,
                          bsipipe_transport_done_fn done, void *done_arg)
{
    struct channel *c = &t->ch[ch];
    int rc = 0;
    c->claimed = 1; /* the RECV is released here, by nobody else */
    if (c->bytes != bytes) {
        c->send_state = 3;
        rc = bsipipe_error_set(-EINVAL,
                               "SEND %s on device %d: %zu bytes, but RECV %s on device %d posted %zu bytes (channel %ld)",
                               c->send_what, c->send_device, bytes, c->recv_what, c->recv_device, c->bytes, ch);
    } else {
        c->send_state = 2;
        t->copying++;
        void *dst = c->dst;
        pthread_mutex_unlock(&t->mutex);
        if (bytes > 0 && dst != src)
            memcpy(dst, src, bytes);
        __atomic_add_fetch(&t->bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
        pthread_mutex_lock(&t->mutex);
        t->copying--;
        c->filled = 1;
        if (c->recv_waiting)
            pthread_cond_broadcast(&t->cond[ch]);
        c->send_state = 3;
    }
    staging_give_locked(t, c->offer_staged); /* its copy has landed (or never will) */
    c->offer_staged.p = NULL;
    struct starpu_task *task = c->task;
    t->releasing++;
    pthread_mutex_unlock(&t->mutex);
    release_task(task);
    if (done)
        done(done_arg);
    pthread_mutex_lock(&t->mutex);
    t->releasing--;
    pthread_mutex_unlock(&t->mutex);
    return rc;
}

int bsipipe_transport_post(bsipipe_transport_t *t, long ch, void *dst, size_t bytes, struct starpu_task *recv_task,
                           int device, const char *what)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_post: transport is NULL");
    pthread_mutex_lock(&t->mutex);
    int rc = 0;
    struct starpu_task *release_now = NULL;
    bsipipe_transport_done_fn abandoned = NULL;
    void *abandoned_arg = NULL;
    if (ch < 0 || ch >= t->n) {
        rc = bsipipe_error_set(-EINVAL, "RECV %s on device %d: channel %ld out of range [0, %ld)", what ? what : "?",
                               device, ch, t->n);
        release_now = recv_task; /* the end dependency would never be released */
    } else if (!dst && bytes > 0) {
        rc = bsipipe_error_set(-EINVAL, "RECV %s on device %d: NULL buffer for %zu bytes (channel %ld)",
                               what ? what : "?", device, bytes, ch);
        release_now = recv_task;
    } else if (t->ch[ch].posted) {
        struct channel *c = &t->ch[ch];
        rc = bsipipe_error_set(-EINVAL, "RECV %s on device %d: channel %ld already posted by RECV %s on device %d",
                               what ? what : "?", device, ch, c->recv_what, c->recv_device);
        /* Release the second task's dependency, unless it is the very task
         * already posted (it will be released once, by its transfer). */
        if (recv_task != c->task)
            release_now = recv_task;
    } else {
        struct channel *c = &t->ch[ch];
        c->posted = 1;
        c->dst = dst;
        c->bytes = bytes;
        c->task = recv_task;
        c->recv_device = device;
        c->post_time = now_s();
        copy_name(c->recv_what, what);
        if (t->failed) {
            c->claimed = 1;
            release_now = recv_task;
            if (c->send_state == 5) { /* an offer given up: its sender hears of it */
                c->send_state = 3;
                abandoned = c->offer_done;
                abandoned_arg = c->offer_done_arg;
                staging_give_locked(t, c->offer_staged);
                c->offer_staged.p = NULL;
            }
        } else if (c->send_state == 5) { /* its data came first: copy it here */
            return deliver_locked(t, ch, c->offer_src, c->offer_bytes, c->offer_done, c->offer_done_arg);
        } else if (c->send_state == 1) {
            pthread_cond_signal(&t->cond[ch]); /* its sender waits */
        }
    }
    if (release_now)
        t->releasing++;
    pthread_mutex_unlock(&t->mutex);
    if (abandoned)
        abandoned(abandoned_arg);
    if (release_now) {
        release_task(release_now);
        pthread_mutex_lock(&t->mutex);
        t->releasing--;
        pthread_mutex_unlock(&t->mutex);
    }
    return rc;
}

/* Releases the tasks in `tasks` (claimed under the mutex), then drops the
 * `releasing` count. Called without the mutex. */
static void release_claimed(bsipipe_transport_t *t, struct starpu_task **tasks, long n)
{
    for (long i = 0; i < n; i++)
        release_task(tasks[i]);
    if (n > 0) {
        pthread_mutex_lock(&t->mutex);
        t->releasing -= n;
        pthread_mutex_unlock(&t->mutex);
    }
}

static int failed_error(const bsipipe_transport_t *t, long ch, int device, const char *what)
{
    return bsipipe_error_set(-ETIMEDOUT, "SEND %s on device %d (channel %ld) abandoned: %s", what ? what : "?",
                             device, ch, t->report ? t->report : "transport watchdog fired");
}

int bsipipe_transport_wait_filled(bsipipe_transport_t *t, long ch)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_wait_filled: transport is NULL");
    pthread_mutex_lock(&t->mutex);
    if (ch < 0 || ch >= t->n) {
        int rc = bsipipe_error_set(-EINVAL, "blocking RECV: channel %ld out of range [0, %ld)", ch, t->n);
        pthread_mutex_unlock(&t->mutex);
        return rc;
    }
    struct channel *c = &t->ch[ch];
    double start = now_s(), deadline = start + t->timeout_s;
    struct timespec ts = timespec_at(deadline);
    struct starpu_task **claimed = NULL;
    long n_claimed = 0;
    c->recv_waiting = 1;
    while (!c->filled && !t->failed) {
        int w = pthread_cond_timedwait(&t->cond[ch], &t->mutex, &ts);
        if (w == ETIMEDOUT && !c->filled && !t->failed && now_s() >= deadline) {
            char head[128];
            snprintf(head, sizeof head,
                     "transport watchdog fired (timeout %.1f s, first expired: blocking RECV on channel %ld)",
                     t->timeout_s, ch);
            claimed = fail_locked(t, head, &n_claimed);
        }
    }
    c->recv_waiting = 0;
    t->wait_s += now_s() - start;
    int rc = c->filled ? 0 : -ETIMEDOUT;
    pthread_mutex_unlock(&t->mutex);
    release_claimed(t, claimed, n_claimed);
    free(claimed);
    return rc;
}

/* The checks of every send (a source, a channel in range, not used yet):
 * 0 with the mutex held and *out the channel; an error with it released. */
static int send_open(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device, const char *what,
                     struct channel **out)
{
    if (!src && bytes > 0)
        return bsipipe_error_set(-EINVAL, "SEND %s on device %d: NULL source for %zu bytes (channel %ld)",
                                 what ? what : "?", device, bytes, ch);
    pthread_mutex_lock(&t->mutex);
    if (ch < 0 || ch >= t->n) {
        int rc = bsipipe_error_set(-EINVAL, "SEND %s on device %d: channel %ld out of range [0, %ld)",
                                   what ? what : "?", device, ch, t->n);
        pthread_mutex_unlock(&t->mutex);
        return rc;
    }
    struct channel *c = &t->ch[ch];
    if (c->send_state != 0 && c->send_state != 4) {
        int rc = bsipipe_error_set(-EINVAL, "SEND %s on device %d: channel %ld already used by SEND %s on device %d",
                                   what ? what : "?", device, ch, c->send_what, c->send_device);
        pthread_mutex_unlock(&t->mutex);
        return rc;
    }
    *out = c;
    return 0;
}

int bsipipe_transport_send(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                           const char *what)
{
    return bsipipe_transport_send_copy(t, ch, src, bytes, device, what, NULL, NULL);
}

int bsipipe_transport_send_copy(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                                const char *what, bsipipe_transport_copy_fn copy, void *copy_arg)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_send: transport is NULL");
    struct channel *c;
    int open_rc = send_open(t, ch, src, bytes, device, what, &c);
    if (open_rc < 0)
        return open_rc;
    if (t->failed) {
        int rc = failed_error(t, ch, device, what);
        pthread_mutex_unlock(&t->mutex);
        return rc;
    }
    c->send_state = 1;
    c->send_device = device;
    c->send_start = now_s();
    copy_name(c->send_what, what);
    t->waiting++;

    double deadline = c->send_start + t->timeout_s;
    struct timespec ts = timespec_at(deadline);
    struct starpu_task **claimed = NULL;
    long n_claimed = 0;
    int waited = 0;
    while (!c->posted && !t->failed) {
        waited = 1;
        int w = pthread_cond_timedwait(&t->cond[ch], &t->mutex, &ts);
        if (w == ETIMEDOUT && !c->posted && !t->failed && now_s() >= deadline) {
            char head[128];
            snprintf(head, sizeof head, "transport watchdog fired (timeout %.1f s, first expired: channel %ld)",
                     t->timeout_s, ch);
            claimed = fail_locked(t, head, &n_claimed);
        }
    }
    t->waiting--;
    if (waited)
        t->wait_s += now_s() - c->send_start;
    int rc = 0;
    struct starpu_task *release_now = NULL;
    if (c->claimed || (t->failed && !c->posted)) {
        /* Failed before the data could go: nothing copied. */
        c->send_state = 3;
        rc = failed_error(t, ch, device, what);
        pthread_mutex_unlock(&t->mutex);
    } else if (c->bytes != bytes) {
        /* Programming error; release the RECV (no data) so the graph drains. */
        c->send_state = 3;
        c->claimed = 1;
        release_now = c->task;
        t->releasing++;
        rc = bsipipe_error_set(-EINVAL,
                               "SEND %s on device %d: %zu bytes, but RECV %s on device %d posted %zu bytes (channel %ld)",
                               c->send_what, device, bytes, c->recv_what, c->recv_device, c->bytes, ch);
        pthread_mutex_unlock(&t->mutex);
    } else {
        c->send_state = 2;
        t->copying++;
        void *dst = c->dst;
        pthread_mutex_unlock(&t->mutex);
        if (copy) /* a failed copy still releases the RECV: the engine reports rc */
            rc = copy(dst, src, bytes, copy_arg);
        else if (bytes > 0 && dst != src)
            memcpy(dst, src, bytes);
        __atomic_add_fetch(&t->bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
        pthread_mutex_lock(&t->mutex);
        t->copying--;
        c->filled = 1;
        if (c->recv_waiting)
            pthread_cond_broadcast(&t->cond[ch]);
        c->send_state = 3;
        /* Nobody else claims a channel whose copy is in progress. */
        c->claimed = 1;
        release_now = c->task;
        t->releasing++;
        pthread_mutex_unlock(&t->mutex);
    }
    if (release_now) {
        release_task(release_now);
        pthread_mutex_lock(&t->mutex);
        t->releasing--;
        pthread_mutex_unlock(&t->mutex);
    }
    release_claimed(t, claimed, n_claimed);
    free(claimed);
    return rc;
}

int bsipipe_transport_offer(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                            const char *what, bsipipe_transport_done_fn done, void *done_arg)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_offer: transport is NULL");
    struct channel *c;
    int open_rc = send_open(t, ch, src, bytes, device, what, &c);
    if (open_rc < 0)
        return open_rc;
    c->send_device = device;
    c->send_start = now_s();
    copy_name(c->send_what, what);
    if (!t->failed && !c->posted && t->staging) { /* copied aside, so that src is free when this returns */
        struct staging st = staging_take_locked(t, bytes);
        if (st.p) {
            t->copying++; /* the channel stays unoffered meanwhile: a post only records itself */
            pthread_mutex_unlock(&t->mutex);
            if (bytes > 0)
                memcpy(st.p, src, bytes);
            pthread_mutex_lock(&t->mutex);
            t->copying--;
            if (t->failed || c->posted) { /* failed or posted during the copy: as without staging, below */
                staging_give_locked(t, st);
            } else {
                t->staged_bytes += (double)bytes;
                c->send_state = 5;
                c->offer_src = st.p;
                c->offer_bytes = bytes;
                c->offer_staged = st;
                c->offer_done = NULL;
                c->offer_done_arg = NULL;
                pthread_mutex_unlock(&t->mutex);
                if (done)
                    done(done_arg);
                return 0;
            }
        } else { /* not kept by reference (the caller may reuse src): the transport fails, so that no
                  * receive waits for ever on this channel */
            c->send_state = 3;
            pthread_mutex_unlock(&t->mutex);
            char why[160];
            snprintf(why, sizeof why, "out of memory for a staging copy of %zu bytes", bytes);
            bsipipe_transport_abort(t, why);
            return bsipipe_error_set(-ENOMEM, "SEND %s on device %d: out of memory for a staging copy of %zu bytes "
                                     "(channel %ld); the transport is failed", what ? what : "?", device, bytes, ch);
        }
    }
    if (t->failed) {
        c->send_state = 3;
        int rc = failed_error(t, ch, device, what);
        pthread_mutex_unlock(&t->mutex);
        if (done)
            done(done_arg);
        return rc;
    }
    if (!c->posted) { /* kept for the post */
        c->send_state = 5;
        c->offer_src = src;
        c->offer_bytes = bytes;
        c->offer_done = done;
        c->offer_done_arg = done_arg;
        pthread_mutex_unlock(&t->mutex);
        return 0;
    }
    return deliver_locked(t, ch, src, bytes, done, done_arg);
}

/* Fails the transport once with `head` (later calls: no-op), releasing the
 * tasks that waited on it. */
static int fail_once(bsipipe_transport_t *t, const char *head)
{
    pthread_mutex_lock(&t->mutex);
    if (t->failed) {
        pthread_mutex_unlock(&t->mutex);
        return 0;
    }
    long n_claimed = 0;
    struct starpu_task **claimed = fail_locked(t, head, &n_claimed);
    pthread_mutex_unlock(&t->mutex);
    release_claimed(t, claimed, n_claimed);
    free(claimed);
    return 0;
}

int bsipipe_transport_abort(bsipipe_transport_t *t, const char *why)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_abort: transport is NULL");
    char head[160];
    snprintf(head, sizeof head, "transport aborted (%s)", why && *why ? why : "no reason given");
    return fail_once(t, head);
}

int bsipipe_transport_note_held(bsipipe_transport_t *t, long ch, int device, const char *what, double waited_s)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_note_held: transport is NULL");
    pthread_mutex_lock(&t->mutex);
    int rc = 0;
    if (ch < 0 || ch >= t->n) {
        rc = bsipipe_error_set(-EINVAL, "bsipipe_transport_note_held: channel %ld out of range [0, %ld)", ch, t->n);
    } else if (t->ch[ch].send_state == 0) {
        struct channel *c = &t->ch[ch];
        c->send_state = 4;
        c->send_device = device;
        c->send_start = now_s() - (waited_s > 0 ? waited_s : 0);
        copy_name(c->send_what, what);
    }
    pthread_mutex_unlock(&t->mutex);
    return rc;
}

int bsipipe_transport_posted(bsipipe_transport_t *t, long ch)
{
    if (!t || ch < 0 || ch >= t->n)
        return 0;
    pthread_mutex_lock(&t->mutex);
    int posted = t->ch[ch].posted;
    pthread_mutex_unlock(&t->mutex);
    return posted;
}

int bsipipe_transport_expire(bsipipe_transport_t *t, long ch)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_expire: transport is NULL");
    char head[128];
    snprintf(head, sizeof head, "transport watchdog fired (timeout %.1f s, first expired: channel %ld)", t->timeout_s,
             ch);
    return fail_once(t, head);
}

double bsipipe_transport_timeout(const bsipipe_transport_t *t)
{
    return t ? t->timeout_s : 0;
}

/* ---- reset / queries ------------------------------------------------------------------ */

int bsipipe_transport_reset(bsipipe_transport_t *t)
{
    if (!t)
        return bsipipe_error_set(-EINVAL, "bsipipe_transport_reset: transport is NULL");
    pthread_mutex_lock(&t->mutex);
    int rc = 0;
    if (t->waiting || t->copying || t->releasing) {
        rc = bsipipe_error_set(-EBUSY, "bsipipe_transport_reset: %ld send(s) waiting, %ld copying, %ld release(s) running",
                               t->waiting, t->copying, t->releasing);
    } else {
        for (long i = 0; i < t->n; i++) {
            const struct channel *c = &t->ch[i];
            if (c->posted && !c->claimed) {
                rc = bsipipe_error_set(-EBUSY,
                                       "bsipipe_transport_reset: RECV %s on device %d (channel %ld) is posted and "
                                       "waits for its send",
                                       c->recv_what, c->recv_device, i);
                break;
            }
        }
    }
    if (rc == 0) {
        for (long i = 0; i < t->n; i++) /* offers no RECV took: their copies are spare again */
            staging_give_locked(t, t->ch[i].offer_staged);
        memset(t->ch, 0, (size_t)t->n * sizeof *t->ch);
        free(t->report);
        t->report = NULL;
        __atomic_store_n(&t->failed, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&t->mutex);
    return rc;
}

int bsipipe_transport_failed(const bsipipe_transport_t *t)
{
    return t ? __atomic_load_n(&t->failed, __ATOMIC_ACQUIRE) : 0;
}

const char *bsipipe_transport_report(const bsipipe_transport_t *t)
{
    if (!t || !__atomic_load_n(&t->failed, __ATOMIC_ACQUIRE))
        return "";
    /* Written once, before `failed` is set; stays until reset/destroy. */
    return t->report ? t->report : "transport watchdog fired (report could not be allocated)";
}

long bsipipe_transport_waiting(bsipipe_transport_t *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mutex);
    long n = t->waiting;
    pthread_mutex_unlock(&t->mutex);
    return n;
}

double bsipipe_transport_wait_seconds(bsipipe_transport_t *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mutex);
    double w = t->wait_s;
    pthread_mutex_unlock(&t->mutex);
    return w;
}

double bsipipe_transport_bytes(const bsipipe_transport_t *t)
{
    return t ? (double)__atomic_load_n(&t->bytes, __ATOMIC_RELAXED) : 0.0;
}
