/* bsipipe-plan: the planner on the command line. Builds the schedules of a
 * configuration, simulates them, prints a comparison table, draws one
 * schedule in the terminal and as SVG, or exports it as JSON. */
#include "apps/cli.h"
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_layout.h"
#include "graph/bsipipe_partition.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_topology.h"
#include "graph/bsipipe_builder.h"

#include <getopt.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fputs(
"Usage: bsipipe-plan [options]\n"
"Plans pipeline schedules, simulates them and compares them side by side.\n\n"
"Schedule:\n"
"  --schedule NAME    gpipe 1f1b 1f1b-i zb-h1 chimera terapipe seq1f1b seq1f1b-i\n"
"                     bsipipe bitpipe zb-v dualpipev seq-zbv bsipipe-zb dualpipe\n"
"                     zb-i zb-h2, or 'all' (default: all)\n"
"  --plan FILE        a plan from JSON (--format json's output, or written by\n"
"                     hand: docs/plan-json.md) instead of --schedule: validated,\n"
"                     simulated and printed like a preset\n"
"  --w N  --p N  --k N  --m N  --tp N\n"
"                     pipeline depth, chunks per device (interleaved schedules;\n"
"                     others use 1), subsequences (sequence-level schedules;\n"
"                     others use 1), micro-batches, tensor-parallel degree\n"
"  --partition balanced|even   --comm bsipipe|ordered|naive|no-reversal   --no-concat\n"
"                     no-reversal: the paper's ablation without the F-B overlap\n"
"  --send blocking|async  a SEND holds its device while its bytes move (default:\n"
"                     the CPU engine's copy) or only until its RECV is posted, the\n"
"                     bytes then moving on the link meanwhile (NCCL, MPI)\n"
"  --nic per-device|shared  inter-node links: one per device (default) or one per\n"
"                     node shared by its devices (transfers and syncs queue)\n"
"  --sync ring|reduce-back  a SYNC of replicas on two nodes: both ways at once\n"
"                     (default; NCCL's two-rank ring) or there and back (the\n"
"                     engine across StarPU-MPI ranks)\n"
"  --inter-link RATE[,LATENCY]  --intra-link RATE[,LATENCY]  the links between\n"
"                     and inside nodes (default 25GB/s,10us and 300GB/s,5us),\n"
"                     e.g. 1gbit, 200mbit,50us: scripts/netns-cluster.sh's --rate\n"
"  --recv posted|in-place|blocking  receive semantics of the simulation and the\n"
"                     deadlock check (posted: the engine's, the receives right\n"
"                     behind a compute op posted before it starts; in-place:\n"
"                     each posted where it stands; blocking: a RECV holds its\n"
"                     device until the data arrives, rendezvous both ways)\n"
"  --no-optimise      bsipipe: the constructed order, without the optimising\n"
"                     pass (by default both bubbles are printed under the table)\n"
"Model:\n"
"  --model gpt|llama  --layers N  --hidden N  --heads N  --ffn N  --vocab N  --seq N\n"
"  --layout auto|STRING  which layers each of the p*w chunks holds (default: L/(p*w)\n"
"                     each). auto: the split whose slowest chunk (layers, the\n"
"                     embedding and the head by their FLOPs) is cheapest, any L >=\n"
"                     p*w; STRING: Megatron's layout, e.g. Et*4|(t*4|)*6t*2L\n"
"                     (docs/schedules.md, \"Placing layers\"). The split and its\n"
"                     imbalance are printed under the table\n"
"Cost model:\n"
"  --cost unit|flops  unit: F=1, B=2 per subsequence-chunk, free transfers;\n"
"                     flops: FLOPs / --device-tflops (default 150), NVLink-class\n"
"                     intra-node and InfiniBand-class inter-node links\n"
"  --devices-per-node N  (link classes; default: all devices on one node)\n"
"  --k auto           sequence-level schedules: the k (1..16) whose plan the FLOPs\n"
"                     costs predict fastest within --act-budget, chosen per\n"
"                     schedule and listed under the table (docs/schedules.md)\n"
"  --act-budget GIB   --k auto: the most activation memory a device may hold\n"
"  --piece-half N     FLOPs costs: an op on a piece of len tokens runs at\n"
"                     len / (len + N) of the device's rate (0: at the rate; this\n"
"                     VM's CPU kernels measure about 16)\n"
"  --overlap-fb X     DualPipe's and DualPipeV's overlapped F&B pairs share the\n"
"                     device: a pair starts when both halves' inputs are there and\n"
"                     its ops take X (0 < X <= 1) times their cost (default 1: the\n"
"                     halves in sequence, each when its own input is there)\n"
"  --noise CV         a second table: each plan under op-time noise, every compute\n"
"                     op's time its cost times a lognormal factor of mean 1 and\n"
"                     coefficient of variation CV (e.g. 0.06, this VM's ops): the\n"
"                     expected and 90th-percentile bubble and makespan\n"
"  --noise-samples N  --noise-seed N   (defaults 200 and 1)\n"
"  --topology SPEC    the cluster, through hwloc: NxG (N nodes of G devices),\n"
"                     synthetic:DESC, xml:FILE or this; devices are mapped onto\n"
"                     nodes topology-aware (mirrored pairs on one node) and the\n"
"                     traffic per link class is printed for that and the naive\n"
"                     mapping\n"
"  --naive-mapping    use the naive mapping (consecutive devices per node) in the\n"
"                     table, for the ablation\n"
"Output:\n"
"  --preset paper     the paper's setting: GPT-1.3B (64 layers, hidden 1280, 32\n"
"                     heads), 20K tokens, w=16, m=64, each schedule at its best p, k;\n"
"                     model flags (--model llama, --seq ...) replace its values;\n"
"                     8 devices per node, consecutive (naive) mapping unless\n"
"                     --topology; peak memory printed beside the paper's Fig. 4\n"
"  --draw             terminal timeline of each schedule (--width N columns)\n"
"  --svg FILE         SVG timeline of the (first) schedule\n"
"  --format table|json|torch-csv   json: every op of the (single) schedule with\n"
"                     its times; torch-csv: its compute order as torch.distributed\n"
"                     .pipelining's per-rank action CSV (one pipe, k = 1)\n"
"  --version          the bsipipe version\n"
"  -h, --help\n", out);
    fputs("Micro-batch counts each schedule runs (N_s = m*k; a config outside them is\n"
          "refused naming the nearest valid m):\n", out);
    for (int kind = 0; kind < BSIPIPE_SCHED_COUNT; kind++)
        fprintf(out, "  %-11s %s\n", bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind),
                bsipipe_schedule_kind_m_rule((bsipipe_schedule_kind_t)kind));
}

/* 1 when arg, all of it, is a finite number (into *out). */
static int whole_number(const char *arg, double *out)
{
    char *end;
    *out = strtod(arg, &end);
    return end != arg && *end == '\0' && isfinite(*out);
}

static int die(const char *what)
{
    fprintf(stderr, "bsipipe-plan: %s\n", what);
    return 2;
}

typedef struct options {
    int all, draw, width, json, torch_csv, paper, w, p, k, m, tp, dpn, concat, optimise, unit_cost, blocking_recv, recv_in_place;
    int async_send, shared_nic;
    int set_p, set_k, set_m, set_w;
    unsigned set; /* CLI_SET_* bits of every flag given (--plan checks them against the file) */
    const char *plan; /* --plan FILE */
    const char *layout; /* --layout (NULL: the even split) */
    double tflops;
    bsipipe_schedule_kind_t kind;
    bsipipe_partition_kind_t partition;
    bsipipe_comm_order_t comm;
    bsipipe_model_dims_t dims;
    const char *svg;
    const char *topology;
    double *peak_gib; /* per schedule kind: the largest device's activations + parameters */
    double *tokens_s; /* per schedule kind: predicted tokens/s (FLOPs costs) */
    int naive_mapping;
    int nodes, node_devices; /* from the topology */
    int auto_k;              /* --k auto */
    double act_budget_gib;   /* --act-budget (0: none) */
    double piece_half;       /* --piece-half: the cost model's piece_half_tokens */
    double overlap_fb;       /* --overlap-fb: the cost model's overlap_fb (0: unset, 1) */
    double link_bw[2], link_lat[2]; /* --intra-link, --inter-link (bandwidth 0, latency < 0: the defaults) */
    int sync_reduce_back;    /* --sync reduce-back */
    double noise;            /* --noise: coefficient of variation of op times (0: off) */
    int noise_samples;       /* --noise-samples */
    int noise_set_sampling;  /* --noise-samples or --noise-seed given */
    unsigned long long noise_seed; /* --noise-seed */
    struct noise_row *noise_rows; /* --noise: [BSIPIPE_SCHED_COUNT], the schedules shown, printed after the table */
} options_t;

