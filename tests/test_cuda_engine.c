/* test_cuda_engine: one iteration of the engine on CUDA workers against the
 * same plan on CPU workers — loss, every gradient (per tensor: max|cuda-cpu|
 * / max|cpu|) and, after an AdamW step, the gradient norm. Tolerance 1e-5
 * with fp32 products, 1e-2 with --precision tf32|bf16|bf16s (the CUDA
 * engine's matrix products and, in bf16, attention on the tensor cores; the
 * CPU engine stays fp32); NaN or Inf never passes.
 *
 * Cases: GPT and LLaMA, BSIPipe (bidirectional: SYNC between mirrors) and
 * ZB-H1 (split B / W), then the same with tensor parallelism D_t = 2 (BSIPipe,
 * Seq1F1B-I, ZB-H1: each device two CUDA workers of its GPU, against D_t = 2
 * on CPU workers; BSIPipe again with the collectives as one task per rank
 * meeting on the GPU; not with bf16s, which TP refuses). With --transport
 * nccl the TP cases spread each group over 2 GPUs and run its collectives
 * with NCCL (per rank); with fewer than 2 GPUs they are not run, and say so.
 * w devices (default 4) on the GPUs found, several CUDA
 * workers per GPU when there are fewer GPUs (our StarPU allows that with
 * blocking drivers through scripts/starpu-patches/0004). A StarPU without
 * that patch starts one CUDA worker per GPU: the engine then reports too few
 * workers, and this test says so and falls back to 1F1B on w = 1 (F, B and
 * STEP on CUDA, no transfers), which it marks in its output.
 *
 *   test_cuda_engine [--w N] [--transport local|nccl] [--precision P] [--table FILE]
 *                    [--cpu-only]
 *
 * --cpu-only runs only the CPU engine of every case (the device check's
 * CPU side: it needs no GPU) and checks that its loss is finite.
 * Exit 77 with "SKIP: no CUDA GPU found" without a GPU (or without CUDA in
 * libbsipipe). */
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "kernels/cuda/bsipipe_cuda_probe.h"
#include "tests/check.h"

#include <errno.h>
#include <stdlib.h>

static double tol = 1e-5;
static int cpu_only;
static const char *precision; /* of the CUDA engine (NULL: fp32) */

static void make_data(int m, int S, int V, unsigned seed, int *tokens, int *targets)
{
    unsigned x = seed * 2654435761u + 12345u;
    for (long i = 0; i < (long)m * S; i++) {
        x = x * 1664525u + 1013904223u;
        tokens[i] = (int)((x >> 8) % (unsigned)V);
        x = x * 1664525u + 1013904223u;
        targets[i] = (int)((x >> 8) % (unsigned)V);
    }
}

/* One forward+backward (grads, loss) and one full iteration (gnorm). */
typedef struct run_out {
    double loss, gnorm;
    float *grads;
} run_out_t;

static int run_one(const bsipipe_engine_options_t *o, const int *tok, const int *tgt, run_out_t *out)
{
    bsipipe_engine_t *e;
    int rc = bsipipe_engine_create(o, &e);
    if (rc < 0)
        return rc;
    out->grads = malloc(sizeof(float) * (size_t)bsipipe_engine_n_params(e));
    if (!out->grads)
        rc = -ENOMEM;
    if (rc == 0)
        rc = bsipipe_engine_forward_backward(e, tok, tgt, &out->loss);
    if (rc == 0)
        rc = bsipipe_engine_grads(e, out->grads);
    double loss2;
    if (rc == 0)
        rc = bsipipe_engine_iteration(e, tok, tgt, &loss2, &out->gnorm);
    bsipipe_engine_destroy(e);
    return rc;
}

static double rel_err(double a, double b)
{
    if (isnan(a) || isnan(b) || isinf(a) || isinf(b))
        return NAN;
    return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1);
}

/* How the CUDA engine's TP collectives run in the next case. */
static bsipipe_engine_tp_coll_t tp_coll = BSIPIPE_TP_COLL_AUTO;

