/* tasks/mpi_internal.h: what engine_mpi.c (MPI's start and end, the
 * messages, the collectives, the iteration's barrier) and
 * engine_mpi_liveness.c (the heartbeats, the liveness watchdog, the
 * deadlines of MPI's start and end) share. Only with StarPU-MPI. */
#ifndef BSIPIPE_TASKS_MPI_INTERNAL_H
#define BSIPIPE_TASKS_MPI_INTERNAL_H

#ifdef BSIPIPE_HAVE_STARPUMPI
#include "tasks/engine_internal.h"

#include <mpi.h>
#include <pthread.h>

/* Our own messages on struct engine_mpi's comm. */
enum { TAG_BARRIER = 1, TAG_HEARTBEAT = 2 };

/* One message this rank waits for (for the watchdog's report). */
struct pending_recv {
    struct engine_mpi *m;
    int done;
    int peer_rank, device, peer_device;
    char what[64];
};

/* Bytes of one cross-rank send, counted when StarPU-MPI completes it. */
struct sent_bytes {
    struct engine_mpi *m;
    double bytes;
    int sync;
};

struct engine_mpi {
    struct bsipipe_engine *e;
    long iter;                           /* for tags */
    /* Per iteration: */
    struct pending_recv *recv;           /* one per cross-rank message */
    long n_recv, cap;                    /* cap: entries of recv and of sent */
    struct sent_bytes *sent;
    long n_sent;
    double act_sent, sync_sent;          /* this rank's bytes to other ranks, last iteration */
    long progress;                       /* completed receives */
    /* End of iteration: a barrier that knows who has not arrived. */
    MPI_Comm comm;                       /* a duplicate, for our own messages */
    int *arrived;                        /* per rank, this iteration */
    int in_barrier;
    /* Liveness: heartbeats for the engine's life, the watchdog during
     * iterations. */
    pthread_t liveness;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int live, watching, stop;
    double *heard;                       /* per rank: when its last heartbeat came */
    int *quiet;                          /* per rank: its last heartbeat (0) came */
    /* A blocking step the main thread is in (a collective, StarPU-MPI's
     * start or barrier), under lock: the liveness thread aborts the job when
     * it has lasted the watchdog time and some rank has gone silent as long. */
    char waiting[128];
    double wait_since;
};

/* A deadline where no heartbeat can exist yet (MPI_Init_thread,
 * MPI_Finalize): a thread that ends this process when the call has not
 * returned in `limit` seconds, so that mpirun ends the job instead of it
 * hanging. */
struct mpi_guard {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    int done, started;
    double limit;
    const char *what;
};
void mpi_guard_start(struct mpi_guard *g, const char *what, double limit);
void mpi_guard_end(struct mpi_guard *g);

/* Seconds on CLOCK_MONOTONIC. */
double mpi_now_s(void);
/* The main thread enters (what) or leaves (NULL) a blocking step: the
 * liveness thread aborts the job when it lasts the watchdog time and some
 * rank has gone silent as long. */
void mpi_wait_mark(struct engine_mpi *m, const char *what);
/* The first other rank silent for `limit` seconds at time t, or -1. */
int mpi_silent_rank(const struct bsipipe_engine *e, double t, double limit);
/* The liveness thread (pthread_create's start routine, arg: the engine),
 * and its stop: this rank's last heartbeat, then every rank's. */
void *mpi_liveness_main(void *arg);
void mpi_liveness_stop(struct bsipipe_engine *e);

#endif
#endif
