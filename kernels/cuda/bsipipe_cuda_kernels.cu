/* kernels/cuda/bsipipe_cuda_kernels.cu: fp32 CUDA twins of kernels/cpu/kernels_tmpl.h.
 * See bsipipe_cuda_kernels.h. The structure follows the CPU source function by
 * function (same buffer layouts, same order of operations per layer), so that
 * a CUDA codelet consumes buffers produced by the same plan. */
#include "kernels/cuda/bsipipe_cuda_kernels.h"

extern "C" {
#include "kernels/cpu/internal.h"
}

#include "kernels/cuda/bsipipe_cuda_internal.h"
#include "kernels/cuda/bsipipe_cuda_attention_tc.h"

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>

namespace {

static inline int launched(void) { return bsipipe_cuda_launched(); }

static inline unsigned nblocks(size_t n, int nt)
{
    size_t b = (n + (size_t)nt - 1) / (size_t)nt;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

bsipipe_cuda_gemm_mode_t g_mode = BSIPIPE_CUDA_GEMM_FP32;

/* fp32 -> bf16 (round to nearest even) of a row-major rows x cols matrix with leading
 * dimension lds, packed (leading dimension cols) into dst. */
__global__ void k_to_bf16(int rows, int cols, const float *src, int lds, __nv_bfloat16 *dst)
{
    size_t tot = (size_t)rows * (size_t)cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < tot;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[i] = __float2bfloat16_rn(src[r * (size_t)lds + c]);
    }
}

/* BF16S: both operands converted to bf16 copies in stream-ordered scratch (on the handle's
 * stream, freed there after the GEMM), then cublasGemmEx with CUDA_R_16BF A and B, fp32 C
 * and CUBLAS_COMPUTE_32F (fp32 accumulation). Weights are converted again at every GEMM
 * (no cache: the fp32 master weights change under the optimizer). */
static int gemm_bf16s(cublasHandle_t hd, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
    cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    size_t na = (size_t)ra * (size_t)ca, nb = (size_t)rb * (size_t)cb;
    size_t offb = (na + 127) / 128 * 128; /* B's copy 256-byte aligned */
    cudaStream_t s = NULL;
    __nv_bfloat16 *buf = NULL;
    if (cublasGetStream(hd, &s) != CUBLAS_STATUS_SUCCESS)
        return -EIO;
    if (cudaMallocAsync((void **)&buf, (offb + nb) * sizeof(__nv_bfloat16), s) != cudaSuccess) {
        (void)cudaGetLastError();
        return -ENOMEM;
    }
    BSIPIPE_LAUNCH(k_to_bf16, nblocks(na, 256), 256, 0, s, ra, ca, A, lda, buf);
    BSIPIPE_LAUNCH(k_to_bf16, nblocks(nb, 256), 256, 0, s, rb, cb, B, ldb, buf + offb);
    int rc = launched();
    if (!rc && cublasGemmEx(hd, oa, ob, N, M, K, &alpha, buf + offb, CUDA_R_16BF, cb, buf,
                            CUDA_R_16BF, ca, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        rc = -EIO;
    if (cudaFreeAsync(buf, s) != cudaSuccess && !rc)
        rc = -EIO;
    return rc;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...):
 * column-major cuBLAS computes C^T = op(B)^T op(A)^T. */
static int gemm(cublasHandle_t hd, bool ta, bool tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (M <= 0 || N <= 0)
        return 0;
    if (g_mode == BSIPIPE_CUDA_GEMM_BF16S && K > 0)
        return gemm_bf16s(hd, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (g_mode == BSIPIPE_CUDA_GEMM_FP32 || g_mode == BSIPIPE_CUDA_GEMM_BF16S) {
        st = cublasSgemm(hd, oa, ob, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc);
    } else {
        cublasComputeType_t ct = g_mode == BSIPIPE_CUDA_GEMM_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                   : CUBLAS_COMPUTE_32F_FAST_16BF;
        st = cublasGemmEx(hd, oa, ob, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                          &beta, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT);
    }
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

/* y[n, out] = x[n, in] w[out, in]^T + beta y */
static int lin_fwd(cublasHandle_t h, int n, int out, int in, const float *x, int ldx,
                   const float *w, int ldw, float beta, float *y, int ldy)
{
    return gemm(h, false, true, n, out, in, 1.0f, x, ldx, w, ldw, beta, y, ldy);
}
/* dx[n, in] = dy[n, out] w[out, in] + beta dx */
static int lin_bwd_x(cublasHandle_t h, int n, int out, int in, const float *dy, int lddy,
                     const float *w, int ldw, float beta, float *dx, int lddx)
{
    return gemm(h, false, false, n, in, out, 1.0f, dy, lddy, w, ldw, beta, dx, lddx);
}
/* dw[out, in] += dy[n, out]^T x[n, in] */
static int lin_bwd_w(cublasHandle_t h, int n, int out, int in, const float *dy, int lddy,
                     const float *x, int ldx, float *dw, int lddw)
{
    return gemm(h, true, false, out, in, n, 1.0f, dy, lddy, x, ldx, 1.0f, dw, lddw);
}

static int copy_d2d(float *dst, const float *src, size_t n, cudaStream_t s)
{
    if (dst == src || !n)
        return 0;
    CU_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return 0;
}

/* ------------------------------------------------------- the stash in bf16 (BF16S) */

/* In BF16S the activations a layer keeps for its backward are stored in bf16: one layer's
 * stash is the fp32 layout of kern_stash_off held as bf16 values (element i at bf16
 * index i; the statistics' slots unused), then, from float `half` on, the statistics in fp32
 * (s1 [2 len], s2 [2 len], lse [heads, len]: exp(S - lse) would lose too much in bf16).
 * The kernels compute in fp32 as always: a layer's forward writes an fp32 scratch copy of
 * its stash that is then packed; its backward unpacks into fp32 scratch first (both
 * stream-ordered, cudaMallocAsync). The backward thus sees activations rounded to bf16. */
struct stash_fmt {
    size_t ss;    /* floats of the fp32 layout */
    size_t half;  /* floats holding the ss bf16 values (16-byte multiple); 0: fp32 layout */
    size_t total; /* floats of one layer's stash in this mode */
};

static inline bool stash_bf16(bsipipe_cuda_gemm_mode_t m) { return m == BSIPIPE_CUDA_GEMM_BF16S; }

static stash_fmt stash_fmt_of(const bsipipe_model_dims_t *d, int len, bsipipe_cuda_gemm_mode_t m)
{
    bsipipe_stash_off so;
    kern_stash_off(d, len, &so);
    stash_fmt f;
    f.ss = (size_t)so.total;
    f.half = 0;
    f.total = f.ss;
    if (stash_bf16(m)) {
        size_t stats = (size_t)(4 + d->n_heads) * (size_t)len;
        f.half = ((f.ss + 1) / 2 + 3) / 4 * 4;
        f.total = f.half + (stats + 3) / 4 * 4;
    }
    return f;
}

/* K/V in bf16 as well (BF16S): one layer's kv is K [seq, hidden] then V [seq, hidden] as bf16,
 * seq * hidden floats instead of twice that. dK / dV stay fp32. */
static inline size_t kv_floats(const bsipipe_model_dims_t *d, bsipipe_cuda_gemm_mode_t m)
{
    size_t n = (size_t)bsipipe_model_kv_size(d); /* 2 seq hidden */
    return stash_bf16(m) ? n / 2 : n;
}

__global__ void k_f32_to_bf16(size_t n, const float *src, __nv_bfloat16 *dst)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void k_bf16_to_f32(size_t n, const __nv_bfloat16 *src, float *dst)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

static int to_bf16(size_t n, const float *src, __nv_bfloat16 *dst, cudaStream_t s)
{
    BSIPIPE_LAUNCH(k_f32_to_bf16, nblocks(n, 256), 256, 0, s, n, src, dst);
    return launched();
}

static int from_bf16(size_t n, const __nv_bfloat16 *src, float *dst, cudaStream_t s)
{
    BSIPIPE_LAUNCH(k_bf16_to_f32, nblocks(n, 256), 256, 0, s, n, src, dst);
    return launched();
}

/* The statistics of one layer's stash: (offset in the fp32 layout, floats) of s1, s2 and lse;
 * in the BF16S layout they follow each other from float `half` on, in this order. */
static void stash_stats(const bsipipe_model_dims_t *d, int len, size_t off[3], size_t n[3])
{
    bsipipe_stash_off so;
    kern_stash_off(d, len, &so);
    off[0] = (size_t)so.s1, off[1] = (size_t)so.s2, off[2] = (size_t)so.lse;
    n[0] = n[1] = 2 * (size_t)len, n[2] = (size_t)d->n_heads * len;
}

/* one layer: fp32 layout st32 <-> this mode's layout st (BF16S only) */
static int stash_pack(const bsipipe_model_dims_t *d, int len, const float *st32, float *st,
                      cudaStream_t s)
{
    stash_fmt f = stash_fmt_of(d, len, BSIPIPE_CUDA_GEMM_BF16S);
    size_t off[3], n[3], at = f.half;
    stash_stats(d, len, off, n);
    RC_TRY(to_bf16(f.ss, st32, (__nv_bfloat16 *)st, s));
    for (int i = 0; i < 3; at += n[i++])
        RC_TRY(copy_d2d(st + at, st32 + off[i], n[i], s));
    return 0;
}

static int stash_unpack(const bsipipe_model_dims_t *d, int len, const float *st, float *st32,
                        cudaStream_t s)
{
    stash_fmt f = stash_fmt_of(d, len, BSIPIPE_CUDA_GEMM_BF16S);
    size_t off[3], n[3], at = f.half;
    stash_stats(d, len, off, n);
    RC_TRY(from_bf16(f.ss, (const __nv_bfloat16 *)st, st32, s));
    for (int i = 0; i < 3; at += n[i++])
        RC_TRY(copy_d2d(st32 + off[i], st + at, n[i], s));
    return 0;
}

/* stream-ordered fp32 scratch; scratch_end frees it and keeps the first error */
static int scratch(float **p, size_t n, cudaStream_t s)
{
    if (cudaMallocAsync((void **)p, (n ? n : 1) * sizeof(float), s) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return -ENOMEM;
    }
    return 0;
}

static int scratch_end(float *p, int rc, cudaStream_t s)
{
    if (p && cudaFreeAsync(p, s) != cudaSuccess && !rc)
        rc = -EIO;
    return rc;
}

/* ------------------------------------------------------------------ reductions */

/* Sum over a block of NT threads in a fixed order (deterministic). sh: NT/32 doubles. */
template <int NT> __device__ double block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* sh may still be read by a previous call */
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < NT / 32; i++)
        t += sh[i];
    return t;
}

template <int NT> __device__ float block_max(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = sh[0];
    for (int i = 1; i < NT / 32; i++)
        t = fmaxf(t, sh[i]);
    return t;
}

/* ----------------------------------------------------------------- norms */

#define NORM_NT 256

/* One block per row. LayerNorm (b != NULL) or RMSNorm; statistics in double as on the CPU.
 * st[0..n) = mean (0 for RMS), st[n..2n) = rstd. */
__global__ void k_norm_fwd(int n, int d, const float *x, const float *w, const float *b,
                           float *y, float *st)
{
    __shared__ double sh[NORM_NT / 32];
    int i = blockIdx.x;
    const float *xr = x + IX(i, 0, d);
    float *yr = y + IX(i, 0, d);
    double mean = 0, var = 0;
    if (b) {
        double s = 0;
        for (int c = threadIdx.x; c < d; c += NORM_NT)
            s += xr[c];
        mean = block_sum<NORM_NT>(s, sh) / d;
    }
    {
        double s = 0;
        for (int c = threadIdx.x; c < d; c += NORM_NT) {
            double t = xr[c] - mean;
            s += t * t;
        }
        var = block_sum<NORM_NT>(s, sh) / d;
    }
    float m = (float)mean, rs = (float)(1.0 / sqrt(var + BSIPIPE_NORM_EPS));
    for (int c = threadIdx.x; c < d; c += NORM_NT) {
        float xh = (xr[c] - m) * rs;
        yr[c] = xh * w[c] + (b ? b[c] : 0.0f);
    }
    if (threadIdx.x == 0) {
        st[i] = m;
        st[n + i] = rs;
    }
}

/* dx (+)= rs * (dxh - mean(dxh) - xh * mean(dxh * xh)), dxh = dy * w; one block per row. */
__global__ void k_norm_bwd_dx(int n, int d, const float *x, const float *w, int has_b,
                              const float *st, const float *dy, float *dx, int acc)
{
    __shared__ double sh[NORM_NT / 32];
    int i = blockIdx.x;
    const float *xr = x + IX(i, 0, d), *dyr = dy + IX(i, 0, d);
    float *dxr = dx + IX(i, 0, d);
    float m = st[i], rs = st[n + i];
    double s1 = 0, s2 = 0;
    for (int c = threadIdx.x; c < d; c += NORM_NT) {
        float xh = (xr[c] - m) * rs, dxh = dyr[c] * w[c];
        s1 += dxh;
        s2 += (double)dxh * xh;
    }
    s1 = block_sum<NORM_NT>(s1, sh) / d;
    s2 = block_sum<NORM_NT>(s2, sh) / d;
    if (!has_b)
        s1 = 0;
    for (int c = threadIdx.x; c < d; c += NORM_NT) {
        float xh = (xr[c] - m) * rs, dxh = dyr[c] * w[c];
        float g = rs * (dxh - (float)s1 - xh * (float)s2);
        dxr[c] = acc ? dxr[c] + g : g;
    }
}

/* dw[c] += sum_i dy[i,c] xh[i,c]; db[c] += sum_i dy[i,c]. Block (32, 8) over 32 columns and a
 * slab of NORM_ROWS rows; partial sums combined with atomics. */
#define NORM_ROWS 256
__global__ void k_norm_bwd_w(int n, int d, const float *x, const float *st, const float *dy,
                             float *dw, float *db)
{
    __shared__ float sw[8][33], sb[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * NORM_ROWS, r1 = min(n, r0 + NORM_ROWS);
    float aw = 0, ab = 0;
    if (c < d)
        for (int i = r0 + threadIdx.y; i < r1; i += 8) {
            float g = dy[IX(i, c, d)];
            aw += g * ((x[IX(i, c, d)] - st[i]) * st[n + i]);
            ab += g;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < d) {
        for (int k = 1; k < 8; k++) {
            aw += sw[k][threadIdx.x];
            ab += sb[k][threadIdx.x];
        }
        atomicAdd(dw + c, aw);
        if (db)
            atomicAdd(db + c, ab);
    }
}

static int norm_fwd(cudaStream_t s, int n, int d, const float *x, const float *w,
                    const float *b, float *y, float *st)
{
    BSIPIPE_LAUNCH(k_norm_fwd, n, NORM_NT, 0, s, n, d, x, w, b, y, st);
    return launched();
}

static int norm_bwd(cudaStream_t s, int n, int d, const float *x, const float *w, int has_b,
                    const float *st, const float *dy, float *dx, float *dw, float *db, int acc)
{
    BSIPIPE_LAUNCH(k_norm_bwd_dx, n, NORM_NT, 0, s, n, d, x, w, has_b, st, dy, dx, acc);
    RC_TRY(launched());
    dim3 g((unsigned)((d + 31) / 32), (unsigned)((n + NORM_ROWS - 1) / NORM_ROWS));
    BSIPIPE_LAUNCH(k_norm_bwd_w, g, dim3(32, 8), 0, s, n, d, x, st, dy, dw, has_b ? db : NULL);
    return launched();
}

/* ------------------------------------------------------------ activations */

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

__global__ void k_gelu_fwd(size_t n, const float *h, float *g)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = h[i];
        g[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x)));
    }
}

