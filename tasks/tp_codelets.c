/* tp_codelets.c: the codelets of the tensor-parallel tasks (tp_submit.c
 * builds them): a segment of the sharded kernels on one rank's buffers (CPU
 * or CUDA), a collective over the ranks' buffers (local copies with the
 * kernels' communicator code, a meeting of per-rank tasks, or NCCL), the
 * per-chunk gradient norm, and the optimizer step on a rank's shards. */
#include "tasks/tp_internal.h"
#include "tasks/engine_cuda.h"
#include "base/bsipipe_error.h"
#include "kernels/bsipipe_tp.h"
#include "graph/bsipipe_sim.h"
#ifdef BSIPIPE_HAVE_CUDA
#include "kernels/cuda/bsipipe_cuda_tp.h"
#endif
#ifdef BSIPIPE_HAVE_NCCL
#include "tasks/bsipipe_tp_nccl.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

const char *const tp_kind_names[] = {
    "emb_vocab", "emb_pos", "norm1", "attn", "norm2", "mlp", "out", "head_norm", "head_logits", "head_ce_sums",
    "head_bwd_logits", "head_bwd_norm", "bwd_mlp", "bwd_norm2", "bwd_attn", "bwd_norm1", "emb_bwd_pos",
    "emb_bwd_vocab", "bwd_mlp_x", "bwd_attn_x", "wgrad_mlp", "wgrad_attn", "all_gather", "reduce_scatter", "all_reduce_max", "all_reduce_sum", "all_reduce_replicated"};

/* ---- codelets ---- */

#define BUF(role, type) (tt->ix[role] >= 0 ? (type)STARPU_VECTOR_GET_PTR(buffers[tt->ix[role]]) : NULL)
#define NX(role) (tt->ix[role] >= 0 ? (double)STARPU_VECTOR_GET_NX(buffers[tt->ix[role]]) : 0.0)

/* Live activation bytes of the device, as without TP (ops/forward.c,
 * ops/backward.c): every rank's stash from its forward's first segment to its
 * backward's last, the KV cache from the first piece's forward and its
 * gradient from the last piece's backward to the first piece's. */
static void tp_mem(struct bsipipe_engine *e, int device, double bytes)
{
    pthread_mutex_lock(&e->tp->mem_lock);
    engine_mem(e, device, bytes);
    pthread_mutex_unlock(&e->tp->mem_lock);
}

/* Zeroes a gradient accumulator of the task (host or device memory). */
static int tp_clear(void *p, size_t bytes, int cuda)
{
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda)
        return bsipipe_cuda_zero(p, bytes, engine_cuda_stream());
#endif
    (void)cuda;
    memset(p, 0, bytes);
    return 0;
}

/* *loss += the piece's cross-entropy sum from the reduced statistics ce. */
static int tp_loss_add(int len, const double *ce, double *loss, int cuda)
{
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda)
        return bsipipe_cuda_tp_ce_loss_add(len, ce, loss, engine_cuda_stream());
#endif
    (void)cuda;
    *loss += bsipipe_tp_ce_loss(len, ce);
    return 0;
}

/* TP_CALL(seg, args): the CPU segment bsipipe_tp_<seg>(args), or on a CUDA
 * worker its twin bsipipe_cuda_tp_<seg>(args, stream, handle). */
