/* tests/test_cuda_tp.c: every CUDA tensor-parallel segment (kernels/cuda/bsipipe_cuda_tp.h)
 * against its CPU twin (kernels/bsipipe_tp.h), segment by segment and rank by rank, GPT and
 * LLaMA, D_t = 2 and 4, fused and split (ZeroBubble) backward.
 *
 * The whole chain of one layer's piece runs as the engine runs it (embedding, layer forward,
 * head and cross-entropy, head backward, layer backward, embedding backward), the
 * collectives between segments computed on the host over the CPU buffers of every rank
 * (bsipipe_tp_*_rank). Before each segment the rank's CPU buffers are uploaded, so each CUDA
 * call gets exactly the inputs its CPU twin got; after it every buffer of the rank is
 * downloaded and compared with the CPU's, tensor by tensor for the parameter gradients
 * (the shard table, bsipipe_tp_tensors). Error = max|gpu - cpu| / max|cpu| (normwise
 * relative); NaN or Inf never passes. Tolerances: 1e-5 with fp32 products, 1e-2 with tf32
 * and bf16. bf16s (bf16 stash storage) must be refused with -EINVAL. The device collectives
 * (bsipipe_cuda_tp_all_gather_rank, ...) must give the CPU ones' bits; the loss sum agrees
 * to 1e-13 (the device's log), the STEP's sum of squares gives the same bits twice.
 *
 *   tests/test_cuda_tp [--mode fp32|tf32|bf16|all] [-v]
 * Default: fp32 and bf16. -v prints every comparison, else only the worst per segment.
 * Exit: 0 pass, 1 a tensor over tolerance, 77 no CUDA GPU (or built without CUDA),
 * 99 a CUDA / API error. tests/test_cuda_emu.sh runs it on the CPU emulation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bsipipe_tp.h"
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
#include "kernels/cuda/bsipipe_cuda_tp.h"
#include "base/bsipipe_error.h"
#include "tests/cuda_check.h"

enum { TMAX = 4 };

static cudaStream_t g_s;
static cublasHandle_t g_h;
static double g_tol;
static int g_fail, g_rows, g_verbose;
static double g_worst;

static unsigned long long g_rng = 0x2545F4914F6CDD1DULL;
static double urand(void) { return check_urand(&g_rng); } /* [0, 1) */

/* ---- one rank's buffers: host (the CPU run) and device mirrors ---- */

enum { B_P, B_G, B_X, B_ST, B_KV, B_DKV, B_WST, B_GATH, B_PART, B_RED, B_GDY, B_DX2, B_Y, B_DY, B_DX,
       B_WORK, B_XN, B_HST, B_LOGITS, B_CE, B_N };
static const char *const buf_names[B_N] = {"params", "grads", "x", "stash", "kv", "dkv", "wstash",
                                           "gath", "part", "red", "gdy", "dx2", "y", "dy", "dx",
                                           "work", "xn", "head_st", "logits", "ce"};

typedef struct rank_bufs {
    void *host[B_N], *dev[B_N];
    long n[B_N];    /* elements */
    size_t es[B_N]; /* element size */
} rank_bufs_t;

typedef struct tcase {
    const char *name;
    bsipipe_model_dims_t d;
    int T, start, len, split;
    const char *mode;
    rank_bufs_t rb[TMAX];
    int *tokens, *targets, *dtok, *dtgt; /* the whole sequence, host and device */
    bsipipe_tp_tensor_info_t *ti;
    int nti;
    double worst; /* of the current segment */
    const char *worst_what;
    char seg[48];
} tcase_t;

