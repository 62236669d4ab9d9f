/* bsipipe_engine.h: the training engine — every op of a plan a StarPU task.
 *
 * An engine owns a StarPU session (starpu_init at create, starpu_shutdown at
 * destroy: one engine per process at a time), the model's parameters as one
 * replica per (pipe, chunk) on the device that holds it, and the plan. Each
 * iteration submits the plan's ops as tasks with their data handles; StarPU's
 * sequential data consistency turns the handles into the dependencies, and
 * the chosen scheduling policy decides when each ready task runs.
 *
 * Ownership: the caller owns the options and every array it passes; arrays
 * returned through out-parameters are filled into caller memory.
 */
#ifndef BSIPIPE_ENGINE_H
#define BSIPIPE_ENGINE_H

#include "graph/bsipipe_schedule.h"

struct bsipipe_cost_model;  /* graph/bsipipe_sim.h */
struct bsipipe_sim_result; /* graph/bsipipe_sim.h */
#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_engine bsipipe_engine_t;

/* What runs a device's ops (docs/engine.md, "Devices"). */
typedef enum {
    BSIPIPE_DEVICES_CPU = 0,  /* one StarPU CPU worker per device (default) */
    BSIPIPE_DEVICES_CUDA = 1  /* one StarPU CUDA worker per device, several per GPU allowed */
} bsipipe_engine_devices_t;

/* "cpu" / "cuda" -> kind; -EINVAL for anything else. */
int bsipipe_engine_devices_parse(const char *name, bsipipe_engine_devices_t *out);

/* 0 when name is a precision of o.precision ("fp32", "tf32", "bf16", "bf16s"; NULL is fp32),
 * else -EINVAL with a detail naming the choices. */
int bsipipe_engine_precision_check(const char *name);

/* How a tensor-parallel collective runs (o.tp_collectives;
 * docs/tensor-parallel.md, "Collectives"). */
typedef enum {
    BSIPIPE_TP_COLL_AUTO = 0,     /* per rank when --transport nccl spreads a group over GPUs, else one task */
    BSIPIPE_TP_COLL_ONE_TASK = 1, /* one task reads and writes every rank's buffers (a group in one memory) */
    BSIPIPE_TP_COLL_PER_RANK = 2  /* one task per rank on its worker, over its own buffers; the ranks' tasks
                                     meet: an NCCL call each (nccl), or the last one to arrive runs the
                                     collective for all (local) */
} bsipipe_engine_tp_coll_t;

