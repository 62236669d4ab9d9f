/* tasks/transport/local.c: the `local` transport — SEND, RECV and SYNC
 * between devices of this process (transport.h), over the rendezvous
 * channel of bsipipe_transport.h.
 *
 * RECV posts its buffer, notifies its SEND's tag and returns; its task
 * completes when the data lands (one end dependency, released by the
 * channel). The SEND task is not ready before that tag (the rendezvous as a
 * StarPU dependency: engine_watchdog.c says why and watches it), so when it
 * runs the receive is posted: it copies at once and never waits on its
 * worker. On CUDA workers the same rendezvous moves device buffers: the
 * sender copies with cudaMemcpyAsync on its stream (same GPU, or a peer
 * GPU) and waits for it before releasing the RECV.
 *
 * Eager sends (CPU devices, the default): the producer offers its output
 * at its end (engine_send_eager, below) and the SEND has no task.
 * Blocking receives (bsipipe_engine_set_blocking_recv, the ablation): RECV
 * waits on its worker until the data has landed, so its device goes no
 * further, as under NCCL-like semantics.
 *
 * SYNC: StarPU brings both replicas' gradients to the down replica's worker,
 * which sums them (engine_cl_sync); the up replica's device runs a no-op
 * that keeps its place in the plan.
 *
 * Buffers: SEND 0 source R; RECV 0 destination W. */
#include "tasks/transport/transport.h"
#include "tasks/engine_cuda.h"
#include "base/bsipipe_error.h"

/* ---- the rendezvous tags (a SEND's task waits for its RECV's post) ---- */

void transport_local_post_notify(struct bsipipe_engine *e, long ch)
{
    if (!e->post_notified || ch < 0 || ch >= e->n_channels)
        return;
    if (__atomic_exchange_n(&e->post_notified[ch], 1, __ATOMIC_ACQ_REL) == 0)
        starpu_tag_notify_from_apps((starpu_tag_t)engine_post_tag(e, ch));
}

void transport_local_release_posts(struct bsipipe_engine *e)
{
    for (long ch = 0; ch < e->n_channels; ch++)
        transport_local_post_notify(e, ch);
}

void engine_tags_begin(struct bsipipe_engine *e)
{
    static unsigned long long next_base = 0xB5B0000000000000ULL;
    unsigned long long span = 2ULL * (unsigned long long)(e->n_channels + 1);
    e->tag_base = __atomic_fetch_add(&next_base, span, __ATOMIC_SEQ_CST);
    for (long ch = 0; ch < e->n_channels; ch++) {
        e->post_notified[ch] = 0;
        e->send_tagged[ch] = 0;
    }
}

void engine_tags_end(struct bsipipe_engine *e)
{
    for (long ch = 0; ch < e->n_channels; ch++) {
        starpu_tag_remove((starpu_tag_t)engine_send_tag(e, ch));
        starpu_tag_remove((starpu_tag_t)engine_post_tag(e, ch));
    }
}

/* ---- eager sends: the producer offers its output, no SEND task ---- */

/* An eager send settled (copied, or given up after a failure): its record,
 * and its use of the buffer, which may now be freed. Once per SEND: the
 * transport calls it, and so does engine_sends_settle for an offer whose
 * RECV never ran. */
void engine_eager_done(void *arg)
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
     * a third of a task's termination: docs/benchmarks.md, "Where the time goes"). */
    if (s->e->pool_active) /* its use was consumed at its submission: the transport stages what it keeps */
        return;
    op_args_t *host = engine_task_op(starpu_task_get_current());
    if (host && !host->settled)
        host->settled = s;
    else
        engine_buffer_use(s->e, s->send_handle, 0); /* nothing for the floor's buffers registered once */
}

/* The floor's eager send: the same meeting with no data (a RECV posted
 * first is released by its producer, a producer first by the RECV). */
void engine_floor_meet(struct bsipipe_engine *e, long ch, int side)
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
        engine_floor_meet(e, s->op.channel, 1);
        engine_eager_done(s);
        return;
    }
    size_t bytes = STARPU_VECTOR_GET_NX(out) * STARPU_VECTOR_GET_ELEMSIZE(out);
    int rc = bsipipe_transport_offer(e->transport, s->op.channel, (const void *)STARPU_VECTOR_GET_PTR(out), bytes,
                                     s->op.device, s->name + 5 /* past "SEND " */, engine_eager_done, s);
    if (rc == -ETIMEDOUT) /* the transport failed earlier: its report names the waits */
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, s, rc);
}

/* ---- SEND and RECV ---- */

static void send_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    engine_emulate_send(e, a->op.device, a->op.peer, (double)bytes); /* emulated links: the bytes' time */
    int rc = bsipipe_transport_send(e->transport, a->op.channel, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                    bytes, a->op.device, a->name + 5 /* past "SEND " */);
    if (rc == -ETIMEDOUT) /* the watchdog fired: the transport's report names the waits */
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, a, rc);
}

