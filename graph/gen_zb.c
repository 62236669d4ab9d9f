/* gen_zb.c: compute order of the split-backward schedules of the V and of
 * DualPipe. B is the input gradient, W the weight gradient; on the V device
 * d holds chunks d and 2w-1-d, on DualPipe's (Chimera's) placement stage d
 * of the down pipe and w-1-d of the up pipe.
 *
 *   zb-v      : ZeroBubble's handcrafted ZB-V, in the order torch's
 *               ScheduleZBVZeroBubble writes it (sail-sg's). torch plans
 *               max(m, 2w-1) micro-batches and leaves the slots of the ones
 *               past m empty; here they are left out, so each device runs
 *               the rest of its order as early as its inputs allow.
 *   dualpipev : DeepSeek's DualPipeV, in the order torch's ScheduleDualPipeV
 *               writes it (op for op DeepSeek's dualpipev.py). A full
 *               backward is B then W; an overlapped pair F&B is its halves in
 *               sequence, F, then B, then W (as torch runs a pair by default).
 *   dualpipe  : DeepSeek's DualPipe (dualpipe.py), the same eight steps over
 *               two opposing pipes on Chimera's placement: m/2 micro-batches
 *               each, the first half of the batch down.
 *   zb-i      : interleaved zero bubble, in the order torch's
 *               ScheduleInterleavedZeroBubble writes it (ZeroBubble's ZB-1P
 *               over p looped chunks): Megatron's interleaved warmup with one
 *               forward less per hop (w-1-r plus (p-1) rounds' worth), then F
 *               and B pairs, rank r deferring each W by r backwards.
 *   seq-zbv,
 *   bsipipe-zb: a list schedule in time under unit costs (F = B = W = 1) over
 *               the pieces of one V pipe (seq-zbv) or two mirrored ones
 *               (bsipipe-zb): a free device starts a ready B first (it
 *               unblocks the devices upstream), else a ready F, else a W
 *               (W waits on nothing but its own B, so it fills what would be
 *               idle), earliest piece first; at most `cap` stashes (an F's
 *               activations, held until its W) on a device, so a device at
 *               the cap runs W instead of F. generate_zb_list tries caps from
 *               2k (below which no micro-batch can start its backward) up and
 *               keeps the smallest that reaches the shortest makespan found
 *               with no cap.
 * Within a (pipe, chunk), forwards run pieces in order (KV prefix),
 * backwards micro-batches in order with pieces reversed, and W in the
 * order of the B's. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

/* The micro-batches of each pipe, in order (pipe_mbs[p][0..pipe_n[p])),
 * freshly allocated: the caller frees both. -ENOMEM. */
static int pipe_orders(const bsipipe_schedule_t *s, int *pipe_mbs[2], int pipe_n[2])
{
    int m = s->pc.m;
    pipe_mbs[0] = malloc(sizeof(int) * (size_t)m);
    pipe_mbs[1] = malloc(sizeof(int) * (size_t)m);
    pipe_n[0] = pipe_n[1] = 0;
    if (!pipe_mbs[0] || !pipe_mbs[1])
        return bsipipe_error_set(-ENOMEM, "out of memory building the %s schedule",
                                 bsipipe_schedule_kind_name(s->pc.schedule));
    for (int mb = 0; mb < m; mb++) {
        int pipe = schedule_mb_pipe(s, mb);
        pipe_mbs[pipe][pipe_n[pipe]++] = mb;
    }
    return 0;
}

/* ---- zb-v, dualpipev, dualpipe: the peers' orders -------------------------- */

/* Pushes kind of micro-batch mb on chunk c unless mb is past the plan's m
 * (zb-v's empty slots). */
static int push_mb(bsipipe_schedule_t *s, bsipipe_op_kind_t kind, int mb, int chunk)
{
    return mb < s->pc.m ? schedule_push_compute(s, kind, mb, 0, chunk) : 0;
}

