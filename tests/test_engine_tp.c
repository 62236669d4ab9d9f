/* test_engine_tp: tensor parallelism in the engine (docs/tensor-parallel.md).
 * The same model, seed, data and plan run with D_t = 2 and 4 (a device is
 * then D_t StarPU workers, every segment and collective a task) must give the
 * D_t = 1 run's loss and, after one forward-backward, its gradients, and
 * after a few AdamW iterations its parameters (gathered from the shards), for
 * GPT and LLaMA under the bsipipe, 1f1b, seq1f1b-i and zb-h1 (split
 * backward) schedules. A checkpoint
 * saved at one degree resumes at another (check_checkpoint). Bad degrees
 * are refused with BSIPIPE_ECONFIG naming the rule. The collectives run as
 * one task each or as one task per rank meeting its group's
 * (tp_collectives, the structure of NCCL's): both must give the same bits
 * (check_per_rank).
 *
 * Tolerance. Sharding reorders sums: the row-parallel products and the
 * reduce-scatters add D_t partial sums, the replicated gradients are summed
 * over ranks, the cross-entropy combines per-rank statistics. test_kernel_tp
 * bounds one chunk chain at 2 R C gamma_K (fp32 ~1e-3 relative, measured
 * <= 5.3e-7). Here the gradients are compared relative to each tensor's
 * largest element (grad_error) and allowed 1e-4, the loss 1e-5 relative.
 * After ITERS AdamW steps each parameter moves by at most ~lr per step and
 * AdamW's normalisation can amplify a tiny gradient difference on elements
 * whose gradient is near zero: parameters are allowed an absolute
 * 0.01 * lr * ITERS (1 % of the largest possible move).
 * Measured (GPT and LLaMA, L=4 d=32 H=4, w=2 m=2 k=2, all three schedules,
 * D_t = 2 and 4): loss <= 1.1e-9 relative, gradients <= 6.5e-7, parameters
 * after 3 steps <= 6e-7 absolute: fp32 rounding, 2-3 orders of magnitude
 * under the bounds. A real mistake is far above them: a collective summing
 * one rank twice, a missing replicated-gradient all-reduce or a rank
 * stepping with another rank's norm moves gradients or parameters by 1e-2
 * to 1 relative. */
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/test_data.h"
#include "tests/grad_check.h"
#include "graph/bsipipe_sim.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

enum { ITERS = 3 };

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 4, 32, 4, 64, 64, 32};
static const bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 4, 32, 4, 48, 64, 32};

typedef struct run {
    double loss0, loss[ITERS];
    float *grads, *params;
} run_t;

/* How the collectives run (o.tp_collectives) in the next runs. */
static bsipipe_engine_tp_coll_t coll_mode = BSIPIPE_TP_COLL_AUTO;

/* The tests' engine: w = 2, m = 2, k = 2 where the schedule splits sequences, degree tp. */
static bsipipe_engine_options_t tp_options(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 2;
    pc.m = 2;
    pc.tp = tp;
    if (pc.k > 1)
        pc.k = 2;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, &pc);
    o.watchdog_s = 60;
    o.tp_collectives = coll_mode;
    return o;
}

