/* kernels/cuda/emu/bf16_selftest.cc: the emulated bf16 conversions (round to nearest even,
 * ties, overflow to inf, NaN kept) and a bf16 cublasGemmEx with a NaN operand giving NaN.
 * Built and run by tests/test_cuda_emu.sh; exit 0 when all hold. */
#include "cuda_bf16.h"
#include "cublas_v2.h"
#include <cmath>
#include <cstdio>
int main() {
    int bad = 0;
    float v[] = {1.0f, 1.00390625f /* tie: 1 + 2^-8 -> 1 */, 1.01171875f /* tie -> up */, NAN, -NAN, INFINITY, 3.4e38f};
    float w[] = {1.0f, 1.0f, 1.015625f, NAN, NAN, INFINITY, INFINITY};
    for (int i = 0; i < 7; i++) {
        float r = __bfloat162float(__float2bfloat16_rn(v[i]));
        int ok = std::isnan(w[i]) ? std::isnan(r) : r == w[i];
        printf("%g -> %g %s\n", v[i], r, ok ? "ok" : "BAD");
        bad += !ok;
    }
    __nv_bfloat16 a[2] = {__float2bfloat16_rn(2.0f), __float2bfloat16_rn(NAN)}, b[2] = {__float2bfloat16_rn(3.0f), __float2bfloat16_rn(1.0f)};
    float c = 0, al = 1, be = 0; cublasHandle_t h; cublasCreate(&h);
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &al, a, CUDA_R_16BF, 1, b, CUDA_R_16BF, 2, &be, &c, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    printf("gemm with a NaN operand: %g %s\n", c, std::isnan(c) ? "ok" : "BAD"); bad += !std::isnan(c);
    return bad;
}
