/* bsipipe_config.c: schedule names, defaults and the rules of a configuration. */
#include "graph/bsipipe_config.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_layout.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const schedule_names[BSIPIPE_SCHED_COUNT] = {
    "gpipe", "1f1b", "1f1b-i", "zb-h1", "chimera",
    "terapipe", "seq1f1b", "seq1f1b-i", "bsipipe", "bitpipe", "zb-v", "dualpipev", "seq-zbv", "bsipipe-zb", "dualpipe",
    "zb-i", "zb-h2",
};

const char *bsipipe_schedule_kind_name(bsipipe_schedule_kind_t kind)
{
    return (unsigned)kind < BSIPIPE_SCHED_COUNT ? schedule_names[kind] : "unknown";
}

/* Case-insensitive compare that treats '_' as '-'. */
static int name_equal(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int ca = *a == '_' ? '-' : tolower((unsigned char)*a);
        int cb = *b == '_' ? '-' : tolower((unsigned char)*b);
        if (ca != cb)
            return 0;
    }
    return *a == *b;
}

int bsipipe_schedule_kind_parse(const char *name, bsipipe_schedule_kind_t *kind)
{
    for (int i = 0; name && i < BSIPIPE_SCHED_COUNT; i++)
        if (name_equal(name, schedule_names[i])) {
            *kind = (bsipipe_schedule_kind_t)i;
            return 0;
        }
    return bsipipe_error_set(-EINVAL,
        "unknown schedule '%s'; valid: gpipe, 1f1b, 1f1b-i, zb-h1, chimera, terapipe, "
        "seq1f1b, seq1f1b-i, bsipipe, bitpipe, zb-v, dualpipev, seq-zbv, bsipipe-zb, dualpipe, zb-i, zb-h2", name ? name : "(null)");
}

bsipipe_schedule_traits_t bsipipe_schedule_kind_traits(bsipipe_schedule_kind_t kind)
{
    bsipipe_schedule_traits_t t = {0, 0, 0, 0, 0};
    switch (kind) {
    case BSIPIPE_SCHED_1F1B_I: t.interleaved = 1; break;
    case BSIPIPE_SCHED_ZB_H1: case BSIPIPE_SCHED_ZB_H2: t.split_backward = 1; break;
    case BSIPIPE_SCHED_CHIMERA: t.bidirectional = 1; break;
    case BSIPIPE_SCHED_TERAPIPE:
    case BSIPIPE_SCHED_SEQ1F1B: t.sequence_level = 1; break;
    case BSIPIPE_SCHED_SEQ1F1B_I: t.sequence_level = 1; t.interleaved = 1; break;
    case BSIPIPE_SCHED_BSIPIPE:
        t.sequence_level = 1; t.interleaved = 1; t.bidirectional = 1; t.v_shape = 1; break;
    case BSIPIPE_SCHED_BITPIPE: t.interleaved = 1; t.bidirectional = 1; t.v_shape = 1; break;
    case BSIPIPE_SCHED_ZB_V:
    case BSIPIPE_SCHED_DUALPIPEV: t.interleaved = 1; t.split_backward = 1; t.v_shape = 1; break;
    case BSIPIPE_SCHED_SEQ_ZBV:
        t.sequence_level = 1; t.interleaved = 1; t.split_backward = 1; t.v_shape = 1; break;
    case BSIPIPE_SCHED_BSIPIPE_ZB:
        t.sequence_level = 1; t.interleaved = 1; t.bidirectional = 1; t.split_backward = 1; t.v_shape = 1; break;
    case BSIPIPE_SCHED_DUALPIPE: t.bidirectional = 1; t.split_backward = 1; break;
    case BSIPIPE_SCHED_ZB_I: t.interleaved = 1; t.split_backward = 1; break;
    default: break;
    }
    return t;
}

