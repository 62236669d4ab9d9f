/* test_zero_bubble: the split-backward V schedules under unit costs
 * (F = B = W = 1), swept over w, m and k: every plan validates, and
 *   zb-v, dualpipev : at most (w-1)/(6m+w-1) at k = 1 (m >= 2w-1; dualpipev m >= 2w),
 *   dualpipe        : at most (w/2-1)/(3m+w/2-1) (w even, m even and >= 2w),
 *   seq-zbv         : at most (w-1)/(6N_s+w-1),
 *   zb-h2           : exactly (w-1)/(3m+w-1), the start-up floor (zb-h1's), holding at
 *                     most its 2w-1 stashes per device,
 *   zb-i            : exactly (w-1)/(3pm+w-1), the start-up floor, at m >= w
 *                     (p = 2..4; any m torch's rounds accept plans, m < w too),
 *                     its peak stashes printed against 1f1b-i's,
 *   bsipipe-zb      : the placement's start-up floor, floor((w-1)/2) idle units
 *                     per device, holding no more stashes than bsipipe's plan
 *                     of the same (w, m, k) where that one exists.
 * Prints the worst ratio of each to its bound. BSIPIPE_ZB_SWEEP=full widens
 * the sweep (w up to 32; minutes). */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct run {
    double bubble, makespan;
    int peak; /* most stashes on one device */
} run_t;

/* Plans, validates and simulates pc under unit costs: 0, or the create
 * error (checked by the caller when it expects the config to plan). */
static int plan(bsipipe_parallel_config_t pc, run_t *out)
{
    bsipipe_schedule_t *s;
    int rc = bsipipe_schedule_create(&pc, NULL, &s);
    if (rc)
        return rc;
    rc = bsipipe_schedule_validate(s);
    CHECK(rc == 0, "%s w=%d m=%d k=%d: validate: %s", bsipipe_schedule_kind_name(pc.schedule), pc.w, pc.m, pc.k,
          bsipipe_error_detail());
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r = NULL;
    if (rc == 0)
        rc = bsipipe_simulate(s, &unit, &r);
    CHECK(rc == 0, "%s w=%d m=%d k=%d: simulate: %s", bsipipe_schedule_kind_name(pc.schedule), pc.w, pc.m, pc.k,
          bsipipe_error_detail());
    if (rc == 0) {
        out->bubble = r->bubble_ratio;
        out->makespan = r->makespan;
        out->peak = 0;
        for (int d = 0; d < r->n_devices; d++)
            if (r->device[d].peak_act_units > out->peak)
                out->peak = r->device[d].peak_act_units;
    }
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    return rc;
}

static bsipipe_parallel_config_t config(bsipipe_schedule_kind_t kind, int w, int m, int k)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    pc.k = k;
    return pc;
}

typedef struct worst {
    double ratio; /* bubble / bound, worst seen */
    int w, m, k, plans;
} worst_t;

static void note(worst_t *x, double bubble, double bound, int w, int m, int k)
{
    double ratio = bound > 0 ? bubble / bound : (bubble > 1e-12 ? 1e9 : 0);
    if (x->plans++ == 0 || ratio > x->ratio)
        *x = (worst_t){ratio, w, m, k, x->plans};
}

static void report(const char *name, const char *what, const worst_t *x)
{
    printf("%-11s %5d plans, worst %-42s %.4f (w=%d m=%d k=%d)\n", name, x->plans, what, x->ratio, x->w, x->m,
           x->k);
}