static void recv_cpu(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = bsipipe_transport_post(e->transport, a->op.channel, (void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes,
                                    starpu_task_get_current(), a->op.device, a->name + 5 /* past "RECV " */);
    if (!e->eager) /* its SEND task may run now (also after an error: it reports) */
        transport_local_post_notify(e, a->op.channel);
    if (rc == 0 && e->blocking_recv && bsipipe_transport_wait_filled(e->transport, a->op.channel) == -ETIMEDOUT) {
        engine_fail(e, BSIPIPE_EDEADLOCK); /* the transport's report names the waits */
        return;
    }
    engine_report(e, a, rc);
}

#ifdef BSIPIPE_HAVE_CUDA
/* The rendezvous copy between device buffers: it has landed on return. */
static int send_copy_cuda(void *dst, const void *src, size_t bytes, void *arg)
{
    cudaStream_t s = *(cudaStream_t *)arg;
    int rc = bsipipe_cuda_copy(dst, src, bytes, s);
    return rc ? rc : bsipipe_cuda_stream_wait(s);
}

static void send_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    cudaStream_t s = engine_cuda_stream();
    int rc = bsipipe_transport_send_copy(e->transport, a->op.channel, (const void *)STARPU_VECTOR_GET_PTR(buffers[0]),
                                         bytes, a->op.device, a->name + 5, send_copy_cuda, &s);
    if (rc == -ETIMEDOUT)
        engine_fail(e, BSIPIPE_EDEADLOCK);
    else
        engine_report(e, a, rc);
}

static void recv_cuda(void *buffers[], void *cl_arg)
{
    op_args_t *a = cl_arg;
    struct bsipipe_engine *e = a->e;
    size_t bytes = STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int rc = bsipipe_transport_post(e->transport, a->op.channel, (void *)STARPU_VECTOR_GET_PTR(buffers[0]), bytes,
                                    starpu_task_get_current(), a->op.device, a->name + 5);
    transport_local_post_notify(e, a->op.channel);
    engine_report(e, a, rc);
}
#endif

struct starpu_codelet engine_cl_send = {
    .cpu_funcs = {send_cpu},
    .cpu_funcs_name = {"send_cpu"},
    BSIPIPE_CL_CUDA(send_cuda)
    .nbuffers = 1,
    .modes = {STARPU_R},
    .model = &engine_model_send,
    .name = "SEND",
};

struct starpu_codelet engine_cl_recv = {
    .cpu_funcs = {recv_cpu},
    .cpu_funcs_name = {"recv_cpu"},
    BSIPIPE_CL_CUDA(recv_cuda)
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &engine_model_recv,
    .name = "RECV",
};

/* SEND's task: the buffer it sends, ready once its RECV posted. An eager
 * send has no task: its producer offers the buffer; only its bytes and its
 * use of the buffer are counted here. */
static int local_insert_send(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    op_args_t *a = t->a;
    const bsipipe_op_t *op = &a->op;
    if (e->eager && !t->dry_run) { /* sent by its producer, which may have freed the buffer already */
        e->act_bytes_local += (double)engine_piece_len(e, op->sub) * e->d * sizeof(float);
        if (e->pool_active && a->send_handle) /* staged if need be: the buffer is free once its producer ends */
            engine_buffer_used(e, a->send_handle, t->d, e->slot_of[t->d][t->i]);
        t->cl = NULL;
        return 0;
    }
    t->cl = &engine_cl_send;
    t->flags = ENGINE_TASK_RENDEZVOUS; /* not under blocking sends (engine_task_submit_flags) */
    engine_insert_send_source(t);
    return 0;
}

/* RECV's task: its channel's receive buffer, written; it ends when the data
 * lands (the channel releases its end dependency). */
static int local_insert_recv(engine_insert_t *t)
{
    t->cl = &engine_cl_recv;
    t->flags = ENGINE_TASK_END_DEP;
    engine_insert_buffer(t, &t->e->h_recv[t->a->op.channel], STARPU_W);
    return 0;
}

/* SYNC's task: on the down replica's device both replicas' gradients (RW),
 * on the up one its own (R, the no-op). The down side counts the bytes of
 * both directions. */
static int local_insert_sync(engine_insert_t *t)
{
    struct bsipipe_engine *e = t->e;
    const bsipipe_op_t *op = &t->a->op;
    if (op->pipe == 0) {
        t->cl = &engine_cl_sync;
        engine_insert_buffer(t, &e->rep[op->chunk].h_grads, STARPU_RW);
        engine_insert_buffer(t, &e->rep[e->C + op->chunk].h_grads, STARPU_RW);
        if (!t->dry_run && t->descr[0].handle) /* each side sends its replica once */
            e->sync_bytes_local += 2.0 * (double)starpu_vector_get_nx(t->descr[0].handle) * sizeof(float);
    } else {
        t->cl = &engine_cl_sync_peer;
        engine_insert_buffer(t, &e->rep[e->C + op->chunk].h_grads, STARPU_R);
    }
    return 0;
}

/* Receives already posted would wait for ever, SENDs submitted without
 * their RECV too: the channel fails them, the tags let the SENDs run. */
static void local_abort(struct bsipipe_engine *e, const char *why)
{
    bsipipe_transport_abort(e->transport, why);
    transport_local_release_posts(e);
}

const engine_transport_t engine_transport_local = {
    .name = "local", /* carries what the others do not (no carries function) */
    .insert_send = local_insert_send,
    .insert_recv = local_insert_recv,
    .insert_sync = local_insert_sync,
    .iteration_begin = engine_tags_begin,
    .iteration_abort = local_abort,
    .iteration_end = engine_tags_end,
};