typedef struct bsipipe_engine_options {
    bsipipe_model_dims_t dims;
    bsipipe_parallel_config_t pc;
    bsipipe_adamw_t opt;
    unsigned long long seed;  /* parameter initialisation (bsipipe_model_init) */
    const char *policy;       /* "bsipipe" (default when NULL) or a StarPU policy name */
    bsipipe_engine_devices_t devices; /* cpu (default) or cuda */
    int gpus;                 /* cuda: GPUs to spread the devices over (0: every GPU found,
                                 at most one per device); devices / gpus workers per GPU */
    const char *transport;    /* "local" (default when NULL) or "nccl" (cuda only: pairs on
                                 two GPUs use NCCL, pairs on one GPU the local copy) */
    const char *precision;    /* cuda: the matrix products (docs/cuda.md) — "fp32" (default
                                 when NULL), "tf32", "bf16" (tensor cores, bf16 inputs, fp32
                                 accumulation; attention too) or "bf16s" (bf16 operands in
                                 memory, and the stash in bf16: about half the activation
                                 memory); process-wide while the engine lives. cpu: "fp32" */
    double watchdog_s;        /* a send waiting longer fails the run (default 30 s when 0) */
    int recv_in_place;        /* bsipipe policy, local transport: 1 = every RECV posts at its
                                 place in the device's list; 0 (default) = the receives right
                                 behind a compute op are posted before it starts (posting
                                 never blocks, so a neighbour's send need not wait for that op;
                                 docs/transport.md, "Posting ahead") */
    int idle_spin_us;         /* bsipipe policy: a worker whose next op is not ready spins this
                                 long before it sleeps, saving a thread wake-up per hand-off.
                                 0: auto — env BSIPIPE_IDLE_SPIN_US, else 1000 when every CPU
                                 worker of this node has a core of its own, else none; < 0: never */
    int unchecked_plan;       /* 1: run the plan even if the validator finds a deadlock
                                 (to watch the watchdog catch it at run time) */
    double emulate_flops;     /* > 0: emulated device time — F, B and W tasks sleep for
                                 their FLOPs / emulate_flops seconds instead of computing
                                 (so many devices fit on few cores); loss and gradients
                                 are then meaningless. 0: real compute */
    const struct bsipipe_cost_model *emulate_links; /* with emulate_flops, one process, CPU
                                 devices: the links of the cluster it stands in for
                                 (graph/bsipipe_sim.h: latencies, bandwidths,
                                 devices_per_node or device_node, shared_nic). A SEND
                                 holds its device for its bytes' time on them, a SYNC
                                 of replicas for the all-reduce's, a TP collective for
                                 its charge: the planner's model (bsipipe_links_*),
                                 so measured and predicted runs share one description
                                 of the links. Copied at create. NULL: transfers are
                                 in-process copies, nearly free */
    /* Scale-out (docs/scaleout.md). mpi = 1: this process is one StarPU-MPI
     * rank (node) of a run started by mpirun; every rank creates the engine
     * with the same options and runs the same iterations on the same data.
     * Device d runs on rank device_rank[d] (pc.w entries; NULL: the hwloc
     * mapper with one node per rank, mirrored pairs on one rank unless
     * naive_mapping). */
    int mpi;
    const int *device_rank;
    int naive_mapping;
    /* A plan made by the driver (graph/bsipipe_builder.h: built op by op or
     * imported from JSON) instead of the preset of pc: the engine runs a
     * copy (the caller keeps and frees its own). Its config (schedule, w,
     * p, k, m, tp, partition, comm) and model must be pc and dims: take them
     * from it, bsipipe_engine_options_default(bsipipe_schedule_model(s),
     * bsipipe_schedule_config(s)). NULL (default): the engine plans pc. */
    const bsipipe_schedule_t *plan;
    bsipipe_engine_tp_coll_t tp_collectives; /* with pc.tp > 1: one task per collective or one per
                                 rank (above); auto (default) is per rank exactly when the nccl
                                 transport spreads each TP group over pc.tp GPUs */
    int unsupported_policy;   /* 1: run a StarPU policy outside the allow-list
                                 (bsipipe_engine_policies) anyway — for re-checking the
                                 list (tests/test_policy_equiv --probe); it may crash or
                                 hang on the engine's graph */
} bsipipe_engine_options_t;

/* Defaults: the given model and config, AdamW lr 1e-3 (0.9, 0.95), eps 1e-8,
 * weight decay 0.1, clip 1.0, seed 1, policy "bsipipe". */
bsipipe_engine_options_t bsipipe_engine_options_default(const bsipipe_model_dims_t *dims,
                                                        const bsipipe_parallel_config_t *pc);

/* Plans the schedule (or copies o->plan: -EINVAL naming the first field
 * where it differs from o->pc or o->dims), starts StarPU with one worker per device (CPU or CUDA,
 * o->devices), places the initial parameters. Errors: the planner's
 * (BSIPIPE_ECONFIG ...), -EINVAL (bad options, unknown policy), -ENODEV
 * (cuda asked but no CUDA device, or libbsipipe built without CUDA),
 * -ENOTSUP (more devices than GPUs with a StarPU that allows one CUDA worker
 * per GPU), -EBUSY (StarPU is already initialised in this process, by the
 * application or by another engine: the engine would run under that
 * session's workers and policy, so it refuses; create it before starpu_init
 * or call starpu_shutdown first; that StarPU is left untouched), -ENOMEM,
 * -EIO (StarPU, cuBLAS or NCCL failed), -ENOTSUP (a StarPU policy that does
 * not run the engine's graph correctly: see bsipipe_engine_policies). */
int bsipipe_engine_create(const bsipipe_engine_options_t *o, bsipipe_engine_t **out);

