/* kernels/cuda/bsipipe_cuda_tp.cuh: the tensor-parallel segments on CUDA
 * (bsipipe_cuda_tp.h). Included at the end of bsipipe_cuda_kernels.cu, whose
 * helpers (gemm / lin_*, norm_*, rope, act_*, the attention, block reductions)
 * it uses, as kernels/cpu/tp_tmpl.h uses kernels_tmpl.h's: the sharded and
 * unsharded paths share every kernel and differ only in the products' shapes.
 * Each function follows its CPU twin in kernels/cpu/tp_tmpl.h line by line.
 *
 * Notation: h = hidden, T = D_t, ls = len / T (the rank's token slice), hs =
 * h / T (its q/k/v columns = H / T heads), fs = F / T, a1s = A1 / T, vs =
 * V / T. */
#include "kernels/cuda/bsipipe_cuda_tp.h"
#include "base/bsipipe_error.h"

namespace {

/* The CPU segments' checks (bsipipe_tp_check: degree, dims, piece), the
 * attention's head size, the product mode. */
static int tp_cuda_piece(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start, int len)
{
    if (bsipipe_model_dims_check(d) || !tp)
        return bsipipe_error_set(-EINVAL, "tensor parallelism (cuda): bad model dimensions");
    if (start < 0 || len < 1 || start > d->seq_len - len)
        return bsipipe_error_set(-EINVAL, "piece [%d, %d + %d) outside the sequence [0, %d)", start,
                                 start, len, d->seq_len);
    int rc = bsipipe_tp_check(d, tp, len);
    if (rc)
        return rc;
    if (d->hidden / d->n_heads > AT_MAXHD)
        return bsipipe_error_set(-EINVAL, "tensor parallelism (cuda): head size %d over %d",
                                 d->hidden / d->n_heads, AT_MAXHD);
    if (g_mode == BSIPIPE_CUDA_GEMM_BF16S)
        return bsipipe_error_set(-EINVAL, "tensor parallelism (cuda): the bf16s product mode (bf16 "
                                          "stash) has no sharded stash layout; use fp32, tf32 or bf16");
    return 0;
}

#define TP_CUDA_NULL(what) bsipipe_error_set(-EINVAL, "tensor-parallel cuda segment: NULL buffer (%s)", what)

struct tp_cuda_layer {
    int h, hs, H, hd, fs, a1s, ls;
    bool llama;
    lp p;
    bsipipe_stash_off so;
};

/* blas: the segment has matrix products, so it needs the handle */
static int tp_cuda_layer_init(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start,
                              int len, const float *layer, tp_cuda_layer *t, cudaStream_t s,
                              cublasHandle_t hb, bool blas)
{
    bsipipe_layer_off lo;
    if (blas && !hb)
        return TP_CUDA_NULL("cublas handle");
    int rc = tp_cuda_piece(d, tp, start, len);
    if (rc)
        return rc;
    if (!layer)
        return TP_CUDA_NULL("layer parameters");
    if (hb)
        RC_TRY(set_stream(hb, s));
    t->h = d->hidden;
    t->hs = d->hidden / tp->size;
    t->H = d->n_heads / tp->size;
    t->hd = d->hidden / d->n_heads;
    t->fs = d->ffn_hidden / tp->size;
    t->a1s = kern_a1_width(d) / tp->size;
    t->ls = len / tp->size;
    t->llama = d->family == BSIPIPE_MODEL_LLAMA;
    kern_tp_layer_off(d, tp->size, &lo);
    layer_ptrs(&lo, layer, &t->p);
    kern_tp_stash_off(d, tp->size, len, &t->so);
    return 0;
}

static void tp_cuda_grads(const bsipipe_model_dims_t *d, int size, float *grads, lg *g)
{
    bsipipe_layer_off lo;
    kern_tp_layer_off(d, size, &lo);
    layer_gptrs(&lo, grads, g);
}

/* out = a + b (may alias either) */
__global__ void k_tp_add(size_t n, const float *a, const float *b, float *out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

static int tp_add(cudaStream_t s, size_t n, const float *a, const float *b, float *out)
{
    BSIPIPE_LAUNCH(k_tp_add, nblocks(n, 256), 256, 0, s, n, a, b, out);
    return launched();
}

/* A layer norm's backward on the rank's slice: dx = dres + norm'(red) (the
 * residual's gradient plus the reduce-scattered one through the norm of x,
 * with its statistics st), the norm's weight gradients accumulated. */
static int tp_cuda_norm_bwd(const tp_cuda_layer *t, const float *x, const float *w, const float *b,
                            const float *st, const float *red, const float *dres, float *dx, float *gw,
                            float *gb, cudaStream_t s)
{
    RC_TRY(copy_d2d(dx, dres, (size_t)t->ls * t->h, s));
    return norm_bwd(s, t->ls, t->h, x, w, b != NULL, st, red, dx, gw, gb, 1);
}

/* ---- the backward halves (shared by the fused and the split segments) ---- */

static int tp_cuda_mlp_bwd_input(const tp_cuda_layer *t, int len, const float *stash, const float *gdy,
                                 float *da2, float *da1, float *part, cudaStream_t s,
                                 cublasHandle_t hb)
{
    int h = t->h, fs = t->fs, a1s = t->a1s;
    RC_TRY(lin_bwd_x(hb, len, h, fs, gdy, h, t->p.w2, fs, 0.0f, da2, fs));
    RC_TRY(act_bwd(s, t->llama, len, fs, stash + t->so.a1, da2, da1));
    return lin_bwd_x(hb, len, a1s, h, da1, a1s, t->p.w1, h, 0.0f, part, h); /* dn2, partial */
}

static int tp_cuda_mlp_bwd_weight(const tp_cuda_layer *t, int len, const lg *g, const float *stash,
                                  const float *gdy, const float *da1, const float *gath,
                                  cublasHandle_t hb)
{
    int h = t->h, fs = t->fs, a1s = t->a1s;
    RC_TRY(lin_bwd_w(hb, len, h, fs, gdy, h, stash + t->so.a2, fs, g->w2, fs));
    return lin_bwd_w(hb, len, a1s, h, da1, a1s, gath, h, g->w1, h);
}

/* datt [len, hs] scratch; dqkv [len, 3 hs] what the weight half reads */
static int tp_cuda_attn_bwd_input(const bsipipe_model_dims_t *d, const tp_cuda_layer *t, int start,
                                  int len, const float *stash, const float *kv, float *dkv,
                                  const float *gdy, float *datt, float *dqkv, float *part,
                                  cudaStream_t s, cublasHandle_t hb)
{
    int h = t->h, hs = t->hs;
    size_t rows = (size_t)d->seq_len * hs;
    const float *K = kv, *V = kv + rows, *q = stash + t->so.q, *att = stash + t->so.att;
    float *dK = dkv, *dV = dkv + rows;
    RC_TRY(lin_bwd_x(hb, len, h, hs, gdy, h, t->p.wo, hs, 0.0f, datt, hs));
    RC_TRY(bsipipe_cuda_attention_backward(t->H, t->hd, start, len, q, hs, K, V, hs, att, datt, hs,
                                           stash + t->so.lse, dqkv, 3 * hs, dK, dV, s));
    CU_TRY(cudaMemcpy2DAsync(dqkv + hs, sizeof(float) * 3 * hs, dK + IX(start, 0, hs),
                             sizeof(float) * hs, sizeof(float) * hs, len, cudaMemcpyDeviceToDevice, s));
    CU_TRY(cudaMemcpy2DAsync(dqkv + 2 * hs, sizeof(float) * 3 * hs, dV + IX(start, 0, hs),
                             sizeof(float) * hs, sizeof(float) * hs, len, cudaMemcpyDeviceToDevice, s));
    if (t->llama) {
        RC_TRY(rope(s, len, t->H, t->hd, start, dqkv, 3 * hs, -1));
        RC_TRY(rope(s, len, t->H, t->hd, start, dqkv + hs, 3 * hs, -1));
    }
    return lin_bwd_x(hb, len, 3 * hs, h, dqkv, 3 * hs, t->p.wqkv, h, 0.0f, part, h); /* dn1, partial */
}

static int tp_cuda_attn_bwd_weight(const tp_cuda_layer *t, int len, const lg *g, const float *stash,
                                   const float *gdy, const float *dqkv, const float *gath,
                                   cublasHandle_t hb)
{
    int h = t->h, hs = t->hs;
    RC_TRY(lin_bwd_w(hb, len, h, hs, gdy, h, stash + t->so.att, hs, g->wo, hs));
    return lin_bwd_w(hb, len, 3 * hs, h, dqkv, 3 * hs, gath, h, g->wqkv, h);
}

/* Offsets in one layer's wstash (kernels/cpu/tp_tmpl.h, tp_wst_off): gdy of
 * the MLP and of the attention [len, h], da1 [len, a1s], dqkv [len, 3 hs]. */
static void tp_cuda_wst_off(const tp_cuda_layer *t, int len, size_t o[4])
{
    o[0] = 0;
    o[1] = (size_t)len * t->h;
    o[2] = 2 * (size_t)len * t->h;
    o[3] = o[2] + (size_t)len * t->a1s;
}

/* ---- the cross-entropy over a vocabulary slice (one block per token) ---- */

/* ce[i] = max of the row (the rank's part of the all-reduce MAX) */
__global__ void k_tp_rowmax(int vs, const float *lg, double *ce)
{
    __shared__ float sh[CE_NT / 32];
    const float *row = lg + IX(blockIdx.x, 0, vs);
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < vs; c += CE_NT)
        mx = fmaxf(mx, row[c]);
    mx = block_max<CE_NT>(mx, sh);
    if (threadIdx.x == 0)
        ce[blockIdx.x] = (double)mx;
}

/* ce[len + i] = sum of exp(row - max) (float difference, double exp, as the
 * CPU), ce[2 len + i] = the target's logit if this rank owns it, else 0 */
__global__ void k_tp_ce_sums(int len, int vs, int v0, const float *lg, const int *targets, double *ce)
{
    __shared__ double sh[CE_NT / 32];
    int i = blockIdx.x;
    const float *row = lg + IX(i, 0, vs);
    float mx = (float)ce[i];
    double se = 0;
    for (int c = threadIdx.x; c < vs; c += CE_NT)
        se += exp((double)(row[c] - mx));
    se = block_sum<CE_NT>(se, sh);
    if (threadIdx.x == 0) {
        int t = targets[i] - v0;
        ce[len + i] = se;
        ce[2 * len + i] = t >= 0 && t < vs ? (double)row[t] : 0.0;
    }
}

/* row = gs (softmax - onehot) in place, with the global max and sum in ce */
__global__ void k_tp_ce_grad(int len, int vs, int v0, float *lg, const int *targets, double gs,
                             const double *ce)
{
    int i = blockIdx.x, t = targets[i] - v0;
    float *row = lg + IX(i, 0, vs);
    double lse = ce[i] + log(ce[len + i]);
    for (int c = threadIdx.x; c < vs; c += CE_NT) {
        float v = (float)(exp((double)row[c] - lse) * gs);
        if (c == t)
            v -= (float)gs;
        row[c] = v;
    }
}

/* ---- the vocabulary-parallel embedding ---- */

/* part [len, h] = the rows of the rank's wte slice, zero for tokens of other
 * ranks, NaN for a token outside the vocabulary (on every rank: the sum of
 * the reduce-scatter is NaN, as the unsharded kernel's row) */
__global__ void k_tp_embed_vocab(int h, int V, int vs, int v0, const float *wte, const int *tokens,
                                 int len, float *part)
{
    size_t tot = (size_t)len * h;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / h), c = (int)(e % h), tk = tokens[i], t = tk - v0;
        part[e] = tk < 0 || tk >= V ? NAN : t >= 0 && t < vs ? wte[IX(t, c, h)] : 0.0f;
    }
}

