/* kernels/cuda/bsipipe_cuda_internal.h: what the .cu files of kernels/cuda share — error
 * plumbing, row-major indexing, launches that also build against the CPU emulation
 * (kernels/cuda/emu/, tests/test_cuda_emu.sh), and the opt-in to large shared memory.
 * Not installed; C++ (CUDA) only. */
#ifndef BSIPIPE_CUDA_INTERNAL_H
#define BSIPIPE_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <errno.h>
#include <stddef.h>

#define IX(i, j, ld) ((size_t)(i) * (size_t)(ld) + (size_t)(j))

/* The emulation defines these itself (kernels/cuda/emu/cuda_emu_device.h). */
#ifndef BSIPIPE_CUDA_EMU
#define BSIPIPE_DYN_SHARED(T, name) extern __shared__ T name[]
/* 128-byte aligned bytes: wmma tiles must be 32-byte aligned */
#define BSIPIPE_DYN_SHARED_ALIGNED(name) extern __shared__ __align__(128) unsigned char name[]
#define BSIPIPE_LAUNCH(k, g, b, sm, s, ...) k<<<(g), (b), (sm), (s)>>>(__VA_ARGS__)
#define BSIPIPE_UNROLL _Pragma("unroll")
#else
#define BSIPIPE_UNROLL
#endif

#define CU_TRY(x)                                                                           \
    do {                                                                                    \
        if ((x) != cudaSuccess)                                                             \
            return -EIO;                                                                    \
    } while (0)
#define RC_TRY(x)                                                                           \
    do {                                                                                    \
        int rc_ = (x);                                                                      \
        if (rc_)                                                                            \
            return rc_;                                                                     \
    } while (0)

/* Attention backward: lse and D (= rowsum(dO * O)) of rows [i0, i0 + nq) of head h into
 * shared lse_s / d_s [nrows] (zeros beyond nq), by the block's first nrows threads. */
__device__ inline void bsipipe_att_row_stats(float *lse_s, float *d_s, const float *lse,
                                             const float *dvec, int h, int i0, int nq, int len,
                                             int nrows)
{
    const int t = (int)threadIdx.x;
    if (t < nrows) {
        lse_s[t] = t < nq ? lse[IX(h, i0 + t, len)] : 0.0f;
        d_s[t] = t < nq ? dvec[IX(h, i0 + t, len)] : 0.0f;
    }
}

/* 0 when the last launch was accepted, else -EIO. Reading the error clears it (unless the
 * context is broken), so one refused launch does not fail every later check. */
static inline int bsipipe_cuda_launched(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

/* Kernels with more than 48 KiB of dynamic shared memory must opt in. */
template <typename K> static inline int bsipipe_cuda_allow_smem(K kern, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return 0;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
        cudaSuccess) {
        (void)cudaGetLastError(); /* cleared: see bsipipe_cuda_launched */
        return -EIO;
    }
    return 0;
}
#endif