/* --noise: a schedule's plan under op-time noise. */
typedef struct noise_row {
    int valid; /* this schedule was shown */
    bsipipe_parallel_config_t pc;
    int rc; /* 0, or the error (detail in `error`) */
    char error[160];
    bsipipe_sim_noise_t r;
} noise_row_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Config of one schedule: interleaved ones at p (default 2), sequence-level
 * ones at k (default 2); the others at p = k = 1. */
static bsipipe_parallel_config_t config_for(const options_t *o, bsipipe_schedule_kind_t kind)
{
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(kind);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = o->w;
    pc.m = o->m;
    pc.tp = o->tp;
    pc.p = t.interleaved ? (t.v_shape ? 2 : o->p) : 1;
    pc.k = t.sequence_level ? o->k : 1;
    if (o->set_p && !t.interleaved && !o->all) pc.p = o->p; /* let validation name the rule */
    if (o->set_k && !o->auto_k && !t.sequence_level && !o->all) pc.k = o->k;
    if (o->set_p && t.v_shape && !o->all) pc.p = o->p;
    pc.partition = o->partition;
    pc.comm = o->comm;
    pc.concat = o->concat;
    pc.optimise = o->optimise;
    pc.layout = o->layout;
    return pc;
}

/* One sentence naming where the sequence-level schedules cut a sequence. */
static void describe_pieces(const bsipipe_schedule_t *s, char *buf, size_t size)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    const int *st = bsipipe_schedule_sub_starts(s);
    int S = bsipipe_schedule_model(s)->seq_len, align = bsipipe_partition_align(S, pc->k, pc->tp);
    size_t n = (size_t)snprintf(buf, size, "pieces of a sequence (k = %d):", pc->k);
    for (int j = 0; j < pc->k && n < size; j++)
        n += (size_t)snprintf(buf + n, size - n, " [%d, %d)", st[j], st[j + 1]);
    if (n < size)
        snprintf(buf + n, size - n, ", %s partition, boundaries on multiples of %d token%s (docs/schedules.md)",
                 pc->partition == BSIPIPE_PARTITION_EVEN ? "even" : "FLOPs-balanced", align, align > 1 ? "s" : "");
}

/* The layers of s's chunks and how even their costs are, once per chunk
 * count (lines[n] holds up to n_max of them, each `size` long). */
static void describe_layers(const bsipipe_schedule_t *s, char lines[][512], int *n, int n_max)
{
    const bsipipe_model_dims_t *d = bsipipe_schedule_model(s);
    int C = bsipipe_schedule_n_chunks(s), counts[4096], even = d->n_layers % C == 0;
    char head[96];
    snprintf(head, sizeof head, "layers of the %d chunks:", C);
    for (int i = 0; i < *n; i++)
        if (strncmp(lines[i], head, strlen(head)) == 0)
            return;
    if (*n >= n_max || C > 4096)
        return;
    for (int c = 0; c < C; c++) {
        int l0, l1;
        bsipipe_schedule_chunk_layers(s, c, &l0, &l1);
        counts[c] = l1 - l0;
    }
    double mine = bsipipe_layout_imbalance(d, counts, C);
    for (int c = 0; c < C; c++)
        counts[c] = d->n_layers / C;
    double evenly = even ? bsipipe_layout_imbalance(d, counts, C) : 0;
    char evens[64] = "";
    if (even)
        snprintf(evens, sizeof evens, "; the even split: %.3fx", evenly);
    else
        snprintf(evens, sizeof evens, "; no even split (p*w does not divide L = %d)", d->n_layers);
    snprintf(lines[(*n)++], 512, "%s %s; slowest chunk %.3fx the mean (F+B FLOPs, head %.2f layers)%s", head,
             bsipipe_schedule_config(s)->layout ? bsipipe_schedule_config(s)->layout : "even", mine,
             bsipipe_layout_head_layers(d), evens);
}

static void print_row(const options_t *o, const bsipipe_schedule_t *s, const bsipipe_sim_result_t *unit,
                      const bsipipe_sim_result_t *r)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    int W = r->n_devices;
    double act[4096], gib = 1024.0 * 1024 * 1024, par = 0;
    for (int d = 0; d < W; d++) {
        act[d] = r->device[d].peak_act_bytes / gib;
        if (r->device[d].param_bytes > par) par = r->device[d].param_bytes;
    }
    double peak = 0;
    for (int d = 0; d < W; d++)
        if (r->device[d].peak_act_bytes + r->device[d].param_bytes > peak)
            peak = r->device[d].peak_act_bytes + r->device[d].param_bytes;
    if (o->peak_gib)
        o->peak_gib[pc->schedule] = peak / gib;
    qsort(act, (size_t)W, sizeof act[0], cmp_double);
    double closed = bsipipe_bubble_closed_form(pc);
    char closed_s[16] = "-";
    if (closed >= 0) /* Chimera's formula holds for F = B (footnote) */
        snprintf(closed_s, sizeof closed_s, "%.1f%%%s", 100 * closed,
                 pc->schedule == BSIPIPE_SCHED_CHIMERA ? "*" : "");
    double tokens = (double)pc->m * bsipipe_schedule_model(s)->seq_len;
    char tps[16] = "-";
    if (!o->unit_cost) {
        snprintf(tps, sizeof tps, "%.0f", tokens / r->iteration_time);
        if (o->tokens_s)
            o->tokens_s[pc->schedule] = tokens / r->iteration_time;
    }
    printf("| %-10s | %d | %d | %4d | %11.2f%% | %-7s | %5.2f%% | %12.6g | %9s | %6.2f/%6.2f/%6.2f | %9.2f | %8.1f | %7.1f |\n",
           bsipipe_schedule_kind_name(pc->schedule), pc->p, pc->k, pc->m * pc->k, 100 * unit->bubble_ratio, closed_s,
           100 * r->bubble_ratio, r->iteration_time, tps, act[0], act[W / 2], act[W - 1], par / gib,
           r->act_bytes[1] / 1e6, (r->sync_bytes[0] + r->sync_bytes[1]) / 1e6);
}

/* BSIPipe's constructed and optimised plans side by side (unit costs). */
typedef struct optimised_note {
    int valid, peak_constructed, peak_optimised;
    double constructed, optimised, bound;
} optimised_note_t;

static int peak_units(const bsipipe_sim_result_t *r)
{
    int peak = 0;
    for (int d = 0; d < r->n_devices; d++)
        if (r->device[d].peak_act_units > peak)
            peak = r->device[d].peak_act_units;
    return peak;
}

static void note_optimised(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                           const bsipipe_sim_result_t *optimised, optimised_note_t *note)
{
    bsipipe_parallel_config_t raw = *pc;
    raw.optimise = 0;
    bsipipe_schedule_t *s;
    bsipipe_sim_result_t *r = NULL;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (bsipipe_schedule_create(&raw, dims, &s) < 0)
        return;
    if (bsipipe_simulate(s, &unit, &r) == 0) {
        *note = (optimised_note_t){1, peak_units(r), peak_units(optimised), r->bubble_ratio,
                                   optimised->bubble_ratio, bsipipe_bubble_closed_form(pc)};
        bsipipe_sim_result_destroy(r);
    }
    bsipipe_schedule_destroy(s);
}