static void rank_alloc(tcase_t *c, int r)
{
    const bsipipe_model_dims_t *d = &c->d;
    int T = c->T, len = c->len, ls = len / T, h = d->hidden;
    long n[B_N] = {
        [B_P] = bsipipe_tp_model_params(d, T), [B_G] = bsipipe_tp_model_params(d, T),
        [B_X] = (long)ls * h, [B_ST] = bsipipe_tp_stash_size(d, T, len), [B_KV] = bsipipe_tp_kv_size(d, T),
        [B_DKV] = bsipipe_tp_kv_size(d, T), [B_WST] = bsipipe_tp_wstash_size(d, T, len),
        [B_GATH] = (long)len * h, [B_PART] = (long)len * h, [B_RED] = (long)ls * h, [B_GDY] = (long)len * h,
        [B_DX2] = (long)ls * h, [B_Y] = (long)ls * h, [B_DY] = (long)ls * h, [B_DX] = (long)ls * h,
        [B_WORK] = bsipipe_tp_seg_work_size(d, T, len), [B_XN] = (long)ls * h, [B_HST] = 2L * ls,
        [B_LOGITS] = (long)len * (d->vocab / T), [B_CE] = 3L * len};
    rank_bufs_t *b = &c->rb[r];
    for (int k = 0; k < B_N; k++) {
        if (n[k] <= 0) {
            fprintf(stderr, "bad size %ld for %s\n", n[k], buf_names[k]);
            exit(99);
        }
        b->n[k] = n[k];
        b->es[k] = k == B_CE ? sizeof(double) : sizeof(float);
        b->host[k] = check_calloc(b->es[k] * (size_t)n[k]);
        CU(cudaMalloc(&b->dev[k], b->es[k] * (size_t)n[k]));
        if (k == B_CE)
            continue;
        float *f = b->host[k];
        /* random inputs everywhere (what a segment reads before writing must come from
         * somewhere); weights at about 1/sqrt(hidden) as initialised; gradients and dkv
         * small, as accumulators are */
        double scale = k == B_G || k == B_DKV ? 0.01 : k == B_P ? 1.0 / sqrt((double)h) : 0.5;
        for (long i = 0; i < n[k]; i++)
            f[i] = (float)((2 * urand() - 1) * scale);
    }
    /* the vectors (norm weights and biases) near 1, so no layer is degenerate */
    float *P = b->host[B_P];
    for (int j = 0; j < c->nti; j++)
        if (c->ti[j].cols == 1)
            for (int i = 0; i < c->ti[j].rows; i++)
                P[c->ti[j].offset + i] = 1.0f + 0.1f * (float)(2 * urand() - 1);
}

static void rank_free(tcase_t *c, int r)
{
    for (int k = 0; k < B_N; k++) {
        free(c->rb[r].host[k]);
        cudaFree(c->rb[r].dev[k]);
    }
}

static void upload(tcase_t *c, int r)
{
    rank_bufs_t *b = &c->rb[r];
    for (int k = 0; k < B_N; k++)
        CU(cudaMemcpy(b->dev[k], b->host[k], b->es[k] * (size_t)b->n[k], cudaMemcpyHostToDevice));
}

/* normwise relative error of gpu[0..n) against cpu[0..n) */
static double rel_err(const float *gpu, const float *cpu, long n, double *maxdiff)
{
    double md = 0, mr = 0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(gpu[i]) || !isfinite(cpu[i])) {
            *maxdiff = NAN;
            return NAN;
        }
        double e = fabs((double)gpu[i] - cpu[i]);
        if (e > md)
            md = e;
        if (fabs(cpu[i]) > mr)
            mr = fabs(cpu[i]);
    }
    *maxdiff = md;
    return mr > 0 ? md / mr : md;
}

static void row(tcase_t *c, int r, const char *what, double err, double md)
{
    int ok = err < g_tol; /* NaN fails */
    g_rows++;
    if (!ok)
        g_fail++;
    if (!(err <= g_worst))
        g_worst = err;
    if (!(err <= c->worst)) {
        c->worst = err;
        c->worst_what = what;
    }
    if (g_verbose || !ok)
        printf("  %-18s rank %d %-16s %10.3e  %10.3e  %s\n", c->seg, r, what, err, md, ok ? "ok" : "FAIL");
}

/* Downloads rank r's buffers and compares them with the CPU's: the gradients tensor by
 * tensor, ce as doubles, every other buffer whole. */
