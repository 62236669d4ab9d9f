/* kernels/cpu/tp_common.c: tensor-parallel layouts, sizes, checks, shard
 * table and the in-process collectives (precision-independent parts). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bsipipe_error.h" /* the error codes every layer shares */
#include "kernels/bsipipe_tp.h"
#include "kernels/cpu/internal.h"

/* ---------------------------------------------------------------- checks */

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* "1, 2, 4" : the divisors of g (the degrees that divide everything) */
static void divisors(int g, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 1; k <= g && at + 16 < n; k++)
        if (g % k == 0)
            at += (size_t)snprintf(buf + at, n - at, "%s%d", at ? ", " : "", k);
}

static int size_check(const bsipipe_model_dims_t *d, int size, int len)
{
    static const char *what[] = {"number of heads", "FFN width", "vocabulary size",
                                 "piece length"};
    int val[4], g, n = len > 0 ? 4 : 3;
    char valid[160];
    if (bsipipe_model_dims_check(d) || size < 1)
        return bsipipe_error_set(-EINVAL, "tensor parallelism: bad model dimensions or "
                                          "degree %d < 1", size);
    val[0] = d->n_heads;
    val[1] = d->ffn_hidden;
    val[2] = d->vocab;
    val[3] = len;
    g = val[0];
    for (int i = 1; i < n; i++)
        g = gcd(g, val[i]);
    for (int i = 0; i < n; i++)
        if (val[i] % size) {
            divisors(g, valid, sizeof valid);
            return bsipipe_error_set(
                BSIPIPE_ECONFIG,
                "tensor-parallel degree D_t = %d does not divide the %s (%d): D_t must "
                "divide the heads, the FFN width%s; valid D_t here: %s",
                size, what[i], val[i],
                len > 0 ? ", the vocabulary and the piece length" : " and the vocabulary",
                valid);
        }
    return 0;
}

int bsipipe_tp_check(const bsipipe_model_dims_t *d, const bsipipe_tp_t *tp, int len)
{
    if (!tp)
        return bsipipe_error_set(-EINVAL, "tensor parallelism: NULL rank descriptor");
    if (tp->size >= 1 && (tp->rank < 0 || tp->rank >= tp->size))
        return bsipipe_error_set(-EINVAL, "tensor-parallel rank %d out of range [0, %d)",
                                 tp->rank, tp->size);
    if (d && len > d->seq_len)
        return bsipipe_error_set(-EINVAL, "piece length %d > sequence length %d", len,
                                 d->seq_len);
    return size_check(d, tp->size, len);
}

/* --------------------------------------------------------------- layouts */

void kern_tp_layer_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_layer_off *o)
{
    long h = d->hidden, hs = h / size, fs = d->ffn_hidden / size, at = 0;
    int gpt = d->family == BSIPIPE_MODEL_GPT;
    o->n1w = at; at += h;
    o->n1b = gpt ? at : -1; at += gpt ? h : 0;
    o->wqkv = at; at += 3 * hs * h;
    o->wo = at; at += h * hs;
    o->n2w = at; at += h;
    o->n2b = gpt ? at : -1; at += gpt ? h : 0;
    o->w1 = at; at += (long)kern_a1_width(d) / size * h;
    o->w2 = at; at += h * fs;
    o->total = at;
}

void kern_tp_embed_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_embed_off *o)
{
    long at = 0;
    o->wte = at; at += (long)(d->vocab / size) * d->hidden;
    o->wpe = d->family == BSIPIPE_MODEL_GPT ? at : -1;
    if (d->family == BSIPIPE_MODEL_GPT)
        at += (long)d->seq_len * d->hidden;
    o->total = at;
}

