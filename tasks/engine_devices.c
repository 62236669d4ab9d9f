/* engine_devices.c: which StarPU workers run the plan's devices — one CPU
 * worker each, or one CUDA worker each (several per GPU through
 * STARPU_NWORKER_PER_CUDA) — and what CUDA workers need around them: cuBLAS
 * handles and, with the nccl transport, NCCL communicators. Across MPI ranks
 * only this rank's devices (e->n_local of them) get workers. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT: the cores this process may use */
#include "tasks/engine_internal.h"
#include "base/bsipipe_error.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef BSIPIPE_HAVE_CUDA
#include <starpu_cublas_v2.h>
#include "kernels/cuda/bsipipe_cuda_kernels.h"
#endif
#ifdef BSIPIPE_HAVE_NCCL
#include "tasks/bsipipe_transport_nccl.h"
#include "tasks/bsipipe_tp_nccl.h"
#endif

int bsipipe_engine_devices_parse(const char *name, bsipipe_engine_devices_t *out)
{
    if (name && strcmp(name, "cpu") == 0)
        *out = BSIPIPE_DEVICES_CPU;
    else if (name && strcmp(name, "cuda") == 0)
        *out = BSIPIPE_DEVICES_CUDA;
    else
        return bsipipe_error_set(-EINVAL, "unknown device kind '%s' (cpu or cuda)", name ? name : "(null)");
    return 0;
}

/* o.precision's names, in the order of bsipipe_cuda_gemm_mode_t */
static const char *const precisions[] = {"fp32", "tf32", "bf16", "bf16s"};

static int precision_index(const char *name)
{
    for (int i = 0; i < (int)(sizeof precisions / sizeof precisions[0]); i++)
        if (strcmp(name ? name : "fp32", precisions[i]) == 0)
            return i;
    return -1;
}

int bsipipe_engine_precision_check(const char *name)
{
    if (precision_index(name) < 0)
        return bsipipe_error_set(-EINVAL, "unknown precision '%s' (fp32, tf32, bf16 or bf16s)", name);
    return 0;
}

static int wants_nccl(const struct bsipipe_engine *e)
{
    return e->o.transport && strcmp(e->o.transport, "nccl") == 0;
}

/* StarPU's environment defaults for an engine, set before starpu_init unless
 * the user's environment sets them:
 * - STARPU_FXT_TRACE=0: a StarPU built with FxT traces every run into /tmp by
 *   default; the engine traces only when asked (bsipipe_trace_begin sets it
 *   to 1, as does the user's environment).
 * - STARPU_LIMIT_CPU_MEM (MB, the machine's memory): StarPU 1.3 frees the
 *   main-memory buffers it allocated itself as soon as they are unregistered,
 *   unless a CPU memory limit is set, which turns on its allocation cache
 *   (src/datawizard/memalloc.c): with it, the per-iteration buffers
 *   (allocated at their first write, unregistered after their last use)
 *   come back from the cache instead of malloc, page faults and free.
 *   BSIPIPE_ALLOC_CACHE=0 leaves StarPU's default. */
/* ---- StarPU's last awake worker ----------------------------------------------------------
 * With blocking drivers, StarPU 1.3 never lets the last awake worker of a
 * context sleep: when every other worker sleeps, an idle one polls
 * (src/drivers/driver_common/driver_common.c: _starpu_get_worker_task calls
 * _starpu_sched_ctx_last_worker_awake and, if it is the last, spins in
 * _starpu_exponential_backoff, sched_yield in a loop). On a machine with
 * fewer cores than workers that poller takes a core from the worker with
 * work: perf put 24 % of all CPU samples of an emulated run in that loop,
 * and runs of the same plan took 2 ms or 200 ms depending on whether the
 * poller shared a core with the worker that had work. With CPU workers in
 * one process nothing needs the poll (a worker does not block while data
 * requests are pending, _starpu_worker_can_block; a push wakes its worker),
 * so the engine lets every idle worker sleep: StarPU is built with
 * scripts/starpu-patches/0005-no-last-worker-poll.patch, which reads
 * STARPU_NO_LAST_WORKER_POLL=1 each time a worker idles; the engine sets it
 * for CPU devices in one process and clears it otherwise (CUDA workers and
 * StarPU-MPI's progress need the poll). BSIPIPE_STARPU_POLL=1 keeps
 * StarPU's poll. Returns 1 when the poll is off.
 *
 * The floor benchmark switches it while the workers run and read it
 * (getenv). Removing the variable shifts glibc's environment array under a
 * reading worker, which crashed a worker inside getenv; so the variable is
 * only ever overwritten, "1" or "0": glibc then swaps one pointer in place
 * and never frees the old string. */
