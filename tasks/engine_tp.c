/* engine_tp.c: tensor parallelism in the engine (docs/tensor-parallel.md).
 *
 * A pipeline device is a group of T = D_t StarPU CPU workers, one per TP
 * rank. Each op of the plan becomes the TP group's tasks:
 *  - every compute segment of the sharded kernels (kernels/bsipipe_tp.h) is
 *    one task per rank, on that rank's worker, over that rank's buffers
 *    (shard replicas, stash, KV, the rank's communication buffers);
 *  - every collective (all-gather / reduce-scatter along the sequence, the
 *    cross-entropy's all-reduces, the all-reduce of the replicated tensors'
 *    gradients) is ONE task that reads the T ranks' send buffers and writes
 *    the T ranks' receive buffers through bsipipe_tp_*_rank (the code, hence
 *    the bits, of the kernels' local communicator). StarPU's data
 *    dependencies order segment -> collective -> segment: no barrier, no
 *    worker held waiting. The collectives of an op rotate over the ranks'
 *    workers so the copies are shared out. Or, per rank (tp_collectives,
 *    and always when the nccl transport spreads a group over GPUs), one
 *    task per rank over its own buffers: each makes its NCCL call on its
 *    GPU's stream, or, in one memory, the ranks' tasks meet (tp_meet_t)
 *    and the last to arrive runs the collective for all, every task ending
 *    then (an end dependency, as a RECV's: none holds its worker waiting);
 *  - SEND / RECV move each rank's [len/T, d] slice on channel ch * T + rank,
 *    with the same rendezvous as without TP;
 *  - SYNC sums the mirrored replicas rank by rank; STEP runs on every rank:
 *    the global norm (split tensors of every rank, replicated ones once, in
 *    the same order on every rank) and AdamW on the rank's shards.
 * Under the bsipipe policy each worker runs its tasks in the order they are
 * submitted, which is the device's plan order: every rank of a device
 * follows the device's op order, segment by segment.
 *
 * Across StarPU-MPI ranks (--mpi) a TP group stays inside one process (the
 * device-to-rank map is per device), so the collectives stay the tasks
 * above; engine_mpi.c moves each rank's slice of a cross-rank SEND/RECV and
 * each rank's shard of a cross-rank SYNC through StarPU-MPI, its slot tasks
 * submitted here (engine_tp_submit_rank), and every chunk's squared
 * gradient norm is computed once on its owner's process
 * (engine_tp_submit_norm) and sent to every rank.
 *
 * On CUDA devices (--devices cuda) a device's T ranks are T CUDA workers of
 * its GPU: the segments are the CUDA twins (kernels/cuda/bsipipe_cuda_tp.h),
 * the collectives their device versions with the same bits, the STEP's norm
 * from per-tensor sums in a fixed order (the same clip factor on every
 * rank), grouped as on the CPU. With --transport nccl the T ranks run on T
 * GPUs (engine_devices.c) and the collectives are NCCL's, per rank
 * (bsipipe_tp_nccl.h). Collectives across processes (MPI) are not written:
 * a TP group stays in one process. */
#include "tasks/engine_internal.h"
#include "tasks/engine_cuda.h"
#include "graph/bsipipe_error.h"
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

enum { TP_MAX = 16, TP_DESCR = 2 * TP_MAX + 8, STEP_DESCR = 512 };

/* Roles of a task's buffers (index in buffers[] per role, -1: absent). */
enum {
    R_P, R_G, R_X, R_Y, R_ST, R_KV, R_DKV, R_GA, R_PA, R_RE, R_GD, R_D2, R_GB, R_SC, R_HX, R_HL, R_HC, R_TOK,
    R_TGT, R_LOSS, R_DY, R_WS, R_N
};

/* Segment and collective kinds. */
enum {
    S_EMB_VOCAB, S_EMB_POS, S_NORM1, S_ATTN, S_NORM2, S_MLP, S_OUT, S_HNORM, S_HLOGITS, S_HSUMS, S_HBWD, S_HBNORM,
    S_BMLP, S_BNORM2, S_BATTN, S_BNORM1, S_EBPOS, S_EBVOCAB, S_BMLPX, S_BATTNX, S_WMLP, S_WATTN,
    C_AG, C_RS, C_ARMAX, C_ARSUM, C_AREP
};

static const char *const kind_names[] = {
    "emb_vocab", "emb_pos", "norm1", "attn", "norm2", "mlp", "out", "head_norm", "head_logits", "head_ce_sums",
    "head_bwd_logits", "head_bwd_norm", "bwd_mlp", "bwd_norm2", "bwd_attn", "bwd_norm1", "emb_bwd_pos",
    "emb_bwd_vocab", "bwd_mlp_x", "bwd_attn_x", "wgrad_mlp", "wgrad_attn", "all_gather", "reduce_scatter", "all_reduce_max", "all_reduce_sum", "all_reduce_replicated"};

/* Where the T per-rank tasks of one collective meet (per-rank collectives
 * in one memory): each stores its buffers and arrives; the last to arrive
 * runs the collective over all of them and releases every task's end
 * dependency. Owned by rank 0's tp_task. */
typedef struct tp_meet {
    int arrived;                      /* atomic */
    int aborted;                      /* submission failed: release without running */
    void *send[TP_MAX], *recv[TP_MAX];
    struct starpu_task *task[TP_MAX]; /* NULL: that rank's task was never submitted */
} tp_meet_t;

/* One task of the TP group (engine-owned until the next iteration). */
typedef struct tp_task {
    op_args_t *a;             /* the rank copy of the op's arguments (NULL: a norm task, outside the plan) */
    struct bsipipe_engine *e;
    bsipipe_plan_pos_t pos;   /* its place in the worker's order (bsipipe policy) */
    struct starpu_task *task;
    int kind, rank, layer, recv;
    int rep;                  /* C_AREP: replica index (pipe * C + chunk) */
    long off, count;          /* collectives: source offset, elements per rank */
    int clear;                /* S_BATTN: zero the K/V gradient first */
    double emu_s;             /* --emulate: seconds the task holds its worker instead of running */
    signed char ix[R_N];
    signed char src[TP_MAX], dst[TP_MAX]; /* collectives: buffers of each rank ([0]: its own, per rank) */
    tp_meet_t *meet;          /* per-rank collective: its meeting point (NULL: one task, or NCCL) */
    int ran;                  /* per-rank, meeting: this rank arrived last and ran the collective */
    int own_meet;             /* frees meet */
} tp_task_t;

typedef struct tp_rep {
    float *params, *grads, *m, *v;
    starpu_data_handle_t h_params, h_grads, h_m, h_v;
    long base, n; /* in the rank's whole-model shard vector */
} tp_rep_t;

struct engine_tp {
    int T;
    int per_rank;                 /* collectives as one task per rank (tp_collectives) */
    long shard_n;                 /* bsipipe_tp_model_params */
    tp_rep_t *rep;                /* [(pipe * C + chunk) * T + rank] */
    int *worker;                  /* [device * T + rank] */
    uint32_t **wmask;             /* [device * T + rank] */
    /* communication buffers per (device, rank), registered once */
    long lmax, lsmax;
    float **mem;                  /* [B * W * T] */
    starpu_data_handle_t *h;      /* [B * W * T]: buffer kind b of (d, r) at (b * W + d) * T + r */
    starpu_data_handle_t scratch; /* segment scratch (STARPU_SCRATCH) */
    op_args_t **args;             /* [device][op * T + rank] */
    bsipipe_engine_op_record_t **rec; /* [device][op * T + rank] */
    long *next_slot;              /* [device * T + rank]: the worker's next slot (over iterations) */
    long *slot0;                  /* [device]: rank 0's first slot this iteration */
    long **first_slot;            /* [device][op * T + rank]: the slot of the op's first task on the
                                     rank's worker this iteration (a RECV is posted ahead of it) */
    int **slot_op;                /* [device]: op index of each of rank 0's slots this iteration */
    long *slot_n, *slot_cap;
    tp_task_t **tasks;            /* this iteration's (freed at the next) */
    long n_tasks, cap_tasks;
    bsipipe_tp_tensor_info_t *ti;
    int nti;
    pthread_mutex_t mem_lock;     /* the T workers of a device share its live-bytes counter and busy */
    double *busy;                 /* [device * T + rank]: µs of F/B segments and collectives this iteration */
};

/* The communication buffers of a (device, rank). */
enum { B_GA, B_PA, B_RE, B_GD, B_D2, B_GB, B_HX, B_HL, B_HC, B_N };

#define ALLOC(p, n) ((p) = calloc((size_t)(n) > 0 ? (size_t)(n) : 1, sizeof *(p)))

static void tt_free(tp_task_t *tt)
{
    if (tt && tt->own_meet)
        free(tt->meet);
    free(tt);
}

static int piece_len(const struct bsipipe_engine *e, int sub)
{
    const int *st = bsipipe_schedule_sub_starts(e->sched);
    return st[sub + 1] - st[sub];
}

static long act_i(const struct bsipipe_engine *e, int mb, int sub, int chunk, int r)
{
    return (((long)mb * e->k + sub) * e->C + chunk) * e->T + r;
}