/* Runs one case; returns 0 (ran), 77 (engine refused: not enough workers). */
static int run_case(const char *name, bsipipe_model_dims_t dims, bsipipe_schedule_kind_t kind, int w, int k,
                    int tp, const char *transport, FILE *table)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = w;
    pc.k = k;
    pc.m = 4;
    pc.tp = tp;
    if (w == 1)
        pc.p = 1;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&dims, &pc);
    long ntok = (long)pc.m * dims.seq_len;
    int *tok = malloc(sizeof(int) * (size_t)ntok), *tgt = malloc(sizeof(int) * (size_t)ntok);
    run_out_t cpu = {0}, gpu = {0};
    if (!tok || !tgt) {
        free(tok);
        free(tgt);
        CHECK(0, "out of memory");
        return 0;
    }
    make_data(pc.m, dims.seq_len, dims.vocab, 7, tok, tgt);
    int rc = run_one(&o, tok, tgt, &cpu);
    CHECK(rc == 0, "%s: CPU engine: %s", name, bsipipe_error_detail());
    if (cpu_only) {
        CHECK(isfinite(cpu.loss) && isfinite(cpu.gnorm), "%s: CPU loss %g gnorm %g", name, cpu.loss, cpu.gnorm);
        printf("%-28s CPU engine only: loss %.6f gnorm %.6f\n", name, cpu.loss, cpu.gnorm);
        free(cpu.grads);
        free(tok);
        free(tgt);
        return 0;
    }
    o.devices = BSIPIPE_DEVICES_CUDA;
    o.transport = transport;
    o.precision = precision;
    o.tp_collectives = tp_coll;
    int rc_gpu = rc == 0 ? run_one(&o, tok, tgt, &gpu) : rc;
    if (rc == 0 && (rc_gpu == -ENOTSUP || (rc_gpu == -ENODEV && strstr(bsipipe_error_detail(), "CUDA workers")))) {
        printf("%-28s not run: %s\n", name, bsipipe_error_detail());
        free(cpu.grads);
        free(gpu.grads);
        free(tok);
        free(tgt);
        return 77;
    }
    CHECK(rc_gpu == 0, "%s: CUDA engine: %s", name, bsipipe_error_detail());
    if (rc == 0 && rc_gpu == 0) {
        double e_loss = rel_err(gpu.loss, cpu.loss), e_gnorm = rel_err(gpu.gnorm, cpu.gnorm), worst = 0;
        const char *worst_name = "-";
        int nt = bsipipe_model_tensors(&dims, NULL, 0);
        bsipipe_tensor_info_t *ti = calloc((size_t)nt, sizeof *ti);
        bsipipe_model_tensors(&dims, ti, nt);
        for (int i = 0; ti && i < nt; i++) {
            long n = (long)ti[i].rows * ti[i].cols;
            double dmax = 0, cmax = 0;
            for (long j = 0; j < n; j++) {
                double a = gpu.grads[ti[i].offset + j], b = cpu.grads[ti[i].offset + j];
                double d = isfinite(a) ? fabs(a - b) : INFINITY;
                dmax = d > dmax ? d : dmax;
                cmax = fabs(b) > cmax ? fabs(b) : cmax;
            }
            double r = dmax / (cmax > 0 ? cmax : 1);
            if (!(r <= worst)) { /* NaN and Inf stick */
                worst = isfinite(r) ? r : NAN;
                worst_name = ti[i].name;
            }
            CHECK(r <= tol, "%s: gradient %s: rel err %.3e > %.0e", name, ti[i].name, r, tol);
        }
        CHECK(e_loss <= tol, "%s: loss cuda %.9g cpu %.9g", name, gpu.loss, cpu.loss);
        CHECK(e_gnorm <= tol, "%s: gnorm cuda %.9g cpu %.9g", name, gpu.gnorm, cpu.gnorm);
        int ok = e_loss <= tol && e_gnorm <= tol && worst <= tol;
        printf("%-28s loss %.3e  gnorm %.3e  grads %.3e (worst %s)  %s\n", name, e_loss, e_gnorm, worst, worst_name,
               ok ? "ok" : "FAIL");
        if (table)
            fprintf(table, "%s\t%.3e\t%.3e\t%.3e\t%s\t%s\n", name, e_loss, e_gnorm, worst, worst_name,
                    ok ? "ok" : "FAIL");
        free(ti);
    }
    free(cpu.grads);
    free(gpu.grads);
    free(tok);
    free(tgt);
    return 0;
}

