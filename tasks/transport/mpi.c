/* tasks/transport/mpi.c: the `mpi` transport — SEND, RECV and SYNC whose two
 * ends are on different StarPU-MPI ranks (docs/scaleout.md). Every rank
 * plans the same schedule and walks the same submission order; each submits
 * its own end:
 *   SEND  a marker task in the device's plan slot (RW on the source, so
 *         StarPU orders the send after it), then starpu_mpi_isend_detached;
 *   RECV  starpu_mpi_irecv_detached into the receive buffer, posted at
 *         submission (the earliest possible receive: StarPU-MPI matches the
 *         message whenever it arrives), then a marker task in the RECV's
 *         slot; the consumer's data dependency waits for the data;
 *   SYNC  the up replica's rank sends its gradient to the down replica's
 *         rank, which sums (engine_cl_sync, as a local SYNC, so the result
 *         is bit-identical) and sends the sum back;
 *   norms each chunk's squared gradient norm is computed once on the down
 *         replica's rank and sent to every rank, for the STEPs' global-norm
 *         clipping (instead of shipping whole gradients).
 * With tensor parallelism an op is T messages, one per TP rank: its
 * [len/T, d] slice (tag index channel * T + r) or its gradient shard
 * (chunk * T + r), each with its slot task on rank r's worker. The TP group
 * itself never spans processes. The messages, their tags, the watchdog and
 * the iteration's barrier are engine_mpi.c's.
 *
 * Buffers: marker none; SEND marker 0 source RW; SYNC up marker 0 grads RW. */
#include "tasks/transport/transport.h"
#include "tasks/engine_cuda.h"
#include "base/bsipipe_error.h"

#ifdef BSIPIPE_HAVE_STARPUMPI
#include <stdint.h>

static void slot_only(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

static struct starpu_codelet cl_marker = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 0,
    .model = &engine_model_mpi_recv,
    .name = "RECV",
};

static struct starpu_codelet cl_send_marker = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_send,
    .name = "SEND",
};

static struct starpu_codelet cl_sync_up = {
    .cpu_funcs = {slot_only},
    .cpu_funcs_name = {"slot_only"},
    BSIPIPE_CL_CUDA(slot_only)
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_mpi_sync,
    .name = "SYNC",
};

/* SEND, RECV or SYNC with its peer on another rank. */
static int mpi_carries(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op)
{
    return e->mpi && op->peer >= 0 && e->dev_rank[op->peer] != e->dev_rank[d];
}

/* The slot task of op i of device d (TP rank r's with tensor parallelism). */
static int submit_slot(engine_insert_t *t, int r, struct starpu_codelet *cl, struct starpu_data_descr *descr, int n)
{
    struct bsipipe_engine *e = t->e;
    return e->T > 1 ? engine_tp_submit_rank(e, t->d, t->i, r, cl, descr, n)
                    : engine_task_submit(e, t->d, t->i, cl, descr, n);
}

static int mpi_insert_send(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    int peer_rank = e->dev_rank[op->peer], rc;
    for (int r = 0; r < e->T; r++) {
        starpu_data_handle_t src = engine_send_source(e, op, r);
        if (!src)
            return bsipipe_error_set(-EINVAL, "engine: %s has no source buffer", t->a->name);
        if (t->dry_run) { /* two uses: the marker task, then the isend */
            engine_buffer_use(e, src, 1);
            engine_buffer_use(e, src, 1);
            continue;
        }
        /* The marker holds the plan slot; RW orders the isend after it. */
        struct starpu_data_descr descr = {src, STARPU_RW};
        if ((rc = submit_slot(t, r, &cl_send_marker, &descr, 1)) < 0 ||
            (rc = engine_mpi_post_send(e, src, peer_rank, ENGINE_MPI_TAG_CHANNEL, (long)op->channel * e->T + r, 0)) < 0)
            return rc;
        engine_buffer_use(e, src, 0); /* the last use: unregistered after the send completes */
    }
    return 0;
}