static long kv_i(const struct bsipipe_engine *e, int mb, int chunk, int r)
{
    return ((long)mb * e->C + chunk) * e->T + r;
}

static starpu_data_handle_t comm_h(const struct bsipipe_engine *e, int b, int d, int r)
{
    return e->tp->h[((long)b * e->W + d) * e->T + r];
}

int engine_tp_check_dims(const bsipipe_model_dims_t *dims, int tp)
{
    if (tp <= 1)
        return 0;
    bsipipe_tp_t t = {tp, 0};
    int rc = bsipipe_tp_check(dims, &t, 0);
    if (rc < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        return bsipipe_error_set(rc, "%s (use another --tp, or change --heads, --ffn or --vocab)", why);
    }
    return 0;
}

int engine_tp_check(struct bsipipe_engine *e)
{
    int T = e->T;
    if (T > TP_MAX)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "engine: tensor-parallel degree %d is above the engine's %d; "
                                 "use --tp %d or less", T, TP_MAX, TP_MAX);
    if (e->o.devices != BSIPIPE_DEVICES_CPU) {
        /* On CUDA devices a TP group is D_t workers of its device's GPU
         * (engine_devices.c); the collectives are the group's device copies
         * and sums. What that does not cover is refused by name. */
        const char *prec = e->o.precision;
        if (prec && strcmp(prec, "bf16s") == 0)
            return bsipipe_error_set(-ENOTSUP, "engine: --tp with --precision bf16s: the sharded stash has no "
                                     "bf16 layout; use --precision fp32, tf32 or bf16, or --tp 1");
        if (e->o.mpi)
            return bsipipe_error_set(-ENOTSUP, "engine: --tp with CUDA devices across MPI ranks is not supported "
                                     "(its cross-rank slot tasks and transfers on CUDA workers have never been "
                                     "checked): use --devices cpu, one process, or --tp 1");
    }
    bsipipe_tp_t tp = {T, 0};
    int rc = bsipipe_tp_check(&e->dims, &tp, 0);
    for (int s = 0; s < e->k && rc == 0; s++)
        if ((rc = bsipipe_tp_check(&e->dims, &tp, piece_len(e, s))) < 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", bsipipe_error_detail());
            return bsipipe_error_set(rc, "%s (piece %d of %d, tokens %d..%d; choose --k or --seq so that every "
                                     "piece is a multiple of %d, or another --tp)", why, s, e->k,
                                     bsipipe_schedule_sub_starts(e->sched)[s],
                                     bsipipe_schedule_sub_starts(e->sched)[s + 1] - 1, T);
        }
    if (rc < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        return bsipipe_error_set(rc, "%s (use another --tp, or change --heads, --ffn or --vocab)", why);
    }
    /* A group spread over GPUs (the nccl transport) shares no memory that
     * one task could read every rank's buffers from. */
    int nccl = e->o.devices == BSIPIPE_DEVICES_CUDA && e->o.transport && strcmp(e->o.transport, "nccl") == 0;
    bsipipe_engine_tp_coll_t how = e->o.tp_collectives;
    if (how != BSIPIPE_TP_COLL_AUTO && how != BSIPIPE_TP_COLL_ONE_TASK && how != BSIPIPE_TP_COLL_PER_RANK)
        return bsipipe_error_set(-EINVAL, "engine: tp_collectives %d is none of auto (0), one-task (1), per-rank (2)",
                                 (int)how);
    if (nccl && how == BSIPIPE_TP_COLL_ONE_TASK)
        return bsipipe_error_set(-EINVAL, "engine: one task per TP collective needs the group's buffers in one "
                                 "memory, but --transport nccl puts its %d ranks on %d GPUs: use per-rank "
                                 "collectives (--tp-collectives per-rank, the default there), or --transport "
                                 "local", T, T);
    /* Every rank of a group must make the group's NCCL calls in the same
     * order: the plan's, which only the bsipipe policy keeps on each worker
     * (another policy may start two ready collectives in either order). */
    if (nccl && !bsipipe_policy_is_inorder(e->o.policy))
        return bsipipe_error_set(-EINVAL, "engine: --tp %d with --transport nccl needs the ranks of a group to make "
                                 "their NCCL calls in one order, which policy '%s' does not keep: use --policy "
                                 "bsipipe, or --transport local", T, e->o.policy ? e->o.policy : "(null)");
    if (!(e->tp = calloc(1, sizeof *e->tp)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    e->tp->T = T;
    e->tp->per_rank = nccl || how == BSIPIPE_TP_COLL_PER_RANK;
    pthread_mutex_init(&e->tp->mem_lock, NULL);
    return 0;
}

int engine_tp_workers(struct bsipipe_engine *e, const int *ids)
{
    struct engine_tp *t = e->tp;
    int T = e->T;
    unsigned len = starpu_worker_get_count() / 32 + 1;
    if (!ALLOC(t->busy, e->W * T) || !ALLOC(t->worker, e->W * T) || !ALLOC(t->wmask, e->W * T) || !ALLOC(t->next_slot, e->W * T))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0, j = 0; d < e->W; d++) {
        if (!engine_local(e, d))
            continue;
        for (int r = 0; r < T; r++, j++) {
            int w = ids[j];
            t->worker[d * T + r] = w;
            if (!ALLOC(t->wmask[d * T + r], len))
                return bsipipe_error_set(-ENOMEM, "out of memory");
            t->wmask[d * T + r][w / 32] |= 1u << (w % 32);
        }
    }
    return 0;
}

static float *reg_vector(long n, size_t elem, starpu_data_handle_t *h)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), elem);
    if (p)
        starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)(n > 0 ? n : 1), elem);
    return p;
}

int engine_tp_buffers(struct bsipipe_engine *e, const float *init)
{
    struct engine_tp *t = e->tp;
    const bsipipe_model_dims_t *D = &e->dims;
    int T = e->T, pipes = bsipipe_schedule_n_pipes(e->sched), d_ = e->d;
    t->shard_n = bsipipe_tp_model_params(D, T);
    if ((t->nti = bsipipe_tp_tensors(D, T, NULL, 0)) < 0)
        return t->nti;
    float *shard = malloc(sizeof(float) * (size_t)t->shard_n);
    if (!shard || !ALLOC(t->rep, pipes * e->C * T) || !ALLOC(t->ti, t->nti)) {
        free(shard);
        return -ENOMEM;
    }
    bsipipe_tp_tensors(D, T, t->ti, t->nti);
    int rc = 0;
    for (int r = 0; r < T && rc == 0; r++) {
        bsipipe_tp_t tp = {T, r};
        if ((rc = bsipipe_tp_model_shard(D, &tp, init, shard)) < 0)
            break;
        for (int x = 0; x < pipes * e->C && rc == 0; x++) {
            int c = x % e->C, l0, l1;
            bsipipe_schedule_chunk_layers(e->sched, c, &l0, &l1);
            tp_rep_t *p = &t->rep[x * T + r];
            p->base = c == 0 ? 0 : bsipipe_tp_layer_offset(D, T, l0);
            p->n = (c == e->C - 1 ? t->shard_n : bsipipe_tp_layer_offset(D, T, l1)) - p->base;
            if (!engine_local(e, e->rep[x].device))
                continue;
            p->params = reg_vector(p->n, sizeof(float), &p->h_params);
            p->grads = reg_vector(p->n, sizeof(float), &p->h_grads);
            p->m = reg_vector(p->n, sizeof(float), &p->h_m);
            p->v = reg_vector(p->n, sizeof(float), &p->h_v);
            if (!p->params || !p->grads || !p->m || !p->v)
                rc = -ENOMEM;
            else
                memcpy(p->params, shard + p->base, sizeof(float) * (size_t)p->n);
        }
    }
    free(shard);
    if (rc < 0)
        return rc;
    /* Per-iteration buffer sizes: [len/T, d] slices, the rank's stash and KV. */
    for (int s = 0; s < e->k; s++)
        if (piece_len(e, s) > t->lmax)
            t->lmax = piece_len(e, s);
    t->lsmax = t->lmax / T;
    long kvs = bsipipe_tp_kv_size(D, T);
    for (int mb = 0; mb < e->m; mb++)
        for (int c = 0; c < e->C; c++) {
            int l0, l1;
            bsipipe_schedule_chunk_layers(e->sched, c, &l0, &l1);
            for (int r = 0; r < T; r++) {
                e->n_kv[kv_i(e, mb, c, r)] = (uint32_t)((l1 - l0) * kvs);
                e->n_dkv[kv_i(e, mb, c, r)] = (uint32_t)((l1 - l0) * kvs);
            }
            for (int s = 0; s < e->k; s++) {
                long len = piece_len(e, s), ls = len / T;
                for (int r = 0; r < T; r++) {
                    long i = act_i(e, mb, s, c, r);
                    e->n_x_out[i] = (uint32_t)(ls * d_);
                    e->n_stash[i] = (uint32_t)((l1 - l0) * bsipipe_tp_stash_size(D, T, (int)len));
                    e->n_dx[i] = c > 0 ? (uint32_t)(ls * d_) : 0;
                    e->n_dy[i] = c == e->C - 1 ? (uint32_t)(ls * d_) : 0;
                    e->n_wstash[i] = e->split ? (uint32_t)((l1 - l0) * bsipipe_tp_wstash_size(D, T, (int)len)) : 0;
                }
            }
        }
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_RECV)
                for (int r = 0; r < T; r++)
                    e->n_recv[(long)ops[i].channel * T + r] = (uint32_t)((long)piece_len(e, ops[i].sub) / T * d_);
    }
    /* Communication buffers of each local (device, rank), sized for the
     * longest piece: gathered [len, d] (GA, GD), reduce-scatter input PA
     * [len, d], slices [len/T, d] (RE, D2, GB), the head's normed slice and
     * statistics (HX), logits [len, V/T] (HL) and CE statistics (HC, 3 len
     * doubles). */
    long nb = (long)B_N * e->W * T;
    if (!ALLOC(t->mem, nb) || !ALLOC(t->h, nb))
        return -ENOMEM;
    long L = t->lmax, Ls = t->lsmax;
    long sizes[B_N] = {L * d_, L * d_, Ls * d_, L * d_, Ls * d_, Ls * d_, Ls * d_ + 2 * Ls, L * (D->vocab / T), 3 * L};
    for (int b = 0; b < B_N; b++)
        for (int d = 0; d < e->W; d++)
            for (int r = 0; r < T && engine_local(e, d); r++) {
                long x = ((long)b * e->W + d) * T + r;
                if (!(t->mem[x] = reg_vector(sizes[b], b == B_HC ? sizeof(double) : sizeof(float), &t->h[x])))
                    return -ENOMEM;
            }
    long sc = bsipipe_tp_seg_work_size(D, T, (int)L);
    if (sc < 0)
        return (int)sc;
    starpu_vector_data_register(&t->scratch, -1, 0, (uint32_t)sc, sizeof(float));
    return 0;
}

