/* test_kernel_tp: tensor-parallel kernels (kernels/bsipipe_tp.h) against the
 * unsharded ones. For GPT and LLaMA and D_t in {1, 2, 4}: one sequence in two
 * pieces of different lengths (the second reads the first's KV prefix)
 * through the vocabulary-parallel embedding, two chunks ([0, 1) and [1, L))
 * and the vocabulary-parallel head with the parallel cross-entropy, forward
 * then backward, the D_t ranks on threads over the in-process communicator.
 * Compared, per tensor: the loss, the embedding output, the chunk output and
 * the gradient at the chunk input (gathered from the ranks' token slices),
 * and every parameter gradient (unsharded). Also: the loss and the replicated
 * gradients are bitwise the same on every rank; shard -> unshard gives the
 * parameters back bitwise; the split backward's segments (ZeroBubble B / W)
 * give the fused ones' bits; bad degrees give BSIPIPE_ECONFIG naming the rule.
 *
 * Tolerance, derived as in test_kernel_split.c. Sharding changes no formula,
 * only the order of some sums: the row-parallel products (wo, the second MLP
 * matrix, and in the backward the column-parallel blocks' input gradients)
 * are summed as D_t partial products, the cross-entropy's sum of exp as D_t
 * partial sums, and the norm-weight gradients as D_t token-slice sums. Two
 * evaluation orders of an n-term sum in precision u lie within
 * 2 gamma_n(u) sum|x_i| of each other (Higham, Thm 4.4); the longest sum here
 * has K = max(d, F, V, S) terms; along the chain at most R = 4 L + 2 such
 * reordered reductions occur (4 per layer, the head's two), adding to first
 * order; with a cancellation ratio sum|x_i| / |sum x_i| <= C = 10:
 *      tol(u) = 2 R C gamma_K(u)        (normwise relative, per tensor)
 * u = 2^-53 for the fp64 path (any slicing or offset mistake shows as O(1)),
 * u = 2^-24 for fp32. The fp32 rounding level of the unsharded run against
 * fp64 is printed beside each tensor for scale.
 *
 * --bench: CPU time of the sharded (D_t = 2, summed over the ranks) vs the
 * unsharded forward+backward on a small GPT (not a test; run with
 * OPENBLAS_NUM_THREADS=1). */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#include "base/bsipipe_error.h"
#include "kernels/bsipipe_tp.h"
#include "tests/check.h"
#include "tests/kernels/kt_util.h"

struct tp_out {
    double loss;
    double *x_emb, *x_out, *dx_in, *grads;
    int rank_mismatch;
};
static double tp_bench_max_rank; /* CPU seconds of the busiest rank (--bench) */

#define R float
#define FN(n) n
#define SFX(n) n##_f32
#include "tests/kernels/tp_run_tmpl.h"
#undef R
#undef FN
#undef SFX
#define R double
#define FN(n) n##_f64
#define SFX(n) n##_f64
#include "tests/kernels/tp_run_tmpl.h"
#undef R
#undef FN
#undef SFX

static double gamma_n(int n, double u) { return n * u / (1 - n * u); }

static void out_alloc(const bsipipe_model_dims_t *d, struct tp_out *o)
{
    long sh = (long)d->seq_len * d->hidden;
    memset(o, 0, sizeof *o);
    o->x_emb = kt_alloc(sizeof(double) * sh);
    o->x_out = kt_alloc(sizeof(double) * sh);
    o->dx_in = kt_alloc(sizeof(double) * sh);
    o->grads = kt_alloc(sizeof(double) * bsipipe_model_params(d));
}

static void out_free(struct tp_out *o)
{
    free(o->x_emb);
    free(o->x_out);
    free(o->dx_in);
    free(o->grads);
}

