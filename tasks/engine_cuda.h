/* engine_cuda.h: what the CUDA functions of the codelets (tasks/ops/<op>.c)
 * share: the CUDA kernels' C API, the worker's stream and cuBLAS handle, and
 * BSIPIPE_CL_CUDA(f), which puts f beside the CPU function of a codelet only
 * in builds with CUDA (configure's BSIPIPE_HAVE_CUDA). */
#ifndef BSIPIPE_ENGINE_CUDA_H
#define BSIPIPE_ENGINE_CUDA_H

#ifdef BSIPIPE_HAVE_CUDA
#include <starpu.h>
#include <starpu_cublas_v2.h>

#include "kernels/cuda/bsipipe_cuda_kernels.h"
#include "kernels/cuda/bsipipe_cuda_ops.h"

/* Asynchronous: the codelet only queues work on the worker's stream; StarPU
 * ends the task when the stream has run it. */
#define BSIPIPE_CL_CUDA(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},

static inline cudaStream_t engine_cuda_stream(void)
{
    return starpu_cuda_get_local_stream();
}

static inline cublasHandle_t engine_cuda_blas(void)
{
    return starpu_cublas_get_local_handle();
}
#else
#define BSIPIPE_CL_CUDA(f)
#endif

#endif
