/* tasks/ops/backward.c: B — backward of one subsequence through one chunk (with the
 * embedding's on the first chunk). Pieces of a micro-batch run in reverse:
 * the first backward of a micro-batch on a chunk (the last piece) clears the
 * K/V gradient buffer that later pieces' backwards accumulate into.
 *
 * Buffers: 0 params R, 1 grads RW, 2 dy R (gradient of the piece's output),
 * 3 dx W (gradient for chunk-1; on chunk 0: the tokens, R), 4 stash R, 5 kv R,
 * 6 dkv RW, 7 work SCRATCH; split backward (ZB-H1) also 8 wstash W, the output
 * gradients its W needs. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "tasks/engine_cuda.h"

#include <string.h>

#define BUF(i, type) ((type)STARPU_VECTOR_GET_PTR(buffers[i]))

/* The backward's buffers by name (one layout for CPU and CUDA). */
struct backward_io {
    const float *params, *dy, *stash, *kv;
    const int *tokens;   /* chunk 0: for the embedding's gradient */
    float *grads, *dx, *dkv, *work, *wstash;
    long layers;         /* offset of the chunk's first layer in the replica */
    size_t dkv_floats;
    int clear_dkv;       /* first backward of the micro-batch on this chunk */
};

/* Names the buffers; the K/V gradient of the micro-batch is live from its
 * first backward (the last piece) on. */
static struct backward_io backward_begin(const op_args_t *a, void *buffers[])
{
    struct bsipipe_engine *e = a->e;
    struct backward_io io = {.params = BUF(0, const float *), .grads = BUF(1, float *), .dy = BUF(2, const float *),
                             .stash = BUF(4, const float *), .kv = BUF(5, const float *), .dkv = BUF(6, float *),
                             .work = BUF(7, float *), .layers = engine_replica_offset(e, a, a->l0),
                             .dkv_floats = STARPU_VECTOR_GET_NX(buffers[6]), .clear_dkv = a->op.sub == e->k - 1};
    if (a->op.chunk == 0) { /* the input gradient only feeds the embedding */
        io.tokens = BUF(3, const int *);
        io.dx = io.work + bsipipe_model_work_size(&e->dims, a->len);
    } else {
        io.dx = BUF(3, float *);
    }
    if (e->split)
        io.wstash = BUF(8, float *);
    if (io.clear_dkv)
        engine_mem(e, a->op.device, 4.0 * (double)io.dkv_floats);
    return io;
}

/* Released: the stash (unless a W still needs it), and after the first
 * piece's backward the KV cache and its gradient. */
static void backward_end(const op_args_t *a, void *buffers[], int rc)
{
    struct bsipipe_engine *e = a->e;
    if (!e->split)
        engine_mem(e, a->op.device, -4.0 * STARPU_VECTOR_GET_NX(buffers[4]));
    if (a->op.sub == 0) /* kv (half the size of dkv when it is bf16) and dkv */
        engine_mem(e, a->op.device,
                   -4.0 * ((double)STARPU_VECTOR_GET_NX(buffers[5]) + (double)STARPU_VECTOR_GET_NX(buffers[6])));
    engine_report(e, a, rc);
}

static void backward_cpu_run(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    struct backward_io io = backward_begin(a, buffers);
    int rc = 0;
    if (e->pass_kind == ENGINE_PASS_EVAL) { /* a validation pass runs forward only: the slot and its buffers, no work */
        backward_end(a, buffers, 0);
        return;
    }
    if (io.clear_dkv && e->o.emulate_flops <= 0) /* emulated: nothing reads it, and faulting its pages in is not device time */
        memset(io.dkv, 0, sizeof(float) * io.dkv_floats);
    if (engine_emulate(e, a))
        rc = 0;
    else if (e->split) /* ZB-H1: input gradient now, weight gradient in W */
        rc = bsipipe_chunk_backward_input(D, a->l0, a->l1, a->start, a->len, io.params + io.layers,
                                          io.grads + io.layers, io.dy, io.dx, io.stash, io.kv, io.dkv, io.wstash,
                                          io.work);
    else
        rc = bsipipe_chunk_backward(D, a->l0, a->l1, a->start, a->len, io.params + io.layers, io.grads + io.layers,
                                    io.dy, io.dx, io.stash, io.kv, io.dkv, io.work);
    if (rc == 0 && io.tokens && e->o.emulate_flops <= 0)
        rc = bsipipe_embed_backward(D, io.grads, io.tokens + a->start, a->start, a->len, io.dx);
    backward_end(a, buffers, rc);
}

