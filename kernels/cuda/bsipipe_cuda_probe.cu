/* kernels/cuda/bsipipe_cuda_probe.cu — see bsipipe_cuda_probe.h. */
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

extern "C" int bsipipe_cuda_compiled(void) { return 1; }

extern "C" int bsipipe_cuda_device_count(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    return n < 0 ? 0 : n;
}

extern "C" int bsipipe_cuda_mem_info(int dev, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (dev < 0 || dev >= bsipipe_cuda_device_count())
        return -ENODEV;
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -EIO;
    }
    cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
    (void)cudaSetDevice(prev);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return -EIO;
    }
    return 0;
}

__global__ static void bsipipe_probe_saxpy_kernel(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" int bsipipe_cuda_probe_saxpy(int n)
{
    if (n <= 0)
        return -EINVAL;
    if (bsipipe_cuda_device_count() == 0)
        return -ENODEV;

    const float a = 2.0f;
    size_t bytes = (size_t)n * sizeof(float);
    float *hx = (float *)malloc(bytes), *hy = (float *)malloc(bytes);
    float *dx = NULL, *dy = NULL;
    int rc = 0;

    if (!hx || !hy) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        hx[i] = (float)(i % 1024);
        hy[i] = 1.0f;
    }
    if (cudaMalloc((void **)&dx, bytes) != cudaSuccess || cudaMalloc((void **)&dy, bytes) != cudaSuccess) {
        rc = -ENOMEM;
        goto out;
    }
    if (cudaMemcpy(dx, hx, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dy, hy, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        rc = -EIO;
        goto out;
    }
    bsipipe_probe_saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        rc = -EIO;
        goto out;
    }
    if (cudaMemcpy(hy, dy, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        rc = -EIO;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        float want = a * (float)(i % 1024) + 1.0f;
        if (fabsf(hy[i] - want) > 1e-6f * fabsf(want)) {
            rc = -EDOM;
            break;
        }
    }
out:
    if (dx)
        cudaFree(dx);
    if (dy)
        cudaFree(dy);
    (void)cudaGetLastError();
    free(hx);
    free(hy);
    return rc;
}
