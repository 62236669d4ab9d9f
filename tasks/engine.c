/* engine.c: engine lifecycle, data handles, and submission of one iteration
 * (every op of the plan a task). Codelets are in cl_*.c. */
#include "tasks/engine_internal.h"
#include "graph/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_DESCR = 512 };

static void floor_free(bsipipe_engine_t *e);

bsipipe_engine_options_t bsipipe_engine_options_default(const bsipipe_model_dims_t *dims,
                                                        const bsipipe_parallel_config_t *pc)
{
    bsipipe_engine_options_t o = {
        .dims = *dims, .pc = *pc,
        .opt = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0},
        .seed = 1, .policy = "bsipipe", .watchdog_s = 30,
    };
    return o;
}

void engine_report(struct bsipipe_engine *e, const op_args_t *a, int rc)
{
    if (rc == 0)
        return;
    const char *detail = bsipipe_error_detail();
    fprintf(stderr, "bsipipe engine: %s failed: %s%s%s\n", a->name, bsipipe_strerror(rc), *detail ? ": " : "", detail);
    engine_fail(e, rc);
}

long engine_replica_offset(const struct bsipipe_engine *e, const op_args_t *a, int l)
{
    return engine_layer_offset(e, l) - e->rep[a->op.pipe * e->C + a->op.chunk].base;
}

long engine_layer_offset(const struct bsipipe_engine *e, int l)
{
    return bsipipe_model_layer_offset(&e->dims, l);
}

long bsipipe_engine_n_params(const bsipipe_engine_t *e)
{
    return bsipipe_model_params(&e->dims);
}

const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e)
{
    return e->sched;
}

/* Registers a float vector owned by the engine in main memory. */
static float *alloc_vector(long n, starpu_data_handle_t *h)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (p)
        starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)(n > 0 ? n : 1), sizeof(float));
    return p;
}

static void free_vector(float *p, starpu_data_handle_t h)
{
    if (p) {
        starpu_data_unregister(h);
        free(p);
    }
}

/* Each StarPU CPU worker is one device: keep OpenBLAS on one thread. */
static void blas_single_thread(void)
{
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    if (set)
        set(1);
}

/* Task callback: copy StarPU's profiling of the op into its record. */
static void record_profile(void *arg)
{
    op_args_t *a = arg;
    if (a->settled) { /* an eager send this task copied: its buffer may go now */
        engine_buffer_use(a->e, a->settled->send_handle, 0);
        a->settled = NULL;
    }
    struct starpu_profiling_task_info *pi = a->task ? a->task->profiling_info : NULL;
    if (pi) {
        a->rec->start_us = starpu_timing_timespec_to_us(&pi->start_time);
        a->rec->end_us = starpu_timing_timespec_to_us(&pi->end_time);
        a->rec->worker = pi->workerid;
        a->ph[0] = starpu_timing_timespec_delay_us(&pi->push_start_time, &pi->push_end_time);
        a->ph[1] = starpu_timing_timespec_delay_us(&pi->pop_start_time, &pi->pop_end_time);
        a->ph[2] = starpu_timing_timespec_delay_us(&pi->acquire_data_start_time, &pi->acquire_data_end_time);
        a->ph[3] = starpu_timing_timespec_delay_us(&pi->start_time, &pi->end_time);
        a->ph[4] = starpu_timing_timespec_delay_us(&pi->release_data_start_time, &pi->release_data_end_time);
        a->ph_ok = 1;
    }
    a->rec->seq = __atomic_fetch_add(&a->e->rec_seq, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&a->running_since, 0LL, __ATOMIC_SEQ_CST);
    engine_watchdog_task_ended(a->e, a->op.kind == BSIPIPE_OP_RECV);
}

/* Across ranks the watchdog must tell a long task from a stalled rank: count
 * tasks leaving the scheduler and ending. */
static void task_popped(void *arg)
{
    struct bsipipe_engine *e = arg;
    __atomic_fetch_add(&e->tasks_popped, 1, __ATOMIC_SEQ_CST);
}

/* The same for an op of the plan, which also notes when it began to run. */
static void op_popped(void *arg)
{
    op_args_t *a = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(&a->running_since, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, __ATOMIC_SEQ_CST);
    task_popped(a->e);
}

static void task_ended(void *arg)
{
    engine_watchdog_task_ended(arg, 0);
}

static int piece_len(const bsipipe_engine_t *e, int sub)
{
    const int *st = bsipipe_schedule_sub_starts(e->sched);
    return st[sub + 1] - st[sub];
}

void bsipipe_engine_destroy(bsipipe_engine_t *e)
{
    if (!e)
        return;
    if (e->hung) { /* StarPU holds tasks that never run: waiting, unregistering or shutting down would hang */
        fprintf(stderr, "bsipipe engine: policy '%s' stalled; StarPU and the engine's memory are left as they are "
                        "(exit the process)\n", e->o.policy);
        return;
    }
    /* An engine refused before starpu_init (a bad config) has no StarPU to
     * wait for: calling it then reads StarPU's uninitialised state (an ASan
     * build crashed there on every early configuration error). */
    if (e->started)
        starpu_task_wait_for_all();
    engine_watchdog_free(e);
    engine_tp_free(e);
    engine_emulate_free(e);
    int n_rep = e->sched ? bsipipe_schedule_n_pipes(e->sched) * e->C : 0;
    for (int i = 0; e->rep && i < n_rep; i++) {
        replica_t *r = &e->rep[i];
        free_vector(r->params, r->h_params);
        free_vector(r->grads, r->h_grads);
        free_vector(r->m, r->h_m);
        free_vector(r->v, r->h_v);
    }
    free(e->rep);
    for (int mb = 0; e->h_tokens && mb < e->m; mb++) {
        if (e->h_tokens[mb]) starpu_data_unregister(e->h_tokens[mb]);
        if (e->h_targets[mb]) starpu_data_unregister(e->h_targets[mb]);
    }
    for (int d = 0; e->h_loss && d < e->W; d++)
        if (e->h_loss[d]) starpu_data_unregister(e->h_loss[d]);
    for (int c = 0; e->h_norm && c < e->C; c++)
        if (e->h_norm[c]) starpu_data_unregister(e->h_norm[c]);
    free(e->h_norm); free(e->norm);
    if (e->h_work)
        starpu_data_unregister(e->h_work);
    free(e->n_x_out); free(e->n_stash); free(e->n_dx); free(e->n_dy); free(e->n_kv); free(e->n_dkv); free(e->n_recv);
    free(e->n_wstash); free(e->h_wstash);
    free(e->h_x_out); free(e->h_stash); free(e->h_dx); free(e->h_dy); free(e->h_kv); free(e->h_dkv);
    floor_free(e);
    free(e->post_notified); free(e->send_tagged);
    engine_buffers_free(e); /* before StarPU stops: the pool's handles */
    free(e->h_recv); free(e->live_bytes); free(e->peak_bytes);
    free(e->tokens); free(e->targets); free(e->h_tokens); free(e->h_targets);
    free(e->loss); free(e->h_loss);
    for (int d = 0; e->args && d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; e->args[d] && i < n; i++)
            free(e->args[d][i].own_rep);
        free(e->args[d]);
        free(e->pos[d]);
        if (e->prio)
            free(e->prio[d]);
        if (e->rec)
            free(e->rec[d]);
    }
    free(e->rec);
    free(e->jobs);
    for (int d = 0; d < e->W && e->slot_of; d++) {
        free(e->slot_of[d]);
        free(e->slot_op[d]);
    }
    free(e->slot_of); free(e->slot_op); free(e->n_slots);
    free(e->args); free(e->pos); free(e->prio); free(e->slot_base);
    for (int d = 0; e->wmask && d < e->W; d++)
        free(e->wmask[d]);
    free(e->wmask);
    free(e->workerid);
    free(e->order_device); free(e->order_index);
    bsipipe_transport_destroy(e->transport);
    engine_devices_stop(e);
    if (e->no_poll)
        engine_starpu_poll_set(0); /* after starpu_shutdown below nothing polls; a later engine decides anew */
    if (e->started)
        engine_mpi_shutdown(e);
    engine_mpi_free(e);
    free(e->dev_rank);
    free(e->busy);
    bsipipe_schedule_destroy(e->sched);
    free(e);
}

/* Allocation helper: all-or-nothing arrays. */
#define ALLOC(p, n) ((p) = calloc((size_t)(n) > 0 ? (size_t)(n) : 1, sizeof *(p)))

/* Every chunk's squared gradient norm, one double each: written by its
 * NORM task, read by every STEP (submit_norms). */
static int create_norms(bsipipe_engine_t *e)
{
    if (!ALLOC(e->norm, e->C) || !ALLOC(e->h_norm, e->C))
        return -ENOMEM;
    for (int c = 0; c < e->C; c++)
        starpu_vector_data_register(&e->h_norm[c], STARPU_MAIN_RAM, (uintptr_t)&e->norm[c], 1, sizeof(double));
    return 0;
}

