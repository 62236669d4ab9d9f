/* tests/test_cuda_kernels.c: every CUDA kernel (kernels/cuda/bsipipe_cuda_kernels.h)
 * against its CPU twin on random inputs, GPT and LLaMA, several head sizes.
 *
 * Each CUDA call gets exactly the inputs the CPU call got (uploaded from the CPU run), so
 * every row of the table checks one kernel. Error per tensor = max|gpu - cpu| / max|cpu|
 * (normwise relative); NaN or Inf never passes. Tolerances: 1e-5 with fp32 matrix products,
 * 1e-2 with bf16 (CUBLAS_COMPUTE_32F_FAST_16BF), tf32 and bf16s (bf16 storage of the
 * GEMM operands, fp32 accumulation). Each row also prints max|gpu - cpu| (absolute).
 *
 *   tests/test_cuda_kernels [--mode fp32|tf32|bf16|bf16s|all] [--table FILE] [--cpu-only] [--large]
 *                           [--attention-only]
 * Default mode: fp32 and bf16. --table also writes the table (TSV) to FILE. --cpu-only runs
 * only the CPU side (reference computations of every case) and needs no GPU. --large adds
 * two cases at the benchmark's layer shapes (hidden 1280; the device check uses it).
 * Exit: 0 pass, 1 a tensor over tolerance, 77 no CUDA GPU (or built without CUDA),
 * 99 a CUDA/API error. */
#include <math.h>
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

/* --cpu-only (no GPU needed): run every CPU reference computation of the cases, skip the
 * CUDA calls and the comparisons; the device check's dry run uses it. */
static int g_gpu = 1, g_cpu_cases, g_large, g_attention_only;
#define GCHECK(call)                                                                        \
    do {                                                                                    \
        if (g_gpu)                                                                          \
            CHECK(call);                                                                    \
    } while (0)
static void dfree(void *p)
{
    if (g_gpu && p)
        cudaFree(p);
}

static cudaStream_t g_s;
static cublasHandle_t g_h;
static double g_tol;
static const char *g_mode = "fp32";
static int g_fail, g_rows;
static double g_worst;
static FILE *g_tsv;

/* ---------------------------------------------------------------- helpers */