static void compare(tcase_t *c, int r)
{
    rank_bufs_t *b = &c->rb[r];
    CU(cudaStreamSynchronize(g_s));
    for (int k = 0; k < B_N; k++) {
        size_t bytes = b->es[k] * (size_t)b->n[k];
        void *g = check_calloc(bytes);
        CU(cudaMemcpy(g, b->dev[k], bytes, cudaMemcpyDeviceToHost));
        double md = 0, err;
        if (k == B_CE) {
            const double *gd = g, *cd = b->host[k];
            double mr = 0;
            md = 0;
            for (long i = 0; i < b->n[k]; i++) {
                if (!isfinite(gd[i]) || !isfinite(cd[i])) {
                    md = NAN;
                    break;
                }
                if (fabs(gd[i] - cd[i]) > md)
                    md = fabs(gd[i] - cd[i]);
                if (fabs(cd[i]) > mr)
                    mr = fabs(cd[i]);
            }
            err = isnan(md) ? NAN : mr > 0 ? md / mr : md;
            row(c, r, buf_names[k], err, md);
        } else if (k == B_G) {
            for (int j = 0; j < c->nti; j++) {
                long n = (long)c->ti[j].rows * c->ti[j].cols, o = c->ti[j].offset;
                err = rel_err((const float *)g + o, (const float *)b->host[k] + o, n, &md);
                row(c, r, c->ti[j].name, err, md);
            }
        } else {
            err = rel_err(g, b->host[k], b->n[k], &md);
            row(c, r, buf_names[k], err, md);
        }
        free(g);
    }
}

#define H(r, k) ((float *)c->rb[r].host[k])

/* One segment on every rank: bsipipe_tp_<fn>(args) on the CPU, then
 * bsipipe_cuda_tp_<fn>(args, stream, handle) on the same inputs, then the comparison. In
 * args, A(k) is rank r's buffer k, CE its cross-entropy statistics and TOK / TGT the
 * piece's tokens and targets: the host's in the CPU call, the device's in the CUDA one. */