static int create_buffers(bsipipe_engine_t *e)
{
    const bsipipe_model_dims_t *D = &e->dims;
    int pipes = bsipipe_schedule_n_pipes(e->sched);
    long total = bsipipe_model_params(D);
    float *init = malloc(sizeof(float) * (size_t)total);
    if (!init || !ALLOC(e->rep, pipes * e->C)) {
        free(init);
        return -ENOMEM;
    }
    int rc = bsipipe_model_init(D, e->o.seed, init);
    for (int pipe = 0; pipe < pipes && rc == 0; pipe++)
        for (int c = 0; c < e->C && rc == 0; c++) {
            replica_t *r = &e->rep[pipe * e->C + c];
            int l0, l1;
            bsipipe_schedule_chunk_layers(e->sched, c, &l0, &l1);
            r->device = bsipipe_schedule_chunk_device(e->sched, (bsipipe_pipe_t)pipe, c);
            r->base = c == 0 ? 0 : engine_layer_offset(e, l0);
            r->n = (c == e->C - 1 ? total : engine_layer_offset(e, l1)) - r->base;
            if (!engine_local(e, r->device) || e->T > 1)
                continue; /* another rank holds it, or its TP shards do (engine_tp_buffers) */
            r->params = alloc_vector(r->n, &r->h_params);
            r->grads = alloc_vector(r->n, &r->h_grads);
            r->m = alloc_vector(r->n, &r->h_m);
            r->v = alloc_vector(r->n, &r->h_v);
            if (!r->params || !r->grads || !r->m || !r->v)
                rc = -ENOMEM;
            else
                memcpy(r->params, init + r->base, sizeof(float) * (size_t)r->n);
        }
    if (rc) {
        free(init);
        return rc;
    }

    /* With TP every entry below is T handles, one per rank (entry * T + rank). */
    long T = e->T, n_act = (long)e->m * e->k * e->C * T, n_kv = (long)e->m * e->C * T;
    int nch = bsipipe_schedule_n_channels(e->sched) * e->T;
    if (!ALLOC(e->n_x_out, n_act) || !ALLOC(e->n_stash, n_act) || !ALLOC(e->n_dx, n_act) || !ALLOC(e->n_dy, n_act) ||
        !ALLOC(e->n_wstash, n_act) || !ALLOC(e->h_wstash, n_act) ||
        !ALLOC(e->h_x_out, n_act) || !ALLOC(e->h_stash, n_act) || !ALLOC(e->h_dx, n_act) || !ALLOC(e->h_dy, n_act) ||
        !ALLOC(e->n_kv, n_kv) || !ALLOC(e->n_dkv, n_kv) || !ALLOC(e->h_kv, n_kv) || !ALLOC(e->h_dkv, n_kv) || !ALLOC(e->n_recv, nch) ||
        !ALLOC(e->h_recv, nch) || engine_buffers_init(e) < 0 || !ALLOC(e->live_bytes, e->W) ||
        !ALLOC(e->peak_bytes, e->W) || !ALLOC(e->busy, e->W) || !ALLOC(e->post_notified, nch) ||
        !ALLOC(e->send_tagged, nch)) {
        free(init);
        return -ENOMEM;
    }
    e->n_channels = nch;
    if (e->T > 1) {
        rc = engine_tp_buffers(e, init); /* shards, comm buffers, the sizes above */
        free(init);
        if (rc < 0)
            return rc;
    } else {
        free(init);
    }
    for (int mb = 0; mb < e->m && e->T == 1; mb++)
        for (int c = 0; c < e->C; c++) {
            int l0, l1;
            bsipipe_schedule_chunk_layers(e->sched, c, &l0, &l1);
            e->n_kv[mb * e->C + c] = (uint32_t)engine_kv_floats(e, l1 - l0);
            e->n_dkv[mb * e->C + c] = (uint32_t)((long)(l1 - l0) * bsipipe_model_kv_size(D));
            for (int s = 0; s < e->k; s++) {
                long i = act_index(e, mb, s, c), len = piece_len(e, s);
                e->n_x_out[i] = (uint32_t)(len * e->d);
                e->n_stash[i] = (uint32_t)engine_stash_floats(e, l1 - l0, (int)len);
                e->n_dx[i] = c > 0 ? (uint32_t)(len * e->d) : 0;
                e->n_dy[i] = c == e->C - 1 ? (uint32_t)(len * e->d) : 0;
                e->n_wstash[i] = e->split ? (uint32_t)((l1 - l0) * bsipipe_model_wstash_size(D, (int)len)) : 0;
            }
        }
    for (int d = 0; d < e->W && e->T == 1; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_RECV)
                e->n_recv[ops[i].channel] = (uint32_t)((long)piece_len(e, ops[i].sub) * e->d);
    }
    if (!ALLOC(e->tokens, (long)e->m * e->S) || !ALLOC(e->targets, (long)e->m * e->S) || !ALLOC(e->h_tokens, e->m) ||
        !ALLOC(e->h_targets, e->m) || !ALLOC(e->loss, e->W) || !ALLOC(e->h_loss, e->W))
        return -ENOMEM;
    for (int mb = 0; mb < e->m; mb++) {
        starpu_vector_data_register(&e->h_tokens[mb], STARPU_MAIN_RAM, (uintptr_t)(e->tokens + (long)mb * e->S),
                                    (uint32_t)e->S, sizeof(int));
        starpu_vector_data_register(&e->h_targets[mb], STARPU_MAIN_RAM, (uintptr_t)(e->targets + (long)mb * e->S),
                                    (uint32_t)e->S, sizeof(int));
    }
    for (int d = 0; d < e->W; d++)
        starpu_vector_data_register(&e->h_loss[d], STARPU_MAIN_RAM, (uintptr_t)&e->loss[d], 1, sizeof(double));
    /* Scratch per worker: the chunk backward's work plus chunk 0's input
     * gradient, or the head's work, whichever is larger. */
    for (int s = 0; s < e->k; s++) {
        int len = piece_len(e, s);
        long need = bsipipe_model_work_size(D, len) + (long)len * e->d;
        if (bsipipe_model_head_work_size(D, len) > need)
            need = bsipipe_model_head_work_size(D, len);
        if (need > e->work_elems)
            e->work_elems = need;
    }
    starpu_vector_data_register(&e->h_work, -1, 0, (uint32_t)e->work_elems, sizeof(float));
    return 0;
}

static int eager_allowed(const bsipipe_engine_t *e, int say);

/* Each op's slot in its worker's plan order for this iteration: eager
 * SENDs run inside their producer and take no slot, so the policy's next
 * slot after a producer is the op after its SEND. */
static void plan_slots(bsipipe_engine_t *e, int eager)
{
    for (int d = 0; d < e->W; d++) {
        int n, r = 0;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++) {
            e->slot_of[d][i] = r;
            if (!(eager && ops[i].kind == BSIPIPE_OP_SEND))
                e->slot_op[d][r++] = i;
        }
        e->n_slots[d] = r;
    }
}

static int create_args(bsipipe_engine_t *e)
{
    const int *st = bsipipe_schedule_sub_starts(e->sched);
    if (!ALLOC(e->args, e->W) || !ALLOC(e->pos, e->W) || !ALLOC(e->slot_base, e->W) || !ALLOC(e->rec, e->W) ||
        !ALLOC(e->slot_of, e->W) || !ALLOC(e->slot_op, e->W) || !ALLOC(e->n_slots, e->W))
        return -ENOMEM;
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!ALLOC(e->args[d], n) || !ALLOC(e->pos[d], n) || !ALLOC(e->rec[d], n) || !ALLOC(e->slot_of[d], n) ||
            !ALLOC(e->slot_op[d], n))
            return -ENOMEM;
        for (int i = 0; i < n; i++) {
            op_args_t *a = &e->args[d][i];
            a->e = e;
            a->op = ops[i];
            a->rec = &e->rec[d][i];
            a->in_channel = -1;
            a->send_op = -1;
            if (ops[i].sub >= 0) {
                a->start = st[ops[i].sub];
                a->len = st[ops[i].sub + 1] - st[ops[i].sub];
            }
            if (ops[i].chunk >= 0)
                bsipipe_schedule_chunk_layers(e->sched, ops[i].chunk, &a->l0, &a->l1);
            char buf[96];
            snprintf(a->name, sizeof a->name, "%s", bsipipe_op_format(&ops[i], buf, sizeof buf));
            if (ops[i].kind == BSIPIPE_OP_STEP) {
                int pipes = bsipipe_schedule_n_pipes(e->sched);
                if (!ALLOC(a->own_rep, pipes * e->C))
                    return -ENOMEM;
                for (int r = 0; r < pipes * e->C; r++)
                    if (e->rep[r].device == d)
                        a->own_rep[a->n_own++] = r;
            }
        }
    }
    /* Which RECV feeds which F or B: an activation leaving chunk c feeds the
     * forward of chunk c+1, a gradient leaving chunk c the backward of c-1. */
    long n_act = (long)e->m * e->k * e->C;
    int *feeds = malloc(sizeof(int) * (size_t)(2 * n_act));
    if (!feeds)
        return -ENOMEM;
    for (long i = 0; i < 2 * n_act; i++)
        feeds[i] = -1;
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_RECV) {
                int act = ops[i].tensor == BSIPIPE_TENSOR_ACT;
                feeds[(act ? 0 : n_act) + act_index(e, ops[i].mb, ops[i].sub, ops[i].chunk + (act ? 1 : -1))] =
                    ops[i].channel;
            }
    }
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++) {
            op_args_t *a = &e->args[d][i];
            if (a->op.kind == BSIPIPE_OP_F || a->op.kind == BSIPIPE_OP_B)
                a->in_channel = feeds[(a->op.kind == BSIPIPE_OP_F ? 0 : n_act) +
                                      act_index(e, a->op.mb, a->op.sub, a->op.chunk)];
        }
    }
    free(feeds);
    /* Which F or B produces what each SEND sends: the op before it on its
     * device that wrote the same piece's output (eager sends). */
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++) {
            if (ops[i].kind != BSIPIPE_OP_SEND)
                continue;
            bsipipe_op_kind_t from = ops[i].tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_OP_F : BSIPIPE_OP_B;
            for (int p = i - 1; p >= 0; p--)
                if (ops[p].kind == from && ops[p].pipe == ops[i].pipe && ops[p].mb == ops[i].mb &&
                    ops[p].sub == ops[i].sub && ops[p].chunk == ops[i].chunk) {
                    e->args[d][p].send_op = i;
                    break;
                }
        }
    }
    plan_slots(e, 0);
    return 0;
}

/* A submission order for a plan whose transfers deadlock: the same plan's
 * compute order with transfers reordered the paper's way, which cannot
 * deadlock, gives an order where every producer precedes its consumers;
 * map it back onto the original op positions. */
static int topo_order(const bsipipe_schedule_t *plan, bsipipe_sim_result_t **out)
{
    bsipipe_schedule_t *ok;
    int rc = bsipipe_schedule_copy(plan, &ok); /* a driver's plan too, not only a preset */
    if (rc < 0)
        return rc;
    if ((rc = bsipipe_schedule_reorder_comm(ok, BSIPIPE_COMM_BSIPIPE)) < 0) {
        bsipipe_schedule_destroy(ok);
        return rc;
    }
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r;
    if ((rc = bsipipe_simulate(ok, &unit, &r)) < 0) {
        bsipipe_schedule_destroy(ok);
        return rc;
    }
    /* Same ops on the same devices, only SEND/RECV positions differ: match by
     * identity (kind, channel or work). */
    for (long j = 0; j < r->n_order; j++) {
        int d = r->order_device[j], n_ok, n_plan;
        const bsipipe_op_t *a = &bsipipe_schedule_device_ops(ok, d, &n_ok)[r->order_index[j]];
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(plan, d, &n_plan);
        for (int i = 0; i < n_plan; i++) {
            const bsipipe_op_t *b = &ops[i];
            if (a->kind == b->kind && a->mb == b->mb && a->sub == b->sub && a->chunk == b->chunk &&
                a->tensor == b->tensor && a->pipe == b->pipe) {
                r->order_index[j] = i;
                break;
            }
        }
    }
    bsipipe_schedule_destroy(ok);
    *out = r;
    return 0;
}

