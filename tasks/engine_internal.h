/* engine_internal.h: the engine's insides, shared by tasks/ files. */
#ifndef BSIPIPE_ENGINE_INTERNAL_H
#define BSIPIPE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <starpu.h>

#include "tasks/bsipipe_engine.h"
#include "kernels/bsipipe_kernels.h"
#include "graph/bsipipe_sim.h"
#include "graph/plan_lower.h"
#include "tasks/bsipipe_transport.h"
#include "policies/bsipipe_policy.h"

/* Per-op arguments of a task (engine-owned, alive for the iteration). */
typedef struct op_args {
    struct bsipipe_engine *e;
    bsipipe_op_t op;
    int start, len;      /* piece tokens */
    int l0, l1;          /* layers of the chunk */
    const plan_lowered_op_t *low; /* what the lowering pass computed of it (e->lowered) */
    const struct engine_transport *transport; /* SEND, RECV, SYNC: the one that moves it (set at create) */
    int in_channel;      /* F/B: channel of the RECV bringing the input, -1 = local producer */
    int send_op;         /* F/B: index of the SEND of its output on the same device, -1 = none */
    starpu_data_handle_t send_handle; /* SEND, eager: the buffer it sends (set when its producer is submitted) */
    int eager_done;      /* SEND, eager, __atomic: its offer was settled (engine_send_eager) */
    struct op_args *settled; /* F/B/RECV: the eager SEND whose buffer use its callback consumes */
    int do_step;         /* STEP: 0 = keep its slot but change nothing */
    int n_own, *own_rep; /* STEP: replicas (pipe * C + chunk) held by the device */
    char name[64];       /* for reports */
    struct starpu_task *task; /* while submitted: its profiling info feeds the record */
    bsipipe_engine_op_record_t *rec;
    int ph_ok;                /* phases below set by the last iteration's callback */
    double ph[5];             /* µs: push, pop, fetch, body, release (StarPU profiling) */
    long long running_since;  /* CLOCK_MONOTONIC ns when a worker popped it, 0 when not running
                                 (the watchdog tells a slow op from a deadlock) */
} op_args_t;

/* One (pipe, chunk) replica: a slice of the whole-model vector. */
typedef struct replica {
    int device;
    long base, n;        /* offset and length in the whole-model vector */
    float *params, *grads, *m, *v;
    starpu_data_handle_t h_params, h_grads, h_m, h_v;
} replica_t;

/* The part of the watchdog (engine_watchdog.c) a task's end touches: the
 * engine waits on `done` under `lock` for the iteration's `target` count of
 * ended tasks (LONG_MAX while submitting); the task callbacks (engine_core.c)
 * count and wake it. Below the watchdog, which also inspects the TP
 * builder's ops: the callbacks of every task builder reach it. */
struct engine_watchdog_end {
    pthread_mutex_t lock;
    pthread_cond_t done;
    long target;
};

