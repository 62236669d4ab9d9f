/* kernels/cpu/tp_tmpl.h: the tensor-parallel kernels (bsipipe_tp.h), written
 * once for a real type. Included at the end of kernels_f32.c / kernels_f64.c,
 * after kernels_tmpl.h, whose static helpers (lin_*, norm_*, rope, the
 * activations) it uses, so the sharded and unsharded paths share every
 * elementwise formula and differ only in how the matrix products are cut.
 *
 * Notation: h = hidden, size = D_t, r = rank, ls = len / size (the rank's
 * token slice), hs = h / size (its q/k/v columns = H / size heads), fs = F /
 * size, a1s = A1 / size, vs = V / size. */
#include "base/bsipipe_error.h"
#include "kernels/bsipipe_tp.h"

#define TP_DT (BSIPIPE_REAL_IS_FLOAT ? BSIPIPE_TP_F32 : BSIPIPE_TP_F64)

/* The piece [start, start+len) on rank tp: dims, degree, divisibility. */
static int tp_piece(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start, int len)
{
    if (bsipipe_model_dims_check(d) || !tp)
        return bsipipe_error_set(-EINVAL, "tensor parallelism: bad model dimensions");
    if (start < 0 || len < 1 || start > d->seq_len - len)
        return bsipipe_error_set(-EINVAL, "piece [%d, %d + %d) outside the sequence [0, %d)",
                                 start, start, len, d->seq_len);
    return bsipipe_tp_check(d, tp, len);
}

#define TP_NULL(...) bsipipe_error_set(-EINVAL, "tensor-parallel kernel: NULL buffer (%s)", \
                                       __VA_ARGS__)

/* ------------------------------------------------------ shard / unshard */

static void tp_move(R *dst, const R *src, size_t n, int add)
{
    if (add)
        for (size_t i = 0; i < n; i++)
            dst[i] += src[i];
    else
        memcpy(dst, src, sizeof(R) * n);
}

/* to_full = 0: shard <- full; 1: full <- shard (replicas copied, or added
 * when add). full and shard point at the part. */
static int tp_copy(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int part, R *full,
                   R *shard, int to_full, int add)
{
    bsipipe_tp_tensor_info_t t[8];
    int n, rc = bsipipe_tp_check(d, tp, 0);
    if (rc)
        return rc;
    if (part < -1 || part > d->n_layers)
        return bsipipe_error_set(-EINVAL, "part %d outside [-1, %d]", part, d->n_layers);
    if (!full || !shard)
        return TP_NULL("parameters");
    n = kern_tp_part_tensors(d, tp->size, part, t);
    for (int i = 0; i < n; i++) {
        R *f = full + t[i].full_offset, *s = shard + t[i].offset;
        int cols = t[i].full_cols;
        if (t[i].split == BSIPIPE_TP_REPLICATED) {
            size_t cnt = (size_t)t[i].rows * cols;
            if (to_full)
                tp_move(f, s, cnt, add);
            else
                memcpy(s, f, sizeof(R) * cnt);
        } else if (t[i].split == BSIPIPE_TP_SPLIT_ROWS) {
            /* rows of group g: [g*Rg + r*rs, g*Rg + (r+1)*rs) */
            int rg = t[i].full_rows / t[i].groups, rs = rg / tp->size;
            for (int g = 0; g < t[i].groups; g++) {
                R *fb = f + IX(g * rg + tp->rank * rs, 0, cols), *sb = s + IX(g * rs, 0, cols);
                size_t cnt = (size_t)rs * cols;
                if (to_full)
                    memcpy(fb, sb, sizeof(R) * cnt);
                else
                    memcpy(sb, fb, sizeof(R) * cnt);
            }
        } else {
            int cs = cols / tp->size;
            for (int row = 0; row < t[i].full_rows; row++) {
                R *fb = f + IX(row, tp->rank * cs, cols), *sb = s + IX(row, 0, cs);
                if (to_full)
                    memcpy(fb, sb, sizeof(R) * cs);
                else
                    memcpy(sb, fb, sizeof(R) * cs);
            }
        }
    }
    return 0;
}

int FN(bsipipe_tp_shard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int part,
                         const R *full, R *shard)
{
    return tp_copy(d, tp, part, (R *)full, shard, 0, 0);
}

int FN(bsipipe_tp_unshard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int part,
                           const R *shard, R *full, int add_replicated)
{
    return tp_copy(d, tp, part, full, (R *)shard, 1, add_replicated);
}

static int tp_model_copy(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, R *full,
                         R *shard, int to_full, int add)
{
    int rc = bsipipe_tp_check(d, tp, 0);
    if (rc)
        return rc;
    for (int part = -1; part <= d->n_layers && !rc; part++) {
        long fo = part < 0 ? 0 : bsipipe_model_layer_offset(d, part);
        long so = part < 0 ? 0 : bsipipe_tp_layer_offset(d, tp->size, part);
        if (!full || !shard)
            return TP_NULL("parameters");
        rc = tp_copy(d, tp, part, full + fo, shard + so, to_full, add);
    }
    return rc;
}