#ifdef BSIPIPE_HAVE_CUDA
#define TP_CALL(seg, ...)                                                                               \
    (cuda ? bsipipe_cuda_tp_##seg(__VA_ARGS__, engine_cuda_stream(), engine_cuda_blas())              \
          : bsipipe_tp_##seg(__VA_ARGS__))
#else
#define TP_CALL(seg, ...) bsipipe_tp_##seg(__VA_ARGS__)
#endif

/* name_cpu (and name_cuda): the codelet functions of name_run(buffers, tt, cuda). */
#ifdef BSIPIPE_HAVE_CUDA
#define TP_CODELET_FUNCS(name)                                                                       \
    static void name##_cpu(void *buffers[], void *cl_arg) { name##_run(buffers, cl_arg, 0); }    \
    static void name##_cuda(void *buffers[], void *cl_arg) { name##_run(buffers, cl_arg, 1); }
#else
#define TP_CODELET_FUNCS(name)                                                                       \
    static void name##_cpu(void *buffers[], void *cl_arg) { name##_run(buffers, cl_arg, 0); }
#endif

/* One segment on rank tt->rank, on a CPU worker or (cuda) a CUDA one: the
 * same buffers, memory accounting and emulated hold; only the kernels and
 * the two host-side steps (clearing dK/dV, adding the loss) differ. */
static void tp_seg_run(void *buffers[], tp_task_t *tt, int cuda)
{
    op_args_t *a = tt->a;
    struct bsipipe_engine *e = a->e;
    if (engine_failed(e) || (e->pass_kind == ENGINE_PASS_EVAL && a->op.kind != BSIPIPE_OP_F)) /* validation: forward only */
        return;
    const bsipipe_model_dims_t *D = &e->dims;
    struct engine_tp *t = e->tp;
    int T = e->T, l = tt->layer, len = a->len, rc = 0;
    bsipipe_tp_t tp = {T, tt->rank};
    const tp_rep_t *p = &t->rep[((long)a->op.pipe * e->C + a->op.chunk) * T + tt->rank];
    long loff = bsipipe_tp_layer_offset(D, T, l) - p->base; /* the layer's (or the head's) place in the replica */
    const float *P = BUF(R_P, const float *);
    float *G = BUF(R_G, float *);
    const float *lay = P ? P + loff : NULL;
    float *glay = G ? G + loff : NULL;
    long li = l - a->l0;
    float *st = BUF(R_ST, float *), *kv = BUF(R_KV, float *), *dkv = BUF(R_DKV, float *), *ws = BUF(R_WS, float *);
    if (st && l < D->n_layers)
        st += li * bsipipe_tp_stash_size(D, T, len);
    if (ws)
        ws += li * bsipipe_tp_wstash_size(D, T, len);
    if (kv)
        kv += li * bsipipe_tp_kv_size(D, T);
    int emulate = e->o.emulate_flops > 0;
    int rc0 = 0;
    if (dkv && tt->clear && !emulate) /* emulated: nothing reads it */
        rc0 = tp_clear(dkv, STARPU_VECTOR_GET_NX(buffers[tt->ix[R_DKV]]) * sizeof(float), cuda);
    if (dkv)
        dkv += li * bsipipe_tp_kv_size(D, T);
    float *GA = BUF(R_GA, float *), *PA = BUF(R_PA, float *), *RE = BUF(R_RE, float *), *GD = BUF(R_GD, float *);
    float *D2 = BUF(R_D2, float *), *GB = BUF(R_GB, float *), *SC = BUF(R_SC, float *), *HX = BUF(R_HX, float *);
    float *HL = BUF(R_HL, float *), *Y = BUF(R_Y, float *);
    double *HC = BUF(R_HC, double *);
    const int *tok = BUF(R_TOK, const int *), *tgt = BUF(R_TGT, const int *);
    long ls = len / T;
    if (tt->kind == S_NORM1 && l == a->l0)
        tp_mem(e, a->op.device, 4.0 * NX(R_ST));
    if (tt->kind == S_ATTN && l == a->l0 && a->op.sub == 0)
        tp_mem(e, a->op.device, 4.0 * NX(R_KV));
    int battn = tt->kind == S_BATTN || tt->kind == S_BATTNX;
    if (battn && tt->clear)
        tp_mem(e, a->op.device, 4.0 * NX(R_DKV));
    /* the stash lives until the backward's last segment (split: the W's), as the planner counts it */
    if ((tt->kind == S_BNORM1 && !e->split) || tt->kind == S_WATTN) {
        if (l == a->l0)
            tp_mem(e, a->op.device, -4.0 * NX(R_ST));
    }
    if (battn && l == a->l0 && a->op.sub == 0) /* the last use of the micro-batch's K/V here */
        tp_mem(e, a->op.device, -4.0 * (NX(R_KV) + NX(R_DKV)));
    if (emulate) { /* the memory is counted as when computing; the time is the planner's share */
        engine_emulate_hold(tt->emu_s);
        return;
    }
    switch (rc0 ? -1 : tt->kind) {
    case -1:
        rc = rc0;
        break;
    case S_EMB_VOCAB:
        rc = TP_CALL(embed_fwd_vocab, D, &tp, P, tok + a->start, len, PA);
        break;
    case S_EMB_POS:
        rc = TP_CALL(embed_fwd_pos, D, &tp, P, a->start, len, Y);
        break;
    case S_NORM1:
        rc = TP_CALL(layer_fwd_norm1, D, &tp, len, lay, BUF(R_X, const float *), st);
        break;
    case S_ATTN:
        rc = TP_CALL(layer_fwd_attn, D, &tp, a->start, len, lay, GA, st, kv, PA);
        break;
    case S_NORM2:
        rc = TP_CALL(layer_fwd_norm2, D, &tp, len, lay, RE, st);
        break;
    case S_MLP:
        rc = TP_CALL(layer_fwd_mlp, D, &tp, len, lay, GA, st, PA);
        break;
    case S_OUT:
        rc = TP_CALL(layer_fwd_out, D, &tp, len, st, RE, Y ? Y : RE);
        break;
    case S_HNORM:
        rc = TP_CALL(head_fwd_norm, D, &tp, lay, len, Y, HX, HX + ls * D->hidden);
        break;
    case S_HLOGITS:
        rc = TP_CALL(head_fwd_logits, D, &tp, lay, len, GA, HL, HC);
        break;
    case S_HSUMS:
        rc = TP_CALL(head_ce_sums, D, &tp, len, HL, tgt + a->start, HC);
        break;
    case S_HBWD: {
        double *loss = BUF(R_LOSS, double *);
        if (loss)
            rc = tp_loss_add(len, HC, loss, cuda);
        if (rc || e->pass_kind == ENGINE_PASS_EVAL) /* validation: the loss only */
            break;
        /* the loss is the mean over the iteration's m*S tokens */
        rc = TP_CALL(head_bwd_logits, D, &tp, lay, glay, len, GA, tgt + a->start, 1.0 / ((double)e->m * e->S), HC,
                                        HL, PA);
        break;
    }
    case S_HBNORM:
        if (e->pass_kind == ENGINE_PASS_EVAL)
            break;
        rc = TP_CALL(head_bwd_norm, D, &tp, lay, glay, len, Y, HX + ls * D->hidden, RE, BUF(R_DY, float *));
        break;
    case S_BMLP:
        rc = TP_CALL(layer_bwd_mlp, D, &tp, len, lay, glay, st, GD, GA, PA, SC);
        break;
    case S_BMLPX:
        rc = TP_CALL(layer_bwd_mlp_x, D, &tp, len, lay, st, GD, PA, SC, ws);
        break;
    case S_BATTNX:
        rc = TP_CALL(layer_bwd_attn_x, D, &tp, a->start, len, lay, st, kv, dkv, GD, PA, SC, ws);
        break;
    case S_WMLP:
        rc = TP_CALL(layer_wgrad_mlp, D, &tp, len, glay, st, ws, GA);
        break;
    case S_WATTN:
        rc = TP_CALL(layer_wgrad_attn, D, &tp, len, glay, st, ws, GA);
        break;
    case S_BNORM2:
        rc = TP_CALL(layer_bwd_norm2, D, &tp, len, lay, glay, st, BUF(R_X, const float *), RE, D2);
        break;
    case S_BATTN:
        rc = TP_CALL(layer_bwd_attn, D, &tp, a->start, len, lay, glay, st, kv, dkv, GD, GA, PA, SC);
        break;
    case S_BNORM1:
        rc = TP_CALL(layer_bwd_norm1, D, &tp, len, lay, glay, st, D2, RE, GB);
        break;
    case S_EBPOS:
        rc = TP_CALL(embed_bwd_pos, D, &tp, G, a->start, len, GB);
        break;
    case S_EBVOCAB:
        rc = TP_CALL(embed_bwd_vocab, D, &tp, G, tok + a->start, len, GA);
        break;
    default:
        rc = -EINVAL;
    }
    if (rc) {
        const char *detail = bsipipe_error_detail();
        fprintf(stderr, "bsipipe engine: %s (tp rank %d, %s) failed: %s%s%s\n", a->name, tt->rank,
                tp_kind_names[tt->kind], bsipipe_strerror(rc), *detail ? ": " : "", detail);
        engine_fail(e, rc);
    }
}

TP_CODELET_FUNCS(tp_seg)

/* COLL_CALL(name, args): the in-process collective bsipipe_tp_<name>(args) on
 * host buffers, or on a CUDA worker bsipipe_cuda_tp_<name>(args, stream) on
 * the group's device buffers (the same bits). */
#ifdef BSIPIPE_HAVE_CUDA
#define COLL_CALL(name, ...) \
    (cuda ? bsipipe_cuda_tp_##name(__VA_ARGS__, engine_cuda_stream()) : bsipipe_tp_##name(__VA_ARGS__))
#else
#define COLL_CALL(name, ...) bsipipe_tp_##name(__VA_ARGS__)
#endif

/* In place: every bufs[q][0..count) becomes the reduction over the ranks
 * (rank order). The CPU reduces into a copy first, so no rank's input is
 * overwritten before it is read. */
static int tp_all_reduce_inplace(int T, void *const *bufs, long count, bsipipe_tp_dtype_t dt, bsipipe_tp_op_t op,
                                 int cuda)
{
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda)
        return bsipipe_cuda_tp_all_reduce_inplace(T, bufs, count, dt, op, engine_cuda_stream());
#endif
    (void)cuda;
    size_t es = dt == BSIPIPE_TP_F64 ? sizeof(double) : sizeof(float);
    void *tmp = malloc(es * (size_t)(count > 0 ? count : 1));
    int rc = tmp ? bsipipe_tp_all_reduce_rank(T, (const void *const *)bufs, tmp, count, dt, op) : -ENOMEM;
    for (int q = 0; q < T && rc == 0; q++)
        memcpy(bufs[q], tmp, es * (size_t)count);
    free(tmp);
    return rc;
}

static void coll_failed(struct bsipipe_engine *e, const tp_task_t *tt, int rc)
{
    const char *detail = bsipipe_error_detail();
    fprintf(stderr, "bsipipe engine: %s (tp %s) failed: %s%s%s\n", tt->a->name, tp_kind_names[tt->kind],
            bsipipe_strerror(rc), *detail ? ": " : "", detail);
    engine_fail(e, rc);
}

/* tt's collective over the T ranks' buffers send[q] (at the task's offset)
 * and recv[q] (NULL: in place), on the host or in one GPU's memory: the
 * kernels' in-process collectives (rank order, the same bits either way). */
static int coll_exec(struct bsipipe_engine *e, const tp_task_t *tt, void *const *send, void *const *recv, int cuda)
{
    int T = e->T, rc = 0;
    switch (tt->kind) {
    case C_AG:
        for (int q = 0; q < T && rc == 0; q++)
            rc = COLL_CALL(all_gather_rank, T, q, (const void *const *)send, recv[q], tt->count, BSIPIPE_TP_F32);
        return rc;
    case C_RS:
        for (int q = 0; q < T && rc == 0; q++)
            rc = COLL_CALL(reduce_scatter_rank, T, q, (const void *const *)send, recv[q], tt->count, BSIPIPE_TP_F32);
        return rc;
    case C_ARMAX:
    case C_ARSUM:
        return tp_all_reduce_inplace(T, send, tt->count, BSIPIPE_TP_F64,
                                     tt->kind == C_ARMAX ? BSIPIPE_TP_MAX : BSIPIPE_TP_SUM, cuda);
    case C_AREP: { /* the replicated tensors of the replica, summed in rank order */
        struct engine_tp *t = e->tp;
        const tp_rep_t *p0 = &t->rep[(long)tt->rep * T];
        for (int j = 0; j < t->nti && rc == 0; j++) {
            const bsipipe_tp_tensor_info_t *ti = &t->ti[j];
            long n = (long)ti->rows * ti->cols, off = ti->offset - p0->base;
            if (ti->split != BSIPIPE_TP_REPLICATED || off < 0 || off >= p0->n)
                continue;
            void *in[TP_MAX];
            for (int q = 0; q < T; q++)
                in[q] = (float *)send[q] + off;
            rc = tp_all_reduce_inplace(T, in, n, BSIPIPE_TP_F32, BSIPIPE_TP_SUM, cuda);
        }
        return rc;
    }
    default:
        return -EINVAL;
    }
}

/* The address of a collective's source on its task's buffer j. */
static void *coll_src(void *buffers[], const tp_task_t *tt, int j)
{
    return (char *)STARPU_VECTOR_GET_PTR(buffers[j]) + (size_t)tt->off * STARPU_VECTOR_GET_ELEMSIZE(buffers[j]);
}

/* One collective task (CPU or CUDA worker): the kernels' collectives over
 * the ranks' buffers of this task. */
static void tp_coll_run(void *buffers[], tp_task_t *tt, int cuda)
{
    struct bsipipe_engine *e = tt->a->e;
    if (engine_failed(e))
        return;
    if (e->o.emulate_flops > 0) { /* the planner's charge; the replicated all-reduce, like SYNC, is free */
        engine_emulate_hold(tt->emu_s);
        return;
    }
    void *send[TP_MAX] = {0}, *recv[TP_MAX] = {0};
    for (int q = 0; q < e->T; q++) {
        send[q] = coll_src(buffers, tt, tt->src[q]);
        recv[q] = tt->dst[q] >= 0 ? (void *)STARPU_VECTOR_GET_PTR(buffers[tt->dst[q]]) : NULL;
    }
    int rc = coll_exec(e, tt, send, recv, cuda);
    if (rc)
        coll_failed(e, tt, rc);
}

#ifdef BSIPIPE_HAVE_NCCL
/* Rank tt->rank's part of tt's collective over its group's NCCL
 * communicator, queued on the worker's stream. */
static int coll_nccl(struct bsipipe_engine *e, const tp_task_t *tt, void *send, void *recv)
{
    tp_nccl_t *n = e->tp_nccl;
    int g = tt->a->op.device, q = tt->rank, rc = 0;
    cudaStream_t s = engine_cuda_stream();
    switch (tt->kind) {
    case C_AG:
        return tp_nccl_all_gather(n, g, q, send, recv, tt->count, BSIPIPE_TP_F32, s);
    case C_RS:
        return tp_nccl_reduce_scatter(n, g, q, send, recv, tt->count, BSIPIPE_TP_F32, s);
    case C_ARMAX:
    case C_ARSUM:
        return tp_nccl_all_reduce(n, g, q, send, tt->count, BSIPIPE_TP_F64,
                                          tt->kind == C_ARMAX ? BSIPIPE_TP_MAX : BSIPIPE_TP_SUM, s);
    case C_AREP: { /* every replicated tensor of the replica, in one NCCL launch */
        const struct engine_tp *t = e->tp;
        const tp_rep_t *p0 = &t->rep[(long)tt->rep * e->T];
        if ((rc = tp_nccl_batch_begin()) < 0)
            return rc;
        for (int j = 0; j < t->nti && rc == 0; j++) {
            const bsipipe_tp_tensor_info_t *ti = &t->ti[j];
            long cnt = (long)ti->rows * ti->cols, off = ti->offset - p0->base;
            if (ti->split == BSIPIPE_TP_REPLICATED && off >= 0 && off < p0->n)
                rc = tp_nccl_all_reduce(n, g, q, (float *)send + off, cnt, BSIPIPE_TP_F32, BSIPIPE_TP_SUM, s);
        }
        int end = tp_nccl_batch_end();
        return rc ? rc : end;
    }
    default:
        return -EINVAL;
    }
}
#endif

/* One rank's task of a per-rank collective, over its own buffers: its NCCL
 * call, or its arrival at the meeting point, where the last rank runs the
 * collective for all and ends every rank's task. */
static void tp_coll_rank_run(void *buffers[], tp_task_t *tt, int cuda)
{
    struct bsipipe_engine *e = tt->a->e;
    int T = e->T, q = tt->rank;
    void *send = coll_src(buffers, tt, tt->src[0]);
    void *recv = tt->dst[0] >= 0 ? (void *)STARPU_VECTOR_GET_PTR(buffers[tt->dst[0]]) : NULL;
    tp_meet_t *m = tt->meet;
    if (!m) { /* NCCL: the worker's stream carries the wait for the other ranks */
        int rc = -EINVAL;
#ifdef BSIPIPE_HAVE_NCCL
        /* made even after a failure: a rank that skipped its call would
         * leave the group's others waiting in NCCL for ever */
        rc = coll_nccl(e, tt, send, recv);
#endif
        if (rc)
            coll_failed(e, tt, rc);
        return;
    }
    m->send[q] = send;
    m->recv[q] = recv;
    if (__atomic_add_fetch(&m->arrived, 1, __ATOMIC_ACQ_REL) < T)
        return; /* the last rank to arrive ends this task */
    tt->ran = 1;
    if (!__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE) && !engine_failed(e)) {
        int rc = 0;
        if (e->o.emulate_flops > 0)
            engine_emulate_hold(tt->emu_s);
        else
            rc = coll_exec(e, tt, m->send, m->recv, cuda);
#ifdef BSIPIPE_HAVE_CUDA
        if (rc == 0 && cuda) /* every rank's output has landed before its task ends */
            rc = bsipipe_cuda_stream_wait(engine_cuda_stream());
#endif
        if (rc)
            coll_failed(e, tt, rc);
    }
    tp_meet_release(m, T);
}