/* The mapping section: one schedule, topology-aware against naive. */
static void print_mapping(const options_t *o, const bsipipe_schedule_t *s, const bsipipe_cost_model_t *base)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    int map[2][4096], mapped[2] = {0, 0};
    printf("\nmapping of %s on %d nodes x %d devices (D_t=%d), topology-aware vs naive:\n",
           bsipipe_schedule_kind_name(pc->schedule), o->nodes, o->node_devices, pc->tp);
    printf("| mapping | devices per node | act intra MB | act inter MB | sync intra MB | sync inter MB | iter |\n");
    printf("|---------|------------------|--------------|--------------|---------------|---------------|------|\n");
    for (int naive = 0; naive < 2; naive++) {
        if (bsipipe_map_devices(pc, o->nodes, o->node_devices, !naive, map[naive]) < 0) {
            printf("| %s | %s |\n", naive ? "naive" : "aware", bsipipe_error_detail());
            continue;
        }
        mapped[naive] = 1;
        bsipipe_cost_model_t c = *base;
        c.device_node = map[naive];
        bsipipe_sim_result_t *r;
        if (bsipipe_simulate(s, &c, &r) < 0)
            continue;
        char nodes[512] = "";
        size_t len = 0;
        for (int n = 0; n < o->nodes && len < sizeof nodes - 16; n++) {
            len += (size_t)snprintf(nodes + len, sizeof nodes - len, "%s", n ? " / " : "");
            for (int d = 0, first = 1; d < pc->w && len < sizeof nodes - 16; d++)
                if (map[naive][d] == n) {
                    len += (size_t)snprintf(nodes + len, sizeof nodes - len, "%s%d", first ? "" : ",", d);
                    first = 0;
                }
        }
        printf("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.6g |\n", naive ? "naive" : "aware", nodes,
               r->act_bytes[0] / 1e6, r->act_bytes[1] / 1e6, r->sync_bytes[0] / 1e6, r->sync_bytes[1] / 1e6,
               r->iteration_time);
        bsipipe_sim_result_destroy(r);
    }
    /* Which GPU of which node runs which (pipeline stage, TP rank): a stage's
     * D_t ranks take consecutive GPUs of its node. */
    for (int naive = 0; naive < 2; naive++) {
        if (!mapped[naive])
            continue;
        printf("%s%s placement (node: its GPUs -> pipeline stage, TP ranks):\n", naive ? "" : "\n",
               naive ? "naive" : "topology-aware");
        for (int n = 0; n < o->nodes; n++) {
            printf("  node %d:", n);
            for (int d = 0, gpu = 0; d < pc->w; d++)
                if (map[naive][d] == n) {
                    if (pc->tp > 1)
                        printf("%s GPU %d-%d -> stage %d (TP ranks 0-%d)", gpu ? ";" : "", gpu, gpu + pc->tp - 1, d,
                               pc->tp - 1);
                    else
                        printf("%s GPU %d -> stage %d", gpu ? ";" : "", gpu, d);
                    gpu += pc->tp;
                }
            putchar('\n');
        }
    }
}

/* cost with pc's devices mapped onto the nodes of --topology (map: room for
 * 4096 devices), into *mapped; unmapped without --topology. -1 (detail set,
 * *mapped unmapped) when the mapping fails. */
static int map_cost(const options_t *o, const bsipipe_parallel_config_t *pc, const bsipipe_cost_model_t *cost,
                    int *map, bsipipe_cost_model_t *mapped)
{
    *mapped = *cost;
    if (!o->topology)
        return 0;
    if (bsipipe_map_devices(pc, o->nodes, o->node_devices, !o->naive_mapping, map) < 0)
        return -1;
    mapped->device_node = map;
    return 0;
}

/* --noise: s simulated under op-time noise on the table's cost model, kept
 * (one row per schedule kind) for print_noise. */
static void add_noise_row(const options_t *o, const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost)
{
    noise_row_t *row = &o->noise_rows[bsipipe_schedule_config(s)->schedule];
    row->valid = 1;
    row->pc = *bsipipe_schedule_config(s);
    row->rc = bsipipe_simulate_noise(s, cost, o->noise, o->noise_samples, o->noise_seed, &row->r);
    if (row->rc < 0)
        snprintf(row->error, sizeof row->error, "%s", bsipipe_error_detail());
}

/* --noise: the second table, each schedule's expected bubble and makespan
 * when every op's time spreads by the coefficient of variation given. */
static void print_noise(const options_t *o)
{
    printf("\nUnder op-time noise: each compute op's time its cost times a lognormal factor of mean 1 and\n"
           "coefficient of variation %.3g, independent per op; %d samples, seed %llu (docs/schedules.md,\n"
           "\"Op-time noise\"):\n\n", o->noise, o->noise_samples, o->noise_seed);
    printf("| schedule   | p | k | bubble noiseless | bubble mean | bubble p90 | makespan mean / noiseless | p90 / noiseless |\n");
    printf("|------------|---|---|------------------|-------------|------------|---------------------------|-----------------|\n");
    for (int i = 0; i < BSIPIPE_SCHED_COUNT; i++) {
        const noise_row_t *n = &o->noise_rows[i];
        if (!n->valid)
            continue;
        if (n->rc < 0) {
            printf("| %-10s | %d | %d | %s |\n", bsipipe_schedule_kind_name(n->pc.schedule), n->pc.p, n->pc.k, n->error);
            continue;
        }
        printf("| %-10s | %d | %d | %15.2f%% | %10.2f%% | %9.2f%% | %25.4f | %15.4f |\n",
               bsipipe_schedule_kind_name(n->pc.schedule), n->pc.p, n->pc.k, 100 * n->r.noiseless_bubble,
               100 * n->r.mean_bubble, 100 * n->r.p90_bubble, n->r.mean_makespan / n->r.noiseless_makespan,
               n->r.p90_makespan / n->r.noiseless_makespan);
    }
}

/* Simulates one schedule and prints its row (or JSON), drawings, SVG and
 * mapping. 0, or 1 when something failed (message printed). */
static int show(const options_t *o, bsipipe_schedule_t *s, const bsipipe_cost_model_t *unit,
                const bsipipe_cost_model_t *cost, optimised_note_t *note, int *first)
{
    bsipipe_parallel_config_t pc = *bsipipe_schedule_config(s);
    const char *name = bsipipe_schedule_kind_name(pc.schedule);
    int status = 0;
    bsipipe_sim_result_t *ru = NULL, *r = NULL;
    int map[4096];
    bsipipe_cost_model_t mapped;
    if (map_cost(o, &pc, cost, map, &mapped) < 0) {
        fprintf(stderr, "bsipipe-plan: %s: %s\n", name, bsipipe_error_detail());
        return 1;
    }
    int rc = bsipipe_simulate(s, unit, &ru);
    if (rc == 0)
        rc = bsipipe_simulate(s, &mapped, &r);
    if (rc < 0) {
        fprintf(stderr, "bsipipe-plan: %s: %s (%s)\n", name, bsipipe_error_detail(), bsipipe_strerror(rc));
        status = 1;
    } else if (o->json) { /* json or torch-csv: the export alone */
        if ((o->torch_csv ? bsipipe_export_torch_csv(stdout, s) : bsipipe_export_json(stdout, s, r, cost)) < 0) {
            fprintf(stderr, "bsipipe-plan: %s\n", bsipipe_error_detail());
            status = 1;
        }
    } else {
        print_row(o, s, ru, r);
        if (pc.schedule == BSIPIPE_SCHED_BSIPIPE && pc.optimise)
            note_optimised(&pc, bsipipe_schedule_model(s), ru, note);
        if (o->noise > 0)
            add_noise_row(o, s, &mapped);
    }
    if (rc == 0 && o->draw) {
        printf("\n%s:\n", name);
        bsipipe_draw_terminal(stdout, s, r, o->width, isatty(1) && !getenv("NO_COLOR"));
        printf("\n");
    }
    if (rc == 0 && o->svg && *first) {
        FILE *f = fopen(o->svg, "w");
        char title[160];
        snprintf(title, sizeof title, "%s  w=%d p=%d k=%d m=%d", name, pc.w, pc.p, pc.k, pc.m);
        if (!f || bsipipe_draw_svg_time(f, s, r, title, !cost->unit) < 0 || fclose(f) != 0) {
            fprintf(stderr, "bsipipe-plan: cannot write SVG '%s'\n", o->svg);
            status = 1;
        } else if (!o->json) {
            fprintf(stderr, "bsipipe-plan: wrote %s (%s)\n", o->svg, name);
        }
        *first = 0;
    }
    if (rc == 0 && o->topology && !o->json && (o->all ? pc.schedule == BSIPIPE_SCHED_BSIPIPE : 1))
        print_mapping(o, s, cost);
    bsipipe_sim_result_destroy(ru);
    bsipipe_sim_result_destroy(r);
    return status;
}

