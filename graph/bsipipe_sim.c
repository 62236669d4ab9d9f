/* bsipipe_sim.c: discrete-event simulation, memory and traffic accounting,
 * and deadlock reporting. */
#include "graph/bsipipe_sim.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "kernels/bsipipe_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bsipipe_cost_model_t bsipipe_cost_model_unit(void)
{
    bsipipe_cost_model_t c = {.unit = 1, .f_unit = 1, .b_unit = 2, .w_unit = 1, .bytes_per_element = 4};
    return c;
}

bsipipe_cost_model_t bsipipe_cost_model_flops(double device_flops)
{
    bsipipe_cost_model_t c = {
        .unit = 0, .f_unit = 1, .b_unit = 2, .w_unit = 1, .device_flops = device_flops,
        .bytes_per_element = 4, .intra_latency = 5e-6, .intra_bandwidth = 300e9,
        .inter_latency = 10e-6, .inter_bandwidth = 25e9,
    };
    return c;
}

/* Posting ahead (bsipipe_sim_recv_ahead): whether receives of device d are
 * posted ahead at all, and which transfers a posted-ahead receive may pass
 * on its way back to the compute op before it. */
static int posts_ahead(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c)
{
    return !c->blocking_recv && !c->recv_in_place &&
           (s->pc.comm == BSIPIPE_COMM_BSIPIPE || s->pc.comm == BSIPIPE_COMM_NO_REVERSAL);
}

static int passable(const bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    return op->kind == BSIPIPE_OP_RECV || (s->pc.comm == BSIPIPE_COMM_BSIPIPE && op->kind == BSIPIPE_OP_SEND);
}

/* How many compute ops back a receive is posted: two under the bsipipe
 * order (a device drifting by up to an op from the plan's timeline still
 * posts before its neighbour sends), one under no-reversal, whose
 * boundaries are the ablation. */
static int post_depth(const bsipipe_schedule_t *s)
{
    return s->pc.comm == BSIPIPE_COMM_BSIPIPE ? 2 : 1;
}

int bsipipe_sim_recv_ahead(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, int d, int i)
{
    if (d < 0 || d >= s->n_devices || i < 0 || i >= s->n_ops[d] || s->ops[d][i].kind != BSIPIPE_OP_RECV ||
        !posts_ahead(s, c))
        return 0;
    int ahead = 0, k = i - 1;
    for (int depth = 0; depth < post_depth(s); depth++, k--) {
        while (k >= 0 && passable(s, &s->ops[d][k]))
            k--;
        if (k < 0 || s->ops[d][k].kind > BSIPIPE_OP_W || i - k > BSIPIPE_SIM_MAX_AHEAD)
            break;
        ahead = i - k;
    }
    return ahead;
}

bsipipe_cost_model_t bsipipe_cost_model_emulated(double device_flops)
{
    bsipipe_cost_model_t c = bsipipe_cost_model_flops(device_flops);
    c.free_transfers = 1;
    c.step_time = 0;
    return c;
}

static int split_backward(const bsipipe_schedule_t *s)
{
    return bsipipe_schedule_kind_traits(s->pc.schedule).split_backward;
}

static int piece_len(const bsipipe_schedule_t *s, int sub)
{
    return s->sub_starts[sub + 1] - s->sub_starts[sub];
}

int bsipipe_sim_op_slots(const bsipipe_schedule_t *s)
{
    return 3 * s->pc.k * s->n_chunks;
}

int bsipipe_sim_op_slot(const bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    return (op->kind * s->pc.k + op->sub) * s->n_chunks + op->chunk;
}

long bsipipe_sim_op_index(const bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    return compute_index(s, op->kind, op->mb, op->sub, op->chunk);
}

long bsipipe_sim_op_count(const bsipipe_schedule_t *s)
{
    return compute_index_count(s);
}

