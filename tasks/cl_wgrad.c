/* cl_wgrad.c: W — the weight-gradient half of a split backward (ZeroBubble).
 *
 * The CPU kernels compute a chunk's input and weight gradients in one call,
 * so the B task of a split-backward schedule does both and this task only
 * keeps W's place in the plan (and its access to the replica's gradients,
 * which orders it after its B). Loss and gradients are exact; the time a W
 * would take is folded into its B. A kernel-level split is open work.
 *
 * Buffers: 0 grads RW, 1 the piece's stash R (released here, as the planner
 * counts it: a W reads its forward's activations). */
#include "tasks/engine_internal.h"

static void wgrad_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (engine_failed(a->e))
        return;
    engine_emulate(a->e, &a->op); /* the W share of the backward's time */
    engine_mem(a->e, a->op.device, -4.0 * STARPU_VECTOR_GET_NX(buffers[1]));
}

struct starpu_codelet bsipipe_cl_wgrad = {
    .cpu_funcs = {wgrad_cpu},
    .cpu_funcs_name = {"wgrad_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .name = "W",
};
