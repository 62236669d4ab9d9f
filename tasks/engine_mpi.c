/* engine_mpi.c: the engine across StarPU-MPI ranks (the `mpi` transport of
 * DESIGN.md §6–§7, docs/scaleout.md).
 *
 * The transport's ops (SEND, RECV, SYNC and the gradient norms across
 * ranks) are tasks/transport/mpi.c's; this file holds what they stand on:
 * MPI's start and end, the messages they post (engine_mpi_post_send,
 * engine_mpi_post_recv) and what each iteration waits for, and the
 * collectives the engine agrees with. Tags are derived from the op's identity (channel or chunk) and the
 * iteration, so they are the same on every rank and never reused while a
 * message may be in flight.
 *
 * MPI is initialised with MPI_THREAD_MULTIPLE (by us, unless the program
 * did it), so the main thread may call MPI collectives while StarPU-MPI's
 * progress thread runs; it is finalised at exit, after every engine.
 *
 * Failure (engine_mpi_liveness.c): every rank sends heartbeats; a watchdog
 * aborts the whole job
 * (MPI_Abort) when this rank makes no progress for the engine's watchdog
 * time and the rank it waits for has gone silent as long, naming that rank
 * and what waits for it; a rank that dies makes mpirun stop the others and
 * name it. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "tasks/mpi_internal.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_topology.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef BSIPIPE_HAVE_STARPUMPI
#include <mpi.h>
#include <starpu_mpi.h>

static int mpi_initialized_here;
/* Waits with no heartbeat to tell slow from stopped (MPI's start-up and
 * finalize, the hello) get at least this long: a loaded machine may take
 * seconds to start MPI, and a short --watchdog must not kill a healthy job. */
#define PLAIN_DEADLINE_MIN_S 10.0
static double mpi_deadline_s = 30; /* the last engine's plain deadline, for MPI_Finalize at exit */

static double plain_deadline(const struct bsipipe_engine *e)
{
    return e->o.watchdog_s > PLAIN_DEADLINE_MIN_S ? e->o.watchdog_s : PLAIN_DEADLINE_MIN_S;
}


static void mpi_finalize_at_exit(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        /* Open MPI's finalize waits for every rank: a rank stopped after its
         * engine ended would hold this one for ever. */
        struct mpi_guard g;
        mpi_guard_start(&g, "MPI_Finalize", mpi_deadline_s);
        MPI_Finalize();
        mpi_guard_end(&g);
    }
}

/* Waits for a non-blocking collective. The liveness thread watches: when
 * the wait has lasted the watchdog time and a rank has gone silent as long,
 * it names that rank and aborts the job; a rank that is only slow (it still
 * sends heartbeats) is waited for. Without that thread, a plain deadline. */
static int coll_wait(struct bsipipe_engine *e, MPI_Request *req, const char *what)
{
    struct engine_mpi *m = e->mpi;
    double t0 = mpi_now_s();
    mpi_wait_mark(m, what);
    for (long spins = 0;; spins++) {
        int flag = 0;
        if (MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            mpi_wait_mark(m, NULL);
            return bsipipe_error_set(-EIO, "engine: MPI failed in %s", what);
        }
        if (flag)
            break;
        if (!m->live && mpi_now_s() - t0 >= plain_deadline(e)) {
            fprintf(stderr, "bsipipe engine: rank %d waited %.1f s for %s: another rank is stopped or hangs. "
                            "Aborting the job.\n", e->rank, mpi_now_s() - t0, what);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        if (spins < 20) {
            sched_yield();
        } else { /* the cores are the workers': do not spin */
            struct timespec ts = {0, 50000}; /* 0.05 ms */
            nanosleep(&ts, NULL);
        }
    }
    mpi_wait_mark(m, NULL);
    return 0;
}

/* MPI_Allreduce in place, under coll_wait. */
static int allreduce(struct bsipipe_engine *e, void *v, int n, MPI_Datatype type, MPI_Op op, const char *what)
{
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, v, n, type, op, e->mpi->comm != MPI_COMM_NULL ? e->mpi->comm : MPI_COMM_WORLD, &req) != MPI_SUCCESS)
        return bsipipe_error_set(-EIO, "engine: MPI_Iallreduce failed in %s", what);
    return coll_wait(e, &req, what);
}

static starpu_mpi_tag_t make_tag(const struct engine_mpi *m, int kind, long index)
{
    return ((starpu_mpi_tag_t)(m->iter & 0xffffff) << 32) | ((starpu_mpi_tag_t)kind << 28) | (starpu_mpi_tag_t)index;
}