const char *bsipipe_schedule_kind_m_rule(bsipipe_schedule_kind_t kind)
{
    /* One sentence per schedule of what bsipipe_parallel_config_validate
     * below enforces on m (and w where it constrains m). */
    switch (kind) {
    case BSIPIPE_SCHED_GPIPE: case BSIPIPE_SCHED_1F1B: case BSIPIPE_SCHED_ZB_H1: case BSIPIPE_SCHED_TERAPIPE:
    case BSIPIPE_SCHED_SEQ1F1B: case BSIPIPE_SCHED_ZB_V: case BSIPIPE_SCHED_SEQ_ZBV: case BSIPIPE_SCHED_ZB_H2:
        return "any m >= 1";
    case BSIPIPE_SCHED_1F1B_I: case BSIPIPE_SCHED_SEQ1F1B_I:
        return "any m with N_s = m*k >= w (Megatron's micro-batch groups)";
    case BSIPIPE_SCHED_CHIMERA: case BSIPIPE_SCHED_BSIPIPE_ZB:
        return "m even (half in each pipe)";
    case BSIPIPE_SCHED_BSIPIPE:
        return "any m >= 2 (a last partial basic unit; an odd m puts one more in the up pipe)";
    case BSIPIPE_SCHED_BITPIPE:
        return "w even, any m >= 2 (a last partial unit of m mod w; an odd one puts one more in the up pipe)";
    case BSIPIPE_SCHED_DUALPIPEV:
        return "m >= 2w";
    case BSIPIPE_SCHED_DUALPIPE:
        return "w even, m even and >= 2w";
    case BSIPIPE_SCHED_ZB_I:
        return "m a multiple of its rounds, max(1, floor(m/w)) (torch's rule: any m up to 2w-1, then even m "
               "up to 3w-1, ...)";
    default:
        return "?";
    }
}

static const char *const comm_names[BSIPIPE_COMM_COUNT] = {"bsipipe", "ordered", "naive", "no-reversal"};

const char *bsipipe_comm_order_name(bsipipe_comm_order_t order)
{
    return (unsigned)order < BSIPIPE_COMM_COUNT ? comm_names[order] : "unknown";
}

int bsipipe_comm_order_parse(const char *name, bsipipe_comm_order_t *order)
{
    for (int i = 0; name && i < BSIPIPE_COMM_COUNT; i++)
        if (name_equal(name, comm_names[i])) {
            *order = (bsipipe_comm_order_t)i;
            return 0;
        }
    return bsipipe_error_set(-EINVAL,
        "unknown comm order '%s'; valid: bsipipe, ordered, naive, no-reversal", name ? name : "(null)");
}

bsipipe_parallel_config_t bsipipe_parallel_config_default(bsipipe_schedule_kind_t kind)
{
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(kind);
    bsipipe_parallel_config_t pc = {
        .schedule = kind, .w = 4, .p = t.interleaved ? 2 : 1, .k = t.sequence_level ? 2 : 1,
        .m = 8, .tp = 1, .nodes = 0, .devices_per_node = 0,
        .partition = BSIPIPE_PARTITION_BALANCED, .comm = BSIPIPE_COMM_BSIPIPE, .concat = 1,
        .optimise = 1,
    };
    return pc;
}

/* Largest multiple of `step` <= v (at least step) and the next one above. */
static int mult_below(int v, int step) { return v / step * step >= step ? v / step * step : step; }
static int mult_above(int v, int step) { return (v / step + 1) * step; }

/* "a or b", or "a" when both candidates are the same (the multiple below would be 0). */
static const char *either(char *buf, size_t len, int a, int b)
{
    if (a == b)
        snprintf(buf, len, "%d", a);
    else
        snprintf(buf, len, "%d or %d", a, b);
    return buf;
}

#define RULE(cond, ...) \
    do { if (!(cond)) return bsipipe_error_set(BSIPIPE_ECONFIG, __VA_ARGS__); } while (0)

/* Keeps products well inside int range whatever the input. */
enum { MAX_W = 4096, MAX_P = 64, MAX_K = 1 << 16, MAX_M = 1 << 20 };