void kern_tp_head_off(const bsipipe_model_dims_t *d, int size, struct bsipipe_head_off *o)
{
    long at = 0;
    o->nfw = at; at += d->hidden;
    o->nfb = d->family == BSIPIPE_MODEL_GPT ? at : -1;
    if (d->family == BSIPIPE_MODEL_GPT)
        at += d->hidden;
    o->wlm = at; at += (long)(d->vocab / size) * d->hidden;
    o->total = at;
}

void kern_tp_stash_off(const bsipipe_model_dims_t *d, int size, int len,
                           struct bsipipe_stash_off *o)
{
    long n = len, ns = len / size, h = d->hidden, hs = h / size, at = 0;
    o->x = at; at += ns * h;
    o->n1 = at; at += ns * h;
    o->s1 = at; at += 2 * ns;
    o->q = at; at += n * hs;
    o->att = at; at += n * hs;
    o->lse = at; at += (long)(d->n_heads / size) * n;
    o->x2 = at; at += ns * h;
    o->n2 = at; at += ns * h;
    o->s2 = at; at += 2 * ns;
    o->a1 = at; at += n * (kern_a1_width(d) / size);
    o->a2 = at; at += n * (d->ffn_hidden / size);
    o->total = at;
}

long kern_tp_seg_work(const bsipipe_model_dims_t *d, int size, int len)
{
    long n = len, hs = d->hidden / size;
    long mlp = n * (kern_a1_width(d) / size + d->ffn_hidden / size); /* da1 da2 */
    long att = n * 4 * hs;                                             /* datt dqkv */
    return mlp > att ? mlp : att;
}

void kern_tp_work_off(const bsipipe_model_dims_t *d, int size, int len,
                          struct bsipipe_tp_work_off *o)
{
    long n = len, ns = len / size, h = d->hidden, at = 0;
    o->gath = at; at += n * h;
    o->gdy = at; at += n * h;
    o->part = at; at += n * h;
    o->red = at; at += ns * h;
    o->dx2 = at; at += ns * h;
    o->dy = at; at += ns * h;
    o->seg = at; at += kern_tp_seg_work(d, size, len);
    o->total = at;
}

/* ----------------------------------------------------------------- sizes */

long bsipipe_tp_embed_params(const bsipipe_model_dims_t *d, int size)
{
    struct bsipipe_embed_off o;
    int rc = size_check(d, size, 0);
    if (rc)
        return rc;
    kern_tp_embed_off(d, size, &o);
    return o.total;
}

long bsipipe_tp_layer_params(const bsipipe_model_dims_t *d, int size)
{
    struct bsipipe_layer_off o;
    int rc = size_check(d, size, 0);
    if (rc)
        return rc;
    kern_tp_layer_off(d, size, &o);
    return o.total;
}

long bsipipe_tp_head_params(const bsipipe_model_dims_t *d, int size)
{
    struct bsipipe_head_off o;
    int rc = size_check(d, size, 0);
    if (rc)
        return rc;
    kern_tp_head_off(d, size, &o);
    return o.total;
}

long bsipipe_tp_layer_offset(const bsipipe_model_dims_t *d, int size, int l)
{
    int rc = size_check(d, size, 0);
    if (rc)
        return rc;
    if (l < 0 || l > d->n_layers)
        return -EINVAL;
    return bsipipe_tp_embed_params(d, size) + (long)l * bsipipe_tp_layer_params(d, size);
}

long bsipipe_tp_model_params(const bsipipe_model_dims_t *d, int size)
{
    long o = bsipipe_tp_layer_offset(d, size, d ? d->n_layers : 0);
    return o < 0 ? o : o + bsipipe_tp_head_params(d, size);
}

long bsipipe_tp_kv_size(const bsipipe_model_dims_t *d, int size)
{
    int rc = size_check(d, size, 0);
    return rc ? rc : 2L * d->seq_len * (d->hidden / size);
}

static int len_check(const bsipipe_model_dims_t *d, int size, int len)
{
    if (d && (len < 1 || len > d->seq_len))
        return bsipipe_error_set(-EINVAL, "piece length %d outside [1, %d]", len,
                                 d->seq_len);
    return size_check(d, size, len);
}