TP_CODELET_FUNCS(tp_coll_rank)

TP_CODELET_FUNCS(tp_coll)

/* Squared norm of replica x's gradient shard g on rank q: its split
 * tensors, and its replicated ones on rank 0 only (their gradients are equal
 * on every rank after the all-reduce). */
static double tp_shard_sumsq(const struct engine_tp *t, int x, int q, const float *g)
{
    const tp_rep_t *p = &t->rep[(long)x * t->T + q];
    double s = 0;
    for (int j = 0; j < t->nti; j++) {
        const bsipipe_tp_tensor_info_t *ti = &t->ti[j];
        long off = ti->offset - p->base;
        if (off < 0 || off >= p->n || (ti->split == BSIPIPE_TP_REPLICATED && q > 0))
            continue;
        s += bsipipe_sumsq((long)ti->rows * ti->cols, g + off);
    }
    return s;
}

/* Chunk x's squared gradient norm from its T down shards, summed in rank
 * order: what a STEP adds per chunk, so that across MPI ranks (this task
 * on the chunk's process, its result sent to every rank) the norm has the
 * bits of one process. Buffers: T grads R, then one double W. */
static void tp_norm_cpu(void *buffers[], void *cl_arg)
{
    tp_task_t *tt = cl_arg;
    struct bsipipe_engine *e = tt->e;
    int T = e->T;
    double *out = (double *)STARPU_VECTOR_GET_PTR(buffers[T]), s = 0;
    for (int q = 0; q < T && !engine_failed(e) && e->o.emulate_flops <= 0; q++)
        s += tp_shard_sumsq(e->tp, tt->rep, q, (const float *)STARPU_VECTOR_GET_PTR(buffers[q]));
    *out = s;
}