static int generate_zbv(bsipipe_schedule_t *s)
{
    int w = s->pc.w, count = s->pc.m > 2 * w - 1 ? s->pc.m : 2 * w - 1, rc = 0;
    for (int r = 0; r < w && rc == 0; r++) {
        int c0 = r, c1 = 2 * w - 1 - r;
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
#define PUSH(K, MB, C) do { if (rc == 0) rc = push_mb(s, (K), (MB), (C)); } while (0)
        for (int i = 0; i < 2 * (w - r) - 1; i++)      /* warmup: chunk 0's forwards */
            PUSH(BSIPIPE_OP_F, f0++, c0);
        for (int i = 0; i < r; i++) {                  /* both chunks' forwards */
            PUSH(BSIPIPE_OP_F, f1++, c1);
            PUSH(BSIPIPE_OP_F, f0++, c0);
        }
        for (int i = 0; i < w - r; i++) {              /* chunk 1: F, B, W */
            PUSH(BSIPIPE_OP_F, f1++, c1);
            PUSH(BSIPIPE_OP_B, b1, c1);
            PUSH(BSIPIPE_OP_W, b1++, c1);
        }
        while (f1 < f0 || f0 < count) {                /* steady state */
            if (f0 < count)
                PUSH(BSIPIPE_OP_F, f0++, c0);
            PUSH(BSIPIPE_OP_B, b0, c0);
            PUSH(BSIPIPE_OP_W, b0++, c0);
            PUSH(BSIPIPE_OP_F, f1++, c1);
            PUSH(BSIPIPE_OP_B, b1, c1);
            PUSH(BSIPIPE_OP_W, b1++, c1);
        }
        int w0 = b0, w1 = b1;
        for (int i = 0; i < r; i++) {                  /* cooldown: B of both chunks, W deferred */
            PUSH(BSIPIPE_OP_B, b0++, c0);
            PUSH(BSIPIPE_OP_B, b1++, c1);
        }
        for (int i = 0; i < w - r; i++) {
            PUSH(BSIPIPE_OP_B, b0++, c0);
            PUSH(BSIPIPE_OP_W, w0++, c0);
        }
        while (w1 < b1)
            PUSH(BSIPIPE_OP_W, w1++, c1);
        while (w0 < b0)
            PUSH(BSIPIPE_OP_W, w0++, c0);
#undef PUSH
        if (rc == 0 && (f0 != count || b0 != count || w0 != count || f1 != count || w1 != count))
            rc = bsipipe_error_set(BSIPIPE_EDEPEND, "zb-v: device %d's order counts %d/%d/%d forwards/backwards/"
                                   "weight gradients of chunk %d, %d expected", r, f0, b0, w0, c0, count);
    }
    return rc;
}

/* zb-i on rank r, op for op torch's _get_1f1b_rank_ops(enable_zero_bubble)
 * as ScheduleInterleavedZeroBubble calls it: steps count a rank's forwards
 * (and its backwards from the warmup on); a chunk changes every `per_round`
 * steps, forwards up the local chunks, backwards down them. */
static int generate_zb_interleaved(bsipipe_schedule_t *s)
{
    int w = s->pc.w, p = s->pc.p, m = s->pc.m, rc = 0;
    int per_round = m / bsipipe_zb_i_rounds(m, w);
    long total = (long)p * m;
    int *next = calloc((size_t)(3 * p), sizeof(int)); /* per local chunk: next F, B, W micro-batch */
    long *b_steps = malloc(sizeof(long) * (size_t)total);
    if (!next || !b_steps) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory building the zb-i schedule");
        goto out;
    }
    for (int r = 0; r < w && rc == 0; r++) {
        long warmup = (long)(p - 1) * per_round + (w - 1 - r), n_b = 0, n_w = 0;
        if (warmup > total)
            warmup = total;
        for (int i = 0; i < 3 * p; i++)
            next[i] = 0;
#define F_LC(step) ((int)(((step) / per_round) % p))
#define B_LC(step) (p - 1 - (int)((((step) - warmup) / per_round) % p))
#define PUSH(K, LC) do { int lc_ = (LC); \
            if (rc == 0) rc = schedule_push_compute(s, (K), next[3 * lc_ + (K)]++, 0, lc_ * w + r); } while (0)
        for (long op = 0; op < warmup + total && rc == 0; op++) {
            if (op < total)
                PUSH(BSIPIPE_OP_F, F_LC(op));
            if (op < warmup)
                continue;
            PUSH(BSIPIPE_OP_B, B_LC(op));
            b_steps[n_b++] = op;
            if (op - warmup >= r) /* torch's num_1f1b_microbatches = rank */
                PUSH(BSIPIPE_OP_W, B_LC(b_steps[n_w++]));
        }
        while (n_w < n_b && rc == 0)
            PUSH(BSIPIPE_OP_W, B_LC(b_steps[n_w++]));