/* dir = 1: x [ls, h] += wpe rows p0..; dir = 0: wpe rows p0.. += x (one row
 * per position: no race) */
__global__ void k_tp_embed_pos(int h, int ls, int p0, float *wpe, float *x, int fwd)
{
    size_t tot = (size_t)ls * h;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t i = e / h, c = e % h;
        float *pe = wpe + IX(p0 + i, c, h);
        if (fwd)
            x[e] += *pe;
        else
            *pe += x[e];
    }
}

__global__ void k_tp_embed_bwd_vocab(int h, int vs, int v0, float *gte, const int *tokens, int len,
                                     const float *gath)
{
    size_t tot = (size_t)len * h;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < tot;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / h), c = (int)(e % h), t = tokens[i] - v0;
        if (t >= 0 && t < vs)
            atomicAdd(gte + IX(t, c, h), gath[e]);
    }
}

static int tp_cuda_embed_pos(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, float *wpe_base,
                             int start, int len, float *x, int fwd, cudaStream_t s)
{
    bsipipe_embed_off eo;
    kern_tp_embed_off(d, tp->size, &eo);
    if (eo.wpe < 0)
        return 0;
    int h = d->hidden, ls = len / tp->size;
    BSIPIPE_LAUNCH(k_tp_embed_pos, nblocks((size_t)ls * h, 256), 256, 0, s, h, ls,
                   start + tp->rank * ls, wpe_base + eo.wpe, x, fwd);
    return launched();
}

