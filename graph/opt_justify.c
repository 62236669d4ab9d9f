/* opt_justify.c: the optimising pass. Starting from a built plan it may only
 * lower the makespan of the compute ops under a cost model, within a
 * per-device activation budget; the construction's rules (one op list per
 * device, every dependency, stream orders implied by the data) still hold
 * because the result is just another valid order of the same ops.
 *
 * Method: forward-backward improvement ("double justification", Valls,
 * Ballestin and Quintanilla, EJOR 2005), the standard cheap improver of
 * list schedules. A serial schedule-generation scheme places ops one by one
 * at the earliest time their inputs allow, inserting into any idle gap of
 * their device. Right-justify: place ops in decreasing end time on the
 * reversed graph; left-justify: place them in increasing start time of that
 * result. Each pass keeps every op no later than before (ops are placed in
 * an order their last positions already satisfied), so the makespan never
 * rises; passes repeat while it falls.
 *
 * Memory stays within budget through precedence edges, re-derived before
 * every pass: on each device, the j-th forward (by start) waits for the
 * (j - cap)-th release of a stash (B, or W when split; by end). Any schedule
 * that honours these edges holds at most `cap` stashes at a time (each
 * started forward beyond the first cap has its own distinct release done).
 *
 * Once the rounds stop helping, an iterated local search (Lourenco, Martin
 * and Stuetzle's ILS) kicks the schedule out of its local optimum: one to
 * three pairs of neighbouring ops of one device swap places, the plan is
 * rebuilt as the list schedule of that order and justified again, and the result is kept when it is no longer
 * than the best. The kicks come from a fixed seed, so every process that
 * builds the same plan (StarPU-MPI ranks) gets the same one; their number
 * is bounded by a budget of op placements, so large plans get few. */
#define _GNU_SOURCE /* qsort_r */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gap { double start, end; } gap_t;

typedef struct gaps {
    gap_t *g;
    int n, cap;
} gaps_t;

typedef struct justify {
    const bsipipe_schedule_t *s;
    int n;                 /* compute ops */
    int *dev;              /* per op */
    double *dur;
    bsipipe_op_t *op;      /* copies of the ops */
    int *pred_off, *pred;  /* data dependencies (CSR) */
    int *succ_off, *succ;  /* their reverse */
    int *mem_pred;         /* memory edge into a forward: the release it waits for, -1 */
    int *mem_succ;         /* its reverse: the forward a release unblocks, -1 */
    int *cap;              /* stash budget per device */
    double *start, *end;   /* current schedule */
    double *t0, *t1;       /* scratch schedule */
    int *order;            /* scratch */
    gaps_t *gaps;          /* per device */
    double eps;
    /* Byte budget (budget 0): no device above the activation bytes it held. */
    double *byte_cap;      /* per device, or NULL */
    double bytes_per_element;
    int *dev_off, *dev_idx; /* ops of each device (CSR) */
    bsipipe_op_t *scratch_op;
    double *scratch_s, *scratch_e;
} justify_t;

static int releases_stash(const justify_t *j, int i)
{
    int split = bsipipe_schedule_kind_traits(j->s->pc.schedule).split_backward;
    return j->op[i].kind == (split ? BSIPIPE_OP_W : BSIPIPE_OP_B);
}

/* ---- idle gaps of one device ------------------------------------------- */

static void gaps_reset(gaps_t *g)
{
    g->n = 1;
    g->g[0] = (gap_t){0, INFINITY};
}