static int mpi_insert_recv(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    int peer_rank = e->dev_rank[op->peer], rc;
    for (int r = 0; r < e->T; r++) {
        long ch = (long)op->channel * e->T + r;
        starpu_data_handle_t dst = e->h_recv[ch];
        if (!dst)
            return bsipipe_error_set(-EINVAL, "engine: %s has no receive buffer", t->a->name);
        if (t->dry_run)
            continue; /* its consumer's use is counted there */
        if ((rc = engine_mpi_post_recv(e, dst, peer_rank, ENGINE_MPI_TAG_CHANNEL, ch, t->d, op->peer, t->a->name)) < 0 ||
            (rc = submit_slot(t, r, &cl_marker, NULL, 0)) < 0)
            return rc;
    }
    return 0;
}

/* Mirrored replicas on two ranks: the up side sends its gradient and gets
 * the sum back; the down side receives it into a buffer, sums, sends back. */
static int mpi_insert_sync(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    int peer_rank = e->dev_rank[op->peer], T = e->T, rc;
    for (int r = 0; r < T && !t->dry_run; r++) {
        long ck = (long)op->chunk * T + r, n_up = e->rep[e->C + op->chunk].n;
        starpu_data_handle_t down = T > 1 ? engine_tp_rep_grads(e, op->chunk, r, NULL) : e->rep[op->chunk].h_grads;
        starpu_data_handle_t up = T > 1 ? engine_tp_rep_grads(e, e->C + op->chunk, r, &n_up)
                                        : e->rep[e->C + op->chunk].h_grads;
        struct starpu_data_descr descr[2];
        if (op->pipe == 1) {
            descr[0] = (struct starpu_data_descr){up, STARPU_RW};
            if ((rc = submit_slot(t, r, &cl_sync_up, descr, 1)) < 0 ||
                (rc = engine_mpi_post_send(e, up, peer_rank, ENGINE_MPI_TAG_SYNC_UP, ck, 1)) < 0 ||
                (rc = engine_mpi_post_recv(e, up, peer_rank, ENGINE_MPI_TAG_SYNC_DOWN, ck, t->d, op->peer,
                                           t->a->name)) < 0)
                return rc;
            continue;
        }
        starpu_data_handle_t in;
        starpu_vector_data_register(&in, -1, 0, (uint32_t)n_up, sizeof(float));
        if ((rc = engine_mpi_post_recv(e, in, peer_rank, ENGINE_MPI_TAG_SYNC_UP, ck, t->d, op->peer, t->a->name)) < 0)
            return rc;
        descr[0] = (struct starpu_data_descr){down, STARPU_RW};
        descr[1] = (struct starpu_data_descr){in, STARPU_RW};
        if ((rc = submit_slot(t, r, &engine_cl_sync, descr, 2)) < 0 ||
            (rc = engine_mpi_post_send(e, in, peer_rank, ENGINE_MPI_TAG_SYNC_DOWN, ck, 1)) < 0)
            return rc;
        starpu_data_unregister_submit(in);
    }
    return 0;
}

static int mpi_norm_exchange(struct bsipipe_engine *e, int c, int owned)
{
    if (!e->mpi)
        return 0;
    int owner_dev = e->rep[c].device, owner = e->dev_rank[owner_dev], rc = 0;
    if (!owned) {
        char what[64];
        snprintf(what, sizeof what, "gradient norm of chunk %d", c);
        return engine_mpi_post_recv(e, e->h_norm[c], owner, ENGINE_MPI_TAG_NORM, c, -1, owner_dev, what);
    }
    for (int r = 0; r < e->nranks && rc == 0; r++)
        if (r != e->rank)
            rc = engine_mpi_post_send(e, e->h_norm[c], r, ENGINE_MPI_TAG_NORM, c, -1);
    return rc;
}

const engine_transport_t engine_transport_mpi = {
    .name = "mpi",
    .carries = mpi_carries,
    .carries_tp_slices = 1,
    .insert_send = mpi_insert_send,
    .insert_recv = mpi_insert_recv,
    .insert_sync = mpi_insert_sync,
    .norm_exchange = mpi_norm_exchange,
    .iteration_begin = engine_mpi_iteration_begin,
    .iteration_wait = engine_mpi_iteration_end,
    .traffic = engine_mpi_local_traffic,
};

#else /* StarPU without MPI: one process, nothing crosses ranks; the
       * iteration still ends when every task has */

static int mpi_carries(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op)
{
    (void)e;
    (void)d;
    (void)op;
    return 0;
}

const engine_transport_t engine_transport_mpi = {
    .name = "mpi",
    .carries = mpi_carries,
    .iteration_wait = engine_mpi_iteration_end,
};
#endif