static int run_one(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp, const char *policy,
                   run_t *out)
{
    bsipipe_engine_options_t o = tp_options(dims, kind, tp);
    o.policy = policy;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s tp %d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    if (rc)
        return rc;
    int S = dims->seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)(o.pc.m * S)), *targets = malloc(sizeof(int) * (size_t)(o.pc.m * S));
    long np = bsipipe_engine_n_params(e);
    out->grads = malloc(sizeof(float) * (size_t)np);
    out->params = malloc(sizeof(float) * (size_t)np);
    test_data_make(o.pc.m, S, dims->vocab, 7, tokens, targets);
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &out->loss0);
    CHECK(rc == 0, "forward_backward %s tp %d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    if (rc == 0)
        rc = bsipipe_engine_grads(e, out->grads);
    /* A validation pass: the same loss from the forwards alone (the head's
     * backward segments and every B/W segment skipped: no gradient). */
    if (rc == 0 && tp > 1) {
        double eval_loss = -1;
        rc = bsipipe_engine_evaluate(e, tokens, targets, &eval_loss);
        CHECK(rc == 0 && fabs(eval_loss - out->loss0) <= 1e-9 * fabs(out->loss0),
              "evaluate %s tp %d: rc %d, loss %.17g vs %.17g", bsipipe_schedule_kind_name(kind), tp, rc, eval_loss,
              out->loss0);
        float *g = malloc(sizeof(float) * (size_t)np);
        long nonzero = 0;
        if (g && bsipipe_engine_grads(e, g) == 0)
            for (long i = 0; i < np; i++)
                nonzero += g[i] != 0;
        CHECK(g && nonzero == 0, "evaluate %s tp %d: %ld gradients non-zero", bsipipe_schedule_kind_name(kind), tp,
              nonzero);
        free(g);
    }
    for (int it = 0; it < ITERS && rc == 0; it++) {
        test_data_make(o.pc.m, S, dims->vocab, 11 + (unsigned)it, tokens, targets);
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
    CHECK(perr <= 0.01 * lr * ITERS, "%s %s tp %d: parameters differ by %.3e", fam, sk, tp, perr);
}

/* A config the engine must refuse before starting StarPU, with rc and a
 * sentence holding `want`. */
static void check_refused(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp, int k, int rc_want,
                          const char *want)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 2;
    pc.m = 2;
    pc.tp = tp;
    pc.k = k;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, &pc);
    bsipipe_engine_t *e = NULL;
    int rc = bsipipe_engine_create(&o, &e);
    printf("refused: %s tp %d k %d: %s\n", bsipipe_schedule_kind_name(kind), tp, k, bsipipe_error_detail());
    CHECK(rc == rc_want, "%s tp %d k %d: rc %d, want %d", bsipipe_schedule_kind_name(kind), tp, k, rc, rc_want);
    CHECK(e == NULL, "no engine on a refused config");
    CHECK_CONTAINS(bsipipe_error_detail(), want);
    bsipipe_engine_destroy(e);
}

/* ---- checkpoints across degrees ----
 * A checkpoint holds the whole-model parameters and AdamW moments (gathered
 * from the shards), so a run saved with D_t = a resumes with D_t = b. The
 * reference is an uninterrupted D_t = 1 run of CK_ITERS iterations; the
 * resumed runs do CK_SAVE iterations at a, save, and CK_ITERS - CK_SAVE at b
 * in a fresh engine. Tolerances as in compare() (fp32 reordering of the
 * sharded sums, nothing else: the moments and the step count are carried
 * exactly): loss 1e-5 relative, parameters 0.01 * lr * CK_ITERS absolute.
 * The same resume with the file's m and v zeroed (CRC re-sealed, so it loads)
 * must land outside that tolerance: AdamW restarted from zero moments with
 * the saved step count moves each parameter by a sizeable fraction of lr
 * more or less, so a save or load that dropped the moments is caught. */
enum { CK_ITERS = 4, CK_SAVE = 2 };

static int ck_engine(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp, bsipipe_engine_t **e)
{
    bsipipe_engine_options_t o = tp_options(dims, kind, tp);
    int rc = bsipipe_engine_create(&o, e);
    CHECK(rc == 0, "create %s tp %d: %s", bsipipe_schedule_kind_name(kind), tp, bsipipe_error_detail());
    return rc;
}

/* Iterations [from, to) of the checkpoint runs (data of iteration it: seed 11 + it). */
static int ck_iterate(bsipipe_engine_t *e, const bsipipe_model_dims_t *dims, long from, long to, double *loss)
{
    int m = 2, S = dims->seq_len, rc = 0;
    int *tokens = malloc(sizeof(int) * (size_t)(m * S)), *targets = malloc(sizeof(int) * (size_t)(m * S));
    for (long it = from; it < to && rc == 0; it++) {
        test_data_make(m, S, dims->vocab, 11 + (unsigned)it, tokens, targets);
        rc = bsipipe_engine_iteration(e, tokens, targets, &loss[it], NULL);
        CHECK(rc == 0, "iteration %ld: %s", it, bsipipe_error_detail());
    }
    free(tokens);
    free(targets);
    return rc;
}

