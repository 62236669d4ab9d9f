/* test_sim_noise: bsipipe_simulate_noise, the plan under op-time noise.
 *  - cv = 0: every sample is the noiseless plan (mean = p90 = noiseless,
 *    exactly, under unit and FLOPs costs); one sample is its own mean and
 *    90th percentile.
 *  - The same seed gives the same numbers, another seed other ones.
 *  - A makespan is the longest chain of op durations (a convex function of
 *    them) and the noise has mean 1, so noise cannot shorten the expected
 *    makespan: for every schedule at w = 4 the mean is at least the
 *    noiseless one, and for zero-bubble plans (Chimera, BSIPipe at w = 2,
 *    FLOPs costs) cv = 0.1 adds at least half a point of bubble, more at
 *    cv = 0.2 than at 0.1.
 *  - Bad arguments are refused naming the bound; a plan that deadlocks
 *    reports the deadlock, not a sample. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static bsipipe_schedule_t *make(bsipipe_schedule_kind_t kind, int w, int m, const bsipipe_model_dims_t *dims)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    bsipipe_schedule_t *s = NULL;
    CHECK(bsipipe_schedule_create(&pc, dims, &s) == 0, "%s: %s", bsipipe_schedule_kind_name(kind),
          bsipipe_error_detail());
    return s;
}

static void check_zero_and_seed(void)
{
    bsipipe_schedule_t *s = make(BSIPIPE_SCHED_BSIPIPE, 4, 8, NULL);
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_noise_t a, b, c;
    CHECK(bsipipe_simulate_noise(s, &unit, 0, 5, 1, &a) == 0, "cv 0: %s", bsipipe_error_detail());
    CHECK(a.mean_makespan == a.noiseless_makespan && a.p90_makespan == a.noiseless_makespan,
          "cv 0: mean %.17g p90 %.17g noiseless %.17g", a.mean_makespan, a.p90_makespan, a.noiseless_makespan);
    CHECK(fabs(a.mean_bubble - a.noiseless_bubble) < 1e-12, "cv 0 bubble: %g vs %g", a.mean_bubble,
          a.noiseless_bubble);
    bsipipe_cost_model_t flops = bsipipe_cost_model_flops(1e11);
    CHECK(bsipipe_simulate_noise(s, &flops, 0, 7, 1, &a) == 0, "cv 0, FLOPs: %s", bsipipe_error_detail());
    CHECK(a.mean_makespan == a.noiseless_makespan && a.p90_bubble == a.noiseless_bubble,
          "cv 0, FLOPs: mean %.17g noiseless %.17g", a.mean_makespan, a.noiseless_makespan);
    /* one sample: its own mean and 90th percentile */
    CHECK(bsipipe_simulate_noise(s, &flops, 0.3, 1, 5, &a) == 0, "1 sample: %s", bsipipe_error_detail());
    CHECK(a.p90_makespan == a.mean_makespan && a.p90_bubble == a.mean_bubble && a.mean_makespan != a.noiseless_makespan,
          "1 sample: mean %.17g p90 %.17g noiseless %.17g", a.mean_makespan, a.p90_makespan, a.noiseless_makespan);
    CHECK(bsipipe_simulate_noise(s, &unit, 0.1, 20, 7, &a) == 0, "cv 0.1: %s", bsipipe_error_detail());
    CHECK(bsipipe_simulate_noise(s, &unit, 0.1, 20, 7, &b) == 0, "cv 0.1 again: %s", bsipipe_error_detail());
    CHECK(bsipipe_simulate_noise(s, &unit, 0.1, 20, 8, &c) == 0, "cv 0.1 seed 8: %s", bsipipe_error_detail());
    CHECK(memcmp(&a, &b, sizeof a) == 0, "seed 7 twice: mean makespan %.17g vs %.17g", a.mean_makespan,
          b.mean_makespan);
    CHECK(a.mean_makespan != c.mean_makespan, "seeds 7 and 8 gave the same mean makespan %.17g", a.mean_makespan);
    bsipipe_schedule_destroy(s);
}

