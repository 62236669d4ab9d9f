/* apps/train_memory.c: bsipipe-train's memory admission (train_memory.h):
 * the plan's per-device memory and what grows with the model besides it,
 * against the machine's (or each GPU's) budget, before anything is
 * allocated. docs/memory.md. */
#include "apps/train_memory.h"
#include "graph/bsipipe_sim.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/sysinfo.h>

/* Memory this process may still use, in bytes: MemAvailable of
 * /proc/meminfo (sysinfo's free + buffer memory where it is missing),
 * bounded by a cgroup v2 limit (memory.max - memory.current). *what names
 * the source. 0 when unknown. */
static double available_memory(const char **what)
{
    double avail = 0;
    *what = "MemAvailable in /proc/meminfo";
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            avail = (double)kb * 1024;
    }
    if (f)
        fclose(f);
    struct sysinfo si;
    if (avail <= 0 && sysinfo(&si) == 0) {
        avail = ((double)si.freeram + (double)si.bufferram) * si.mem_unit;
        *what = "free memory (sysinfo)";
    }
    unsigned long long max = 0, cur = 0;
    FILE *m = fopen("/sys/fs/cgroup/memory.max", "r"), *c = fopen("/sys/fs/cgroup/memory.current", "r");
    if (m && c && fscanf(m, "%llu", &max) == 1 && fscanf(c, "%llu", &cur) == 1 && max > cur &&
        (avail <= 0 || (double)(max - cur) < avail)) {
        avail = (double)(max - cur);
        *what = "the cgroup's memory.max";
    }
    if (m)
        fclose(m);
    if (c)
        fclose(c);
    return avail;
}

/* Rank 0 of an MPI job (read from the launcher: the engine does not exist
 * yet), or a single process. */
static int rank0(void)
{
    const char *rank = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
    return !rank || atoi(rank) == 0;
}

/* Totals of the (total, params, activations) triples picks[from..to). */
static void sum_picks(const double *pick, int from, int to, double *need, double *params, double *acts)
{
    *need = *params = *acts = 0;
    for (int j = from; j < to; j++) {
        *need += pick[3 * j];
        *params += pick[3 * j + 1];
        *acts += pick[3 * j + 2];
    }
}

/* What a process holds besides the plan's per-device memory (host runs):
 * the runtime (StarPU, its workers, OpenBLAS, hwloc, MPI: 260 MiB resident
 * on a tiny model here, so 320 MiB), one whole-model float vector
 * (initialisation, the parameters' digest, the divergence report), and a
 * StarPU scratch buffer per device worker, the larger of a chunk backward's
 * work and the head's, which holds a piece's logits: vocabulary-sized. */
enum { RUNTIME_BYTES = 320 << 20 };
/* A GPU's share outside the plan besides its workers' scratch: cuBLAS's
 * workspaces and StarPU's allocation slack. An estimate, not yet measured on
 * a GPU (docs/cuda.md). */
enum { CUDA_RESERVE_BYTES = 256 << 20 };

static double scratch_bytes(const bsipipe_model_dims_t *dims, const bsipipe_schedule_t *s)
{
    const int *starts = bsipipe_schedule_sub_starts(s);
    int k = bsipipe_schedule_config(s)->k;
    long most = 0;
    for (int i = 0; i < k; i++) {
        int len = starts ? starts[i + 1] - starts[i] : dims->seq_len / k;
        long need = bsipipe_model_work_size(dims, len) + (long)len * dims->hidden;
        if (bsipipe_model_head_work_size(dims, len) > need)
            need = bsipipe_model_head_work_size(dims, len);
        if (need > most)
            most = need;
    }
    return 4.0 * (double)most;
}

