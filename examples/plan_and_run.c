/* plan_and_run.c: a small driver built on libbsipipe's public API alone.
 *
 * It plans a BSIPipe schedule on 4 emulated devices, checks it, predicts its
 * bubble with the simulator, then runs the same plan on StarPU (one CPU
 * worker per device, every op a task) for two iterations and compares the
 * measured bubble with the planned one.
 *
 * Build against an installed bsipipe:
 *
 *     cc plan_and_run.c $(pkg-config --cflags --libs bsipipe) -o plan_and_run
 *
 * (make check builds it from the source tree; make installcheck builds it
 * against the installed library through pkg-config.) Every function returns 0
 * or a negative error code and leaves a sentence in bsipipe_error_detail(). */
#include <bsipipe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Emulated device speed: F, B and W tasks sleep for their FLOPs at this rate
 * instead of computing (bsipipe-train --emulate --device-tflops 0.05), so the
 * four devices fit on any machine and the timing follows the plan's costs. */
#define DEVICE_FLOPS 0.05e12

static int fail(const char *what)
{
    fprintf(stderr, "plan_and_run: %s: %s\n", what, bsipipe_error_detail());
    return 1;
}

int main(void)
{
    /* 0. Header and library versions: they differ when the program runs with
     *    another libbsipipe than it was compiled against. */
    printf("bsipipe headers %s, library %s\n", BSIPIPE_VERSION_STRING, bsipipe_version());
    if (strcmp(BSIPIPE_VERSION_STRING, bsipipe_version()) != 0)
        fprintf(stderr, "plan_and_run: note: built against %s, running with %s\n", BSIPIPE_VERSION_STRING,
                bsipipe_version());

    /* 1. The model: a small GPT (8 layers, hidden 128, 4 heads, MLP 512,
     *    vocabulary 256, 128-token sequences). */
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 128, 4, 512, 256, 128};

    /* 2. The parallel config: BSIPipe's defaults (p = 2 V-shaped chunks per
     *    device, k = 2 subsequences per micro-batch), on w = 4 devices with
     *    m = 4 micro-batches, so N_s = m * k = 8 = one basic unit (k * w).
     *    validate() names the rule and the nearest valid values on error. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = 4;
    if (bsipipe_parallel_config_validate(&pc, &dims) < 0)
        return fail("config");

    /* 3. The schedule: one ordered op list per device (F, B, SEND, RECV, SYNC,
     *    STEP). We own it and free it with bsipipe_schedule_destroy(). */
    bsipipe_schedule_t *s = NULL;
    if (bsipipe_schedule_create(&pc, &dims, &s) < 0)
        return fail("schedule");
    /* The validator: every op once, dependencies satisfiable, no deadlock
     * under rendezvous sends (a deadlock would be named with its cycle). */
    if (bsipipe_schedule_validate(s) < 0) {
        bsipipe_schedule_destroy(s);
        return fail("validate");
    }

    /* 4. The simulator under the emulated device's FLOPs costs (transfers
     *    free, as between the engine's CPU workers): the planned bubble. */
    bsipipe_cost_model_t cost = bsipipe_cost_model_flops(DEVICE_FLOPS);
    cost.intra_bandwidth = cost.inter_bandwidth = 0;
    cost.intra_latency = cost.inter_latency = 0;
    bsipipe_sim_result_t *plan = NULL;
    if (bsipipe_simulate(s, &cost, &plan) < 0) {
        bsipipe_schedule_destroy(s);
        return fail("simulate");
    }
    double planned = plan->bubble_ratio;
    printf("plan: %s, w=%d p=%d k=%d m=%d: %ld ops on %d devices, makespan %.1f ms, planned bubble %.1f%%\n",
           bsipipe_schedule_kind_name(pc.schedule), pc.w, pc.p, pc.k, pc.m, bsipipe_schedule_n_ops(s),
           bsipipe_schedule_n_devices(s), 1e3 * plan->makespan, 100 * planned);
    bsipipe_sim_result_destroy(plan);
    bsipipe_schedule_destroy(s); /* the engine plans its own copy from the same config */

    /* 5. The engine: it starts StarPU with one CPU worker per device and the
     *    in-order "bsipipe" policy (each device runs its ops in plan order),
     *    and places the parameters. Do not call starpu_init yourself: the
     *    engine owns its StarPU session (create refuses with -EBUSY if StarPU
     *    is already running). */
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, &pc);
    o.policy = "bsipipe";
    o.emulate_flops = DEVICE_FLOPS; /* emulated devices: loss values are meaningless */
    bsipipe_engine_t *e = NULL;
    if (bsipipe_engine_create(&o, &e) < 0)
        return fail("engine");

    /* 6. Two iterations on byte tokens: m sequences of S tokens, targets are
     *    the next token. */
    int n = pc.m * dims.seq_len, rc = 0;
    int *tokens = malloc(sizeof *tokens * (size_t)n), *targets = malloc(sizeof *targets * (size_t)n);
    if (!tokens || !targets) {
        fprintf(stderr, "plan_and_run: out of memory\n");
        rc = 1;
    }
    for (int it = 0; rc == 0 && it < 2; it++) {
        for (int i = 0; i < n; i++) {
            tokens[i] = (i * 7 + it) % dims.vocab;
            targets[i] = (i * 7 + it + 1) % dims.vocab;
        }
        double loss, gnorm;
        if (bsipipe_engine_iteration(e, tokens, targets, &loss, &gnorm) < 0) {
            rc = fail("iteration");
            break;
        }
        bsipipe_engine_stats_t st;
        bsipipe_engine_last_stats(e, &st);
        printf("iteration %d: %.3f s, %.0f tokens/s, measured bubble %.1f%% (planned %.1f%%) [EMULATED]\n", it + 1,
               st.wall_s, st.tokens_per_s, 100 * st.bubble_ratio, 100 * planned);
    }

    /* 7. Free everything: the engine shuts its StarPU session down. */
    free(tokens);
    free(targets);
    bsipipe_engine_destroy(e);
    return rc;
}