/* one compared tensor: prints and checks tp vs ref in both precisions */
static void compare(const char *name, long n, const double *t32, const double *r32,
                    const double *t64, const double *r64, double tol32, double tol64,
                    double *worst32, double *worst64)
{
    double e32 = kt_reldiff_d(n, t32, r32), e64 = kt_reldiff_d(n, t64, r64);
    double lvl = kt_reldiff_d(n, r32, r64);
    int ok = e32 <= tol32 && e64 <= tol64;
    printf("    %-14s fp32 %.2e (fp32 level %.1e) fp64 %.2e %s\n", name, e32, lvl, e64,
           ok ? "ok" : "FAIL");
    CHECK(ok, "%s: fp32 %.3e (tol %.1e), fp64 %.3e (tol %.1e)", name, e32, tol32, e64, tol64);
    if (e32 > *worst32)
        *worst32 = e32;
    if (e64 > *worst64)
        *worst64 = e64;
}

static void equivalence(const bsipipe_model_dims_t *d, const int *st, int k)
{
    const int S = d->seq_len, L = d->n_layers;
    long n = bsipipe_model_params(d), sh = (long)S * d->hidden;
    int K = d->hidden, nt = bsipipe_model_tensors(d, NULL, 0);
    bsipipe_tensor_info_t *ti = kt_alloc(sizeof *ti * nt);
    float *p32 = kt_alloc(sizeof(float) * n);
    double *p64 = kt_alloc(sizeof(double) * n);
    int *tok = kt_alloc(sizeof(int) * S), *tgt = kt_alloc(sizeof(int) * S);
    struct tp_out r32, r64, t32, t64;
    double R = 4.0 * L + 2, C = 10, tol32, tol64;
    if (d->ffn_hidden > K)
        K = d->ffn_hidden;
    if (d->vocab > K)
        K = d->vocab;
    if (S > K)
        K = S;
    tol32 = 2 * R * C * gamma_n(K, ldexp(1, -24));
    tol64 = 2 * R * C * gamma_n(K, ldexp(1, -53));
    bsipipe_model_tensors(d, ti, nt);
    KT_CHECK(bsipipe_model_init(d, 7, p32));
    KT_CHECK(bsipipe_model_init_f64(d, 7, p64));
    kt_tokens(S, d->vocab, 11, tok);
    kt_tokens(S, d->vocab, 12, tgt);
    out_alloc(d, &r32);
    out_alloc(d, &r64);
    run_f32(d, 0, p32, tok, tgt, k, st, &r32);
    run_f64(d, 0, p64, tok, tgt, k, st, &r64);
    printf("%-5s L=%d d=%d H=%d F=%d V=%d S=%d pieces", kt_family(d), L, d->hidden,
           d->n_heads, d->ffn_hidden, d->vocab, S);
    for (int j = 0; j <= k; j++)
        printf(" %d", st[j]);
    printf(": tol fp32 %.1e, fp64 %.1e (K=%d, R=%g, C=%g)\n", tol32, tol64, K, R, C);
    for (int size = 1; size <= 4; size *= 2) {
        double w32 = 0, w64 = 0;
        out_alloc(d, &t32);
        out_alloc(d, &t64);
        run_f32(d, size, p32, tok, tgt, k, st, &t32);
        run_f64(d, size, p64, tok, tgt, k, st, &t64);
        printf("  D_t=%d\n", size);
        CHECK(t32.rank_mismatch == 0 && t64.rank_mismatch == 0,
              "D_t=%d: loss or replicated gradients differ between ranks (%d, %d)", size,
              t32.rank_mismatch, t64.rank_mismatch);
        compare("loss", 1, &t32.loss, &r32.loss, &t64.loss, &r64.loss, tol32, tol64, &w32,
                &w64);
        compare("act.embed", sh, t32.x_emb, r32.x_emb, t64.x_emb, r64.x_emb, tol32, tol64,
                &w32, &w64);
        compare("act.chunk_out", sh, t32.x_out, r32.x_out, t64.x_out, r64.x_out, tol32, tol64,
                &w32, &w64);
        compare("grad.chunk_in", sh, t32.dx_in, r32.dx_in, t64.dx_in, r64.dx_in, tol32, tol64,
                &w32, &w64);
        for (int i = 0; i < nt; i++) {
            long o = ti[i].offset, c = (long)ti[i].rows * ti[i].cols;
            compare(ti[i].name, c, t32.grads + o, r32.grads + o, t64.grads + o, r64.grads + o,
                    tol32, tol64, &w32, &w64);
        }
        printf("  D_t=%d worst: fp32 %.2e, fp64 %.2e\n", size, w32, w64);
        out_free(&t32);
        out_free(&t64);
    }
    out_free(&r32);
    out_free(&r64);
    free(ti); free(p32); free(p64); free(tok); free(tgt);
}

