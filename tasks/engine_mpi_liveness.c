/* engine_mpi_liveness.c: how a rank of an MPI job tells a slow rank from
 * a stopped or hung one, and ends the job instead of hanging: heartbeats
 * for the engine's life, the watchdog over each iteration and over every
 * blocking step of the main thread (a collective, StarPU-MPI's start or
 * barrier), and plain deadlines where no heartbeat can exist yet (MPI's
 * start and end). The messages and collectives themselves are
 * engine_mpi.c's. */
#include "tasks/mpi_internal.h"

#ifdef BSIPIPE_HAVE_STARPUMPI
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- deadlines where no heartbeat can exist yet (MPI_Init_thread,
 * MPI_Finalize): a thread that ends this process when the call has not
 * returned in time, so that mpirun ends the job instead of it hanging. MPI
 * cannot say then which rank is missing. ---- */


static const char *env_rank(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? r : getenv("PMI_RANK") ? getenv("PMI_RANK") : "?";
}

static void *guard_main(void *arg)
{
    struct mpi_guard *g = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double until = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + g->limit;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&g->lock);
    while (!g->done && pthread_cond_timedwait(&g->cond, &g->lock, &ts) == 0)
        ;
    int done = g->done;
    pthread_mutex_unlock(&g->lock);
    if (!done) {
        const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *me = env_rank();
        char who[96];
        if (size && strcmp(size, "2") == 0 && (strcmp(me, "0") == 0 || strcmp(me, "1") == 0))
            snprintf(who, sizeof who, "rank %c, the job's other rank,", me[0] == '0' ? '1' : '0');
        else /* MPI cannot say which at this point */
            snprintf(who, sizeof who, "another of the job's %s ranks", size ? size : "");
        fprintf(stderr, "bsipipe engine: rank %s (pid %ld): %s has not returned after %.1f s: %s is stopped, hangs or "
                        "never started. Ending this rank so that mpirun ends the job.\n",
                me, (long)getpid(), g->what, g->limit, who);
        fflush(stderr);
        _exit(3);
    }
    return NULL;
}

void mpi_guard_start(struct mpi_guard *g, const char *what, double limit)
{
    memset(g, 0, sizeof *g);
    g->what = what;
    g->limit = limit;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->lock, NULL);
    g->started = pthread_create(&g->thread, NULL, guard_main, g) == 0; /* without it: no deadline */
}

void mpi_guard_end(struct mpi_guard *g)
{
    if (g->started) {
        pthread_mutex_lock(&g->lock);
        g->done = 1;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->thread, NULL);
    }
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
}

void mpi_wait_mark(struct engine_mpi *m, const char *what)
{
    pthread_mutex_lock(&m->lock);
    snprintf(m->waiting, sizeof m->waiting, "%s", what ? what : "");
    m->wait_since = mpi_now_s();
    pthread_mutex_unlock(&m->lock);
}

/* The first other rank that has not sent a heartbeat for `limit` seconds
 * (and has not said goodbye), or -1. Under m->lock or from the thread that
 * updates heard[]. */
int mpi_silent_rank(const struct bsipipe_engine *e, double t, double limit)
{
    const struct engine_mpi *m = e->mpi;
    for (int r = 0; r < e->nranks; r++)
        if (r != e->rank && !m->quiet[r] && t - m->heard[r] >= limit)
            return r;
    return -1;
}

/* ---- liveness: heartbeats and the watchdog ----
 * One thread per engine, for its whole life: every tick it sends a heartbeat
 * to every other rank and notes the heartbeats it receives, so a rank that is
 * only slow (a long op, or busy between iterations) is told apart from one
 * that is stopped or hung. During an iteration, when this rank has made no
 * progress (no task running or ending, no message arriving) for watchdog_s
 * and the rank it waits for has sent no heartbeat for as long, it names that
 * rank and aborts the job. A rank that dies is named by mpirun itself. */

double mpi_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Takes every heartbeat that has arrived; a 0 is a rank's last one. */
static void heartbeats_take(struct bsipipe_engine *e, double t)
{
    struct engine_mpi *m = e->mpi;
    for (;;) {
        int flag = 0, v;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_HEARTBEAT, m->comm, &flag, &st);
        if (!flag)
            return;
        MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, TAG_HEARTBEAT, m->comm, MPI_STATUS_IGNORE);
        m->heard[st.MPI_SOURCE] = t;
        if (v == 0)
            m->quiet[st.MPI_SOURCE] = 1;
    }
}

/* The rank this one waits for (the oldest missing message, else one that
 * has not reached the end-of-iteration barrier), with a sentence on what for;
 * -1 when it waits for nobody. */
static int awaited_rank(struct bsipipe_engine *e, char *what, size_t len)
{
    struct engine_mpi *m = e->mpi;
    for (long j = 0; j < m->n_recv; j++) {
        const struct pending_recv *w = &m->recv[j];
        if (__atomic_load_n(&w->done, __ATOMIC_SEQ_CST))
            continue;
        if (w->device >= 0)
            snprintf(what, len, "device %d waits for data from rank %d (device %d) in %s", w->device,
                     w->peer_rank, w->peer_device, w->what);
        else
            snprintf(what, len, "it waits for the %s from rank %d (device %d)", w->what, w->peer_rank,
                     w->peer_device);
        return w->peer_rank;
    }
    if (__atomic_load_n(&m->in_barrier, __ATOMIC_SEQ_CST))
        for (int r = 0; r < e->nranks; r++)
            if (r != e->rank && !__atomic_load_n(&m->arrived[r], __ATOMIC_SEQ_CST)) {
                snprintf(what, len, "it waits at the end of iteration %ld for rank %d", m->iter, r);
                return r;
            }
    snprintf(what, len, "no task ended and no message arrived in iteration %ld", m->iter);
    return -1;
}