double bsipipe_sim_op_cost(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, const bsipipe_op_t *op)
{
    int split = split_backward(s);
    if (c->op_replay && op->kind <= BSIPIPE_OP_W)
        return c->op_replay[bsipipe_sim_op_index(s, op)];
    if (c->op_seconds && op->kind <= BSIPIPE_OP_W)
        return c->op_seconds[bsipipe_sim_op_slot(s, op)];
    if (c->unit) {
        if (op->kind == BSIPIPE_OP_F) return c->f_unit;
        if (op->kind == BSIPIPE_OP_B) return split ? c->b_unit / 2 : c->b_unit;
        if (op->kind == BSIPIPE_OP_W) return c->w_unit;
        return 0;
    }
    if (op->kind > BSIPIPE_OP_W || c->device_flops <= 0)
        return 0;
    int first, last;
    bsipipe_schedule_chunk_layers(s, op->chunk, &first, &last);
    int start = s->sub_starts[op->sub], len = piece_len(s, op->sub);
    double layers = (last - first) * bsipipe_model_layer_flops(&s->dims, start, len);
    double head = op->chunk == s->n_chunks - 1 ? bsipipe_model_head_flops(&s->dims, len) : 0;
    /* The engine runs the head's backward inside the last chunk's F (the
     * loss gradient is taken at once; no logits are stashed): that F holds
     * the head's forward and backward, three times its FLOPs, its B none. */
    double f = layers; /* W, or B when the backward is split */
    if (op->kind == BSIPIPE_OP_F)
        f = layers + 3 * head;
    else if (op->kind == BSIPIPE_OP_B && !split)
        f = 2 * layers;
    double rate = c->device_flops;
    if (c->piece_half_tokens > 0) /* short pieces run below the device's rate */
        rate *= len / (len + c->piece_half_tokens);
    return f / s->pc.tp / rate + bsipipe_sim_tp_comm(s, c, op, NULL);
}

static int node_of(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, int d)
{
    return sim_node_of(s, c, d);
}

int bsipipe_sim_tp_crosses_nodes(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c)
{
    return s->pc.tp > 1 && c->devices_per_node > 0 && s->pc.tp > c->devices_per_node;
}

double bsipipe_sim_tp_comm(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, const bsipipe_op_t *op,
                           double *bytes)
{
    /* Megatron-LM TP with sequence parallelism, per layer: the forward
     * all-gathers the sequence before QKV and before the first MLP matrix and
     * reduce-scatters after the output projection and the second MLP matrix
     * (4); the backward reduce-scatters the two gathered inputs' gradients,
     * all-gathers the two row-parallel outputs' gradients, and re-gathers the
     * two inputs for the weight gradients (6: 4 in B and 2 in W when the
     * backward is split). The embedding adds a reduce-scatter (forward) and
     * an all-gather (backward), the vocabulary-parallel head an all-gather
     * of its input and a reduce-scatter of that input's gradient (the
     * cross-entropy's per-token max and sums are negligible). Each moves
     * piece x hidden x bytes x (D_t - 1)/D_t per rank, ring algorithm:
     * (D_t - 1) latencies; on the TP ranks' timeline, not overlapped. */
    int tp = s->pc.tp;
    if (bytes)
        *bytes = 0;
    if (c->unit || tp <= 1 || op->kind > BSIPIPE_OP_W)
        return 0;
    int first, last, split = split_backward(s);
    bsipipe_schedule_chunk_layers(s, op->chunk, &first, &last);
    int per_layer = op->kind == BSIPIPE_OP_F ? 4 : op->kind == BSIPIPE_OP_W ? 2 : split ? 4 : 6;
    int n = per_layer * (last - first);
    if (op->kind != BSIPIPE_OP_W) {
        n += op->chunk == 0;
        n += op->chunk == s->n_chunks - 1;
    }
    double b = (double)piece_len(s, op->sub) * s->dims.hidden * c->bytes_per_element * (tp - 1) / tp;
    int inter = bsipipe_sim_tp_crosses_nodes(s, c);
    double bw = inter ? c->inter_bandwidth : c->intra_bandwidth;
    double lat = inter ? c->inter_latency : c->intra_latency;
    if (bytes)
        *bytes = n * b;
    return n * ((tp - 1) * lat + (bw > 0 ? b / bw : 0));
}

