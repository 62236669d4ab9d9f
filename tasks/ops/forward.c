/* tasks/ops/forward.c: F — forward of one subsequence through one chunk (with the
 * embedding on the first chunk, and the head's loss and output gradient on
 * the last). CPU and CUDA functions side by side (same buffers, same
 * arithmetic up to rounding; the CUDA one queues on the worker's stream).
 *
 * Buffers: 0 params R, 1 input R (tokens of the micro-batch on chunk 0, else
 * the piece's activation), 2 x_out W, 3 stash W, 4 kv RW, 5 work SCRATCH;
 * last chunk also 6 targets R, 7 grads RW, 8 dy W, 9 loss RW. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "tasks/engine_cuda.h"

#define BUF(i, type) ((type)STARPU_VECTOR_GET_PTR(buffers[i]))

/* The forward's buffers by name (one layout for CPU and CUDA). */
struct forward_io {
    const float *params, *x_in;      /* x_in: the activation entering the chunk */
    const int *tokens, *targets;     /* first / last chunk */
    float *x_out, *stash, *kv, *work;
    float *grads, *dy;               /* last chunk: head gradient, output gradient */
    double *loss;                    /* last chunk: the device's loss sum */
};

/* Names the buffers and counts the memory the planner counts from here on:
 * the stash until the backward, the KV cache from the first piece. */
static struct forward_io forward_begin(const op_args_t *a, void *buffers[])
{
    struct bsipipe_engine *e = a->e;
    struct forward_io io = {.params = BUF(0, const float *), .x_out = BUF(2, float *), .stash = BUF(3, float *),
                            .kv = BUF(4, float *), .work = BUF(5, float *)};
    if (a->op.chunk == 0) {
        io.tokens = BUF(1, const int *);
        io.x_in = io.x_out; /* the embedding writes it, the layers read it */
    } else {
        io.x_in = BUF(1, const float *);
    }
    if (a->op.chunk == e->C - 1) {
        io.targets = BUF(6, const int *);
        io.grads = BUF(7, float *);
        io.dy = BUF(8, float *);
        io.loss = BUF(9, double *);
    }
    engine_mem(e, a->op.device, 4.0 * STARPU_VECTOR_GET_NX(buffers[3]) +
                                    (a->op.sub == 0 ? 4.0 * STARPU_VECTOR_GET_NX(buffers[4]) : 0));
    return io;
}

static void forward_cpu_run(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e))
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    struct forward_io io = forward_begin(a, buffers);
    if (engine_emulate(e, a))
        return;
    int rc = 0;
    if (a->op.chunk == 0)
        rc = bsipipe_embed_forward(D, io.params, io.tokens + a->start, a->start, a->len, io.x_out);
    if (rc == 0)
        rc = bsipipe_chunk_forward(D, a->l0, a->l1, a->start, a->len, io.params + engine_replica_offset(e, a, a->l0),
                                   io.x_in, io.x_out, io.stash, io.kv);
    if (rc == 0 && io.loss) {
        long head = engine_replica_offset(e, a, D->n_layers);
        double piece_loss = 0;
        /* The loss is the mean over the iteration's m*S tokens; a
         * validation pass needs the loss only. */
        if (e->pass_kind == ENGINE_PASS_EVAL)
            rc = bsipipe_head_forward(D, io.params + head, a->len, io.x_out, io.targets + a->start, NULL, &piece_loss,
                                      io.work);
        else
            rc = bsipipe_head_forward_backward(D, io.params + head, io.grads + head, a->len, io.x_out,
                                               io.targets + a->start, 1.0 / ((double)e->m * e->S), &piece_loss,
                                               io.dy, io.work);
        *io.loss += piece_loss;
    }
    engine_report(e, a, rc);
}

