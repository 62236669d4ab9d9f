/* bsipipe_validate.c: structural checks of a schedule, then a unit-cost
 * simulation for dependency order and deadlock freedom. */
#include "graph/bsipipe_sim.h"
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

/* A SEND or RECV's label names its producing op: in range, of the pipe its
 * micro-batch runs in, ACT from a forward or GRAD from a backward, to the
 * device that runs the consumer (the next chunk for ACT, the previous one for
 * GRAD). Returns the consumer's device, or -1 when the label is out of range. */
static int transfer_consumer(const bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    if (op->mb < 0 || op->mb >= s->pc.m || op->sub < 0 || op->sub >= s->pc.k || op->chunk < 0 ||
        op->chunk >= s->n_chunks || op->pipe >= s->n_pipes || op->pipe != schedule_mb_pipe(s, op->mb))
        return -1;
    if (op->tensor == BSIPIPE_TENSOR_ACT && op->chunk + 1 < s->n_chunks)
        return schedule_dev(s, op->pipe, op->chunk + 1);
    if (op->tensor == BSIPIPE_TENSOR_GRAD && op->chunk > 0)
        return schedule_dev(s, op->pipe, op->chunk - 1);
    return -1;
}

/* Pairs of one channel: the SEND and the RECV must carry the same label and
 * name each other's device, and the transfer must cross from the producer's
 * device to the consumer's. */
static int check_channel(const bsipipe_schedule_t *s, int c, const bsipipe_op_t *snd, const bsipipe_op_t *rcv)
{
    const char *name = bsipipe_schedule_kind_name(s->pc.schedule);
    char a[96], b[96];
    if (rcv->mb != snd->mb || rcv->sub != snd->sub || rcv->chunk != snd->chunk || rcv->tensor != snd->tensor ||
        rcv->pipe != snd->pipe)
        return bsipipe_error_set(-EINVAL, "%s: channel %d: RECV label differs from its SEND's: %s on device %d, "
                                 "%s on device %d", name, c, bsipipe_op_format(rcv, a, sizeof a), rcv->device,
                                 bsipipe_op_format(snd, b, sizeof b), snd->device);
    if (rcv->peer != snd->device)
        return bsipipe_error_set(-EINVAL, "%s: channel %d: RECV on device %d names the wrong peer: device %d, "
                                 "its SEND is on device %d (%s)", name, c, rcv->device, rcv->peer, snd->device,
                                 bsipipe_op_format(rcv, a, sizeof a));
    if (snd->peer != rcv->device)
        return bsipipe_error_set(-EINVAL, "%s: channel %d: SEND on device %d names the wrong peer: device %d, "
                                 "its RECV is on device %d (%s)", name, c, snd->device, snd->peer, rcv->device,
                                 bsipipe_op_format(snd, a, sizeof a));
    if (transfer_consumer(s, snd) != rcv->device)
        return bsipipe_error_set(-EINVAL, "%s: channel %d: %s goes to device %d, but its consumer runs on "
                                 "device %d", name, c, bsipipe_op_format(snd, a, sizeof a), rcv->device,
                                 transfer_consumer(s, snd));
    return 0;
}

int schedule_check_compute_op(const bsipipe_schedule_t *s, const bsipipe_op_t *op, int d, int i,
                              unsigned char *seen)
{
    const char *name = bsipipe_schedule_kind_name(s->pc.schedule);
    int split = bsipipe_schedule_kind_traits(s->pc.schedule).split_backward;
    char buf[96];
    if (op->device != d)
        return bsipipe_error_set(-EINVAL, "%s: op %d of device %d (%s) claims device %d", name, i, d,
                                 bsipipe_op_format(op, buf, sizeof buf), op->device);
    if (op->kind > BSIPIPE_OP_W)
        return bsipipe_error_set(-EINVAL, "%s: device %d op %d is a %s, not a compute op (F, B, W)", name, d, i,
                                 bsipipe_op_kind_name((bsipipe_op_kind_t)op->kind));
    if (op->mb < 0 || op->mb >= s->pc.m || op->sub < 0 || op->sub >= s->pc.k || op->chunk < 0 ||
        op->chunk >= s->n_chunks || op->pipe > BSIPIPE_PIPE_UP)
        return bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s) is out of range (mb 0..%d, sub 0..%d, "
                                 "chunk 0..%d)", name, d, i, bsipipe_op_format(op, buf, sizeof buf), s->pc.m - 1,
                                 s->pc.k - 1, s->n_chunks - 1);
    if (op->kind == BSIPIPE_OP_W && !split)
        return bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s): %s does not split the backward, so it has "
                                 "no W ops (zb-h1 does)", name, d, i, bsipipe_op_format(op, buf, sizeof buf), name);
    /* The pipe first: schedule_dev() of a pipe the plan lacks is out of bounds. */
    int pipe = schedule_mb_pipe(s, op->mb);
    if (op->pipe != pipe)
        return bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s): micro-batch %d runs in the %s pipe", name,
                                 d, i, bsipipe_op_format(op, buf, sizeof buf), op->mb,
                                 bsipipe_pipe_name((bsipipe_pipe_t)pipe));
    if (schedule_dev(s, op->pipe, op->chunk) != d)
        return bsipipe_error_set(-EINVAL, "%s: %s runs on device %d, placement says device %d (chunk %d of the "
                                 "%s pipe)", name, bsipipe_op_format(op, buf, sizeof buf), d,
                                 schedule_dev(s, op->pipe, op->chunk), op->chunk,
                                 bsipipe_pipe_name((bsipipe_pipe_t)op->pipe));
    long ix = compute_index(s, op->kind, op->mb, op->sub, op->chunk);
    if (seen[ix]++)
        return bsipipe_error_set(-EINVAL, "%s: %s appears twice (again as op %d of device %d)", name,
                                 bsipipe_op_format(op, buf, sizeof buf), i, d);
    return 0;
}