static void check_every_schedule(void)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    for (int k = 0; k < BSIPIPE_SCHED_COUNT; k++) {
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default((bsipipe_schedule_kind_t)k);
        pc.w = 4;
        pc.m = 8;
        bsipipe_schedule_t *s;
        if (bsipipe_schedule_create(&pc, NULL, &s) < 0)
            continue; /* a schedule this config does not fit (checked by test_schedules) */
        bsipipe_sim_noise_t r;
        CHECK(bsipipe_simulate_noise(s, &unit, 0.15, 100, 3, &r) == 0, "%s: %s",
              bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)k), bsipipe_error_detail());
        CHECK(r.mean_makespan >= r.noiseless_makespan, "%s: noise shortened the mean makespan %g < %g",
              bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)k), r.mean_makespan, r.noiseless_makespan);
        CHECK(r.p90_makespan >= r.mean_makespan * 0.99, "%s: p90 %g far below the mean %g",
              bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)k), r.p90_makespan, r.mean_makespan);
        printf("%-9s w=4 m=8 unit, cv 0.15: bubble %.2f%% -> mean %.2f%% (p90 %.2f%%), makespan x%.4f\n",
               bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)k), 100 * r.noiseless_bubble,
               100 * r.mean_bubble, 100 * r.p90_bubble, r.mean_makespan / r.noiseless_makespan);
        bsipipe_schedule_destroy(s);
    }
}

static void check_zero_bubble_plans(void)
{
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 128, 4, 512, 256, 512};
    bsipipe_cost_model_t flops = bsipipe_cost_model_emulated(1e11);
    bsipipe_schedule_kind_t kinds[] = {BSIPIPE_SCHED_CHIMERA, BSIPIPE_SCHED_BSIPIPE};
    for (int i = 0; i < 2; i++) {
        bsipipe_schedule_t *s = make(kinds[i], 2, 8, &dims);
        bsipipe_sim_noise_t lo, hi;
        CHECK(bsipipe_simulate_noise(s, &flops, 0.1, 200, 1, &lo) == 0, "%s: %s",
              bsipipe_schedule_kind_name(kinds[i]), bsipipe_error_detail());
        CHECK(bsipipe_simulate_noise(s, &flops, 0.2, 200, 1, &hi) == 0, "%s: %s",
              bsipipe_schedule_kind_name(kinds[i]), bsipipe_error_detail());
        CHECK(lo.noiseless_bubble < 0.005, "%s w=2 m=8: planned bubble %g, expected none",
              bsipipe_schedule_kind_name(kinds[i]), lo.noiseless_bubble);
        CHECK(lo.mean_bubble > lo.noiseless_bubble + 0.005, "%s: cv 0.1 added %.3f points of bubble",
              bsipipe_schedule_kind_name(kinds[i]), 100 * (lo.mean_bubble - lo.noiseless_bubble));
        CHECK(hi.mean_bubble > lo.mean_bubble, "%s: cv 0.2 bubble %g not above cv 0.1's %g",
              bsipipe_schedule_kind_name(kinds[i]), hi.mean_bubble, lo.mean_bubble);
        printf("%-9s w=2 m=8 FLOPs: bubble %.2f%% -> %.2f%% at cv 0.1, %.2f%% at cv 0.2\n",
               bsipipe_schedule_kind_name(kinds[i]), 100 * lo.noiseless_bubble, 100 * lo.mean_bubble,
               100 * hi.mean_bubble);
        bsipipe_schedule_destroy(s);
    }
}

static void check_errors(void)
{
    bsipipe_schedule_t *s = make(BSIPIPE_SCHED_1F1B, 2, 4, NULL);
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_noise_t r;
    CHECK(bsipipe_simulate_noise(s, &unit, -0.1, 10, 1, &r) == -EINVAL, "negative cv accepted");
    CHECK(strstr(bsipipe_error_detail(), "coefficient of variation"), "detail: %s", bsipipe_error_detail());
    CHECK(bsipipe_simulate_noise(s, &unit, NAN, 10, 1, &r) == -EINVAL, "NaN cv accepted");
    CHECK(bsipipe_simulate_noise(s, &unit, 0.1, 0, 1, &r) == -EINVAL, "0 samples accepted");
    CHECK(strstr(bsipipe_error_detail(), "samples"), "detail: %s", bsipipe_error_detail());
    CHECK(bsipipe_simulate_noise(NULL, &unit, 0.1, 10, 1, &r) == -EINVAL, "NULL schedule accepted");
    bsipipe_schedule_destroy(s);

    /* The naive order deadlocks under rendezvous sends: reported as such. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = 8;
    pc.comm = BSIPIPE_COMM_NAIVE;
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == 0, "naive: %s", bsipipe_error_detail());
    unit.blocking_recv = 1;
    int rc = bsipipe_simulate_noise(s, &unit, 0.1, 10, 1, &r);
    CHECK(rc == BSIPIPE_EDEADLOCK, "naive order: %d (%s), expected a deadlock", rc, bsipipe_error_detail());
    bsipipe_schedule_destroy(s);
}

int main(void)
{
    check_zero_and_seed();
    check_every_schedule();
    check_zero_bubble_plans();
    check_errors();
    return check_finish("test_sim_noise");
}