/* ---- collectives ---- */

enum { TP_CUDA_MAX_RANKS = 16 };

struct tp_cuda_ptrs {
    const void *p[TP_CUDA_MAX_RANKS];
};

/* out[i] (and, in place, every p[q][i]) = p[0][off + i] op p[1][off + i] ...
 * in rank order, the CPU's expression (a NaN in p[q > 0] is dropped by MAX,
 * as there) */
template <typename T>
__global__ void k_tp_reduce(int size, tp_cuda_ptrs in, long off, T *out, long count, int max, int inplace)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        T acc = ((const T *)in.p[0])[off + i];
        for (int q = 1; q < size; q++) {
            T v = ((const T *)in.p[q])[off + i];
            acc = max ? (v > acc ? v : acc) : acc + v;
        }
        if (inplace)
            for (int q = 0; q < size; q++)
                ((T *)in.p[q])[i] = acc;
        else
            out[i] = acc;
    }
}

__global__ void k_tp_ce_loss_add(int len, const double *ce, double *loss)
{
    double s = 0;
    for (int i = 0; i < len; i++)
        s += ce[i] + log(ce[len + i]) - ce[2 * len + i];
    *loss += s;
}

/* one block: thread t takes g[t], g[t + NT], ...; then the block's fixed-order sum */
__global__ void k_tp_sumsq(long n, const float *g, double *out)
{
    __shared__ double sh[256 / 32];
    double acc = 0;
    for (long i = threadIdx.x; i < n; i += 256)
        acc += (double)g[i] * g[i];
    acc = block_sum<256>(acc, sh);
    if (threadIdx.x == 0)
        *out = acc;
}