int bsipipe_model_dims_validate(const bsipipe_model_dims_t *d)
{
    char near[48];
    RULE(d, "no model dimensions given");
    RULE(d->family == BSIPIPE_MODEL_GPT || d->family == BSIPIPE_MODEL_LLAMA,
         "model family must be gpt or llama");
    RULE(d->n_layers >= 1 && d->n_layers <= 65536, "layers L must be in 1..65536 (got %d)", d->n_layers);
    RULE(d->hidden >= 1 && d->hidden <= 1 << 20, "hidden size must be in 1..1048576 (got %d)", d->hidden);
    RULE(d->n_heads >= 1 && d->n_heads <= d->hidden,
         "heads must be in 1..hidden (got %d heads, hidden %d)", d->n_heads, d->hidden);
    RULE(d->hidden % d->n_heads == 0,
         "hidden size %d must be a multiple of the head count %d; nearest valid hidden: %s",
         d->hidden, d->n_heads,
         either(near, sizeof near, mult_below(d->hidden, d->n_heads), mult_above(d->hidden, d->n_heads)));
    RULE(d->family != BSIPIPE_MODEL_LLAMA || (d->hidden / d->n_heads) % 2 == 0,
         "LLaMA's rotary embedding turns pairs of a head's dimensions: the head dimension hidden/heads must be "
         "even (got %d / %d = %d); nearest valid hidden: %s", d->hidden, d->n_heads, d->hidden / d->n_heads,
         either(near, sizeof near, mult_below(d->hidden, 2 * d->n_heads), mult_above(d->hidden, 2 * d->n_heads)));
    RULE(d->ffn_hidden >= 1 && d->ffn_hidden <= 1 << 22, "ffn hidden size must be in 1..4194304 (got %d)",
         d->ffn_hidden);
    RULE(d->vocab >= 2 && d->vocab <= 1 << 24, "vocabulary must be in 2..16777216 (got %d)", d->vocab);
    RULE(d->seq_len >= 1 && d->seq_len <= 1 << 24, "sequence length S must be in 1..16777216 (got %d)",
         d->seq_len);
    return 0;
}

int bsipipe_interleave_group(int ns, int w)
{
    for (int g = w; g <= ns; g++)
        if (ns % g == 0 || ns % g >= w)
            return g;
    return 0;
}

int bsipipe_parallel_config_chunk_device(const bsipipe_parallel_config_t *pc, int pipe, int chunk)
{
    int w = pc->w;
    int down = bsipipe_schedule_kind_traits(pc->schedule).v_shape ? (chunk < w ? chunk : 2 * w - 1 - chunk)
                                                                   : chunk % w;
    return pipe == 1 ? w - 1 - down : down;
}

/* --layout auto: the split by chunk; on one V-shaped pipe (zb-v,
 * dualpipev, seq-zbv) then balanced by device, each device running the
 * first and the last chunk of the same micro-batch. The simulator at the
 * paper's setting with a 128k vocabulary (docs/schedules.md, "Placing
 * layers"): +7% tokens/s on zb-v and dualpipev from the device balance,
 * but -7% on 1f1b-i and -3.5% on bsipipe, whose chunk chains it lengthens. */
static int layers_auto(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *d, int *counts)
{
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(pc->schedule);
    int chunks = pc->p * pc->w;
    int rc = bsipipe_layout_auto(d, chunks, counts);
    if (rc < 0 || !t.v_shape || t.bidirectional)
        return rc;
    int *dev = malloc(sizeof(int) * (size_t)chunks);
    if (!dev)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int c = 0; c < chunks; c++)
        dev[c] = bsipipe_parallel_config_chunk_device(pc, 0, c);
    rc = bsipipe_layout_balance_devices(d, counts, chunks, dev, 1, pc->w);
    free(dev);
    return rc;
}

int bsipipe_parallel_config_layers(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *d, int *counts)
{
    char near[48];
    int chunks = pc->p * pc->w;
    if (pc->layout && strcmp(pc->layout, "auto") == 0)
        return layers_auto(pc, d, counts);
    if (pc->layout)
        return bsipipe_layout_parse(pc->layout, chunks, d->n_layers, counts);
    RULE(d->n_layers % chunks == 0,
         "layers L=%d must be a multiple of p*w = %d for an even split; nearest valid L: %s, or place them "
         "with --layout auto (by cost) or a layout string", d->n_layers, chunks,
         either(near, sizeof near, mult_below(d->n_layers, chunks), mult_above(d->n_layers, chunks)));
    for (int c = 0; c < chunks; c++)
        counts[c] = d->n_layers / chunks;
    return 0;
}

