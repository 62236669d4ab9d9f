/* tests/test_cuda_bench.c: one transformer block's forward+backward on the GPU
 * (bsipipe_cuda_chunk_forward/backward, one layer, one sequence in k = 2 pieces balanced by
 * FLOPs), timed with CUDA events, beside the measured bf16 matrix-product rate of the same
 * GPU (cublasGemmEx, bf16 in/out, fp32 accumulation, 8192^3).
 *
 *   tests/test_cuda_bench            small shapes, one timed round: a smoke test (make check)
 *   tests/test_cuda_bench --full [--seq 8192] [--hidden 1280] [--heads 32] [--ffn 5120]
 *                         [--family gpt|llama] [--reps 3] [--table FILE] [--rate-n N]
 * --rate-n N: the bf16 rate's GEMM size (default 8192 with --full, else 2048; 0: not measured,
 * as in the CPU emulation run of tests/test_cuda_emu.sh).
 * TFLOP/s = model FLOPs (3x the forward's matrix products, bsipipe_model_layer_flops) / time.
 * Also attention alone (bsipipe_cuda_attention_forward + _backward over the same pieces; its
 * model FLOPs are 3x the forward's 4 * hidden * visible (query, key) pairs): the share of
 * the block it takes, and its rate (fp32 kernels, or the tensor cores in bf16 / bf16s).
 * Never asserts on time. Exit 77 without a CUDA GPU, 99 on a CUDA error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsipipe_kernels.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

#ifndef BSIPIPE_HAVE_CUDA
int main(void)
{
    printf("SKIP: no CUDA GPU found (libbsipipe was built without CUDA; test needs one)\n");
    return 77;
}
#else

#include <cuda_runtime_api.h>
#include "kernels/cuda/bsipipe_cuda_kernels.h"
#include "tests/cuda_check.h"

static float *dalloc(size_t n)
{
    float *p = NULL;
    CU(cudaMalloc((void **)&p, sizeof(float) * (n ? n : 1)));
    CU(cudaMemset(p, 0, sizeof(float) * (n ? n : 1)));
    return p;
}

static void fill_dev(float *d, size_t n, double scale, unsigned long long seed)
{
    float *h = malloc(sizeof(float) * n);
    if (!h)
        exit(99);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = (float)(((double)(seed >> 11) / 9007199254740992.0 * 2 - 1) * scale);
    }
    CU(cudaMemcpy(d, h, sizeof(float) * n, cudaMemcpyHostToDevice));
    free(h);
}

/* k = 2 cut minimising the larger piece's FLOPs (the CPU bench's "balanced"), aligned to 64 */
static int balanced_cut(const bsipipe_model_dims_t *d)
{
    int S = d->seq_len, best = S / 2;
    double bc = 1e300;
    for (int c = 1; c < S; c++) {
        if (S >= 128 && c % 64)
            continue;
        double a = bsipipe_model_layer_flops(d, 0, c), b = bsipipe_model_layer_flops(d, c, S - c);
        double m = a > b ? a : b;
        if (m < bc) {
            bc = m;
            best = c;
        }
    }
    return best;
}

