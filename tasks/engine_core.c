/* engine_core.c: what every task file of the engine shares, below the op
 * files (tasks/ops/), the transports (tasks/transport/), the TP builder,
 * the watchdog and the driver: building, placing and submitting a task
 * (engine_task_submit: the worker, the in-order slot and how far ahead a
 * RECV is posted, the rendezvous tag of a local SEND, the floor's empty
 * body, the callbacks that fill the op's record and count its end), the
 * buffers an insert function lists, an op's failure reported, and where a
 * layer's parameters start. It calls nothing above it. */
#include "tasks/engine_internal.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <limits.h>
#include <time.h>
#include <stdio.h>
#include <string.h>

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

int engine_piece_len(const struct bsipipe_engine *e, int sub)
{
    const int *st = bsipipe_schedule_sub_starts(e->sched);
    return st[sub + 1] - st[sub];
}

starpu_data_handle_t engine_input_handle(struct bsipipe_engine *e, const op_args_t *a)
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

void engine_insert_buffer(engine_insert_t *t, starpu_data_handle_t *slot, enum starpu_data_access_mode mode)
{
    if (t->n >= ENGINE_MAX_BUFFERS)
        return; /* insert functions stay within the bound (STEP checks it) */
    t->descr[t->n].handle = engine_buffer_bind(t->e, slot, t->d, t->earliest, mode);
    t->descr[t->n].mode = mode;
    t->n++;
}

void engine_insert_read(engine_insert_t *t, starpu_data_handle_t h)
{
    if (t->n >= ENGINE_MAX_BUFFERS)
        return;
    t->descr[t->n].handle = h;
    t->descr[t->n].mode = STARPU_R;
    t->n++;
}

int engine_insert_finish(engine_insert_t *t)
{
    if (!t->cl)
        return 0;
    for (int j = 0; j < t->n; j++)
        if (!t->descr[j].handle)
            return bsipipe_error_set(-EINVAL, "engine: %s has no input buffer (plan and transfers disagree)",
                                     t->a->name);
    if (t->dry_run) { /* count the uses of the iteration's buffers */
        for (int j = 0; j < t->n; j++)
            engine_buffer_use(t->e, t->descr[j].handle, 1);
        return 0;
    }
    return engine_task_submit_flags(t->e, t->d, t->i, t->cl, t->descr, t->n, t->flags);
}

void engine_vector_write(starpu_data_handle_t h, const void *src, size_t bytes)
{
    starpu_data_acquire(h, STARPU_W);
    void *p = (void *)starpu_data_get_local_ptr(h);
    if (src)
        memcpy(p, src, bytes);
    else
        memset(p, 0, bytes);
    starpu_data_release(h);
}

void engine_vector_read(starpu_data_handle_t h, void *dst, const void *data, size_t bytes)
{
    starpu_data_acquire(h, STARPU_R);
    memcpy(dst, data, bytes);
    starpu_data_release(h);
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
    engine_task_ended(a->e, a->op.kind == BSIPIPE_OP_RECV);
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

void engine_task_ended(struct bsipipe_engine *e, int recv)
{
    long ended = __atomic_add_fetch(&e->tasks_ended, 1, __ATOMIC_SEQ_CST);
    if (!recv)
        __atomic_fetch_add(&e->nr_ended, 1, __ATOMIC_SEQ_CST);
    /* The engine frees the watchdog only after starpu_task_wait_for_all,
     * which returns once every callback has returned. */
    struct engine_watchdog_end *w = __atomic_load_n(&e->wd_end, __ATOMIC_SEQ_CST);
    if (w && ended >= __atomic_load_n(&w->target, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&w->lock);
        pthread_cond_broadcast(&w->done);
        pthread_mutex_unlock(&w->lock);
    }
}

static void task_ended(void *arg)
{
    engine_task_ended(arg, 0);
}


/* The op whose task `t` is, or NULL (a task outside the plan, the TP
 * builder's, none). */
op_args_t *engine_task_op(struct starpu_task *t)
{
    op_args_t *a = t && t->callback_func == record_profile ? t->cl_arg : NULL;
    return a && a->task == t ? a : NULL;
}


/* How many ops early the op i of device d may run (bsipipe_plan_pos_t.ahead):
 * a posted receive of the local transport is posted ahead as the planner
 * lowered it (plan_lower.h). Blocking receives wait for their data, so they
 * stay in place; MPI and NCCL transfers too. */
int engine_recv_ahead(const bsipipe_engine_t *e, int d, int i)
{
    if (e->mpi || e->o.devices != BSIPIPE_DEVICES_CPU || e->blocking_recv)
        return 0;
    int j = e->args[d][i].low->ahead;
    return j <= BSIPIPE_POLICY_MAX_AHEAD ? j : 0;
}


int engine_task_submit(bsipipe_engine_t *e, int d, int i, struct starpu_codelet *cl, struct starpu_data_descr *descr,
                       int n)
{
    return engine_task_submit_flags(e, d, i, cl, descr, n, 0);
}

int engine_task_submit_flags(struct bsipipe_engine *e, int d, int i, struct starpu_codelet *cl,
                             struct starpu_data_descr *descr, int n, unsigned flags)
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
        t->cl = e->floor_cl;
        t->name = e->floor_cl->name;
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
    if (a && (flags & ENGINE_TASK_END_DEP))
        starpu_task_end_dep_add(t, 1);
    if (a && (flags & ENGINE_TASK_RENDEZVOUS) && a->op.channel >= 0 &&
        a->op.channel < e->n_channels && (!e->blocking_send || e->floor_flags)) {
        /* The local transport's rendezvous as a dependency: not ready
         * before the RECV posted (engine_watchdog.c). */
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

/* Each op's slot in its worker's plan order for this iteration: eager
 * SENDs run inside their producer and take no slot, so the policy's next
 * slot after a producer is the op after its SEND. */
void engine_plan_slots(struct bsipipe_engine *e, int eager)
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
