/* test_policy_configure: bsipipe_policy_configure selects our policy or a
 * StarPU one, lists the valid names for an unknown one, and refuses a
 * conflicting STARPU_SCHED; the selected policy is the one StarPU runs. */
#include "tests/policy_util.h"
#include "tests/check.h"

static void expect_ok(const char *name)
{
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    int rc = bsipipe_policy_configure(&conf, name);
    CHECK(rc == 0, "'%s' accepted (rc %d: %s)", name, rc, bsipipe_error_detail());
    if (bsipipe_policy_is_inorder(name)) {
        CHECK(conf.sched_policy == &bsipipe_sched_policy && conf.sched_policy_name == NULL,
              "'%s' sets conf.sched_policy", name);
    } else {
        CHECK(conf.sched_policy == NULL && conf.sched_policy_name && strcmp(conf.sched_policy_name, name) == 0,
              "'%s' sets conf.sched_policy_name", name);
    }
}

/* starpu_init with `name` through the configure helper; returns the running policy's name. */
static void expect_runs(const char *name)
{
    int rc = pu_start("test_policy_configure", 2, name);
    CHECK(rc == 0, "starpu_init under '%s' (rc %d)", name, rc);
    if (rc != 0)
        return;
    struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0);
    CHECK(p && p->policy_name && strcmp(p->policy_name, name) == 0, "running policy is '%s' (got '%s')", name,
          p && p->policy_name ? p->policy_name : "?");
    CHECK((bsipipe_policy_next_slot(0) == 0) == bsipipe_policy_is_inorder(name),
          "next_slot(0) is 0 exactly under bsipipe (%s: %ld)", name, bsipipe_policy_next_slot(0));
    starpu_shutdown();
    CHECK(bsipipe_policy_next_slot(0) == -1, "next_slot is -1 after shutdown of '%s'", name);
}

int main(void)
{
    pu_watchdog(60);
    unsetenv("STARPU_SCHED");

    CHECK(bsipipe_policy_is_inorder("bsipipe") == 1, "bsipipe is in-order");
    CHECK(bsipipe_policy_is_inorder("eager") == 0 && bsipipe_policy_is_inorder("dmda") == 0, "built-ins");
    CHECK(bsipipe_policy_is_inorder(NULL) == 0 && bsipipe_policy_is_inorder("") == 0, "NULL / empty");
    CHECK(strcmp(bsipipe_sched_policy.policy_name, "bsipipe") == 0, "policy_name");
    CHECK(bsipipe_policy_next_slot(0) == -1, "next_slot is -1 before starpu_init");

    expect_ok("bsipipe");
    const char *builtins[] = {"eager", "lws", "dmda", "prio", "ws", "random"};
    for (size_t i = 0; i < sizeof(builtins) / sizeof(*builtins); i++)
        expect_ok(builtins[i]);

    struct starpu_conf conf;
    starpu_conf_init(&conf);
    int rc = bsipipe_policy_configure(&conf, "nope");
    CHECK(rc == -EINVAL, "'nope' refused with -EINVAL (rc %d)", rc);
    CHECK_CONTAINS(bsipipe_error_detail(), "nope");
    CHECK_CONTAINS(bsipipe_error_detail(), "bsipipe");
    CHECK_CONTAINS(bsipipe_error_detail(), "eager");
    CHECK_CONTAINS(bsipipe_error_detail(), "lws");
    CHECK_CONTAINS(bsipipe_error_detail(), "dmda");
    CHECK_CONTAINS(bsipipe_error_detail(), "prio");
    CHECK(bsipipe_policy_configure(&conf, NULL) == -EINVAL, "NULL name refused");
    CHECK(bsipipe_policy_configure(&conf, "") == -EINVAL, "empty name refused");
    CHECK(bsipipe_policy_configure(NULL, "bsipipe") == -EINVAL, "NULL conf refused");

    /* STARPU_SCHED overrides the application's choice: a different one is refused */
    setenv("STARPU_SCHED", "eager", 1);
    starpu_conf_init(&conf);
    rc = bsipipe_policy_configure(&conf, "bsipipe");
    CHECK(rc == BSIPIPE_ECONFIG, "STARPU_SCHED=eager with bsipipe refused (rc %d)", rc);
    CHECK_CONTAINS(bsipipe_error_detail(), "STARPU_SCHED");
    CHECK_CONTAINS(bsipipe_error_detail(), "unset");
    rc = bsipipe_policy_configure(&conf, "dmda");
    CHECK(rc == BSIPIPE_ECONFIG, "STARPU_SCHED=eager with dmda refused (rc %d)", rc);
    expect_ok("eager"); /* the same name is fine */
    rc = bsipipe_policy_configure(&conf, "nope");
    CHECK(rc == -EINVAL, "unknown name reported before the STARPU_SCHED conflict (rc %d)", rc);
    setenv("STARPU_SCHED", "", 1);
    expect_ok("bsipipe"); /* empty means unset */
    unsetenv("STARPU_SCHED");

    /* the selection reaches StarPU */
    expect_runs("bsipipe");
    expect_runs("eager");
    expect_runs("dmda");
    return check_finish("test_policy_configure");
}
