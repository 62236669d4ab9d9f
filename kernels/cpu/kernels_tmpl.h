/* kernels/cpu/kernels_tmpl.h: the CPU kernels, written once for a generic
 * real type. Included by kernels_f32.c and kernels_f64.c, which define
 *   R      float or double
 *   FN(n)  public name (n or n##_f64)
 *   GEMM   cblas_sgemm or cblas_dgemm
 * The fp64 instance exists for finite-difference checks: same code path,
 * same tiling, so its gradients test exactly the code that runs in fp32.
 * Matrices are row-major; weights are [out, in] (torch Linear layout). */
#include <errno.h>
#include <pthread.h>
#include <tgmath.h> /* exp, tanh, log, sqrt follow R (expf for float) */
#include <stdlib.h>
#include <string.h>
#include <cblas.h>

#include "kernels/bsipipe_kernels.h"
#include "kernels/cpu/internal.h"

#define IX(i, j, ld) ((size_t)(i) * (size_t)(ld) + (size_t)(j))

/* ---------------------------------------------------------------- helpers */

/* Matrix products on the kernel threads (bsipipe_kernels_set_threads): with
 * n > 1 threads the larger of C's two dimensions is cut into n parts (edges
 * on multiples of 16), each one single-threaded BLAS call on a pool thread,
 * the BLAS's own threads set aside meanwhile. Its threaded server spun
 * (sched_yield) between the block's many calls, against our attention and
 * row threads, and left cores idle around each call.
 * The parts are whole rows / columns of C, each element still one BLAS
 * call's sum over all of K in the library's own K blocking, so with
 * OpenBLAS's SkylakeX kernels the result does not depend on the cut
 * (test_kernel_split checks it bitwise). Its Haswell kernels (selected
 * with OPENBLAS_CORETYPE=Haswell, as one machine's environment did) give
 * about 6% of the elements other bits when C is cut: so the first
 * product of each shape runs both ways and the cut is kept only if every
 * bit agrees (gemm_cut_ok). Parts stay above PAR_GEMM_MIN multiply-adds:
 * OpenBLAS sends small products to other kernels (its small-matrix path),
 * which would change the bits. */
#define PAR_GEMM_MIN (1 << 24)
#define CUT_SHAPES 64

struct gemm_ctx {
    enum CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc, parts, cut_n;
    R alpha, beta;
    const R *a, *b;
    R *c;
};

static int gemm_part(void *v, int p)
{
    const struct gemm_ctx *g = v;
    int dim = g->cut_n ? g->n : g->m;
    int lo = (int)((long)dim * p / g->parts) / 16 * 16;
    int hi = p + 1 == g->parts ? dim : (int)((long)dim * (p + 1) / g->parts) / 16 * 16;
    if (hi <= lo)
        return 0;
    if (g->cut_n) { /* columns [lo, hi) of C: rows of B^T or columns of B */
        const R *b = g->tb == CblasTrans ? g->b + (size_t)lo * g->ldb : g->b + lo;
        GEMM(CblasRowMajor, g->ta, g->tb, g->m, hi - lo, g->k, g->alpha, g->a, g->lda, b, g->ldb,
             g->beta, g->c + lo, g->ldc);
    } else { /* rows [lo, hi) of C */
        const R *a = g->ta == CblasTrans ? g->a + lo : g->a + (size_t)lo * g->lda;
        GEMM(CblasRowMajor, g->ta, g->tb, hi - lo, g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb,
             g->beta, g->c + (size_t)lo * g->ldc, g->ldc);
    }
    return 0;
}

/* Shapes whose cut product was compared with the whole one (per process
 * and precision); a shape seen first on two threads at once is compared
 * twice, with the same answer. */
static struct cut_shape {
    int ta, tb, m, n, k, parts, ok;
} cut_shapes[CUT_SHAPES];
static int n_cut_shapes;
static pthread_mutex_t cut_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 if g's cut gives C the bits of the whole product, computed as
 * gemm_run's uncut path does (same beta, same C), on copies of C. */
static int gemm_cut_ok(struct gemm_ctx g)
{
    int found = -1;
    pthread_mutex_lock(&cut_lock);
    for (int i = 0; i < n_cut_shapes && found < 0; i++) {
        const struct cut_shape *x = &cut_shapes[i];
        if (x->ta == (int)g.ta && x->tb == (int)g.tb && x->m == g.m && x->n == g.n && x->k == g.k && x->parts == g.parts)
            found = x->ok;
    }
    pthread_mutex_unlock(&cut_lock);
    if (found >= 0)
        return found;
    size_t bytes = sizeof(R) * (size_t)g.m * (size_t)g.ldc;
    R *whole = malloc(bytes), *cut = malloc(bytes);
    int ok = 0;
    if (whole && cut) {
        memcpy(whole, g.c, bytes);
        memcpy(cut, g.c, bytes);
        GEMM(CblasRowMajor, g.ta, g.tb, g.m, g.n, g.k, (R)1, g.a, g.lda, g.b, g.ldb, g.beta, whole, g.ldc);
        g.c = cut;
        int bt = kern_blas_single();
        kern_parallel_for(g.parts, gemm_part, &g);
        kern_blas_restore(bt);
        ok = 1;
        for (int i = 0; i < g.m && ok; i++)
            ok = memcmp(whole + (size_t)i * g.ldc, cut + (size_t)i * g.ldc, sizeof(R) * (size_t)g.n) == 0;
    }
    free(whole);
    free(cut);
    pthread_mutex_lock(&cut_lock);
    if (n_cut_shapes < CUT_SHAPES) /* beyond: compared again next time */
        cut_shapes[n_cut_shapes++] = (struct cut_shape){(int)g.ta, (int)g.tb, g.m, g.n, g.k, g.parts, ok};
    pthread_mutex_unlock(&cut_lock);
    return ok;
}

