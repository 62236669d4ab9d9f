/* bsipipe-bench: every schedule side by side on the same model, devices and
 * data, in one process, interleaved A B C A B C ... over repetitions; each
 * measurement next to the planner's prediction. Prints Markdown tables and
 * writes CSV and an SVG bar chart (docs/benchmarks.md). */
#include "apps/cli.h"
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_topology.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bsipipe-bench"

static void usage(FILE *out)
{
    fputs(
"Usage: " PROG " [options]\n"
"Runs pipeline schedules side by side on the same model, devices and data\n"
"(interleaved A B C A B C ... over repetitions, one engine at a time) and prints\n"
"a Markdown table: tokens/s, measured and predicted bubble ratio, peak activation\n"
"memory per device, speedup against Seq1F1B and Seq1F1B-I, runtime overhead.\n\n"
"Runs:\n"
"  --schedules LIST  comma-separated: gpipe 1f1b 1f1b-i zb-h1 chimera terapipe\n"
"                    seq1f1b seq1f1b-i bsipipe bitpipe zb-v dualpipev seq-zbv\n"
"                    bsipipe-zb dualpipe zb-i zb-h2 (default: all)\n"
"  --reps N          repetitions (default 3); each creates every engine anew\n"
"  --warmup N        untimed iterations per engine (default 1)\n"
"  --iters N         timed iterations per engine (default 1)\n"
"  --w N --m N       devices per pipeline (default 4), micro-batches (default 8)\n"
"  --p N --k N       chunks per device / subsequences, applied to the schedules\n"
"                    that allow them (default: p=2 where interleaved, k=2 where\n"
"                    sequence-level, else 1)\n"
"  --tp N            tensor-parallel degree (default 1): each device is N\n"
"                    workers, CPU or CUDA (docs/tensor-parallel.md)\n"
"  --tp-collectives one-task|per-rank  with --tp: each TP collective one task\n"
"                    over the group's buffers (default), or one task per rank\n"
"                    meeting the others' (the shape of NCCL's collectives)\n"
"  --policy NAME     bsipipe (default) or a StarPU policy from the list below\n"
"  --devices cpu|cuda  StarPU CPU workers (default) or CUDA workers as devices\n"
"                    (several per GPU); --gpus N: GPUs to use (default all)\n"
"  --precision P     with --devices cuda: matrix products fp32 (default), tf32,\n"
"                    bf16 or bf16s (docs/cuda.md)\n"
"  --comm ORDER      transfer order bsipipe (default), ordered, naive\n"
"  --watchdog S      seconds a send may wait (default 30; ablation preset 2)\n"
"  --recv MODE       posted (default: the receives behind a compute op are\n"
"                    posted before it), in-place or blocking (docs/policies.md)\n"
"  --calibrate       first one untimed run of each row measures its ops' times\n"
"                    (bsipipe_engine_op_seconds); the table gains the bubble\n"
"                    predicted on those times, and each bsipipe row a twin,\n"
"                    'bsipipe, planned on measured ops', whose plan the\n"
"                    optimising pass re-times on them (same memory; not with\n"
"                    --mpi or --tp)\n"
"  --idle-spin LIST  how long a worker waiting for its next op spins before it\n"
"                    sleeps: comma-separated 'auto' (default: 1000 µs when every\n"
"                    worker has a core, else none) or µs (0: sleep at once);\n"
"                    several values run every schedule once per value, side by\n"
"                    side (e.g. --idle-spin auto,0)\n"
"  --sends LIST      eager (default where allowed: an F or B sends its output\n"
"                    as it ends, no SEND task) or tasks (a SEND task per\n"
"                    transfer); both, comma-separated, run every schedule once\n"
"                    per mode, side by side (e.g. --sends eager,tasks)\n"
"  --buffers LIST    reused (default where allowed: per-device pools of StarPU\n"
"                    handles registered once, each buffer's first writer takes\n"
"                    one at its submission) or fresh (registered each\n"
"                    iteration, freed after the last use); both,\n"
"                    comma-separated, run every schedule once per mode\n"
"  --idle-breakdown  a second table: each schedule's idle time by the kind of op\n"
"                    the device waited to start, the devices' slowdown spread\n"
"                    against their planned work, the slowest device's idle\n"
"                    share and the runtime's mean gap before a compute op, after\n"
"                    its device's previous op or after a hand-off (not with --mpi)\n"
"Model (real compute: CPU kernels):\n"
"  --model gpt|llama --layers N --hidden N --heads N --ffn N --seq N --vocab N\n"
"                    (defaults gpt, 8, 128, 4, 4*hidden, 256, 256)\n"
"  --layout L        which layers each chunk holds, for every row: auto (by\n"
"                    cost, any L >= p*w), even (L/(p*w) each, the default) or a\n"
"                    Megatron layout string (bsipipe-plan --help); given twice,\n"
"                    each row runs under both, side by side\n"
"  --seed N          parameters and random tokens (default 1)\n"
"Emulated device time:\n"
"  --emulate         F/B/W tasks sleep for their FLOPs at --device-tflops\n"
"                    (default 0.01) instead of computing: w = 8, 16 fit on 2 cores\n"
"Presets (the paper's experiments at this machine's scale):\n"
"  --preset seqlen   sequence length S = 128, 256, 512 at fixed w (default 4);\n"
"                    with --emulate --reps 2 about 3 min on 2 cores\n"
"  --preset devices  w = 4, 8, 16, emulated (L = 32, m = max(8, w)); about\n"
"                    10 min at --reps 2 on 2 cores (--schedules shortens it)\n"
"  --preset tp       the paper's Table 3: BSIPipe on --w emulated GPUs (default\n"
"                    8) as (w, D_t) = (w, 1), (w/2, 2), (w/4, 4) (L = 16,\n"
"                    m = 2w, --device-tflops 0.002 unless given), measured and\n"
"                    predicted tokens/s, bubble and per-GPU memory side by\n"
"                    side, with the paper's figures; about 1 min at --reps 1\n"
"  --overhead        runtime overhead per task: StarPU's floor for the engine's\n"
"                    exact task shapes against the engine's emulated run of the\n"
"                    same plan, in one process (w = 2 and 8 unless --w; the first\n"
"                    of --schedules, default bsipipe; GPT L = 32, m = max(8, w));\n"
"                    one table with no device time (--device-tflops 1e6), one at\n"
"                    --device-tflops (not with --device-tflops 1e5 or more);\n"
"                    default --reps 3 --iters 2\n"
"  --preset ablation BSIPipe with transfer order bsipipe, no-reversal (the\n"
"                    paper's w/o F-B overlap), ordered, naive, then bsipipe and\n"
"                    no-reversal with blocking receives; ordered, naive and\n"
"                    no-reversal with blocking receives deadlock and are caught\n"
"                    by a 2 s watchdog; then bsipipe with every receive posted\n"
"                    where it stands (no posting ahead); then\n"
"                    topology-aware against naive mapping on 2 simulated nodes,\n"
"                    predicted only (one node here: nothing to measure);\n"
"                    under --mpi: topology-aware against naive mapping across\n"
"                    the ranks, measured, with the bytes crossing ranks\n"
"Scale-out:\n"
"  --mpi             one StarPU-MPI rank of an mpirun job (every rank runs the\n"
"                    same bench; rank 0 prints), e.g.\n"
"                    mpirun -np 2 " PROG " --mpi --preset ablation\n"
"  --inter-link RATE[,LATENCY]  the inter-node link (default 25GB/s,10us) of\n"
"                    the emulated cluster and of the ablation's prediction,\n"
"                    spelled as scripts/netns-cluster.sh --rate: 1gbit, 25GB/s\n"
"  --intra-link RATE[,LATENCY]  the link inside a node (default 300GB/s,5us)\n"
"  --node-devices G  with --emulate: transfers cost time. The w devices sit on\n"
"                    nodes of G (w/G nodes); a SEND holds its device for its\n"
"                    bytes on the link between its two nodes, a SYNC for the\n"
"                    all-reduce; the predicted columns simulate the same links\n"
"  --nic per-device|shared  inter-node links: one per device (default) or one\n"
"                    per node, shared by its devices\n"
"  --mapping aware|naive|both  devices onto nodes (--node-devices): mirrored\n"
"                    pairs on one node (default), consecutive devices, or each\n"
"                    row under both side by side\n"
"Output:\n"
"  --csv FILE        one row per (configuration, schedule)\n"
"  --svg FILE        bar chart of tokens/s (median, min-max whiskers)\n"
"  --trace DIR       after the timed repetitions, one more (untimed) run of each\n"
"                    schedule traced into DIR/<schedule>/ (DIR/<config>/<schedule>/\n"
"                    with several configurations): FxT -> paje.trace, dag.dot,\n"
"                    tasks.rec, trace.rec; trace.json, timeline.svg, planned.svg\n"
"                    of its last iteration (docs/tracing.md)\n"
"  --version          the bsipipe version\n"
"  -h, --help\n", out);
    cli_print_policies(out);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MAX_SPINS 4

/* A LIST of two named modes (--sends eager,tasks; --buffers reused,fresh)
 * -> values 1 (first name) and 2 (second); the count, or -1 after printing
 * the error. */
static int parse_modes(const char *opt, const char *list, const char *const names[2], int out[2])
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int v = strcmp(t, names[0]) == 0 ? 1 : strcmp(t, names[1]) == 0 ? 2 : 0;
        if (!v || n == 2 || (n == 1 && out[0] == v)) {
            fprintf(stderr, PROG ": %s: '%s' is not one of %s, %s (each at most once, comma-separated, e.g. %s "
                            "%s,%s)\n", opt, t, names[0], names[1], opt, names[0], names[1]);
            return -1;
        }
        out[n++] = v;
    }
    if (n == 0)
        fprintf(stderr, PROG ": %s expects %s, %s or both, comma-separated\n", opt, names[0], names[1]);
    return n ? n : -1;
}

static const char *const sends_names[2] = {"eager", "tasks"};
static const char *const buffers_names[2] = {"reused", "fresh"};

/* --idle-spin LIST -> options.idle_spin_us values (0 auto, -1 sleep, > 0 µs);
 * the count, or -1 after printing the error. */
static int parse_spins(const char *list, int *out)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int us = 0;
        if (n == MAX_SPINS) {
            fprintf(stderr, PROG ": --idle-spin: at most %d values\n", MAX_SPINS);
            return -1;
        }
        if (strcmp(t, "auto") != 0) {
            if (cli_parse_int(PROG, "--idle-spin", t, 0, 1000000, &us))
                return -1;
            if (us == 0)
                us = -1;
        }
        out[n++] = us;
    }
    if (n == 0)
        fprintf(stderr, PROG ": --idle-spin expects 'auto' or microseconds, comma-separated (e.g. auto,0)\n");
    return n ? n : -1;
}

/* Median of n values (sorted in place); NAN when n == 0. */
static double median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- what is run ------------------------------------------------------------------------ */

typedef struct variant {
    bsipipe_schedule_kind_t kind;
    bsipipe_comm_order_t comm;
    int naive_mapping;       /* --mpi: consecutive devices per rank; --node-devices: per node */
    int blocking_recv;       /* receives hold their device (bsipipe_engine_set_blocking_recv) */
    int idle_spin_us;        /* options.idle_spin_us: 0 auto, < 0 sleep at once, > 0 µs */
    int recv_in_place;       /* options.recv_in_place: no posting ahead */
    int measured_plan;       /* --calibrate: the plan re-timed on the measured op times */
    int sends;               /* --sends: 0 the engine's default, 1 eager, 2 a SEND task each */
    int buffers;             /* --buffers: 0 the engine's default, 1 reused, 2 registered each iteration */
    const char *layout;      /* --layout: which layers each chunk holds (NULL: the even split) */
    char label[64];
} variant_t;

typedef struct config {
    char title[160];
    bsipipe_model_dims_t dims;
    int w, m;
    int emulate;
    double tflops;
    int unchecked;
    double watchdog;
    int mpi;                 /* engines span the StarPU-MPI ranks */
    bsipipe_engine_devices_t devices;
    int gpus;
    const char *precision;   /* cuda: o.precision (NULL: fp32) */
    int tp;                  /* tensor-parallel degree of this configuration (0: --tp) */
    int ranks;               /* --mpi: the job's ranks (nodes of the mapping prediction) */
    double inter_bandwidth, inter_latency; /* --inter-link (bandwidth 0, latency < 0: the FLOPs model's) */
    double intra_bandwidth, intra_latency; /* --intra-link (the same) */
    int node_devices;        /* --node-devices: emulated links, nodes of this many devices (0: none) */
    int shared_nic;          /* --nic shared */
} config_t;

/* One row: a variant under a config, its plan, prediction and samples. */
typedef struct row {
    variant_t v;
    bsipipe_parallel_config_t pc;
    int status;              /* 0 ok, 1 skipped (planner), 2 failed at run time */
    char error[400];
    double pred_bubble_flops, pred_bubble_unit; /* NAN when the plan deadlocks */
    double pred_makespan_flops; /* predicted makespan x the rate (emulated: --device-tflops,
                                   else 1 FLOP/s): FLOPs, plus the TP collectives' charge */
    double busy_flops;       /* total F/B/W busy time of the plan x the rate (sum over devices) */
    long n_ops;
    int n_samples;
    int spin_us;             /* the idle spin the engine chose (bsipipe_engine_idle_spin_us) */
    double *tok, *bubble, *makespan, *busy; /* [reps * iters] */
    double *rep_tok;         /* [reps] mean tokens/s of the repetition, NAN if none */
    double peak[3];          /* MiB min, median, max over devices (last iteration) */
    double speedup[2];       /* median per-repetition ratio against seq1f1b, seq1f1b-i */
    double act_bytes[2], sync_bytes[2]; /* last iteration: inside / across ranks */
    double pred_act, pred_params; /* planner, bytes per GPU (TP rank), largest over devices */
    double pred_bubble_measured; /* --calibrate: the plan run, simulated on the measured op times */
    bsipipe_schedule_t *plan;    /* --calibrate, measured_plan: the re-timed plan the engine runs */
    double *idle;            /* --idle-breakdown: [sample * IDLE_KINDS] ms per device, by what ended the wait */
    double *spread;          /* --idle-breakdown: [sample] spread of busy time over the planned one between devices */
    double *pred_busy;       /* [w] each device's planned F/B/W time (FLOPs costs, any unit) */
    double *slow_idle;       /* --idle-breakdown: [sample] idle share of the span on the slowest device */
    int has_links;           /* --node-devices: the row's engine and prediction emulate links */
    bsipipe_cost_model_t links; /* their model (device_node: node_map) */
    int *node_map;           /* [w] node of each device under the row's mapping */
    double pred_act_bytes[2], pred_sync_bytes[2]; /* planner, per iteration: inside / across nodes */
    double pred_iter_s;      /* planner: the iteration, syncs and step included (emulated: seconds) */
    double pred_sync_exposed; /* planner: iteration time the gradient syncs add (s), links vs syncs free */
    double *own_bubble;      /* [sample] the plan run, simulated on that iteration's mean op times (NAN: no
                                op times here, with --mpi or --tp) */
    double *replay_bubble;   /* [sample] the same on each op's own time: the iteration replayed */
} row_t;

static int bench_tp = 1; /* --tp: the same degree for every row */
static int bench_idle;      /* --idle-breakdown */