int FN(bsipipe_tp_model_shard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                               const R *full, R *shard)
{
    return tp_model_copy(d, tp, (R *)full, shard, 0, 0);
}

int FN(bsipipe_tp_model_unshard)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const R *shard, R *full, int add_replicated)
{
    return tp_model_copy(d, tp, full, (R *)shard, 1, add_replicated);
}

int FN(bsipipe_tp_reduce_replicated)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                     const bsipipe_tp_comm_t *comm, int part, R *grads)
{
    bsipipe_tp_tensor_info_t t[8];
    int n, rc = bsipipe_tp_check(d, tp, 0);
    if (rc)
        return rc;
    if (part < -1 || part > d->n_layers || !comm || !grads)
        return bsipipe_error_set(-EINVAL, "reduce_replicated: part %d outside [-1, %d] or "
                                          "NULL comm/grads", part, d->n_layers);
    n = kern_tp_part_tensors(d, tp->size, part, t);
    for (int i = 0; i < n && !rc; i++)
        if (t[i].split == BSIPIPE_TP_REPLICATED)
            rc = comm->all_reduce(comm->ctx, tp->rank, grads + t[i].offset,
                                  (long)t[i].rows * t[i].cols, TP_DT, BSIPIPE_TP_SUM);
    return rc;
}

/* --------------------------------------------------------- layer segments */

struct tp_layer {
    int h, hs, H, hd, fs, a1s, ls, llama;
    struct lp p;
    struct bsipipe_stash_off so;
};

static int tp_layer_init(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int start,
                         int len, const R *layer, struct tp_layer *t)
{
    struct bsipipe_layer_off lo;
    int rc = tp_piece(d, tp, start, len);
    if (rc)
        return rc;
    if (!layer)
        return TP_NULL("layer parameters");
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

static void tp_grads(const bsipipe_model_dims_t *d, int size, R *grads, struct lg *g)
{
    struct bsipipe_layer_off lo;
    kern_tp_layer_off(d, size, &lo);
    layer_gptrs(&lo, grads, g);
}

int FN(bsipipe_tp_layer_fwd_norm1)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, const R *layer, const R *x, R *stash)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!x || !stash)
        return TP_NULL("x, stash");
    memmove(stash + t.so.x, x, sizeof(R) * (size_t)t.ls * t.h);
    norm_fwd(t.ls, t.h, stash + t.so.x, t.p.n1w, t.p.n1b, stash + t.so.n1, stash + t.so.s1);
    return 0;
}

int FN(bsipipe_tp_layer_fwd_attn)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                  int start, int len, const R *layer, const R *gath, R *stash,
                                  R *kv, R *part)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, start, len, layer, &t);
    if (rc)
        return rc;
    if (!gath || !stash || !kv || !part)
        return TP_NULL("gath, stash, kv, part");
    int h = t.h, hs = t.hs;
    R *K = kv, *V = kv + (size_t)d->seq_len * hs, *q = stash + t.so.q, *att = stash + t.so.att;
    /* wqkv shard rows: the rank's q rows, then its k rows, then its v rows */
    lin_fwd(len, hs, h, gath, h, t.p.wqkv, h, (R)0, q, hs);
    lin_fwd(len, hs, h, gath, h, t.p.wqkv + IX(hs, 0, h), h, (R)0, K + IX(start, 0, hs), hs);
    lin_fwd(len, hs, h, gath, h, t.p.wqkv + IX(2 * hs, 0, h), h, (R)0, V + IX(start, 0, hs), hs);
    if (t.llama) {
        rope(len, t.H, t.hd, start, q, hs, 1);
        rope(len, t.H, t.hd, start, K + IX(start, 0, hs), hs, 1);
    }
    rc = FN(bsipipe_attention_forward)(t.H, t.hd, start, len, q, hs, K, V, hs, att, hs,
                                       stash + t.so.lse);
    if (rc)
        return rc;
    lin_fwd(len, h, hs, att, hs, t.p.wo, hs, (R)0, part, h); /* row-parallel: partial */
    return 0;
}

int FN(bsipipe_tp_layer_fwd_norm2)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, const R *layer, const R *red, R *stash)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!red || !stash)
        return TP_NULL("red, stash");
    R *x = stash + t.so.x, *x2 = stash + t.so.x2;
    for (size_t i = 0; i < (size_t)t.ls * t.h; i++)
        x2[i] = x[i] + red[i];
    norm_fwd(t.ls, t.h, x2, t.p.n2w, t.p.n2b, stash + t.so.n2, stash + t.so.s2);
    return 0;
}

int FN(bsipipe_tp_layer_fwd_mlp)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 int len, const R *layer, const R *gath, R *stash, R *part)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!gath || !stash || !part)
        return TP_NULL("gath, stash, part");
    R *a1 = stash + t.so.a1, *a2 = stash + t.so.a2;
    /* LLaMA shard rows: the rank's gate rows then its up rows, so the local
     * a1 is [gate | up] like the unsharded one */
    lin_fwd(len, t.a1s, t.h, gath, t.h, t.p.w1, t.h, (R)0, a1, t.a1s);
    if (t.llama)
        swiglu_fwd(len, t.fs, a1, a2);
    else
        gelu_fwd((size_t)len * t.fs, a1, a2);
    lin_fwd(len, t.h, t.fs, a2, t.fs, t.p.w2, t.fs, (R)0, part, t.h);
    return 0;
}