int engine_starpu_poll_set(int cpu_only)
{
    const char *env = getenv("BSIPIPE_STARPU_POLL");
    int off = cpu_only && !(env && atoi(env) == 1);
    setenv("STARPU_NO_LAST_WORKER_POLL", off ? "1" : "0", 1);
    return off;
}

/* ---- idle spin ---------------------------------------------------------------------------
 * A worker that sleeps when its next op is not ready pays a thread wake-up
 * (futex, then the OS scheduler: 50-120 µs on this VM) at every hand-off
 * from another device, about one per op at w = 2 on real compute. StarPU's
 * non-blocking drivers would spin forever, which only pays when every
 * worker has a core; the policy's bounded spin gets the same hand-off
 * latency without a second StarPU build and falls back to sleeping after
 * the budget, so a worker with a long wait gives its core back. Auto: on
 * when this node's CPU workers (all local ranks') fit the cores this
 * process may run on, off when oversubscribed (emulating many devices on
 * few cores, where spinning takes time from the worker that has work).
 * Sets e->idle_spin_us; -EINVAL on a bad BSIPIPE_IDLE_SPIN_US. */
int engine_idle_spin_resolve(bsipipe_engine_t *e, int cpu_workers)
{
    enum { AUTO_SPIN_US = 1000, MAX_SPIN_US = 1000000 };
    int us = e->o.idle_spin_us;
    const char *env = getenv("BSIPIPE_IDLE_SPIN_US");
    if (us == 0 && env && env[0]) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v > MAX_SPIN_US)
            return bsipipe_error_set(-EINVAL,
                                     "BSIPIPE_IDLE_SPIN_US='%s' is not a number of microseconds in 0..%d "
                                     "(0: workers sleep at once; unset it for the automatic choice)",
                                     env, MAX_SPIN_US);
        us = v > 0 ? (int)v : -1;
    }
    if (us == 0) {
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int ranks = local && atoi(local) > 0 ? atoi(local) : 1;
        cpu_set_t set;
        int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        us = cpu_workers > 0 && (long)cpu_workers * ranks <= cores ? AUTO_SPIN_US : -1;
    }
    if (us > MAX_SPIN_US)
        us = MAX_SPIN_US;
    e->idle_spin_us = us > 0 ? us : 0;
    return 0;
}

/* ---- StarPU already running -------------------------------------------------------------
 * The engine owns its StarPU session: everything that makes a plan run as
 * planned is decided at starpu_init (one worker per device, the policy, the
 * environment above, STARPU_NWORKER_PER_CUDA, StarPU-MPI). When the
 * application has initialised StarPU already, starpu_init only counts one
 * more user and ignores the configuration, so the engine used to run under
 * the application's policy and workers without a word. Running the bsipipe
 * policy in a scheduling context of its own (starpu_sched_ctx_create) would
 * still leave the device count, worker binding, the environment and the
 * MPI start to the application, and the application's context would keep
 * pushing its own tasks onto the devices' workers, which breaks the plan's
 * order on a device; so the engine refuses, naming the fix. */
int engine_starpu_check_not_running(const char *policy)
{
    if (!starpu_is_initialized())
        return 0;
    struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0); /* the global context */
    const char *running = p && p->policy_name ? p->policy_name : "unknown";
    return bsipipe_error_set(-EBUSY,
                             "engine: StarPU is already initialised in this process (the application called "
                             "starpu_init before bsipipe_engine_create, or another engine is alive), so the plan "
                             "would run on its %u workers under its policy '%s' instead of one worker per device "
                             "under policy '%s'; create the engine before starpu_init, or call starpu_shutdown "
                             "first: the engine starts and shuts down its own StarPU session (one engine per "
                             "process at a time)",
                             starpu_worker_get_count(), running, policy ? policy : "bsipipe");
}