int engine_tp_args(struct bsipipe_engine *e)
{
    struct engine_tp *t = e->tp;
    int T = e->T;
    if (!ALLOC(t->args, e->W) || !ALLOC(t->rec, e->W) || !ALLOC(t->slot0, e->W) || !ALLOC(t->slot_op, e->W) ||
        !ALLOC(t->slot_n, e->W) || !ALLOC(t->slot_cap, e->W) || !ALLOC(t->first_slot, e->W))
        return -ENOMEM;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!ALLOC(t->args[d], (long)n * T) || !ALLOC(t->rec[d], (long)n * T) ||
            !ALLOC(t->first_slot[d], (long)n * T))
            return -ENOMEM;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < T; r++) {
                op_args_t *a = &t->args[d][(long)i * T + r];
                *a = e->args[d][i]; /* own_rep shared: the original owns it */
                a->rec = &t->rec[d][(long)i * T + r];
                if (a->op.channel >= 0 && (a->op.kind == BSIPIPE_OP_SEND || a->op.kind == BSIPIPE_OP_RECV))
                    a->op.channel = a->op.channel * T + r;
            }
    }
    return 0;
}

void engine_tp_free(struct bsipipe_engine *e)
{
    struct engine_tp *t = e ? e->tp : NULL;
    if (!t)
        return;
    int pipes = e->sched ? bsipipe_schedule_n_pipes(e->sched) : 0;
    for (long x = 0; t->rep && x < (long)pipes * e->C * e->T; x++) {
        tp_rep_t *p = &t->rep[x];
        starpu_data_handle_t hs[4] = {p->h_params, p->h_grads, p->h_m, p->h_v};
        float *ms[4] = {p->params, p->grads, p->m, p->v};
        for (int j = 0; j < 4; j++)
            if (ms[j]) {
                starpu_data_unregister(hs[j]);
                free(ms[j]);
            }
    }
    free(t->rep);
    for (long x = 0; t->mem && x < (long)B_N * e->W * e->T; x++)
        if (t->mem[x]) {
            starpu_data_unregister(t->h[x]);
            free(t->mem[x]);
        }
    free(t->mem);
    free(t->h);
    if (t->scratch)
        starpu_data_unregister(t->scratch);
    for (int d = 0; d < e->W; d++) {
        if (t->args)
            free(t->args[d]);
        if (t->rec)
            free(t->rec[d]);
        if (t->slot_op)
            free(t->slot_op[d]);
        if (t->first_slot)
            free(t->first_slot[d]);
    }
    for (long x = 0; t->wmask && x < (long)e->W * e->T; x++)
        free(t->wmask[x]);
    for (long x = 0; x < t->n_tasks; x++)
        tt_free(t->tasks[x]);
    free(t->tasks);
    free(t->args); free(t->rec); free(t->slot_op); free(t->slot_n); free(t->slot_cap); free(t->slot0); free(t->first_slot);
    free(t->busy); free(t->worker); free(t->wmask); free(t->next_slot); free(t->ti);
    pthread_mutex_destroy(&t->mem_lock);
    free(t);
    e->tp = NULL;
}

/* ---- records ---- */

void engine_tp_iteration_begin(struct bsipipe_engine *e)
{
    struct engine_tp *t = e->tp;
    int pipes = bsipipe_schedule_n_pipes(e->sched);
    for (long x = 0; x < t->n_tasks; x++)
        tt_free(t->tasks[x]);
    t->n_tasks = 0;
    memset(t->busy, 0, sizeof(double) * (size_t)e->W * (size_t)e->T);
    for (long x = 0; x < (long)pipes * e->C * e->T; x++)
        if (t->rep[x].grads) {
            starpu_data_acquire(t->rep[x].h_grads, STARPU_W);
            memset(t->rep[x].grads, 0, sizeof(float) * (size_t)t->rep[x].n);
            starpu_data_release(t->rep[x].h_grads);
        }
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (long j = 0; j < (long)n * e->T; j++) {
            memset(&t->rec[d][j], 0, sizeof t->rec[d][j]);
            t->rec[d][j].seq = -1;
            t->args[d][j].ph_ok = 0;
            memset(t->args[d][j].ph, 0, sizeof t->args[d][j].ph);
        }
        t->slot0[d] = t->next_slot ? t->next_slot[d * e->T] : 0;
        t->slot_n[d] = 0;
    }
}

void engine_tp_iteration_end(struct bsipipe_engine *e)
{
    struct engine_tp *t = e->tp;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++) {
            bsipipe_engine_op_record_t *out = &e->rec[d][i];
            op_args_t *a = &e->args[d][i];
            memset(out, 0, sizeof *out);
            out->seq = -1;
            out->worker = e->workerid[d];
            a->ph_ok = 0;
            memset(a->ph, 0, sizeof a->ph);
            for (int r = 0; r < e->T; r++) {
                const bsipipe_engine_op_record_t *q = &t->rec[d][(long)i * e->T + r];
                const op_args_t *qa = &t->args[d][(long)i * e->T + r];
                if (q->seq < 0)
                    continue;
                if (out->seq < 0 || q->start_us < out->start_us)
                    out->start_us = q->start_us;
                if (out->seq < 0 || q->end_us > out->end_us)
                    out->end_us = q->end_us;
                if (q->seq > out->seq)
                    out->seq = q->seq;
                if (qa->ph_ok) {
                    a->ph_ok = 1;
                    for (int j = 0; j < 5; j++)
                        a->ph[j] += qa->ph[j];
                }
            }
            if (out->seq < 0)
                out->seq = 0;
        }
    }
}

double engine_tp_busy_us(const struct bsipipe_engine *e, int d)
{
    double sum = 0;
    for (int r = 0; r < e->T; r++)
        sum += e->tp->busy[d * e->T + r];
    return sum / e->T;
}

const op_args_t *engine_tp_op_args(struct bsipipe_engine *e, int d, int i)
{
    return &e->tp->args[d][(long)i * e->T];
}

const op_args_t *engine_tp_slot_op(struct bsipipe_engine *e, int d, long slot)
{
    struct engine_tp *t = e->tp;
    long j = slot - t->slot0[d];
    if (j < 0 || j >= t->slot_n[d])
        return NULL;
    return engine_tp_op_args(e, d, t->slot_op[d][j]);
}

/* ---- submission ---- */

/* The op being submitted. */
typedef struct tp_ctx {
    struct bsipipe_engine *e;
    int d, i, dry, ncoll;
    op_args_t *a;                /* the original */
    int x;                       /* replica pipe * C + chunk */
    long ai, ki;                 /* act_i / kv_i of rank 0 */
    int len, ls;
    double emu_unit, emu_coll;   /* --emulate: seconds per FLOP of a segment's weight, per collective */
} tp_ctx_t;

typedef struct tb {
    struct starpu_data_descr descr[STEP_DESCR];
    int n;
    tp_task_t *t;
} tb_t;

/* Adds handle h in mode m (a handle already there: modes merged) and
 * returns its index. */
