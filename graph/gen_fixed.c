/* gen_fixed.c: compute order of the unidirectional schedules, as their
 * reference implementations build it (Megatron-LM's schedules):
 *   gpipe / terapipe : every forward, then every backward in reverse order;
 *   1f1b / seq1f1b   : warmup forwards, then one forward one backward, then
 *                      cooldown backwards;
 *   1f1b-i / seq1f1b-i: the same over virtual stages, Megatron's interleaved
 *                      order (groups of G units per chunk, G = w when w
 *                      divides N_s: bsipipe_interleave_group);
 *   zb-h1            : 1f1b's order of F and B (B = input gradient only),
 *                      each W deferred d backwards on device d (ZeroBubble's
 *                      handcrafted ZB-H1);
 *   chimera          : two opposing 1f1b pipelines over half the micro-batches
 *                      each, merged on every device by their start times when
 *                      each runs alone (ties: deeper stage first).
 * A "unit" is one (micro-batch, subsequence); there are N_s = m·k of them.
 * Forwards run units in order; backwards run micro-batches in order with
 * their subsequences reversed (a later piece's backward produces gradient
 * for the K/V of every earlier one). */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

/* Megatron's schedule table (get_schedule_table) over units: groups of G
 * units (bsipipe_interleave_group), each run chunk by chunk; the last group
 * holds `last` units (G, or the remainder N_s mod G). For p = 1 every group
 * is one chunk and the order is the units' own. */
typedef struct vtable {
    int p, g, last;
    long full; /* units in the groups before the last */
} vtable_t;

static vtable_t vtable_of(const bsipipe_schedule_t *s)
{
    int ns = s->pc.m * s->pc.k;
    int g = s->pc.p > 1 ? bsipipe_interleave_group(ns, s->pc.w) : ns;
    if (g <= 0)
        g = ns; /* the config's rules refuse N_s < w before this */
    int last = ns % g ? ns % g : g;
    return (vtable_t){s->pc.p, g, last, (long)ns - last};
}

/* Virtual index i of a device's forward (or backward) sequence ->
 * (local chunk, unit), Megatron's interleaved numbering. */
static void virtual_to_unit(const vtable_t *t, long i, int backward, int *local_chunk, int *unit)
{
    long in_full = t->full * t->p;
    int lc;
    if (i < in_full) {
        long group = i / ((long)t->g * t->p), within = i % ((long)t->g * t->p);
        lc = (int)(within / t->g);
        *unit = (int)(group * t->g + within % t->g);
    } else {
        lc = (int)((i - in_full) / t->last);
        *unit = (int)(t->full + (i - in_full) % t->last);
    }
    *local_chunk = backward ? t->p - 1 - lc : lc;
}

/* The inverse for forwards: the virtual index of (unit, local chunk). */
static long unit_to_virtual(const vtable_t *t, long unit, int lc)
{
    if (unit < t->full)
        return unit / t->g * ((long)t->g * t->p) + (long)lc * t->g + unit % t->g;
    return t->full * t->p + (long)lc * t->last + (unit - t->full);
}

static int push_virtual(bsipipe_schedule_t *s, const vtable_t *t, int device, long i, int backward)
{
    int lc, unit, k = s->pc.k;
    virtual_to_unit(t, i, backward, &lc, &unit);
    int mb = unit / k, sub = backward ? k - 1 - unit % k : unit % k;
    return schedule_push_compute(s, backward ? BSIPIPE_OP_B : BSIPIPE_OP_F, mb, sub, lc * s->pc.w + device);
}

/* Forward-then-backward over all units (GPipe, TeraPipe), backward order
 * fully reversed so the last forward is the first backward. */
static int generate_gpipe(bsipipe_schedule_t *s)
{
    int ns = s->pc.m * s->pc.k, k = s->pc.k, rc = 0;
    for (int d = 0; d < s->pc.w && rc == 0; d++) {
        for (int u = 0; u < ns && rc == 0; u++)
            rc = schedule_push_compute(s, BSIPIPE_OP_F, u / k, u % k, d);
        for (int u = ns - 1; u >= 0 && rc == 0; u--)
            rc = schedule_push_compute(s, BSIPIPE_OP_B, u / k, u % k, d);
    }
    return rc;
}