static int tp_cuda_reduce(int size, const void *const *in, long off, void *out, long count, bsipipe_tp_dtype_t t,
                          bsipipe_tp_op_t op, int inplace, cudaStream_t s)
{
    if (size < 1 || size > TP_CUDA_MAX_RANKS || !in || (!out && !inplace) || count < 0 ||
        (t != BSIPIPE_TP_F32 && t != BSIPIPE_TP_F64) || (op != BSIPIPE_TP_SUM && op != BSIPIPE_TP_MAX))
        return -EINVAL;
    tp_cuda_ptrs p = {};
    for (int q = 0; q < size; q++)
        if (!(p.p[q] = in[q]))
            return -EINVAL;
    if (!count)
        return 0;
    int mx = op == BSIPIPE_TP_MAX;
    if (t == BSIPIPE_TP_F64)
        BSIPIPE_LAUNCH(k_tp_reduce<double>, nblocks((size_t)count, 256), 256, 0, s, size, p, off, (double *)out, count,
                       mx, inplace);
    else
        BSIPIPE_LAUNCH(k_tp_reduce<float>, nblocks((size_t)count, 256), 256, 0, s, size, p, off, (float *)out, count,
                       mx, inplace);
    return launched();
}

} /* namespace */

/* ================================================================== API */

extern "C" int bsipipe_cuda_tp_ce_loss_add(int len, const double *ce, double *loss, cudaStream_t s)
{
    if (len < 1 || !ce || !loss)
        return -EINVAL;
    BSIPIPE_LAUNCH(k_tp_ce_loss_add, 1, 1, 0, s, len, ce, loss);
    return launched();
}

extern "C" int bsipipe_cuda_tp_sumsq(long n, const float *g, double *out, cudaStream_t s)
{
    if (n < 0 || !out || (n && !g))
        return -EINVAL;
    BSIPIPE_LAUNCH(k_tp_sumsq, 1, 256, 0, s, n, g, out);
    return launched();
}

