/* tasks/transport/nccl.c: the `nccl` transport — SEND, RECV and SYNC
 * between devices of this process on CUDA workers of two different GPUs
 * that have a communicator (tasks/bsipipe_transport_nccl.h; --transport
 * nccl, one process, no tensor parallelism). ncclSend / ncclRecv and
 * ncclAllReduce run on the workers' streams: NCCL pairs the two calls, so
 * there is no rendezvous, and StarPU ends each task when its stream is done.
 * A pair on one GPU has no communicator: the local transport moves it.
 *
 * Buffers: SEND 0 source R; RECV 0 destination W; SYNC 0 this side's
 * replica's gradients RW (both sides end with the sum). */
#include "tasks/transport/transport.h"
#include "tasks/engine_cuda.h"

#ifdef BSIPIPE_HAVE_NCCL
#include "tasks/bsipipe_transport_nccl.h"

static void send_nccl_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    engine_report(a->e, a, transport_nccl_send(a->e->nccl, a->op.device, a->op.peer,
                                               (const void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes,
                                               engine_cuda_stream()));
}

static void recv_nccl_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = transport_nccl_recv(a->e->nccl, a->op.device, a->op.peer, (void *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                 bytes, engine_cuda_stream());
    starpu_task_end_dep_release(starpu_task_get_current()); /* the stream now carries the wait */
    engine_report(a->e, a, rc);
}

/* Both mirrored devices run this on their own replica: NCCL sums the two in
 * place (x + y on both, as engine_cl_sync). It runs even after a failure:
 * the peer's half would otherwise wait in NCCL for ever. */
static void sync_nccl_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (a->e->o.emulate_flops > 0 || a->e->pass_kind == ENGINE_PASS_EVAL) /* both halves skip it alike */
        return;
    int rc = transport_nccl_allreduce(a->e->nccl, a->op.device, a->op.peer, (float *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                      STARPU_VECTOR_GET_NX(buffers[0]), engine_cuda_stream());
    engine_report(a->e, a, rc);
}

static struct starpu_codelet cl_send_nccl = {
    .cuda_funcs = {send_nccl_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .nbuffers = 1,
    .modes = {STARPU_R},
    .model = &engine_model_send,
    .name = "SEND",
};

static struct starpu_codelet cl_recv_nccl = {
    .cuda_funcs = {recv_nccl_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &engine_model_recv,
    .name = "RECV",
};

static struct starpu_codelet cl_sync_nccl = {
    .cuda_funcs = {sync_nccl_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_sync,
    .name = "SYNC",
};

static int nccl_carries(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op)
{
    return e->nccl && op->peer >= 0 && engine_local(e, op->peer) && transport_nccl_has(e->nccl, d, op->peer);
}

static int nccl_insert_send(engine_insert_t *t)
{
    t->cl = &cl_send_nccl;
    engine_insert_send_source(t);
    return 0;
}

/* Ends when its stream has received (the codelet releases the end
 * dependency once the receive is queued). */
static int nccl_insert_recv(engine_insert_t *t)
{
    t->cl = &cl_recv_nccl;
    t->flags = ENGINE_TASK_END_DEP;
    engine_insert_buffer(t, &t->e->h_recv[t->a->op.channel], STARPU_W);
    return 0;
}

static int nccl_insert_sync(engine_insert_t *t)
{
    const bsipipe_op_t *op = &t->a->op;
    t->cl = &cl_sync_nccl;
    engine_insert_buffer(t, &t->e->rep[op->pipe * t->e->C + op->chunk].h_grads, STARPU_RW);
    return 0;
}

const engine_transport_t engine_transport_nccl = {
    .name = "nccl",
    .carries = nccl_carries,
    .insert_send = nccl_insert_send,
    .insert_recv = nccl_insert_recv,
    .insert_sync = nccl_insert_sync,
};

#else /* built without NCCL: it carries nothing */

static int nccl_carries(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op)
{
    (void)e;
    (void)d;
    (void)op;
    return 0;
}

const engine_transport_t engine_transport_nccl = {.name = "nccl", .carries = nccl_carries};
#endif
