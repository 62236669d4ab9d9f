/* kernels/cuda/bsipipe_cuda_kernels.h: fp32 CUDA twins of the CPU kernels
 * (kernels/bsipipe_kernels.h).
 *
 * Same arguments, same buffer layouts (params, grads, stash, kv, dkv, work,
 * wstash, head work: kernels/bsipipe_model.h and kernels/cpu/internal.h), plus
 * a stream and a cuBLAS handle. Under StarPU: stream =
 * starpu_cuda_get_local_stream(), handle = starpu_cublas_get_local_handle();
 * every call is asynchronous on `stream` (codelets can be STARPU_CUDA_ASYNC):
 * nothing synchronises, so a buffer produced by one call may be consumed by
 * the next call on the same stream. The handle's stream is set to `stream`.
 *
 * Pointers: `d` and `h` (dims, AdamW hyper-parameters) are host structs;
 * every other pointer is DEVICE memory, including tokens/targets (int) and
 * the loss / sum-of-squares outputs (double, written, not accumulated).
 * Argument checks are those of the CPU kernels on the host; token and target
 * values are NOT checked (that would need a synchronisation): an
 * out-of-range token gives a NaN row (embedding) or a NaN loss (head).
 *
 * Return: 0, -EINVAL (bad arguments; also head_dim > 128 for attention),
 * -ENODEV (library built without CUDA), -EIO (a launch or cuBLAS call
 * failed), -ENOMEM (attention backward's small stream-ordered scratch; in BF16S
 * mode, a GEMM's bf16 scratch).
 *
 * Numerics: fp32 storage; matrix products by cuBLAS in the mode chosen by
 * bsipipe_cuda_set_gemm_mode (default FP32: cublasSgemm, no tensor-core
 * down-conversion); norm statistics and the cross-entropy in double as on
 * the CPU. Results equal the CPU kernels' up to rounding (reduction orders
 * differ; dW of the norms, embedding backward and the loss use atomics, so
 * they are not bitwise reproducible run to run).
 */
#ifndef BSIPIPE_CUDA_KERNELS_H
#define BSIPIPE_CUDA_KERNELS_H

#include "kernels/bsipipe_kernels.h"

#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Matrix-product mode (process-wide; set before launching kernels).
 *  FP32 : cublasSgemm (CUBLAS_COMPUTE_32F), the reference-accuracy mode.
 *  TF32 : cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores).
 *  BF16 : cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_16BF (inputs rounded to bf16
 *         on the tensor cores, fp32 accumulation and fp32 storage).
 *  BF16S: bf16 STORAGE of the matrix products' operands: before each GEMM both
 *         operands (weights and activations) are converted to bf16 copies in
 *         stream-ordered scratch (cudaMallocAsync on the handle's stream; the
 *         weights are converted again at every GEMM, not cached), then
 *         cublasGemmEx with CUDA_R_16BF A and B, fp32 C, CUBLAS_COMPUTE_32F
 *         (fp32 accumulation). The STASH is stored in bf16 as well (the
 *         activations a layer keeps for its backward; its statistics stay
 *         fp32): about half of bsipipe_model_stash_size, see
 *         bsipipe_cuda_stash_size; so are K and V (bsipipe_cuda_kv_size).
 *         Master weights, gradients, dkv, the work
 *         buffers and every elementwise kernel stay fp32; each layer computes
 *         in fp32 scratch (cudaMallocAsync) and its backward sees the
 *         activations rounded to bf16. Chunk calls may also fail with -ENOMEM
 *         (scratch). Only run in the CPU emulation so far.
 * In BF16 and BF16S attention runs on the tensor cores as well. */
typedef enum {
    BSIPIPE_CUDA_GEMM_FP32 = 0,
    BSIPIPE_CUDA_GEMM_TF32 = 1,
    BSIPIPE_CUDA_GEMM_BF16 = 2,
    BSIPIPE_CUDA_GEMM_BF16S = 3
} bsipipe_cuda_gemm_mode_t;
int bsipipe_cuda_set_gemm_mode(bsipipe_cuda_gemm_mode_t mode); /* 0 or -EINVAL */
bsipipe_cuda_gemm_mode_t bsipipe_cuda_get_gemm_mode(void);
const char *bsipipe_cuda_gemm_mode_name(bsipipe_cuda_gemm_mode_t mode);

/* ---- the stash ----
 * Floats of ONE layer's stash for a piece of len tokens when the kernels run in `mode`:
 * bsipipe_model_stash_size in FP32 / TF32 / BF16, about half in BF16S (bf16 activations
 * plus fp32 statistics). A chunk's stash buffer holds (l1 - l0) of these, layer after
 * layer. -EINVAL for bad dims. */