/* A driver's plan must be the plan of the options' config and model: the
 * engine sizes its data and checkpoints from those. */
static int plan_matches(const bsipipe_engine_options_t *o)
{
    const bsipipe_parallel_config_t *a = bsipipe_schedule_config(o->plan), *b = &o->pc;
    const bsipipe_model_dims_t *x = bsipipe_schedule_model(o->plan), *y = &o->dims;
    const char *field = a->schedule != b->schedule ? "schedule" : a->w != b->w ? "w" : a->p != b->p ? "p"
                      : a->k != b->k ? "k" : a->m != b->m ? "m" : a->tp != b->tp ? "tp"
                      : a->partition != b->partition ? "partition" : a->comm != b->comm ? "comm" : NULL;
    if (field)
        return bsipipe_error_set(-EINVAL, "engine: the plan's config differs from the options' in %s (plan: %s w=%d "
                                 "p=%d k=%d m=%d tp=%d; options: %s w=%d p=%d k=%d m=%d tp=%d): take the options' "
                                 "config from bsipipe_schedule_config(plan)", field,
                                 bsipipe_schedule_kind_name(a->schedule), a->w, a->p, a->k, a->m, a->tp,
                                 bsipipe_schedule_kind_name(b->schedule), b->w, b->p, b->k, b->m, b->tp);
    field = x->family != y->family ? "family" : x->n_layers != y->n_layers ? "layers" : x->hidden != y->hidden
          ? "hidden" : x->n_heads != y->n_heads ? "heads" : x->ffn_hidden != y->ffn_hidden ? "ffn"
          : x->vocab != y->vocab ? "vocab" : x->seq_len != y->seq_len ? "seq_len" : NULL;
    if (field)
        return bsipipe_error_set(-EINVAL, "engine: the plan's model differs from the options' in %s (plan: L=%d "
                                 "hidden=%d heads=%d ffn=%d vocab=%d S=%d; options: L=%d hidden=%d heads=%d ffn=%d "
                                 "vocab=%d S=%d): take the options' dims from bsipipe_schedule_model(plan)", field,
                                 x->n_layers, x->hidden, x->n_heads, x->ffn_hidden, x->vocab, x->seq_len,
                                 y->n_layers, y->hidden, y->n_heads, y->ffn_hidden, y->vocab, y->seq_len);
    return 0;
}

/* Task priorities for the built-in policies (prio, dmdas, eager's
 * priority variants...): each op's remaining critical path under FLOPs costs
 * (bsipipe_schedule_critical_path), scaled onto the running policy's range,
 * so what most work waits on runs first. The bsipipe policy orders by slot
 * and ignores priorities: none are set there. A plan the simulator cannot
 * finish (an unchecked one) gets none either. */
static int plan_priorities(bsipipe_engine_t *e)
{
    int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    if (e->inorder || hi <= lo)
        return 0;
    bsipipe_cost_model_t flops = bsipipe_cost_model_flops(1e12);
    double *rp;
    if (bsipipe_schedule_critical_path(e->sched, &flops, &rp) < 0)
        return 0;
    long j = 0;
    double top = 0;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++, j++)
            if (rp[j] > top)
                top = rp[j];
    }
    if (!ALLOC(e->prio, e->W)) {
        free(rp);
        return -ENOMEM;
    }
    j = 0;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!ALLOC(e->prio[d], n)) {
            free(rp);
            return -ENOMEM;
        }
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++, j++)
            /* Transfers first: they cost little and feed another device. By
             * their path alone (that of the op they feed, one shorter than
             * their producer's siblings'), a device would finish all its
             * forwards before sending one activation (1F1B: bubble 56 -> 65%). */
            e->prio[d][i] = ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_RECV
                                ? hi
                                : (int)lround((double)lo + (top > 0 ? ((double)hi - (double)lo) * rp[j] / top : 0));
    }
    free(rp);
    return 0;
}