int schedule_check_missing(const bsipipe_schedule_t *s, const unsigned char *seen)
{
    int split = bsipipe_schedule_kind_traits(s->pc.schedule).split_backward;
    long nidx = compute_index_count(s);
    for (long ix = 0; ix < nidx; ix++) {
        int kind = (int)(ix / ((long)s->pc.m * s->pc.k * s->n_chunks));
        if ((kind == BSIPIPE_OP_W && !split) || seen[ix])
            continue;
        long rest = ix % ((long)s->pc.m * s->pc.k * s->n_chunks);
        int chunk = (int)(rest % s->n_chunks), sub = (int)(rest / s->n_chunks % s->pc.k);
        int mb = (int)(rest / s->n_chunks / s->pc.k), pipe = schedule_mb_pipe(s, mb);
        bsipipe_op_t op = {.kind = (uint8_t)kind, .pipe = (uint8_t)pipe, .mb = mb, .sub = sub, .chunk = chunk,
                           .device = schedule_dev(s, pipe, chunk), .peer = -1, .channel = -1};
        char buf[96];
        return bsipipe_error_set(-EINVAL, "%s: compute op %s is missing from every device (it belongs on "
                                 "device %d)", bsipipe_schedule_kind_name(s->pc.schedule),
                                 bsipipe_op_format(&op, buf, sizeof buf), op.device);
    }
    return 0;
}

int bsipipe_schedule_validate(const bsipipe_schedule_t *s)
{
    return bsipipe_schedule_validate_ex(s, NULL);
}

int bsipipe_schedule_validate_ex(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost)
{
    const char *name = bsipipe_schedule_kind_name(s->pc.schedule);
    long nidx = compute_index_count(s);
    unsigned char *seen = calloc((size_t)nidx, 1);
    unsigned char *chan = calloc((size_t)s->n_channels + 1, 1);
    /* [2c] the channel's SEND, [2c+1] its RECV, for pairing once all are seen */
    bsipipe_op_t *ends = calloc(2 * (size_t)s->n_channels + 2, sizeof *ends);
    int rc = 0;
    if (!seen || !chan || !ends) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
        goto out;
    }
    for (int d = 0; d < s->n_devices && rc == 0; d++)
        for (int i = 0; i < s->n_ops[d] && rc == 0; i++) {
            const bsipipe_op_t *op = &s->ops[d][i];
            char buf[96];
            if (op->device != d || op->kind <= BSIPIPE_OP_W) {
                rc = schedule_check_compute_op(s, op, d, i, seen);
            } else if (op->kind == BSIPIPE_OP_SEND || op->kind == BSIPIPE_OP_RECV) {
                /* A RECV's label is judged against its SEND's once both are seen. */
                int to = op->kind == BSIPIPE_OP_SEND ? transfer_consumer(s, op) : 0;
                if (op->channel < 0 || op->channel >= s->n_channels || op->peer < 0 || op->peer >= s->n_devices ||
                    op->peer == d) {
                    rc = bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s) has a bad channel or peer", name,
                                           d, i, bsipipe_op_format(op, buf, sizeof buf));
                } else if (to < 0) {
                    rc = bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s) names no transfer of the plan", name,
                                           d, i, bsipipe_op_format(op, buf, sizeof buf));
                } else if (op->kind == BSIPIPE_OP_SEND &&
                           !seen[compute_index(s, op->tensor == BSIPIPE_TENSOR_ACT ? BSIPIPE_OP_F : BSIPIPE_OP_B,
                                               op->mb, op->sub, op->chunk)]) {
                    /* The producer runs on this device (placement is checked
                     * per compute op), so "not seen yet" means "later in this
                     * list" or "nowhere". */
                    rc = bsipipe_error_set(-EINVAL, "%s: device %d op %d (%s) sends before its producer has run "
                                           "on device %d", name, d, i, bsipipe_op_format(op, buf, sizeof buf), d);
                } else {
                    unsigned bit = op->kind == BSIPIPE_OP_SEND ? 1u : 2u;
                    if (chan[op->channel] & bit)
                        rc = bsipipe_error_set(-EINVAL, "%s: channel %d has two %ss", name, op->channel,
                                               bsipipe_op_kind_name(op->kind));
                    chan[op->channel] |= (unsigned char)bit;
                    ends[2 * op->channel + (op->kind == BSIPIPE_OP_RECV)] = *op;
                }
            }
        }
    if (rc == 0)
        rc = schedule_check_missing(s, seen);
    for (int c = 0; c < s->n_channels && rc == 0; c++)
        if (chan[c] != 3)
            rc = bsipipe_error_set(-EINVAL, "%s: channel %d has a %s but no %s", name, c,
                                   chan[c] & 1 ? "SEND" : "RECV", chan[c] & 1 ? "RECV" : "SEND");
        else
            rc = check_channel(s, c, &ends[2 * c], &ends[2 * c + 1]);
    if (rc == 0) {
        bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
        bsipipe_sim_result_t *r;
        rc = bsipipe_simulate(s, cost ? cost : &unit, &r);
        if (rc == 0)
            bsipipe_sim_result_destroy(r);
    }