static int engine_set_limit; /* STARPU_LIMIT_CPU_MEM is ours: its "higher than available" note is noise */

void engine_starpu_env(void)
{
    setenv("STARPU_FXT_TRACE", "0", 0);
    const char *cache = getenv("BSIPIPE_ALLOC_CACHE"); /* 0: StarPU's default (free at unregistration) */
    if (!getenv("STARPU_LIMIT_CPU_MEM") && !(cache && atoi(cache) == 0)) {
        engine_set_limit = 1;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) {
            char mb[32];
            snprintf(mb, sizeof mb, "%ld", (long)((double)pages * (double)page / 1048576.0));
            setenv("STARPU_LIMIT_CPU_MEM", mb, 0);
        }
    }
}

/* Drops StarPU's "configured with --with-fxt, which slows down a bit" line,
 * which this build prints at every starpu_init, when FxT will not trace
 * (STARPU_FXT_TRACE=0), and its note that our memory limit exceeds what hwloc
 * reports (it then uses hwloc's figure): stderr goes to a temporary file
 * during init, and every other line is written back. */
int engine_starpu_init_quiet(int (*init)(void *), void *arg)
{
    const char *fxt = getenv("STARPU_FXT_TRACE");
    int quiet_fxt = fxt && atoi(fxt) == 0;
    if (!quiet_fxt && !engine_set_limit)
        return init(arg);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(2) : -1;
    if (saved < 0 || dup2(fileno(tmp), 2) < 0) {
        if (saved >= 0)
            close(saved);
        if (tmp)
            fclose(tmp);
        return init(arg);
    }
    int rc = init(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    char line[1024];
    while (fgets(line, sizeof line, tmp))
        if (!(quiet_fxt && strstr(line, "was configured with --with-fxt, which slows down")) &&
            !(engine_set_limit && strstr(line, "] The requested limit ")))
            fputs(line, stderr);
    fclose(tmp);
    return rc;
}

int engine_devices_configure(struct bsipipe_engine *e, struct starpu_conf *conf)
{
    const char *tr = e->o.transport;
    if (tr && strcmp(tr, "local") != 0 && strcmp(tr, "nccl") != 0)
        return bsipipe_error_set(-EINVAL, "engine: unknown transport '%s' (local or nccl)", tr);
    if (wants_nccl(e) && e->o.devices != BSIPIPE_DEVICES_CUDA)
        return bsipipe_error_set(-EINVAL, "engine: the nccl transport needs CUDA devices (--devices cuda)");
    int rc = bsipipe_engine_precision_check(e->o.precision);
    if (rc < 0)
        return rc;
    if (precision_index(e->o.precision) != 0 && e->o.devices != BSIPIPE_DEVICES_CUDA)
        return bsipipe_error_set(-EINVAL, "engine: precision %s needs CUDA devices (--devices cuda); the CPU "
                                          "kernels compute in fp32",
                                 e->o.precision);
    conf->nopencl = 0;
    if (e->o.devices == BSIPIPE_DEVICES_CPU) {
        conf->ncpus = e->n_local * e->T; /* a worker per TP rank of each device */
        conf->ncuda = 0;
        return 0;
    }
    /* Across ranks StarPU-MPI moves the data (through host memory); NCCL
     * communicators here pair the GPUs of one process only. */
    if (e->mpi && wants_nccl(e))
        return bsipipe_error_set(-ENOTSUP, "engine: the nccl transport pairs the GPUs of one process; across MPI "
                                           "ranks StarPU-MPI moves the data: drop --transport nccl");
    if (e->o.devices != BSIPIPE_DEVICES_CUDA)
        return bsipipe_error_set(-EINVAL, "engine: unknown device kind %d", (int)e->o.devices);
#ifndef BSIPIPE_HAVE_CUDA
    return bsipipe_error_set(-ENODEV, "no CUDA device found; run with --devices cpu (libbsipipe was built "
                                      "without CUDA)");
#else
#ifndef BSIPIPE_HAVE_NCCL
    if (wants_nccl(e))
        return bsipipe_error_set(-ENOTSUP, "engine: libbsipipe was built without NCCL; use --transport local");
#endif
    int found = bsipipe_cuda_device_count();
    if (found <= 0)
        return bsipipe_error_set(-ENODEV, "no CUDA device found; run with --devices cpu");
    if (e->o.gpus > found)
        return bsipipe_error_set(-ENODEV, "engine: %d GPUs asked for, %d CUDA devices found", e->o.gpus, found);
    /* this rank's devices (all of them in one process) over its GPUs */
    int gpus = e->o.gpus > 0 ? e->o.gpus : found;
    /* With the nccl transport a TP group spreads over T GPUs, one rank on
     * each (engine_devices_start): what NCCL's collectives need, as NCCL
     * refuses two ranks on one GPU. */
    e->tp_spread = wants_nccl(e) && e->T > 1;
    if (e->tp_spread && found < e->T)
        return bsipipe_error_set(-EINVAL, "engine: --tp %d with --transport nccl puts a device's %d tensor-parallel "
                                 "ranks on %d different GPUs, and %d %s found: use --transport local (the group "
                                 "on one GPU, collectives as device copies) or --tp %d or less",
                                 e->T, e->T, e->T, found, found == 1 ? "is" : "are", found);
    if (e->tp_spread && gpus < e->T)
        return bsipipe_error_set(-EINVAL, "engine: --tp %d with --transport nccl puts a device's %d tensor-parallel "
                                 "ranks on %d different GPUs, but --gpus %d: use --gpus %d or more (%d found)",
                                 e->T, e->T, e->T, gpus, e->T, found);
    int slots = e->tp_spread ? e->n_local * e->T : e->n_local; /* what is spread over the GPUs */
    if (gpus > slots)
        gpus = slots;
    int per_gpu = (slots + gpus - 1) / gpus;
    /* Across ranks, StarPU-MPI sends from and receives into host memory, and
     * a GPU's transfers are driven by its workers' threads: one extra worker
     * per GPU, never given a plan op, keeps them moving while every device of
     * that GPU waits inside a SEND's rendezvous. */
    e->cuda_per_gpu = per_gpu;
    e->cuda_gpus = gpus;
    e->cuda_spare = e->mpi ? 1 : 0;
    /* With tensor parallelism a device is its D_t ranks' workers: all on
     * the device's GPU (the group's collectives are copies and sums in that
     * GPU's memory), or spread (above), one worker per rank slot. */
    int workers = (e->tp_spread ? per_gpu : per_gpu * e->T) + e->cuda_spare;
    if (workers >= STARPU_NMAXWORKERS) /* StarPU would abort in starpu_init */
        return bsipipe_error_set(-EINVAL, "engine: %d workers on one GPU (%d %s%s%s) is more than StarPU's %d "
                                 "workers: use more GPUs (--gpus), a smaller --tp or a shorter pipeline",
                                 workers, per_gpu, e->tp_spread ? "tensor-parallel ranks" : "devices of the plan",
                                 e->tp_spread || e->T == 1 ? "" : " times --tp", e->cuda_spare ? ", plus one" : "",
                                 STARPU_NMAXWORKERS - 1);
    char n[16];
    snprintf(n, sizeof n, "%d", workers);
    setenv("STARPU_NWORKER_PER_CUDA", n, 1);
    /* A SEND waits in the rendezvous inside its codelet: each CUDA worker
     * needs its own driver thread, or it would also stall the receiver that
     * the same thread drives. A thread per worker is also what lets several
     * workers share a GPU with blocking drivers (scripts/starpu-patches/
     * 0004; an unpatched StarPU starts one worker per GPU, which the worker
     * count check after starpu_init reports). */
    setenv("STARPU_CUDA_THREAD_PER_WORKER", "1", 1);
    unsetenv("STARPU_CUDA_THREAD_PER_DEV"); /* StarPU refuses both */
    conf->ncpus = 0;
    conf->ncuda = gpus;
    return 0;
#endif
}

#ifdef BSIPIPE_HAVE_NCCL
/* With TP spread over GPUs: one communicator per local device over its
 * ranks' GPUs (the group's collectives). The pipeline's transfers and SYNC
 * then move each rank's share with the local transport's copies (GPU to
 * GPU through CUDA's unified addresses), as without NCCL. */
static int start_tp_nccl(struct bsipipe_engine *e, const int *tp_ids)
{
    int T = e->T, *gpu = malloc(sizeof(int) * (size_t)e->W * (size_t)T);
    if (!gpu)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0, j = 0; d < e->W; d++) {
        for (int r = 0; r < T; r++)
            gpu[d * T + r] = engine_local(e, d) ? starpu_worker_get_devid(tp_ids[j * T + r]) : -1;
        j += engine_local(e, d);
    }
    int rc = tp_nccl_create(e->W, T, gpu, &e->tp_nccl);
    free(gpu);
    return rc;
}

