/* bsipipe_policy.h: StarPU scheduling policies for pipeline plans.
 *
 * Every task the engine submits carries its plan position in
 * task->sched_data (STARPU_TASK_SCHED_DATA), a bsipipe_plan_pos_t owned by
 * the engine that lives until the task has completed.
 *
 * The `bsipipe` policy places each such task on pos->worker and lets each
 * worker run its tasks strictly in increasing pos->slot order, with no gaps:
 * slot s+1 runs only after slot s has been popped, even if s+1 is ready first
 * (a worker idles rather than run a later op early). This enforces the plan's
 * placement, basic-unit admission and send/recv order at run time. Slots of a
 * worker are numbered 0, 1, 2, ... across the whole life of the policy
 * (iterations continue the numbering). Tasks without a plan position
 * (sched_data NULL) run on any worker, first come first served.
 *
 * Built-in StarPU policies (eager, lws, dmda, prio, ws, random, ...) run the
 * same graph for comparison; placement is then kept or left free by the
 * engine through task->workerids, not by this file.
 */
#ifndef BSIPIPE_POLICY_H
#define BSIPIPE_POLICY_H

/* StarPU's types by name only: this header (and bsipipe.h) compiles in any
 * C mode, -std=c11 included, without StarPU's headers, which need POSIX. */
struct starpu_sched_policy;
struct starpu_conf;

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_plan_pos {
    int worker;  /* StarPU worker id that must run the task */
    long slot;   /* position in that worker's order, from 0, no gaps */
    int ahead;   /* 0: strictly in order. j > 0 (at most BSIPIPE_POLICY_MAX_AHEAD):
                    the task may run as soon as the worker has reached slot - j,
                    before the j tasks in between (which keep their order), and
                    the order skips it later. For receive posts, which never block:
                    the engine posts the receives behind a compute op before
                    running it (docs/policies.md, "Posting ahead"). */
} bsipipe_plan_pos_t;

#define BSIPIPE_POLICY_MAX_AHEAD 63

/* The in-order policy (policy_name "bsipipe"). */
extern struct starpu_sched_policy bsipipe_sched_policy;

/* Selects the policy `name` for starpu_init(conf): "bsipipe" sets
 * conf->sched_policy to bsipipe_sched_policy; any name StarPU knows sets
 * conf->sched_policy_name. Because STARPU_SCHED overrides the application's
 * choice and cannot name an external policy, a STARPU_SCHED that differs from
 * `name` is refused with BSIPIPE_ECONFIG (detail says to unset it or pass
 * the same name). Unknown names: -EINVAL, detail lists the valid ones. */
int bsipipe_policy_configure(struct starpu_conf *conf, const char *name);

/* 1 if `name` is the in-order policy, 0 for a built-in one. */
int bsipipe_policy_is_inorder(const char *name);

/* How long (µs) a worker of the in-order policy whose next slot is not
 * ready spins before StarPU puts it to sleep; 0 (default): sleep at once.
 * Read when the policy starts (starpu_init). Spinning saves a thread
 * wake-up per hand-off when every worker has a core; with more workers
 * than cores it takes time from the worker that has work. */
void bsipipe_policy_set_idle_spin(long usec);

/* The submitting thread says the in-order task of `slot` on `worker` is
 * submitted. Once told, a worker spins only for a slot below the highest
 * told (its task is coming; otherwise the submitter needs the core); never
 * told, it spins as before. No-op without an active in-order policy. */
void bsipipe_policy_note_submitted(int worker, long slot);

/* Number of tasks the in-order policy has run on each worker so far (the next
 * slot it waits for); -1 if the policy is not active. For tests and stats. */
long bsipipe_policy_next_slot(int worker);

#ifdef __cplusplus
}
#endif
#endif
