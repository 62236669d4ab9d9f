/* test_mpi_equiv: the engine across StarPU-MPI ranks gives the single-process
 * engine's results bit for bit, and the sequential reference's within the
 * engine tolerance; cross-rank traffic equals the planner's prediction.
 * Driven by tests/test_mpi.sh:
 *
 *   test_mpi_equiv single FILE          one process: writes, per schedule,
 *                                       the loss and gradients of one
 *                                       forward/backward and the parameters
 *                                       after two AdamW iterations
 *   mpirun -np R test_mpi_equiv mpi FILE aware|naive
 *                                       the same on R ranks, compared with
 *                                       FILE on rank 0
 *
 * Schedules: BSIPipe, Seq1F1B-I and 1F1B (BSIPIPE_TEST_SCHEDULES overrides,
 * comma separated). w = 4 devices (8 with 4 ranks and the aware mapping, so
 * that mirrored pairs fit on a rank). Traffic: with the aware mapping no
 * gradient sync crosses ranks; with the naive one the bytes counted equal the
 * planner's simulation under the same device-to-rank map. */
#include "tasks/bsipipe_engine.h"
#include "kernels/reference_trainer.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "tests/check.h"
#include "tests/test_data.h"

#include <float.h>
#include <mpi.h>
#include <stdlib.h>

/* 16 layers: Seq1F1B-I's two chunks per device on 8 devices. */
static const bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 16, 32, 2, 64, 64, 32};

/* Largest |a - b| / max|b| over the model. */
static double rel_diff(long n, const float *a, const float *b)
{
    double diff = 0, big = 0;
    for (long j = 0; j < n; j++) {
        double d = fabs((double)a[j] - (double)b[j]);
        if (d > diff || d != d)
            diff = d != d ? INFINITY : d;
        if (fabs(b[j]) > big)
            big = fabs(b[j]);
    }
    return big > 0 ? diff / big : diff;
}

/* One schedule's results: loss and gradients of a forward/backward, then
 * the parameters after two full iterations. */
struct result {
    double loss;
    float *grads, *params;
};

static int run_engine(bsipipe_schedule_kind_t kind, int w, int mpi, int naive, struct result *out,
                      bsipipe_engine_t **keep)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    /* BSIPipe: N_s = m k a multiple of the basic unit k w; DualPipe(V): m >= 2w */
    pc.m = kind == BSIPIPE_SCHED_DUALPIPEV || kind == BSIPIPE_SCHED_DUALPIPE ? 2 * w : w;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, &pc);
    o.watchdog_s = 60;
    o.mpi = mpi;
    o.naive_mapping = naive;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s: %s", bsipipe_schedule_kind_name(kind), bsipipe_error_detail());
    if (rc)
        return rc;
    long np = bsipipe_engine_n_params(e), ntok = (long)pc.m * dims.seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)ntok), *targets = malloc(sizeof(int) * (size_t)ntok);
    out->grads = malloc(sizeof(float) * (size_t)np);
    out->params = malloc(sizeof(float) * (size_t)np);
    test_data_make(pc.m, dims.seq_len, dims.vocab, 7, tokens, targets);
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &out->loss);
    CHECK(rc == 0, "forward/backward %s: %s", bsipipe_schedule_kind_name(kind), bsipipe_error_detail());
    if (rc == 0)
        rc = bsipipe_engine_grads(e, out->grads);
    for (int it = 0; it < 2 && rc == 0; it++) {
        test_data_make(pc.m, dims.seq_len, dims.vocab, 11 + (unsigned)it, tokens, targets);
        double l;
        rc = bsipipe_engine_iteration(e, tokens, targets, &l, NULL);
        CHECK(rc == 0, "iteration %s: %s", bsipipe_schedule_kind_name(kind), bsipipe_error_detail());
    }
    if (rc == 0)
        rc = bsipipe_engine_params(e, out->params);
    free(tokens);
    free(targets);
    if (keep && rc == 0)
        *keep = e;
    else
        bsipipe_engine_destroy(e);
    return rc;
}

static int parse_schedules(bsipipe_schedule_kind_t *kinds)
{
    const char *env = getenv("BSIPIPE_TEST_SCHEDULES");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env && *env ? env : "bsipipe,seq1f1b-i,1f1b,zb-v,bsipipe-zb,seq-zbv,dualpipev,dualpipe,zb-i,zb-h2");
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ","))
        if (bsipipe_schedule_kind_parse(tok, &kinds[n]) == 0)
            n++;
    return n;
}