/* Earliest start >= t of a gap holding dur; the gap is split. */
static double gaps_take(gaps_t *g, double t, double dur, double eps)
{
    int lo = 0, hi = g->n - 1;
    while (lo < hi) { /* first gap ending after t */
        int mid = (lo + hi) / 2;
        if (g->g[mid].end > t + eps) hi = mid; else lo = mid + 1;
    }
    int i = lo;
    double s;
    for (;; i++) {
        s = g->g[i].start > t ? g->g[i].start : t;
        if (g->g[i].end - s >= dur - eps)
            break;
    }
    gap_t old = g->g[i];
    int keep_left = s - old.start > eps, keep_right = old.end - (s + dur) > eps;
    if (keep_left && keep_right) { /* one gap becomes two (capacity reserved by caller) */
        memmove(&g->g[i + 2], &g->g[i + 1], sizeof(gap_t) * (size_t)(g->n - i - 1));
        g->g[i] = (gap_t){old.start, s};
        g->g[i + 1] = (gap_t){s + dur, old.end};
        g->n++;
    } else if (keep_left) {
        g->g[i].end = s;
    } else if (keep_right) {
        g->g[i].start = s + dur;
    } else {
        memmove(&g->g[i], &g->g[i + 1], sizeof(gap_t) * (size_t)(g->n - i - 1));
        g->n--;
    }
    return s;
}

/* ---- memory edges -------------------------------------------------------- */

/* Sorts op indices by key, ties by index. qsort_r: plans may be built by
 * several threads at once (no comparator state in a global). */