int bsipipe_engine_create(const bsipipe_engine_options_t *o, bsipipe_engine_t **out)
{
    *out = NULL;
    if (!o)
        return bsipipe_error_set(-EINVAL, "engine: no options");
    int rc = bsipipe_model_dims_validate(&o->dims);
    if (rc == 0 && bsipipe_model_dims_check(&o->dims) != 0)
        rc = bsipipe_error_set(-EINVAL, "engine: model dimensions rejected by the kernels (LLaMA needs an even "
                                        "head dimension)");
    if (rc == 0 && o->plan)
        rc = plan_matches(o);
    if (rc == 0) /* tensor parallelism: the kernels' rules, with the valid degrees */
        rc = engine_tp_check_dims(&o->dims, o->pc.tp);
    if (rc == 0) /* before starpu_init: a policy that would crash or hang on this graph is refused */
        rc = engine_policy_check(o->policy ? o->policy : "bsipipe", o->unsupported_policy);
    if (rc == 0) /* before any setenv: a running StarPU is the application's, left as it is */
        rc = engine_starpu_check_not_running(o->policy);
    if (rc < 0)
        return rc;
    bsipipe_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    e->o = *o;
    e->o.plan = NULL; /* borrowed for create only: the engine runs its own copy */
    e->lr_scale = 1.0;
    if (!e->o.policy)
        e->o.policy = "bsipipe";
    if (e->o.watchdog_s <= 0)
        e->o.watchdog_s = 30;
    e->dims = o->dims;
    rc = o->plan ? bsipipe_schedule_copy(o->plan, &e->sched) : bsipipe_schedule_create(&o->pc, &o->dims, &e->sched);
    if (rc == 0 && !o->unchecked_plan)
        rc = bsipipe_schedule_validate(e->sched);
    if (rc < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    e->o.pc.layout = bsipipe_schedule_config(e->sched)->layout; /* the schedule's own string, not the caller's */
    e->W = bsipipe_schedule_n_devices(e->sched);
    e->C = bsipipe_schedule_n_chunks(e->sched);
    e->k = o->pc.k;
    e->m = o->pc.m;
    e->S = o->dims.seq_len;
    e->d = o->dims.hidden;
    e->split = bsipipe_schedule_kind_traits(o->pc.schedule).split_backward;
    e->T = o->pc.tp > 1 ? o->pc.tp : 1;
    if ((rc = engine_emulate_setup(e)) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    if (e->T > 1 && (rc = engine_tp_check(e)) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }

    /* Submission order: the simulator's resolution order respects every
     * dependency, so StarPU's sequential consistency sees each producer
     * before its consumers. */
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    unit.recv_in_place = o->recv_in_place;
    bsipipe_sim_result_t *sim;
    if ((rc = bsipipe_simulate(e->sched, &unit, &sim)) < 0 && !(o->unchecked_plan && rc == BSIPIPE_EDEADLOCK)) {
        bsipipe_engine_destroy(e);
        return rc;
    }
    if (rc == BSIPIPE_EDEADLOCK) { /* unchecked plan: submit every op, producers first */
        rc = topo_order(e->sched, &sim);
        if (rc < 0) {
            bsipipe_engine_destroy(e);
            return rc;
        }
    }
    e->n_order = sim->n_order;
    e->order_device = sim->order_device;
    e->order_index = sim->order_index;
    sim->order_device = sim->order_index = NULL;
    bsipipe_sim_result_destroy(sim);

    if ((rc = engine_mpi_setup(e)) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    rc = engine_devices_configure(e, &conf); /* CPU or CUDA workers */
    setenv("STARPU_WORKERS_NOBIND", "1", 0); /* more devices than cores is the normal case here */
    engine_starpu_env(); /* FxT off unless asked; StarPU's allocation cache on */
    e->no_poll = engine_starpu_poll_set(!e->mpi && e->o.devices == BSIPIPE_DEVICES_CPU);
    if (rc >= 0)
        rc = bsipipe_policy_configure(&conf, e->o.policy);
    if (rc >= 0 && (rc = engine_idle_spin_resolve(e, e->o.devices == BSIPIPE_DEVICES_CPU ? (int)conf.ncpus : 0)) >= 0)
        bsipipe_policy_set_idle_spin(e->idle_spin_us);
    /* A rank may fail here alone (no GPU on its node, too few GPUs): all stop. */
    if ((rc = engine_mpi_agree_setup(e, rc)) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    e->inorder = bsipipe_policy_is_inorder(e->o.policy);
    if ((rc = engine_mpi_start(e, &conf)) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    e->started = 1;
    /* e->workerid: the worker of each device; a rank whose StarPU started too
     * few workers fails alone, so all agree before going on */
    if ((rc = engine_mpi_agree_setup(e, engine_devices_start(e))) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(rc, "%s", why);
    }
    e->wmask_len = starpu_worker_get_count() / 32 + 1;
    if (!ALLOC(e->wmask, e->W)) {
        bsipipe_engine_destroy(e);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    for (int d = 0; d < e->W; d++) {
        if (!ALLOC(e->wmask[d], e->wmask_len)) {
            bsipipe_engine_destroy(e);
            return bsipipe_error_set(-ENOMEM, "out of memory");
        }
        e->wmask[d][e->workerid[d] / 32] |= 1u << (e->workerid[d] % 32);
    }
    blas_single_thread();
    starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    if ((rc = create_buffers(e)) < 0 || (rc = create_norms(e)) < 0 || (rc = create_args(e)) < 0 || (rc = plan_priorities(e)) < 0 ||
        (e->T > 1 && (rc = engine_tp_args(e)) < 0) ||
        (rc = bsipipe_transport_create(bsipipe_schedule_n_channels(e->sched) > 0
                                           ? (long)bsipipe_schedule_n_channels(e->sched) * e->T : 1,
                                       e->o.watchdog_s, &e->transport)) < 0) {
        bsipipe_engine_destroy(e);
        return rc == -ENOMEM ? bsipipe_error_set(-ENOMEM, "engine: out of memory for the plan's buffers") : rc;
    }
    e->eager_send = eager_allowed(e, 0) == 0; /* no error detail: not asked for */
    e->reuse_buffers = !e->mpi && e->T == 1 && !e->o.unchecked_plan;
    *out = e;
    return 0;
}

/* Whether sends may be eager: 0, or -ENOTSUP with the reason. A plan the
 * validator proved free of deadlock under rendezvous sends stays free of
 * it when sends never wait; an unchecked plan keeps its SEND tasks, so a
 * deadlocking order still deadlocks and is caught. */
static int eager_allowed(const bsipipe_engine_t *e, int say)
{
    char why[256] = "";
    if (e->mpi || e->o.devices != BSIPIPE_DEVICES_CPU || e->T > 1)
        snprintf(why, sizeof why, "eager sends need CPU devices in one process without tensor parallelism (the "
                                  "local transport's memcpy)");
    else if (e->links)
        snprintf(why, sizeof why, "eager sends: with emulated links a SEND holds its device for its link time, "
                                  "as a task");
    else if (e->o.unchecked_plan)
        snprintf(why, sizeof why, "eager sends need a plan proven free of deadlock (this one runs unchecked: its "
                                  "SENDs stay tasks, so a deadlock is still caught)");
    for (int d = 0; !why[0] && d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n && !why[0]; i++)
            if (ops[i].kind == BSIPIPE_OP_SEND) {
                int found = 0;
                for (int p = 0; p < i && !found; p++)
                    found = e->args[d][p].send_op == i;
                if (!found)
                    snprintf(why, sizeof why, "eager sends: %s has no producer before it on device %d",
                             e->args[d][i].name, d);
            }
    }
    if (!why[0])
        return 0;
    return say ? bsipipe_error_set(-ENOTSUP, "%s", why) : -ENOTSUP;
}

int bsipipe_engine_set_eager_send(bsipipe_engine_t *e, int on)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (on) {
        int rc = eager_allowed(e, 1);
        if (rc < 0)
            return rc;
    }
    e->eager_send = on != 0;
    return 0;
}

int bsipipe_engine_eager_send(const bsipipe_engine_t *e)
{
    return e ? e->eager_send : 0;
}

/* Handle of the piece's activation entering chunk c (F) or its gradient
 * entering chunk c (B): the receive buffer (channel found at creation), or
 * the local producer's buffer. */
static starpu_data_handle_t input_handle(bsipipe_engine_t *e, const op_args_t *a)
{
    const bsipipe_op_t *op = &a->op;
    if (a->in_channel >= 0)
        return e->h_recv[a->in_channel];
    int from = op->kind == BSIPIPE_OP_F ? op->chunk - 1 : op->chunk + 1;
    if (bsipipe_schedule_chunk_device(e->sched, (bsipipe_pipe_t)op->pipe, from) != op->device)
        return NULL; /* remote producer but no receive: the plan is inconsistent */
    return op->kind == BSIPIPE_OP_F ? e->h_x_out[act_index(e, op->mb, op->sub, from)]
                                    : e->h_dx[act_index(e, op->mb, op->sub, from)];
}

/* Builds and submits the task of op i of device d; with dry_run only checks
 * that every buffer it needs exists. */
static int submit_op(bsipipe_engine_t *e, int d, int i, int step, int dry_run)
{
    int handled = engine_mpi_submit_op(e, d, i, dry_run);
    if (handled != 0)
        return handled < 0 ? handled : 0;
    if (!engine_local(e, d))
        return 0; /* another rank's op */
    if (e->T > 1)
        return engine_tp_submit_op(e, d, i, step, dry_run);
    op_args_t *a = &e->args[d][i];
    const bsipipe_op_t *op = &a->op;
    struct starpu_data_descr descr[MAX_DESCR];
    int n = 0;
    struct starpu_codelet *cl;
    replica_t *r = op->chunk >= 0 ? &e->rep[op->pipe * e->C + op->chunk] : NULL;
    long ai = op->sub >= 0 ? act_index(e, op->mb, op->sub, op->chunk) : 0;
    /* A buffer's first writer takes its handle (engine_buffer_bind) from
     * those given back before the first slot it may run at (a receive
     * posted ahead runs before the ops in front of it). */
    long earliest = e->slot_of[d][i];
    if (op->kind == BSIPIPE_OP_RECV)
        earliest = e->slot_of[d][i - engine_recv_ahead(e, d, i)];
#define ADD(h, md) (descr[n].handle = engine_buffer_bind(e, &(h), d, earliest, (md)), descr[n].mode = (md), n++)
#define ADD_READ(h) (descr[n].handle = (h), descr[n].mode = STARPU_R, n++)
    switch (op->kind) {
    case BSIPIPE_OP_F:
        cl = op->chunk == e->C - 1 ? &bsipipe_cl_forward_head : &bsipipe_cl_forward;
        ADD(r->h_params, STARPU_R);
        ADD_READ(op->chunk == 0 ? e->h_tokens[op->mb] : input_handle(e, a));
        ADD(e->h_x_out[ai], STARPU_W);
        if (e->eager && a->send_op >= 0 && !dry_run) /* its SEND goes out at its end (engine_send_eager) */
            e->args[d][a->send_op].send_handle = e->h_x_out[ai];
        ADD(e->h_stash[ai], STARPU_W);
        /* The first piece only writes the K/V cache (its buffer is fresh). */
        ADD(e->h_kv[op->mb * e->C + op->chunk], op->sub == 0 ? STARPU_W : STARPU_RW);
        ADD(e->h_work, STARPU_SCRATCH);
        if (op->chunk == e->C - 1) {
            ADD(e->h_targets[op->mb], STARPU_R);
            ADD(r->h_grads, STARPU_RW);
            ADD(e->h_dy[ai], STARPU_W);
            ADD(e->h_loss[d], STARPU_RW);
        }
        break;
    case BSIPIPE_OP_B:
        cl = &bsipipe_cl_backward;
        ADD(r->h_params, STARPU_R);
        ADD(r->h_grads, STARPU_RW);
        ADD_READ(op->chunk == e->C - 1 ? e->h_dy[ai] : input_handle(e, a));
        if (op->chunk == 0)
            ADD(e->h_tokens[op->mb], STARPU_R);
        else
            ADD(e->h_dx[ai], STARPU_W);
        if (e->eager && a->send_op >= 0 && !dry_run)
            e->args[d][a->send_op].send_handle = e->h_dx[ai];
        ADD(e->h_stash[ai], STARPU_R);
        ADD(e->h_kv[op->mb * e->C + op->chunk], STARPU_R);
        /* The first backward (last piece) clears the K/V gradient: write only. */
        ADD(e->h_dkv[op->mb * e->C + op->chunk], op->sub == e->k - 1 ? STARPU_W : STARPU_RW);
        ADD(e->h_work, STARPU_SCRATCH);
        if (e->split)
            ADD(e->h_wstash[ai], STARPU_W);
        break;
    case BSIPIPE_OP_W:
        cl = &bsipipe_cl_wgrad;
        ADD(r->h_grads, STARPU_RW);
        ADD(e->h_stash[ai], STARPU_R);
        ADD(e->h_wstash[ai], STARPU_R);
        break;
    case BSIPIPE_OP_SEND:
        if (e->eager && !dry_run) { /* sent by its producer, which may have freed the buffer already */
            e->act_bytes_local += (double)piece_len(e, op->sub) * e->d * sizeof(float);
            if (e->pool_active && a->send_handle) /* staged if need be: the buffer is free once its producer ends */
                engine_buffer_used(e, a->send_handle, d, e->slot_of[d][i]);
            return 0;
        }
        cl = &bsipipe_cl_send;
        ADD_READ(op->tensor == BSIPIPE_TENSOR_ACT ? e->h_x_out[ai] : e->h_dx[ai]);
        break;
    case BSIPIPE_OP_RECV:
        cl = &bsipipe_cl_recv;
        ADD(e->h_recv[op->channel], STARPU_W);
        break;
    case BSIPIPE_OP_SYNC: {
        replica_t *mine = &e->rep[op->pipe * e->C + op->chunk];
#ifdef BSIPIPE_HAVE_NCCL
        if (engine_uses_nccl(e, op->device, op->peer)) { /* mirrors on two GPUs: each side all-reduces */
            cl = &bsipipe_cl_sync_nccl;
            ADD(mine->h_grads, STARPU_RW);
            break;
        }
#endif
        if (op->pipe == 0) {
            cl = &bsipipe_cl_sync;
            ADD(mine->h_grads, STARPU_RW);
            ADD(e->rep[e->C + op->chunk].h_grads, STARPU_RW);
        } else {
            cl = &bsipipe_cl_sync_peer;
            ADD(mine->h_grads, STARPU_R);
        }
        break;
    }
    case BSIPIPE_OP_STEP:
        /* The global norm from every chunk's squared norm (submit_norms),
         * then the device's own replicas. */
        cl = &bsipipe_cl_step;
        a->do_step = step;
        for (int c = 0; c < e->C; c++)
            ADD(e->h_norm[c], STARPU_R);
        for (int j = 0; j < a->n_own && n + 4 <= MAX_DESCR; j++) {
            replica_t *o = &e->rep[a->own_rep[j]];
            ADD(o->h_params, STARPU_RW);
            ADD(o->h_m, STARPU_RW);
            ADD(o->h_v, STARPU_RW);
            ADD(o->h_grads, STARPU_R);
        }
        break;
    default:
        return bsipipe_error_set(-EINVAL, "engine: unknown op kind %d", op->kind);
    }
#undef ADD
#undef ADD_READ
    for (int j = 0; j < n; j++)
        if (!descr[j].handle)
            return bsipipe_error_set(-EINVAL, "engine: %s has no input buffer (plan and transfers disagree)",
                                     a->name);
    if (dry_run) { /* count the uses of the iteration's buffers */
        for (int j = 0; j < n; j++)
            engine_buffer_use(e, descr[j].handle, 1);
        return 0;
    }
    if (op->kind == BSIPIPE_OP_SEND)
        e->act_bytes_local += (double)starpu_vector_get_nx(descr[0].handle) * sizeof(float);
    else if (op->kind == BSIPIPE_OP_SYNC && op->pipe == 0) /* each side sends its replica once */
        e->sync_bytes_local += 2.0 * (double)starpu_vector_get_nx(descr[0].handle) * sizeof(float);
    return engine_task_submit(e, d, i, cl, descr, n);
}

/* An eager send settled (copied, or given up after a failure): its record,
 * and its use of the buffer, which may now be freed. Once per SEND: the
 * transport calls it, and so does engine_sends_settle for an offer whose
 * RECV never ran. */
static void eager_done(void *arg)
{
    op_args_t *s = arg;
    if (__atomic_exchange_n(&s->eager_done, 1, __ATOMIC_ACQ_REL))
        return;
    s->rec->end_us = starpu_timing_now();
    s->rec->seq = __atomic_fetch_add(&s->e->rec_seq, 1, __ATOMIC_SEQ_CST);
    /* The buffer's use is consumed by the callback of the task running the
     * copy (the producer or the RECV), once that task has released its data:
     * unregistering from inside the codelet would delay the task's end, and
     * with it the hand-off to the next op (StarPU's unregistration is about
     * a third of a task's termination: docs/benchmarks.md, seventh pass). */
    if (s->e->pool_active) /* its use was consumed at its submission: the transport stages what it keeps */
        return;
    struct starpu_task *cur = starpu_task_get_current();
    op_args_t *host = cur ? cur->cl_arg : NULL;
    if (host && host->task == cur && cur->callback_func == record_profile && !host->settled)
        host->settled = s;
    else
        engine_buffer_use(s->e, s->send_handle, 0); /* nothing for the floor's buffers registered once */
}

/* The floor's eager send: the same meeting with no data (a RECV posted
 * first is released by its producer, a producer first by the RECV). */
static void floor_meet(struct bsipipe_engine *e, long ch, int side)
{
    int before = __atomic_fetch_or(&e->floor_meet[ch], side, __ATOMIC_SEQ_CST);
    if (before & (side == 1 ? 2 : 1))
        starpu_task_end_dep_release(e->floor_recv[ch]);
}

void engine_send_eager(op_args_t *a, void *out)
{
    struct bsipipe_engine *e = a->e;
    if (a->send_op < 0 || !e->eager)
        return;
    op_args_t *s = &e->args[a->op.device][a->send_op];
    s->rec->start_us = starpu_timing_now();
    s->rec->worker = starpu_worker_get_id();
    if (e->floor_flags) {
        floor_meet(e, s->op.channel, 1);
        eager_done(s);
        return;
    }
    size_t bytes = STARPU_VECTOR_GET_NX(out) * STARPU_VECTOR_GET_ELEMSIZE(out);
    int rc = bsipipe_transport_offer(e->transport, s->op.channel, (const void *)STARPU_VECTOR_GET_PTR(out), bytes,
                                     s->op.device, s->name + 5 /* past "SEND " */, eager_done, s);
    if (rc == -ETIMEDOUT) /* the transport failed earlier: its report names the waits */
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, s, rc);
}

/* After every task of the iteration ended: offers no RECV took (a failed
 * iteration) give their buffers back. */
static void sends_settle(bsipipe_engine_t *e)
{
    if (!e->eager)
        return;
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_SEND && e->args[d][i].send_handle)
                eager_done(&e->args[d][i]);
    }
}

/* Whether this iteration's sends go eager, and the slots that follow. */
static void sends_begin(bsipipe_engine_t *e)
{
    e->eager = e->eager_send && !e->blocking_send && !e->blocking_recv && !e->o.recv_in_place;
    plan_slots(e, e->eager);
    engine_emulate_iteration_begin(e);
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == BSIPIPE_OP_SEND) {
                e->args[d][i].send_handle = NULL;
                e->args[d][i].eager_done = 0;
                if (e->eager)
                    memset(e->args[d][i].rec, 0, sizeof *e->args[d][i].rec);
            }
    }
    for (long ch = 0; e->floor_meet && ch < e->n_channels; ch++)
        e->floor_meet[ch] = 0;
}