static int single(const char *path)
{
    bsipipe_schedule_kind_t kinds[16];
    int n = parse_schedules(kinds);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    for (int i = 0; i < n; i++)
        for (int w = 4; w <= 8; w += 4) {
            struct result r;
            if (run_engine(kinds[i], w, 0, 0, &r, NULL) != 0)
                return 1;
            long np = bsipipe_model_params(&dims);
            fwrite(&r.loss, sizeof r.loss, 1, f);
            fwrite(r.grads, sizeof(float), (size_t)np, f);
            fwrite(r.params, sizeof(float), (size_t)np, f);
            printf("single %-9s w=%d loss %.9f\n", bsipipe_schedule_kind_name(kinds[i]), w, r.loss);
            free(r.grads);
            free(r.params);
        }
    fclose(f);
    return check_finish("test_mpi_equiv single");
}

/* The planner's cross-rank traffic for this engine's mapping. */
static void predicted_traffic(bsipipe_engine_t *e, int w, double act[2], double sync[2])
{
    int *dev_rank = malloc(sizeof(int) * (size_t)w);
    bsipipe_engine_ranks(e, NULL, NULL, dev_rank);
    bsipipe_cost_model_t cost = bsipipe_cost_model_unit();
    cost.device_node = dev_rank;
    bsipipe_sim_result_t *sim;
    int rc = bsipipe_simulate(bsipipe_engine_schedule(e), &cost, &sim);
    CHECK(rc == 0, "simulate: %s", bsipipe_error_detail());
    if (rc == 0) {
        memcpy(act, sim->act_bytes, sizeof sim->act_bytes);
        memcpy(sync, sim->sync_bytes, sizeof sim->sync_bytes);
        bsipipe_sim_result_destroy(sim);
    }
    free(dev_rank);
}