#undef PUSH
#undef B_LC
#undef F_LC
    }
out:
    free(next);
    free(b_steps);
    return rc;
}

/* DualPipe's and DualPipeV's state on one device. Both run the same eight
 * steps over two "phases" of n ranks: DualPipeV's are the device's two
 * chunks of the one pipe (n = w, its rank r), DualPipe's its stages of the
 * two pipes, the pipe that enters at this half of the ranks first (n = w/2,
 * r = min(d, w-1-d)). Per phase: its chunk, its micro-batches in order, the
 * next forward and backward; W's deferred by a zero-bubble backward wait in
 * one FIFO (DeepSeek's WeightGradStore). */
typedef struct dual {
    bsipipe_schedule_t *s;
    int device; /* whose order is being written */
    int chunk[2], next_f[2], next_b[2];
    const int *mbs[2];
    int *queue_chunk, *queue_mb, q_head, q_tail;
} dual_t;

static int dual_f(dual_t *v, int ph)
{
    return schedule_push_compute(v->s, BSIPIPE_OP_F, v->mbs[ph][v->next_f[ph]++], 0, v->chunk[ph]);
}

/* A full backward: B then W at once. */
static int dual_full_b(dual_t *v, int ph)
{
    int mb = v->mbs[ph][v->next_b[ph]++], rc = schedule_push_compute(v->s, BSIPIPE_OP_B, mb, 0, v->chunk[ph]);
    return rc ? rc : schedule_push_compute(v->s, BSIPIPE_OP_W, mb, 0, v->chunk[ph]);
}

/* DeepSeek's overlapped_forward_backward: the forward of phase f and the full
 * backward of phase b, marked as one pair (its halves in that order). */
static int dual_pair(dual_t *v, int f, int b)
{
    bsipipe_op_t *const *ops = v->s->ops;
    const int *n = v->s->n_ops, d = v->device;
    int rc = dual_f(v, f);
    if (rc == 0) {
        ops[d][n[d] - 1].flags = BSIPIPE_OP_PAIR_F;
        rc = dual_full_b(v, b);
    }
    if (rc == 0) /* the B and the W just pushed */
        ops[d][n[d] - 1].flags = ops[d][n[d] - 2].flags = BSIPIPE_OP_PAIR_B;
    return rc;
}

/* An input gradient whose W waits in the queue. */
static int dual_b(dual_t *v, int ph)
{
    int mb = v->mbs[ph][v->next_b[ph]++];
    v->queue_chunk[v->q_tail] = v->chunk[ph];
    v->queue_mb[v->q_tail++] = mb;
    return schedule_push_compute(v->s, BSIPIPE_OP_B, mb, 0, v->chunk[ph]);
}

static int dual_pending_w(dual_t *v)
{
    if (v->q_head == v->q_tail)
        return 0;
    int i = v->q_head++;
    return schedule_push_compute(v->s, BSIPIPE_OP_W, v->queue_mb[i], 0, v->queue_chunk[i]);
}

/* The eight steps on one device: n ranks per phase, rank r among them, M
 * micro-batches per phase. */