/* The floor's codelet (bsipipe_engine_floor_iteration): a RECV lets its SEND
 * go, a SEND releases its RECV, F/B/W hold their emulated time if asked;
 * nothing else. */
static void floor_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    if (!a)
        return;
    struct bsipipe_engine *e = a->e;
    long ch = a->op.channel;
    switch (a->op.kind) {
    case BSIPIPE_OP_RECV:
        e->floor_recv[ch] = starpu_task_get_current();
        if (e->eager)
            floor_meet(e, ch, 2);
        else
            engine_post_notify(e, ch);
        break;
    case BSIPIPE_OP_SEND:
        starpu_task_end_dep_release(e->floor_recv[ch]);
        break;
    case BSIPIPE_OP_F:
    case BSIPIPE_OP_B:
    case BSIPIPE_OP_W:
        if (e->floor_flags & BSIPIPE_FLOOR_EMULATE)
            engine_emulate(e, &a->op);
        if (a->send_op >= 0)
            engine_send_eager(a, buffers[a->op.kind == BSIPIPE_OP_F ? 2 : 3]);
        break;
    default:
        break;
    }
}

static struct starpu_codelet engine_cl_floor = {
    .where = STARPU_CPU,
    .cpu_funcs = {floor_cpu},
    .cpu_funcs_name = {"floor_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "floor",
};

/* How many slots early the op i of device d may run (bsipipe_plan_pos_t.ahead):
 * a posted receive of the local transport is posted ahead as the simulator
 * models it (bsipipe_sim_recv_ahead). Blocking receives wait for their data,
 * so they stay in place; MPI and NCCL transfers too. */
int engine_recv_ahead(const bsipipe_engine_t *e, int d, int i)
{
    if (e->mpi || e->o.devices != BSIPIPE_DEVICES_CPU)
        return 0;
    bsipipe_cost_model_t c = bsipipe_cost_model_unit();
    c.blocking_recv = e->blocking_recv;
    c.recv_in_place = e->o.recv_in_place;
    int j = bsipipe_sim_recv_ahead(e->sched, &c, d, i);
    return j <= BSIPIPE_POLICY_MAX_AHEAD ? j : 0;
}

int engine_task_submit(bsipipe_engine_t *e, int d, int i, struct starpu_codelet *cl, struct starpu_data_descr *descr,
                       int n)
{
    op_args_t *a = i >= 0 ? &e->args[d][i] : NULL;
    const char *name = a ? a->name : cl->name;
    /* Named by its codelet's model (bsipipe_fwd ...): few stable names for
     * StarPU's tools; the op is joined by job id (DIR/ops.tsv). */
    struct starpu_task *t =
        starpu_task_build(cl, STARPU_DATA_MODE_ARRAY, descr, n, STARPU_NAME, engine_task_name(cl), 0);
    if (!t)
        return bsipipe_error_set(-ENOMEM, "engine: cannot build the task of %s", name);
    t->cl_arg_size = 0;
    t->cl_arg_free = 0;
    if (a) {
        t->cl_arg = a;
        a->running_since = 0;
        t->callback_func = record_profile;
        t->callback_arg = a;
        a->task = t;
        t->color = bsipipe_trace_op_color(&a->op); /* Paje / dag.dot colours like Figure 1 */
    } else {
        t->cl_arg = e;
        t->callback_func = task_ended;
        t->callback_arg = e;
    }
    /* A RECV stays running (not ended) until its SEND lands: left out of the
     * count of running tasks that the stall check reads. */
    if (e->mpi || !(a && a->op.kind == BSIPIPE_OP_RECV)) {
        t->prologue_callback_pop_func = a ? op_popped : task_popped;
        t->prologue_callback_pop_arg = a ? (void *)a : (void *)e;
    }
    if (e->inorder && a) {
        e->pos[d][i].worker = e->workerid[d];
        int ahead = engine_recv_ahead(e, d, i);
        e->pos[d][i].slot = e->slot_base[d] + e->slot_of[d][i];
        e->pos[d][i].ahead = e->slot_of[d][i] - e->slot_of[d][i - ahead]; /* in slots: eager SENDs take none */
        t->sched_data = &e->pos[d][i];
    } else if (!e->inorder) { /* built-in policies order the tasks; placement kept to the device */
        t->workerids = e->wmask[d];
        t->workerids_len = e->wmask_len;
        if (a && e->prio)
            t->priority = e->prio[d][i];
    } else { /* a task outside the plan (NORM) under bsipipe: on the device's worker, in arrival order */
        t->workerids = e->wmask[d];
        t->workerids_len = e->wmask_len;
    }
    if (e->floor_flags) { /* the floor: same shape, empty body, no callback unless profiled */
        t->cl = &engine_cl_floor;
        t->name = engine_cl_floor.name;
        t->nbuffers = n; /* codelets with a fixed count leave the task's count and modes empty */
        for (int j = 0; j < n; j++)
            STARPU_TASK_SET_MODE(t, descr[j].mode, j);
        t->cl_arg = a;
        if (!(e->floor_flags & BSIPIPE_FLOOR_PROFILE)) {
            t->callback_func = NULL;
            t->callback_arg = NULL;
        }
    }
    e->ovh.n_tasks++;
    if (a && a->op.kind == BSIPIPE_OP_RECV && cl == &bsipipe_cl_recv)
        starpu_task_end_dep_add(t, 1);
    if (a && a->op.kind == BSIPIPE_OP_SEND && cl == &bsipipe_cl_send && a->op.channel >= 0 &&
        a->op.channel < e->n_channels && (!e->blocking_send || e->floor_flags) && engine_transfer_tagged(e, d, a->op.peer)) {
        /* The rendezvous as a dependency: not ready before the RECV posted. */
        t->use_tag = 1;
        t->tag_id = (starpu_tag_t)engine_send_tag(e, a->op.channel);
        starpu_tag_declare_deps(t->tag_id, 1, (starpu_tag_t)engine_post_tag(e, a->op.channel));
        e->send_tagged[a->op.channel] = 1;
    }
    if (a) /* last: the job it creates reads the task's tag settings */
        engine_job_note(e, d, i, t, 1);
    int rc = starpu_task_submit(t);
    if (rc != 0)
        return bsipipe_error_set(-EIO, "engine: StarPU refused the task of %s (%d)", name, rc);
    if (e->inorder && a) /* its worker may spin for it (and not for slots beyond the iteration's) */
        bsipipe_policy_note_submitted(e->workerid[d], e->pos[d][i].slot);
    __atomic_fetch_add(&e->tasks_submitted, 1, __ATOMIC_SEQ_CST);
    /* A buffer whose last use is now submitted is freed once that task
     * ends, or given back to its device's pool at this op's slot. */
    for (int j = 0; j < n; j++)
        engine_buffer_used(e, descr[j].handle, a ? d : -1, a ? e->slot_of[d][i] : LONG_MAX);
    return 0;
}

/* Every chunk's squared gradient norm, computed once on the device that
 * holds the chunk's down replica (a NORM task, after the chunk's last
 * gradient write), for every STEP to read: no STEP reads another device's
 * gradients, so with several GPUs or ranks only one double per chunk moves
 * for the clipping norm. The STEPs add the chunks in order: the bits of
 * one sum over the model. Across MPI ranks the owner sends it to the
 * others. */
static int submit_norms(bsipipe_engine_t *e)
{
    for (int c = 0; c < e->C; c++) {
        int owner = e->rep[c].device, rc;
        if (!engine_local(e, owner)) {
            rc = engine_mpi_norm_exchange(e, c, 0);
        } else {
            struct starpu_data_descr descr[2] = {{e->rep[c].h_grads, STARPU_R}, {e->h_norm[c], STARPU_W}};
            rc = e->T > 1 ? engine_tp_submit_norm(e, c, e->h_norm[c])
                          : engine_task_submit(e, owner, -1, &bsipipe_cl_norm, descr, 2);
            if (rc == 0)
                rc = engine_mpi_norm_exchange(e, c, 1);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int set_vector(starpu_data_handle_t h, const void *src, size_t bytes)
{
    starpu_data_acquire(h, STARPU_W);
    void *p = (void *)starpu_data_get_local_ptr(h);
    if (src)
        memcpy(p, src, bytes);
    else
        memset(p, 0, bytes);
    starpu_data_release(h);
    return 0;
}

/* The uses of every per-iteration buffer: the dry run of the plan (which
 * also checks that every op finds its buffers) at the first iteration; the
 * plan does not change, so later iterations take the counts it left. */
static int count_uses(bsipipe_engine_t *e, int step)
{
    if (e->use_counts) {
        for (long u = 0; u < e->n_uses; u++)
            e->uses[u].left = e->use_counts[u];
        return 0;
    }
    int rc = 0;
    for (long j = 0; j < e->n_order && rc == 0; j++)
        rc = submit_op(e, e->order_device[j], e->order_index[j], step, 1);
    if (rc == 0 && ALLOC(e->use_counts, e->n_uses))
        for (long u = 0; u < e->n_uses; u++)
            e->use_counts[u] = e->uses[u].left;
    return rc;
}

static void overhead_begin(bsipipe_engine_t *e)
{
    memset(&e->ovh, 0, sizeof e->ovh);
    e->ovh.send_wait_us = -bsipipe_transport_wait_seconds(e->transport) * 1e6;
    e->ovh.staged_bytes = -bsipipe_transport_staged_bytes(e->transport);
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            e->args[d][i].ph_ok = 0;
    }
}

static void overhead_end(bsipipe_engine_t *e, double t0, double t_sub, double t1)
{
    bsipipe_engine_overhead_t *o = &e->ovh;
    o->submit_s = (t_sub - t0) * 1e-6;
    o->send_wait_us += bsipipe_transport_wait_seconds(e->transport) * 1e6;
    o->staged_bytes += bsipipe_transport_staged_bytes(e->transport);
    o->wall_s = (t1 - t0) * 1e-6;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++) {
            const op_args_t *a = &e->args[d][i];
            if (!a->ph_ok)
                continue;
            o->n_profiled++;
            o->push_us += a->ph[0];
            o->pop_us += a->ph[1];
            o->fetch_us += a->ph[2];
            o->body_us += a->ph[3];
            o->release_us += a->ph[4];
            if (a->op.kind == BSIPIPE_OP_SEND || a->op.kind == BSIPIPE_OP_RECV) {
                o->n_xfer++;
                o->xfer_body_us += a->ph[3];
            }
        }
    }
}

int bsipipe_engine_set_blocking_send(bsipipe_engine_t *e, int on)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    e->blocking_send = on != 0;
    return 0;
}