int main(int argc, char **argv)
{
    int w = 4;
    const char *transport = NULL, *table_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--w") == 0 && i + 1 < argc)
            w = atoi(argv[++i]);
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc &&
                 bsipipe_engine_precision_check(argv[i + 1]) == 0)
            precision = argv[++i];
        else if (strcmp(argv[i], "--cpu-only") == 0)
            cpu_only = 1;
        else if (strcmp(argv[i], "--table") == 0 && i + 1 < argc)
            table_path = argv[++i];
        else {
            fprintf(stderr, "usage: test_cuda_engine [--w N] [--transport local|nccl] [--precision "
                            "fp32|tf32|bf16|bf16s] [--table FILE] [--cpu-only]\n");
            return 2;
        }
    }
    if (!cpu_only && (!bsipipe_cuda_compiled() || bsipipe_cuda_device_count() <= 0)) {
        printf("SKIP: no CUDA GPU found (libbsipipe %s CUDA)\n", bsipipe_cuda_compiled() ? "with" : "without");
        return 77;
    }
    if (precision && strcmp(precision, "fp32") != 0)
        tol = 1e-2;
    printf("CUDA engine precision %s against the fp32 CPU engine, tolerance %.0e\n",
           precision ? precision : "fp32", tol);
    FILE *table = table_path ? fopen(table_path, "w") : NULL;
    if (table_path && !table) {
        fprintf(stderr, "test_cuda_engine: cannot write %s\n", table_path);
        return 1;
    }
    /* vocab 64, S 256; head dim 16 (GPT) and 8 (LLaMA, even); 8 layers: p*w = 8 for BSIPipe w = 4 */
    const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 64, 4, 256, 64, 256};
    const bsipipe_model_dims_t llama = {BSIPIPE_MODEL_LLAMA, 8, 64, 8, 176, 64, 256};
    char name[64];
    int refused = 0;
    const char *pr = precision ? precision : "fp32";
    snprintf(name, sizeof name, "gpt bsipipe w=%d k=2 %s", w, pr);
    refused |= run_case(name, gpt, BSIPIPE_SCHED_BSIPIPE, w, 2, 1, transport, table) == 77;
    if (!refused || cpu_only) {
        snprintf(name, sizeof name, "llama bsipipe w=%d k=2 %s", w, pr);
        run_case(name, llama, BSIPIPE_SCHED_BSIPIPE, w, 2, 1, transport, table);
        snprintf(name, sizeof name, "gpt zb-h1 w=%d %s", w, pr);
        run_case(name, gpt, BSIPIPE_SCHED_ZB_H1, w, 1, 1, transport, table);
        /* Tensor parallelism: each device is D_t CUDA workers of its GPU, the
         * sharded segments and the group's collectives on the device (with
         * nccl: its D_t ranks on D_t GPUs, NCCL's collectives), against the
         * same D_t on CPU workers (not with bf16s: refused) */
        int nccl = transport && strcmp(transport, "nccl") == 0;
        if (nccl && bsipipe_cuda_device_count() < 2 && !cpu_only)
            printf("tensor parallelism over NCCL not run: a TP group of 2 needs 2 GPUs, %d found\n",
                   bsipipe_cuda_device_count());
        else if (!precision || strcmp(precision, "bf16s") != 0) {
            /* the pipeline ran on CUDA above: a TP case that does not run fails */
            snprintf(name, sizeof name, "gpt bsipipe w=%d k=2 tp=2 %s", w, pr);
            CHECK(run_case(name, gpt, BSIPIPE_SCHED_BSIPIPE, w, 2, 2, transport, table) == 0, "%s did not run", name);
            snprintf(name, sizeof name, "llama seq1f1b-i w=%d k=2 tp=2 %s", w, pr);
            CHECK(run_case(name, llama, BSIPIPE_SCHED_SEQ1F1B_I, w, 2, 2, transport, table) == 0, "%s did not run",
                  name);
            snprintf(name, sizeof name, "gpt zb-h1 w=%d tp=2 %s", w, pr);
            CHECK(run_case(name, gpt, BSIPIPE_SCHED_ZB_H1, w, 1, 2, transport, table) == 0, "%s did not run", name);
            if (!nccl) { /* per-rank tasks meeting on the GPU: NCCL's task structure on one GPU */
                tp_coll = BSIPIPE_TP_COLL_PER_RANK;
                snprintf(name, sizeof name, "gpt bsipipe w=%d tp=2 per-rank %s", w, pr);
                CHECK(run_case(name, gpt, BSIPIPE_SCHED_BSIPIPE, w, 2, 2, transport, table) == 0, "%s did not run",
                      name);
                tp_coll = BSIPIPE_TP_COLL_AUTO;
            }
        }
    } else { /* one CUDA worker per GPU: what runs without a pipeline */
        printf("FALLBACK: 1F1B on w = 1 (no transfers, no SYNC): the pipeline itself has not run on CUDA\n");
        run_case("gpt 1f1b w=1 (fallback)", gpt, BSIPIPE_SCHED_1F1B, 1, 1, 1, transport, table);
        run_case("llama 1f1b w=1 (fallback)", llama, BSIPIPE_SCHED_1F1B, 1, 1, 1, transport, table);
    }
    if (table)
        fclose(table);
    return check_finish("test_cuda_engine");
}