static int setup_ranks(struct bsipipe_engine *e);

/* Every rank learns whether some rank failed, so none goes on to wait for a
 * rank that has given up. */
int engine_mpi_setup(struct bsipipe_engine *e)
{
    return engine_mpi_agree_setup(e, setup_ranks(e));
}

int engine_mpi_agree_setup(struct bsipipe_engine *e, int rc)
{
    return engine_mpi_agree_named(e, rc, "could not start");
}

int engine_mpi_agree_named(struct bsipipe_engine *e, int rc, const char *failed)
{
    if (!e->mpi)
        return rc;
    char why[512];
    snprintf(why, sizeof why, "%s", bsipipe_error_detail());
    /* One reduction: the most negative code, and the lowest rank with it. */
    int64_t v[2] = {rc < 0 ? -(int64_t)rc : 0, rc < 0 ? e->nranks - e->rank : 0};
    char what[160];
    snprintf(what, sizeof what, "the agreement of the ranks (whether one %s)", failed);
    int arc = allreduce(e, v, 2, MPI_INT64_T, MPI_MAX, what);
    if (arc < 0)
        return arc;
    if (rc < 0)
        return bsipipe_error_set(rc, "%s", why);
    if (v[0] > 0) {
        int worst = (int)-v[0];
        return bsipipe_error_set(worst, "engine: rank %d %s (%s); see its message", e->nranks - (int)v[1], failed,
                                 bsipipe_strerror(worst));
    }
    return 0;
}

int engine_mpi_max_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what)
{
    return e->mpi ? allreduce(e, v, n, MPI_INT64_T, MPI_MAX, what) : 0;
}

int engine_mpi_sum_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what)
{
    return e->mpi ? allreduce(e, v, n, MPI_INT64_T, MPI_SUM, what) : 0;
}

void engine_mpi_fault_point(struct bsipipe_engine *e, const char *point)
{
    const char *f = getenv("BSIPIPE_FAULT_STOP");
    char *end;
    long r = f ? strtol(f, &end, 10) : -1;
    if (f && end != f && *end == ':' && r == e->rank && strcmp(end + 1, point) == 0) {
        fprintf(stderr, "bsipipe engine: rank %d stops itself at %s (BSIPIPE_FAULT_STOP)\n", e->rank, point);
        fflush(stderr);
        raise(SIGSTOP);
    }
}

/* Right after MPI_Init, before StarPU-MPI uses MPI_COMM_WORLD: every rank
 * says hello to every other, under a deadline, so a rank stopped during
 * start-up is named (no heartbeat exists yet). */