static void gemm_run(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                     const R *a, int lda, const R *b, int ldb, R beta, R *c, int ldc)
{
    double mnk = (double)m * n * k;
    int parts = kern_threads, dim = m > n ? m : n;
    if (parts > dim / 16)
        parts = dim / 16;
    if (parts > 1 && mnk / parts < PAR_GEMM_MIN)
        parts = (int)(mnk / PAR_GEMM_MIN);
    struct gemm_ctx g = {ta, tb, m, n, k, lda, ldb, ldc, parts, n >= m, (R)1, beta, a, b, c};
    if (parts <= 1 || !gemm_cut_ok(g)) {
        GEMM(CblasRowMajor, ta, tb, m, n, k, (R)1, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int bt = kern_blas_single();
    kern_parallel_for(parts, gemm_part, &g);
    kern_blas_restore(bt);
}

/* y[n, out] (ld ldy) = x[n, in] (ld ldx) @ w[out, in]^T (ld ldw) + beta * y */
static void lin_fwd(int n, int out, int in, const R *x, int ldx, const R *w, int ldw,
                    R beta, R *y, int ldy)
{
    gemm_run(CblasNoTrans, CblasTrans, n, out, in, x, ldx, w, ldw, beta, y, ldy);
}

/* dx[n, in] = dy[n, out] @ w[out, in] + beta * dx */
static void lin_bwd_x(int n, int out, int in, const R *dy, int lddy, const R *w, int ldw,
                      R beta, R *dx, int lddx)
{
    gemm_run(CblasNoTrans, CblasNoTrans, n, in, out, dy, lddy, w, ldw, beta, dx, lddx);
}

/* dw[out, in] += dy[n, out]^T @ x[n, in] */
static void lin_bwd_w(int n, int out, int in, const R *dy, int lddy, const R *x, int ldx,
                      R *dw, int lddw)
{
    gemm_run(CblasTrans, CblasNoTrans, out, in, n, dy, lddy, x, ldx, (R)1, dw, lddw);
}

/* LayerNorm (b != NULL) or RMSNorm (b == NULL) over rows of width d.
 * y = xhat * w (+ b); xhat = (x - mean) * rstd (LN) or x * rstd (RMS).
 * st[0..n) = mean (0 for RMS), st[n..2n) = rstd. Statistics in double. */
static void norm_fwd_rows(int n, int r0, int r1, int d, const R *x, const R *w, const R *b,
                          R *y, R *st)
{
    for (int i = r0; i < r1; i++) {
        const R *xr = x + IX(i, 0, d);
        R *yr = y + IX(i, 0, d);
        double mean = 0, var = 0;
        if (b) {
            for (int c = 0; c < d; c++)
                mean += xr[c];
            mean /= d;
        }
        for (int c = 0; c < d; c++) {
            double t = xr[c] - mean;
            var += t * t;
        }
        var /= d;
        R m = (R)mean, rs = (R)(1.0 / sqrt(var + BSIPIPE_NORM_EPS));
        for (int c = 0; c < d; c++) {
            R xh = (xr[c] - m) * rs;
            yr[c] = xh * w[c] + (b ? b[c] : (R)0);
        }
        st[i] = m;
        st[n + i] = rs;
    }
}

static void norm_fwd(int n, int d, const R *x, const R *w, const R *b, R *y, R *st)
{
    norm_fwd_rows(n, 0, n, d, x, w, b, y, st);
}

/* Backward of norm_fwd: dx = res + ... (res: the residual branch's
 * gradient, NULL for none, may be dx itself), dw += , db += . Taking the
 * residual here saves the block a copy pass per norm. */
static void norm_bwd_rows(int n, int r0, int r1, int d, const R *x, const R *w, int has_b,
                          const R *st, const R *dy, const R *res, R *dx, R *dw, R *db)
{
    for (int i = r0; i < r1; i++) {
        const R *xr = x + IX(i, 0, d), *dyr = dy + IX(i, 0, d);
        const R *rr = res ? res + IX(i, 0, d) : NULL;
        R *dxr = dx + IX(i, 0, d);
        R m = st[i], rs = st[n + i];
        double s1 = 0, s2 = 0; /* mean(dxhat), mean(dxhat * xhat) */
        for (int c = 0; c < d; c++) {
            R xh = (xr[c] - m) * rs, dxh = dyr[c] * w[c];
            s1 += dxh;
            s2 += (double)dxh * xh;
            dw[c] += dyr[c] * xh;
            if (has_b)
                db[c] += dyr[c];
        }
        s1 /= d;
        s2 /= d;
        if (!has_b)
            s1 = 0; /* RMSNorm: no mean subtraction */
        for (int c = 0; c < d; c++) {
            R xh = (xr[c] - m) * rs, dxh = dyr[c] * w[c];
            R g = rs * (dxh - (R)s1 - xh * (R)s2);
            dxr[c] = rr ? rr[c] + g : g;
        }
    }
}

static void norm_bwd(int n, int d, const R *x, const R *w, int has_b, const R *st,
                     const R *dy, R *dx, R *dw, R *db, int accumulate_dx)
{
    norm_bwd_rows(n, 0, n, d, x, w, has_b, st, dy, accumulate_dx ? dx : NULL, dx, dw, db);
}

/* Row-parallel norms and activations of a layer, on the attention threads
 * (bsipipe_kernels_set_threads): with n > 1 the matrix products run on
 * the BLAS's threads and these passes were the single-threaded remainder.
 * Work is cut into fixed blocks of rows, never by thread count, and the
 * norm's weight gradients are summed per block then over blocks in order,
 * so results do not depend on the thread count. */
#define PAR_ROWS 64

struct par_ctx {
    int n, d, has_b;
    const R *x, *w, *b, *st, *dy, *res;
    R *y, *yst, *dx, *pw, *pb;
};

static int norm_fwd_blk(void *v, int blk)
{
    struct par_ctx *c = v;
    int r0 = blk * PAR_ROWS, r1 = r0 + PAR_ROWS < c->n ? r0 + PAR_ROWS : c->n;
    norm_fwd_rows(c->n, r0, r1, c->d, c->x, c->w, c->b, c->y, c->yst);
    return 0;
}

static void norm_fwd_par(int n, int d, const R *x, const R *w, const R *b, R *y, R *st)
{
    struct par_ctx c = {n, d, 0, x, w, b, NULL, NULL, NULL, y, st, NULL, NULL, NULL};
    if (kern_threads <= 1)
        norm_fwd(n, d, x, w, b, y, st); /* the same rows in the same order */
    else
        kern_parallel_for((n + PAR_ROWS - 1) / PAR_ROWS, norm_fwd_blk, &c);
}

static int norm_bwd_blk(void *v, int blk)
{
    struct par_ctx *c = v;
    int r0 = blk * PAR_ROWS, r1 = r0 + PAR_ROWS < c->n ? r0 + PAR_ROWS : c->n;
    norm_bwd_rows(c->n, r0, r1, c->d, c->x, c->w, c->has_b, c->st, c->dy, c->res, c->dx,
                  c->pw + (size_t)blk * c->d, c->pb ? c->pb + (size_t)blk * c->d : NULL);
    return 0;
}

/* norm_bwd with dx = res + (the layers' residual form), weight gradients
 * through per-block partial sums (see above). -ENOMEM if the partials do
 * not fit. */
static int norm_bwd_par(int n, int d, const R *x, const R *w, int has_b, const R *st,
                        const R *dy, const R *res, R *dx, R *dw, R *db)
{
    int nb = (n + PAR_ROWS - 1) / PAR_ROWS;
    R *pw = calloc((size_t)nb * d * (has_b ? 2 : 1), sizeof(R));
    struct par_ctx c = {n, d, has_b, x, w, NULL, st, dy, res, NULL, NULL, dx, pw, NULL};
    if (!pw)
        return -ENOMEM;
    c.pb = has_b ? pw + (size_t)nb * d : NULL;
    kern_parallel_for(nb, norm_bwd_blk, &c);
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < d; k++) {
            dw[k] += pw[(size_t)b * d + k];
            if (has_b)
                db[k] += c.pb[(size_t)b * d + k];
        }
    free(pw);
    return 0;
}

/* Elementwise loops of the fp32 instance are vectorised: GCC per-function
 * vectoriser flags, and clones for AVX-512 / AVX2 / baseline picked at load
 * time (the build uses no -march). As scalar code, attention's row loops were
 * ~40% of its time and libm's tanhf 10% of a block. Reductions use 8 fixed
 * partial sums/maxima, so results do not depend on the vector width. */
#if defined(__GNUC__) && !defined(__clang__)
#define VEC_OPT __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
/* max is exact in any order; these flags only let GCC use maxps */
#define VEC_OPT_MAX                                                                         \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic", "finite-math-only", \
                            "no-signed-zeros")))
#if BSIPIPE_REAL_IS_FLOAT && defined(__x86_64__) && defined(__linux__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif
#else
#define VEC_OPT
#define VEC_OPT_MAX
#define VEC_CLONES
#endif


/* exp(v) for v <= 0, vectorisable (Cephes expf polynomial, <= 2 ulp). Below
 * -87 it returns ~1e-38 instead of 0 (the exponent is clamped, on the integer
 * so that loops if-convert: a float compare may trap, which blocks GCC's
 * vectoriser at -O2); callers add it to terms of size ~1, so it is harmless. */
static inline __attribute__((always_inline)) float fexpn(float v)
{
    float fn, p, z, sc;
    int e;
    fn = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* rint(v/ln2) */
    v = v - fn * 0.693359375f + fn * 2.12194440e-4f;                  /* v - fn ln2 */
    z = v * v;
    p = ((((1.9875691500E-4f * v + 1.3981999507E-3f) * v + 8.3334519073E-3f) * v +
          4.1665795894E-2f) * v + 1.6666665459E-1f) * v + 5.0000001201E-1f;
    p = p * z + v + 1.0f;
    e = (int)fn;
    e = e < -126 ? -126 : e;
    e = (e + 127) << 23; /* bits of 2^e */
    memcpy(&sc, &e, sizeof sc);
    return p * sc;
}

#if BSIPIPE_REAL_IS_FLOAT
/* tanh(u) = sign(u) (1 - t) / (1 + t), t = exp(-2|u|) in (0, 1]: absolute
 * error ~1e-7, which is what GeLU's 0.5 x (1 + tanh) sees. */
static inline float tanh_fast(float u)
{
    float t = fexpn(-2.0f * fabsf(u));
    return copysignf((1.0f - t) / (1.0f + t), u);
}
#define TANH tanh_fast
#else
#define TANH tanh
#endif
/* sigmoid(g) = (1 + tanh(g/2)) / 2, which keeps the fp32 form vectorisable */
#define SIGMOID(g) ((R)0.5 + (R)0.5 * TANH((R)0.5 * (g)))

#define GELU_K ((R)0.7978845608028654) /* sqrt(2/pi) */
#define GELU_C ((R)0.044715)

VEC_CLONES VEC_OPT static void gelu_fwd(size_t n, const R *h, R *g)
{
    for (size_t i = 0; i < n; i++) {
        R x = h[i];
        g[i] = (R)0.5 * x * ((R)1 + TANH(GELU_K * (x + GELU_C * x * x * x)));
    }
}

/* dh = dg * gelu'(h) (tanh approximation, as torch gelu(approximate='tanh')) */
VEC_CLONES VEC_OPT static void gelu_bwd(size_t n, const R *h, const R *dg, R *dh)
{
    for (size_t i = 0; i < n; i++) {
        R x = h[i], t = TANH(GELU_K * (x + GELU_C * x * x * x));
        R dt = GELU_K * ((R)1 + (R)3 * GELU_C * x * x);
        dh[i] = dg[i] * ((R)0.5 * ((R)1 + t) + (R)0.5 * x * ((R)1 - t * t) * dt);
    }
}

/* GeLU forward / backward over n rows of f on the attention threads, in
 * fixed blocks of PAR_ROWS rows whatever the thread count */
struct gelu_ctx {
    int n, f;
    const R *h, *dg;
    R *out;
};

static int gelu_blk(void *v, int blk)
{
    struct gelu_ctx *c = v;
    size_t r0 = (size_t)blk * PAR_ROWS, r1 = r0 + PAR_ROWS < (size_t)c->n ? r0 + PAR_ROWS : (size_t)c->n;
    size_t o = r0 * c->f, m = (r1 - r0) * c->f;
    if (c->dg)
        gelu_bwd(m, c->h + o, c->dg + o, c->out + o);
    else
        gelu_fwd(m, c->h + o, c->out + o);
    return 0;
}

static void gelu_par(int n, int f, const R *h, const R *dg, R *out)
{
    struct gelu_ctx c = {n, f, h, dg, out};
    kern_parallel_for((n + PAR_ROWS - 1) / PAR_ROWS, gelu_blk, &c);
}

/* dst rows = src rows (w columns, own leading dimensions) on the kernel
 * threads: the block's residual and K/V copies, in blocks of PAR_ROWS rows */
struct copy_ctx {
    int n, w, lds, ldd;
    const R *src;
    R *dst;
};