/* --plan FILE: explicit flags must agree with what the file fixes (its
 * config, and its model when it has one). */
static int plan_conflicts(const options_t *o, const bsipipe_schedule_t *s, int has_model)
{
    cli_plan_flags_t f = {.set = o->set, .dims = o->dims};
    f.pc = config_for(o, o->kind);
    f.pc.w = o->w, f.pc.p = o->p, f.pc.k = o->k, f.pc.m = o->m;
    if (o->all)
        f.set &= ~(unsigned)CLI_SET_SCHEDULE;
    return cli_plan_conflicts("bsipipe-plan", o->plan, &f, s, has_model);
}


/* --preset paper: the memory column against the paper's Figure 4 (16 GPUs,
 * 20K tokens): BSIPipe's peak 60.1 GiB (GPT) / 67.9 GiB (LLaMA3), 24% / 27%
 * above Seq1F1B-I, below Seq1F1B and TeraPipe. docs/schedules.md explains
 * the difference. */
static void print_paper_memory(const options_t *o)
{
    const double *g = o->peak_gib;
    double bsi = g[BSIPIPE_SCHED_BSIPIPE], si = g[BSIPIPE_SCHED_SEQ1F1B_I];
    double s1 = g[BSIPIPE_SCHED_SEQ1F1B], tera = g[BSIPIPE_SCHED_TERAPIPE];
    if (!o->all || bsi <= 0 || si <= 0 || s1 <= 0 || tera <= 0)
        return;
    int llama = o->dims.family == BSIPIPE_MODEL_LLAMA;
    int paper_setting = o->w == 16 && o->m == 64 && o->tp == 1 && o->dims.seq_len == 20480 &&
                        o->dims.n_layers == 64 && o->dims.hidden == 1280;
    printf("\npeak memory per device (activations + parameters), planner vs the paper's Figure 4%s:\n",
           paper_setting ? "" : " (the paper's figures are for w=16, S=20K, L=64, hidden 1280: this run differs)");
    printf("  planner: bsipipe %.1f GiB = %.2fx seq1f1b-i (%.1f); seq1f1b %.1f (bsipipe %s); terapipe %.1f (bsipipe %s)\n",
           bsi, bsi / si, si, s1, bsi < s1 ? "below" : "above", tera, bsi < tera ? "below" :  "above");
    printf("  paper:   bsipipe %.1f GiB = %.2fx seq1f1b-i; below seq1f1b and terapipe (%s)\n",
           llama ? 67.9 : 60.1, llama ? 1.27 : 1.24, llama ? "LLaMA3" : "GPT");
    printf("  the planner counts fp32 stashes of every layer input (no recomputation) and %s;\n"
           "  docs/schedules.md (Memory against the paper)\n",
           o->auto_k ? "runs each sequence-level\n  schedule at the k --k auto chose for it (below)"
                     : "keeps the same k for\n  seq1f1b as for the other sequence-level schedules");
    const double *t = o->tokens_s;
    if (t && t[BSIPIPE_SCHED_SEQ1F1B_I] > 0 && t[BSIPIPE_SCHED_SEQ1F1B] > 0)
        printf("\nthroughput, BSIPipe over the sequence-level baselines (paper Table 2, 16 GPUs, 20K: %s):\n"
               "  planner: %.2fx seq1f1b-i, %.2fx seq1f1b; paper: %s\n"
               "  most of the difference is where the vocabulary layer sits (--vocab 256: about 1.02x);\n"
               "  docs/schedules.md (Throughput against the paper)\n",
               llama ? "LLaMA3" : "GPT", t[BSIPIPE_SCHED_BSIPIPE] / t[BSIPIPE_SCHED_SEQ1F1B_I],
               t[BSIPIPE_SCHED_BSIPIPE] / t[BSIPIPE_SCHED_SEQ1F1B],
               llama ? "1.11x both on average over its settings" : "1.12-1.13x on average over its settings");
}

/* --preset paper: the paper's Table 3, BSIPipe with tensor parallelism on
 * the same 16 GPUs (2 nodes of 8): (w, D_t) = (16, 1), (8, 2), (4, 4). The
 * paper measures (8,2) fastest, (4,4) slowest, and GPT's peak memory 60.1
 * GiB at (16,1) down to 18.4 GiB at (4,4). */
static int print_paper_tp(const options_t *o, const bsipipe_cost_model_t *flops)
{
    static const int conf[3][2] = {{16, 1}, {8, 2}, {4, 4}};
    static const double paper_gib_gpt[3] = {60.1, -1, 18.4};
    const double gib = 1024.0 * 1024 * 1024;
    int gpus = o->w * o->tp, status = 0;
    printf("\nTable 3 (BSIPipe at k = %d x tensor parallelism, Megatron-SP collectives charged per layer on the TP\n"
           "ranks' timeline, %d GPUs, %d per node):\n\n", o->k, gpus, o->dpn ? o->dpn : gpus);
    printf("| (w, D_t) | bubble | iter (s) | tokens/s | vs (16,1) | TP comm | TP GB/iter | TP links   | peak GiB | paper GiB |\n");
    printf("|----------|--------|----------|----------|-----------|---------|------------|------------|----------|-----------|\n");
    double base = 0;
    for (int i = 0; i < 3; i++) {
        options_t oi = *o;
        oi.w = conf[i][0] * o->w * o->tp / 16;
        oi.tp = conf[i][1];
        if (oi.w < 2) continue;
        bsipipe_parallel_config_t pc = config_for(&oi, BSIPIPE_SCHED_BSIPIPE);
        bsipipe_schedule_t *s;
        bsipipe_sim_result_t *r;
        if (bsipipe_schedule_create(&pc, &o->dims, &s) < 0) {
            printf("| (%d,%d) | %s |\n", oi.w, oi.tp, bsipipe_error_detail());
            status = 1;
            continue;
        }
        if (bsipipe_simulate(s, flops, &r) < 0) {
            printf("| (%d,%d) | %s |\n", oi.w, oi.tp, bsipipe_error_detail());
            bsipipe_schedule_destroy(s);
            status = 1;
            continue;
        }
        double tps = (double)pc.m * o->dims.seq_len / r->iteration_time, busy = 0, tpc = 0, peak = 0;
        for (int d = 0; d < r->n_devices; d++) {
            busy += r->device[d].busy;
            tpc += r->device[d].tp_comm;
            double p = r->device[d].param_bytes + r->device[d].peak_act_bytes;
            if (p > peak) peak = p;
        }
        if (i == 0) base = tps;
        char paper[16] = "-";
        if (o->dims.family == BSIPIPE_MODEL_GPT && paper_gib_gpt[i] > 0 && o->w * o->tp == 16)
            snprintf(paper, sizeof paper, "%.1f", paper_gib_gpt[i]);
        printf("| (%2d,%d)   | %5.2f%% | %8.4f | %8.0f | %8.3fx | %6.1f%% | %10.2f | %-10s | %8.2f | %9s |\n",
               oi.w, oi.tp, 100 * r->bubble_ratio, r->iteration_time, tps, base > 0 ? tps / base : 0,
               busy > 0 ? 100 * tpc / busy : 0, (r->tp_bytes[0] + r->tp_bytes[1]) * oi.tp / 1e9,
               oi.tp == 1 ? "-" : bsipipe_sim_tp_crosses_nodes(s, flops) ? "inter-node" : "intra-node",
               peak / gib, paper);
        bsipipe_sim_result_destroy(r);
        bsipipe_schedule_destroy(s);
    }
    printf("\npaper (Table 3): (8,2) fastest, slightly above (16,1); (4,4) slowest (its TP traffic partly crosses\n"
           "nodes); GPT peak 60.1 GiB at (16,1) falling to 18.4 GiB at (4,4). TP comm: share of the devices' busy\n"
           "time spent in collectives; TP GB/iter: bytes all TP ranks send per iteration.\n");
    return status;
}