/* shard -> unshard is the identity, bitwise, for every rank's blocks; the
 * shards partition the split tensors (each element lands once) */
static void roundtrip(const bsipipe_model_dims_t *d, int size)
{
    long n = bsipipe_model_params(d), ns = bsipipe_tp_model_params(d, size);
    float *p = kt_alloc(sizeof(float) * n), *back = kt_alloc(sizeof(float) * n);
    float *sh = kt_alloc(sizeof(float) * ns), *cnt = kt_alloc(sizeof(float) * n);
    float *ones = kt_alloc(sizeof(float) * ns);
    int once = 1;
    KT_CHECK(bsipipe_model_init(d, 3, p));
    for (long i = 0; i < ns; i++)
        ones[i] = 1;
    for (int r = 0; r < size; r++) {
        bsipipe_tp_t tp = {size, r};
        KT_CHECK(bsipipe_tp_model_shard(d, &tp, p, sh));
        KT_CHECK(bsipipe_tp_model_unshard(d, &tp, sh, back, 0));
        KT_CHECK(bsipipe_tp_model_unshard(d, &tp, ones, cnt, 1));
    }
    /* replicated elements were added size times; every split element was
     * written, by size ranks writing size * (shard elements) = full elements
     * in all, hence each exactly once */
    {
        int nt = bsipipe_tp_tensors(d, size, NULL, 0);
        bsipipe_tp_tensor_info_t *ti = kt_alloc(sizeof *ti * nt);
        long covered = 0;
        bsipipe_tp_tensors(d, size, ti, nt);
        for (int i = 0; i < nt; i++) {
            long c = (long)ti[i].full_rows * ti[i].full_cols;
            float want = ti[i].split == BSIPIPE_TP_REPLICATED ? (float)size : 1;
            covered += c;
            for (long j = 0; j < c; j++)
                once &= cnt[ti[i].full_offset + j] == want;
            if (ti[i].split != BSIPIPE_TP_REPLICATED)
                once &= (long)size * ti[i].rows * ti[i].cols == c;
        }
        CHECK(covered == n, "shard table covers %ld of %ld parameters", covered, n);
        free(ti);
    }
    CHECK(!memcmp(p, back, sizeof(float) * n), "%s D_t=%d: unshard(shard(p)) != p",
          kt_family(d), size);
    CHECK(once, "%s D_t=%d: a split element is not in exactly one shard", kt_family(d), size);
    printf("%-5s D_t=%d shard/unshard round trip: %s (%ld -> %ld params per rank)\n",
           kt_family(d), size, once && !memcmp(p, back, sizeof(float) * n) ? "ok" : "FAIL",
           n, ns);
    free(p); free(back); free(sh); free(cnt); free(ones);
}

static void expect_config(const bsipipe_model_dims_t *d, int size, int len, const char *rule,
                          const char *valid)
{
    bsipipe_tp_t tp = {size, 0};
    int rc = bsipipe_tp_check(d, &tp, len);
    const char *msg = bsipipe_error_detail();
    printf("D_t=%d len=%d: %d %s\n", size, len, rc, msg);
    CHECK(rc == BSIPIPE_ECONFIG, "D_t=%d len=%d: %d, expected BSIPIPE_ECONFIG", size, len, rc);
    CHECK_CONTAINS(msg, rule);
    CHECK_CONTAINS(msg, valid);
}