long bsipipe_cuda_stash_size(const bsipipe_model_dims_t *d, int len, bsipipe_cuda_gemm_mode_t mode);
/* One layer's stash between the CPU kernels' fp32 layout (bsipipe_model_stash_size floats)
 * and the current mode's layout (plain copies unless BF16S). Device pointers; asynchronous
 * on stream. For tests and inspection. */
int bsipipe_cuda_stash_pack(const bsipipe_model_dims_t *d, int len, const float *fp32_stash,
    float *stash, cudaStream_t stream);
int bsipipe_cuda_stash_unpack(const bsipipe_model_dims_t *d, int len, const float *stash,
    float *fp32_stash, cudaStream_t stream);

/* Floats of ONE layer's kv (K and V of the whole sequence) in `mode`: bsipipe_model_kv_size,
 * half in BF16S (K and V stored in bf16; dkv stays fp32, bsipipe_model_kv_size). A chunk's
 * kv holds (l1 - l0) of these. -EINVAL for bad dims. */
long bsipipe_cuda_kv_size(const bsipipe_model_dims_t *d, bsipipe_cuda_gemm_mode_t mode);
/* One layer's kv between the fp32 layout and the current mode's (copies unless BF16S). */
int bsipipe_cuda_kv_pack(const bsipipe_model_dims_t *d, const float *fp32_kv, float *kv,
    cudaStream_t stream);
int bsipipe_cuda_kv_unpack(const bsipipe_model_dims_t *d, const float *kv, float *fp32_kv,
    cudaStream_t stream);

/* ---- embedding ---- */
int bsipipe_cuda_embed_forward(const bsipipe_model_dims_t *d, const float *embed,
    const int *tokens, int start, int len, float *x_out, cudaStream_t stream);
int bsipipe_cuda_embed_backward(const bsipipe_model_dims_t *d, float *embed_grad,
    const int *tokens, int start, int len, const float *dx, cudaStream_t stream);

/* ---- chunk of layers [l0, l1) ---- (stash: (l1 - l0) * bsipipe_cuda_stash_size floats, kv:
 * (l1 - l0) * bsipipe_cuda_kv_size, dkv: (l1 - l0) * bsipipe_model_kv_size) */
int bsipipe_cuda_chunk_forward(const bsipipe_model_dims_t *d, int l0, int l1, int start,
    int len, const float *layers, const float *x_in, float *x_out, float *stash, float *kv,
    cudaStream_t stream, cublasHandle_t handle);
int bsipipe_cuda_chunk_backward(const bsipipe_model_dims_t *d, int l0, int l1, int start,
    int len, const float *layers, float *grads, const float *dy, float *dx,
    const float *stash, const float *kv, float *dkv, float *work, cudaStream_t stream,
    cublasHandle_t handle);
int bsipipe_cuda_chunk_backward_input(const bsipipe_model_dims_t *d, int l0, int l1,
    int start, int len, const float *layers, float *grads, const float *dy, float *dx,
    const float *stash, const float *kv, float *dkv, float *wstash, float *work,
    cudaStream_t stream, cublasHandle_t handle);
int bsipipe_cuda_chunk_backward_weight(const bsipipe_model_dims_t *d, int l0, int l1,
    int start, int len, float *grads, const float *stash, const float *wstash,
    cudaStream_t stream, cublasHandle_t handle);

/* ---- head ---- (loss: device double, = SUM of CE over the piece) */
int bsipipe_cuda_head_forward(const bsipipe_model_dims_t *d, const float *head, int len,
    const float *x, const int *targets, float *logits, double *loss, float *work,
    cudaStream_t stream, cublasHandle_t handle);
int bsipipe_cuda_head_forward_backward(const bsipipe_model_dims_t *d, const float *head,
    float *head_grad, int len, const float *x, const int *targets, double grad_scale,
    double *loss, float *dx, float *work, cudaStream_t stream, cublasHandle_t handle);

/* ---- attention alone (head_dim <= 128) ---- */
int bsipipe_cuda_attention_forward(int n_heads, int head_dim, int start, int len,
    const float *q, int ldq, const float *k, const float *v, int ldk, float *o, int ldo,
    float *lse, cudaStream_t stream);
int bsipipe_cuda_attention_backward(int n_heads, int head_dim, int start, int len,
    const float *q, int ldq, const float *k, const float *v, int ldk, const float *o,
    const float *do_, int ldo, const float *lse, float *dq, int lddq, float *dk, float *dv,
    cudaStream_t stream);

/* ---- optimizer ---- */
/* *out (device double) = sum of squares of g[0..n). */
int bsipipe_cuda_sumsq(long n, const float *g, double *out, cudaStream_t stream);
int bsipipe_cuda_adamw_update(const bsipipe_adamw_t *h, long t, long n, float *p,
    const float *g, double grad_mul, int decay, float *m, float *v, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