/* Parameters of one TP rank's shard of a chunk: with D_t dividing the
 * heads, the FFN width and the vocabulary, the sharded kernels' exact count
 * (split tensors / D_t, the norms and GPT's wpe replicated whole:
 * docs/tensor-parallel.md); otherwise (a plan the engine refuses) the
 * whole chunk / D_t. */
static double chunk_param_elems(const bsipipe_schedule_t *s, int chunk)
{
    int first, last, tp = s->pc.tp;
    const bsipipe_model_dims_t *D = &s->dims;
    bsipipe_schedule_chunk_layers(s, chunk, &first, &last);
    if (tp > 1 && D->n_heads % tp == 0 && D->ffn_hidden % tp == 0 && D->vocab % tp == 0) {
        double e = (double)(last - first) * bsipipe_tp_layer_params(D, tp);
        if (chunk == 0) e += bsipipe_tp_embed_params(D, tp);
        if (chunk == s->n_chunks - 1) e += bsipipe_tp_head_params(D, tp);
        return e;
    }
    double e = (double)(last - first) * bsipipe_model_layer_params(D);
    if (chunk == 0) e += bsipipe_model_embed_params(D);
    if (chunk == s->n_chunks - 1) e += bsipipe_model_head_params(D);
    return e / (tp > 1 ? tp : 1);
}

void bsipipe_sim_result_destroy(bsipipe_sim_result_t *r)
{
    if (!r)
        return;
    for (int d = 0; d < r->n_devices; d++) {
        if (r->op_start) free(r->op_start[d]);
        if (r->op_end) free(r->op_end[d]);
    }
    free(r->op_start);
    free(r->op_end);
    free(r->order_device);
    free(r->order_index);
    free(r->device);
    free(r);
}

typedef struct sim {
    const bsipipe_schedule_t *s;
    const bsipipe_cost_model_t *c;
    bsipipe_sim_result_t *r;
    double *end;          /* compute index -> end time, -1 before */
    double *posted;       /* channel -> RECV post time, -1 before */
    double *arrived;      /* channel -> data arrival, -1 before */
    int *chan_of;         /* producer compute index -> channel of its remote consumer, -1 */
    double *sync_arrive;  /* [chunk * 2 + side] arrival at SYNC, -1 before */
    int *pos;             /* next op per device */
    double *now;          /* device clock */
    bsipipe_links_t *links; /* the links and their clocks (sim_links.c) */
    double *sync_done;    /* per chunk: end of its replicas' gradient sync, -1 before */
} sim_t;

/* Data-ready time of a compute op, or -1 when some input is not known yet. */
static double inputs_ready(sim_t *m, const bsipipe_op_t *op)
{
    bsipipe_op_t deps[3];
    int n = compute_deps(m->s, op, deps);
    double t = 0;
    for (int i = 0; i < n; i++) {
        long pi = compute_index(m->s, deps[i].kind, deps[i].mb, deps[i].sub, deps[i].chunk);
        double e;
        if (deps[i].device == op->device) {
            e = m->end[pi];
        } else {
            int ch = m->chan_of[pi];
            e = ch >= 0 ? m->arrived[ch] : -1;
        }
        if (e < 0)
            return -1;
        if (e > t)
            t = e;
    }
    return t;
}

static double tensor_bytes(const sim_t *m, const bsipipe_op_t *op)
{
    return (double)piece_len(m->s, op->sub) * m->s->dims.hidden / m->s->pc.tp * m->c->bytes_per_element;
}