/* Where a device's idle time ends: the kind of the op it then starts (the
 * one it waited for), or the iteration's end. */
enum { IDLE_F, IDLE_B, IDLE_W, IDLE_SEND, IDLE_RECV, IDLE_SYNC, IDLE_TAIL, IDLE_KINDS };
/* Per sample, after the kinds: the runtime's gaps before compute ops, µs. */
enum { GAP_LOCAL = IDLE_KINDS, GAP_HANDOFF, IDLE_SLOTS };
static const char *const idle_names[IDLE_KINDS] = {"F", "B", "W", "SEND", "RECV", "SYNC/STEP", "tail"};
static int bench_calibrate; /* --calibrate */

static bsipipe_parallel_config_t make_pc(const variant_t *v, const config_t *c, int p, int k)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(v->kind);
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(v->kind);
    pc.w = c->w;
    pc.m = c->m;
    pc.comm = v->comm;
    pc.tp = c->tp > 0 ? c->tp : bench_tp;
    if (p > 0 && t.interleaved) pc.p = p;
    if (k > 0 && t.sequence_level) pc.k = k;
    pc.layout = v->layout;
    return pc;
}

/* The links a row emulates (--node-devices): the FLOPs cost model at the
 * emulated rate with the given links, devices mapped onto nodes of
 * node_devices GPUs topology-aware or naive (the row's naive_mapping). The
 * engine holds its transfers for these links' times and the prediction
 * simulates on them: one description. 0, or -1 with r->error set. */
static int row_links(row_t *r, const config_t *c)
{
    if (!c->emulate || c->node_devices <= 0 || c->mpi)
        return 0;
    int tp = r->pc.tp > 1 ? r->pc.tp : 1, nodes = (r->pc.w * tp + c->node_devices - 1) / c->node_devices;
    free(r->node_map);
    if (!(r->node_map = malloc(sizeof(int) * (size_t)r->pc.w))) {
        snprintf(r->error, sizeof r->error, "out of memory");
        return -1;
    }
    if (bsipipe_map_devices(&r->pc, nodes, c->node_devices, !r->v.naive_mapping, r->node_map) < 0) {
        snprintf(r->error, sizeof r->error, "mapping: %s", bsipipe_error_detail());
        return -1;
    }
    bsipipe_cost_model_t l = bsipipe_cost_model_emulated(c->tflops * 1e12);
    l.free_transfers = 0;
    if (c->intra_bandwidth > 0) l.intra_bandwidth = c->intra_bandwidth;
    if (c->intra_latency >= 0) l.intra_latency = c->intra_latency;
    if (c->inter_bandwidth > 0) l.inter_bandwidth = c->inter_bandwidth;
    if (c->inter_latency >= 0) l.inter_latency = c->inter_latency;
    l.shared_nic = c->shared_nic;
    l.device_node = r->node_map;
    r->links = l;
    r->has_links = 1;
    return 0;
}

/* Plans and simulates a row: fills the prediction, or status 1 with the
 * planner's sentence. */
static void plan_row(row_t *r, const config_t *c)
{
    bsipipe_schedule_t *s = NULL;
    r->pred_bubble_flops = r->pred_bubble_unit = r->pred_makespan_flops = r->pred_bubble_measured = NAN;
    if (bsipipe_schedule_create(&r->pc, &c->dims, &s) < 0) {
        r->status = 1;
        snprintf(r->error, sizeof r->error, "%s", bsipipe_error_detail());
        return;
    }
    r->n_ops = bsipipe_schedule_n_ops(s);
    if (row_links(r, c) < 0) {
        r->status = 1;
        bsipipe_schedule_destroy(s);
        return;
    }
    /* FLOPs costs at the emulated rate (the TP collectives' charge does not
     * scale with it), else at 1 FLOP/s: makespan and busy in FLOPs. */
    double rate = c->emulate ? c->tflops * 1e12 : 1.0;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit(), fl = r->has_links ? r->links : bsipipe_cost_model_emulated(rate);
    unit.blocking_recv = fl.blocking_recv = r->v.blocking_recv;
    unit.recv_in_place = fl.recv_in_place = r->v.recv_in_place;
    bsipipe_sim_result_t *sim = NULL;
    int rc = bsipipe_simulate(s, &unit, &sim);
    if (rc == 0)
        r->pred_bubble_unit = sim->bubble_ratio;
    else if (rc == BSIPIPE_EDEADLOCK)
        r->pred_bubble_unit = INFINITY;
    if (rc == BSIPIPE_EDEADLOCK && !c->unchecked) {
        r->status = 1;
        snprintf(r->error, sizeof r->error, "planner: %s", bsipipe_error_detail());
    }
    bsipipe_sim_result_destroy(sim);
    sim = NULL;
    if ((rc = bsipipe_simulate(s, &fl, &sim)) == BSIPIPE_EDEADLOCK)
        r->pred_bubble_flops = INFINITY;
    if (rc == 0) {
        r->pred_bubble_flops = sim->bubble_ratio;
        r->pred_makespan_flops = sim->makespan * rate;
        r->pred_iter_s = sim->iteration_time;
        for (int i = 0; i < 2; i++) {
            r->pred_act_bytes[i] = sim->act_bytes[i];
            r->pred_sync_bytes[i] = sim->sync_bytes[i];
        }
        if (r->has_links) { /* the syncs' share of the critical path: the same links, syncs of no bytes */
            bsipipe_cost_model_t nosync = fl;
            nosync.sync_free = 1;
            bsipipe_sim_result_t *alt = NULL;
            if (bsipipe_simulate(s, &nosync, &alt) == 0)
                r->pred_sync_exposed = sim->iteration_time - alt->iteration_time;
            bsipipe_sim_result_destroy(alt);
        }
        r->busy_flops = 0;
        free(r->pred_busy);
        r->pred_busy = calloc((size_t)sim->n_devices, sizeof(double));
        for (int d = 0; d < sim->n_devices; d++) {
            r->busy_flops += sim->device[d].busy * rate;
            if (r->pred_busy)
                r->pred_busy[d] = sim->device[d].busy;
            if (sim->device[d].peak_act_bytes > r->pred_act)
                r->pred_act = sim->device[d].peak_act_bytes;
            if (sim->device[d].param_bytes > r->pred_params)
                r->pred_params = sim->device[d].param_bytes;
        }
    }
    bsipipe_sim_result_destroy(sim);
    bsipipe_schedule_destroy(s);
}

/* Same random tokens for every schedule: iteration `it` of a run. */
static void make_data(int *tokens, int *targets, int m, int S, int vocab, unsigned long long seed, int it)
{
    unsigned long long x = seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)it * 0xBF58476D1CE4E5B9ULL + 1;
    for (int mb = 0; mb < m; mb++) {
        int prev = -1;
        for (int i = 0; i <= S; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int t = (int)((x >> 11) % (unsigned long long)vocab);
            if (i < S) tokens[(long)mb * S + i] = t;
            if (prev >= 0) targets[(long)mb * S + i - 1] = t;
            prev = t;
        }
    }
}

/* Sum of measured F/B/W time over every device (seconds; with MPI over
 * every rank's devices). */
static double measured_busy(const bsipipe_engine_t *e, int W)
{
    double *busy = calloc((size_t)W, sizeof *busy), sum = 0;
    if (busy && bsipipe_engine_device_busy(e, busy) == 0)
        for (int d = 0; d < W; d++)
            sum += busy[d];
    free(busy);
    return sum;
}

typedef struct op_span {
    double start, end;
    int kind;
    int op;   /* its index in the device's op list (record_gaps) */
} op_span_t;

static int cmp_span(const void *a, const void *b)
{
    double x = ((const op_span_t *)a)->start, y = ((const op_span_t *)b)->start;
    return (x > y) - (x < y);
}

static int idle_kind(bsipipe_op_kind_t k)
{
    switch (k) {
    case BSIPIPE_OP_F: return IDLE_F;
    case BSIPIPE_OP_B: return IDLE_B;
    case BSIPIPE_OP_W: return IDLE_W;
    case BSIPIPE_OP_SEND: return IDLE_SEND;
    case BSIPIPE_OP_RECV: return IDLE_RECV;
    default: return IDLE_SYNC;
    }
}

/* Device d's compute ops that ran in this process, by start time (the
 * caller frees; NULL when none or out of memory); *ops: its op list. */
static op_span_t *compute_spans(const bsipipe_engine_t *e, int d, const bsipipe_op_t **ops, int *n)
{
    const bsipipe_engine_op_record_t *rec;
    int nr, nops;
    *n = 0;
    *ops = bsipipe_schedule_device_ops(bsipipe_engine_schedule(e), d, &nops);
    if (bsipipe_engine_records(e, d, &rec, &nr) < 0 || !*ops || nr <= 0)
        return NULL;
    op_span_t *spans = malloc(sizeof *spans * (size_t)nr);
    for (int j = 0; spans && j < nr && j < nops; j++)
        if ((*ops)[j].kind <= BSIPIPE_OP_W && rec[j].start_us > 0 && rec[j].end_us >= rec[j].start_us)
            spans[(*n)++] = (op_span_t){.start = rec[j].start_us, .end = rec[j].end_us, .op = j};
    if (spans)
        qsort(spans, (size_t)*n, sizeof *spans, cmp_span);
    return spans;
}

/* --idle-breakdown: the runtime's gap before each compute op, the time from
 * the moment it could start to its start. It could start when the later of
 * two things happened: its device's previous compute op ended (the gap is
 * then the runtime's between two tasks of a worker: termination, pop, data
 * acquisition, the RECVs posted in between), or an input from another
 * device was produced (the gap is then the hand-off: the copy, the RECV's
 * release, the wake-up). Means in µs, into idle[GAP_LOCAL], idle[GAP_HANDOFF]
 * (NAN when no op of that kind). */
static void record_gaps(const bsipipe_engine_t *e, int W, double *idle)
{
    const bsipipe_schedule_t *plan = bsipipe_engine_schedule(e);
    long nidx = bsipipe_sim_op_count(plan);
    double *end_of = malloc(sizeof(double) * (size_t)nidx), sum[2] = {0, 0};
    op_span_t **spans = calloc((size_t)W, sizeof *spans);
    const bsipipe_op_t **ops = calloc((size_t)W, sizeof *ops);
    int *n = calloc((size_t)W, sizeof *n);
    long count[2] = {0, 0};
    idle[GAP_LOCAL] = idle[GAP_HANDOFF] = NAN;
    for (long x = 0; end_of && x < nidx; x++)
        end_of[x] = NAN;
    for (int d = 0; end_of && spans && ops && n && d < W; d++) {
        spans[d] = compute_spans(e, d, &ops[d], &n[d]);
        for (int a = 0; a < n[d]; a++)
            end_of[bsipipe_sim_op_index(plan, &ops[d][spans[d][a].op])] = spans[d][a].end;
    }
    for (int d = 0; end_of && spans && ops && n && d < W; d++) {
        double prev_end = NAN;
        for (int a = 0; a < n[d]; a++) {
            const op_span_t *o = &spans[d][a];
            bsipipe_op_t in[3];
            int ni = bsipipe_schedule_op_inputs(plan, &ops[d][o->op], in);
            double remote = NAN;
            for (int x = 0; x < ni; x++)
                if (in[x].device != d) {
                    double t = end_of[bsipipe_sim_op_index(plan, &in[x])];
                    if (!isnan(t) && !(t <= remote))
                        remote = t;
                }
            int handoff = !isnan(remote) && !(remote <= prev_end);
            double ready = handoff ? remote : prev_end;
            if (!isnan(ready) && o->start >= ready) {
                sum[handoff] += o->start - ready;
                count[handoff]++;
            }
            prev_end = o->end;
        }
    }
    for (int d = 0; spans && d < W; d++)
        free(spans[d]);
    free(spans);
    free(ops);
    free(n);
    free(end_of);
    if (count[0])
        idle[GAP_LOCAL] = sum[0] / count[0];
    if (count[1])
        idle[GAP_HANDOFF] = sum[1] / count[1];
}

/* --idle-breakdown, sample i of the engine's last iteration: each device's
 * ops by start time (StarPU's profiling records); a gap before an op counts
 * for that op's kind, the gap after a device's last op until the last one
 * of any device ends for "tail". Averaged over devices, in ms; also the
 * spread between devices of their F/B/W time over their planned share, and
 * the idle share of the slowest device, which the iteration waits for. */
static void record_idle(row_t *r, const bsipipe_engine_t *e, int W, int i)
{
    const bsipipe_schedule_t *plan = bsipipe_engine_schedule(e);
    double *idle = &r->idle[(long)i * IDLE_SLOTS], t0 = INFINITY, t1 = -INFINITY, smax = 0, smin = INFINITY;
    double slowest_idle = NAN;
    double *busy = calloc((size_t)W, sizeof *busy);
    op_span_t **spans = calloc((size_t)W, sizeof *spans);
    int *n = calloc((size_t)W, sizeof *n);
    if (!busy || !spans || !n)
        goto out;
    for (int d = 0; d < W; d++) {
        const bsipipe_engine_op_record_t *rec;
        int nr, nops;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(plan, d, &nops);
        if (bsipipe_engine_records(e, d, &rec, &nr) < 0 || !ops || !(spans[d] = calloc((size_t)nr + 1, sizeof **spans)))
            goto out;
        for (int j = 0; j < nr && j < nops; j++) {
            if (!(rec[j].end_us >= rec[j].start_us) || rec[j].start_us <= 0)
                continue; /* not run here (another rank's) */
            op_span_t *o = &spans[d][n[d]++];
            o->start = rec[j].start_us;
            o->end = rec[j].end_us;
            o->kind = idle_kind(ops[j].kind);
            if (o->kind <= IDLE_W)
                busy[d] += o->end - o->start;
            t0 = fmin(t0, o->start);
            t1 = fmax(t1, o->end);
        }
        qsort(spans[d], (size_t)n[d], sizeof **spans, cmp_span);
    }
    if (!(t1 > t0))
        goto out;
    for (int d = 0; d < W; d++) {
        double prev = t0, gaps = 0;
        for (int j = 0; j < n[d]; j++) {
            if (spans[d][j].start > prev) {
                idle[spans[d][j].kind] += (spans[d][j].start - prev) / 1e3 / W;
                gaps += spans[d][j].start - prev;
            }
            prev = fmax(prev, spans[d][j].end);
        }
        idle[IDLE_TAIL] += (t1 - prev) / 1e3 / W;
        /* measured over planned busy time: the device's slowdown on its own work */
        double slowdown = r->pred_busy && r->pred_busy[d] > 0 ? busy[d] / r->pred_busy[d] : NAN;
        if (slowdown > smax) {
            smax = slowdown;
            slowest_idle = (gaps + t1 - prev) / (t1 - t0);
        }
        smin = fmin(smin, slowdown);
    }
    r->spread[i] = smin > 0 ? smax / smin - 1 : NAN;
    r->slow_idle[i] = slowest_idle;
    record_gaps(e, W, idle);
out:
    for (int d = 0; spans && d < W; d++)
        free(spans[d]);
    free(spans);
    free(n);
    free(busy);
}

/* --tp-collectives (options.tp_collectives) */
static bsipipe_engine_tp_coll_t bench_tp_coll = BSIPIPE_TP_COLL_AUTO;

