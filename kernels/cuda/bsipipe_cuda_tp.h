/* kernels/cuda/bsipipe_cuda_tp.h: CUDA twins of the tensor-parallel segments
 * (kernels/bsipipe_tp.h, docs/tensor-parallel.md).
 *
 * Same arguments in the same order as the CPU segments, then a stream and a
 * cuBLAS handle (NULL where the segment has no matrix product); same buffer
 * layouts (the rank's shard, stash, kv, dkv, wstash, work; gath / part / red
 * and the head's ce), so a CUDA codelet consumes what a CPU one produced. The
 * collective the caller runs after each segment is the CPU one's (comment
 * after each declaration in bsipipe_tp_decl.h).
 *
 * Pointers: `d` and `tp` are host structs; every other pointer is DEVICE
 * memory, including tokens / targets (int) and ce (3 len doubles). Calls are
 * asynchronous on `stream`; the handle's stream is set to it.
 *
 * Argument checks are the CPU segments' on the host (dimensions, degree,
 * piece, NULL buffers, with bsipipe_error_detail), but token and target
 * VALUES are not checked (that would need a synchronisation): a token outside
 * the vocabulary gives a NaN row of the embedding's partial on every rank, a
 * target outside it a NaN loss.
 *
 * Numerics: the product mode of bsipipe_cuda_set_gemm_mode, except BF16S
 * (bf16 stash storage), which the sharded stash layout does not have:
 * -EINVAL. Weight gradients of the norms and the embedding use atomics (not
 * bitwise reproducible run to run), as in bsipipe_cuda_kernels.h.
 *
 * Return: 0, -EINVAL (bad arguments), -EIO (a launch or cuBLAS call
 * failed), -ENOMEM (attention backward's stream-ordered scratch). */
#ifndef BSIPIPE_CUDA_TP_H
#define BSIPIPE_CUDA_TP_H

#include "kernels/bsipipe_tp.h"

#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layer segments ---- */
int bsipipe_cuda_tp_layer_fwd_norm1(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, const float *x, float *stash, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_fwd_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start,
    int len, const float *layer, const float *gath, float *stash, float *kv, float *part,
    cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_fwd_norm2(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, const float *red, float *stash, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_fwd_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, const float *gath, float *stash, float *part, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_layer_fwd_out(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *stash, const float *red, float *y, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_bwd_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, float *grads, const float *stash, const float *gdy, const float *gath,
    float *part, float *work, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_bwd_norm2(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, float *grads, const float *stash, const float *dy, const float *red,
    float *dx2, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_bwd_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start,
    int len, const float *layer, float *grads, const float *stash, const float *kv, float *dkv,
    const float *gdy, const float *gath, float *part, float *work, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_layer_bwd_norm1(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, float *grads, const float *stash, const float *dx2, const float *red,
    float *dx, cudaStream_t s, cublasHandle_t hb);

/* ---- split backward (ZeroBubble B / W) ---- */
int bsipipe_cuda_tp_layer_bwd_mlp_x(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *layer, const float *stash, const float *gdy, float *part, float *work,
    float *wst, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_bwd_attn_x(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    int start, int len, const float *layer, const float *stash, const float *kv, float *dkv,
    const float *gdy, float *part, float *work, float *wst, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_layer_wgrad_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    float *grads, const float *stash, const float *wst, const float *gath, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_layer_wgrad_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    int len, float *grads, const float *stash, const float *wst, const float *gath,
    cudaStream_t s, cublasHandle_t hb);

/* ---- vocabulary-parallel embedding ---- */
int bsipipe_cuda_tp_embed_fwd_vocab(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *embed, const int *tokens, int len, float *part, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_embed_fwd_pos(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *embed, int start, int len, float *x, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_embed_bwd_pos(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    float *embed_grad, int start, int len, const float *dx, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_embed_bwd_vocab(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    float *embed_grad, const int *tokens, int len, const float *gath, cudaStream_t s,
    cublasHandle_t hb);

/* ---- vocabulary-parallel head and cross-entropy ---- */
int bsipipe_cuda_tp_head_fwd_norm(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *head, int len, const float *x, float *xn, float *st, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_head_fwd_logits(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *head, int len, const float *gath, float *logits, double *ce, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_head_ce_sums(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
    const float *logits, const int *targets, double *ce, cudaStream_t s, cublasHandle_t hb);
int bsipipe_cuda_tp_head_bwd_logits(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *head, float *head_grad, int len, const float *gath, const int *targets,
    double grad_scale, const double *ce, float *logits, float *part, cudaStream_t s,
    cublasHandle_t hb);
int bsipipe_cuda_tp_head_bwd_norm(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
    const float *head, float *head_grad, int len, const float *x, const float *st,
    const float *red, float *dx, cudaStream_t s, cublasHandle_t hb);

/* *loss += bsipipe_tp_ce_loss(len, ce): the piece's cross-entropy sum from the
 * reduced statistics, in the CPU's order (up to the device's log, within an
 * ulp of the host's). loss: one device double. */
int bsipipe_cuda_tp_ce_loss_add(int len, const double *ce, double *loss, cudaStream_t s);

/* *out (device double) = sum of squares of g[0..n), in a fixed order (one
 * block, no atomics): the same bits on every call, so every rank of a TP
 * group that computes a norm gets the same clip factor. For the STEP, not
 * for speed. */
int bsipipe_cuda_tp_sumsq(long n, const float *g, double *out, cudaStream_t s);

/* ---- collectives over the ranks' device buffers (one process, UVA) ----
 * The bits of kernels/bsipipe_tp.h's in-process ones: all-gather copies,
 * the reductions add (or take the max) in rank order. send / bufs: `size`
 * device pointers (a host array; any device of the process, peer access or
 * copies through UVA), at most 16. */
int bsipipe_cuda_tp_all_gather_rank(int size, int rank, const void *const *send, void *recv, long count,
    bsipipe_tp_dtype_t t, cudaStream_t s);
int bsipipe_cuda_tp_reduce_scatter_rank(int size, int rank, const void *const *send, void *recv, long count,
    bsipipe_tp_dtype_t t, cudaStream_t s);
int bsipipe_cuda_tp_all_reduce_rank(int size, const void *const *in, void *out, long count,
    bsipipe_tp_dtype_t t, bsipipe_tp_op_t op, cudaStream_t s);
/* The all-reduce in place: every bufs[q][0..count) becomes the reduction. */
int bsipipe_cuda_tp_all_reduce_inplace(int size, void *const *bufs, long count, bsipipe_tp_dtype_t t,
    bsipipe_tp_op_t op, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
