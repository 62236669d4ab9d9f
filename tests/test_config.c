/* test_config: every rule of a configuration has an error naming it and the
 * nearest valid values; no input crashes the planner. */
#include "graph/bsipipe_schedule.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <string.h>

static const bsipipe_model_dims_t model = {BSIPIPE_MODEL_GPT, 16, 64, 4, 256, 128, 256};

/* Expects validation of pc (with the model) to fail naming `needle`; and
 * schedule creation to fail the same way. */
static void expect_rule(bsipipe_parallel_config_t pc, const bsipipe_model_dims_t *dims, const char *needle)
{
    int rc = bsipipe_parallel_config_validate(&pc, dims);
    CHECK(rc == BSIPIPE_ECONFIG, "rule '%s' not enforced (rc %d)", needle, rc);
    CHECK_CONTAINS(bsipipe_error_detail(), needle);
    bsipipe_schedule_t *s = NULL;
    CHECK(bsipipe_schedule_create(&pc, dims, &s) == BSIPIPE_ECONFIG && s == NULL, "create refuses");
}

static bsipipe_parallel_config_t cfg(const char *name, int w, int p, int k, int m)
{
    bsipipe_schedule_kind_t kind = BSIPIPE_SCHED_BSIPIPE;
    CHECK(bsipipe_schedule_kind_parse(name, &kind) == 0, "parse %s", name);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w; pc.p = p; pc.k = k; pc.m = m;
    return pc;
}