/* The scheduling policies the engine runs correctly: "bsipipe" first, then
 * the StarPU 1.3 policies whose equivalence run passes on the engine's graph
 * (tests/test_policy_equiv; docs/policies.md says why the others are
 * refused). Stores up to `max` names (static strings) in out (may be NULL)
 * and returns how many there are. */
int bsipipe_engine_policies(const char **out, int max);
/* 1 if `name` is one of them, else 0. */
int bsipipe_engine_policy_supported(const char *name);
void bsipipe_engine_destroy(bsipipe_engine_t *e); /* NULL is fine */

/* One iteration without the optimizer step: zero the gradients, run every
 * F, B, transfer and SYNC of the plan on tokens[m][S] -> targets[m][S].
 * *loss = mean cross-entropy over the m*S tokens. Then the gradients (of that
 * mean) can be read with bsipipe_engine_grads(). BSIPIPE_EDEADLOCK when the
 * watchdog fired (detail names the waiting devices and ops). */
int bsipipe_engine_forward_backward(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss);
/* A validation pass: the mean loss of tokens -> targets, forward only (the
 * plan's B, W and SYNC ops keep their slots as empty tasks; nothing is
 * learned, no gradient kept). bsipipe_engine_records, _last_stats and the
 * trace keep reporting the last training iteration. */
int bsipipe_engine_evaluate(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss);

/* forward_backward plus the optimizer step (global-norm clipping, AdamW);
 * *gnorm (may be NULL) gets the gradient norm before clipping. */
int bsipipe_engine_iteration(bsipipe_engine_t *e, const int *tokens, const int *targets, double *loss,
                             double *gnorm);

/* A learning-rate schedule: the next steps use opt.lr * scale (1 at
 * creation). The options' lr stays the base rate, so checkpoints (which
 * record it) resume under the same schedule; the caller sets the scale of
 * each iteration before it. -EINVAL for a scale outside 0..1e6. */
int bsipipe_engine_set_lr_scale(bsipipe_engine_t *e, double scale);

/* Whole-model vectors (bsipipe_model_params(dims) floats, the layout of
 * bsipipe_model.h), read from the down pipe's replicas. With MPI every rank
 * gets the whole vector (collective calls). */
long bsipipe_engine_n_params(const bsipipe_engine_t *e);
int bsipipe_engine_params(bsipipe_engine_t *e, float *out);
int bsipipe_engine_grads(bsipipe_engine_t *e, float *out);

/* What StarPU's profiling recorded for one op of the last iteration. */
typedef struct bsipipe_engine_op_record {
    double start_us, end_us; /* StarPU clock (starpu_timing_now), microseconds */
    int worker;              /* StarPU worker that ran it */
    long seq;                /* completion order over the iteration (0 = first) */
    unsigned long job_id;    /* StarPU's job id of its task (JobId in tasks.rec, paje.trace, dag.dot's
                                task_ID); 0 for an op that ran without a task (an eager SEND) */
} bsipipe_engine_op_record_t;

/* Records of device d's ops in plan order (n = that device's op count), owned
 * by the engine, valid until the next iteration. -EINVAL for a bad device. */
int bsipipe_engine_records(const bsipipe_engine_t *e, int device, const bsipipe_engine_op_record_t **rec, int *n);

/* Measured statistics of the last iteration (with MPI: over every rank's
 * devices; records stay per rank, remote devices' records are zero). */
typedef struct bsipipe_engine_stats {
    double wall_s;          /* submission to completion */
    double makespan_s;      /* first task start to last compute end */
    double bubble_ratio;    /* 1 - sum(F/B/W busy) / (devices * makespan) */
    double tokens_per_s;    /* m * S / wall_s */
    double loss;            /* mean cross-entropy */
    double gnorm;           /* gradient norm before clipping (after a step) */
} bsipipe_engine_stats_t;
int bsipipe_engine_last_stats(const bsipipe_engine_t *e, bsipipe_engine_stats_t *out);

/* Runtime overhead of the last iteration (bsipipe-bench --overhead,
 * docs/benchmarks.md). Phase sums come from StarPU's task profiling (on for
 * engine iterations; n_profiled = 0 when it was off). */