__global__ void k_gelu_bwd(size_t n, const float *h, const float *dg, float *dh)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = h[i], t = tanhf(GELU_K * (x + GELU_C * x * x * x));
        float dt = GELU_K * (1.0f + 3.0f * GELU_C * x * x);
        dh[i] = dg[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt);
    }
}

__device__ inline float sigmoidf_(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void k_swiglu_fwd(int n, int f, const float *gu, float *h)
{
    size_t tot = (size_t)n * f;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t i = e / f, c = e % f;
        float g = gu[IX(i, c, 2 * f)], u = gu[IX(i, f + c, 2 * f)];
        h[e] = g * sigmoidf_(g) * u;
    }
}

__global__ void k_swiglu_bwd(int n, int f, const float *gu, const float *dh, float *dgu)
{
    size_t tot = (size_t)n * f;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t i = e / f, c = e % f;
        float g = gu[IX(i, c, 2 * f)], u = gu[IX(i, f + c, 2 * f)];
        float sg = sigmoidf_(g), dhv = dh[e];
        dgu[IX(i, c, 2 * f)] = dhv * u * sg * (1.0f + g * (1.0f - sg));
        dgu[IX(i, f + c, 2 * f)] = dhv * g * sg;
    }
}

/* RoPE over rows of x[n, ld] (heads of hd columns, pairs (2i, 2i+1)); row r at position
 * pos0 + r; dir = +1 forward, -1 transpose. Angles in double, cos/sin rounded to float. */
__global__ void k_rope(int n, int n_heads, int hd, int pos0, float *x, int ld, int dir)
{
    int half = hd / 2;
    size_t tot = (size_t)n * half * n_heads;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(e % n_heads);
        size_t t = e / n_heads;
        int i = (int)(t % half), r = (int)(t / half);
        double ang = (double)(pos0 + r) * pow(BSIPIPE_ROPE_BASE, -2.0 * i / hd);
        float c = (float)cos(ang), sn = (float)sin(ang) * (float)dir;
        float *p = x + IX(r, h * hd + 2 * i, ld);
        float a = p[0], b = p[1];
        p[0] = a * c - b * sn;
        p[1] = a * sn + b * c;
    }
}