/* --preset paper: the paper's Table 4 row for the mapping, BSIPipe on 2
 * nodes of 8 topology-aware against naive, under two link models: the
 * planner's default (a link per device, a SEND holding its device) and the
 * one the measurements in docs/topology.md support for a cluster of servers:
 * one inter-node link per node that its devices share, sends that leave the
 * device free (NCCL, MPI), and the gradient sync a two-rank ring all-reduce.
 * The paper measures the naive mapping 1.59% (GPT) and 0.92% (LLaMA3)
 * slower. */
static int print_paper_mapping(const options_t *o, const bsipipe_cost_model_t *flops)
{
    int nodes = 2, per = o->w / 2;
    if (o->w < 4 || o->w % 4 || o->tp != 1)
        return 0;
    bsipipe_parallel_config_t pc = config_for(o, BSIPIPE_SCHED_BSIPIPE);
    bsipipe_schedule_t *s;
    if (bsipipe_schedule_create(&pc, &o->dims, &s) < 0) {
        printf("\nTable 4 (mapping): %s\n", bsipipe_error_detail());
        return 1;
    }
    printf("\nTable 4, the mapping (BSIPipe on %d nodes of %d, topology-aware against naive; sync on the critical path:\n"
           "what the gradient syncs add to the iteration):\n\n", nodes, per);
    printf("| link model | mapping | iter (s) | tokens/s | naive vs aware | act across GB | sync across GB | sync on "
           "the critical path (ms) |\n|---|---|---|---|---|---|---|---|\n");
    static const char *const models[2] = {"a link per device, blocking sends (default)",
                                          "one NIC per node, async sends, ring sync"};
    int status = 0;
    for (int mi = 0; mi < 2; mi++) {
        double tps_aware = 0;
        for (int naive = 0; naive < 2; naive++) {
            int map[4096];
            if (pc.w > 4096 || bsipipe_map_devices(&pc, nodes, per, !naive, map) < 0) {
                printf("| %s | %s | %s |\n", models[mi], naive ? "naive" : "aware", bsipipe_error_detail());
                status = 1;
                continue;
            }
            bsipipe_cost_model_t c = *flops, free_sync;
            c.device_node = map;
            c.devices_per_node = 0;
            c.shared_nic = mi == 1;
            c.async_send = mi == 1;
            free_sync = c;
            free_sync.sync_free = 1;
            bsipipe_sim_result_t *r = NULL, *f = NULL;
            if (bsipipe_simulate(s, &c, &r) < 0 || bsipipe_simulate(s, &free_sync, &f) < 0) {
                printf("| %s | %s | %s |\n", models[mi], naive ? "naive" : "aware", bsipipe_error_detail());
                status = 1;
            } else {
                double tps = (double)pc.m * o->dims.seq_len / r->iteration_time;
                char vs[16] = "";
                if (naive && tps_aware > 0)
                    snprintf(vs, sizeof vs, "%+.2f%%", 100 * (tps / tps_aware - 1));
                else
                    tps_aware = tps;
                printf("| %s | %s | %.4f | %.0f | %s | %.2f | %.2f | %.1f |\n", models[mi], naive ? "naive" : "aware",
                       r->iteration_time, tps, vs, r->act_bytes[1] / 1e9, r->sync_bytes[1] / 1e9,
                       (r->iteration_time - f->iteration_time) * 1e3);
            }
            bsipipe_sim_result_destroy(r);
            bsipipe_sim_result_destroy(f);
        }
    }
    printf("\npaper (Table 4): without the mapping %s slower; docs/topology.md says which link model the\n"
           "measurements support and why the two differ.\n",
           o->dims.family == BSIPIPE_MODEL_LLAMA ? "0.92%" : "1.59%");
    bsipipe_schedule_destroy(s);
    return status;
}

/* --k auto: one schedule's choice. */
typedef struct auto_k_row {
    bsipipe_schedule_kind_t kind;
    int rc;
    bsipipe_k_choice_t ch;
} auto_k_row_t;

/* --k auto: under the table, each schedule's k, against k = 1 and against
 * the fastest k when the budget ruled it out. */
static void print_auto_k(const options_t *o, const auto_k_row_t *rows, int n)
{
    int planned = 0;
    for (int i = 0; i < n; i++)
        planned += rows[i].rc == 0;
    if (!planned)
        return; /* every choice failed, each named on stderr */
    printf("\n--k auto: each schedule planned and simulated at every k in 1..%d it allows, FLOPs costs%s",
           BSIPIPE_CHOOSE_K_MAX, o->piece_half > 0 ? "" : " (every piece at the device's full rate; --piece-half N slows short ones)");
    if (o->piece_half > 0)
        printf(", pieces at len / (len + %g) of the device's rate", o->piece_half);
    if (o->act_budget_gib > 0)
        printf("; activation budget %g GiB per device", o->act_budget_gib);
    printf(":\n\n| schedule   |  k | iter (s) | act GiB | k = 1: iter (s) | act GiB | fastest k, budget aside |\n");
    printf("|------------|----|----------|---------|-----------------|---------|-------------------------|\n");
    for (int i = 0; i < n; i++) {
        const bsipipe_k_choice_t *ch = &rows[i].ch;
        if (rows[i].rc < 0)
            continue; /* named on stderr */
        const bsipipe_k_candidate_t *c = &ch->tried[ch->chosen], *one = NULL, *fastest = &ch->tried[ch->fastest];
        for (int j = 0; j < ch->n_tried; j++)
            if (ch->tried[j].rc == 0 && ch->tried[j].k == 1)
                one = &ch->tried[j];
        char fast[64] = "the same";
        if (!fastest->fits) /* only a budget tells them apart by more than a tie */
            snprintf(fast, sizeof fast, "k = %d: %.4g s, %.2f GiB", fastest->k, fastest->iteration_time,
                     fastest->peak_act_bytes / 1073741824.0);
        printf("| %-10s | %2d | %8.4g | %7.2f | %15.4g | %7.2f | %s |\n", bsipipe_schedule_kind_name(rows[i].kind), c->k,
               c->iteration_time, c->peak_act_bytes / 1073741824.0, one ? one->iteration_time : NAN,
               one ? one->peak_act_bytes / 1073741824.0 : NAN, fast);
    }
}

