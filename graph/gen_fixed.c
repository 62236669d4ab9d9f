/* gen_fixed.c: compute order of the unidirectional schedules, as their
 * reference implementations build it (Megatron-LM's schedules):
 *   gpipe / terapipe : every forward, then every backward in reverse order;
 *   1f1b / seq1f1b   : warmup forwards, then one forward one backward, then
 *                      cooldown backwards;
 *   1f1b-i / seq1f1b-i: the same over virtual stages, Megatron's interleaved
 *                      order (groups of w units per chunk);
 *   zb-h1            : 1f1b's order of F and B (B = input gradient only),
 *                      each W deferred d backwards on device d (ZeroBubble's
 *                      handcrafted ZB-H1).
 * A "unit" is one (micro-batch, subsequence); there are N_s = m·k of them.
 * Forwards run units in order; backwards run micro-batches in order with
 * their subsequences reversed (a later piece's backward produces gradient
 * for the K/V of every earlier one). */
#include "graph/schedule_internal.h"

/* Virtual index i of a device's forward (or backward) sequence ->
 * (local chunk, unit), Megatron's interleaved numbering. */
static void virtual_to_unit(const bsipipe_schedule_t *s, long i, int backward, int *local_chunk, int *unit)
{
    int w = s->pc.w, p = s->pc.p;
    long group = i / ((long)w * p), within = i % ((long)w * p);
    int lc = (int)(within / w);
    *local_chunk = backward ? p - 1 - lc : lc;
    *unit = (int)(group * w + within % w);
}

static int push_virtual(bsipipe_schedule_t *s, int device, long i, int backward)
{
    int lc, unit, k = s->pc.k;
    virtual_to_unit(s, i, backward, &lc, &unit);
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

static int generate_1f1b(bsipipe_schedule_t *s)
{
    int w = s->pc.w, p = s->pc.p, rc = 0;
    int split = bsipipe_schedule_kind_traits(s->pc.schedule).split_backward;
    long total = (long)s->pc.m * s->pc.k * p;
    for (int d = 0; d < w && rc == 0; d++) {
        /* Megatron's warmup, plus k-1 forwards so that the first backward
         * (the micro-batch's last subsequence) has its forward done. */
        long warmup = p == 1 ? w - d - 1 : 2L * (w - d - 1) + (long)(p - 1) * w;
        warmup += s->pc.k - 1;
        if (warmup > total)
            warmup = total;
        long f = 0, b = 0, wgrad = 0;
        while (f < warmup && rc == 0)
            rc = push_virtual(s, d, f++, 0);
        while (b < total && rc == 0) {
            if (f < total)
                rc = push_virtual(s, d, f++, 0);
            if (rc == 0)
                rc = push_virtual(s, d, b++, 1);
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

int generate_fixed(bsipipe_schedule_t *s)
{
    switch (s->pc.schedule) {
    case BSIPIPE_SCHED_GPIPE:
    case BSIPIPE_SCHED_TERAPIPE:
        return generate_gpipe(s);
    default:
        return generate_1f1b(s);
    }
}