long bsipipe_tp_stash_size(const bsipipe_model_dims_t *d, int size, int len)
{
    struct bsipipe_stash_off o;
    int rc = len_check(d, size, len);
    if (rc)
        return rc;
    kern_tp_stash_off(d, size, len, &o);
    return o.total;
}

long bsipipe_tp_wstash_size(const bsipipe_model_dims_t *d, int size, int len)
{
    int rc = len_check(d, size, len);
    if (rc)
        return rc;
    return (long)len * (2L * d->hidden + kern_a1_width(d) / size + 3L * d->hidden / size);
}

long bsipipe_tp_stash_norm_offset(const bsipipe_model_dims_t *d, int size, int len, int which)
{
    struct bsipipe_stash_off o;
    int rc = len_check(d, size, len);
    if (rc)
        return rc;
    if (which != 1 && which != 2)
        return -EINVAL;
    kern_tp_stash_off(d, size, len, &o);
    return which == 1 ? o.n1 : o.n2;
}

long bsipipe_tp_work_size(const bsipipe_model_dims_t *d, int size, int len)
{
    struct bsipipe_tp_work_off o;
    int rc = len_check(d, size, len);
    if (rc)
        return rc;
    kern_tp_work_off(d, size, len, &o);
    return o.total;
}

long bsipipe_tp_seg_work_size(const bsipipe_model_dims_t *d, int size, int len)
{
    int rc = len_check(d, size, len);
    return rc ? rc : kern_tp_seg_work(d, size, len);
}

long bsipipe_tp_embed_work_size(const bsipipe_model_dims_t *d, int size, int len)
{
    int rc = len_check(d, size, len);
    return rc ? rc : (long)len * d->hidden;
}

void kern_tp_head_work_off(const bsipipe_model_dims_t *d, int size, int len,
                               struct bsipipe_tp_head_work_off *o)
{
    long n = len, ns = len / size, h = d->hidden, at = 0;
    /* ce (3 len doubles) first, so that it is aligned like the buffer;
     * 6 len elements are enough in either precision */
    o->ce = at; at += 6 * n;
    o->gath = at; at += n * h;
    o->logits = at; at += n * (d->vocab / size);
    o->part = at; at += n * h;
    o->xn = at; at += ns * h;
    o->red = at; at += ns * h;
    o->st = at; at += 2 * ns;
    o->total = at;
}

long bsipipe_tp_head_work_size(const bsipipe_model_dims_t *d, int size, int len)
{
    struct bsipipe_tp_head_work_off o;
    int rc = len_check(d, size, len);
    if (rc)
        return rc;
    kern_tp_head_work_off(d, size, len, &o);
    return o.total;
}

double bsipipe_tp_ce_loss(int len, const double *ce)
{
    double s = 0;
    for (int i = 0; i < len; i++)
        s += ce[i] + log(ce[len + i]) - ce[2 * len + i];
    return s;
}

/* ---------------------------------------------------------- shard table */