static void errors(void)
{
    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, 2, 32, 4, 64, 64, 16};
    bsipipe_tp_t tp3 = {3, 0}, bad_rank = {2, 2};
    bsipipe_tp_local_t *loc;
    bsipipe_tp_comm_t c;
    float buf[4096] = {0};
    int rc;
    expect_config(&d, 3, 8, "number of heads (4)", "valid D_t here: 1, 2, 4");
    d.ffn_hidden = 66;
    expect_config(&d, 4, 8, "FFN width (66)", "valid D_t here: 1, 2");
    d.ffn_hidden = 64;
    d.vocab = 66;
    expect_config(&d, 4, 8, "vocabulary size (66)", "valid D_t here: 1, 2");
    d.vocab = 64;
    expect_config(&d, 4, 6, "piece length (6)", "valid D_t here: 1, 2");
    d.n_heads = 8;
    expect_config(&d, 16, 0, "number of heads (8)", "valid D_t here: 1, 2, 4, 8");
    d.n_heads = 4;
    CHECK(bsipipe_tp_check(&d, &tp3, 0) == BSIPIPE_ECONFIG, "check without a piece");
    CHECK(bsipipe_tp_check(&d, &bad_rank, 8) == -EINVAL, "rank out of range");
    CHECK_CONTAINS(bsipipe_error_detail(), "rank 2 out of range");
    CHECK(bsipipe_tp_layer_params(&d, 3) == BSIPIPE_ECONFIG, "sizes refuse D_t=3");
    CHECK(bsipipe_tp_stash_size(&d, 4, 6) == BSIPIPE_ECONFIG, "stash size refuses len 6");
    CHECK(bsipipe_tp_layer_params(&d, 0) == -EINVAL, "size 0");
    /* the drivers refuse before any collective (so no rank waits) */
    KT_CHECK(bsipipe_tp_local_create(3, &loc));
    c = bsipipe_tp_local_comm(loc);
    rc = bsipipe_tp_chunk_forward(&d, &tp3, &c, 0, 1, 0, 6, buf, buf, buf, buf, buf, buf);
    CHECK(rc == BSIPIPE_ECONFIG, "chunk_forward D_t=3: %d", rc);
    rc = bsipipe_tp_head_forward_backward(&d, &tp3, &c, buf, buf, 6, buf, (int[6]){0}, 1.0,
                                          &(double){0}, buf, buf);
    CHECK(rc == BSIPIPE_ECONFIG, "head D_t=3: %d", rc);
    {
        bsipipe_tp_t tp2 = {2, 0};
        rc = bsipipe_tp_embed_forward(&d, &tp2, &c, buf, (int[4]){0, 1, 99, 2}, 0, 4, buf, buf);
        CHECK(rc == -EINVAL, "token out of vocabulary: %d", rc);
        CHECK_CONTAINS(bsipipe_error_detail(), "tokens[2] = 99");
        rc = bsipipe_tp_chunk_forward(&d, &tp2, NULL, 0, 1, 0, 4, buf, buf, buf, buf, buf, buf);
        CHECK(rc == -EINVAL, "NULL communicator: %d", rc);
        rc = bsipipe_tp_chunk_forward(&d, &tp2, &c, 1, 1, 0, 4, buf, buf, buf, buf, buf, buf);
        CHECK(rc == -EINVAL, "empty chunk: %d", rc);
    }
    bsipipe_tp_local_destroy(loc);
}

/* a rank that fails wakes the others (-ECANCELED) instead of leaving them in
 * a collective forever */
static int fail_rank(void *arg, int rank)
{
    bsipipe_tp_comm_t *c = arg;
    float s[4] = {1, 2, 3, 4}, r[8];
    if (rank == 1)
        return -EIO;
    return c->all_gather(c->ctx, rank, s, r, 4, BSIPIPE_TP_F32);
}

static int sum_rank(void *arg, int rank)
{
    bsipipe_tp_comm_t *c = arg;
    double v[2] = {rank + 0.5, -rank};
    int rc = c->all_reduce(c->ctx, rank, v, 2, BSIPIPE_TP_F64, BSIPIPE_TP_SUM);
    if (!rc && (v[0] != 0.5 + 1.5 + 2.5 || v[1] != -3))
        return -EDOM;
    return rc;
}