int FN(bsipipe_tp_layer_fwd_out)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 int len, const R *stash, const R *red, R *y)
{
    struct bsipipe_stash_off so;
    int rc = tp_piece(d, tp, 0, len);
    if (rc)
        return rc;
    if (!stash || !red || !y)
        return TP_NULL("stash, red, y");
    kern_tp_stash_off(d, tp->size, len, &so);
    const R *x2 = stash + so.x2;
    for (size_t i = 0; i < (size_t)(len / tp->size) * d->hidden; i++)
        y[i] = x2[i] + red[i];
    return 0;
}

/* The backward segments' two halves, shared by the fused segments and the
 * split (ZeroBubble B / W) ones so both run the same products on the same
 * operands: the input half writes the partial input gradient (and da1 or
 * dqkv, which the weight half reads); the weight half adds to the shard's
 * weight gradients. */
static void tp_mlp_bwd_input(const struct tp_layer *t, int len, const R *stash, const R *gdy,
                             R *da2, R *da1, R *part)
{
    int h = t->h, fs = t->fs, a1s = t->a1s;
    const R *a1 = stash + t->so.a1;
    lin_bwd_x(len, h, fs, gdy, h, t->p.w2, fs, (R)0, da2, fs);
    if (t->llama)
        swiglu_bwd(len, fs, a1, da2, da1);
    else
        gelu_bwd((size_t)len * fs, a1, da2, da1);
    lin_bwd_x(len, a1s, h, da1, a1s, t->p.w1, h, (R)0, part, h); /* dn2, partial */
}

static void tp_mlp_bwd_weight(const struct tp_layer *t, int len, const struct lg *g, const R *stash,
                              const R *gdy, const R *da1, const R *gath)
{
    int h = t->h, fs = t->fs, a1s = t->a1s;
    lin_bwd_w(len, h, fs, gdy, h, stash + t->so.a2, fs, g->w2, fs);
    lin_bwd_w(len, a1s, h, da1, a1s, gath, h, g->w1, h);
}

/* datt [len, d/size] is scratch; dqkv [len, 3 d/size] is what the weight
 * half reads. */
static int tp_attn_bwd_input(const bsipipe_model_dims_t *d, const struct tp_layer *t, int start,
                             int len, const R *stash, const R *kv, R *dkv, const R *gdy, R *datt,
                             R *dqkv, R *part)
{
    int h = t->h, hs = t->hs;
    size_t rows = (size_t)d->seq_len * hs;
    const R *K = kv, *V = kv + rows, *q = stash + t->so.q, *att = stash + t->so.att;
    R *dK = dkv, *dV = dkv + rows;
    lin_bwd_x(len, h, hs, gdy, h, t->p.wo, hs, (R)0, datt, hs);
    int rc = FN(bsipipe_attention_backward)(t->H, t->hd, start, len, q, hs, K, V, hs, att, datt, hs,
                                            stash + t->so.lse, dqkv, 3 * hs, dK, dV);
    if (rc)
        return rc;
    for (int i = 0; i < len; i++) {
        memcpy(dqkv + IX(i, hs, 3 * hs), dK + IX(start + i, 0, hs), sizeof(R) * hs);
        memcpy(dqkv + IX(i, 2 * hs, 3 * hs), dV + IX(start + i, 0, hs), sizeof(R) * hs);
    }
    if (t->llama) {
        rope(len, t->H, t->hd, start, dqkv, 3 * hs, -1);
        rope(len, t->H, t->hd, start, dqkv + hs, 3 * hs, -1);
    }
    lin_bwd_x(len, 3 * hs, h, dqkv, 3 * hs, t->p.wqkv, h, (R)0, part, h); /* dn1, partial */
    return 0;
}

static void tp_attn_bwd_weight(const struct tp_layer *t, int len, const struct lg *g, const R *stash,
                               const R *gdy, const R *dqkv, const R *gath)
{
    int h = t->h, hs = t->hs;
    lin_bwd_w(len, h, hs, gdy, h, stash + t->so.att, hs, g->wo, hs);
    lin_bwd_w(len, 3 * hs, h, dqkv, 3 * hs, gath, h, g->wqkv, h);
}

int FN(bsipipe_tp_layer_bwd_mlp)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 int len, const R *layer, R *grads, const R *stash,
                                 const R *gdy, const R *gath, R *part, R *work)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!grads || !stash || !gdy || !gath || !part || !work)
        return TP_NULL("grads, stash, gdy, gath, part, work");
    tp_grads(d, tp->size, grads, &g);
    R *da2 = work, *da1 = work + (size_t)len * t.fs;
    tp_mlp_bwd_input(&t, len, stash, gdy, da2, da1, part);
    tp_mlp_bwd_weight(&t, len, &g, stash, gdy, da1, gath);
    return 0;
}