/* Runs device d as far as it can; returns the number of ops completed. */
static int advance(sim_t *m, int d)
{
    const bsipipe_schedule_t *s = m->s;
    bsipipe_sim_result_t *r = m->r;
    int done = 0;
    while (m->pos[d] < s->n_ops[d]) {
        int i = m->pos[d];
        const bsipipe_op_t *op = &s->ops[d][i];
        double start = m->now[d], end;
        switch (op->kind) {
        case BSIPIPE_OP_F: case BSIPIPE_OP_B: case BSIPIPE_OP_W: {
            /* Posting ahead: the receives among the transfers behind this op
             * and, at depth 2, behind the next compute op are posted before
             * it starts (bsipipe_sim_recv_ahead); those behind this op that
             * an earlier op posted already keep that time. */
            for (int j = i + 1, depth = 0; posts_ahead(s, m->c) && j < s->n_ops[d] && j - i <= BSIPIPE_SIM_MAX_AHEAD;
                 j++) {
                const bsipipe_op_t *o = &s->ops[d][j];
                if (!passable(s, o)) {
                    if (o->kind > BSIPIPE_OP_W || ++depth == post_depth(s))
                        break;
                    continue;
                }
                if (o->kind == BSIPIPE_OP_RECV && m->posted[o->channel] < 0)
                    m->posted[o->channel] = start;
            }
            double ready = inputs_ready(m, op), scale = 1;
            if (ready < 0)
                return done;
            if (op->flags && m->c->overlap_fb > 0 && m->c->overlap_fb < 1) {
                scale = m->c->overlap_fb;
                /* A shared pair starts when its backward's input is there too. */
                for (int j = i + 1; op->flags == BSIPIPE_OP_PAIR_F && j < s->n_ops[d]; j++)
                    if (s->ops[d][j].flags == BSIPIPE_OP_PAIR_B) {
                        double b_ready = inputs_ready(m, &s->ops[d][j]);
                        if (b_ready < 0)
                            return done;
                        if (b_ready > ready)
                            ready = b_ready;
                        break;
                    }
            }
            if (ready > start)
                start = ready;
            end = start + scale * bsipipe_sim_op_cost(s, m->c, op);
            m->end[compute_index(s, op->kind, op->mb, op->sub, op->chunk)] = end;
            r->device[d].busy += end - start;
            double tp_bytes;
            r->device[d].tp_comm += bsipipe_sim_tp_comm(s, m->c, op, &tp_bytes);
            r->tp_bytes[bsipipe_sim_tp_crosses_nodes(s, m->c)] += tp_bytes;
            r->device[d].compute_end = end;
            break;
        }
        case BSIPIPE_OP_RECV:
            if (m->posted[op->channel] < 0) /* posted ahead, or now (same value on every retry) */
                m->posted[op->channel] = start;
            end = start;
            if (m->c->blocking_recv) {
                double got = m->arrived[op->channel];
                if (got < 0)
                    return done;
                if (got > end)
                    end = got;
                r->device[d].comm += end - start;
            }
            break;
        case BSIPIPE_OP_SEND: {
            double post = m->posted[op->channel];
            if (post < 0)
                return done;
            double bytes = tensor_bytes(m, op);
            if (post > start)
                start = post;
            int inter = node_of(s, m->c, d) != node_of(s, m->c, op->peer);
            /* async_send: the device goes on once the receive is posted; the
             * bytes follow on the link. */
            m->arrived[op->channel] = bsipipe_links_move(m->links, d, op->peer, bytes, start);
            end = m->c->async_send ? start : m->arrived[op->channel];
            r->act_bytes[inter] += bytes;
            r->device[d].comm += end - m->now[d];
            break;
        }
        case BSIPIPE_OP_SYNC: {
            int side = op->pipe;
            m->sync_arrive[op->chunk * 2 + side] = start;
            if (op->peer != d) {
                double other = m->sync_arrive[op->chunk * 2 + 1 - side];
                if (other < 0)
                    return done;
                if (other > start)
                    start = other;
                double bytes = chunk_param_elems(s, op->chunk) * 4;
                /* Two-replica all-reduce (bsipipe_links_sync), timed once
                 * for the pair. */
                if (m->sync_done[op->chunk] < 0)
                    m->sync_done[op->chunk] = bsipipe_links_sync(m->links, d, op->peer, bytes, start);
                end = m->sync_done[op->chunk];
                r->sync_bytes[node_of(s, m->c, d) != node_of(s, m->c, op->peer)] += bytes;
            } else {
                end = start;
            }
            r->device[d].comm += end - m->now[d];
            break;
        }
        default: /* STEP */
            end = start + (m->c->unit ? 0 : m->c->step_time);
            break;
        }
        r->op_start[d][i] = start;
        r->op_end[d][i] = end;
        r->order_device[r->n_order] = d;
        r->order_index[r->n_order++] = i;
        m->now[d] = end;
        m->pos[d]++;
        done++;
    }
    return done;
}

