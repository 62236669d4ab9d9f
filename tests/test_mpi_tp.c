/* test_mpi_tp: tensor parallelism across StarPU-MPI ranks
 * (docs/tensor-parallel.md, "The engine with --tp"). A TP group stays in
 * one process (its collectives are in-process tasks); what crosses ranks is
 * each TP rank's slice of an activation or gradient, each rank's shard of a
 * gradient SYNC (the naive mapping splits mirrored pairs) and every chunk's
 * squared gradient norm. Driven by tests/test_mpi_tp.sh:
 *
 *   test_mpi_tp single FILE          one process: per configuration, the
 *                                    D_t = 1 and the D_t = TP runs (loss and
 *                                    gradients of one forward/backward, the
 *                                    losses of ITERS AdamW iterations and
 *                                    the parameters after them) into FILE
 *   mpirun -np 2 test_mpi_tp mpi FILE
 *                                    the D_t = TP runs on the ranks, compared
 *                                    on rank 0 with FILE
 *
 * Configurations: GPT and LLaMA under BSIPipe (GPT with the naive mapping,
 * so that SYNC crosses ranks; LLaMA with the topology-aware one) and 1F1B,
 * LLaMA under Seq1F1B-I and GPT under ZB-H1 (split backward), w = 4,
 * D_t = 2; and GPT 1F1B at D_t = 4.
 *
 * Checks, against D_t = 1 in one process: the tolerances of test_engine_tp
 * (loss 1e-5 relative, every gradient 1e-4 of its tensor's largest,
 * parameters 0.01 * lr * ITERS absolute; derived there). Against the same
 * D_t in one process: bit for bit (the ranks run the same tasks on the same
 * data; the STEP's norm is summed per chunk in the same order whether the
 * chunk's part comes from this process or another); and the activation and
 * gradient-sync bytes inside and between ranks equal D_t times the
 * planner's for the mapping (the planner counts one TP rank's link, with
 * the exact shard sizes: the norms and GPT's wpe are replicated). */
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "tests/check.h"
#include "tests/grad_check.h"
#include "tests/test_data.h"

#include <mpi.h>
#include <stdlib.h>

enum { ITERS = 2 };

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 4, 64, 64, 32};
static const bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 8, 32, 4, 48, 64, 32};

typedef struct config {
    const bsipipe_model_dims_t *dims;
    bsipipe_schedule_kind_t kind;
    int naive, tp;
} config_t;

static const config_t configs[] = {
    {&gpt, BSIPIPE_SCHED_BSIPIPE, 1, 2},
    {&llama, BSIPIPE_SCHED_BSIPIPE, 0, 2},
    {&gpt, BSIPIPE_SCHED_1F1B, 0, 2},
    {&llama, BSIPIPE_SCHED_1F1B, 0, 2},
    {&gpt, BSIPIPE_SCHED_1F1B, 0, 4},
    {&llama, BSIPIPE_SCHED_SEQ1F1B_I, 0, 2},
    {&gpt, BSIPIPE_SCHED_ZB_H1, 0, 2},
};
enum { N_CONFIGS = sizeof configs / sizeof configs[0] };

typedef struct run {
    double loss0, loss[ITERS];
    float *grads, *params;
    double act[2], sync[2], pact[2], psync[2]; /* measured and planned bytes (in ranks, across) */
} run_t;

static const char *fam(const config_t *c)
{
    return c->dims->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama";
}

/* The planner's traffic for this engine's device-to-rank map. */
static void planned_traffic(bsipipe_engine_t *e, int w, run_t *out)
{
    int *dev_rank = malloc(sizeof(int) * (size_t)w);
    bsipipe_engine_ranks(e, NULL, NULL, dev_rank);
    bsipipe_cost_model_t cost = bsipipe_cost_model_unit();
    cost.device_node = dev_rank;
    bsipipe_sim_result_t *sim;
    if (bsipipe_simulate(bsipipe_engine_schedule(e), &cost, &sim) == 0) {
        memcpy(out->pact, sim->act_bytes, sizeof out->pact);
        memcpy(out->psync, sim->sync_bytes, sizeof out->psync);
        bsipipe_sim_result_destroy(sim);
    }
    free(dev_rank);
}

