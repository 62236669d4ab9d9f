/* kernels/cpu/model_dims.c: dims check, flat parameter layout, buffer sizes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/bsipipe_model.h"
#include "kernels/cpu/internal.h"

int bsipipe_model_dims_check(const bsipipe_model_dims_t *d)
{
    if (!d)
        return -EINVAL;
    if (d->family != BSIPIPE_MODEL_GPT && d->family != BSIPIPE_MODEL_LLAMA)
        return -EINVAL;
    if (d->n_layers < 1 || d->hidden < 1 || d->n_heads < 1 || d->ffn_hidden < 1 ||
        d->vocab < 1 || d->seq_len < 1)
        return -EINVAL;
    if (d->hidden % d->n_heads)
        return -EINVAL;
    if (d->family == BSIPIPE_MODEL_LLAMA && (d->hidden / d->n_heads) % 2)
        return -EINVAL;
    return 0;
}

int kern_a1_width(const bsipipe_model_dims_t *d)
{
    return d->family == BSIPIPE_MODEL_GPT ? d->ffn_hidden : 2 * d->ffn_hidden;
}

void kern_layer_off(const bsipipe_model_dims_t *d, struct bsipipe_layer_off *o)
{
    long h = d->hidden, f = d->ffn_hidden, at = 0;
    int gpt = d->family == BSIPIPE_MODEL_GPT;
    o->n1w = at; at += h;
    o->n1b = gpt ? at : -1; at += gpt ? h : 0;
    o->wqkv = at; at += 3 * h * h;
    o->wo = at; at += h * h;
    o->n2w = at; at += h;
    o->n2b = gpt ? at : -1; at += gpt ? h : 0;
    o->w1 = at; at += (long)kern_a1_width(d) * h;
    o->w2 = at; at += h * f;
    o->total = at;
}

void kern_embed_off(const bsipipe_model_dims_t *d, struct bsipipe_embed_off *o)
{
    long at = 0;
    o->wte = at; at += (long)d->vocab * d->hidden;
    o->wpe = d->family == BSIPIPE_MODEL_GPT ? at : -1;
    if (d->family == BSIPIPE_MODEL_GPT)
        at += (long)d->seq_len * d->hidden;
    o->total = at;
}

void kern_head_off(const bsipipe_model_dims_t *d, struct bsipipe_head_off *o)
{
    long at = 0;
    o->nfw = at; at += d->hidden;
    o->nfb = d->family == BSIPIPE_MODEL_GPT ? at : -1;
    if (d->family == BSIPIPE_MODEL_GPT)
        at += d->hidden;
    o->wlm = at; at += (long)d->vocab * d->hidden;
    o->total = at;
}

void kern_stash_off(const bsipipe_model_dims_t *d, int len, struct bsipipe_stash_off *o)
{
    long n = len, h = d->hidden, at = 0;
    o->x = at; at += n * h;
    o->n1 = at; at += n * h;
    o->s1 = at; at += 2 * n;
    o->q = at; at += n * h;
    o->att = at; at += n * h;
    o->lse = at; at += (long)d->n_heads * n;
    o->x2 = at; at += n * h;
    o->n2 = at; at += n * h;
    o->s2 = at; at += 2 * n;
    o->a1 = at; at += n * kern_a1_width(d);
    o->a2 = at; at += n * d->ffn_hidden;
    o->total = at;
}

void kern_work_off(const bsipipe_model_dims_t *d, int len, struct bsipipe_work_off *o)
{
    long n = len, h = d->hidden, at = 0;
    o->dy = at; at += n * h;
    o->dx = at; at += n * h;
    o->dn = at; at += n * h;
    o->datt = at; at += n * h;
    o->dqkv = at; at += 3 * n * h;
    o->da1 = at; at += n * kern_a1_width(d);
    o->da2 = at; at += n * d->ffn_hidden;
    o->total = at;
}

long bsipipe_model_embed_params(const bsipipe_model_dims_t *d)
{
    struct bsipipe_embed_off o;
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    kern_embed_off(d, &o);
    return o.total;
}

long bsipipe_model_layer_params(const bsipipe_model_dims_t *d)
{
    struct bsipipe_layer_off o;
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    kern_layer_off(d, &o);
    return o.total;
}

long bsipipe_model_head_params(const bsipipe_model_dims_t *d)
{
    struct bsipipe_head_off o;
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    kern_head_off(d, &o);
    return o.total;
}

long bsipipe_model_layer_offset(const bsipipe_model_dims_t *d, int l)
{
    if (bsipipe_model_dims_check(d) || l < 0 || l > d->n_layers)
        return -EINVAL;
    return bsipipe_model_embed_params(d) + (long)l * bsipipe_model_layer_params(d);
}

long bsipipe_model_params(const bsipipe_model_dims_t *d)
{
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    return bsipipe_model_layer_offset(d, d->n_layers) + bsipipe_model_head_params(d);
}

long bsipipe_model_kv_size(const bsipipe_model_dims_t *d)
{
    if (bsipipe_model_dims_check(d))
        return -EINVAL;
    return 2L * d->seq_len * d->hidden;
}

long bsipipe_model_stash_size(const bsipipe_model_dims_t *d, int len)
{
    struct bsipipe_stash_off o;
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len)
        return -EINVAL;
    kern_stash_off(d, len, &o);
    return o.total;
}

long bsipipe_model_work_size(const bsipipe_model_dims_t *d, int len)
{
    struct bsipipe_work_off o;
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len)
        return -EINVAL;
    kern_work_off(d, len, &o);
    return o.total;
}

long bsipipe_model_wstash_size(const bsipipe_model_dims_t *d, int len)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len)
        return -EINVAL;
    /* dy, dx2 [len, d], dqkv [len, 3d], da1 [len, A1] (kernels_tmpl.h wst_off) */
    return (long)len * (5L * d->hidden + kern_a1_width(d));
}