int bsipipe_engine_idle_spin_us(const bsipipe_engine_t *e)
{
    return e ? e->idle_spin_us : 0;
}

int bsipipe_engine_set_blocking_recv(bsipipe_engine_t *e, int on)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (on && (e->mpi || e->o.devices == BSIPIPE_DEVICES_CUDA))
        return bsipipe_error_set(-ENOTSUP, "blocking receives run on CPU devices in one process only (the local "
                                 "transport); drop --recv blocking, or --mpi / --devices cuda");
    if (on && !e->o.unchecked_plan) { /* prove the plan under these semantics first, as at create */
        bsipipe_cost_model_t blocking = bsipipe_cost_model_unit();
        blocking.blocking_recv = 1;
        int rc = bsipipe_schedule_validate_ex(e->sched, &blocking); /* its detail names the semantics */
        if (rc < 0)
            return rc;
    }
    e->blocking_recv = on != 0;
    return 0;
}

int bsipipe_engine_last_overhead(const bsipipe_engine_t *e, bsipipe_engine_overhead_t *out)
{
    if (!e || !out)
        return bsipipe_error_set(-EINVAL, "engine: no overhead buffer");
    *out = e->ovh;
    return 0;
}

/* The floor's buffers: one per per-iteration buffer of the engine (same
 * slots, NULL where the engine has none), one float each, registered once. */
static int floor_buffers(bsipipe_engine_t *e)
{
    if (e->fl_mem)
        return 0;
    long n_act = (long)e->m * e->k * e->C, n_kv = (long)e->m * e->C, nch = e->n_channels;
    long total = 5 * n_act + 2 * n_kv + nch;
    if (!ALLOC(e->fl_mem, total) || !ALLOC(e->fl_x_out, n_act) || !ALLOC(e->fl_stash, n_act) ||
        !ALLOC(e->fl_dx, n_act) || !ALLOC(e->fl_dy, n_act) || !ALLOC(e->fl_wstash, n_act) || !ALLOC(e->fl_kv, n_kv) ||
        !ALLOC(e->fl_dkv, n_kv) || !ALLOC(e->fl_recv, nch) || !ALLOC(e->floor_recv, nch) ||
        !ALLOC(e->floor_meet, nch))
        return bsipipe_error_set(-ENOMEM, "engine: out of memory for the floor's buffers");
    long u = 0;
    starpu_data_handle_t *fl[] = {e->fl_x_out, e->fl_stash, e->fl_dx, e->fl_dy, e->fl_wstash, e->fl_kv, e->fl_dkv,
                                  e->fl_recv};
    const uint32_t *sz[] = {e->n_x_out, e->n_stash, e->n_dx, e->n_dy, e->n_wstash, e->n_kv, e->n_dkv, e->n_recv};
    long lens[] = {n_act, n_act, n_act, n_act, n_act, n_kv, n_kv, nch};
    for (int l = 0; l < 8; l++)
        for (long i = 0; i < lens[l]; i++, u++)
            if (sz[l][i])
                starpu_vector_data_register(&fl[l][i], STARPU_MAIN_RAM, (uintptr_t)&e->fl_mem[u], 1, sizeof(float));
    return 0;
}

static void floor_free(bsipipe_engine_t *e)
{
    if (!e->fl_mem)
        return;
    long n_act = (long)e->m * e->k * e->C, n_kv = (long)e->m * e->C, nch = e->n_channels;
    starpu_data_handle_t *fl[] = {e->fl_x_out, e->fl_stash, e->fl_dx, e->fl_dy, e->fl_wstash, e->fl_kv, e->fl_dkv,
                                  e->fl_recv};
    long lens[] = {n_act, n_act, n_act, n_act, n_act, n_kv, n_kv, nch};
    for (int l = 0; l < 8; l++) {
        for (long i = 0; fl[l] && i < lens[l]; i++)
            if (fl[l][i])
                starpu_data_unregister(fl[l][i]);
        free(fl[l]);
    }
    free(e->fl_mem);
    free(e->floor_recv);
    free(e->floor_meet);
    e->fl_mem = NULL;
}