typedef struct bsipipe_engine_overhead {
    long n_tasks;           /* tasks submitted (every op of this rank, plus helpers) */
    double wall_s;          /* submission start to the end of the last task */
    double submit_s;        /* submission alone (the dry run of buffer uses included) */
    long n_profiled;        /* tasks whose phases are summed below */
    double push_us, pop_us, fetch_us, body_us, release_us; /* sums: push to the policy, pop, input
                                                               acquisition (allocation), codelet, release */
    long n_xfer;            /* SEND and RECV tasks among them */
    double xfer_body_us;    /* their summed codelet time: the worker time transfers occupy */
    double send_wait_us;    /* of which SENDs spent waiting for their receive's post (the transport's count) */
    double staged_bytes;    /* eager sends copied aside because their receive had not posted yet
                               (bsipipe_transport_set_offer_staging; with buffers reused) */
} bsipipe_engine_overhead_t;
int bsipipe_engine_last_overhead(const bsipipe_engine_t *e, bsipipe_engine_overhead_t *out);

/* StarPU's floor for this engine's exact task shapes: one iteration of the
 * same plan, submitted in the same order, with the same buffers and access
 * modes per op, the same dependency structure (the RECV's end dependency,
 * the SEND's post tag), the same workers, placement and policy, but empty
 * codelets, no callback and StarPU's profiling off, and buffers registered
 * once (one float each, reused by every floor iteration). Flags add back
 * what the engine does: PROFILE (StarPU's task profiling and the engine's
 * per-task callback), FRESH (the engine's per-iteration buffers, registered
 * without memory, allocated by StarPU at their first write and unregistered
 * after their last use), POOLED (the engine's buffers reused from its
 * per-device pools, bsipipe_engine_set_buffer_reuse), EMULATE (F/B/W hold their worker for the emulated
 * device time, as --emulate does), STARPU_POLL (StarPU's last awake worker
 * polls for this iteration, as StarPU 1.3 does unless the engine stops it:
 * the floor as StarPU ships it). CPU devices in one process only
 * (-ENOTSUP otherwise). Fills *out like bsipipe_engine_last_overhead. The
 * records (bsipipe_engine_records) are then the floor's, with PROFILE. */
/* The transport's old way, for comparison (bsipipe-bench --overhead): with
 * on = 1 a SEND task is released at once and waits on its worker, in
 * bsipipe_transport_send, until its receive is posted; 0 (the default): it
 * is released only once the receive is posted. -EINVAL for no engine. */
int bsipipe_engine_set_blocking_send(bsipipe_engine_t *e, int on);
/* Eager sends (on by default where allowed): a SEND is no task of its own;
 * the F or B that produced its data offers it to the transport as it ends
 * (bsipipe_transport_offer), copied at once if the RECV has posted, else by
 * the RECV's post, so no task waits and each transfer costs one task (the
 * RECV) instead of two. Allowed for CPU devices in one process without
 * tensor parallelism, on a plan the validator proved free of deadlock
 * (unchecked plans keep SEND tasks, so a deadlocking order is still
 * caught); blocking sends or receives and --recv in-place use SEND tasks
 * for as long as they are set. on = 0: a SEND task per transfer (the
 * rendezvous as a dependency, above). 0; -ENOTSUP with the reason; -EINVAL
 * for no engine. bsipipe_engine_eager_send: 1 when on. */
int bsipipe_engine_set_eager_send(bsipipe_engine_t *e, int on);
int bsipipe_engine_eager_send(const bsipipe_engine_t *e);
/* Receives that block (the paper's ablation under NCCL-like semantics):
 * with on = 1 a RECV's task holds its worker until its data has landed, so
 * under the in-order policy its device goes no further, as a blocking
 * receive would hold it (docs/schedules.md, "Blocking receives"). The plan
 * is first proved deadlock-free under these semantics (the validator's
 * error, naming the cycle, otherwise); with unchecked_plan it runs anyway
 * and a deadlock is caught by the watchdog, naming the devices. CPU devices
 * in one process (-ENOTSUP otherwise, with the reason), -EINVAL for no
 * engine. Off by default (receives are posted). */
int bsipipe_engine_set_blocking_recv(bsipipe_engine_t *e, int on);

