/* tasks/ops/wgrad.c: W — the weight-gradient half of a split backward (ZeroBubble):
 * the matrix gradients of the chunk's layers from the forward's stash and the
 * output gradients its B saved; run in the order of the B's it gives bitwise
 * the fused backward's gradients.
 *
 * Buffers: 0 grads RW, 1 stash R (released here, as the planner counts it),
 * 2 wstash R. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"


/* The W of op a on the CPU or (cuda) on the worker's stream; the stash is
 * released either way, as the planner counts it. */
static void wgrad_run(void *buffers[], op_args_t *a, int cuda)
{
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    int rc = 0;
    if (e->pass_kind != ENGINE_PASS_EVAL && !engine_emulate(e, a)) { /* a validation pass: forward only */
        float *grads = (float *)STARPU_VECTOR_GET_PTR(buffers[0]) + engine_replica_offset(e, a, a->l0);
        const float *stash = (const float *)STARPU_VECTOR_GET_PTR(buffers[1]);
        const float *wstash = (const float *)STARPU_VECTOR_GET_PTR(buffers[2]);
#ifdef BSIPIPE_HAVE_CUDA
        if (cuda)
            rc = bsipipe_cuda_chunk_backward_weight(&e->dims, a->l0, a->l1, a->start, a->len, grads, stash, wstash,
                                                    engine_cuda_stream(), engine_cuda_blas());
        else
#endif
            rc = bsipipe_chunk_backward_weight(&e->dims, a->l0, a->l1, a->start, a->len, grads, stash, wstash);
    }
    (void)cuda;
    engine_mem(e, a->op.device, -4.0 * STARPU_VECTOR_GET_NX(buffers[1]));
    engine_report(e, a, rc);
}

static void wgrad_cpu(void *buffers[], void *cl_arg)
{
    wgrad_run(buffers, cl_arg, 0);
}

#ifdef BSIPIPE_HAVE_CUDA
static void wgrad_cuda(void *buffers[], void *cl_arg)
{
    wgrad_run(buffers, cl_arg, 1);
}
#endif

struct starpu_codelet engine_cl_wgrad = {
    .cpu_funcs = {wgrad_cpu},
    .cpu_funcs_name = {"wgrad_cpu"},
    BSIPIPE_CL_CUDA(wgrad_cuda)
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
    .model = &engine_model_wgrad,
    .name = "W",
};

/* W's task: the buffers listed above, in that order. */
int engine_insert_wgrad(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    long ai = act_index(e, op->mb, op->sub, op->chunk);
    t->cl = &engine_cl_wgrad;
    engine_insert_buffer(t, &e->rep[op->pipe * e->C + op->chunk].h_grads, STARPU_RW);
    engine_insert_buffer(t, &e->h_stash[ai], STARPU_R);
    engine_insert_buffer(t, &e->h_wstash[ai], STARPU_R);
    return 0;
}