static int run_one(const config_t *c, int tp, int mpi, run_t *out)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(c->kind);
    pc.w = 4;
    pc.m = 4; /* BSIPipe: N_s = m k a multiple of the basic unit k w */
    pc.tp = tp;
    if (pc.k > 1)
        pc.k = 2;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(c->dims, &pc);
    o.watchdog_s = 120;
    o.mpi = mpi;
    o.naive_mapping = c->naive;
    const char *sk = bsipipe_schedule_kind_name(c->kind);
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s %s tp %d: %s", fam(c), sk, tp, bsipipe_error_detail());
    if (rc)
        return rc;
    int S = c->dims->seq_len;
    long np = bsipipe_engine_n_params(e);
    int *tokens = malloc(sizeof(int) * (size_t)(pc.m * S)), *targets = malloc(sizeof(int) * (size_t)(pc.m * S));
    out->grads = malloc(sizeof(float) * (size_t)np);
    out->params = malloc(sizeof(float) * (size_t)np);
    test_data_make(pc.m, S, c->dims->vocab, 7, tokens, targets);
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &out->loss0);
    CHECK(rc == 0, "forward_backward %s %s tp %d: %s", fam(c), sk, tp, bsipipe_error_detail());
    if (rc == 0)
        rc = bsipipe_engine_grads(e, out->grads);
    for (int it = 0; it < ITERS && rc == 0; it++) {
        test_data_make(pc.m, S, c->dims->vocab, 11 + (unsigned)it, tokens, targets);
        rc = bsipipe_engine_iteration(e, tokens, targets, &out->loss[it], NULL);
        CHECK(rc == 0, "iteration %d %s %s tp %d: %s", it, fam(c), sk, tp, bsipipe_error_detail());
    }
    if (rc == 0)
        rc = bsipipe_engine_params(e, out->params);
    if (rc == 0 && mpi) { /* the last iteration's traffic (every rank calls) */
        rc = bsipipe_engine_traffic(e, out->act, out->sync);
        planned_traffic(e, pc.w, out);
    }
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

static int run_write(FILE *f, const run_t *r, long np)
{
    return fwrite(&r->loss0, sizeof(double), 1, f) == 1 && fwrite(r->loss, sizeof(double), ITERS, f) == ITERS &&
                   fwrite(r->grads, sizeof(float), (size_t)np, f) == (size_t)np &&
                   fwrite(r->params, sizeof(float), (size_t)np, f) == (size_t)np
               ? 0
               : -1;
}

static int run_read(FILE *f, run_t *r, long np)
{
    r->grads = malloc(sizeof(float) * (size_t)np);
    r->params = malloc(sizeof(float) * (size_t)np);
    return fread(&r->loss0, sizeof(double), 1, f) == 1 && fread(r->loss, sizeof(double), ITERS, f) == ITERS &&
                   fread(r->grads, sizeof(float), (size_t)np, f) == (size_t)np &&
                   fread(r->params, sizeof(float), (size_t)np, f) == (size_t)np
               ? 0
               : -1;
}

static int single(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    for (int i = 0; i < N_CONFIGS; i++) {
        const config_t *c = &configs[i];
        long np = bsipipe_model_params(c->dims);
        for (int j = 0; j < 2; j++) {
            run_t r = {0};
            int tp = j ? c->tp : 1;
            if (run_one(c, tp, 0, &r) != 0 || run_write(f, &r, np) != 0) {
                CHECK(0, "%s %s tp %d: no result to write", fam(c), bsipipe_schedule_kind_name(c->kind), tp);
                run_free(&r);
                fclose(f);
                return check_finish("test_mpi_tp single");
            }
            printf("one process %-5s %-7s tp %d: loss %.9f, after %d iterations %.9f\n", fam(c),
                   bsipipe_schedule_kind_name(c->kind), tp, r.loss0, ITERS, r.loss[ITERS - 1]);
            run_free(&r);
        }
    }
    fclose(f);
    return check_finish("test_mpi_tp single");
}

static double max_abs(long n, const float *a, const float *b)
{
    double m = 0;
    for (long j = 0; j < n; j++) {
        double d = fabs((double)a[j] - (double)b[j]);
        if (d > m || d != d)
            m = d != d ? INFINITY : d;
    }
    return m;
}

