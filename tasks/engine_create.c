/* engine_create.c: an engine's life: its options' defaults, creation (the
 * plan checked against the options, StarPU and its workers started, the
 * parameters, buffers and per-op arguments laid out, the plan lowered,
 * the submission order and priorities) and destruction. What an iteration
 * does with them is engine.c's. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    engine_floor_free(e);
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
    plan_lowered_destroy(e->lowered);
    for (int d = 0; e->wmask && d < e->W; d++)
        free(e->wmask[d]);
    free(e->wmask);
    free(e->workerid);
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
                long i = act_index(e, mb, s, c), len = engine_piece_len(e, s);
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
                e->n_recv[ops[i].channel] = (uint32_t)((long)engine_piece_len(e, ops[i].sub) * e->d);
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
        int len = engine_piece_len(e, s);
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
            a->low = &e->lowered->ops[d][i];
            if (ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_RECV || ops[i].kind == BSIPIPE_OP_SYNC)
                a->transport = engine_transport_for(e, d, &ops[i]); /* e->mpi and e->nccl exist by now */
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
    engine_plan_slots(e, 0);
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
 * priority variants...): each op's remaining critical path under FLOPs
 * costs (bsipipe_schedule_critical_path, lowered at create), scaled onto
 * the running policy's range, so what most work waits on runs first. The
 * bsipipe policy orders by slot and ignores priorities: none are set there.
 * A plan the simulator cannot finish (an unchecked one) gets none either. */
static int plan_priorities(bsipipe_engine_t *e)
{
    int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    if (e->inorder || hi <= lo || !e->lowered->has_crit)
        return 0;
    double top = e->lowered->crit_top;
    if (!ALLOC(e->prio, e->W))
        return -ENOMEM;
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        if (!ALLOC(e->prio[d], n))
            return -ENOMEM;
        for (int i = 0; i < n; i++)
            /* Transfers first: they cost little and feed another device. By
             * their path alone (that of the op they feed, one shorter than
             * their producer's siblings'), a device would finish all its
             * forwards before sending one activation (1F1B: bubble 56 -> 65%). */
            e->prio[d][i] = ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_RECV
                                ? hi
                                : (int)lround((double)lo + (top > 0 ? ((double)hi - (double)lo) *
                                                                          e->lowered->ops[d][i].crit / top : 0));
    }
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

    /* What the iterations read of the plan (graph/plan_lower.h): the
     * submission order, posting ahead under non-blocking receives (blocking
     * ones never post ahead: engine_recv_ahead), the emulated ops'
     * durations, the built-in policies' priorities, the plan under blocking
     * receives. The engine calls the planner no more after this. */
    bsipipe_cost_model_t recv = bsipipe_cost_model_unit();
    recv.recv_in_place = o->recv_in_place;
    plan_lower_opts_t lower = {.recv = &recv,
                               .emulated = e->o.emulate_flops > 0 ? &e->emu_cost : NULL,
                               .unchecked = o->unchecked_plan,
                               .priorities = !bsipipe_policy_is_inorder(e->o.policy),
                               /* bsipipe_engine_set_blocking_recv: CPU devices, one process */
                               .blocking_possible = o->devices == BSIPIPE_DEVICES_CPU && !o->mpi};
    if ((rc = plan_lower(e->sched, &lower, &e->lowered)) < 0) {
        bsipipe_engine_destroy(e);
        return rc;
    }
    e->n_order = e->lowered->n_order;
    e->order_device = e->lowered->order_device;
    e->order_index = e->lowered->order_index;

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