/* Per-iteration buffers (activations, stashes, K/V caches, their gradients,
 * receive buffers) reused across ops and iterations, on by default in one
 * process without tensor parallelism, for a plan proven free of deadlock
 * (not with unchecked_plan): each device keeps a pool of StarPU
 * handles by size, registered once; a buffer's first writer takes one at
 * its submission and the submission of its last use gives it back
 * (StarPU's sequential consistency orders the next writer after that use).
 * on = 0: registered each iteration, allocated by StarPU at the first
 * write and unregistered after the last use (the engine before). 0;
 * -ENOTSUP for MPI, TP or unchecked-plan engines; -EINVAL for no engine.
 * Switching it off frees the pools' memory. A receive posted ahead takes
 * only a handle given back before the first slot it may run at, so reuse
 * never makes it wait for the ops in front of it.
 * bsipipe_engine_buffer_reuse: 1 when on. bsipipe_engine_buffer_bytes:
 * per device (bytes has W entries), the bytes of the handles its pool
 * holds, what reuse keeps allocated between iterations (0 without). */
int bsipipe_engine_set_buffer_reuse(bsipipe_engine_t *e, int on);
int bsipipe_engine_buffer_reuse(const bsipipe_engine_t *e);
int bsipipe_engine_buffer_bytes(const bsipipe_engine_t *e, double *bytes);

/* The idle spin in µs the engine chose (options.idle_spin_us resolved); 0: none. */
int bsipipe_engine_idle_spin_us(const bsipipe_engine_t *e);
enum { BSIPIPE_FLOOR_PROFILE = 1, BSIPIPE_FLOOR_FRESH = 2, BSIPIPE_FLOOR_EMULATE = 4,
       BSIPIPE_FLOOR_STARPU_POLL = 8 /* StarPU's last awake worker polls, as StarPU 1.3 ships (engine_devices.c) */,
       BSIPIPE_FLOOR_POOLED = 16 };
int bsipipe_engine_floor_iteration(bsipipe_engine_t *e, int flags, bsipipe_engine_overhead_t *out);

/* Seconds each device spent in F, B and W tasks in the last iteration
 * (busy_s has one entry per device). */
int bsipipe_engine_device_busy(const bsipipe_engine_t *e, double *busy_s);

/* Measured op times of the last iteration, for planning and predicting on
 * them (bsipipe_cost_model_t.op_seconds): out[bsipipe_sim_op_slot(s, op)] =
 * mean seconds of the F, B or W ops of that piece and chunk over every
 * micro-batch, pipe and device of this process (n >= bsipipe_sim_op_slots;
 * slots the plan has no op for stay 0). -ENODATA when an op of the plan has
 * no record here (no iteration yet, or another MPI rank ran it), -ENOTSUP
 * with tensor parallelism. */
int bsipipe_engine_op_seconds(const bsipipe_engine_t *e, double *out, int n);

/* Every compute op's own duration in the last iteration, to replay the run
 * (bsipipe_cost_model_t.op_replay): out[bsipipe_sim_op_index(s, op)] =
 * seconds of that F, B or W (n >= bsipipe_sim_op_count; indices the plan has
 * no op for stay 0). The plan simulated on them is the iteration as an
 * ideal runtime would have run it with the same op times: its makespan
 * against the measured one is the runtime's cost. Same errors as
 * bsipipe_engine_op_seconds. */
int bsipipe_engine_op_durations(const bsipipe_engine_t *e, double *out, long n);

/* Peak live activation bytes of each device in the last iteration (stash of a
 * piece from its forward's start to its backward's end — W's when split —,
 * KV cache and its gradient per micro-batch and chunk), the quantities the
 * planner's simulator predicts. bytes has one entry per device. */
int bsipipe_engine_peak_memory(const bsipipe_engine_t *e, double *bytes);

/* Traffic of the last iteration by link class ([0] inside a rank, [1]
 * between ranks), summed over every rank: activations and their gradients
 * moved by SEND/RECV, and gradient sync (each side of a SYNC sends its
 * replica's gradient once, as the planner counts it). Cross-rank bytes are
 * counted when StarPU-MPI completes each send. With MPI a collective call:
 * every rank must make it. */