int bsipipe_zb_i_rounds(int m, int w)
{
    return m / w > 1 ? m / w : 1;
}

int bsipipe_parallel_config_validate(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *d)
{
    char near[48];
    RULE(pc, "no parallel configuration given");
    RULE((unsigned)pc->schedule < BSIPIPE_SCHED_COUNT, "unknown schedule id %d", (int)pc->schedule);
    const char *name = bsipipe_schedule_kind_name(pc->schedule);
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(pc->schedule);
    RULE(pc->w >= 1 && pc->w <= MAX_W, "pipeline depth w must be in 1..%d (got %d)", MAX_W, pc->w);
    RULE(pc->p >= 1 && pc->p <= MAX_P, "interleaving factor p must be in 1..%d (got %d)", MAX_P, pc->p);
    RULE(pc->k >= 1 && pc->k <= MAX_K, "subsequences k must be in 1..%d (got %d)", MAX_K, pc->k);
    RULE(pc->m >= 1 && pc->m <= MAX_M, "micro-batches m must be in 1..%d (got %d)", MAX_M, pc->m);
    RULE((long)pc->m * pc->k <= MAX_M, "N_s = m*k = %ld is too large (at most %d)", (long)pc->m * pc->k, MAX_M);
    RULE(pc->tp >= 1 && pc->tp <= 1024, "tensor-parallel degree D_t must be in 1..1024 (got %d)", pc->tp);
    RULE((unsigned)pc->partition <= BSIPIPE_PARTITION_EVEN, "unknown partition kind %d", (int)pc->partition);
    RULE((unsigned)pc->comm < BSIPIPE_COMM_COUNT, "unknown comm order %d", (int)pc->comm);
    RULE(pc->concat == 0 || pc->concat == 1, "concat must be 0 or 1 (got %d)", pc->concat);
    RULE(pc->optimise == 0 || pc->optimise == 1, "optimise must be 0 or 1 (got %d)", pc->optimise);

    int ns = pc->m * pc->k;
    RULE(t.sequence_level || pc->k == 1,
         "%s schedules whole micro-batches: k must be 1 (got k=%d); use terapipe, seq1f1b, "
         "seq1f1b-i, bsipipe, seq-zbv or bsipipe-zb to split sequences", name, pc->k);
    if (t.v_shape) {
        RULE(pc->p == 2, "%s uses the V-shaped layout: p must be 2 (got p=%d)", name, pc->p);
    } else if (t.interleaved) {
        RULE(pc->p >= 2, "%s interleaves chunks: p must be >= 2 (got p=%d; p=1 is %s)", name, pc->p,
             pc->schedule == BSIPIPE_SCHED_1F1B_I ? "1f1b" : pc->schedule == BSIPIPE_SCHED_ZB_I ? "zb-h1" : "seq1f1b");
        RULE(ns >= pc->w || pc->schedule == BSIPIPE_SCHED_ZB_I,
             "%s (Megatron's interleaved order) needs at least one unit per device, N_s = m*k >= w=%d "
             "(got N_s=%d); nearest valid m: %d", name, pc->w, ns, (pc->w + pc->k - 1) / pc->k);
    } else {
        RULE(pc->p == 1, "%s does not interleave: p must be 1 (got p=%d)", name, pc->p);
    }
    if (t.bidirectional) {
        RULE(pc->w >= 2, "%s needs two pipes over at least 2 devices: w >= 2 (got w=%d)", name, pc->w);
        int partial = pc->schedule == BSIPIPE_SCHED_BSIPIPE || pc->schedule == BSIPIPE_SCHED_BITPIPE;
        if (partial)
            RULE(pc->m >= 2, "%s needs a micro-batch in each pipe: m >= 2 (got m=%d); nearest valid m: 2", name,
                 pc->m);
        RULE(pc->m % 2 == 0 || partial, "%s splits micro-batches between two pipes: m must be even "
             "(got m=%d); nearest valid m: %s", name, pc->m,
             either(near, sizeof near, pc->m > 1 ? pc->m - 1 : pc->m + 1, pc->m + 1));
    }
    if (pc->schedule == BSIPIPE_SCHED_DUALPIPE) {
        RULE(pc->w % 2 == 0, "dualpipe (DeepSeek's order) pairs rank r with rank w-1-r: w must be even (got w=%d); "
             "nearest valid w: %d or %d", pc->w, pc->w - 1, pc->w + 1);
        RULE(pc->m >= 2 * pc->w && pc->m % 2 == 0, "dualpipe (DeepSeek's order) needs an even m >= 2w = %d, half "
             "of it in each pipe (got m=%d); nearest valid m: %d", 2 * pc->w, pc->m,
             pc->m < 2 * pc->w ? 2 * pc->w : pc->m + 1);
    }
    if (pc->schedule == BSIPIPE_SCHED_DUALPIPEV)
        RULE(pc->m >= 2 * pc->w, "dualpipev (DeepSeek's and torch's order) needs at least as many micro-batches as "
             "stages, m >= 2w = %d (got m=%d); nearest valid m: %d, or use zb-v, which runs any m",
             2 * pc->w, pc->m, 2 * pc->w);
    if (pc->schedule == BSIPIPE_SCHED_ZB_I && pc->m % bsipipe_zb_i_rounds(pc->m, pc->w)) {
        /* torch's ScheduleInterleavedZeroBubble: rounds of m / rounds micro-batches */
        int below = pc->m, above = pc->m;
        while (below > pc->w && below % bsipipe_zb_i_rounds(below, pc->w))
            below--;
        while (above % bsipipe_zb_i_rounds(above, pc->w))
            above++;
        RULE(pc->m % bsipipe_zb_i_rounds(pc->m, pc->w) == 0,
             "zb-i (torch's interleaved zero bubble) runs m in rounds of equal size, max(1, floor(m/w)) = %d of "
             "them: m=%d is not a multiple; nearest valid m: %s", bsipipe_zb_i_rounds(pc->m, pc->w), pc->m,
             either(near, sizeof near, below, above));
    }
    if (pc->schedule == BSIPIPE_SCHED_BITPIPE) {
        RULE(pc->w % 2 == 0, "bitpipe splits each basic unit of w micro-batches evenly between its two pipes: "
             "w must be even (got w=%d); nearest valid w: %d or %d", pc->w, pc->w - 1, pc->w + 1);
    }
    if (pc->nodes > 0) {
        int devices = pc->w * pc->tp;
        RULE(devices % pc->nodes == 0, "%d devices (w*D_t) cannot be spread evenly over %d nodes",
             devices, pc->nodes);
        RULE(pc->devices_per_node == 0 || pc->devices_per_node == devices / pc->nodes,
             "devices per node %d does not match w*D_t/nodes = %d", pc->devices_per_node,
             devices / pc->nodes);
    }
    RULE(d || !pc->layout, "a layout (\"%s\") places a model's layers: give the model's dimensions too",
         pc->layout ? pc->layout : "");
    if (!d)
        return 0;
    int rc = bsipipe_model_dims_validate(d);
    if (rc < 0)
        return rc;
    int chunks = pc->p * pc->w, *counts = malloc(sizeof(int) * (size_t)chunks);
    if (!counts)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    rc = bsipipe_parallel_config_layers(pc, d, counts);
    free(counts);
    if (rc < 0)
        return rc;
    RULE(d->hidden % pc->tp == 0 && d->n_heads % pc->tp == 0,
         "D_t=%d must divide the hidden size %d and the head count %d", pc->tp, d->hidden, d->n_heads);
    RULE(d->seq_len % pc->tp == 0,
         "sequence length S=%d must be a multiple of D_t=%d; nearest valid S: %s",
         d->seq_len, pc->tp, either(near, sizeof near, mult_below(d->seq_len, pc->tp), mult_above(d->seq_len, pc->tp)));
    RULE(pc->k <= d->seq_len / pc->tp,
         "cannot split S=%d tokens into k=%d subsequences of at least D_t=%d tokens; use k <= %d",
         d->seq_len, pc->k, pc->tp, d->seq_len / pc->tp);
    return 0;
}
