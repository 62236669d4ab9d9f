/* test_policy_equiv: every scheduling policy the engine accepts runs the
 * engine's graph correctly — a short equivalence run (small GPT, w = 2,
 * BSIPipe and 1F1B, m = 4) gives the reference trainer's loss and gradients,
 * with the tolerance of test_engine_equiv — and every StarPU policy outside
 * the allow-list is refused up front with a sentence naming the limitation.
 *
 * Each policy runs in a child process of its own with a time limit, so one
 * that hangs or crashes is reported by name and the others still run (the
 * parent never starts StarPU, so forking is safe).
 *
 *   test_policy_equiv              every allowed policy, plus the refusals
 *   test_policy_equiv NAME...      only these (allowed ones)
 *   test_policy_equiv --stall      only the stalled-policy check
 *   test_policy_equiv --probe [NAME...]  every StarPU policy (or these), allowed or not, with
 *                                  the allow-list bypassed: prints PASS /
 *                                  FAIL / CRASH / HANG per policy, exits 0.
 *                                  How the allow-list was found; rerun it
 *                                  after a StarPU upgrade.
 * BSIPIPE_POLICY_TIMEOUT (seconds, default 60) is the limit per policy;
 * BSIPIPE_POLICY_W (2..4, default 2) the devices, for probing wider. */
#include "tasks/bsipipe_engine.h"
#include "policies/bsipipe_policy.h"
#include "kernels/reference_trainer.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/grad_check.h"
#include "tests/test_data.h"

#include <float.h>
#include <starpu.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};

/* One equivalence run of `kind` under `policy`; any_policy bypasses the
 * allow-list (probe). */
static void check_one(bsipipe_schedule_kind_t kind, const char *policy, int any_policy)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    const char *w = getenv("BSIPIPE_POLICY_W"); /* probing on more devices */
    pc.w = w && atoi(w) >= 2 && atoi(w) <= 4 ? atoi(w) : 2;
    pc.m = pc.w > 4 ? pc.w : 4; /* BSIPipe: m*k a multiple of a basic unit k*w */
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
    o.policy = policy;
    o.watchdog_s = 10;
    o.unsupported_policy = any_policy;
    const char *kn = bsipipe_schedule_kind_name(kind);
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create %s/%s: %s", kn, policy, bsipipe_error_detail());
    if (rc)
        return;
    int S = gpt.seq_len, *tokens = malloc(sizeof(int) * (size_t)(pc.m * S)),
        *targets = malloc(sizeof(int) * (size_t)(pc.m * S));
    test_data_make(pc.m, S, gpt.vocab, 7, tokens, targets);
    double loss = 0, ref_loss = 0;
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
    CHECK(rc == 0, "run %s/%s: %s", kn, policy, bsipipe_error_detail());
    long np = bsipipe_engine_n_params(e);
    float *g = malloc(sizeof(float) * (size_t)np);
    bsipipe_ref_trainer_t *ref;
    CHECK(bsipipe_ref_trainer_create(&gpt, &o.opt, o.seed, &ref) == 0, "reference");
    const int *starts = bsipipe_schedule_sub_starts(bsipipe_engine_schedule(e));
    CHECK(bsipipe_ref_trainer_forward_backward(ref, pc.m, tokens, targets, pc.k, pc.k > 1 ? starts : NULL,
                                               &ref_loss) == 0, "reference run");
    if (rc == 0) {
        bsipipe_engine_grads(e, g);
        double err = grad_error(&gpt, g, bsipipe_ref_trainer_grads(ref), NULL, 0);
        double tol = 8.0 * pc.m * pc.k * FLT_EPSILON;
        printf("  %-8s %-16s loss %.7f ref %.7f  grad max rel diff %.2e\n", kn, policy, loss, ref_loss, err);
        CHECK(fabs(loss - ref_loss) <= 4 * tol * fabs(ref_loss), "%s/%s loss %.9f vs %.9f", kn, policy, loss,
              ref_loss);
        CHECK(err <= tol, "%s/%s gradients differ: %.3e > %.3e", kn, policy, err, tol);
        /* Placement kept: every op of a device ran on one worker, its own. */
        int wk[8], off = 0, shared = 0;
        for (int d = 0; d < pc.w; d++) {
            const bsipipe_engine_op_record_t *rec;
            int nr = 0;
            bsipipe_engine_records(e, d, &rec, &nr);
            wk[d] = nr > 0 ? rec[0].worker : -1;
            for (int i = 0; i < nr; i++)
                off += rec[i].worker != wk[d];
            for (int q = 0; q < d; q++)
                shared += wk[q] == wk[d];
        }
        CHECK(off == 0 && shared == 0, "%s/%s: %d ops ran off their device's worker, %d devices share one", kn,
              policy, off, shared);
    }
    bsipipe_ref_trainer_destroy(ref);
    bsipipe_engine_destroy(e);
    free(g);
    free(tokens);
    free(targets);
}