static int copy_blk(void *v, int blk)
{
    const struct copy_ctx *c = v;
    int r0 = blk * PAR_ROWS, r1 = r0 + PAR_ROWS < c->n ? r0 + PAR_ROWS : c->n;
    for (int i = r0; i < r1; i++)
        memcpy(c->dst + IX(i, 0, c->ldd), c->src + IX(i, 0, c->lds), sizeof(R) * (size_t)c->w);
    return 0;
}

static void copy_rows_par(int n, int w, const R *src, int lds, R *dst, int ldd)
{
    struct copy_ctx c = {n, w, lds, ldd, src, dst};
    kern_parallel_for((n + PAR_ROWS - 1) / PAR_ROWS, copy_blk, &c);
}

/* h[n, F] = silu(gate) * up, gu[n, 2F] = [gate | up] */
VEC_CLONES VEC_OPT static void swiglu_fwd(int n, int f, const R *gu, R *h)
{
    for (int i = 0; i < n; i++)
        for (int c = 0; c < f; c++) {
            R g = gu[IX(i, c, 2 * f)], u = gu[IX(i, f + c, 2 * f)];
            h[IX(i, c, f)] = g * SIGMOID(g) * u;
        }
}

VEC_CLONES VEC_OPT static void swiglu_bwd(int n, int f, const R *gu, const R *dh, R *dgu)
{
    for (int i = 0; i < n; i++)
        for (int c = 0; c < f; c++) {
            R g = gu[IX(i, c, 2 * f)], u = gu[IX(i, f + c, 2 * f)];
            R sg = SIGMOID(g), dhv = dh[IX(i, c, f)];
            dgu[IX(i, c, 2 * f)] = dhv * u * sg * ((R)1 + g * ((R)1 - sg));
            dgu[IX(i, f + c, 2 * f)] = dhv * g * sg;
        }
}

/* swiglu forward / backward over n rows on the kernel threads, in fixed
 * blocks of PAR_ROWS rows (as gelu_par) */
static int swiglu_blk(void *v, int blk)
{
    struct gelu_ctx *c = v;
    size_t r0 = (size_t)blk * PAR_ROWS;
    int m = c->n - (int)r0 < PAR_ROWS ? c->n - (int)r0 : PAR_ROWS;
    if (c->dg)
        swiglu_bwd(m, c->f, c->h + r0 * 2 * c->f, c->dg + r0 * c->f, c->out + r0 * 2 * c->f);
    else
        swiglu_fwd(m, c->f, c->h + r0 * 2 * c->f, c->out + r0 * c->f);
    return 0;
}

static void swiglu_par(int n, int f, const R *gu, const R *dh, R *out)
{
    struct gelu_ctx c = {n, f, gu, dh, out};
    kern_parallel_for((n + PAR_ROWS - 1) / PAR_ROWS, swiglu_blk, &c);
}

/* RoPE on rows of x[n, ld] (heads of hd columns, pairs (2i, 2i+1)), row r at
 * position pos0 + r. dir = +1 rotates (forward), -1 applies the transpose
 * (backward). Angles in double, cos/sin rounded to R (the PyTorch script does
 * the same). */
static void rope(int n, int n_heads, int hd, int pos0, R *x, int ld, int dir)
{
    for (int r = 0; r < n; r++) {
        double pos = pos0 + r;
        for (int i = 0; i < hd / 2; i++) {
            double ang = pos * pow(BSIPIPE_ROPE_BASE, -2.0 * i / hd);
            R c = (R)cos(ang), s = (R)sin(ang) * (R)dir;
            for (int h = 0; h < n_heads; h++) {
                R *p = x + IX(r, h * hd + 2 * i, ld);
                R a = p[0], b = p[1];
                p[0] = a * c - b * s;
                p[1] = a * s + b * c;
            }
        }
    }
}

/* -------------------------------------------------------------- attention */

/* Attention: our own tile kernels, no BLAS. The score tiles are stored
 * transposed, S^T[key c][query r], so that every vector runs over the
 * queries of a tile: the softmax's per-query max, sum and rescale become
 * plain vector operations over rows, and the five small products per tile
 * (K = head_dim or the tile sizes) go through one register-blocked kernel
 * whose right operand always has contiguous, padded rows. Each head is one
 * sequential computation, so results do not depend on the thread count (nor
 * on the BLAS's threads, which attention no longer uses). */

#if defined(__GNUC__)
#define AT_VBYTES 64
typedef R at_vec __attribute__((vector_size(AT_VBYTES)));
#define AT_VL ((int)(AT_VBYTES / sizeof(R)))
#define AT_ALWAYS_INLINE __attribute__((always_inline))
#else
#error "the attention kernels need GCC-style vector types (gcc or clang)"
#endif

/* n rounded up to whole vectors */
static int at_pad(int n) { return (n + AT_VL - 1) / AT_VL * AT_VL; }

/* v = p[0..n), n <= AT_VL, the rest 0; p[0..n) = v */
#define AT_LOAD(v, p, n)                                                             \
    do {                                                                             \
        if ((n) >= AT_VL) {                                                          \
            memcpy(&(v), (p), sizeof(at_vec));                                       \
        } else {                                                                     \
            memset(&(v), 0, sizeof(at_vec));                                         \
            memcpy(&(v), (p), sizeof(R) * (size_t)(n));                              \
        }                                                                            \
    } while (0)
#define AT_STORE(p, v, n) memcpy((p), &(v), sizeof(R) * (size_t)((n) < AT_VL ? (n) : AT_VL))

/* One register tile: C[MR rows][NV vectors] (+)= sum_k A(i, k) B[k][.].
 * A(i, k) = a[i * ais + k * aks] (broadcast), B rows contiguous and readable
 * to NV whole vectors, nc valid columns of C (<= NV * AT_VL). The sum runs
 * over k in order for every element, whatever the vector width. Up to
 * 6 x 4 vectors: 24 accumulators, 4 B vectors and a broadcast fit AVX-512's
 * 32 registers, and each broadcast A element then feeds 4 FMAs (the tiles'
 * right operands are 3 or 4 vectors wide: 48 padded head columns, 64
 * queries). */