/* The backward, then its input gradient to chunk - 1's device (an eager send). */
static void backward_cpu(void *buffers[], void *cl_arg)
{
    backward_cpu_run(buffers, cl_arg);
    engine_send_eager(cl_arg, buffers[3]);
}

#ifdef BSIPIPE_HAVE_CUDA
/* The CUDA twin of backward_cpu, queued on the worker's stream. */
static void backward_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    cudaStream_t s = engine_cuda_stream();
    cublasHandle_t h = engine_cuda_blas();
    struct backward_io io = backward_begin(a, buffers);
    int rc = 0;
    if (e->pass_kind == ENGINE_PASS_EVAL) { /* forward only, as on the CPU */
        backward_end(a, buffers, 0);
        return;
    }
    if (io.clear_dkv)
        rc = bsipipe_cuda_zero(io.dkv, sizeof(float) * io.dkv_floats, s);
    if (rc == 0 && !engine_emulate(e, a)) {
        if (e->split)
            rc = bsipipe_cuda_chunk_backward_input(D, a->l0, a->l1, a->start, a->len, io.params + io.layers,
                                                   io.grads + io.layers, io.dy, io.dx, io.stash, io.kv, io.dkv,
                                                   io.wstash, io.work, s, h);
        else
            rc = bsipipe_cuda_chunk_backward(D, a->l0, a->l1, a->start, a->len, io.params + io.layers,
                                             io.grads + io.layers, io.dy, io.dx, io.stash, io.kv, io.dkv, io.work,
                                             s, h);
    }
    if (rc == 0 && io.tokens && e->o.emulate_flops <= 0)
        rc = bsipipe_cuda_embed_backward(D, io.grads, io.tokens + a->start, a->start, a->len, io.dx, s);
    backward_end(a, buffers, rc);
}
#endif

struct starpu_codelet engine_cl_backward = {
    .cpu_funcs = {backward_cpu},
    .cpu_funcs_name = {"backward_cpu"},
    BSIPIPE_CL_CUDA(backward_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_bwd,
    .name = "B",
};

/* B's task: the buffers listed above, in that order. */
int engine_insert_backward(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const op_args_t *a = t->a;
    const bsipipe_op_t *op = &a->op;
    replica_t *r = &e->rep[op->pipe * e->C + op->chunk];
    long ai = act_index(e, op->mb, op->sub, op->chunk);
    t->cl = &engine_cl_backward;
    engine_insert_buffer(t, &r->h_params, STARPU_R);
    engine_insert_buffer(t, &r->h_grads, STARPU_RW);
    engine_insert_read(t, op->chunk == e->C - 1 ? e->h_dy[ai] : engine_input_handle(e, a));
    if (op->chunk == 0)
        engine_insert_buffer(t, &e->h_tokens[op->mb], STARPU_R);
    else
        engine_insert_buffer(t, &e->h_dx[ai], STARPU_W);
    if (e->eager && a->send_op >= 0 && !t->dry_run)
        e->args[t->d][a->send_op].send_handle = e->h_dx[ai];
    engine_insert_buffer(t, &e->h_stash[ai], STARPU_R);
    engine_insert_buffer(t, &e->h_kv[op->mb * e->C + op->chunk], STARPU_R);
    /* The first backward (last piece) clears the K/V gradient: write only. */
    engine_insert_buffer(t, &e->h_dkv[op->mb * e->C + op->chunk], op->sub == e->k - 1 ? STARPU_W : STARPU_RW);
    engine_insert_buffer(t, &e->h_work, STARPU_SCRATCH);
    if (e->split)
        engine_insert_buffer(t, &e->h_wstash[ai], STARPU_W);
    return 0;
}