/* Which device is d waiting for (and why), when stuck at its current op. */
static int waits_for(const sim_t *m, int d)
{
    const bsipipe_op_t *op = &m->s->ops[d][m->pos[d]];
    if (op->kind == BSIPIPE_OP_SEND || op->kind == BSIPIPE_OP_SYNC ||
        (op->kind == BSIPIPE_OP_RECV && m->c->blocking_recv))
        return op->peer;
    bsipipe_op_t deps[3];
    int n = compute_deps(m->s, op, deps);
    for (int i = 0; i < n; i++) {
        long pi = compute_index(m->s, deps[i].kind, deps[i].mb, deps[i].sub, deps[i].chunk);
        if (deps[i].device == d ? m->end[pi] < 0 : (m->chan_of[pi] < 0 || m->arrived[m->chan_of[pi]] < 0))
            return deps[i].device;
    }
    return -1;
}

static int report_stuck(const sim_t *m)
{
    const bsipipe_schedule_t *s = m->s;
    int W = s->n_devices, start = -1;
    for (int d = 0; d < W && start < 0; d++)
        if (m->pos[d] < s->n_ops[d])
            start = d;
    if (start < 0 || W <= 0)
        return 0;
    /* Follow waits-for edges until a device repeats: that is the cycle. */
    int *seen = calloc((size_t)W, sizeof(int));
    if (!seen)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    int d = start, step = 1;
    while (d >= 0 && !seen[d] && m->pos[d] < s->n_ops[d]) {
        seen[d] = step++;
        d = waits_for(m, d);
    }
    char msg[3000] = "";
    size_t len = 0;
    int rc;
    if (d >= 0 && seen[d] && m->pos[d] < s->n_ops[d]) {
        int first = d;
        len += (size_t)snprintf(msg, sizeof msg, "deadlock under rendezvous send/recv%s: ",
                                m->c->blocking_recv ? " with blocking receives" : "");
        do {
            char buf[96];
            int next = waits_for(m, d);
            len += (size_t)snprintf(msg + len, len < sizeof msg ? sizeof msg - len : 0,
                                    "device %d waits at op %d (%s) for device %d; ", d, m->pos[d],
                                    bsipipe_op_format(&s->ops[d][m->pos[d]], buf, sizeof buf), next);
            d = next;
        } while (d != first && d >= 0 && len < sizeof msg);
        rc = bsipipe_error_set(BSIPIPE_EDEADLOCK, "%s: %s", bsipipe_schedule_kind_name(s->pc.schedule), msg);
    } else {
        char buf[96];
        rc = bsipipe_error_set(BSIPIPE_EDEPEND, "%s: device %d cannot run op %d (%s): its input is "
                               "never produced", bsipipe_schedule_kind_name(s->pc.schedule), start,
                               m->pos[start], bsipipe_op_format(&s->ops[start][m->pos[start]], buf, sizeof buf));
    }
    free(seen);
    return rc;
}

/* Memory events: (time, +-units, +-bytes); at equal times releases sort
 * before allocations. */
typedef struct { double t; int units; double bytes; } ev_t;