/* StarPU 1.3's modular-prandom keeps ready tasks it never runs (the probe
 * found it hanging every time): forced past the allow-list, the iteration
 * ends with the watchdog's error naming the policy, not a hang. */
static void check_stall(void)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 2;
    pc.m = 4;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
    o.policy = "modular-prandom";
    o.unsupported_policy = 1;
    o.watchdog_s = 2;
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create under modular-prandom: %s", bsipipe_error_detail());
    if (rc)
        return;
    int S = gpt.seq_len, tokens[4 * 32], targets[4 * 32];
    test_data_make(pc.m, S, gpt.vocab, 7, tokens, targets);
    double loss;
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
    const char *why = bsipipe_error_detail();
    printf("stalled policy: rc %d: %s\n", rc, why);
    CHECK(rc == -ETIMEDOUT, "modular-prandom stalls and the watchdog ends the iteration (rc %d)", rc);
    CHECK_CONTAINS(why, "'modular-prandom'");
    CHECK_CONTAINS(why, "no task completed for");
    rc = bsipipe_engine_forward_backward(e, tokens, targets, &loss);
    CHECK(rc == -ETIMEDOUT, "a stalled engine refuses the next iteration (rc %d)", rc);
    bsipipe_engine_destroy(e); /* leaves StarPU as it is: must return */
}

enum { RES_PASS, RES_FAIL, RES_CRASH, RES_HANG };
static const char *res_name[] = {"PASS", "FAIL", "CRASH", "HANG"};

/* Runs the equivalence check of `policy` in a child with a time limit. */
static int run_child(const char *policy, int any_policy, unsigned timeout)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return RES_CRASH;
    if (pid == 0) {
        check_failures = 0; /* the child's verdict is its own, not the parent's failures so far */
        signal(SIGALRM, SIG_DFL);
        alarm(timeout);
        if (!policy) {
            check_stall();
            fflush(stdout);
            _exit(check_failures ? 1 : 0);
        }
        check_one(BSIPIPE_SCHED_BSIPIPE, policy, any_policy);
        check_one(BSIPIPE_SCHED_1F1B, policy, any_policy);
        fflush(stdout);
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    if (WIFEXITED(st))
        return WEXITSTATUS(st) == 0 ? RES_PASS : RES_FAIL;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? RES_HANG : RES_CRASH;
}

/* Every StarPU policy name (the probe's candidates). */
static int starpu_names(const char **out, int max)
{
    int n = 0;
    for (struct starpu_sched_policy **p = starpu_sched_get_predefined_policies(); p && *p && n < max; p++)
        if ((*p)->policy_name)
            out[n++] = (*p)->policy_name;
    return n;
}

/* StarPU writes the bus calibration and (model-driven policies) the
 * codelets' performance models under $STARPU_HOME/.starpu at shutdown: a
 * directory of our own, not the user's ~/.starpu. */