static void tput(bsipipe_tp_tensor_info_t *t, int *n, const char *name, long off, long full_off,
                 int rows, int cols, int split, int groups, int size, int decay)
{
    bsipipe_tp_tensor_info_t *e = &t[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->offset = off;
    e->full_offset = full_off;
    e->full_rows = rows;
    e->full_cols = cols;
    e->rows = split == BSIPIPE_TP_SPLIT_ROWS ? rows / size : rows;
    e->cols = split == BSIPIPE_TP_SPLIT_COLS ? cols / size : cols;
    e->split = split;
    e->groups = groups;
    e->decay = decay;
}

int kern_tp_part_tensors(const bsipipe_model_dims_t *d, int size, int part,
                             bsipipe_tp_tensor_info_t *t)
{
    int n = 0, h = d->hidden, L = d->n_layers, gpt = d->family == BSIPIPE_MODEL_GPT;
    const int R = BSIPIPE_TP_REPLICATED, SR = BSIPIPE_TP_SPLIT_ROWS, SC = BSIPIPE_TP_SPLIT_COLS;
    if (part < 0) {
        struct bsipipe_embed_off f, s;
        kern_embed_off(d, &f);
        kern_tp_embed_off(d, size, &s);
        tput(t, &n, "wte", s.wte, f.wte, d->vocab, h, SR, 1, size, 1);
        if (f.wpe >= 0)
            tput(t, &n, "wpe", s.wpe, f.wpe, d->seq_len, h, R, 1, size, 1);
    } else if (part >= L) {
        struct bsipipe_head_off f, s;
        kern_head_off(d, &f);
        kern_tp_head_off(d, size, &s);
        tput(t, &n, "nfw", s.nfw, f.nfw, h, 1, R, 1, size, 0);
        if (f.nfb >= 0)
            tput(t, &n, "nfb", s.nfb, f.nfb, h, 1, R, 1, size, 0);
        tput(t, &n, "wlm", s.wlm, f.wlm, d->vocab, h, SR, 1, size, 1);
    } else {
        struct bsipipe_layer_off f, s;
        char nm[32];
        kern_layer_off(d, &f);
        kern_tp_layer_off(d, size, &s);
#define T(field, label, rows, cols, split, groups, decay)                                   \
    do {                                                                                     \
        if (f.field >= 0) {                                                                  \
            snprintf(nm, sizeof nm, "layer%d.%s", part, label);                              \
            tput(t, &n, nm, s.field, f.field, rows, cols, split, groups, size, decay);       \
        }                                                                                    \
    } while (0)
        T(n1w, "n1w", h, 1, R, 1, 0);
        T(n1b, "n1b", h, 1, R, 1, 0);
        T(wqkv, "wqkv", 3 * h, h, SR, 3, 1);
        T(wo, "wo", h, h, SC, 1, 1);
        T(n2w, "n2w", h, 1, R, 1, 0);
        T(n2b, "n2b", h, 1, R, 1, 0);
        T(w1, gpt ? "wfc" : "wgu", kern_a1_width(d), h, SR, gpt ? 1 : 2, 1);
        T(w2, gpt ? "wproj" : "wdown", h, d->ffn_hidden, SC, 1, 1);
#undef T
    }
    return n;
}

int bsipipe_tp_tensors(const bsipipe_model_dims_t *d, int size, bsipipe_tp_tensor_info_t *out,
                       int max)
{
    bsipipe_tp_tensor_info_t t[8];
    int n = 0, rc = size_check(d, size, 0);
    if (rc)
        return rc;
    if (max < 0)
        return -EINVAL;
    for (int part = -1; part <= d->n_layers; part++) {
        int k = kern_tp_part_tensors(d, size, part, t);
        long sb = part < 0 ? 0 : bsipipe_tp_layer_offset(d, size, part);
        long fb = part < 0 ? 0 : bsipipe_model_layer_offset(d, part);
        for (int i = 0; i < k; i++, n++)
            if (out && n < max) {
                out[n] = t[i];
                out[n].part = part < d->n_layers ? part : d->n_layers;
                out[n].offset += sb;
                out[n].full_offset += fb;
            }
    }
    if (out && n > max)
        return -ENOSPC;
    return n;
}

/* ------------------------------------------------ in-process collectives */

static size_t esize(bsipipe_tp_dtype_t t) { return t == BSIPIPE_TP_F64 ? 8 : 4; }

int bsipipe_tp_all_gather_rank(int size, int rank, const void *const *send, void *recv,
                               long count, bsipipe_tp_dtype_t t)
{
    size_t b;
    if (size < 1 || rank < 0 || rank >= size || !send || !recv || count < 0 ||
        (t != BSIPIPE_TP_F32 && t != BSIPIPE_TP_F64))
        return -EINVAL;
    b = (size_t)count * esize(t);
    for (int q = 0; q < size; q++)
        memcpy((char *)recv + (size_t)q * b, send[q], b);
    return 0;
}

/* out[i] = in[0][off + i] op in[1][off + i] op ... (rank order) */
#define REDUCE(T)                                                                   \
    do {                                                                            \
        T *o = out;                                                                 \
        for (long i = 0; i < count; i++) {                                          \
            T acc = ((const T *)in[0])[off + i];                                    \
            for (int q = 1; q < size; q++) {                                        \
                T v = ((const T *)in[q])[off + i];                                  \
                acc = op == BSIPIPE_TP_SUM ? acc + v : (v > acc ? v : acc);         \
            }                                                                       \
            o[i] = acc;                                                             \
        }                                                                           \
    } while (0)

static int reduce(int size, const void *const *in, long off, void *out, long count,
                  bsipipe_tp_dtype_t t, bsipipe_tp_op_t op)
{
    if (size < 1 || !in || !out || count < 0 || (t != BSIPIPE_TP_F32 && t != BSIPIPE_TP_F64) ||
        (op != BSIPIPE_TP_SUM && op != BSIPIPE_TP_MAX))
        return -EINVAL;
    if (t == BSIPIPE_TP_F64)
        REDUCE(double);
    else
        REDUCE(float);
    return 0;
}

int bsipipe_tp_reduce_scatter_rank(int size, int rank, const void *const *send, void *recv,
                                   long count, bsipipe_tp_dtype_t t)
{
    if (rank < 0 || rank >= size)
        return -EINVAL;
    return reduce(size, send, (long)rank * count, recv, count, t, BSIPIPE_TP_SUM);
}

int bsipipe_tp_all_reduce_rank(int size, const void *const *in, void *out, long count,
                               bsipipe_tp_dtype_t t, bsipipe_tp_op_t op)
{
    return reduce(size, in, 0, out, count, t, op);
}

/* ------------------------------------------------ local communicator */

struct bsipipe_tp_local {
    int size, arrived, aborted;
    unsigned long gen;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const void **slot; /* each rank's buffer of the current collective */
};

int bsipipe_tp_local_create(int size, bsipipe_tp_local_t **out)
{
    bsipipe_tp_local_t *l;
    if (!out || size < 1)
        return -EINVAL;
    l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->slot = calloc((size_t)size, sizeof *l->slot);
    if (!l->slot) {
        free(l);
        return -ENOMEM;
    }
    l->size = size;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    *out = l;
    return 0;
}

void bsipipe_tp_local_destroy(bsipipe_tp_local_t *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->slot);
    free(l);
}

