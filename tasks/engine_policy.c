/* engine_policy.c: which scheduling policies the engine accepts.
 *
 * StarPU 1.3 offers some thirty policies; not all of them run the engine's
 * graph. The allow-list below is what tests/test_policy_equiv --probe found
 * (each StarPU policy ran a short equivalence run against the reference
 * trainer, in a child with a time limit); every name outside it is refused
 * by bsipipe_engine_create before starpu_init, with the reason of its
 * family, instead of crashing or hanging half way through an iteration. */
#include "tasks/engine_internal.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* In the order --help lists them: ours first, then by family. Each passed
 * the probe at w = 2 (five times) and w = 4: loss and gradients equal the
 * reference trainer's, every op on its device's worker; and every one of them
 * passed all 127 runs of a loop of test_policy_equiv in which modular-ws,
 * listed then, crashed once (see refusal()). */
static const char *const allowed[] = {
    "bsipipe", "eager", "prio", "lws", "ws", "random", "dm", "dmda", "dmdas", "dmdar", "dmdap", "dmdasd",
    "peager", "graph_test", "modular-eager", "modular-eager-prefetching",
};
enum { N_ALLOWED = sizeof allowed / sizeof *allowed };

int bsipipe_engine_policies(const char **out, int max)
{
    for (int i = 0; out && i < N_ALLOWED && i < max; i++)
        out[i] = allowed[i];
    return N_ALLOWED;
}

int bsipipe_engine_policy_supported(const char *name)
{
    for (int i = 0; name && i < N_ALLOWED; i++)
        if (!strcmp(name, allowed[i]))
            return 1;
    return 0;
}

/* Why a StarPU policy outside the list does not run the engine's graph.
 * The engine keeps each task on its device's worker through
 * task->workerids (never execute_on_a_specific_worker, which would bypass
 * the policy); these policies do not honour it. */
static const char *refusal(const char *name)
{
    if (!strcmp(name, "modular-ws"))
        return "races on its round-robin cursor when two threads push tasks pinned to one worker each "
               "(task->workerids): about one run in a hundred asserts \"Could not find child able to execute "
               "this task\" and aborts";
    if (!strcmp(name, "modular-prandom"))
        return "ignores the engine's placement of each task on its device's worker (task->workerids) and holds "
               "ready tasks it never runs (the run hangs)";
    if (!strncmp(name, "modular-", 8)) /* modular-eager and -eager-prefetching pull only what they may run */
        return "ignores the engine's placement of each task on its device's worker (task->workerids): a worker "
               "pulls a task pinned to another one, with no implementation chosen for it, and crashes";
    if (!strcmp(name, "pheft"))
        return "ignores the engine's placement of each task on its device's worker (task->workerids) and runs ops "
               "on other devices' workers";
    if (!strcmp(name, "heteroprio"))
        return "hands a worker tasks that the engine's placement (task->workerids) keeps off it, and aborts on its "
               "own assertion";
    return "does not pass the engine's equivalence run";
}

int engine_policy_check(const char *name, int any)
{
    if (any || bsipipe_engine_policy_supported(name))
        return 0; /* with `any`, bsipipe_policy_configure still refuses names StarPU does not know */
    int known = 0;
    for (struct starpu_sched_policy **p = starpu_sched_get_predefined_policies(); p && *p; p++)
        if ((*p)->policy_name && !strcmp((*p)->policy_name, name))
            known = 1;
    char list[256];
    size_t len = 0;
    list[0] = 0;
    for (int i = 0; i < N_ALLOWED && len < sizeof list; i++) {
        int r = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", allowed[i]);
        if (r < 0)
            break;
        len += (size_t)r;
    }
    if (!known)
        return bsipipe_error_set(-EINVAL, "unknown scheduling policy '%s'; valid policies: %s", name ? name : "(null)",
                                 list);
    return bsipipe_error_set(-ENOTSUP, "policy '%s' is not supported: StarPU 1.3's %s %s; use one of: %s", name, name,
                             refusal(name), list);
}
