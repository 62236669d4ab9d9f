/* engine_floor.c: the floor iteration (bsipipe_engine_floor_iteration):
 * the plan's tasks with their buffers and dependencies, placed and ordered
 * as in a real iteration, but with an empty body, so the time it takes is
 * StarPU's and the engine's own overhead (docs/benchmarks.md). A RECV still
 * lets its SEND go and a SEND its RECV, so the same dependencies hold. */
#include "tasks/engine_internal.h"
#include "tasks/transport/transport.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

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
            engine_floor_meet(e, ch, 2);
        else
            transport_local_post_notify(e, ch);
        break;
    case BSIPIPE_OP_SEND:
        starpu_task_end_dep_release(e->floor_recv[ch]);
        break;
    case BSIPIPE_OP_F:
    case BSIPIPE_OP_B:
    case BSIPIPE_OP_W:
        if (e->floor_flags & BSIPIPE_FLOOR_EMULATE)
            engine_emulate(e, a);
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

void engine_floor_free(struct bsipipe_engine *e)
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
    engine_sends_begin(e);
    if (fresh) {
        engine_buffers_begin(e, (flags & BSIPIPE_FLOOR_POOLED) != 0);
    } else {
        e->h_x_out = e->fl_x_out; e->h_stash = e->fl_stash; e->h_dx = e->fl_dx; e->h_dy = e->fl_dy;
        e->h_wstash = e->fl_wstash; e->h_kv = e->fl_kv; e->h_dkv = e->fl_dkv; e->h_recv = e->fl_recv;
    }
    engine_tags_begin(e);
    engine_overhead_begin(e);
    if (flags & BSIPIPE_FLOOR_STARPU_POLL)
        engine_starpu_poll_set(0);
    e->floor_cl = &engine_cl_floor; /* engine_task_submit runs its tasks with this body */
    e->floor_flags = flags | ENGINE_FLOOR_ACTIVE;
    double t0 = starpu_timing_now();
    if (fresh)
        rc = engine_count_uses(e, 0);
    if (fresh && rc == 0)
        engine_buffers_counted(e);
    for (long j = 0; j < e->n_order && rc == 0; j++) {
        int d = e->order_device[j], i = e->order_index[j];
        if (e->args[d][i].op.kind != BSIPIPE_OP_STEP)
            rc = engine_submit_op(e, d, i, 0, 0);
    }
    for (long j = 0; j < e->n_order && rc == 0; j++) {
        int d = e->order_device[j], i = e->order_index[j];
        if (e->args[d][i].op.kind == BSIPIPE_OP_STEP)
            rc = engine_submit_op(e, d, i, 0, 0);
    }
    double t_sub = starpu_timing_now();
    if (rc < 0)
        transport_local_release_posts(e); /* half submitted: its SENDs must not wait for ever */
    starpu_task_wait_for_all();
    if (fresh) /* after the tasks: an eager send's callback may still use a buffer */
        engine_buffers_end(e);
    double t1 = starpu_timing_now();
    if (flags & BSIPIPE_FLOOR_STARPU_POLL)
        engine_starpu_poll_set(!e->mpi && e->o.devices == BSIPIPE_DEVICES_CPU);
    e->floor_flags = 0;
    engine_tags_end(e);
    engine_overhead_end(e, t0, t_sub, t1);
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