int bsipipe_engine_traffic(bsipipe_engine_t *e, double act_bytes[2], double sync_bytes[2]);

/* This process's rank and the number of ranks (0 and 1 without MPI), and
 * the rank of each device (w entries, may be NULL). */
int bsipipe_engine_ranks(const bsipipe_engine_t *e, int *rank, int *nranks, int *device_rank);

/* Every rank's outcome of a step (a collective with MPI: every rank calls
 * it): the most negative rc of any rank. A rank whose rc < 0 keeps its own
 * detail; the others get "engine: rank R <failed> (...); see its message".
 * Runs under the watchdog: a rank silent for its time is named and the job
 * aborted. Without MPI it returns rc. */
int bsipipe_engine_agree(bsipipe_engine_t *e, int rc, const char *failed);

/* The schedule the engine runs (owned by the engine). */
const bsipipe_schedule_t *bsipipe_engine_schedule(const bsipipe_engine_t *e);

/* ---- Checkpoint and resume (tasks/engine_checkpoint.c, docs/checkpoint.md) ----
 *
 * A checkpoint is one file, DIR/checkpoint.bin: the model dimensions, the
 * parallel config (schedule, w, p, k, m, tp, partition), the AdamW
 * hyper-parameters, the seed, the engine's optimizer step count, the caller's
 * iteration counter, then every (pipe, chunk) replica's parameters and AdamW
 * moments m and v, and a CRC-32 of all that. Resuming from it continues the
 * run bit for bit: the iterations after a load give the same losses and
 * parameters as an uninterrupted run (same data, same config, same policy and
 * transfer order).
 *
 * Across MPI ranks both are collectives (every rank calls them): each rank
 * writes a part with its own replicas (DIR/checkpoint-i<ITER>-<NONCE>-r<RANK>.part)
 * and, once every part is durable (a barrier), rank 0 renames a manifest
 * (format version 2) over DIR/checkpoint.bin and removes the parts it does
 * not name; a crash at any point leaves the previous checkpoint loadable.
 * Any rank count loads any checkpoint (version 1 or 2); the ranks agree
 * before any touches its engine. DIR must be visible to every rank.
 *
 * Ownership: the engine is borrowed; `dir` is the caller's and is only read
 * during the call. Both functions call starpu_data_acquire on the replicas,
 * so call them between iterations from the thread that runs the engine,
 * never from a StarPU task or callback. */

/* Writes the engine's state and `iteration` (>= 0, a counter of the caller's,
 * returned as is by bsipipe_engine_load) to DIR/checkpoint.bin, atomically:
 * the data goes to a temporary file in DIR (".checkpoint.bin.<pid>.tmp",
 * created with O_EXCL | O_NOFOLLOW: a planted symlink is never followed),
 * which is fsync'ed and renamed over the previous checkpoint, then DIR is
 * fsync'ed. A failure or a crash at any point leaves the previous checkpoint
 * (if any) intact; on failure the temporary file is removed. DIR must exist
 * (it is not created).
 * Errors: -EINVAL (NULL engine or dir, iteration outside 0..INT_MAX, or the engine's
 * last iteration failed, so its state is not worth saving), -ENOENT /
 * -ENOTDIR / -EACCES ... (DIR unusable; detail names it), -ENOSPC, -EIO ...
 * (write, fsync, rename failed: the negated errno; detail names the file),
 * -ENOMEM. The detail sentence is in bsipipe_error_detail(). */
int bsipipe_engine_save(bsipipe_engine_t *e, const char *dir, long iteration);

/* Reads DIR/checkpoint.bin into an engine created with the same model, the
 * same parallel config (schedule, w, p, k, m, tp, partition), the same
 * optimizer hyper-parameters and the same seed: replaces every replica's
 * parameters and AdamW moments and the step count, and stores the saved
 * iteration counter in *iteration (may be NULL). The policy, transfer order,
 * watchdog and device placement may differ (results are then a valid
 * continuation, bitwise equal only when the op order is the same).
 * The whole file is read and checked before anything is written: on any
 * error the engine is unchanged and *iteration is not written.
 * Errors: -EINVAL (NULL engine or dir); -ENOENT (no DIR or no checkpoint in
 * it; the detail names the path); -EINVAL when checkpoint.bin is not a
 * regular file (a FIFO is refused, not waited on); another negated errno
 * when the file cannot be read; -ENOMEM; BSIPIPE_EFORMAT when the content is wrong, the detail
 * saying which: "truncated: expected N bytes, found M", "bad magic", format
 * version, "corrupted: CRC-32 mismatch", an iteration counter or step count
 * outside 0..INT_MAX, or a checkpoint of another model or
 * config naming the first field that differs ("checkpoint has w=4, this run
 * has w=8"). */
