/* test_choose_k: bsipipe_schedule_choose_k and the cost model's
 * half-performance length.
 *  - piece_half_tokens n: an op on a piece of len tokens costs (len + n) /
 *    len times its FLOPs time (checked op by op against n = 0).
 *  - Every k the pass reports is re-planned and re-simulated here: its time
 *    and memory agree; the chosen one fits the budget, is within 0.1% of the
 *    fastest that fits, and no other that near holds less.
 *  - The small model at w = 2 (BSIPipe already without bubble at k = 1):
 *    with every piece at the device's rate more pieces pay; with this VM's
 *    measured half-performance length (16 tokens) k = 1 wins, and a budget
 *    below k = 1's activations forces a k > 1 that fits.
 *  - Schedules that do not cut sequences get k = 1; an impossible budget is
 *    -ENOSPC naming the least memory; unit costs are refused. */
#include "graph/bsipipe_sim.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const bsipipe_model_dims_t small = {BSIPIPE_MODEL_GPT, 8, 128, 4, 512, 256, 512};

static bsipipe_parallel_config_t config(bsipipe_schedule_kind_t kind, int w, int m)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    return pc;
}

static void check_piece_half(void)
{
    bsipipe_parallel_config_t pc = config(BSIPIPE_SCHED_SEQ1F1B, 2, 4);
    bsipipe_schedule_t *s;
    CHECK(bsipipe_schedule_create(&pc, &small, &s) == 0, "create: %s", bsipipe_error_detail());
    bsipipe_cost_model_t at_rate = bsipipe_cost_model_flops(1e11), slowed = at_rate;
    slowed.piece_half_tokens = 16;
    const int *starts = bsipipe_schedule_sub_starts(s);
    int n;
    const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, 0, &n);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind > BSIPIPE_OP_W)
            continue;
        double len = starts[ops[i].sub + 1] - starts[ops[i].sub];
        double a = bsipipe_sim_op_cost(s, &at_rate, &ops[i]), b = bsipipe_sim_op_cost(s, &slowed, &ops[i]);
        CHECK_NEAR(b, a * (len + 16) / len, 1e-12 * a, "op %d (piece %d, %g tokens): %g vs %g x %g", i, ops[i].sub,
                   len, b, a, (len + 16) / len);
        checked++;
    }
    CHECK(checked > 0, "no compute op on device 0");
    bsipipe_schedule_destroy(s);
}

/* Re-plans every candidate of ch and checks the choice against them. */
static void check_choice(const char *what, const bsipipe_parallel_config_t *pc, const bsipipe_cost_model_t *cost,
                         double budget, const bsipipe_k_choice_t *ch)
{
    CHECK(ch->n_tried >= 1 && ch->chosen >= 0 && ch->chosen < ch->n_tried, "%s: %d tried, chosen %d", what,
          ch->n_tried, ch->chosen);
    const bsipipe_k_candidate_t *best = &ch->tried[ch->chosen];
    CHECK(best->k == ch->k, "%s: k %d but the chosen candidate has k %d", what, ch->k, best->k);
    CHECK(budget <= 0 || best->peak_act_bytes <= budget, "%s: chosen k %d holds %g bytes over the budget %g", what,
          ch->k, best->peak_act_bytes, budget);
    double fastest = INFINITY;
    for (int i = 0; i < ch->n_tried; i++) {
        const bsipipe_k_candidate_t *c = &ch->tried[i];
        if (c->rc < 0)
            continue;
        bsipipe_parallel_config_t t = *pc;
        t.k = c->k;
        bsipipe_schedule_t *s;
        bsipipe_sim_result_t *r;
        CHECK(bsipipe_schedule_create(&t, &small, &s) == 0, "%s k %d: %s", what, c->k, bsipipe_error_detail());
        CHECK(bsipipe_simulate(s, cost, &r) == 0, "%s k %d: %s", what, c->k, bsipipe_error_detail());
        double peak = 0;
        for (int d = 0; d < r->n_devices; d++)
            peak = fmax(peak, r->device[d].peak_act_bytes);
        CHECK(r->iteration_time == c->iteration_time && peak == c->peak_act_bytes,
              "%s k %d: reported %g s %g bytes, re-simulated %g s %g bytes", what, c->k, c->iteration_time,
              c->peak_act_bytes, r->iteration_time, peak);
        int fits = budget <= 0 || peak <= budget;
        CHECK(fits == c->fits, "%s k %d: fits %d, expected %d", what, c->k, c->fits, fits);
        if (fits)
            fastest = fmin(fastest, c->iteration_time);
        bsipipe_sim_result_destroy(r);
        bsipipe_schedule_destroy(s);
    }
    double any = INFINITY;
    for (int i = 0; i < ch->n_tried; i++)
        if (ch->tried[i].rc == 0)
            any = fmin(any, ch->tried[i].iteration_time);
    CHECK(ch->fastest >= 0 && ch->tried[ch->fastest].iteration_time == any, "%s: fastest index %d, expected %g s",
          what, ch->fastest, any);
    double near = fastest * (1 + BSIPIPE_CHOOSE_K_TIE);
    CHECK(best->iteration_time <= near, "%s: chosen k %d predicts %g s, the fastest that fits %g s", what, ch->k,
          best->iteration_time, fastest);
    for (int i = 0; i < ch->n_tried; i++) {
        const bsipipe_k_candidate_t *c = &ch->tried[i];
        CHECK(c->rc < 0 || !c->fits || c->iteration_time > near || c->peak_act_bytes >= best->peak_act_bytes,
              "%s: k %d is as fast (%g s) as the chosen k %d (%g s) and holds less (%g < %g bytes)", what, c->k,
              c->iteration_time, ch->k, best->iteration_time, c->peak_act_bytes, best->peak_act_bytes);
    }
}