static int tb_add(tb_t *b, starpu_data_handle_t h, enum starpu_data_access_mode m)
{
    for (int j = 0; j < b->n; j++)
        if (b->descr[j].handle == h) {
            if (m != STARPU_SCRATCH)
                b->descr[j].mode = (enum starpu_data_access_mode)(b->descr[j].mode | m);
            return j;
        }
    b->descr[b->n].handle = h;
    b->descr[b->n].mode = m;
    return b->n++;
}

static void tb_role(tb_t *b, int role, starpu_data_handle_t h, enum starpu_data_access_mode m)
{
    b->t->ix[role] = (signed char)tb_add(b, h, m);
}

static void tp_popped(void *arg)
{
    tp_task_t *tt = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(&tt->a->running_since, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&tt->a->e->tasks_popped, 1, __ATOMIC_SEQ_CST);
}

/* Callback: the op's record on this rank spans its tasks. */
static void tp_done(void *arg)
{
    tp_task_t *tt = arg;
    op_args_t *a = tt->a;
    struct starpu_profiling_task_info *pi = tt->task ? tt->task->profiling_info : NULL;
    if (pi) {
        double s = starpu_timing_timespec_to_us(&pi->start_time), f = starpu_timing_timespec_to_us(&pi->end_time);
        if (a->rec->seq < 0 || s < a->rec->start_us)
            a->rec->start_us = s;
        if (a->rec->seq < 0 || f > a->rec->end_us)
            a->rec->end_us = f;
        a->rec->worker = pi->workerid;
        a->ph[0] += starpu_timing_timespec_delay_us(&pi->push_start_time, &pi->push_end_time);
        a->ph[1] += starpu_timing_timespec_delay_us(&pi->pop_start_time, &pi->pop_end_time);
        a->ph[2] += starpu_timing_timespec_delay_us(&pi->acquire_data_start_time, &pi->acquire_data_end_time);
        a->ph[3] += starpu_timing_timespec_delay_us(&pi->start_time, &pi->end_time);
        a->ph[4] += starpu_timing_timespec_delay_us(&pi->release_data_start_time, &pi->release_data_end_time);
        a->ph_ok = 1;
        if (a->op.kind <= BSIPIPE_OP_W) {
            /* A collective holds every rank of the group (each waits for
             * its output), as the planner puts it on every rank's
             * timeline: its time counts for all of them. */
            struct engine_tp *t = a->e->tp;
            int T = a->e->T, d = a->op.device;
            /* one task, or the meeting rank that ran it; an NCCL rank's
             * task spans its own wait */
            int all = tt->kind >= C_AG && (tt->meet ? tt->ran : !a->e->tp_nccl);
            pthread_mutex_lock(&t->mem_lock);
            for (int q = 0; q < T; q++)
                if (all || q == tt->rank)
                    t->busy[d * T + q] += f - s;
            pthread_mutex_unlock(&t->mem_lock);
        }
    }
    a->rec->seq = __atomic_fetch_add(&a->e->rec_seq, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&a->running_since, 0LL, __ATOMIC_SEQ_CST);
    engine_watchdog_task_ended(a->e, tt->recv);
}

/* Room for n more kept tasks. */
static int tasks_reserve(struct engine_tp *t, long n)
{
    if (t->n_tasks + n <= t->cap_tasks)
        return 0;
    long cap = t->cap_tasks ? 2 * t->cap_tasks : 1024;
    while (cap < t->n_tasks + n)
        cap *= 2;
    tp_task_t **p = realloc(t->tasks, sizeof *p * (size_t)cap);
    if (!p)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    t->tasks = p;
    t->cap_tasks = cap;
    return 0;
}

/* Keeps tt until the next iteration (its task's cl_arg); frees it on failure. */
static int tasks_keep(struct engine_tp *t, tp_task_t *tt)
{
    if (tasks_reserve(t, 1) < 0) {
        tt_free(tt);
        return -ENOMEM;
    }
    t->tasks[t->n_tasks++] = tt;
    return 0;
}

/* Posting ahead with TP: the plan's RECV is posted before the compute op
 * engine_recv_ahead names (or a later one before the RECV) starts on the
 * rank's worker, i.e. ahead of that op's first task there, when that is at
 * most BSIPIPE_POLICY_MAX_AHEAD of the worker's slots back (an op is tens of
 * segment tasks per rank); else in place. */
static int tp_recv_ahead(const tp_ctx_t *c, int r, long slot)
{
    struct bsipipe_engine *e = c->e;
    int j = engine_recv_ahead(e, c->d, c->i), n;
    const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, c->d, &n);
    for (int a = c->i - j; j > 0 && a < c->i; a++) {
        long back = slot - e->tp->first_slot[c->d][(long)a * e->T + r];
        if (ops[a].kind <= BSIPIPE_OP_W && back > 0 && back <= BSIPIPE_POLICY_MAX_AHEAD)
            return (int)back;
    }
    return 0;
}

/* Submits b's task on rank r's worker of device c->d (or, dry, counts its
 * buffer uses). own: cl_arg is the tp_task (else the rank's op args, for the
 * engine's own SEND / RECV / SYNC codelets). */
static int tb_submit(tp_ctx_t *c, tb_t *b, struct starpu_codelet *cl, int r, int own)
{
    struct bsipipe_engine *e = c->e;
    struct engine_tp *t = e->tp;
    tp_task_t *tt = b->t;
    for (int j = 0; j < b->n; j++)
        if (!b->descr[j].handle) {
            const char *what = own && tt->kind >= 0 ? kind_names[tt->kind] : cl->name;
            tt_free(tt);
            return bsipipe_error_set(-EINVAL, "engine: %s (tp rank %d, %s) has no input buffer (plan and transfers "
                                     "disagree)", c->a->name, r, what);
        }
    if (c->dry) {
        for (int j = 0; j < b->n; j++)
            engine_buffer_use(e, b->descr[j].handle, 1);
        tt_free(tt);
        return 0;
    }
    if (tasks_keep(t, tt) < 0)
        return -ENOMEM;
    int d = c->d, w = d * e->T + r;
    tt->rank = r;
    tt->a = &t->args[d][(long)c->i * e->T + r];
    struct starpu_task *task =
        starpu_task_build(cl, STARPU_DATA_MODE_ARRAY, b->descr, b->n, STARPU_NAME, engine_task_name(cl), 0);
    if (!task)
        return bsipipe_error_set(-ENOMEM, "engine: cannot build the task of %s", c->a->name);
    tt->task = task;
    tt->a->task = task;
    task->cl_arg = own ? (void *)tt : (void *)tt->a;
    task->cl_arg_size = 0;
    task->cl_arg_free = 0;
    task->callback_func = tp_done;
    task->callback_arg = tt;
    task->color = bsipipe_trace_op_color(&c->a->op);
    if (!tt->recv) {
        task->prologue_callback_pop_func = tp_popped;
        task->prologue_callback_pop_arg = tt;
    }
    if (e->inorder) {
        tt->pos.worker = t->worker[w];
        tt->pos.slot = t->next_slot[w]++;
        if (tt->recv)
            tt->pos.ahead = tp_recv_ahead(c, r, tt->pos.slot);
        task->sched_data = &tt->pos;
        if (r == 0) { /* the watchdog's map of rank 0's slots */
            if (t->slot_n[d] == t->slot_cap[d]) {
                long cap = t->slot_cap[d] ? 2 * t->slot_cap[d] : 256;
                int *p = realloc(t->slot_op[d], sizeof *p * (size_t)cap);
                if (!p)
                    return bsipipe_error_set(-ENOMEM, "out of memory");
                t->slot_op[d] = p;
                t->slot_cap[d] = cap;
            }
            t->slot_op[d][t->slot_n[d]++] = c->i;
        }
    } else {
        task->workerids = t->wmask[w];
        task->workerids_len = e->wmask_len;
        if (e->prio)
            task->priority = e->prio[d][c->i];
    }
    e->ovh.n_tasks++;
    if (tt->recv || tt->meet)
        starpu_task_end_dep_add(task, 1);
    if (tt->meet)
        tt->meet->task[r] = task;
    const op_args_t *ra = tt->a;
    if (cl == &bsipipe_cl_send && ra->op.channel >= 0 && ra->op.channel < e->n_channels && !e->blocking_send &&
        engine_transfer_tagged(e, d, ra->op.peer)) {
        task->use_tag = 1;
        task->tag_id = (starpu_tag_t)engine_send_tag(e, ra->op.channel);
        starpu_tag_declare_deps(task->tag_id, 1, (starpu_tag_t)engine_post_tag(e, ra->op.channel));
        e->send_tagged[ra->op.channel] = 1;
    }
    engine_job_note(e, d, c->i, task, r == 0); /* last: the job it creates reads the tag settings */
    if (starpu_task_submit(task) != 0) {
        if (tt->meet)
            tt->meet->task[r] = NULL;
        return bsipipe_error_set(-EIO, "engine: StarPU refused the task of %s", c->a->name);
    }
    __atomic_fetch_add(&e->tasks_submitted, 1, __ATOMIC_SEQ_CST);
    for (int j = 0; j < b->n; j++)
        engine_buffer_use(e, b->descr[j].handle, 0);
    return 0;
}

