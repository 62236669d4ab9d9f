/* bsipipe_schedule.c: the schedule handle — placement, op lists, SYNC/STEP,
 * accessors. The order of compute ops comes from the generators, the order of
 * transfers from comm.c. */
#include "graph/schedule_internal.h"
#include "graph/bsipipe_error.h"
#include "graph/bsipipe_layout.h"
#include "graph/bsipipe_partition.h"
#include "graph/bsipipe_sim.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_kind_names[BSIPIPE_OP_KIND_COUNT] = {
    "F", "B", "W", "SEND", "RECV", "SYNC", "STEP"};

const char *bsipipe_op_kind_name(bsipipe_op_kind_t kind)
{
    return (unsigned)kind < BSIPIPE_OP_KIND_COUNT ? op_kind_names[kind] : "?";
}

const char *bsipipe_pipe_name(bsipipe_pipe_t pipe)
{
    return pipe == BSIPIPE_PIPE_UP ? "up" : "down";
}

char *bsipipe_op_format(const bsipipe_op_t *op, char *buf, size_t len)
{
    switch (op->kind) {
    case BSIPIPE_OP_F: case BSIPIPE_OP_B: case BSIPIPE_OP_W:
        snprintf(buf, len, "%s %s mb%d s%d c%d", bsipipe_op_kind_name(op->kind),
                 bsipipe_pipe_name(op->pipe), op->mb, op->sub, op->chunk);
        break;
    case BSIPIPE_OP_SEND: case BSIPIPE_OP_RECV:
        snprintf(buf, len, "%s %s(%s mb%d s%d c%d) %s dev%d", bsipipe_op_kind_name(op->kind),
                 op->tensor == BSIPIPE_TENSOR_ACT ? "act" : "grad", bsipipe_pipe_name(op->pipe),
                 op->mb, op->sub, op->chunk, op->kind == BSIPIPE_OP_SEND ? "to" : "from", op->peer);
        break;
    case BSIPIPE_OP_SYNC:
        snprintf(buf, len, "SYNC c%d with dev%d", op->chunk, op->peer);
        break;
    default:
        snprintf(buf, len, "%s", bsipipe_op_kind_name(op->kind));
    }
    return buf;
}

int schedule_push(bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    int d = op->device;
    if (s->n_ops[d] == s->cap_ops[d]) {
        int cap = s->cap_ops[d] ? 2 * s->cap_ops[d] : 64;
        bsipipe_op_t *n = realloc(s->ops[d], (size_t)cap * sizeof *n);
        if (!n)
            return bsipipe_error_set(-ENOMEM, "out of memory growing the op list of device %d", d);
        s->ops[d] = n;
        s->cap_ops[d] = cap;
    }
    s->ops[d][s->n_ops[d]++] = *op;
    return 0;
}

int schedule_push_compute(bsipipe_schedule_t *s, bsipipe_op_kind_t kind, int mb, int sub, int chunk)
{
    int pipe = schedule_mb_pipe(s, mb);
    bsipipe_op_t op = {
        .kind = (uint8_t)kind, .pipe = (uint8_t)pipe, .tensor = BSIPIPE_TENSOR_NONE,
        .device = schedule_dev(s, pipe, chunk), .mb = mb, .sub = sub, .chunk = chunk,
        .peer = -1, .channel = -1,
    };
    return schedule_push(s, &op);
}