void bsipipe_tp_local_abort(bsipipe_tp_local_t *l)
{
    pthread_mutex_lock(&l->mu);
    l->aborted = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* A barrier that an abort breaks (pthread_barrier cannot be cancelled). */
static int lbarrier(bsipipe_tp_local_t *l)
{
    int rc;
    pthread_mutex_lock(&l->mu);
    if (!l->aborted) {
        unsigned long g = l->gen;
        if (++l->arrived == l->size) {
            l->arrived = 0;
            l->gen++;
            pthread_cond_broadcast(&l->cv);
        } else {
            while (l->gen == g && !l->aborted)
                pthread_cond_wait(&l->cv, &l->mu);
        }
    }
    rc = l->aborted ? -ECANCELED : 0;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* Post the rank's buffer, wait for all, compute the rank's output, wait for
 * all again (so no rank reuses its slot or buffer while another reads it). */
static int l_all_gather(void *ctx, int rank, const void *send, void *recv, long count,
                        bsipipe_tp_dtype_t t)
{
    bsipipe_tp_local_t *l = ctx;
    int rc;
    l->slot[rank] = send;
    if ((rc = lbarrier(l)))
        return rc;
    rc = bsipipe_tp_all_gather_rank(l->size, rank, l->slot, recv, count, t);
    if (rc)
        bsipipe_tp_local_abort(l);
    return lbarrier(l) ? -ECANCELED : rc;
}

static int l_reduce_scatter(void *ctx, int rank, const void *send, void *recv, long count,
                            bsipipe_tp_dtype_t t)
{
    bsipipe_tp_local_t *l = ctx;
    int rc;
    l->slot[rank] = send;
    if ((rc = lbarrier(l)))
        return rc;
    rc = bsipipe_tp_reduce_scatter_rank(l->size, rank, l->slot, recv, count, t);
    if (rc)
        bsipipe_tp_local_abort(l);
    return lbarrier(l) ? -ECANCELED : rc;
}

/* In place: every rank reduces into a private copy, and writes its buffer
 * only after all have read. */
static int l_all_reduce(void *ctx, int rank, void *buf, long count, bsipipe_tp_dtype_t t,
                        bsipipe_tp_op_t op)
{
    bsipipe_tp_local_t *l = ctx;
    void *tmp = malloc((size_t)(count > 0 ? count : 1) * esize(t));
    int rc;
    l->slot[rank] = buf;
    if (!tmp)
        bsipipe_tp_local_abort(l);
    if ((rc = lbarrier(l))) {
        free(tmp);
        return tmp ? rc : -ENOMEM;
    }
    rc = bsipipe_tp_all_reduce_rank(l->size, l->slot, tmp, count, t, op);
    if (rc)
        bsipipe_tp_local_abort(l);
    if (lbarrier(l)) {
        free(tmp);
        return rc ? rc : -ECANCELED;
    }
    memcpy(buf, tmp, (size_t)count * esize(t));
    free(tmp);
    return 0;
}

bsipipe_tp_comm_t bsipipe_tp_local_comm(bsipipe_tp_local_t *l)
{
    bsipipe_tp_comm_t c;
    c.ctx = l;
    c.all_gather = l_all_gather;
    c.reduce_scatter = l_reduce_scatter;
    c.all_reduce = l_all_reduce;
    return c;
}

struct run_arg {
    bsipipe_tp_local_t *l;
    int (*fn)(void *, int);
    void *arg;
    int rank, rc;
};

static void *run_one(void *p)
{
    struct run_arg *a = p;
    a->rc = a->fn(a->arg, a->rank);
    if (a->rc)
        bsipipe_tp_local_abort(a->l);
    return NULL;
}

int bsipipe_tp_local_run(bsipipe_tp_local_t *l, int (*fn)(void *arg, int rank), void *arg)
{
    struct run_arg *a;
    pthread_t *th;
    int rc = 0, started;
    if (!l || !fn)
        return -EINVAL;
    a = calloc((size_t)l->size, sizeof *a);
    th = calloc((size_t)l->size, sizeof *th);
    if (!a || !th) {
        free(a);
        free(th);
        return -ENOMEM;
    }
    l->aborted = 0;
    l->arrived = 0;
    for (int r = 0; r < l->size; r++) {
        a[r].l = l;
        a[r].fn = fn;
        a[r].arg = arg;
        a[r].rank = r;
    }
    for (started = 1; started < l->size; started++)
        if (pthread_create(&th[started], NULL, run_one, &a[started])) {
            a[started].rc = -EAGAIN;
            bsipipe_tp_local_abort(l); /* the started ranks must not wait for it */
            break;
        }
    if (started == l->size)
        run_one(&a[0]);
    else
        a[0].rc = -ECANCELED;
    for (int r = 1; r < started; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < l->size && !rc; r++)
        if (a[r].rc && a[r].rc != -ECANCELED)
            rc = a[r].rc;
    for (int r = 0; r < l->size && !rc; r++)
        rc = a[r].rc;
    free(a);
    free(th);
    return rc;
}
