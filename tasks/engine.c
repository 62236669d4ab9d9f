/* engine.c: one iteration of the plan. For each op, in the lowered plan's
 * submission order, the op kind's insert function (tasks/ops/<op>.c) builds
 * its task; around them the sends' mode for the iteration, the gradient
 * norms, the overhead clock, the passes (training, forward-backward,
 * evaluation), the setters between iterations, and the parameters and
 * gradients gathered. Creation is engine_create.c's, the task machinery
 * engine_core.c's, the reports engine_stats.c's. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "base/bsipipe_error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long bsipipe_engine_n_params(const bsipipe_engine_t *e)
{
    return bsipipe_model_params(&e->dims);
}

const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e)
{
    return e->sched;
}

/* Each op kind's insert function (tasks/ops/): a new op kind is its file
 * and one entry here. */
static int (*const insert_op[BSIPIPE_OP_KIND_COUNT])(engine_insert_t *) = {
    [BSIPIPE_OP_F] = engine_insert_forward, [BSIPIPE_OP_B] = engine_insert_backward,
    [BSIPIPE_OP_W] = engine_insert_wgrad,   [BSIPIPE_OP_SEND] = engine_insert_send,
    [BSIPIPE_OP_RECV] = engine_insert_recv, [BSIPIPE_OP_SYNC] = engine_insert_sync,
    [BSIPIPE_OP_STEP] = engine_insert_step,
};

/* Builds and submits the task of op i of device d; with dry_run only checks
 * that every buffer it needs exists, and counts their uses. */
int engine_submit_op(struct bsipipe_engine *e, int d, int i, int step, int dry_run)
{
    if (!engine_local(e, d))
        return 0; /* another rank's op */
    op_args_t *a = &e->args[d][i];
    if (e->T > 1 && !(a->transport && a->transport->carries_tp_slices)) /* the TP builder submits the T slices */
        return engine_tp_submit_op(e, d, i, step, dry_run);
    if ((unsigned)a->op.kind >= BSIPIPE_OP_KIND_COUNT || !insert_op[a->op.kind])
        return bsipipe_error_set(-EINVAL, "engine: unknown op kind %d", a->op.kind);
    /* A buffer's first writer takes its handle (engine_buffer_bind) from
     * those given back before the first slot it may run at (a receive
     * posted ahead runs before the ops in front of it). */
    long earliest = e->slot_of[d][i];
    if (a->op.kind == BSIPIPE_OP_RECV)
        earliest = e->slot_of[d][i - engine_recv_ahead(e, d, i)];
    engine_insert_t t = {.e = e, .a = a, .d = d, .i = i, .earliest = earliest, .dry_run = dry_run, .step = step};
    int rc = insert_op[a->op.kind](&t);
    return rc < 0 ? rc : engine_insert_finish(&t);
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
                engine_eager_done(&e->args[d][i]);
    }
}