int FN(bsipipe_tp_layer_bwd_norm2)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, const R *layer, R *grads, const R *stash,
                                   const R *dy, const R *red, R *dx2)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!grads || !stash || !dy || !red || !dx2)
        return TP_NULL("grads, stash, dy, red, dx2");
    tp_grads(d, tp->size, grads, &g);
    memmove(dx2, dy, sizeof(R) * (size_t)t.ls * t.h);
    norm_bwd(t.ls, t.h, stash + t.so.x2, t.p.n2w, t.p.n2b != NULL, stash + t.so.s2, red, dx2,
             g.n2w, g.n2b, 1);
    return 0;
}

int FN(bsipipe_tp_layer_bwd_attn)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                  int start, int len, const R *layer, R *grads,
                                  const R *stash, const R *kv, R *dkv, const R *gdy,
                                  const R *gath, R *part, R *work)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, start, len, layer, &t);
    if (rc)
        return rc;
    if (!grads || !stash || !kv || !dkv || !gdy || !gath || !part || !work)
        return TP_NULL("grads, stash, kv, dkv, gdy, gath, part, work");
    tp_grads(d, tp->size, grads, &g);
    R *datt = work, *dqkv = work + (size_t)len * t.hs;
    rc = tp_attn_bwd_input(d, &t, start, len, stash, kv, dkv, gdy, datt, dqkv, part);
    if (rc)
        return rc;
    tp_attn_bwd_weight(&t, len, &g, stash, gdy, dqkv, gath);
    return 0;
}

/* ---- split backward (ZeroBubble B / W) ----
 * The fused segments above with their weight products deferred: the input
 * half saves what they read (the two gathered output gradients, da1 and
 * dqkv) in the layer's wstash; the weight half reads it with the forward's
 * stash and the gathered norm output, all-gathered again before it, as the
 * planner charges (2 all-gathers per layer in W, 4 collectives in B). Same
 * products on the same operands: the gradients are the fused ones, bit for
 * bit, when the W's run in the B's order. */

/* Offsets in one layer's wstash: gdy of the MLP and of the attention
 * [len, d], da1 [len, A1/size], dqkv [len, 3 d/size]. */
static void tp_wst_off(const struct tp_layer *t, int len, size_t o[4])
{
    o[0] = 0;
    o[1] = (size_t)len * t->h;
    o[2] = 2 * (size_t)len * t->h;
    o[3] = o[2] + (size_t)len * t->a1s;
}

int FN(bsipipe_tp_layer_bwd_mlp_x)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, const R *layer, const R *stash, const R *gdy,
                                   R *part, R *work, R *wst)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!stash || !gdy || !part || !work || !wst)
        return TP_NULL("stash, gdy, part, work, wstash");
    size_t o[4];
    tp_wst_off(&t, len, o);
    tp_mlp_bwd_input(&t, len, stash, gdy, work, wst + o[2], part);
    memcpy(wst + o[0], gdy, sizeof(R) * (size_t)len * t.h);
    return 0;
}

int FN(bsipipe_tp_layer_bwd_attn_x)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                    int start, int len, const R *layer, const R *stash,
                                    const R *kv, R *dkv, const R *gdy, R *part, R *work, R *wst)
{
    struct tp_layer t;
    int rc = tp_layer_init(d, tp, start, len, layer, &t);
    if (rc)
        return rc;
    if (!stash || !kv || !dkv || !gdy || !part || !work || !wst)
        return TP_NULL("stash, kv, dkv, gdy, part, work, wstash");
    size_t o[4];
    tp_wst_off(&t, len, o);
    rc = tp_attn_bwd_input(d, &t, start, len, stash, kv, dkv, gdy, work, wst + o[3], part);
    if (rc)
        return rc;
    memcpy(wst + o[1], gdy, sizeof(R) * (size_t)len * t.h);
    return 0;
}

/* tp_layer_init reads the layer only for offsets: the gradient vector has
 * the parameters' layout. */
int FN(bsipipe_tp_layer_wgrad_mlp)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, R *grads, const R *stash, const R *wst,
                                   const R *gath)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, 0, len, grads, &t);
    if (rc)
        return rc;
    if (!stash || !wst || !gath)
        return TP_NULL("stash, wstash, gath");
    tp_grads(d, tp->size, grads, &g);
    size_t o[4];
    tp_wst_off(&t, len, o);
    tp_mlp_bwd_weight(&t, len, &g, stash, wst + o[0], wst + o[2], gath);
    return 0;
}

int FN(bsipipe_tp_layer_wgrad_attn)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                    int len, R *grads, const R *stash, const R *wst,
                                    const R *gath)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, 0, len, grads, &t);
    if (rc)
        return rc;
    if (!stash || !wst || !gath)
        return TP_NULL("stash, wstash, gath");
    tp_grads(d, tp->size, grads, &g);
    size_t o[4];
    tp_wst_off(&t, len, o);
    tp_attn_bwd_weight(&t, len, &g, stash, wst + o[1], wst + o[3], gath);
    return 0;
}