/* One communicator per pair of devices that exchange data on two GPUs. */
static int start_nccl(struct bsipipe_engine *e)
{
    long n_pairs = 0;
    for (int d = 0; d < e->W; d++) {
        int n;
        bsipipe_schedule_device_ops(e->sched, d, &n);
        n_pairs += n;
    }
    int *pairs = malloc(sizeof(int) * 2 * (size_t)(n_pairs > 0 ? n_pairs : 1)), np = 0;
    if (!pairs)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    for (int d = 0; d < e->W; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(e->sched, d, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].peer >= 0 && (ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_RECV ||
                                     ops[i].kind == BSIPIPE_OP_SYNC)) {
                pairs[2 * np] = d;
                pairs[2 * np + 1] = ops[i].peer;
                np++;
            }
    }
    int rc = transport_nccl_create(e->W, e->gpu, np, pairs, &e->nccl);
    free(pairs);
    return rc;
}
#endif

int engine_devices_start(struct bsipipe_engine *e)
{
    if (!(e->workerid = calloc((size_t)e->W, sizeof *e->workerid)))
        return bsipipe_error_set(-ENOMEM, "out of memory");
    if (e->o.devices == BSIPIPE_DEVICES_CPU) {
        int n = e->n_local * e->T, *ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
        if (!ids)
            return bsipipe_error_set(-ENOMEM, "out of memory");
        if ((int)starpu_cpu_worker_get_count() != n) {
            free(ids);
            return bsipipe_error_set(-EINVAL, "engine: the plan has %d devices here but StarPU started %d CPU "
                                     "workers (unset STARPU_NCPU, or build StarPU with --enable-maxcpus >= %d)",
                                     n, (int)starpu_cpu_worker_get_count(), n);
        }
        if (starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, (unsigned)n) != (unsigned)n) {
            free(ids);
            return bsipipe_error_set(-EIO, "engine: cannot list StarPU's CPU workers");
        }
        /* This rank's devices, in order, get the workers in order (the
         * others' entries stay 0 and are never used). */
        for (int d = 0, j = 0; d < e->W; d++)
            if (engine_local(e, d)) {
                e->workerid[d] = ids[j];
                j += e->T;
            }
        int rc = e->T > 1 ? engine_tp_workers(e, ids) : 0; /* rank r of device d: ids[d * T + r] */
        free(ids);
        return rc;
    }