/* W of the backward at position i of the backward order (p = 1). */
static int push_w(bsipipe_schedule_t *s, int device, long i)
{
    int k = s->pc.k;
    int mb = (int)(i / k), sub = k - 1 - (int)(i % k);
    return schedule_push_compute(s, BSIPIPE_OP_W, mb, sub, device);
}

/* The most forwards a device's b-th backward needs ahead of the b forwards
 * paired with the backwards before it: max over b of (virtual index of the
 * forward of b's own (unit, chunk)) - b. Each device runs the same virtual
 * sequences, so this holds for all; a warmup below it makes a device wait
 * for a forward later in its own list. With k <= 2w it is what the formula
 * in generate_1f1b gives; a longer micro-batch (k > 2w) spans more groups of
 * w units, and its first backward (last piece) waits for the forward of a
 * later group. */
static long local_lead(const bsipipe_schedule_t *s, const vtable_t *t, long total)
{
    int k = s->pc.k;
    long lead = 0;
    for (long b = 0; b < total; b++) {
        int lc, unit;
        virtual_to_unit(t, b, 1, &lc, &unit);
        long fwd_unit = (long)(unit / k) * k + (k - 1 - unit % k); /* the same (mb, sub), forward numbering */
        long f = unit_to_virtual(t, fwd_unit, lc);
        if (f - b > lead)
            lead = f - b;
    }
    return lead;
}

static int generate_1f1b(bsipipe_schedule_t *s)
{
    int w = s->pc.w, p = s->pc.p, rc = 0;
    int split = bsipipe_schedule_kind_traits(s->pc.schedule).split_backward;
    long total = (long)s->pc.m * s->pc.k * p;
    vtable_t t = vtable_of(s);
    long lead = local_lead(s, &t, total);
    for (int d = 0; d < w && rc == 0; d++) {
        /* Megatron's warmup (groups of G units), plus k-1 forwards so that
         * the first backward (the micro-batch's last subsequence) has its
         * forward done. */
        long warmup = p == 1 ? w - d - 1 : 2L * (w - d - 1) + (long)(p - 1) * t.g;
        warmup += s->pc.k - 1;
        /* When k does not divide G a micro-batch straddles two groups, and
         * its first backward (last piece) waits for the forward of the next
         * group's last chunk: (p-1)G forwards further on. */
        if (p > 1 && t.g % s->pc.k)
            warmup += (long)(p - 1) * t.g;
        /* Never below the device's own needs (found by fuzz/fuzz_config:
         * seq1f1b-i with k > 2w, e.g. w=1 p=2 k=3, or w=2 p=2 k=8, built a
         * plan whose first backward waited for a later forward of its own
         * device). Where the formula suffices this changes nothing. */
        long need = (p == 1 ? w - d - 1 : 2L * (w - d - 1)) + lead;
        if (warmup < need)
            warmup = need;
        if (warmup > total)
            warmup = total;
        long f = 0, b = 0, wgrad = 0;
        while (f < warmup && rc == 0)
            rc = push_virtual(s, &t, d, f++, 0);
        while (b < total && rc == 0) {
            if (f < total)
                rc = push_virtual(s, &t, d, f++, 0);
            if (rc == 0)
                rc = push_virtual(s, &t, d, b++, 1);
            /* ZB-H1: the W of a backward runs d backwards later, so the last
             * devices, which finish their backwards first, fill the
             * cooldown with deferred W. */
            if (split && b > d && rc == 0)
                rc = push_w(s, d, wgrad++);
        }
        while (split && wgrad < total && rc == 0)
            rc = push_w(s, d, wgrad++);
    }
    return rc;
}

/* One op of a Chimera pipe while building: stage = chunk. */
typedef struct pipe_op {
    int kind, pipe, mb_index, stage;
    double start;
} pipe_op_t;

static int cmp_pipe_op(const void *a, const void *b)
{
    const pipe_op_t *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->stage != y->stage) return y->stage - x->stage; /* deeper stage first */
    if (x->pipe != y->pipe) return x->pipe - y->pipe;
    return x->kind - y->kind;
}

/* Start times of one pipe of n micro-batches running 1F1B alone over w
 * stages, with F = B = 1 (the cost ratio under which Chimera's closed form
 * holds, docs/schedules.md). Fills ops[] (2·n·w entries). */