static tp_task_t *tt_new(int kind, int layer)
{
    tp_task_t *tt = calloc(1, sizeof *tt);
    if (tt) {
        tt->kind = kind;
        tt->layer = layer;
        memset(tt->ix, -1, sizeof tt->ix);
        memset(tt->src, -1, sizeof tt->src);
        memset(tt->dst, -1, sizeof tt->dst);
    }
    return tt;
}

static struct starpu_codelet engine_cl_tp_seg, engine_cl_tp_coll, engine_cl_tp_coll_rank, engine_cl_tp_step;

/* The activation entering the op's chunk (F) or its gradient (B) on rank r. */
static starpu_data_handle_t tp_input(tp_ctx_t *c, int r)
{
    struct bsipipe_engine *e = c->e;
    const op_args_t *a = c->a;
    const bsipipe_op_t *op = &a->op;
    if (a->in_channel >= 0)
        return e->h_recv[(long)a->in_channel * e->T + r];
    int from = op->kind == BSIPIPE_OP_F ? op->chunk - 1 : op->chunk + 1;
    if (bsipipe_schedule_chunk_device(e->sched, (bsipipe_pipe_t)op->pipe, from) != op->device)
        return NULL;
    long i = act_i(e, op->mb, op->sub, from, r);
    return op->kind == BSIPIPE_OP_F ? e->h_x_out[i] : e->h_dx[i];
}

/* --emulate: the FLOPs that weigh a segment's share of its op's emulated
 * compute time (the attention and MLP blocks of a layer, the head's
 * logits; the norms, residuals and embedding lookups count 0). */
static double attn_flops(const tp_ctx_t *c)
{
    double n = c->len, h = c->e->d, keys = n * c->a->start + n * (n + 1) / 2;
    return 2 * n * 4 * h * h + 4 * keys * h;
}

/* The attention block's weight products (Q, K, V and the output projection). */
static double wattn_flops(const tp_ctx_t *c)
{
    return 2.0 * c->len * 4 * (double)c->e->d * c->e->d;
}

static double seg_flops(const tp_ctx_t *c, int kind, int l)
{
    const bsipipe_model_dims_t *D = &c->e->dims;
    (void)l;
    switch (kind) {
    case S_ATTN: return attn_flops(c);
    case S_BATTN: return 2 * attn_flops(c);
    case S_MLP: return bsipipe_model_layer_flops(D, c->a->start, c->len) - attn_flops(c);
    case S_BMLP: return 2 * (bsipipe_model_layer_flops(D, c->a->start, c->len) - attn_flops(c));
    case S_BMLPX: case S_WMLP: return bsipipe_model_layer_flops(D, c->a->start, c->len) - attn_flops(c);
    case S_BATTNX: return 2 * attn_flops(c) - wattn_flops(c);
    case S_WATTN: return wattn_flops(c);
    case S_HLOGITS: return bsipipe_model_head_flops(D, c->len);
    case S_HBWD: return 2 * bsipipe_model_head_flops(D, c->len);
    default: return 0;
    }
}

/* --emulate, an F or B op: its emulated time on each rank is the planner's
 * (bsipipe_cost_model_emulated: FLOPs / D_t at the emulated rate, plus the
 * TP collectives' charge). The compute part is shared over the op's
 * segments by their FLOPs, the collective part equally over its
 * all-gathers and reduce-scatters (the cross-entropy's two all-reduces of
 * len doubles hold nothing, as the planner charges nothing for them). The
 * engine's ops hold the same collectives as the planner's but for the
 * head's, which all run in the last chunk's F (the planner charges one to
 * F, one to B): sharing each op's own charge keeps every op's time the
 * planner's. */
static void emu_plan(tp_ctx_t *c)
{
    struct bsipipe_engine *e = c->e;
    const bsipipe_op_t *op = &c->a->op;
    if (e->o.emulate_flops <= 0 || op->kind > BSIPIPE_OP_W)
        return;
    double comm = bsipipe_sim_tp_comm(e->sched, &e->emu_cost, op, NULL);
    double comp = bsipipe_sim_op_cost(e->sched, &e->emu_cost, op) - comm, w = 0;
    int nl = c->a->l1 - c->a->l0, first = op->chunk == 0, last = op->chunk == e->C - 1, ncoll;
    if (op->kind == BSIPIPE_OP_F) {
        ncoll = 4 * nl + first + 2 * last;
        w = nl * bsipipe_model_layer_flops(&e->dims, c->a->start, c->len) +
            (last ? 3 * bsipipe_model_head_flops(&e->dims, c->len) : 0);
    } else if (op->kind == BSIPIPE_OP_B && !e->split) {
        ncoll = 6 * nl + first;
        w = 2 * nl * bsipipe_model_layer_flops(&e->dims, c->a->start, c->len);
    } else { /* split backward: the segments' own weights (seg_flops) */
        int b = op->kind == BSIPIPE_OP_B;
        ncoll = b ? 4 * nl + first : 2 * nl;
        w = nl * (b ? seg_flops(c, S_BMLPX, 0) + seg_flops(c, S_BATTNX, 0) : seg_flops(c, S_WMLP, 0) + seg_flops(c, S_WATTN, 0));
    }
    c->emu_unit = w > 0 ? comp / w : 0;
    c->emu_coll = ncoll > 0 ? comm / ncoll : 0;
}