#ifndef BSIPIPE_HAVE_CUDA
    return bsipipe_error_set(-ENODEV, "no CUDA device found; run with --devices cpu");
#else
    /* the kernels' matrix-product mode is process-wide: set before any task runs */
    if (bsipipe_cuda_set_gemm_mode((bsipipe_cuda_gemm_mode_t)precision_index(e->o.precision)) < 0)
        return bsipipe_error_set(-EINVAL, "engine: the CUDA kernels refuse precision %s", e->o.precision);
    int got = (int)starpu_cuda_worker_get_count(), T = e->T;
    int per_gpu = (e->tp_spread ? e->cuda_per_gpu : e->cuda_per_gpu * T) + e->cuda_spare;
    int gpus = e->tp_spread ? e->cuda_gpus : (e->n_local + e->cuda_per_gpu - 1) / e->cuda_per_gpu;
    int need = e->tp_spread ? gpus * per_gpu : e->n_local * T + gpus * e->cuda_spare;
    if (got < need)
        return bsipipe_error_set(-ENODEV, "engine: the plan has %d devices here (%d CUDA workers with the "
                                 "tensor-parallel ranks and the idle ones) but StarPU started %d CUDA workers "
                                 "(STARPU_NCUDA, STARPU_WORKERS_CUDAID, or a StarPU with blocking drivers but "
                                 "without scripts/starpu-patches/0004 can lower the count; docs/cuda.md)",
                                 e->n_local, need, got);
    int *ids = calloc((size_t)got, sizeof *ids), *tp_ids = calloc((size_t)(e->n_local * T + 1), sizeof *tp_ids);
    if (!ids || !tp_ids || !(e->gpu = calloc((size_t)e->W, sizeof *e->gpu))) {
        free(ids);
        free(tp_ids);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    starpu_cublas_init(); /* from here on, engine_devices_stop shuts it down */
    /* StarPU lists a GPU's workers together: consecutive devices (pipeline
     * neighbours) share a GPU. This rank's devices take the first
     * cuda_per_gpu * T workers of each GPU in order, T in a row per device
     * (the spare ones stay idle); the others' entries stay 0 (worker) and
     * -1 (GPU), never used. */
    if (starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, ids, (unsigned)got) != (unsigned)got) {
        free(ids);
        free(tp_ids);
        return bsipipe_error_set(-EIO, "engine: cannot list StarPU's CUDA workers");
    }
    for (int d = 0, j = 0; d < e->W; d++) {
        e->gpu[d] = -1;
        if (!engine_local(e, d))
            continue;
        for (int r = 0; r < T; r++) {
            if (e->tp_spread) {
                /* rank slot s = j * T + r on GPU s % gpus: a group's T
                 * ranks on T consecutive GPUs (mod gpus), all different */
                int s = j * T + r;
                tp_ids[s] = ids[(s % gpus) * per_gpu + s / gpus];
            } else {
                /* device j: slot j % cuda_per_gpu of GPU j / cuda_per_gpu, its T ranks' workers in a row */
                tp_ids[j * T + r] = ids[(j / e->cuda_per_gpu) * per_gpu + (j % e->cuda_per_gpu) * T + r];
            }
        }
        e->workerid[d] = tp_ids[j * T];
        e->gpu[d] = starpu_worker_get_devid(tp_ids[j * T]); /* rank 0's */
        j++;
    }
    free(ids);
    int rc = T > 1 ? engine_tp_workers(e, tp_ids) : 0; /* rank r of local device j: tp_ids[j * T + r] */
