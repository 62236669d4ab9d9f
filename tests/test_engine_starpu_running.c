/* test_engine_starpu_running: an application that initialised StarPU itself
 * (here under "eager" with 4 CPU workers) and then creates an engine asking
 * for the "bsipipe" policy must not get an engine silently running under its
 * own policy: bsipipe_engine_create refuses with -EBUSY and a sentence that
 * names the problem (StarPU already initialised) and the fix (create the
 * engine before starpu_init, or starpu_shutdown first). The application's
 * StarPU is left as it was (still running, its policy unchanged), and once it
 * is shut down the same options create an engine that runs. */
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"

#include <starpu.h>
#include <stdlib.h>

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};

int main(void)
{
    setenv("STARPU_WORKERS_NOBIND", "1", 0);
    setenv("STARPU_FXT_TRACE", "0", 0);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = 4;
    pc.m = 4;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
    o.policy = "bsipipe";
    o.watchdog_s = 20;

    /* 1. The application starts StarPU first, under its own policy. */
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = 4;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.sched_policy_name = "eager";
    int rc = starpu_init(&conf);
    if (rc == -ENODEV) {
        printf("test_engine_starpu_running: StarPU cannot start 4 CPU workers here; skipped\n");
        return 77;
    }
    CHECK(rc == 0, "starpu_init: %d", rc);

    bsipipe_engine_t *e = NULL;
    rc = bsipipe_engine_create(&o, &e);
    const char *why = bsipipe_error_detail();
    printf("engine create with StarPU already running: rc %d: %s\n", rc, rc < 0 ? why : "(created)");
    CHECK(rc == -EBUSY && e == NULL, "create must refuse (rc %d, engine %p)", rc, (void *)e);
    if (rc < 0) {
        CHECK_CONTAINS(why, "already initialised");
        CHECK_CONTAINS(why, "'eager'");   /* the policy that would have run */
        CHECK_CONTAINS(why, "'bsipipe'"); /* the one asked for */
        CHECK_CONTAINS(why, "starpu_shutdown");
    }
    if (e) { /* before the fix: say which policy actually ran the engine */
        struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0);
        printf("engine created; StarPU's policy is '%s'\n", p && p->policy_name ? p->policy_name : "?");
        bsipipe_engine_destroy(e);
        e = NULL;
    }
    /* The application's StarPU is untouched. */
    CHECK(starpu_is_initialized(), "the application's StarPU still runs");
    struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0);
    CHECK(p && p->policy_name && strcmp(p->policy_name, "eager") == 0, "its policy is still eager");
    starpu_shutdown();

    /* 2. With StarPU shut down, the same options give a running engine. */
    if (starpu_is_initialized()) {
        CHECK(0, "StarPU still initialised after the application's starpu_shutdown");
        return check_finish("test_engine_starpu_running");
    }
    rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create after starpu_shutdown: %s", bsipipe_error_detail());
    if (e) {
        int m = pc.m, S = gpt.seq_len;
        int *tok = calloc((size_t)(m * S), sizeof *tok), *tgt = calloc((size_t)(m * S), sizeof *tgt);
        for (int i = 0; tok && tgt && i < m * S; i++) {
            tok[i] = i % gpt.vocab;
            tgt[i] = (i + 1) % gpt.vocab;
        }
        double loss = 0;
        CHECK(tok && tgt && bsipipe_engine_forward_backward(e, tok, tgt, &loss) == 0, "run: %s",
              bsipipe_error_detail());
        p = starpu_sched_ctx_get_sched_policy(0);
        CHECK(p && p->policy_name && strcmp(p->policy_name, "bsipipe") == 0, "the engine runs under bsipipe");
        free(tok);
        free(tgt);
        bsipipe_engine_destroy(e);
    }
    CHECK(!starpu_is_initialized(), "the engine shut its StarPU down");
    return check_finish("test_engine_starpu_running");
}