/* Whether this iteration's sends go eager, and the slots that follow. */
void engine_sends_begin(struct bsipipe_engine *e)
{
    e->eager = e->eager_send && !e->blocking_send && !e->blocking_recv && !e->o.recv_in_place;
    engine_plan_slots(e, e->eager);
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
            rc = engine_transports_norm_exchange(e, c, 0);
        } else {
            rc = e->T > 1 ? engine_tp_submit_norm(e, c, e->h_norm[c]) : engine_insert_norm(e, owner, c);
            if (rc == 0)
                rc = engine_transports_norm_exchange(e, c, 1);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The uses of every per-iteration buffer: the dry run of the plan (which
 * also checks that every op finds its buffers) at the first iteration; the
 * plan does not change, so later iterations take the counts it left. */
int engine_count_uses(struct bsipipe_engine *e, int step)
{
    if (e->use_counts) {
        for (long u = 0; u < e->n_uses; u++)
            e->uses[u].left = e->use_counts[u];
        return 0;
    }
    int rc = 0;
    for (long j = 0; j < e->n_order && rc == 0; j++)
        rc = engine_submit_op(e, e->order_device[j], e->order_index[j], step, 1);
    if (rc == 0 && ALLOC(e->use_counts, e->n_uses))
        for (long u = 0; u < e->n_uses; u++)
            e->use_counts[u] = e->uses[u].left;
    return rc;
}

void engine_overhead_begin(struct bsipipe_engine *e)
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

void engine_overhead_end(struct bsipipe_engine *e, double t0, double t_sub, double t1)
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
    /* The plan proven under these semantics too (at create: the lowering
     * pass); its detail names the semantics. */
    if (on && e->lowered->blocking_checked && e->lowered->blocking_rc < 0)
        return bsipipe_error_set(e->lowered->blocking_rc, "%s", e->lowered->blocking_why);
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
            engine_vector_write(e->rep[r].h_grads, NULL, sizeof(float) * (size_t)e->rep[r].n);
    for (int d = 0; d < e->W; d++)
        engine_vector_write(e->h_loss[d], NULL, sizeof(double));
    if (e->T > 1)
        engine_tp_iteration_begin(e); /* the shards' gradients zeroed, per-rank records reset */
    for (int mb = 0; mb < e->m; mb++) {
        engine_vector_write(e->h_tokens[mb], tokens + (long)mb * e->S, sizeof(int) * (size_t)e->S);
        engine_vector_write(e->h_targets[mb], targets + (long)mb * e->S, sizeof(int) * (size_t)e->S);
    }
    int rc = 0;
    e->rec_seq = 0;
    e->tasks_submitted = 0;
    __atomic_store_n(&e->nr_ended, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&e->tasks_popped, e->mpi ? e->tasks_popped : 0, __ATOMIC_SEQ_CST);
    e->act_bytes_local = e->sync_bytes_local = 0;
    for (int d = 0; d < e->W; d++)
        e->live_bytes[d] = e->peak_bytes[d] = 0;
    engine_sends_begin(e);
    engine_buffers_begin(e, e->reuse_buffers);
    engine_overhead_begin(e);
    double t0 = starpu_timing_now();
    /* A half-submitted plan could leave an in-order worker waiting for a slot
     * that never comes: check every op before submitting any (on every rank:
     * they all go on, or all stop). */
    rc = engine_count_uses(e, step);
    if ((rc = engine_mpi_agree(e, rc)) < 0) {
        engine_buffers_end(e);
        starpu_task_wait_for_all();
        return rc;
    }
    engine_transports_begin(e); /* fresh rendezvous tags; the MPI messages' bookkeeping, its watchdog armed */
    int wd_rc = engine_watchdog_start(e);
    if (wd_rc < 0)
        fprintf(stderr, "bsipipe engine: %s; a deadlock would hang\n", bsipipe_error_detail());
    engine_buffers_counted(e); /* buffers no op uses; with reuse, the dry run's */
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
            rc = engine_submit_op(e, d, i, step, 0);
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
                rc = engine_submit_op(e, d, i, step, 0);
    }
    double t_sub = starpu_timing_now();
    if (!step)
        starpu_iteration_pop();
    starpu_iteration_pop();
    if (rc < 0) { /* receives already posted would wait for ever: release them */
        char why[512];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        engine_fail(e, rc);
        engine_transports_abort(e, why); /* SENDs submitted without their RECV: let them fail */
        bsipipe_error_set(rc, "%s", why);
    }
    if (!e->mpi && engine_watchdog_wait(e) < 0) { /* the policy stalled: StarPU keeps the tasks */
        char why[1024];
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
        engine_watchdog_stop(e);
        return bsipipe_error_set(-ETIMEDOUT, "%s", why);
    }
    rc = engine_transports_wait(e, rc); /* every task and message of every rank */
    /* Buffers whose uses were not all submitted (submission stopped half
     * way) or whose eager send never met its RECV: freed now that no task
     * can touch them (an eager send's copy may run after its producer). */
    sends_settle(e);
    engine_buffers_end(e);
    engine_watchdog_stop(e);
    engine_transports_end(e);
    if (e->T > 1)
        engine_tp_iteration_end(e); /* the ranks' records merged per op */
    engine_overhead_end(e, t0, t_sub, starpu_timing_now());
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
            engine_vector_read(e->h_loss[d], &dev_loss[d], &e->loss[d], sizeof(double));
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
    int rc = 0;
    if (e->T > 1) {
        rc = engine_tp_gather(e, out, grads);
    } else {
        if (e->mpi)
            memset(out, 0, sizeof(float) * (size_t)bsipipe_model_params(&e->dims));
        for (int c = 0; c < e->C; c++) {
            replica_t *r = &e->rep[c];
            if (!r->params)
                continue; /* on another rank */
            starpu_data_handle_t h = grads ? r->h_grads : r->h_params;
            engine_vector_read(h, out + r->base, grads ? r->grads : r->params, sizeof(float) * (size_t)r->n);
        }
    }
    /* Every element comes from one process (the others hold zeros there):
     * the sum is exact. Every rank calls, also after a failure. */
    int arc = engine_mpi_sum_floats(e, out, bsipipe_model_params(&e->dims));
    return rc < 0 ? rc : arc;
}

int bsipipe_engine_params(bsipipe_engine_t *e, float *out) { return gather(e, out, 0); }
int bsipipe_engine_grads(bsipipe_engine_t *e, float *out) { return gather(e, out, 1); }
