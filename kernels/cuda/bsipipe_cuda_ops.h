/* kernels/cuda/bsipipe_cuda_ops.h: the small device operations the CUDA
 * codelets (tasks/ops/<op>.c) need beside the kernels: clearing a buffer, adding
 * a loss, the two-replica gradient sum of SYNC, copies, stream-ordered
 * scratch. Plain C API so that the codelet files stay C.
 *
 * Every call is asynchronous on `stream` except bsipipe_cuda_stream_wait and
 * bsipipe_cuda_copy_to_host, which wait for the stream. Pointers are device
 * pointers unless named host. Return: 0, -EINVAL (bad arguments), -EIO (a
 * CUDA call failed; the CUDA error is in bsipipe_error_detail()), -ENOMEM. */
#ifndef BSIPIPE_CUDA_OPS_H
#define BSIPIPE_CUDA_OPS_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* p[0..bytes) = 0. */
int bsipipe_cuda_zero(void *p, size_t bytes, cudaStream_t stream);

/* *acc += *x (one double each). */
int bsipipe_cuda_add_f64(double *acc, const double *x, cudaStream_t stream);

/* x[i] = y[i] = x[i] + y[i]: SYNC of two replicas in one memory. */
int bsipipe_cuda_sum_pair(size_t n, float *x, float *y, cudaStream_t stream);

/* dst = src (bytes), any two device or host pointers (cudaMemcpyDefault:
 * the same GPU, a peer GPU, or through the host when peer access is off). */
int bsipipe_cuda_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* Copies to host memory and waits for the stream. */
int bsipipe_cuda_copy_to_host(void *host_dst, const void *src, size_t bytes, cudaStream_t stream);

/* Waits until everything queued on stream has run. */
int bsipipe_cuda_stream_wait(cudaStream_t stream);

/* Stream-ordered scratch (cudaMallocAsync / cudaFreeAsync). */
int bsipipe_cuda_scratch_alloc(void **p, size_t bytes, cudaStream_t stream);
int bsipipe_cuda_scratch_free(void *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