#ifdef BSIPIPE_HAVE_CUDA
/* The same on a CUDA worker: each (rank, tensor) sum on the device in a
 * fixed order (bsipipe_cuda_tp_sumsq), grouped on the host as tp_shard_sumsq
 * groups them (per rank, then over the ranks), the chunk's sum written to
 * its one-double buffer on this GPU. */
static void tp_norm_cuda(void *buffers[], void *cl_arg)
{
    tp_task_t *tt = cl_arg;
    struct bsipipe_engine *e = tt->e;
    struct engine_tp *t = e->tp;
    int T = e->T, K = T * t->nti, rc = 0;
    cudaStream_t s = engine_cuda_stream();
    double part = 0, *dsum = NULL, *sums = calloc((size_t)K, sizeof *sums);
    if (!sums)
        rc = -ENOMEM;
    if (rc == 0 && !engine_failed(e) && e->o.emulate_flops <= 0) {
        rc = bsipipe_cuda_scratch_alloc((void **)&dsum, sizeof(double) * (size_t)K, s);
        if (rc == 0) /* the skipped (rank, tensor) entries stay 0 */
            rc = bsipipe_cuda_zero(dsum, sizeof(double) * (size_t)K, s);
        for (int q = 0; q < T && rc == 0; q++) {
            const tp_rep_t *p = &t->rep[(long)tt->rep * T + q];
            const float *g = (const float *)STARPU_VECTOR_GET_PTR(buffers[q]);
            for (int j = 0; j < t->nti && rc == 0; j++) {
                const bsipipe_tp_tensor_info_t *ti = &t->ti[j];
                long off = ti->offset - p->base;
                if (off < 0 || off >= p->n || (ti->split == BSIPIPE_TP_REPLICATED && q > 0))
                    continue;
                rc = bsipipe_cuda_tp_sumsq((long)ti->rows * ti->cols, g + off, dsum + (long)q * t->nti + j, s);
            }
        }
        if (rc == 0)
            rc = bsipipe_cuda_copy_to_host(sums, dsum, sizeof(double) * (size_t)K, s);
        if (dsum) {
            int rc_free = bsipipe_cuda_scratch_free(dsum, s);
            rc = rc ? rc : rc_free;
        }
        for (int q = 0; q < T && rc == 0; q++) {
            double shard = 0;
            for (int j = 0; j < t->nti; j++)
                shard += sums[(long)q * t->nti + j];
            part += shard;
        }
    }
    if (rc == 0)
        rc = bsipipe_cuda_copy((double *)STARPU_VECTOR_GET_PTR(buffers[T]), &part, sizeof part, s);
    if (rc == 0) /* part lives on this stack */
        rc = bsipipe_cuda_stream_wait(s);
    free(sums);
    if (rc)
        engine_fail(e, rc);
}
#endif

