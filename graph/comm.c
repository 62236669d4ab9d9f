/* comm.c: explicit SEND/RECV ops for every dependency that crosses devices,
 * and their order on each device.
 *
 * Execution model (shared with the simulator and the engine's transports):
 * each device runs its list in order; a RECV only posts a buffer and lets the
 * device go on (under early receive it is posted ahead of the compute op
 * before it, bsipipe_sim_recv_ahead); a SEND blocks its device until the matching RECV is posted
 * (rendezvous, as NCCL point-to-point does), then moves the data. A SEND is
 * always placed right after the op that produced its tensor; the order modes
 * differ in where each RECV is posted and, at one boundary between two
 * compute ops, whether receives or sends come first:
 *   naive   : just before the consumer; sends first on every device.
 *   ordered : just before the consumer; complementary order between
 *             neighbours (even devices send first, odd devices receive first).
 *   no-reversal: bsipipe's early receive positions, but at a boundary the
 *             complementary order (even devices send first, odd devices
 *             receive first) instead of the send-time order: a device about
 *             to run a backward sends before it posts the receive the
 *             neighbour's forward feeds — the paper's ablation without the
 *             F-B overlap.
 *   bsipipe : early receive — at the last boundary of the receiver that ends
 *             no later than the producer, so it is posted before the sender
 *             can send; this reverses the order whenever a backward overlaps
 *             the neighbour's forward — and, at one boundary, transfers by
 *             (send time, channel): the send of the op just run first, as the
 *             receives there are for data sent no earlier.
 * Under bsipipe order no send waits in the unit-cost timeline the order is
 * built from; under any other costs a send can wait only for ops that start
 * earlier in that timeline, so waits cannot form a cycle: no deadlock. Every
 * device also meets its transfers in one global order, (send time, channel),
 * so the plan cannot deadlock when receives block too (the simulator's
 * blocking_recv): the smallest pending transfer always has both ends ready. */
#include "graph/schedule_internal.h"
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>
#include <string.h>

typedef struct transfer {
    bsipipe_op_t producer;   /* F or B */
    int src, dst;            /* devices */
    int src_pos, dst_pos;    /* compute positions of producer and consumer */
    int post_after;          /* receiver compute position the RECV follows (-1: start) */
    double send_time;        /* producer's end in the unit-cost timeline */
} transfer_t;

/* Timeline of the compute ops under `cost` (free transfers, sends never
 * wait). Fills end[] per compute index; checks that every dependency is
 * satisfiable in list order (BSIPIPE_EDEPEND naming a stuck op otherwise). */