static int dual_steps(dual_t *v, int n, int r, int M)
{
    int rc = 0;
#define DO(call) do { if (rc == 0) rc = (call); } while (0)
    for (int i = 0; i < 2 * (n - r - 1); i++)          /* step 1: nF0 */
        DO(dual_f(v, 0));
    for (int i = 0; i < r + 1; i++) {                  /* step 2: nF0F1 */
        DO(dual_f(v, 0));
        DO(dual_f(v, 1));
    }
    for (int i = 0; i < n - r - 1; i++) {              /* step 3: nB1W1F1, zero bubble */
        DO(dual_b(v, 1));
        DO(dual_pending_w(v));
        DO(dual_f(v, 1));
    }
    for (int i = 0; i < M - 2 * n + r + 1; i++) {      /* step 4: nF0B1F1B0, F&B pairs */
        if (i == 0 && r == n - 1) {                    /* the middle rank's first: F, then B alone */
            DO(dual_f(v, 0));
            DO(dual_full_b(v, 1));
        } else {
            DO(dual_pair(v, 0, 1));
        }
        DO(dual_pair(v, 1, 0));
    }
    for (int i = 0; i < n - r - 1; i++) {              /* step 5: nB1F1B0 */
        DO(dual_full_b(v, 1));
        DO(dual_pair(v, 1, 0));
    }
    int zb = 0, half = (r + 1) / 2;
    for (int i = 0; i < r + 1; i++) {                  /* step 6: nB1B0, W deferred from the middle on */
        if (i == half && r % 2 == 1)
            zb = 1;
        DO(zb ? dual_b(v, 1) : dual_full_b(v, 1));
        if (i == half && r % 2 == 0)
            zb = 1;
        DO(zb ? dual_b(v, 0) : dual_full_b(v, 0));
    }
    for (int i = 0; i < n - r - 1; i++) {              /* step 7: nWB0 */
        DO(dual_pending_w(v));
        DO(zb ? dual_b(v, 0) : dual_full_b(v, 0));
    }
    for (int i = 0; i < r + 1; i++)                    /* step 8: nW */
        DO(dual_pending_w(v));
#undef DO
    if (rc == 0 && (v->q_head != v->q_tail || v->next_f[0] != M || v->next_f[1] != M || v->next_b[0] != M ||
                    v->next_b[1] != M))
        rc = bsipipe_error_set(BSIPIPE_EDEPEND, "%s: rank %d's order is incomplete (%d weight gradients left); m = %d",
                               bsipipe_schedule_kind_name(v->s->pc.schedule), r, v->q_tail - v->q_head, v->s->pc.m);
    return rc;
}

static int generate_dual(bsipipe_schedule_t *s)
{
    int w = s->pc.w, m = s->pc.m, rc = 0, v_shape = s->pc.schedule == BSIPIPE_SCHED_DUALPIPEV;
    dual_t v = {.s = s};
    int *pipe_mbs[2], pipe_n[2];
    v.queue_chunk = malloc(sizeof(int) * (size_t)(2 * m));
    v.queue_mb = malloc(sizeof(int) * (size_t)(2 * m));
    if ((rc = pipe_orders(s, pipe_mbs, pipe_n)) < 0)
        goto out;
    if (!v.queue_chunk || !v.queue_mb) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory building the %s schedule",
                               bsipipe_schedule_kind_name(s->pc.schedule));
        goto out;
    }
    for (int d = 0; d < w && rc == 0; d++) {
        v.device = d;
        v.next_f[0] = v.next_f[1] = v.next_b[0] = v.next_b[1] = 0;
        v.q_head = v.q_tail = 0;
        if (v_shape) { /* one pipe: the device's chunks d and 2w-1-d */
            v.chunk[0] = d;
            v.chunk[1] = 2 * w - 1 - d;
            v.mbs[0] = v.mbs[1] = pipe_mbs[0];
            rc = dual_steps(&v, w, d, m);
        } else { /* phase 0: the pipe entering at this half of the ranks */
            int second_half = d >= w / 2;
            for (int ph = 0; ph < 2; ph++) {
                int pipe = ph ^ second_half;
                v.chunk[ph] = pipe == 0 ? d : w - 1 - d; /* Chimera's placement: the up pipe mirrored */
                v.mbs[ph] = pipe_mbs[pipe];
            }
            rc = dual_steps(&v, w / 2, d < w - 1 - d ? d : w - 1 - d, m / 2);
        }
    }
out:
    free(pipe_mbs[0]);
    free(pipe_mbs[1]);
    free(v.queue_chunk);
    free(v.queue_mb);
    return rc;
}

/* ---- seq-zbv and bsipipe-zb: the list schedule ----------------------------- */

enum { ZB_MAX_SLOTS = 4 };