static bsipipe_engine_options_t engine_options(const row_t *r, const config_t *c, const char *policy, int seed)
{
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&c->dims, &r->pc);
    o.seed = (unsigned long long)seed;
    o.policy = policy;
    o.watchdog_s = c->watchdog;
    o.unchecked_plan = c->unchecked;
    o.emulate_flops = c->emulate ? c->tflops * 1e12 : 0;
    o.mpi = c->mpi;
    o.devices = c->devices;
    o.gpus = c->gpus;
    o.precision = c->precision;
    o.naive_mapping = r->v.naive_mapping;
    o.idle_spin_us = r->v.idle_spin_us;
    o.recv_in_place = r->v.recv_in_place;
    o.plan = r->plan;
    o.tp_collectives = bench_tp_coll;
    o.emulate_links = r->has_links ? &r->links : NULL;
    return o;
}

/* Costs measured on this machine, under the row's receive semantics:
 * mean seconds per op slot (seconds) or every op's own (each, a replay). */
static bsipipe_cost_model_t measured_cost(const row_t *r, const double *seconds, const double *each)
{
    bsipipe_cost_model_t cost = bsipipe_cost_model_emulated(1.0);
    cost.op_seconds = seconds;
    cost.op_replay = each;
    cost.blocking_recv = r->v.blocking_recv;
    cost.recv_in_place = r->v.recv_in_place;
    return cost;
}

/* --calibrate: one untimed run of a plan (warm-up, then one measured
 * iteration) gives every op's time (*secs, the caller frees it). */
static int measure_op_seconds(const row_t *r, const config_t *c, const char *policy, int warmup, int seed,
                              const int *tokens, const int *targets, double **secs)
{
    bsipipe_engine_options_t o = engine_options(r, c, policy, seed);
    o.plan = NULL;
    bsipipe_engine_t *e = NULL;
    long per = (long)c->m * c->dims.seq_len;
    *secs = NULL;
    int rc = bsipipe_engine_create(&o, &e);
    for (int it = 0; rc == 0 && it <= warmup; it++) {
        double loss, gnorm;
        rc = bsipipe_engine_iteration(e, tokens + it * per, targets + it * per, &loss, &gnorm);
    }
    if (rc == 0) {
        int n = bsipipe_sim_op_slots(bsipipe_engine_schedule(e));
        rc = (*secs = malloc(sizeof(double) * (size_t)n)) ? bsipipe_engine_op_seconds(e, *secs, n)
                                                          : bsipipe_error_set(-ENOMEM, "out of memory");
    }
    bsipipe_engine_destroy(e);
    return rc;
}

/* The row's plan on measured op times: simulated (the prediction), and for a
 * measured_plan row re-timed by the optimising pass (activation budget 0: no
 * device holds more than in the constructed plan). *makespan: predicted
 * seconds; *plan: the plan (the caller owns it). */
static int plan_on_measured(const row_t *r, const config_t *c, const double *secs, bsipipe_schedule_t **plan,
                            double *bubble, double *makespan)
{
    bsipipe_schedule_t *s = NULL;
    int rc = bsipipe_schedule_create(&r->pc, &c->dims, &s);
    bsipipe_cost_model_t cost = measured_cost(r, secs, NULL);
    if (rc == 0 && r->v.measured_plan)
        rc = bsipipe_schedule_optimise(s, &cost, 0, NULL);
    bsipipe_sim_result_t *sim = NULL;
    if (rc == 0 && (rc = bsipipe_simulate(s, &cost, &sim)) == 0) {
        *bubble = sim->bubble_ratio;
        *makespan = sim->makespan;
    }
    bsipipe_sim_result_destroy(sim);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        s = NULL;
    }
    *plan = s;
    return rc;
}

/* --calibrate for one row: the prediction on its measured op times; a
 * measured_plan row also takes, among k = 1, 2, 4 (those its config
 * allows), the k whose re-timed plan the measured times predict fastest,
 * and runs that plan. *note: what was tried, for the table's legend. */
static void calibrate_row(row_t *r, const config_t *c, const char *policy, int warmup, int seed,
                          const int *tokens, const int *targets, char *note, size_t note_len)
{
    int ks[3] = {r->pc.k}, nk = 1, rc = 0, best_k = r->pc.k;
    if (r->v.measured_plan) {
        static const int tries[] = {1, 2, 4};
        nk = 0;
        for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
            bsipipe_parallel_config_t pc = r->pc;
            pc.k = tries[i];
            if (bsipipe_parallel_config_validate(&pc, &c->dims) == 0)
                ks[nk++] = tries[i];
        }
    }
    double best = INFINITY;
    size_t used = 0;
    r->pred_bubble_measured = NAN;
    note[0] = 0;
    for (int i = 0; i < nk && rc == 0; i++) {
        row_t trial = *r;
        trial.pc.k = ks[i];
        double *secs = NULL, bubble = NAN, makespan = NAN;
        bsipipe_schedule_t *s = NULL;
        rc = measure_op_seconds(&trial, c, policy, warmup, seed, tokens, targets, &secs);
        if (rc == 0)
            rc = plan_on_measured(&trial, c, secs, &s, &bubble, &makespan);
        free(secs);
        if (rc == 0 && makespan < best) {
            best = makespan;
            best_k = ks[i];
            r->pred_bubble_measured = bubble;
            if (r->v.measured_plan) { /* keep it to run; the one it replaces goes */
                bsipipe_schedule_t *kept = r->plan;
                r->plan = s;
                s = kept;
            }
        }
        bsipipe_schedule_destroy(s);
        if (rc == 0 && r->v.measured_plan && used < note_len)
            used += (size_t)snprintf(note + used, note_len - used, "%sk = %d: %.1f ms", i ? ", " : "", ks[i],
                                     makespan * 1e3);
    }
    if (rc < 0) {
        r->status = 2;
        snprintf(r->error, sizeof r->error, "calibration: %s", bsipipe_error_detail());
        return;
    }
    if (best_k != r->pc.k) { /* the planner's own predictions for the k it runs */
        r->pc.k = best_k;
        double keep = r->pred_bubble_measured;
        plan_row(r, c);
        r->pred_bubble_measured = keep;
    }
}

/* The plan the engine just ran, simulated on the op times that iteration
 * measured: with replay, each op's own duration (the iteration as an ideal
 * runtime would have run it: what the measured bubble has beyond it is the
 * runtime's: hand-offs, wake-ups, scheduling); without, the mean per F/B/W,
 * piece and chunk (the schedule's bubble on this machine's ops: what the
 * replay has beyond it is the ops' spread around their means). NAN where
 * op times are not all here (MPI, TP). */
static double own_ops_bubble(const row_t *r, const bsipipe_engine_t *e, int replay)
{
    const bsipipe_schedule_t *plan = bsipipe_engine_schedule(e);
    long n = replay ? bsipipe_sim_op_count(plan) : bsipipe_sim_op_slots(plan);
    double *secs = n > 0 ? malloc(sizeof(double) * (size_t)n) : NULL, bubble = NAN;
    if (secs && (replay ? bsipipe_engine_op_durations(e, secs, n) : bsipipe_engine_op_seconds(e, secs, (int)n)) == 0) {
        bsipipe_cost_model_t cost = measured_cost(r, replay ? NULL : secs, replay ? secs : NULL);
        bsipipe_sim_result_t *sim = NULL;
        if (bsipipe_simulate(plan, &cost, &sim) == 0)
            bubble = sim->bubble_ratio;
        bsipipe_sim_result_destroy(sim);
    }
    free(secs);
    return bubble;
}

/* One repetition of one row: create, warm up, time, destroy. */
static void run_row(row_t *r, const config_t *c, const char *policy, int warmup, int iters, int seed, int rep,
                    const int *tokens, const int *targets, int n_data)
{
    bsipipe_engine_options_t o = engine_options(r, c, policy, seed);
    bsipipe_engine_t *e = NULL;
    long per = (long)c->m * c->dims.seq_len;
    if (bsipipe_engine_create(&o, &e) < 0) {
        r->status = 2;
        snprintf(r->error, sizeof r->error, "engine: %s", bsipipe_error_detail());
        return;
    }
    r->spin_us = bsipipe_engine_idle_spin_us(e);
    if (r->v.sends && bsipipe_engine_set_eager_send(e, r->v.sends == 1) < 0) {
        r->status = 2;
        snprintf(r->error, sizeof r->error, "--sends %s: %s", r->v.sends == 1 ? "eager" : "tasks",
                 bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return;
    }
    if (r->v.buffers && bsipipe_engine_set_buffer_reuse(e, r->v.buffers == 1) < 0) {
        r->status = 2;
        snprintf(r->error, sizeof r->error, "--buffers %s: %s", buffers_names[r->v.buffers - 1],
                 bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return;
    }
    if (r->v.blocking_recv && bsipipe_engine_set_blocking_recv(e, 1) < 0) {
        r->status = 2;
        snprintf(r->error, sizeof r->error, "engine: %s", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return;
    }
    double sum = 0;
    int got = 0;
    for (int it = 0; it < warmup + iters; it++) {
        int d = it % n_data;
        double loss, gnorm;
        if (bsipipe_engine_iteration(e, tokens + d * per, targets + d * per, &loss, &gnorm) < 0) {
            r->status = 2;
            snprintf(r->error, sizeof r->error, "%s", bsipipe_error_detail());
            break;
        }
        if (it < warmup)
            continue;
        bsipipe_engine_stats_t st;
        bsipipe_engine_last_stats(e, &st);
        int i = r->n_samples++;
        r->tok[i] = st.tokens_per_s;
        r->bubble[i] = st.bubble_ratio;
        r->makespan[i] = st.makespan_s;
        r->busy[i] = measured_busy(e, c->w);
        r->own_bubble[i] = own_ops_bubble(r, e, 0);
        r->replay_bubble[i] = own_ops_bubble(r, e, 1);
        if (bench_idle)
            record_idle(r, e, c->w, i);
        sum += st.tokens_per_s;
        got++;
    }
    r->rep_tok[rep] = got ? sum / got : NAN;
    if (got) /* a collective call under MPI: every rank got here alike */
        bsipipe_engine_traffic(e, r->act_bytes, r->sync_bytes);
    if (got) {
        double *pk = malloc(sizeof(double) * (size_t)c->w);
        if (pk && bsipipe_engine_peak_memory(e, pk) == 0) {
            qsort(pk, (size_t)c->w, sizeof *pk, cmp_double);
            r->peak[0] = pk[0] / 1048576.0;
            r->peak[2] = pk[c->w - 1] / 1048576.0;
            r->peak[1] = median(pk, c->w) / 1048576.0;
        }
        free(pk);
    }
    bsipipe_engine_destroy(e);
}

/* The ablation's last table, predicted: BSIPipe on 2 simulated nodes of w/2
 * devices (one process: nothing to measure), or under --mpi on the job's
 * ranks as nodes with the engine's own device-to-rank map; topology-aware
 * mapping (mirrored devices on one node) against naive, under the FLOPs cost
 * model at the table's device rate. Links: the FLOPs model's (intra-node 300
 * GB/s, inter-node 25 GB/s), the inter-node one as --inter-link says; under
 * --mpi the model of what runs: copies inside a rank cost nothing, sends
 * across ranks are StarPU-MPI's detached ones (the device goes on). */
static void print_mapping_prediction(const config_t *c, const bsipipe_parallel_config_t *pc)
{
    double rate = c->tflops * 1e12;
    int nodes = c->mpi ? c->ranks : 2;
    bsipipe_cost_model_t cost = bsipipe_cost_model_flops(rate);
    if (c->inter_bandwidth > 0)
        cost.inter_bandwidth = c->inter_bandwidth;
    if (c->inter_latency >= 0)
        cost.inter_latency = c->inter_latency;
    char link[160];
    snprintf(link, sizeof link, "inter-node links %g GB/s + %g us%s%s", cost.inter_bandwidth / 1e9,
             cost.inter_latency * 1e6, c->shared_nic ? ", one per node" : ", one per device",
             c->mpi ? ", in-rank copies free, detached sends, syncs across ranks there and back" : "");
    cost.shared_nic = c->shared_nic;
    if (c->mpi) {
        cost.intra_bandwidth = 0;
        cost.intra_latency = 0;
        cost.async_send = 1;
        cost.sync_reduce_back = 1; /* engine_mpi.c: the gradient there, the sum back */
        printf("\nThe planner's prediction for %d nodes (the engine's map of devices to ranks; %s; %g TFLOP/s "
               "devices), to compare with the measured rows above:\n\n", nodes, link, c->tflops);
    } else
        printf("\nTopology-aware mapping, PREDICTED ONLY (2 simulated nodes of %d devices, %s, %g TFLOP/s "
               "devices; one node here, so not measured; run under mpirun with --mpi to measure it):\n\n",
               c->w / 2, link, c->tflops);
    printf("| mapping | nodes | bubble predicted | iteration s predicted | activations across nodes MB | "
           "gradient sync across nodes MB | tokens/s predicted |\n|---|---|---|---|---|---|---|\n");
    bsipipe_schedule_t *s = NULL;
    int *map = malloc(sizeof(int) * (size_t)(pc->w > 0 ? pc->w : 1));
    if (!map || c->w < 2 || c->w % 2 || bsipipe_schedule_create(pc, &c->dims, &s) < 0) {
        printf("| — | needs an even w >= 2 | — | — | — | — |\n");
        free(map);
        bsipipe_schedule_destroy(s);
        return;
    }
    for (int naive = 0; naive < 2; naive++) {
        const char *name = naive ? "naive (consecutive devices)" : "topology-aware (mirrored pairs)";
        int mrc = c->mpi ? bsipipe_map_devices_to_ranks(pc, bsipipe_schedule_n_pipes(s), nodes, !naive, map)
                         : bsipipe_map_devices(pc, 2, c->w / 2, !naive, map);
        if (mrc < 0) {
            printf("| %s | %s | — | — | — | — | — |\n", name, bsipipe_error_detail());
            continue;
        }
        cost.device_node = map;
        bsipipe_sim_result_t *sim = NULL;
        char members[256] = "";
        size_t len = 0;
        for (int n = 0; n < nodes && len < sizeof members; n++)
            for (int d = 0, first = 1; d < c->w && len < sizeof members; d++)
                if (map[d] == n) {
                    int w = snprintf(members + len, sizeof members - len, "%s%d", first ? (n ? " / " : "") : ",", d);
                    len += w > 0 ? (size_t)w : 0;
                    first = 0;
                }
        if (bsipipe_simulate(s, &cost, &sim) == 0)
            printf("| %s | %s | %.2f%% | %.6g | %.2f | %.2f | %.0f |\n", name, members, 100 * sim->bubble_ratio,
                   sim->iteration_time, sim->act_bytes[1] / 1e6, sim->sync_bytes[1] / 1e6,
                   (double)c->m * c->dims.seq_len / sim->iteration_time);
        else
            printf("| %s | %s | %s | — | — | — | — |\n", name, members, bsipipe_error_detail());
        bsipipe_sim_result_destroy(sim);
    }
    free(map);
    bsipipe_schedule_destroy(s);
}

/* Emulated links (--node-devices): the bytes on each link class and the
 * time the gradient syncs add to the iteration, from the planner's
 * simulation of the plan on the links the engine emulated. */
static void print_link_traffic(const config_t *c, const row_t *rows, int nr)
{
    printf("\nTraffic per iteration on the emulated links (nodes of %d devices; the planner's count, the bytes the "
           "engine's SENDs and SYNCs were held for), and the time the gradient syncs add to the predicted "
           "iteration (the same links with syncs free):\n\n| variant | nodes | activations inside nodes MB | "
           "activations across nodes MB | gradient sync inside nodes MB | gradient sync across nodes MB | sync on "
           "the critical path ms | tokens/s predicted | measured / predicted |\n|---|---|---|---|---|---|---|---|---|\n",
           c->node_devices);
    for (int i = 0; i < nr; i++) {
        const row_t *r = &rows[i];
        if (r->status == 1 || !r->node_map)
            continue;
        char members[256] = "";
        size_t len = 0;
        for (int n = 0, more = 1; more && len < sizeof members - 16; n++) {
            more = 0;
            for (int d = 0, first = 1; d < r->pc.w && len < sizeof members - 16; d++)
                if (r->node_map[d] == n) {
                    len += (size_t)snprintf(members + len, sizeof members - len, "%s%d",
                                            first ? (n ? " / " : "") : ",", d);
                    first = 0;
                    more = 1;
                }
        }
        double pred_tok = r->pred_iter_s > 0 ? (double)c->m * c->dims.seq_len / r->pred_iter_s : NAN;
        double got = NAN, *tok = r->status == 0 && r->n_samples > 0 ? malloc(sizeof(double) * (size_t)r->n_samples)
                                                                       : NULL;
        if (tok) { /* median sorts: a copy */
            memcpy(tok, r->tok, sizeof(double) * (size_t)r->n_samples);
            got = median(tok, r->n_samples);
            free(tok);
        }
        printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.0f | %.3f |\n", r->v.label, members,
               r->pred_act_bytes[0] / 1e6, r->pred_act_bytes[1] / 1e6, r->pred_sync_bytes[0] / 1e6,
               r->pred_sync_bytes[1] / 1e6, r->pred_sync_exposed * 1e3, pred_tok, got / pred_tok);
    }
}

/* Bytes moved in each row's last iteration, counted by the engine (cross-rank
 * bytes when StarPU-MPI completes each send). */
static void print_traffic(const row_t *rows, int nr)
{
    printf("\nTraffic per iteration, MEASURED (last iteration; cross-rank bytes counted as StarPU-MPI completes "
           "each send):\n\n| variant | activations inside ranks MB | activations across ranks MB | gradient sync "
           "inside ranks MB | gradient sync across ranks MB |\n|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++)
        if (rows[i].status == 0)
            printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", rows[i].v.label, rows[i].act_bytes[0] / 1e6,
                   rows[i].act_bytes[1] / 1e6, rows[i].sync_bytes[0] / 1e6, rows[i].sync_bytes[1] / 1e6);
}

/* Lower-case letters and digits of `in`, other runs of characters as one '-'. */
static void slug(char *out, size_t len, const char *in)
{
    size_t n = 0;
    for (; *in && n + 1 < len; in++) {
        char ch = *in;
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))
            out[n++] = ch;
        else if (n > 0 && out[n - 1] != '-')
            out[n++] = '-';
    }
    while (n > 0 && out[n - 1] == '-')
        n--;
    out[n] = 0;
}