static unsigned long long g_rng = 0x1234567ULL;
static double urand(void) { return check_urand(&g_rng); } /* [0, 1) */
static void fill(float *p, long n, double scale)
{
    for (long i = 0; i < n; i++)
        p[i] = (float)((2 * urand() - 1) * scale);
}
static float *rnd(long n, double scale)
{
    float *p = check_calloc(sizeof(float) * (size_t)n);
    fill(p, n, scale);
    return p;
}
static float *up(const float *h, long n)
{
    float *d = NULL;
    if (!g_gpu)
        return NULL;
    CU(cudaMalloc((void **)&d, sizeof(float) * (size_t)(n ? n : 1)));
    if (n)
        CU(cudaMemcpy(d, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    return d;
}
static int *upi(const int *h, long n)
{
    int *d = NULL;
    if (!g_gpu)
        return NULL;
    CU(cudaMalloc((void **)&d, sizeof(int) * (size_t)n));
    CU(cudaMemcpy(d, h, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice));
    return d;
}
static float *zeros_dev(long n)
{
    float *d = NULL;
    if (!g_gpu)
        return NULL;
    CU(cudaMalloc((void **)&d, sizeof(float) * (size_t)(n ? n : 1)));
    CU(cudaMemset(d, 0, sizeof(float) * (size_t)(n ? n : 1)));
    return d;
}

/* The CPU kernels' stash (L layers in the fp32 layout) as the CUDA kernels keep it in the
 * current mode (bf16 activations in BF16S), packed layer by layer on the device. */
static float *stash_up(const bsipipe_model_dims_t *d, int L, int len, const float *cpu)
{
    if (!g_gpu)
        return NULL;
    long ss = bsipipe_model_stash_size(d, len);
    long sm = bsipipe_cuda_stash_size(d, len, bsipipe_cuda_get_gemm_mode());
    float *tmp = up(cpu, (long)L * ss), *out = zeros_dev((long)L * sm);
    for (int l = 0; l < L; l++)
        CHECK(bsipipe_cuda_stash_pack(d, len, tmp + (size_t)l * ss, out + (size_t)l * sm, g_s));
    CU(cudaStreamSynchronize(g_s));
    dfree(tmp);
    return out;
}

/* A device stash in the current mode unpacked to the fp32 layout (a new device buffer), to
 * compare with the CPU's. */
static float *stash_down32(const bsipipe_model_dims_t *d, int L, int len, const float *dev)
{
    if (!g_gpu)
        return NULL;
    long ss = bsipipe_model_stash_size(d, len);
    long sm = bsipipe_cuda_stash_size(d, len, bsipipe_cuda_get_gemm_mode());
    float *out = zeros_dev((long)L * ss);
    for (int l = 0; l < L; l++)
        CHECK(bsipipe_cuda_stash_unpack(d, len, dev + (size_t)l * sm, out + (size_t)l * ss, g_s));
    CU(cudaStreamSynchronize(g_s));
    return out;
}

/* The same for kv (L layers of K and V; bf16 in BF16S), and back to fp32 for cmp. */
static float *kv_up(const bsipipe_model_dims_t *d, int L, const float *cpu)
{
    if (!g_gpu)
        return NULL;
    long n = bsipipe_model_kv_size(d), m = bsipipe_cuda_kv_size(d, bsipipe_cuda_get_gemm_mode());
    float *tmp = up(cpu, (long)L * n), *out = zeros_dev((long)L * m);
    for (int l = 0; l < L; l++)
        CHECK(bsipipe_cuda_kv_pack(d, tmp + (size_t)l * n, out + (size_t)l * m, g_s));
    CU(cudaStreamSynchronize(g_s));
    dfree(tmp);
    return out;
}

static float *kv_down32(const bsipipe_model_dims_t *d, int L, const float *dev)
{
    if (!g_gpu)
        return NULL;
    long n = bsipipe_model_kv_size(d), m = bsipipe_cuda_kv_size(d, bsipipe_cuda_get_gemm_mode());
    float *out = zeros_dev((long)L * n);
    for (int l = 0; l < L; l++)
        CHECK(bsipipe_cuda_kv_unpack(d, dev + (size_t)l * m, out + (size_t)l * n, g_s));
    CU(cudaStreamSynchronize(g_s));
    return out;
}

/* Prints one table row (and its TSV line) and counts it: rows, failures, the
 * worst error (a NaN error stays the worst). */
static void report_row(const char *kernel, const char *cfg, const char *tensor, double err, double maxdiff, int ok)
{
    printf("%-22s %-14s %-12s %10.3e  %10.3e  %7.0e  %s\n", kernel, cfg, tensor, err, maxdiff, g_tol,
           ok ? "ok" : "FAIL");
    if (g_tsv)
        fprintf(g_tsv, "%s\t%s\t%s\t%s\t%.3e\t%.0e\t%s\n", g_mode, kernel, cfg, tensor, err, g_tol,
                ok ? "ok" : "FAIL");
    g_rows++;
    if (!ok)
        g_fail++;
    if (!(err <= g_worst))
        g_worst = err;
}

/* One table row: normwise relative error of gpu (device) against ref (host). */
static void cmp(const char *kernel, const char *cfg, const char *tensor, const float *ref,
                const float *gpu_dev, long n)
{
    float *g;
    double md = 0, mr = 0, err;
    int bad = 0;
    if (!g_gpu) {
        g_cpu_cases++;
        return;
    }
    g = check_calloc(sizeof(float) * (size_t)n);
    CU(cudaStreamSynchronize(g_s));
    CU(cudaMemcpy(g, gpu_dev, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    for (long i = 0; i < n; i++) {
        double a = g[i], b = ref[i];
        if (!isfinite(a) || !isfinite(b))
            bad = 1;
        if (fabs(a - b) > md)
            md = fabs(a - b);
        if (fabs(b) > mr)
            mr = fabs(b);
    }
    err = bad ? NAN : (mr > 0 ? md / mr : md);
    report_row(kernel, cfg, tensor, err, bad ? NAN : md, !bad && err < g_tol);
    free(g);
}
static void cmp_scalar(const char *kernel, const char *cfg, const char *tensor, double ref,
                       const double *gpu_dev)
{
    double g = 0, err;
    if (!g_gpu) {
        g_cpu_cases++;
        return;
    }
    CU(cudaStreamSynchronize(g_s));
    CU(cudaMemcpy(&g, gpu_dev, sizeof g, cudaMemcpyDeviceToHost));
    err = (!isfinite(g) || !isfinite(ref)) ? NAN : fabs(g - ref) / (fabs(ref) > 0 ? fabs(ref) : 1);
    report_row(kernel, cfg, tensor, err, isfinite(err) ? fabs(g - ref) : NAN, isfinite(err) && err < g_tol);
}

/* ------------------------------------------------------------ one config */

struct cfg {
    const char *name;
    bsipipe_model_dims_t d;
    int cut; /* piece 0 = [0, cut), piece 1 = [cut, S) */
};

static void run_cfg(const struct cfg *c)
{
    const bsipipe_model_dims_t *d = &c->d;
    const char *nm = c->name;
    int S = d->seq_len, h = d->hidden, V = d->vocab, L = d->n_layers;
    int st[2] = {0, c->cut}, ln[2] = {c->cut, S - c->cut};
    long np = bsipipe_model_params(d), eo = 0, lo = bsipipe_model_layer_offset(d, 0);
    long ho = bsipipe_model_layer_offset(d, L), lp = (long)L * bsipipe_model_layer_params(d);
    long hp = bsipipe_model_head_params(d), ep = bsipipe_model_embed_params(d);
    long kvn = (long)L * bsipipe_model_kv_size(d);
    float *params = check_calloc(sizeof(float) * (size_t)np);
    int *tok = check_calloc(sizeof(int) * (size_t)S), *tgt = check_calloc(sizeof(int) * (size_t)S);

    CHECK(bsipipe_model_init(d, 42, params));
    {   /* norm weights/biases away from 1/0 so that their gradients are exercised */
        int nt = bsipipe_model_tensors(d, NULL, 0);
        bsipipe_tensor_info_t *ti = check_calloc(sizeof *ti * (size_t)nt);
        bsipipe_model_tensors(d, ti, nt);
        for (int i = 0; i < nt; i++)
            if (!ti[i].decay)
                for (int j = 0; j < ti[i].rows; j++)
                    params[ti[i].offset + j] += (float)(0.2 * (2 * urand() - 1));
        free(ti);
    }
    for (int i = 0; i < S; i++) {
        tok[i] = (int)(urand() * V) % V;
        tgt[i] = (int)(urand() * V) % V;
    }
    float *dparams = up(params, np);
    int *dtok = upi(tok, S), *dtgt = upi(tgt, S);

    /* ---- embedding forward (both pieces) ---- */
    float *x0 = check_calloc(sizeof(float) * (size_t)S * h);
    float *dx0 = zeros_dev((long)S * h);
    for (int j = 0; j < 2; j++) {
        CHECK(bsipipe_embed_forward(d, params + eo, tok + st[j], st[j], ln[j],
                                    x0 + (size_t)st[j] * h));
        GCHECK(bsipipe_cuda_embed_forward(d, dparams + eo, dtok + st[j], st[j], ln[j],
                                         dx0 + (size_t)st[j] * h, g_s));
    }
    cmp("embed_forward", nm, "x", x0, dx0, (long)S * h);

    /* ---- chunk forward, piece 0 then 1 (KV prefix from the CPU run) ---- */
    long ss[2], stot[2];
    float *stash[2], *xo[2];
    float *kv = check_calloc(sizeof(float) * (size_t)kvn);
    for (int j = 0; j < 2; j++) {
        ss[j] = bsipipe_model_stash_size(d, ln[j]);
        stot[j] = (long)L * ss[j];
        stash[j] = check_calloc(sizeof(float) * (size_t)stot[j]);
        xo[j] = check_calloc(sizeof(float) * (size_t)ln[j] * h);
        long smode = (long)L * bsipipe_cuda_stash_size(d, ln[j], bsipipe_cuda_get_gemm_mode());
        float *dkv_in = kv_up(d, L, kv), *dst = zeros_dev(smode), *dxo = zeros_dev((long)ln[j] * h);
        float *dxin = up(x0 + (size_t)st[j] * h, (long)ln[j] * h);
        CHECK(bsipipe_chunk_forward(d, 0, L, st[j], ln[j], params + lo, x0 + (size_t)st[j] * h,
                                    xo[j], stash[j], kv));
        GCHECK(bsipipe_cuda_chunk_forward(d, 0, L, st[j], ln[j], dparams + lo, dxin, dxo, dst,
                                         dkv_in, g_s, g_h));
        char t[32];
        snprintf(t, sizeof t, "x_out[p%d]", j);
        cmp("chunk_forward", nm, t, xo[j], dxo, (long)ln[j] * h);
        snprintf(t, sizeof t, "stash[p%d]", j);
        float *dst32 = stash_down32(d, L, ln[j], dst); /* bf16 values in BF16S */
        cmp("chunk_forward", nm, t, stash[j], dst32, stot[j]);
        dfree(dst32);
        snprintf(t, sizeof t, "kv[p%d]", j);
        float *kv32 = kv_down32(d, L, dkv_in); /* bf16 values in BF16S */
        cmp("chunk_forward", nm, t, kv, kv32, kvn);
        dfree(kv32);
        dfree(dkv_in); dfree(dst); dfree(dxo); dfree(dxin);
    }

    /* ---- head ---- */
    long hw = bsipipe_model_head_work_size(d, S);
    double *dloss = NULL;
    if (g_gpu)
        CU(cudaMalloc((void **)&dloss, sizeof(double)));
    float *dwork = zeros_dev(hw);
    {   /* forward only, piece 0: logits and loss */
        float *lgt = check_calloc(sizeof(float) * (size_t)ln[0] * V), *wk = check_calloc(sizeof(float) * (size_t)hw);
        double loss = 0;
        float *dx = up(xo[0], (long)ln[0] * h), *dlg = zeros_dev((long)ln[0] * V);
        CHECK(bsipipe_head_forward(d, params + ho, ln[0], xo[0], tgt, lgt, &loss, wk));
        GCHECK(bsipipe_cuda_head_forward(d, dparams + ho, ln[0], dx, dtgt, dlg, dloss, dwork, g_s,
                                        g_h));
        cmp("head_forward", nm, "logits", lgt, dlg, (long)ln[0] * V);
        cmp_scalar("head_forward", nm, "loss", loss, dloss);
        free(lgt); free(wk); dfree(dx); dfree(dlg);
    }
    float *dy1 = check_calloc(sizeof(float) * (size_t)ln[1] * h);
    {   /* forward + backward, piece 1 */
        float *hg = check_calloc(sizeof(float) * (size_t)hp), *wk = check_calloc(sizeof(float) * (size_t)hw);
        double loss = 0, gs = 1.0 / S;
        float *dx = up(xo[1], (long)ln[1] * h), *dhg = zeros_dev(hp), *ddy = zeros_dev((long)ln[1] * h);
        CHECK(bsipipe_head_forward_backward(d, params + ho, hg, ln[1], xo[1], tgt + st[1], gs,
                                            &loss, dy1, wk));
        GCHECK(bsipipe_cuda_head_forward_backward(d, dparams + ho, dhg, ln[1], dx, dtgt + st[1],
                                                 gs, dloss, ddy, dwork, g_s, g_h));
        cmp_scalar("head_forward_backward", nm, "loss", loss, dloss);
        cmp("head_forward_backward", nm, "dx", dy1, ddy, (long)ln[1] * h);
        cmp("head_forward_backward", nm, "head_grad", hg, dhg, hp);
        free(hg); free(wk); dfree(dx); dfree(dhg); dfree(ddy);
    }

    /* ---- chunk backward, piece 1 then 0 (fused), then the split B/W of piece 1 ---- */
    long wn = bsipipe_model_work_size(d, S);
    float *dkv = check_calloc(sizeof(float) * (size_t)kvn);
    float *dkvd = kv_up(d, L, kv), *dworkb = zeros_dev(wn);
    float *dy[2] = {rnd((long)ln[0] * h, 1e-3), dy1};
    for (int j = 1; j >= 0; j--) {
        float *grads = check_calloc(sizeof(float) * (size_t)lp), *dxh = check_calloc(sizeof(float) * (size_t)ln[j] * h);
        float *wk = check_calloc(sizeof(float) * (size_t)wn);
        float *ddkv = up(dkv, kvn), *dgr = zeros_dev(lp), *ddy = up(dy[j], (long)ln[j] * h);
        float *ddx = zeros_dev((long)ln[j] * h), *dst = stash_up(d, L, ln[j], stash[j]);
        CHECK(bsipipe_chunk_backward(d, 0, L, st[j], ln[j], params + lo, grads, dy[j], dxh,
                                     stash[j], kv, dkv, wk));
        GCHECK(bsipipe_cuda_chunk_backward(d, 0, L, st[j], ln[j], dparams + lo, dgr, ddy, ddx,
                                          dst, dkvd, ddkv, dworkb, g_s, g_h));
        char t[32];
        snprintf(t, sizeof t, "dx[p%d]", j);
        cmp("chunk_backward", nm, t, dxh, ddx, (long)ln[j] * h);
        snprintf(t, sizeof t, "grads[p%d]", j);
        cmp("chunk_backward", nm, t, grads, dgr, lp);
        snprintf(t, sizeof t, "dkv[p%d]", j);
        cmp("chunk_backward", nm, t, dkv, ddkv, kvn);
        free(grads); free(dxh); free(wk);
        dfree(ddkv); dfree(dgr); dfree(ddy); dfree(ddx); dfree(dst);
    }
    {   /* split backward of piece 1 (dkv zero again, as for the last piece) */
        long wsn = (long)L * bsipipe_model_wstash_size(d, ln[1]);
        float *grads = check_calloc(sizeof(float) * (size_t)lp), *dxh = check_calloc(sizeof(float) * (size_t)ln[1] * h);
        float *wk = check_calloc(sizeof(float) * (size_t)wn), *ws = check_calloc(sizeof(float) * (size_t)wsn);
        float *dk2 = check_calloc(sizeof(float) * (size_t)kvn);
        float *ddkv = zeros_dev(kvn), *dgr = zeros_dev(lp), *ddy = up(dy1, (long)ln[1] * h);
        float *ddx = zeros_dev((long)ln[1] * h), *dst = stash_up(d, L, ln[1], stash[1]);
        float *dws = zeros_dev(wsn);
        CHECK(bsipipe_chunk_backward_input(d, 0, L, st[1], ln[1], params + lo, grads, dy1, dxh,
                                           stash[1], kv, dk2, ws, wk));
        GCHECK(bsipipe_cuda_chunk_backward_input(d, 0, L, st[1], ln[1], dparams + lo, dgr, ddy,
                                                ddx, dst, dkvd, ddkv, dws, dworkb, g_s, g_h));
        cmp("chunk_backward_input", nm, "dx", dxh, ddx, (long)ln[1] * h);
        cmp("chunk_backward_input", nm, "norm_grads", grads, dgr, lp);
        cmp("chunk_backward_input", nm, "wstash", ws, dws, wsn);
        cmp("chunk_backward_input", nm, "dkv", dk2, ddkv, kvn);
        CHECK(bsipipe_chunk_backward_weight(d, 0, L, st[1], ln[1], grads, stash[1], ws));
        GCHECK(bsipipe_cuda_chunk_backward_weight(d, 0, L, st[1], ln[1], dgr, dst, dws, g_s, g_h));
        cmp("chunk_backward_weight", nm, "grads", grads, dgr, lp);
        free(grads); free(dxh); free(wk); free(ws); free(dk2);
        dfree(ddkv); dfree(dgr); dfree(ddy); dfree(ddx); dfree(dst); dfree(dws);
    }

    /* ---- embedding backward (both pieces, repeated tokens accumulate) ---- */
    {
        float *eg = check_calloc(sizeof(float) * (size_t)ep), *dxs = rnd((long)S * h, 1.0);
        float *deg = zeros_dev(ep), *ddx = up(dxs, (long)S * h);
        for (int j = 0; j < 2; j++) {
            CHECK(bsipipe_embed_backward(d, eg, tok + st[j], st[j], ln[j], dxs + (size_t)st[j] * h));
            GCHECK(bsipipe_cuda_embed_backward(d, deg, dtok + st[j], st[j], ln[j],
                                              ddx + (size_t)st[j] * h, g_s));
        }
        cmp("embed_backward", nm, "embed_grad", eg, deg, ep);
        free(eg); free(dxs); dfree(deg); dfree(ddx);
    }

    free(params); free(tok); free(tgt); free(x0); free(kv); free(dkv); free(dy[0]); free(dy1);
    for (int j = 0; j < 2; j++) {
        free(stash[j]);
        free(xo[j]);
    }
    dfree(dparams); dfree(dtok); dfree(dtgt); dfree(dx0); dfree(dloss);
    dfree(dwork); dfree(dkvd); dfree(dworkb);
}

/* Attention alone with strided q/k/o and a KV prefix (start > 0). */
static void run_attention(int H, int hd, int start, int len)
{
    char nm[32];
    int w = H * hd, ldq = w + 8, ldk = w + 4, ldo = w + 2, nk = start + len;
    snprintf(nm, sizeof nm, "H%d hd%d s%d", H, hd, start);
    float *q = rnd((long)len * ldq, 1.0), *k = rnd((long)nk * ldk, 1.0), *v = rnd((long)nk * ldk, 1.0);
    float *o = check_calloc(sizeof(float) * (size_t)len * ldo), *lse = check_calloc(sizeof(float) * (size_t)H * len);
    float *dout = rnd((long)len * ldo, 1.0), *dq = check_calloc(sizeof(float) * (size_t)len * ldq);
    float *dk = rnd((long)nk * ldk, 0.1), *dv = rnd((long)nk * ldk, 0.1);
    float *dq_d = up(dq, (long)len * ldq), *dk_d = up(dk, (long)nk * ldk), *dv_d = up(dv, (long)nk * ldk);
    float *q_d = up(q, (long)len * ldq), *k_d = up(k, (long)nk * ldk), *v_d = up(v, (long)nk * ldk);
    float *o_d = up(o, (long)len * ldo), *lse_d = zeros_dev((long)H * len);
    float *do_d = up(dout, (long)len * ldo);
    CHECK(bsipipe_attention_forward(H, hd, start, len, q, ldq, k, v, ldk, o, ldo, lse));
    GCHECK(bsipipe_cuda_attention_forward(H, hd, start, len, q_d, ldq, k_d, v_d, ldk, o_d, ldo,
                                         lse_d, g_s));
    cmp("attention_forward", nm, "o", o, o_d, (long)len * ldo);
    cmp("attention_forward", nm, "lse", lse, lse_d, (long)H * len);
    float *o_c = up(o, (long)len * ldo), *lse_c = up(lse, (long)H * len);
    CHECK(bsipipe_attention_backward(H, hd, start, len, q, ldq, k, v, ldk, o, dout, ldo, lse,
                                     dq, ldq, dk, dv));
    GCHECK(bsipipe_cuda_attention_backward(H, hd, start, len, q_d, ldq, k_d, v_d, ldk, o_c, do_d,
                                          ldo, lse_c, dq_d, ldq, dk_d, dv_d, g_s));
    /* only the head columns of dq are defined */
    float *dqh = check_calloc(sizeof(float) * (size_t)len * ldq);
    if (g_gpu) {
        CU(cudaStreamSynchronize(g_s));
        CU(cudaMemcpy(dqh, dq_d, sizeof(float) * (size_t)len * ldq, cudaMemcpyDeviceToHost));
        for (int i = 0; i < len; i++)
            for (int c = w; c < ldq; c++)
                dqh[(size_t)i * ldq + c] = dq[(size_t)i * ldq + c];
        CU(cudaMemcpy(dq_d, dqh, sizeof(float) * (size_t)len * ldq, cudaMemcpyHostToDevice));
    }
    cmp("attention_backward", nm, "dq", dq, dq_d, (long)len * ldq);
    cmp("attention_backward", nm, "dk", dk, dk_d, (long)nk * ldk);
    cmp("attention_backward", nm, "dv", dv, dv_d, (long)nk * ldk);
    free(q); free(k); free(v); free(o); free(lse); free(dout); free(dq); free(dk); free(dv);
    free(dqh);
    dfree(dq_d); dfree(dk_d); dfree(dv_d); dfree(q_d); dfree(k_d); dfree(v_d);
    dfree(o_d); dfree(lse_d); dfree(do_d); dfree(o_c); dfree(lse_c);
}

static void run_optimizer(void)
{
    long n = 100003;
    bsipipe_adamw_t hpar = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0};
    float *p = rnd(n, 1.0), *g = rnd(n, 0.1), *m = rnd(n, 0.01), *v = rnd(n, 1e-4);
    for (long i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *pd = up(p, n), *gd = up(g, n), *md = up(m, n), *vd = up(v, n);
    double *sd = NULL;
    if (g_gpu)
        CU(cudaMalloc((void **)&sd, sizeof(double)));
    double ss = bsipipe_sumsq(n, g);
    GCHECK(bsipipe_cuda_sumsq(n, gd, sd, g_s));
    cmp_scalar("sumsq", "n=100003", "sum", ss, sd);
    for (int t = 1; t <= 3; t++) {
        CHECK(bsipipe_adamw_update(&hpar, t, n, p, g, 0.7, t != 2, m, v));
        GCHECK(bsipipe_cuda_adamw_update(&hpar, t, n, pd, gd, 0.7, t != 2, md, vd, g_s));
    }
    cmp("adamw_update", "n=100003 t=3", "p", p, pd, n);
    cmp("adamw_update", "n=100003 t=3", "m", m, md, n);
    cmp("adamw_update", "n=100003 t=3", "v", v, vd, n);
    free(p); free(g); free(m); free(v);
    dfree(pd); dfree(gd); dfree(md); dfree(vd); dfree(sd);
}

/* The stash's size per layer in a mode (host only): the fp32 layout in fp32 / tf32 / bf16;
 * in bf16s room for every value as bf16 plus the fp32 statistics, i.e. a little over half. */
static void check_stash_size(const struct cfg *c, bsipipe_cuda_gemm_mode_t mode)
{
    const bsipipe_model_dims_t *d = &c->d;
    int lens[3] = {1, c->cut, d->seq_len};
    for (int i = 0; i < 3; i++) {
        long f = bsipipe_model_stash_size(d, lens[i]), m = bsipipe_cuda_stash_size(d, lens[i], mode);
        long stats = (long)(4 + d->n_heads) * lens[i];
        int ok = mode != BSIPIPE_CUDA_GEMM_BF16S ? m == f : 2 * (m - stats) >= f && m < 0.6 * f;
        if (!ok) {
            printf("FAIL: stash_size %s len %d: %ld floats in %s for %ld in fp32\n", c->name,
                   lens[i], m, bsipipe_cuda_gemm_mode_name(mode), f);
            g_fail++;
        } else if (i == 2 && mode == BSIPIPE_CUDA_GEMM_BF16S) {
            printf("%-22s %-14s per layer, %d tokens: %ld floats (fp32 %ld: %.1f%%)\n",
                   "stash_size", c->name, lens[i], m, f, 100.0 * (double)m / (double)f);
        }
    }
}

static void run_mode(bsipipe_cuda_gemm_mode_t mode)
{
    static const struct cfg cfgs[] = {
        {"gpt-hd16", {BSIPIPE_MODEL_GPT, 2, 64, 4, 256, 97, 96}, 40},
        {"llama-hd16", {BSIPIPE_MODEL_LLAMA, 2, 64, 4, 160, 97, 96}, 40},
        {"gpt-hd40", {BSIPIPE_MODEL_GPT, 1, 160, 4, 640, 64, 80}, 33},
        {"llama-hd128", {BSIPIPE_MODEL_LLAMA, 1, 256, 2, 256, 50, 72}, 31},
    };
    /* --large: the bench's layer shapes (hidden 1280, 32 heads of 40; LLaMA with heads of
     * 128) on a short sequence, so that the GPU runs many blocks and key tiles */
    static const struct cfg large[] = {
        {"gpt-1280", {BSIPIPE_MODEL_GPT, 1, 1280, 32, 5120, 512, 320}, 190},
        {"llama-1280", {BSIPIPE_MODEL_LLAMA, 1, 1280, 10, 3456, 512, 256}, 150},
    };
    CHECK(bsipipe_cuda_set_gemm_mode(mode)); /* host-side only: works without a GPU */
    g_mode = bsipipe_cuda_gemm_mode_name(mode);
    g_tol = mode == BSIPIPE_CUDA_GEMM_FP32 ? 1e-5 : 1e-2;
    printf("\n== matrix products: %s (tolerance %.0e) ==\n", g_mode, g_tol);
    printf("%-22s %-14s %-12s %10s  %10s  %7s  %s\n", "kernel", "config", "tensor", "rel.err",
           "max|diff|", "tol", "result");
    g_rng = 0x1234567ULL; /* same inputs in every mode */
    run_attention(4, 16, 0, 70);
    run_attention(3, 40, 45, 77);
    run_attention(2, 128, 33, 64);
    run_attention(2, 64, 100, 1);
    run_attention(2, 24, 130, 150); /* several query and key tiles; whole tiles masked */
    if (g_attention_only)
        return;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        check_stash_size(&cfgs[i], mode);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        run_cfg(&cfgs[i]);
    for (size_t i = 0; g_large && i < sizeof large / sizeof large[0]; i++)
        run_cfg(&large[i]);
    run_optimizer();
}

int main(int argc, char **argv)
{
    const char *mode = "default", *table = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc &&
            (!strcmp(argv[i + 1], "fp32") || !strcmp(argv[i + 1], "tf32") ||
             !strcmp(argv[i + 1], "bf16") || !strcmp(argv[i + 1], "bf16s") ||
             !strcmp(argv[i + 1], "all") || !strcmp(argv[i + 1], "default")))
            mode = argv[++i];
        else if (!strcmp(argv[i], "--table") && i + 1 < argc)
            table = argv[++i];
        else if (!strcmp(argv[i], "--cpu-only"))
            g_gpu = 0;
        else if (!strcmp(argv[i], "--large"))
            g_large = 1;
        else if (!strcmp(argv[i], "--attention-only"))
            g_attention_only = 1;
        else {
            fprintf(stderr, "usage: %s [--mode fp32|tf32|bf16|bf16s|all] [--table FILE] [--cpu-only] [--large] "
                            "[--attention-only]\n", argv[0]);
            return 99;
        }
    }
    if (!g_gpu) {
        run_mode(BSIPIPE_CUDA_GEMM_FP32);
        printf("\ncpu-only: %d CPU reference tensors computed (no GPU call, nothing "
               "compared)\n", g_cpu_cases);
        return 0;
    }
    int ndev = bsipipe_cuda_device_count();
    if (ndev <= 0) {
        printf("SKIP: no CUDA GPU found (test needs one; libbsipipe built with CUDA: %s)\n",
               bsipipe_cuda_compiled() ? "yes" : "no");
        return 77;
    }
    {
        struct cudaDeviceProp pr;
        CU(cudaGetDeviceProperties(&pr, 0));
        printf("GPU 0: %s (sm_%d%d, %d SMs)\n", pr.name, pr.major, pr.minor,
               pr.multiProcessorCount);
    }
    CU(cudaStreamCreate(&g_s));
    if (cublasCreate(&g_h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 99;
    }
    if (table && !(g_tsv = fopen(table, "w"))) {
        perror(table);
        return 99;
    }
    if (!strcmp(mode, "fp32") || !strcmp(mode, "default") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_FP32);
    if (!strcmp(mode, "tf32") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_TF32);
    if (!strcmp(mode, "bf16") || !strcmp(mode, "default") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_BF16);
    if (!strcmp(mode, "bf16s") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_BF16S);
    if (g_tsv)
        fclose(g_tsv);
    cublasDestroy(g_h);
    cudaStreamDestroy(g_s);
    printf("\n%d tensors compared, %d over tolerance, worst %.3e: %s\n", g_rows, g_fail, g_worst,
           g_fail ? "FAIL" : "PASS");
    return g_fail ? 1 : 0;
}
#endif