long bsipipe_model_head_work_size(const bsipipe_model_dims_t *d, int len)
{
    if (bsipipe_model_dims_check(d) || len < 1 || len > d->seq_len)
        return -EINVAL;
    /* normed x [len, d], logits [len, V], norm stats [2, len] */
    return (long)len * d->hidden + (long)len * d->vocab + 2L * len;
}

double bsipipe_model_layer_flops(const bsipipe_model_dims_t *d, int start, int len)
{
    double n = len, h = d->hidden, f = d->ffn_hidden, keys;
    if (bsipipe_model_dims_check(d) || start < 0 || len < 1 || start + len > d->seq_len)
        return -EINVAL;
    /* query i sees start + i + 1 keys */
    keys = n * start + n * (n + 1) / 2;
    return 2 * n * (3 * h * h + h * h + kern_a1_width(d) * h + f * h) + 4 * keys * h;
}

double bsipipe_model_head_flops(const bsipipe_model_dims_t *d, int len)
{
    if (bsipipe_model_dims_check(d) || len < 1)
        return -EINVAL;
    return 2.0 * len * d->hidden * d->vocab;
}

static void put(bsipipe_tensor_info_t *out, int max, int *n, const char *name, int part,
                long offset, int rows, int cols, int decay)
{
    if (out && *n < max) {
        bsipipe_tensor_info_t *t = &out[*n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->part = part;
        t->offset = offset;
        t->rows = rows;
        t->cols = cols;
        t->decay = decay;
    }
    (*n)++;
}

int bsipipe_model_tensors(const bsipipe_model_dims_t *d, bsipipe_tensor_info_t *out, int max)
{
    struct bsipipe_embed_off e;
    struct bsipipe_layer_off lo;
    struct bsipipe_head_off ho;
    char nm[32];
    int n = 0, h, L;
    long base;
    if (bsipipe_model_dims_check(d) || max < 0)
        return -EINVAL;
    h = d->hidden;
    L = d->n_layers;
    kern_embed_off(d, &e);
    kern_layer_off(d, &lo);
    kern_head_off(d, &ho);
    put(out, max, &n, "wte", -1, e.wte, d->vocab, h, 1);
    if (e.wpe >= 0)
        put(out, max, &n, "wpe", -1, e.wpe, d->seq_len, h, 1);
    for (int l = 0; l < L; l++) {
        base = bsipipe_model_layer_offset(d, l);
#define LT(field, label, rows, cols, decay)                                 \
    do {                                                                     \
        if (lo.field >= 0) {                                                 \
            snprintf(nm, sizeof nm, "layer%d.%s", l, label);                 \
            put(out, max, &n, nm, l, base + lo.field, rows, cols, decay);    \
        }                                                                    \
    } while (0)
        int gpt = d->family == BSIPIPE_MODEL_GPT;
        LT(n1w, "n1w", h, 1, 0);
        LT(n1b, "n1b", h, 1, 0);
        LT(wqkv, "wqkv", 3 * h, h, 1);
        LT(wo, "wo", h, h, 1);
        LT(n2w, "n2w", h, 1, 0);
        LT(n2b, "n2b", h, 1, 0);
        LT(w1, gpt ? "wfc" : "wgu", kern_a1_width(d), h, 1);
        LT(w2, gpt ? "wproj" : "wdown", h, d->ffn_hidden, 1);
#undef LT
    }
    base = bsipipe_model_layer_offset(d, L);
    put(out, max, &n, "nfw", L, base + ho.nfw, h, 1, 0);
    if (ho.nfb >= 0)
        put(out, max, &n, "nfb", L, base + ho.nfb, h, 1, 0);
    put(out, max, &n, "wlm", L, base + ho.wlm, d->vocab, h, 1);
    if (out && n > max)
        return -ENOSPC;
    return n;
}
