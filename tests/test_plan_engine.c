/* test_plan_engine: plans composed outside the planner run on the engine and
 * give the sequential reference trainer's loss and gradients, like every
 * preset does (tests/test_engine_equiv.c, same tolerance):
 *  - the hand-written JSON plan of tests/data (Seq1F1B's placement in an
 *    order of its own; model from the file), under the in-order policy and
 *    under StarPU's eager;
 *  - plans built op by op with the builder in an order no preset uses (every
 *    forward of a device, then every backward in reverse) on three
 *    placements: two V-shaped pipes (bsipipe), two pipes (chimera), and a
 *    split backward (zb-h1, W right after its B);
 *  - the engine refuses a plan whose config differs from its options'. */
#include "tasks/bsipipe_engine.h"
#include "kernels/reference_trainer.h"
#include "graph/bsipipe_builder.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/grad_check.h"
#include "tests/test_data.h"

#include <float.h>
#include <stdlib.h>

/* Runs plan s on the engine under `policy` and compares with the reference. */
static void check_plan(const char *what, const bsipipe_schedule_t *s, const char *policy)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    const bsipipe_model_dims_t *dims = bsipipe_schedule_model(s);
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, pc);
    o.plan = s;
    o.policy = policy;
    o.watchdog_s = 20;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "%s/%s: create: %s", what, policy, bsipipe_error_detail());
    if (rc)
        return;
    /* the engine runs the plan given, not the preset of its config */
    int n1, n2;
    const bsipipe_op_t *a = bsipipe_schedule_device_ops(bsipipe_engine_schedule(e), 0, &n1);
    const bsipipe_op_t *b = bsipipe_schedule_device_ops(s, 0, &n2);
    CHECK(n1 == n2 && !memcmp(a, b, sizeof *a * (size_t)n1), "%s: the engine's plan is not the one given", what);
    int S = dims->seq_len, *tokens = malloc(sizeof(int) * (size_t)(pc->m * S));
    int *targets = malloc(sizeof(int) * (size_t)(pc->m * S));
    test_data_make(pc->m, S, dims->vocab, 11, tokens, targets);
    double loss = 0, ref_loss = 0;
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
    CHECK(rc == 0, "%s/%s: run: %s", what, policy, bsipipe_error_detail());
    long np = bsipipe_engine_n_params(e);
    float *g = malloc(sizeof(float) * (size_t)np);
    bsipipe_ref_trainer_t *ref;
    CHECK(bsipipe_ref_trainer_create(dims, &o.opt, o.seed, &ref) == 0, "reference");
    CHECK(bsipipe_ref_trainer_forward_backward(ref, pc->m, tokens, targets, pc->k,
                                               pc->k > 1 ? bsipipe_schedule_sub_starts(s) : NULL, &ref_loss) == 0,
          "reference run");
    if (rc == 0) {
        bsipipe_engine_grads(e, g);
        double err = grad_error(dims, g, bsipipe_ref_trainer_grads(ref), NULL, 0);
        double tol = 8.0 * pc->m * pc->k * FLT_EPSILON;
        printf("%-34s %-8s loss %.7f ref %.7f  grad max rel diff %.2e\n", what, policy, loss, ref_loss, err);
        CHECK(fabs(loss - ref_loss) <= 4 * tol * fabs(ref_loss), "%s/%s: loss %.9f vs %.9f", what, policy, loss,
              ref_loss);
        CHECK(err <= tol, "%s/%s: gradients differ: %.3e > %.3e", what, policy, err, tol);
    }
    bsipipe_ref_trainer_destroy(ref);
    bsipipe_engine_destroy(e);
    free(g);
    free(tokens);
    free(targets);
}

/* Compute ops of a device sorted by (mb, sub, chunk): every forward
 * ascending, then every backward descending (W right after its B). Each
 * dependency points to a smaller key (forward) or a larger one (backward),
 * so every device meeting them in this one global order cannot get stuck. */