static struct starpu_codelet engine_cl_tp_norm = {
    .cpu_funcs = {tp_norm_cpu},
    .cpu_funcs_name = {"tp_norm_cpu"},
    BSIPIPE_CL_CUDA(tp_norm_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_norm,
    .name = "NORM",
};

static void tp_norm_popped(void *arg)
{
    tp_task_t *tt = arg;
    __atomic_fetch_add(&tt->e->tasks_popped, 1, __ATOMIC_SEQ_CST);
}

static void tp_norm_done(void *arg)
{
    tp_task_t *tt = arg;
    engine_task_ended(tt->e, 0);
}

int engine_tp_submit_norm(struct bsipipe_engine *e, int c, starpu_data_handle_t out)
{
    struct engine_tp *t = e->tp;
    int T = e->T, d = e->rep[c].device;
    tp_task_t *tt = tp_task_new(-1, -1);
    if (!tt || tp_tasks_keep(t, tt) < 0)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    tt->e = e;
    tt->rep = c;
    struct starpu_data_descr descr[TP_MAX + 1];
    for (int q = 0; q < T; q++)
        descr[q] = (struct starpu_data_descr){t->rep[(long)c * T + q].h_grads, STARPU_R};
    descr[T] = (struct starpu_data_descr){out, STARPU_W};
    struct starpu_task *task =
        starpu_task_build(&engine_cl_tp_norm, STARPU_DATA_MODE_ARRAY, descr, T + 1, STARPU_NAME,
                          engine_task_name(&engine_cl_tp_norm), 0);
    if (!task)
        return bsipipe_error_set(-ENOMEM, "engine: cannot build the norm task of chunk %d", c);
    tt->task = task;
    task->cl_arg = tt;
    task->cl_arg_size = 0;
    task->cl_arg_free = 0;
    task->callback_func = tp_norm_done;
    task->callback_arg = tt;
    task->prologue_callback_pop_func = tp_norm_popped;
    task->prologue_callback_pop_arg = tt;
    task->workerids = t->wmask[d * T]; /* rank 0 of the chunk's device (under bsipipe: in arrival order) */
    task->workerids_len = e->wmask_len;
    e->ovh.n_tasks++;
    if (starpu_task_submit(task) != 0)
        return bsipipe_error_set(-EIO, "engine: StarPU refused the norm task of chunk %d", c);
    __atomic_fetch_add(&e->tasks_submitted, 1, __ATOMIC_SEQ_CST);
    return 0;
}

#ifdef BSIPIPE_HAVE_CUDA
/* The CUDA STEP's chunk norms (one double each on this GPU, written by the
 * NORM tasks) copied to the host at once: the one wait of the step, as the
 * clip needs the norm on the host. */
static int tp_step_norms_cuda(struct bsipipe_engine *e, void *buffers[], double *norms)
{
    cudaStream_t s = engine_cuda_stream();
    int rc = 0;
    for (int x = 0; x < e->C && rc == 0; x++)
        rc = bsipipe_cuda_copy(norms + x, (const void *)STARPU_VECTOR_GET_PTR(buffers[x]), sizeof(double), s);
    return rc ? rc : bsipipe_cuda_stream_wait(s);
}

static int tp_adamw_cuda(const bsipipe_adamw_t *h, long step, long n, float *p, const float *g, double mul, int decay,
                         float *m, float *v)
{
    return bsipipe_cuda_adamw_update(h, step, n, p, g, mul, decay, m, v, engine_cuda_stream());
}
#endif

/* Global norm: the chunks' squared norms (each the sum over its ranks'
 * shards, tp_shard_sumsq in rank order, computed once by the chunk's NORM
 * task) added in chunk order, the same on every rank, so every rank clips
 * alike and the replicas stay equal. Then AdamW on the rank's shards (the
 * CUDA kernel on a CUDA worker). */
static void tp_step_run(void *buffers[], tp_task_t *tt, int cuda)
{
    op_args_t *a = tt->a;
    struct bsipipe_engine *e = a->e;
    struct engine_tp *t = e->tp;
    if (engine_failed(e) || !a->do_step || e->o.emulate_flops > 0)
        return;
    int rc = 0;
    double sumsq = 0, *norms = NULL;
    int (*update)(const bsipipe_adamw_t *, long, long, float *, const float *, double, int, float *, float *) =
        bsipipe_adamw_update;
    (void)cuda;
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda) {
        update = tp_adamw_cuda;
        norms = calloc((size_t)e->C, sizeof *norms);
        rc = norms ? tp_step_norms_cuda(e, buffers, norms) : -ENOMEM;
    }
#endif
    for (int x = 0; x < e->C && rc == 0; x++)
        sumsq += norms ? norms[x] : *(const double *)STARPU_VECTOR_GET_PTR(buffers[x]);
    free(norms);
    double norm = sqrt(sumsq), mul = 1.0;
    if (e->o.opt.grad_clip > 0 && e->o.opt.grad_clip / (norm + 1e-6) < 1.0)
        mul = e->o.opt.grad_clip / (norm + 1e-6);
    if (tt->rank == 0 && rc == 0)
        e->gnorm = norm;
    bsipipe_adamw_t opt = e->o.opt;
    opt.lr *= e->lr_scale;
    int b = e->C;
    for (int j = 0; j < a->n_own && rc == 0; j++) {
        int x = a->own_rep[j];
        const tp_rep_t *p = &t->rep[(long)x * e->T + tt->rank];
        float *P = (float *)STARPU_VECTOR_GET_PTR(buffers[b]);
        float *m = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
        float *v = (float *)STARPU_VECTOR_GET_PTR(buffers[b + 2]);
        const float *g = (const float *)STARPU_VECTOR_GET_PTR(buffers[b + 3]);
        b += 4;
        for (int k = 0; k < t->nti && rc == 0; k++) {
            const bsipipe_tp_tensor_info_t *ti = &t->ti[k];
            long off = ti->offset - p->base, cnt = (long)ti->rows * ti->cols;
            if (off < 0 || off >= p->n)
                continue;
            rc = update(&opt, e->steps + 1, cnt, P + off, g + off, mul, ti->decay, m + off, v + off);
        }
    }
    engine_report(e, a, rc);
}