int schedule_compute_timeline(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, double *end)
{
    int W = s->n_devices;
    int *pos = calloc((size_t)W, sizeof(int));
    double *now = calloc((size_t)W, sizeof(double));
    if (!pos || !now) {
        free(pos);
        free(now);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    for (long i = 0; i < compute_index_count(s); i++)
        end[i] = -1;
    int progress = 1, rc = 0;
    while (progress) {
        progress = 0;
        for (int d = 0; d < W; d++) {
            while (pos[d] < s->n_ops[d]) {
                const bsipipe_op_t *op = &s->ops[d][pos[d]];
                if (op->kind > BSIPIPE_OP_W) {
                    pos[d]++;
                    continue;
                }
                bsipipe_op_t deps[3];
                int n = compute_deps(s, op, deps);
                double start = now[d];
                int ok = 1;
                for (int i = 0; i < n && ok; i++) {
                    double e = end[compute_index(s, deps[i].kind, deps[i].mb, deps[i].sub, deps[i].chunk)];
                    if (e < 0)
                        ok = 0;
                    else if (e > start)
                        start = e;
                }
                if (!ok)
                    break;
                now[d] = start + bsipipe_sim_op_cost(s, cost, op);
                end[compute_index(s, op->kind, op->mb, op->sub, op->chunk)] = now[d];
                pos[d]++;
                progress = 1;
            }
        }
    }
    for (int d = 0; d < W && rc == 0; d++)
        if (pos[d] < s->n_ops[d]) {
            char buf[96];
            rc = bsipipe_error_set(BSIPIPE_EDEPEND,
                "%s: device %d cannot run op %d (%s): a dependency is never satisfied in list order",
                bsipipe_schedule_kind_name(s->pc.schedule), d, pos[d],
                bsipipe_op_format(&s->ops[d][pos[d]], buf, sizeof buf));
        }
    free(pos);
    free(now);
    return rc;
}

static int cmp_transfer_post(const void *a, const void *b)
{
    const transfer_t *x = a, *y = b;
    if (x->dst != y->dst) return x->dst - y->dst;
    if (x->post_after != y->post_after) return x->post_after - y->post_after;
    if (x->send_time != y->send_time) return x->send_time < y->send_time ? -1 : 1;
    return x->dst_pos - y->dst_pos;
}

/* The SEND (on the producer's device) or RECV (on the consumer's) of transfer
 * t on channel ch. */
static bsipipe_op_t comm_op(const transfer_t *t, bsipipe_op_kind_t kind, int device, int ch)
{
    bsipipe_op_t op = t->producer;
    op.kind = (uint8_t)kind;
    op.tensor = t->producer.kind == BSIPIPE_OP_F ? BSIPIPE_TENSOR_ACT : BSIPIPE_TENSOR_GRAD;
    op.device = device;
    op.peer = kind == BSIPIPE_OP_SEND ? t->dst : t->src;
    op.channel = ch;
    return op;
}

int comm_insert(bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (!cost)
        cost = &unit;
    int W = s->n_devices, rc = 0;
    bsipipe_comm_order_t mode = s->pc.comm;
    /* Keep only the compute ops (SYNC/STEP are appended again afterwards). */
    for (int d = 0; d < W; d++) {
        int n = 0;
        for (int i = 0; i < s->n_ops[d]; i++)
            if (s->ops[d][i].kind <= BSIPIPE_OP_W)
                s->ops[d][n++] = s->ops[d][i];
        s->n_ops[d] = n;
    }
    long n_idx = compute_index_count(s);
    double *end = malloc(sizeof(double) * (size_t)n_idx);
    int *where = malloc(sizeof(int) * (size_t)n_idx); /* compute index -> position */
    long n_compute = 0;
    for (int d = 0; d < W; d++)
        n_compute += s->n_ops[d];
    transfer_t *xf = malloc(sizeof *xf * (size_t)(n_compute + 1));
    bsipipe_op_t **lists = calloc((size_t)W, sizeof *lists);
    int *n_new = calloc((size_t)W, sizeof(int));
    if (!end || !where || !xf || !lists || !n_new) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory inserting transfers");
        goto out;
    }
    if ((rc = schedule_compute_timeline(s, cost, end)) < 0)
        goto out;
    for (int d = 0; d < W; d++)
        for (int i = 0; i < s->n_ops[d]; i++) {
            const bsipipe_op_t *op = &s->ops[d][i];
            where[compute_index(s, op->kind, op->mb, op->sub, op->chunk)] = i;
        }

    /* One transfer per cross-device dependency; consumers in device order. */
    int nx = 0;
    for (int d = 0; d < W; d++) {
        for (int i = 0; i < s->n_ops[d]; i++) {
            const bsipipe_op_t *op = &s->ops[d][i];
            bsipipe_op_t deps[3];
            int n = compute_deps(s, op, deps);
            for (int j = 0; j < n; j++) {
                if (deps[j].device == d)
                    continue;
                long pi = compute_index(s, deps[j].kind, deps[j].mb, deps[j].sub, deps[j].chunk);
                transfer_t *t = &xf[nx++];
                t->producer = deps[j];
                t->src = deps[j].device;
                t->dst = d;
                t->src_pos = where[pi];
                t->dst_pos = i;
                t->send_time = end[pi];
                if (mode == BSIPIPE_COMM_BSIPIPE || mode == BSIPIPE_COMM_NO_REVERSAL) {
                    /* Last compute op of d before the consumer that ends by the
                     * send time; ends grow along a device's list. */
                    int lo = -1, hi = i - 1;
                    while (lo < hi) {
                        int mid = (lo + hi + 1) / 2;
                        const bsipipe_op_t *o = &s->ops[d][mid];
                        if (end[compute_index(s, o->kind, o->mb, o->sub, o->chunk)] <= t->send_time)
                            lo = mid;
                        else
                            hi = mid - 1;
                    }
                    t->post_after = lo;
                } else {
                    t->post_after = i - 1;
                }
            }
        }
    }
    qsort(xf, (size_t)nx, sizeof *xf, cmp_transfer_post);

    /* Channels numbered in that order; per producer position, which transfer
     * leaves it (at most one consumer per op is remote). */
    int *send_of = malloc(sizeof(int) * (size_t)(n_compute + 1));
    long *dev_base = malloc(sizeof(long) * (size_t)(W + 1));
    if (!send_of || !dev_base) {
        free(send_of);
        free(dev_base);
        rc = bsipipe_error_set(-ENOMEM, "out of memory inserting transfers");
        goto out;
    }
    dev_base[0] = 0;
    for (int d = 0; d < W; d++)
        dev_base[d + 1] = dev_base[d] + s->n_ops[d];
    for (long i = 0; i < n_compute; i++)
        send_of[i] = -1;
    for (int x = 0; x < nx; x++)
        send_of[dev_base[xf[x].src] + xf[x].src_pos] = x;

    for (int d = 0; d < W && rc == 0; d++) {
        int cap = 2 * s->n_ops[d] + 2 * nx + 4, n = 0;
        bsipipe_op_t *l = malloc(sizeof *l * (size_t)cap);
        if (!l) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory inserting transfers");
            break;
        }
        /* Transfers into d are contiguous in xf, sorted by post position. */
        int x = 0;
        while (x < nx && xf[x].dst < d)
            x++;
        int recv_first = mode == BSIPIPE_COMM_BSIPIPE ||
                         ((mode == BSIPIPE_COMM_ORDERED || mode == BSIPIPE_COMM_NO_REVERSAL) && d % 2 == 1);
        for (int i = -1; i < s->n_ops[d]; i++) {
            if (i >= 0)
                l[n++] = s->ops[d][i];
            int c = i >= 0 ? send_of[dev_base[d] + i] : -1;
            /* bsipipe: the events of one boundary by (send time, channel), the
             * key both ends of a channel share; receives at a boundary all
             * come at or after its send's time, so this is receives first
             * only on ties. Every device then meets its transfers in one
             * global order, which cannot deadlock even when receives block
             * too (a receive posted ahead of the send that feeds it would). */
            for (int pass = 0; pass < 2; pass++) {
                int do_recv = (pass == 0) == recv_first;
                if (do_recv) {
                    while (x < nx && xf[x].dst == d && xf[x].post_after == i) {
                        if (mode == BSIPIPE_COMM_BSIPIPE && c >= 0 &&
                            (xf[x].send_time > xf[c].send_time || (xf[x].send_time == xf[c].send_time && x > c)))
                            break; /* the send comes first; the rest after it */
                        l[n++] = comm_op(&xf[x], BSIPIPE_OP_RECV, d, x);
                        x++;
                    }
                } else if (c >= 0) {
                    l[n++] = comm_op(&xf[c], BSIPIPE_OP_SEND, d, c);
                    c = -1;
                }
            }
            while (x < nx && xf[x].dst == d && xf[x].post_after == i) {
                l[n++] = comm_op(&xf[x], BSIPIPE_OP_RECV, d, x);
                x++;
            }
        }
        lists[d] = l;
        n_new[d] = n;
    }
    if (rc == 0) {
        for (int d = 0; d < W; d++) {
            free(s->ops[d]);
            s->ops[d] = lists[d];
            s->n_ops[d] = s->cap_ops[d] = n_new[d];
            lists[d] = NULL;
        }
        s->n_channels = nx;
    }
    free(send_of);
    free(dev_base);
out:
    for (int d = 0; lists && d < W; d++)
        free(lists[d]);
    free(lists);
    free(n_new);
    free(xf);
    free(where);
    free(end);
    return rc;
}
