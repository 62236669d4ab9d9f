/* cl_forward.c: F — forward of one subsequence through one chunk (with the
 * embedding on the first chunk, and the head's loss and output gradient on
 * the last). CPU and CUDA functions side by side (same buffers, same
 * arithmetic up to rounding; the CUDA one queues on the worker's stream).
 *
 * Buffers: 0 params R, 1 input R (tokens of the micro-batch on chunk 0, else
 * the piece's activation), 2 x_out W, 3 stash W, 4 kv RW, 5 work SCRATCH;
 * last chunk also 6 targets R, 7 grads RW, 8 dy W, 9 loss RW. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"

static void forward_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    const float *params = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *x_out = (float *)STARPU_VECTOR_GET_PTR(buffers[2]);
    float *stash = (float *)STARPU_VECTOR_GET_PTR(buffers[3]);
    float *kv = (float *)STARPU_VECTOR_GET_PTR(buffers[4]);
    float *work = (float *)STARPU_VECTOR_GET_PTR(buffers[5]);
    const float *x_in = x_out;
    int rc = 0;
    if (engine_emulate(e, &a->op)) {
        engine_mem(e, a->op.device, 4.0 * STARPU_VECTOR_GET_NX(buffers[3]) +
                                        (a->op.sub == 0 ? 4.0 * STARPU_VECTOR_GET_NX(buffers[4]) : 0));
        return;
    }
    /* The stash lives until the backward; the KV cache from the first piece. */
    engine_mem(e, a->op.device, 4.0 * STARPU_VECTOR_GET_NX(buffers[3]) +
                                    (a->op.sub == 0 ? 4.0 * STARPU_VECTOR_GET_NX(buffers[4]) : 0));
    if (a->op.chunk == 0) {
        const int *tokens = (const int *)STARPU_VECTOR_GET_PTR(buffers[1]);
        rc = bsipipe_embed_forward(D, params, tokens + a->start, a->start, a->len, x_out);
    } else {
        x_in = (const float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    }
    if (rc == 0)
        rc = bsipipe_chunk_forward(D, a->l0, a->l1, a->start, a->len,
                                   params + engine_replica_offset(e, a, a->l0), x_in, x_out, stash, kv);
    if (rc == 0 && a->op.chunk == e->C - 1) {
        const int *targets = (const int *)STARPU_VECTOR_GET_PTR(buffers[6]);
        float *grads = (float *)STARPU_VECTOR_GET_PTR(buffers[7]);
        float *dy = (float *)STARPU_VECTOR_GET_PTR(buffers[8]);
        double *loss = (double *)STARPU_VECTOR_GET_PTR(buffers[9]);
        long head = engine_replica_offset(e, a, D->n_layers);
        double piece_loss = 0;
        /* The loss is the mean over the iteration's m*S tokens. */
        rc = bsipipe_head_forward_backward(D, params + head, grads + head, a->len, x_out, targets + a->start,
                                           1.0 / ((double)e->m * e->S), &piece_loss, dy, work);
        *loss += piece_loss;
    }
    engine_report(e, a, rc);
}

#ifdef BSIPIPE_HAVE_CUDA
static void forward_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    cudaStream_t s = engine_cuda_stream();
    cublasHandle_t h = engine_cuda_blas();
    const float *params = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *x_out = (float *)STARPU_VECTOR_GET_PTR(buffers[2]);
    float *stash = (float *)STARPU_VECTOR_GET_PTR(buffers[3]);
    float *kv = (float *)STARPU_VECTOR_GET_PTR(buffers[4]);
    float *work = (float *)STARPU_VECTOR_GET_PTR(buffers[5]);
    const float *x_in = x_out;
    int rc = 0;
    engine_mem(e, a->op.device, 4.0 * STARPU_VECTOR_GET_NX(buffers[3]) +
                                    (a->op.sub == 0 ? 4.0 * STARPU_VECTOR_GET_NX(buffers[4]) : 0));
    if (engine_emulate(e, &a->op))
        return;
    if (a->op.chunk == 0) {
        const int *tokens = (const int *)STARPU_VECTOR_GET_PTR(buffers[1]);
        rc = bsipipe_cuda_embed_forward(D, params, tokens + a->start, a->start, a->len, x_out, s);
    } else {
        x_in = (const float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    }
    if (rc == 0)
        rc = bsipipe_cuda_chunk_forward(D, a->l0, a->l1, a->start, a->len,
                                        params + engine_replica_offset(e, a, a->l0), x_in, x_out, stash, kv, s, h);
    if (rc == 0 && a->op.chunk == e->C - 1) {
        const int *targets = (const int *)STARPU_VECTOR_GET_PTR(buffers[6]);
        float *grads = (float *)STARPU_VECTOR_GET_PTR(buffers[7]);
        float *dy = (float *)STARPU_VECTOR_GET_PTR(buffers[8]);
        double *loss = (double *)STARPU_VECTOR_GET_PTR(buffers[9]);
        long head = engine_replica_offset(e, a, D->n_layers);
        double *piece_loss = NULL; /* the kernel overwrites its loss: add it to the device's sum after */
        rc = bsipipe_cuda_scratch_alloc((void **)&piece_loss, sizeof(double), s);
        if (rc == 0)
            rc = bsipipe_cuda_head_forward_backward(D, params + head, grads + head, a->len, x_out,
                                                    targets + a->start, 1.0 / ((double)e->m * e->S), piece_loss,
                                                    dy, work, s, h);
        if (rc == 0)
            rc = bsipipe_cuda_add_f64(loss, piece_loss, s);
        if (piece_loss) {
            int rc_free = bsipipe_cuda_scratch_free(piece_loss, s);
            rc = rc ? rc : rc_free;
        }
    }
    engine_report(e, a, rc);
}
#endif

struct starpu_codelet bsipipe_cl_forward = {
    .cpu_funcs = {forward_cpu},
    .cpu_funcs_name = {"forward_cpu"},
    BSIPIPE_CL_CUDA(forward_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "F",
};