extern "C" int bsipipe_cuda_tp_all_gather_rank(int size, int rank, const void *const *send, void *recv, long count,
                                               bsipipe_tp_dtype_t t, cudaStream_t s)
{
    if (size < 1 || size > TP_CUDA_MAX_RANKS || rank < 0 || rank >= size || !send || !recv || count < 0 ||
        (t != BSIPIPE_TP_F32 && t != BSIPIPE_TP_F64))
        return -EINVAL;
    size_t b = (size_t)count * (t == BSIPIPE_TP_F64 ? 8 : 4);
    for (int q = 0; q < size; q++)
        if (b)
            CU_TRY(cudaMemcpyAsync((char *)recv + (size_t)q * b, send[q], b, cudaMemcpyDefault, s));
    return 0;
}

extern "C" int bsipipe_cuda_tp_reduce_scatter_rank(int size, int rank, const void *const *send, void *recv,
                                                   long count, bsipipe_tp_dtype_t t, cudaStream_t s)
{
    if (rank < 0 || rank >= size)
        return -EINVAL;
    return tp_cuda_reduce(size, send, (long)rank * count, recv, count, t, BSIPIPE_TP_SUM, 0, s);
}

extern "C" int bsipipe_cuda_tp_all_reduce_rank(int size, const void *const *in, void *out, long count,
                                               bsipipe_tp_dtype_t t, bsipipe_tp_op_t op, cudaStream_t s)
{
    return tp_cuda_reduce(size, in, 0, out, count, t, op, 0, s);
}

extern "C" int bsipipe_cuda_tp_all_reduce_inplace(int size, void *const *bufs, long count, bsipipe_tp_dtype_t t,
                                                  bsipipe_tp_op_t op, cudaStream_t s)
{
    return tp_cuda_reduce(size, (const void *const *)bufs, 0, NULL, count, t, op, 1, s);
}

extern "C" int bsipipe_cuda_tp_layer_fwd_norm1(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, const float *layer, const float *x,
                                               float *stash, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, false));
    if (!x || !stash)
        return TP_CUDA_NULL("x, stash");
    RC_TRY(copy_d2d(stash + t.so.x, x, (size_t)t.ls * t.h, s));
    return norm_fwd(s, t.ls, t.h, stash + t.so.x, t.p.n1w, t.p.n1b, stash + t.so.n1, stash + t.so.s1);
}

extern "C" int bsipipe_cuda_tp_layer_fwd_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                              int start, int len, const float *layer,
                                              const float *gath, float *stash, float *kv,
                                              float *part, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    RC_TRY(tp_cuda_layer_init(d, tp, start, len, layer, &t, s, hb, true));
    if (!gath || !stash || !kv || !part)
        return TP_CUDA_NULL("gath, stash, kv, part");
    int h = t.h, hs = t.hs;
    float *K = kv, *V = kv + (size_t)d->seq_len * hs, *q = stash + t.so.q, *att = stash + t.so.att;
    /* wqkv shard rows: the rank's q rows, then its k rows, then its v rows */
    RC_TRY(lin_fwd(hb, len, hs, h, gath, h, t.p.wqkv, h, 0.0f, q, hs));
    RC_TRY(lin_fwd(hb, len, hs, h, gath, h, t.p.wqkv + IX(hs, 0, h), h, 0.0f, K + IX(start, 0, hs), hs));
    RC_TRY(lin_fwd(hb, len, hs, h, gath, h, t.p.wqkv + IX(2 * hs, 0, h), h, 0.0f, V + IX(start, 0, hs), hs));
    if (t.llama) {
        RC_TRY(rope(s, len, t.H, t.hd, start, q, hs, 1));
        RC_TRY(rope(s, len, t.H, t.hd, start, K + IX(start, 0, hs), hs, 1));
    }
    RC_TRY(bsipipe_cuda_attention_forward(t.H, t.hd, start, len, q, hs, K, V, hs, att, hs,
                                          stash + t.so.lse, s));
    return lin_fwd(hb, len, h, hs, att, hs, t.p.wo, hs, 0.0f, part, h); /* row-parallel: partial */
}

extern "C" int bsipipe_cuda_tp_layer_fwd_norm2(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, const float *layer, const float *red,
                                               float *stash, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, false));
    if (!red || !stash)
        return TP_CUDA_NULL("red, stash");
    float *x2 = stash + t.so.x2;
    RC_TRY(tp_add(s, (size_t)t.ls * t.h, stash + t.so.x, red, x2));
    return norm_fwd(s, t.ls, t.h, x2, t.p.n2w, t.p.n2b, stash + t.so.n2, stash + t.so.s2);
}