struct bsipipe_engine {
    bsipipe_engine_options_t o;
    bsipipe_model_dims_t dims;
    bsipipe_schedule_t *sched;
    int W, C, k, m, S, d;
    int inorder;                       /* bsipipe policy */
    int started;                       /* starpu_init succeeded */
    int *workerid;                     /* StarPU worker of each device */
    int *gpu;                          /* CUDA workers: the GPU of each device (else NULL) */
    int cuda_per_gpu, cuda_spare;      /* CUDA: devices (tp_spread: rank slots) per GPU; idle workers
                                          per GPU after them */
    int cuda_gpus;                     /* CUDA: GPUs StarPU was asked to drive */
    struct bsipipe_nccl *nccl;         /* nccl transport (pairs on two GPUs), else NULL */
    double *norm;                      /* per chunk: its squared gradient norm (a NORM task's output) */
    starpu_data_handle_t *h_norm;      /* their handles, read by every STEP */
    struct bsipipe_tp_nccl *tp_nccl;   /* nccl transport with --tp: each TP group's communicator
                                          (its ranks on pc.tp GPUs), else NULL */
    int tp_spread;                     /* CUDA, nccl, T > 1: a device's T ranks on T different GPUs */
    uint32_t **wmask;                  /* per device: worker bitmap (built-in policies) */
    unsigned wmask_len;
    replica_t *rep;                    /* [pipe * C + chunk] (pipe 1 only if bidirectional) */
    /* Per-iteration buffers, allocated by StarPU at their first write and
     * freed after their last use (starpu_data_unregister_submit): sizes in
     * floats (0 = no such buffer) and handles. Activations per (mb, sub,
     * chunk); KV cache and its gradient per (mb, chunk); receives per channel. */
    uint32_t *n_x_out, *n_stash, *n_dx, *n_dy, *n_wstash, *n_kv, *n_dkv, *n_recv;
    starpu_data_handle_t *h_x_out, *h_stash, *h_dx, *h_dy, *h_wstash, *h_kv, *h_dkv, *h_recv;
    int split;                         /* backward split into B and W (ZB-H1) */
    struct buffer_use {                /* user data of each per-iteration handle (engine_buffers.c) */
        long left;                     /* uses not yet submitted */
        starpu_data_handle_t *slot;    /* where the handle is kept; NULL once unregistered or pooled */
        int device;                    /* reused: the pool it came from; -1 when registered for the iteration */
    } *uses;                           /* per buffer, in the order of engine_buffers.c's lists */
    long n_uses;
    struct engine_pool *pool;          /* per device: reusable handles by size (engine_buffers.c) */
    int reuse_buffers;                 /* bsipipe_engine_set_buffer_reuse */
    int pool_active;                   /* this iteration binds its buffers from the pool */
    long *use_counts;                  /* per use slot: uses per iteration (the first iteration's dry run) */
    /* Live activation bytes per device, as the planner counts them (stash from
     * forward start to backward end, KV cache and its gradient per micro-batch
     * and chunk), and their peak over the iteration. */
    double *live_bytes, *peak_bytes;
    /* Tokens and targets per micro-batch. */
    int *tokens, *targets;
    starpu_data_handle_t *h_tokens, *h_targets;
    /* Per-device loss sums (double). */
    double *loss;
    starpu_data_handle_t *h_loss;
    starpu_data_handle_t h_work;       /* per-worker scratch */
    long work_elems;
    op_args_t **args;                  /* [device][op index] */
    bsipipe_engine_op_record_t **rec;  /* [device][op index], last iteration */
    long rec_seq;                      /* completion counter */
    bsipipe_engine_stats_t stats;
    bsipipe_plan_pos_t **pos;          /* [device][op index] */
    int **prio;                        /* [device][op index]: StarPU priority from the plan's critical
                                          path (built-in policies; NULL under bsipipe or without one) */
    long *slot_base;                   /* per device, slots used by earlier iterations */
    int eager_send;                    /* sends may be eager (engine_send_eager): CPU devices, one process,
                                          local transport, no TP, a plan proven free of deadlock */
    int eager;                         /* this iteration's sends are eager (no SEND tasks) */
    int **slot_of;                     /* [device][op index]: its slot past slot_base (eager SENDs take none) */
    int **slot_op;                     /* [device][slot past slot_base]: the op index */
    int *n_slots;                      /* per device: slots this iteration */
    bsipipe_transport_t *transport;
    int *order_device, *order_index;   /* submission order (from the simulator) */
    long n_order;
    long steps;
    /* While tracing (bsipipe_trace_begin): StarPU's job id of every op's
     * task, every pass, for DIR/ops.tsv (engine_trace.c). */
    struct engine_job *jobs;
    long n_jobs, cap_jobs;
    int pass_kind;                     /* the pass running: ENGINE_PASS_* (validation: forward only) */
    long pass_iter;                    /* its iteration in StarPU's traces (Iteration:) and ops.tsv */
    double gnorm;
    double lr_scale;                   /* multiplies o.opt.lr at the next steps (a schedule) */
    int failed;                        /* first error of the iteration; compute is skipped once set */
    /* Scale-out (engine_mpi.c): this process is StarPU-MPI rank `rank` of
     * `nranks` and runs the devices d with dev_rank[d] == rank; without MPI
     * nranks is 1 and every device is local. */
    int rank, nranks, *dev_rank, n_local;
    struct engine_mpi *mpi;            /* NULL without MPI */
    long tasks_popped, tasks_ended;    /* MPI: a task is running while popped > ended (watchdog);
                                          in one process tasks_popped counts every task but RECV */
    long tasks_submitted, nr_ended;    /* this iteration: tasks submitted; ended ones but RECVs (stall check) */
    int hung;                          /* a policy stalled: StarPU still holds tasks, nothing waits on it */
    double act_bytes_local, sync_bytes_local; /* last iteration, inside this rank */
    double *busy;                      /* per device, µs of F/B/W in the last iteration (all ranks') */
    /* Rendezvous as a dependency (local transport): the SEND of channel ch
     * carries tag tag_base + 2 ch and depends on tag tag_base + 2 ch + 1,
     * which its RECV notifies once it has posted (or the engine, when the
     * transport fails), so no SEND waits on a worker. */
    unsigned long long tag_base;       /* this iteration's; 0 before the first */
    int n_channels;
    int *post_notified;                /* per channel, __atomic: post tag notified */
    unsigned char *send_tagged;        /* per channel: its SEND waits for the post tag */
    struct engine_watchdog *wd;        /* the watchdog while it watches an iteration, else NULL */
    struct engine_watchdog_end *wd_end; /* its part a task's end touches (engine_task_ended), with wd */
    struct engine_watchdog *wd_thread; /* the engine's watchdog thread, parked between iterations */
    /* Overhead measurement (bsipipe_engine_last_overhead, _floor_iteration). */
    bsipipe_engine_overhead_t ovh;
    int no_poll;                       /* StarPU's last awake worker does not poll (engine_starpu_poll_set) */
    int idle_spin_us;                  /* resolved options.idle_spin_us (engine_idle_spin_resolve) */
    int blocking_send;                 /* bsipipe_engine_set_blocking_send */
    bsipipe_cost_model_t emu_cost;     /* emulated ops' costs: emulate_flops, with emulate_links' fields */
    plan_lowered_t *lowered;           /* the plan as the iterations read it (owned; graph/plan_lower.h) */
    bsipipe_links_t *links;            /* emulate_links: the links and their clocks (NULL: none) */
    int *emu_nodes;                    /* emu_cost.device_node (owned; NULL without links) */
    pthread_mutex_t links_lock;        /* around links */
    long links_t0;                     /* this iteration's start (ns): the links' time 0 */
    int blocking_recv;                 /* bsipipe_engine_set_blocking_recv */
    int floor_flags;                   /* nonzero (with FLOOR_ACTIVE) during a floor iteration */
    struct starpu_codelet *floor_cl;   /* the floor's empty body (engine.c), set with floor_flags */
    struct starpu_task **floor_recv;   /* per channel: the floor RECV task its SEND releases */
    int *floor_meet;                   /* per channel, __atomic, eager floor: 1 sent, 2 posted */
    starpu_data_handle_t *fl_x_out, *fl_stash, *fl_dx, *fl_dy, *fl_wstash, *fl_kv, *fl_dkv, *fl_recv;
    float *fl_mem;                     /* one float per floor handle */
    /* Tensor parallelism (engine_tp.c, docs/tensor-parallel.md): each device
     * is T = o.pc.tp StarPU workers, one per TP rank. With T > 1 the
     * per-iteration buffer arrays above hold T handles per entry (index
     * entry * T + rank), the channels are ch * T + rank, e->rep keeps the
     * replicas' layout (no vectors) and the shards live in tp. T = 1: none
     * of this, the engine as it was. */
    int T;
    struct engine_tp *tp;
};
#define ENGINE_FLOOR_ACTIVE 0x100