void *mpi_liveness_main(void *arg)
{
    struct bsipipe_engine *e = arg;
    struct engine_mpi *m = e->mpi;
    const double tick = 0.05, limit = e->o.watchdog_s;
    static const int alive = 1;
    long last = -1;
    double since = mpi_now_s();
    for (int r = 0; r < e->nranks; r++)
        m->heard[r] = since;
    for (;;) {
        pthread_mutex_lock(&m->lock);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(tick * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!m->stop)
            pthread_cond_timedwait(&m->cond, &m->lock, &ts);
        int stop = m->stop, watching = m->watching;
        pthread_mutex_unlock(&m->lock);
        if (stop)
            return NULL;
        double t = mpi_now_s();
        for (int r = 0; r < e->nranks; r++) /* small: sent eagerly, never waited for */
            if (r != e->rank) {
                MPI_Request q;
                MPI_Isend(&alive, 1, MPI_INT, r, TAG_HEARTBEAT, m->comm, &q);
                MPI_Request_free(&q);
            }
        heartbeats_take(e, t);
        /* A blocking step of the main thread (a collective, StarPU-MPI's
         * start or barrier) that waits for a silent rank. */
        pthread_mutex_lock(&m->lock);
        char waiting[sizeof m->waiting];
        memcpy(waiting, m->waiting, sizeof waiting);
        double waited = t - m->wait_since;
        pthread_mutex_unlock(&m->lock);
        int silent = mpi_silent_rank(e, t, limit);
        if (*waiting && waited >= limit && silent >= 0) {
            fprintf(stderr, "bsipipe engine: rank %d has waited %.1f s in %s; rank %d has sent no heartbeat for %.1f s: "
                            "it has died or hangs. Aborting the job.\n", e->rank, waited, waiting, silent,
                    t - m->heard[silent]);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        long ended = __atomic_load_n(&e->tasks_ended, __ATOMIC_SEQ_CST);
        long now = ended + __atomic_load_n(&m->progress, __ATOMIC_SEQ_CST);
        /* Progress is an op that ended or a message that arrived. An op in
         * flight (a long one, or a RECV's slot waiting for its data) keeps
         * the clock from running only while every rank answers: once one
         * has gone silent, waiting cannot end well. */
        int running = __atomic_load_n(&e->tasks_popped, __ATOMIC_SEQ_CST) > ended;
        if (!watching || now != last || (running && silent < 0)) {
            last = now;
            since = t;
            continue;
        }
        double still = t - since;
        if (still < limit)
            continue;
        char what[256];
        int peer = awaited_rank(e, what, sizeof what);
        if (peer < 0 && silent >= 0) { /* waiting for nobody in particular: a silent rank is the culprit */
            snprintf(what, sizeof what, "no task ended and no message arrived in iteration %ld", m->iter);
            peer = silent;
        }
        /* The rank it waits for is alive: slow (a long op), not gone. If it
         * were stuck itself, its own watchdog would name who it waits for. */
        if (peer >= 0 && t - m->heard[peer] < limit)
            continue;
        if (peer < 0 && still < 10 * limit)
            continue; /* waiting for nobody: only a runtime stall, give it time */
        if (peer >= 0)
            fprintf(stderr, "bsipipe engine: rank %d made no progress for %.1f s: %s; rank %d has sent no heartbeat "
                            "for %.1f s: it has died or hangs. Aborting the job.\n",
                    e->rank, still, what, peer, t - m->heard[peer]);
        else
            fprintf(stderr, "bsipipe engine: rank %d made no progress for %.1f s: %s. Aborting the job.\n", e->rank,
                    still, what);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* Stops the heartbeats: this rank's last one (0) to every rank, then every
 * rank's heartbeats up to its last, so no message is left in flight. */
void mpi_liveness_stop(struct bsipipe_engine *e)
{
    struct engine_mpi *m = e->mpi;
    if (!m->live)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = 1;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->liveness, NULL);
    m->live = 0;
    static const int last = 0;
    MPI_Request *q = calloc((size_t)e->nranks, sizeof *q);
    for (int r = 0; r < e->nranks; r++) {
        if (q)
            q[r] = MPI_REQUEST_NULL;
        if (r != e->rank && q)
            MPI_Isend(&last, 1, MPI_INT, r, TAG_HEARTBEAT, m->comm, &q[r]);
    }
    /* Every rank's heartbeats up to its last; a rank silent for the
     * watchdog time before its last one is named (it would hold us here). */
    for (;;) {
        double t = mpi_now_s();
        heartbeats_take(e, t);
        int r = 0;
        while (r < e->nranks && (r == e->rank || m->quiet[r]))
            r++;
        if (r == e->nranks)
            break;
        int silent = mpi_silent_rank(e, t, e->o.watchdog_s);
        if (silent >= 0) {
            fprintf(stderr, "bsipipe engine: rank %d waits at its engine's end for rank %d, which has sent no heartbeat "
                            "for %.1f s: it has died or hangs. Aborting the job.\n", e->rank, silent,
                    t - m->heard[silent]);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        struct timespec ts = {0, 1000000}; /* 1 ms */
        nanosleep(&ts, NULL);
    }
    if (q)
        MPI_Waitall(e->nranks, q, MPI_STATUSES_IGNORE);
    free(q);
}

#endif
