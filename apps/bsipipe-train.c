/* bsipipe-train: trains a GPT or LLaMA-style model with any schedule and any
 * scheduling policy, every op of the plan a StarPU task on CPU workers, or on
 * CUDA workers with --devices cuda (one worker per device). Byte-level tokens from a text file (default: the GPL
 * text every Debian system ships, or a generated corpus). */
#include "apps/cli.h"
#include "apps/train_log.h"
#include "apps/train_ckpt.h"
#include "apps/train_memory.h"
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_sim.h"
#include "graph/bsipipe_builder.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const default_corpus = "/usr/share/common-licenses/GPL-3";

/* FNV-1a (64 bits) of the whole model's parameters: a fingerprint to
 * compare runs bit for bit (a resumed run with an uninterrupted one). */
static unsigned long long params_digest(bsipipe_engine_t *e, long *n)
{
    *n = bsipipe_engine_n_params(e);
    float *v = malloc(sizeof(float) * (size_t)*n);
    unsigned long long h = 0xcbf29ce484222325ull;
    if (!v || bsipipe_engine_params(e, v) < 0) {
        free(v);
        *n = 0;
        return 0;
    }
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof(float) * (size_t)*n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    free(v);
    return h;
}

/* Names the first tensor, in layout order, holding a non-finite value: in
 * the parameters (a diverged or corrupt state) or else in the gradients of
 * the last backward. Under --mpi every rank calls it (the reads gather). */
static void first_nonfinite(bsipipe_engine_t *e, const bsipipe_model_dims_t *dims, char *out, size_t size)
{
    snprintf(out, size, "no tensor could be read");
    long n = bsipipe_engine_n_params(e);
    int nt = bsipipe_model_tensors(dims, NULL, 0);
    float *v = n > 0 ? malloc(sizeof(float) * (size_t)n) : NULL;
    bsipipe_tensor_info_t *ti = nt > 0 ? malloc(sizeof *ti * (size_t)nt) : NULL;
    if (v && ti && bsipipe_model_tensors(dims, ti, nt) == nt)
        for (int pass = 0; pass < 2; pass++) {
            if ((pass == 0 ? bsipipe_engine_params(e, v) : bsipipe_engine_grads(e, v)) < 0)
                continue;
            for (int t = 0; t < nt; t++)
                for (long j = 0; j < (long)ti[t].rows * ti[t].cols; j++)
                    if (ti[t].offset + j < n && !isfinite(v[ti[t].offset + j])) {
                        snprintf(out, size, "first non-finite %s: %s [%d x %d], element %ld = %g",
                                 pass == 0 ? "parameter" : "gradient", ti[t].name, ti[t].rows, ti[t].cols, j,
                                 (double)v[ti[t].offset + j]);
                        goto done;
                    }
            snprintf(out, size, "every %s finite", pass == 0 ? "parameter" : "parameter and gradient");
        }
done:
    free(v);
    free(ti);
}

