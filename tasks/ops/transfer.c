/* tasks/ops/transfer.c: SEND and RECV over the engine's transport (local:
 * rendezvous copy between devices of this process). RECV posts its buffer,
 * notifies its SEND's tag and returns; its task completes when the data
 * lands (one end dependency, released by the transport). The SEND task is
 * not ready before that tag (engine_watchdog.c), so when it runs the
 * receive is posted: it copies at once and never waits on its worker.
 *
 * On CUDA workers the same rendezvous moves device buffers: the sender copies
 * with cudaMemcpyAsync on its stream (same GPU, or a peer GPU) and waits for
 * it before releasing the RECV. With the nccl transport, a pair on two GPUs
 * uses ncclSend / ncclRecv on the workers' streams instead (no rendezvous:
 * NCCL pairs them; RECV releases its end dependency at once and StarPU ends
 * it when its stream has received).
 *
 * Blocking receives (bsipipe_engine_set_blocking_recv, the ablation): RECV
 * then waits on its worker until the data has landed, so its device goes no
 * further, as under NCCL-like semantics.
 *
 * Buffers: SEND 0 source R; RECV 0 destination W. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"
#include "base/bsipipe_error.h"
#ifdef BSIPIPE_HAVE_NCCL
#include "tasks/bsipipe_transport_nccl.h"
#endif


static void send_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    engine_emulate_send(e, a->op.device, a->op.peer, (double)bytes); /* emulated links: the bytes' time */
    int rc = bsipipe_transport_send(e->transport, a->op.channel, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                    bytes, a->op.device, a->name + 5 /* past "SEND " */);
    if (rc == -ETIMEDOUT) /* the watchdog fired: the transport's report names the waits */
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, a, rc);
}

static void recv_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = bsipipe_transport_post(e->transport, a->op.channel, (void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes,
                                    starpu_task_get_current(), a->op.device, a->name + 5 /* past "RECV " */);
    if (!e->eager) /* its SEND task may run now (also after an error: it reports) */
        engine_post_notify(e, a->op.channel);
    if (rc == 0 && e->blocking_recv && bsipipe_transport_wait_filled(e->transport, a->op.channel) == -ETIMEDOUT) {
        engine_fail(e, BSIPIPE_EDEADLOCK); /* the transport's report names the waits */
        return;
    }
    engine_report(e, a, rc);
}

#ifdef BSIPIPE_HAVE_CUDA
/* The rendezvous copy between device buffers: it has landed on return. */
static int send_copy_cuda(void *dst, const void *src, size_t bytes, void *arg)
{
    cudaStream_t s = *(cudaStream_t *)arg;
    int rc = bsipipe_cuda_copy(dst, src, bytes, s);
    return rc ? rc : bsipipe_cuda_stream_wait(s);
}

static void send_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    const void *src = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    cudaStream_t s = engine_cuda_stream();
    int rc;
#ifdef BSIPIPE_HAVE_NCCL
    if (engine_uses_nccl(e, a->op.device, a->op.peer)) {
        engine_report(e, a, transport_nccl_send(e->nccl, a->op.device, a->op.peer, src, bytes, s));
        return;
    }
#endif
    rc = bsipipe_transport_send_copy(e->transport, a->op.channel, src, bytes, a->op.device, a->name + 5,
                                     send_copy_cuda, &s);
    if (rc == -ETIMEDOUT)
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, a, rc);
}

static void recv_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    void *dst = (void *)STARPU_VECTOR_GET_PTR(buffers[0]);
#ifdef BSIPIPE_HAVE_NCCL
    if (engine_uses_nccl(e, a->op.device, a->op.peer)) {
        int rc = transport_nccl_recv(e->nccl, a->op.device, a->op.peer, dst, bytes, engine_cuda_stream());
        starpu_task_end_dep_release(starpu_task_get_current()); /* the stream now carries the wait */
        engine_report(e, a, rc);
        return;
    }
#endif
    int rc = bsipipe_transport_post(e->transport, a->op.channel, dst, bytes, starpu_task_get_current(),
                                    a->op.device, a->name + 5);
    engine_post_notify(e, a->op.channel);
    engine_report(e, a, rc);
}
#endif

struct starpu_codelet engine_cl_send = {
    .cpu_funcs = {send_cpu},
    .cpu_funcs_name = {"send_cpu"},
    BSIPIPE_CL_CUDA(send_cuda)
    .nbuffers = 1,
    .modes = {STARPU_R},
    .model = &engine_model_send,
    .name = "SEND",
};

struct starpu_codelet engine_cl_recv = {
    .cpu_funcs = {recv_cpu},
    .cpu_funcs_name = {"recv_cpu"},
    BSIPIPE_CL_CUDA(recv_cuda)
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &engine_model_recv,
    .name = "RECV",
};

/* SEND's task: the buffer it sends. An eager send (engine_send_eager) has no
 * task: its producer offers the buffer; only its bytes and its use of the
 * buffer are counted here. */
int engine_insert_send(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    op_args_t *a = t->a;
    const bsipipe_op_t *op = &a->op;
    if (e->eager && !t->dry_run) { /* sent by its producer, which may have freed the buffer already */
        e->act_bytes_local += (double)engine_piece_len(e, op->sub) * e->d * sizeof(float);
        if (e->pool_active && a->send_handle) /* staged if need be: the buffer is free once its producer ends */
            engine_buffer_used(e, a->send_handle, t->d, e->slot_of[t->d][t->i]);
        t->cl = NULL;
        return 0;
    }
    long ai = act_index(e, op->mb, op->sub, op->chunk);
    t->cl = &engine_cl_send;
    t->flags = ENGINE_TASK_RENDEZVOUS; /* ready once its RECV posted (a tag; not under blocking sends) */
    engine_insert_read(t, op->tensor == BSIPIPE_TENSOR_ACT ? e->h_x_out[ai] : e->h_dx[ai]);
    if (!t->dry_run && t->descr[0].handle)
        e->act_bytes_local += (double)starpu_vector_get_nx(t->descr[0].handle) * sizeof(float);
    return 0;
}

/* RECV's task: its channel's receive buffer, written. */
int engine_insert_recv(engine_insert_t *t)
{
    t->cl = &engine_cl_recv;
    t->flags = ENGINE_TASK_END_DEP; /* ends when the data lands (the transport releases it) */
    engine_insert_buffer(t, &t->e->h_recv[t->a->op.channel], STARPU_W);
    return 0;
}