extern "C" int bsipipe_cuda_tp_layer_fwd_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             int len, const float *layer, const float *gath,
                                             float *stash, float *part, cudaStream_t s,
                                             cublasHandle_t hb)
{
    tp_cuda_layer t;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, true));
    if (!gath || !stash || !part)
        return TP_CUDA_NULL("gath, stash, part");
    float *a1 = stash + t.so.a1, *a2 = stash + t.so.a2;
    /* LLaMA shard rows: the rank's gate rows then its up rows ([gate | up]) */
    RC_TRY(lin_fwd(hb, len, t.a1s, t.h, gath, t.h, t.p.w1, t.h, 0.0f, a1, t.a1s));
    RC_TRY(act_fwd(s, t.llama, len, t.fs, a1, a2));
    return lin_fwd(hb, len, t.h, t.fs, a2, t.fs, t.p.w2, t.fs, 0.0f, part, t.h);
}

extern "C" int bsipipe_cuda_tp_layer_fwd_out(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             int len, const float *stash, const float *red, float *y,
                                             cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_stash_off so;
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!stash || !red || !y)
        return TP_CUDA_NULL("stash, red, y");
    kern_tp_stash_off(d, tp->size, len, &so);
    return tp_add(s, (size_t)(len / tp->size) * d->hidden, stash + so.x2, red, y);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             int len, const float *layer, float *grads,
                                             const float *stash, const float *gdy,
                                             const float *gath, float *part, float *work,
                                             cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, true));
    if (!grads || !stash || !gdy || !gath || !part || !work)
        return TP_CUDA_NULL("grads, stash, gdy, gath, part, work");
    tp_cuda_grads(d, tp->size, grads, &g);
    float *da2 = work, *da1 = work + (size_t)len * t.fs;
    RC_TRY(tp_cuda_mlp_bwd_input(&t, len, stash, gdy, da2, da1, part, s, hb));
    return tp_cuda_mlp_bwd_weight(&t, len, &g, stash, gdy, da1, gath, hb);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_norm2(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, const float *layer, float *grads,
                                               const float *stash, const float *dy, const float *red,
                                               float *dx2, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, false));
    if (!grads || !stash || !dy || !red || !dx2)
        return TP_CUDA_NULL("grads, stash, dy, red, dx2");
    tp_cuda_grads(d, tp->size, grads, &g);
    return tp_cuda_norm_bwd(&t, stash + t.so.x2, t.p.n2w, t.p.n2b, stash + t.so.s2, red, dy, dx2, g.n2w, g.n2b, s);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                              int start, int len, const float *layer, float *grads,
                                              const float *stash, const float *kv, float *dkv,
                                              const float *gdy, const float *gath, float *part,
                                              float *work, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    RC_TRY(tp_cuda_layer_init(d, tp, start, len, layer, &t, s, hb, true));
    if (!grads || !stash || !kv || !dkv || !gdy || !gath || !part || !work)
        return TP_CUDA_NULL("grads, stash, kv, dkv, gdy, gath, part, work");
    tp_cuda_grads(d, tp->size, grads, &g);
    float *datt = work, *dqkv = work + (size_t)len * t.hs;
    RC_TRY(tp_cuda_attn_bwd_input(d, &t, start, len, stash, kv, dkv, gdy, datt, dqkv, part, s, hb));
    return tp_cuda_attn_bwd_weight(&t, len, &g, stash, gdy, dqkv, gath, hb);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_norm1(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, const float *layer, float *grads,
                                               const float *stash, const float *dx2, const float *red,
                                               float *dx, cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, false));
    if (!grads || !stash || !dx2 || !red || !dx)
        return TP_CUDA_NULL("grads, stash, dx2, red, dx");
    tp_cuda_grads(d, tp->size, grads, &g);
    return tp_cuda_norm_bwd(&t, stash + t.so.x, t.p.n1w, t.p.n1b, stash + t.so.s1, red, dx2, dx, g.n1w, g.n1b, s);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_mlp_x(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, const float *layer, const float *stash,
                                               const float *gdy, float *part, float *work, float *wst,
                                               cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    size_t o[4];
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, layer, &t, s, hb, true));
    if (!stash || !gdy || !part || !work || !wst)
        return TP_CUDA_NULL("stash, gdy, part, work, wstash");
    tp_cuda_wst_off(&t, len, o);
    RC_TRY(tp_cuda_mlp_bwd_input(&t, len, stash, gdy, work, wst + o[2], part, s, hb));
    return copy_d2d(wst + o[0], gdy, (size_t)len * t.h, s);
}