/* --------------------------------------------------------------- attention */

/* Tiles of BQ queries x BK keys per block of AT_NT threads; head_dim <= AT_MAXHD. Shared
 * memory rows are padded to hd + 1 floats (conflict-free column walks). Thread t owns the
 * scores (r, c) = (t / 32 + 8 j, t % 32), j < 4, and output elements e = t + AT_NT * j of a
 * [32, hd] tile. */
#define AT_B 32
#define AT_NT 256
#define AT_MAXHD 128
#define AT_NE ((AT_B * AT_MAXHD) / AT_NT) /* 16 output elements per thread at most */

__device__ inline void load_tile(float *dst, int hdp, const float *src, int ld, int col0,
                                 int row0, int nrows, int hd)
{
    for (int e = threadIdx.x; e < AT_B * hd; e += AT_NT) {
        int r = e / hd, c = e % hd;
        dst[r * hdp + c] = r < nrows ? src[IX(row0 + r, col0 + c, ld)] : 0.0f;
    }
}

/* Forward: grid (query tiles, heads). Online softmax over key tiles up to the causal limit. */
__global__ void k_att_fwd(int hd, int start, int len, const float *q, int ldq,
                          const float *k, const float *v, int ldk, float *o, int ldo,
                          float *lse, float scale)
{
    BSIPIPE_DYN_SHARED(float, sm);
    int hdp = hd + 1, h = blockIdx.y, i0 = blockIdx.x * AT_B;
    int nq = min(AT_B, len - i0), kend = start + i0 + nq;
    float *Qs = sm, *KVs = Qs + AT_B * hdp, *Ss = KVs + AT_B * hdp;
    float *mrow = Ss + AT_B * (AT_B + 1), *lrow = mrow + AT_B, *arow = lrow + AT_B;
    int t = threadIdx.x, lane = t & 31, wp = t >> 5;
    float acc[AT_NE];
    for (int j = 0; j < AT_NE; j++)
        acc[j] = 0;
    load_tile(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
    if (t < AT_B) {
        mrow[t] = -INFINITY;
        lrow[t] = 0;
    }
    for (int j0 = 0; j0 < kend; j0 += AT_B) {
        int nk = min(AT_B, kend - j0);
        __syncthreads(); /* previous tile's V no longer read */
        load_tile(KVs, hdp, k, ldk, h * hd, j0, nk, hd);
        __syncthreads();
        /* scores */
        float sc[4] = {0, 0, 0, 0};
        for (int x = 0; x < hd; x++) {
            float kv = KVs[lane * hdp + x];
            for (int j = 0; j < 4; j++)
                sc[j] += Qs[(wp + 8 * j) * hdp + x] * kv;
        }
        for (int j = 0; j < 4; j++)
            Ss[(wp + 8 * j) * (AT_B + 1) + lane] = sc[j] * scale;
        __syncthreads();
        /* online softmax: warp wp does rows wp + 8 j; V tile loads meanwhile */
        for (int j = 0; j < 4; j++) {
            int r = wp + 8 * j;
            float sv = Ss[r * (AT_B + 1) + lane];
            bool vis = r < nq && lane < nk && j0 + lane <= start + i0 + r;
            float mx = vis ? sv : -INFINITY;
            for (int of = 16; of > 0; of >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, of));
            float mold = mrow[r], mnew = fmaxf(mold, mx);
            float p = vis ? expf(sv - mnew) : 0.0f;
            float sum = p;
            for (int of = 16; of > 0; of >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, of);
            Ss[r * (AT_B + 1) + lane] = p;
            __syncwarp();
            if (lane == 0) {
                float al = mnew == -INFINITY ? 1.0f : expf(mold - mnew);
                arow[r] = al;
                lrow[r] = lrow[r] * al + sum;
                mrow[r] = mnew;
            }
        }
        __syncthreads(); /* K no longer read: load V */
        load_tile(KVs, hdp, v, ldk, h * hd, j0, nk, hd);
        __syncthreads();
        for (int j = 0; j < AT_NE; j++) {
            int e = t + AT_NT * j;
            if (e < AT_B * hd) {
                int r = e / hd, c = e % hd;
                float a = acc[j] * arow[r];
                const float *pr = Ss + r * (AT_B + 1);
                for (int kk = 0; kk < nk; kk++)
                    a += pr[kk] * KVs[kk * hdp + c];
                acc[j] = a;
            }
        }
    }
    __syncthreads();
    for (int j = 0; j < AT_NE; j++) {
        int e = t + AT_NT * j;
        if (e < AT_B * hd) {
            int r = e / hd, c = e % hd;
            if (r < nq)
                o[IX(i0 + r, h * hd + c, ldo)] = acc[j] / lrow[r];
        }
    }
    if (t < nq)
        lse[IX(h, i0 + t, len)] = mrow[t] + logf(lrow[t]);
}

/* D[h, i] = rowsum(dO * O) of head h. */
__global__ void k_att_dvec(int n_heads, int hd, int len, const float *o, const float *do_,
                           int ldo, float *dvec)
{
    size_t tot = (size_t)len * n_heads;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int h = (int)(e / len), i = (int)(e % len);
        const float *orow = o + IX(i, h * hd, ldo), *dr = do_ + IX(i, h * hd, ldo);
        float a = 0;
        for (int c = 0; c < hd; c++)
            a += orow[c] * dr[c];
        dvec[e] = a;
    }
}

/* Recomputes P and dS = P (dP - D) scale for the (query tile, key tile) pair in shared
 * memory: Qs, dOs [BQ][hdp], Ks, Vs [BK][hdp] -> Ps, dSs [BQ][BK+1]. */
__device__ inline void att_bwd_tile(int hd, int hdp, int start, int i0, int nq, int j0, int nk,
                                    const float *Qs, const float *dOs, const float *Ks,
                                    const float *Vs, const float *lse_s, const float *d_s,
                                    float *Ps, float *dSs, float scale)
{
    int t = threadIdx.x, lane = t & 31, wp = t >> 5;
    float sc[4] = {0, 0, 0, 0}, dp[4] = {0, 0, 0, 0};
    for (int x = 0; x < hd; x++) {
        float kx = Ks[lane * hdp + x], vx = Vs[lane * hdp + x];
        for (int j = 0; j < 4; j++) {
            int r = wp + 8 * j;
            sc[j] += Qs[r * hdp + x] * kx;
            dp[j] += dOs[r * hdp + x] * vx;
        }
    }
    for (int j = 0; j < 4; j++) {
        int r = wp + 8 * j;
        bool vis = r < nq && lane < nk && j0 + lane <= start + i0 + r;
        float p = vis ? expf(sc[j] * scale - lse_s[r]) : 0.0f;
        Ps[r * (AT_B + 1) + lane] = p;
        dSs[r * (AT_B + 1) + lane] = p * (dp[j] - d_s[r]) * scale;
    }
}

