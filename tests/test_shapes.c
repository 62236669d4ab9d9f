/* test_shapes: the micro-batch counts users run (issue 32). The interleaved
 * schedules (1f1b-i, seq1f1b-i) take any N_s = m*k >= w through Megatron's
 * micro-batch groups (bsipipe_interleave_group); swept over w = 2..16,
 * m = w/k..4w step 1, k = 1..3, p = 2 (and p = 3, 4 up to w = 8): every
 * config either plans, validates and simulates under unit costs at or below
 * the closed-form bubble (w-1)/(p*N_s+w-1) (F = 1, B = 2), or, below one unit
 * per device, is refused naming the nearest valid m. Prints the counts and
 * the worst ratio to the bound. (The op orders equal Megatron's:
 * tests/test_peer_orders.sh.) */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    int planned = 0, refused = 0;
    double worst = 0;
    char worst_at[96] = "";
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    for (int w = 2; w <= 16; w++)
        for (int p = 2; p <= (w <= 8 ? 4 : 2); p++)
            for (int k = 1; k <= 3; k++)
                for (int m = (w + k - 1) / k - 1; m <= 4 * w; m++) {
                    if (m < 1)
                        continue;
                    bsipipe_parallel_config_t pc =
                        bsipipe_parallel_config_default(k == 1 ? BSIPIPE_SCHED_1F1B_I : BSIPIPE_SCHED_SEQ1F1B_I);
                    pc.w = w, pc.p = p, pc.k = k, pc.m = m;
                    const char *name = bsipipe_schedule_kind_name(pc.schedule);
                    bsipipe_schedule_t *s = NULL;
                    int rc = bsipipe_schedule_create(&pc, NULL, &s);
                    if (m * k < w) {
                        char want[32];
                        snprintf(want, sizeof want, "nearest valid m: %d", (w + k - 1) / k);
                        CHECK(rc == BSIPIPE_ECONFIG && strstr(bsipipe_error_detail(), want),
                              "%s w=%d p=%d k=%d m=%d (N_s < w): rc %d, '%s', want '%s'", name, w, p, k, m, rc,
                              bsipipe_error_detail(), want);
                        refused++;
                        bsipipe_schedule_destroy(s);
                        continue;
                    }
                    CHECK(rc == 0, "%s w=%d p=%d k=%d m=%d: %s", name, w, p, k, m, bsipipe_error_detail());
                    if (rc)
                        continue;
                    rc = bsipipe_schedule_validate(s);
                    CHECK(rc == 0, "%s w=%d p=%d k=%d m=%d: validate: %s", name, w, p, k, m, bsipipe_error_detail());
                    bsipipe_sim_result_t *r = NULL;
                    if (rc == 0)
                        rc = bsipipe_simulate(s, &unit, &r);
                    CHECK(rc == 0, "%s w=%d p=%d k=%d m=%d: simulate: %s", name, w, p, k, m, bsipipe_error_detail());
                    if (rc == 0) {
                        double bound = (w - 1.0) / (p * (double)m * k + w - 1.0);
                        CHECK(r->bubble_ratio <= bound + 1e-12, "%s w=%d p=%d k=%d m=%d: bubble %.4f%% above %.4f%%",
                              name, w, p, k, m, 100 * r->bubble_ratio, 100 * bound);
                        if (r->bubble_ratio / bound > worst) {
                            worst = r->bubble_ratio / bound;
                            snprintf(worst_at, sizeof worst_at, "%s w=%d p=%d k=%d m=%d", name, w, p, k, m);
                        }
                        planned++;
                    }
                    bsipipe_sim_result_destroy(r);
                    bsipipe_schedule_destroy(s);
                }
    /* BSIPipe: any m >= 2 (odd m: the up pipe one more), a last partial
     * basic unit; at or below the paper's bound (w-1)/(3N_s+w-1) wherever
     * m >= w, except m = w at k = 1 with odd w (one odd group: the pipes
     * unequal). Fewer micro-batches leave the V's ends idle: w = 8, k = 3,
     * m = 4 gives 17.2% against 16.3%. */
    int bsi_planned = 0, bsi_small = 0;
    double bsi_worst = 0;
    char bsi_worst_at[96] = "";
    int full = getenv("BSIPIPE_SHAPES_SWEEP") && !strcmp(getenv("BSIPIPE_SHAPES_SWEEP"), "full");
    for (int w = 2; w <= (full ? 10 : 8); w++)
        for (int k = 1; k <= 4; k += full ? 1 : 3 - (k == 2)) /* 1, 2, 4 (full: 1..4) */
            for (int m = 1; m <= 4 * w; m++) {
                /* make check: the odd and partial counts around 1, w and 2w, and 3w - 1 */
                int near_edge = m <= 3 || m == w - 1 || m == w + 1 || m == 2 * w - 1 || m == 2 * w + 1 ||
                                m == 3 * w - 1;
                if (!full && (!near_edge || w == 7))
                    continue;
                bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
                pc.w = w, pc.k = k, pc.m = m;
                bsipipe_schedule_t *s = NULL;
                int rc = bsipipe_schedule_create(&pc, NULL, &s);
                if (m < 2) {
                    CHECK(rc == BSIPIPE_ECONFIG && strstr(bsipipe_error_detail(), "nearest valid m: 2"),
                          "bsipipe w=%d k=%d m=1: rc %d '%s'", w, k, rc, bsipipe_error_detail());
                    bsipipe_schedule_destroy(s);
                    continue;
                }
                CHECK(rc == 0, "bsipipe w=%d k=%d m=%d: %s", w, k, m, bsipipe_error_detail());
                if (rc)
                    continue;
                rc = bsipipe_schedule_validate(s);
                CHECK(rc == 0, "bsipipe w=%d k=%d m=%d: validate: %s", w, k, m, bsipipe_error_detail());
                bsipipe_sim_result_t *r = NULL;
                if (rc == 0)
                    rc = bsipipe_simulate(s, &unit, &r);
                CHECK(rc == 0, "bsipipe w=%d k=%d m=%d: simulate: %s", w, k, m, bsipipe_error_detail());
                /* activations: one basic unit (w micro-batches, p = 2 chunks, k pieces) per device, two
                 * where BSIPipe groups 2w (k = 1, odd w): the list schedule's cap */
                int cap = 2 * k * w * (k == 1 || w % 2 ? 2 : 1), peak = 0;
                for (int d = 0; rc == 0 && d < r->n_devices; d++)
                    if (r->device[d].peak_act_units > peak)
                        peak = r->device[d].peak_act_units;
                CHECK(peak <= cap, "bsipipe w=%d k=%d m=%d: %d stashes on a device, above %d", w, k, m, peak, cap);
                if (rc == 0 && m >= w && !(k == 1 && w % 2 && m == w)) {
                    double bound = bsipipe_bubble_closed_form(&pc);
                    CHECK(r->bubble_ratio <= bound + 1e-12, "bsipipe w=%d k=%d m=%d: bubble %.4f%% above the bound "
                          "%.4f%%", w, k, m, 100 * r->bubble_ratio, 100 * bound);
                    if (r->bubble_ratio / bound > bsi_worst) {
                        bsi_worst = r->bubble_ratio / bound;
                        snprintf(bsi_worst_at, sizeof bsi_worst_at, "w=%d k=%d m=%d", w, k, m);
                    }
                    bsi_planned++;
                } else if (rc == 0) {
                    bsi_small++;
                }
                bsipipe_sim_result_destroy(r);
                bsipipe_schedule_destroy(s);
            }
    printf("test_shapes: bsipipe: %d configs with m >= w at or below the paper's bound (worst ratio %.4f at %s); "
           "%d with m < w (or m = w, k = 1, odd w) planned (no bound)\n", bsi_planned, bsi_worst, bsi_worst_at,
           bsi_small);
    /* BitPipe: any m >= 2, a last partial unit of m mod w (its order the
     * whole unit's, the absent micro-batches' ops left out): at the closed
     * form when w divides m, at most the span of ceil(m/w) whole units
     * (6wU + (U+1)(w-2) - (U-1) under unit costs, w >= 4) otherwise. */
    int bit_planned = 0, bit_exact = 0;
    for (int w = 2; w <= 12; w += 2)
        for (int m = 2; m <= 3 * w + 1; m++) {
            bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BITPIPE);
            pc.w = w, pc.m = m;
            bsipipe_schedule_t *s = NULL;
            bsipipe_sim_result_t *r = NULL;
            int rc = bsipipe_schedule_create(&pc, NULL, &s);
            if (rc == 0)
                rc = bsipipe_schedule_validate(s);
            if (rc == 0)
                rc = bsipipe_simulate(s, &unit, &r);
            CHECK(rc == 0, "bitpipe w=%d m=%d: %s", w, m, bsipipe_error_detail());
            if (rc == 0) {
                double bound = bsipipe_bubble_closed_form(&pc);
                CHECK(r->bubble_ratio <= bound + 1e-12, "bitpipe w=%d m=%d: bubble %.4f%% above %.4f%%", w, m,
                      100 * r->bubble_ratio, 100 * bound);
                if (m % w == 0) {
                    CHECK(fabs(r->bubble_ratio - bound) < 1e-12, "bitpipe w=%d m=%d: bubble %.4f%%, closed %.4f%%",
                          w, m, 100 * r->bubble_ratio, 100 * bound);
                    bit_exact++;
                }
                if (w == 4 && m == 8) /* the figure of BitPipe's authors: two units in 53 */
                    CHECK(fabs(r->makespan - 53) < 1e-9, "bitpipe w=4 m=8: %g units, the authors' figure is 53",
                          r->makespan);
                bit_planned++;
            }
            bsipipe_sim_result_destroy(r);
            bsipipe_schedule_destroy(s);
        }
    printf("test_shapes: bitpipe: %d configs (m = 2..3w+1, even w <= 12) at or below the bound, %d whole-unit ones "
           "at it\n", bit_planned, bit_exact);
    /* Every schedule over the held-out shapes (w = 2..16, m = w..4w,
     * L = w..3w, k = 1 or 2 where pieces exist, a head costing 1 to 4
     * layers): the rules either accept the config or refuse it naming the
     * nearest valid value (m, L or w); an L that p*w does not divide is
     * placed by --layout auto. */
    long accepted = 0, named = 0, placed = 0;
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++)
        for (int w = 2; w <= 16; w++)
            for (int m = w; m <= 4 * w; m++)
                for (int L = w; L <= 3 * w; L++) {
                    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default((bsipipe_schedule_kind_t)kind);
                    pc.w = w, pc.m = m, pc.k = bsipipe_schedule_kind_traits(pc.schedule).sequence_level ? 2 : 1;
                    /* the head: 832 * (1..4) vocabulary words cost 1..4 layers at hidden 64, S = 64 */
                    bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, L, 64, 4, 256, 832 * (1 + (m + L) % 4), 64};
                    int rc = bsipipe_parallel_config_validate(&pc, &d);
                    if (rc == 0) {
                        accepted++;
                        continue;
                    }
                    char why[512];
                    snprintf(why, sizeof why, "%s", bsipipe_error_detail());
                    if (rc == BSIPIPE_ECONFIG && strstr(why, "--layout auto")) {
                        pc.layout = "auto";
                        int arc = bsipipe_parallel_config_validate(&pc, &d);
                        CHECK(arc == 0 || L < pc.p * w, "%s w=%d m=%d L=%d: --layout auto: %s",
                              bsipipe_schedule_kind_name(pc.schedule), w, m, L, bsipipe_error_detail());
                        if (arc == 0) {
                            placed++;
                            continue;
                        }
                    }
                    int ok = rc == BSIPIPE_ECONFIG && strstr(why, "nearest valid ");
                    CHECK(ok, "%s w=%d m=%d L=%d refused without the nearest valid value: %s",
                          bsipipe_schedule_kind_name(pc.schedule), w, m, L, why);
                    named += ok;
                }
    printf("test_shapes: held-out shapes: %ld configs accepted, %ld more with --layout auto, %ld refused naming the "
           "nearest valid m, L or w\n", accepted, placed, named);
    printf("test_shapes: %d interleaved configs planned, validated and simulated (worst bubble / bound %.4f at %s); "
           "%d with N_s < w refused naming the nearest m\n", planned, worst, worst_at, refused);
    return check_finish("test_shapes");
}