enum { TAG_HELLO = 0x5b51 };
static void hello_all(struct bsipipe_engine *e)
{
    int n = e->nranks, token = 1, *in = calloc((size_t)n, sizeof *in), *got = calloc((size_t)n, sizeof *got);
    MPI_Request *req = calloc((size_t)2 * n, sizeof *req);
    if (!in || !got || !req) {
        free(in); free(got); free(req);
        return; /* no memory: no deadline; the setup fails on its next allocation */
    }
    for (int r = 0; r < n; r++) {
        req[r] = req[n + r] = MPI_REQUEST_NULL;
        got[r] = r == e->rank;
        if (r != e->rank) {
            MPI_Irecv(&in[r], 1, MPI_INT, r, TAG_HELLO, MPI_COMM_WORLD, &req[r]);
            MPI_Isend(&token, 1, MPI_INT, r, TAG_HELLO, MPI_COMM_WORLD, &req[n + r]);
        }
    }
    double t0 = mpi_now_s();
    for (int left = n - 1; left > 0;) {
        int idx = MPI_UNDEFINED, flag = 0;
        MPI_Testany(n, req, &idx, &flag, MPI_STATUS_IGNORE);
        if (flag && idx != MPI_UNDEFINED) {
            got[idx] = 1;
            left--;
            continue;
        }
        if (mpi_now_s() - t0 >= plain_deadline(e)) {
            char who[256] = "";
            for (int r = 0; r < n && strlen(who) < 200; r++)
                if (!got[r])
                    snprintf(who + strlen(who), sizeof who - strlen(who), "%s%d", *who ? ", " : "", r);
            fprintf(stderr, "bsipipe engine: rank %d waited %.1f s at start-up for rank%s %s: %s stopped, hangs or "
                            "failed before starting. Aborting the job.\n", e->rank, mpi_now_s() - t0,
                    strchr(who, ',') ? "s" : "", who, strchr(who, ',') ? "they are" : "it is");
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
    free(in);
    free(got);
    free(req);
}

static int setup_ranks(struct bsipipe_engine *e)
{
    e->rank = 0;
    e->nranks = 1;
    e->n_local = e->W;
    if (!e->o.mpi)
        return 0;
    int inited = 0, level = 0;
    MPI_Initialized(&inited);
    mpi_deadline_s = plain_deadline(e);
    if (!inited) {
        /* Open MPI's start-up waits for every rank: under a deadline. */
        struct mpi_guard g;
        mpi_guard_start(&g, "MPI_Init_thread", plain_deadline(e));
        int irc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
        mpi_guard_end(&g);
        if (irc != MPI_SUCCESS)
            return bsipipe_error_set(-EIO, "engine: MPI_Init_thread failed");
        if (!mpi_initialized_here)
            atexit(mpi_finalize_at_exit);
        mpi_initialized_here = 1;
    } else {
        MPI_Query_thread(&level);
    }
    if (level < MPI_THREAD_MULTIPLE)
        return bsipipe_error_set(-ENOTSUP, "engine: this MPI gives thread level %d, the engine needs "
                                           "MPI_THREAD_MULTIPLE (Open MPI built with thread support)", level);
    MPI_Comm_rank(MPI_COMM_WORLD, &e->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &e->nranks);
    if (!(e->dev_rank = calloc((size_t)e->W, sizeof *e->dev_rank)) || !(e->mpi = calloc(1, sizeof *e->mpi)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    e->mpi->e = e;
    e->mpi->comm = MPI_COMM_NULL;
    pthread_mutex_init(&e->mpi->lock, NULL);
    pthread_cond_init(&e->mpi->cond, NULL);
    if (!(e->mpi->arrived = calloc((size_t)e->nranks, sizeof *e->mpi->arrived)) ||
        !(e->mpi->heard = calloc((size_t)e->nranks, sizeof *e->mpi->heard)) ||
        !(e->mpi->quiet = calloc((size_t)e->nranks, sizeof *e->mpi->quiet)))
        return bsipipe_error_set(-ENOMEM, "engine: cannot set up the end-of-iteration barrier");
    hello_all(e);
    /* Our own communicator (heartbeats, barriers, collectives), then the
     * heartbeats at once: every later wait has a rank to name. */
    MPI_Request req;
    if (MPI_Comm_idup(MPI_COMM_WORLD, &e->mpi->comm, &req) != MPI_SUCCESS)
        return bsipipe_error_set(-EIO, "engine: MPI_Comm_idup failed");
    int crc = coll_wait(e, &req, "MPI_Comm_idup at start-up");
    if (crc < 0)
        return crc;
    e->mpi->live = pthread_create(&e->mpi->liveness, NULL, mpi_liveness_main, e) == 0;
    if (!e->mpi->live)
        return bsipipe_error_set(-EAGAIN, "engine: cannot start the heartbeat thread");
    engine_mpi_fault_point(e, "start-up");
    if (e->nranks > e->W)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "engine: %d MPI ranks for %d devices: every rank needs a device "
                                 "(run with -np %d or fewer, or a larger --w)", e->nranks, e->W, e->W);
    if (e->o.device_rank) {
        for (int d = 0; d < e->W; d++) {
            if (e->o.device_rank[d] < 0 || e->o.device_rank[d] >= e->nranks)
                return bsipipe_error_set(BSIPIPE_ECONFIG, "engine: device %d mapped to rank %d, but ranks are "
                                         "0..%d", d, e->o.device_rank[d], e->nranks - 1);
            e->dev_rank[d] = e->o.device_rank[d];
        }
    } else {
        /* One node per rank, a TP group never spanning ranks. */
        int rc = bsipipe_map_devices_to_ranks(&e->o.pc, bsipipe_schedule_n_pipes(e->sched), e->nranks,
                                              !e->o.naive_mapping, e->dev_rank);
        if (rc < 0)
            return rc;
    }
    e->n_local = 0;
    for (int d = 0; d < e->W; d++)
        e->n_local += e->dev_rank[d] == e->rank;
    if (e->n_local == 0) {
        char map[256] = "";
        int used = 0;
        for (int d = 0; d < e->W && strlen(map) < 200; d++) {
            snprintf(map + strlen(map), sizeof map - strlen(map), " %d", e->dev_rank[d]);
            if (e->dev_rank[d] + 1 > used)
                used = e->dev_rank[d] + 1;
        }
        return bsipipe_error_set(BSIPIPE_ECONFIG, "engine: the mapping of the %d devices onto ranks (%s) leaves "
                                 "rank %d without devices: run with -np %d, or more devices (--w)",
                                 e->W, map + 1, e->rank, used);
    }
    return 0;
}

static int init_plain(void *conf) { return starpu_init(conf); }
static int init_mpi(void *conf) { return starpu_mpi_init_conf(NULL, NULL, 0, MPI_COMM_WORLD, conf); }

int engine_mpi_start(struct bsipipe_engine *e, struct starpu_conf *conf)
{
    if (!e->mpi)
        return engine_starpu_init_quiet(init_plain, conf) == 0 ? 0
                                                                : bsipipe_error_set(-EIO, "engine: starpu_init failed");
    struct engine_mpi *m = e->mpi;
    mpi_wait_mark(m, "StarPU-MPI's start (starpu_mpi_init_conf)"); /* it may hold a barrier */
    int src = engine_starpu_init_quiet(init_mpi, conf);
    mpi_wait_mark(m, NULL);
    if (src != 0)
        return bsipipe_error_set(-EIO, "engine: starpu_mpi_init_conf failed on rank %d", e->rank);
    return 0;
}

void engine_mpi_shutdown(struct bsipipe_engine *e)
{
    struct engine_mpi *m = e->mpi;
    if (!m) {
        starpu_shutdown();
        return;
    }
    engine_mpi_fault_point(e, "end");
    mpi_liveness_stop(e);
    starpu_mpi_shutdown();
}

static void free_mpi(struct bsipipe_engine *e)
{
    struct engine_mpi *m = e->mpi;
    if (!m)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        mpi_liveness_stop(e); /* a setup that failed before StarPU started */
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    if (m->comm != MPI_COMM_NULL && !fin)
        MPI_Comm_free(&m->comm);
    free(m->arrived);
    free(m->heard);
    free(m->quiet);
    free(m->recv);
    free(m->sent);
    free(m);
    e->mpi = NULL;
}


/* ---- per-iteration bookkeeping (arrays sized once per iteration, so the
 * completion callbacks get stable pointers) ---- */

static struct pending_recv *add_recv(struct engine_mpi *m, int peer_rank, int device, int peer_device,
                                     const char *what)
{
    if (m->n_recv == m->cap)
        return NULL;
    struct pending_recv *r = &m->recv[m->n_recv++];
    *r = (struct pending_recv){.m = m, .peer_rank = peer_rank, .device = device, .peer_device = peer_device};
    snprintf(r->what, sizeof r->what, "%s", what);
    return r;
}

static void recv_done(void *arg)
{
    struct pending_recv *r = arg;
    __atomic_store_n(&r->done, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->m->progress, 1, __ATOMIC_SEQ_CST);
}

static void send_done(void *arg)
{
    struct sent_bytes *s = arg;
    pthread_mutex_lock(&s->m->lock);
    if (s->sync > 0)
        s->m->sync_sent += s->bytes;
    else if (s->sync == 0)
        s->m->act_sent += s->bytes;
    pthread_mutex_unlock(&s->m->lock);
}

static size_t handle_bytes(starpu_data_handle_t h)
{
    return starpu_vector_get_nx(h) * starpu_vector_get_elemsize(h);
}

/* sync: 0 activation traffic, 1 gradient sync, -1 not plan traffic (norms). */
static int post_send(struct engine_mpi *m, starpu_data_handle_t h, int dest, int kind, long index, int sync)
{
    if (m->n_sent == m->cap)
        return bsipipe_error_set(-ENOMEM, "engine: more cross-rank sends than counted");
    struct sent_bytes *s = &m->sent[m->n_sent++];
    *s = (struct sent_bytes){.m = m, .bytes = (double)handle_bytes(h), .sync = sync};
    if (starpu_mpi_isend_detached(h, dest, make_tag(m, kind, index), MPI_COMM_WORLD, send_done, s) != 0)
        return bsipipe_error_set(-EIO, "engine: starpu_mpi_isend_detached to rank %d failed", dest);
    return 0;
}

static int post_recv(struct engine_mpi *m, starpu_data_handle_t h, int src, int kind, long index, int device,
                     int peer_device, const char *what)
{
    struct pending_recv *r = add_recv(m, src, device, peer_device, what);
    if (!r)
        return bsipipe_error_set(-ENOMEM, "engine: more cross-rank receives than counted");
    if (starpu_mpi_irecv_detached(h, src, make_tag(m, kind, index), MPI_COMM_WORLD, recv_done, r) != 0)
        return bsipipe_error_set(-EIO, "engine: starpu_mpi_irecv_detached from rank %d failed", src);
    return 0;
}

int engine_mpi_post_send(struct bsipipe_engine *e, starpu_data_handle_t h, int dest, int kind, long index, int sync)
{
    return post_send(e->mpi, h, dest, kind, index, sync);
}

int engine_mpi_post_recv(struct bsipipe_engine *e, starpu_data_handle_t h, int src, int kind, long index, int device,
                         int peer_device, const char *what)
{
    return post_recv(e->mpi, h, src, kind, index, device, peer_device, what);
}

/* Sizes the per-iteration arrays: at most one message per transfer, two per
 * SYNC side, and nranks per chunk norm. */
static int size_iteration(struct bsipipe_engine *e)
{
    struct engine_mpi *m = e->mpi;
    long n = 0;
    for (int d = 0; d < e->W; d++) {
        int n_ops;
        bsipipe_schedule_device_ops(e->sched, d, &n_ops);
        n += 2L * n_ops * e->T; /* with TP: a message per TP rank */
    }
    n += (long)e->C * e->nranks;
    if (n > m->cap) {
        free(m->recv);
        free(m->sent);
        m->recv = calloc((size_t)n, sizeof *m->recv);
        m->sent = calloc((size_t)n, sizeof *m->sent);
        if (!m->recv || !m->sent)
            return -ENOMEM;
        m->cap = n;
    }
    m->n_recv = m->n_sent = 0;
    return 0;
}

void engine_mpi_iteration_begin(struct bsipipe_engine *e)
{
    struct engine_mpi *m = e->mpi;
    if (!m)
        return;
    m->iter++;
    m->act_sent = m->sync_sent = 0;
    if (size_iteration(e) < 0)
        m->cap = 0; /* every post then fails with a clear error */
    pthread_mutex_lock(&m->lock);
    m->watching = 1;
    pthread_mutex_unlock(&m->lock);
}

int engine_mpi_iteration_end(struct bsipipe_engine *e, int rc)
{
    struct engine_mpi *m = e->mpi;
    if (!m) {
        starpu_task_wait_for_all();
        return rc;
    }
    /* Local tasks first (every receive feeds a task, so they are done too),
     * then a barrier that records who arrived, for the watchdog's report;
     * then StarPU-MPI's own wait, which finds every send completed. */
    starpu_task_wait_for_all();
    int n = e->nranks, token = 1, *in = calloc((size_t)2 * n, sizeof *in);
    MPI_Request *req = calloc((size_t)2 * n, sizeof *req);
    if (in && req) {
        for (int r = 0; r < n; r++) {
            m->arrived[r] = r == e->rank;
            req[r] = req[n + r] = MPI_REQUEST_NULL;
            if (r != e->rank) {
                MPI_Irecv(&in[r], 1, MPI_INT, r, TAG_BARRIER, m->comm, &req[r]);
                MPI_Isend(&token, 1, MPI_INT, r, TAG_BARRIER, m->comm, &req[n + r]);
            }
        }
        __atomic_store_n(&m->in_barrier, 1, __ATOMIC_SEQ_CST);
        for (int left = n - 1; left > 0;) {
            int idx = MPI_UNDEFINED, flag = 0;
            MPI_Testany(n, req, &idx, &flag, MPI_STATUS_IGNORE);
            if (flag && idx != MPI_UNDEFINED) {
                __atomic_store_n(&m->arrived[idx], 1, __ATOMIC_SEQ_CST);
                __atomic_fetch_add(&m->progress, 1, __ATOMIC_SEQ_CST);
                left--;
            } else {
                struct timespec ts = {0, 200000}; /* 0.2 ms: a barrier, not a busy loop */
                nanosleep(&ts, NULL);
            }
        }
        MPI_Waitall(n, req + n, MPI_STATUSES_IGNORE);
        __atomic_store_n(&m->in_barrier, 0, __ATOMIC_SEQ_CST);
    }
    free(in);
    free(req);
    char what[96];
    snprintf(what, sizeof what, "StarPU-MPI's barrier at the end of iteration %ld", m->iter);
    mpi_wait_mark(m, what);
    starpu_mpi_wait_for_all(MPI_COMM_WORLD);
    mpi_wait_mark(m, NULL);
    pthread_mutex_lock(&m->lock);
    m->watching = 0;
    pthread_mutex_unlock(&m->lock);
    /* Every rank returns the same outcome: the most negative code. */
    int v[2] = {rc, e->failed};
    snprintf(what, sizeof what, "the outcome of iteration %ld", m->iter);
    int arc = allreduce(e, v, 2, MPI_INT, MPI_MIN, what);
    if (arc < 0)
        return arc;
    e->failed = v[1];
    return v[0];
}

int engine_mpi_agree(struct bsipipe_engine *e, int rc)
{
    int out = rc;
    if (e->mpi) {
        int arc = allreduce(e, &out, 1, MPI_INT, MPI_MIN, "the ranks' agreement on the iteration's plan");
        if (arc < 0)
            return arc;
    }
    return out;
}

int engine_mpi_sum(struct bsipipe_engine *e, double *v, int n)
{
    return e->mpi ? allreduce(e, v, n, MPI_DOUBLE, MPI_SUM, "a sum over the ranks (losses, times, memory, traffic)") : 0;
}

int engine_mpi_max(struct bsipipe_engine *e, double *v, int n)
{
    return e->mpi ? allreduce(e, v, n, MPI_DOUBLE, MPI_MAX, "a maximum over the ranks (the iteration's span)") : 0;
}

int engine_mpi_sum_floats(struct bsipipe_engine *e, float *v, long n)
{
    for (long done = 0; e->mpi && done < n;) {
        int part = n - done > (1L << 30) ? 1 << 30 : (int)(n - done);
        int rc = allreduce(e, v + done, part, MPI_FLOAT, MPI_SUM, "the gather of the whole model over the ranks");
        if (rc < 0)
            return rc;
        done += part;
    }
    return 0;
}

void engine_mpi_local_traffic(struct bsipipe_engine *e, double act[2], double sync[2])
{
    struct engine_mpi *m = e->mpi;
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    act[1] += m->act_sent;
    sync[1] += m->sync_sent;
    pthread_mutex_unlock(&m->lock);
}

void engine_mpi_free(struct bsipipe_engine *e)
{
    free_mpi(e);
}

#else /* StarPU without MPI: one process only */

int engine_mpi_setup(struct bsipipe_engine *e)
{
    e->rank = 0;
    e->nranks = 1;
    e->n_local = e->W;
    if (e->o.mpi)
        return bsipipe_error_set(-ENOTSUP, "engine: this build has no StarPU-MPI; rebuild StarPU with --enable-mpi "
                                           "(scripts/setup.sh does) or run without --mpi");
    return 0;
}
static int init_plain(void *conf) { return starpu_init(conf); }
int engine_mpi_start(struct bsipipe_engine *e, struct starpu_conf *conf)
{
    (void)e;
    return engine_starpu_init_quiet(init_plain, conf) == 0 ? 0 : bsipipe_error_set(-EIO, "engine: starpu_init failed");
}
void engine_mpi_shutdown(struct bsipipe_engine *e) { (void)e; starpu_shutdown(); }
void engine_mpi_iteration_begin(struct bsipipe_engine *e) { (void)e; }
int engine_mpi_iteration_end(struct bsipipe_engine *e, int rc) { (void)e; starpu_task_wait_for_all(); return rc; }
int engine_mpi_agree(struct bsipipe_engine *e, int rc) { (void)e; return rc; }
int engine_mpi_agree_setup(struct bsipipe_engine *e, int rc) { (void)e; return rc; }
int engine_mpi_agree_named(struct bsipipe_engine *e, int rc, const char *failed) { (void)e; (void)failed; return rc; }
int engine_mpi_max_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what) { (void)e; (void)v; (void)n; (void)what; return 0; }
int engine_mpi_sum_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what) { (void)e; (void)v; (void)n; (void)what; return 0; }
int engine_mpi_sum(struct bsipipe_engine *e, double *v, int n) { (void)e; (void)v; (void)n; return 0; }
int engine_mpi_sum_floats(struct bsipipe_engine *e, float *v, long n) { (void)e; (void)v; (void)n; return 0; }
int engine_mpi_max(struct bsipipe_engine *e, double *v, int n) { (void)e; (void)v; (void)n; return 0; }
void engine_mpi_local_traffic(struct bsipipe_engine *e, double act[2], double sync[2]) { (void)e; (void)act; (void)sync; }
void engine_mpi_free(struct bsipipe_engine *e) { (void)e; }
void engine_mpi_fault_point(struct bsipipe_engine *e, const char *point) { (void)e; (void)point; }

#endif
