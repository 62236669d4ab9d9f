/* cl_sync.c: SYNC — gradient all-reduce of a chunk's two replicas (the
 * mirrored devices of a bidirectional schedule): both end with the sum. The
 * task runs on the down replica's device and writes both gradient buffers; the
 * up replica's device runs a no-op SYNC that keeps its place in the plan.
 *
 * Buffers: 0 grads of one replica RW, 1 grads of the other RW (reduce); or
 * 0 grads R (the no-op side). */
#include "tasks/engine_internal.h"

static void sync_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (engine_failed(a->e) || a->e->o.emulate_flops > 0)
        return;
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

struct starpu_codelet bsipipe_cl_sync = {
    .cpu_funcs = {sync_cpu},
    .cpu_funcs_name = {"sync_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_RW},
    .name = "SYNC",
};

struct starpu_codelet bsipipe_cl_sync_peer = {
    .cpu_funcs = {sync_peer_cpu},
    .cpu_funcs_name = {"sync_peer_cpu"},
    .nbuffers = 1,
    .modes = {STARPU_R},
    .name = "SYNC",
};