static int run(const options_t *o)
{
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    bsipipe_cost_model_t flops = bsipipe_cost_model_flops(o->tflops * 1e12);
    unit.devices_per_node = flops.devices_per_node = o->dpn;
    unit.blocking_recv = flops.blocking_recv = o->blocking_recv;
    unit.recv_in_place = flops.recv_in_place = o->recv_in_place;
    unit.async_send = flops.async_send = o->async_send > 0;
    unit.shared_nic = flops.shared_nic = o->shared_nic;
    flops.piece_half_tokens = o->piece_half;
    unit.overlap_fb = flops.overlap_fb = o->overlap_fb;
    unit.sync_reduce_back = flops.sync_reduce_back = o->sync_reduce_back;
    if (o->link_bw[0] > 0) unit.intra_bandwidth = flops.intra_bandwidth = o->link_bw[0];
    if (o->link_lat[0] >= 0) unit.intra_latency = flops.intra_latency = o->link_lat[0];
    if (o->link_bw[1] > 0) unit.inter_bandwidth = flops.inter_bandwidth = o->link_bw[1];
    if (o->link_lat[1] >= 0) unit.inter_latency = flops.inter_latency = o->link_lat[1];
    const bsipipe_cost_model_t *cost = o->unit_cost ? &unit : &flops;
    int first = 1, status = 0, n_auto = 0, planned = 0;
    auto_k_row_t auto_rows[BSIPIPE_SCHED_COUNT];
    optimised_note_t bsipipe_note = {0};
    bsipipe_schedule_t *imported = NULL;
    bsipipe_import_info_t info;
    char pieces[2048] = "", groups[256] = "", layers[4][512];
    int n_layers = 0;
    if (o->plan) {
        /* The model of the flags (or defaults) when the file has none. */
        if (bsipipe_schedule_import_json_ex(o->plan, NULL, &o->dims, &imported, &info) < 0) {
            fprintf(stderr, "bsipipe-plan: %s\n", bsipipe_error_detail());
            return 2;
        }
        if ((status = plan_conflicts(o, imported, info.has_model)) != 0) {
            bsipipe_schedule_destroy(imported);
            return status;
        }
    }
    if (!o->json) {
        const bsipipe_model_dims_t *d = imported ? bsipipe_schedule_model(imported) : &o->dims;
        const bsipipe_parallel_config_t *pc = imported ? bsipipe_schedule_config(imported) : NULL;
        if (imported)
            printf("bsipipe-plan: plan %s: %s order of %ld compute ops, valid; transfers derived in the %s comm "
                   "order%s (%ld SEND/RECV/SYNC/STEP of the file ignored)%s\n", o->plan,
                   bsipipe_schedule_kind_name(pc->schedule), info.compute_ops, bsipipe_comm_order_name(pc->comm),
                   info.has_model ? "; model from the file" : "", info.ignored_ops,
                   info.comm_ops ? "; the file's SEND/RECV actions are those transfers" : "");
        printf("bsipipe-plan: %s model, L=%d, hidden=%d, heads=%d, S=%d tokens; w=%d, m=%d, D_t=%d; cost model: %s\n\n",
               d->family == BSIPIPE_MODEL_LLAMA ? "LLaMA" : "GPT", d->n_layers, d->hidden, d->n_heads, d->seq_len,
               pc ? pc->w : o->w, pc ? pc->m : o->m, pc ? pc->tp : o->tp, o->unit_cost ? "unit (F=1, B=2)" : "FLOPs");
        if (o->paper && !o->topology)
            printf("link classes: %d devices per node, consecutive devices on one node (the naive mapping; "
                   "--topology 2x8 maps mirrored pairs onto one node)\n\n", o->dpn);
        printf("| schedule   | p | k |  N_s | bubble(unit) | closed  | bubble | %-12s |  tokens/s | act GiB min/med/max  | param GiB | inter MB | sync MB |\n",
               o->unit_cost ? "iter (units)" : "iter (s)");
        printf("|------------|---|---|------|--------------|---------|--------|--------------|-----------|----------------------|-----------|----------|---------|\n");
    }
    if (imported) {
        status = show(o, imported, &unit, cost, &bsipipe_note, &first);
        if (bsipipe_schedule_config(imported)->k > 1)
            describe_pieces(imported, pieces, sizeof pieces);
        if (bsipipe_schedule_config(imported)->layout)
            describe_layers(imported, layers, &n_layers, 4);
        bsipipe_schedule_destroy(imported);
    }
    for (int kind = 0; !imported && kind < BSIPIPE_SCHED_COUNT; kind++) {
        if (!o->all && kind != (int)o->kind)
            continue;
        bsipipe_parallel_config_t pc = config_for(o, (bsipipe_schedule_kind_t)kind);
        if (o->auto_k) { /* k = 1 alone for schedules that keep sequences whole: the budget still holds */
            auto_k_row_t *a = &auto_rows[n_auto++];
            bsipipe_cost_model_t mapped;
            int map[4096];
            a->kind = pc.schedule;
            map_cost(o, &pc, cost, map, &mapped); /* as show() maps them (it names a mapping that fails) */
            if ((a->rc = bsipipe_schedule_choose_k(&pc, &o->dims, &mapped, o->act_budget_gib * 1073741824.0,
                                                   &a->ch)) < 0) {
                fprintf(stderr, "bsipipe-plan: %s: --k auto: %s\n", bsipipe_schedule_kind_name(pc.schedule),
                        bsipipe_error_detail());
                status = 1;
                continue;
            }
            pc.k = a->ch.k;
        }
        bsipipe_schedule_t *s;
        int created = bsipipe_schedule_create(&pc, &o->dims, &s);
        if (created < 0) {
            /* With every schedule asked for, one whose rules refuse this
             * config (dualpipev below m = 2w, bitpipe at odd w) is left out
             * and named; the table fails only when none plans. */
            int skip = o->all && created == BSIPIPE_ECONFIG;
            fprintf(stderr, "bsipipe-plan: %s: %s%s\n", bsipipe_schedule_kind_name((bsipipe_schedule_kind_t)kind),
                    skip ? "left out: " : "", bsipipe_error_detail());
            status |= !skip;
            continue;
        }
        planned++;
        status |= show(o, s, &unit, cost, &bsipipe_note, &first);
        int ns = pc.m * pc.k;
        if (!o->json && bsipipe_schedule_kind_traits(pc.schedule).interleaved && !bsipipe_schedule_kind_traits(
                pc.schedule).v_shape && ns % pc.w)
            snprintf(groups, sizeof groups, "%s: Megatron's micro-batch groups of G = %d units (its "
                     "--microbatch-group-size-per-virtual-pipeline-stage; w = %d does not divide N_s = %d)",
                     bsipipe_schedule_kind_name(pc.schedule), bsipipe_interleave_group(ns, pc.w), pc.w, ns);
        if (!pieces[0] && pc.k > 1)
            describe_pieces(s, pieces, sizeof pieces);
        if (o->layout)
            describe_layers(s, layers, &n_layers, 4);
        bsipipe_schedule_destroy(s);
    }
    if (!o->json && n_auto > 0)
        print_auto_k(o, auto_rows, n_auto);
    if (!o->json && o->noise > 0)
        print_noise(o);
    if (!o->json && bsipipe_note.valid)
        printf("\nbsipipe under unit costs: constructed %.2f%%, optimised %.2f%% (the optimising pass; peak activations\n"
               "per device %d -> %d subsequence-chunks); the paper's (w-1)/(3N_s+w-1) = %.2f%%\n",
               100 * bsipipe_note.constructed, 100 * bsipipe_note.optimised, bsipipe_note.peak_constructed,
               bsipipe_note.peak_optimised, 100 * bsipipe_note.bound);
    if (!o->json && o->paper) {
        print_paper_memory(o);
        if (o->all && o->tp == 1)
            status |= print_paper_tp(o, &flops);
        if (o->all)
            status |= print_paper_mapping(o, &flops);
    }
    if (!o->json && pieces[0])
        printf("\n%s\n", pieces);
    if (!o->json && groups[0])
        printf("\n%s\n", groups);
    for (int i = 0; !o->json && i < n_layers; i++)
        printf("%s%s\n", i == 0 ? "\n" : "", layers[i]);
    if (!o->json)
        printf("\nbubble(unit): simulated under unit costs (F=1, B=2; a split backward B=1, W=1); closed: the\n"
               "papers' formula (for bsipipe the paper's bound, met on every plan swept; for seq-zbv a bound; *:\n"
               "holds for F=B; docs/schedules.md); bubble, iter,\n"
               "tokens/s: under the %s cost model;\n"
               "act: peak activation memory per device (stash + KV cache); inter: activation bytes crossing nodes;\n"
               "sync: gradient-sync bytes.\n",
               o->unit_cost ? "unit" : "FLOPs");
    if (!imported && planned == 0)
        status = 1; /* every schedule asked for was refused (named above) */
    return status;
}