int train_memory_admit(const bsipipe_model_dims_t *dims, const bsipipe_parallel_config_t *pc,
                       const bsipipe_schedule_t *plan, int nranks, double limit, bsipipe_engine_devices_t devices,
                       int gpus_asked, double act_scale, int tp_spread)
{
    bsipipe_schedule_t *s = NULL;
    bsipipe_sim_result_t *r = NULL;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    /* a --plan's schedule, or the preset of pc */
    if ((plan ? bsipipe_schedule_copy(plan, &s) : bsipipe_schedule_create(pc, dims, &s)) < 0 ||
        bsipipe_simulate(s, &unit, &r) < 0) {
        bsipipe_schedule_destroy(s);
        return 0;
    }
    int n = r->n_devices, here = nranks > 1 ? (n + nranks - 1) / nranks : n;
    double scratch = scratch_bytes(dims, s);
    double *dev = malloc(sizeof(double) * (size_t)n), *pick = malloc(sizeof(double) * 3 * (size_t)n);
    if (!dev || !pick) {
        free(dev);
        free(pick);
        bsipipe_sim_result_destroy(r);
        bsipipe_schedule_destroy(s);
        return 0;
    }
    /* The planner's memory is one TP rank's; on CUDA devices a device's D_t
     * ranks share its GPU (engine_devices.c), which holds them all, unless
     * the nccl transport spreads them over D_t GPUs (tp_spread). */
    double ranks_per_gpu = devices == BSIPIPE_DEVICES_CUDA && pc->tp > 1 && !tp_spread ? pc->tp : 1;
    for (int d = 0; d < n; d++)
        dev[d] = ranks_per_gpu * (r->device[d].param_bytes + act_scale * r->device[d].peak_act_bytes);
    /* This process's devices: all of them, or under --mpi (mapping not known
     * yet) the `here` largest; pick[j] = (total, params, activations). */
    for (int j = 0; j < here; j++) {
        int best = 0;
        for (int d = 1; d < n; d++)
            if (dev[d] > dev[best]) best = d;
        pick[3 * j] = dev[best];
        pick[3 * j + 1] = ranks_per_gpu * r->device[best].param_bytes;
        pick[3 * j + 2] = ranks_per_gpu * act_scale * r->device[best].peak_act_bytes;
        dev[best] = -1;
    }
    free(dev);
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    const double gib = 1024.0 * 1024 * 1024;
    int refused = 0;
    if (devices == BSIPIPE_DEVICES_CUDA) {
        /* The engine puts ceil(here/gpus) consecutive devices on each GPU
         * (engine_devices.c); each GPU against its free memory. */
        int found = bsipipe_cuda_device_count();
        int gpus = gpus_asked > 0 && gpus_asked <= found ? gpus_asked : found;
        /* spread: rank slot s = j * D_t + r on GPU s % gpus */
        int slots = tp_spread ? here * pc->tp : here;
        if (gpus > slots) gpus = slots;
        int per_gpu = gpus > 0 ? (slots + gpus - 1) / gpus : 0;
        for (int g = 0; g < gpus && !refused; g++) {
            double need = 0, params = 0, acts = 0;
            if (tp_spread)
                for (int sl = g; sl < slots; sl += gpus) {
                    double n1, p1, a1;
                    sum_picks(pick, sl / pc->tp, sl / pc->tp + 1, &n1, &p1, &a1);
                    need += n1, params += p1, acts += a1;
                }
            else
                sum_picks(pick, g * per_gpu, (g + 1) * per_gpu < here ? (g + 1) * per_gpu : here, &need, &params,
                          &acts);
            /* each worker on this GPU has its own scratch (a piece's logits) */
            int workers = tp_spread ? (slots - g + gpus - 1) / gpus
                                    : ((g + 1) * per_gpu < here ? (g + 1) * per_gpu : here) - g * per_gpu;
            if (workers < 0)
                workers = 0;
            if (!tp_spread)
                workers *= (int)ranks_per_gpu;
            double extra = workers * scratch + CUDA_RESERVE_BYTES;
            need += extra;
            size_t free_b = 0, total_b = 0;
            double avail = limit;
            if (avail <= 0 && bsipipe_cuda_mem_info(g, &free_b, &total_b) == 0)
                avail = (double)free_b;
            if (g == 0 && rank0())
                printf("memory: about %.2f GiB on GPU 0: parameters, gradients and AdamW moments %.2f GiB, peak "
                       "activations %.2f GiB, scratch and the CUDA libraries' reserve %.2f GiB (%d x %.1f MiB: a "
                       "piece's logits); budget %.2f GiB (%s)\n", need / gib, params / gib, acts / gib, extra / gib,
                       workers, scratch / 1048576.0, avail / gib, limit > 0 ? "--memory-limit" : "cudaMemGetInfo");
            if (avail > 0 && need > avail) {
                fprintf(stderr, "bsipipe-train: not enough GPU memory: GPU %d holds %d %s%s of the plan, which "
                                "need about %.1f GiB (parameters, gradients and AdamW moments %.1f GiB, peak "
                                "activations %.1f GiB, scratch and reserve %.1f GiB), and %.1f GiB are free (%s). Use more GPUs (--gpus, up to %d "
                                "here; or --mpi over more nodes), lower the activations with a smaller --m or another "
                                "--k, bf16 storage of the stash (--precision bf16s), or a smaller model; --memory-limit BYTES sets "
                                "the budget per GPU\n",
                        g, per_gpu, tp_spread ? "tensor-parallel rank" : "device", per_gpu == 1 ? "" : "s", need / gib, params / gib, acts / gib, extra / gib, avail / gib,
                        limit > 0 ? "--memory-limit" : "cudaMemGetInfo", found);
                refused = 1;
            }
        }
        free(pick);
        return refused;
    }
    double need, params, acts;
    sum_picks(pick, 0, here, &need, &params, &acts);
    free(pick);
    double rest = RUNTIME_BYTES + 4.0 * (double)bsipipe_model_params(dims) + here * scratch;
    need += rest;
    const char *what = "--memory-limit";
    double avail = limit > 0 ? limit : available_memory(&what);
    if (rank0()) /* every rank of an MPI job holds the same */
        printf("memory: about %.2f GiB on this %s: parameters, gradients and AdamW moments %.2f GiB, peak activations "
           "%.2f GiB, scratch %.2f GiB (%d x %.1f MiB: a piece's logits), the runtime and a model copy %.2f GiB; "
           "budget %.2f GiB (%s)\n", need / gib, nranks > 1 ? "rank" : "machine", params / gib, acts / gib,
           here * scratch / gib, here, scratch / 1048576.0, (rest - here * scratch) / gib, avail / gib, what);
    if (avail <= 0 || need <= avail)
        return 0;
    fprintf(stderr, "bsipipe-train: not enough memory: the plan needs about %.1f GiB on this %s (%d device%s: "
                    "parameters, gradients and AdamW moments %.1f GiB, peak activations %.1f GiB; scratch, the "
                    "runtime and a model copy %.1f GiB), and %.1f GiB are available (%s). Spread the devices over "
                    "more nodes (--mpi with more ranks, fewer devices each), lower the activations with a smaller "
                    "--m or another --k, or train a smaller model; --memory-limit BYTES (e.g. 64G) sets the "
                    "budget\n",
            need / gib, nranks > 1 ? "rank" : "machine", here, here == 1 ? "" : "s", params / gib, acts / gib,
            rest / gib, avail / gib, what);
    return 1;
}