static char home[] = "/tmp/bsipipe-policy-equiv-XXXXXX";

static void home_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
    if (system(cmd) != 0)
        fprintf(stderr, "test_policy_equiv: could not remove %s\n", home);
}

int main(int argc, char **argv)
{
    if (!getenv("STARPU_HOME") && mkdtemp(home)) {
        setenv("STARPU_HOME", home, 1);
        atexit(home_remove); /* the children leave by _exit */
    }
    setenv("STARPU_SILENT", "1", 0);
    unsetenv("STARPU_SCHED");
    const char *t = getenv("BSIPIPE_POLICY_TIMEOUT");
    unsigned timeout = t && atoi(t) > 0 ? (unsigned)atoi(t) : 60;
    const char *names[128];
    int n = 0;

    if (argc > 1 && !strcmp(argv[1], "--stall")) {
        int r = run_child(NULL, 1, timeout);
        CHECK(r == RES_PASS, "the watchdog ends a stalled policy's iteration: %s", res_name[r]);
        return check_finish("test_policy_equiv --stall");
    }
    if (argc > 1 && !strcmp(argv[1], "--probe")) {
        for (int i = 2; i < argc && n < 128; i++)
            names[n++] = argv[i];
        if (n == 0) {
            names[n++] = "bsipipe";
            n += starpu_names(names + n, 127);
        }
        for (int i = 0; i < n; i++) {
            printf("%s:\n", names[i]);
            int r = run_child(names[i], 1, timeout);
            printf("probe %-34s %-5s (allowed: %s)\n", names[i], res_name[r],
                   bsipipe_engine_policy_supported(names[i]) ? "yes" : "no");
        }
        return 0;
    }

    if (argc > 1) {
        for (int i = 1; i < argc && n < 128; i++)
            names[n++] = argv[i];
    } else {
        n = bsipipe_engine_policies(names, 128);
    }
    CHECK(argc > 1 || (n > 0 && !strcmp(names[0], "bsipipe")), "the allow-list starts with bsipipe");
    for (int i = 0; i < n; i++) {
        printf("%s:\n", names[i]);
        int r = run_child(names[i], 0, timeout);
        printf("policy %-16s %s\n", names[i], res_name[r]);
        CHECK(r == RES_PASS, "policy '%s': %s (limit %u s)", names[i], res_name[r], timeout);
    }
    if (argc > 1)
        return check_finish("test_policy_equiv");

    /* Every StarPU policy outside the list: refused at create, before
     * starpu_init, by a sentence that names the policy, the limitation and
     * the allowed names. */
    const char *all[128];
    int na = starpu_names(all, 128), refused = 0;
    for (int i = 0; i < na; i++) {
        if (bsipipe_engine_policy_supported(all[i]))
            continue;
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_1F1B);
        pc.w = 2;
        bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
        o.policy = all[i];
        bsipipe_engine_t *e = NULL;
        int rc = bsipipe_engine_create(&o, &e);
        CHECK(rc == -ENOTSUP && e == NULL, "'%s' refused with -ENOTSUP (rc %d)", all[i], rc);
        const char *why = bsipipe_error_detail();
        CHECK_CONTAINS(why, all[i]);
        CHECK_CONTAINS(why, "not supported");
        CHECK_CONTAINS(why, "StarPU 1.3");
        CHECK_CONTAINS(why, "use one of: bsipipe");
        if (rc == 0)
            bsipipe_engine_destroy(e);
        if (refused++ == 0)
            printf("refused: %s\n", why);
    }
    printf("%d StarPU policies refused up front\n", refused);
    int r = run_child(NULL, 1, timeout);
    CHECK(r == RES_PASS, "the watchdog ends a stalled policy's iteration: %s", res_name[r]);
    /* Starting StarPU after a refusal works: nothing was left half set up. */
    if (n > 1)
        check_one(BSIPIPE_SCHED_1F1B, names[1], 0);
    return check_finish("test_policy_equiv");
}