int FN(bsipipe_tp_layer_bwd_norm1)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   int len, const R *layer, R *grads, const R *stash,
                                   const R *dx2, const R *red, R *dx)
{
    struct tp_layer t;
    struct lg g;
    int rc = tp_layer_init(d, tp, 0, len, layer, &t);
    if (rc)
        return rc;
    if (!grads || !stash || !dx2 || !red || !dx)
        return TP_NULL("grads, stash, dx2, red, dx");
    tp_grads(d, tp->size, grads, &g);
    memmove(dx, dx2, sizeof(R) * (size_t)t.ls * t.h);
    norm_bwd(t.ls, t.h, stash + t.so.x, t.p.n1w, t.p.n1b != NULL, stash + t.so.s1, red, dx,
             g.n1w, g.n1b, 1);
    return 0;
}

/* ---------------------------------------------------------- chunk drivers */

#define AG(src, dst, cnt)                                                               \
    do {                                                                                \
        if ((rc = comm->all_gather(comm->ctx, tp->rank, (src), (dst), (cnt), TP_DT))) \
            return rc;                                                                  \
    } while (0)
#define RS(src, dst, cnt)                                                                   \
    do {                                                                                    \
        if ((rc = comm->reduce_scatter(comm->ctx, tp->rank, (src), (dst), (cnt), TP_DT))) \
            return rc;                                                                      \
    } while (0)
#define SEG(call)              \
    do {                       \
        if ((rc = (call)))     \
            return rc;         \
    } while (0)

static int tp_chunk_check(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                          const bsipipe_tp_comm_t *comm, int l0, int l1, int start, int len)
{
    int rc = tp_piece(d, tp, start, len);
    if (rc)
        return rc;
    if (l0 < 0 || l1 <= l0 || l1 > d->n_layers)
        return bsipipe_error_set(-EINVAL, "chunk layers [%d, %d) outside [0, %d)", l0, l1,
                                 d->n_layers);
    if (!comm || !comm->all_gather || !comm->reduce_scatter || !comm->all_reduce)
        return bsipipe_error_set(-EINVAL, "tensor parallelism: incomplete communicator");
    return 0;
}

int FN(bsipipe_tp_chunk_forward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const bsipipe_tp_comm_t *comm, int l0, int l1, int start,
                                 int len, const R *layers, const R *x_in, R *x_out, R *stash,
                                 R *kv, R *work)
{
    struct bsipipe_stash_off so;
    struct bsipipe_tp_work_off wo;
    int rc = tp_chunk_check(d, tp, comm, l0, l1, start, len);
    if (rc)
        return rc;
    if (!layers || !x_in || !x_out || !stash || !kv || !work)
        return TP_NULL("layers, x_in, x_out, stash, kv, work");
    kern_tp_stash_off(d, tp->size, len, &so);
    kern_tp_work_off(d, tp->size, len, &wo);
    long lt = bsipipe_tp_layer_params(d, tp->size), kvs = bsipipe_tp_kv_size(d, tp->size);
    long cnt = (long)(len / tp->size) * d->hidden; /* one rank's slice */
    R *gath = work + wo.gath, *part = work + wo.part, *red = work + wo.red;
    const R *x = x_in;
    for (int l = l0; l < l1; l++) {
        size_t i = (size_t)(l - l0);
        const R *lay = layers + i * (size_t)lt;
        R *st = stash + i * (size_t)so.total, *kvl = kv + i * (size_t)kvs;
        /* the layer's output goes straight into the next layer's stash.x */
        R *y = l + 1 < l1 ? st + so.total + so.x : x_out;
        SEG(FN(bsipipe_tp_layer_fwd_norm1)(d, tp, len, lay, x, st));
        AG(st + so.n1, gath, cnt);
        SEG(FN(bsipipe_tp_layer_fwd_attn)(d, tp, start, len, lay, gath, st, kvl, part));
        RS(part, red, cnt);
        SEG(FN(bsipipe_tp_layer_fwd_norm2)(d, tp, len, lay, red, st));
        AG(st + so.n2, gath, cnt);
        SEG(FN(bsipipe_tp_layer_fwd_mlp)(d, tp, len, lay, gath, st, part));
        RS(part, red, cnt);
        SEG(FN(bsipipe_tp_layer_fwd_out)(d, tp, len, st, red, y));
        x = y;
    }
    return 0;
}