/* dK, dV (+=) for one key tile of one head: loops over the piece's query tiles that see it. */
__global__ void k_att_bwd_dkdv(int hd, int start, int len, const float *q, int ldq,
                               const float *k, const float *v, int ldk, const float *do_,
                               int ldo, const float *lse, const float *dvec, float *dk,
                               float *dv, float scale)
{
    BSIPIPE_DYN_SHARED(float, sm);
    int hdp = hd + 1, h = blockIdx.y, j0 = blockIdx.x * AT_B, nkeys = start + len;
    int nk = min(AT_B, nkeys - j0), t = threadIdx.x;
    float *Ks = sm, *Vs = Ks + AT_B * hdp, *Qs = Vs + AT_B * hdp, *dOs = Qs + AT_B * hdp;
    float *Ps = dOs + AT_B * hdp, *dSs = Ps + AT_B * (AT_B + 1);
    float *lse_s = dSs + AT_B * (AT_B + 1), *d_s = lse_s + AT_B;
    float adk[AT_NE], adv[AT_NE];
    for (int j = 0; j < AT_NE; j++)
        adk[j] = adv[j] = 0;
    load_tile(Ks, hdp, k, ldk, h * hd, j0, nk, hd);
    load_tile(Vs, hdp, v, ldk, h * hd, j0, nk, hd);
    int first = j0 > start ? ((j0 - start) / AT_B) * AT_B : 0;
    for (int i0 = first; i0 < len; i0 += AT_B) {
        int nq = min(AT_B, len - i0);
        __syncthreads();
        load_tile(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
        load_tile(dOs, hdp, do_, ldo, h * hd, i0, nq, hd);
        bsipipe_att_row_stats(lse_s, d_s, lse, dvec, h, i0, nq, len, AT_B);
        __syncthreads();
        att_bwd_tile(hd, hdp, start, i0, nq, j0, nk, Qs, dOs, Ks, Vs, lse_s, d_s, Ps, dSs,
                     scale);
        __syncthreads();
        for (int j = 0; j < AT_NE; j++) {
            int e = t + AT_NT * j;
            if (e < AT_B * hd) {
                int c = e / hd, x = e % hd; /* key row c, column x */
                float a = adv[j], b = adk[j];
                for (int r = 0; r < nq; r++) {
                    a += Ps[r * (AT_B + 1) + c] * dOs[r * hdp + x];
                    b += dSs[r * (AT_B + 1) + c] * Qs[r * hdp + x];
                }
                adv[j] = a;
                adk[j] = b;
            }
        }
    }
    for (int j = 0; j < AT_NE; j++) {
        int e = t + AT_NT * j;
        if (e < AT_B * hd) {
            int c = e / hd, x = e % hd;
            if (c < nk) {
                dv[IX(j0 + c, h * hd + x, ldk)] += adv[j];
                dk[IX(j0 + c, h * hd + x, ldk)] += adk[j];
            }
        }
    }
}

/* dQ (overwritten) for one query tile of one head. */
__global__ void k_att_bwd_dq(int hd, int start, int len, const float *q, int ldq,
                             const float *k, const float *v, int ldk, const float *do_, int ldo,
                             const float *lse, const float *dvec, float *dq, int lddq,
                             float scale)
{
    BSIPIPE_DYN_SHARED(float, sm);
    int hdp = hd + 1, h = blockIdx.y, i0 = blockIdx.x * AT_B, t = threadIdx.x;
    int nq = min(AT_B, len - i0), kend = start + i0 + nq;
    float *Ks = sm, *Vs = Ks + AT_B * hdp, *Qs = Vs + AT_B * hdp, *dOs = Qs + AT_B * hdp;
    float *Ps = dOs + AT_B * hdp, *dSs = Ps + AT_B * (AT_B + 1);
    float *lse_s = dSs + AT_B * (AT_B + 1), *d_s = lse_s + AT_B;
    float adq[AT_NE];
    for (int j = 0; j < AT_NE; j++)
        adq[j] = 0;
    load_tile(Qs, hdp, q, ldq, h * hd, i0, nq, hd);
    load_tile(dOs, hdp, do_, ldo, h * hd, i0, nq, hd);
    bsipipe_att_row_stats(lse_s, d_s, lse, dvec, h, i0, nq, len, AT_B);
    for (int j0 = 0; j0 < kend; j0 += AT_B) {
        int nk = min(AT_B, kend - j0);
        __syncthreads();
        load_tile(Ks, hdp, k, ldk, h * hd, j0, nk, hd);
        load_tile(Vs, hdp, v, ldk, h * hd, j0, nk, hd);
        __syncthreads();
        att_bwd_tile(hd, hdp, start, i0, nq, j0, nk, Qs, dOs, Ks, Vs, lse_s, d_s, Ps, dSs,
                     scale);
        __syncthreads();
        for (int j = 0; j < AT_NE; j++) {
            int e = t + AT_NT * j;
            if (e < AT_B * hd) {
                int r = e / hd, x = e % hd;
                float a = adq[j];
                for (int c = 0; c < nk; c++)
                    a += dSs[r * (AT_B + 1) + c] * Ks[c * hdp + x];
                adq[j] = a;
            }
        }
    }
    for (int j = 0; j < AT_NE; j++) {
        int e = t + AT_NT * j;
        if (e < AT_B * hd) {
            int r = e / hd, x = e % hd;
            if (r < nq)
                dq[IX(i0 + r, h * hd + x, lddq)] = adq[j];
        }
    }
}

static size_t att_fwd_smem(int hd) { return sizeof(float) * (2 * AT_B * (hd + 1) + AT_B * (AT_B + 1) + 3 * AT_B); }
static size_t att_bwd_smem(int hd) { return sizeof(float) * (4 * AT_B * (hd + 1) + 2 * AT_B * (AT_B + 1) + 2 * AT_B); }

template <typename K> static int allow_smem(K kern, size_t bytes)
{
    return bsipipe_cuda_allow_smem(kern, bytes);
}

/* bf16 products (BF16, BF16S): attention's products too, on the tensor cores
 * (bsipipe_cuda_attention_tc.cu); FP32 and TF32 keep the fp32 kernels above. */
static bool attention_on_tensor_cores(void)
{
    return g_mode == BSIPIPE_CUDA_GEMM_BF16 || g_mode == BSIPIPE_CUDA_GEMM_BF16S;
}

static float att_scale(int head_dim) { return (float)(1.0 / sqrt((double)head_dim)); }

/* the fp32 attention kernels (CUDA cores) */
static int att_fwd_fp32(int H, int hd, int start, int len, const float *q, int ldq,
                        const float *k, const float *v, int ldk, float *o, int ldo, float *lse,
                        cudaStream_t s)
{
    size_t sm = att_fwd_smem(hd);
    RC_TRY(allow_smem(k_att_fwd, sm));
    dim3 grid((unsigned)((len + AT_B - 1) / AT_B), (unsigned)H);
    BSIPIPE_LAUNCH(k_att_fwd, grid, AT_NT, sm, s, hd, start, len, q, ldq, k, v, ldk, o, ldo, lse,
                   att_scale(hd));
    return launched();
}

static int att_bwd_fp32(int H, int hd, int start, int len, const float *q, int ldq,
                        const float *k, const float *v, int ldk, const float *do_, int ldo,
                        const float *lse, const float *dvec, float *dq, int lddq, float *dk,
                        float *dv, cudaStream_t s)
{
    size_t sm = att_bwd_smem(hd);
    float scale = att_scale(hd);
    RC_TRY(allow_smem(k_att_bwd_dkdv, sm));
    RC_TRY(allow_smem(k_att_bwd_dq, sm));
    dim3 gk((unsigned)((start + len + AT_B - 1) / AT_B), (unsigned)H);
    BSIPIPE_LAUNCH(k_att_bwd_dkdv, gk, AT_NT, sm, s, hd, start, len, q, ldq, k, v, ldk, do_, ldo,
                   lse, dvec, dk, dv, scale);
    RC_TRY(launched());
    dim3 gq((unsigned)((len + AT_B - 1) / AT_B), (unsigned)H);
    BSIPIPE_LAUNCH(k_att_bwd_dq, gq, AT_NT, sm, s, hd, start, len, q, ldq, k, v, ldk, do_, ldo,
                   lse, dvec, dq, lddq, scale);
    return launched();
}

/* *dvec (stream-ordered scratch, [H, len]) = rowsum(dO * O) per head */
static int att_dvec(int H, int hd, int len, const float *o, const float *do_, int ldo,
                    float **dvec, cudaStream_t s)
{
    size_t nd = (size_t)H * len;
    RC_TRY(scratch(dvec, nd, s));
    BSIPIPE_LAUNCH(k_att_dvec, nblocks(nd, 256), 256, 0, s, H, hd, len, o, do_, ldo, *dvec);
    return launched();
}

static int att_check(int n_heads, int head_dim, int start, int len, const void *q, int ldq,
                     const void *k, const void *v, int ldk, const void *o, int ldo)
{
    int w = n_heads * head_dim;
    if (n_heads < 1 || head_dim < 1 || head_dim > AT_MAXHD || start < 0 || len < 1 || !q ||
        !k || !v || !o)
        return -EINVAL;
    if (ldq < w || ldk < w || ldo < w)
        return -EINVAL;
    if ((long)n_heads > 65535)
        return -EINVAL;
    return 0;
}

/* ------------------------------------------------------------ head (CE) */

#define CE_NT 256
/* Per row of logits[len, V]: lse in double; loss += lse - row[target] (atomic, double).
 * grad: row = exp(row - lse) * gs, row[target] -= gs (in place). */
__global__ void k_ce(int V, float *lg, const int *targets, double gs, int grad, double *loss)
{
    __shared__ double shd[CE_NT / 32];
    __shared__ float shf[CE_NT / 32];
    int i = blockIdx.x;
    float *row = lg + IX(i, 0, V);
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < V; c += CE_NT)
        mx = fmaxf(mx, row[c]);
    mx = block_max<CE_NT>(mx, shf);
    double se = 0;
    for (int c = threadIdx.x; c < V; c += CE_NT)
        se += exp((double)(row[c] - mx));
    se = block_sum<CE_NT>(se, shd);
    double lse = (double)mx + log(se);
    int tg = targets[i];
    __syncthreads();
    float rt = (tg >= 0 && tg < V) ? row[tg] : NAN;
    __syncthreads();
    if (threadIdx.x == 0 && loss)
        atomicAdd(loss, lse - (double)rt);
    if (!grad)
        return;
    for (int c = threadIdx.x; c < V; c += CE_NT)
        row[c] = (float)(exp((double)row[c] - lse) * gs);
    __syncthreads();
    if (threadIdx.x == 0 && tg >= 0 && tg < V)
        row[tg] -= (float)gs;
}

/* ------------------------------------------------------------- embedding */