static void ck_path(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

/* Zeroes the AdamW moments of every replica of DIR/checkpoint.bin (version
 * 1: header_bytes at byte 12, the replica table at 160, 32 bytes an entry
 * with n at +24; per replica n params, n m, n v) and re-seals its CRC-32. */
static int ck_zero_moments(const char *dir)
{
    char path[512];
    ck_path(path, sizeof path, dir, "checkpoint.bin");
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    unsigned char *b = malloc((size_t)n);
    rewind(f);
    int rc = b && fread(b, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
    if (rc == 0) {
        uint32_t hb = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
        long off = hb;
        for (long t = 160; t < (long)hb; t += 32) {
            long rn = 0;
            for (int i = 7; i >= 0; i--)
                rn = rn << 8 | b[t + 24 + i];
            memset(b + off + 4 * rn, 0, 8 * (size_t)rn);
            off += 12 * rn;
        }
        uint32_t c = (uint32_t)crc32(0L, b, (uInt)(n - 4)); /* the format's CRC-32 is zlib's */
        for (int i = 0; i < 4; i++)
            b[n - 4 + i] = (unsigned char)(c >> (8 * i));
        rewind(f);
        rc = fwrite(b, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
    }
    free(b);
    fclose(f);
    return rc;
}

/* Saves after CK_SAVE iterations at D_t = a into dir. */
static int ck_save(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int a, const char *dir,
                   double *loss)
{
    bsipipe_engine_t *e;
    int rc = ck_engine(dims, kind, a, &e);
    if (rc == 0 && (rc = ck_iterate(e, dims, 0, CK_SAVE, loss)) == 0) {
        rc = bsipipe_engine_save(e, dir, CK_SAVE);
        CHECK(rc == 0, "save with tp %d: %s", a, bsipipe_error_detail());
    }
    if (rc == 0)
        bsipipe_engine_destroy(e);
    return rc;
}

/* Resumes dir at D_t = b, runs to CK_ITERS; the largest parameter and loss
 * differences against the reference. */
static int ck_resume(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int b, const char *dir,
                     const double *ref_loss, const float *ref_params, double *perr, double *lerr)
{
    bsipipe_engine_t *e;
    double loss[CK_ITERS] = {0};
    long it = -1;
    int rc = ck_engine(dims, kind, b, &e);
    if (rc)
        return rc;
    rc = bsipipe_engine_load(e, dir, &it);
    CHECK(rc == 0, "load with tp %d: %s", b, bsipipe_error_detail());
    CHECK(rc != 0 || it == CK_SAVE, "load gave iteration %ld, saved %d", it, CK_SAVE);
    long np = bsipipe_engine_n_params(e);
    float *params = malloc(sizeof(float) * (size_t)np);
    if (rc == 0 && (rc = ck_iterate(e, dims, CK_SAVE, CK_ITERS, loss)) == 0)
        rc = bsipipe_engine_params(e, params);
    *perr = *lerr = 0;
    for (long j = 0; rc == 0 && j < np; j++)
        if (fabs((double)params[j] - ref_params[j]) > *perr)
            *perr = fabs((double)params[j] - ref_params[j]);
    for (int i = CK_SAVE; rc == 0 && i < CK_ITERS; i++)
        if (fabs(loss[i] - ref_loss[i]) / fabs(ref_loss[i]) > *lerr)
            *lerr = fabs(loss[i] - ref_loss[i]) / fabs(ref_loss[i]);
    free(params);
    bsipipe_engine_destroy(e);
    return rc;
}

static void check_checkpoint(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const int (*ab)[2],
                             int n_ab)
{
    const char *fam = dims->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", *sk = bsipipe_schedule_kind_name(kind);
    char tmpl[] = "/tmp/bsipipe-tp-ckpt-XXXXXX";
    char *dir = mkdtemp(tmpl), path[512];
    CHECK(dir != NULL, "mkdtemp");
    if (!dir)
        return;
    double lr = 1e-3, ref_loss[CK_ITERS], tol = 0.01 * lr * CK_ITERS;
    long np = 0;
    float *ref_params = NULL;
    bsipipe_engine_t *e;
    if (ck_engine(dims, kind, 1, &e) == 0) {
        np = bsipipe_engine_n_params(e);
        ref_params = malloc(sizeof(float) * (size_t)np);
        if (ck_iterate(e, dims, 0, CK_ITERS, ref_loss) != 0 || bsipipe_engine_params(e, ref_params) != 0)
            np = 0; /* no reference: nothing to compare */
        bsipipe_engine_destroy(e);
    }
    for (int j = 0; j < n_ab && np > 0; j++) {
        int a = ab[j][0], b = ab[j][1];
        double loss[CK_ITERS], perr, lerr;
        if (ck_save(dims, kind, a, dir, loss) != 0 || ck_resume(dims, kind, b, dir, ref_loss, ref_params, &perr,
                                                                &lerr) != 0)
            continue;
        printf("checkpoint %-5s %-9s tp %d -> tp %d: losses after the resume max rel diff %.2e, params after %d "
               "steps max abs diff %.2e (tolerance %.1e)\n", fam, sk, a, b, lerr, CK_ITERS, perr, tol);
        CHECK(lerr <= 1e-5, "%s %s tp %d -> %d: loss differs by %.3e relative", fam, sk, a, b, lerr);
        CHECK(perr <= tol, "%s %s tp %d -> %d: parameters differ by %.3e", fam, sk, a, b, perr);
        if (j == 0) { /* the control: the same resume without the moments fails the tolerance */
            CHECK(ck_zero_moments(dir) == 0, "cannot edit %s/checkpoint.bin", dir);
            if (ck_resume(dims, kind, b, dir, ref_loss, ref_params, &perr, &lerr) == 0) {
                printf("checkpoint %-5s %-9s tp %d -> tp %d with m = v = 0 (control): params max abs diff %.2e\n",
                       fam, sk, a, b, perr);
                CHECK(perr > 10 * tol, "%s %s: zeroed moments moved the parameters by only %.3e: the test cannot "
                      "tell a checkpoint without moments", fam, sk, perr);
            }
        }
    }
    free(ref_params);
    ck_path(path, sizeof path, dir, "checkpoint.bin");
    unlink(path);
    rmdir(dir);
}

/* ---- emulated device time (--emulate) ----
 * Each rank's segments and the group's collectives hold their worker for
 * the planner's share of the op (bsipipe_cost_model_emulated: FLOPs / D_t,
 * plus the TP collectives' charge) and compute nothing. Checked without
 * timing the machine: the holds are lower bounds, so every F/B op's span
 * (its ranks' first task start to last task end) and every device's busy
 * time must reach the planner's (a shortfall means a share went missing,
 * e.g. time divided by D_t twice or collectives not held); nothing is
 * computed (NaN loss) and nothing stepped (parameters unchanged). */
/* RECVs whose posting ahead check_emulated could check (their op ahead
 * started after the submission): a slow run (sanitizers) may leave none
 * in one configuration, so the count is checked over all of them. */
static int recvs_checked;

static void check_emulated(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, int tp)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 2;
    pc.m = 2;
    pc.tp = tp;
    if (pc.k > 1)
        pc.k = 2;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(dims, &pc);
    o.emulate_flops = 2e9; /* ops of about a millisecond */
    o.tp_collectives = coll_mode;
    o.watchdog_s = 60;
    bsipipe_engine_t *e;
    const char *sk = bsipipe_schedule_kind_name(kind);
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create emulated %s tp %d: %s", sk, tp, bsipipe_error_detail());
    if (rc)
        return;
    int S = dims->seq_len;
    long np = bsipipe_engine_n_params(e);
    int *tokens = malloc(sizeof(int) * (size_t)(pc.m * S)), *targets = malloc(sizeof(int) * (size_t)(pc.m * S));
    float *p0 = malloc(sizeof(float) * (size_t)np), *p1 = malloc(sizeof(float) * (size_t)np);
    double loss = 0, busy[16];
    test_data_make(pc.m, S, dims->vocab, 7, tokens, targets);
    rc = bsipipe_engine_params(e, p0);
    if (rc == 0)
        rc = bsipipe_engine_iteration(e, tokens, targets, &loss, NULL);
    CHECK(rc == 0, "emulated iteration %s tp %d: %s", sk, tp, bsipipe_error_detail());
    if (rc == 0 && bsipipe_engine_params(e, p1) == 0) {
        CHECK(isnan(loss), "emulated %s tp %d: a loss (%g) was computed", sk, tp, loss);
        CHECK(memcmp(p0, p1, sizeof(float) * (size_t)np) == 0, "emulated %s tp %d: parameters changed", sk, tp);
        const bsipipe_schedule_t *s = bsipipe_engine_schedule(e);
        bsipipe_cost_model_t cost = bsipipe_cost_model_emulated(o.emulate_flops);
        bsipipe_sim_result_t *sim = NULL;
        CHECK(bsipipe_simulate(s, &cost, &sim) == 0, "simulate: %s", bsipipe_error_detail());
        CHECK(bsipipe_engine_device_busy(e, busy) == 0, "device busy: %s", bsipipe_error_detail());
        double worst = INFINITY, comm = 0, planned = 0;
        int posted = 0;
        /* Ops that start while the iteration is still being submitted may
         * run before a later RECV exists: only those after are checked. The
         * end of submission is estimated late: submission began before the
         * first op started, and lasted submit_s. */
        double submitted = INFINITY;
        bsipipe_engine_overhead_t ov;
        CHECK(bsipipe_engine_last_overhead(e, &ov) == 0, "overhead: %s", bsipipe_error_detail());
        for (int d = 0; d < pc.w; d++) {
            const bsipipe_engine_op_record_t *rec;
            int nr = 0;
            CHECK(bsipipe_engine_records(e, d, &rec, &nr) == 0, "records of device %d", d);
            for (int i = 0; i < nr; i++)
                submitted = rec[i].start_us < submitted ? rec[i].start_us : submitted;
        }
        submitted += ov.submit_s * 1e6;
        for (int d = 0; d < pc.w && sim; d++) {
            int n;
            const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
            const bsipipe_engine_op_record_t *rec;
            int nr;
            CHECK(bsipipe_engine_records(e, d, &rec, &nr) == 0 && nr == n, "records of device %d", d);
            for (int i = 0; i < n && nr == n; i++) {
                /* A RECV posted ahead ran before the compute op right
                 * before it started (on the TP ranks' workers too). */
                int a = i - 1, ahead = bsipipe_sim_recv_ahead(s, &cost, d, i);
                while (ahead > 0 && a >= 0 && ops[a].kind > BSIPIPE_OP_W)
                    a--;
                if (ahead > 0 && a >= 0 && rec[a].start_us > submitted) {
                    posted++;
                    CHECK(rec[i].start_us <= rec[a].start_us, "emulated %s tp %d: device %d: RECV %d not posted "
                          "before op %d started (%.0f us after)", sk, tp, d, i, a, rec[i].start_us - rec[a].start_us);
                }
                if (ops[i].kind > BSIPIPE_OP_W)
                    continue;
                double want = bsipipe_sim_op_cost(s, &cost, &ops[i]) * 1e6, got = rec[i].end_us - rec[i].start_us;
                comm += bsipipe_sim_tp_comm(s, &cost, &ops[i], NULL) * 1e6;
                if (got / want < worst)
                    worst = got / want;
            }
            planned += sim->device[d].busy;
            CHECK(busy[d] >= 0.999 * sim->device[d].busy, "emulated %s tp %d: device %d busy %.6f s, the planner's "
                  "%.6f s", sk, tp, d, busy[d], sim->device[d].busy);
        }
        printf("emulated %-9s tp %d%s: every F/B op spans >= %.3fx its planned time (planned busy %.4f s, of it TP "
               "collectives %.2f%%); %d RECVs posted before the op ahead of them started\n", sk, tp,
               coll_mode == BSIPIPE_TP_COLL_PER_RANK ? " (per-rank collectives)" : "", worst, planned,
               planned > 0 ? 100 * comm * 1e-6 / planned : 0, posted);
        CHECK(worst >= 0.999, "emulated %s tp %d: an op ran %.3fx its planned time", sk, tp, worst);
        CHECK(tp == 1 || comm > 0, "emulated %s tp %d: no TP collective charged", sk, tp);
        recvs_checked += posted;
        bsipipe_sim_result_destroy(sim);
    }
    free(tokens);
    free(targets);
    free(p0);
    free(p1);
    bsipipe_engine_destroy(e);
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

/* Per-rank collectives (each rank's task over its own buffers, the ranks'
 * tasks meeting, the last one running the collective for all) run the same
 * in-process collectives in the same rank order as one task per
 * collective: loss, gradients and parameters after the steps must be the
 * same bits. A rank's task that ran the collective twice, or skipped it,
 * or ended before the others' inputs were in, would change them. */
static void check_per_rank(const bsipipe_model_dims_t *dims, bsipipe_schedule_kind_t kind, const char *policy,
                           int tp)
{
    const char *fam = dims->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", *sk = bsipipe_schedule_kind_name(kind);
    run_t one = {0}, per = {0};
    coll_mode = BSIPIPE_TP_COLL_ONE_TASK;
    int rc = run_one(dims, kind, tp, policy, &one);
    coll_mode = BSIPIPE_TP_COLL_PER_RANK;
    if (rc == 0 && run_one(dims, kind, tp, policy, &per) == 0) {
        long np;
        {
            bsipipe_model_dims_t d = *dims;
            np = bsipipe_model_params(&d);
        }
        long gdiff = 0, pdiff = 0;
        for (long j = 0; j < np; j++) {
            gdiff += memcmp(&one.grads[j], &per.grads[j], sizeof(float)) != 0;
            pdiff += memcmp(&one.params[j], &per.params[j], sizeof(float)) != 0;
        }
        int ldiff = one.loss0 != per.loss0;
        for (int it = 0; it < ITERS; it++)
            ldiff += one.loss[it] != per.loss[it];
        printf("%-5s %-9s %-7s tp %d: per-rank collectives against one task each: loss %.9f and %.9f, %d of %d "
               "losses, %ld of %ld gradients and %ld parameters after %d steps differ\n",
               fam, sk, policy, tp, per.loss0, one.loss0, ldiff, 1 + ITERS, gdiff, np, pdiff, ITERS);
        CHECK(ldiff == 0 && gdiff == 0 && pdiff == 0, "%s %s tp %d: per-rank collectives change the results", fam,
              sk, tp);
    }
    coll_mode = BSIPIPE_TP_COLL_AUTO;
    run_free(&one);
    run_free(&per);
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
    /* The split backward (ZeroBubble B / W): the weight products and the
     * norm outputs' re-gathers in W. */
    check_equal(&gpt, BSIPIPE_SCHED_ZB_H1, "bsipipe", both, 2);
    check_equal(&llama, BSIPIPE_SCHED_ZB_H1, "bsipipe", both, 2);
    /* A built-in policy: placement by worker masks, no plan order. */
    check_equal(&gpt, BSIPIPE_SCHED_SEQ1F1B_I, "lws", two, 1);
    /* Collectives per rank, meeting in one memory: the same bits. */
    check_per_rank(&gpt, BSIPIPE_SCHED_BSIPIPE, "bsipipe", 2);
    check_per_rank(&gpt, BSIPIPE_SCHED_BSIPIPE, "bsipipe", 4);
    check_per_rank(&llama, BSIPIPE_SCHED_SEQ1F1B_I, "bsipipe", 4);
    check_per_rank(&gpt, BSIPIPE_SCHED_ZB_H1, "bsipipe", 2);
    check_per_rank(&llama, BSIPIPE_SCHED_1F1B, "lws", 2); /* no plan order: the meets in any order */
    /* Degrees that do not divide the model or the pieces, and what TP does
     * not support yet. */
    check_refused(&gpt, BSIPIPE_SCHED_1F1B, 3, 1, BSIPIPE_ECONFIG, "does not divide the number of heads (4)");
    check_refused(&llama, BSIPIPE_SCHED_1F1B, 8, 1, BSIPIPE_ECONFIG, "valid D_t here: 1, 2, 4");
    bsipipe_model_dims_t odd_ffn = gpt;
    odd_ffn.ffn_hidden = 66;
    check_refused(&odd_ffn, BSIPIPE_SCHED_1F1B, 4, 1, BSIPIPE_ECONFIG, "FFN width (66)");
    bsipipe_model_dims_t odd_vocab = gpt;
    odd_vocab.vocab = 66;
    check_refused(&odd_vocab, BSIPIPE_SCHED_1F1B, 4, 1, BSIPIPE_ECONFIG, "vocabulary size (66)");
    bsipipe_model_dims_t short_seq = gpt;
    short_seq.seq_len = 30; /* the planner aligns pieces to D_t: S must be a multiple */
    check_refused(&short_seq, BSIPIPE_SCHED_1F1B, 4, 1, BSIPIPE_ECONFIG, "nearest valid S: 28 or 32");
    { /* CUDA devices: what TP on a GPU does not cover is refused before
       * StarPU starts, naming the fix; the rest reaches the devices (here,
       * without a GPU: no CUDA device) */
        static const struct {
            const char *transport, *precision, *policy;
            bsipipe_engine_tp_coll_t how;
            int want;
            const char *says;
        } cases[] = {
            {"nccl", NULL, NULL, BSIPIPE_TP_COLL_ONE_TASK, -EINVAL, "use per-rank collectives"},
            {"nccl", NULL, "lws", BSIPIPE_TP_COLL_AUTO, -EINVAL, "use --policy bsipipe, or --transport local"},
            {NULL, "bf16s", NULL, BSIPIPE_TP_COLL_AUTO, -ENOTSUP, "use --precision fp32, tf32 or bf16, or --tp 1"},
            {NULL, NULL, NULL, (bsipipe_engine_tp_coll_t)7, -EINVAL, "none of auto (0), one-task (1), per-rank (2)"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            bsipipe_engine_options_t o = tp_options(&gpt, BSIPIPE_SCHED_1F1B, 2);
            o.devices = BSIPIPE_DEVICES_CUDA;
            o.transport = cases[i].transport;
            o.precision = cases[i].precision;
            o.tp_collectives = cases[i].how;
            o.policy = cases[i].policy;
            bsipipe_engine_t *e = NULL;
            int rc = bsipipe_engine_create(&o, &e);
            printf("refused: 1f1b tp 2 on CUDA devices (%s): %s\n", cases[i].transport ? cases[i].transport
                   : cases[i].precision ? cases[i].precision : "tp_collectives", bsipipe_error_detail());
            CHECK(rc == cases[i].want && e == NULL, "tp on CUDA devices: rc %d, want %d", rc, cases[i].want);
            CHECK_CONTAINS(bsipipe_error_detail(), cases[i].says);
            bsipipe_engine_destroy(e);
        }
        for (int nccl = 0; nccl < 2 && bsipipe_cuda_device_count() <= 0; nccl++) {
            bsipipe_engine_options_t o = tp_options(&gpt, BSIPIPE_SCHED_1F1B, 2);
            o.devices = BSIPIPE_DEVICES_CUDA;
            o.transport = nccl ? "nccl" : NULL;
            bsipipe_engine_t *e = NULL;
            int rc = bsipipe_engine_create(&o, &e);
            printf("no GPU: 1f1b tp 2 on CUDA devices%s: %s\n", nccl ? ", nccl" : "", bsipipe_error_detail());
            CHECK(rc == -ENODEV && e == NULL, "tp on CUDA devices without a GPU: rc %d, want -ENODEV", rc);
            bsipipe_engine_destroy(e);
        }
    }
    /* Emulated device time. */
    check_emulated(&gpt, BSIPIPE_SCHED_BSIPIPE, 2);
    check_emulated(&llama, BSIPIPE_SCHED_SEQ1F1B_I, 4);
    check_emulated(&gpt, BSIPIPE_SCHED_ZB_H1, 2); /* W ops: their weight products and re-gathers */
    coll_mode = BSIPIPE_TP_COLL_PER_RANK; /* the last rank to arrive holds the collective's time */
    check_emulated(&llama, BSIPIPE_SCHED_BSIPIPE, 4);
    coll_mode = BSIPIPE_TP_COLL_AUTO;
    CHECK(recvs_checked > 0, "emulated: no RECV posted ahead could be checked");
    /* Checkpoints across degrees: BSIPipe (two pipes of replicas) and
     * seq1f1b-i (pieces aligned to D_t). */
    const int ab_gpt[][2] = {{2, 1}, {1, 4}, {4, 2}}, ab_llama[][2] = {{2, 4}};
    check_checkpoint(&gpt, BSIPIPE_SCHED_BSIPIPE, ab_gpt, 3);
    check_checkpoint(&llama, BSIPIPE_SCHED_SEQ1F1B_I, ab_llama, 1);
    return check_finish("test_engine_tp");
}