int compute_deps(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3])
{
    int n = 0, last = s->n_chunks - 1, pipe = op->pipe;
#define DEP(K, MB, SUB, C)                                                          \
    do {                                                                            \
        bsipipe_op_t d_ = {.kind = (K), .pipe = (uint8_t)pipe, .mb = (MB), .sub = (SUB), \
                           .chunk = (C), .peer = -1, .channel = -1};                \
        d_.device = schedule_dev(s, pipe, (C));                                     \
        out[n++] = d_;                                                              \
    } while (0)
    switch (op->kind) {
    case BSIPIPE_OP_F:
        if (op->chunk > 0) DEP(BSIPIPE_OP_F, op->mb, op->sub, op->chunk - 1);
        if (op->sub > 0) DEP(BSIPIPE_OP_F, op->mb, op->sub - 1, op->chunk);
        break;
    case BSIPIPE_OP_B:
        DEP(BSIPIPE_OP_F, op->mb, op->sub, op->chunk);
        if (op->chunk < last) DEP(BSIPIPE_OP_B, op->mb, op->sub, op->chunk + 1);
        if (op->sub < s->pc.k - 1) DEP(BSIPIPE_OP_B, op->mb, op->sub + 1, op->chunk);
        break;
    case BSIPIPE_OP_W:
        DEP(BSIPIPE_OP_B, op->mb, op->sub, op->chunk);
        break;
    default:
        break;
    }
#undef DEP
    return n;
}

/* Placement: (pipe, chunk) -> device. */
static void place_chunks(bsipipe_schedule_t *s)
{
    for (int pipe = 0; pipe < s->n_pipes; pipe++)
        for (int c = 0; c < s->n_chunks; c++)
            s->chunk_dev[pipe * s->n_chunks + c] = bsipipe_parallel_config_chunk_device(&s->pc, pipe, c);
}

/* Gradient sync of every chunk replica (bidirectional schedules), in chunk
 * order on every device so that pairs meet in the same order, then STEP. */
int schedule_append_sync_step(bsipipe_schedule_t *s)
{
    int rc = 0;
    for (int d = 0; d < s->n_devices && rc == 0; d++) {
        if (s->n_pipes == 2)
            for (int c = 0; c < s->n_chunks && rc == 0; c++)
                for (int pipe = 0; pipe < 2 && rc == 0; pipe++) {
                    if (schedule_dev(s, pipe, c) != d)
                        continue;
                    int other = schedule_dev(s, 1 - pipe, c);
                    /* A device holding both replicas syncs once, locally. */
                    if (other == d && pipe == 1)
                        continue;
                    bsipipe_op_t op = {.kind = BSIPIPE_OP_SYNC, .pipe = (uint8_t)pipe, .device = d,
                                       .mb = -1, .sub = -1, .chunk = c, .peer = other, .channel = -1};
                    rc = schedule_push(s, &op);
                }
        bsipipe_op_t step = {.kind = BSIPIPE_OP_STEP, .device = d, .mb = -1, .sub = -1,
                             .chunk = -1, .peer = -1, .channel = -1};
        if (rc == 0)
            rc = schedule_push(s, &step);
    }
    return rc;
}

void bsipipe_schedule_destroy(bsipipe_schedule_t *s)
{
    if (!s)
        return;
    for (int d = 0; s->ops && d < s->n_devices; d++)
        free(s->ops[d]);
    free(s->ops);
    free(s->n_ops);
    free(s->cap_ops);
    free(s->chunk_dev);
    free(s->sub_starts);
    free(s->layer_starts);
    free(s->layout);
    free(s);
}

/* Compute makespan of the current op lists under unit costs, or -1. */
static double unit_makespan(const bsipipe_schedule_t *s, double *end)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (schedule_compute_timeline(s, &unit, end) < 0)
        return -1;
    double m = 0;
    for (long i = 0; i < compute_index_count(s); i++)
        if (end[i] > m)
            m = end[i];
    return m;
}

/* Candidate sub-unit sizes for BSIPipe's list schedule, best first by what
 * the sweep of docs/schedules.md found (about w/4 subsequences per pipe):
 * 0 (the whole basic unit) first, then w/4 rounded, then sizes from a
 * geometric ladder in order of their distance from w/4. Writes up to max
 * of them; returns how many. */
