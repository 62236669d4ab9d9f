/* gen_greedy.c: compute order of BSIPipe, constructed by
 * list scheduling in time under unit costs (F = 1, B = 2): whenever a device is free, it picks among its ready
 * ops by the schedule's rule. The order found is the plan; the simulator then
 * replays it under any cost model.
 *
 * Every device holds "slots" (pipe, chunk). Within a slot, forwards run the
 * pipe's micro-batches in order with subsequences in order (KV prefix);
 * backwards run micro-batches in order with subsequences reversed. So at any
 * time a slot offers at most one forward, one backward and one W: the rule
 * only chooses between slots and kinds. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

enum { MAX_SLOTS = 4 };

typedef struct slot {
    int pipe, chunk;
    int next[2];  /* next position in the F and B order of this slot */
} slot_t;

typedef struct device_state {
    slot_t slot[MAX_SLOTS];
    int n_slots;
    double free_at;
    int live;        /* activations held: forwards started, backwards not started */
    int *fwd_done;   /* forwards started per sub-unit */
    int *fwd_total;  /* forwards this device runs per sub-unit */
    int ops_left;
} device_state_t;

typedef struct candidate {
    int kind, slot, mb, sub, chunk, pipe;
} candidate_t;

typedef struct greedy {
    bsipipe_schedule_t *s;
    device_state_t *dev;
    double *end;      /* per compute index: end time, -1 until started */
    int *pipe_mbs[2];   /* micro-batches of each pipe, in order */
    int pipe_n_mb[2];
    int *pos;         /* micro-batch -> its position in its pipe's order */
    int group;        /* micro-batches per group (schedule_mb_group) */
    int cap;          /* bidirectional: forwards of one basic unit on one device */
    int subunit;      /* subsequences of one pipe per sub-unit */
    int alternate_ties; /* equal chunks of the two pipes: take turns (k = 1) */
    int n_sub_units;
} greedy_t;

/* Sub-unit of a subsequence: its rank in its pipe's order, in groups. */
static int sub_unit(const greedy_t *g, int mb, int sub)
{
    return (g->pos[mb] * g->s->pc.k + sub) / g->subunit;
}

/* Op at position pos of kind's order in a slot. */
static void slot_op(const greedy_t *g, const slot_t *sl, int kind, int pos, int *mb, int *sub)
{
    int k = g->s->pc.k;
    *mb = g->pipe_mbs[sl->pipe][pos / k];
    *sub = kind == BSIPIPE_OP_F ? pos % k : k - 1 - pos % k;
}

static int ready(const greedy_t *g, const candidate_t *c, double t)
{
    bsipipe_op_t op = {.kind = (uint8_t)c->kind, .pipe = (uint8_t)c->pipe, .mb = c->mb,
                       .sub = c->sub, .chunk = c->chunk};
    bsipipe_op_t deps[3];
    int n = compute_deps(g->s, &op, deps);
    for (int i = 0; i < n; i++) {
        double e = g->end[compute_index(g->s, deps[i].kind, deps[i].mb, deps[i].sub, deps[i].chunk)];
        if (e < 0 || e > t)
            return 0;
    }
    return 1;
}

/* Priority of a candidate on device d (lower runs first), or -1 when the
 * schedule's rule does not allow it now. */
static long priority(const greedy_t *g, int d, const candidate_t *c)
{
    const bsipipe_schedule_t *s = g->s;
    const device_state_t *ds = &g->dev[d];
    {
        /* At most one basic unit's
         * activations per device (cap). Forwards of the oldest unfinished
         * sub-unit first, deepest chunk first, to fill the far end of the V;
         * then backwards, highest chunk first (the longest chain left); then
         * later sub-units' forwards, which overlap this one's cooldown. */
        int unit = sub_unit(g, c->mb, c->sub), cur = 0;
        while (cur < g->n_sub_units - 1 && ds->fwd_done[cur] == ds->fwd_total[cur])
            cur++; /* every forward of `cur` done here */
        long order = g->alternate_ties ? ((long)g->pos[c->mb] * s->pc.k + c->sub) * 2 + c->pipe
                                       : (long)c->mb * s->pc.k + c->sub;
        long deep_first = (long)(s->n_chunks - 1 - c->chunk) * (1L << 32) + order;
        if (c->kind == BSIPIPE_OP_B) return (1L << 60) + deep_first;
        if (s->pc.concat && ds->live >= g->cap) return -1;
        if (unit == cur || !s->pc.concat) return deep_first;
        return (2L << 60) + deep_first;
    }
}


/* Device d is free at time t: start its best ready op, if any. */
static int try_start(greedy_t *g, int d, double t)
{
    bsipipe_schedule_t *s = g->s;
    device_state_t *ds = &g->dev[d];
    candidate_t best = {0};
    long best_prio = -1;
    for (int i = 0; i < ds->n_slots; i++) {
        slot_t *sl = &ds->slot[i];
        int n_in_slot = g->pipe_n_mb[sl->pipe] * s->pc.k;
        for (int kind = BSIPIPE_OP_F; kind <= BSIPIPE_OP_B; kind++) {
            if (sl->next[kind] >= n_in_slot)
                continue;
            candidate_t c = {.kind = kind, .slot = i, .chunk = sl->chunk, .pipe = sl->pipe};
            slot_op(g, sl, kind, sl->next[kind], &c.mb, &c.sub);
            if (!ready(g, &c, t))
                continue;
            long prio = priority(g, d, &c);
            if (prio >= 0 && (best_prio < 0 || prio < best_prio)) {
                best = c;
                best_prio = prio;
            }
        }
    }
    if (best_prio < 0)
        return 0;
    int rc = schedule_push_compute(s, (bsipipe_op_kind_t)best.kind, best.mb, best.sub, best.chunk);
    if (rc < 0)
        return rc;
    double end = t + (best.kind == BSIPIPE_OP_B ? 2.0 : 1.0); /* unit costs */
    g->end[compute_index(s, best.kind, best.mb, best.sub, best.chunk)] = end;
    ds->slot[best.slot].next[best.kind]++;
    ds->free_at = end;
    ds->ops_left--;
    if (best.kind == BSIPIPE_OP_F) {
        ds->live++;
        ds->fwd_done[sub_unit(g, best.mb, best.sub)]++;
    } else {
        ds->live--; /* released by the backward; counted at its start */
    }
    return 1;
}

