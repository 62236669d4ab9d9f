/* custom_schedule.c: a driver that writes its own pipeline schedule, op by
 * op, with libbsipipe's builder (graph/bsipipe_builder.h), and runs it.
 *
 * The plan is 1F1B on w = 2 devices, written out by hand: device 0 holds
 * chunk 0 (the first half of the layers), device 1 chunk 1. Device 0 runs
 * one forward ahead (warm-up), then alternates backward and forward; device
 * 1, the last stage, alternates from the start. The builder checks each op
 * as it is appended (range, placement, duplicates); finish derives the
 * SEND/RECV pairs and their order, the gradient SYNC and the STEP exactly
 * as for the planner's own schedules, and validates the result. The engine
 * then trains on it: real computation on a tiny model, two iterations.
 *
 * Build against an installed bsipipe:
 *
 *     cc custom_schedule.c $(pkg-config --cflags --libs bsipipe) -o custom_schedule
 *
 * (make check builds and runs it from the source tree; make installcheck
 * against the installed library.) */
#include <bsipipe.h>

#include <stdio.h>
#include <stdlib.h>

enum { W = 2, M = 4 }; /* devices, micro-batches */

static int fail(const char *what)
{
    fprintf(stderr, "custom_schedule: %s: %s\n", what, bsipipe_error_detail());
    return 1;
}

/* 1F1B, op by op: F(mb) and B(mb) of chunk d on device d. */
static int write_1f1b(bsipipe_builder_t *b)
{
    int rc = 0;
    for (int d = 0; d < W && rc == 0; d++) {
        int warmup = W - 1 - d; /* forwards ahead of the first backward */
        int f = 0, bw = 0;
        for (; f < warmup && rc == 0; f++)
            rc = bsipipe_builder_append(b, d, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, f, 0, d);
        while (bw < M && rc == 0) {
            if (f < M)
                rc = bsipipe_builder_append(b, d, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, f++, 0, d);
            if (rc == 0)
                rc = bsipipe_builder_append(b, d, BSIPIPE_OP_B, BSIPIPE_PIPE_DOWN, bw++, 0, d);
        }
    }
    return rc;
}

int main(void)
{
    /* 1. The model and the config the plan is written for: 1F1B's placement
     *    (one chunk per device, one pipe, whole micro-batches: p = k = 1). */
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 4, 32, 2, 128, 256, 32};
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_1F1B);
    pc.w = W;
    pc.m = M;

    /* 2. The builder: append each device's compute ops in execution order. */
    bsipipe_builder_t *b = NULL;
    if (bsipipe_builder_create(&pc, &dims, &b) < 0)
        return fail("builder");
    if (write_1f1b(b) < 0) {
        bsipipe_builder_destroy(b);
        return fail("append");
    }
    /* A mistake is refused at once and leaves the plan as it was: chunk 1
     * belongs on device 1, not 0. */
    if (bsipipe_builder_append(b, 0, BSIPIPE_OP_F, BSIPIPE_PIPE_DOWN, 0, 0, 1) == 0) {
        fprintf(stderr, "custom_schedule: a misplaced op was accepted\n");
        bsipipe_builder_destroy(b);
        return 1;
    }
    printf("refused as expected: %s\n", bsipipe_error_detail());

    /* 3. Finish: transfers, SYNC and STEP derived, the plan validated. The
     *    schedule is ours to free; the builder is spent either way. */
    bsipipe_schedule_t *s = NULL;
    int rc = bsipipe_builder_finish(b, &s);
    bsipipe_builder_destroy(b);
    if (rc < 0)
        return fail("finish");
    for (int d = 0; d < W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        printf("device %d:", d);
        for (int i = 0; i < n; i++) {
            char label[96];
            printf("%s %s", i ? "," : "", bsipipe_op_format(&ops[i], label, sizeof label));
        }
        printf("\n");
    }

    /* 4. Its bubble under the paper's unit costs (F = 1, B = 2). */
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_sim_result_t *r = NULL;
    if (bsipipe_simulate(s, &unit, &r) < 0) {
        bsipipe_schedule_destroy(s);
        return fail("simulate");
    }
    double planned = r->bubble_ratio;
    printf("plan: makespan %.0f units, planned bubble %.1f%% (1F1B's (w-1)/(m+w-1) = %.1f%%)\n", r->makespan,
           100 * planned, 100.0 * (W - 1) / (M + W - 1));
    bsipipe_sim_result_destroy(r);

    /* 5. The engine runs a copy of the plan (o.plan); its config and model
     *    must be the plan's. */
    bsipipe_engine_options_t o = bsipipe_engine_options_default(bsipipe_schedule_model(s), bsipipe_schedule_config(s));
    o.plan = s;
    bsipipe_engine_t *e = NULL;
    rc = bsipipe_engine_create(&o, &e);
    bsipipe_schedule_destroy(s);
    if (rc < 0)
        return fail("engine");

    int n = M * dims.seq_len;
    int *tokens = malloc(sizeof *tokens * (size_t)n), *targets = malloc(sizeof *targets * (size_t)n);
    if (!tokens || !targets) {
        fprintf(stderr, "custom_schedule: out of memory\n");
        rc = 1;
    }
    for (int it = 0; rc == 0 && it < 2; it++) {
        for (int i = 0; i < n; i++) { /* a periodic text: the loss falls */
            tokens[i] = (i * 5) % 17;
            targets[i] = (i * 5 + 5) % 17;
        }
        double loss, gnorm;
        if (bsipipe_engine_iteration(e, tokens, targets, &loss, &gnorm) < 0) {
            rc = fail("iteration");
            break;
        }
        bsipipe_engine_stats_t st;
        bsipipe_engine_last_stats(e, &st);
        printf("iteration %d: loss %.4f, measured bubble %.1f%% (planned %.1f%%)\n", it + 1, loss,
               100 * st.bubble_ratio, 100 * planned);
    }
    free(tokens);
    free(targets);
    bsipipe_engine_destroy(e);
    return rc;
}