extern "C" int bsipipe_cuda_tp_layer_bwd_attn_x(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                                int start, int len, const float *layer,
                                                const float *stash, const float *kv, float *dkv,
                                                const float *gdy, float *part, float *work, float *wst,
                                                cudaStream_t s, cublasHandle_t hb)
{
    tp_cuda_layer t;
    size_t o[4];
    RC_TRY(tp_cuda_layer_init(d, tp, start, len, layer, &t, s, hb, true));
    if (!stash || !kv || !dkv || !gdy || !part || !work || !wst)
        return TP_CUDA_NULL("stash, kv, dkv, gdy, part, work, wstash");
    tp_cuda_wst_off(&t, len, o);
    RC_TRY(tp_cuda_attn_bwd_input(d, &t, start, len, stash, kv, dkv, gdy, work, wst + o[3], part, s, hb));
    return copy_d2d(wst + o[1], gdy, (size_t)len * t.h, s);
}

/* tp_cuda_layer_init reads the layer only for offsets: the gradient vector
 * has the parameters' layout. */
extern "C" int bsipipe_cuda_tp_layer_wgrad_mlp(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               int len, float *grads, const float *stash,
                                               const float *wst, const float *gath, cudaStream_t s,
                                               cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    size_t o[4];
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, grads, &t, s, hb, true));
    if (!stash || !wst || !gath)
        return TP_CUDA_NULL("stash, wstash, gath");
    tp_cuda_grads(d, tp->size, grads, &g);
    tp_cuda_wst_off(&t, len, o);
    return tp_cuda_mlp_bwd_weight(&t, len, &g, stash, wst + o[0], wst + o[2], gath, hb);
}

extern "C" int bsipipe_cuda_tp_layer_wgrad_attn(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                                int len, float *grads, const float *stash,
                                                const float *wst, const float *gath, cudaStream_t s,
                                                cublasHandle_t hb)
{
    tp_cuda_layer t;
    lg g;
    size_t o[4];
    RC_TRY(tp_cuda_layer_init(d, tp, 0, len, grads, &t, s, hb, true));
    if (!stash || !wst || !gath)
        return TP_CUDA_NULL("stash, wstash, gath");
    tp_cuda_grads(d, tp->size, grads, &g);
    tp_cuda_wst_off(&t, len, o);
    return tp_cuda_attn_bwd_weight(&t, len, &g, stash, wst + o[1], wst + o[3], gath, hb);
}

extern "C" int bsipipe_cuda_tp_embed_fwd_vocab(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               const float *embed, const int *tokens, int len,
                                               float *part, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_embed_off eo;
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!embed || !tokens || !part)
        return TP_CUDA_NULL("embed, tokens, part");
    kern_tp_embed_off(d, tp->size, &eo);
    int h = d->hidden, vs = d->vocab / tp->size;
    BSIPIPE_LAUNCH(k_tp_embed_vocab, nblocks((size_t)len * h, 256), 256, 0, s, h, d->vocab, vs,
                   tp->rank * vs, embed + eo.wte, tokens, len, part);
    return launched();
}

extern "C" int bsipipe_cuda_tp_embed_fwd_pos(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             const float *embed, int start, int len, float *x,
                                             cudaStream_t s, cublasHandle_t hb)
{
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, start, len));
    if (!embed || !x)
        return TP_CUDA_NULL("embed, x");
    /* read only: the kernel's fwd direction never writes wpe */
    return tp_cuda_embed_pos(d, tp, (float *)embed, start, len, x, 1, s);
}

extern "C" int bsipipe_cuda_tp_embed_bwd_pos(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             float *embed_grad, int start, int len, const float *dx,
                                             cudaStream_t s, cublasHandle_t hb)
{
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, start, len));
    if (!embed_grad || !dx)
        return TP_CUDA_NULL("embed_grad, dx");
    /* read only: the kernel's bwd direction never writes x */
    return tp_cuda_embed_pos(d, tp, embed_grad, start, len, (float *)dx, 0, s);
}