/* One untimed run of a row traced into `dir` (docs/tracing.md): FxT around
 * the engine's life, trace.json and the SVGs of its last iteration. A trace
 * that cannot be made is a warning; the benchmark's numbers stand. */
static void trace_row(const row_t *r, const config_t *c, const char *policy, int warmup, int iters, int seed,
                      const int *tokens, const int *targets, int n_data, const char *dir)
{
    if (bsipipe_trace_begin(dir) < 0) {
        fprintf(stderr, PROG ": warning: --trace: %s\n", bsipipe_error_detail());
        return;
    }
    bsipipe_engine_options_t o = engine_options(r, c, policy, seed);
    bsipipe_engine_t *e = NULL;
    long per = (long)c->m * c->dims.seq_len;
    int rc = bsipipe_engine_create(&o, &e);
    for (int it = 0; rc == 0 && it < warmup + iters; it++) {
        double loss, gnorm;
        rc = bsipipe_engine_iteration(e, tokens + (it % n_data) * per, targets + (it % n_data) * per, &loss, &gnorm);
    }
    /* planned.svg under the costs the table's prediction uses */
    bsipipe_cost_model_t cost = c->emulate ? bsipipe_cost_model_emulated(c->tflops * 1e12) : bsipipe_cost_model_unit();
    bsipipe_sim_result_t *planned = NULL;
    if (rc == 0 && bsipipe_simulate(bsipipe_engine_schedule(e), &cost, &planned) < 0)
        fprintf(stderr, PROG ": warning: --trace: no planned.svg: %s\n", bsipipe_error_detail());
    if (rc == 0)
        rc = bsipipe_engine_trace_write(e, dir, planned, &cost);
    bsipipe_sim_result_destroy(planned);
    char why[512] = "";
    if (rc < 0)
        snprintf(why, sizeof why, "%s", bsipipe_error_detail());
    bsipipe_engine_destroy(e); /* StarPU's shutdown writes the raw FxT trace */
    int trc = bsipipe_trace_end(dir);
    if (rc < 0)
        fprintf(stderr, PROG ": warning: traced run of %s failed, %s is incomplete: %s\n", r->v.label, dir, why);
    else if (trc < 0)
        fprintf(stderr, PROG ": warning: %s: no FxT files (trace.json and the SVGs are there): %s\n", dir,
                bsipipe_error_detail());
    else
        printf("trace: %s: %s (untimed run)\n", r->v.label, dir);
}

/* ---- output ----------------------------------------------------------------------------- */

static const char *mode_name(const config_t *c, char *buf, size_t len)
{
    if (c->emulate)
        snprintf(buf, len, "EMULATED %g TFLOP/s", c->tflops);
    else if (c->devices == BSIPIPE_DEVICES_CUDA)
        snprintf(buf, len, "REAL (CUDA workers, %s products)", c->precision ? c->precision : "fp32");
    else
        snprintf(buf, len, "REAL (CPU kernels)");
    return buf;
}

static void fmt_pct(char *buf, size_t len, double v)
{
    if (isinf(v)) snprintf(buf, len, "deadlock");
    else if (isnan(v)) snprintf(buf, len, "—");
    else snprintf(buf, len, "%.1f%%", 100 * v);
}

/* Per-task runtime overhead: (measured makespan - predicted) / ops per device,
 * the prediction at the emulated rate, or (real compute) at the rate the
 * devices reached in their measured busy time. Microseconds. */
static double overhead_us(const row_t *r, const config_t *c, double meas_makespan, double meas_busy)
{
    if (r->n_samples == 0 || isnan(r->pred_makespan_flops) || r->busy_flops <= 0)
        return NAN;
    double rate = c->emulate ? c->tflops * 1e12 : (meas_busy > 0 ? r->busy_flops / meas_busy : NAN);
    double pred = r->pred_makespan_flops / rate;
    return (meas_makespan - pred) / ((double)r->n_ops / c->w) * 1e6;
}

typedef struct summary {
    double tok_med, tok_min, tok_max, bub_med, mk_med, busy_med, ovh;
    double own_med;    /* median bubble of the plan simulated on each iteration's mean op times */
    double replay_med; /* ... on each op's own time (the iteration replayed) */
    double over_med;   /* median over iterations of measured minus replayed: the runtime's share */
} summary_t;

static summary_t summarize(const row_t *r, const config_t *c)
{
    summary_t s = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    int n = r->n_samples;
    if (n == 0)
        return s;
    double *tmp = malloc(sizeof(double) * (size_t)n);
    if (!tmp)
        return s;
    memcpy(tmp, r->tok, sizeof(double) * (size_t)n);
    s.tok_med = median(tmp, n);
    s.tok_min = tmp[0];
    s.tok_max = tmp[n - 1];
    memcpy(tmp, r->bubble, sizeof(double) * (size_t)n);
    s.bub_med = median(tmp, n);
    memcpy(tmp, r->makespan, sizeof(double) * (size_t)n);
    s.mk_med = median(tmp, n);
    memcpy(tmp, r->busy, sizeof(double) * (size_t)n);
    s.busy_med = median(tmp, n);
    int no = 0;
    for (int i = 0; i < n; i++)
        no += !isnan(r->own_bubble[i]) && !isnan(r->replay_bubble[i]);
    if (no == n) { /* every iteration has its own op times */
        memcpy(tmp, r->own_bubble, sizeof(double) * (size_t)n);
        s.own_med = median(tmp, n);
        memcpy(tmp, r->replay_bubble, sizeof(double) * (size_t)n);
        s.replay_med = median(tmp, n);
        for (int i = 0; i < n; i++)
            tmp[i] = r->bubble[i] - r->replay_bubble[i];
        s.over_med = median(tmp, n);
    }
    free(tmp);
    s.ovh = overhead_us(r, c, s.mk_med, s.busy_med);
    return s;
}

static void print_table(const config_t *c, row_t *rows, int nr, int reps, int iters)
{
    char mode[64];
    printf("\n### %s — %s\n\n", c->title, mode_name(c, mode, sizeof mode));
    printf("%s model L=%d hidden=%d heads=%d S=%d, w=%d, m=%d; %d repetitions x %d timed iteration(s), "
           "interleaved; predicted bubble: planner simulation of the same plan under FLOPs costs with %s "
           "(%s) and under unit costs (F=1, B=2); replayed: the same plan simulated on each op's own "
           "time in the timed iteration, the iteration as an ideal runtime would have run it; runtime's points: "
           "measured minus replayed, median over iterations (hand-offs, wake-ups, scheduling); on mean op times: "
           "the plan on the iteration's mean time per F/B/W, piece and chunk (replayed minus this: the ops' spread "
           "around their means); — with --mpi or --tp%s\n\n",
           c->dims.family == BSIPIPE_MODEL_LLAMA ? "LLaMA" : "GPT", c->dims.n_layers, c->dims.hidden,
           c->dims.n_heads, c->dims.seq_len, c->w, c->m, reps, iters,
           c->node_devices > 0 ? "transfers on the emulated links (the table under this one)" : "free transfers",
           (c->tp > 0 ? c->tp : bench_tp) > 1 ? "tensor-parallel collectives charged on the planner's intra-node link"
                                                : "rate-independent",
           c->emulate ? "; EMULATED: compute tasks sleep for their FLOPs, no loss is computed" : "");
    printf("| schedule | p | k | mode | tokens/s median (min, max) | bubble measured | replayed | runtime's "
           "points | on mean op times | predicted (FLOPs) | predicted (unit) | %speak act MiB min/med/max | vs Seq1F1B | vs Seq1F1B-I | "
           "overhead µs/task |\n",
           bench_calibrate ? "predicted (measured ops) | " : "");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n", bench_calibrate ? "---|" : "");
    for (int i = 0; i < nr; i++) {
        row_t *r = &rows[i];
        summary_t s = summarize(r, c);
        char pf[16], pu[16], bm[16], pm[24] = "", own[16], rp[16], over[16] = "—";
        fmt_pct(own, sizeof own, s.own_med);
        fmt_pct(rp, sizeof rp, s.replay_med);
        if (!isnan(s.over_med))
            snprintf(over, sizeof over, "%+.1f", 100 * s.over_med);
        fmt_pct(pf, sizeof pf, r->pred_bubble_flops);
        fmt_pct(pu, sizeof pu, r->pred_bubble_unit);
        if (bench_calibrate) {
            fmt_pct(pm, sizeof pm - 3, r->pred_bubble_measured);
            strcat(pm, " | ");
        }
        fmt_pct(bm, sizeof bm, s.bub_med);
        const char *md = c->emulate ? "emulated" : "real";
        if (r->n_samples == 0) {
            char brief[200];
            snprintf(brief, sizeof brief, "%s", r->error);
            if (strlen(r->error) >= sizeof brief - 1)
                snprintf(brief + sizeof brief - 6, 6, " ...");
            for (char *q = brief; *q; q++)
                if (*q == '|') *q = '/';
            printf("| %s | %d | %d | %s | %s: %s | — | — | — | — | %s | %s | %s— | — | — | — |\n", r->v.label, r->pc.p, r->pc.k,
                   md, r->status == 1 ? "SKIPPED" : strstr(r->error, "deadlock") ? "DEADLOCK" : "FAILED", brief, pf,
                   pu, pm);
            continue;
        }
        char s1[16] = "—", s2[16] = "—";
        if (!isnan(r->speedup[0])) snprintf(s1, sizeof s1, "%.2fx", r->speedup[0]);
        if (!isnan(r->speedup[1])) snprintf(s2, sizeof s2, "%.2fx", r->speedup[1]);
        char ov[16] = "—";
        if (!isnan(s.ovh)) snprintf(ov, sizeof ov, "%.0f", s.ovh);
        printf("| %s | %d | %d | %s | %.0f (%.0f, %.0f)%s | %s | %s | %s | %s | %s | %s | %s%.2f / %.2f / %.2f | %s | "
               "%s | %s |\n",
               r->v.label, r->pc.p, r->pc.k, md, s.tok_med, s.tok_min, s.tok_max,
               r->status == 2 ? " (then failed)" : "", bm, rp, over, own, pf, pu, pm, r->peak[0], r->peak[1], r->peak[2], s1, s2,
               ov);
    }
    for (int i = 0; i < nr; i++)
        if (rows[i].status == 2)
            printf("\n%s failed after %d sample(s): %s\n", rows[i].v.label, rows[i].n_samples, rows[i].error);
    fflush(stdout);
}

static void csv_field(FILE *f, double v)
{
    if (!isfinite(v)) fputs(",", f);
    else fprintf(f, ",%.6g", v);
}

static void write_csv_rows(FILE *f, const char *preset, const config_t *c, row_t *rows, int nr)
{
    for (int i = 0; i < nr; i++) {
        row_t *r = &rows[i];
        summary_t s = summarize(r, c);
        char err[400];
        snprintf(err, sizeof err, "%s", r->error);
        for (char *q = err; *q; q++)
            if (*q == '"' || *q == '\n') *q = '\'';
        fprintf(f, "%s,\"%s\",%s,%g,%s,%d,%d,%d,%d,%d,%d,%d,%d,%s,%s,%s,%d", preset, c->title,
                c->emulate ? "emulated" : "real", c->emulate ? c->tflops : 0,
                c->dims.family == BSIPIPE_MODEL_LLAMA ? "llama" : "gpt", c->dims.n_layers, c->dims.hidden,
                c->dims.n_heads, c->dims.seq_len, c->w, r->pc.p, r->pc.k, c->m, r->v.label,
                bsipipe_comm_order_name(r->v.comm),
                r->status == 0 ? "ok" : r->status == 1 ? "skipped" : r->n_samples ? "failed-partly" : "failed",
                r->n_samples);
        csv_field(f, s.tok_med); csv_field(f, s.tok_min); csv_field(f, s.tok_max);
        csv_field(f, s.bub_med); csv_field(f, r->pred_bubble_flops); csv_field(f, r->pred_bubble_unit);
        csv_field(f, s.mk_med);
        csv_field(f, c->emulate && !isnan(r->pred_makespan_flops) ? r->pred_makespan_flops / (c->tflops * 1e12)
                                                                  : NAN);
        csv_field(f, s.ovh);
        for (int j = 0; j < 3; j++)
            csv_field(f, r->n_samples ? r->peak[j] : NAN);
        csv_field(f, r->speedup[0]); csv_field(f, r->speedup[1]);
        csv_field(f, bench_calibrate ? r->pred_bubble_measured : NAN);
        csv_field(f, s.replay_med); csv_field(f, s.over_med); csv_field(f, s.own_med);
        fprintf(f, ",\"%s\"\n", err);
    }
}

