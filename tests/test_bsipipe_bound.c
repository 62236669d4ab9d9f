/* tests/test_bsipipe_bound.c: BSIPipe's plan against the paper's bound
 * (w-1)/(3 N_s + w-1) under unit costs, constructed and optimised, over a
 * grid of w, k and N_s; and the optimising pass's promises on every plan:
 * never slower, never more memory than the plan it started from, a valid
 * plan afterwards.
 *
 * The bound is not yet met everywhere (docs/schedules.md lists where): the
 * test asserts it on the part of the grid where the plan meets it today, so
 * a regression there fails, and prints the worst ratio over the whole grid.
 *
 *   tests/test_bsipipe_bound            the check grid
 *   tests/test_bsipipe_bound --table    the sweep table, w = 2..16, k = 1..4 */
#include "graph/bsipipe_schedule.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_error.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

typedef struct point {
    double bubble_constructed, bubble_optimised, bound;
    int peak_constructed, peak_optimised;
} point_t;

static int plan(int w, int k, int m, int optimise, double *bubble, int *peak)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = w;
    pc.k = k;
    pc.m = m;
    pc.optimise = optimise;
    bsipipe_schedule_t *s;
    int rc = bsipipe_schedule_create(&pc, NULL, &s);
    if (rc < 0)
        return rc;
    rc = bsipipe_schedule_validate(s);
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r = NULL;
    if (rc == 0)
        rc = bsipipe_simulate(s, &unit, &r);
    if (rc == 0) {
        *bubble = r->bubble_ratio;
        *peak = 0;
        for (int d = 0; d < w; d++)
            if (r->device[d].peak_act_units > *peak)
                *peak = r->device[d].peak_act_units;
    }
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    return rc;
}

static int measure(int w, int k, int m, point_t *p)
{
    int rc = plan(w, k, m, 0, &p->bubble_constructed, &p->peak_constructed);
    if (rc == 0)
        rc = plan(w, k, m, 1, &p->bubble_optimised, &p->peak_optimised);
    p->bound = (w - 1.0) / (3.0 * m * k + w - 1.0);
    return rc;
}

/* The smallest valid m for N_s = units basic units (m even; odd w: units of 2w). */
static int m_for(int w, int units)
{
    int group = w % 2 ? 2 * w : w;
    return units * group;
}

static void table(void)
{
    printf("%4s %3s %5s | %8s %8s %8s | %6s %6s | %5s %5s\n", "w", "k", "N_s", "bound", "constr", "optim",
           "r_con", "r_opt", "mem_c", "mem_o");
    double worst_c = 0, worst_o = 0;
    int over_c = 0, over_o = 0, n = 0;
    for (int w = 2; w <= 16; w++)
        for (int k = 1; k <= 4; k++)
            for (int units = 1; units <= 4; units *= 2) {
                int m = m_for(w, units);
                point_t p;
                if (measure(w, k, m, &p) < 0) {
                    printf("%4d %3d %5d | error: %s\n", w, k, m * k, bsipipe_error_detail());
                    continue;
                }
                double rc = p.bubble_constructed / p.bound, ro = p.bubble_optimised / p.bound;
                printf("%4d %3d %5d | %7.3f%% %7.3f%% %7.3f%% | %6.3f %6.3f | %5d %5d\n", w, k, m * k,
                       100 * p.bound, 100 * p.bubble_constructed, 100 * p.bubble_optimised, rc, ro,
                       p.peak_constructed, p.peak_optimised);
                n++;
                over_c += rc > 1 + 1e-9;
                over_o += ro > 1 + 1e-9;
                if (rc > worst_c) worst_c = rc;
                if (ro > worst_o) worst_o = ro;
            }
    printf("%d plans: constructed above the bound on %d (worst %.3fx), optimised on %d (worst %.3fx)\n", n,
           over_c, worst_c, over_o, worst_o);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--table") == 0) {
        table();
        return 0;
    }
    /* Every plan: the pass never slows a plan down, never holds more. */
    for (int w = 2; w <= 9; w++)
        for (int k = 1; k <= 3; k++)
            for (int units = 1; units <= 3; units++) {
                int m = m_for(w, units);
                point_t p;
                int rc = measure(w, k, m, &p);
                CHECK(rc == 0, "w=%d k=%d m=%d: %s", w, k, m, bsipipe_error_detail());
                if (rc < 0)
                    continue;
                CHECK(p.bubble_optimised <= p.bubble_constructed + 1e-12,
                      "w=%d k=%d m=%d: the optimising pass raised the bubble %.5f -> %.5f", w, k, m,
                      p.bubble_constructed, p.bubble_optimised);
                CHECK(p.peak_optimised <= p.peak_constructed,
                      "w=%d k=%d m=%d: the optimising pass raised peak memory %d -> %d", w, k, m,
                      p.peak_constructed, p.peak_optimised);
                /* The bound where the plan meets it today: even w with k >= 2,
                 * k = 1 at w = 2, 4, and one basic unit at k = 1 (BitPipe's order). */
                if (w % 2 == 0 && (k >= 2 || w <= 4 || units == 1))
                    CHECK(p.bubble_optimised <= p.bound + 1e-12, "w=%d k=%d m=%d: bubble %.5f above the bound %.5f",
                          w, k, m, p.bubble_optimised, p.bound);
            }
    /* The pass's own budget argument: a bad one is refused. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    bsipipe_schedule_t *s;
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == 0, "default plan: %s", bsipipe_error_detail());
    CHECK(bsipipe_schedule_optimise(s, NULL, -1, NULL) == -EINVAL, "a negative budget is refused");
    bsipipe_optimise_report_t rep;
    CHECK(bsipipe_schedule_optimise(s, NULL, 0, &rep) == 0, "optimise again: %s", bsipipe_error_detail());
    CHECK(rep.makespan_after <= rep.makespan_before, "a second pass never slows down");
    CHECK(bsipipe_schedule_validate(s) == 0, "valid after a second pass: %s", bsipipe_error_detail());
    bsipipe_schedule_destroy(s);
    return check_finish("test_bsipipe_bound");
}
