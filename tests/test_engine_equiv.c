/* test_engine_equiv: every schedule, run as StarPU tasks under the bsipipe
 * policy and under built-in policies, gives the sequential reference
 * trainer's loss and gradients; and training follows the reference loss
 * curve. Small model, w = 4, p = 2 where the schedule interleaves, k = 2 where
 * it splits sequences, m = 4 (dualpipev and dualpipe 8). Under the bsipipe
 * policy, a validation pass (bsipipe_engine_evaluate) then gives the same
 * loss from the forwards alone, and keeps the records.
 *
 * Tolerance: the engine and the reference add the same terms in different
 * orders (gradients of the m·k pieces per chunk, and the two replicas of a
 * bidirectional schedule summed by SYNC), so each gradient element may differ
 * by about (m·k)·eps_f32 times the largest term; we allow 8·(m·k)·eps_f32
 * relative to the tensor's largest gradient. */
#include "tasks/bsipipe_engine.h"
#include "kernels/reference_trainer.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/grad_check.h"

#include <float.h>
#include <string.h>
#include <stdlib.h>

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};
static const bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 8, 32, 2, 48, 64, 32};

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

/* Uneven layer counts (issue 32): L = 10 and 11 over 4 or 8 chunks. */
static const bsipipe_model_dims_t gpt10 = {BSIPIPE_MODEL_GPT, 10, 32, 2, 64, 64, 32};
static const bsipipe_model_dims_t llama11 = {BSIPIPE_MODEL_LLAMA, 11, 32, 2, 48, 64, 32};
static const bsipipe_model_dims_t gpt30 = {BSIPIPE_MODEL_GPT, 30, 32, 2, 64, 64, 32};

/* m = 0: the schedule's default here (4, or 8 where m >= 2w); layout NULL:
 * the even split. */
static void check_shape(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy, int w,
                        int m, const char *layout)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = kind == BSIPIPE_SCHED_DUALPIPEV || kind == BSIPIPE_SCHED_DUALPIPE ? 8 : 4; /* their m >= 2w */
    pc.layout = layout;
    if (m > 0)
        pc.m = m;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, &pc);
    o.policy = policy;
    o.watchdog_s = 20;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s/%s: %s", bsipipe_schedule_kind_name(kind), policy, bsipipe_error_detail());
    if (rc)
        return;
    int S = dims->seq_len, *tokens = malloc(sizeof(int) * (size_t)(pc.m * S)), *targets = malloc(sizeof(int) * (size_t)(pc.m * S));
    make_data(pc.m, S, dims->vocab, 7, tokens, targets);
    double loss = 0, ref_loss = 0;
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
    CHECK(rc == 0, "run %s/%s: %s", bsipipe_schedule_kind_name(kind), policy, bsipipe_error_detail());
    long np = bsipipe_engine_n_params(e);
    float *g = malloc(sizeof(float) * (size_t)np);
    bsipipe_ref_trainer_t *ref;
    CHECK(bsipipe_ref_trainer_create(dims, &o.opt, o.seed, &ref) == 0, "reference");
    const int *starts = bsipipe_schedule_sub_starts(bsipipe_engine_schedule(e));
    CHECK(bsipipe_ref_trainer_forward_backward(ref, pc.m, tokens, targets, pc.k, pc.k > 1 ? starts : NULL,
                                               &ref_loss) == 0, "reference run");
    if (rc == 0) {
        bsipipe_engine_grads(e, g);
        char worst[64] = "";
        double err = grad_error(dims, g, bsipipe_ref_trainer_grads(ref), worst, sizeof worst);
        double tol = 8.0 * pc.m * pc.k * FLT_EPSILON;
        printf("%-6s %-9s %-6s w=%d m=%-2d loss %.7f ref %.7f  grad max rel diff %.2e (%s)%s%s\n",
               dims->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", bsipipe_schedule_kind_name(kind), policy, pc.w, pc.m, loss,
               ref_loss, err, worst, layout ? " layout " : "",
               layout ? bsipipe_schedule_config(bsipipe_engine_schedule(e))->layout : "");
        CHECK(fabs(loss - ref_loss) <= 4 * tol * fabs(ref_loss), "%s/%s loss %.9f vs %.9f",
              bsipipe_schedule_kind_name(kind), policy, loss, ref_loss);
        CHECK(err <= tol, "%s/%s gradients differ: %.3e > %.3e (%s)", bsipipe_schedule_kind_name(kind), policy, err,
              tol, worst);
    }
    /* A validation pass (bsipipe_engine_evaluate): the same loss (to 1e-9)
     * from the forwards alone: no backward ran (every gradient 0), and
     * the last pass's records (what the trace shows) are kept. */
    if (rc == 0 && !strcmp(policy, "bsipipe")) {
        const bsipipe_engine_op_record_t *rec;
        int n = 0;
        bsipipe_engine_records(e, 0, &rec, &n);
        bsipipe_engine_op_record_t *before = malloc(sizeof *before * (size_t)(n > 0 ? n : 1));
        memcpy(before, rec, sizeof *before * (size_t)n);
        double eval_loss = -1;
        int erc = bsipipe_engine_evaluate(e, tokens, targets, &eval_loss);
        CHECK(erc == 0, "evaluate %s: %s", bsipipe_schedule_kind_name(kind), bsipipe_error_detail());
        /* the head's forward kernel sums the cross-entropy as the fused
         * forward-backward one does, up to rounding */
        CHECK(fabs(eval_loss - loss) <= 1e-9 * fabs(loss), "%s: evaluate's loss %.17g, the forward-backward's %.17g",
              bsipipe_schedule_kind_name(kind), eval_loss, loss);
        bsipipe_engine_grads(e, g);
        long nonzero = 0;
        for (long i = 0; i < np; i++)
            nonzero += g[i] != 0;
        CHECK(nonzero == 0, "%s: %ld gradients non-zero after a forward-only pass", bsipipe_schedule_kind_name(kind),
              nonzero);
        bsipipe_engine_records(e, 0, &rec, &n);
        CHECK(!memcmp(before, rec, sizeof *before * (size_t)n), "%s: evaluate replaced the last pass's records",
              bsipipe_schedule_kind_name(kind));
        free(before);
    }
    bsipipe_ref_trainer_destroy(ref);
    bsipipe_engine_destroy(e);
    free(g);
    free(tokens);
    free(targets);
}