static int multi(const char *path, int naive)
{
    int level, rank, size;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bsipipe_schedule_kind_t kinds[16];
    int n = parse_schedules(kinds), w = size == 4 && !naive ? 8 : 4;
    long np = bsipipe_model_params(&dims);
    FILE *f = rank == 0 ? fopen(path, "rb") : NULL;
    CHECK(rank != 0 || f, "cannot read %s (run the single mode first)", path);
    float *want_g = malloc(sizeof(float) * (size_t)np), *want_p = malloc(sizeof(float) * (size_t)np);
    float *r_scratch = malloc(sizeof(float) * (size_t)np);
    for (int i = 0; i < n; i++) {
        /* FILE holds w = 4 then w = 8 for each schedule: keep ours. */
        double want_loss = 0;
        for (int ww = 4; ww <= 8 && f; ww += 4) {
            double l;
            float *g = ww == w ? want_g : r_scratch, *p = ww == w ? want_p : r_scratch;
            if (fread(&l, sizeof l, 1, f) != 1 || fread(g, sizeof(float), (size_t)np, f) != (size_t)np ||
                fread(p, sizeof(float), (size_t)np, f) != (size_t)np)
                CHECK(0, "%s is truncated", path);
            if (ww == w)
                want_loss = l;
        }
        struct result r = {0};
        bsipipe_engine_t *e = NULL;
        const char *name = bsipipe_schedule_kind_name(kinds[i]);
        if (run_engine(kinds[i], w, 1, naive, &r, &e) != 0) {
            free(r.grads);
            free(r.params);
            continue;
        }
        double act[2], sync[2], pact[2] = {0, 0}, psync[2] = {0, 0};
        /* Traffic of the last iteration (a full one; every rank calls). */
        CHECK(bsipipe_engine_traffic(e, act, sync) == 0, "traffic: %s", bsipipe_error_detail());
        predicted_traffic(e, w, pact, psync);
        int *dev_rank = malloc(sizeof(int) * (size_t)w);
        bsipipe_engine_ranks(e, NULL, NULL, dev_rank);
        int bidir = bsipipe_schedule_n_pipes(bsipipe_engine_schedule(e)) > 1;
        if (rank == 0) {
            char map[128] = "";
            for (int d = 0; d < w; d++)
                snprintf(map + strlen(map), sizeof map - strlen(map), "%s%d", d ? "," : "", dev_rank[d]);
            double dg = rel_diff(np, r.grads, want_g), dp = rel_diff(np, r.params, want_p);
            printf("%d ranks %-5s %-9s w=%d ranks of devices [%s]: loss %.9f (one process %.9f), grads max rel "
                   "diff %.1e, params after 2 steps %.1e; cross-rank bytes: act %.0f (planned %.0f), sync %.0f "
                   "(planned %.0f); in-rank: act %.0f (planned %.0f), sync %.0f (planned %.0f)\n",
                   size, naive ? "naive" : "aware", name, w, map, r.loss, want_loss, dg, dp, act[1], pact[1], sync[1],
                   psync[1], act[0], pact[0], sync[0], psync[0]);
            CHECK(r.loss == want_loss, "%s: loss %.17g differs from one process %.17g", name, r.loss, want_loss);
            CHECK(dg == 0, "%s: gradients differ from one process by %.3e", name, dg);
            CHECK(dp == 0, "%s: parameters after two steps differ from one process by %.3e", name, dp);
            CHECK(act[1] == pact[1] && act[0] == pact[0], "%s: activation bytes %.0f/%.0f, planned %.0f/%.0f", name,
                  act[0], act[1], pact[0], pact[1]);
            CHECK(sync[1] == psync[1] && sync[0] == psync[0], "%s: sync bytes %.0f/%.0f, planned %.0f/%.0f", name,
                  sync[0], sync[1], psync[0], psync[1]);
            CHECK(act[1] > 0, "%s: no activation crossed ranks with %d ranks", name, size);
            if (bidir && !naive)
                CHECK(sync[1] == 0, "%s: the aware mapping must keep gradient sync inside ranks", name);
            if (bidir && naive)
                CHECK(sync[1] > 0, "%s: the naive mapping should split mirrored pairs", name);
            /* The sequential reference (gradients of the first batch). */
            bsipipe_ref_trainer_t *ref;
            bsipipe_adamw_t opt = bsipipe_engine_options_default(&dims, &(bsipipe_parallel_config_t){0}).opt;
            CHECK(bsipipe_ref_trainer_create(&dims, &opt, 1, &ref) == 0, "reference");
            int m = bsipipe_schedule_config(bsipipe_engine_schedule(e))->m, k = bsipipe_parallel_config_default(kinds[i]).k;
            int *tokens = malloc(sizeof(int) * (size_t)(m * dims.seq_len)), *targets = malloc(sizeof(int) * (size_t)(m * dims.seq_len));
            test_data_make(m, dims.seq_len, dims.vocab, 7, tokens, targets);
            double ref_loss;
            const int *starts = bsipipe_schedule_sub_starts(bsipipe_engine_schedule(e));
            CHECK(bsipipe_ref_trainer_forward_backward(ref, m, tokens, targets, k, k > 1 ? starts : NULL, &ref_loss) == 0,
                  "reference run");
            double tol = 8.0 * m * k * FLT_EPSILON, dr = rel_diff(np, r.grads, bsipipe_ref_trainer_grads(ref));
            printf("    vs the sequential reference: loss %.9f, grads max rel diff %.2e (tolerance %.1e)\n", ref_loss,
                   dr, tol);
            CHECK(fabs(r.loss - ref_loss) <= 4 * tol * fabs(ref_loss), "%s: loss %.9f vs reference %.9f", name,
                  r.loss, ref_loss);
            CHECK(dr <= tol, "%s: gradients differ from the reference by %.3e > %.3e", name, dr, tol);
            bsipipe_ref_trainer_destroy(ref);
            free(tokens);
            free(targets);
        }
        free(dev_rank);
        bsipipe_engine_destroy(e);
        free(r.grads);
        free(r.params);
    }
    if (f)
        fclose(f);
    free(want_g);
    free(want_p);
    free(r_scratch);
    int failed = check_failures, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int rc = rank == 0 ? check_finish("test_mpi_equiv") : (failed ? 1 : 0);
    MPI_Finalize();
    return rc || any ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "single"))
        return single(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "mpi") && (!strcmp(argv[3], "aware") || !strcmp(argv[3], "naive")))
        return multi(argv[2], !strcmp(argv[3], "naive"));
    fprintf(stderr, "usage: %s single FILE | mpi FILE aware|naive (under mpirun)\n", argv[0]);
    return 2;
}