#ifdef BSIPIPE_HAVE_NCCL
    if (rc == 0 && e->tp_spread)
        rc = start_tp_nccl(e, tp_ids);
    else if (rc == 0 && wants_nccl(e))
        rc = start_nccl(e);
#endif
    free(tp_ids);
    return rc;
#endif
}

void engine_devices_stop(struct bsipipe_engine *e)
{
#ifdef BSIPIPE_HAVE_NCCL
    transport_nccl_destroy(e->nccl);
    e->nccl = NULL;
    tp_nccl_destroy(e->tp_nccl);
    e->tp_nccl = NULL;
#endif
#ifdef BSIPIPE_HAVE_CUDA
    if (e->gpu)
        starpu_cublas_shutdown();
#endif
    free(e->gpu);
    e->gpu = NULL;
}

#ifdef BSIPIPE_HAVE_CUDA
/* The CUDA kernels' product mode of this engine's devices, -1 on CPU devices. */
static int cuda_mode(const struct bsipipe_engine *e)
{
    return e->o.devices == BSIPIPE_DEVICES_CUDA ? precision_index(e->o.precision) : -1;
}
#endif

long engine_stash_floats(const struct bsipipe_engine *e, int n_layers, int len)
{
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda_mode(e) >= 0)
        return n_layers * bsipipe_cuda_stash_size(&e->dims, len, (bsipipe_cuda_gemm_mode_t)cuda_mode(e));
#endif
    return n_layers * bsipipe_model_stash_size(&e->dims, len);
}

long engine_kv_floats(const struct bsipipe_engine *e, int n_layers)
{
#ifdef BSIPIPE_HAVE_CUDA
    if (cuda_mode(e) >= 0)
        return n_layers * bsipipe_cuda_kv_size(&e->dims, (bsipipe_cuda_gemm_mode_t)cuda_mode(e));
#endif
    return n_layers * bsipipe_model_kv_size(&e->dims);
}