out:
    free(seen);
    free(chan);
    free(ends);
    return rc;
}

double bsipipe_bubble_closed_form(const bsipipe_parallel_config_t *pc)
{
    double w = pc->w, ns = (double)pc->m * pc->k;
    switch (pc->schedule) {
    case BSIPIPE_SCHED_GPIPE: case BSIPIPE_SCHED_1F1B:
    case BSIPIPE_SCHED_TERAPIPE: case BSIPIPE_SCHED_SEQ1F1B:
        return (w - 1) / (ns + w - 1);
    case BSIPIPE_SCHED_1F1B_I: case BSIPIPE_SCHED_SEQ1F1B_I:
        return (w - 1) / (pc->p * ns + w - 1);
    case BSIPIPE_SCHED_ZB_H1: case BSIPIPE_SCHED_BSIPIPE: case BSIPIPE_SCHED_ZB_H2:
        return (w - 1) / (3 * ns + w - 1);
    case BSIPIPE_SCHED_ZB_I: /* the start-up floor, w-1 idle units per device (m >= w) */
        return pc->m >= pc->w ? (w - 1) / (3 * pc->p * ns + w - 1) : -1;
    case BSIPIPE_SCHED_BITPIPE: { /* unit costs: 2(w-2) idle in one unit, w-3 more per further unit
                                     (w >= 4; gen_bitpipe.c); a partial last unit (the order of a whole
                                     one, ops left out) at most the span of whole units: exact when w
                                     divides m, a bound otherwise */
        double units = (pc->m + pc->w - 1) / pc->w;
        double span = 6 * w * units + (units + 1) * (w - 2) - (pc->w > 2 ? units - 1 : 0);
        return 1 - 6 * ns / span;
    }
    case BSIPIPE_SCHED_ZB_V: case BSIPIPE_SCHED_DUALPIPEV:
        /* w-1 idle units per device (start-up), the cooldown filled with W;
         * zb-v below 2w-1 micro-batches has no formula (torch leaves slots empty). */
        return pc->m >= 2 * pc->w - 1 ? (w - 1) / (6 * ns + w - 1) : -1;
    case BSIPIPE_SCHED_DUALPIPE: /* two pipes of m/2 on Chimera's placement: w/2-1 idle over 3m of work */
        return (w / 2 - 1) / (3 * ns + w / 2 - 1);
    case BSIPIPE_SCHED_SEQ_ZBV: /* the same over pieces: an upper bound the list schedule meets or beats */
        return (w - 1) / (6 * ns + w - 1);
    case BSIPIPE_SCHED_BSIPIPE_ZB: { /* the mirrored pipes' start-up floor: floor((w-1)/2) idle units */
        double half = (pc->w - 1) / 2;
        return half / (6 * ns + half);
    }
    case BSIPIPE_SCHED_CHIMERA:
        /* F = B, m >= w; odd w: the middle device is the same stage of both
         * pipes, so it starts and drains (w-1)/2 late (docs/schedules.md). */
        return pc->w % 2 ? (w - 1) / (2 * ns + w - 1) : (w - 2) / (2 * ns + w - 2);
    default:
        return -1;
    }
}