static int cmp_by_key(const void *a, const void *b, void *arg)
{
    const double *key = arg;
    int x = *(const int *)a, y = *(const int *)b;
    if (key[x] != key[y]) return key[x] < key[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void sort_ops(int *ix, int n, const double *key)
{
    qsort_r(ix, (size_t)n, sizeof *ix, cmp_by_key, (void *)key);
}

/* Edges from the current schedule: on each device the forward of rank r
 * (by start) waits for the release of rank r - cap (by end). */
static void derive_mem_edges(justify_t *j)
{
    int *fw = j->order, nf;
    for (int i = 0; i < j->n; i++)
        j->mem_pred[i] = j->mem_succ[i] = -1;
    for (int d = 0; d < j->s->n_devices; d++) {
        nf = 0;
        for (int i = 0; i < j->n; i++)
            if (j->dev[i] == d && j->op[i].kind == BSIPIPE_OP_F)
                fw[nf++] = i;
        int *rel = fw + nf, nr = 0;
        for (int i = 0; i < j->n; i++)
            if (j->dev[i] == d && releases_stash(j, i))
                rel[nr++] = i;
        sort_ops(fw, nf, j->start);
        sort_ops(rel, nr, j->end);
        for (int r = j->cap[d]; r < nf && r - j->cap[d] < nr; r++) {
            j->mem_pred[fw[r]] = rel[r - j->cap[d]];
            j->mem_succ[rel[r - j->cap[d]]] = fw[r];
        }
    }
}


/* Peak activation bytes of device d under the times (start, end), and its
 * peak stash count in *peak_units (may be NULL): the simulator's accounting.
 * -1 on out of memory. */
static double device_memory(const justify_t *j, int d, const double *start, const double *end, int *peak_units)
{
    int n = 0;
    for (int x = j->dev_off[d]; x < j->dev_off[d + 1]; x++, n++) {
        int i = j->dev_idx[x];
        j->scratch_op[n] = j->op[i];
        j->scratch_s[n] = start[i];
        j->scratch_e[n] = end[i];
    }
    int units;
    double bytes;
    if (schedule_peak_memory(j->s, j->bytes_per_element, j->scratch_op, j->scratch_s, j->scratch_e, n, &units,
                             &bytes) < 0)
        return -1;
    if (peak_units)
        *peak_units = units;
    return bytes;
}

/* Whether a schedule keeps every device within its byte budget. */
static int bytes_ok(const justify_t *j, const double *start, const double *end)
{
    if (!j->byte_cap)
        return 1;
    for (int d = 0; d < j->s->n_devices; d++) {
        double b = device_memory(j, d, start, end, NULL);
        if (b < 0 || b > j->byte_cap[d] * (1 + 1e-12))
            return 0;
    }
    return 1;
}

/* ---- one serial pass ----------------------------------------------------- */

/* Places every op in `order` (a list its predecessors precede) at the
 * earliest gap of its device after its inputs. reversed: successors are the
 * inputs. Writes ts/te; returns the makespan, or -1 if the order is not
 * topological (an internal error). */
static double serial_pass(justify_t *j, const int *order, int reversed, double *ts, double *te)
{
    for (int d = 0; d < j->s->n_devices; d++)
        gaps_reset(&j->gaps[d]);
    for (int i = 0; i < j->n; i++)
        te[i] = -1;
    double makespan = 0;
    for (int a = 0; a < j->n; a++) {
        int i = order[a];
        const int *in = reversed ? j->succ : j->pred;
        const int *off = reversed ? j->succ_off : j->pred_off;
        int mem = reversed ? j->mem_succ[i] : j->mem_pred[i];
        double t = 0;
        for (int e = off[i]; e < off[i + 1]; e++) {
            if (te[in[e]] < 0) return -1;
            if (te[in[e]] > t) t = te[in[e]];
        }
        if (mem >= 0) {
            if (te[mem] < 0) return -1;
            if (te[mem] > t) t = te[mem];
        }
        ts[i] = gaps_take(&j->gaps[j->dev[i]], t, j->dur[i], j->eps);
        te[i] = ts[i] + j->dur[i];
        if (te[i] > makespan) makespan = te[i];
    }
    return makespan;
}

/* One right-justify + left-justify round. The schedule is replaced only
 * when the new one is shorter and within the byte budget; returns the
 * makespan of the schedule held afterwards, or -1 on internal error. */
static double justify_round(justify_t *j, double makespan)
{
    int *order = j->order;
    /* Right: decreasing end, on the reversed graph. */
    derive_mem_edges(j);
    for (int i = 0; i < j->n; i++) {
        order[i] = i;
        j->t0[i] = -j->end[i];
    }
    sort_ops(order, j->n, j->t0);
    double *rs = malloc(sizeof(double) * (size_t)j->n * 2);
    if (!rs)
        return -2;
    double *re = rs + j->n;
    double h = serial_pass(j, order, 1, rs, re);
    if (h < 0) { free(rs); return -1; }
    /* Back to forward time: the right-justified schedule (same makespan or less). */
    double *sv_start = j->start, *sv_end = j->end;
    double *rstart = j->t0, *rend = j->t1;
    for (int i = 0; i < j->n; i++) {
        rstart[i] = h - re[i];
        rend[i] = h - rs[i];
    }
    /* Left: increasing start of the right-justified schedule, with memory
     * edges derived from it. */
    j->start = rstart;
    j->end = rend;
    derive_mem_edges(j);
    for (int i = 0; i < j->n; i++)
        order[i] = i;
    sort_ops(order, j->n, rstart);
    double m = serial_pass(j, order, 0, rs, re);
    j->start = sv_start;
    j->end = sv_end;
    double held = makespan;
    if (m >= 0 && m < makespan - j->eps && bytes_ok(j, rs, re)) {
        memcpy(j->start, rs, sizeof(double) * (size_t)j->n);
        memcpy(j->end, re, sizeof(double) * (size_t)j->n);
        held = m;
    }
    free(rs);
    return m < 0 ? -1 : held;
}

/* Justification rounds while the makespan falls; returns it, or < 0 on an
 * internal error (-2: out of memory). */
static double descend(justify_t *j, double makespan, int *passes)
{
    for (int r = 0; r < 64; r++) {
        double m = justify_round(j, makespan);
        if (m < 0)
            return m;
        (*passes)++;
        if (!(m < makespan - j->eps))
            break;
        makespan = m;
    }
    return makespan;
}

static uint64_t rng_next(uint64_t *x) /* xorshift64* */
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1DULL;
}

/* Scratch of the local search. */
typedef struct kick {
    int *perm, *dev_ops, *off, *pos;
    double *key, *cand_s, *cand_e, *keep_s, *keep_e;
} kick_t;

static int depends_on(const justify_t *j, int b, int a)
{
    for (int e = j->pred_off[b]; e < j->pred_off[b + 1]; e++)
        if (j->pred[e] == a)
            return 1;
    return j->mem_pred[b] == a;
}

/* Runs every device's ops in the order of `key` (per device), each as early
 * as its inputs (data and memory edges) and its device allow: the list
 * schedule of that order. Writes ts/te; returns the makespan, or -1 when the
 * order cannot finish (an op waits for one queued behind it). */
static double list_pass(justify_t *j, kick_t *k, const double *key, double *ts, double *te)
{
    int W = j->s->n_devices, n = j->n;
    for (int i = 0; i < n; i++)
        k->perm[i] = i;
    sort_ops(k->perm, n, key);
    /* Bucket by device, keeping the key order: dev_ops[off[d] .. off[d+1]). */
    int *off = k->off, *pos = k->pos;
    for (int d = 0; d <= W; d++)
        off[d] = 0;
    for (int i = 0; i < n; i++)
        off[j->dev[i] + 1]++;
    for (int d = 0; d < W; d++)
        off[d + 1] += off[d];
    for (int d = 0; d < W; d++)
        pos[d] = off[d];
    for (int a = 0; a < n; a++)
        k->dev_ops[pos[j->dev[k->perm[a]]]++] = k->perm[a];
    for (int d = 0; d < W; d++)
        pos[d] = off[d];
    for (int i = 0; i < n; i++)
        te[i] = -1;
    double makespan = 0;
    int placed = 0, progress = 1;
    while (progress) {
        progress = 0;
        for (int d = 0; d < W; d++) {
            double free_at = pos[d] > off[d] ? te[k->dev_ops[pos[d] - 1]] : 0;
            while (pos[d] < off[d + 1]) {
                int i = k->dev_ops[pos[d]];
                double t = free_at;
                int ready = 1;
                for (int e = j->pred_off[i]; e < j->pred_off[i + 1] && ready; e++) {
                    double pe = te[j->pred[e]];
                    if (pe < 0) ready = 0; else if (pe > t) t = pe;
                }
                int m = j->mem_pred[i];
                if (ready && m >= 0) {
                    if (te[m] < 0) ready = 0; else if (te[m] > t) t = te[m];
                }
                if (!ready)
                    break;
                ts[i] = t;
                te[i] = free_at = t + j->dur[i];
                if (te[i] > makespan) makespan = te[i];
                pos[d]++;
                placed++;
                progress = 1;
            }
        }
    }
    return placed == n ? makespan : -1;
}

/* One kick: swap two neighbours of a random device, rebuild, justify.
 * Keeps the result when no longer than `makespan`; returns the makespan
 * now held (< 0 on an internal error). */
static double kick_once(justify_t *j, kick_t *k, uint64_t *rng, double makespan, int *passes)
{
    int W = j->s->n_devices, n = j->n;
    derive_mem_edges(j);
    int d = (int)(rng_next(rng) % (uint64_t)W), cnt = 0;
    for (int i = 0; i < n; i++)
        if (j->dev[i] == d)
            k->dev_ops[cnt++] = i;
    if (cnt < 2)
        return makespan;
    sort_ops(k->dev_ops, cnt, j->start);
    for (int i = 0; i < n; i++)
        k->key[i] = j->start[i];
    /* One to three swaps of neighbours that do not feed each other. */
    int swaps = 1 + (int)(rng_next(rng) % 3), done = 0;
    for (int tries = 0; tries < 16 && done < swaps; tries++) {
        int i = (int)(rng_next(rng) % (uint64_t)(cnt - 1));
        int a = k->dev_ops[i], b = k->dev_ops[i + 1];
        if (depends_on(j, b, a))
            continue;
        double t = k->key[a];
        k->key[a] = k->key[b];
        k->key[b] = t;
        k->dev_ops[i] = b;
        k->dev_ops[i + 1] = a;
        done++;
    }
    if (!done)
        return makespan;
    /* Memory edges for the new order: forwards ranked by their new keys. */
    double *held = j->start;
    j->start = k->key;
    derive_mem_edges(j);
    j->start = held;
    /* The list schedule of the new order (not an insertion pass, which would
     * let the swapped ops fall back into their old places). */
    double m = list_pass(j, k, k->key, k->cand_s, k->cand_e);
    if (m < 0 || !bytes_ok(j, k->cand_s, k->cand_e))
        return makespan; /* the swap broke an order some input needs, or holds more: no kick */
    memcpy(k->keep_s, j->start, sizeof(double) * (size_t)n);
    memcpy(k->keep_e, j->end, sizeof(double) * (size_t)n);
    memcpy(j->start, k->cand_s, sizeof(double) * (size_t)n);
    memcpy(j->end, k->cand_e, sizeof(double) * (size_t)n);
    m = descend(j, m, passes);
    if (m < 0)
        return m;
    if (m <= makespan + j->eps)
        return m < makespan ? m : makespan;
    memcpy(j->start, k->keep_s, sizeof(double) * (size_t)n);
    memcpy(j->end, k->keep_e, sizeof(double) * (size_t)n);
    return makespan;
}

/* Op placements the local search may spend on one plan (a few tenths of a
 * second); at most KICKS_MAX kicks. */
enum { KICK_BUDGET = 6000000, KICKS_MAX = 600 };

static double local_search(justify_t *j, double makespan, int *passes)
{
    int n = j->n;
    long kicks = KICK_BUDGET / (8L * n);
    if (kicks > KICKS_MAX)
        kicks = KICKS_MAX;
    if (kicks <= 0)
        return makespan;
    kick_t k = {
        .perm = malloc(sizeof(int) * (size_t)n), .dev_ops = malloc(sizeof(int) * (size_t)n),
        .key = malloc(sizeof(double) * (size_t)n), .cand_s = malloc(sizeof(double) * (size_t)n),
        .cand_e = malloc(sizeof(double) * (size_t)n), .keep_s = malloc(sizeof(double) * (size_t)n),
        .keep_e = malloc(sizeof(double) * (size_t)n),
        .off = malloc(sizeof(int) * (size_t)(j->s->n_devices + 1)),
        .pos = malloc(sizeof(int) * (size_t)(j->s->n_devices + 1)),
    };
    const bsipipe_parallel_config_t *pc = &j->s->pc;
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)pc->w << 40) ^ ((uint64_t)pc->k << 20) ^ (uint64_t)pc->m;
    if (k.perm && k.dev_ops && k.key && k.cand_s && k.cand_e && k.keep_s && k.keep_e && k.off && k.pos)
        for (long i = 0; i < kicks && makespan >= 0; i++)
            makespan = kick_once(j, &k, &rng, makespan, passes);
    else
        makespan = -2;
    free(k.perm); free(k.dev_ops); free(k.key); free(k.cand_s); free(k.cand_e); free(k.keep_s); free(k.keep_e);
    free(k.off); free(k.pos);
    return makespan;
}

