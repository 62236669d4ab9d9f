/* kernels/cuda/emu/mma.h: the part of CUDA's <mma.h> (nvcuda::wmma) that bsipipe uses, on
 * the CPU (see cuda_runtime_api.h): 16x16x16 fragments of bf16 operands with an fp32
 * accumulator. Every thread of the warp holds the whole tile (the hardware's per-lane split
 * is unspecified, and bsipipe never touches fragment elements), so the results are the same
 * as long as the warp works together. As on the GPU, load/store/mma wait for the whole warp
 * first (the "_sync"), so a lane cannot see another lane's later store. Rules the GPU
 * imposes and the emulation checks (abort with a message): pointers 256-bit (32-byte)
 * aligned, ldm a multiple of 8 for bf16 and of 4 for float.
 * BSIPIPE_EMU_STRICT_WMMA=1 is harsher: no warp barrier inside the wmma calls, and a store
 * writes only the calling lane's share of the tile (element i by lane i % 32), so a lane that
 * reads what other lanes stored without a __syncwarp in between sees stale data (with
 * BSIPIPE_EMU_ORDER=reverse|scrambled, cuda_emu.cc, the lanes run in other orders too). */
#ifndef BSIPIPE_CUDA_EMU_MMA_H
#define BSIPIPE_CUDA_EMU_MMA_H
#include "cuda_bf16.h"
#include "cuda_emu_device.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 fragments only");
    enum { num_elements = 256 };
    float x[256]; /* element (r, c) at x[16 r + c]; bf16 operands hold exact bf16 values */
};

namespace detail {
static inline bool strict()
{
    static int s = -1;
    if (s < 0) {
        const char *e = getenv("BSIPIPE_EMU_STRICT_WMMA");
        s = e && *e == '1';
    }
    return s == 1;
}
static inline void enter() /* the "_sync": the whole warp first, unless strict */
{
    if (!strict())
        bsipipe_emu::sync_warp();
}
static inline void check(const void *p, unsigned ldm, unsigned mult, const char *what)
{
    if (((uintptr_t)p & 31u) != 0 || ldm % mult != 0) {
        fprintf(stderr, "cuda-emu: wmma %s: pointer %p must be 32-byte aligned and ldm %u a "
                        "multiple of %u\n", what, p, ldm, mult);
        abort();
    }
}
static inline float value(const __nv_bfloat16 &v) { return __bfloat162float(v); }
static inline float value(const float &v) { return v; }
} // namespace detail

template <typename Use, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    detail::enter();
    detail::check(p, ldm, sizeof(T) == 2 ? 8 : 4, "load_matrix_sync");
    bool rm = std::is_same<L, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[16 * r + c] = detail::value(rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
}

static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l)
{
    detail::enter();
    detail::check(p, ldm, 4, "load_matrix_sync (accumulator)");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[16 * r + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l)
{
    detail::enter();
    detail::check(p, ldm, 4, "store_matrix_sync");
    const int lane = (int)(threadIdx.x & 31);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            if (!detail::strict() || (16 * r + c) % 32 == lane)
                (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[16 * r + c];
}

template <typename Use, typename T, typename L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v)
{
    for (int i = 0; i < 256; i++)
        f.x[i] = v;
}

/* d = a b + c, fp32 accumulation in k order (d may alias c) */
template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
    detail::enter();
    float out[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[16 * i + j];
            for (int k = 0; k < 16; k++)
                s += a.x[16 * i + k] * b.x[16 * k + j];
            out[16 * i + j] = s;
        }
    for (int i = 0; i < 256; i++)
        d.x[i] = out[i];
}

} // namespace wmma
} // namespace nvcuda
#endif