static void local_comm(void)
{
    bsipipe_tp_local_t *loc;
    bsipipe_tp_comm_t c;
    int rc;
    KT_CHECK(bsipipe_tp_local_create(3, &loc));
    c = bsipipe_tp_local_comm(loc);
    rc = bsipipe_tp_local_run(loc, fail_rank, &c);
    CHECK(rc == -EIO, "failing rank: run returned %d, expected -EIO", rc);
    rc = bsipipe_tp_local_run(loc, sum_rank, &c); /* usable again after an abort */
    CHECK(rc == 0, "all_reduce after an abort: %d", rc);
    printf("local communicator: a failing rank releases the others (%s)\n",
           rc == 0 ? "ok" : "FAIL");
    bsipipe_tp_local_destroy(loc);
}

static void bench(void)
{
    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, 2, 256, 8, 1024, 4096, 512};
    int st[3] = {0, 256, 512}, reps = 3;
    long n = bsipipe_model_params(&d);
    float *p = kt_alloc(sizeof(float) * n);
    int *tok = kt_alloc(sizeof(int) * d.seq_len), *tgt = kt_alloc(sizeof(int) * d.seq_len);
    double best[3] = {1e30, 1e30, 1e30}, rank_best = 1e30;
    KT_CHECK(bsipipe_model_init(&d, 1, p));
    kt_tokens(d.seq_len, d.vocab, 1, tok);
    kt_tokens(d.seq_len, d.vocab, 2, tgt);
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < 3; m++) {
            double t;
            tp_bench_max_rank = 0;
            t = run_f32(&d, m == 0 ? 0 : m, p, tok, tgt, 2, st, NULL);
            if (t < best[m])
                best[m] = t;
            if (m == 2 && tp_bench_max_rank < rank_best)
                rank_best = tp_bench_max_rank;
        }
    printf("bench GPT L=2 d=256 H=8 F=1024 V=4096 S=512, 2 pieces, fp32, CPU seconds "
           "(best of %d):\n  unsharded %.3f | D_t=1 %.3f (%.2fx) | D_t=2 summed over ranks "
           "%.3f (%.2fx), busiest rank %.3f (%.2fx)\n", reps, best[0], best[1],
           best[1] / best[0], best[2], best[2] / best[0], rank_best, rank_best / best[0]);
    free(p); free(tok); free(tgt);
}

/* The split backward's segments (bwd_mlp_x / bwd_attn_x, then
 * wgrad_mlp / wgrad_attn) against the fused bwd_mlp / bwd_attn on the same
 * inputs (deterministic values in [-0.5, 0.5), gradients and dKV starting
 * from the same values): the same products on the same operands, so the
 * partial input gradient, dKV and every weight gradient must match bit for
 * bit, and the split must have written its whole wstash. */