static int build_forward_first(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                               bsipipe_schedule_t **out)
{
    bsipipe_builder_t *b;
    int rc = bsipipe_builder_create(pc, dims, &b);
    if (rc < 0)
        return rc;
    const bsipipe_schedule_t *pl = bsipipe_builder_placement(b);
    int C = bsipipe_schedule_n_chunks(pl), split = bsipipe_schedule_kind_traits(pc->schedule).split_backward;
    for (int d = 0; d < pc->w && rc == 0; d++) {
        for (int mb = 0; mb < pc->m && rc == 0; mb++)
            for (int sub = 0; sub < pc->k && rc == 0; sub++)
                for (int c = 0; c < C && rc == 0; c++) {
                    bsipipe_pipe_t pipe = bsipipe_schedule_mb_pipe(pl, mb);
                    if (bsipipe_schedule_chunk_device(pl, pipe, c) == d)
                        rc = bsipipe_builder_append(b, d, BSIPIPE_OP_F, pipe, mb, sub, c);
                }
        for (int mb = pc->m - 1; mb >= 0 && rc == 0; mb--)
            for (int sub = pc->k - 1; sub >= 0 && rc == 0; sub--)
                for (int c = C - 1; c >= 0 && rc == 0; c--) {
                    bsipipe_pipe_t pipe = bsipipe_schedule_mb_pipe(pl, mb);
                    if (bsipipe_schedule_chunk_device(pl, pipe, c) != d)
                        continue;
                    rc = bsipipe_builder_append(b, d, BSIPIPE_OP_B, pipe, mb, sub, c);
                    if (rc == 0 && split)
                        rc = bsipipe_builder_append(b, d, BSIPIPE_OP_W, pipe, mb, sub, c);
                }
    }
    if (rc == 0)
        rc = bsipipe_builder_finish(b, out);
    bsipipe_builder_destroy(b);
    return rc;
}

int main(void)
{
    const char *src = getenv("srcdir") ? getenv("srcdir") : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/plan-seq1f1b-w2.json", src);
    bsipipe_schedule_t *s;
    int rc = bsipipe_schedule_import_json(path, NULL, &s);
    CHECK(rc == 0, "import %s: %s", path, bsipipe_error_detail());
    if (rc == 0) {
        check_plan("tests/data/plan-seq1f1b-w2.json", s, "bsipipe");
        check_plan("tests/data/plan-seq1f1b-w2.json", s, "eager");

        /* a plan that is not the options' config is refused, naming the field */
        bsipipe_parallel_config_t other = *bsipipe_schedule_config(s);
        other.m = 4;
        bsipipe_engine_options_t o = bsipipe_engine_options_default(bsipipe_schedule_model(s), &other);
        o.plan = s;
        bsipipe_engine_t *e = NULL;
        CHECK(bsipipe_engine_create(&o, &e) == -EINVAL && e == NULL, "mismatched plan accepted");
        CHECK_CONTAINS(bsipipe_error_detail(), "differs from the options' in m");
        bsipipe_schedule_destroy(s);
    }

    static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};
    const struct { bsipipe_schedule_kind_t kind; int w, m; } cases[] = {
        {BSIPIPE_SCHED_BSIPIPE, 2, 2}, {BSIPIPE_SCHED_CHIMERA, 4, 4}, {BSIPIPE_SCHED_ZB_H1, 4, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(cases[i].kind);
        pc.w = cases[i].w;
        pc.m = cases[i].m;
        char what[64];
        snprintf(what, sizeof what, "built: %s w=%d forward-first", bsipipe_schedule_kind_name(pc.schedule), pc.w);
        rc = build_forward_first(&pc, &gpt, &s);
        CHECK(rc == 0, "%s: %s", what, bsipipe_error_detail());
        if (rc == 0) {
            check_plan(what, s, "bsipipe");
            bsipipe_schedule_destroy(s);
        }
    }
    return check_finish("test_plan_engine");
}