typedef struct zb_slot {
    int pipe, chunk;
    int next[3]; /* next position in this slot's F, B and W orders */
} zb_slot_t;

typedef struct zb_dev {
    zb_slot_t slot[ZB_MAX_SLOTS];
    int n_slots, live, ops_left;
} zb_dev_t;

/* The op at position pos of kind's order in a slot: (mb, sub). */
static void zb_slot_op(const bsipipe_schedule_t *s, int *const pipe_mbs[2], const zb_slot_t *sl, int kind, int pos,
                       int *mb, int *sub)
{
    int k = s->pc.k;
    *mb = pipe_mbs[sl->pipe][pos / k];
    *sub = kind == BSIPIPE_OP_F ? pos % k : k - 1 - pos % k;
}

static int zb_ready(const bsipipe_schedule_t *s, const int *end, int kind, int pipe, int mb, int sub, int chunk,
                    int t)
{
    bsipipe_op_t op = {.kind = (uint8_t)kind, .pipe = (uint8_t)pipe, .mb = mb, .sub = sub, .chunk = chunk};
    bsipipe_op_t deps[3];
    int n = compute_deps(s, &op, deps);
    for (int i = 0; i < n; i++) {
        int e = end[compute_index(s, deps[i].kind, deps[i].mb, deps[i].sub, deps[i].chunk)];
        if (e < 0 || e > t)
            return 0;
    }
    return 1;
}

/* One run of the list schedule with at most cap stashes per device (0: no
 * cap). push: write the order into s (else only time it). Returns the
 * makespan, 0 when it stalls (the cap too small), or a negative code. */
static long zb_list_run(bsipipe_schedule_t *s, int *const pipe_mbs[2], const int pipe_n[2], int *end, zb_dev_t *dev,
                        int cap, int push, int *peak)
{
    int W = s->n_devices, k = s->pc.k;
    for (long i = 0; i < compute_index_count(s); i++)
        end[i] = -1;
    for (int d = 0; d < W; d++) {
        zb_dev_t *ds = &dev[d];
        ds->n_slots = ds->live = ds->ops_left = 0;
        for (int pipe = 0; pipe < s->n_pipes; pipe++)
            for (int c = 0; c < s->n_chunks; c++)
                if (schedule_dev(s, pipe, c) == d && ds->n_slots < ZB_MAX_SLOTS) {
                    ds->slot[ds->n_slots++] = (zb_slot_t){.pipe = pipe, .chunk = c};
                    ds->ops_left += 3 * pipe_n[pipe] * k;
                }
    }
    *peak = 0;
    /* Every op takes one step: at step t each device is free and may start
     * one op whose inputs ended by t. */
    for (int t = 0;; t++) {
        int left = 0, started = 0;
        for (int d = 0; d < W; d++) {
            zb_dev_t *ds = &dev[d];
            left += ds->ops_left;
            if (ds->ops_left == 0)
                continue;
            /* Best ready op: kind rank (B, F, W), then the piece's place in
             * its pipe, then the deeper chunk (the longer chain ahead). */
            int best = -1, best_kind = 0, best_mb = 0, best_sub = 0;
            long best_key = 0;
            static const int rank[3] = {1, 0, 2}; /* by kind F, B, W */
            for (int i = 0; i < ds->n_slots; i++) {
                zb_slot_t *sl = &ds->slot[i];
                for (int kind = BSIPIPE_OP_F; kind <= BSIPIPE_OP_W; kind++) {
                    int pos = sl->next[kind], mb, sub;
                    if (pos >= pipe_n[sl->pipe] * k)
                        continue;
                    if (kind == BSIPIPE_OP_F && cap > 0 && ds->live >= cap)
                        continue;
                    zb_slot_op(s, pipe_mbs, sl, kind, pos, &mb, &sub);
                    if (!zb_ready(s, end, kind, sl->pipe, mb, sub, sl->chunk, t))
                        continue;
                    long key = ((long)rank[kind] << 56) + ((long)pos << 16) + (s->n_chunks - sl->chunk) * 2 +
                               sl->pipe;
                    if (best < 0 || key < best_key) {
                        best = i;
                        best_key = key;
                        best_kind = kind;
                        best_mb = mb;
                        best_sub = sub;
                    }
                }
            }
            if (best < 0)
                continue;
            zb_slot_t *sl = &ds->slot[best];
            if (push) {
                int rc = schedule_push_compute(s, (bsipipe_op_kind_t)best_kind, best_mb, best_sub, sl->chunk);
                if (rc < 0)
                    return rc;
            }
            end[compute_index(s, best_kind, best_mb, best_sub, sl->chunk)] = t + 1;
            sl->next[best_kind]++;
            ds->ops_left--;
            ds->live += best_kind == BSIPIPE_OP_F ? 1 : best_kind == BSIPIPE_OP_W ? -1 : 0;
            if (ds->live > *peak)
                *peak = ds->live;
            started = 1;
        }
        if (!left)
            return t;
        if (!started)
            return 0; /* stalled: nothing ends later to make an op ready (every device at its cap
                       * or waiting on one that is) */
    }
}