static inline AT_ALWAYS_INLINE void at_tile(const int MR, const int NV, int K, const R *a,
                                            long ais, long aks, const R *b, long ldb, R *c,
                                            long ldc, int nc, int acc)
{
    at_vec c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
    at_vec c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;
    int n0 = nc < AT_VL ? nc : AT_VL, n1 = nc - AT_VL, n2 = nc - 2 * AT_VL, n3 = nc - 3 * AT_VL;
    memset(&c00, 0, sizeof c00);
    c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = c00;
    c30 = c31 = c32 = c33 = c40 = c41 = c42 = c43 = c50 = c51 = c52 = c53 = c00;
#define AT_ROW_LD(i)                                                                 \
    if (MR > i && acc) {                                                             \
        AT_LOAD(c##i##0, c + i * ldc, n0);                                           \
        if (NV > 1)                                                                  \
            AT_LOAD(c##i##1, c + i * ldc + AT_VL, n1);                               \
        if (NV > 2)                                                                  \
            AT_LOAD(c##i##2, c + i * ldc + 2 * AT_VL, n2);                           \
        if (NV > 3)                                                                  \
            AT_LOAD(c##i##3, c + i * ldc + 3 * AT_VL, n3);                           \
    }
    AT_ROW_LD(0) AT_ROW_LD(1) AT_ROW_LD(2) AT_ROW_LD(3) AT_ROW_LD(4) AT_ROW_LD(5)
    for (int k = 0; k < K; k++) {
        const R *bk = b + k * ldb, *ak = a + k * aks;
        at_vec b0, b1, b2, b3;
        memcpy(&b0, bk, sizeof b0);
        b1 = b2 = b3 = b0;
        if (NV > 1)
            memcpy(&b1, bk + AT_VL, sizeof b1);
        if (NV > 2)
            memcpy(&b2, bk + 2 * AT_VL, sizeof b2);
        if (NV > 3)
            memcpy(&b3, bk + 3 * AT_VL, sizeof b3);
#define AT_ROW_FMA(i)                                                                \
    if (MR > i) {                                                                    \
        R s = ak[i * ais];                                                           \
        c##i##0 += s * b0;                                                           \
        if (NV > 1)                                                                  \
            c##i##1 += s * b1;                                                       \
        if (NV > 2)                                                                  \
            c##i##2 += s * b2;                                                       \
        if (NV > 3)                                                                  \
            c##i##3 += s * b3;                                                       \
    }
        AT_ROW_FMA(0) AT_ROW_FMA(1) AT_ROW_FMA(2) AT_ROW_FMA(3) AT_ROW_FMA(4) AT_ROW_FMA(5)
    }
#define AT_ROW_ST(i)                                                                 \
    if (MR > i) {                                                                    \
        AT_STORE(c + i * ldc, c##i##0, n0);                                          \
        if (NV > 1)                                                                  \
            AT_STORE(c + i * ldc + AT_VL, c##i##1, n1);                              \
        if (NV > 2)                                                                  \
            AT_STORE(c + i * ldc + 2 * AT_VL, c##i##2, n2);                          \
        if (NV > 3)                                                                  \
            AT_STORE(c + i * ldc + 3 * AT_VL, c##i##3, n3);                          \
    }
    AT_ROW_ST(0) AT_ROW_ST(1) AT_ROW_ST(2) AT_ROW_ST(3) AT_ROW_ST(4) AT_ROW_ST(5)
#undef AT_ROW_LD
#undef AT_ROW_FMA
#undef AT_ROW_ST
}

static inline AT_ALWAYS_INLINE void at_rows(const int NV, int M, int K, const R *a, long ais,
                                            long aks, const R *b, long ldb, R *c, long ldc,
                                            int nc, int acc)
{
    int i = 0;
    for (; i + 6 <= M; i += 6)
        at_tile(6, NV, K, a + i * ais, ais, aks, b, ldb, c + i * ldc, ldc, nc, acc);
    if (M - i >= 4) {
        at_tile(4, NV, K, a + i * ais, ais, aks, b, ldb, c + i * ldc, ldc, nc, acc);
        i += 4;
    }
    if (M - i >= 2) {
        at_tile(2, NV, K, a + i * ais, ais, aks, b, ldb, c + i * ldc, ldc, nc, acc);
        i += 2;
    }
    if (M - i >= 1)
        at_tile(1, NV, K, a + i * ais, ais, aks, b, ldb, c + i * ldc, ldc, nc, acc);
}

/* C[M][N] (ld ldc) = or += A B, A(i, k) = a[i*ais + k*aks], B[K][N] with rows
 * of ld ldb readable to at_pad(N) columns. Only N columns of C are touched.
 * Strips of up to 4 vectors of columns. */
VEC_CLONES static void at_gemm(int M, int N, int K, const R *a, long ais, long aks,
                               const R *b, long ldb, R *c, long ldc, int acc)
{
    for (int j = 0; j < N; j += 4 * AT_VL) {
        int nc = N - j < 4 * AT_VL ? N - j : 4 * AT_VL;
        if (nc > 3 * AT_VL)
            at_rows(4, M, K, a, ais, aks, b + j, ldb, c + j, ldc, nc, acc);
        else if (nc > 2 * AT_VL)
            at_rows(3, M, K, a, ais, aks, b + j, ldb, c + j, ldc, nc, acc);
        else if (nc > AT_VL)
            at_rows(2, M, K, a, ais, aks, b + j, ldb, c + j, ldc, nc, acc);
        else
            at_rows(1, M, K, a, ais, aks, b + j, ldb, c + j, ldc, nc, acc);
    }
}

/* exp over a row of n, minus a per-column shift: x[r] = exp(x[r] - sh[r]).
 * fp32: fexpn, the argument clamped at -104 (masked entries are -1e30 and
 * are zeroed afterwards; the clamp keeps fexpn's integer conversion
 * defined). The flags let GCC use maxps for the clamp (inputs are finite). */
VEC_CLONES VEC_OPT_MAX static void at_exp_row(int n, R *x, const R *sh)
{
#if BSIPIPE_REAL_IS_FLOAT
    for (int r = 0; r < n; r++) {
        R v = x[r] - sh[r];
        v = v < (R)-104 ? (R)-104 : v;
        x[r] = fexpn(v);
    }
#else
    for (int r = 0; r < n; r++)
        x[r] = exp(x[r] - sh[r]);
#endif
}

/* m[r] = max(m[r], x[r]) (exact in any order) */
VEC_CLONES VEC_OPT_MAX static void at_max_row(int n, R *m, const R *x)
{
    for (int r = 0; r < n; r++)
        m[r] = x[r] > m[r] ? x[r] : m[r];
}

/* s[r] += x[r] */
VEC_CLONES VEC_OPT static void at_add_row(int n, R *s, const R *x)
{
    for (int r = 0; r < n; r++)
        s[r] += x[r];
}

/* x[r] *= f[r] */
VEC_CLONES VEC_OPT static void at_mul_row(int n, R *x, const R *f)
{
    for (int r = 0; r < n; r++)
        x[r] *= f[r];
}

/* dS = P * (dP - D) * scale, in place over p */
VEC_CLONES VEC_OPT static void at_ds_row(int n, R *p, const R *dp, const R *dd, R scale)
{
    for (int r = 0; r < n; r++)
        p[r] = p[r] * (dp[r] - dd[r]) * scale;
}

struct att_ctx {
    int hd, start, len, ldq, ldk, ldo, lddq, bq, bk;
    const R *q, *k, *v, *o, *do_, *lse_in;
    R *out, *lse, *dq, *dk, *dv;
    R scale;
};

/* Query r of the tile at i0 sees key j iff j <= start + i0 + r. For the key
 * tile row c (key j0 + c) the first visible query is r = j0 + c - start - i0.
 * Masked scores become -1e30 (before the max) ... */
static void at_mask_scores(const struct att_ctx *a, int i0, int j0, int nk, int nqp, R *st)
{
    for (int c = 0; c < nk; c++) {
        int rmin = j0 + c - a->start - i0;
        R *row = st + (size_t)c * nqp;
        for (int r = 0; r < rmin && r < nqp; r++)
            row[r] = (R)-1e30;
    }
}

/* ... and exactly 0 after the exp */
static void at_mask_probs(const struct att_ctx *a, int i0, int j0, int nk, int nqp, R *pt)
{
    for (int c = 0; c < nk; c++) {
        int rmin = j0 + c - a->start - i0;
        if (rmin > 0)
            memset(pt + (size_t)c * nqp, 0, sizeof(R) * (size_t)(rmin < nqp ? rmin : nqp));
    }
}

/* Q (or dO) rows [i0, i0+nq) of head h, times f, as a transposed, padded
 * tile t[hd][nqp] (columns past nq are 0) */
static void at_pack_t(int hd, int nq, int nqp, const R *src, int ld, R f, R *t)
{
    for (int x = 0; x < hd; x++)
        for (int r = 0; r < nqp; r++)
            t[(size_t)x * nqp + r] = r < nq ? src[(size_t)r * ld + x] * f : (R)0;
}

/* the same rows as padded rows p[nqp][hdp] */
static void at_pack_rows(int hd, int hdp, int nq, int nqp, const R *src, int ld, R *p)
{
    for (int r = 0; r < nqp; r++)
        for (int x = 0; x < hdp; x++)
            p[(size_t)r * hdp + x] = r < nq && x < hd ? src[(size_t)r * ld + x] : (R)0;
}

/* keys [0, n) of head h of k (ld ld) as contiguous rows p[n][hd]: the
 * kernels broadcast down columns of K and V, and rows 5 KiB apart map to
 * few L1 sets (measured: the unpacked kernels ran at half speed) */
static void at_pack_keys(int hd, int n, const R *k, int ld, R *p)
{
    for (int j = 0; j < n; j++)
        memcpy(p + (size_t)j * hd, k + (size_t)j * ld, sizeof(R) * (size_t)hd);
}

/* One head of the forward. Per query tile (nq <= bq queries, padded to nqp
 * columns): Q^T packed; per key tile up to the causal limit, S^T = K Q^T,
 * the running max m and sum l per query, O^T = alpha O^T + V^T P^T. */
static int att_fwd_head(void *vctx, int h)
{
    struct att_ctx *a = vctx;
    int bqp = at_pad(a->bq), bk = a->bk, hd = a->hd;
    int nkeys = a->start + a->len;
    size_t n = (size_t)hd * bqp * 2 + (size_t)bk * bqp + 5 * (size_t)bqp +
               2 * (size_t)nkeys * hd;
    R *qt = malloc(sizeof(R) * n);
    if (!qt)
        return -ENOMEM;
    R *ot = qt + (size_t)hd * bqp, *st = ot + (size_t)hd * bqp, *m = st + (size_t)bk * bqp;
    R *l = m + bqp, *mn = l + bqp, *al = mn + bqp, *sum = al + bqp;
    R *K = sum + bqp, *V = K + (size_t)nkeys * hd;
    at_pack_keys(hd, nkeys, a->k + (size_t)h * hd, a->ldk, K);
    at_pack_keys(hd, nkeys, a->v + (size_t)h * hd, a->ldk, V);
    for (int i0 = 0; i0 < a->len; i0 += a->bq) {
        int nq = a->len - i0 < a->bq ? a->len - i0 : a->bq, nqp = at_pad(nq);
        int kend = a->start + i0 + nq; /* keys [0, kend) visible to this tile */
        at_pack_t(hd, nq, nqp, a->q + IX(i0, h * hd, a->ldq), a->ldq, a->scale, qt);
        memset(ot, 0, sizeof(R) * (size_t)hd * nqp);
        for (int r = 0; r < nqp; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
        }
        for (int j0 = 0; j0 < kend; j0 += bk) {
            int nk = kend - j0 < bk ? kend - j0 : bk;
            int diag = j0 + nk - 1 > a->start + i0;
            at_gemm(nk, nqp, hd, K + (size_t)j0 * hd, hd, 1, qt, nqp, st, nqp, 0);
            if (diag)
                at_mask_scores(a, i0, j0, nk, nqp, st);
            memcpy(mn, m, sizeof(R) * (size_t)nqp);
            for (int c = 0; c < nk; c++)
                at_max_row(nqp, mn, st + (size_t)c * nqp);
            for (int r = 0; r < nqp; r++) {
                /* mn[r] is finite: key 0 is visible to every query, and the
                 * first tile starts at key 0; exp(-inf) = 0 on that tile */
                al[r] = exp(m[r] - mn[r]);
                m[r] = mn[r];
                sum[r] = 0;
            }
            for (int c = 0; c < nk; c++) {
                R *row = st + (size_t)c * nqp;
                at_exp_row(nqp, row, mn);
            }
            if (diag)
                at_mask_probs(a, i0, j0, nk, nqp, st);
            for (int c = 0; c < nk; c++)
                at_add_row(nqp, sum, st + (size_t)c * nqp);
            for (int r = 0; r < nqp; r++)
                l[r] = l[r] * al[r] + sum[r];
            for (int x = 0; x < hd; x++)
                at_mul_row(nqp, ot + (size_t)x * nqp, al);
            /* O^T[x][r] += sum_c V[j0 + c][x] P^T[c][r] */
            at_gemm(hd, nqp, nk, V + (size_t)j0 * hd, 1, hd, st, nqp, ot, nqp, 1);
        }
        for (int r = 0; r < nq; r++) {
            R *orow = a->out + IX(i0 + r, h * hd, a->ldo), inv = (R)1 / l[r];
            for (int x = 0; x < hd; x++)
                orow[x] = ot[(size_t)x * nqp + r] * inv;
            a->lse[IX(h, i0 + r, a->len)] = m[r] + log(l[r]);
        }
    }
    free(qt);
    return 0;
}

/* One head of the backward (FlashAttention-2 order, query tiles outer). Per
 * query tile: Q^T, dO^T, padded Q and dO rows, lse and D = rowsum(dO * O)
 * packed once; per key tile: S^T = K Q^T, P^T = exp(S^T - lse),
 * dV += P dO, dP^T = V dO^T, dS^T = P^T (dP^T - D) scale (over P^T),
 * dQ^T += K^T dS^T, dK += dS Q. dQ is written once per query tile. */
static int att_bwd_head(void *vctx, int h)
{
    struct att_ctx *a = vctx;
    int bqp = at_pad(a->bq), bk = a->bk, hd = a->hd, hdp = at_pad(a->hd);
    int nkeys = a->start + a->len;
    size_t n = (size_t)hd * bqp * 3 + (size_t)bqp * hdp * 2 + (size_t)bk * bqp * 2 +
               2 * (size_t)bqp + 2 * (size_t)nkeys * (hd + hdp);
    R *qt = malloc(sizeof(R) * n);
    if (!qt)
        return -ENOMEM;
    R *dot = qt + (size_t)hd * bqp, *dqt = dot + (size_t)hd * bqp;
    R *qp = dqt + (size_t)hd * bqp, *dop = qp + (size_t)bqp * hdp;
    R *pt = dop + (size_t)bqp * hdp, *dpt = pt + (size_t)bk * bqp;
    R *lse = dpt + (size_t)bk * bqp, *dd = lse + bqp;
    R *K = dd + bqp, *V = K + (size_t)nkeys * hd;
    /* dK, dV of this head accumulate in padded rows, added to the caller's
     * (+=) once at the end */
    R *dK = V + (size_t)nkeys * hd, *dV = dK + (size_t)nkeys * hdp;
    at_pack_keys(hd, nkeys, a->k + (size_t)h * hd, a->ldk, K);
    at_pack_keys(hd, nkeys, a->v + (size_t)h * hd, a->ldk, V);
    memset(dK, 0, sizeof(R) * 2 * (size_t)nkeys * hdp);
    for (int i0 = 0; i0 < a->len; i0 += a->bq) {
        int nq = a->len - i0 < a->bq ? a->len - i0 : a->bq, nqp = at_pad(nq);
        int kend = a->start + i0 + nq;
        const R *q = a->q + IX(i0, h * hd, a->ldq), *o = a->o + IX(i0, h * hd, a->ldo);
        const R *dO = a->do_ + IX(i0, h * hd, a->ldo);
        at_pack_t(hd, nq, nqp, q, a->ldq, a->scale, qt); /* scores' scale folded in */
        at_pack_t(hd, nq, nqp, dO, a->ldo, (R)1, dot);
        at_pack_rows(hd, hdp, nq, nqp, q, a->ldq, qp);
        at_pack_rows(hd, hdp, nq, nqp, dO, a->ldo, dop);
        memset(dqt, 0, sizeof(R) * (size_t)hd * nqp);
        for (int r = 0; r < nqp; r++) {
            R acc = 0;
            for (int x = 0; r < nq && x < hd; x++)
                acc += o[(size_t)r * a->ldo + x] * dO[(size_t)r * a->ldo + x];
            dd[r] = acc;
            lse[r] = r < nq ? a->lse_in[IX(h, i0 + r, a->len)] : (R)0;
        }
        for (int j0 = 0; j0 < kend; j0 += bk) {
            int nk = kend - j0 < bk ? kend - j0 : bk;
            int diag = j0 + nk - 1 > a->start + i0;
            const R *kt = K + (size_t)j0 * hd, *vt = V + (size_t)j0 * hd;
            at_gemm(nk, nqp, hd, kt, hd, 1, qt, nqp, pt, nqp, 0);
            if (diag)
                at_mask_scores(a, i0, j0, nk, nqp, pt);
            for (int c = 0; c < nk; c++)
                at_exp_row(nqp, pt + (size_t)c * nqp, lse);
            if (diag)
                at_mask_probs(a, i0, j0, nk, nqp, pt);
            /* dV[j0 + c][x] += sum_r P^T[c][r] dO[r][x] */
            at_gemm(nk, hdp, nq, pt, nqp, 1, dop, hdp, dV + (size_t)j0 * hdp, hdp, 1);
            /* dP^T[c][r] = sum_x V[j0 + c][x] dO^T[x][r] */
            at_gemm(nk, nqp, hd, vt, hd, 1, dot, nqp, dpt, nqp, 0);
            for (int c = 0; c < nk; c++)
                at_ds_row(nqp, pt + (size_t)c * nqp, dpt + (size_t)c * nqp, dd, a->scale);
            /* dQ^T[x][r] += sum_c K[j0 + c][x] dS^T[c][r] */
            at_gemm(hd, nqp, nk, kt, 1, hd, pt, nqp, dqt, nqp, 1);
            /* dK[j0 + c][x] += sum_r dS^T[c][r] Q[r][x] */
            at_gemm(nk, hdp, nq, pt, nqp, 1, qp, hdp, dK + (size_t)j0 * hdp, hdp, 1);
        }
        for (int r = 0; r < nq; r++) {
            R *dqrow = a->dq + IX(i0 + r, h * hd, a->lddq);
            for (int x = 0; x < hd; x++)
                dqrow[x] = dqt[(size_t)x * nqp + r];
        }
    }
    for (int j = 0; j < nkeys; j++) {
        R *dkr = a->dk + IX(j, h * hd, a->ldk), *dvr = a->dv + IX(j, h * hd, a->ldk);
        for (int x = 0; x < hd; x++) {
            dkr[x] += dK[(size_t)j * hdp + x];
            dvr[x] += dV[(size_t)j * hdp + x];
        }
    }
    free(qt);
    return 0;
}

static int att_check(int n_heads, int head_dim, int start, int len, const void *q, int ldq,
                     const void *k, const void *v, int ldk, const void *o, int ldo)
{
    int w = n_heads * head_dim;
    if (n_heads < 1 || head_dim < 1 || start < 0 || len < 1 || !q || !k || !v || !o)
        return -EINVAL;
    if (ldq < w || ldk < w || ldo < w)
        return -EINVAL;
    return 0;
}

int FN(bsipipe_attention_forward)(int n_heads, int head_dim, int start, int len,
                                  const R *q, int ldq, const R *k, const R *v, int ldk,
                                  R *o, int ldo, R *lse)
{
    struct att_ctx a;
    int rc = att_check(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo);
    if (rc || !lse)
        return rc ? rc : -EINVAL;
    memset(&a, 0, sizeof a);
    a.hd = head_dim; a.start = start; a.len = len;
    a.ldq = ldq; a.ldk = ldk; a.ldo = ldo;
    kern_attention_tiles(head_dim, &a.bq, &a.bk);
    a.q = q; a.k = k; a.v = v; a.out = o; a.lse = lse;
    a.scale = (R)(1.0 / sqrt((double)head_dim));
    return kern_parallel_for(n_heads, att_fwd_head, &a);
}

int FN(bsipipe_attention_backward)(int n_heads, int head_dim, int start, int len,
                                   const R *q, int ldq, const R *k, const R *v, int ldk,
                                   const R *o, const R *do_, int ldo, const R *lse, R *dq,
                                   int lddq, R *dk, R *dv)
{
    struct att_ctx a;
    int rc = att_check(n_heads, head_dim, start, len, q, ldq, k, v, ldk, o, ldo);
    if (rc || !do_ || !lse || !dq || !dk || !dv || lddq < n_heads * head_dim)
        return rc ? rc : -EINVAL;
    memset(&a, 0, sizeof a);
    a.hd = head_dim; a.start = start; a.len = len;
    a.ldq = ldq; a.ldk = ldk; a.ldo = ldo; a.lddq = lddq;
    kern_attention_tiles(head_dim, &a.bq, &a.bk);
    a.q = q; a.k = k; a.v = v; a.o = o; a.do_ = do_; a.lse_in = lse;
    a.dq = dq; a.dk = dk; a.dv = dv;
    a.scale = (R)(1.0 / sqrt((double)head_dim));
    return kern_parallel_for(n_heads, att_bwd_head, &a);
}

/* ----------------------------------------------------------------- layers */

struct lp { const R *n1w, *n1b, *wqkv, *wo, *n2w, *n2b, *w1, *w2; };
struct lg { R *n1w, *n1b, *wqkv, *wo, *n2w, *n2b, *w1, *w2; };

static void layer_ptrs(const struct bsipipe_layer_off *o, const R *base, struct lp *p)
{
    p->n1w = base + o->n1w;
    p->n1b = o->n1b >= 0 ? base + o->n1b : NULL;
    p->wqkv = base + o->wqkv;
    p->wo = base + o->wo;
    p->n2w = base + o->n2w;
    p->n2b = o->n2b >= 0 ? base + o->n2b : NULL;
    p->w1 = base + o->w1;
    p->w2 = base + o->w2;
}

static void layer_gptrs(const struct bsipipe_layer_off *o, R *base, struct lg *g)
{
    g->n1w = base + o->n1w;
    g->n1b = o->n1b >= 0 ? base + o->n1b : NULL;
    g->wqkv = base + o->wqkv;
    g->wo = base + o->wo;
    g->n2w = base + o->n2w;
    g->n2b = o->n2b >= 0 ? base + o->n2b : NULL;
    g->w1 = base + o->w1;
    g->w2 = base + o->w2;
}

/* Forward of one layer for the piece [start, start+len).
 * In : st->x [len, d]; kv rows [0, start) (earlier pieces).
 * Out: y [len, d]; kv rows [start, start+len); the rest of the stash.
 *   n1 = norm1(x); q|k|v = n1 Wqkv^T (k, v straight into the cache rows);
 *   LLaMA: RoPE(q, k) at positions start+i; att = MHA(q, K[0..], V[0..]);
 *   x2 = x + att Wo^T; n2 = norm2(x2);
 *   GPT:   a1 = n2 Wfc^T [len,F], a2 = gelu(a1), y = x2 + a2 Wproj^T
 *   LLaMA: a1 = n2 Wgu^T [len,2F], a2 = silu(gate)*up, y = x2 + a2 Wdown^T */
static int layer_fwd(const bsipipe_model_dims_t *dm, int start, int len, const struct lp *p,
                     R *stash, R *kv, R *y)
{
    struct bsipipe_stash_off so;
    int d = dm->hidden, H = dm->n_heads, hd = d / H, f = dm->ffn_hidden;
    int a1w = kern_a1_width(dm), llama = dm->family == BSIPIPE_MODEL_LLAMA, rc;
    size_t kvrows = (size_t)dm->seq_len * d;
    R *K = kv, *Vc = kv + kvrows;
    kern_stash_off(dm, len, &so);
    R *x = stash + so.x, *n1 = stash + so.n1, *q = stash + so.q, *att = stash + so.att;
    R *x2 = stash + so.x2, *n2 = stash + so.n2, *a1 = stash + so.a1, *a2 = stash + so.a2;

    norm_fwd_par(len, d, x, p->n1w, p->n1b, n1, stash + so.s1);
    lin_fwd(len, d, d, n1, d, p->wqkv, d, (R)0, q, d);
    lin_fwd(len, d, d, n1, d, p->wqkv + IX(d, 0, d), d, (R)0, K + IX(start, 0, d), d);
    lin_fwd(len, d, d, n1, d, p->wqkv + IX(2 * d, 0, d), d, (R)0, Vc + IX(start, 0, d), d);
    if (llama) {
        rope(len, H, hd, start, q, d, 1);
        rope(len, H, hd, start, K + IX(start, 0, d), d, 1);
    }
    rc = FN(bsipipe_attention_forward)(H, hd, start, len, q, d, K, Vc, d, att, d,
                                       stash + so.lse);
    if (rc)
        return rc;
    copy_rows_par(len, d, x, d, x2, d);
    lin_fwd(len, d, d, att, d, p->wo, d, (R)1, x2, d);
    norm_fwd_par(len, d, x2, p->n2w, p->n2b, n2, stash + so.s2);
    lin_fwd(len, a1w, d, n2, d, p->w1, d, (R)0, a1, a1w);
    if (llama)
        swiglu_par(len, f, a1, NULL, a2);
    else
        gelu_par(len, f, a1, NULL, a2);
    if (y != x2)
        copy_rows_par(len, d, x2, d, y, d);
    lin_fwd(len, d, f, a2, f, p->w2, f, (R)1, y, d);
    return 0;
}

/* Backward of one layer. In: buf = dy [len, d] (dLoss/dy). Out: buf = dx.
 * Weight grads +=; dkv rows [0, start+len) +=, then rows [start, start+len)
 * read as this piece's complete dK/dV.
 *   MLP : da2 = dy W2; dW2 += dy^T a2; da1 = act'(da2); dn2 = da1 W1;
 *         dW1 += da1^T n2; dx2 = dy + norm2'(dn2)
 *   attn: datt = dx2 Wo; dWo += dx2^T att; (dq, dK, dV) = MHA'(datt);
 *         LLaMA: RoPE^T on dq, dk; dn1 = dqkv Wqkv; dWqkv += dqkv^T n1;
 *         dx = dx2 + norm1'(dn1) */
/* Saved output gradients of one layer for a deferred weight gradient (W of a
 * split backward): dy[len,d] dx2[len,d] dqkv[len,3d] da1[len,A1]. */
struct wst_off { long dy, dx2, dqkv, da1, total; };

static void wst_layout(const bsipipe_model_dims_t *dm, int len, struct wst_off *o)
{
    long n = len, h = dm->hidden, at = 0;
    o->dy = at; at += n * h;
    o->dx2 = at; at += n * h;
    o->dqkv = at; at += 3 * n * h;
    o->da1 = at; at += n * kern_a1_width(dm);
    o->total = at;
}

/* The four weight-gradient products of one layer, from the stash and the
 * output gradients (in the order of the fused backward, so that gradients
 * accumulate bitwise the same). */
static void layer_wgrad(const bsipipe_model_dims_t *dm, int len, const struct lg *g,
                        const R *stash, const R *dy, const R *da1, const R *dx2,
                        const R *dqkv)
{
    struct bsipipe_stash_off so;
    int d = dm->hidden, f = dm->ffn_hidden, a1w = kern_a1_width(dm);
    kern_stash_off(dm, len, &so);
    lin_bwd_w(len, d, f, dy, d, stash + so.a2, f, g->w2, f);
    lin_bwd_w(len, a1w, d, da1, a1w, stash + so.n2, d, g->w1, d);
    lin_bwd_w(len, d, d, dx2, d, stash + so.att, d, g->wo, d);
    lin_bwd_w(len, 3 * d, d, dqkv, 3 * d, stash + so.n1, d, g->wqkv, d);
}

/* wst == NULL: fused backward (weight gradients now). Otherwise the input
 * backward of a split: norm gradients now, the output gradients the four
 * weight products need are saved in wst (struct wst_off) for layer_wgrad. */
static int layer_bwd(const bsipipe_model_dims_t *dm, int start, int len, const struct lp *p,
                     const struct lg *g, const R *stash, const R *kv, R *dkv, R *work,
                     R *buf, R *wst)
{
    struct bsipipe_stash_off so;
    struct bsipipe_work_off wo;
    int d = dm->hidden, H = dm->n_heads, hd = d / H, f = dm->ffn_hidden;
    int a1w = kern_a1_width(dm), llama = dm->family == BSIPIPE_MODEL_LLAMA, rc;
    size_t kvrows = (size_t)dm->seq_len * d;
    const R *K = kv, *Vc = kv + kvrows;
    R *dK = dkv, *dV = dkv + kvrows;
    kern_stash_off(dm, len, &so);
    kern_work_off(dm, len, &wo);
    const R *x = stash + so.x, *q = stash + so.q;
    const R *att = stash + so.att, *x2 = stash + so.x2, *a1 = stash + so.a1;
    R *dx2 = work + wo.dx, *dn = work + wo.dn, *datt = work + wo.datt;
    R *dqkv = work + wo.dqkv, *da1 = work + wo.da1, *da2 = work + wo.da2;
    R *dy = buf;
    struct wst_off wso;
    wst_layout(dm, len, &wso);
    if (wst)
        copy_rows_par(len, d, dy, d, wst + wso.dy, d);

    /* MLP */
    lin_bwd_x(len, d, f, dy, d, p->w2, f, (R)0, da2, f);
    if (llama)
        swiglu_par(len, f, a1, da2, da1);
    else
        gelu_par(len, f, a1, da2, da1);
    lin_bwd_x(len, a1w, d, da1, a1w, p->w1, d, (R)0, dn, d);
    if (wst)
        copy_rows_par(len, a1w, da1, a1w, wst + wso.da1, a1w);
    rc = norm_bwd_par(len, d, x2, p->n2w, p->n2b != NULL, stash + so.s2, dn, dy, dx2, g->n2w,
                      g->n2b);
    if (rc)
        return rc;

    /* attention */
    lin_bwd_x(len, d, d, dx2, d, p->wo, d, (R)0, datt, d);
    if (wst)
        copy_rows_par(len, d, dx2, d, wst + wso.dx2, d);
    rc = FN(bsipipe_attention_backward)(H, hd, start, len, q, d, K, Vc, d, att, datt, d,
                                        stash + so.lse, dqkv, 3 * d, dK, dV);
    if (rc)
        return rc;
    copy_rows_par(len, d, dK + IX(start, 0, d), d, dqkv + d, 3 * d);
    copy_rows_par(len, d, dV + IX(start, 0, d), d, dqkv + 2 * d, 3 * d);
    if (llama) {
        rope(len, H, hd, start, dqkv, 3 * d, -1);
        rope(len, H, hd, start, dqkv + d, 3 * d, -1);
    }
    lin_bwd_x(len, 3 * d, d, dqkv, 3 * d, p->wqkv, d, (R)0, dn, d);
    if (wst)
        copy_rows_par(len, 3 * d, dqkv, 3 * d, wst + wso.dqkv, 3 * d);
    else
        layer_wgrad(dm, len, g, stash, dy, da1, dx2, dqkv);
    /* dx = dx2 + norm1'(dn): written over dy (no longer needed) */
    return norm_bwd_par(len, d, x, p->n1w, p->n1b != NULL, stash + so.s1, dn, dx2, buf, g->n1w,
                        g->n1b);
}

static int piece_check(const bsipipe_model_dims_t *d, int start, int len)
{
    if (bsipipe_model_dims_check(d) || start < 0 || len < 1 || start > d->seq_len - len)
        return -EINVAL;
    return 0;
}

int FN(bsipipe_chunk_forward)(const bsipipe_model_dims_t *d, int l0, int l1, int start,
                              int len, const R *layers, const R *x_in, R *x_out, R *stash,
                              R *kv)
{
    struct bsipipe_layer_off lo;
    struct bsipipe_stash_off so;
    struct lp p;
    size_t ss, kvs;
    int rc;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !layers ||
        !x_in || !x_out || !stash || !kv)
        return -EINVAL;
    kern_layer_off(d, &lo);
    kern_stash_off(d, len, &so);
    ss = (size_t)so.total;
    kvs = (size_t)bsipipe_model_kv_size(d);
    memmove(stash + so.x, x_in, sizeof(R) * (size_t)len * d->hidden);
    for (int l = l0; l < l1; l++) {
        size_t i = (size_t)(l - l0);
        R *st = stash + i * ss;
        /* the layer output is the next layer's stashed input */
        R *y = l + 1 < l1 ? stash + (i + 1) * ss + so.x : x_out;
        layer_ptrs(&lo, layers + i * (size_t)lo.total, &p);
        rc = layer_fwd(d, start, len, &p, st, kv + i * kvs, y);
        if (rc)
            return rc;
    }
    return 0;
}

static int chunk_bwd(const bsipipe_model_dims_t *d, int l0, int l1, int start, int len,
                     const R *layers, R *grads, const R *dy, R *dx, const R *stash,
                     const R *kv, R *dkv, R *wstash, R *work)
{
    struct bsipipe_layer_off lo;
    struct bsipipe_work_off wo;
    struct wst_off wso;
    struct lp p;
    struct lg g;
    size_t ss, kvs;
    int rc;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !layers ||
        !grads || !dy || !dx || !stash || !kv || !dkv || !work)
        return -EINVAL;
    kern_layer_off(d, &lo);
    kern_work_off(d, len, &wo);
    wst_layout(d, len, &wso);
    ss = (size_t)bsipipe_model_stash_size(d, len);
    kvs = (size_t)bsipipe_model_kv_size(d);
    memmove(work + wo.dy, dy, sizeof(R) * (size_t)len * d->hidden);
    for (int l = l1 - 1; l >= l0; l--) {
        size_t i = (size_t)(l - l0);
        layer_ptrs(&lo, layers + i * (size_t)lo.total, &p);
        layer_gptrs(&lo, grads + i * (size_t)lo.total, &g);
        rc = layer_bwd(d, start, len, &p, &g, stash + i * ss, kv + i * kvs, dkv + i * kvs,
                       work, work + wo.dy, wstash ? wstash + i * (size_t)wso.total : NULL);
        if (rc)
            return rc;
    }
    memmove(dx, work + wo.dy, sizeof(R) * (size_t)len * d->hidden);
    return 0;
}

int FN(bsipipe_chunk_backward)(const bsipipe_model_dims_t *d, int l0, int l1, int start,
                               int len, const R *layers, R *grads, const R *dy, R *dx,
                               const R *stash, const R *kv, R *dkv, R *work)
{
    return chunk_bwd(d, l0, l1, start, len, layers, grads, dy, dx, stash, kv, dkv, NULL, work);
}

int FN(bsipipe_chunk_backward_input)(const bsipipe_model_dims_t *d, int l0, int l1,
                                     int start, int len, const R *layers, R *grads,
                                     const R *dy, R *dx, const R *stash, const R *kv,
                                     R *dkv, R *wstash, R *work)
{
    if (!wstash)
        return -EINVAL;
    return chunk_bwd(d, l0, l1, start, len, layers, grads, dy, dx, stash, kv, dkv, wstash,
                     work);
}

int FN(bsipipe_chunk_backward_weight)(const bsipipe_model_dims_t *d, int l0, int l1,
                                      int start, int len, R *grads, const R *stash,
                                      const R *wstash)
{
    struct bsipipe_layer_off lo;
    struct wst_off wso;
    struct lg g;
    size_t ss;
    if (piece_check(d, start, len) || l0 < 0 || l1 <= l0 || l1 > d->n_layers || !grads ||
        !stash || !wstash)
        return -EINVAL;
    kern_layer_off(d, &lo);
    wst_layout(d, len, &wso);
    ss = (size_t)bsipipe_model_stash_size(d, len);
    /* layers in the backward's order (last first), as the fused path does */
    for (int l = l1 - 1; l >= l0; l--) {
        size_t i = (size_t)(l - l0);
        const R *w = wstash + i * (size_t)wso.total;
        layer_gptrs(&lo, grads + i * (size_t)lo.total, &g);
        layer_wgrad(d, len, &g, stash + i * ss, w + wso.dy, w + wso.da1, w + wso.dx2,
                    w + wso.dqkv);
    }
    return 0;
}

/* -------------------------------------------------------------- embedding */

int FN(bsipipe_embed_forward)(const bsipipe_model_dims_t *d, const R *embed, const int *tokens,
                              int start, int len, R *x_out)
{
    struct bsipipe_embed_off eo;
    int h;
    if (piece_check(d, start, len) || !embed || !tokens || !x_out)
        return -EINVAL;
    for (int i = 0; i < len; i++)
        if (tokens[i] < 0 || tokens[i] >= d->vocab)
            return -EINVAL;
    kern_embed_off(d, &eo);
    h = d->hidden;
    for (int i = 0; i < len; i++) {
        const R *te = embed + eo.wte + IX(tokens[i], 0, h);
        R *xr = x_out + IX(i, 0, h);
        if (eo.wpe >= 0) {
            const R *pe = embed + eo.wpe + IX(start + i, 0, h);
            for (int c = 0; c < h; c++)
                xr[c] = te[c] + pe[c];
        } else {
            memcpy(xr, te, sizeof(R) * h);
        }
    }
    return 0;
}

int FN(bsipipe_embed_backward)(const bsipipe_model_dims_t *d, R *embed_grad, const int *tokens,
                               int start, int len, const R *dx)
{
    struct bsipipe_embed_off eo;
    int h;
    if (piece_check(d, start, len) || !embed_grad || !tokens || !dx)
        return -EINVAL;
    for (int i = 0; i < len; i++)
        if (tokens[i] < 0 || tokens[i] >= d->vocab)
            return -EINVAL;
    kern_embed_off(d, &eo);
    h = d->hidden;
    for (int i = 0; i < len; i++) {
        R *te = embed_grad + eo.wte + IX(tokens[i], 0, h);
        const R *dr = dx + IX(i, 0, h);
        for (int c = 0; c < h; c++)
            te[c] += dr[c];
        if (eo.wpe >= 0) {
            R *pe = embed_grad + eo.wpe + IX(start + i, 0, h);
            for (int c = 0; c < h; c++)
                pe[c] += dr[c];
        }
    }
    return 0;
}

/* ------------------------------------------------------------------- head */

/* xn = normf(x); logits = xn Wlm^T. Work: xn [len,d] | logits [len,V] | st. */
static void head_logits(const bsipipe_model_dims_t *d, const R *head, int len, const R *x,
                        R *work, R **xn, R **lg, R **st)
{
    struct bsipipe_head_off ho;
    int h = d->hidden;
    kern_head_off(d, &ho);
    *xn = work;
    *lg = work + (size_t)len * h;
    *st = *lg + (size_t)len * d->vocab;
    norm_fwd(len, h, x, head + ho.nfw, ho.nfb >= 0 ? head + ho.nfb : NULL, *xn, *st);
    lin_fwd(len, d->vocab, h, *xn, h, head + ho.wlm, h, (R)0, *lg, d->vocab);
}

static int head_check(const bsipipe_model_dims_t *d, int len, const R *head, const R *x,
                      const int *targets, R *work)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len || !head || !x || !work)
        return -EINVAL;
    if (targets)
        for (int i = 0; i < len; i++)
            if (targets[i] < 0 || targets[i] >= d->vocab)
                return -EINVAL;
    return 0;
}

int FN(bsipipe_head_forward)(const bsipipe_model_dims_t *d, const R *head, int len, const R *x,
                             const int *targets, R *logits, double *loss, R *work)
{
    R *xn, *lg, *st;
    int V;
    if (head_check(d, len, head, x, targets, work))
        return -EINVAL;
    V = d->vocab;
    head_logits(d, head, len, x, work, &xn, &lg, &st);
    if (logits)
        memcpy(logits, lg, sizeof(R) * (size_t)len * V);
    if (targets && loss) {
        double sum = 0;
        for (int i = 0; i < len; i++) {
            const R *row = lg + IX(i, 0, V);
            R mx = row[0];
            double se = 0;
            for (int c = 1; c < V; c++)
                if (row[c] > mx)
                    mx = row[c];
            for (int c = 0; c < V; c++)
                se += exp(row[c] - mx);
            sum += (double)mx + log(se) - row[targets[i]];
        }
        *loss = sum;
    }
    return 0;
}

int FN(bsipipe_head_forward_backward)(const bsipipe_model_dims_t *d, const R *head,
                                      R *head_grad, int len, const R *x, const int *targets,
                                      double grad_scale, double *loss, R *dx, R *work)
{
    struct bsipipe_head_off ho;
    R *xn, *lg, *st;
    int V, h;
    double sum = 0;
    if (head_check(d, len, head, x, targets, work) || !targets || !head_grad || !dx || !loss)
        return -EINVAL;
    V = d->vocab;
    h = d->hidden;
    kern_head_off(d, &ho);
    head_logits(d, head, len, x, work, &xn, &lg, &st);
    /* logits -> dlogits = grad_scale * (softmax - onehot), in place */
    for (int i = 0; i < len; i++) {
        R *row = lg + IX(i, 0, V), mx = row[0];
        double se = 0, lse;
        for (int c = 1; c < V; c++)
            if (row[c] > mx)
                mx = row[c];
        for (int c = 0; c < V; c++)
            se += exp((double)(row[c] - mx));
        lse = (double)mx + log(se);
        sum += lse - row[targets[i]];
        for (int c = 0; c < V; c++)
            row[c] = (R)(exp((double)row[c] - lse) * grad_scale);
        row[targets[i]] -= (R)grad_scale;
    }
    *loss = sum;
    lin_bwd_w(len, V, h, lg, V, xn, h, head_grad + ho.wlm, h);
    /* dxn goes into xn's slot (xn is dead after dWlm): the norm backward then
     * writes dx without aliasing its input */
    lin_bwd_x(len, V, h, lg, V, head + ho.wlm, h, (R)0, xn, h);
    norm_bwd(len, h, x, head + ho.nfw, ho.nfb >= 0, st, xn, dx, head_grad + ho.nfw,
             ho.nfb >= 0 ? head_grad + ho.nfb : NULL, 0);
    return 0;
}

/* ------------------------------------------------------------ whole model */

/* splitmix64 (Steele et al.): tiny, seedable, identical on every platform */
static unsigned long long sm64(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* standard normal by Box-Muller from two 53-bit uniforms in (0, 1] */
static double randn(unsigned long long *s)
{
    double u1 = ((sm64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (sm64(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int FN(bsipipe_model_init)(const bsipipe_model_dims_t *d, unsigned long long seed, R *params)
{
    bsipipe_tensor_info_t *t;
    unsigned long long s = seed;
    int n;
    if (bsipipe_model_dims_check(d) || !params)
        return -EINVAL;
    n = bsipipe_model_tensors(d, NULL, 0);
    t = malloc(sizeof *t * (size_t)n);
    if (!t)
        return -ENOMEM;
    bsipipe_model_tensors(d, t, n);
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].rows * t[i].cols;
        R *p = params + t[i].offset;
        const char *dot = strchr(t[i].name, '.'), *base = dot ? dot + 1 : t[i].name;
        if (!t[i].decay) { /* norm weight 1, bias 0 */
            R v = base[strlen(base) - 1] == 'w' ? (R)1 : (R)0;
            for (size_t j = 0; j < cnt; j++)
                p[j] = v;
            continue;
        }
        double std = 0.02;
        if (!strcmp(base, "wo") || !strcmp(base, "wproj") || !strcmp(base, "wdown"))
            std /= sqrt(2.0 * d->n_layers); /* GPT-2: residual projections */
        for (size_t j = 0; j < cnt; j++)
            p[j] = (R)(std * randn(&s));
    }
    free(t);
    return 0;
}

int FN(bsipipe_model_sequence)(const bsipipe_model_dims_t *d, const R *params, R *grads,
                               const int *tokens, const int *targets, int k,
                               const int *starts, double grad_scale, double *loss,
                               R *logits)
{
    long eo, h0, lp1;
    size_t S, h, st_max = 0, kv, off = 0;
    size_t *st_off;
    R *mem = NULL, *x, *kvb, *dkv, *work, *hw, *stash, *dxl;
    int L, rc = 0;
    double total = 0;
    if (bsipipe_model_dims_check(d) || !params || !tokens || !targets || !loss || k < 1 ||
        k > d->seq_len || !starts)
        return -EINVAL;
    if (starts[0] != 0 || starts[k] != d->seq_len)
        return -EINVAL;
    for (int j = 0; j < k; j++)
        if (starts[j + 1] <= starts[j])
            return -EINVAL;
    L = d->n_layers;
    S = (size_t)d->seq_len;
    h = (size_t)d->hidden;
    eo = 0;
    h0 = bsipipe_model_layer_offset(d, L);
    lp1 = bsipipe_model_layer_offset(d, 0);
    kv = (size_t)L * (size_t)bsipipe_model_kv_size(d);
    st_off = malloc(sizeof *st_off * (size_t)(k + 1));
    if (!st_off)
        return -ENOMEM;
    /* every piece keeps its stash until its backward (as in a pipeline) */
    for (int j = 0; j < k; j++) {
        st_off[j] = off;
        off += (size_t)L * bsipipe_model_stash_size(d, starts[j + 1] - starts[j]);
    }
    st_off[k] = off;
    st_max = (size_t)bsipipe_model_work_size(d, d->seq_len);
    {
        size_t hws = (size_t)bsipipe_model_head_work_size(d, d->seq_len);
        size_t total_el = S * h /* x */ + kv * 2 + st_max + hws + off + S * h /* dxl */;
        mem = calloc(total_el, sizeof(R));
        if (!mem) {
            free(st_off);
            return -ENOMEM;
        }
        x = mem;
        kvb = x + S * h;
        dkv = kvb + kv;
        work = dkv + kv;
        hw = work + st_max;
        stash = hw + hws;
        dxl = stash + off; /* dLoss/d(last layer output), per piece at its rows */
    }
    for (int j = 0; j < k && !rc; j++) {
        int s0 = starts[j], n = starts[j + 1] - s0;
        double lj = 0;
        R *xj = x + (size_t)s0 * h;
        rc = FN(bsipipe_embed_forward)(d, params + eo, tokens + s0, s0, n, xj);
        if (!rc)
            rc = FN(bsipipe_chunk_forward)(d, 0, L, s0, n, params + lp1, xj, xj,
                                           stash + st_off[j], kvb);
        if (!rc && logits)
            rc = FN(bsipipe_head_forward)(d, params + h0, n, xj, NULL,
                                          logits + (size_t)s0 * d->vocab, NULL, hw);
        if (!rc && grads)
            rc = FN(bsipipe_head_forward_backward)(d, params + h0, grads + h0, n, xj,
                                                   targets + s0, grad_scale, &lj,
                                                   dxl + (size_t)s0 * h, hw);
        else if (!rc)
            rc = FN(bsipipe_head_forward)(d, params + h0, n, xj, targets + s0, NULL, &lj, hw);
        total += lj;
    }
    for (int j = k - 1; j >= 0 && grads && !rc; j--) {
        int s0 = starts[j], n = starts[j + 1] - s0;
        R *dj = dxl + (size_t)s0 * h;
        rc = FN(bsipipe_chunk_backward)(d, 0, L, s0, n, params + lp1, grads + lp1, dj, dj,
                                        stash + st_off[j], kvb, dkv, work);
        if (!rc)
            rc = FN(bsipipe_embed_backward)(d, grads + eo, tokens + s0, s0, n, dj);
    }
    *loss = total;
    free(mem);
    free(st_off);
    return rc;
}

/* ------------------------------------------------------------- optimizer */

double FN(bsipipe_sumsq)(long n, const R *g)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

int FN(bsipipe_adamw_update)(const bsipipe_adamw_t *hp, long t, long n, R *p, const R *g,
                             double grad_mul, int decay, R *m, R *v)
{
    if (!hp || t < 1 || n < 0 || (n && (!p || !g || !m || !v)))
        return -EINVAL;
    /* torch.optim.AdamW (non-amsgrad, single-tensor path) operation order */
    double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
    R b1 = (R)hp->beta1, b2 = (R)hp->beta2, step = (R)(hp->lr / bc1);
    R bc2s = (R)sqrt(bc2), eps = (R)hp->eps, gm = (R)grad_mul;
    R dec = (R)(1.0 - hp->lr * (decay ? hp->weight_decay : 0.0));
    for (long i = 0; i < n; i++) {
        R gi = grad_mul == 1.0 ? g[i] : g[i] * gm;
        p[i] *= dec;
        m[i] = m[i] * b1 + ((R)1 - b1) * gi;
        v[i] = v[i] * b2 + ((R)1 - b2) * gi * gi;
        p[i] -= step * (m[i] / (sqrt(v[i]) / bc2s + eps));
    }
    return 0;
}

int FN(bsipipe_model_adamw_step)(const bsipipe_model_dims_t *d, const bsipipe_adamw_t *hp,
                                 long t, R *params, const R *grads, R *m, R *v, double *gnorm)
{
    bsipipe_tensor_info_t *ti;
    long np;
    double norm, mul = 1.0;
    int n, rc = 0;
    if (bsipipe_model_dims_check(d) || !hp || t < 1 || !params || !grads || !m || !v)
        return -EINVAL;
    np = bsipipe_model_params(d);
    norm = sqrt(FN(bsipipe_sumsq)(np, grads));
    if (gnorm)
        *gnorm = norm;
    if (hp->grad_clip > 0) {
        /* torch clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1 */
        double coef = hp->grad_clip / (norm + 1e-6);
        if (coef < 1.0)
            mul = coef;
    }
    n = bsipipe_model_tensors(d, NULL, 0);
    ti = malloc(sizeof *ti * (size_t)n);
    if (!ti)
        return -ENOMEM;
    bsipipe_model_tensors(d, ti, n);
    for (int i = 0; i < n && !rc; i++) {
        long o = ti[i].offset, c = (long)ti[i].rows * ti[i].cols;
        rc = FN(bsipipe_adamw_update)(hp, t, c, params + o, grads + o, mul, ti[i].decay,
                                      m + o, v + o);
    }
    free(ti);
    return rc;
}