int main(void)
{
    const char *sweep = getenv("BSIPIPE_ZB_SWEEP");
    int full = sweep && !strcmp(sweep, "full");
    int max_w = full ? 32 : 12, max_k = 4;
    worst_t zbv = {0}, dpv = {0}, dp2 = {0}, seq = {0}, bzb = {0}, mem = {0}, zbi = {0}, zbi_mem = {0};
    worst_t zbh2 = {0}, zbh2_mem = {0};
    for (int w = 2; w <= max_w; w++) {
        if (!full && w > 8 && w != 12)
            continue;
        int ms[] = {w, 2 * w - 1, 2 * w, 3 * w, 4 * w + 2};
        for (int mi = 0; mi < 5; mi++) {
            int m = ms[mi];
            run_t r;
            double micro = (w - 1.0) / (6.0 * m + w - 1);
            /* Whole micro-batches: torch's orders. */
            if (plan(config(BSIPIPE_SCHED_ZB_V, w, m, 1), &r) == 0) {
                if (m >= 2 * w - 1) {
                    CHECK(r.bubble <= micro + 1e-12, "zb-v w=%d m=%d: bubble %.6f above (w-1)/(6m+w-1) = %.6f", w,
                          m, r.bubble, micro);
                    note(&zbv, r.bubble, micro, w, m, 1);
                }
            } else {
                CHECK(0, "zb-v w=%d m=%d: %s", w, m, bsipipe_error_detail());
            }
            int rc = plan(config(BSIPIPE_SCHED_DUALPIPEV, w, m, 1), &r);
            CHECK((rc == 0) == (m >= 2 * w), "dualpipev w=%d m=%d: rc %d (%s)", w, m, rc,
                  rc ? bsipipe_error_detail() : "planned");
            if (rc == 0) {
                CHECK(r.bubble <= micro + 1e-12, "dualpipev w=%d m=%d: bubble %.6f above (w-1)/(6m+w-1) = %.6f", w,
                      m, r.bubble, micro);
                note(&dpv, r.bubble, micro, w, m, 1);
            }
            /* zb-h2: ZeroBubble's 2w-1 stashes, at the start-up floor like zb-h1. */
            if (plan(config(BSIPIPE_SCHED_ZB_H2, w, m, 1), &r) == 0) {
                double floor_h = (w - 1.0) / (3.0 * m + w - 1);
                CHECK(fabs(r.bubble - floor_h) < 1e-12, "zb-h2 w=%d m=%d: bubble %.6f, the start-up floor "
                      "(w-1)/(3m+w-1) is %.6f", w, m, r.bubble, floor_h);
                CHECK(r.peak <= 2 * w - 1, "zb-h2 w=%d m=%d: %d stashes on a device, above 2w-1", w, m, r.peak);
                note(&zbh2, r.bubble, floor_h, w, m, 1);
                note(&zbh2_mem, r.peak, 2 * w - 1, w, m, 1);
            } else {
                CHECK(0, "zb-h2 w=%d m=%d: %s", w, m, bsipipe_error_detail());
            }
            /* zb-i: torch's interleaved zero bubble, p chunks per device; m < w as well. */
            for (int p = 2; p <= 4; p++) {
                int ms_i[] = {m, w > 2 ? w - 1 : 1};
                for (int j = 0; j < 2; j++) {
                    bsipipe_parallel_config_t pc = config(BSIPIPE_SCHED_ZB_I, w, ms_i[j], 1);
                    pc.p = p;
                    int mi2 = ms_i[j], ok = mi2 % bsipipe_zb_i_rounds(mi2, w) == 0;
                    int rc = plan(pc, &r);
                    CHECK((rc == 0) == ok, "zb-i w=%d p=%d m=%d: rc %d (%s)", w, p, mi2, rc,
                          rc ? bsipipe_error_detail() : "planned");
                    if (rc || mi2 < w)
                        continue;
                    double floor_i = (w - 1.0) / (3.0 * p * mi2 + w - 1);
                    CHECK(fabs(r.bubble - floor_i) < 1e-12, "zb-i w=%d p=%d m=%d: bubble %.6f, the start-up floor "
                          "(w-1)/(3pm+w-1) is %.6f", w, p, mi2, r.bubble, floor_i);
                    note(&zbi, r.bubble, floor_i, w, mi2, p);
                    run_t base;
                    pc.schedule = BSIPIPE_SCHED_1F1B_I;
                    if (plan(pc, &base) == 0)
                        note(&zbi_mem, r.peak, base.peak, w, mi2, p);
                }
            }
            /* DualPipe: two pipes of m/2 on Chimera's placement, w/2 - 1 idle units. */
            rc = plan(config(BSIPIPE_SCHED_DUALPIPE, w, m, 1), &r);
            CHECK((rc == 0) == (w % 2 == 0 && m % 2 == 0 && m >= 2 * w), "dualpipe w=%d m=%d: rc %d (%s)", w, m, rc,
                  rc ? bsipipe_error_detail() : "planned");
            if (rc == 0) {
                double dp = (w / 2 - 1.0) / (3.0 * m + w / 2 - 1);
                CHECK(r.bubble <= dp + 1e-12, "dualpipe w=%d m=%d: bubble %.6f above (w/2-1)/(3m+w/2-1) = %.6f", w,
                      m, r.bubble, dp);
                note(&dp2, r.bubble, dp, w, m, 1);
            }
            for (int k = 1; k <= max_k; k++) {
                double ns = (double)m * k, half = (w - 1) / 2;
                double seq_bound = (w - 1.0) / (6 * ns + w - 1), floor_bound = half / (6 * ns + half);
                if (plan(config(BSIPIPE_SCHED_SEQ_ZBV, w, m, k), &r) == 0) {
                    CHECK(r.bubble <= seq_bound + 1e-12, "seq-zbv w=%d m=%d k=%d: bubble %.6f above %.6f", w, m, k,
                          r.bubble, seq_bound);
                    note(&seq, r.bubble, seq_bound, w, m, k);
                } else {
                    CHECK(0, "seq-zbv w=%d m=%d k=%d: %s", w, m, k, bsipipe_error_detail());
                }
                if (m % 2)
                    continue; /* two pipes: m even */
                if (plan(config(BSIPIPE_SCHED_BSIPIPE_ZB, w, m, k), &r)) {
                    CHECK(0, "bsipipe-zb w=%d m=%d k=%d: %s", w, m, k, bsipipe_error_detail());
                    continue;
                }
                /* Idle units per device: makespan - 6 N_s. */
                CHECK(r.makespan - 6 * ns <= half + 1e-9, "bsipipe-zb w=%d m=%d k=%d: %.0f idle units per device, "
                      "the floor is %.0f", w, m, k, r.makespan - 6 * ns, half);
                note(&bzb, r.bubble, floor_bound, w, m, k);
                run_t b; /* bsipipe's plan takes seconds: w <= 8, m <= 2w unless full */
                if ((full || (m <= 2 * w && w <= 8)) && plan(config(BSIPIPE_SCHED_BSIPIPE, w, m, k), &b) == 0) {
                    CHECK(r.peak <= b.peak, "bsipipe-zb w=%d m=%d k=%d: %d stashes on a device, bsipipe's plan "
                          "holds %d", w, m, k, r.peak, b.peak);
                    note(&mem, r.peak, b.peak, w, m, k);
                }
            }
        }
    }
    printf("under unit costs (F = B = W = 1):\n");
    report("zb-v", "bubble / (w-1)/(6m+w-1):", &zbv);
    report("dualpipev", "bubble / (w-1)/(6m+w-1):", &dpv);
    report("dualpipe", "bubble / (w/2-1)/(3m+w/2-1):", &dp2);
    report("zb-h2", "bubble / (w-1)/(3m+w-1):", &zbh2);
    report("zb-h2", "peak stashes / 2w-1:", &zbh2_mem);
    report("zb-i", "bubble / (w-1)/(3pm+w-1) (k: p):", &zbi);
    report("zb-i", "peak stashes / 1f1b-i's (k: p):", &zbi_mem);
    report("seq-zbv", "bubble / (w-1)/(6N_s+w-1):", &seq);
    report("bsipipe-zb", "bubble / the start-up floor:", &bzb);
    report("bsipipe-zb", "peak stashes / bsipipe's peak stashes:", &mem);
    CHECK(zbh2.plans > 0 && zbi.plans > 0 && zbv.plans > 0 && dpv.plans > 0 && dp2.plans > 0 && seq.plans > 0 && bzb.plans > 0 && mem.plans > 0, "the sweep planned nothing");
    return check_finish("test_zero_bubble");
}