int FN(bsipipe_tp_chunk_backward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                  const bsipipe_tp_comm_t *comm, int l0, int l1, int start,
                                  int len, const R *layers, R *grads, const R *dy, R *dx,
                                  const R *stash, const R *kv, R *dkv, R *work)
{
    struct bsipipe_stash_off so;
    struct bsipipe_tp_work_off wo;
    int rc = tp_chunk_check(d, tp, comm, l0, l1, start, len);
    if (rc)
        return rc;
    if (!layers || !grads || !dy || !dx || !stash || !kv || !dkv || !work)
        return TP_NULL("layers, grads, dy, dx, stash, kv, dkv, work");
    kern_tp_stash_off(d, tp->size, len, &so);
    kern_tp_work_off(d, tp->size, len, &wo);
    long lt = bsipipe_tp_layer_params(d, tp->size), kvs = bsipipe_tp_kv_size(d, tp->size);
    long cnt = (long)(len / tp->size) * d->hidden;
    R *gath = work + wo.gath, *gdy = work + wo.gdy, *part = work + wo.part;
    R *red = work + wo.red, *dx2 = work + wo.dx2, *g = work + wo.dy, *seg = work + wo.seg;
    memmove(g, dy, sizeof(R) * (size_t)cnt);
    for (int l = l1 - 1; l >= l0; l--) {
        size_t i = (size_t)(l - l0);
        const R *lay = layers + i * (size_t)lt, *st = stash + i * (size_t)so.total;
        R *gr = grads + i * (size_t)lt;
        AG(g, gdy, cnt);
        AG(st + so.n2, gath, cnt);
        SEG(FN(bsipipe_tp_layer_bwd_mlp)(d, tp, len, lay, gr, st, gdy, gath, part, seg));
        RS(part, red, cnt);
        SEG(FN(bsipipe_tp_layer_bwd_norm2)(d, tp, len, lay, gr, st, g, red, dx2));
        AG(dx2, gdy, cnt);
        AG(st + so.n1, gath, cnt);
        SEG(FN(bsipipe_tp_layer_bwd_attn)(d, tp, start, len, lay, gr, st, kv + i * (size_t)kvs,
                                          dkv + i * (size_t)kvs, gdy, gath, part, seg));
        RS(part, red, cnt);
        SEG(FN(bsipipe_tp_layer_bwd_norm1)(d, tp, len, lay, gr, st, dx2, red, g));
    }
    memmove(dx, g, sizeof(R) * (size_t)cnt);
    return 0;
}

/* -------------------------------------------------------------- embedding */

static int tp_tokens(const bsipipe_model_dims_t *d, const int *tokens, int len, const char *what)
{
    if (!tokens)
        return TP_NULL(what);
    for (int i = 0; i < len; i++)
        if (tokens[i] < 0 || tokens[i] >= d->vocab)
            return bsipipe_error_set(-EINVAL, "%s[%d] = %d outside the vocabulary [0, %d)",
                                     what, i, tokens[i], d->vocab);
    return 0;
}

int FN(bsipipe_tp_embed_fwd_vocab)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   const R *embed, const int *tokens, int len, R *part)
{
    struct bsipipe_embed_off eo;
    int rc = tp_piece(d, tp, 0, len);
    if (rc || (rc = tp_tokens(d, tokens, len, "tokens")))
        return rc;
    if (!embed || !part)
        return TP_NULL("embed, part");
    kern_tp_embed_off(d, tp->size, &eo);
    int h = d->hidden, vs = d->vocab / tp->size, v0 = tp->rank * vs;
    for (int i = 0; i < len; i++) {
        R *row = part + IX(i, 0, h);
        int t = tokens[i] - v0;
        if (t >= 0 && t < vs)
            memcpy(row, embed + eo.wte + IX(t, 0, h), sizeof(R) * h);
        else
            memset(row, 0, sizeof(R) * h);
    }
    return 0;
}

int FN(bsipipe_tp_embed_fwd_pos)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const R *embed, int start, int len, R *x)
{
    struct bsipipe_embed_off eo;
    int rc = tp_piece(d, tp, start, len);
    if (rc)
        return rc;
    if (!embed || !x)
        return TP_NULL("embed, x");
    kern_tp_embed_off(d, tp->size, &eo);
    if (eo.wpe < 0)
        return 0;
    int h = d->hidden, ls = len / tp->size, p0 = start + tp->rank * ls;
    for (int i = 0; i < ls; i++) {
        const R *pe = embed + eo.wpe + IX(p0 + i, 0, h);
        R *xr = x + IX(i, 0, h);
        for (int c = 0; c < h; c++)
            xr[c] += pe[c];
    }
    return 0;
}

int FN(bsipipe_tp_embed_bwd_pos)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 R *embed_grad, int start, int len, const R *dx)
{
    struct bsipipe_embed_off eo;
    int rc = tp_piece(d, tp, start, len);
    if (rc)
        return rc;
    if (!embed_grad || !dx)
        return TP_NULL("embed_grad, dx");
    kern_tp_embed_off(d, tp->size, &eo);
    if (eo.wpe < 0)
        return 0;
    int h = d->hidden, ls = len / tp->size, p0 = start + tp->rank * ls;
    for (int i = 0; i < ls; i++) {
        R *pe = embed_grad + eo.wpe + IX(p0 + i, 0, h);
        const R *dr = dx + IX(i, 0, h);
        for (int c = 0; c < h; c++)
            pe[c] += dr[c];
    }
    return 0;
}

