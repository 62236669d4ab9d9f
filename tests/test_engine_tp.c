/* test_engine_tp: tensor parallelism in the engine (docs/tensor-parallel.md).
 * The same model, seed, data and plan run with D_t = 2 and 4 (a device is
 * then D_t StarPU workers, every segment and collective a task) must give the
 * D_t = 1 run's loss and, after one forward-backward, its gradients, and
 * after a few AdamW iterations its parameters (gathered from the shards), for
 * GPT and LLaMA under the bsipipe, 1f1b and seq1f1b-i schedules. Bad degrees
 * are refused with BSIPIPE_ECONFIG naming the rule.
 *
 * Tolerance. Sharding reorders sums: the row-parallel products and the
 * reduce-scatters add D_t partial sums, the replicated gradients are summed
 * over ranks, the cross-entropy combines per-rank statistics. test_kernel_tp
 * bounds one chunk chain at 2 R C gamma_K (fp32 ~1e-3 relative, measured
 * <= 5.3e-7). Here the gradients are compared relative to each tensor's
 * largest element (grad_error) and allowed 1e-4, the loss 1e-5 relative.
 * After ITERS AdamW steps each parameter moves by at most ~lr per step and
 * AdamW's normalisation can amplify a tiny gradient difference on elements
 * whose gradient is near zero up to a fraction of lr: parameters are allowed
 * an absolute 0.05 * lr * ITERS (the updates themselves are ~lr). */
#include "tasks/bsipipe_engine.h"
#include "graph/bsipipe_error.h"
#include "tests/check.h"
#include "tests/grad_check.h"

#include <stdlib.h>

enum { ITERS = 3 };

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 4, 32, 4, 64, 64, 32};
static const bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 4, 32, 4, 48, 64, 32};

static void make_data(int m, int S, int V, unsigned seed, int *tokens, int *targets)
{
    unsigned x = seed * 2654435761u + 12345u;
    for (int mb = 0; mb < m; mb++) {
        int prev = 0;
        for (int i = 0; i <= S; i++) {
            x = x * 1664525u + 1013904223u;
            int t = (int)((x >> 8) % (unsigned)V);
            if (i > 0) {
                tokens[mb * S + i - 1] = prev;
                targets[mb * S + i - 1] = t;
            }
            prev = t;
        }
    }
}

typedef struct run {
    double loss0, loss[ITERS];
    float *grads, *params;
} run_t;

static int run_one(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp, const char *policy,
                   run_t *out)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 2;
    pc.m = 2;
    pc.tp = tp;
    if (pc.k > 1)
        pc.k = 2;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, &pc);
    o.policy = policy;
    o.watchdog_s = 60;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s tp %d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    if (rc)
        return rc;
    int S = dims->seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)(pc.m * S)), *targets = malloc(sizeof(int) * (size_t)(pc.m * S));
    long np = bsipipe_engine_n_params(e);
    out->grads = malloc(sizeof(float) * (size_t)np);
    out->params = malloc(sizeof(float) * (size_t)np);
    make_data(pc.m, S, dims->vocab, 7, tokens, targets);
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &out->loss0);
    CHECK(rc == 0, "forward_backward %s tp %d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    if (rc == 0)
        rc = bsipipe_engine_grads(e, out->grads);
    for (int it = 0; it < ITERS && rc == 0; it++) {
        make_data(pc.m, S, dims->vocab, 11 + (unsigned)it, tokens, targets);
        rc = bsipipe_engine_iteration(e, tokens, targets, &out->loss[it], NULL);
        CHECK(rc == 0, "iteration %d %s tp %d: %s", it, bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    }
    if (rc == 0)
        rc = bsipipe_engine_params(e, out->params);
    free(tokens);
    free(targets);
    bsipipe_engine_destroy(e);
    return rc;
}

static void run_free(run_t *r)
{
    free(r->grads);
    free(r->params);
}

static void compare(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy, int tp,
                    const run_t *ref, const run_t *r, double lr)
{
    const char *fam = dims->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", *sk = bsipipe_schedule_kind_name(kind);
    char worst[64] = "";
    double gerr = grad_error(dims, r->grads, ref->grads, worst, sizeof worst);
    double perr = 0, lerr = fabs(r->loss0 - ref->loss0) / fabs(ref->loss0);
    long np = 0;
    {
        bsipipe_model_dims_t d = *dims;
        np = bsipipe_model_params(&d);
    }
    for (long j = 0; j < np; j++)
        if (fabs((double)r->params[j] - ref->params[j]) > perr)
            perr = fabs((double)r->params[j] - ref->params[j]);
    for (int it = 0; it < ITERS; it++)
        if (fabs(r->loss[it] - ref->loss[it]) / fabs(ref->loss[it]) > lerr)
            lerr = fabs(r->loss[it] - ref->loss[it]) / fabs(ref->loss[it]);
    printf("%-5s %-9s %-7s tp %d: loss %.7f (tp 1 %.7f) max rel loss diff %.2e, grad max rel diff %.2e (%s), "
           "params after %d steps max abs diff %.2e\n",
           fam, sk, policy, tp, r->loss0, ref->loss0, lerr, gerr, worst, ITERS, perr);
    CHECK(lerr <= 1e-5, "%s %s tp %d: loss differs by %.3e relative", fam, sk, tp, lerr);
    CHECK(gerr <= 1e-4, "%s %s tp %d: gradients differ by %.3e (%s)", fam, sk, tp, gerr, worst);
    CHECK(perr <= 0.05 * lr * ITERS, "%s %s tp %d: parameters differ by %.3e", fam, sk, tp, perr);
}

static void check_equal(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy,
                        const int *tps, int n_tp)
{
    run_t ref = {0};
    if (run_one(dims, kind, 1, "bsipipe", &ref) == 0)
        for (int j = 0; j < n_tp; j++) {
            run_t r = {0};
            if (run_one(dims, kind, tps[j], policy, &r) == 0)
                compare(dims, kind, policy, tps[j], &ref, &r, 1e-3);
            run_free(&r);
        }
    run_free(&ref);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const int both[] = {2, 4}, two[] = {2};
    const bsipipe_schedule_kind_t kinds[] = {BSIPIPE_SCHED_BSIPIPE, BSIPIPE_SCHED_1F1B, BSIPIPE_SCHED_SEQ1F1B_I};
    for (int i = 0; i < 3; i++) {
        check_equal(&gpt, kinds[i], "bsipipe", both, 2);
        check_equal(&llama, kinds[i], "bsipipe", i == 0 ? both : two, i == 0 ? 2 : 1);
    }
    return check_finish("test_engine_tp");
}