int bsipipe_engine_floor_iteration(bsipipe_engine_t *e, int flags, bsipipe_engine_overhead_t *out)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (e->mpi || e->gpu)
        return bsipipe_error_set(-ENOTSUP, "engine: the floor runs on CPU devices in one process only");
    if (e->T > 1)
        return bsipipe_error_set(-ENOTSUP, "engine: the floor is not measured with tensor parallelism (tp %d); "
                                           "run it with --tp 1", e->T);
    int rc = floor_buffers(e);
    if (rc < 0)
        return rc;
    if (bsipipe_transport_reset(e->transport) < 0)
        return bsipipe_error_set(-EBUSY, "engine: transfers of the previous iteration are still in flight");
    e->failed = 0;
    int prof = starpu_profiling_status_get();
    starpu_profiling_status_set(flags & BSIPIPE_FLOOR_PROFILE ? STARPU_PROFILING_ENABLE : STARPU_PROFILING_DISABLE);
    starpu_data_handle_t *saved[8] = {e->h_x_out, e->h_stash, e->h_dx, e->h_dy, e->h_wstash, e->h_kv, e->h_dkv,
                                      e->h_recv};
    if ((flags & BSIPIPE_FLOOR_POOLED) && e->o.unchecked_plan)
        return bsipipe_error_set(-ENOTSUP, "engine: the floor reuses buffers only for a plan proven free of deadlock "
                                           "(as bsipipe_engine_set_buffer_reuse)");
    int fresh = flags & (BSIPIPE_FLOOR_FRESH | BSIPIPE_FLOOR_POOLED); /* the engine's buffers */
    sends_begin(e);
    if (fresh) {
        engine_buffers_begin(e, (flags & BSIPIPE_FLOOR_POOLED) != 0);
    } else {
        e->h_x_out = e->fl_x_out; e->h_stash = e->fl_stash; e->h_dx = e->fl_dx; e->h_dy = e->fl_dy;
        e->h_wstash = e->fl_wstash; e->h_kv = e->fl_kv; e->h_dkv = e->fl_dkv; e->h_recv = e->fl_recv;
    }
    engine_tags_begin(e);
    overhead_begin(e);
    if (flags & BSIPIPE_FLOOR_STARPU_POLL)
        engine_starpu_poll_set(0);
    e->floor_flags = flags | ENGINE_FLOOR_ACTIVE;
    double t0 = starpu_timing_now();
    if (fresh)
        rc = count_uses(e, 0);
    if (fresh && rc == 0)
        engine_buffers_counted(e);
    for (long j = 0; j < e->n_order && rc == 0; j++) {
        int d = e->order_device[j], i = e->order_index[j];
        if (e->args[d][i].op.kind != BSIPIPE_OP_STEP)
            rc = submit_op(e, d, i, 0, 0);
    }
    for (long j = 0; j < e->n_order && rc == 0; j++) {
        int d = e->order_device[j], i = e->order_index[j];
        if (e->args[d][i].op.kind == BSIPIPE_OP_STEP)
            rc = submit_op(e, d, i, 0, 0);
    }
    double t_sub = starpu_timing_now();
    if (rc < 0)
        engine_tags_abort(e); /* half submitted: its SENDs must not wait for ever */
    starpu_task_wait_for_all();
    if (fresh) /* after the tasks: an eager send's callback may still use a buffer */
        engine_buffers_end(e);
    double t1 = starpu_timing_now();
    if (flags & BSIPIPE_FLOOR_STARPU_POLL)
        engine_starpu_poll_set(!e->mpi && e->o.devices == BSIPIPE_DEVICES_CPU);
    e->floor_flags = 0;
    engine_tags_end(e);
    overhead_end(e, t0, t_sub, t1);
    if (!fresh) {
        e->h_x_out = saved[0]; e->h_stash = saved[1]; e->h_dx = saved[2]; e->h_dy = saved[3];
        e->h_wstash = saved[4]; e->h_kv = saved[5]; e->h_dkv = saved[6]; e->h_recv = saved[7];
    }
    starpu_profiling_status_set(prof);
    for (int d = 0; d < e->W; d++)
        e->slot_base[d] += e->n_slots[d];
    if (out)
        *out = e->ovh;
    return rc;
}

/* One pass over the plan: step 1 a training iteration (the STEPs update),
 * else a forward-backward pass; eval: a validation pass, forward only (the
 * B, W and SYNC tasks keep their slots and run empty). */
static int run_pass(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss, int step, int eval)
{
    if (!tokens || !targets)
        return bsipipe_error_set(-EINVAL, "engine: tokens and targets are required");
    long ntok = (long)e->m * e->S;
    for (long i = 0; i < ntok; i++)
        if (tokens[i] < 0 || tokens[i] >= e->dims.vocab || targets[i] < 0 || targets[i] >= e->dims.vocab)
            return bsipipe_error_set(-EINVAL, "engine: token %ld (%d -> %d) is outside the vocabulary 0..%d", i,
                                     tokens[i], targets[i], e->dims.vocab - 1);
    if (e->hung)
        return bsipipe_error_set(-ETIMEDOUT, "engine: an earlier iteration stalled under policy '%s'; the engine "
                                             "cannot run again (destroy it and exit)", e->o.policy);
    if (bsipipe_transport_reset(e->transport) < 0)
        return bsipipe_error_set(-EBUSY, "engine: transfers of the previous iteration are still in flight");
    e->failed = 0;
    int pipes = bsipipe_schedule_n_pipes(e->sched);
    for (int r = 0; r < pipes * e->C; r++)
        if (e->rep[r].grads)
            set_vector(e->rep[r].h_grads, NULL, sizeof(float) * (size_t)e->rep[r].n);
    for (int d = 0; d < e->W; d++)
        set_vector(e->h_loss[d], NULL, sizeof(double));
    if (e->T > 1)
        engine_tp_iteration_begin(e); /* the shards' gradients zeroed, per-rank records reset */
    for (int mb = 0; mb < e->m; mb++) {
        set_vector(e->h_tokens[mb], tokens + (long)mb * e->S, sizeof(int) * (size_t)e->S);
        set_vector(e->h_targets[mb], targets + (long)mb * e->S, sizeof(int) * (size_t)e->S);
    }
    int rc = 0;
    e->rec_seq = 0;
    e->tasks_submitted = 0;
    __atomic_store_n(&e->nr_ended, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&e->tasks_popped, e->mpi ? e->tasks_popped : 0, __ATOMIC_SEQ_CST);
    e->act_bytes_local = e->sync_bytes_local = 0;
    for (int d = 0; d < e->W; d++)
        e->live_bytes[d] = e->peak_bytes[d] = 0;
    sends_begin(e);
    engine_buffers_begin(e, e->reuse_buffers);
    engine_tags_begin(e);
    overhead_begin(e);
    double t0 = starpu_timing_now();
    /* A half-submitted plan could leave an in-order worker waiting for a slot
     * that never comes: check every op before submitting any (on every rank:
     * they all go on, or all stop). */
    rc = count_uses(e, step);
    if ((rc = engine_mpi_agree(e, rc)) < 0) {
        engine_buffers_end(e);
        starpu_task_wait_for_all();
        engine_tags_end(e);
        return rc;
    }
    int wd_rc = engine_watchdog_start(e);
    if (wd_rc < 0)
        fprintf(stderr, "bsipipe engine: %s; a deadlock would hang\n", bsipipe_error_detail());
    engine_buffers_counted(e); /* buffers no op uses; with reuse, the dry run's */
    engine_mpi_iteration_begin(e);
    /* StarPU's traces carry the pass: Iteration N for the step to iteration
     * N, "N 1" for a forward-backward (validation) pass after N steps. */
    e->pass_kind = step ? ENGINE_PASS_TRAIN : eval ? ENGINE_PASS_EVAL : ENGINE_PASS_FWD_BWD;
    e->pass_iter = step ? e->steps + 1 : e->steps;
    starpu_iteration_push((unsigned long)e->pass_iter);
    if (!step)
        starpu_iteration_push(1);
    /* Every op but STEP in dependency order, then the STEPs (each reads every
     * chunk's gradient, so it must follow every SYNC). */
    for (long j = 0; j < e->n_order && rc == 0; j++) {
        int d = e->order_device[j], i = e->order_index[j];
        if (e->args[d][i].op.kind != BSIPIPE_OP_STEP)
            rc = submit_op(e, d, i, step, 0);
    }
    if (rc == 0 && e->T > 1) /* replicated gradients summed over the TP ranks before any norm or STEP reads them */
        rc = engine_tp_submit_reduce(e, 0);
    if (rc == 0)
        rc = submit_norms(e);
    for (int d = 0; d < e->W && rc == 0; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n && rc == 0; i++)
            if (ops[i].kind == BSIPIPE_OP_STEP)
                rc = submit_op(e, d, i, step, 0);
    }
    double t_sub = starpu_timing_now();
    if (!step)
        starpu_iteration_pop();
    starpu_iteration_pop();
    if (rc < 0) { /* receives already posted would wait for ever: release them */
        char why[512];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        engine_fail(e, rc);
        bsipipe_transport_abort(e->transport, why);
        engine_tags_abort(e); /* SENDs submitted without their RECV: let them fail */
        bsipipe_error_set(rc, "%s", why);
    }
    if (!e->mpi && engine_watchdog_wait(e) < 0) { /* the policy stalled: StarPU keeps the tasks */
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        engine_watchdog_stop(e);
        return bsipipe_error_set(-ETIMEDOUT, "%s", why);
    }
    rc = engine_mpi_iteration_end(e, rc); /* every task and message of every rank */
    /* Buffers whose uses were not all submitted (submission stopped half
     * way) or whose eager send never met its RECV: freed now that no task
     * can touch them (an eager send's copy may run after its producer). */
    sends_settle(e);
    engine_buffers_end(e);
    engine_watchdog_stop(e);
    engine_tags_end(e);
    if (e->T > 1)
        engine_tp_iteration_end(e); /* the ranks' records merged per op */
    overhead_end(e, t0, t_sub, starpu_timing_now());
    for (int d = 0; d < e->W; d++)
        e->slot_base[d] += e->n_slots[d];
    if (rc < 0)
        return rc; /* submission stopped half way (transport aborted): the engine cannot be reused */
    if (e->failed == BSIPIPE_EDEADLOCK)
        return bsipipe_error_set(BSIPIPE_EDEADLOCK, "engine: transfers deadlocked (watchdog after %g s): %s",
                                 e->o.watchdog_s, bsipipe_transport_report(e->transport));
    if (e->failed)
        return bsipipe_error_set(e->failed, "engine: a task failed (%s); see the messages above",
                                 bsipipe_strerror(e->failed));
    /* Per-device losses (other ranks' devices are 0 here), summed over the
     * ranks exactly, then added in device order as in one process. */
    double *dev_loss = calloc((size_t)e->W, sizeof *dev_loss);
    if (!dev_loss)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; d < e->W; d++)
        if (engine_local(e, d)) {
            starpu_data_acquire(e->h_loss[d], STARPU_R);
            dev_loss[d] = e->loss[d];
            starpu_data_release(e->h_loss[d]);
        }
    /* Measured statistics from the records of this rank's devices. */
    double first = INFINITY, last = -INFINITY;
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        e->busy[d] = 0;
        for (int i = 0; i < n && engine_local(e, d); i++) {
            const bsipipe_engine_op_record_t *r = &e->rec[d][i];
            if (r->start_us < first)
                first = r->start_us;
            if (ops[i].kind <= BSIPIPE_OP_W) {
                e->busy[d] += r->end_us - r->start_us;
                if (r->end_us > last)
                    last = r->end_us;
            }
        }
        if (e->T > 1) /* an op's span is not its ranks' work: their tasks' time, per rank */
            e->busy[d] = engine_tp_busy_us(e, d);
    }
    /* Over the ranks: losses, busy and peak memory are per device (exact
     * sums), the span is the earliest start and the latest end. */
    double span[2] = {-first, last};
    if ((rc = engine_mpi_sum(e, dev_loss, e->W)) < 0 || (rc = engine_mpi_sum(e, e->busy, e->W)) < 0 ||
        (rc = engine_mpi_sum(e, e->peak_bytes, e->W)) < 0 || (rc = engine_mpi_max(e, span, 2)) < 0) {
        free(dev_loss);
        return rc;
    }
    first = -span[0];
    last = span[1];
    double sum = 0, busy = 0;
    for (int d = 0; d < e->W; d++) {
        sum += dev_loss[d];
        busy += e->busy[d];
    }
    free(dev_loss);
    if (e->o.emulate_flops > 0)
        sum = NAN; /* nothing was computed */
    if (loss)
        *loss = sum / (double)ntok;
    if (step)
        e->steps++;
    e->stats.wall_s = (starpu_timing_now() - t0) * 1e-6;
    e->stats.makespan_s = last > first ? (last - first) * 1e-6 : 0;
    e->stats.bubble_ratio = last > first ? 1.0 - busy / (e->W * (last - first)) : 0;
    e->stats.tokens_per_s = e->stats.wall_s > 0 ? ntok / e->stats.wall_s : 0;
    e->stats.loss = sum / (double)ntok;
    e->stats.gnorm = step ? e->gnorm : 0;
    return 0;
}

