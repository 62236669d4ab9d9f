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
        if ((rc = bsipipe_tp_check(&e->dims, &tp, engine_piece_len(e, s))) < 0) {
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
        if (engine_piece_len(e, s) > t->lmax)
            t->lmax = engine_piece_len(e, s);
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
                long len = engine_piece_len(e, s), ls = len / T;
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
                    e->n_recv[(long)ops[i].channel * T + r] = (uint32_t)((long)engine_piece_len(e, ops[i].sub) / T * d_);
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
        tp_task_free(t->tasks[x]);
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
        tp_task_free(t->tasks[x]);
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
    return engine_tp_full(e, 0, grads ? ENGINE_TP_GRADS : ENGINE_TP_PARAMS, out); /* summed over ranks by engine.c */
}

/* ---- the group's tasks, kept until the next iteration (tp_internal.h) ---- */

void tp_task_free(tp_task_t *tt)
{
    if (tt && tt->own_meet)
        free(tt->meet);
    free(tt);
}

tp_task_t *tp_task_new(int kind, int layer)
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

/* Room for n more kept tasks. */
int tp_tasks_reserve(struct engine_tp *t, long n)
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
int tp_tasks_keep(struct engine_tp *t, tp_task_t *tt)
{
    if (tp_tasks_reserve(t, 1) < 0) {
        tp_task_free(tt);
        return -ENOMEM;
    }
    t->tasks[t->n_tasks++] = tt;
    return 0;
}

/* Every task of m's collective ends (the last to arrive calls this). */
void tp_meet_release(tp_meet_t *m, int T)
{
    for (int q = 0; q < T; q++)
        if (m->task[q])
            starpu_task_end_dep_release(m->task[q]);
}