static void usage(FILE *out)
{
    fputs(
"Usage: bsipipe-train [options]\n"
"Trains a transformer with a pipeline schedule; every forward, backward,\n"
"transfer, sync and step is a StarPU task.\n\n"
"  --schedule NAME   gpipe 1f1b 1f1b-i zb-h1 chimera terapipe seq1f1b seq1f1b-i\n"
"                    bsipipe bitpipe zb-v dualpipev seq-zbv bsipipe-zb dualpipe\n"
"                    zb-i zb-h2 (default bsipipe)\n"
"  --policy NAME     bsipipe (in-order, default; env BSIPIPE_POLICY) or a StarPU\n"
"                    policy from the list below (dmda, prio, eager, ...)\n"
"  --w N --p N --k N --m N   devices, chunks per device, subsequences, micro-batches\n"
"                    (defaults 4, 2 where the schedule interleaves, 2 where it\n"
"                    splits sequences, 8)\n"
"  --tp N            tensor-parallel degree D_t (default 1): each device becomes\n"
"                    N workers (CPU, or CUDA ones of its GPU) holding 1/N of\n"
"                    every layer (Megatron-LM with sequence parallelism); N\n"
"                    must divide the heads, the FFN width, the vocabulary and\n"
"                    every piece; checkpoints hold the full model, so a run may\n"
"                    resume with another --tp\n"
"  --model gpt|llama --layers N --hidden N --heads N --ffn N --seq N\n"
"                    (defaults gpt, 8, 128, 4, 4*hidden, 256; vocabulary 256 bytes)\n"
"  --layout auto|STR  layers per chunk: auto splits any L >= p*w by cost, STR is\n"
"                    Megatron's layout string (default: L/(p*w) each; bsipipe-plan\n"
"                    --help); checkpoints resume under another layout\n"
"  --iters N         iterations (default 30)     --seed N   (default 1)\n"
"  --lr X            AdamW learning rate (default 1e-3, the library's and bsipipe-ref's)\n"
"  --weight-decay X  AdamW weight decay of the matrices (default 0.1)\n"
"  --adam-beta1 X    --adam-beta2 X  moment decays (default 0.9, 0.95)\n"
"  --adam-eps X      AdamW epsilon (default 1e-8)\n"
"  --clip-grad X     clip the global gradient norm to X (default 1.0; 0: off)\n"
"  --data FILE       text file to train on (bytes are tokens); default: the GPL\n"
"                    text of Debian's base-files, else a generated corpus. The\n"
"                    last tenth is held out for validation\n"
"  --lr-warmup-iters N  linear warm-up of the rate over the first N iterations\n"
"                    (default 0)\n"
"  --lr-decay-style constant|linear|cosine  after the warm-up, the rate falls to\n"
"                    --min-lr at iteration --lr-decay-iters (default cosine)\n"
"  --lr-decay-iters N  where the decay ends (default --iters); a run stopped\n"
"                    early and resumed keeps its schedule when both give it\n"
"  --min-lr X        the rate the decay ends at (default lr/10)\n"
"  --eval-every N    validation loss on the held-out text every N iterations and\n"
"                    after the last (default 10; 0: none)\n"
"  --comm ORDER      bsipipe (default), no-reversal, ordered or naive transfer order\n"
"  --recv posted|in-place|blocking  a RECV posts its buffer and its device goes\n"
"                    on, the receives right behind a compute op posted before it\n"
"                    starts (default); in-place: each posted where it stands in\n"
"                    the plan; blocking: it holds its device until the data has\n"
"                    landed (NCCL-like; the plan is proved deadlock-free under it)\n"
"  --sends eager|tasks  eager (default on CPU devices in one process): an F or B\n"
"                    sends its output as it ends, copied into the posted\n"
"                    receive; tasks: a SEND task per transfer (docs/engine.md)\n"
"  --plan FILE       run a plan from JSON (bsipipe-plan --format json, or written\n"
"                    by hand: docs/plan-json.md) instead of a preset: its config\n"
"                    (schedule, w, p, k, m, comm) and its model, if it has one,\n"
"                    come from the file; a flag that disagrees is an error\n"
"  --watchdog S      seconds a send may wait for its receive (default 30)\n"
"  --unchecked       run a plan even if the validator finds a deadlock\n"
"  --emulate         emulated device time: F/B/W tasks sleep for their FLOPs at\n"
"                    --device-tflops (default 0.05) instead of computing, so\n"
"                    many devices fit on few cores; every line says EMULATED\n"
"  --log-interval N  print every N-th iteration's line (default 1; the last is\n"
"                    always printed)\n"
"  --log-json FILE   append one JSON object per iteration to FILE: loss, grad\n"
"                    norm, lr, tokens/s, model TFLOP/s, MFU, bubble, validation\n"
"  --peak-tflops X   one device's peak TFLOP/s, for the MFU (default: the\n"
"                    emulated rate with --emulate, else no MFU)\n"
"  --save-interval N  with --checkpoint: save every N iterations (default 1; the\n"
"                    last is always saved)\n"
"  --keep-last N     with --checkpoint: keep the last N saves as\n"
"                    DIR/iter_NNNNNNN/ too (hard links; each a checkpoint\n"
"                    directory --resume-from reads); default: DIR's latest only\n"
"  --checkpoint DIR  save DIR/checkpoint.bin after every iteration (atomic;\n"
"                    with --mpi every rank writes a part, rank 0 a manifest);\n"
"                    DIR is locked for the run (one run per DIR), and a DIR\n"
"                    that holds a checkpoint needs --resume or --overwrite\n"
"  --resume          continue from DIR/checkpoint.bin (bit-identical to an\n"
"                    uninterrupted run); --iters is the total\n"
"  --resume-from P   continue from the checkpoint in directory P (e.g. a kept\n"
"                    DIR/iter_NNNNNNN), saving to --checkpoint DIR if given\n"
"  --overwrite       start afresh in a DIR that holds a checkpoint, replacing\n"
"                    it at the first save\n"
"  --memory-limit B  memory budget of this process (e.g. 24G, 512M; default:\n"
"                    the machine's available memory): a plan whose predicted\n"
"                    peak (parameters, optimizer state, activations) exceeds\n"
"                    it is refused before anything is allocated\n"
"  --devices cpu|cuda  StarPU CPU workers (default) or CUDA workers as devices\n"
"  --gpus N          with --devices cuda: GPUs to spread the devices over\n"
"  --transport local|nccl  with --devices cuda: NCCL between GPUs; with --tp N,\n"
"                    each device's N ranks on N GPUs and its TP collectives\n"
"                    NCCL's (needs N GPUs; docs/tensor-parallel.md)\n"
"  --precision P     with --devices cuda: matrix products fp32 (default), tf32,\n"
"                    bf16 (tensor cores, fp32 accumulation; attention too) or\n"
"                    bf16s (bf16 operands and stashed activations); docs/cuda.md\n"
"  --mpi             run as one StarPU-MPI rank (node) of an mpirun job: every\n"
"                    rank runs its share of the devices (mirrored pairs of the\n"
"                    two pipes on one rank); only rank 0 prints. E.g.\n"
"                    mpirun -np 2 bsipipe-train --mpi; see docs/scaleout.md\n"
"  --naive-mapping   with --mpi: consecutive devices per rank (the ablation:\n"
"                    gradient sync then crosses ranks)\n"
"  --trace DIR       trace the run into DIR (created if needed): StarPU's FxT\n"
"                    trace converted by starpu_fxt_tool (paje.trace for ViTE,\n"
"                    dag.dot, tasks.rec, trace.rec), and from the last\n"
"                    iteration trace.json (ui.perfetto.dev), timeline.svg\n"
"                    (measured) next to planned.svg; see docs/tracing.md.\n"
"                    Without --trace, FxT is off unless STARPU_FXT_TRACE is set\n"
"  --version          the bsipipe version\n"
"  -h, --help\n", out);
    cli_print_policies(out);
}

/* Reads a text file as bytes. Refuses missing, empty, binary and too short
 * files with a sentence saying what is wrong. */