__global__ void k_embed_fwd(int h, int V, const float *wte, const float *wpe,
                            const int *tokens, int start, int len, float *x)
{
    size_t tot = (size_t)len * h;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / h), c = (int)(e % h), tk = tokens[i];
        float val = (tk >= 0 && tk < V) ? wte[IX(tk, c, h)] : NAN;
        if (wpe)
            val += wpe[IX(start + i, c, h)];
        x[e] = val;
    }
}

__global__ void k_embed_bwd(int h, int V, float *gte, float *gpe, const int *tokens, int start,
                            int len, const float *dx)
{
    size_t tot = (size_t)len * h;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / h), c = (int)(e % h), tk = tokens[i];
        float g = dx[e];
        if (tk >= 0 && tk < V)
            atomicAdd(gte + IX(tk, c, h), g);
        if (gpe)
            gpe[IX(start + i, c, h)] += g; /* one row per position: no race */
    }
}

/* ------------------------------------------------------------- optimizer */

__global__ void k_sumsq(long n, const float *g, double *out)
{
    __shared__ double sh[256 / 32];
    double s = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = block_sum<256>(s, sh);
    if (threadIdx.x == 0)
        atomicAdd(out, s);
}

__global__ void k_adamw(long n, float *p, const float *g, float gm, int use_gm, float dec,
                        float b1, float b2, float step, float bc2s, float eps, float *m, float *v)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float gi = use_gm ? g[i] * gm : g[i];
        float pi = p[i] * dec;
        float mi = m[i] * b1 + (1.0f - b1) * gi;
        float vi = v[i] * b2 + (1.0f - b2) * gi * gi;
        pi -= step * (mi / (sqrtf(vi) / bc2s + eps));
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

/* ----------------------------------------------------------------- layers */

struct lp { const float *n1w, *n1b, *wqkv, *wo, *n2w, *n2b, *w1, *w2; };
struct lg { float *n1w, *n1b, *wqkv, *wo, *n2w, *n2b, *w1, *w2; };

/* A layer's tensors inside its parameter (F = const float) or gradient
 * (F = float) block; the norm biases are NULL in LLaMA. */
template <typename F, typename P> static void layer_tensors(const bsipipe_layer_off *o, F *b, P *p)
{
    p->n1w = b + o->n1w;
    p->n1b = o->n1b >= 0 ? b + o->n1b : NULL;
    p->wqkv = b + o->wqkv;
    p->wo = b + o->wo;
    p->n2w = b + o->n2w;
    p->n2b = o->n2b >= 0 ? b + o->n2b : NULL;
    p->w1 = b + o->w1;
    p->w2 = b + o->w2;
}

static void layer_ptrs(const bsipipe_layer_off *o, const float *b, lp *p) { layer_tensors(o, b, p); }
static void layer_gptrs(const bsipipe_layer_off *o, float *b, lg *g) { layer_tensors(o, b, g); }

struct wst_off { long dy, dx2, dqkv, da1, total; };
static void wst_layout(const bsipipe_model_dims_t *dm, int len, wst_off *o)
{
    long n = len, h = dm->hidden, at = 0;
    o->dy = at; at += n * h;
    o->dx2 = at; at += n * h;
    o->dqkv = at; at += 3 * n * h;
    o->da1 = at; at += n * kern_a1_width(dm);
    o->total = at;
}

static int rope(cudaStream_t s, int n, int H, int hd, int pos0, float *x, int ld, int dir)
{
    size_t tot = (size_t)n * (hd / 2) * H;
    BSIPIPE_LAUNCH(k_rope, nblocks(tot, 256), 256, 0, s, n, H, hd, pos0, x, ld, dir);
    return launched();
}

static int act_fwd(cudaStream_t s, bool llama, int n, int f, const float *a1, float *a2)
{
    size_t tot = (size_t)n * f;
    if (llama)
        BSIPIPE_LAUNCH(k_swiglu_fwd, nblocks(tot, 256), 256, 0, s, n, f, a1, a2);
    else
        BSIPIPE_LAUNCH(k_gelu_fwd, nblocks(tot, 256), 256, 0, s, tot, a1, a2);
    return launched();
}

static int act_bwd(cudaStream_t s, bool llama, int n, int f, const float *a1, const float *da2,
                   float *da1)
{
    size_t tot = (size_t)n * f;
    if (llama)
        BSIPIPE_LAUNCH(k_swiglu_bwd, nblocks(tot, 256), 256, 0, s, n, f, a1, da2, da1);
    else
        BSIPIPE_LAUNCH(k_gelu_bwd, nblocks(tot, 256), 256, 0, s, tot, a1, da2, da1);
    return launched();
}

/* fp32 copies of rows [0, n) of bf16 K and V (ld d), for the fp32 attention kernels when the
 * tensor-core ones do not fit the GPU's shared memory; *t is stream-ordered scratch */
static int kv16_widen(const __nv_bfloat16 *K, const __nv_bfloat16 *V, size_t n, float **t,
                      cudaStream_t s)
{
    RC_TRY(scratch(t, 2 * n, s));
    RC_TRY(from_bf16(n, K, *t, s));
    return from_bf16(n, V, *t + n, s);
}

/* attention forward over bf16 K/V (BF16S) */
static int attention_fwd_kv16(int H, int hd, int start, int len, const float *q, int ldq,
                              const __nv_bfloat16 *K, const __nv_bfloat16 *V, int ldk, float *o,
                              int ldo, float *lse, cudaStream_t s)
{
    float *t = NULL;
    int rc = bsipipe_cuda_attention_tc_forward_kv16(H, hd, start, len, q, ldq, K, V, ldk, o, ldo,
                                                    lse, att_scale(hd), s);
    if (rc != -ENOSPC)
        return rc;
    size_t n = (size_t)(start + len) * ldk;
    rc = kv16_widen(K, V, n, &t, s);
    if (!rc)
        rc = att_fwd_fp32(H, hd, start, len, q, ldq, t, t + n, ldk, o, ldo, lse, s);
    return scratch_end(t, rc, s);
}

/* attention backward over bf16 K/V (BF16S); dK, dV fp32 */
static int attention_bwd_kv16(int H, int hd, int start, int len, const float *q, int ldq,
                              const __nv_bfloat16 *K, const __nv_bfloat16 *V, int ldk,
                              const float *o, const float *do_, int ldo, const float *lse,
                              float *dq, int lddq, float *dk, float *dv, cudaStream_t s)
{
    float *dvec = NULL, *t = NULL;
    int rc = att_dvec(H, hd, len, o, do_, ldo, &dvec, s);
    if (!rc)
        rc = bsipipe_cuda_attention_tc_backward_kv16(H, hd, start, len, q, ldq, K, V, ldk, do_,
                                                     ldo, lse, dvec, dq, lddq, dk, dv,
                                                     att_scale(hd), s);
    if (rc == -ENOSPC) { /* the fp32 kernels on fp32 copies of K and V */
        size_t n = (size_t)(start + len) * ldk;
        rc = kv16_widen(K, V, n, &t, s);
        if (!rc)
            rc = att_bwd_fp32(H, hd, start, len, q, ldq, t, t + n, ldk, do_, ldo, lse, dvec, dq,
                              lddq, dk, dv, s);
        rc = scratch_end(t, rc, s);
    }
    return scratch_end(dvec, rc, s);
}

/* kvtmp (BF16S only, 2 len hidden floats): where the piece's K and V rows are computed
 * in fp32 before they are stored in the bf16 kv */
