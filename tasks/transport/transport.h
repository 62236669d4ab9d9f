/* tasks/transport/transport.h: how a SEND, a RECV or a SYNC moves its data.
 *
 * One interface, three implementations, each in one file of this folder:
 *   mpi    (mpi.c)    one end on another StarPU-MPI rank: a marker task
 *                     holds the op's plan slot, StarPU-MPI moves the data;
 *   nccl   (nccl.c)   both ends in this process on CUDA workers of two
 *                     GPUs with a communicator: ncclSend / ncclRecv /
 *                     ncclAllReduce on the workers' streams;
 *   local  (local.c)  both ends in this process otherwise: the rendezvous
 *                     channel of bsipipe_transport.h (a SEND is not ready
 *                     before its RECV posted: StarPU tags), copies between
 *                     host or device buffers, eager sends from the producer.
 * engine_transport_for asks them in that order; the first that carries the
 * op moves it. Adding a transport is its file and one line in the table of
 * transport.c.
 *
 * What stays the op's own (tasks/ops/transfer.c, tasks/ops/sync.c): which
 * buffers a SEND, RECV or SYNC moves (engine_send_source, the receive
 * buffer of a channel, the replicas' gradients) and the sum a SYNC computes
 * (engine_cl_sync). A transport decides how they move.
 *
 * Tensor parallelism: an op of a TP group is T slices (rank r moves slice r,
 * channel ch * T + r). The mpi transport submits the T slices itself
 * (carries_tp_slices); for the others the TP builder (tp_submit.c) submits
 * each slice with the local transport's codelets, as a NCCL communicator
 * pairs GPUs of whole devices, not of TP ranks (e->nccl is not created with
 * T > 1).
 *
 * Around each iteration the engine calls every transport's hooks (a NULL
 * hook does nothing): begin before the first op is submitted; abort when
 * submission stopped half way (posted receives would wait for ever); wait
 * for every task and message to end; end once the engine stopped watching.
 * Traffic adds a transport's own bytes to the engine's counts. */
#ifndef BSIPIPE_TASKS_TRANSPORT_H
#define BSIPIPE_TASKS_TRANSPORT_H

#include "tasks/engine_internal.h"

typedef struct engine_transport {
    const char *name;
    /* 1 when this transport moves op (a SEND, RECV or SYNC of device d),
     * else 0; NULL for the last of the table, which takes the rest. */
    int (*carries)(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op);
    /* 1 when its insert functions submit the T slices of a TP op themselves. */
    int carries_tp_slices;
    /* The op's task(s), as tasks/ops/ insert functions do (engine_insert_t):
     * set t->cl and the buffers, or submit on their own and leave t->cl NULL. */
    int (*insert_send)(engine_insert_t *t);
    int (*insert_recv)(engine_insert_t *t);
    int (*insert_sync)(engine_insert_t *t);
    /* Chunk c's squared gradient norm to every process that steps it:
     * owned = 1 on the owner (its NORM task submitted), 0 elsewhere. */
    int (*norm_exchange)(struct bsipipe_engine *e, int c, int owned);
    void (*iteration_begin)(struct bsipipe_engine *e);
    void (*iteration_abort)(struct bsipipe_engine *e, const char *why);
    int (*iteration_wait)(struct bsipipe_engine *e, int rc);
    void (*iteration_end)(struct bsipipe_engine *e);
    /* act[1] / sync[1]: bytes this process sent to other processes. */
    void (*traffic)(struct bsipipe_engine *e, double act[2], double sync[2]);
} engine_transport_t;

extern const engine_transport_t engine_transport_mpi, engine_transport_nccl, engine_transport_local;

/* The transport that moves op (a SEND, RECV or SYNC of device d): chosen
 * once, at create (op_args_t.transport). */
const engine_transport_t *engine_transport_for(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op);

/* The insert functions of the SEND, RECV and SYNC op kinds (engine.c's
 * table): the op's transport (op_args_t.transport) inserts it. */
int engine_insert_send(engine_insert_t *t);
int engine_insert_recv(engine_insert_t *t);
int engine_insert_sync(engine_insert_t *t);

/* The hooks of every transport, in the table's order. */
void engine_transports_begin(struct bsipipe_engine *e);
void engine_transports_abort(struct bsipipe_engine *e, const char *why);
int engine_transports_wait(struct bsipipe_engine *e, int rc);
void engine_transports_end(struct bsipipe_engine *e);
int engine_transports_norm_exchange(struct bsipipe_engine *e, int c, int owned);
void engine_transports_traffic(struct bsipipe_engine *e, double act[2], double sync[2]);

/* The local transport's rendezvous (local.c): a RECV's post lets its SEND
 * task run (exactly once per channel and iteration); after a failure every
 * held SEND may go and fail (the watchdog). Its codelets serve the TP
 * builder's slices. */
void transport_local_post_notify(struct bsipipe_engine *e, long ch);
void transport_local_release_posts(struct bsipipe_engine *e);
extern struct starpu_codelet engine_cl_send, engine_cl_recv;
/* Eager sends (ops/forward.c, ops/backward.c): at the end of an F or B whose
 * output goes to another device, offer it to the channel in place of a
 * SEND task (bsipipe_transport_offer): copied at once if its RECV has
 * posted, else by the RECV's post. `out` is the op's output buffer. Does
 * nothing for an op without a send or when sends are not eager. */
void engine_send_eager(op_args_t *a, void *out);
/* An eager send settled (engine_send_eager's completion, given to the
 * channel; engine.c calls it for offers no RECV took). */
void engine_eager_done(void *send_args);
/* The floor's stand-in for an eager send's meeting on channel ch: side 1
 * the producer, 2 the RECV; the second to arrive releases the RECV. */
void engine_floor_meet(struct bsipipe_engine *e, long ch, int side);

/* The mpi transport's messages (engine_mpi.c: tags from the op's identity
 * and the iteration; `sync`: 0 activation, 1 gradient sync, -1 neither). */
enum { ENGINE_MPI_TAG_CHANNEL = 1, ENGINE_MPI_TAG_SYNC_UP = 2, ENGINE_MPI_TAG_SYNC_DOWN = 3, ENGINE_MPI_TAG_NORM = 4 };
int engine_mpi_post_send(struct bsipipe_engine *e, starpu_data_handle_t h, int dest, int kind, long index, int sync);
int engine_mpi_post_recv(struct bsipipe_engine *e, starpu_data_handle_t h, int src, int kind, long index, int device,
                         int peer_device, const char *what);

#endif
