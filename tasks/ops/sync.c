/* tasks/ops/sync.c: SYNC — gradient all-reduce of a chunk's two replicas (the
 * mirrored devices of a bidirectional schedule): both end with the sum. The
 * task runs on the down replica's device and writes both gradient buffers; the
 * up replica's device runs a no-op SYNC that keeps its place in the plan.
 *
 * Buffers: 0 grads of one replica RW, 1 grads of the other RW (reduce); or
 * 0 grads R (the no-op side). On CUDA workers StarPU brings both replicas to
 * the down device's GPU; with the nccl transport and the replicas on two
 * GPUs, SYNC is an NCCL all-reduce instead (engine_cl_sync_nccl below). */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"
#ifdef BSIPIPE_HAVE_NCCL
#include "tasks/bsipipe_transport_nccl.h"
#endif

static void sync_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (engine_failed(a->e) || a->e->pass_kind == ENGINE_PASS_EVAL)
        return;
    if (a->e->o.emulate_flops > 0) { /* emulated links: the all-reduce's time; no sum */
        engine_emulate_sync(a->e, a->op.device, a->op.peer,
                            (double)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]));
        return;
    }
    float *x = (float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *y = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (size_t i = 0; i < n; i++)
        x[i] = y[i] = x[i] + y[i];
}

static void sync_peer_cpu(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

#ifdef BSIPIPE_HAVE_CUDA
static void sync_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (engine_failed(a->e) || a->e->o.emulate_flops > 0 || a->e->pass_kind == ENGINE_PASS_EVAL)
        return;
    int rc = bsipipe_cuda_sum_pair(STARPU_VECTOR_GET_NX(buffers[0]), (float *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                   (float *)STARPU_VECTOR_GET_PTR(buffers[1]), engine_cuda_stream());
    engine_report(a->e, a, rc);
}

static void sync_peer_cuda(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}
#endif

struct starpu_codelet engine_cl_sync = {
    .cpu_funcs = {sync_cpu},
    .cpu_funcs_name = {"sync_cpu"},
    BSIPIPE_CL_CUDA(sync_cuda)
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_RW},
    .model = &engine_model_sync,
    .name = "SYNC",
};

struct starpu_codelet engine_cl_sync_peer = {
    .cpu_funcs = {sync_peer_cpu},
    .cpu_funcs_name = {"sync_peer_cpu"},
    BSIPIPE_CL_CUDA(sync_peer_cuda)
    .nbuffers = 1,
    .modes = {STARPU_R},
    .model = &engine_model_sync,
    .name = "SYNC",
};

#ifdef BSIPIPE_HAVE_NCCL
/* Both mirrored devices run this on their own replica: NCCL sums the two in
 * place (x + y on both, as sync_cpu). It runs even after a failure: the
 * peer's half would otherwise wait in NCCL for ever. */
static void sync_nccl_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (a->e->o.emulate_flops > 0 || a->e->pass_kind == ENGINE_PASS_EVAL) /* both halves skip it alike */
        return;
    int rc = transport_nccl_allreduce(a->e->nccl, a->op.device, a->op.peer, (float *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                    STARPU_VECTOR_GET_NX(buffers[0]), engine_cuda_stream());
    engine_report(a->e, a, rc);
}

struct starpu_codelet engine_cl_sync_nccl = {
    .cuda_funcs = {sync_nccl_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .model = &engine_model_sync,
    .name = "SYNC",
};
#endif

/* SYNC's task: on the down replica's device both replicas' gradients (RW),
 * on the up one its own (R, the no-op); with NCCL between two GPUs each
 * side its own (RW). The down side counts the bytes of both directions. */
int engine_insert_sync(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    replica_t *mine = &e->rep[op->pipe * e->C + op->chunk];
#ifdef BSIPIPE_HAVE_NCCL
    if (engine_uses_nccl(e, op->device, op->peer)) { /* mirrors on two GPUs: each side all-reduces */
        t->cl = &engine_cl_sync_nccl;
        engine_insert_buffer(t, &mine->h_grads, STARPU_RW);
        return 0;
    }
#endif
    if (op->pipe == 0) {
        t->cl = &engine_cl_sync;
        engine_insert_buffer(t, &mine->h_grads, STARPU_RW);
        engine_insert_buffer(t, &e->rep[e->C + op->chunk].h_grads, STARPU_RW);
        if (!t->dry_run && t->descr[0].handle) /* each side sends its replica once */
            e->sync_bytes_local += 2.0 * (double)starpu_vector_get_nx(t->descr[0].handle) * sizeof(float);
    } else {
        t->cl = &engine_cl_sync_peer;
        engine_insert_buffer(t, &mine->h_grads, STARPU_R);
    }
    return 0;
}