static void justify_free(justify_t *j)
{
    if (j->gaps)
        for (int d = 0; d < j->s->n_devices; d++)
            free(j->gaps[d].g);
    free(j->gaps);
    free(j->dev); free(j->dur); free(j->op);
    free(j->pred_off); free(j->pred); free(j->succ_off); free(j->succ);
    free(j->mem_pred); free(j->mem_succ); free(j->cap);
    free(j->byte_cap); free(j->dev_off); free(j->dev_idx); free(j->scratch_op); free(j->scratch_s);
    free(j->scratch_e);
    free(j->start); free(j->end); free(j->t0); free(j->t1); free(j->order);
}

int schedule_optimise(bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, int budget,
                      bsipipe_optimise_report_t *report)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (!cost)
        cost = &unit;
    justify_t j = {.s = s};
    int rc = 0, W = s->n_devices;
    long nidx = compute_index_count(s);
    for (int d = 0; d < W; d++)
        for (int i = 0; i < s->n_ops[d]; i++)
            if (s->ops[d][i].kind <= BSIPIPE_OP_W)
                j.n++;
    int n = j.n;
    double *ends = malloc(sizeof(double) * (size_t)nidx);
    int *num = malloc(sizeof(int) * (size_t)nidx);
    j.dev = malloc(sizeof(int) * (size_t)n);
    j.dur = malloc(sizeof(double) * (size_t)n);
    j.op = malloc(sizeof(bsipipe_op_t) * (size_t)n);
    j.pred_off = calloc((size_t)n + 1, sizeof(int));
    j.pred = malloc(sizeof(int) * (size_t)n * 3 + 1);
    j.succ_off = calloc((size_t)n + 2, sizeof(int));
    j.succ = malloc(sizeof(int) * (size_t)n * 3 + 1);
    j.mem_pred = malloc(sizeof(int) * (size_t)n);
    j.mem_succ = malloc(sizeof(int) * (size_t)n);
    j.cap = calloc((size_t)W, sizeof(int));
    j.start = malloc(sizeof(double) * (size_t)n);
    j.end = malloc(sizeof(double) * (size_t)n);
    j.t0 = malloc(sizeof(double) * (size_t)n);
    j.t1 = malloc(sizeof(double) * (size_t)n);
    j.order = malloc(sizeof(int) * (size_t)n * 2 + 1);
    j.gaps = calloc((size_t)W, sizeof(gaps_t));
    j.dev_off = calloc((size_t)W + 1, sizeof(int));
    j.dev_idx = malloc(sizeof(int) * (size_t)n + 1);
    j.scratch_op = malloc(sizeof(bsipipe_op_t) * (size_t)n + 1);
    j.scratch_s = malloc(sizeof(double) * (size_t)n + 1);
    j.scratch_e = malloc(sizeof(double) * (size_t)n + 1);
    j.bytes_per_element = cost->bytes_per_element > 0 ? cost->bytes_per_element : 4;
    if (!ends || !num || !j.dev || !j.dur || !j.op || !j.pred_off || !j.pred || !j.succ_off || !j.succ ||
        !j.mem_pred || !j.mem_succ || !j.cap || !j.start || !j.end || !j.t0 || !j.t1 || !j.order || !j.gaps ||
        !j.dev_off || !j.dev_idx || !j.scratch_op || !j.scratch_s || !j.scratch_e) {
        rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
        goto out;
    }
    /* The input plan's timeline (every op in its device order, as early as
     * its inputs allow): the starting point. */
    if ((rc = schedule_compute_timeline(s, cost, ends)) < 0)
        goto out;
    double dmax = 0;
    int k = 0;
    for (long x = 0; x < nidx; x++)
        num[x] = -1;
    for (int d = 0; d < W; d++) {
        int per_dev = 0;
        for (int i = 0; i < s->n_ops[d]; i++) {
            const bsipipe_op_t *op = &s->ops[d][i];
            if (op->kind > BSIPIPE_OP_W)
                continue;
            j.op[k] = *op;
            j.dev[k] = d;
            j.dur[k] = bsipipe_sim_op_cost(s, cost, op);
            if (j.dur[k] > dmax) dmax = j.dur[k];
            j.end[k] = ends[compute_index(s, op->kind, op->mb, op->sub, op->chunk)];
            j.start[k] = j.end[k] - j.dur[k];
            num[compute_index(s, op->kind, op->mb, op->sub, op->chunk)] = k;
            k++;
            per_dev++;
        }
        j.gaps[d].cap = per_dev + 2; /* a device has at most one gap per op, plus the tail */
        j.gaps[d].g = malloc(sizeof(gap_t) * (size_t)j.gaps[d].cap);
        if (!j.gaps[d].g) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
            goto out;
        }
    }
    j.eps = 1e-9 * (dmax > 0 ? dmax : 1);
    for (int i = 0; i < n; i++)
        if (!(j.dur[i] > 0)) {
            rc = bsipipe_error_set(-EINVAL, "optimising pass: an op costs nothing under this cost model");
            goto out;
        }
    /* Data dependencies as CSR, both ways. */
    for (int i = 0; i < n; i++) {
        bsipipe_op_t deps[3];
        int nd = compute_deps(s, &j.op[i], deps);
        j.pred_off[i + 1] = j.pred_off[i];
        for (int e = 0; e < nd; e++) {
            int p = num[compute_index(s, deps[e].kind, deps[e].mb, deps[e].sub, deps[e].chunk)];
            if (p < 0)
                continue;
            j.pred[j.pred_off[i + 1]++] = p;
            j.succ_off[p + 2]++;
        }
    }
    for (int i = 0; i < n; i++)
        j.succ_off[i + 2] += j.succ_off[i + 1];
    for (int i = 0; i < n; i++)
        for (int e = j.pred_off[i]; e < j.pred_off[i + 1]; e++)
            j.succ[j.succ_off[j.pred[e] + 1]++] = i;

    /* Ops of each device (they were gathered device by device), and the byte
     * budget: with budget 0 no device may hold more activation bytes than in
     * the plan it starts from (unit counts alone would let larger pieces or
     * longer-lived KV caches in). */
    for (int i = 0; i < n; i++) {
        j.dev_off[j.dev[i] + 1]++;
        j.dev_idx[i] = i;
    }
    for (int d = 0; d < W; d++)
        j.dev_off[d + 1] += j.dev_off[d];
    if (budget == 0) {
        j.byte_cap = malloc(sizeof(double) * (size_t)W);
        if (!j.byte_cap) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
            goto out;
        }
        for (int d = 0; d < W; d++)
            if ((j.byte_cap[d] = device_memory(&j, d, j.start, j.end, NULL)) < 0) {
                rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
                goto out;
            }
    }
    double makespan = 0;
    int peak_before = 0;
    for (int i = 0; i < n; i++)
        if (j.end[i] > makespan) makespan = j.end[i];
    for (int d = 0; d < W; d++) {
        int p = 0;
        if (device_memory(&j, d, j.start, j.end, &p) < 0) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
            goto out;
        }
        if (p > peak_before) peak_before = p;
        j.cap[d] = budget > 0 ? (budget > p ? budget : p) : p;
    }
    double before = makespan;
    int passes = 0;
    makespan = descend(&j, makespan, &passes);
    if (makespan >= 0)
        makespan = local_search(&j, makespan, &passes);
    if (makespan == -2) { rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass"); goto out; }
    if (makespan < 0) { rc = bsipipe_error_set(BSIPIPE_EDEPEND, "optimising pass: internal order error"); goto out; }
    int peak_after = 0;
    for (int d = 0; d < W; d++) {
        int p = 0;
        if (device_memory(&j, d, j.start, j.end, &p) < 0) {
            rc = bsipipe_error_set(-ENOMEM, "out of memory in the optimising pass");
            goto out;
        }
        if (p > peak_after) peak_after = p;
    }
    /* Write the compute order back: each device's ops by start time. */
    for (int i = 0; i < n; i++)
        j.order[i] = i;
    sort_ops(j.order, n, j.start);
    for (int d = 0; d < W; d++)
        s->n_ops[d] = 0;
    for (int a = 0; a < n; a++)
        s->ops[j.dev[j.order[a]]][s->n_ops[j.dev[j.order[a]]]++] = j.op[j.order[a]];
    if (report) {
        report->makespan_before = before;
        report->makespan_after = makespan;
        report->passes = passes;
        report->peak_units_before = peak_before;
        report->peak_units_after = peak_after;
    }
out:
    free(ends);
    free(num);
    justify_free(&j);
    return rc;
}
