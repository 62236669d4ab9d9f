/* kernels/cuda/bsipipe_cuda_attention_tc.h: causal attention over the KV prefix on the
 * tensor cores (nvcuda::wmma, bf16 operands, fp32 accumulation), flash-attention style.
 * Used by bsipipe_cuda_attention_forward / _backward when the matrix products are bf16
 * (BSIPIPE_CUDA_GEMM_BF16, _BF16S): Q, K, V, dO, P and dS enter the products as bf16;
 * scores, the online softmax, the log-sum-exp and every accumulator stay fp32; the
 * buffers (fp32, same layouts) and the results' meaning are those of the fp32 kernels.
 * Not installed. Arguments as bsipipe_cuda_attention_forward / _backward (checked by
 * them); scale = 1/sqrt(head_dim); dvec[h, i] = rowsum(dO * O) (the caller computes it).
 * Return 0, -ENOSPC (the device grants less shared memory per block than the kernel needs,
 * up to 154 KB at head_dim 128: nothing was launched, use the fp32 kernels) or -EIO (a
 * launch failed). */
#ifndef BSIPIPE_CUDA_ATTENTION_TC_H
#define BSIPIPE_CUDA_ATTENTION_TC_H

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

int bsipipe_cuda_attention_tc_forward(int n_heads, int head_dim, int start, int len,
                                      const float *q, int ldq, const float *k, const float *v,
                                      int ldk, float *o, int ldo, float *lse, float scale,
                                      cudaStream_t s);

int bsipipe_cuda_attention_tc_backward(int n_heads, int head_dim, int start, int len,
                                       const float *q, int ldq, const float *k, const float *v,
                                       int ldk, const float *do_, int ldo, const float *lse,
                                       const float *dvec, float *dq, int lddq, float *dk,
                                       float *dv, float scale, cudaStream_t s);
/* The same with K and V stored in bf16 (the kv buffer in BF16S); other buffers fp32. */
int bsipipe_cuda_attention_tc_forward_kv16(int n_heads, int head_dim, int start, int len,
                                           const float *q, int ldq, const __nv_bfloat16 *k,
                                           const __nv_bfloat16 *v, int ldk, float *o, int ldo,
                                           float *lse, float scale, cudaStream_t s);
int bsipipe_cuda_attention_tc_backward_kv16(int n_heads, int head_dim, int start, int len,
                                            const float *q, int ldq, const __nv_bfloat16 *k,
                                            const __nv_bfloat16 *v, int ldk, const float *do_,
                                            int ldo, const float *lse, const float *dvec,
                                            float *dq, int lddq, float *dk, float *dv,
                                            float scale, cudaStream_t s);
#endif
