/* tp_submit.c: one op of the plan as its tensor-parallel group's tasks
 * (engine_tp.c explains the design): each compute segment a task per rank,
 * each collective one task over the T ranks' buffers or a task per rank,
 * SEND/RECV of each rank's slice, SYNC per rank, the STEP's norm and
 * update; each task placed in its rank worker's plan order. */
#include "tasks/tp_internal.h"
#include "tasks/transport/transport.h"
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
    engine_task_ended(a->e, tt->recv);
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
            const char *what = own && tt->kind >= 0 ? tp_kind_names[tt->kind] : cl->name;
            tp_task_free(tt);
            return bsipipe_error_set(-EINVAL, "engine: %s (tp rank %d, %s) has no input buffer (plan and transfers "
                                     "disagree)", c->a->name, r, what);
        }
    if (c->dry) {
        for (int j = 0; j < b->n; j++)
            engine_buffer_use(e, b->descr[j].handle, 1);
        tp_task_free(tt);
        return 0;
    }
    if (tp_tasks_keep(t, tt) < 0)
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
    /* The local transport's rendezvous (its SEND waits for the RECV's post):
     * every transfer of a TP group is the local transport's (transport.h). */
    if (cl == &engine_cl_send && ra->op.channel >= 0 && ra->op.channel < e->n_channels && !e->blocking_send &&
        ra->op.peer >= 0) {
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
    double comm = c->a->low->tp_comm_s; /* lowered at create (graph/plan_lower.h) */
    double comp = c->a->low->cost_s - comm, w = 0;
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
        if (!(b.t = tp_task_new(kind, l)))
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

/* Submission stopped before rank `from`: the ranks from there on arrive
 * here, so the tasks already submitted end (without the collective) instead
 * of waiting for ever; the engine has failed by then. */
static void meet_abort(tp_meet_t *m, int from, int T)
{
    __atomic_store_n(&m->aborted, 1, __ATOMIC_SEQ_CST);
    for (int q = from; q < T; q++)
        if (__atomic_add_fetch(&m->arrived, 1, __ATOMIC_ACQ_REL) == T)
            tp_meet_release(m, T);
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
    if (!c->dry && (rc = tp_tasks_reserve(e->tp, T)) < 0) {
        free(m);
        return rc;
    }
    for (q = 0; q < T; q++) {
        tb_t b = {.n = 0};
        if (!(b.t = tp_task_new(kind, -1))) {
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
    if (!(b.t = tp_task_new(kind, -1)))
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
        if (!(b.t = tp_task_new(-1, -1)))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        struct starpu_codelet *cl;
        long ch = (long)op->channel * T + r;
        switch (op->kind) {
        case BSIPIPE_OP_SEND:
            cl = &engine_cl_send;
            tb_add(&b, op->tensor == BSIPIPE_TENSOR_ACT ? e->h_x_out[c->ai + r] : e->h_dx[c->ai + r], STARPU_R);
            if (!c->dry)
                e->act_bytes_local += (double)(e->n_x_out[c->ai + r]) * sizeof(float);
            break;
        case BSIPIPE_OP_RECV:
            cl = &engine_cl_recv;
            b.t->recv = 1;
            tb_add(&b, e->h_recv[ch], STARPU_W);
            break;
        case BSIPIPE_OP_SYNC:
            if (op->pipe == 0) {
                cl = &engine_cl_sync;
                tb_add(&b, t->rep[(long)op->chunk * T + r].h_grads, STARPU_RW);
                tb_add(&b, t->rep[((long)e->C + op->chunk) * T + r].h_grads, STARPU_RW);
                if (!c->dry)
                    e->sync_bytes_local += 2.0 * (double)t->rep[(long)op->chunk * T + r].n * sizeof(float);
            } else {
                cl = &engine_cl_sync_peer;
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
        if (!(b.t = tp_task_new(-1, -1)))
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
    if (n > STEP_DESCR || !(b.t = tp_task_new(-1, -1)))
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