static int subunit_candidates(const bsipipe_schedule_t *s, int *out, int max)
{
    static const int ladder[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
    int n_ladder = (int)(sizeof ladder / sizeof ladder[0]), whole = (schedule_mb_group(s) + 1) / 2 * s->pc.k;
    double target = s->pc.w / 4.0 > 1 ? s->pc.w / 4.0 : 1;
    int n = 0, used[sizeof ladder / sizeof ladder[0]] = {0}, exact = (int)lround(target), in_ladder = 0;
    for (int i = 0; i < n_ladder; i++)
        in_ladder |= ladder[i] == exact;
    out[n++] = 0;
    if (!in_ladder && exact < whole)
        out[n++] = exact; /* w/4 itself where the ladder skips it (w = 44: 11, 1.01x the bound without) */
    while (n < max) {
        int best = -1;
        double best_dist = 0;
        for (int i = 0; i < n_ladder; i++) {
            if (used[i] || ladder[i] >= whole)
                continue;
            double dist = fabs(log(ladder[i] / target));
            if (best < 0 || dist < best_dist) {
                best = i;
                best_dist = dist;
            }
        }
        if (best < 0)
            break;
        used[best] = 1;
        out[n++] = ladder[best];
    }
    return n;
}

/* Compute ops BSIPipe's construction may place over all its candidates: the
 * largest plans (millions of ops) try fewer sub-unit sizes. */
enum { CONSTRUCTION_BUDGET = 24 << 20 };

/* Most subsequence-chunks one device of s holds at once: forwards started
 * minus backwards run, over each device's order (a device runs one op at a
 * time, so its order is its timeline). */
static int peak_live(const bsipipe_schedule_t *s)
{
    int peak = 0;
    for (int d = 0; d < s->n_devices; d++) {
        int live = 0;
        for (int j = 0; j < s->n_ops[d]; j++) {
            live += s->ops[d][j].kind == BSIPIPE_OP_F ? 1 : s->ops[d][j].kind == BSIPIPE_OP_B ? -1 : 0;
            if (live > peak)
                peak = live;
        }
    }
    return peak;
}

/* Within this share of the shortest candidate's makespan, a candidate
 * holding fewer activations wins: the sub-unit sizes often tie or nearly
 * tie in time and differ up to 4x in memory (paper preset, k = 16: 512
 * subsequence-chunks at the shortest span, 172 at 0.016% longer). */
#define CONSTRUCTION_TIME_TIE 0.001
/* Candidates carried to the optimising pass (each optimised in full). */
#define CONSTRUCTION_SHORTLIST 4
/* A candidate's code: a sub-unit size for gen_greedy.c (0: the whole
 * basic unit), or BITPIPE_CODE for BitPipe's order. */
#define BITPIPE_CODE (-1)

static int build_candidate(bsipipe_schedule_t *s, int code)
{
    return code == BITPIPE_CODE ? generate_bitpipe(s) : generate_greedy(s, code);
}

/* BSIPipe's candidate orders: the list schedule of gen_greedy.c for each
 * candidate sub-unit size (at k = 1 with even w also BitPipe's order), each
 * built once in scratch lists and timed under unit costs. Those within
 * CONSTRUCTION_TIME_TIE of the shortest go to code[0..*n) (at most max),
 * fewest activations first, then shortest, then in candidate order, and
 * the first shortest among them in any case. All hold one basic unit of
 * activations at most. Deterministic. */
static int bsipipe_shortlist(bsipipe_schedule_t *s, int *code, int max, int *n)
{
    int W = s->n_devices, cand[24], n_cand = subunit_candidates(s, cand, 24), rc = 0, n_tried = 0;
    int codes[25], peak[25];
    double span[25];
    bsipipe_schedule_t alt = *s;
    alt.ops = calloc((size_t)W, sizeof *alt.ops);
    alt.n_ops = calloc((size_t)W, sizeof(int));
    alt.cap_ops = calloc((size_t)W, sizeof(int));
    double *end = malloc(sizeof(double) * (size_t)compute_index_count(s));
    if (!alt.ops || !alt.n_ops || !alt.cap_ops || !end)
        rc = bsipipe_error_set(-ENOMEM, "out of memory");
    int bitpipe = s->pc.k == 1 && s->pc.w % 2 == 0 && s->pc.m % s->pc.w == 0 && schedule_mb_group(s) == s->pc.w;
    long placed = 0, per_plan = 2L * compute_index_count(s) / 3; /* F and B */
    for (int i = 0; rc == 0 && i < n_cand + bitpipe; i++) {
        if (i > 0 && placed + per_plan > CONSTRUCTION_BUDGET)
            break;
        for (int d = 0; d < W; d++)
            alt.n_ops[d] = 0;
        codes[i] = i < n_cand ? cand[i] : BITPIPE_CODE;
        if ((rc = build_candidate(&alt, codes[i])) < 0)
            break;
        placed += per_plan;
        span[i] = unit_makespan(&alt, end);
        peak[i] = peak_live(&alt);
        n_tried = i + 1;
    }
    double shortest = -1;
    int first_shortest = -1;
    for (int i = 0; i < n_tried; i++)
        if (span[i] >= 0 && (shortest < 0 || span[i] < shortest)) {
            shortest = span[i];
            first_shortest = i;
        }
    *n = 0;
    while (rc == 0 && *n < max) { /* selection by (peak, span, order) among the near-shortest */
        int best = -1;
        for (int i = 0; i < n_tried; i++)
            if (span[i] >= 0 && span[i] <= shortest * (1 + CONSTRUCTION_TIME_TIE) &&
                (best < 0 || peak[i] < peak[best] || (peak[i] == peak[best] && span[i] < span[best])))
                best = i;
        if (best < 0)
            break;
        code[(*n)++] = codes[best];
        span[best] = -1; /* taken */
    }
    /* The shortest always goes on (the last place, if the leaner ones filled
     * them): the optimising pass may take it further than any leaner one. */
    if (rc == 0 && first_shortest >= 0 && span[first_shortest] >= 0)
        code[*n < max ? (*n)++ : max - 1] = codes[first_shortest];
    if (rc == 0 && *n == 0) { /* no timeline (cannot happen for a valid plan): the first, as constructed */
        code[0] = codes[0];
        *n = 1;
    }
    for (int d = 0; alt.ops && d < W; d++)
        free(alt.ops[d]);
    free(alt.ops);
    free(alt.n_ops);
    free(alt.cap_ops);
    free(end);
    return rc;
}

/* BSIPipe's plan: with the optimising pass off, the first of the
 * shortlist; with it on, each shortlisted order optimised in full and, of
 * those within CONSTRUCTION_TIME_TIE of the shortest optimised plan and
 * neither longer nor holding more than the first as constructed, the one
 * holding fewest activations (the pass keeps every device within its
 * constructed peak, so a leaner construction can end longer). *io is
 * replaced by the plan kept. */
static int generate_bsipipe(bsipipe_schedule_t **io)
{
    bsipipe_schedule_t *s = *io;
    int code[CONSTRUCTION_SHORTLIST], n = 0, rc = bsipipe_shortlist(s, code, CONSTRUCTION_SHORTLIST, &n);
    if (rc == 0)
        rc = build_candidate(s, code[0]);
    if (rc < 0 || !s->pc.optimise)
        return rc;
    bsipipe_optimise_report_t got[CONSTRUCTION_SHORTLIST]; /* each plan's optimised makespan and peak */
    if ((rc = schedule_optimise(s, NULL, 0, &got[0])) < 0 || n == 1)
        return rc;
    bsipipe_schedule_t *plan[CONSTRUCTION_SHORTLIST] = {s};
    int built = 1, best = -1;
    for (; rc == 0 && built < n; built++)
        if ((rc = schedule_alloc(&s->pc, &s->dims, &plan[built])) == 0 &&
            (rc = build_candidate(plan[built], code[built])) == 0)
            rc = schedule_optimise(plan[built], NULL, 0, &got[built]);
    /* Only plans no longer and no fatter than the order --no-optimise
     * gives (the first, as constructed) may be kept: the first optimised
     * always is (the pass never lengthens a plan nor raises a peak), a
     * leaner one within the time tie could end a unit longer (w = 19,
     * m = 114, k = 2), a shorter one hold more (w = 16, m = 32, k = 1). */
    double limit = got[0].makespan_before;
    int admissible[CONSTRUCTION_SHORTLIST];
    for (int i = 0; i < built; i++)
        admissible[i] = i == 0 || (got[i].makespan_after <= limit && got[i].peak_units_after <= got[0].peak_units_before);
    double shortest = got[0].makespan_after;
    for (int i = 1; rc == 0 && i < built; i++)
        if (admissible[i] && got[i].makespan_after < shortest)
            shortest = got[i].makespan_after;
    for (int i = 0; rc == 0 && i < built; i++) /* the leanest near the shortest; the shortlist's order on ties */
        if (admissible[i] && got[i].makespan_after <= shortest * (1 + CONSTRUCTION_TIME_TIE) &&
            (best < 0 || got[i].peak_units_after < got[best].peak_units_after))
            best = i;
    if (best < 0)
        best = 0; /* an error: the first */
    for (int i = 0; i < built; i++)
        if (i != best)
            bsipipe_schedule_destroy(plan[i]);
    *io = plan[best]; /* on an error: the first (s), the others freed */
    return rc;
}

/* How a bidirectional schedule groups its micro-batches between the pipes
 * (schedule_mb_pipe): groups of w, or 2w when w is odd so that both pipes
 * get the same number; all m when m is not a multiple of that. BSIPipe
 * differs twice. With odd w and k >= 2 it runs groups of w, (w+1)/2 down
 * and (w-1)/2 up alternating (one basic unit of memory). At k = 1 with m a
 * multiple of w, two or more units, it runs groups of 2w (two units of
 * memory; an odd number of units of even w ends with a group of w, half
 * down, half up): with one unit each k = 1 junction costs idle time and the
 * bubble stays near 7-10% whatever N_s; with two it falls under the paper's
 * bound (docs/schedules.md). */
static void mb_grouping(const bsipipe_parallel_config_t *pc, int *group, int *alternate)
{
    int bsi = pc->schedule == BSIPIPE_SCHED_BSIPIPE, pairs = pc->m % (2 * pc->w) == 0;
    *alternate = bsi && pc->w % 2 && pc->k >= 2 && pairs;
    int k1_pairs = bsi && pc->k == 1 && pc->m >= 2 * pc->w;
    *group = (pc->w % 2 && !*alternate) || k1_pairs ? 2 * pc->w : pc->w;
    if (bsi && pc->k == 1 && pc->m > pc->w && pc->m < 2 * pc->w)
        *group = pc->m;
    /* Else one group of m; not for k1_pairs (an odd number of units ends
     * with a group of w), bsipipe or bitpipe (a last partial group). */
    if ((pc->m % *group && !k1_pairs && !bsi && pc->schedule != BSIPIPE_SCHED_BITPIPE) ||
        pc->schedule == BSIPIPE_SCHED_DUALPIPE) /* DeepSeek's: the first half of the batch down, the rest up */
        *group = pc->m;
}

/* The layer boundaries of pc's layout over s's model; an explicit layout
 * is kept as its canonical string (an "auto" one resolved), so that the
 * plan written out and read back places the same layers. */
static int place_layers(bsipipe_schedule_t *s, const bsipipe_parallel_config_t *pc)
{
    int C = s->n_chunks, *counts = s->layer_starts + 1; /* counts, then summed in place */
    int rc = bsipipe_parallel_config_layers(pc, &s->dims, counts);
    if (rc < 0)
        return rc;
    if (pc->layout) {
        size_t len = (size_t)C * 16 + 16;
        if (!(s->layout = malloc(len)) || !bsipipe_layout_format(counts, C, s->layout, len))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        s->pc.layout = s->layout;
    }
    s->layer_starts[0] = 0;
    for (int c = 1; c <= C; c++)
        s->layer_starts[c] += s->layer_starts[c - 1];
    return 0;
}

/* Ops per iteration must stay addressable by int per device. */
enum { MAX_COMPUTE_OPS = 1 << 26 };

int schedule_alloc(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out)
{
    *out = NULL;
    int align, rc = bsipipe_parallel_config_validate(pc, dims);
    if (rc < 0)
        return rc;
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(pc->schedule);
    long compute_ops = 3L * pc->m * pc->k * pc->p * pc->w;
    if (compute_ops > MAX_COMPUTE_OPS)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "plan too large: %ld compute ops (m*k*p*w*3) exceeds %d; reduce m, k or w",
            compute_ops, MAX_COMPUTE_OPS);

    bsipipe_schedule_t *s = calloc(1, sizeof *s);
    if (!s)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    s->pc = *pc;
    mb_grouping(pc, &s->mb_group, &s->mb_alternate);
    if (dims) {
        s->dims = *dims;
    } else { /* a nominal model: one layer per chunk, k tokens per piece, a head per TP rank */
        s->dims = (bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, pc->p * pc->w, 64 * pc->tp, pc->tp, 256, 256,
                                         pc->k * pc->tp};
    }
    s->n_devices = pc->w;
    s->n_pipes = t.bidirectional ? 2 : 1;
    s->n_chunks = pc->p * pc->w;
    s->chunk_dev = malloc(sizeof(int) * (size_t)(s->n_pipes * s->n_chunks));
    s->sub_starts = malloc(sizeof(int) * (size_t)(pc->k + 1));
    s->layer_starts = malloc(sizeof(int) * (size_t)(s->n_chunks + 1));
    s->n_ops = calloc((size_t)s->n_devices, sizeof(int));
    s->cap_ops = calloc((size_t)s->n_devices, sizeof(int));
    s->ops = calloc((size_t)s->n_devices, sizeof *s->ops);
    if (!s->chunk_dev || !s->sub_starts || !s->layer_starts || !s->n_ops || !s->cap_ops || !s->ops) {
        bsipipe_schedule_destroy(s);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    s->pc.layout = NULL; /* the caller's string: replaced by the schedule's own below */
    if ((rc = place_layers(s, pc)) < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    place_chunks(s);
    align = bsipipe_partition_align(s->dims.seq_len, pc->k, pc->tp);
    rc = pc->partition == BSIPIPE_PARTITION_EVEN
             ? bsipipe_partition_even(s->dims.seq_len, pc->k, align, s->sub_starts)
             : bsipipe_partition_balanced(&s->dims, pc->k, align, s->sub_starts);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int bsipipe_schedule_create(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                            bsipipe_schedule_t **out)
{
    bsipipe_schedule_t *s;
    int rc = schedule_alloc(pc, dims, &s);
    *out = NULL;
    if (rc < 0)
        return rc;
    /* BSIPipe's includes the optimising pass; the baselines stay exactly as
     * their references build them. */
    switch (pc->schedule) {
    case BSIPIPE_SCHED_BSIPIPE: rc = generate_bsipipe(&s); break;
    case BSIPIPE_SCHED_BITPIPE: rc = generate_bitpipe(s); break;
    case BSIPIPE_SCHED_ZB_V: case BSIPIPE_SCHED_DUALPIPEV: case BSIPIPE_SCHED_DUALPIPE:
    case BSIPIPE_SCHED_SEQ_ZBV: case BSIPIPE_SCHED_BSIPIPE_ZB: case BSIPIPE_SCHED_ZB_I:
    case BSIPIPE_SCHED_ZB_H2: rc = generate_zb(s); break;
    default: rc = generate_fixed(s); break;
    }
    if (rc == 0)
        rc = comm_insert(s, NULL);
    if (rc == 0)
        rc = schedule_append_sync_step(s);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int bsipipe_schedule_copy(const bsipipe_schedule_t *s, bsipipe_schedule_t **out)
{
    *out = NULL;
    if (!s)
        return bsipipe_error_set(-EINVAL, "schedule copy: no schedule given");
    bsipipe_schedule_t *c;
    int rc = schedule_alloc(&s->pc, &s->dims, &c);
    if (rc < 0)
        return rc;
    /* Same config and model: same placement and partition; the op lists
     * are copied as they are. */
    for (int d = 0; d < s->n_devices; d++) {
        if (s->n_ops[d] == 0)
            continue;
        c->ops[d] = malloc(sizeof *c->ops[d] * (size_t)s->n_ops[d]);
        if (!c->ops[d]) {
            bsipipe_schedule_destroy(c);
            return bsipipe_error_set(-ENOMEM, "out of memory copying a schedule");
        }
        memcpy(c->ops[d], s->ops[d], sizeof *c->ops[d] * (size_t)s->n_ops[d]);
        c->n_ops[d] = c->cap_ops[d] = s->n_ops[d];
    }
    c->n_channels = s->n_channels;
    *out = c;
    return 0;
}

int bsipipe_schedule_reorder_comm(bsipipe_schedule_t *s, bsipipe_comm_order_t order)
{
    return bsipipe_schedule_reorder_comm_for(s, order, NULL);
}

int bsipipe_schedule_reorder_comm_for(bsipipe_schedule_t *s, bsipipe_comm_order_t order,
                                      const struct bsipipe_cost_model *cost)
{
    if ((unsigned)order >= BSIPIPE_COMM_COUNT)
        return bsipipe_error_set(-EINVAL, "unknown comm order %d", (int)order);
    s->pc.comm = order;
    int rc = comm_insert(s, cost);
    return rc < 0 ? rc : schedule_append_sync_step(s);
}

int bsipipe_schedule_optimise(bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost, int budget,
                              bsipipe_optimise_report_t *report)
{
    if (budget < 0)
        return bsipipe_error_set(-EINVAL, "optimising pass: the memory budget must be >= 0 (got %d)", budget);
    int rc = schedule_optimise(s, cost, budget, report);
    if (rc == 0)
        rc = comm_insert(s, cost);
    return rc < 0 ? rc : schedule_append_sync_step(s);
}

const bsipipe_parallel_config_t *bsipipe_schedule_config(const bsipipe_schedule_t *s) { return &s->pc; }
const bsipipe_model_dims_t *bsipipe_schedule_model(const bsipipe_schedule_t *s) { return &s->dims; }
int bsipipe_schedule_n_devices(const bsipipe_schedule_t *s) { return s->n_devices; }
int bsipipe_schedule_n_pipes(const bsipipe_schedule_t *s) { return s->n_pipes; }
int bsipipe_schedule_n_chunks(const bsipipe_schedule_t *s) { return s->n_chunks; }
int bsipipe_schedule_n_channels(const bsipipe_schedule_t *s) { return s->n_channels; }
const int *bsipipe_schedule_sub_starts(const bsipipe_schedule_t *s) { return s->sub_starts; }

bsipipe_pipe_t bsipipe_schedule_mb_pipe(const bsipipe_schedule_t *s, int mb)
{
    return (bsipipe_pipe_t)schedule_mb_pipe(s, mb);
}

int bsipipe_schedule_op_inputs(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3])
{
    return s && op && out && op->kind <= BSIPIPE_OP_W ? compute_deps(s, op, out) : 0;
}

int bsipipe_schedule_chunk_device(const bsipipe_schedule_t *s, bsipipe_pipe_t pipe, int chunk)
{
    if ((int)pipe >= s->n_pipes || chunk < 0 || chunk >= s->n_chunks)
        return -EINVAL;
    return schedule_dev(s, pipe, chunk);
}

void bsipipe_schedule_chunk_layers(const bsipipe_schedule_t *s, int chunk, int *first, int *last)
{
    *first = s->layer_starts[chunk];
    *last = s->layer_starts[chunk + 1];
}

const bsipipe_op_t *bsipipe_schedule_device_ops(const bsipipe_schedule_t *s, int device, int *n_ops)
{
    if (device < 0 || device >= s->n_devices) {
        *n_ops = 0;
        return NULL;
    }
    *n_ops = s->n_ops[device];
    return s->ops[device];
}

long bsipipe_schedule_n_ops(const bsipipe_schedule_t *s)
{
    long n = 0;
    for (int d = 0; d < s->n_devices; d++)
        n += s->n_ops[d];
    return n;
}