int FN(bsipipe_tp_embed_bwd_vocab)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   R *embed_grad, const int *tokens, int len, const R *gath)
{
    struct bsipipe_embed_off eo;
    int rc = tp_piece(d, tp, 0, len);
    if (rc || (rc = tp_tokens(d, tokens, len, "tokens")))
        return rc;
    if (!embed_grad || !gath)
        return TP_NULL("embed_grad, gath");
    kern_tp_embed_off(d, tp->size, &eo);
    int h = d->hidden, vs = d->vocab / tp->size, v0 = tp->rank * vs;
    for (int i = 0; i < len; i++) {
        int t = tokens[i] - v0;
        if (t < 0 || t >= vs)
            continue;
        R *te = embed_grad + eo.wte + IX(t, 0, h);
        const R *dr = gath + IX(i, 0, h);
        for (int c = 0; c < h; c++)
            te[c] += dr[c];
    }
    return 0;
}

static int tp_comm_check(const bsipipe_tp_comm_t *comm)
{
    if (!comm || !comm->all_gather || !comm->reduce_scatter || !comm->all_reduce)
        return bsipipe_error_set(-EINVAL, "tensor parallelism: incomplete communicator");
    return 0;
}

int FN(bsipipe_tp_embed_forward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const bsipipe_tp_comm_t *comm, const R *embed,
                                 const int *tokens, int start, int len, R *x, R *work)
{
    int rc = tp_piece(d, tp, start, len);
    if (rc || (rc = tp_comm_check(comm)))
        return rc;
    if (!work)
        return TP_NULL("work");
    SEG(FN(bsipipe_tp_embed_fwd_vocab)(d, tp, embed, tokens, len, work));
    RS(work, x, (long)(len / tp->size) * d->hidden);
    return FN(bsipipe_tp_embed_fwd_pos)(d, tp, embed, start, len, x);
}

int FN(bsipipe_tp_embed_backward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                  const bsipipe_tp_comm_t *comm, R *embed_grad,
                                  const int *tokens, int start, int len, const R *dx, R *work)
{
    int rc = tp_piece(d, tp, start, len);
    if (rc || (rc = tp_comm_check(comm)))
        return rc;
    if (!work)
        return TP_NULL("work");
    SEG(FN(bsipipe_tp_embed_bwd_pos)(d, tp, embed_grad, start, len, dx));
    AG(dx, work, (long)(len / tp->size) * d->hidden);
    return FN(bsipipe_tp_embed_bwd_vocab)(d, tp, embed_grad, tokens, len, work);
}

/* ------------------------------------------------------------------- head */

int FN(bsipipe_tp_head_fwd_norm)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const R *head, int len, const R *x, R *xn, R *st)
{
    struct bsipipe_head_off ho;
    int rc = tp_piece(d, tp, 0, len);
    if (rc)
        return rc;
    if (!head || !x || !xn || !st)
        return TP_NULL("head, x, xn, st");
    kern_tp_head_off(d, tp->size, &ho);
    norm_fwd(len / tp->size, d->hidden, x, head + ho.nfw, ho.nfb >= 0 ? head + ho.nfb : NULL,
             xn, st);
    return 0;
}

int FN(bsipipe_tp_head_fwd_logits)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   const R *head, int len, const R *gath, R *logits, double *ce)
{
    struct bsipipe_head_off ho;
    int rc = tp_piece(d, tp, 0, len);
    if (rc)
        return rc;
    if (!head || !gath || !logits || !ce)
        return TP_NULL("head, gath, logits, ce");
    kern_tp_head_off(d, tp->size, &ho);
    int h = d->hidden, vs = d->vocab / tp->size;
    lin_fwd(len, vs, h, gath, h, head + ho.wlm, h, (R)0, logits, vs);
    for (int i = 0; i < len; i++) {
        const R *row = logits + IX(i, 0, vs);
        R mx = row[0];
        for (int c = 1; c < vs; c++)
            if (row[c] > mx)
                mx = row[c];
        ce[i] = mx;
    }
    return 0;
}

int FN(bsipipe_tp_head_ce_sums)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len,
                                const R *logits, const int *targets, double *ce)
{
    int rc = tp_piece(d, tp, 0, len);
    if (rc || (rc = tp_tokens(d, targets, len, "targets")))
        return rc;
    if (!logits || !ce)
        return TP_NULL("logits, ce");
    int vs = d->vocab / tp->size, v0 = tp->rank * vs;
    for (int i = 0; i < len; i++) {
        const R *row = logits + IX(i, 0, vs);
        R mx = (R)ce[i]; /* the global max, exactly an R */
        double se = 0;
        int t = targets[i] - v0;
        for (int c = 0; c < vs; c++) /* as the unsharded head: R difference, double exp */
            se += exp((double)(row[c] - mx));
        ce[len + i] = se;
        ce[2 * len + i] = t >= 0 && t < vs ? (double)row[t] : 0.0;
    }
    return 0;
}