static int layer_fwd(const bsipipe_model_dims_t *dm, int start, int len, const lp *p,
                     float *stash, float *kv, float *y, float *kvtmp, cudaStream_t s,
                     cublasHandle_t hb)
{
    bsipipe_stash_off so;
    int d = dm->hidden, H = dm->n_heads, hd = d / H, f = dm->ffn_hidden;
    int a1w = kern_a1_width(dm);
    bool llama = dm->family == BSIPIPE_MODEL_LLAMA;
    size_t kvrows = (size_t)dm->seq_len * d, nd = (size_t)len * d;
    const bool kv16 = stash_bf16(g_mode);
    float *K = kv, *Vc = kv + kvrows;
    __nv_bfloat16 *K16 = (__nv_bfloat16 *)kv, *V16 = K16 + kvrows;
    float *Kw = kv16 ? kvtmp : K + IX(start, 0, d), *Vw = kv16 ? kvtmp + nd : Vc + IX(start, 0, d);
    kern_stash_off(dm, len, &so);
    float *x = stash + so.x, *n1 = stash + so.n1, *q = stash + so.q, *att = stash + so.att;
    float *x2 = stash + so.x2, *n2 = stash + so.n2, *a1 = stash + so.a1, *a2 = stash + so.a2;

    RC_TRY(norm_fwd(s, len, d, x, p->n1w, p->n1b, n1, stash + so.s1));
    RC_TRY(lin_fwd(hb, len, d, d, n1, d, p->wqkv, d, 0.0f, q, d));
    RC_TRY(lin_fwd(hb, len, d, d, n1, d, p->wqkv + IX(d, 0, d), d, 0.0f, Kw, d));
    RC_TRY(lin_fwd(hb, len, d, d, n1, d, p->wqkv + IX(2 * d, 0, d), d, 0.0f, Vw, d));
    if (llama) {
        RC_TRY(rope(s, len, H, hd, start, q, d, 1));
        RC_TRY(rope(s, len, H, hd, start, Kw, d, 1));
    }
    if (kv16) { /* the piece's rows into the bf16 kv, then attention over the bf16 prefix */
        RC_TRY(to_bf16(nd, Kw, K16 + IX(start, 0, d), s));
        RC_TRY(to_bf16(nd, Vw, V16 + IX(start, 0, d), s));
        RC_TRY(attention_fwd_kv16(H, hd, start, len, q, d, K16, V16, d, att, d, stash + so.lse, s));
    } else {
        RC_TRY(bsipipe_cuda_attention_forward(H, hd, start, len, q, d, K, Vc, d, att, d,
                                              stash + so.lse, s));
    }
    RC_TRY(copy_d2d(x2, x, (size_t)len * d, s));
    RC_TRY(lin_fwd(hb, len, d, d, att, d, p->wo, d, 1.0f, x2, d));
    RC_TRY(norm_fwd(s, len, d, x2, p->n2w, p->n2b, n2, stash + so.s2));
    RC_TRY(lin_fwd(hb, len, a1w, d, n2, d, p->w1, d, 0.0f, a1, a1w));
    RC_TRY(act_fwd(s, llama, len, f, a1, a2));
    RC_TRY(copy_d2d(y, x2, (size_t)len * d, s));
    RC_TRY(lin_fwd(hb, len, d, f, a2, f, p->w2, f, 1.0f, y, d));
    return 0;
}

static int layer_wgrad(const bsipipe_model_dims_t *dm, int len, const lg *g, const float *stash,
                       const float *dy, const float *da1, const float *dx2, const float *dqkv,
                       cublasHandle_t hb)
{
    bsipipe_stash_off so;
    int d = dm->hidden, f = dm->ffn_hidden, a1w = kern_a1_width(dm);
    kern_stash_off(dm, len, &so);
    RC_TRY(lin_bwd_w(hb, len, d, f, dy, d, stash + so.a2, f, g->w2, f));
    RC_TRY(lin_bwd_w(hb, len, a1w, d, da1, a1w, stash + so.n2, d, g->w1, d));
    RC_TRY(lin_bwd_w(hb, len, d, d, dx2, d, stash + so.att, d, g->wo, d));
    RC_TRY(lin_bwd_w(hb, len, 3 * d, d, dqkv, 3 * d, stash + so.n1, d, g->wqkv, d));
    return 0;
}

static int layer_bwd(const bsipipe_model_dims_t *dm, int start, int len, const lp *p,
                     const lg *g, const float *stash, const float *kv, float *dkv, float *work,
                     float *buf, float *wst, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_stash_off so;
    bsipipe_work_off wo;
    wst_off wso;
    int d = dm->hidden, H = dm->n_heads, hd = d / H, f = dm->ffn_hidden;
    int a1w = kern_a1_width(dm);
    bool llama = dm->family == BSIPIPE_MODEL_LLAMA;
    size_t kvrows = (size_t)dm->seq_len * d;
    const float *K = kv, *Vc = kv + kvrows;
    const __nv_bfloat16 *K16 = (const __nv_bfloat16 *)kv, *V16 = K16 + kvrows; /* BF16S */
    float *dK = dkv, *dV = dkv + kvrows;
    kern_stash_off(dm, len, &so);
    kern_work_off(dm, len, &wo);
    wst_layout(dm, len, &wso);
    const float *x = stash + so.x, *q = stash + so.q;
    const float *att = stash + so.att, *x2 = stash + so.x2, *a1 = stash + so.a1;
    float *dx2 = work + wo.dx, *dn = work + wo.dn, *datt = work + wo.datt;
    float *dqkv = work + wo.dqkv, *da1 = work + wo.da1, *da2 = work + wo.da2;
    float *dy = buf;
    size_t nd = (size_t)len * d;
    if (wst)
        RC_TRY(copy_d2d(wst + wso.dy, dy, nd, s));

    /* MLP */
    RC_TRY(lin_bwd_x(hb, len, d, f, dy, d, p->w2, f, 0.0f, da2, f));
    RC_TRY(act_bwd(s, llama, len, f, a1, da2, da1));
    RC_TRY(lin_bwd_x(hb, len, a1w, d, da1, a1w, p->w1, d, 0.0f, dn, d));
    if (wst)
        RC_TRY(copy_d2d(wst + wso.da1, da1, (size_t)len * a1w, s));
    RC_TRY(copy_d2d(dx2, dy, nd, s));
    RC_TRY(norm_bwd(s, len, d, x2, p->n2w, p->n2b != NULL, stash + so.s2, dn, dx2, g->n2w,
                    g->n2b, 1));

    /* attention */
    RC_TRY(lin_bwd_x(hb, len, d, d, dx2, d, p->wo, d, 0.0f, datt, d));
    if (wst)
        RC_TRY(copy_d2d(wst + wso.dx2, dx2, nd, s));
    if (stash_bf16(g_mode))
        RC_TRY(attention_bwd_kv16(H, hd, start, len, q, d, K16, V16, d, att, datt, d,
                                  stash + so.lse, dqkv, 3 * d, dK, dV, s));
    else
        RC_TRY(bsipipe_cuda_attention_backward(H, hd, start, len, q, d, K, Vc, d, att, datt, d,
                                           stash + so.lse, dqkv, 3 * d, dK, dV, s));
    CU_TRY(cudaMemcpy2DAsync(dqkv + d, sizeof(float) * 3 * d, dK + IX(start, 0, d),
                             sizeof(float) * d, sizeof(float) * d, len,
                             cudaMemcpyDeviceToDevice, s));
    CU_TRY(cudaMemcpy2DAsync(dqkv + 2 * d, sizeof(float) * 3 * d, dV + IX(start, 0, d),
                             sizeof(float) * d, sizeof(float) * d, len,
                             cudaMemcpyDeviceToDevice, s));
    if (llama) {
        RC_TRY(rope(s, len, H, hd, start, dqkv, 3 * d, -1));
        RC_TRY(rope(s, len, H, hd, start, dqkv + d, 3 * d, -1));
    }
    RC_TRY(lin_bwd_x(hb, len, 3 * d, d, dqkv, 3 * d, p->wqkv, d, 0.0f, dn, d));
    if (wst)
        RC_TRY(copy_d2d(wst + wso.dqkv, dqkv, (size_t)len * 3 * d, s));
    else
        RC_TRY(layer_wgrad(dm, len, g, stash, dy, da1, dx2, dqkv, hb));
    RC_TRY(copy_d2d(buf, dx2, nd, s));
    RC_TRY(norm_bwd(s, len, d, x, p->n1w, p->n1b != NULL, stash + so.s1, dn, buf, g->n1w,
                    g->n1b, 1));
    return 0;
}

static int piece_check(const bsipipe_model_dims_t *d, int start, int len)
{
    if (bsipipe_model_dims_check(d) || start < 0 || len < 1 || start > d->seq_len - len)
        return -EINVAL;
    if (d->hidden / d->n_heads > AT_MAXHD)
        return -EINVAL;
    return 0;
}

static int set_stream(cublasHandle_t hb, cudaStream_t s)
{
    return cublasSetStream(hb, s) == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

static int chunk_bwd(const bsipipe_model_dims_t *d, int l0, int l1, int start, int len,
                     const float *layers, float *grads, const float *dy, float *dx,
                     const float *stash, const float *kv, float *dkv, float *wstash,
                     float *work, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_layer_off lo;
    bsipipe_work_off wo;
    wst_off wso;
    lp p;
    lg g;
    size_t ss, kvs, nd;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !layers ||
        !grads || !dy || !dx || !stash || !kv || !dkv || !work || !hb)
        return -EINVAL;
    RC_TRY(set_stream(hb, s));
    kern_layer_off(d, &lo);
    kern_work_off(d, len, &wo);
    wst_layout(d, len, &wso);
    const stash_fmt f = stash_fmt_of(d, len, g_mode);
    ss = f.total;
    kvs = kv_floats(d, g_mode);
    nd = (size_t)len * d->hidden;
    float *st32 = NULL; /* BF16S: the layer's stash unpacked to fp32 */
    if (f.half)
        RC_TRY(scratch(&st32, f.ss, s));
    int rc = copy_d2d(work + wo.dy, dy, nd, s);
    for (int l = l1 - 1; l >= l0 && !rc; l--) {
        size_t i = (size_t)(l - l0);
        const float *st = stash + i * ss;
        if (st32 && !(rc = stash_unpack(d, len, st, st32, s)))
            st = st32;
        layer_ptrs(&lo, layers + i * (size_t)lo.total, &p);
        layer_gptrs(&lo, grads + i * (size_t)lo.total, &g);
        if (!rc)
            rc = layer_bwd(d, start, len, &p, &g, st, kv + i * kvs,
                           dkv + i * (size_t)bsipipe_model_kv_size(d), work,
                           work + wo.dy, wstash ? wstash + i * (size_t)wso.total : NULL, s, hb);
    }
    if (!rc)
        rc = copy_d2d(dx, work + wo.dy, nd, s);
    return scratch_end(st32, rc, s);
}

