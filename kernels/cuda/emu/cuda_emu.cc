/* kernels/cuda/emu/cuda_emu.cc: the CPU emulation of the CUDA runtime, kernel launches and
 * cuBLAS GEMMs used by bsipipe (see cuda_runtime_api.h, cuda_emu_device.h). */
#include "cuda_runtime.h"
#include "cublas_v2.h"
#include "cuda_bf16.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <numeric>
#include <vector>

namespace bsipipe_emu {

struct fiber {
    ucontext_t ctx;
    dim3 tid;
    int lin;
    bool done;
};

static const size_t STACK = 256 * 1024;
static ucontext_t g_sched;
static std::vector<fiber> g_fib;
static std::vector<char *> g_stacks;
static int g_cur = -1, g_nthr;
static dim3 g_bid, g_bdim, g_gdim;
static std::vector<unsigned char> g_smem;
static const std::function<void()> *g_body;
static unsigned g_bcount, g_bgen;
static std::vector<unsigned> g_wcount, g_wgen;
static std::vector<double> g_slots;
static long g_idle; /* yields while waiting since the last barrier completion */

const dim3 &tid() { return g_fib[g_cur].tid; }
const dim3 &bid() { return g_bid; }
const dim3 &bdim() { return g_bdim; }
const dim3 &gdim() { return g_gdim; }
/* 128-byte aligned, as an `extern __shared__ __align__(128)` array is on the GPU (wmma needs
 * 32-byte aligned tiles) */
void *dyn_smem() { return (void *)(((uintptr_t)g_smem.data() + 127) & ~(uintptr_t)127); }

static void wait_yield()
{
    if (++g_idle > 8L * g_nthr + 256) {
        fprintf(stderr, "cuda-emu: deadlock: threads wait at a barrier that others never reach "
                        "(block %u,%u,%u)\n", g_bid.x, g_bid.y, g_bid.z);
        abort();
    }
    swapcontext(&g_fib[g_cur].ctx, &g_sched);
}

void sync_block()
{
    unsigned gen = g_bgen;
    if (++g_bcount == (unsigned)g_nthr) {
        g_bcount = 0;
        g_bgen++;
        g_idle = 0;
        return;
    }
    while (g_bgen == gen)
        wait_yield();
}

void sync_warp()
{
    int w = g_fib[g_cur].lin / 32;
    unsigned n = (unsigned)std::min(32, g_nthr - 32 * w), gen = g_wgen[w];
    if (++g_wcount[w] == n) {
        g_wcount[w] = 0;
        g_wgen[w]++;
        g_idle = 0;
        return;
    }
    while (g_wgen[w] == gen)
        wait_yield();
}

double shfl_xor(double v, int lanemask)
{
    int lin = g_fib[g_cur].lin, base = lin & ~31, src = base + ((lin & 31) ^ lanemask);
    g_slots[lin] = v;
    sync_warp();
    double r = src < g_nthr ? g_slots[src] : v;
    sync_warp();
    return r;
}

static void entry()
{
    (*g_body)();
    g_fib[g_cur].done = true;
}

/* The order in which the scheduler resumes a block's threads: 0..n-1, or with
 * BSIPIPE_EMU_ORDER=reverse / scrambled another one, so code that only works because lane 0
 * happens to run first shows (kernels/cuda/emu/mma.h, strict mode). */
static int lane_order(int i)
{
    static int order = -1;
    if (order < 0) {
        const char *e = getenv("BSIPIPE_EMU_ORDER");
        order = !e ? 0 : !strcmp(e, "reverse") ? 1 : !strcmp(e, "scrambled") ? 2 : 0;
    }
    if (order == 1)
        return g_nthr - 1 - i;
    if (order == 2 && g_nthr > 1) {
        int step = 37; /* coprime with g_nthr: a permutation */
        while (std::gcd(step, g_nthr) != 1)
            step += 2;
        return (int)(((long)i * step + 11) % g_nthr);
    }
    return i;
}

void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    g_nthr = (int)(block.x * block.y * block.z);
    g_bdim = block;
    g_gdim = grid;
    g_body = &body;
    g_fib.resize(g_nthr);
    while ((int)g_stacks.size() < g_nthr)
        g_stacks.push_back((char *)malloc(STACK));
    g_wcount.assign((g_nthr + 31) / 32, 0);
    g_wgen.assign((g_nthr + 31) / 32, 0);
    g_slots.assign(g_nthr, 0.0);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                g_bid = dim3(bx, by, bz);
                g_smem.assign(smem + 128, 0xff); /* NaN bytes: unwritten shared data shows */
                g_bcount = g_bgen = 0;
                g_idle = 0;
                for (int i = 0; i < g_nthr; i++) {
                    fiber &f = g_fib[i];
                    f.lin = i;
                    f.tid = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
                    f.done = false;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = g_stacks[i];
                    f.ctx.uc_stack.ss_size = STACK;
                    f.ctx.uc_link = &g_sched;
                    makecontext(&f.ctx, entry, 0);
                }
                int alive = g_nthr;
                while (alive > 0) {
                    alive = 0;
                    for (int ii = 0; ii < g_nthr; ii++) {
                        int i = lane_order(ii);
                        if (g_fib[i].done)
                            continue;
                        g_cur = i;
                        swapcontext(&g_sched, &g_fib[i].ctx);
                        if (!g_fib[i].done)
                            alive++;
                    }
                }
                g_cur = -1;
            }
}

} // namespace bsipipe_emu