static int cmp_event(const void *a, const void *b)
{
    const ev_t *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* Peak activation memory of the compute ops ops[0..n) of one device, from
 * their times: a forward holds its stash from its start to the end of its
 * backward (W when split; a split B's output gradients, what its W
 * reads, from the B's start to the W's end); the KV cache of a (micro-batch,
 * chunk) lives from its first forward to its last backward, its gradient
 * from the first backward on. Writes the peak in units (stashes) and bytes; -ENOMEM. */
int schedule_peak_memory(const bsipipe_schedule_t *s, double bytes_per_element, const bsipipe_op_t *ops,
                         const double *start, const double *end, int n, int *peak_units, double *peak_bytes)
{
    int split = split_backward(s);
    ev_t *ev = malloc(sizeof *ev * (size_t)(5 * n + 1));
    int ne = 0;
    if (!ev)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const bsipipe_op_t *op = &ops[i];
        int first, last;
        if (op->kind > BSIPIPE_OP_W)
            continue;
        bsipipe_schedule_chunk_layers(s, op->chunk, &first, &last);
        double layers = last - first, el = bytes_per_element;
        double stash = layers * (double)bsipipe_model_stash_size(&s->dims, piece_len(s, op->sub)) * el / s->pc.tp;
        double kv = layers * (double)bsipipe_model_kv_size(&s->dims) * el / s->pc.tp;
        if (op->kind == BSIPIPE_OP_F) {
            ev[ne++] = (ev_t){start[i], 1, stash};
            if (op->sub == 0)
                ev[ne++] = (ev_t){start[i], 0, kv};
        } else if (op->kind == (split ? BSIPIPE_OP_W : BSIPIPE_OP_B)) {
            ev[ne++] = (ev_t){end[i], -1, -stash};
        }
        if (split && op->kind != BSIPIPE_OP_F) { /* the output gradients a W reads, from its B to its end */
            double wstash = layers * (double)bsipipe_model_wstash_size(&s->dims, piece_len(s, op->sub)) * el / s->pc.tp;
            ev[ne++] = op->kind == BSIPIPE_OP_B ? (ev_t){start[i], 0, wstash} : (ev_t){end[i], 0, -wstash};
        }
        if (op->kind == BSIPIPE_OP_B && op->sub == s->pc.k - 1)
            ev[ne++] = (ev_t){start[i], 0, kv};        /* dKV */
        if (op->kind == BSIPIPE_OP_B && op->sub == 0)
            ev[ne++] = (ev_t){end[i], 0, -2 * kv};      /* KV and dKV */
    }
    qsort(ev, (size_t)ne, sizeof *ev, cmp_event);
    int units = 0;
    double bytes = 0;
    *peak_units = 0;
    *peak_bytes = 0;
    for (int a = 0; a < ne; a++) {
        units += ev[a].units;
        bytes += ev[a].bytes;
        if (units > *peak_units) *peak_units = units;
        if (bytes > *peak_bytes) *peak_bytes = bytes;
    }
    free(ev);
    return 0;
}

static void account_memory(sim_t *m)
{
    const bsipipe_schedule_t *s = m->s;
    for (int d = 0; d < s->n_devices; d++) {
        int units;
        double bytes;
        if (schedule_peak_memory(s, m->c->bytes_per_element, s->ops[d], m->r->op_start[d], m->r->op_end[d],
                                 s->n_ops[d], &units, &bytes) == 0) {
            m->r->device[d].peak_act_units = units;
            m->r->device[d].peak_act_bytes = bytes;
        }
        for (int pipe = 0; pipe < s->n_pipes; pipe++)
            for (int c = 0; c < s->n_chunks; c++)
                if (schedule_dev(s, pipe, c) == d) {
                    m->r->device[d].param_units += 1.0 / s->pc.p;
                    m->r->device[d].param_bytes += 4.0 * chunk_param_elems(s, c) * 4;
                }
    }
}

static void sim_free(sim_t *m)
{
    free(m->end);
    free(m->posted);
    free(m->arrived);
    free(m->chan_of);
    free(m->sync_arrive);
    free(m->pos);
    free(m->now);
    bsipipe_links_destroy(m->links);
    free(m->sync_done);
}