static void check_layout(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy, int m,
                         const char *layout)
{
    check_shape(dims, kind, policy, 4, m, layout);
}

static void check_m(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy, int m)
{
    check_layout(dims, kind, policy, m, NULL);
}

static void check_one(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy)
{
    check_m(dims, kind, policy, 0);
}

int main(void)
{
    const char *only = getenv("BSIPIPE_TEST_SCHEDULE");
    const char *policies[] = {"bsipipe", "eager", "lws"};
    /* StarPU's performance-model and priority policies on the flagship and a
     * baseline (dmda calibrates as it goes; placement is kept either way). */
    if (!only || !strcmp(only, "bsipipe") || !strcmp(only, "1f1b"))
        for (int i = 0; i < 2; i++) {
            check_one(&gpt, i ? BSIPIPE_SCHED_1F1B : BSIPIPE_SCHED_BSIPIPE, "dmda");
            check_one(&gpt, i ? BSIPIPE_SCHED_1F1B : BSIPIPE_SCHED_BSIPIPE, "prio");
        }
    for (int f = 0; f < 2; f++)
        for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++) {
            if (only && strcmp(only, bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind)))
                continue;
            for (int p = 0; p < 3; p++) {
                if (f == 1 && p > 0) /* LLaMA under the in-order policy only */
                    continue;
                check_one(f ? &llama : &gpt, (bsipipe_schedule_kind_t)kind, policies[p]);
            }
        }
    /* Micro-batch counts w does not divide (issue 32). Interleaved: Megatron's groups of
     * G units (G = 5 for N_s = 5 and 9, 6 for N_s = 6 at w = 4). */
    if (!only || !strcmp(only, "1f1b-i")) {
        check_m(&gpt, BSIPIPE_SCHED_1F1B_I, "bsipipe", 5);
        check_m(&gpt, BSIPIPE_SCHED_1F1B_I, "eager", 9);
    }
    if (!only || !strcmp(only, "seq1f1b-i"))
        check_m(&llama, BSIPIPE_SCHED_SEQ1F1B_I, "bsipipe", 3);
    /* BSIPipe with a last partial basic unit (m = 6: units of 4 and 2) and
     * an odd m (3: one down, two up) */
    if (!only || !strcmp(only, "bsipipe")) {
        check_m(&gpt, BSIPIPE_SCHED_BSIPIPE, "bsipipe", 6);
        check_m(&llama, BSIPIPE_SCHED_BSIPIPE, "eager", 3);
    }
    /* zb-i in one round of 6 micro-batches and with fewer micro-batches than devices (torch's
     * rounds, m = 3 at w = 4) */
    if (!only || !strcmp(only, "zb-i")) {
        check_m(&gpt, BSIPIPE_SCHED_ZB_I, "bsipipe", 6);
        check_m(&llama, BSIPIPE_SCHED_ZB_I, "eager", 3);
    }
    /* BitPipe with a last partial unit: m = 6 at w = 4 (a unit of 4, then
     * 1 down and 1 up) and m = 5 (then 0 down, 1 up) */
    if (!only || !strcmp(only, "bitpipe")) {
        check_m(&gpt, BSIPIPE_SCHED_BITPIPE, "bsipipe", 6);
        check_m(&llama, BSIPIPE_SCHED_BITPIPE, "eager", 5);
    }
    /* Layers placed unevenly: by cost (L = 10 on 4 chunks: the head's chunk
     * lighter) and by a layout string (L = 11 on BSIPipe's 8 chunks) */
    if (!only || !strcmp(only, "1f1b"))
        check_layout(&gpt10, BSIPIPE_SCHED_1F1B, "bsipipe", 0, "auto");
    if (!only || !strcmp(only, "zb-v"))
        check_layout(&gpt10, BSIPIPE_SCHED_ZB_V, "eager", 0, "auto");
    if (!only || !strcmp(only, "bsipipe"))
        check_layout(&llama11, BSIPIPE_SCHED_BSIPIPE, "bsipipe", 6, "Et*2|t|t|t*2|(t|)*2t*2|tL");
    if (!only || !strcmp(only, "seq1f1b-i"))
        check_layout(&gpt10, BSIPIPE_SCHED_SEQ1F1B_I, "bsipipe", 3, "auto");
    /* The shape: 30 layers on w = 8 placed by cost, m = 12, every
     * schedule that runs m = 12 at w = 8 (dualpipe and dualpipev need m >= 16) */
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++) {
        if ((only && strcmp(only, bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind))) ||
            kind == BSIPIPE_SCHED_DUALPIPE || kind == BSIPIPE_SCHED_DUALPIPEV)
            continue;
        check_shape(&gpt30, (bsipipe_schedule_kind_t)kind, "bsipipe", 8, 12, "auto");
    }
    return check_finish("test_engine_equiv");
}