extern "C" int bsipipe_cuda_tp_embed_bwd_vocab(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               float *embed_grad, const int *tokens, int len,
                                               const float *gath, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_embed_off eo;
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!embed_grad || !tokens || !gath)
        return TP_CUDA_NULL("embed_grad, tokens, gath");
    kern_tp_embed_off(d, tp->size, &eo);
    int h = d->hidden, vs = d->vocab / tp->size;
    BSIPIPE_LAUNCH(k_tp_embed_bwd_vocab, nblocks((size_t)len * h, 256), 256, 0, s, h, vs,
                   tp->rank * vs, embed_grad + eo.wte, tokens, len, gath);
    return launched();
}

extern "C" int bsipipe_cuda_tp_head_fwd_norm(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             const float *head, int len, const float *x, float *xn,
                                             float *st, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_head_off ho;
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!head || !x || !xn || !st)
        return TP_CUDA_NULL("head, x, xn, st");
    kern_tp_head_off(d, tp->size, &ho);
    return norm_fwd(s, len / tp->size, d->hidden, x, head + ho.nfw, ho.nfb >= 0 ? head + ho.nfb : NULL,
                    xn, st);
}

extern "C" int bsipipe_cuda_tp_head_fwd_logits(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               const float *head, int len, const float *gath,
                                               float *logits, double *ce, cudaStream_t s,
                                               cublasHandle_t hb)
{
    bsipipe_head_off ho;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!hb || !head || !gath || !logits || !ce)
        return TP_CUDA_NULL("cublas handle, head, gath, logits, ce");
    RC_TRY(set_stream(hb, s));
    kern_tp_head_off(d, tp->size, &ho);
    int h = d->hidden, vs = d->vocab / tp->size;
    RC_TRY(lin_fwd(hb, len, vs, h, gath, h, head + ho.wlm, h, 0.0f, logits, vs));
    BSIPIPE_LAUNCH(k_tp_rowmax, len, CE_NT, 0, s, vs, logits, ce);
    return launched();
}

extern "C" int bsipipe_cuda_tp_head_ce_sums(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                            int len, const float *logits, const int *targets,
                                            double *ce, cudaStream_t s, cublasHandle_t hb)
{
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!logits || !targets || !ce)
        return TP_CUDA_NULL("logits, targets, ce");
    int vs = d->vocab / tp->size;
    BSIPIPE_LAUNCH(k_tp_ce_sums, len, CE_NT, 0, s, len, vs, tp->rank * vs, logits, targets, ce);
    return launched();
}

extern "C" int bsipipe_cuda_tp_head_bwd_logits(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                               const float *head, float *head_grad, int len,
                                               const float *gath, const int *targets,
                                               double grad_scale, const double *ce, float *logits,
                                               float *part, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_head_off ho;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!hb || !head || !head_grad || !gath || !targets || !ce || !logits || !part)
        return TP_CUDA_NULL("cublas handle, head, head_grad, gath, targets, ce, logits, part");
    RC_TRY(set_stream(hb, s));
    kern_tp_head_off(d, tp->size, &ho);
    int h = d->hidden, vs = d->vocab / tp->size;
    BSIPIPE_LAUNCH(k_tp_ce_grad, len, CE_NT, 0, s, len, vs, tp->rank * vs, logits, targets, grad_scale,
                   ce);
    RC_TRY(launched());
    RC_TRY(lin_bwd_w(hb, len, vs, h, logits, vs, gath, h, head_grad + ho.wlm, h));
    return lin_bwd_x(hb, len, vs, h, logits, vs, head + ho.wlm, h, 0.0f, part, h);
}

extern "C" int bsipipe_cuda_tp_head_bwd_norm(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                             const float *head, float *head_grad, int len,
                                             const float *x, const float *st, const float *red,
                                             float *dx, cudaStream_t s, cublasHandle_t hb)
{
    bsipipe_head_off ho;
    (void)hb;
    RC_TRY(tp_cuda_piece(d, tp, 0, len));
    if (!head || !head_grad || !x || !st || !red || !dx)
        return TP_CUDA_NULL("head, head_grad, x, st, red, dx");
    kern_tp_head_off(d, tp->size, &ho);
    return norm_bwd(s, len / tp->size, d->hidden, x, head + ho.nfw, ho.nfb >= 0, st, red, dx,
                    head_grad + ho.nfw, ho.nfb >= 0 ? head_grad + ho.nfb : NULL, 0);
}
