/* gen_bsipipe.c: BSIPipe's construction search. Each candidate order (the
 * list schedule of gen_greedy.c per sub-unit size, BitPipe's at k = 1) is
 * built and timed under unit costs; a shortlist goes through the optimising
 * pass (opt_justify.c) and the leanest plan near the shortest is kept. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
int generate_bsipipe(bsipipe_schedule_t **io)
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