static unsigned char *load_corpus(const char *path, long need, long *len, int explicit_path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (explicit_path)
            fprintf(stderr, "bsipipe-train: cannot open data file '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    long cap = 1 << 16, n = 0;
    unsigned char *buf = malloc((size_t)cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, (size_t)(cap - n), f)) > 0) {
        n += (long)got;
        if (n == cap) {
            unsigned char *nb = cap < (1L << 30) ? realloc(buf, (size_t)(cap *= 2)) : NULL;
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "bsipipe-train: cannot read data file '%s'%s\n", path, buf ? "" : " (too large)");
        free(buf);
        return NULL;
    }
    long nul = 0, ctl = 0;
    for (long i = 0; i < n; i++) {
        nul += buf[i] == 0;
        ctl += buf[i] < 9 || (buf[i] > 13 && buf[i] < 32);
    }
    const char *why = n == 0 ? "is empty" : nul ? "contains NUL bytes: it looks binary, give a text file"
                    : ctl * 20 > n ? "has many control bytes: it looks binary, give a text file" : NULL;
    if (!why && n < need)
        why = "is too short for one sequence";
    if (why && !explicit_path) { /* the default text: the caller falls back and says so */
        free(buf);
        *len = n;
        return NULL;
    }
    if (why) {
        fprintf(stderr, "bsipipe-train: data file '%s' %s (%ld bytes; one sequence needs %ld)\n", path, why, n, need);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* A deterministic text-like corpus when no file is available. */
static unsigned char *generated_corpus(long n)
{
    static const char *const words[] = {"pipeline ", "schedule ", "forward ", "backward ", "device ", "chunk ",
                                        "subsequence ", "bubble ", "memory ", "the ", "of ", "and ", "runs ", "\n"};
    unsigned char *buf = malloc((size_t)n);
    unsigned x = 12345;
    for (long i = 0; buf && i < n;) {
        x = x * 1664525u + 1013904223u;
        const char *w = words[(x >> 16) % (sizeof words / sizeof *words)];
        for (; *w && i < n; w++)
            buf[i++] = (unsigned char)*w;
    }
    return buf;
}

typedef enum lr_decay { LR_CONSTANT, LR_LINEAR, LR_COSINE } lr_decay_t;

/* Megatron-style rate of iteration `it` (0-based): a linear warm-up to lr
 * over `warmup` iterations, then constant, or a linear or cosine fall to
 * min_lr at iteration `decay_iters` (and min_lr after). Depends on the
 * iteration alone, so a resumed run follows the same schedule. */
static double lr_at(int it, int decay_iters, int warmup, lr_decay_t decay, double lr, double min_lr)
{
    if (it < warmup)
        return lr * (it + 1) / warmup;
    if (decay == LR_CONSTANT || decay_iters - warmup <= 1)
        return lr;
    double progress = (double)(it - warmup) / (decay_iters - warmup - 1);
    if (progress > 1)
        progress = 1;
    double fall = decay == LR_LINEAR ? 1 - progress : 0.5 * (1 + cos(M_PI * progress));
    return min_lr + (lr - min_lr) * fall;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it is printed, also into a pipe or a file */
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 128, 4, 0, 256, 256};
    bsipipe_schedule_kind_t kind = BSIPIPE_SCHED_BSIPIPE;
    int w = 4, p = -1, k = -1, m = 8, tp = 1, iters = 30, seed = 1, unchecked = 0;
    /* 1e-3: at 3e-3 the main job's loss jumped from 3.08 to 11.13 at iteration
     * 14 (an independent PyTorch model reproduces it: the rate, not the kernels). */
    double lr = 1e-3, watchdog = 30, tflops = 0.05, mem_limit = 0, peak_tflops = 0;
    bsipipe_adamw_t opt_flags = {-1, -1, -1, -1, -1, -1}; /* -1: the engine's default */
    int log_interval = 1;
    const char *log_json = NULL;
    int eval_every = 10, warmup = 0, decay_iters = 0; /* 0: --iters */
    double min_lr = -1; /* -1: lr/10 */
    lr_decay_t decay = LR_COSINE;
    int emulate = 0, mpi = 0, naive_mapping = 0;
    train_ckpt_t ck = {.save_interval = 1};
    const char *trace = NULL, *transport = NULL, *precision = NULL, *plan_path = NULL, *layout = NULL;
    cli_plan_flags_t given = {0}; /* explicit flags, checked against a --plan */
    bsipipe_engine_devices_t devices = BSIPIPE_DEVICES_CPU;
    int gpus = 0;
    const char *policy = getenv("BSIPIPE_POLICY") ? getenv("BSIPIPE_POLICY") : "bsipipe";
    const char *data = NULL;
    bsipipe_comm_order_t comm = BSIPIPE_COMM_BSIPIPE;
    int blocking_recv = 0, recv_in_place = 0, sends = 0; /* sends: 0 the engine's default, 1 eager, 2 tasks */
    enum { O_SCHED = 256, O_POLICY, O_W, O_P, O_K, O_M, O_MODEL, O_LAYERS, O_HIDDEN, O_HEADS, O_FFN, O_SEQ, O_ITERS,
           O_SEED, O_LR, O_WARMUP, O_DECAY, O_DECAY_ITERS, O_MINLR, O_EVAL, O_DATA, O_COMM, O_RECV, O_SENDS, O_WATCHDOG, O_UNCHECKED, O_EMULATE, O_TFLOPS, O_CKPT, O_RESUME, O_TRACE,
           O_MPI, O_NAIVE_MAPPING, O_DEVICES, O_GPUS, O_TRANSPORT, O_PRECISION, O_OVERWRITE, O_MEMLIMIT, O_PLAN, O_TP,
           O_WD, O_BETA1, O_BETA2, O_EPS, O_CLIP, O_LOG_INTERVAL, O_LOG_JSON, O_PEAK, O_SAVE_INTERVAL, O_KEEP_LAST, O_RESUME_FROM, O_LAYOUT };
    static const struct option longopts[] = {
        {"schedule", 1, 0, O_SCHED}, {"policy", 1, 0, O_POLICY}, {"w", 1, 0, O_W}, {"p", 1, 0, O_P},
        {"k", 1, 0, O_K}, {"m", 1, 0, O_M}, {"model", 1, 0, O_MODEL}, {"layers", 1, 0, O_LAYERS},
        {"hidden", 1, 0, O_HIDDEN}, {"heads", 1, 0, O_HEADS}, {"ffn", 1, 0, O_FFN}, {"seq", 1, 0, O_SEQ},
        {"iters", 1, 0, O_ITERS}, {"seed", 1, 0, O_SEED}, {"lr", 1, 0, O_LR}, {"eval-every", 1, 0, O_EVAL}, {"lr-warmup-iters", 1, 0, O_WARMUP},
        {"lr-decay-style", 1, 0, O_DECAY}, {"lr-decay-iters", 1, 0, O_DECAY_ITERS}, {"min-lr", 1, 0, O_MINLR}, {"data", 1, 0, O_DATA},
        {"comm", 1, 0, O_COMM}, {"recv", 1, 0, O_RECV}, {"sends", 1, 0, O_SENDS}, {"watchdog", 1, 0, O_WATCHDOG}, {"unchecked", 0, 0, O_UNCHECKED},
        {"emulate", 0, 0, O_EMULATE}, {"device-tflops", 1, 0, O_TFLOPS}, {"checkpoint", 1, 0, O_CKPT},
        {"resume", 0, 0, O_RESUME}, {"trace", 1, 0, O_TRACE}, {"mpi", 0, 0, O_MPI},
        {"naive-mapping", 0, 0, O_NAIVE_MAPPING}, {"devices", 1, 0, O_DEVICES},
        {"gpus", 1, 0, O_GPUS}, {"transport", 1, 0, O_TRANSPORT},
        {"precision", 1, 0, O_PRECISION}, {"overwrite", 0, 0, O_OVERWRITE},
        {"memory-limit", 1, 0, O_MEMLIMIT}, {"plan", 1, 0, O_PLAN}, {"tp", 1, 0, O_TP},
        {"weight-decay", 1, 0, O_WD}, {"adam-beta1", 1, 0, O_BETA1}, {"adam-beta2", 1, 0, O_BETA2},
        {"adam-eps", 1, 0, O_EPS}, {"clip-grad", 1, 0, O_CLIP}, {"log-interval", 1, 0, O_LOG_INTERVAL},
        {"log-json", 1, 0, O_LOG_JSON}, {"peak-tflops", 1, 0, O_PEAK}, {"save-interval", 1, 0, O_SAVE_INTERVAL},
        {"keep-last", 1, 0, O_KEEP_LAST}, {"resume-from", 1, 0, O_RESUME_FROM}, {"layout", 1, 0, O_LAYOUT},
        {"version", 0, 0, 'V'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, bad = 0;
    opterr = 0;
    while ((c = cli_getopt(argc, argv, "h", longopts, "bsipipe-train")) != -1 && !bad) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': cli_print_version("bsipipe-train"); return 0;
        case O_SCHED:
            if (bsipipe_schedule_kind_parse(optarg, &kind) < 0) {
                fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
                return 2;
            }
            given.set |= CLI_SET_SCHEDULE;
            break;
        case O_POLICY: policy = optarg; break;
        case O_W: bad = cli_parse_int("bsipipe-train", "--w", optarg, 1, 64, &w); given.set |= CLI_SET_W; break;
        case O_P: bad = cli_parse_int("bsipipe-train", "--p", optarg, 1, 64, &p); given.set |= CLI_SET_P; break;
        case O_K: bad = cli_parse_int("bsipipe-train", "--k", optarg, 1, 4096, &k); given.set |= CLI_SET_K; break;
        case O_M: bad = cli_parse_int("bsipipe-train", "--m", optarg, 1, 4096, &m); given.set |= CLI_SET_M; break;
        case O_TP: bad = cli_parse_int("bsipipe-train", "--tp", optarg, 1, 64, &tp); given.set |= CLI_SET_TP; break;
        case O_MODEL:
            if (strcmp(optarg, "gpt") == 0) dims.family = BSIPIPE_MODEL_GPT;
            else if (strcmp(optarg, "llama") == 0) dims.family = BSIPIPE_MODEL_LLAMA;
            else { fprintf(stderr, "bsipipe-train: --model expects 'gpt' or 'llama'\n"); return 2; }
            given.set |= CLI_SET_MODEL;
            break;
        case O_LAYERS: bad = cli_parse_int("bsipipe-train", "--layers", optarg, 1, 4096, &dims.n_layers); given.set |= CLI_SET_LAYERS; break;
        case O_HIDDEN: bad = cli_parse_int("bsipipe-train", "--hidden", optarg, 1, 65536, &dims.hidden); given.set |= CLI_SET_HIDDEN; break;
        case O_HEADS: bad = cli_parse_int("bsipipe-train", "--heads", optarg, 1, 4096, &dims.n_heads); given.set |= CLI_SET_HEADS; break;
        case O_FFN: bad = cli_parse_int("bsipipe-train", "--ffn", optarg, 1, 1 << 20, &dims.ffn_hidden); given.set |= CLI_SET_FFN; break;
        case O_SEQ: bad = cli_parse_int("bsipipe-train", "--seq", optarg, 1, 1 << 20, &dims.seq_len); given.set |= CLI_SET_SEQ; break;
        case O_ITERS: bad = cli_parse_int("bsipipe-train", "--iters", optarg, 1, 1000000, &iters); break;
        case O_SEED: bad = cli_parse_int("bsipipe-train", "--seed", optarg, 0, 1 << 30, &seed); break;
        case O_LR: bad = cli_parse_double("bsipipe-train", "--lr", optarg, 0, 10, &lr); break;
        case O_EVAL: bad = cli_parse_int("bsipipe-train", "--eval-every", optarg, 0, 1 << 30, &eval_every); break;
        case O_WARMUP: bad = cli_parse_int("bsipipe-train", "--lr-warmup-iters", optarg, 0, 1 << 30, &warmup); break;
        case O_MINLR: bad = cli_parse_double("bsipipe-train", "--min-lr", optarg, 0, 10, &min_lr); break;
        case O_DECAY_ITERS:
            bad = cli_parse_int("bsipipe-train", "--lr-decay-iters", optarg, 1, 1 << 30, &decay_iters);
            break;
        case O_DECAY:
            if (strcmp(optarg, "constant") == 0) decay = LR_CONSTANT;
            else if (strcmp(optarg, "linear") == 0) decay = LR_LINEAR;
            else if (strcmp(optarg, "cosine") == 0) decay = LR_COSINE;
            else {
                fprintf(stderr, "bsipipe-train: --lr-decay-style expects constant, linear or cosine, got '%s'\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_DATA: data = optarg; break;
        case O_COMM:
            if (bsipipe_comm_order_parse(optarg, &comm) < 0) {
                fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
                return 2;
            }
            given.set |= CLI_SET_COMM;
            break;
        case O_SENDS:
            sends = strcmp(optarg, "eager") == 0 ? 1 : strcmp(optarg, "tasks") == 0 ? 2 : 0;
            if (!sends) {
                fprintf(stderr, "bsipipe-train: --sends: '%s' is not eager or tasks\n", optarg);
                bad = 1;
            }
            break;
        case O_RECV:
            bad = cli_parse_recv("bsipipe-train", optarg, &blocking_recv, &recv_in_place);
            break;
        case O_PLAN: plan_path = optarg; break;
        case O_WD: bad = cli_parse_double("bsipipe-train", "--weight-decay", optarg, 0, 10, &opt_flags.weight_decay); break;
        /* beta < 1 (the bias correction divides by 1 - beta^t); eps > 0 (an
         * element with no gradient yet would divide 0 by 0) */
        case O_BETA1: bad = cli_parse_double("bsipipe-train", "--adam-beta1", optarg, 0, 0.999999, &opt_flags.beta1); break;
        case O_BETA2: bad = cli_parse_double("bsipipe-train", "--adam-beta2", optarg, 0, 0.999999, &opt_flags.beta2); break;
        case O_EPS: bad = cli_parse_double("bsipipe-train", "--adam-eps", optarg, 1e-30, 1, &opt_flags.eps); break;
        case O_CLIP: bad = cli_parse_double("bsipipe-train", "--clip-grad", optarg, 0, 1e9, &opt_flags.grad_clip); break;
        case O_LOG_INTERVAL: bad = cli_parse_int("bsipipe-train", "--log-interval", optarg, 1, 1 << 30, &log_interval); break;
        case O_LOG_JSON: log_json = optarg; break;
        case O_PEAK: bad = cli_parse_double("bsipipe-train", "--peak-tflops", optarg, 1e-6, 1e9, &peak_tflops); break;
        case O_SAVE_INTERVAL: bad = cli_parse_int("bsipipe-train", "--save-interval", optarg, 1, 1 << 30, &ck.save_interval); break;
        case O_KEEP_LAST: bad = cli_parse_int("bsipipe-train", "--keep-last", optarg, 1, 1 << 20, &ck.keep_last); break;
        case O_RESUME_FROM: ck.resume_from = optarg; break;
        case O_LAYOUT: layout = optarg; given.set |= CLI_SET_LAYOUT; break;
        case O_WATCHDOG: bad = cli_parse_double("bsipipe-train", "--watchdog", optarg, 0.01, 86400, &watchdog); break;
        case O_UNCHECKED: unchecked = 1; break;
        case O_EMULATE: emulate = 1; break;
        case O_TFLOPS: bad = cli_parse_double("bsipipe-train", "--device-tflops", optarg, 1e-6, 1e6, &tflops); break;
        case O_CKPT: ck.dir = optarg; break;
        case O_RESUME: ck.resume = 1; break;
        case O_OVERWRITE: ck.overwrite = 1; break;
        case O_MEMLIMIT: bad = cli_parse_bytes("bsipipe-train", "--memory-limit", optarg, &mem_limit); break;
        case O_TRACE: trace = optarg; break;
        case O_MPI: mpi = 1; break;
        case O_NAIVE_MAPPING: naive_mapping = 1; break;
        case O_DEVICES:
            if (bsipipe_engine_devices_parse(optarg, &devices) < 0) {
                fprintf(stderr, "bsipipe-train: --devices: %s\n", bsipipe_error_detail());
                return 2;
            }
            break;
        case O_GPUS: bad = cli_parse_int("bsipipe-train", "--gpus", optarg, 1, 64, &gpus); break;
        case O_TRANSPORT:
            if (strcmp(optarg, "local") != 0 && strcmp(optarg, "nccl") != 0) {
                fprintf(stderr, "bsipipe-train: --transport expects 'local' or 'nccl'\n");
                return 2;
            }
            transport = optarg;
            break;
        case O_PRECISION:
            if (bsipipe_engine_precision_check(optarg) < 0) {
                fprintf(stderr, "bsipipe-train: --precision: %s\n", bsipipe_error_detail());
                return 2;
            }
            precision = optarg;
            break;
        default:
            return cli_bad_option("bsipipe-train", argv[optind - 1]);
        }
    }
    if (bad)
        return 2;
    if (cli_no_operands("bsipipe-train", argc, argv, optind))
        return 2;
    /* --plan: read and validated before anything else happens; its config
     * (and its model, if it has one) replace the defaults. */
    bsipipe_schedule_t *user_plan = NULL;
    if (dims.ffn_hidden == 0)
        dims.ffn_hidden = 4 * dims.hidden;
    if (plan_path) {
        bsipipe_import_info_t info;
        if (bsipipe_schedule_import_json_ex(plan_path, NULL, &dims, &user_plan, &info) < 0) {
            fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
            return 2;
        }
        given.pc = bsipipe_parallel_config_default(kind);
        given.pc.w = w, given.pc.p = p, given.pc.k = k, given.pc.m = m, given.pc.comm = comm, given.pc.tp = tp;
        given.pc.layout = layout;
        given.dims = dims;
        int rc = cli_plan_conflicts("bsipipe-train", plan_path, &given, user_plan, info.has_model);
        if (rc) {
            bsipipe_schedule_destroy(user_plan);
            return rc;
        }
        const bsipipe_parallel_config_t *ppc = bsipipe_schedule_config(user_plan);
        dims = *bsipipe_schedule_model(user_plan);
        kind = ppc->schedule;
        w = ppc->w, p = ppc->p, k = ppc->k, m = ppc->m, comm = ppc->comm, tp = ppc->tp;
    }
    if (train_ckpt_check_flags(&ck, emulate))
        return 2;
    /* Under mpirun without --mpi every rank would train the whole model
     * alone, fighting for the cores: say so instead. */
    const char *world = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    if (!mpi && world && atoi(world) > 1) {
        fprintf(stderr, "bsipipe-train: started by mpirun with %s ranks but without --mpi; add --mpi so the ranks "
                        "share one plan (or run a single process)\n", world);
        return 2;
    }
    if (naive_mapping && !mpi) {
        fprintf(stderr, "bsipipe-train: --naive-mapping maps devices onto MPI ranks; it needs --mpi\n");
        return 2;
    }
    if (peak_tflops > 0 && !log_json) {
        fprintf(stderr, "bsipipe-train: --peak-tflops gives the MFU of --log-json FILE; add --log-json\n");
        return 2;
    }
    if (mpi && trace) {
        fprintf(stderr, "bsipipe-train: --trace is not supported with --mpi yet (each rank holds only its records); "
                        "run it in one process\n");
        return 2;
    }
    /* One run per checkpoint directory, for the run's whole life (released
     * at exit); then a fresh run does not silently replace a checkpoint.
     * Under --mpi after the engine exists (rank 0 takes the lock). */
    if (ck.dir && !mpi && train_ckpt_open(&ck))
        return 1;
    /* Tracing: StarPU reads its FxT settings in starpu_init (engine create).
     * A StarPU built with FxT traces by default (into /tmp): only with --trace
     * here, unless the user's environment asks for it. */
    if (trace && bsipipe_trace_begin(trace) < 0) {
        fprintf(stderr, "bsipipe-train: --trace: %s\n", bsipipe_error_detail());
        return 1;
    }
    if (!trace)
        setenv("STARPU_FXT_TRACE", "0", 0);
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.m = m;
    pc.comm = comm;
    pc.tp = tp;
    if (p > 0) pc.p = p;
    if (k > 0) pc.k = k;
    pc.layout = layout;
    if (user_plan)
        pc = *bsipipe_schedule_config(user_plan);

    /* Data: byte tokens; sequence j of iteration i starts at a fixed stride. */
    long need = dims.seq_len + 1, len = 0;
    unsigned char *corpus = load_corpus(data ? data : default_corpus, need, &len, data != NULL);
    const char *source = data ? data : default_corpus;
    if (!corpus && data)
        return 1;
    if (!corpus) {
        long default_len = len; /* bytes of the default text, 0 if missing */
        len = 1 << 20;
        /* One sequence and its next-token target must fit (and the batch
         * offsets are taken modulo len - S, which must not be 0). */
        if (len < need) {
            fprintf(stderr, "bsipipe-train: --seq %d needs at least %ld bytes of text; without --data the default "
                            "text %s (%ld bytes) and the generated corpus (%ld bytes) are shorter: give --data FILE "
                            "with at least %ld bytes, or a --seq below %ld\n", dims.seq_len, need, default_corpus,
                    default_len, len, need, len);
            return 1;
        }
        corpus = generated_corpus(len);
        source = "generated corpus";
        if (!corpus) { fprintf(stderr, "bsipipe-train: out of memory\n"); return 1; }
    }

    /* Host memory, or each GPU's free memory for CUDA devices (bf16 storage
     * halves the stashed activations). */
    if (train_memory_admit(&dims, &pc, user_plan, mpi && world ? atoi(world) : 1, mem_limit, devices, gpus,
                     devices == BSIPIPE_DEVICES_CUDA && precision && strcmp(precision, "bf16s") == 0 ? 0.5 : 1.0,
                     devices == BSIPIPE_DEVICES_CUDA && pc.tp > 1 && transport && strcmp(transport, "nccl") == 0)) {
        free(corpus);
        return 1;
    }
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, &pc);
    o.opt.lr = lr;
    if (opt_flags.weight_decay >= 0) o.opt.weight_decay = opt_flags.weight_decay;
    if (opt_flags.beta1 >= 0) o.opt.beta1 = opt_flags.beta1;
    if (opt_flags.beta2 >= 0) o.opt.beta2 = opt_flags.beta2;
    if (opt_flags.eps >= 0) o.opt.eps = opt_flags.eps;
    if (opt_flags.grad_clip >= 0) o.opt.grad_clip = opt_flags.grad_clip;
    o.seed = (unsigned long long)seed;
    o.policy = policy;
    o.watchdog_s = watchdog;
    o.unchecked_plan = unchecked;
    o.recv_in_place = recv_in_place;
    o.emulate_flops = emulate ? tflops * 1e12 : 0;
    o.mpi = mpi;
    o.naive_mapping = naive_mapping;
    o.devices = devices;
    o.gpus = gpus;
    o.transport = transport;
    o.precision = precision;
    o.plan = user_plan; /* the engine runs a copy */
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(&o, &e);
    bsipipe_schedule_destroy(user_plan);
    if (rc < 0) {
        fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
        free(corpus);
        return 1;
    }
    if (sends && bsipipe_engine_set_eager_send(e, sends == 1) < 0) {
        fprintf(stderr, "bsipipe-train: --sends %s: %s\n", sends == 1 ? "eager" : "tasks", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        free(corpus);
        return 1;
    }
    if (blocking_recv && bsipipe_engine_set_blocking_recv(e, 1) < 0) {
        fprintf(stderr, "bsipipe-train: --recv blocking: %s\n", bsipipe_error_detail());
        bsipipe_engine_destroy(e);
        free(corpus);
        return 1;
    }
    int rank = 0, nranks = 1;
    int *dev_rank = calloc((size_t)pc.w, sizeof *dev_rank);
    bsipipe_engine_ranks(e, &rank, &nranks, dev_rank);
    if (ck.dir && mpi) {
        int crc = rank == 0 && train_ckpt_open(&ck) ? -EINVAL : 0;
        if (bsipipe_engine_agree(e, crc, "could not open the checkpoint directory") < 0) {
            if (crc == 0)
                fprintf(stderr, "bsipipe-train: rank %d: %s\n", rank, bsipipe_error_detail());
            free(dev_rank);
            bsipipe_engine_destroy(e);
            free(corpus);
            return 1;
        }
    }
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 speaks for the job */
        fprintf(stderr, "bsipipe-train: rank %d: cannot silence stdout\n", rank);
    const bsipipe_schedule_t *s = bsipipe_engine_schedule(e);
    /* The plan's bubble: under unit costs, or under the emulated devices'
     * costs (FLOPs, TP collectives charged, transfers free) when emulating. */
    bsipipe_cost_model_t cost = bsipipe_cost_model_unit();
    if (emulate)
        cost = bsipipe_cost_model_emulated(tflops * 1e12);
    cost.blocking_recv = blocking_recv;
    cost.recv_in_place = recv_in_place;
    bsipipe_sim_result_t *plan = NULL;
    double planned = bsipipe_simulate(s, &cost, &plan) == 0 ? plan->bubble_ratio : -1;
    bsipipe_sim_result_destroy(plan);
    if (plan_path)
        printf("bsipipe-train: plan %s: the %s placement in the file's order; transfers derived (%s comm order)\n",
               plan_path, bsipipe_schedule_kind_name(kind), bsipipe_comm_order_name(pc.comm));
    printf("bsipipe-train: %s model L=%d hidden=%d heads=%d S=%d (%.2fM params); %s w=%d p=%d k=%d m=%d; policy %s; "
           "data: %s (%ld bytes)\n", dims.family == BSIPIPE_MODEL_LLAMA ? "LLaMA" : "GPT", dims.n_layers, dims.hidden,
           dims.n_heads, dims.seq_len, bsipipe_engine_n_params(e) / 1e6, bsipipe_schedule_kind_name(kind), pc.w, pc.p,
           pc.k, pc.m, policy, source, len);
    if (bsipipe_schedule_config(s)->layout)
        printf("bsipipe-train: layers per chunk: %s\n", bsipipe_schedule_config(s)->layout);
    if (mpi) {
        printf("StarPU-MPI: %d ranks; rank of each device:", nranks);
        for (int d = 0; d < pc.w; d++)
            printf(" %d", dev_rank[d]);
        printf(" (%s)\n", naive_mapping ? "naive: consecutive devices" : "topology-aware: mirrored pairs together");
    }
    free(dev_rank);
    if (blocking_recv)
        printf("bsipipe-train: blocking receives: a RECV holds its device until its data has landed\n");
    if (pc.tp > 1)
        printf("bsipipe-train: tensor parallelism D_t=%d: each device is %d StarPU workers (one per TP rank), every "
               "shard segment and collective a task (docs/tensor-parallel.md)\n", pc.tp, pc.tp);
    if (devices == BSIPIPE_DEVICES_CUDA)
        printf("bsipipe-train: devices: CUDA workers (one per device), transport %s, precision %s\n",
               transport ? transport : "local", precision ? precision : "fp32");
    const char *emu = emulate ? " [EMULATED]" : "";
    if (emulate)
        printf("EMULATED: compute tasks sleep for their FLOPs at %g TFLOP/s per device; no loss is computed\n",
               tflops);
    long start_it = 0;
    const char *load_dir = train_ckpt_load_dir(&ck);
    if (load_dir) {
        if (bsipipe_engine_load(e, load_dir, &start_it) < 0) {
            fprintf(stderr, "bsipipe-train: cannot resume: %s\n", bsipipe_error_detail());
            bsipipe_engine_destroy(e);
            free(corpus);
            return 1;
        }
        if (start_it >= iters) {
            fprintf(stderr, "bsipipe-train: %s/checkpoint.bin holds %ld iterations and --iters is %d (the total): "
                            "nothing to do; give --iters above %ld to continue training\n", load_dir, start_it, iters,
                    start_it);
            if (!emulate) { /* what the finished run left, to compare with another run */
                long n_params;
                unsigned long long h = params_digest(e, &n_params);
                if (n_params > 0)
                    printf("parameters: FNV-1a %016llx over %ld floats (of the checkpoint)\n", h, n_params);
            }
            /* Under mpirun the first rank to exit non-zero gets the others
             * killed: rank 0 says everything and frees the directory, and no
             * rank leaves before it has (the agreement is a barrier). */
            fflush(stdout);
            train_ckpt_release();
            if (mpi)
                bsipipe_engine_agree(e, 0, "finishing a resume with nothing to do");
            bsipipe_engine_destroy(e);
            free(corpus);
            return 1;
        }
        printf("resumed from %s/checkpoint.bin after iteration %ld\n", load_dir, start_it);
    }
    if (min_lr < 0)
        min_lr = lr / 10;
    if (decay_iters == 0)
        decay_iters = iters;
    if (min_lr > lr) {
        fprintf(stderr, "bsipipe-train: --min-lr %g is above --lr %g; the decay ends at or below the rate\n", min_lr,
                lr);
        bsipipe_engine_destroy(e);
        free(corpus);
        return 2;
    }
    int S = dims.seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)m * (size_t)S), *targets = malloc(sizeof(int) * (size_t)m * (size_t)S);
    double first = 0, last = 0, tok_s = 0, bubble = 0, val_loss = NAN;
    int done = 0;
    /* The last tenth of the text is held out: training batches come from the
     * rest, the validation batch (m sequences, fixed) from it. Too short a
     * text for both, or an emulated run (no loss): no validation. */
    long val_len = len / 10, train_len = len - val_len;
    int validate = eval_every > 0 && !emulate && val_len > S && train_len > S;
    if (!validate)
        train_len = len;
    else
        printf("validation: the last %ld bytes of %s held out, a loss every %d iteration%s\n", val_len, source,
               eval_every, eval_every == 1 ? "" : "s");
    double *peak = malloc(sizeof(double) * (size_t)pc.w);
    /* --log-json: rank 0 writes it (every rank sees the same sums). */
    train_log_t *jlog = NULL;
    double iter_flops = train_log_iteration_flops(&dims, pc.m);
    const char *my_rank = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
    if (log_json && (!mpi || !my_rank || atoi(my_rank) == 0) &&
        train_log_open(log_json, peak_tflops > 0 ? peak_tflops : emulate ? tflops : 0, pc.w * pc.tp, &jlog) < 0)
        rc = -EIO; /* named on stderr; no iteration runs */
    for (int it = (int)start_it; it < iters && rc == 0 && tokens && targets && peak; it++) {
        for (int mb = 0; mb < m; mb++) {
            long off = ((long)it * m + mb) * (S / 2 + 1) % (train_len - S);
            for (int i = 0; i < S; i++) {
                tokens[(long)mb * S + i] = corpus[off + i];
                targets[(long)mb * S + i] = corpus[off + i + 1];
            }
        }
        double loss, gnorm, rate = lr_at(it, decay_iters, warmup, decay, lr, min_lr);
        if (lr > 0)
            bsipipe_engine_set_lr_scale(e, rate / lr);
        rc = bsipipe_engine_iteration(e, tokens, targets, &loss, &gnorm);
        if (rc < 0) {
            fprintf(stderr, "bsipipe-train: iteration %d: %s\n", it + 1, bsipipe_error_detail());
            break;
        }
        /* Divergence stops the run before the state is saved: the last
         * checkpoint (if any) stays the last finite one. (An emulated run
         * computes no loss.) Every rank sees the same summed loss and
         * global gradient norm, so under --mpi all ranks stop together. */
        if (!emulate && (!isfinite(loss) || !isfinite(gnorm))) {
            char where[160];
            first_nonfinite(e, &dims, where, sizeof where);
            fprintf(stderr, "bsipipe-train: iteration %d: the %s not finite (loss %g, gradient norm %g; %s): "
                            "training diverged; this step is not saved%s. Lower --lr (now %g), or check the "
                            "data and the checkpoint resumed from\n", it + 1,
                    !isfinite(loss) && !isfinite(gnorm) ? "loss and the gradient norm are"
                    : !isfinite(loss) ? "loss is" : "gradient norm is", loss, gnorm, where,
                    ck.dir ? " (the checkpoint keeps the previous iteration)" : "", lr);
            rc = -EDOM;
            break;
        }
        bsipipe_engine_stats_t st;
        bsipipe_engine_last_stats(e, &st);
        bsipipe_engine_peak_memory(e, peak);
        double peak_max = 0;
        for (int d = 0; d < pc.w; d++)
            if (peak[d] > peak_max) peak_max = peak[d];
        if ((it + 1) % log_interval == 0 || it + 1 == iters || it == (int)start_it)
            printf("iter %4d/%d  loss %.4f  gnorm %.3f  lr %.2e  %8.0f tokens/s  bubble %5.1f%% (plan %.1f%%)  peak "
                   "act %.1f MiB  %.3f s%s\n", it + 1, iters, loss, gnorm, rate, st.tokens_per_s,
                   100 * st.bubble_ratio, 100 * planned, peak_max / 1048576.0, st.wall_s, emu);
        if ((rc = train_ckpt_after_iteration(&ck, e, it + 1, iters, rank)) < 0)
            break;
        if (done++ == 0) first = loss;
        last = loss;
        tok_s += st.tokens_per_s;
        bubble += st.bubble_ratio;
        /* Validation: the same pipeline, forward only (its backward ops keep
         * their slots as empty tasks); the trace keeps the training
         * iteration. */
        double val_now = NAN;
        if (validate && ((it + 1) % eval_every == 0 || it + 1 == iters)) {
            for (int mb = 0; mb < m; mb++) {
                long off = train_len + (long)mb * (S / 2 + 1) % (val_len - S);
                for (int i = 0; i < S; i++) {
                    tokens[(long)mb * S + i] = corpus[off + i];
                    targets[(long)mb * S + i] = corpus[off + i + 1];
                }
            }
            if ((rc = bsipipe_engine_evaluate(e, tokens, targets, &val_loss)) < 0) {
                fprintf(stderr, "bsipipe-train: validation after iteration %d: %s\n", it + 1, bsipipe_error_detail());
                break;
            }
            printf("iter %4d/%d  validation loss %.4f\n", it + 1, iters, val_loss);
            val_now = val_loss;
        }
        train_log_iteration(jlog, it + 1, iters, emulate ? NAN : loss, emulate ? NAN : gnorm, rate, st.tokens_per_s,
                            st.wall_s, iter_flops, st.bubble_ratio, val_now);
    }
    train_log_close(jlog);
    double act[2], sync[2];
    if (mpi && rc == 0 && done > 0 && bsipipe_engine_traffic(e, act, sync) == 0)
        printf("traffic per iteration: activations %.2f MB inside ranks, %.2f MB between ranks; gradient sync "
               "%.2f MB inside ranks, %.2f MB between ranks\n", act[0] / 1e6, act[1] / 1e6, sync[0] / 1e6,
               sync[1] / 1e6);
    if (rc == 0 && done > 0) {
        char val[48] = "";
        if (isfinite(val_loss))
            snprintf(val, sizeof val, ", validation loss %.4f", val_loss);
        printf("summary: %d iterations, loss %.4f -> %.4f%s, mean %.0f tokens/s, mean measured bubble %.1f%% "
               "(planned %.1f%%, %s)%s\n", done, first, last, val, tok_s / done, 100 * bubble / done,
               100 * planned, emulate ? "FLOPs costs of the emulated device" : "unit costs", emu);
    }
    free(peak);
    if (rc == 0 && done > 0 && !emulate) {
        long n_params;
        unsigned long long h = params_digest(e, &n_params);
        if (n_params > 0)
            printf("parameters: FNV-1a %016llx over %ld floats\n", h, n_params);
    }
    if (trace && rc == 0 && done > 0) {
        bsipipe_sim_result_t *drawn = NULL; /* planned.svg: the plan under the costs of the summary's bubble */
        if (bsipipe_simulate(s, &cost, &drawn) < 0)
            fprintf(stderr, "bsipipe-train: warning: no planned.svg: %s\n", bsipipe_error_detail());
        if ((rc = bsipipe_engine_trace_write(e, trace, drawn, &cost)) < 0)
            fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
        bsipipe_sim_result_destroy(drawn);
    }
    bsipipe_engine_destroy(e); /* StarPU's shutdown writes the raw FxT trace */
    if (trace) {
        int trc = bsipipe_trace_end(trace);
        if (trc == -ENOTSUP || trc == -ENOENT) {
            fprintf(stderr, "bsipipe-train: warning: %s\n", bsipipe_error_detail());
        } else if (trc < 0) {
            fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
            if (rc == 0) rc = trc;
        }
        if (rc == 0 && done > 0)
            printf("trace: %s: %strace.json, timeline.svg (measured, last iteration), planned.svg, index.html\n",
                   trace, trc == 0 ? "paje.trace, dag.dot, tasks.rec, trace.rec (starpu_fxt_tool), " : "");
    }
    free(tokens);
    free(targets);
    free(corpus);
    return rc < 0 ? 1 : 0;
}