static const char *const csv_header =
    "preset,config,mode,device_tflops,model,layers,hidden,heads,seq,w,p,k,m,schedule,comm,status,samples,"
    "tokens_s_median,tokens_s_min,tokens_s_max,bubble_measured_median,bubble_pred_flops,bubble_pred_unit,"
    "makespan_s_median,makespan_s_pred_emulated,overhead_us_per_task,peak_act_mib_min,peak_act_mib_median,"
    "peak_act_mib_max,speedup_vs_seq1f1b,speedup_vs_seq1f1b_i,bubble_pred_measured_ops,bubble_replayed_median,"
    "bubble_runtime_points_median,bubble_mean_ops_median,error\n";

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* One panel per configuration, stacked: a bar per schedule (median tokens/s)
 * with a min-max whisker, failures written where the bar would be. */
static void write_svg_panel(FILE *f, const config_t *c, row_t *rows, int nr, double y0, double width)
{
    const double ph = 300, left = 70, right = 20, top = 40, bottom = 60;
    double vmax = 0;
    summary_t *sm = malloc(sizeof *sm * (size_t)(nr > 0 ? nr : 1));
    if (!sm)
        return;
    for (int i = 0; i < nr; i++) {
        sm[i] = summarize(&rows[i], c);
        if (!isnan(sm[i].tok_max) && sm[i].tok_max > vmax) vmax = sm[i].tok_max;
    }
    if (vmax <= 0) vmax = 1;
    /* a round axis maximum */
    double mag = pow(10, floor(log10(vmax))), axis = ceil(vmax / mag) * mag;
    if (axis / mag > 5) axis = ceil(vmax / (2 * mag)) * 2 * mag;
    char mode[64];
    fprintf(f, "<g transform=\"translate(0,%g)\">\n<text x=\"%g\" y=\"22\" font-size=\"14\" font-weight=\"bold\">",
            y0, left);
    xml_text(f, c->title);
    fprintf(f, " — %s</text>\n", mode_name(c, mode, sizeof mode));
    double h = ph - top - bottom, x0 = left, x1 = width - right, bw = (x1 - x0) / (nr > 0 ? nr : 1);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, top, x0, top + h);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", x0, top + h, x1, top + h);
    for (int t = 0; t <= 4; t++) {
        double v = axis * t / 4, y = top + h - h * v / axis;
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>", x0, y, x1, y);
        fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n", x0 - 4, y + 3, v);
    }
    fprintf(f, "<text x=\"14\" y=\"%g\" font-size=\"11\" transform=\"rotate(-90 14 %g)\" "
               "text-anchor=\"middle\">tokens/s</text>\n", top + h / 2, top + h / 2);
    for (int i = 0; i < nr; i++) {
        double cx = x0 + bw * (i + 0.5);
        const char *fill = rows[i].v.kind == BSIPIPE_SCHED_BSIPIPE ? "#d62728"
                         : (rows[i].v.kind == BSIPIPE_SCHED_SEQ1F1B || rows[i].v.kind == BSIPIPE_SCHED_SEQ1F1B_I)
                               ? "#1f77b4" : "#7f7f7f";
        if (rows[i].n_samples > 0) {
            double y = top + h - h * sm[i].tok_med / axis;
            double ylo = top + h - h * sm[i].tok_min / axis, yhi = top + h - h * sm[i].tok_max / axis;
            fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"%s\"/>\n", cx - bw * 0.35, y,
                    bw * 0.7, top + h - y, fill);
            fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>", cx, ylo, cx, yhi);
            fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>", cx - 5, ylo, cx + 5, ylo);
            fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", cx - 5, yhi, cx + 5,
                    yhi);
            fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"9\" text-anchor=\"middle\">%.0f</text>\n", cx, yhi - 4,
                    sm[i].tok_med);
        } else {
            fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"10\" fill=\"#b00\" text-anchor=\"middle\">%s</text>\n", cx,
                    top + h - 8, strstr(rows[i].error, "deadlock") ? "deadlock" : rows[i].status == 1 ? "skipped"
                                                                                                      : "failed");
        }
        fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"10\" text-anchor=\"middle\">", cx, top + h + 14);
        xml_text(f, rows[i].v.label);
        fprintf(f, "</text><text x=\"%g\" y=\"%g\" font-size=\"9\" fill=\"#555\" text-anchor=\"middle\">p%d k%d</text>\n",
                cx, top + h + 26, rows[i].pc.p, rows[i].pc.k);
    }
    fputs("</g>\n", f);
    free(sm);
}


/* --idle-breakdown: where each schedule's measured idle time goes. */
static void print_idle(const row_t *rows, int nr)
{
    printf("\nWhere the idle goes (--idle-breakdown; medians over the timed iterations): a device's idle time, "
           "in ms per device and iteration, by the kind of op it was waiting to start (tail: after its last op "
           "until the iteration's last op ends); slowdown spread: each device's F/B/W time over its planned "
           "share, the slowest device's over the fastest one's (the plan's work ratio taken out: a spread is the "
           "machine's noise, which coupled devices turn into waiting); slowest device idle: its idle share of "
           "the span, the idle the iteration time pays for; gap after own op / after a hand-off: the runtime's "
           "mean time, in µs, from the moment a compute op could start to its start, when the last thing it "
           "waited for was its device's previous compute op / an input from another device.\n\n");
    printf("| schedule |");
    for (int k = 0; k < IDLE_KINDS; k++)
        printf(" %s |", idle_names[k]);
    printf(" slowdown spread | slowest device idle | gap after own op µs | gap after a hand-off µs |\n|---|");
    for (int k = 0; k < IDLE_KINDS + 4; k++)
        printf("---|");
    printf("\n");
    for (int i = 0; i < nr; i++) {
        const row_t *r = &rows[i];
        int n = r->n_samples;
        double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
        printf("| %s |", r->v.label);
        for (int k = 0; k < IDLE_KINDS + 4; k++) {
            int m_n = 0; /* medians over the samples that have the value */
            for (int j = 0; v && j < n; j++) {
                double x = k < IDLE_KINDS ? r->idle[(long)j * IDLE_SLOTS + k]
                           : k == IDLE_KINDS ? r->spread[j]
                           : k == IDLE_KINDS + 1 ? r->slow_idle[j]
                                                 : r->idle[(long)j * IDLE_SLOTS + GAP_LOCAL + (k - IDLE_KINDS - 2)];
                if (!isnan(x))
                    v[m_n++] = x;
            }
            double m = m_n > 0 ? median(v, m_n) : NAN;
            if (isnan(m))
                printf(" — |");
            else if (k < IDLE_KINDS)
                printf(" %.2f |", m);
            else if (k < IDLE_KINDS + 2)
                printf(" %.1f%% |", 100 * m);
            else
                printf(" %.0f |", m);
        }
        printf("\n");
        free(v);
    }
}

/* ---- --preset tp: the paper's Table 3 ---------------------------------------------------- */

/* One configuration's line: measured (medians) and predicted. */
typedef struct tp_line {
    int ok;
    double tok, tok_pred, bub, bub_pred, act, act_pred, params;
} tp_line_t;

static void tp_line_fill(tp_line_t *l, const config_t *c, const row_t *r)
{
    summary_t s = summarize(r, c);
    int T = r->pc.tp;
    memset(l, 0, sizeof *l);
    if (r->n_samples == 0 || isnan(r->pred_makespan_flops))
        return;
    l->ok = 1;
    l->tok = s.tok_med;
    l->tok_pred = (double)c->m * c->dims.seq_len / (r->pred_makespan_flops / (c->tflops * 1e12));
    l->bub = s.bub_med;
    l->bub_pred = r->pred_bubble_flops;
    l->act = r->peak[2] * 1048576.0 / T; /* a device's peak is its TP ranks' sum */
    l->act_pred = r->pred_act;
    l->params = r->pred_params;
}

/* Side by side: measured and predicted throughput and per-GPU memory of the
 * three configurations, with what the paper's Table 3 reports. The paper's
 * text gives GPT's peak memory at (16,1) and (4,4) and the ordering of the
 * throughputs; its throughput numbers are in the table's image only. */
static void print_tp_table(const config_t *cfg, const tp_line_t *l, int nc, const char *label)
{
    static const char *const paper[3] = {"60.1 GiB (GPT); 2nd", "fastest", "18.4 GiB (GPT); slowest"};
    const double mib = 1048576.0;
    printf("\n### Table 3 at this machine's scale: %s on %d emulated GPUs (%g TFLOP/s each; TP collectives on the "
           "planner's intra-node link, 300 GB/s, 5 us)\n\n", label, cfg[0].w * (cfg[0].tp ? cfg[0].tp : 1),
           cfg[0].tflops);
    printf("| (w, D_t) | tokens/s measured | predicted | measured / predicted | bubble measured | predicted | "
           "peak act MiB/GPU measured | predicted | params+moments MiB/GPU (planner) | paper (16 GPUs: (16,1), "
           "(8,2), (4,4)) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nc; i++) {
        const config_t *c = &cfg[i];
        if (!l[i].ok) {
            printf("| (%d, %d) | not measured (see above) | | | | | | | | %s |\n", c->w, c->tp, paper[i]);
            continue;
        }
        printf("| (%d, %d) | %.0f | %.0f | %.2f | %.1f%% | %.1f%% | %.2f | %.2f | %.2f | %s |\n", c->w, c->tp,
               l[i].tok, l[i].tok_pred, l[i].tok / l[i].tok_pred, 100 * l[i].bub, 100 * l[i].bub_pred,
               l[i].act / mib, l[i].act_pred / mib, l[i].params / mib, paper[i]);
    }
    printf("\npaper (Table 3, 16 A800 GPUs, 2 nodes of 8, S = 20K, 64 micro-batches): (8,2) fastest, slightly "
           "above (16,1); (4,4) slowest, its TP traffic partly crossing nodes; peak memory about halving with each "
           "doubling of D_t (GPT 60.1 GiB at (16,1), 18.4 GiB at (4,4)). Here one node: every TP group is "
           "intra-node, so only the bubble and the collectives' intra-node charge set the order.\n");
    fflush(stdout);
}

/* ---- --overhead ------------------------------------------------------------------------- */

enum { OV_SHIPPED, OV_FLOOR, OV_PROF, OV_FRESH, OV_POOLED, OV_ENGINE, OV_ENGINE_FRESH, OV_BLOCKING, OV_N };
static const char *const ov_label[OV_N] = {
    "StarPU floor as StarPU 1.3 ships it (its last awake worker polls)",
    "StarPU floor: same task shapes, empty codelets, buffers registered once",
    "+ StarPU task profiling and the engine's per-task callback",
    "+ per-iteration buffers (registered each iteration, allocated at first write)",
    "+ the engine's buffers instead, reused (per-device pools, registered once)",
    "engine (--emulate): codelets, transport copies, accounting; buffers reused",
    "engine, per-iteration buffers (before: no reuse)",
    "engine, old blocking SEND (waits on its worker)",
};

typedef struct ov_sample {
    double wall[1000], sub[1000];
    int n;
    bsipipe_engine_overhead_t last;
    double xfer_ms[1000], wait_ms[1000];
} ov_sample_t;

static int ov_run(bsipipe_engine_t *e, int v, int emulate_time, const int *tok, const int *tgt,
                  bsipipe_engine_overhead_t *o)
{
    int rc;
    int reuse = bsipipe_engine_buffer_reuse(e);
    bsipipe_engine_set_blocking_send(e, v == OV_BLOCKING);
    if (v == OV_ENGINE_FRESH)
        bsipipe_engine_set_buffer_reuse(e, 0);
    if (v >= OV_ENGINE) {
        double loss, gn;
        rc = bsipipe_engine_iteration(e, tok, tgt, &loss, &gn);
        if (rc == 0)
            rc = bsipipe_engine_last_overhead(e, o);
    } else {
        int fl = (v >= OV_PROF ? BSIPIPE_FLOOR_PROFILE : 0) | (v == OV_FRESH ? BSIPIPE_FLOOR_FRESH : 0) |
                 (v == OV_POOLED ? BSIPIPE_FLOOR_POOLED : 0) | (emulate_time ? BSIPIPE_FLOOR_EMULATE : 0) |
                 (v == OV_SHIPPED ? BSIPIPE_FLOOR_STARPU_POLL : 0);
        rc = bsipipe_engine_floor_iteration(e, fl, o);
    }
    bsipipe_engine_set_blocking_send(e, 0);
    if (reuse)
        bsipipe_engine_set_buffer_reuse(e, 1);
    return rc;
}

static double ov_per(double v, long n) { return n > 0 ? v / (double)n : NAN; }