static float split_val(unsigned *x)
{
    *x = *x * 1664525u + 1013904223u;
    return (float)((*x >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void split_backward(const bsipipe_model_dims_t *d, int size, int rank, int start, int len)
{
    bsipipe_tp_t tp = {size, rank};
    long np = bsipipe_tp_layer_params(d, size), ns = bsipipe_tp_stash_size(d, size, len),
         nkv = bsipipe_tp_kv_size(d, size), nw = bsipipe_tp_seg_work_size(d, size, len),
         nws = bsipipe_tp_wstash_size(d, size, len), nh = (long)len * d->hidden;
    float *layer = malloc(sizeof(float) * (size_t)np), *stash = malloc(sizeof(float) * (size_t)ns);
    float *kv = malloc(sizeof(float) * (size_t)nkv), *gdy = malloc(sizeof(float) * (size_t)nh);
    float *gath = malloc(sizeof(float) * (size_t)nh), *work = malloc(sizeof(float) * (size_t)nw);
    float *g[2], *dkv[2], *part[2], *wst = malloc(sizeof(float) * (size_t)nws);
    unsigned x = 12345;
    for (long j = 0; j < np; j++) layer[j] = split_val(&x);
    for (long j = 0; j < ns; j++) stash[j] = split_val(&x);
    for (long j = 0; j < nkv; j++) kv[j] = split_val(&x);
    for (long j = 0; j < nh; j++) gdy[j] = split_val(&x), gath[j] = split_val(&x);
    for (long j = 0; j < nws; j++) wst[j] = NAN; /* every element must be written */
    for (int v = 0; v < 2; v++) {
        g[v] = malloc(sizeof(float) * (size_t)np);
        dkv[v] = malloc(sizeof(float) * (size_t)nkv);
        part[v] = malloc(sizeof(float) * (size_t)nh);
        unsigned y = 777;
        for (long j = 0; j < np; j++) g[v][j] = split_val(&y);
        for (long j = 0; j < nkv; j++) dkv[v][j] = split_val(&y);
    }
    int rc = bsipipe_tp_layer_bwd_mlp(d, &tp, len, layer, g[0], stash, gdy, gath, part[0], work);
    rc |= bsipipe_tp_layer_bwd_mlp_x(d, &tp, len, layer, stash, gdy, part[1], work, wst);
    rc |= bsipipe_tp_layer_wgrad_mlp(d, &tp, len, g[1], stash, wst, gath);
    int mlp = !memcmp(part[0], part[1], sizeof(float) * (size_t)nh);
    rc |= bsipipe_tp_layer_bwd_attn(d, &tp, start, len, layer, g[0], stash, kv, dkv[0], gdy, gath, part[0], work);
    rc |= bsipipe_tp_layer_bwd_attn_x(d, &tp, start, len, layer, stash, kv, dkv[1], gdy, part[1], work, wst);
    rc |= bsipipe_tp_layer_wgrad_attn(d, &tp, len, g[1], stash, wst, gath);
    int attn = !memcmp(part[0], part[1], sizeof(float) * (size_t)nh);
    int grads = !memcmp(g[0], g[1], sizeof(float) * (size_t)np), dk = !memcmp(dkv[0], dkv[1], sizeof(float) * (size_t)nkv);
    long unset = 0;
    for (long j = 0; j < nws; j++)
        unset += wst[j] != wst[j];
    const char *fam = d->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama";
    printf("split backward %-5s D_t=%d rank %d piece [%d, %d): partial dn2 %s, dn1 %s, weight grads %s, dKV %s, "
           "wstash elements unwritten %ld of %ld\n", fam, size, rank, start, start + len, mlp ? "bitwise" : "DIFFER",
           attn ? "bitwise" : "DIFFER", grads ? "bitwise" : "DIFFER", dk ? "bitwise" : "DIFFER", unset, nws);
    CHECK(rc == 0, "%s split segments: %s", fam, bsipipe_error_detail());
    CHECK(mlp && attn, "%s D_t=%d: split input gradients differ from the fused ones", fam, size);
    CHECK(grads, "%s D_t=%d: split weight gradients differ from the fused ones", fam, size);
    CHECK(dk, "%s D_t=%d: split dKV differs from the fused one", fam, size);
    CHECK(unset == 0, "%s D_t=%d: %ld wstash elements never written", fam, size, unset);
    CHECK(bsipipe_tp_wstash_size(d, size, len + 1) == (size > 1 ? BSIPIPE_ECONFIG : (long)(len + 1) *
          (5L * d->hidden + (d->family == BSIPIPE_MODEL_LLAMA ? 2 : 1) * d->ffn_hidden)),
          "%s: wstash size of an odd piece", fam);
    for (int v = 0; v < 2; v++) {
        free(g[v]);
        free(dkv[v]);
        free(part[v]);
    }
    free(layer); free(stash); free(kv); free(gdy); free(gath); free(work); free(wst);
}

int main(int argc, char **argv)
{
    bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 2, 32, 4, 128, 64, 16};
    bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 2, 32, 4, 48, 72, 16};
    int st[3] = {0, 4, 16}; /* pieces of 4 and 12 tokens: both divisible by 4 */
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        return 0;
    }
    equivalence(&gpt, st, 2);
    equivalence(&llama, st, 2);
    for (int size = 1; size <= 4; size *= 2) {
        roundtrip(&gpt, size);
        roundtrip(&llama, size);
    }
    for (int size = 1; size <= 4; size *= 2) {
        split_backward(&gpt, size, size - 1, 4, 12);
        split_backward(&llama, size, size / 2, 4, 12);
    }
    errors();
    local_comm();
    return check_finish("test_kernel_tp");
}
