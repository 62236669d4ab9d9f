/* gen_bitpipe.c: compute order of BitPipe (Wu, Chen and Yu, 2024: two
 * opposing V-shaped interleaved pipelines at micro-batch level), as its
 * reference implementation orders each device's work (Megatron-based
 * bitpipe_schedule.py; re-derived here as op lists, no code taken).
 *
 * A device holds four slots: the down pipe's chunk d and 2w-1-d and the up
 * pipe's chunks w-1-d and w+d ("arms": 0 = first half of the V, 1 = second).
 * A basic unit is w micro-batches, w/2 per pipe. Each device runs
 *   warmup  : W = 3w/2 + min(d, w-1-d) forwards,
 *   per unit: R = 2w - W times (one forward, one backward); W - R + 1
 *             backwards; R - 1 times (forward, backward); W - R + 1 forwards
 *             (a partial flush between units); the two outer devices (d = 0
 *             and w-1, W = 3w/2) flush one op less, R pairs on both sides
 *             of W - R backwards and W - R forwards after,
 *   last    : R times (forward, backward), then the remaining backwards,
 * taking forwards and backwards from two per-device sequences that
 * interleave the four slots so that the halves of the device meet the two
 * pipes' waves in the order they arrive.
 *
 * Under unit costs (F = 1, B = 2) one unit idles 2(w-2) per device, which
 * is optimal for one unit; each further unit adds w-3 (w >= 4): the partial
 * flush, w-2 when every device flushes alike; the outer devices' shorter
 * flush takes one unit off each boundary (at w = 4, m = 8: 53 units, the
 * figure BitPipe's authors give, where the uniform flush gives 54), without
 * raising any device's peak stashes.
 * An m that w does not divide ends with a partial unit of r = m mod w
 * micro-batches (r/2 down, the rest up): the order of a whole last unit
 * with the absent micro-batches' ops left out. Leaving every op of a
 * micro-batch out keeps the order valid (the others' inputs and their
 * order on each device are unchanged).
 * BSIPipe at k = 1 takes this order when it beats its list-scheduled one
 * (bsipipe_schedule.c). */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"

#include <stdlib.h>

/* One entry of a device sequence: slot (0: down arm 0, 1: up arm 0,
 * 2: down arm 1, 3: up arm 1) and the pipe-local micro-batch index. */
typedef struct entry {
    int slot, index;
} entry_t;

/* The forward (backward = 0) or backward (backward = 1) sequence of device
 * d over `units` basic units: 2w entries per unit. */
static void device_sequence(int w, int d, int units, int backward, entry_t *out)
{
    int half = w / 2, side = d / half;
    int initial = d < half ? half - d : d - half + 1;
    int n = 0;
    /* Slots named relative to the device's side: `a` is the arm-0 slot of
     * the pipe entering this side first, `b` the other pipe's arm 0, `c`
     * and `e` the arm-1 slots. Backwards run the same pattern on the
     * arm-1 slots first. */
    int a = side, b = 1 - side, c = 3 - side, e = 2 + side;
    if (backward) {
        a = 2 + side; b = 3 - side; c = 1 - side; e = side;
    }
    for (int u = 0; u < units; u++) {
        int base = u * half;
        for (int i = 0; i < initial; i++)
            out[n++] = (entry_t){a, base + i};
        for (int i = 0; i < half - initial; i++) {
            out[n++] = (entry_t){b, base + i};
            out[n++] = (entry_t){a, base + i + initial};
        }
        for (int i = 0; i < initial; i++) {
            out[n++] = (entry_t){b, base + i + half - initial};
            out[n++] = (entry_t){c, base + i};
        }
        for (int i = 0; i < half - initial; i++) {
            out[n++] = (entry_t){e, base + i};
            out[n++] = (entry_t){c, base + i + initial};
        }
        for (int i = 0; i < initial; i++)
            out[n++] = (entry_t){e, base + i + half - initial};
    }
}