static void compare(const config_t *c, int ranks, const run_t *r, const run_t *one, const run_t *same, long np)
{
    const char *sk = bsipipe_schedule_kind_name(c->kind);
    double lr = 1e-3, lerr = fabs(r->loss0 - one->loss0) / fabs(one->loss0);
    for (int it = 0; it < ITERS; it++)
        if (fabs(r->loss[it] - one->loss[it]) / fabs(one->loss[it]) > lerr)
            lerr = fabs(r->loss[it] - one->loss[it]) / fabs(one->loss[it]);
    char worst[64] = "";
    double gerr = grad_error(c->dims, r->grads, one->grads, worst, sizeof worst);
    double perr = max_abs(np, r->params, one->params);
    int bits = r->loss0 == same->loss0 && !memcmp(r->loss, same->loss, sizeof r->loss) &&
               !memcmp(r->grads, same->grads, sizeof(float) * (size_t)np) &&
               !memcmp(r->params, same->params, sizeof(float) * (size_t)np);
    printf("%d ranks %-5s %-7s %-5s tp %d: loss %.9f (tp 1 in one process %.9f), losses max rel diff %.2e, grads "
           "%.2e (%s), params after %d steps max abs diff %.2e; vs tp %d in one process: %s; bytes between ranks: "
           "act %.0f (planned %.0f per TP rank), sync %.0f (planned %.0f per TP rank)\n",
           ranks, fam(c), sk, c->naive ? "naive" : "aware", c->tp, r->loss0, one->loss0, lerr, gerr, worst, ITERS,
           perr, c->tp, bits ? "bit-identical" : "DIFFERENT", r->act[1], r->pact[1], r->sync[1], r->psync[1]);
    CHECK(lerr <= 1e-5, "%s %s tp %d on %d ranks: loss differs from tp 1 by %.3e relative", fam(c), sk, c->tp, ranks,
          lerr);
    CHECK(gerr <= 1e-4, "%s %s tp %d on %d ranks: gradients differ from tp 1 by %.3e (%s)", fam(c), sk, c->tp, ranks,
          gerr, worst);
    CHECK(perr <= 0.01 * lr * ITERS, "%s %s tp %d on %d ranks: parameters differ from tp 1 by %.3e", fam(c), sk,
          c->tp, ranks, perr);
    CHECK(bits, "%s %s tp %d on %d ranks: results differ from the same degree in one process (loss %.17g vs %.17g, "
          "grads %.3e, params %.3e)", fam(c), sk, c->tp, ranks, r->loss0, same->loss0,
          max_abs(np, r->grads, same->grads), max_abs(np, r->params, same->params));
    /* The planner counts the bytes of one TP rank (its link); the engine
     * all the group's ranks. */
    int T = c->tp;
    CHECK(r->act[1] == T * r->pact[1] && r->act[0] == T * r->pact[0], "%s %s tp %d: activation bytes %.0f/%.0f, "
          "planned per TP rank %.0f/%.0f", fam(c), sk, T, r->act[0], r->act[1], r->pact[0], r->pact[1]);
    CHECK(r->sync[1] == T * r->psync[1] && r->sync[0] == T * r->psync[0], "%s %s tp %d: sync bytes %.0f/%.0f, "
          "planned per TP rank %.0f/%.0f", fam(c), sk, T, r->sync[0], r->sync[1], r->psync[0], r->psync[1]);
    CHECK(r->act[1] > 0, "%s %s tp %d: no activation crossed ranks", fam(c), sk, c->tp);
    if (c->naive && c->kind == BSIPIPE_SCHED_BSIPIPE)
        CHECK(r->sync[1] > 0, "%s %s tp %d: the naive mapping should send gradient sync across ranks", fam(c), sk,
              c->tp);
}

static int multi(const char *path)
{
    int level, rank, size;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    FILE *f = rank == 0 ? fopen(path, "rb") : NULL;
    CHECK(rank != 0 || f, "cannot read %s (run the single mode first)", path);
    for (int i = 0; i < N_CONFIGS; i++) {
        const config_t *c = &configs[i];
        long np = bsipipe_model_params(c->dims);
        run_t one = {0}, same = {0}, r = {0};
        if (f && (run_read(f, &one, np) != 0 || run_read(f, &same, np) != 0))
            CHECK(0, "%s is truncated", path);
        if (run_one(c, c->tp, 1, &r) == 0 && rank == 0 && f)
            compare(c, size, &r, &one, &same, np);
        run_free(&one);
        run_free(&same);
        run_free(&r);
    }
    if (f)
        fclose(f);
    int failed = check_failures, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int rc = rank == 0 ? check_finish("test_mpi_tp") : (failed ? 1 : 0);
    MPI_Finalize();
    return rc || any ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "single"))
        return single(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "mpi"))
        return multi(argv[2]);
    fprintf(stderr, "usage: %s single FILE | mpi FILE (under mpirun)\n", argv[0]);
    return 2;
}
