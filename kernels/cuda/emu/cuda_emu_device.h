/* kernels/cuda/emu/cuda_emu_device.h: device-side emulation for compiling a .cu file as C++
 * (see cuda_runtime_api.h). A kernel launch runs its blocks one after another; the threads of
 * a block are cooperative fibers, so __syncthreads, __syncwarp and __shfl_xor_sync have their
 * CUDA meaning. __shared__ variables are function statics (one block at a time); dynamic
 * shared memory and cudaMalloc'ed memory start as NaN bytes, so reads of unwritten data show. */
#ifndef BSIPIPE_CUDA_EMU_DEVICE_H
#define BSIPIPE_CUDA_EMU_DEVICE_H
#include <algorithm>
#include <cmath>
#include <functional>
#include <math.h>

using std::max;
using std::min;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct alignas(16) float4 {
    float x, y, z, w;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace bsipipe_emu {
const dim3 &tid();
const dim3 &bid();
const dim3 &bdim();
const dim3 &gdim();
void sync_block();
void sync_warp();
double shfl_xor(double v, int lanemask);
void *dyn_smem();
void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
} // namespace bsipipe_emu

#define threadIdx (bsipipe_emu::tid())
#define blockIdx (bsipipe_emu::bid())
#define blockDim (bsipipe_emu::bdim())
#define gridDim (bsipipe_emu::gdim())
#define __syncthreads() bsipipe_emu::sync_block()
#define __syncwarp(...) bsipipe_emu::sync_warp()

template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int lanemask)
{
    return (T)bsipipe_emu::shfl_xor((double)v, lanemask);
}
static inline float atomicAdd(float *p, float v)
{
    float o = *p;
    *p = o + v;
    return o;
}
static inline double atomicAdd(double *p, double v)
{
    double o = *p;
    *p = o + v;
    return o;
}

#define BSIPIPE_DYN_SHARED(T, name) T *name = (T *)bsipipe_emu::dyn_smem()
#define BSIPIPE_DYN_SHARED_ALIGNED(name) unsigned char *name = (unsigned char *)bsipipe_emu::dyn_smem()
#define BSIPIPE_LAUNCH(k, g, b, sm, s, ...)                                                  \
    ((void)(s), bsipipe_emu::launch((g), (b), (sm), [&]() { k(__VA_ARGS__); }))
#endif