/* The smallest cap that keeps the uncapped makespan: the makespan can only
 * fall as the cap rises past the stall, but not always steadily, so every
 * cap from 2k up is tried until one matches (the uncapped peak bounds it).
 * 0 (no cap) when only the peak itself does; a negative code on error. */
static int zb_smallest_cap(bsipipe_schedule_t *s, int *const pipe_mbs[2], const int pipe_n[2], int *end,
                           zb_dev_t *dev)
{
    int peak;
    long best = zb_list_run(s, pipe_mbs, pipe_n, end, dev, 0, 0, &peak);
    if (best <= 0)
        return best < 0 ? (int)best
                        : bsipipe_error_set(BSIPIPE_EDEPEND, "%s: list scheduling stalled with no memory cap",
                                            bsipipe_schedule_kind_name(s->pc.schedule));
    int uncapped_peak = peak;
    for (int cap = 2 * s->pc.k; cap < uncapped_peak; cap++) {
        long span = zb_list_run(s, pipe_mbs, pipe_n, end, dev, cap, 0, &peak);
        if (span < 0)
            return (int)span;
        if (span == best)
            return cap;
    }
    return 0;
}

static int generate_zb_list(bsipipe_schedule_t *s)
{
    int W = s->n_devices, rc, peak;
    int *pipe_mbs[2], pipe_n[2];
    int *end = malloc(sizeof(int) * (size_t)compute_index_count(s));
    zb_dev_t *dev = calloc((size_t)W, sizeof *dev);
    if ((rc = pipe_orders(s, pipe_mbs, pipe_n)) < 0)
        goto out;
    if (!end || !dev) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory building the %s schedule",
                               bsipipe_schedule_kind_name(s->pc.schedule));
        goto out;
    }
    /* zb-h2 holds ZeroBubble's 2w-1 stashes (its warmup); the others the
     * smallest cap that keeps the uncapped makespan (zb_smallest_cap). */
    int cap = s->pc.schedule == BSIPIPE_SCHED_ZB_H2 ? 2 * s->pc.w - 1
                                                    : zb_smallest_cap(s, pipe_mbs, pipe_n, end, dev);
    if (cap < 0) {
        rc = cap;
        goto out;
    }
    long span = zb_list_run(s, pipe_mbs, pipe_n, end, dev, cap, 1, &peak);
    if (span <= 0)
        rc = span < 0 ? (int)span
                      : bsipipe_error_set(BSIPIPE_EDEPEND, "%s: list scheduling stalled",
                                          bsipipe_schedule_kind_name(s->pc.schedule));
out:
    free(pipe_mbs[0]);
    free(pipe_mbs[1]);
    free(end);
    free(dev);
    return rc;
}

int generate_zb(bsipipe_schedule_t *s)
{
    switch (s->pc.schedule) {
    case BSIPIPE_SCHED_ZB_V:
        return generate_zbv(s);
    case BSIPIPE_SCHED_DUALPIPEV:
    case BSIPIPE_SCHED_DUALPIPE:
        return generate_dual(s);
    case BSIPIPE_SCHED_ZB_I:
        return generate_zb_interleaved(s);
    default:
        return generate_zb_list(s);
    }
}