static void chimera_pipe_alone(int w, int n, int pipe, pipe_op_t *ops, double *f_end, double *b_end,
                               int *pos, double *now)
{
    /* Per stage, the 1F1B order as a sequence of (kind, index). */
    for (int st = 0; st < w; st++) {
        pos[st] = 0;
        now[st] = 0;
    }
    for (int i = 0; i < n * w; i++)
        f_end[i] = b_end[i] = -1;
    int done = 0, total = 2 * n * w;
    while (done < total) {
        for (int st = 0; st < w; st++) {
            for (;;) {
                int warm = w - st - 1 < n ? w - st - 1 : n, j = pos[st], kind, idx;
                if (j >= 2 * n) break;
                /* position j of stage st: warmup forwards, then F,B pairs, then B */
                if (j < warm) { kind = BSIPIPE_OP_F; idx = j; }
                else {
                    int r = j - warm, f_left = n - warm;
                    if (r < 2 * f_left) { kind = r % 2 ? BSIPIPE_OP_B : BSIPIPE_OP_F; idx = r % 2 ? r / 2 : warm + r / 2; }
                    else { kind = BSIPIPE_OP_B; idx = f_left + (r - 2 * f_left); }
                }
                double ready = now[st];
                if (kind == BSIPIPE_OP_F && st > 0) {
                    if (f_end[idx * w + st - 1] < 0) break;
                    if (f_end[idx * w + st - 1] > ready) ready = f_end[idx * w + st - 1];
                }
                if (kind == BSIPIPE_OP_B && st < w - 1) {
                    if (b_end[idx * w + st + 1] < 0) break;
                    if (b_end[idx * w + st + 1] > ready) ready = b_end[idx * w + st + 1];
                }
                now[st] = ready + 1;
                (kind == BSIPIPE_OP_F ? f_end : b_end)[idx * w + st] = now[st];
                ops[done++] = (pipe_op_t){kind, pipe, idx, st, ready};
                pos[st]++;
            }
        }
    }
}

static int generate_chimera(bsipipe_schedule_t *s)
{
    int w = s->pc.w, m = s->pc.m, n = m / 2, rc = 0;
    int *mbs[2] = {malloc(sizeof(int) * (size_t)m), malloc(sizeof(int) * (size_t)m)}, cnt[2] = {0, 0};
    pipe_op_t *ops = malloc(sizeof *ops * (size_t)(4 * n * w));
    double *f_end = malloc(sizeof(double) * (size_t)(n * w)), *b_end = malloc(sizeof(double) * (size_t)(n * w));
    double *now = malloc(sizeof(double) * (size_t)w);
    int *pos = malloc(sizeof(int) * (size_t)w);
    if (!mbs[0] || !mbs[1] || !ops || !f_end || !b_end || !now || !pos) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory building the chimera schedule");
        goto out;
    }
    for (int mb = 0; mb < m; mb++) {
        int pipe = schedule_mb_pipe(s, mb);
        mbs[pipe][cnt[pipe]++] = mb;
    }
    chimera_pipe_alone(w, n, 0, ops, f_end, b_end, pos, now);
    chimera_pipe_alone(w, n, 1, ops + 2 * n * w, f_end, b_end, pos, now);
    qsort(ops, (size_t)(4 * n * w), sizeof *ops, cmp_pipe_op);
    for (int i = 0; i < 4 * n * w && rc == 0; i++)
        rc = schedule_push_compute(s, (bsipipe_op_kind_t)ops[i].kind, mbs[ops[i].pipe][ops[i].mb_index], 0,
                                   ops[i].stage);
out:
    free(mbs[0]);
    free(mbs[1]);
    free(ops);
    free(f_end);
    free(b_end);
    free(now);
    free(pos);
    return rc;
}

int generate_fixed(bsipipe_schedule_t *s)
{
    switch (s->pc.schedule) {
    case BSIPIPE_SCHED_CHIMERA:
        return generate_chimera(s);
    case BSIPIPE_SCHED_GPIPE:
    case BSIPIPE_SCHED_TERAPIPE:
        return generate_gpipe(s);
    default:
        return generate_1f1b(s);
    }
}
