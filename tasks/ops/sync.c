/* tasks/ops/sync.c: SYNC — gradient all-reduce of a chunk's two replicas (the
 * mirrored devices of a bidirectional schedule): both end with the sum. The
 * task runs on the down replica's device and writes both gradient buffers; the
 * up replica's device runs a no-op SYNC that keeps its place in the plan.
 *
 * Buffers: 0 grads of one replica RW, 1 grads of the other RW (reduce); or
 * 0 grads R (the no-op side). On CUDA workers StarPU brings both replicas to
 * the down device's GPU. How the replicas meet is the transport's
 * (tasks/transport/): the local one submits these two codelets, the mpi one
 * sums with engine_cl_sync on the down replica's rank, the nccl one
 * all-reduces instead; the insert function is the transports' dispatch
 * (engine_insert_sync in transport.c). */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"

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