/* Appends the op of one entry to device d's list. */
static int push_entry(bsipipe_schedule_t *s, int d, entry_t e, bsipipe_op_kind_t kind)
{
    int w = s->pc.w, half = w / 2;
    int pipe = e.slot % 2;
    int chunk;
    switch (e.slot) {
    case 0: chunk = d; break;               /* down, arm 0 */
    case 1: chunk = w - 1 - d; break;       /* up, arm 0 */
    case 2: chunk = 2 * w - 1 - d; break;   /* down, arm 1 */
    default: chunk = w + d; break;          /* up, arm 1 */
    }
    /* Pipe-local index -> global micro-batch: groups of w, the first half
     * of each group down, the second up (schedule_mb_pipe); a last partial
     * group of r holds r/2 down and the rest up, and the padded unit's
     * other micro-batches are absent: their ops are left out. */
    int u = e.index / half, i = e.index % half, base = u * w;
    int size = s->pc.m - base < w ? s->pc.m - base : w, down = size / 2;
    if (i >= (pipe ? size - down : down))
        return 0;
    return schedule_push_compute(s, kind, base + pipe * down + i, 0, chunk);
}

int generate_bitpipe(bsipipe_schedule_t *s)
{
    int w = s->pc.w, units = (s->pc.m + w - 1) / w, per_unit = 2 * w, rc = 0;
    if (w % 2 || s->pc.k != 1 || s->n_pipes != 2 || s->n_chunks != 2 * w || schedule_mb_group(s) != w ||
        s->mb_alternate)
        return bsipipe_error_set(BSIPIPE_ECONFIG, "the BitPipe order needs even w, k = 1, p = 2 and micro-batch "
                                 "groups of w (got w=%d, k=%d, m=%d, groups of %d)", w, s->pc.k, s->pc.m,
                                 schedule_mb_group(s));
    entry_t *fw = malloc(sizeof *fw * (size_t)per_unit * units);
    entry_t *bw = malloc(sizeof *bw * (size_t)per_unit * units);
    if (!fw || !bw) {
        free(fw);
        free(bw);
        return bsipipe_error_set(-ENOMEM, "out of memory building the BitPipe order");
    }
    for (int d = 0; d < w && rc == 0; d++) {
        device_sequence(w, d, units, 0, fw);
        device_sequence(w, d, units, 1, bw);
        int warm = w + w / 2 + (d < w / 2 ? d : w - 1 - d);
        int pairs = per_unit - warm, flush = warm - pairs + 1;
        int f = 0, b = 0;
#define F_NEXT() (rc = rc ? rc : push_entry(s, d, fw[f++], BSIPIPE_OP_F))
#define B_NEXT() (rc = rc ? rc : push_entry(s, d, bw[b++], BSIPIPE_OP_B))
        for (int i = 0; i < warm; i++)
            F_NEXT();
        /* The outer devices' first forward of the next unit leaves them as
         * soon as their neighbour can take it: one pair moves from the
         * flush to after it (on w = 2 both devices are outer: no change). */
        int outer = (d == 0 || d == w - 1) && w > 2;
        int flush_ops = flush - outer, pairs_after = pairs - 1 + outer;
        for (int u = 0; u + 1 < units; u++) {
            for (int i = 0; i < pairs; i++) { F_NEXT(); B_NEXT(); }
            for (int i = 0; i < flush_ops; i++) B_NEXT();
            for (int i = 0; i < pairs_after; i++) { F_NEXT(); B_NEXT(); }
            for (int i = 0; i < flush_ops; i++) F_NEXT();
        }
        for (int i = 0; i < pairs; i++) { F_NEXT(); B_NEXT(); }
        while (b < per_unit * units) B_NEXT();
#undef F_NEXT
#undef B_NEXT
        if (rc == 0 && f != per_unit * units)
            rc = bsipipe_error_set(BSIPIPE_EDEPEND, "BitPipe order: device %d placed %d of %d forwards", d, f,
                                   per_unit * units);
    }
    free(fw);
    free(bw);
    return rc;
}