int main(int argc, char **argv)
{
    options_t o = {.all = 1, .width = 100, .w = 4, .p = 2, .k = 2, .m = 8, .tp = 1, .concat = 1, .optimise = 1, .unit_cost = 1,
                   .tflops = 150, .link_lat = {-1, -1}, .partition = BSIPIPE_PARTITION_BALANCED, .comm = BSIPIPE_COMM_BSIPIPE,
                   .dims = {BSIPIPE_MODEL_GPT, 16, 256, 8, 1024, 256, 1024},
                   .noise_samples = 200, .noise_seed = 1};
    int ffn_set = 0;
    enum { O_SCHED = 256, O_W, O_P, O_K, O_M, O_TP, O_PART, O_COMM, O_NOCONCAT, O_NOOPT, O_RECV, O_SEND, O_NIC, O_MODEL, O_LAYERS, O_HIDDEN,
           O_HEADS, O_FFN, O_VOCAB, O_SEQ, O_COST, O_TFLOPS, O_DPN, O_PRESET, O_DRAW, O_WIDTH, O_SVG, O_FORMAT,
           O_TOPOLOGY, O_NAIVE_MAPPING, O_PLAN, O_NOISE, O_NOISE_SAMPLES, O_NOISE_SEED,
           O_ACT_BUDGET, O_PIECE_HALF, O_LAYOUT, O_OVERLAP_FB, O_INTRA_LINK, O_INTER_LINK, O_SYNC };
    static const struct option longopts[] = {
        {"schedule", 1, 0, O_SCHED}, {"w", 1, 0, O_W}, {"p", 1, 0, O_P}, {"k", 1, 0, O_K}, {"m", 1, 0, O_M},
        {"tp", 1, 0, O_TP}, {"partition", 1, 0, O_PART}, {"comm", 1, 0, O_COMM}, {"no-concat", 0, 0, O_NOCONCAT}, {"no-optimise", 0, 0, O_NOOPT}, {"recv", 1, 0, O_RECV}, {"send", 1, 0, O_SEND}, {"nic", 1, 0, O_NIC},
        {"model", 1, 0, O_MODEL}, {"layers", 1, 0, O_LAYERS}, {"hidden", 1, 0, O_HIDDEN}, {"heads", 1, 0, O_HEADS},
        {"ffn", 1, 0, O_FFN}, {"vocab", 1, 0, O_VOCAB}, {"seq", 1, 0, O_SEQ}, {"cost", 1, 0, O_COST},
        {"device-tflops", 1, 0, O_TFLOPS}, {"devices-per-node", 1, 0, O_DPN}, {"preset", 1, 0, O_PRESET},
        {"draw", 0, 0, O_DRAW}, {"width", 1, 0, O_WIDTH}, {"svg", 1, 0, O_SVG}, {"format", 1, 0, O_FORMAT},
        {"topology", 1, 0, O_TOPOLOGY}, {"naive-mapping", 0, 0, O_NAIVE_MAPPING}, {"plan", 1, 0, O_PLAN},
        {"act-budget", 1, 0, O_ACT_BUDGET}, {"layout", 1, 0, O_LAYOUT}, {"piece-half", 1, 0, O_PIECE_HALF},
        {"overlap-fb", 1, 0, O_OVERLAP_FB}, {"intra-link", 1, 0, O_INTRA_LINK}, {"inter-link", 1, 0, O_INTER_LINK}, {"sync", 1, 0, O_SYNC},
        {"noise", 1, 0, O_NOISE}, {"noise-samples", 1, 0, O_NOISE_SAMPLES}, {"noise-seed", 1, 0, O_NOISE_SEED},
        {"version", 0, 0, 'V'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, bad = 0;
    opterr = 0;
    while ((c = cli_getopt(argc, argv, "h", longopts, "bsipipe-plan")) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': cli_print_version("bsipipe-plan"); return 0;
        case O_SCHED:
            if (strcmp(optarg, "all") == 0) o.all = 1;
            else if (bsipipe_schedule_kind_parse(optarg, &o.kind) < 0) return die(bsipipe_error_detail());
            else o.all = 0;
            o.set |= CLI_SET_SCHEDULE;
            break;
        case O_W: bad |= cli_parse_int("bsipipe-plan", "--w", optarg, 1, 4096, &o.w); o.set_w = 1; o.set |= CLI_SET_W; break;
        case O_P: bad |= cli_parse_int("bsipipe-plan", "--p", optarg, 1, 64, &o.p); o.set_p = 1; o.set |= CLI_SET_P; break;
        case O_K:
            if (strcmp(optarg, "auto") == 0)
                o.auto_k = 1;
            else
                bad |= cli_parse_int("bsipipe-plan", "--k", optarg, 1, 65536, &o.k);
            o.set_k = 1;
            o.set |= CLI_SET_K;
            break;
        case O_ACT_BUDGET:
            if (!whole_number(optarg, &o.act_budget_gib) || !(o.act_budget_gib > 0 && o.act_budget_gib < 1e6))
                return die("--act-budget expects GiB of activations per device, a positive number (e.g. 40)");
            break;
        case O_PIECE_HALF:
            if (!whole_number(optarg, &o.piece_half) || !(o.piece_half >= 0 && o.piece_half <= 1 << 24))
                return die("--piece-half expects tokens, 0 or more (e.g. 16)");
            break;
        case O_SYNC:
            if (strcmp(optarg, "ring") == 0) o.sync_reduce_back = 0;
            else if (strcmp(optarg, "reduce-back") == 0) o.sync_reduce_back = 1;
            else return die("--sync expects ring (both ways at once) or reduce-back (the gradient there, the sum back)");
            break;
        case O_INTRA_LINK:
        case O_INTER_LINK: {
            int i = c == O_INTER_LINK;
            if (cli_parse_link("bsipipe-plan", i ? "--inter-link" : "--intra-link", optarg, &o.link_bw[i], &o.link_lat[i]) < 0)
                return 2;
            break;
        }
        case O_OVERLAP_FB: {
            char *end;
            errno = 0;
            o.overlap_fb = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o.overlap_fb > 0 && o.overlap_fb <= 1))
                return die("--overlap-fb expects the share of a pair's summed cost it takes, a number in (0, 1] "
                           "(e.g. 0.6; 1 runs the halves in sequence)");
            break;
        }
        case O_M: bad |= cli_parse_int("bsipipe-plan", "--m", optarg, 1, 1 << 20, &o.m); o.set_m = 1; o.set |= CLI_SET_M; break;
        case O_TP: bad |= cli_parse_int("bsipipe-plan", "--tp", optarg, 1, 1024, &o.tp); o.set |= CLI_SET_TP; break;
        case O_PART:
            if (strcmp(optarg, "balanced") == 0) o.partition = BSIPIPE_PARTITION_BALANCED;
            else if (strcmp(optarg, "even") == 0) o.partition = BSIPIPE_PARTITION_EVEN;
            else return die("--partition expects 'balanced' or 'even'");
            o.set |= CLI_SET_PARTITION;
            break;
        case O_COMM:
            if (bsipipe_comm_order_parse(optarg, &o.comm) < 0) return die(bsipipe_error_detail());
            o.set |= CLI_SET_COMM;
            break;
        case O_NOCONCAT: o.concat = 0; o.set |= CLI_SET_NO_CONCAT; break;
        case O_NOOPT: o.optimise = 0; break;
        case O_RECV:
            if (cli_parse_recv("bsipipe-plan", optarg, &o.blocking_recv, &o.recv_in_place) < 0)
                return 2;
            break;
        case O_SEND:
            if (strcmp(optarg, "blocking") == 0) o.async_send = 0;
            else if (strcmp(optarg, "async") == 0) o.async_send = 1;
            else return die("--send expects blocking (a SEND holds its device while its bytes move: the CPU "
                            "engine's copy) or async (only until the RECV is posted; the bytes then move on the "
                            "link while the device computes: NCCL, MPI)");
            break;
        case O_NIC:
            if (strcmp(optarg, "per-device") == 0) o.shared_nic = 0;
            else if (strcmp(optarg, "shared") == 0) o.shared_nic = 1;
            else return die("--nic expects per-device (each device has its own inter-node link) or shared (the "
                            "devices of a node share one: its inter-node transfers and syncs go one at a time)");
            break;
        case O_MODEL:
            if (strcmp(optarg, "gpt") == 0) o.dims.family = BSIPIPE_MODEL_GPT;
            else if (strcmp(optarg, "llama") == 0) o.dims.family = BSIPIPE_MODEL_LLAMA;
            else return die("--model expects 'gpt' or 'llama'");
            o.set |= CLI_SET_MODEL;
            break;
        case O_LAYERS: bad |= cli_parse_int("bsipipe-plan", "--layers", optarg, 1, 65536, &o.dims.n_layers); o.set |= CLI_SET_LAYERS; break;
        case O_LAYOUT: o.layout = optarg; o.set |= CLI_SET_LAYOUT; break;
        case O_HIDDEN: bad |= cli_parse_int("bsipipe-plan", "--hidden", optarg, 1, 1 << 20, &o.dims.hidden); o.set |= CLI_SET_HIDDEN; break;
        case O_HEADS: bad |= cli_parse_int("bsipipe-plan", "--heads", optarg, 1, 1 << 20, &o.dims.n_heads); o.set |= CLI_SET_HEADS; break;
        case O_FFN: bad |= cli_parse_int("bsipipe-plan", "--ffn", optarg, 1, 1 << 22, &o.dims.ffn_hidden); o.set |= CLI_SET_FFN; ffn_set = 1; break;
        case O_VOCAB: bad |= cli_parse_int("bsipipe-plan", "--vocab", optarg, 2, 1 << 24, &o.dims.vocab); o.set |= CLI_SET_VOCAB; break;
        case O_SEQ: bad |= cli_parse_int("bsipipe-plan", "--seq", optarg, 1, 1 << 24, &o.dims.seq_len); o.set |= CLI_SET_SEQ; break;
        case O_COST:
            if (strcmp(optarg, "unit") == 0) o.unit_cost = 1;
            else if (strcmp(optarg, "flops") == 0) o.unit_cost = 0;
            else return die("--cost expects 'unit' or 'flops'");
            break;
        case O_TFLOPS:
            if (!whole_number(optarg, &o.tflops) || !(o.tflops > 0 && o.tflops < 1e6))
                return die("--device-tflops expects a positive number");
            break;
        case O_DPN: bad |= cli_parse_int("bsipipe-plan", "--devices-per-node", optarg, 1, 4096, &o.dpn); break;
        case O_PRESET:
            if (strcmp(optarg, "paper") != 0) return die("--preset expects 'paper'");
            o.paper = 1;
            break;
        case O_DRAW: o.draw = 1; break;
        case O_TOPOLOGY: o.topology = optarg; break;
        case O_NAIVE_MAPPING: o.naive_mapping = 1; break;
        case O_PLAN: o.plan = optarg; break;
        case O_NOISE:
            if (!whole_number(optarg, &o.noise) || !(o.noise > 0 && o.noise <= BSIPIPE_SIM_NOISE_MAX_CV))
                return die("--noise expects the ops' coefficient of variation, above 0 and at most 2 (e.g. 0.1)");
            break;
        case O_NOISE_SAMPLES:
            bad |= cli_parse_int("bsipipe-plan", "--noise-samples", optarg, 1, 10000, &o.noise_samples);
            o.noise_set_sampling = 1;
            break;
        case O_NOISE_SEED: {
            int seed;
            bad |= cli_parse_int("bsipipe-plan", "--noise-seed", optarg, 0, 1 << 30, &seed);
            o.noise_seed = (unsigned long long)seed;
            o.noise_set_sampling = 1;
            break;
        }
        case O_WIDTH: bad |= cli_parse_int("bsipipe-plan", "--width", optarg, 10, 4096, &o.width); break;
        case O_SVG: o.svg = optarg; break;
        case O_FORMAT:
            o.torch_csv = strcmp(optarg, "torch-csv") == 0;
            if (strcmp(optarg, "json") == 0 || o.torch_csv) o.json = 1; /* machine output: the export alone */
            else if (strcmp(optarg, "table") == 0) o.json = 0;
            else return die("--format expects 'table', 'json' or 'torch-csv'");
            break;
        default:
            return cli_bad_option("bsipipe-plan", argv[optind - 1]);
        }
        if (bad)
            return 2;
    }
    if (cli_no_operands("bsipipe-plan", argc, argv, optind))
        return 2;
    if (o.paper) { /* the paper's GPT-1.3B on 16 devices, 20K tokens, 64 micro-batches */
        /* Flags given keep their values; the rest are the paper's. LLaMA3's
         * FFN is 3.5x the hidden size and its vocabulary 128256. */
        int llama = (o.set & CLI_SET_MODEL) && o.dims.family == BSIPIPE_MODEL_LLAMA;
        if (!(o.set & CLI_SET_LAYERS)) o.dims.n_layers = 64;
        if (!(o.set & CLI_SET_HIDDEN)) o.dims.hidden = 1280;
        if (!(o.set & CLI_SET_HEADS)) o.dims.n_heads = 32;
        if (!(o.set & CLI_SET_FFN)) o.dims.ffn_hidden = llama ? 7 * o.dims.hidden / 2 : 4 * o.dims.hidden;
        if (!(o.set & CLI_SET_VOCAB)) o.dims.vocab = llama ? 128256 : 50257;
        if (!(o.set & CLI_SET_SEQ)) o.dims.seq_len = 20480;
        ffn_set = 1;
        if (!o.set_w) o.w = 16;
        if (!o.set_m) o.m = 64;
        o.unit_cost = 0;
        if (!o.dpn) o.dpn = 8;
    }
    if (!ffn_set && !o.paper)
        o.dims.ffn_hidden = 4 * o.dims.hidden;
    if (o.plan && o.paper)
        return die("--plan and --preset paper both fix the plan: give one of them");
    if (o.json && o.all && !o.plan)
        return die("--format json and torch-csv export one schedule: add --schedule NAME (or --plan FILE)");
    if (o.auto_k && o.unit_cost)
        return die("--k auto compares predicted times, and unit costs charge a piece like a whole sequence: "
                   "add --cost flops");
    if (o.auto_k && o.plan)
        return die("--k auto chooses k, and --plan FILE fixes it: give one of them");
    if (o.act_budget_gib > 0 && !o.auto_k)
        return die("--act-budget is the budget --k auto chooses within: add --k auto");
    if (o.piece_half > 0 && o.unit_cost)
        return die("--piece-half slows short pieces under FLOPs costs: add --cost flops");
    if (o.noise_set_sampling && !(o.noise > 0))
        return die("--noise-samples and --noise-seed set how --noise samples: add --noise CV");
    if (o.noise > 0 && o.json)
        return die("--noise prints a second table: not with --format json");
    if (o.naive_mapping && !o.topology)
        return die("--naive-mapping needs --topology");
    if (o.topology) {
        bsipipe_topology_t *t;
        if (bsipipe_topology_create(o.topology, &t) < 0)
            return die(bsipipe_error_detail());
        o.nodes = bsipipe_topology_nodes(t);
        o.node_devices = bsipipe_topology_devices_per_node(t);
        bsipipe_topology_destroy(t);
    }
    double peak_gib[BSIPIPE_SCHED_COUNT] = {0}, tokens_s[BSIPIPE_SCHED_COUNT] = {0};
    o.peak_gib = peak_gib;
    o.tokens_s = tokens_s;
    noise_row_t noise_rows[BSIPIPE_SCHED_COUNT] = {{0}};
    o.noise_rows = noise_rows;
    return run(&o);
}