/* 0 if the engine runs policy `name` (engine_policy.c; `any`: every name
 * StarPU knows); else -ENOTSUP naming the StarPU limitation, or -EINVAL for
 * an unknown name, each listing the allowed ones. */
int engine_policy_check(const char *name, int any);

/* 1 when device d runs in this process. */
static inline int engine_local(const struct bsipipe_engine *e, int d)
{
    return !e->dev_rank || e->dev_rank[d] == e->rank;
}

/* Records the first failure of the iteration (codelets run concurrently). */
static inline void engine_fail(struct bsipipe_engine *e, int rc)
{
    int none = 0;
    __atomic_compare_exchange_n(&e->failed, &none, rc, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* Tags of channel ch's rendezvous (see tag_base). */
static inline unsigned long long engine_send_tag(const struct bsipipe_engine *e, long ch)
{
    return e->tag_base + 2ULL * (unsigned long long)ch;
}
static inline unsigned long long engine_post_tag(const struct bsipipe_engine *e, long ch)
{
    return e->tag_base + 2ULL * (unsigned long long)ch + 1ULL;
}
/* Per iteration (the local transport, tasks/transport/local.c): fresh tags
 * and flags before submission; after the iteration's tasks ended, the tags
 * removed (after a failed submission, transport_local_release_posts lets
 * the held SENDs drain). */
void engine_tags_begin(struct bsipipe_engine *e);
void engine_tags_end(struct bsipipe_engine *e);
/* The watchdog thread (held SENDs, see engine_watchdog.c): started at the
 * first iteration and armed for each (start), parked after it (stop: the
 * thread touches nothing of the iteration once it returns), ended and
 * freed with the engine (free; left as it is when the engine hung). */
int engine_watchdog_start(struct bsipipe_engine *e);
void engine_watchdog_stop(struct bsipipe_engine *e);
void engine_watchdog_free(struct bsipipe_engine *e);
/* Waits until every task of the iteration has ended (then as
 * starpu_task_wait_for_all), or until the watchdog found the policy stalled:
 * then -ETIMEDOUT with the detail naming the policy, and StarPU is left
 * holding the tasks (e->hung). Without a watchdog: starpu_task_wait_for_all. */
int engine_watchdog_wait(struct bsipipe_engine *e);
/* Task callbacks (engine_core.c): one more task ended (recv: it was a
 * RECV); wakes the engine's wait when the iteration's target is reached. */
void engine_task_ended(struct bsipipe_engine *e, int recv);

/* A codelet's error: say which op failed and why, then fail the iteration. */
void engine_report(struct bsipipe_engine *e, const op_args_t *a, int rc);

static inline int engine_failed(struct bsipipe_engine *e)
{
    return __atomic_load_n(&e->failed, __ATOMIC_SEQ_CST);
}

/* Live activation bytes of a device: only the device's own worker runs its
 * ops (placement is kept under every policy), so no two threads update one
 * device's counter at once. */
static inline void engine_mem(struct bsipipe_engine *e, int device, double bytes)
{
    e->live_bytes[device] += bytes;
    if (e->live_bytes[device] > e->peak_bytes[device])
        e->peak_bytes[device] = e->live_bytes[device];
}

static inline long act_index(const struct bsipipe_engine *e, int mb, int sub, int chunk)
{
    return ((long)mb * e->k + sub) * e->C + chunk;
}

/* How many ops before its own the RECV at op i of device d is posted
 * (bsipipe_sim_recv_ahead under the engine's receive semantics; 0 for MPI,
 * CUDA and blocking receives). */
int engine_recv_ahead(const struct bsipipe_engine *e, int d, int i);
/* Builds the task of op i of device d (i < 0: a task outside the plan, such
 * as a gradient norm, cl_arg = the engine) with these buffers, places it on
 * the device's worker in plan order, submits it, and counts the use of each
 * per-iteration buffer (one whose last use this is gets unregistered once
 * the task ends). 0, or a negative error with a detail. */
int engine_task_submit(struct bsipipe_engine *e, int d, int i, struct starpu_codelet *cl,
                       struct starpu_data_descr *descr, int n);
/* The same with what an op file knows of its task (engine_insert_t.flags):
 * END_DEP: it ends when the transport releases it, not when its body
 * returns (a RECV); RENDEZVOUS: a SEND of the local transport, not ready
 * before its RECV posted (its channel's tags, engine_watchdog.c). */
enum { ENGINE_TASK_END_DEP = 1u, ENGINE_TASK_RENDEZVOUS = 2u };
int engine_task_submit_flags(struct bsipipe_engine *e, int d, int i, struct starpu_codelet *cl,
                             struct starpu_data_descr *descr, int n, unsigned flags);
/* The op whose task `t` is, or NULL (a task outside the plan, the TP
 * builder's, none). */
op_args_t *engine_task_op(struct starpu_task *t);
/* One use of a per-iteration buffer: counted (dry_run) or consumed (the
 * buffer is unregistered after its last use). Other handles: nothing.
 * Consuming is thread safe: an eager send consumes its use on a worker. */
void engine_buffer_use(struct bsipipe_engine *e, starpu_data_handle_t h, int dry_run);

/* The per-iteration buffers (engine_buffers.c). init: their use records and
 * pools (at create); free: the pools' handles unregistered (before StarPU
 * stops). begin: an iteration's buffers, bound from the pools (reuse) or
 * registered now (the transport stages early offers when reused);
 * counted: after the uses are counted, the handles no op
 * uses (and, reusing, the dry run's) dropped; end: after every task, what
 * is still held given back. bind: the handle of a buffer slot for an
 * access of device's task, taken from its pool by the first writer. */
int engine_buffers_init(struct bsipipe_engine *e);
void engine_buffers_free(struct bsipipe_engine *e);
void engine_buffers_begin(struct bsipipe_engine *e, int reuse);
void engine_buffers_counted(struct bsipipe_engine *e);
void engine_buffers_end(struct bsipipe_engine *e);
starpu_data_handle_t engine_buffer_bind(struct bsipipe_engine *e, starpu_data_handle_t *slot, int device, long earliest,
                                        enum starpu_data_access_mode mode);
/* A submitted use of a per-iteration buffer by the op at `slot` (this
 * iteration's, engine slot_of) of `device` (-1, LONG_MAX: unknown): its
 * last use unregisters it once its tasks end, or gives it back to its
 * device's pool for first writers that run after that slot. */
void engine_buffer_used(struct bsipipe_engine *e, starpu_data_handle_t h, int device, long slot);
/* Device d's op records of the last iteration, *n of them (the data of
 * bsipipe_engine_records, for the engine's own readers). */
static inline const bsipipe_engine_op_record_t *engine_op_records(const struct bsipipe_engine *e, int d, int *n)
{
    bsipipe_schedule_device_ops(e->sched, d, n);
    return e->rec[d];
}
/* All-or-nothing arrays: calloc of n (at least 1) elements into p. */
#define ALLOC(p, n) ((p) = calloc((size_t)(n) > 0 ? (size_t)(n) : 1, sizeof *(p)))
/* Each op's slot in its worker's plan order for this iteration (eager: SENDs
 * take none), engine_core.c. */
void engine_plan_slots(struct bsipipe_engine *e, int eager);
/* The floor's buffers, freed with the engine (engine_floor.c). */
void engine_floor_free(struct bsipipe_engine *e);
/* What an iteration is made of (engine.c), shared with the floor
 * (engine_floor.c): the sends' mode and slots for this iteration; the
 * overhead clock around submission; the dry run counting every buffer's
 * uses; one op of the plan built and submitted (or only checked). */
void engine_sends_begin(struct bsipipe_engine *e);
void engine_overhead_begin(struct bsipipe_engine *e);
void engine_overhead_end(struct bsipipe_engine *e, double t0, double t_sub, double t1);
int engine_count_uses(struct bsipipe_engine *e, int step);
int engine_submit_op(struct bsipipe_engine *e, int d, int i, int step, int dry_run);

/* ---- one op's task, as its op file inserts it (tasks/ops/) ----
 * The driver (engine.c) calls the op kind's insert function for each op of
 * the plan; it names the codelet and lists the buffers with their access
 * modes, side by side with the codelet that reads them (the buffer order is
 * the codelet's). engine_insert_finish (engine_core.c) then checks that
 * every buffer exists, and counts the uses (dry run) or submits the task. */
enum { ENGINE_MAX_BUFFERS = 512 };
typedef struct engine_insert {
    struct bsipipe_engine *e;
    op_args_t *a;               /* the op's arguments; a->op is the op */
    int d, i;                   /* device, index in its op list */
    long earliest;              /* first slot the task may run at (a RECV posted ahead runs early):
                                   a buffer's first writer binds one given back before it */
    int dry_run;                /* counting the iteration's buffer uses: nothing is submitted */
    int step;                   /* STEP: apply the update (0: a forward-backward pass keeps its slot) */
    struct starpu_codelet *cl;  /* set by the insert function; NULL: no task (an eager SEND) */
    unsigned flags;             /* ENGINE_TASK_* the insert function sets */
    int n;
    struct starpu_data_descr descr[ENGINE_MAX_BUFFERS];
} engine_insert_t;
/* Adds the buffer held in *slot with `mode`: a per-iteration buffer is bound
 * for this access (engine_buffer_bind: its first writer takes a handle from
 * the device's pool); a persistent one is added as it is. */
void engine_insert_buffer(engine_insert_t *t, starpu_data_handle_t *slot, enum starpu_data_access_mode mode);
/* Adds h read only, as it is (a received buffer or a producer's output). */
void engine_insert_read(engine_insert_t *t, starpu_data_handle_t h);
/* Checks, then counts (dry run) or submits the task t describes. */
int engine_insert_finish(engine_insert_t *t);
/* The handle of the piece's activation (F) or gradient (B) entering op a's
 * chunk: its receive buffer, or the local producer's output; NULL when the
 * producer is remote and no receive brings it (an inconsistent plan). */
starpu_data_handle_t engine_input_handle(struct bsipipe_engine *e, const op_args_t *a);
/* Tokens of subsequence `sub` (the partition's piece). */
int engine_piece_len(const struct bsipipe_engine *e, int sub);
/* The insert functions, one per op kind (tasks/ops/<op>.c); 0 or a
 * negative error with a detail. */
int engine_insert_forward(engine_insert_t *t);
int engine_insert_backward(engine_insert_t *t);
int engine_insert_wgrad(engine_insert_t *t);
/* SEND, RECV and SYNC: the transport's (tasks/transport/transport.h). What
 * a SEND sends: slice r (0 without TP) of its activation or gradient. */
starpu_data_handle_t engine_send_source(const struct bsipipe_engine *e, const bsipipe_op_t *op, int r);
/* A SEND task's buffer, its source read (T = 1), and its bytes counted. */
void engine_insert_send_source(engine_insert_t *t);
int engine_insert_step(engine_insert_t *t);
/* Chunk c's squared gradient norm on `device` (a task outside the plan,
 * tasks/ops/step.c): every STEP reads it. */
int engine_insert_norm(struct bsipipe_engine *e, int device, int c);
/* Whole-vector access from the host (engine_core.c): h's data written from
 * src (NULL: zeros), or copied out to dst; each waits for the tasks that
 * use h first. */
void engine_vector_write(starpu_data_handle_t h, const void *src, size_t bytes);
void engine_vector_read(starpu_data_handle_t h, void *dst, const void *data, size_t bytes);

/* Device kinds (tasks/engine_devices.c): sets conf's worker counts for the
 * options' device kind before starpu_init (cuda: -ENODEV "no CUDA device
 * found; run with --devices cpu" when there is none); after it lists the
 * workers (e->workerid, e->gpu) and starts cuBLAS and the nccl transport. */
int engine_devices_configure(struct bsipipe_engine *e, struct starpu_conf *conf);
/* Before starpu_init (engine_devices.c): FxT off unless asked, StarPU's
 * allocation cache on (STARPU_LIMIT_CPU_MEM); user settings win. */
void engine_starpu_env(void);
/* 0 when StarPU is not running in this process; else -EBUSY with a sentence
 * naming the problem (the application, or another engine, called starpu_init
 * first, so its workers and policy would run the plan instead of `policy`)
 * and the fix. bsipipe_engine_create calls it before anything else. */
int engine_starpu_check_not_running(const char *policy);
/* StarPU's last awake worker polls unless this turns it off (cpu_only: CPU
 * devices in one process; BSIPIPE_STARPU_POLL=1 keeps the poll); 0 restores
 * StarPU's behaviour. Returns 1 when the poll is off. engine_devices.c. */
int engine_starpu_poll_set(int cpu_only);
int engine_idle_spin_resolve(bsipipe_engine_t *e, int cpu_workers);
/* Runs init(arg) (starpu_init or starpu_mpi_init_conf), dropping StarPU's
 * FxT-compiled-in warning when FxT will not trace. Returns init's value. */
int engine_starpu_init_quiet(int (*init)(void *), void *arg);
int engine_devices_start(struct bsipipe_engine *e);
/* Before starpu_shutdown: cuBLAS handles, NCCL communicators. */
void engine_devices_stop(struct bsipipe_engine *e);
/* Floats of the stash of n_layers layers for a piece of len tokens on this
 * engine's devices: the CPU kernels' layout, or the CUDA kernels' in the
 * engine's precision (bf16 activations in bf16s: about half). */
long engine_stash_floats(const struct bsipipe_engine *e, int n_layers, int len);
/* Floats of the K/V of n_layers layers (bf16 in bf16s on CUDA: half); dK/dV
 * always n_layers * bsipipe_model_kv_size. */
long engine_kv_floats(const struct bsipipe_engine *e, int n_layers);

/* The name of a task of codelet cl in StarPU's traces: its model's symbol
 * (bsipipe_fwd ...), else the codelet's name. */
static inline const char *engine_task_name(const struct starpu_codelet *cl)
{
    return cl->model && cl->model->symbol ? cl->model->symbol : cl->name;
}

enum { ENGINE_PASS_TRAIN, ENGINE_PASS_FWD_BWD, ENGINE_PASS_EVAL };

/* One traced task of an op: which pass (iteration, eval) and which op. */
struct engine_job {
    unsigned long job_id;
    long iteration;
    int pass, device, index; /* pass: as bsipipe_engine.pass_kind */
};
/* 1 between bsipipe_trace_begin and bsipipe_trace_end (engine_trace.c). */
int engine_trace_recording(void);
/* Notes a task t of op (d, i): its job id in the op's record (primary: the
 * op's first task; tensor parallelism has one per rank), and every task's
 * in e->jobs while tracing. Right before starpu_task_submit: the job it
 * creates takes the task's tag settings then, and t may be gone after. */
void engine_job_note(struct bsipipe_engine *e, int d, int i, struct starpu_task *t, int primary);

extern struct starpu_codelet engine_cl_forward, engine_cl_forward_head, engine_cl_backward, engine_cl_sync,
    engine_cl_sync_peer, engine_cl_step, engine_cl_wgrad;
/* Performance models of F (F on the last chunk: _head), B, W, SEND, RECV
 * (engine_perfmodel.c; symbols bsipipe_fwd, bsipipe_fwd_head, ...). */
extern struct starpu_perfmodel engine_model_fwd, engine_model_fwd_head, engine_model_bwd, engine_model_wgrad,
    engine_model_send, engine_model_recv, engine_model_sync, engine_model_step, engine_model_norm,
    engine_model_mpi_send, engine_model_mpi_recv, engine_model_mpi_sync, engine_model_tp_seg, engine_model_tp_coll,
    engine_model_tp_step, engine_model_tp_norm; /* the floor's codelet has none: it is the floor */

/* Emulated device time (engine_emulate.c): holds the worker for the op's
 * cost-model duration. Returns 1 when the engine emulates (the caller then
 * skips its compute). */
int engine_emulate(struct bsipipe_engine *e, const op_args_t *a);
/* Holds the calling worker for `seconds` of emulated device time (a TP
 * segment's or collective's share of its op, engine_tp.c). */
void engine_emulate_hold(double seconds);
/* Emulated links (bsipipe_engine_options.emulate_links): setup checks the
 * options and copies the links (0, or a negative code with a detail); free
 * releases them; iteration_begin makes now the links' time 0; send and sync
 * hold the calling worker until the transfer (device a to b) or the SYNC of
 * replicas on a and b has arrived on the links, bytes each. No-ops without
 * links. */
int engine_emulate_setup(struct bsipipe_engine *e);
void engine_emulate_free(struct bsipipe_engine *e);
void engine_emulate_iteration_begin(struct bsipipe_engine *e);
void engine_emulate_send(struct bsipipe_engine *e, int a, int b, double bytes);
void engine_emulate_sync(struct bsipipe_engine *e, int a, int b, double bytes);

/* Offset of layer l (l = L: the head part) inside the replica that op a
 * works on: where its parameters and gradients start in the replica's
 * buffers. */
long engine_replica_offset(const struct bsipipe_engine *e, const op_args_t *a, int l);

/* Whole-model offset of the head part and of layer l. */
long engine_layer_offset(const struct bsipipe_engine *e, int l);

/* ---- Scale-out across StarPU-MPI ranks (engine_mpi.c, docs/scaleout.md) ----
 * Every rank plans the same schedule and walks the whole submission order;
 * it submits the tasks of its own devices, and each transfer or SYNC whose
 * two ends are on different ranks becomes StarPU-MPI isend/irecv calls with
 * tags derived from the op's identity. Without MPI these are no-ops. */

/* Maps the plan's devices onto the ranks (o.device_rank, else the hwloc
 * mapper with one node per rank) and sets rank, nranks, dev_rank, n_local.
 * Initialises MPI (MPI_THREAD_MULTIPLE) when nobody has. Before StarPU. */
int engine_mpi_setup(struct bsipipe_engine *e);
/* A setup step's outcome shared by every rank before anyone goes on (a rank
 * that failed keeps its detail, the others name it): so no rank waits in a
 * collective for one that has given up. rc unchanged without MPI. */
int engine_mpi_agree_setup(struct bsipipe_engine *e, int rc);
/* The same for any step: a rank whose rc < 0 keeps its detail, the others
 * get "engine: rank R <failed> (...); see its message". Every MPI wait runs
 * under the watchdog: a rank silent for its time is named, the job aborted. */
int engine_mpi_agree_named(struct bsipipe_engine *e, int rc, const char *failed);
/* In-place maximum / sum of n int64 over the ranks (a collective: also a
 * barrier); `what` names the step in a watchdog report. No-ops without MPI. */
int engine_mpi_max_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what);
int engine_mpi_sum_i64(struct bsipipe_engine *e, int64_t *v, int n, const char *what);
/* Fault injection for the tests: BSIPIPE_FAULT_STOP=RANK:POINT stops (SIGSTOP)
 * that rank at that point (start-up, checkpoint-part, checkpoint-commit, end). */
void engine_mpi_fault_point(struct bsipipe_engine *e, const char *point);
/* Starts StarPU (starpu_mpi_init_conf with MPI, else starpu_init). */
int engine_mpi_start(struct bsipipe_engine *e, struct starpu_conf *conf);
/* Stops StarPU(-MPI) and frees the MPI state. */
void engine_mpi_shutdown(struct bsipipe_engine *e);

/* Around an iteration: sizes its message bookkeeping and arms the watchdog
 * (the heartbeat thread runs for the engine's life); waits for every task
 * and message of every rank, disarms it and agrees on the outcome (the most
 * negative code of any rank). */
void engine_mpi_iteration_begin(struct bsipipe_engine *e);
int engine_mpi_iteration_end(struct bsipipe_engine *e, int rc);
/* Sums a vector over the ranks, in place (entries of remote devices are 0
 * on this rank, so the result is exact). */
int engine_mpi_sum(struct bsipipe_engine *e, double *v, int n);
/* The most negative of every rank's rc (so all ranks take the same path). */
int engine_mpi_agree(struct bsipipe_engine *e, int rc);
/* Adds this rank's cross-rank bytes sent in the last iteration. */
void engine_mpi_local_traffic(struct bsipipe_engine *e, double act[2], double sync[2]);
void engine_mpi_free(struct bsipipe_engine *e);
int engine_mpi_sum_floats(struct bsipipe_engine *e, float *v, long n);
int engine_mpi_max(struct bsipipe_engine *e, double *v, int n);

/* ---- Tensor parallelism (engine_tp.c) ---- */
/* Before StarPU: the rules D_t must follow (heads, FFN, vocabulary, every
 * piece; CPU devices; no split backward):
 * BSIPIPE_ECONFIG or -ENOTSUP with a sentence naming the fix. */
int engine_tp_check(struct bsipipe_engine *e);
/* The model's part of it, before planning (the planner's own check names
 * fewer rules): D_t divides the heads, the FFN width and the vocabulary. */
int engine_tp_check_dims(const bsipipe_model_dims_t *dims, int tp);
/* After starpu_init: the rank workers (e->workerid[d] is rank 0's). */
int engine_tp_workers(struct bsipipe_engine *e, const int *ids);
/* The shard replicas (initial parameters cut from the seed's model), the TP
 * ranks' communication buffers and the per-iteration buffer sizes. */
int engine_tp_buffers(struct bsipipe_engine *e, const float *init);
/* Per-rank copies of every op's arguments (after create_args). */
int engine_tp_args(struct bsipipe_engine *e);
/* Op i of device d as the TP group's tasks (segments on each rank's worker,
 * collectives as tasks over every rank's buffers); dry_run: count uses. */
int engine_tp_submit_op(struct bsipipe_engine *e, int d, int i, int step, int dry_run);
/* Across MPI ranks (engine_mpi.c): the slot task of op i of device d for
 * TP rank r (on r's worker, in its plan order; cl_arg = the rank's op
 * args), replica x's gradient shard of rank r (n: its floats), and chunk
 * c's squared gradient norm over its T shards into `out` (one double), on
 * the chunk's process. */
int engine_tp_submit_rank(struct bsipipe_engine *e, int d, int i, int r, struct starpu_codelet *cl,
                          const struct starpu_data_descr *descr, int n);
starpu_data_handle_t engine_tp_rep_grads(struct bsipipe_engine *e, int x, int r, long *n);
int engine_tp_submit_norm(struct bsipipe_engine *e, int c, starpu_data_handle_t out);
/* Before the STEPs: the all-reduce of every replica's replicated gradients. */
int engine_tp_submit_reduce(struct bsipipe_engine *e, int dry_run);
/* Around an iteration: per-rank records reset / merged into e->rec. */
void engine_tp_iteration_begin(struct bsipipe_engine *e);
void engine_tp_iteration_end(struct bsipipe_engine *e);
/* Device d's busy time in the last iteration: a rank's mean µs in its F/B
 * segments and in every collective of the group (each rank waits for it). */
double engine_tp_busy_us(const struct bsipipe_engine *e, int d);
/* Whole-model parameters or gradients gathered from this process's shards
 * (other ranks' entries zero: the caller sums over the ranks). */
int engine_tp_gather(struct bsipipe_engine *e, float *out, int grads);
/* Checkpoints: vector `which` of pipe `pipe`'s replicas as the whole-model
 * vector (bsipipe_model_params floats) gathered from the ranks' shards, and
 * the reverse (every rank's shard cut from full; shard: scratch of
 * bsipipe_tp_model_params floats, so that nothing can fail for memory once
 * a load has started writing). Call between iterations. */
enum { ENGINE_TP_PARAMS, ENGINE_TP_GRADS, ENGINE_TP_M, ENGINE_TP_V };
int engine_tp_full(struct bsipipe_engine *e, int pipe, int which, float *out);

/* Checkpoints (engine_checkpoint.c, checkpoint_values.c). Params, m and v of
 * pipe `pipe` as whole-model vectors (3 P floats) gathered from this
 * process's tensor-parallel shards. */
int engine_ckpt_tp_full_pipe(struct bsipipe_engine *e, int pipe, float *full, long P);
/* Every local replica's params and Adam moments are finite (v >= 0): 0, or
 * -EDOM with `where` naming the first bad value by tensor. */
int engine_ckpt_state_finite(struct bsipipe_engine *e, char *where, size_t len);
/* The same for replica i as read from a checkpoint (struct ckpt_load of
 * checkpoint_format.h): 0 or BSIPIPE_EFORMAT with a detail. */
struct ckpt_load;
int engine_ckpt_loaded_finite(const struct bsipipe_engine *e, const struct ckpt_load *l, int i);
/* Removes DIR's half-made kept directories (.iter_N.<pid>.tmp) of processes
 * that no longer exist (checkpoint_keep.c; called under the lock). */
void engine_ckpt_keep_remove_stale(const char *dir);
int engine_tp_set_full(struct bsipipe_engine *e, int pipe, int which, const float *full, float *shard);
/* The op args that device d's rank-0 worker waits for at `slot` (watchdog),
 * or NULL; and op i's rank-0 arguments. */
const op_args_t *engine_tp_slot_op(struct bsipipe_engine *e, int d, long slot);
const op_args_t *engine_tp_op_args(struct bsipipe_engine *e, int d, int i);
void engine_tp_free(struct bsipipe_engine *e);

extern struct starpu_codelet engine_cl_norm;

#endif