/* One table: an engine of the plan, the variants interleaved over reps. */
static int run_overhead(const config_t *c, const row_t *r, const char *policy, int reps, int iters, int zero_time,
                        const int *tok, const int *tgt)
{
    config_t cf = *c;
    cf.emulate = 1;
    if (zero_time)
        cf.tflops = 1e6;
    bsipipe_engine_options_t o = engine_options(r, &cf, policy, 1);
    bsipipe_engine_t *e = NULL;
    if (bsipipe_engine_create(&o, &e) < 0 || (r->v.sends && bsipipe_engine_set_eager_send(e, r->v.sends == 1) < 0)) {
        fprintf(stderr, PROG ": --overhead: %s\n", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return 1;
    }
    static ov_sample_t smp[OV_N];
    memset(smp, 0, sizeof smp);
    int rc = 0;
    for (int v = 0; v < OV_N && rc == 0; v++) { /* warm-up: StarPU's allocation cache, the emulation margins */
        bsipipe_engine_overhead_t ov;
        rc = ov_run(e, v, !zero_time, tok, tgt, &ov);
    }
    for (int rep = 0; rep < reps && rc == 0; rep++)
        for (int v = 0; v < OV_N && rc == 0; v++)
            for (int it = 0; it < iters && rc == 0; it++) {
                bsipipe_engine_overhead_t ov;
                if ((rc = ov_run(e, v, !zero_time, tok, tgt, &ov)) < 0)
                    break;
                ov_sample_t *s = &smp[v];
                if (s->n < 1000) {
                    s->wall[s->n] = ov.wall_s;
                    s->sub[s->n] = ov.submit_s;
                    s->xfer_ms[s->n] = ov.xfer_body_us * 1e-3;
                    s->wait_ms[s->n] = ov.send_wait_us * 1e-3;
                    s->n++;
                }
                s->last = ov;
            }
    if (rc < 0) {
        fprintf(stderr, PROG ": --overhead: %s\n", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        return 1;
    }
    double pred_s = zero_time ? 0 : r->pred_makespan_flops / (c->tflops * 1e12);
    double ops_per_dev = (double)r->n_ops / c->w;
    printf("\n**%s, w = %d, %s, %s** (%ld tasks per iteration, %.0f ops per device; median of %d iterations)\n\n",
           bsipipe_schedule_kind_name(r->pc.schedule), c->w,
           bsipipe_engine_eager_send(e) ? "eager sends (no SEND tasks but the blocking row's)" : "a SEND task per transfer",
           zero_time ? "no device time (every F/B/W lasts ~0 s: all of the wall time is runtime)"
                     : "with emulated device time",
           smp[OV_FLOOR].last.n_tasks, ops_per_dev, smp[OV_FLOOR].n);
    if (!zero_time)
        printf("Predicted makespan %.1f ms (FLOPs at %g TFLOP/s, free transfers). Overhead per task = (wall - "
               "predicted) / ops per device.\n\n", pred_s * 1e3, c->tflops);
    printf("| run | wall ms/iter | %s | x floor | submission µs/task | push | pop | fetch input | codelet | "
           "release | SEND+RECV worker time ms/iter (per transfer µs) | SENDs waiting on workers ms/iter |\n",
           zero_time ? "µs/task (wall / tasks)" : "overhead µs/task");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    double floor_wall = median(smp[OV_FLOOR].wall, smp[OV_FLOOR].n); /* the ratios are to this row */
    double floor_cost = zero_time ? floor_wall * 1e6 / (double)smp[OV_FLOOR].last.n_tasks
                                  : (floor_wall - pred_s) * 1e6 / ops_per_dev;
    for (int v = 0; v < OV_N; v++) {
        ov_sample_t *s = &smp[v];
        const bsipipe_engine_overhead_t *l = &s->last;
        double wall = median(s->wall, s->n), sub = median(s->sub, s->n), xfer = median(s->xfer_ms, s->n),
               wait = median(s->wait_ms, s->n);
        double cost = zero_time ? wall * 1e6 / (double)l->n_tasks : (wall - pred_s) * 1e6 / ops_per_dev;
        long np = l->n_profiled;
        char ph[5][32];
        double phv[5] = {l->push_us, l->pop_us, l->fetch_us, l->body_us, l->release_us};
        for (int k = 0; k < 5; k++) {
            if (np > 0)
                snprintf(ph[k], sizeof ph[k], "%.1f", ov_per(phv[k], np));
            else
                snprintf(ph[k], sizeof ph[k], "—");
        }
        char xf[64];
        if (np > 0)
            snprintf(xf, sizeof xf, "%.2f (%.1f)", xfer, ov_per(xfer * 1e3, l->n_xfer));
        else
            snprintf(xf, sizeof xf, "—");
        char wt[32];
        if (v >= OV_ENGINE)
            snprintf(wt, sizeof wt, "%.2f", wait);
        else
            snprintf(wt, sizeof wt, "—");
        printf("| %s | %.2f | %.1f | %.2fx | %.1f | %s | %s | %s | %s | %s | %s | %s |\n", ov_label[v], wall * 1e3,
               cost, cost / floor_cost, sub * 1e6 / (double)l->n_tasks, ph[0], ph[1], ph[2], ph[3], ph[4], xf, wt);
    }
    printf("\n(x floor: against the second row, the floor under the engine's StarPU settings (its last awake "
           "worker sleeps like the others, unless BSIPIPE_STARPU_POLL=1); push ... release: µs per task from "
           "StarPU's task profiling, only where it is on; codelet includes the emulated device time when there is "
           "some.)\n");
    double *held = calloc((size_t)c->w, sizeof *held);
    if (held && bsipipe_engine_buffer_bytes(e, held) == 0) {
        double most = 0;
        for (int d = 0; d < c->w; d++)
            most = held[d] > most ? held[d] : most;
        printf("(Reused buffers: the pools hold at most %.1f MiB on a device, StarPU's memory kept from one "
               "iteration to the next; the planner's peak activation memory, counted apart, is unchanged.)\n",
               most / (1 << 20));
    }
    free(held);
    fflush(stdout);
    bsipipe_engine_destroy(e);
    return 0;
}

/* ---- main ------------------------------------------------------------------------------- */

#define MAX_VARIANTS 32
#define MAX_CONFIGS 4

/* One row per (variant, mode) of an option with two modes (--sends,
 * --buffers), labelled "[<mode> ...]"; nothing when the option was not
 * given. 0, or -1 after printing the error. */
static int expand_modes(variant_t *var, int *nv, const char *opt, const int modes[2], int nmodes, size_t field,
                        const char *fmt, const char *const label[2])
{
    if (nmodes <= 1 && modes[0] == 0)
        return 0;
    if (*nv * nmodes > MAX_VARIANTS) {
        fprintf(stderr, PROG ": %d rows x %d %s modes is more than %d rows; name fewer schedules\n", *nv, nmodes, opt,
                MAX_VARIANTS);
        return -1;
    }
    variant_t base_var[MAX_VARIANTS];
    memcpy(base_var, var, sizeof base_var);
    int n = 0;
    for (int i = 0; i < *nv; i++)
        for (int j = 0; j < nmodes; j++) {
            var[n] = base_var[i];
            *(int *)((char *)&var[n] + field) = modes[j];
            char mode[24];
            snprintf(mode, sizeof mode, fmt, label[modes[j] - 1]);
            snprintf(var[n].label, sizeof var[n].label, "%.36s [%.22s]", base_var[i].label, mode);
            n++;
        }
    *nv = n;
    return 0;
}

int main(int argc, char **argv)
{
    if (!getenv("STARPU_SILENT"))
        setenv("STARPU_SILENT", "1", 0);
    /* A StarPU built with FxT records every run by default (into /tmp), which
     * costs time per task: off unless the user's environment asks for it
     * (--trace turns it on for its own runs). */
    setenv("STARPU_FXT_TRACE", "0", 0);
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 128, 4, 0, 256, 256};
    int w = 4, p = -1, k = -1, m = 8, reps = 3, warmup = 1, iters = 1, seed = 1, emulate = 0;
    int set_w = 0, set_m = 0, set_layers = 0, set_seq = 0, set_watchdog = 0, mpi = 0, gpus = 0;
    int set_reps = 0, set_iters = 0, overhead = 0, set_tflops = 0;
    int spins[MAX_SPINS] = {0}, nspin = 1; /* --idle-spin: options.idle_spin_us per row set */
    int sends[2] = {0}, nsends = 1;      /* --sends: variant.sends per row set (0: the engine's default) */
    int buffers[2] = {0}, nbuffers = 1;  /* --buffers: variant.buffers per row set */
    const char *layouts[2] = {NULL, NULL}; /* --layout, at most twice ("even": NULL) */
    int nlayouts = 0;
    int recv_blocking = 0, recv_in_place = 0, set_recv = 0; /* --recv */
    bsipipe_engine_devices_t devices = BSIPIPE_DEVICES_CPU;
    double tflops = 0.01, watchdog = 30, inter_bandwidth = 0, inter_latency = -1, intra_bandwidth = 0, intra_latency = -1;
    int node_devices = 0, shared_nic = 0, mapping = 0; /* --node-devices, --nic, --mapping (0 aware, 1 naive, 2 both) */
    const char *policy = "bsipipe", *csv = NULL, *svg = NULL, *preset = NULL, *schedules = NULL,
               *trace = NULL, *precision = NULL;
    bsipipe_comm_order_t comm = BSIPIPE_COMM_BSIPIPE;
    enum { O_SCHEDS = 256, O_REPS, O_WARMUP, O_ITERS, O_W, O_P, O_K, O_M, O_POLICY, O_COMM, O_WATCHDOG, O_MODEL,
           O_LAYERS, O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_SEED, O_EMULATE, O_TFLOPS, O_PRESET, O_CSV, O_SVG, O_TRACE,
           O_MPI, O_DEVICES, O_GPUS, O_PRECISION, O_OVERHEAD, O_TP, O_TP_COLL, O_IDLE_SPIN, O_IDLE_BREAKDOWN, O_RECV, O_CALIBRATE, O_SENDS, O_BUFFERS, O_LAYOUT, O_VOCAB, O_INTER_LINK, O_INTRA_LINK, O_NODE_DEVICES, O_NIC, O_MAPPING };
    static const struct option longopts[] = {
        {"schedules", 1, 0, O_SCHEDS}, {"reps", 1, 0, O_REPS}, {"warmup", 1, 0, O_WARMUP},
        {"iters", 1, 0, O_ITERS}, {"w", 1, 0, O_W}, {"p", 1, 0, O_P}, {"k", 1, 0, O_K}, {"m", 1, 0, O_M},
        {"policy", 1, 0, O_POLICY}, {"comm", 1, 0, O_COMM}, {"watchdog", 1, 0, O_WATCHDOG},
        {"model", 1, 0, O_MODEL}, {"layers", 1, 0, O_LAYERS}, {"hidden", 1, 0, O_HIDDEN},
        {"heads", 1, 0, O_HEADS}, {"ffn", 1, 0, O_FFN}, {"seq", 1, 0, O_SEQ}, {"seed", 1, 0, O_SEED},
        {"emulate", 0, 0, O_EMULATE}, {"device-tflops", 1, 0, O_TFLOPS}, {"preset", 1, 0, O_PRESET},
        {"csv", 1, 0, O_CSV}, {"svg", 1, 0, O_SVG}, {"trace", 1, 0, O_TRACE}, {"mpi", 0, 0, O_MPI}, {"devices", 1, 0, O_DEVICES}, {"gpus", 1, 0, O_GPUS},
        {"precision", 1, 0, O_PRECISION}, {"overhead", 0, 0, O_OVERHEAD}, {"tp", 1, 0, O_TP}, {"tp-collectives", 1, 0, O_TP_COLL}, {"idle-spin", 1, 0, O_IDLE_SPIN}, {"sends", 1, 0, O_SENDS}, {"buffers", 1, 0, O_BUFFERS}, {"layout", 1, 0, O_LAYOUT}, {"vocab", 1, 0, O_VOCAB}, {"idle-breakdown", 0, 0, O_IDLE_BREAKDOWN}, {"recv", 1, 0, O_RECV},
        {"calibrate", 0, 0, O_CALIBRATE}, {"inter-link", 1, 0, O_INTER_LINK}, {"intra-link", 1, 0, O_INTRA_LINK},
        {"node-devices", 1, 0, O_NODE_DEVICES}, {"nic", 1, 0, O_NIC}, {"mapping", 1, 0, O_MAPPING},
        {"version", 0, 0, 'V'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, bad = 0;
    opterr = 0;
    while (!bad && (c = cli_getopt(argc, argv, "h", longopts, PROG)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': cli_print_version(PROG); return 0;
        case O_SCHEDS: schedules = optarg; break;
        case O_REPS: bad = cli_parse_int(PROG, "--reps", optarg, 1, 1000, &reps); set_reps = 1; break;
        case O_WARMUP: bad = cli_parse_int(PROG, "--warmup", optarg, 0, 1000, &warmup); break;
        case O_ITERS: bad = cli_parse_int(PROG, "--iters", optarg, 1, 1000, &iters); set_iters = 1; break;
        case O_OVERHEAD: overhead = 1; break;
        case O_CALIBRATE: bench_calibrate = 1; break;
        case O_W: bad = cli_parse_int(PROG, "--w", optarg, 1, 64, &w); set_w = 1; break;
        case O_P: bad = cli_parse_int(PROG, "--p", optarg, 1, 64, &p); break;
        case O_K: bad = cli_parse_int(PROG, "--k", optarg, 1, 4096, &k); break;
        case O_M: bad = cli_parse_int(PROG, "--m", optarg, 1, 4096, &m); set_m = 1; break;
        case O_TP: bad = cli_parse_int(PROG, "--tp", optarg, 1, 64, &bench_tp); break;
        case O_TP_COLL:
            if (strcmp(optarg, "one-task") == 0)
                bench_tp_coll = BSIPIPE_TP_COLL_ONE_TASK;
            else if (strcmp(optarg, "per-rank") == 0)
                bench_tp_coll = BSIPIPE_TP_COLL_PER_RANK;
            else {
                fprintf(stderr, PROG ": --tp-collectives expects one-task or per-rank, not '%s'\n", optarg);
                return 2;
            }
            break;
        case O_RECV:
            set_recv = 1;
            if (cli_parse_recv(PROG, optarg, &recv_blocking, &recv_in_place) < 0)
                return 2;
            break;
        case O_IDLE_BREAKDOWN: bench_idle = 1; break;
        case O_IDLE_SPIN:
            if ((nspin = parse_spins(optarg, spins)) < 0)
                return 2;
            break;
        case O_BUFFERS:
            if ((nbuffers = parse_modes("--buffers", optarg, buffers_names, buffers)) < 0)
                return 2;
            break;
        case O_LAYOUT:
            if (nlayouts == 2) {
                fprintf(stderr, PROG ": --layout given more than twice; compare two layouts at a time\n");
                return 2;
            }
            layouts[nlayouts++] = strcmp(optarg, "even") == 0 ? NULL : optarg;
            break;
        case O_SENDS:
            if ((nsends = parse_modes("--sends", optarg, sends_names, sends)) < 0)
                return 2;
            break;
        case O_POLICY: policy = optarg; break;
        case O_COMM:
            if (bsipipe_comm_order_parse(optarg, &comm) < 0) {
                fprintf(stderr, PROG ": %s\n", bsipipe_error_detail());
                return 2;
            }
            break;
        case O_WATCHDOG: bad = cli_parse_double(PROG, "--watchdog", optarg, 0.01, 86400, &watchdog); set_watchdog = 1; break;
        case O_MODEL:
            if (strcmp(optarg, "gpt") == 0) dims.family = BSIPIPE_MODEL_GPT;
            else if (strcmp(optarg, "llama") == 0) dims.family = BSIPIPE_MODEL_LLAMA;
            else { fprintf(stderr, PROG ": --model expects 'gpt' or 'llama', got '%s'\n", optarg); return 2; }
            break;
        case O_LAYERS: bad = cli_parse_int(PROG, "--layers", optarg, 1, 4096, &dims.n_layers); set_layers = 1; break;
        case O_HIDDEN: bad = cli_parse_int(PROG, "--hidden", optarg, 1, 65536, &dims.hidden); break;
        case O_HEADS: bad = cli_parse_int(PROG, "--heads", optarg, 1, 4096, &dims.n_heads); break;
        case O_FFN: bad = cli_parse_int(PROG, "--ffn", optarg, 1, 1 << 20, &dims.ffn_hidden); break;
        case O_SEQ: bad = cli_parse_int(PROG, "--seq", optarg, 1, 1 << 20, &dims.seq_len); set_seq = 1; break;
        case O_VOCAB: bad = cli_parse_int(PROG, "--vocab", optarg, 2, 1 << 24, &dims.vocab); break;
        case O_INTER_LINK: bad = cli_parse_link(PROG, "--inter-link", optarg, &inter_bandwidth, &inter_latency); break;
        case O_INTRA_LINK: bad = cli_parse_link(PROG, "--intra-link", optarg, &intra_bandwidth, &intra_latency); break;
        case O_NODE_DEVICES: bad = cli_parse_int(PROG, "--node-devices", optarg, 1, 4096, &node_devices); break;
        case O_NIC:
            if (strcmp(optarg, "per-device") == 0) shared_nic = 0;
            else if (strcmp(optarg, "shared") == 0) shared_nic = 1;
            else {
                fprintf(stderr, PROG ": --nic expects per-device (each device has its own inter-node link) or "
                                "shared (the devices of a node share one), got '%s'\n", optarg);
                bad = 1;
            }
            break;
        case O_MAPPING:
            if (strcmp(optarg, "aware") == 0) mapping = 0;
            else if (strcmp(optarg, "naive") == 0) mapping = 1;
            else if (strcmp(optarg, "both") == 0) mapping = 2;
            else {
                fprintf(stderr, PROG ": --mapping expects aware (mirrored pairs on one node), naive (consecutive "
                                "devices) or both (every row under each, side by side), got '%s'\n", optarg);
                bad = 1;
            }
            break;
        case O_SEED: bad = cli_parse_int(PROG, "--seed", optarg, 0, 1 << 30, &seed); break;
        case O_EMULATE: emulate = 1; break;
        case O_TFLOPS: bad = cli_parse_double(PROG, "--device-tflops", optarg, 1e-6, 1e6, &tflops); set_tflops = 1; break;
        case O_PRESET: preset = optarg; break;
        case O_CSV: csv = optarg; break;
        case O_SVG: svg = optarg; break;
        case O_TRACE: trace = optarg; break;
        case O_MPI: mpi = 1; break;
        case O_DEVICES:
            if (bsipipe_engine_devices_parse(optarg, &devices) < 0) {
                fprintf(stderr, PROG ": --devices: %s\n", bsipipe_error_detail());
                return 2;
            }
            break;
        case O_GPUS: bad = cli_parse_int(PROG, "--gpus", optarg, 1, 64, &gpus); break;
        case O_PRECISION:
            if (bsipipe_engine_precision_check(optarg) < 0) {
                fprintf(stderr, PROG ": --precision: %s\n", bsipipe_error_detail());
                return 2;
            }
            precision = optarg;
            break;
        default:
            return cli_bad_option(PROG, argv[optind - 1]);
        }
    }
    if (bad)
        return 2;
    if (cli_no_operands(PROG, argc, argv, optind))
        return 2;
    if (preset && strcmp(preset, "seqlen") && strcmp(preset, "devices") && strcmp(preset, "ablation") &&
        strcmp(preset, "tp")) {
        fprintf(stderr, PROG ": unknown preset '%s' (seqlen, devices, ablation, tp)\n", preset);
        return 2;
    }
    int is_tp = preset && strcmp(preset, "tp") == 0;
    if (is_tp && bench_tp > 1) {
        fprintf(stderr, PROG ": --preset tp sets the tensor-parallel degree itself (1, 2, 4); drop --tp\n");
        return 2;
    }
    if (is_tp && !set_w)
        w = 8;
    if (is_tp && !set_tflops) /* ops long enough that the runtime's per-task cost stays a few % */
        tflops = 0.002;
    if (is_tp && (w < 8 || w % 4 || w > 64)) {
        fprintf(stderr, PROG ": --preset tp: --w is the number of emulated devices w x D_t, a multiple of 4 from 8 "
                        "to 64 (default 8), got %d\n", w);
        return 2;
    }
    if (is_tp && (mpi || devices != BSIPIPE_DEVICES_CPU)) {
        fprintf(stderr, PROG ": --preset tp runs emulated CPU devices in one process (no --mpi, --devices cuda)\n");
        return 2;
    }
    /* Under mpirun every rank runs this program: without --mpi each would
     * bench alone on shared cores. Rank 0 speaks for the job. */
    const char *world = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    const char *rank_env = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
    int rank = mpi && rank_env ? atoi(rank_env) : 0;
    if (!mpi && world && atoi(world) > 1) {
        fprintf(stderr, PROG ": started by mpirun with %s ranks but without --mpi; add --mpi so the ranks share "
                        "each engine\n", world);
        return 2;
    }
    if (devices == BSIPIPE_DEVICES_CUDA && bsipipe_cuda_device_count() <= 0) {
        fprintf(stderr, PROG ": no CUDA device found; run with --devices cpu%s\n",
                bsipipe_cuda_compiled() ? "" : " (libbsipipe was built without CUDA)");
        return 1;
    }
    if (bench_calibrate && (mpi || bench_tp > 1 || is_tp || overhead)) {
        fprintf(stderr, PROG ": --calibrate measures op times in one process without tensor parallelism (no --mpi, "
                        "--tp, --preset tp, --overhead)\n");
        return 2;
    }
    if (node_devices > 0 && (!emulate || mpi || overhead)) {
        fprintf(stderr, PROG ": --node-devices emulates the links of a cluster in one process: it needs --emulate, "
                        "and neither --mpi (the ranks' links are real) nor --overhead\n");
        return 2;
    }
    if (node_devices == 0 && (mapping || (shared_nic && !mpi) || intra_bandwidth > 0)) {
        fprintf(stderr, PROG ": --mapping, --nic and --intra-link describe emulated links: add --node-devices G "
                        "(and --emulate); --nic also describes the ranks' links under --mpi\n");
        return 2;
    }
    if (mpi && bench_idle) {
        fprintf(stderr, PROG ": --idle-breakdown is not supported with --mpi (each rank holds only its own records); "
                        "run it in a single process\n");
        return 2;
    }
    if (mpi && trace) {
        fprintf(stderr, PROG ": --trace is not supported with --mpi yet; trace a single process\n");
        return 2;
    }
    if (rank != 0) {
        csv = svg = NULL; /* rank 0 writes the files */
        if (!freopen("/dev/null", "w", stdout))
            fprintf(stderr, PROG ": rank %d: cannot silence stdout\n", rank);
    }
    if (dims.ffn_hidden == 0)
        dims.ffn_hidden = 4 * dims.hidden;

    if (overhead) {
        if (preset || mpi || trace || devices != BSIPIPE_DEVICES_CPU || csv || svg) {
            fprintf(stderr, PROG ": --overhead runs alone, on CPU devices in one process (no --preset, --mpi, "
                            "--trace, --devices cuda, --csv, --svg)\n");
            return 2;
        }
        if (buffers[0]) {
            fprintf(stderr, PROG ": --overhead measures both buffer modes side by side (its rows \"buffers reused\" "
                            "and \"per-iteration buffers\"): drop --buffers\n");
            return 2;
        }
        if (nsends > 1) {
            fprintf(stderr, PROG ": --overhead measures one send mode (the floor takes the engine's task "
                            "shapes): give --sends eager or --sends tasks\n");
            return 2;
        }
        bsipipe_schedule_kind_t kd = BSIPIPE_SCHED_BSIPIPE;
        if (schedules) {
            char one[64];
            snprintf(one, sizeof one, "%.*s", (int)strcspn(schedules, ","), schedules);
            if (bsipipe_schedule_kind_parse(one, &kd) < 0) {
                fprintf(stderr, PROG ": --schedules: %s\n", bsipipe_error_detail());
                return 2;
            }
        }
        if (!set_reps) reps = 3;
        if (!set_iters) iters = 2;
        if (!set_layers) dims.n_layers = 32;
        int ws[2] = {2, 8}, nw = 2;
        if (set_w) { ws[0] = w; nw = 1; }
        printf("# bsipipe-bench --overhead: EMULATED device time; policy %s; StarPU's floor for the engine's task "
               "shapes against the engine, side by side in one process (%d repetitions x %d iterations, "
               "interleaved)\n", policy, reps, iters);
        int st = 0;
        for (int wi = 0; wi < nw && st == 0; wi++) {
            config_t cf = {"", dims, ws[wi], set_m ? m : (ws[wi] > 8 ? ws[wi] : 8), 1, tflops, 0, watchdog, 0,
                           devices, gpus, precision, 0, 1, 0, -1, 0, -1, 0, 0};
            row_t r;
            memset(&r, 0, sizeof r);
            r.v.kind = kd;
            r.v.comm = comm;
            r.v.sends = sends[0];
            r.pc = make_pc(&r.v, &cf, p, k);
            plan_row(&r, &cf);
            if (r.status) {
                fprintf(stderr, PROG ": --overhead, w = %d: %s\n", ws[wi], r.error);
                return 2;
            }
            long per = (long)cf.m * cf.dims.seq_len;
            int *tok = malloc(sizeof(int) * (size_t)per), *tgt = malloc(sizeof(int) * (size_t)per);
            if (!tok || !tgt) {
                free(tok);
                free(tgt);
                return 1;
            }
            make_data(tok, tgt, cf.m, cf.dims.seq_len, cf.dims.vocab, (unsigned long long)seed, 0);
            printf("\n### w = %d: %s, GPT L = %d, S = %d, m = %d, p = %d, k = %d\n", ws[wi],
                   bsipipe_schedule_kind_name(kd), cf.dims.n_layers, cf.dims.seq_len, cf.m, r.pc.p, r.pc.k);
            st = run_overhead(&cf, &r, policy, reps, iters, 1, tok, tgt);
            if (st == 0 && tflops < 1e5) /* --device-tflops 1e6: the first table alone */
                st = run_overhead(&cf, &r, policy, reps, iters, 0, tok, tgt);
            free(tok);
            free(tgt);
        }
        return st;
    }

    /* Variants. */
    variant_t var[MAX_VARIANTS] = {0};
    int nv = 0;
    int is_ablation = preset && strcmp(preset, "ablation") == 0;
    if (is_ablation) {
        if (schedules) {
            fprintf(stderr, PROG ": --preset ablation runs BSIPipe alone; drop --schedules\n");
            return 2;
        }
        if (set_recv) {
            fprintf(stderr, PROG ": --preset ablation sets the receive mode of each row itself; drop --recv\n");
            return 2;
        }
        static const bsipipe_comm_order_t orders[] = {BSIPIPE_COMM_BSIPIPE, BSIPIPE_COMM_NO_REVERSAL,
                                                      BSIPIPE_COMM_ORDERED, BSIPIPE_COMM_NAIVE,
                                                      BSIPIPE_COMM_BSIPIPE, BSIPIPE_COMM_NO_REVERSAL,
                                                      BSIPIPE_COMM_BSIPIPE};
        static const char *const labels[] = {"bsipipe (early receive + reversal)", "bsipipe, no reversal (w/o F-B overlap)",
                                             "bsipipe, ordered (no early receive)", "bsipipe, naive (sends first)",
                                             "bsipipe, blocking receives", "no reversal, blocking receives",
                                             "bsipipe, receives posted in place"};
        /* Across ranks, or on emulated links (--node-devices): the mapping,
         * measured (the transfer-order rows need the rendezvous transport of
         * one process and free transfers). */
        static const char *const map_labels[] = {"bsipipe, topology-aware mapping", "bsipipe, naive mapping"};
        int by_map = mpi || node_devices > 0;
        for (int i = 0; i < (by_map ? 2 : 7); i++) {
            var[nv].kind = BSIPIPE_SCHED_BSIPIPE;
            var[nv].comm = by_map ? BSIPIPE_COMM_BSIPIPE : orders[i];
            var[nv].naive_mapping = by_map && i == 1;
            var[nv].blocking_recv = !by_map && (i == 4 || i == 5);
            var[nv].recv_in_place = !by_map && i == 6;
            snprintf(var[nv].label, sizeof var[nv].label, "%s", by_map ? map_labels[i] : labels[i]);
            nv++;
        }
    } else if (is_tp && !schedules) {
        var[nv].kind = BSIPIPE_SCHED_BSIPIPE;
        var[nv].comm = comm;
        snprintf(var[nv].label, sizeof var[nv].label, "bsipipe");
        nv++;
    } else if (schedules) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", schedules);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            bsipipe_schedule_kind_t kd;
            if (bsipipe_schedule_kind_parse(tok, &kd) < 0) {
                fprintf(stderr, PROG ": --schedules: %s\n", bsipipe_error_detail());
                return 2;
            }
            for (int j = 0; j < nv; j++)
                if (var[j].kind == kd) {
                    fprintf(stderr, PROG ": --schedules names '%s' twice\n", tok);
                    return 2;
                }
            if (nv == MAX_VARIANTS) {
                fprintf(stderr, PROG ": --schedules: too many names\n");
                return 2;
            }
            var[nv].kind = kd;
            var[nv].comm = comm;
            var[nv].blocking_recv = recv_blocking;
            var[nv].recv_in_place = recv_in_place;
            snprintf(var[nv].label, sizeof var[nv].label, "%s", bsipipe_schedule_kind_name(kd));
            nv++;
        }
        if (nv == 0) {
            fprintf(stderr, PROG ": --schedules expects a comma-separated list of schedule names\n");
            return 2;
        }
    } else {
        for (int i = 0; i < BSIPIPE_SCHED_COUNT; i++) {
            var[nv].kind = (bsipipe_schedule_kind_t)i;
            var[nv].comm = comm;
            var[nv].blocking_recv = recv_blocking;
            var[nv].recv_in_place = recv_in_place;
            snprintf(var[nv].label, sizeof var[nv].label, "%s", bsipipe_schedule_kind_name(var[nv].kind));
            nv++;
        }
    }

    /* One row per (variant, idle spin) with several --idle-spin values. */
    if (nspin > 1 || spins[0] != 0) {
        if (nv * nspin > MAX_VARIANTS) {
            fprintf(stderr, PROG ": %d schedules x %d --idle-spin values is more than %d rows; name fewer "
                            "schedules\n", nv, nspin, MAX_VARIANTS);
            return 2;
        }
        variant_t base_var[MAX_VARIANTS];
        memcpy(base_var, var, sizeof base_var);
        int n = 0;
        for (int i = 0; i < nv; i++)
            for (int j = 0; j < nspin; j++) {
                var[n] = base_var[i];
                var[n].idle_spin_us = spins[j];
                char sp[24];
                if (spins[j] == 0) snprintf(sp, sizeof sp, "spin auto");
                else if (spins[j] < 0) snprintf(sp, sizeof sp, "sleep");
                else snprintf(sp, sizeof sp, "spin %d us", spins[j]);
                snprintf(var[n].label, sizeof var[n].label, "%s [%s]", base_var[i].label, sp);
                n++;
            }
        nv = n;
    }

    /* --sends and --buffers with two modes: one row per (variant, mode), side by side. */
    if (expand_modes(var, &nv, "--sends", sends, nsends, offsetof(variant_t, sends), "%s sends",
                     (const char *const[2]){"eager", "task"}) < 0 ||
        expand_modes(var, &nv, "--buffers", buffers, nbuffers, offsetof(variant_t, buffers), "%s buffers",
                     (const char *const[2]){"reused", "per-iteration"}) < 0)
        return 2;

    /* --mapping with emulated links: every row under one mapping, or each
     * under both (the ablation preset has its own two rows). */
    if (node_devices > 0 && !is_ablation && mapping == 2) {
        if (nv * 2 > MAX_VARIANTS) {
            fprintf(stderr, PROG ": %d rows x 2 mappings is more than %d rows; name fewer schedules\n", nv,
                    MAX_VARIANTS);
            return 2;
        }
        for (int i = nv - 1; i >= 0; i--) {
            variant_t base = var[i];
            for (int j = 0; j < 2; j++) {
                var[2 * i + j] = base;
                var[2 * i + j].naive_mapping = j;
                snprintf(var[2 * i + j].label, sizeof var[2 * i + j].label, "%.40s [%s]", base.label,
                         j ? "naive" : "aware");
            }
        }
        nv *= 2;
    } else if (node_devices > 0 && !is_ablation) {
        for (int i = 0; i < nv; i++)
            var[i].naive_mapping = mapping == 1;
    }

    /* --layout: every row under the one given, or each under both. */
    if (nlayouts == 2) {
        if (nv * 2 > MAX_VARIANTS) {
            fprintf(stderr, PROG ": %d rows x 2 layouts is more than %d rows; name fewer schedules\n", nv,
                    MAX_VARIANTS);
            return 2;
        }
        for (int i = nv - 1; i >= 0; i--) {
            variant_t base = var[i];
            for (int j = 0; j < 2; j++) {
                var[2 * i + j] = base;
                var[2 * i + j].layout = layouts[j];
                snprintf(var[2 * i + j].label, sizeof var[2 * i + j].label, "%.36s [%.20s]", base.label,
                         layouts[j] ? layouts[j] : "even");
            }
        }
        nv *= 2;
    } else if (nlayouts == 1) {
        for (int i = 0; i < nv; i++)
            var[i].layout = layouts[0];
    }

    /* --calibrate: each bsipipe row gets a twin whose plan is re-timed on
     * the measured op times, run side by side. */
    if (bench_calibrate) {
        variant_t base_var[MAX_VARIANTS];
        memcpy(base_var, var, sizeof base_var);
        int n = 0;
        for (int i = 0; i < nv; i++) {
            int twin = base_var[i].kind == BSIPIPE_SCHED_BSIPIPE;
            if (n + 1 + twin > MAX_VARIANTS) {
                fprintf(stderr, PROG ": --calibrate adds a row per bsipipe row: more than %d rows; name fewer "
                                "schedules\n", MAX_VARIANTS);
                return 2;
            }
            var[n++] = base_var[i];
            if (twin) {
                var[n] = base_var[i];
                var[n].measured_plan = 1;
                snprintf(var[n].label, sizeof var[n].label, "%.30s, planned on measured ops", base_var[i].label);
                n++;
            }
        }
        nv = n;
    }

    /* Configurations. */
    config_t cfg[MAX_CONFIGS];
    int nc = 0;
    config_t base = {"", dims, w, m, emulate, tflops, 0, watchdog, mpi, devices, gpus, precision, 0,
                     world ? atoi(world) : 1, inter_bandwidth, inter_latency, intra_bandwidth, intra_latency,
                     node_devices, shared_nic};
    if (!preset) {
        cfg[nc] = base;
        snprintf(cfg[nc].title, sizeof cfg[nc].title, "schedules side by side, w=%d", w);
        nc++;
    } else if (strcmp(preset, "seqlen") == 0) {
        if (set_seq) {
            fprintf(stderr, PROG ": --preset seqlen sets --seq itself (128, 256, 512)\n");
            return 2;
        }
        static const int S[] = {128, 256, 512};
        for (int i = 0; i < 3; i++) {
            cfg[nc] = base;
            cfg[nc].dims.seq_len = S[i];
            snprintf(cfg[nc].title, sizeof cfg[nc].title, "seqlen: S=%d, w=%d", S[i], w);
            nc++;
        }
    } else if (strcmp(preset, "devices") == 0) {
        if (set_w) {
            fprintf(stderr, PROG ": --preset devices sets --w itself (4, 8, 16)\n");
            return 2;
        }
        static const int Wd[] = {4, 8, 16};
        for (int i = 0; i < 3; i++) {
            cfg[nc] = base;
            cfg[nc].w = Wd[i];
            cfg[nc].emulate = 1;
            if (!set_layers) cfg[nc].dims.n_layers = 32;
            if (!set_m) cfg[nc].m = Wd[i] > 8 ? Wd[i] : 8;
            snprintf(cfg[nc].title, sizeof cfg[nc].title, "devices: w=%d", Wd[i]);
            nc++;
        }
    } else if (is_tp) {
        /* The paper's Table 3 at this machine's scale: a budget of w
         * emulated GPUs (default 8; the paper's 16) as (w, 1), (w/2, 2),
         * (w/4, 4). */
        for (int i = 0; i < 3; i++) {
            cfg[nc] = base;
            cfg[nc].tp = 1 << i;
            cfg[nc].w = w >> i;
            cfg[nc].emulate = 1;
            if (!set_layers) cfg[nc].dims.n_layers = 16;
            if (!set_m) cfg[nc].m = 2 * w;
            snprintf(cfg[nc].title, sizeof cfg[nc].title, "tp: (w, D_t) = (%d, %d)", w >> i, 1 << i);
            nc++;
        }
    } else {
        cfg[nc] = base;
        cfg[nc].unchecked = !mpi;
        if (!set_watchdog && !mpi) cfg[nc].watchdog = 2;
        if (mpi)
            snprintf(cfg[nc].title, sizeof cfg[nc].title, "ablation: BSIPipe device mapping across %s MPI ranks, w=%d",
                     world ? world : "the", w);
        else
            snprintf(cfg[nc].title, sizeof cfg[nc].title, "ablation: BSIPipe transfer order, w=%d", w);
        nc++;
    }

    /* --trace: DIR made (and checked writable) before anything runs; the
     * timed runs stay untraced. */
    if (trace) {
        if (bsipipe_trace_begin(trace) < 0) {
            fprintf(stderr, PROG ": --trace: %s\n", bsipipe_error_detail());
            return 1;
        }
        setenv("STARPU_FXT_TRACE", "0", 1);
    }

    FILE *fcsv = NULL;
    if (csv) {
        if (!(fcsv = fopen(csv, "w"))) {
            fprintf(stderr, PROG ": cannot write '%s': %s\n", csv, strerror(errno));
            return 1;
        }
        fputs(csv_header, fcsv);
    }
    FILE *fsvg = NULL;
    const double svg_w = 80.0 + 80.0 * nv < 720 ? 720 : 80.0 + 80.0 * nv;
    if (svg) {
        if (!(fsvg = fopen(svg, "w"))) {
            fprintf(stderr, PROG ": cannot write '%s': %s\n", svg, strerror(errno));
            if (fcsv) fclose(fcsv);
            return 1;
        }
        fprintf(fsvg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%d\" "
                      "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                svg_w, 300 * nc);
    }

    printf("# bsipipe-bench: %s%s%s\n", cfg[0].emulate ? "EMULATED device time"
                                       : devices == BSIPIPE_DEVICES_CUDA ? "REAL COMPUTE (CUDA workers)"
                                                                         : "REAL COMPUTE (CPU kernels)",
           preset ? ", preset " : "", preset ? preset : "");
    printf("policy %s; random tokens (vocabulary %d, seed %d), the same for every schedule; "
           "one engine at a time: create, %d warm-up, %d timed iteration(s), destroy\n", policy, dims.vocab, seed,
           warmup, iters);
    fflush(stdout);

    int status = 0, ran = 0; /* ran: rows the planner accepted (measured, or failed at run time) */
    int failed_all = 0;      /* a configuration whose accepted rows all failed at run time */
    tp_line_t tp_lines[MAX_CONFIGS];
    memset(tp_lines, 0, sizeof tp_lines);
    for (int ci = 0; ci < nc; ci++) {
        config_t *cf = &cfg[ci];
        row_t rows[MAX_VARIANTS];
        memset(rows, 0, sizeof rows);
        int ns = reps * iters, S = cf->dims.seq_len, n_data = warmup + iters;
        long per = (long)cf->m * S;
        int *tokens = malloc(sizeof(int) * (size_t)(per * n_data)), *targets = malloc(sizeof(int) * (size_t)(per * n_data));
        int oom = !tokens || !targets;
        for (int i = 0; i < nv && !oom; i++) {
            row_t *r = &rows[i];
            r->v = var[i];
            r->pc = make_pc(&var[i], cf, p, k);
            r->tok = calloc((size_t)ns, sizeof(double));
            r->bubble = calloc((size_t)ns, sizeof(double));
            r->makespan = calloc((size_t)ns, sizeof(double));
            r->busy = calloc((size_t)ns, sizeof(double));
            r->own_bubble = calloc((size_t)ns, sizeof(double));
            r->replay_bubble = calloc((size_t)ns, sizeof(double));
            r->rep_tok = calloc((size_t)reps, sizeof(double));
            if (bench_idle) {
                r->idle = calloc((size_t)ns * IDLE_SLOTS, sizeof(double));
                r->spread = calloc((size_t)ns, sizeof(double));
                r->slow_idle = calloc((size_t)ns, sizeof(double));
                oom = !r->idle || !r->spread || !r->slow_idle;
            }
            oom = oom || !r->tok || !r->bubble || !r->makespan || !r->busy || !r->own_bubble || !r->replay_bubble || !r->rep_tok;
            r->speedup[0] = r->speedup[1] = NAN;
            if (oom)
                break;
            for (int j = 0; j < reps; j++)
                r->rep_tok[j] = NAN;
            plan_row(r, cf);
            if (r->status == 1)
                printf("%s: skipping %s (p=%d k=%d m=%d w=%d): %s\n", cf->title, r->v.label, r->pc.p, r->pc.k,
                       r->pc.m, r->pc.w, r->error);
        }
        if (oom) {
            fprintf(stderr, PROG ": out of memory\n");
            status = 1;
        } else {
            for (int it = 0; it < n_data; it++)
                make_data(tokens + it * per, targets + it * per, cf->m, S, cf->dims.vocab, (unsigned long long)seed, it);
            char cal_notes[MAX_VARIANTS][200] = {{0}};
            for (int i = 0; bench_calibrate && i < nv; i++)
                if (rows[i].status == 0) {
                    calibrate_row(&rows[i], cf, policy, warmup, seed, tokens, targets, cal_notes[i],
                                  sizeof cal_notes[i]);
                    if (rows[i].status == 2)
                        printf("%s: %s: %s\n", cf->title, rows[i].v.label, rows[i].error);
                    fprintf(stderr, PROG ": %s: %s calibrated\n", cf->title, rows[i].v.label);
                }
            for (int rep = 0; rep < reps; rep++) {
                for (int i = 0; i < nv; i++) {
                    row_t *r = &rows[i];
                    if (r->status != 0)
                        continue; /* skipped by the planner, or failed already (a deadlock repeats) */
                    run_row(r, cf, policy, warmup, iters, seed, rep, tokens, targets, n_data);
                    if (r->status == 2)
                        printf("%s: %s, repetition %d: %s\n", cf->title, r->v.label, rep + 1, r->error);
                }
                if (rank == 0)
                    fprintf(stderr, PROG ": %s: repetition %d/%d done\n", cf->title, rep + 1, reps);
            }
            int measured = 0, accepted = 0; /* a table with no row measured is a failure, not a result */
            for (int i = 0; i < nv; i++) {
                measured |= rows[i].status == 0;
                accepted |= rows[i].status != 1;
            }
            if (accepted && !measured) { /* every row the planner accepted failed to run (all refused: below) */
                fprintf(stderr, PROG ": %s: no schedule ran to the end (each row failed: the table says why)\n",
                        cf->title);
                failed_all = 1;
            }
            /* speedups: median over repetitions of the paired ratio */
            static const bsipipe_schedule_kind_t base_kind[2] = {BSIPIPE_SCHED_SEQ1F1B, BSIPIPE_SCHED_SEQ1F1B_I};
            for (int b = 0; b < 2; b++) {
                int bi = -1;
                for (int i = 0; i < nv; i++)
                    if (rows[i].v.kind == base_kind[b]) { bi = i; break; }
                if (bi < 0)
                    continue;
                for (int i = 0; i < nv; i++) {
                    double ratio[1000];
                    int n = 0;
                    for (int j = 0; j < reps && j < 1000; j++)
                        if (!isnan(rows[i].rep_tok[j]) && !isnan(rows[bi].rep_tok[j]) && rows[bi].rep_tok[j] > 0)
                            ratio[n++] = rows[i].rep_tok[j] / rows[bi].rep_tok[j];
                    rows[i].speedup[b] = median(ratio, n);
                }
            }
            for (int i = 0; i < nv; i++)
                if (rows[i].v.idle_spin_us == 0 && rows[i].n_samples > 0) {
                    printf("\nidle spin (auto): %d us per wait for the next op%s\n", rows[i].spin_us,
                           rows[i].spin_us ? " (every worker has a core)" : " (more workers than cores: sleep at once)");
                    break;
                }
            print_table(cf, rows, nv, reps, iters);
            if (bench_idle)
                print_idle(rows, nv);
            for (int i = 0; bench_calibrate && i < nv; i++)
                if (rows[i].v.measured_plan && rows[i].status != 1 && cal_notes[i][0])
                    printf("\n%s: k and order chosen on the measured op times (predicted makespan %s): k = %d\n",
                           rows[i].v.label, cal_notes[i], rows[i].pc.k);
            if (bench_calibrate)
                printf("\npredicted (measured ops): the plan each row runs, simulated on its ops' times measured "
                       "in one untimed run (--calibrate); predicted (FLOPs, unit): the constructed plan\n");
            if (is_tp)
                tp_line_fill(&tp_lines[ci], cf, &rows[0]);
            if (is_ablation && mpi)
                print_traffic(rows, nv);
            if (cf->node_devices > 0)
                print_link_traffic(cf, rows, nv);
            else if (is_ablation)
                print_mapping_prediction(cf, &rows[0].pc);
            for (int i = 0; trace && i < nv; i++) {
                if (rows[i].status != 0)
                    continue; /* skipped, or failed (a deadlock would only repeat) */
                char a[160], b[64], dir[4096];
                slug(a, sizeof a, cf->title);
                slug(b, sizeof b, rows[i].v.label);
                if (nc > 1)
                    snprintf(dir, sizeof dir, "%s/%s/%s", trace, a, b);
                else
                    snprintf(dir, sizeof dir, "%s/%s", trace, b);
                trace_row(&rows[i], cf, policy, warmup, iters, seed, tokens, targets, n_data, dir);
                fflush(stdout);
            }
            if (fcsv)
                write_csv_rows(fcsv, preset ? preset : "none", cf, rows, nv);
            if (fsvg)
                write_svg_panel(fsvg, cf, rows, nv, 300.0 * ci, svg_w);
        }
        for (int i = 0; i < nv; i++) {
            ran += rows[i].status != 1;
            bsipipe_schedule_destroy(rows[i].plan); free(rows[i].idle); free(rows[i].pred_busy); free(rows[i].node_map); free(rows[i].spread); free(rows[i].slow_idle); free(rows[i].tok); free(rows[i].bubble); free(rows[i].makespan); free(rows[i].busy);
            free(rows[i].own_bubble); free(rows[i].replay_bubble); free(rows[i].rep_tok);
        }
        free(tokens);
        free(targets);
        if (status)
            break;
    }
    if (is_tp && status == 0)
        print_tp_table(cfg, tp_lines, nc, var[0].label);
    if (failed_all)
        status = 1; /* after the table: it says why each row failed */
    if (status == 0 && ran == 0) {
        fprintf(stderr, PROG ": nothing was measured: the planner refused every schedule of every configuration "
                             "(the reasons are above); change --w, --m, --k or --schedules\n");
        status = 1;
    }
    if (fsvg) {
        fputs("</svg>\n", fsvg);
        if (fclose(fsvg) != 0) { fprintf(stderr, PROG ": cannot write '%s'\n", svg); status = 1; }
    }
    if (fcsv && fclose(fcsv) != 0) { fprintf(stderr, PROG ": cannot write '%s'\n", csv); status = 1; }
    return status;
}