static int head_check(const bsipipe_model_dims_t *d, int len, const float *head,
                      const float *x, const float *work, cublasHandle_t hb)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len || !head || !x || !work ||
        !hb)
        return -EINVAL;
    return 0;
}

static int head_logits(const bsipipe_model_dims_t *d, const float *head, int len,
                       const float *x, float *work, float **xn, float **lgt, float **st,
                       cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_head_off ho;
    int h = d->hidden;
    kern_head_off(d, &ho);
    *xn = work;
    *lgt = work + (size_t)len * h;
    *st = *lgt + (size_t)len * d->vocab;
    RC_TRY(norm_fwd(s, len, h, x, head + ho.nfw, ho.nfb >= 0 ? head + ho.nfb : NULL, *xn, *st));
    return lin_fwd(hb, len, d->vocab, h, *xn, h, head + ho.wlm, h, 0.0f, *lgt, d->vocab);
}

} /* namespace */

/* ======================================================================= API */

extern "C" int bsipipe_cuda_set_gemm_mode(bsipipe_cuda_gemm_mode_t mode)
{
    if (mode != BSIPIPE_CUDA_GEMM_FP32 && mode != BSIPIPE_CUDA_GEMM_TF32 &&
        mode != BSIPIPE_CUDA_GEMM_BF16 && mode != BSIPIPE_CUDA_GEMM_BF16S)
        return -EINVAL;
    g_mode = mode;
    return 0;
}

extern "C" bsipipe_cuda_gemm_mode_t bsipipe_cuda_get_gemm_mode(void) { return g_mode; }

extern "C" const char *bsipipe_cuda_gemm_mode_name(bsipipe_cuda_gemm_mode_t mode)
{
    switch (mode) {
    case BSIPIPE_CUDA_GEMM_FP32: return "fp32";
    case BSIPIPE_CUDA_GEMM_TF32: return "tf32";
    case BSIPIPE_CUDA_GEMM_BF16: return "bf16";
    case BSIPIPE_CUDA_GEMM_BF16S: return "bf16s";
    }
    return "?";
}

extern "C" long bsipipe_cuda_stash_size(const bsipipe_model_dims_t *d, int len,
                                        bsipipe_cuda_gemm_mode_t mode)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len)
        return -EINVAL;
    return (long)stash_fmt_of(d, len, mode).total;
}

extern "C" long bsipipe_cuda_kv_size(const bsipipe_model_dims_t *d, bsipipe_cuda_gemm_mode_t mode)
{
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    return (long)kv_floats(d, mode);
}

extern "C" int bsipipe_cuda_kv_pack(const bsipipe_model_dims_t *d, const float *fp32_kv, float *kv,
                                    cudaStream_t s)
{
    if (bsipipe_model_dims_check(d) || !fp32_kv || !kv)
        return -EINVAL;
    size_t n = (size_t)bsipipe_model_kv_size(d);
    if (!stash_bf16(g_mode))
        return copy_d2d(kv, fp32_kv, n, s);
    return to_bf16(n, fp32_kv, (__nv_bfloat16 *)kv, s);
}

extern "C" int bsipipe_cuda_kv_unpack(const bsipipe_model_dims_t *d, const float *kv,
                                      float *fp32_kv, cudaStream_t s)
{
    if (bsipipe_model_dims_check(d) || !fp32_kv || !kv)
        return -EINVAL;
    size_t n = (size_t)bsipipe_model_kv_size(d);
    if (!stash_bf16(g_mode))
        return copy_d2d(fp32_kv, kv, n, s);
    return from_bf16(n, (const __nv_bfloat16 *)kv, fp32_kv, s);
}

extern "C" int bsipipe_cuda_stash_pack(const bsipipe_model_dims_t *d, int len,
                                       const float *fp32_stash, float *stash, cudaStream_t s)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len || !fp32_stash || !stash)
        return -EINVAL;
    if (!stash_bf16(g_mode))
        return copy_d2d(stash, fp32_stash, stash_fmt_of(d, len, g_mode).ss, s);
    return stash_pack(d, len, fp32_stash, stash, s);
}

extern "C" int bsipipe_cuda_stash_unpack(const bsipipe_model_dims_t *d, int len,
                                         const float *stash, float *fp32_stash, cudaStream_t s)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len || !fp32_stash || !stash)
        return -EINVAL;
    if (!stash_bf16(g_mode))
        return copy_d2d(fp32_stash, stash, stash_fmt_of(d, len, g_mode).ss, s);
    return stash_unpack(d, len, stash, fp32_stash, s);
}

extern "C" int bsipipe_cuda_embed_forward(const bsipipe_model_dims_t *d, const float *embed,
                                          const int *tokens, int start, int len, float *x_out,
                                          cudaStream_t s)
{
    bsipipe_embed_off eo;
    if (bsipipe_model_dims_check(d) || start < 0 || len < 1 || start > d->seq_len - len ||
        !embed || !tokens || !x_out)
        return -EINVAL;
    kern_embed_off(d, &eo);
    size_t tot = (size_t)len * d->hidden;
    BSIPIPE_LAUNCH(k_embed_fwd, nblocks(tot, 256), 256, 0, s, d->hidden, d->vocab, embed + eo.wte,
                                                  eo.wpe >= 0 ? embed + eo.wpe : NULL, tokens,
                                                  start, len, x_out);
    return launched();
}

extern "C" int bsipipe_cuda_embed_backward(const bsipipe_model_dims_t *d, float *embed_grad,
                                           const int *tokens, int start, int len,
                                           const float *dx, cudaStream_t s)
{
    bsipipe_embed_off eo;
    if (bsipipe_model_dims_check(d) || start < 0 || len < 1 || start > d->seq_len - len ||
        !embed_grad || !tokens || !dx)
        return -EINVAL;
    kern_embed_off(d, &eo);
    size_t tot = (size_t)len * d->hidden;
    BSIPIPE_LAUNCH(k_embed_bwd, nblocks(tot, 256), 256, 0, s, d->hidden, d->vocab, embed_grad + eo.wte,
                                                  eo.wpe >= 0 ? embed_grad + eo.wpe : NULL,
                                                  tokens, start, len, dx);
    return launched();
}

extern "C" int bsipipe_cuda_attention_forward(int n_heads, int head_dim, int start, int len,
                                              const float *q, int ldq, const float *k,
                                              const float *v, int ldk, float *o, int ldo,
                                              float *lse, cudaStream_t s)
{
    int rc = att_check(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo);
    if (rc || !lse)
        return rc ? rc : -EINVAL;
    if (attention_on_tensor_cores()) {
        rc = bsipipe_cuda_attention_tc_forward(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o,
                                               ldo, lse, att_scale(head_dim), s);
        if (rc != -ENOSPC) /* -ENOSPC: too little shared memory here, the fp32 kernel */
            return rc;
    }
    return att_fwd_fp32(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo, lse, s);
}

extern "C" int bsipipe_cuda_attention_backward(int n_heads, int head_dim, int start, int len,
                                               const float *q, int ldq, const float *k,
                                               const float *v, int ldk, const float *o,
                                               const float *do_, int ldo, const float *lse,
                                               float *dq, int lddq, float *dk, float *dv,
                                               cudaStream_t s)
{
    int rc = att_check(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo);
    if (rc || !do_ || !lse || !dq || !dk || !dv || lddq < n_heads * head_dim)
        return rc ? rc : -EINVAL;
    float *dvec = NULL;
    rc = att_dvec(n_heads, head_dim, len, o, do_, ldo, &dvec, s);
    if (!rc) /* -ENOSPC: the fp32 kernels, chosen or because the tensor-core ones do not fit */
        rc = attention_on_tensor_cores()
                 ? bsipipe_cuda_attention_tc_backward(n_heads, head_dim, start, len, q, ldq, k, v,
                                                      ldk, do_, ldo, lse, dvec, dq, lddq, dk, dv,
                                                      att_scale(head_dim), s)
                 : -ENOSPC;
    if (rc == -ENOSPC)
        rc = att_bwd_fp32(n_heads, head_dim, start, len, q, ldq, k, v, ldk, do_, ldo, lse, dvec,
                          dq, lddq, dk, dv, s);
    return scratch_end(dvec, rc, s);
}