TP_CODELET_FUNCS(tp_step)

/* Segments, collectives and STEP run on the rank's worker, a CPU one or a
 * CUDA one (--devices cuda: the rank's kernels queue on its stream). */
struct starpu_codelet engine_cl_tp_seg = {
    .cpu_funcs = {tp_seg_cpu},
    .cpu_funcs_name = {"tp_seg_cpu"},
    BSIPIPE_CL_CUDA(tp_seg_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_seg,
    .name = "TPSEG",
};

struct starpu_codelet engine_cl_tp_coll_rank = {
    .cpu_funcs = {tp_coll_rank_cpu},
    .cpu_funcs_name = {"tp_coll_rank_cpu"},
    BSIPIPE_CL_CUDA(tp_coll_rank_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_coll,
    .name = "TPCOLL",
};

struct starpu_codelet engine_cl_tp_coll = {
    .cpu_funcs = {tp_coll_cpu},
    .cpu_funcs_name = {"tp_coll_cpu"},
    BSIPIPE_CL_CUDA(tp_coll_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_coll,
    .name = "TPCOLL",
};

struct starpu_codelet engine_cl_tp_step = {
    .cpu_funcs = {tp_step_cpu},
    .cpu_funcs_name = {"tp_step_cpu"},
    BSIPIPE_CL_CUDA(tp_step_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_step,
    .name = "STEP",
};
