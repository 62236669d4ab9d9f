/* kernels/cuda/emu/cuda_runtime_api.h: a CPU emulation of the small part of the CUDA runtime
 * API that bsipipe's CUDA kernels and tests use (docs/cuda.md, "CPU emulation"). Put this
 * directory first on the include path to build kernels/cuda/bsipipe_cuda_kernels.cu as C++
 * for the CPU (tests/test_cuda_emu.sh). Not a general emulator: one device, synchronous
 * streams, blocks run one after another, threads as cooperative fibers. */
#ifndef BSIPIPE_CUDA_EMU_RUNTIME_API_H
#define BSIPIPE_CUDA_EMU_RUNTIME_API_H
#include <stddef.h>

#define BSIPIPE_CUDA_EMU 1
#define CUDART_VERSION 13000

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1,
                         cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100 } cudaError_t;
typedef enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1,
                              cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3,
                              cudaMemcpyDefault = 4 } cudaMemcpyKind_t;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef struct bsipipe_emu_stream *cudaStream_t;
typedef struct bsipipe_emu_event *cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind k,
                              cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t bsipipe_emu_func_set_attribute(const void *fn, int attr, int value);

#ifdef __cplusplus
}
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *fn, enum cudaFuncAttribute a, int v)
{
    return bsipipe_emu_func_set_attribute((const void *)fn, (int)a, v);
}
#endif
#endif