extern "C" int bsipipe_cuda_chunk_forward(const bsipipe_model_dims_t *d, int l0, int l1,
                                          int start, int len, const float *layers,
                                          const float *x_in, float *x_out, float *stash,
                                          float *kv, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_layer_off lo;
    bsipipe_stash_off so;
    lp p;
    size_t ss, kvs;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !layers ||
        !x_in || !x_out || !stash || !kv || !hb)
        return -EINVAL;
    RC_TRY(set_stream(hb, s));
    kern_layer_off(d, &lo);
    kern_stash_off(d, len, &so);
    const stash_fmt f = stash_fmt_of(d, len, g_mode);
    ss = f.total;
    kvs = kv_floats(d, g_mode);
    size_t nd = (size_t)len * d->hidden;
    if (!f.half) { /* fp32 stash: each layer's output is the next one's stashed input */
        RC_TRY(copy_d2d(stash + so.x, x_in, nd, s));
        for (int l = l0; l < l1; l++) {
            size_t i = (size_t)(l - l0);
            float *st = stash + i * ss;
            float *y = l + 1 < l1 ? stash + (i + 1) * ss + so.x : x_out;
            layer_ptrs(&lo, layers + i * (size_t)lo.total, &p);
            RC_TRY(layer_fwd(d, start, len, &p, st, kv + i * kvs, y, NULL, s, hb));
        }
        return 0;
    }
    /* BF16S: each layer runs on an fp32 scratch stash, packed into bf16 after it; its
     * output goes to x_out and from there into the scratch as the next layer's input. The
     * scratch also holds the piece's K and V rows before they go into the bf16 kv. */
    float *st32 = NULL;
    const size_t kvtmp = (f.ss + 63) / 64 * 64; /* 256-byte aligned GEMM outputs */
    RC_TRY(scratch(&st32, kvtmp + 2 * nd, s));
    int rc = copy_d2d(st32 + so.x, x_in, nd, s);
    for (int l = l0; l < l1 && !rc; l++) {
        size_t i = (size_t)(l - l0);
        layer_ptrs(&lo, layers + i * (size_t)lo.total, &p);
        rc = layer_fwd(d, start, len, &p, st32, kv + i * kvs, x_out, st32 + kvtmp, s, hb);
        if (!rc)
            rc = stash_pack(d, len, st32, stash + i * ss, s);
        if (!rc && l + 1 < l1)
            rc = copy_d2d(st32 + so.x, x_out, nd, s);
    }
    return scratch_end(st32, rc, s);
}

extern "C" int bsipipe_cuda_chunk_backward(const bsipipe_model_dims_t *d, int l0, int l1,
                                           int start, int len, const float *layers,
                                           float *grads, const float *dy, float *dx,
                                           const float *stash, const float *kv, float *dkv,
                                           float *work, cudaStream_t s, cublasHandle_t hb)
{
    return chunk_bwd(d, l0, l1, start, len, layers, grads, dy, dx, stash, kv, dkv, NULL, work,
                     s, hb);
}

extern "C" int bsipipe_cuda_chunk_backward_input(const bsipipe_model_dims_t *d, int l0, int l1,
                                                 int start, int len, const float *layers,
                                                 float *grads, const float *dy, float *dx,
                                                 const float *stash, const float *kv,
                                                 float *dkv, float *wstash, float *work,
                                                 cudaStream_t s, cublasHandle_t hb)
{
    if (!wstash)
        return -EINVAL;
    return chunk_bwd(d, l0, l1, start, len, layers, grads, dy, dx, stash, kv, dkv, wstash,
                     work, s, hb);
}

extern "C" int bsipipe_cuda_chunk_backward_weight(const bsipipe_model_dims_t *d, int l0, int l1,
                                                  int start, int len, float *grads,
                                                  const float *stash, const float *wstash,
                                                  cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_layer_off lo;
    wst_off wso;
    lg g;
    size_t ss;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !grads ||
        !stash || !wstash || !hb)
        return -EINVAL;
    RC_TRY(set_stream(hb, s));
    kern_layer_off(d, &lo);
    wst_layout(d, len, &wso);
    const stash_fmt f = stash_fmt_of(d, len, g_mode);
    ss = f.total;
    float *st32 = NULL; /* BF16S: the layer's stash unpacked to fp32 */
    if (f.half)
        RC_TRY(scratch(&st32, f.ss, s));
    int rc = 0;
    for (int l = l1 - 1; l >= l0 && !rc; l--) {
        size_t i = (size_t)(l - l0);
        const float *w = wstash + i * (size_t)wso.total, *st = stash + i * ss;
        if (st32 && !(rc = stash_unpack(d, len, st, st32, s)))
            st = st32;
        layer_gptrs(&lo, grads + i * (size_t)lo.total, &g);
        if (!rc)
            rc = layer_wgrad(d, len, &g, st, w + wso.dy, w + wso.da1, w + wso.dx2, w + wso.dqkv,
                             hb);
    }
    return scratch_end(st32, rc, s);
}

extern "C" int bsipipe_cuda_head_forward(const bsipipe_model_dims_t *d, const float *head,
                                         int len, const float *x, const int *targets,
                                         float *logits, double *loss, float *work,
                                         cudaStream_t s, cublasHandle_t hb)
{
    float *xn, *lgt, *st;
    if (head_check(d, len, head, x, work, hb))
        return -EINVAL;
    RC_TRY(set_stream(hb, s));
    RC_TRY(head_logits(d, head, len, x, work, &xn, &lgt, &st, s, hb));
    if (logits)
        RC_TRY(copy_d2d(logits, lgt, (size_t)len * d->vocab, s));
    if (targets && loss) {
        CU_TRY(cudaMemsetAsync(loss, 0, sizeof(double), s));
        BSIPIPE_LAUNCH(k_ce, len, CE_NT, 0, s, d->vocab, lgt, targets, 0.0, 0, loss);
        RC_TRY(launched());
    }
    return 0;
}

extern "C" int bsipipe_cuda_head_forward_backward(const bsipipe_model_dims_t *d,
                                                  const float *head, float *head_grad, int len,
                                                  const float *x, const int *targets,
                                                  double grad_scale, double *loss, float *dx,
                                                  float *work, cudaStream_t s,
                                                  cublasHandle_t hb)
{
    bsipipe_head_off ho;
    float *xn, *lgt, *st;
    int V, h;
    if (head_check(d, len, head, x, work, hb) || !targets || !head_grad || !dx || !loss)
        return -EINVAL;
    RC_TRY(set_stream(hb, s));
    V = d->vocab;
    h = d->hidden;
    kern_head_off(d, &ho);
    RC_TRY(head_logits(d, head, len, x, work, &xn, &lgt, &st, s, hb));
    CU_TRY(cudaMemsetAsync(loss, 0, sizeof(double), s));
    BSIPIPE_LAUNCH(k_ce, len, CE_NT, 0, s, V, lgt, targets, grad_scale, 1, loss);
    RC_TRY(launched());
    RC_TRY(lin_bwd_w(hb, len, V, h, lgt, V, xn, h, head_grad + ho.wlm, h));
    RC_TRY(lin_bwd_x(hb, len, V, h, lgt, V, head + ho.wlm, h, 0.0f, xn, h));
    return norm_bwd(s, len, h, x, head + ho.nfw, ho.nfb >= 0, st, xn, dx, head_grad + ho.nfw,
                    ho.nfb >= 0 ? head_grad + ho.nfb : NULL, 0);
}

extern "C" int bsipipe_cuda_sumsq(long n, const float *g, double *out, cudaStream_t s)
{
    if (n < 0 || !out || (n && !g))
        return -EINVAL;
    CU_TRY(cudaMemsetAsync(out, 0, sizeof(double), s));
    if (!n)
        return 0;
    unsigned nb = nblocks((size_t)n, 256);
    if (nb > 4096)
        nb = 4096;
    BSIPIPE_LAUNCH(k_sumsq, nb, 256, 0, s, n, g, out);
    return launched();
}

extern "C" int bsipipe_cuda_adamw_update(const bsipipe_adamw_t *hp, long t, long n, float *p,
                                         const float *g, double grad_mul, int decay, float *m,
                                         float *v, cudaStream_t s)
{
    if (!hp || t < 1 || n < 0 || (n && (!p || !g || !m || !v)))
        return -EINVAL;
    if (!n)
        return 0;
    double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
    float step = (float)(hp->lr / bc1), bc2s = (float)sqrt(bc2);
    float dec = (float)(1.0 - hp->lr * (decay ? hp->weight_decay : 0.0));
    BSIPIPE_LAUNCH(k_adamw, nblocks((size_t)n, 256), 256, 0, s, n, p, g, (float)grad_mul,
                                                     grad_mul != 1.0, dec, (float)hp->beta1,
                                                     (float)hp->beta2, step, bc2s,
                                                     (float)hp->eps, m, v);
    return launched();
}

/* The tensor-parallel segments, on the helpers above (bsipipe_cuda_tp.h). */
#include "kernels/cuda/bsipipe_cuda_tp.cuh"