/* ------------------------------------------------------------------- runtime */

struct bsipipe_emu_stream { int dummy; };
struct bsipipe_emu_event { double t; };
struct bsipipe_emu_cublas { cudaStream_t s; };

static void *nan_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p)
        memset(p, 0xff, n ? n : 1); /* cudaMalloc memory is uninitialised: make reads show */
    return p;
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "bsipipe CPU emulation of CUDA");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = nan_alloc(n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind)
{
    if (n)
        memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t)
{
    return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                              enum cudaMemcpyKind, cudaStream_t)
{
    if (w > dp || w > sp)
        return cudaErrorInvalidValue;
    for (size_t r = 0; r < h; r++)
        memmove((char *)d + r * dp, (const char *)s + r * sp, w);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new bsipipe_emu_stream(); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new bsipipe_emu_event(); return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { e->t = now_ms(); return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
/* Shared memory a block may opt in to: Hopper's 227 KB, or BSIPIPE_EMU_SMEM_OPTIN bytes to
 * play a smaller GPU (99 KB: sm_86 / sm_89) */
cudaError_t bsipipe_emu_func_set_attribute(const void *, int, int v)
{
    const char *env = getenv("BSIPIPE_EMU_SMEM_OPTIN");
    long max = env && *env ? strtol(env, NULL, 10) : 227L * 1024;
    return v >= 0 && v <= max ? cudaSuccess : cudaErrorInvalidValue;
}

/* ----------------------------------------------------------------------- cuBLAS */

cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new bsipipe_emu_cublas(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->s = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->s;
    return CUBLAS_STATUS_SUCCESS;
}

static float round_bits(float x, int drop) /* round to nearest even, dropping `drop` mantissa bits */
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x; /* NaN stays NaN (adding the rounding bias could carry it into a number) */
    u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1u);
    u &= ~((1u << drop) - 1);
    memcpy(&x, &u, sizeof x);
    return x;
}

extern "C++" { /* overloads and a template inside the extern "C" block */
static inline float ld(const float *p, size_t i) { return p[i]; }
static inline float ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }


template <typename T>
static cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const T *a, int lda, const T *b, int ldb,
                           float beta, float *c, int ldc, int drop)
{
    if (m < 0 || n < 0 || k < 0 || lda < 1 || ldb < 1 || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((ta == CUBLAS_OP_N ? lda < m : lda < k) || (tb == CUBLAS_OP_N ? ldb < k : ldb < n))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int p = 0; p < k; p++) {
                float x = ta == CUBLAS_OP_N ? ld(a, i + (size_t)p * lda) : ld(a, p + (size_t)i * lda);
                float y = tb == CUBLAS_OP_N ? ld(b, p + (size_t)j * ldb) : ld(b, j + (size_t)p * ldb);
                if (drop) {
                    x = round_bits(x, drop);
                    y = round_bits(y, drop);
                }
                s += x * y;
            }
            float *cij = c + i + (size_t)j * ldc;
            *cij = beta == 0.0f ? alpha * s : alpha * s + beta * *cij; /* beta 0: C not read */
        }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C++" */

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return gemm(ta, tb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc, 0);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (at == CUDA_R_16BF && bt == CUDA_R_16BF && ct == CUDA_R_32F && comp == CUBLAS_COMPUTE_32F)
        /* bf16 storage (BSIPIPE_CUDA_GEMM_BF16S): bf16 operands, fp32 accumulation and C */
        return gemm(ta, tb, m, n, k, *(const float *)alpha, (const __nv_bfloat16 *)a, lda,
                    (const __nv_bfloat16 *)b, ldb, *(const float *)beta, (float *)c, ldc, 0);
    if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F)
        return CUBLAS_STATUS_INVALID_VALUE; /* only what bsipipe_cuda_kernels.cu uses */
    int drop = comp == CUBLAS_COMPUTE_32F_FAST_16BF ? 16 : comp == CUBLAS_COMPUTE_32F_FAST_TF32 ? 13 : 0;
    return gemm(ta, tb, m, n, k, *(const float *)alpha, (const float *)a, lda,
                (const float *)b, ldb, *(const float *)beta, (float *)c, ldc, drop);
}
} /* extern "C" */