int bsipipe_engine_load(bsipipe_engine_t *e, const char *dir, long *iteration);

/* 1 if DIR holds a checkpoint (DIR/checkpoint.bin exists, whatever it is), 0
 * if not (or DIR is missing), a negated errno otherwise. No engine needed. */
int bsipipe_checkpoint_exists(const char *dir);

/* An advisory lock (flock) on a checkpoint directory, for one run's life:
 * DIR/.checkpoint.lock, holding the owner's pid. Taking it also removes the
 * temporary files of saves whose process no longer exists
 * (DIR/.checkpoint.bin.<pid>.tmp). *out: release with _unlock (the lock
 * also ends with the process). Errors: -EBUSY when another process holds it
 * (the detail names its pid), -ENOENT (no DIR), another negated errno. */
typedef struct bsipipe_checkpoint_lock bsipipe_checkpoint_lock_t;
/* (The lock also removes half-made kept directories, below.) */
int bsipipe_checkpoint_lock(const char *dir, bsipipe_checkpoint_lock_t **out);
void bsipipe_checkpoint_unlock(bsipipe_checkpoint_lock_t *l); /* NULL is fine */

/* Keeps the checkpoint now in DIR as DIR/iter_NNNNNNN/ too (the iteration it
 * stores, seven digits or more): checkpoint.bin and, across ranks, the parts
 * its manifest names, as hard links (no copy; a copy where the file system
 * has none), made complete under a temporary name and renamed. A kept
 * directory is a checkpoint directory (bsipipe_engine_load reads it); one of
 * the same iteration kept before is replaced. Then the kept directories
 * beyond the newest keep_last (>= 1, by iteration) are removed: their
 * checkpoint files only, a directory holding anything else stays. Call it
 * after bsipipe_engine_save returned 0 (across ranks: on one rank, after
 * every rank's save returned 0), with the directory's lock held.
 * *iteration (may be NULL): the iteration kept. Errors: -EINVAL (no dir,
 * keep_last < 1), -ENOENT / BSIPIPE_EFORMAT (DIR holds no checkpoint), a
 * negated errno (link, copy, mkdir or rename failed: the detail names the
 * file); DIR's own checkpoint is never touched. */
int bsipipe_checkpoint_keep(const char *dir, int keep_last, long *iteration);

/* ---- Tracing (tasks/engine_trace.c, docs/tracing.md) ----
 *
 * A trace directory DIR collects, for one engine's run:
 *   prof_file_0      StarPU's raw FxT trace (StarPU built --with-fxt)
 *   paje.trace, dag.dot, tasks.rec, trace.rec, data.rec, trace.html,
 *   activity.data, distrib.data
 *                    what starpu_fxt_tool makes of it (the Paje states
 *                    recoloured like the paper's Figure 1, see below; dag.dot
 *                    limited to the engine's ops unless BSIPIPE_TRACE_DAG=full);
 *                    starpu_fxt_tool.log holds the tool's output
 *   trace.json       Chrome/Perfetto trace events of the last iteration,
 *                    from StarPU's profiling information (no FxT needed),
 *                    with a flow arrow from each SEND to its RECV
 *   timeline.svg     the planner's Figure-1 drawing fed with the measured
 *                    start/end times of the last iteration (time axis)
 *   planned.svg      the same drawing of the planner's simulation
 *   index.html       the two SVGs one above the other, inline, zoomable
 *
 * Use: bsipipe_trace_begin(DIR) before bsipipe_engine_create (it sets the
 * StarPU FxT environment that starpu_init reads), run the iterations,
 * bsipipe_engine_trace_write(e, DIR, planned, cost), bsipipe_engine_destroy(e) (its
 * starpu_shutdown writes the raw FxT file), then bsipipe_trace_end(DIR).
 * One engine per trace directory: the raw file of a second engine would
 * replace the first one's.
 *
 * Ownership: dir is the caller's and only read during each call; the engine
 * is borrowed. */

