/* cl_backward.c: B — backward of one subsequence through one chunk (with the
 * embedding's on the first chunk). Pieces of a micro-batch run in reverse:
 * the first backward of a micro-batch on a chunk (the last piece) clears the
 * K/V gradient buffer that later pieces' backwards accumulate into.
 *
 * Buffers: 0 params R, 1 grads RW, 2 dy R (gradient of the piece's output),
 * 3 dx W (gradient for chunk-1; on chunk 0: the tokens, R), 4 stash R, 5 kv R,
 * 6 dkv RW, 7 work SCRATCH; split backward (ZB-H1) also 8 wstash W, the output
 * gradients its W needs. */
#include "tasks/engine_internal.h"

#include <string.h>

static void backward_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    const float *params = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *grads = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    const float *dy = (const float *)STARPU_VECTOR_GET_PTR(buffers[2]);
    const float *stash = (const float *)STARPU_VECTOR_GET_PTR(buffers[4]);
    const float *kv = (const float *)STARPU_VECTOR_GET_PTR(buffers[5]);
    float *dkv = (float *)STARPU_VECTOR_GET_PTR(buffers[6]);
    float *work = (float *)STARPU_VECTOR_GET_PTR(buffers[7]);
    long lay = engine_replica_offset(e, a, a->l0);
    float *dx;
    if (a->op.chunk == 0) /* the input gradient only feeds the embedding */
        dx = work + bsipipe_model_work_size(D, a->len);
    else
        dx = (float *)STARPU_VECTOR_GET_PTR(buffers[3]);
    double kv_bytes = 4.0 * STARPU_VECTOR_GET_NX(buffers[6]);
    if (a->op.sub == e->k - 1) {
        engine_mem(e, a->op.device, kv_bytes); /* the K/V gradient of the micro-batch */
        if (e->o.emulate_flops <= 0) /* emulated: nothing reads it, and faulting its pages in is not device time */
            memset(dkv, 0, sizeof(float) * (size_t)STARPU_VECTOR_GET_NX(buffers[6]));
    }
    int rc = 0;
    if (engine_emulate(e, &a->op))
        rc = 0;
    else if (e->split) /* ZB-H1: input gradient now, weight gradient in W */
        rc = bsipipe_chunk_backward_input(D, a->l0, a->l1, a->start, a->len, params + lay, grads + lay, dy, dx, stash,
                                          kv, dkv, (float *)STARPU_VECTOR_GET_PTR(buffers[8]), work);
    else
        rc = bsipipe_chunk_backward(D, a->l0, a->l1, a->start, a->len, params + lay, grads + lay, dy, dx, stash, kv,
                                    dkv, work);
    if (rc == 0 && a->op.chunk == 0 && e->o.emulate_flops <= 0) {
        const int *tokens = (const int *)STARPU_VECTOR_GET_PTR(buffers[3]);
        rc = bsipipe_embed_backward(D, grads, tokens + a->start, a->start, a->len, dx);
    }
    /* Released: the stash (unless a W still needs it), and after the first
     * piece's backward the KV cache and its gradient. */
    if (!bsipipe_schedule_kind_traits(e->o.pc.schedule).split_backward)
        engine_mem(e, a->op.device, -4.0 * STARPU_VECTOR_GET_NX(buffers[4]));
    if (a->op.sub == 0)
        engine_mem(e, a->op.device, -2 * kv_bytes);
    engine_report(e, a, rc);
}

struct starpu_codelet bsipipe_cl_backward = {
    .cpu_funcs = {backward_cpu},
    .cpu_funcs_name = {"backward_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "B",
};