/* One segment on every rank. */
static int seg(tp_ctx_t *c, int kind, int l)
{
    struct bsipipe_engine *e = c->e;
    struct engine_tp *t = e->tp;
    const bsipipe_op_t *op = &c->a->op;
    int T = e->T, d = c->d, first = l == c->a->l0, last = l == c->a->l1 - 1, c0 = op->chunk == 0,
        cl = op->chunk == e->C - 1;
    for (int r = 0; r < T; r++) {
        tb_t b = {.n = 0};
        if (!(b.t = tt_new(kind, l)))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        tp_rep_t *p = &t->rep[c->x * T + r];
        long ai = c->ai + r, ki = c->ki + r;
        starpu_data_handle_t P = p->h_params, G = p->h_grads, ST = e->h_stash[ai], Y = e->h_x_out[ai];
        switch (kind) {
        case S_EMB_VOCAB:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_TOK, e->h_tokens[op->mb], STARPU_R);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            break;
        case S_EMB_POS:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_Y, Y, STARPU_RW);
            break;
        case S_NORM1:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_X, !first ? comm_h(e, B_RE, d, r) : c0 ? Y : tp_input(c, r), STARPU_R);
            tb_role(&b, R_ST, ST, first ? STARPU_W : STARPU_RW);
            break;
        case S_ATTN:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_ST, ST, STARPU_RW);
            tb_role(&b, R_KV, e->h_kv[ki], op->sub == 0 && first ? STARPU_W : STARPU_RW);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            break;
        case S_NORM2:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_RE, comm_h(e, B_RE, d, r), STARPU_R);
            tb_role(&b, R_ST, ST, STARPU_RW);
            break;
        case S_MLP:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_ST, ST, STARPU_RW);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            break;
        case S_OUT: /* into red in place, or the chunk's output slice */
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_RE, comm_h(e, B_RE, d, r), STARPU_RW);
            if (last)
                tb_role(&b, R_Y, Y, c0 ? STARPU_RW : STARPU_W);
            break;
        case S_HNORM:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_Y, Y, STARPU_R);
            tb_role(&b, R_HX, comm_h(e, B_HX, d, r), STARPU_W);
            break;
        case S_HLOGITS:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_HL, comm_h(e, B_HL, d, r), STARPU_W);
            tb_role(&b, R_HC, comm_h(e, B_HC, d, r), STARPU_W);
            break;
        case S_HSUMS:
            tb_role(&b, R_HL, comm_h(e, B_HL, d, r), STARPU_R);
            tb_role(&b, R_TGT, e->h_targets[op->mb], STARPU_R);
            tb_role(&b, R_HC, comm_h(e, B_HC, d, r), STARPU_RW);
            break;
        case S_HBWD:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_TGT, e->h_targets[op->mb], STARPU_R);
            tb_role(&b, R_HC, comm_h(e, B_HC, d, r), STARPU_R);
            tb_role(&b, R_HL, comm_h(e, B_HL, d, r), STARPU_RW);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            if (r == 0) /* the loss is the same on every rank: rank 0 counts it */
                tb_role(&b, R_LOSS, e->h_loss[d], STARPU_RW);
            break;
        case S_HBNORM:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_Y, Y, STARPU_R);
            tb_role(&b, R_HX, comm_h(e, B_HX, d, r), STARPU_R);
            tb_role(&b, R_RE, comm_h(e, B_RE, d, r), STARPU_R);
            tb_role(&b, R_DY, e->h_dy[ai], STARPU_W);
            break;
        case S_BMLP:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_GD, comm_h(e, B_GD, d, r), STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            tb_role(&b, R_SC, t->scratch, STARPU_SCRATCH);
            break;
        case S_BMLPX: /* the chunk's wstash is written first here (the B's first layer) */
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_GD, comm_h(e, B_GD, d, r), STARPU_R);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            tb_role(&b, R_SC, t->scratch, STARPU_SCRATCH);
            tb_role(&b, R_WS, e->h_wstash[ai], last ? STARPU_W : STARPU_RW);
            break;
        case S_BATTNX:
            b.t->clear = last && op->sub == e->k - 1;
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_KV, e->h_kv[ki], STARPU_R);
            tb_role(&b, R_DKV, e->h_dkv[ki], b.t->clear ? STARPU_W : STARPU_RW);
            tb_role(&b, R_GD, comm_h(e, B_GD, d, r), STARPU_R);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            tb_role(&b, R_SC, t->scratch, STARPU_SCRATCH);
            tb_role(&b, R_WS, e->h_wstash[ai], STARPU_RW);
            break;
        case S_WMLP:
        case S_WATTN:
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_WS, e->h_wstash[ai], STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            break;
        case S_BNORM2:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_X, last ? (cl ? e->h_dy[ai] : tp_input(c, r)) : comm_h(e, B_GB, d, r), STARPU_R);
            tb_role(&b, R_RE, comm_h(e, B_RE, d, r), STARPU_R);
            tb_role(&b, R_D2, comm_h(e, B_D2, d, r), STARPU_W);
            break;
        case S_BATTN:
            b.t->clear = last && op->sub == e->k - 1; /* the first backward of the micro-batch on this chunk */
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_KV, e->h_kv[ki], STARPU_R);
            tb_role(&b, R_DKV, e->h_dkv[ki], b.t->clear ? STARPU_W : STARPU_RW);
            tb_role(&b, R_GD, comm_h(e, B_GD, d, r), STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            tb_role(&b, R_PA, comm_h(e, B_PA, d, r), STARPU_W);
            tb_role(&b, R_SC, t->scratch, STARPU_SCRATCH);
            break;
        case S_BNORM1:
            tb_role(&b, R_P, P, STARPU_R);
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_ST, ST, STARPU_R);
            tb_role(&b, R_D2, comm_h(e, B_D2, d, r), STARPU_R);
            tb_role(&b, R_RE, comm_h(e, B_RE, d, r), STARPU_R);
            tb_role(&b, R_GB, first && !c0 ? e->h_dx[ai] : comm_h(e, B_GB, d, r), STARPU_W);
            break;
        case S_EBPOS:
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_GB, comm_h(e, B_GB, d, r), STARPU_R);
            break;
        case S_EBVOCAB:
            tb_role(&b, R_G, G, STARPU_RW);
            tb_role(&b, R_TOK, e->h_tokens[op->mb], STARPU_R);
            tb_role(&b, R_GA, comm_h(e, B_GA, d, r), STARPU_R);
            break;
        default:
            free(b.t);
            return bsipipe_error_set(-EINVAL, "engine: unknown tp segment %d", kind);
        }
        b.t->emu_s = c->emu_unit * seg_flops(c, kind, l);
        int rc = tb_submit(c, &b, &engine_cl_tp_seg, r, 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* One collective over the T ranks: src(q) read at off, dst(q) written
 * (in place when dst is NULL: src(q) read and written). One task, on the
 * op's next rank in turn. */
typedef starpu_data_handle_t (*tp_h_fn)(tp_ctx_t *c, int q);

/* Every task of m's collective ends (the last to arrive calls this). */
static void meet_release(tp_meet_t *m, int T)
{
    for (int q = 0; q < T; q++)
        if (m->task[q])
            starpu_task_end_dep_release(m->task[q]);
}

/* Submission stopped before rank `from`: the ranks from there on arrive
 * here, so the tasks already submitted end (without the collective) instead
 * of waiting for ever; the engine has failed by then. */
static void meet_abort(tp_meet_t *m, int from, int T)
{
    __atomic_store_n(&m->aborted, 1, __ATOMIC_SEQ_CST);
    for (int q = from; q < T; q++)
        if (__atomic_add_fetch(&m->arrived, 1, __ATOMIC_ACQ_REL) == T)
            meet_release(m, T);
}

/* The collective as T tasks, rank q's on its worker over its buffers:
 * NCCL calls (a group over GPUs), else a meeting point (tp_meet_t). */
static int coll_per_rank(tp_ctx_t *c, int kind, long off, long count, tp_h_fn src, tp_h_fn dst, int rep)
{
    struct bsipipe_engine *e = c->e;
    int T = e->T, rc = 0, q;
    int meets = !e->tp_nccl || e->o.emulate_flops > 0;
    tp_meet_t *m = NULL;
    if (!c->dry && meets && !(m = calloc(1, sizeof *m)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    /* Room for the T tasks first: with NCCL (no meeting point to abort) a
     * rank left unsubmitted would leave the others waiting in NCCL. */
    if (!c->dry && (rc = tasks_reserve(e->tp, T)) < 0) {
        free(m);
        return rc;
    }
    for (q = 0; q < T; q++) {
        tb_t b = {.n = 0};
        if (!(b.t = tt_new(kind, -1))) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory");
            if (q == 0)
                free(m); /* not owned by a task yet */
            break;
        }
        b.t->off = off;
        b.t->count = count;
        b.t->rep = rep;
        b.t->emu_s = kind == C_AG || kind == C_RS ? c->emu_coll : 0;
        b.t->meet = m;
        b.t->own_meet = q == 0;
        b.t->src[0] = (signed char)tb_add(&b, src(c, q), dst ? STARPU_R : STARPU_RW);
        if (dst)
            b.t->dst[0] = (signed char)tb_add(&b, dst(c, q), STARPU_W);
        if ((rc = tb_submit(c, &b, &engine_cl_tp_coll_rank, q, 1)) < 0)
            break; /* rank 0's task, kept or freed, owns m */
    }
    if (rc < 0 && q > 0 && m)
        meet_abort(m, q, T);
    c->ncoll++;
    return rc;
}

static int coll(tp_ctx_t *c, int kind, long off, long count, tp_h_fn src, tp_h_fn dst, int rep)
{
    int T = c->e->T;
    if (c->e->tp->per_rank)
        return coll_per_rank(c, kind, off, count, src, dst, rep);
    tb_t b = {.n = 0};
    if (!(b.t = tt_new(kind, -1)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    b.t->off = off;
    b.t->count = count;
    b.t->rep = rep;
    b.t->emu_s = kind == C_AG || kind == C_RS ? c->emu_coll : 0;
    for (int q = 0; q < T; q++)
        b.t->src[q] = (signed char)tb_add(&b, src(c, q), dst ? STARPU_R : STARPU_RW);
    for (int q = 0; q < T && dst; q++)
        b.t->dst[q] = (signed char)tb_add(&b, dst(c, q), STARPU_W);
    return tb_submit(c, &b, &engine_cl_tp_coll, c->ncoll++ % T, 1);
}

static starpu_data_handle_t h_st(tp_ctx_t *c, int q) { return c->e->h_stash[c->ai + q]; }
static starpu_data_handle_t h_ga(tp_ctx_t *c, int q) { return comm_h(c->e, B_GA, c->d, q); }
static starpu_data_handle_t h_pa(tp_ctx_t *c, int q) { return comm_h(c->e, B_PA, c->d, q); }
static starpu_data_handle_t h_re(tp_ctx_t *c, int q) { return comm_h(c->e, B_RE, c->d, q); }
static starpu_data_handle_t h_gd(tp_ctx_t *c, int q) { return comm_h(c->e, B_GD, c->d, q); }
static starpu_data_handle_t h_d2(tp_ctx_t *c, int q) { return comm_h(c->e, B_D2, c->d, q); }
static starpu_data_handle_t h_gb(tp_ctx_t *c, int q) { return comm_h(c->e, B_GB, c->d, q); }
static starpu_data_handle_t h_hx(tp_ctx_t *c, int q) { return comm_h(c->e, B_HX, c->d, q); }
static starpu_data_handle_t h_hc(tp_ctx_t *c, int q) { return comm_h(c->e, B_HC, c->d, q); }
static starpu_data_handle_t h_y(tp_ctx_t *c, int q) { return c->e->h_x_out[c->ai + q]; }
static starpu_data_handle_t h_dy(tp_ctx_t *c, int q) { return c->e->h_dy[c->ai + q]; }
static starpu_data_handle_t h_in(tp_ctx_t *c, int q) { return tp_input(c, q); }

/* All-gather of a layer's norm output `which` (1: before attention, 2:
 * before the MLP) from its stash (st: the layer's offset there): the input
 * of the forward's column-parallel products and of their weight gradients. */
static int regather_norm(tp_ctx_t *c, long st, int which, long cnt)
{
    return coll(c, C_AG, st + bsipipe_tp_stash_norm_offset(&c->e->dims, c->e->T, c->len, which), cnt, h_st, h_ga, 0);
}

static int tp_forward(tp_ctx_t *c)
{
    struct bsipipe_engine *e = c->e;
    const op_args_t *a = c->a;
    int T = e->T, rc = 0;
    long cnt = (long)c->ls * e->d, stash1 = bsipipe_tp_stash_size(&e->dims, T, c->len);
#define DO(x) do { if ((rc = (x)) < 0) return rc; } while (0)
    if (a->op.chunk == 0) {
        DO(seg(c, S_EMB_VOCAB, a->l0));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_y, 0));
        DO(seg(c, S_EMB_POS, a->l0));
    }
    for (int l = a->l0; l < a->l1; l++) {
        long st = (long)(l - a->l0) * stash1;
        DO(seg(c, S_NORM1, l));
        DO(regather_norm(c, st, 1, cnt));
        DO(seg(c, S_ATTN, l));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_re, 0));
        DO(seg(c, S_NORM2, l));
        DO(regather_norm(c, st, 2, cnt));
        DO(seg(c, S_MLP, l));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_re, 0));
        DO(seg(c, S_OUT, l));
    }
    if (a->op.chunk == e->C - 1) { /* the head and the vocabulary-parallel cross-entropy */
        int L = e->dims.n_layers;
        DO(seg(c, S_HNORM, L));
        DO(coll(c, C_AG, 0, cnt, h_hx, h_ga, 0));
        DO(seg(c, S_HLOGITS, L));
        DO(coll(c, C_ARMAX, 0, c->len, h_hc, NULL, 0));
        DO(seg(c, S_HSUMS, L));
        DO(coll(c, C_ARSUM, c->len, 2L * c->len, h_hc, NULL, 0));
        DO(seg(c, S_HBWD, L));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_re, 0));
        DO(seg(c, S_HBNORM, L));
    }
    return 0;
}