int bsipipe_engine_traffic(bsipipe_engine_t *e, double act_bytes[2], double sync_bytes[2])
{
    if (!e || !act_bytes || !sync_bytes)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    double v[4] = {e->act_bytes_local, 0, e->sync_bytes_local, 0};
    double act[2] = {0, 0}, sync[2] = {0, 0};
    engine_mpi_local_traffic(e, act, sync);
    v[1] = act[1];
    v[3] = sync[1];
    int rc = engine_mpi_sum(e, v, 4);
    if (rc < 0)
        return rc;
    act_bytes[0] = v[0];
    act_bytes[1] = v[1];
    sync_bytes[0] = v[2];
    sync_bytes[1] = v[3];
    return 0;
}

int bsipipe_engine_agree(bsipipe_engine_t *e, int rc, const char *failed)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    return engine_mpi_agree_named(e, rc, failed ? failed : "failed");
}

int bsipipe_engine_ranks(const bsipipe_engine_t *e, int *rank, int *nranks, int *device_rank)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "engine: no engine");
    if (rank)
        *rank = e->rank;
    if (nranks)
        *nranks = e->nranks;
    for (int d = 0; device_rank && d < e->W; d++)
        device_rank[d] = e->dev_rank ? e->dev_rank[d] : 0;
    return 0;
}

int bsipipe_engine_records(const bsipipe_engine_t *e, int device, const bsipipe_engine_op_record_t **rec, int *n)
{
    if (!e || device < 0 || device >= e->W)
        return bsipipe_error_set(-EINVAL, "engine: no device %d", device);
    bsipipe_schedule_device_ops(e->sched, device, n);
    *rec = e->rec[device];
    return 0;
}

int bsipipe_engine_device_busy(const bsipipe_engine_t *e, double *busy_s)
{
    if (!e || !busy_s)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    for (int d = 0; d < e->W; d++)
        busy_s[d] = e->busy[d] * 1e-6;
    return 0;
}

/* The checks shared by the two op-time calls; clears the entries they fill
 * (slots, or op indices with `each`) and gives their count in *n_out. */
static int op_times_open(const bsipipe_engine_t *e, double *out, long n, int each, long *n_out)
{
    if (!e || !out)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    long need = each ? bsipipe_sim_op_count(e->sched) : bsipipe_sim_op_slots(e->sched);
    if (n < need)
        return bsipipe_error_set(-EINVAL, "engine: %ld op-time %s needed, %ld given", need,
                                 each ? "entries (one per op)" : "slots", n);
    if (e->T > 1) /* an op's span there holds its collectives' waits, not one device's work */
        return bsipipe_error_set(-ENOTSUP, "measured op times: not with tensor parallelism (D_t = %d); "
                                 "plan with the FLOPs cost model there", e->T);
    for (long i = 0; i < need; i++)
        out[i] = 0;
    if (n_out)
        *n_out = need;
    return 0;
}

static int op_times_missing(void)
{
    return bsipipe_error_set(-ENODATA, "measured op times: some ops have no record on this process "
                             "(run an iteration first; with MPI, other ranks ran them)");
}

int bsipipe_engine_op_seconds(const bsipipe_engine_t *e, double *out, int n)
{
    long slots;
    int rc = op_times_open(e, out, n, 0, &slots);
    if (rc < 0)
        return rc;
    int *count = calloc((size_t)slots, sizeof *count);
    if (!count)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; d < e->W; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd && engine_local(e, d); i++)
            if (ops[i].kind <= BSIPIPE_OP_W && e->rec[d][i].end_us > e->rec[d][i].start_us) {
                int slot = bsipipe_sim_op_slot(e->sched, &ops[i]);
                out[slot] += (e->rec[d][i].end_us - e->rec[d][i].start_us) * 1e-6;
                count[slot]++;
            }
    }
    int missing = 0;
    for (int d = 0; d < e->W && !missing; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd && !missing; i++)
            missing = ops[i].kind <= BSIPIPE_OP_W && !count[bsipipe_sim_op_slot(e->sched, &ops[i])];
    }
    for (long i = 0; i < slots; i++)
        if (count[i])
            out[i] /= count[i];
    free(count);
    return missing ? op_times_missing() : 0;
}

int bsipipe_engine_op_durations(const bsipipe_engine_t *e, double *out, long n)
{
    int rc = op_times_open(e, out, n, 1, NULL);
    if (rc < 0)
        return rc;
    for (int d = 0; d < e->W; d++) {
        int nd;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &nd);
        for (int i = 0; i < nd; i++) {
            const bsipipe_engine_op_record_t *r = &e->rec[d][i];
            if (ops[i].kind > BSIPIPE_OP_W)
                continue;
            if (!engine_local(e, d) || !(r->start_us > 0 && r->end_us >= r->start_us))
                return op_times_missing();
            out[bsipipe_sim_op_index(e->sched, &ops[i])] = (r->end_us - r->start_us) * 1e-6;
        }
    }
    return 0;
}

int bsipipe_engine_peak_memory(const bsipipe_engine_t *e, double *bytes)
{
    if (!e || !bytes)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    for (int d = 0; d < e->W; d++)
        bytes[d] = e->peak_bytes[d];
    return 0;
}

int bsipipe_engine_last_stats(const bsipipe_engine_t *e, bsipipe_engine_stats_t *out)
{
    if (!e || !out)
        return bsipipe_error_set(-EINVAL, "engine: no stats buffer");
    *out = e->stats;
    return 0;
}

static int run_iteration(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss, int step)
{
    return run_pass(e, tokens, targets, loss, step, 0);
}

int bsipipe_engine_forward_backward(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss)
{
    return run_iteration(e, tokens, targets, loss, 0);
}

int bsipipe_engine_evaluate(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "bsipipe_engine_evaluate: engine is NULL");
    /* The last training iteration's records and statistics stay what
     * bsipipe_engine_records / _last_stats / the trace report. */
    bsipipe_engine_op_record_t **saved = calloc((size_t)e->W, sizeof *saved);
    int rc = saved ? 0 : bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; d < e->W && rc == 0; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!(saved[d] = malloc(sizeof **saved * (size_t)(n > 0 ? n : 1))))
            rc = bsipipe_error_set(-ENOMEM, "out of memory");
        else
            memcpy(saved[d], e->rec[d], sizeof **saved * (size_t)n);
    }
    bsipipe_engine_stats_t stats = e->stats;
    double *busy = rc == 0 ? malloc(sizeof *busy * (size_t)e->W) : NULL, *peak = busy ? malloc(sizeof *peak * (size_t)e->W) : NULL;
    if (rc == 0 && !peak)
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
    if (rc == 0) {
        memcpy(busy, e->busy, sizeof *busy * (size_t)e->W);
        memcpy(peak, e->peak_bytes, sizeof *peak * (size_t)e->W);
        rc = run_pass(e, tokens, targets, loss, 0, 1);
        for (int d = 0; d < e->W; d++) {
            int n;
            bsipipe_schedule_device_ops(e->sched, d, &n);
            memcpy(e->rec[d], saved[d], sizeof **saved * (size_t)n);
        }
        e->stats = stats;
        memcpy(e->busy, busy, sizeof *busy * (size_t)e->W);
        memcpy(e->peak_bytes, peak, sizeof *peak * (size_t)e->W);
    }
    for (int d = 0; saved && d < e->W; d++)
        free(saved[d]);
    free(saved);
    free(busy);
    free(peak);
    return rc;
}

int bsipipe_engine_set_lr_scale(bsipipe_engine_t *e, double scale)
{
    if (!e)
        return bsipipe_error_set(-EINVAL, "bsipipe_engine_set_lr_scale: engine is NULL");
    if (!(scale >= 0 && scale <= 1e6))
        return bsipipe_error_set(-EINVAL, "learning-rate scale must be in 0..1e6 (got %g)", scale);
    e->lr_scale = scale;
    return 0;
}

int bsipipe_engine_iteration(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss,
                             double *gnorm)
{
    int rc = run_iteration(e, tokens, targets, loss, 1);
    if (rc == 0 && gnorm)
        *gnorm = e->gnorm;
    return rc;
}

/* Copies the down replicas' gradients or parameters into a whole-model
 * vector (across ranks: each rank its own, then an exact sum). */
static int gather(bsipipe_engine_t *e, float *out, int grads)
{
    if (!out)
        return bsipipe_error_set(-EINVAL, "engine: no output buffer");
    if (e->T > 1)
        return engine_tp_gather(e, out, grads);
    if (e->mpi)
        memset(out, 0, sizeof(float) * (size_t)bsipipe_model_params(&e->dims));
    for (int c = 0; c < e->C; c++) {
        replica_t *r = &e->rep[c];
        if (!r->params)
            continue; /* on another rank */
        starpu_data_handle_t h = grads ? r->h_grads : r->h_params;
        starpu_data_acquire(h, STARPU_R);
        memcpy(out + r->base, grads ? r->grads : r->params, sizeof(float) * (size_t)r->n);
        starpu_data_release(h);
    }
    return engine_mpi_sum_floats(e, out, bsipipe_model_params(&e->dims));
}

int bsipipe_engine_params(bsipipe_engine_t *e, float *out) { return gather(e, out, 0); }
int bsipipe_engine_grads(bsipipe_engine_t *e, float *out) { return gather(e, out, 1); }
