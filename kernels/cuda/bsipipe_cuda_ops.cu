/* kernels/cuda/bsipipe_cuda_ops.cu: small device operations for the CUDA
 * codelets (bsipipe_cuda_ops.h). */
#include "kernels/cuda/bsipipe_cuda_ops.h"
#include "base/bsipipe_error.h"

#include <cuda_runtime.h>
#include <errno.h>

/* A failed CUDA call: -EIO with the call and CUDA's own words. */
#define OPS_TRY(x)                                                                          \
    do {                                                                                    \
        cudaError_t err_ = (x);                                                             \
        if (err_ != cudaSuccess)                                                            \
            return bsipipe_error_set(-EIO, "CUDA: %s: %s", #x, cudaGetErrorString(err_));   \
    } while (0)

__global__ static void k_add_f64(double *acc, const double *x)
{
    *acc += *x;
}

__global__ static void k_sum_pair(size_t n, float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = x[i] + y[i];
        x[i] = s;
        y[i] = s;
    }
}

extern "C" int bsipipe_cuda_zero(void *p, size_t bytes, cudaStream_t stream)
{
    if (!p && bytes)
        return bsipipe_error_set(-EINVAL, "bsipipe_cuda_zero: NULL buffer");
    if (bytes)
        OPS_TRY(cudaMemsetAsync(p, 0, bytes, stream));
    return 0;
}

extern "C" int bsipipe_cuda_add_f64(double *acc, const double *x, cudaStream_t stream)
{
    if (!acc || !x)
        return bsipipe_error_set(-EINVAL, "bsipipe_cuda_add_f64: NULL pointer");
    k_add_f64<<<1, 1, 0, stream>>>(acc, x);
    OPS_TRY(cudaGetLastError());
    return 0;
}

extern "C" int bsipipe_cuda_sum_pair(size_t n, float *x, float *y, cudaStream_t stream)
{
    if (n == 0)
        return 0;
    if (!x || !y)
        return bsipipe_error_set(-EINVAL, "bsipipe_cuda_sum_pair: NULL buffer");
    size_t blocks = (n + 255) / 256;
    k_sum_pair<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(n, x, y);
    OPS_TRY(cudaGetLastError());
    return 0;
}

extern "C" int bsipipe_cuda_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
    if (bytes && (!dst || !src))
        return bsipipe_error_set(-EINVAL, "bsipipe_cuda_copy: NULL buffer");
    if (bytes && dst != src)
        OPS_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    return 0;
}

extern "C" int bsipipe_cuda_copy_to_host(void *host_dst, const void *src, size_t bytes, cudaStream_t stream)
{
    int rc = bsipipe_cuda_copy(host_dst, src, bytes, stream);
    return rc ? rc : bsipipe_cuda_stream_wait(stream);
}

extern "C" int bsipipe_cuda_stream_wait(cudaStream_t stream)
{
    OPS_TRY(cudaStreamSynchronize(stream));
    return 0;
}

extern "C" int bsipipe_cuda_scratch_alloc(void **p, size_t bytes, cudaStream_t stream)
{
    if (!p)
        return bsipipe_error_set(-EINVAL, "bsipipe_cuda_scratch_alloc: NULL output");
    *p = NULL;
    cudaError_t err = cudaMallocAsync(p, bytes ? bytes : 1, stream);
    if (err == cudaErrorMemoryAllocation)
        return bsipipe_error_set(-ENOMEM, "CUDA: cudaMallocAsync of %zu bytes: out of device memory", bytes);
    OPS_TRY(err);
    return 0;
}

extern "C" int bsipipe_cuda_scratch_free(void *p, cudaStream_t stream)
{
    if (p)
        OPS_TRY(cudaFreeAsync(p, stream));
    return 0;
}