static void check_small_model(void)
{
    bsipipe_parallel_config_t pc = config(BSIPIPE_SCHED_BSIPIPE, 2, 8);
    bsipipe_cost_model_t cost = bsipipe_cost_model_flops(0.09e12);
    bsipipe_k_choice_t ch;

    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 0, &ch) == 0, "at rate: %s", bsipipe_error_detail());
    check_choice("bsipipe at rate", &pc, &cost, 0, &ch);
    printf("bsipipe w=2 m=8, every piece at the rate: k = %d (%d tried)\n", ch.k, ch.n_tried);

    cost.piece_half_tokens = 16;
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 0, &ch) == 0, "half 16: %s", bsipipe_error_detail());
    check_choice("bsipipe half 16", &pc, &cost, 0, &ch);
    CHECK(ch.k == 1, "half 16: k = %d, expected 1 (no bubble to remove, short pieces slower)", ch.k);
    double one = ch.tried[ch.chosen].peak_act_bytes;

    double budget = 0.9 * one;
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, budget, &ch) == 0, "budget: %s", bsipipe_error_detail());
    check_choice("bsipipe half 16 budget", &pc, &cost, budget, &ch);
    CHECK(ch.k > 1, "budget below k = 1's %g bytes: k = %d", one, ch.k);
    printf("bsipipe w=2 m=8, half 16: k = 1 (%.1f MiB); within %.1f MiB: k = %d (%.1f MiB)\n", one / 1048576,
           budget / 1048576, ch.k, ch.tried[ch.chosen].peak_act_bytes / 1048576);

    bsipipe_parallel_config_t seq = config(BSIPIPE_SCHED_SEQ1F1B, 2, 8);
    CHECK(bsipipe_schedule_choose_k(&seq, &small, &cost, 0, &ch) == 0, "seq1f1b: %s", bsipipe_error_detail());
    check_choice("seq1f1b half 16", &seq, &cost, 0, &ch);
    CHECK(ch.k > 1, "seq1f1b w=2 m=8 (12%% bubble at k = 1): k = %d, expected the bubble's cut to pay", ch.k);
}

static void check_edges(void)
{
    bsipipe_cost_model_t cost = bsipipe_cost_model_flops(1e11);
    bsipipe_k_choice_t ch;
    bsipipe_parallel_config_t pc = config(BSIPIPE_SCHED_1F1B, 2, 8);
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 0, &ch) == 0, "1f1b: %s", bsipipe_error_detail());
    CHECK(ch.k == 1 && ch.n_tried == 1, "1f1b: k = %d, %d tried", ch.k, ch.n_tried);
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 1024, &ch) == -ENOSPC, "1f1b: a 1 KiB budget was met");
    CHECK(strstr(bsipipe_error_detail(), "1f1b keeps sequences whole"), "detail: %s", bsipipe_error_detail());

    pc = config(BSIPIPE_SCHED_BSIPIPE, 2, 1); /* one micro-batch: no k plans; the rule that refuses it is named */
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 0, &ch) == -EINVAL, "bsipipe m = 1 planned");
    CHECK(strstr(bsipipe_error_detail(), "m >= 2"), "detail: %s", bsipipe_error_detail());

    pc = config(BSIPIPE_SCHED_BSIPIPE, 2, 8);
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, 1024, &ch) == -ENOSPC, "a 1 KiB budget was met");
    CHECK(strstr(bsipipe_error_detail(), "the least is") && strstr(bsipipe_error_detail(), "raise the budget"),
          "detail: %s", bsipipe_error_detail());

    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &unit, 0, &ch) == -EINVAL, "unit costs accepted");
    CHECK(strstr(bsipipe_error_detail(), "FLOPs costs"), "detail: %s", bsipipe_error_detail());
    CHECK(bsipipe_schedule_choose_k(&pc, &small, &cost, -1, &ch) == -EINVAL, "negative budget accepted");
}

int main(void)
{
    check_piece_half();
    check_small_model();
    check_edges();
    return check_finish("test_choose_k");
}