static int tp_backward(tp_ctx_t *c)
{
    struct bsipipe_engine *e = c->e;
    const op_args_t *a = c->a;
    int T = e->T, rc = 0;
    long cnt = (long)c->ls * e->d, stash1 = bsipipe_tp_stash_size(&e->dims, T, c->len);
    for (int l = a->l1 - 1; l >= a->l0; l--) {
        long st = (long)(l - a->l0) * stash1;
        tp_h_fn gin = l < a->l1 - 1 ? h_gb : a->op.chunk == e->C - 1 ? h_dy : h_in;
        /* Split (ZeroBubble): the weight products and the re-gathers of the
         * norm outputs they need go to W (tp_wgrad). */
        DO(coll(c, C_AG, 0, cnt, gin, h_gd, 0));
        if (!e->split)
            DO(regather_norm(c, st, 2, cnt));
        DO(seg(c, e->split ? S_BMLPX : S_BMLP, l));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_re, 0));
        DO(seg(c, S_BNORM2, l));
        DO(coll(c, C_AG, 0, cnt, h_d2, h_gd, 0));
        if (!e->split)
            DO(regather_norm(c, st, 1, cnt));
        DO(seg(c, e->split ? S_BATTNX : S_BATTN, l));
        DO(coll(c, C_RS, 0, cnt, h_pa, h_re, 0));
        DO(seg(c, S_BNORM1, l));
    }
    if (a->op.chunk == 0) {
        DO(seg(c, S_EBPOS, a->l0));
        DO(coll(c, C_AG, 0, cnt, h_gb, h_ga, 0));
        DO(seg(c, S_EBVOCAB, a->l0));
    }
    return 0;
}

/* W of a split backward: per layer, in the B's order, the weight halves
 * after the all-gathers of the norm outputs they read. */
static int tp_wgrad(tp_ctx_t *c)
{
    struct bsipipe_engine *e = c->e;
    const op_args_t *a = c->a;
    int T = e->T, rc = 0;
    long cnt = (long)c->ls * e->d, stash1 = bsipipe_tp_stash_size(&e->dims, T, c->len);
    for (int l = a->l1 - 1; l >= a->l0; l--) {
        long st = (long)(l - a->l0) * stash1;
        DO(regather_norm(c, st, 2, cnt));
        DO(seg(c, S_WMLP, l));
        DO(regather_norm(c, st, 1, cnt));
        DO(seg(c, S_WATTN, l));
    }
    return 0;
}

/* SEND, RECV, SYNC: the engine's codelets, once per rank on its slice or shard. */
static int tp_simple(tp_ctx_t *c)
{
    struct bsipipe_engine *e = c->e;
    struct engine_tp *t = e->tp;
    const bsipipe_op_t *op = &c->a->op;
    int T = e->T, rc;
    for (int r = 0; r < T; r++) {
        tb_t b = {.n = 0};
        if (!(b.t = tt_new(-1, -1)))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        struct starpu_codelet *cl;
        long ch = (long)op->channel * T + r;
        switch (op->kind) {
        case BSIPIPE_OP_SEND:
            cl = &bsipipe_cl_send;
            tb_add(&b, op->tensor == BSIPIPE_TENSOR_ACT ? e->h_x_out[c->ai + r] : e->h_dx[c->ai + r], STARPU_R);
            if (!c->dry)
                e->act_bytes_local += (double)(e->n_x_out[c->ai + r]) * sizeof(float);
            break;
        case BSIPIPE_OP_RECV:
            cl = &bsipipe_cl_recv;
            b.t->recv = 1;
            tb_add(&b, e->h_recv[ch], STARPU_W);
            break;
        case BSIPIPE_OP_SYNC:
            if (op->pipe == 0) {
                cl = &bsipipe_cl_sync;
                tb_add(&b, t->rep[(long)op->chunk * T + r].h_grads, STARPU_RW);
                tb_add(&b, t->rep[((long)e->C + op->chunk) * T + r].h_grads, STARPU_RW);
                if (!c->dry)
                    e->sync_bytes_local += 2.0 * (double)t->rep[(long)op->chunk * T + r].n * sizeof(float);
            } else {
                cl = &bsipipe_cl_sync_peer;
                tb_add(&b, t->rep[((long)e->C + op->chunk) * T + r].h_grads, STARPU_R);
            }
            break;
        default:
            free(b.t);
            return bsipipe_error_set(-EINVAL, "engine: unknown op kind %d", op->kind);
        }
        if ((rc = tb_submit(c, &b, cl, r, 0)) < 0)
            return rc;
    }
    return 0;
}

/* STEP on every rank: the norm from every chunk's squared norm, AdamW on
 * the rank's own shards. */
static int tp_step(tp_ctx_t *c, int step)
{
    struct bsipipe_engine *e = c->e;
    struct engine_tp *t = e->tp;
    int T = e->T, rc;
    for (int r = 0; r < T; r++) {
        t->args[c->d][(long)c->i * T + r].do_step = step;
        tb_t b = {.n = 0};
        if (!(b.t = tt_new(-1, -1)))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        /* The norm's inputs: every chunk's squared norm (its NORM task,
         * engine_tp_submit_norm, or across MPI ranks sent by its owner);
         * then the rank's own replicas. */
        for (int x = 0; x < e->C; x++)
            b.descr[b.n++] = (struct starpu_data_descr){e->h_norm[x], STARPU_R};
        for (int j = 0; j < c->a->n_own && b.n + 4 <= STEP_DESCR; j++) {
            int x = c->a->own_rep[j];
            tp_rep_t *p = &t->rep[(long)x * T + r];
            b.descr[b.n++] = (struct starpu_data_descr){p->h_params, STARPU_RW};
            b.descr[b.n++] = (struct starpu_data_descr){p->h_m, STARPU_RW};
            b.descr[b.n++] = (struct starpu_data_descr){p->h_v, STARPU_RW};
            b.descr[b.n++] = (struct starpu_data_descr){p->h_grads, STARPU_R};
        }
        if ((rc = tb_submit(c, &b, &engine_cl_tp_step, r, 1)) < 0)
            return rc;
    }
    return 0;
}

static void ctx_init(tp_ctx_t *c, struct bsipipe_engine *e, int d, int i, int dry)
{
    memset(c, 0, sizeof *c);
    c->e = e;
    c->d = d;
    c->i = i;
    c->dry = dry;
    c->a = &e->args[d][i];
    const bsipipe_op_t *op = &c->a->op;
    if (op->chunk >= 0)
        c->x = op->pipe * e->C + op->chunk;
    if (op->sub >= 0 && op->chunk >= 0) {
        c->ai = act_i(e, op->mb, op->sub, op->chunk, 0);
        c->ki = kv_i(e, op->mb, op->chunk, 0);
        c->len = c->a->len;
        c->ls = c->len / e->T;
    }
}