/* float -> bf16 bits, round to nearest even (finite inputs) */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 GEMM rate (TFLOP/s) of cublasGemmEx at n^3 */
static double gemm_bf16_rate(cublasHandle_t hb, cudaStream_t s, int n, int reps)
{
    void *a, *b, *c;
    size_t bytes = (size_t)n * n * 2;
    CU(cudaMalloc(&a, bytes));
    CU(cudaMalloc(&b, bytes));
    CU(cudaMalloc(&c, bytes));
    {   /* random data (zeros run faster) */
        float *t = dalloc((size_t)n * n);
        uint16_t *hb16 = malloc(bytes);
        float *hf = malloc(sizeof(float) * (size_t)n * n);
        if (!hb16 || !hf)
            exit(99);
        fill_dev(t, (size_t)n * n, 1.0, 99);
        CU(cudaMemcpy(hf, t, sizeof(float) * (size_t)n * n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < (size_t)n * n; i++)
            hb16[i] = to_bf16(hf[i]);
        CU(cudaMemcpy(a, hb16, bytes, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(b, hb16, bytes, cudaMemcpyHostToDevice));
        free(hb16);
        free(hf);
        cudaFree(t);
    }
    float al = 1, be = 0;
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    cublasSetStream(hb, s);
    double best = 0;
    for (int r = 0; r < reps + 2; r++) {
        CU(cudaEventRecord(e0, s));
        if (cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &al, a, CUDA_R_16BF, n, b,
                         CUDA_R_16BF, n, &be, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasGemmEx bf16 failed\n");
            exit(99);
        }
        CU(cudaEventRecord(e1, s));
        CU(cudaEventSynchronize(e1));
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        double tf = 2.0 * n * (double)n * n / (ms * 1e-3) / 1e12;
        if (r >= 2 && tf > best)
            best = tf;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}

int main(int argc, char **argv)
{
    int full = 0, seq = 0, hidden = 0, heads = 0, ffn = 0, reps = 0, rate_n = -1;
    bsipipe_model_family_t fam = BSIPIPE_MODEL_GPT;
    const char *table = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--full"))
            full = 1;
        else if (!strcmp(a, "--seq") && v) seq = atoi(argv[++i]);
        else if (!strcmp(a, "--hidden") && v) hidden = atoi(argv[++i]);
        else if (!strcmp(a, "--heads") && v) heads = atoi(argv[++i]);
        else if (!strcmp(a, "--ffn") && v) ffn = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--rate-n") && v) rate_n = atoi(argv[++i]);
        else if (!strcmp(a, "--table") && v) table = argv[++i];
        else if (!strcmp(a, "--family") && v) {
            fam = !strcmp(argv[++i], "llama") ? BSIPIPE_MODEL_LLAMA : BSIPIPE_MODEL_GPT;
        } else {
            fprintf(stderr, "usage: %s [--full] [--seq N] [--hidden D] [--heads H] [--ffn F] "
                            "[--family gpt|llama] [--reps R] [--table FILE] [--rate-n N]\n", argv[0]);
            return 99;
        }
    }
    if (bsipipe_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA GPU found (test needs one; libbsipipe built with CUDA: %s)\n",
               bsipipe_cuda_compiled() ? "yes" : "no");
        return 77;
    }
    if (!seq) seq = full ? 8192 : 512;
    if (!hidden) hidden = full ? 1280 : 256;
    if (!heads) heads = full ? 32 : 4;
    if (!ffn) ffn = 4 * hidden;
    if (!reps) reps = full ? 3 : 1;
    bsipipe_model_dims_t d = {fam, 1, hidden, heads, ffn, 256, seq};
    if (bsipipe_model_dims_check(&d)) {
        fprintf(stderr, "bad dims\n");
        return 99;
    }
    struct cudaDeviceProp pr;
    CU(cudaGetDeviceProperties(&pr, 0));
    cudaStream_t s;
    cublasHandle_t hb;
    CU(cudaStreamCreate(&s));
    if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS)
        return 99;

    int cut = balanced_cut(&d), st[3] = {0, cut, seq};
    long lp = bsipipe_model_layer_params(&d), kvn = bsipipe_model_kv_size(&d);
    long ss0 = bsipipe_model_stash_size(&d, cut), ss1 = bsipipe_model_stash_size(&d, seq - cut);
    long ws = bsipipe_model_work_size(&d, cut > seq - cut ? cut : seq - cut);
    size_t nd = (size_t)seq * hidden;
    float *P = dalloc((size_t)lp), *G = dalloc((size_t)lp), *kv = dalloc((size_t)kvn);
    float *dkv = dalloc((size_t)kvn), *work = dalloc((size_t)ws), *x = dalloc(nd);
    float *y = dalloc(nd), *dy = dalloc(nd), *dx = dalloc(nd);
    float *stash[2] = {dalloc((size_t)ss0), dalloc((size_t)ss1)};
    {
        float *hp = malloc(sizeof(float) * (size_t)bsipipe_model_params(&d));
        if (!hp)
            return 99;
        bsipipe_model_init(&d, 1, hp);
        CU(cudaMemcpy(P, hp + bsipipe_model_layer_offset(&d, 0), sizeof(float) * (size_t)lp,
                      cudaMemcpyHostToDevice));
        free(hp);
    }
    fill_dev(x, nd, 2.0, 7);
    fill_dev(dy, nd, 1e-3, 8);
    double fl = 0;
    for (int j = 0; j < 2; j++)
        fl += 3 * bsipipe_model_layer_flops(&d, st[j], st[j + 1] - st[j]);

    /* attention alone: q/o/dO/dq [seq, hidden], K/V/dK/dV [seq, hidden], lse [heads, seq] */
    float *aq = dalloc(nd), *ak = dalloc(nd), *av = dalloc(nd), *ao = dalloc(nd);
    float *ado = dalloc(nd), *adq = dalloc(nd), *adk = dalloc(nd), *adv = dalloc(nd);
    float *alse = dalloc((size_t)heads * seq);
    fill_dev(aq, nd, 1.0, 9);
    fill_dev(ak, nd, 1.0, 10);
    fill_dev(av, nd, 1.0, 11);
    fill_dev(ado, nd, 1e-3, 12);
    double afl = 0; /* 4 * hidden per visible pair, forward; x3 for forward + backward */
    for (int j = 0; j < 2; j++)
        for (long i = st[j]; i < st[j + 1]; i++)
            afl += 3.0 * 4.0 * hidden * (double)(i + 1);

    if (rate_n < 0)
        rate_n = full ? 8192 : 2048;
    double rate = rate_n > 0 ? gemm_bf16_rate(hb, s, rate_n, full ? 10 : 2) : 0;
    if (rate_n > 0)
        printf("GPU: %s, %d SMs; cublasGemmEx bf16 (fp32 accumulate) %dx%dx%d: %.1f TFLOP/s\n",
               pr.name, pr.multiProcessorCount, rate_n, rate_n, rate_n, rate);
    else
        printf("GPU: %s, %d SMs; bf16 GEMM rate not measured (--rate-n 0)\n", pr.name,
               pr.multiProcessorCount);
    printf("block: %s hidden %d, %d heads, ffn %d, seq %d in k=2 pieces [0,%d) [%d,%d); "
           "%.1f GFLOP (model FLOPs, fwd+bwd)\n",
           fam == BSIPIPE_MODEL_GPT ? "GPT" : "LLaMA", hidden, heads, ffn, seq, cut, cut, seq,
           fl / 1e9);
    FILE *tsv = table ? fopen(table, "w") : NULL;
    printf("%-6s %10s %10s %10s %9s %10s %10s %8s\n", "gemm", "fwd_ms", "fwdbwd_ms", "TFLOP/s",
           "of_bf16", "attn_ms", "attn_TF/s", "attn%");
    /* bf16s: bf16 storage of the GEMM operands (conversions included in the time) */
    bsipipe_cuda_gemm_mode_t modes[4] = {BSIPIPE_CUDA_GEMM_FP32, BSIPIPE_CUDA_GEMM_TF32,
                                         BSIPIPE_CUDA_GEMM_BF16, BSIPIPE_CUDA_GEMM_BF16S};
    cudaEvent_t e0, e1, e2;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    CU(cudaEventCreate(&e2));
    for (int m = 0; m < 4; m++) {
        CHECK(bsipipe_cuda_set_gemm_mode(modes[m]));
        float bt = 1e30f, bf = 0;
        for (int r = 0; r <= reps; r++) { /* round 0 warms up */
            CU(cudaMemsetAsync(dkv, 0, sizeof(float) * (size_t)kvn, s));
            CU(cudaEventRecord(e0, s));
            for (int j = 0; j < 2; j++)
                CHECK(bsipipe_cuda_chunk_forward(&d, 0, 1, st[j], st[j + 1] - st[j], P,
                                                 x + (size_t)st[j] * hidden,
                                                 y + (size_t)st[j] * hidden, stash[j], kv, s, hb));
            CU(cudaEventRecord(e1, s));
            for (int j = 1; j >= 0; j--)
                CHECK(bsipipe_cuda_chunk_backward(&d, 0, 1, st[j], st[j + 1] - st[j], P, G,
                                                  dy + (size_t)st[j] * hidden,
                                                  dx + (size_t)st[j] * hidden, stash[j], kv, dkv,
                                                  work, s, hb));
            CU(cudaEventRecord(e2, s));
            CU(cudaEventSynchronize(e2));
            float tf = 0, tt = 0;
            CU(cudaEventElapsedTime(&tf, e0, e1));
            CU(cudaEventElapsedTime(&tt, e0, e2));
            if (r && tt < bt) {
                bt = tt;
                bf = tf;
            }
        }
        float at = 1e30f;
        for (int r = 0; r <= reps; r++) {
            CU(cudaMemsetAsync(adk, 0, sizeof(float) * nd, s));
            CU(cudaMemsetAsync(adv, 0, sizeof(float) * nd, s));
            CU(cudaEventRecord(e0, s));
            for (int j = 0; j < 2; j++) {
                size_t o0 = (size_t)st[j] * hidden;
                int len = st[j + 1] - st[j];
                CHECK(bsipipe_cuda_attention_forward(heads, hidden / heads, st[j], len, aq + o0,
                                                     hidden, ak, av, hidden, ao + o0, hidden,
                                                     alse, s));
                CHECK(bsipipe_cuda_attention_backward(heads, hidden / heads, st[j], len, aq + o0,
                                                      hidden, ak, av, hidden, ao + o0, ado + o0,
                                                      hidden, alse, adq + o0, hidden, adk, adv,
                                                      s));
            }
            CU(cudaEventRecord(e1, s));
            CU(cudaEventSynchronize(e1));
            float ta = 0;
            CU(cudaEventElapsedTime(&ta, e0, e1));
            if (r && ta < at)
                at = ta;
        }
        double tfl = fl / (bt * 1e-3) / 1e12, atfl = afl / (at * 1e-3) / 1e12;
        printf("%-6s %10.2f %10.2f %10.2f %8.1f%% %10.2f %10.2f %7.1f%%\n",
               bsipipe_cuda_gemm_mode_name(modes[m]), bf, bt, tfl, rate > 0 ? 100 * tfl / rate : 0,
               at, atfl, 100.0 * at / bt);
        if (tsv)
            fprintf(tsv, "%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.4f\t%.1f\t%.3f\t%.3f\n",
                    bsipipe_cuda_gemm_mode_name(modes[m]), hidden, heads, seq, bf, bt, tfl,
                    rate > 0 ? tfl / rate : 0, rate, at, atfl);
    }
    if (tsv)
        fclose(tsv);
    CHECK(bsipipe_cuda_set_gemm_mode(BSIPIPE_CUDA_GEMM_FP32));
    cudaFree(P); cudaFree(G); cudaFree(kv); cudaFree(dkv); cudaFree(work); cudaFree(x);
    cudaFree(y); cudaFree(dy); cudaFree(dx); cudaFree(stash[0]); cudaFree(stash[1]);
    cudaFree(aq); cudaFree(ak); cudaFree(av); cudaFree(ao); cudaFree(ado); cudaFree(adq);
    cudaFree(adk); cudaFree(adv); cudaFree(alse);
    cublasDestroy(hb);
    cudaStreamDestroy(s);
    printf("PASS (timings only; nothing asserted)\n");
    return 0;
}
#endif