#define A(k) ((float *)(gpu ? c->rb[r].dev[k] : c->rb[r].host[k]))
#define CE ((double *)(gpu ? c->rb[r].dev[B_CE] : c->rb[r].host[B_CE]))
#define TOK (gpu ? dtok : tok)
#define TGT (gpu ? dtgt : tgt)
#define SEGMENT(label, fn, ...)                                                                  \
    do {                                                                                         \
        snprintf(c->seg, sizeof c->seg, "%s", label);                                            \
        c->worst = 0;                                                                            \
        c->worst_what = "";                                                                      \
        for (int r = 0; r < c->T; r++) {                                                         \
            bsipipe_tp_t tp = {c->T, r};                                                         \
            int gpu = 0;                                                                         \
            upload(c, r);                                                                        \
            CHECK(bsipipe_tp_##fn(__VA_ARGS__));                                                 \
            gpu = 1;                                                                             \
            CHECK(bsipipe_cuda_tp_##fn(__VA_ARGS__, g_s, g_h));                                  \
            compare(c, r);                                                                       \
        }                                                                                        \
        printf("  %-18s worst %10.3e (%s)\n", c->seg, c->worst, c->worst_what);                 \
    } while (0)

/* ---- the collectives, on the host over every rank's CPU buffers ---- */

static void all_gather(tcase_t *c, int src, long off, int dst)
{
    const void *send[TMAX];
    long cnt = (long)(c->len / c->T) * c->d.hidden;
    for (int q = 0; q < c->T; q++)
        send[q] = H(q, src) + off;
    for (int q = 0; q < c->T; q++)
        CHECK(bsipipe_tp_all_gather_rank(c->T, q, send, H(q, dst), cnt, BSIPIPE_TP_F32));
}

static void reduce_scatter(tcase_t *c, int src, int dst)
{
    const void *send[TMAX];
    long cnt = (long)(c->len / c->T) * c->d.hidden;
    for (int q = 0; q < c->T; q++)
        send[q] = H(q, src);
    for (int q = 0; q < c->T; q++)
        CHECK(bsipipe_tp_reduce_scatter_rank(c->T, q, send, H(q, dst), cnt, BSIPIPE_TP_F32));
}

static void all_reduce_ce(tcase_t *c, long off, long cnt, bsipipe_tp_op_t op)
{
    const void *in[TMAX];
    double *out = check_calloc(sizeof(double) * (size_t)cnt);
    for (int q = 0; q < c->T; q++)
        in[q] = (double *)c->rb[q].host[B_CE] + off;
    CHECK(bsipipe_tp_all_reduce_rank(c->T, in, out, cnt, BSIPIPE_TP_F64, op));
    for (int q = 0; q < c->T; q++)
        memcpy((double *)c->rb[q].host[B_CE] + off, out, sizeof(double) * (size_t)cnt);
    free(out);
}

/* ---- the chain ---- */

static void run_case(tcase_t *c)
{
    const bsipipe_model_dims_t *d = &c->d;
    int T = c->T, start = c->start, len = c->len, L = d->n_layers;
    long lay = bsipipe_tp_layer_offset(d, T, 0), head = bsipipe_tp_layer_offset(d, T, L);
    long n1 = bsipipe_tp_stash_norm_offset(d, T, len, 1), n2 = bsipipe_tp_stash_norm_offset(d, T, len, 2);
    double gs = 1.0 / (double)len;
    printf("\n%s, %s, D_t = %d, piece [%d, %d), %s backward\n", c->name, c->mode, T, start, start + len,
           c->split ? "split" : "fused");
    c->nti = bsipipe_tp_tensors(d, T, NULL, 0);
    c->ti = check_calloc(sizeof *c->ti * (size_t)c->nti);
    bsipipe_tp_tensors(d, T, c->ti, c->nti);
    long S = d->seq_len;
    c->tokens = check_calloc(sizeof(int) * (size_t)S);
    c->targets = check_calloc(sizeof(int) * (size_t)S);
    for (long i = 0; i < S; i++) {
        c->tokens[i] = (int)(urand() * d->vocab);
        c->targets[i] = (int)(urand() * d->vocab);
    }
    CU(cudaMalloc((void **)&c->dtok, sizeof(int) * (size_t)S));
    CU(cudaMalloc((void **)&c->dtgt, sizeof(int) * (size_t)S));
    CU(cudaMemcpy(c->dtok, c->tokens, sizeof(int) * (size_t)S, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(c->dtgt, c->targets, sizeof(int) * (size_t)S, cudaMemcpyHostToDevice));
    for (int r = 0; r < T; r++)
        rank_alloc(c, r);
    const int *tok = c->tokens + start, *tgt = c->targets + start, *dtok = c->dtok + start,
              *dtgt = c->dtgt + start;

    /* forward: the embedding, one layer, the head and its cross-entropy */
    SEGMENT("emb_fwd_vocab", embed_fwd_vocab, d, &tp, A(B_P), TOK, len, A(B_PART));
    reduce_scatter(c, B_PART, B_X);
    SEGMENT("emb_fwd_pos", embed_fwd_pos, d, &tp, A(B_P), start, len, A(B_X));
    SEGMENT("fwd_norm1", layer_fwd_norm1, d, &tp, len, A(B_P) + lay, A(B_X), A(B_ST));
    all_gather(c, B_ST, n1, B_GATH);
    SEGMENT("fwd_attn", layer_fwd_attn, d, &tp, start, len, A(B_P) + lay, A(B_GATH), A(B_ST), A(B_KV), A(B_PART));
    reduce_scatter(c, B_PART, B_RED);
    SEGMENT("fwd_norm2", layer_fwd_norm2, d, &tp, len, A(B_P) + lay, A(B_RED), A(B_ST));
    all_gather(c, B_ST, n2, B_GATH);
    SEGMENT("fwd_mlp", layer_fwd_mlp, d, &tp, len, A(B_P) + lay, A(B_GATH), A(B_ST), A(B_PART));
    reduce_scatter(c, B_PART, B_RED);
    SEGMENT("fwd_out", layer_fwd_out, d, &tp, len, A(B_ST), A(B_RED), A(B_Y));
    SEGMENT("head_fwd_norm", head_fwd_norm, d, &tp, A(B_P) + head, len, A(B_Y), A(B_XN), A(B_HST));
    all_gather(c, B_XN, 0, B_GATH);
    SEGMENT("head_fwd_logits", head_fwd_logits, d, &tp, A(B_P) + head, len, A(B_GATH), A(B_LOGITS), CE);
    all_reduce_ce(c, 0, len, BSIPIPE_TP_MAX);
    SEGMENT("head_ce_sums", head_ce_sums, d, &tp, len, A(B_LOGITS), TGT, CE);
    all_reduce_ce(c, len, 2L * len, BSIPIPE_TP_SUM);

    /* backward */
    SEGMENT("head_bwd_logits", head_bwd_logits, d, &tp, A(B_P) + head, A(B_G) + head, len, A(B_GATH), TGT, gs, CE,
            A(B_LOGITS), A(B_PART));
    reduce_scatter(c, B_PART, B_RED);
    SEGMENT("head_bwd_norm", head_bwd_norm, d, &tp, A(B_P) + head, A(B_G) + head, len, A(B_Y), A(B_HST), A(B_RED),
            A(B_DY));
    all_gather(c, B_DY, 0, B_GDY);
    if (!c->split) {
        all_gather(c, B_ST, n2, B_GATH);
        SEGMENT("bwd_mlp", layer_bwd_mlp, d, &tp, len, A(B_P) + lay, A(B_G) + lay, A(B_ST), A(B_GDY), A(B_GATH),
                A(B_PART), A(B_WORK));
    } else {
        SEGMENT("bwd_mlp_x", layer_bwd_mlp_x, d, &tp, len, A(B_P) + lay, A(B_ST), A(B_GDY), A(B_PART), A(B_WORK),
                A(B_WST));
    }
    reduce_scatter(c, B_PART, B_RED);
    SEGMENT("bwd_norm2", layer_bwd_norm2, d, &tp, len, A(B_P) + lay, A(B_G) + lay, A(B_ST), A(B_DY), A(B_RED),
            A(B_DX2));
    all_gather(c, B_DX2, 0, B_GDY);
    if (!c->split) {
        all_gather(c, B_ST, n1, B_GATH);
        SEGMENT("bwd_attn", layer_bwd_attn, d, &tp, start, len, A(B_P) + lay, A(B_G) + lay, A(B_ST), A(B_KV),
                A(B_DKV), A(B_GDY), A(B_GATH), A(B_PART), A(B_WORK));
    } else {
        SEGMENT("bwd_attn_x", layer_bwd_attn_x, d, &tp, start, len, A(B_P) + lay, A(B_ST), A(B_KV), A(B_DKV),
                A(B_GDY), A(B_PART), A(B_WORK), A(B_WST));
    }
    reduce_scatter(c, B_PART, B_RED);
    SEGMENT("bwd_norm1", layer_bwd_norm1, d, &tp, len, A(B_P) + lay, A(B_G) + lay, A(B_ST), A(B_DX2), A(B_RED),
            A(B_DX));
    if (c->split) { /* W: the weight halves after the re-gathers of the norm outputs */
        all_gather(c, B_ST, n2, B_GATH);
        SEGMENT("wgrad_mlp", layer_wgrad_mlp, d, &tp, len, A(B_G) + lay, A(B_ST), A(B_WST), A(B_GATH));
        all_gather(c, B_ST, n1, B_GATH);
        SEGMENT("wgrad_attn", layer_wgrad_attn, d, &tp, len, A(B_G) + lay, A(B_ST), A(B_WST), A(B_GATH));
    }
    SEGMENT("emb_bwd_pos", embed_bwd_pos, d, &tp, A(B_G), start, len, A(B_DX));
    all_gather(c, B_DX, 0, B_GATH);
    SEGMENT("emb_bwd_vocab", embed_bwd_vocab, d, &tp, A(B_G), TOK, len, A(B_GATH));

    for (int r = 0; r < T; r++)
        rank_free(c, r);
    cudaFree(c->dtok);
    cudaFree(c->dtgt);
    free(c->tokens);
    free(c->targets);
    free(c->ti);
}

/* The device collectives against the CPU ones, bit for bit: all-gather, reduce-scatter, the
 * all-reduces (MAX, SUM; out of place and in place), fp32 and fp64, 2 to 4 ranks; then the
 * cross-entropy's loss sum and the STEP's deterministic sum of squares. */
static void bits_row(const char *what, int size, const char *type, const void *gpu_dev, const void *cpu, size_t bytes)
{
    void *g = check_calloc(bytes);
    CU(cudaStreamSynchronize(g_s));
    CU(cudaMemcpy(g, gpu_dev, bytes, cudaMemcpyDeviceToHost));
    int ok = memcmp(g, cpu, bytes) == 0;
    g_rows++;
    g_fail += !ok;
    if (g_verbose || !ok)
        printf("  %-28s D_t %d %-4s %s\n", what, size, type, ok ? "bitwise equal" : "FAIL (bits differ)");
    free(g);
}

static void check_collectives(void)
{
    enum { CNT = 37 };
    int before = g_fail, rows = g_rows;
    printf("\ncollectives on the device against the CPU's (bitwise)\n");
    for (int size = 2; size <= TMAX; size++)
        for (int f64 = 0; f64 < 2; f64++) {
            bsipipe_tp_dtype_t t = f64 ? BSIPIPE_TP_F64 : BSIPIPE_TP_F32;
            size_t es = f64 ? sizeof(double) : sizeof(float), n = (size_t)size * CNT;
            const char *ty = f64 ? "f64" : "f32";
            void *hs[TMAX], *ds[TMAX], *dd[TMAX];
            for (int q = 0; q < size; q++) {
                hs[q] = check_calloc(es * n);
                for (size_t i = 0; i < n; i++) {
                    double v = 2 * urand() - 1;
                    if (f64)
                        ((double *)hs[q])[i] = v;
                    else
                        ((float *)hs[q])[i] = (float)v;
                }
                CU(cudaMalloc(&ds[q], es * n));
                CU(cudaMalloc(&dd[q], es * n));
                CU(cudaMemcpy(ds[q], hs[q], es * n, cudaMemcpyHostToDevice));
            }
            void *ref = check_calloc(es * n), *dout = NULL;
            CU(cudaMalloc(&dout, es * n));
            for (int r = 0; r < size; r++) {
                CHECK(bsipipe_tp_all_gather_rank(size, r, (const void *const *)hs, ref, CNT, t));
                CHECK(bsipipe_cuda_tp_all_gather_rank(size, r, (const void *const *)ds, dout, CNT, t, g_s));
                bits_row("all_gather_rank", size, ty, dout, ref, es * n);
                CHECK(bsipipe_tp_reduce_scatter_rank(size, r, (const void *const *)hs, ref, CNT, t));
                CHECK(bsipipe_cuda_tp_reduce_scatter_rank(size, r, (const void *const *)ds, dout, CNT, t, g_s));
                bits_row("reduce_scatter_rank", size, ty, dout, ref, es * CNT);
            }
            for (int op = 0; op < 2; op++) {
                bsipipe_tp_op_t o = op ? BSIPIPE_TP_MAX : BSIPIPE_TP_SUM;
                CHECK(bsipipe_tp_all_reduce_rank(size, (const void *const *)hs, ref, (long)n, t, o));
                CHECK(bsipipe_cuda_tp_all_reduce_rank(size, (const void *const *)ds, dout, (long)n, t, o, g_s));
                bits_row(op ? "all_reduce_rank max" : "all_reduce_rank sum", size, ty, dout, ref, es * n);
                for (int q = 0; q < size; q++)
                    CU(cudaMemcpy(dd[q], hs[q], es * n, cudaMemcpyHostToDevice));
                CHECK(bsipipe_cuda_tp_all_reduce_inplace(size, dd, (long)n, t, o, g_s));
                for (int q = 0; q < size; q++)
                    bits_row(op ? "all_reduce_inplace max" : "all_reduce_inplace sum", size, ty, dd[q], ref, es * n);
            }
            free(ref);
            cudaFree(dout);
            for (int q = 0; q < size; q++) {
                free(hs[q]);
                cudaFree(ds[q]);
                cudaFree(dd[q]);
            }
        }
    /* the loss from the reduced statistics: ce = (max, sum of exp, target logit) per token */
    enum { LEN = 24 };
    double ce[3 * LEN], loss = 0.25, *dce = NULL, *dloss = NULL;
    for (int i = 0; i < LEN; i++) {
        ce[i] = 4 * urand();
        ce[LEN + i] = 1 + 50 * urand();
        ce[2 * LEN + i] = ce[i] - 3 * urand();
    }
    CU(cudaMalloc((void **)&dce, sizeof ce));
    CU(cudaMalloc((void **)&dloss, sizeof loss));
    CU(cudaMemcpy(dce, ce, sizeof ce, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dloss, &loss, sizeof loss, cudaMemcpyHostToDevice));
    CHECK(bsipipe_cuda_tp_ce_loss_add(LEN, dce, dloss, g_s));
    loss += bsipipe_tp_ce_loss(LEN, ce);
    double got = 0;
    CU(cudaStreamSynchronize(g_s));
    CU(cudaMemcpy(&got, dloss, sizeof got, cudaMemcpyDeviceToHost));
    /* the device's log is within an ulp of the host's: not bitwise */
    int ok = isfinite(got) && fabs(got - loss) <= 1e-13 * fabs(loss);
    g_rows++;
    g_fail += !ok;
    printf("  ce_loss_add: device %.17g host %.17g %s\n", got, loss, ok ? "ok" : "FAIL");
    /* the STEP's sum of squares: the same bits every call (no atomics), close to the CPU's */
    enum { NSQ = 5000 };
    float *g = check_calloc(sizeof(float) * NSQ), *dg = NULL;
    for (int i = 0; i < NSQ; i++)
        g[i] = (float)(2 * urand() - 1);
    double sq[2] = {0, 0}, *dsq = NULL, ref = bsipipe_sumsq(NSQ, g);
    CU(cudaMalloc((void **)&dg, sizeof(float) * NSQ));
    CU(cudaMalloc((void **)&dsq, sizeof sq));
    CU(cudaMemcpy(dg, g, sizeof(float) * NSQ, cudaMemcpyHostToDevice));
    CHECK(bsipipe_cuda_tp_sumsq(NSQ, dg, dsq, g_s));
    CHECK(bsipipe_cuda_tp_sumsq(NSQ, dg, dsq + 1, g_s));
    CU(cudaStreamSynchronize(g_s));
    CU(cudaMemcpy(sq, dsq, sizeof sq, cudaMemcpyDeviceToHost));
    ok = memcmp(&sq[0], &sq[1], sizeof sq[0]) == 0 && fabs(sq[0] - ref) <= 1e-12 * ref;
    g_rows++;
    g_fail += !ok;
    printf("  sumsq: %.17g twice the same bits: %s; cpu %.17g: %s\n", sq[0],
           memcmp(&sq[0], &sq[1], sizeof sq[0]) ? "no" : "yes", ref, ok ? "ok" : "FAIL");
    free(g);
    cudaFree(dg);
    cudaFree(dsq);
    cudaFree(dce);
    cudaFree(dloss);
    printf("  %d comparisons, %d with other bits\n", g_rows - rows, g_fail - before);
}

/* bf16s must be refused by name, before anything runs */
static void check_bf16s_refused(const bsipipe_model_dims_t *d)
{
    bsipipe_tp_t tp = {2, 0};
    float *x = NULL, *st = NULL;
    CU(cudaMalloc((void **)&x, sizeof(float) * 64));
    CU(cudaMalloc((void **)&st, sizeof(float) * 64));
    CHECK(bsipipe_cuda_set_gemm_mode(BSIPIPE_CUDA_GEMM_BF16S));
    int rc = bsipipe_cuda_tp_layer_fwd_norm1(d, &tp, 16, x, x, st, g_s, g_h);
    const char *detail = bsipipe_error_detail();
    int ok = rc == -EINVAL && strstr(detail, "bf16s");
    printf("\nbf16s refused: rc %d, \"%s\": %s\n", rc, detail, ok ? "ok" : "FAIL");
    g_rows++;
    g_fail += !ok;
    CHECK(bsipipe_cuda_set_gemm_mode(BSIPIPE_CUDA_GEMM_FP32));
    cudaFree(x);
    cudaFree(st);
}

static void run_mode(bsipipe_cuda_gemm_mode_t mode)
{
    static const struct {
        const char *name;
        bsipipe_model_dims_t d;
    } models[] = {
        /* head size 8; GPT: LayerNorm, GELU, learned positions; LLaMA: RMSNorm, SwiGLU, RoPE */
        {"GPT", {BSIPIPE_MODEL_GPT, 1, 32, 4, 128, 64, 32}},
        {"LLaMA", {BSIPIPE_MODEL_LLAMA, 1, 32, 4, 48, 64, 32}},
    };
    CHECK(bsipipe_cuda_set_gemm_mode(mode));
    g_tol = mode == BSIPIPE_CUDA_GEMM_FP32 ? 1e-5 : 1e-2;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (int T = 2; T <= 4; T *= 2)
            for (int split = 0; split < 2; split++) {
                /* the second piece of a sequence: attention over a K/V prefix */
                tcase_t c = {.name = models[m].name, .d = models[m].d, .T = T, .start = 8, .len = 16,
                             .split = split, .mode = bsipipe_cuda_gemm_mode_name(mode)};
                run_case(&c);
            }
}

int main(int argc, char **argv)
{
    const char *mode = "default";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc &&
            (!strcmp(argv[i + 1], "fp32") || !strcmp(argv[i + 1], "tf32") || !strcmp(argv[i + 1], "bf16") ||
             !strcmp(argv[i + 1], "all") || !strcmp(argv[i + 1], "default")))
            mode = argv[++i];
        else if (!strcmp(argv[i], "-v"))
            g_verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--mode fp32|tf32|bf16|all] [-v]\n", argv[0]);
            return 99;
        }
    }
    int ndev = bsipipe_cuda_device_count();
    if (ndev <= 0) {
        printf("SKIP: no CUDA GPU found (test needs one; libbsipipe built with CUDA: %s)\n",
               bsipipe_cuda_compiled() ? "yes" : "no");
        return 77;
    }
    CU(cudaStreamCreate(&g_s));
    if (cublasCreate(&g_h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 99;
    }
    if (!strcmp(mode, "fp32") || !strcmp(mode, "default") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_FP32);
    if (!strcmp(mode, "tf32") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_TF32);
    if (!strcmp(mode, "bf16") || !strcmp(mode, "default") || !strcmp(mode, "all"))
        run_mode(BSIPIPE_CUDA_GEMM_BF16);
    check_collectives();
    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, 1, 32, 4, 128, 64, 32};
    check_bf16s_refused(&d);
    cublasDestroy(g_h);
    cudaStreamDestroy(g_s);
    printf("\n%d tensors compared, %d over tolerance, worst %.3e: %s\n", g_rows, g_fail, g_worst,
           g_fail ? "FAIL" : "PASS");
    return g_fail ? 1 : 0;
}
#endif
