/* kernels/cuda/emu/cuda_bf16.h: the part of CUDA's <cuda_bf16.h> that bsipipe uses, on the
 * CPU (see cuda_runtime_api.h). __nv_bfloat16 holds the upper 16 bits of an IEEE float;
 * float -> bf16 rounds to nearest, ties to even, as __float2bfloat16_rn does; a NaN stays a
 * (quiet) NaN and never rounds into a number. C++ only (the .cu files build as C++). */
#ifndef BSIPIPE_CUDA_EMU_BF16_H
#define BSIPIPE_CUDA_EMU_BF16_H
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { /* NaN: keep the sign, force a quiet NaN */
        r.x = (uint16_t)((u >> 16) | 0x0040u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; overflow rounds to inf as on the GPU */
    r.x = (uint16_t)(u >> 16);
    return r;
}

static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

static inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#endif