static void greedy_free(greedy_t *g)
{
    for (int d = 0; g->dev && d < g->s->n_devices; d++) {
        free(g->dev[d].fwd_done);
        free(g->dev[d].fwd_total);
    }
    free(g->dev);
    free(g->pos);
    free(g->end);
    free(g->pipe_mbs[0]);
    free(g->pipe_mbs[1]);
}

int generate_greedy(bsipipe_schedule_t *s, int subunit)
{
    greedy_t g = {.s = s};
    int m = s->pc.m, k = s->pc.k, rc = 0;
    g.group = s->n_pipes == 2 ? schedule_mb_group(s) : m;
    g.cap = g.group * k * s->pc.p; /* forwards of one unit on one device */
    int whole = (g.group + 1) / 2 * k; /* a pipe's subsequences in one basic unit */
    g.subunit = subunit > 0 && subunit < whole ? subunit : whole;
    /* With odd w the middle device holds the same chunks of both pipes. At
     * k = 1 (groups of 2w, w micro-batches down then w up) ranking its ties
     * by micro-batch made the down pipe win every one and the up pipe's wave
     * wait there: 1.01-1.06x the bound from w = 35 (m = 2w). Taking turns by
     * position in the pipe keeps every k = 1 plan of the sweeps below it. At
     * k >= 2 (units of w split unevenly between the pipes, alternating) the
     * micro-batch order measured better (docs/schedules.md). */
    g.alternate_ties = k == 1 && s->n_pipes == 2;
    int n_sub_units = g.n_sub_units = m * k / g.subunit + 2;
    g.dev = calloc((size_t)s->n_devices, sizeof *g.dev);
    g.end = malloc(sizeof(double) * (size_t)compute_index_count(s));
    g.pos = malloc(sizeof(int) * (size_t)m);
    g.pipe_mbs[0] = malloc(sizeof(int) * (size_t)m);
    g.pipe_mbs[1] = malloc(sizeof(int) * (size_t)m);
    if (!g.dev || !g.end || !g.pos || !g.pipe_mbs[0] || !g.pipe_mbs[1]) {
        greedy_free(&g);
        return bsipipe_error_set(-ENOMEM, "out of memory building the schedule");
    }
    for (long i = 0; i < compute_index_count(s); i++)
        g.end[i] = -1;
    for (int mb = 0; mb < m; mb++) {
        int pipe = schedule_mb_pipe(s, mb);
        g.pos[mb] = g.pipe_n_mb[pipe];
        g.pipe_mbs[pipe][g.pipe_n_mb[pipe]++] = mb;
    }
    for (int d = 0; d < s->n_devices; d++) {
        device_state_t *ds = &g.dev[d];
        ds->fwd_done = calloc((size_t)n_sub_units, sizeof(int));
        ds->fwd_total = calloc((size_t)n_sub_units, sizeof(int));
        if (!ds->fwd_done || !ds->fwd_total) {
            greedy_free(&g);
            return bsipipe_error_set(-ENOMEM, "out of memory building the schedule");
        }
        for (int pipe = 0; pipe < s->n_pipes; pipe++)
            for (int c = 0; c < s->n_chunks; c++)
                if (schedule_dev(s, pipe, c) == d) {
                    ds->slot[ds->n_slots] = (slot_t){.pipe = pipe, .chunk = c};
                    ds->n_slots++;
                    ds->ops_left += 2 * g.pipe_n_mb[pipe] * k;
                    for (int i = 0; i < g.pipe_n_mb[pipe] * k; i++)
                        ds->fwd_total[i / g.subunit]++;
                }
    }
    /* Event loop: at time t every free device tries to start an op; then time
     * moves to the next op end. */
    double t = 0;
    for (;;) {
        int left = 0;
        for (int d = 0; d < s->n_devices; d++) {
            if (g.dev[d].free_at <= t && g.dev[d].ops_left > 0 && (rc = try_start(&g, d, t)) < 0)
                goto out;
            left += g.dev[d].ops_left;
        }
        if (!left)
            break;
        double next = -1;
        for (int d = 0; d < s->n_devices; d++)
            if (g.dev[d].free_at > t && (next < 0 || g.dev[d].free_at < next))
                next = g.dev[d].free_at;
        if (next < 0) {
            rc = bsipipe_error_set(BSIPIPE_EDEPEND, "%s: list scheduling stalled at t=%g "
                                   "(no device can start an op)", bsipipe_schedule_kind_name(s->pc.schedule), t);
            goto out;
        }
        t = next;
    }
out:
    greedy_free(&g);
    return rc < 0 ? rc : 0;
}