int engine_tp_submit_rank(struct bsipipe_engine *e, int d, int i, int r, struct starpu_codelet *cl,
                          const struct starpu_data_descr *descr, int n)
{
    tp_ctx_t c;
    ctx_init(&c, e, d, i, 0);
    tb_t b = {.n = 0};
    if (n > STEP_DESCR || !(b.t = tt_new(-1, -1)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int j = 0; j < n; j++)
        b.descr[b.n++] = descr[j];
    return tb_submit(&c, &b, cl, r, 0);
}

starpu_data_handle_t engine_tp_rep_grads(struct bsipipe_engine *e, int x, int r, long *n)
{
    const tp_rep_t *p = &e->tp->rep[(long)x * e->T + r];
    if (n)
        *n = p->n;
    return p->h_grads;
}

int engine_tp_submit_op(struct bsipipe_engine *e, int d, int i, int step, int dry_run)
{
    tp_ctx_t c;
    ctx_init(&c, e, d, i, dry_run);
    for (int r = 0; !dry_run && e->inorder && r < e->T; r++)
        e->tp->first_slot[d][(long)i * e->T + r] = e->tp->next_slot[d * e->T + r];
    emu_plan(&c);
    switch (c.a->op.kind) {
    case BSIPIPE_OP_F:
        return tp_forward(&c);
    case BSIPIPE_OP_B:
        return tp_backward(&c);
    case BSIPIPE_OP_W:
        return tp_wgrad(&c);
    case BSIPIPE_OP_SEND:
    case BSIPIPE_OP_RECV:
    case BSIPIPE_OP_SYNC:
        return tp_simple(&c);
    case BSIPIPE_OP_STEP:
        return tp_step(&c, step);
    default:
        return bsipipe_error_set(-ENOTSUP, "engine: %s is not supported with tensor parallelism", c.a->name);
    }
}

static starpu_data_handle_t h_rep_grads(tp_ctx_t *c, int q)
{
    return c->e->tp->rep[(long)c->x * c->e->T + q].h_grads;
}

int engine_tp_submit_reduce(struct bsipipe_engine *e, int dry_run)
{
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!engine_local(e, d))
            continue;
        for (int i = 0; i < n; i++) {
            if (ops[i].kind != BSIPIPE_OP_STEP)
                continue;
            tp_ctx_t c;
            ctx_init(&c, e, d, i, dry_run);
            for (int j = 0; j < c.a->n_own; j++) {
                c.x = c.a->own_rep[j];
                int rc = coll(&c, C_AREP, 0, 0, h_rep_grads, NULL, c.x);
                if (rc < 0)
                    return rc;
            }
        }
    }
    return 0;
}

/* The vector `which` of replica slot p (params, grads, m, v). */
static float *rep_vec(tp_rep_t *p, int which, starpu_data_handle_t *h)
{
    switch (which) {
    case ENGINE_TP_GRADS: *h = p->h_grads; return p->grads;
    case ENGINE_TP_M: *h = p->h_m; return p->m;
    case ENGINE_TP_V: *h = p->h_v; return p->v;
    default: *h = p->h_params; return p->params;
    }
}

int engine_tp_full(struct bsipipe_engine *e, int pipe, int which, float *out)
{
    struct engine_tp *t = e->tp;
    int T = e->T;
    float *shard = calloc((size_t)t->shard_n * (size_t)T, sizeof(float));
    if (!shard)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int c = 0; c < e->C; c++)
        for (int r = 0; r < T; r++) {
            tp_rep_t *p = &t->rep[((long)pipe * e->C + c) * T + r];
            starpu_data_handle_t h;
            const float *src = rep_vec(p, which, &h);
            if (!src)
                continue; /* another process's (MPI): zeros here, its values there */
            starpu_data_acquire(h, STARPU_R);
            memcpy(shard + (size_t)r * (size_t)t->shard_n + p->base, src, sizeof(float) * (size_t)p->n);
            starpu_data_release(h);
        }
    memset(out, 0, sizeof(float) * (size_t)bsipipe_model_params(&e->dims));
    /* Split tensors: each rank's blocks into place. Replicated ones (norms,
     * wpe): copied from every rank in turn, so the last rank's copy stays;
     * after the replicated-gradient all-reduce every rank holds the same
     * bits in them (and so the same AdamW moments), hence any rank's copy is
     * the D_t = 1 run's value up to the reordered sum. */
    int rc = 0;
    for (int r = 0; r < T && rc == 0; r++) {
        bsipipe_tp_t tp = {T, r};
        rc = bsipipe_tp_model_unshard(&e->dims, &tp, shard + (size_t)r * (size_t)t->shard_n, out, 0);
    }
    free(shard);
    return rc;
}

int engine_tp_set_full(struct bsipipe_engine *e, int pipe, int which, const float *full, float *shard)
{
    struct engine_tp *t = e->tp;
    int T = e->T, rc = 0;
    for (int r = 0; r < T && rc == 0; r++) {
        bsipipe_tp_t tp = {T, r};
        if ((rc = bsipipe_tp_model_shard(&e->dims, &tp, full, shard)) < 0)
            break;
        for (int c = 0; c < e->C; c++) {
            tp_rep_t *p = &t->rep[((long)pipe * e->C + c) * T + r];
            starpu_data_handle_t h;
            float *dst = rep_vec(p, which, &h);
            if (!dst)
                continue; /* not this process's */
            starpu_data_acquire(h, STARPU_W);
            memcpy(dst, shard + p->base, sizeof(float) * (size_t)p->n);
            starpu_data_release(h);
        }
    }
    return rc;
}

int engine_tp_gather(struct bsipipe_engine *e, float *out, int grads)
{
    int rc = engine_tp_full(e, 0, grads ? ENGINE_TP_GRADS : ENGINE_TP_PARAMS, out);
    /* Across MPI ranks every element comes from one process (the others
     * hold zeros there): the sum is exact. Every rank calls. */
    int arc = engine_mpi_sum_floats(e, out, bsipipe_model_params(&e->dims));
    return rc < 0 ? rc : arc;
}

/* ---- codelets ---- */

#define BUF(role, type) (tt->ix[role] >= 0 ? (type)STARPU_VECTOR_GET_PTR(buffers[tt->ix[role]]) : NULL)
#define NX(role) (tt->ix[role] >= 0 ? (double)STARPU_VECTOR_GET_NX(buffers[tt->ix[role]]) : 0.0)

/* Live activation bytes of the device, as without TP (cl_forward.c,
 * cl_backward.c): every rank's stash from its forward's first segment to its
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
                kind_names[tt->kind], bsipipe_strerror(rc), *detail ? ": " : "", detail);
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
    fprintf(stderr, "bsipipe engine: %s (tp %s) failed: %s%s%s\n", tt->a->name, kind_names[tt->kind],
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
    bsipipe_tp_nccl_t *n = e->tp_nccl;
    int g = tt->a->op.device, q = tt->rank, rc = 0;
    cudaStream_t s = engine_cuda_stream();
    switch (tt->kind) {
    case C_AG:
        return bsipipe_tp_nccl_all_gather(n, g, q, send, recv, tt->count, BSIPIPE_TP_F32, s);
    case C_RS:
        return bsipipe_tp_nccl_reduce_scatter(n, g, q, send, recv, tt->count, BSIPIPE_TP_F32, s);
    case C_ARMAX:
    case C_ARSUM:
        return bsipipe_tp_nccl_all_reduce(n, g, q, send, tt->count, BSIPIPE_TP_F64,
                                          tt->kind == C_ARMAX ? BSIPIPE_TP_MAX : BSIPIPE_TP_SUM, s);
    case C_AREP: { /* every replicated tensor of the replica, in one NCCL launch */
        const struct engine_tp *t = e->tp;
        const tp_rep_t *p0 = &t->rep[(long)tt->rep * e->T];
        if ((rc = bsipipe_tp_nccl_batch_begin()) < 0)
            return rc;
        for (int j = 0; j < t->nti && rc == 0; j++) {
            const bsipipe_tp_tensor_info_t *ti = &t->ti[j];
            long cnt = (long)ti->rows * ti->cols, off = ti->offset - p0->base;
            if (ti->split == BSIPIPE_TP_REPLICATED && off >= 0 && off < p0->n)
                rc = bsipipe_tp_nccl_all_reduce(n, g, q, (float *)send + off, cnt, BSIPIPE_TP_F32, BSIPIPE_TP_SUM, s);
        }
        int end = bsipipe_tp_nccl_batch_end();
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
    meet_release(m, T);
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
    engine_watchdog_task_ended(tt->e, 0);
}

int engine_tp_submit_norm(struct bsipipe_engine *e, int c, starpu_data_handle_t out)
{
    struct engine_tp *t = e->tp;
    int T = e->T, d = e->rep[c].device;
    tp_task_t *tt = tt_new(-1, -1);
    if (!tt || tasks_keep(t, tt) < 0)
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
static struct starpu_codelet engine_cl_tp_seg = {
    .cpu_funcs = {tp_seg_cpu},
    .cpu_funcs_name = {"tp_seg_cpu"},
    BSIPIPE_CL_CUDA(tp_seg_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_seg,
    .name = "TPSEG",
};

static struct starpu_codelet engine_cl_tp_coll_rank = {
    .cpu_funcs = {tp_coll_rank_cpu},
    .cpu_funcs_name = {"tp_coll_rank_cpu"},
    BSIPIPE_CL_CUDA(tp_coll_rank_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_coll,
    .name = "TPCOLL",
};

static struct starpu_codelet engine_cl_tp_coll = {
    .cpu_funcs = {tp_coll_cpu},
    .cpu_funcs_name = {"tp_coll_cpu"},
    BSIPIPE_CL_CUDA(tp_coll_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_coll,
    .name = "TPCOLL",
};

static struct starpu_codelet engine_cl_tp_step = {
    .cpu_funcs = {tp_step_cpu},
    .cpu_funcs_name = {"tp_step_cpu"},
    BSIPIPE_CL_CUDA(tp_step_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &engine_model_tp_step,
    .name = "STEP",
};