/* Makes DIR (and its parents) if needed, checks it is a writable directory,
 * and sets STARPU_FXT_PREFIX=DIR, STARPU_FXT_SUFFIX=prof_file and
 * STARPU_FXT_TRACE=1 (their previous values are restored by
 * bsipipe_trace_end). Call before bsipipe_engine_create; nothing is traced
 * by FxT when StarPU was built without it (the other files still are).
 * Errors: -EINVAL (NULL or empty dir), -ENOTDIR (DIR or a parent is a
 * file), -EACCES, -ENOENT, ... (the negated errno; the detail names DIR). */
int bsipipe_trace_begin(const char *dir);

/* Writes DIR/trace.json, DIR/timeline.svg (measured), DIR/planned.svg and
 * DIR/index.html from the engine's last iteration. Call after a successful
 * iteration. planned.svg draws `planned`, the engine's plan as the caller
 * simulated it (bsipipe_simulate of bsipipe_engine_schedule(e) under
 * `cost`; the engine itself never simulates after create); NULL: no
 * planned.svg and no planned bubble (-1 in trace.json). `cost` titles the
 * drawing and gives it a time axis when its costs are not unit ones (NULL:
 * unit costs).
 * trace.json: one "X" event per op of the plan: name (the task name, e.g.
 * "F down mb3 s1 c5"), cat (kind), pid 0, tid (the device whose StarPU
 * worker ran the op), ts and dur in microseconds from the iteration's first
 * task start, args {pipe, mb, sub, chunk, peer, channel, tensor, device
 * (planned), index (position in the device's plan), worker, seq}; metadata
 * events name the devices; otherData holds the config and the measured and
 * planned bubble ratios; each transfer adds a flow start ("s", in its SEND's
 * slice) and end ("f", "bp": "e", in its RECV's) with the channel as id.
 * Errors: -EINVAL (NULL engine or dir, no iteration has run, or `planned`
 * not of this engine's plan), the negated errno of a file that cannot be
 * written (the detail names it), -ENOMEM. */
int bsipipe_engine_trace_write(bsipipe_engine_t *e, const char *dir, const struct bsipipe_sim_result *planned,
                               const struct bsipipe_cost_model *cost);

/* After bsipipe_engine_destroy: restores the FxT environment, then runs
 * `starpu_fxt_tool -i DIR/prof_file_<id> -d DIR` (output in
 * DIR/starpu_fxt_tool.log) and gives the Paje task states the colours of
 * the planner's SVG (down pipe blue, up pipe orange, forward light,
 * backward dark; transfers grey, SYNC green, STEP dark green) — which also
 * works around StarPU 1.3 writing 0..255 colour components where Paje
 * expects 0..1; then limits DIR/dag.dot to the engine's ops (paths through
 * StarPU's own tasks and tags become direct edges, edges implied by others
 * are left out; BSIPIPE_TRACE_DAG=full in
 * the environment keeps StarPU's graph). The tool is $STARPU_FXT_TOOL, else
 * $STARPU_BINDIR/starpu_fxt_tool, else the one of the StarPU bsipipe was
 * built with, else starpu_fxt_tool on PATH.
 * Errors: -ENOTSUP (StarPU without FxT: no raw trace is written), -ENOENT
 * (no raw trace in DIR, or no starpu_fxt_tool found: the detail gives the
 * command to run by hand), -EIO (the tool failed: its exit status; see the
 * log), the negated errno of a file. */
int bsipipe_trace_end(const char *dir);

/* 0xRRGGBB colour of an op in the planner's SVG palette (the colours
 * bsipipe_trace_end gives the Paje states), for starpu_task::color. */
unsigned bsipipe_trace_op_color(const bsipipe_op_t *op);

#ifdef __cplusplus
}
#endif
#endif