int FN(bsipipe_tp_head_bwd_logits)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                   const R *head, R *head_grad, int len, const R *gath,
                                   const int *targets, double grad_scale, const double *ce,
                                   R *logits, R *part)
{
    struct bsipipe_head_off ho;
    int rc = tp_piece(d, tp, 0, len);
    if (rc || (rc = tp_tokens(d, targets, len, "targets")))
        return rc;
    if (!head || !head_grad || !gath || !ce || !logits || !part)
        return TP_NULL("head, head_grad, gath, ce, logits, part");
    kern_tp_head_off(d, tp->size, &ho);
    int h = d->hidden, vs = d->vocab / tp->size, v0 = tp->rank * vs;
    for (int i = 0; i < len; i++) {
        R *row = logits + IX(i, 0, vs);
        double lse = ce[i] + log(ce[len + i]);
        int t = targets[i] - v0;
        for (int c = 0; c < vs; c++)
            row[c] = (R)(exp((double)row[c] - lse) * grad_scale);
        if (t >= 0 && t < vs)
            row[t] -= (R)grad_scale;
    }
    lin_bwd_w(len, vs, h, logits, vs, gath, h, head_grad + ho.wlm, h);
    lin_bwd_x(len, vs, h, logits, vs, head + ho.wlm, h, (R)0, part, h);
    return 0;
}

int FN(bsipipe_tp_head_bwd_norm)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                 const R *head, R *head_grad, int len, const R *x, const R *st,
                                 const R *red, R *dx)
{
    struct bsipipe_head_off ho;
    int rc = tp_piece(d, tp, 0, len);
    if (rc)
        return rc;
    if (!head || !head_grad || !x || !st || !red || !dx)
        return TP_NULL("head, head_grad, x, st, red, dx");
    kern_tp_head_off(d, tp->size, &ho);
    norm_bwd(len / tp->size, d->hidden, x, head + ho.nfw, ho.nfb >= 0, st, red, dx,
             head_grad + ho.nfw, ho.nfb >= 0 ? head_grad + ho.nfb : NULL, 0);
    return 0;
}

/* Forward half shared by the two head drivers: up to the reduced ce. */
static int tp_head_fwd(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                       const bsipipe_tp_comm_t *comm, const R *head, int len, const R *x,
                       const int *targets, R *work, struct bsipipe_tp_head_work_off *wo,
                       double **ce)
{
    int rc = tp_piece(d, tp, 0, len);
    if (rc || (rc = tp_comm_check(comm)) || (rc = tp_tokens(d, targets, len, "targets")))
        return rc;
    if (!work)
        return TP_NULL("work");
    kern_tp_head_work_off(d, tp->size, len, wo);
    *ce = (double *)(void *)(work + wo->ce);
    SEG(FN(bsipipe_tp_head_fwd_norm)(d, tp, head, len, x, work + wo->xn, work + wo->st));
    AG(work + wo->xn, work + wo->gath, (long)(len / tp->size) * d->hidden);
    SEG(FN(bsipipe_tp_head_fwd_logits)(d, tp, head, len, work + wo->gath, work + wo->logits,
                                       *ce));
    if ((rc = comm->all_reduce(comm->ctx, tp->rank, *ce, len, BSIPIPE_TP_F64, BSIPIPE_TP_MAX)))
        return rc;
    SEG(FN(bsipipe_tp_head_ce_sums)(d, tp, len, work + wo->logits, targets, *ce));
    return comm->all_reduce(comm->ctx, tp->rank, *ce + len, 2L * len, BSIPIPE_TP_F64,
                            BSIPIPE_TP_SUM);
}

int FN(bsipipe_tp_head_forward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                const bsipipe_tp_comm_t *comm, const R *head, int len,
                                const R *x, const int *targets, double *loss, R *work)
{
    struct bsipipe_tp_head_work_off wo;
    double *ce;
    int rc;
    if (!loss)
        return TP_NULL("loss");
    SEG(tp_head_fwd(d, tp, comm, head, len, x, targets, work, &wo, &ce));
    *loss = bsipipe_tp_ce_loss(len, ce);
    return 0;
}

int FN(bsipipe_tp_head_forward_backward)(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp,
                                         const bsipipe_tp_comm_t *comm, const R *head,
                                         R *head_grad, int len, const R *x, const int *targets,
                                         double grad_scale, double *loss, R *dx, R *work)
{
    struct bsipipe_tp_head_work_off wo;
    double *ce;
    int rc;
    if (!loss || !head_grad || !dx)
        return TP_NULL("loss, head_grad, dx");
    SEG(tp_head_fwd(d, tp, comm, head, len, x, targets, work, &wo, &ce));
    *loss = bsipipe_tp_ce_loss(len, ce);
    SEG(FN(bsipipe_tp_head_bwd_logits)(d, tp, head, head_grad, len, work + wo.gath, targets,
                                       grad_scale, ce, work + wo.logits, work + wo.part));
    RS(work + wo.part, work + wo.red, (long)(len / tp->size) * d->hidden);
    return FN(bsipipe_tp_head_bwd_norm)(d, tp, head, head_grad, len, x, work + wo.st,
                                        work + wo.red, dx);
}

#undef AG
#undef RS
#undef SEG
#undef TP_NULL
#undef TP_DT