/* The forward, then its output to chunk + 1's device (an eager send). */
static void forward_cpu(void *buffers[], void *cl_arg)
{
    forward_cpu_run(buffers, cl_arg);
    engine_send_eager(cl_arg, buffers[2]);
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
    struct forward_io io = forward_begin(a, buffers);
    if (engine_emulate(e, a))
        return;
    int rc = 0;
    if (a->op.chunk == 0)
        rc = bsipipe_cuda_embed_forward(D, io.params, io.tokens + a->start, a->start, a->len, io.x_out, s);
    if (rc == 0)
        rc = bsipipe_cuda_chunk_forward(D, a->l0, a->l1, a->start, a->len,
                                        io.params + engine_replica_offset(e, a, a->l0), io.x_in, io.x_out, io.stash,
                                        io.kv, s, h);
    if (rc == 0 && io.loss) {
        long head = engine_replica_offset(e, a, D->n_layers);
        double *piece_loss = NULL; /* the kernel overwrites its loss: add it to the device's sum after */
        rc = bsipipe_cuda_scratch_alloc((void **)&piece_loss, sizeof(double), s);
        if (rc == 0 && e->pass_kind == ENGINE_PASS_EVAL) /* validation: the loss only */
            rc = bsipipe_cuda_head_forward(D, io.params + head, a->len, io.x_out, io.targets + a->start, NULL,
                                           piece_loss, io.work, s, h);
        else if (rc == 0)
            rc = bsipipe_cuda_head_forward_backward(D, io.params + head, io.grads + head, a->len, io.x_out,
                                                    io.targets + a->start, 1.0 / ((double)e->m * e->S), piece_loss,
                                                    io.dy, io.work, s, h);
        if (rc == 0)
            rc = bsipipe_cuda_add_f64(io.loss, piece_loss, s);
        if (piece_loss) {
            int rc_free = bsipipe_cuda_scratch_free(piece_loss, s);
            rc = rc ? rc : rc_free;
        }
    }
    engine_report(e, a, rc);
}
#endif

struct starpu_codelet engine_cl_forward = {
    .cpu_funcs = {forward_cpu},
    .cpu_funcs_name = {"forward_cpu"},
    BSIPIPE_CL_CUDA(forward_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_fwd,
    .name = "F",
};

/* The same forward on the last chunk (head and loss included): a codelet of
 * its own only so that its longer time has a performance model of its own. */
struct starpu_codelet engine_cl_forward_head = {
    .cpu_funcs = {forward_cpu},
    .cpu_funcs_name = {"forward_cpu"},
    BSIPIPE_CL_CUDA(forward_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_fwd_head,
    .name = "F",
};

/* F's task: the buffers listed above, in that order. */
int engine_insert_forward(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const op_args_t *a = t->a;
    const bsipipe_op_t *op = &a->op;
    replica_t *r = &e->rep[op->pipe * e->C + op->chunk];
    long ai = act_index(e, op->mb, op->sub, op->chunk);
    int head = op->chunk == e->C - 1;
    t->cl = head ? &engine_cl_forward_head : &engine_cl_forward;
    engine_insert_buffer(t, &r->h_params, STARPU_R);
    engine_insert_read(t, op->chunk == 0 ? e->h_tokens[op->mb] : engine_input_handle(e, a));
    engine_insert_buffer(t, &e->h_x_out[ai], STARPU_W);
    if (e->eager && a->send_op >= 0 && !t->dry_run) /* its SEND goes out at its end (engine_send_eager) */
        e->args[t->d][a->send_op].send_handle = e->h_x_out[ai];
    engine_insert_buffer(t, &e->h_stash[ai], STARPU_W);
    /* The first piece only writes the K/V cache (its buffer is fresh). */
    engine_insert_buffer(t, &e->h_kv[op->mb * e->C + op->chunk], op->sub == 0 ? STARPU_W : STARPU_RW);
    engine_insert_buffer(t, &e->h_work, STARPU_SCRATCH);
    if (head) {
        engine_insert_buffer(t, &e->h_targets[op->mb], STARPU_R);
        engine_insert_buffer(t, &r->h_grads, STARPU_RW);
        engine_insert_buffer(t, &e->h_dy[ai], STARPU_W);
        engine_insert_buffer(t, &e->h_loss[t->d], STARPU_RW);
    }
    return 0;
}