int bsipipe_simulate(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, bsipipe_sim_result_t **out)
{
    *out = NULL;
    if (!s || !cost)
        return bsipipe_error_set(-EINVAL, "simulate: schedule and cost model are required");
    int W = s->n_devices, rc = 0;
    long nidx = compute_index_count(s);
    sim_t m = {.s = s, .c = cost};
    m.r = calloc(1, sizeof *m.r);
    m.end = malloc(sizeof(double) * (size_t)nidx);
    m.chan_of = malloc(sizeof(int) * (size_t)nidx);
    m.posted = malloc(sizeof(double) * (size_t)(s->n_channels + 1));
    m.arrived = malloc(sizeof(double) * (size_t)(s->n_channels + 1));
    m.sync_arrive = malloc(sizeof(double) * (size_t)(2 * s->n_chunks));
    m.pos = calloc((size_t)W, sizeof(int));
    m.now = calloc((size_t)W, sizeof(double));
    if ((rc = bsipipe_links_create(s, cost, &m.links)) < 0)
        goto fail;
    m.sync_done = malloc(sizeof(double) * (size_t)s->n_chunks);
    for (int c = 0; m.sync_done && c < s->n_chunks; c++)
        m.sync_done[c] = -1;
    if (!m.r || !m.end || !m.chan_of || !m.posted || !m.arrived || !m.sync_arrive || !m.pos || !m.now || !m.sync_done) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
        goto fail;
    }
    m.r->n_devices = W;
    m.r->device = calloc((size_t)W, sizeof *m.r->device);
    m.r->op_start = calloc((size_t)W, sizeof(double *));
    m.r->op_end = calloc((size_t)W, sizeof(double *));
    long total_ops = bsipipe_schedule_n_ops(s);
    m.r->order_device = malloc(sizeof(int) * (size_t)(total_ops + 1));
    m.r->order_index = malloc(sizeof(int) * (size_t)(total_ops + 1));
    if (!m.r->device || !m.r->op_start || !m.r->op_end || !m.r->order_device || !m.r->order_index) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
        goto fail;
    }
    for (int d = 0; d < W; d++) {
        m.r->op_start[d] = calloc((size_t)s->n_ops[d] + 1, sizeof(double));
        m.r->op_end[d] = calloc((size_t)s->n_ops[d] + 1, sizeof(double));
        if (!m.r->op_start[d] || !m.r->op_end[d]) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory");
            goto fail;
        }
    }
    for (long i = 0; i < nidx; i++) {
        m.end[i] = -1;
        m.chan_of[i] = -1;
    }
    for (int i = 0; i <= s->n_channels; i++)
        m.posted[i] = m.arrived[i] = -1;
    for (int i = 0; i < 2 * s->n_chunks; i++)
        m.sync_arrive[i] = -1;
    for (int d = 0; d < W; d++)
        for (int i = 0; i < s->n_ops[d]; i++) {
            const bsipipe_op_t *op = &s->ops[d][i];
            if (op->kind == BSIPIPE_OP_SEND) {
                if (op->channel < 0 || op->channel >= s->n_channels) {
                    rc = bsipipe_error_set(-EINVAL, "device %d op %d: SEND on invalid channel %d", d, i, op->channel);
                    goto fail;
                }
                m.chan_of[compute_index(s, op->tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_OP_F : BSIPIPE_OP_B,
                                        op->mb, op->sub, op->chunk)] = op->channel;
            }
        }
    for (;;) {
        int progress = 0, left = 0;
        for (int d = 0; d < W; d++) {
            progress += advance(&m, d);
            left += s->n_ops[d] - m.pos[d];
        }
        if (!left)
            break;
        if (!progress) {
            rc = report_stuck(&m);
            goto fail;
        }
    }
    double busy = 0;
    for (int d = 0; d < W; d++) {
        bsipipe_sim_device_t *dv = &m.r->device[d];
        if (dv->compute_end > m.r->makespan) m.r->makespan = dv->compute_end;
        if (m.now[d] > m.r->iteration_time) m.r->iteration_time = m.now[d];
        busy += dv->busy;
    }
    for (int d = 0; d < W; d++)
        m.r->device[d].idle = m.r->makespan - m.r->device[d].busy;
    m.r->bubble_ratio = m.r->makespan > 0 ? 1.0 - busy / (W * m.r->makespan) : 0;
    account_memory(&m);
    sim_free(&m);
    *out = m.r;
    return 0;
fail:
    bsipipe_sim_result_destroy(m.r);
    sim_free(&m);
    return rc;
}