int main(void)
{
    bsipipe_schedule_kind_t kind;
    bsipipe_parallel_config_t pc0;
    for (int i = 0; i < BSIPIPE_SCHED_COUNT; i++) {
        CHECK(bsipipe_schedule_kind_parse(bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)i), &kind) == 0 &&
              (int)kind == i, "name round trip %d", i);
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default((bsipipe_schedule_kind_t)i);
        CHECK(bsipipe_parallel_config_validate(&pc, &model) == 0, "default of %s is valid: %s",
              bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)i), bsipipe_error_detail());
    }
    CHECK(bsipipe_schedule_kind_parse("Seq1F1B_I", &kind) == 0 && kind == BSIPIPE_SCHED_SEQ1F1B_I, "aliases");
    CHECK(bsipipe_schedule_kind_parse("pipedream", &kind) == -EINVAL, "unknown schedule");
    CHECK_CONTAINS(bsipipe_error_detail(), "valid: gpipe, 1f1b");

    /* BSIPipe's rules (the paper's): N_s multiple of k·w, L multiple of p·w. */
    /* any m >= 2 (issue 32): a last partial basic unit, an odd m split unevenly */
    expect_rule(cfg("bsipipe", 4, 2, 2, 1), &model, "m >= 2 (got m=1); nearest valid m: 2");
    pc0 = cfg("bsipipe", 4, 2, 2, 6);
    CHECK(bsipipe_parallel_config_validate(&pc0, &model) == 0, "bsipipe m=6 refused: %s", bsipipe_error_detail());
    pc0 = cfg("bsipipe", 3, 2, 1, 3);
    CHECK(bsipipe_parallel_config_validate(&pc0, NULL) == 0, "bsipipe m=3 refused: %s", bsipipe_error_detail());
    expect_rule(cfg("bsipipe", 4, 2, 2, 8), &(bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, 12, 64, 4, 256, 128, 256},
                "nearest valid L: 8 or 16");
    /* only one candidate above when the one below would be 0: named once */
    expect_rule(cfg("bsipipe", 63, 2, 1, 126), &(bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, 16, 64, 4, 256, 128, 256},
                "nearest valid L: 126");
    CHECK(strstr(bsipipe_error_detail(), "126 or 126") == NULL, "one nearest L, not twice: %s", bsipipe_error_detail());
    expect_rule(cfg("bsipipe", 4, 3, 2, 8), &model, "bsipipe uses the V-shaped layout: p must be 2");
    expect_rule(cfg("chimera", 3, 1, 1, 3), NULL, "m must be even (got m=3); nearest valid m: 2 or 4");
    expect_rule(cfg("bsipipe", 1, 2, 1, 2), NULL, "w >= 2");
    /* Interleaving and subsequences only where the schedule has them. */
    expect_rule(cfg("1f1b", 4, 2, 1, 8), NULL, "1f1b does not interleave: p must be 1");
    expect_rule(cfg("gpipe", 4, 1, 2, 8), NULL, "k must be 1");
    expect_rule(cfg("1f1b-i", 4, 1, 1, 8), NULL, "p must be >= 2");
    /* Megatron's groups: any N_s >= w runs (issue 32); below, the nearest m. */
    expect_rule(cfg("seq1f1b-i", 8, 2, 2, 3), NULL, "N_s = m*k >= w=8 (got N_s=6); nearest valid m: 4");
    expect_rule(cfg("1f1b-i", 8, 2, 1, 7), NULL, "nearest valid m: 8");
    pc0 = cfg("seq1f1b-i", 4, 2, 2, 3);
    CHECK(bsipipe_parallel_config_validate(&pc0, NULL) == 0, "seq1f1b-i w=4 N_s=6 refused: %s", bsipipe_error_detail());
    /* the group: w where w divides N_s, else the smallest with a remainder of 0 or >= w */
    CHECK(bsipipe_interleave_group(16, 8) == 8 && bsipipe_interleave_group(12, 8) == 12 &&
          bsipipe_interleave_group(9, 4) == 5 && bsipipe_interleave_group(20, 16) == 20 &&
          bsipipe_interleave_group(13, 4) == 7 && bsipipe_interleave_group(3, 4) == 0,
          "bsipipe_interleave_group: %d %d %d %d %d %d", bsipipe_interleave_group(16, 8),
          bsipipe_interleave_group(12, 8), bsipipe_interleave_group(9, 4), bsipipe_interleave_group(20, 16),
          bsipipe_interleave_group(13, 4), bsipipe_interleave_group(3, 4));
    expect_rule(cfg("chimera", 4, 1, 1, 5), NULL, "m must be even");
    /* Ranges. */
    expect_rule(cfg("1f1b", 0, 1, 1, 8), NULL, "pipeline depth w must be in 1..");
    expect_rule(cfg("1f1b", 4, 1, 1, 0), NULL, "micro-batches m must be in 1..");
    expect_rule(cfg("seq1f1b", 4, 1, -3, 8), NULL, "subsequences k must be in 1..");
    bsipipe_parallel_config_t pc = cfg("seq1f1b", 4, 1, 2, 8);
    pc.tp = 3;
    expect_rule(pc, &model, "D_t=3 must divide the hidden size 64");
    pc.tp = 1;
    pc.k = 300;
    expect_rule(pc, &model, "use k <= 256");
    pc = cfg("1f1b", 4, 1, 1, 8);
    pc.nodes = 3;
    expect_rule(pc, NULL, "cannot be spread evenly over 3 nodes");
    /* Model rules. */
    expect_rule(cfg("1f1b", 4, 1, 1, 8), &(bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, 16, 66, 4, 256, 128, 256},
                "hidden size 66 must be a multiple of the head count 4; nearest valid hidden: 64 or 68");
    expect_rule(cfg("1f1b", 4, 1, 1, 8), &(bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, 16, 64, 4, 256, 1, 256},
                "vocabulary must be in 2..");
    expect_rule(cfg("1f1b", 4, 1, 1, 8), &(bsipipe_model_dims_t){7, 16, 64, 4, 256, 128, 256}, "family");
    /* LLaMA's rotary embedding needs an even head dimension: refused by the
     * rules, not found later as a deadlock of a device with itself. */
    expect_rule(cfg("1f1b", 4, 1, 1, 8), &(bsipipe_model_dims_t){BSIPIPE_MODEL_LLAMA, 16, 36, 4, 96, 256, 256},
                "the head dimension hidden/heads must be even (got 36 / 4 = 9); nearest valid hidden: 32 or 40");
    /* A config the rules accept without a model plans on the nominal model,
     * tensor parallelism included (its heads once failed D_t = 2). */
    pc = cfg("1f1b", 4, 1, 1, 8);
    pc.tp = 2;
    {
        bsipipe_schedule_t *n = NULL;
        CHECK(bsipipe_parallel_config_validate(&pc, NULL) == 0 && bsipipe_schedule_create(&pc, NULL, &n) == 0,
              "tp = 2 without a model: %s", bsipipe_error_detail());
        bsipipe_schedule_destroy(n);
    }
    /* Too large a plan is refused, not attempted. */
    expect_rule(cfg("seq1f1b", 4096, 1, 65536, 32), NULL, "is too large");
    pc = cfg("seq1f1b", 64, 1, 1024, 1024);
    bsipipe_schedule_t *s = NULL;
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == BSIPIPE_ECONFIG && s == NULL, "huge plan refused");
    CHECK_CONTAINS(bsipipe_error_detail(), "plan too large");
    /* Error codes have texts. */
    CHECK(strcmp(bsipipe_strerror(BSIPIPE_EDEADLOCK), "schedule deadlocks") == 0, "strerror");
    CHECK(strcmp(bsipipe_strerror(-EINVAL), "Invalid argument") == 0, "strerror errno");
    return check_finish("test_config");
}
