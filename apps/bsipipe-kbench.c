/* bsipipe-kbench: GFLOP/s of one transformer block's forward+backward on the
 * CPU kernels, at the paper's width (hidden 1280, 32 heads), sequence split
 * into k pieces with the KV prefix (forward in order, backward in reverse),
 * side by side with (a) OpenBLAS sgemm on the block's own matrix shapes and
 * (b) PyTorch's CPU time for the same block when python3 with torch is found.
 * A benchmark, not a test: it prints a table.
 *
 * FLOPs are model FLOPs: 3x the forward's matrix products (attention counts
 * only the causal half, and not the backward's recomputation of scores). */
#define _GNU_SOURCE /* clock_gettime, popen, RTLD_DEFAULT */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <cblas.h>

#include "apps/cli.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_partition.h"
#include "kernels/bsipipe_kernels.h"

#ifndef BSIPIPE_KBENCH_TORCH_SCRIPT
#define BSIPIPE_KBENCH_TORCH_SCRIPT "apps/bsipipe-kbench-torch.py"
#endif
#ifndef BSIPIPE_BUILDDIR
#define BSIPIPE_BUILDDIR ""
#endif
#ifndef BSIPIPE_PREFIX
#define BSIPIPE_PREFIX ""
#endif
#ifndef BSIPIPE_BINDIR
#define BSIPIPE_BINDIR ""
#endif
#ifndef BSIPIPE_PKGDATADIR
#define BSIPIPE_PKGDATADIR ""
#endif
#define TORCH_SCRIPT_NAME "bsipipe-kbench-torch.py"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "bsipipe-kbench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *p, size_t n, unsigned s, float scale)
{
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
}

/* the block's matrix products (forward, dX, dW of every linear), timed as
 * plain sgemm calls: the ceiling for the linear part of the block */
static double sgemm_rate(const bsipipe_model_dims_t *d, int k, const int *st, int reps, double *secs)
{
    int h = d->hidden, f = d->ffn_hidden;
    int a1 = d->family == BSIPIPE_MODEL_GPT ? f : 2 * f;
    int lin[5][2] = {{3 * h, h}, {h, h}, {a1, h}, {h, f}, {0, 0}}; /* out, in */
    size_t big = (size_t)d->seq_len * (a1 > 3 * h ? a1 : 3 * h);
    float *A = xalloc(sizeof(float) * big), *B = xalloc(sizeof(float) * (size_t)a1 * f * 2);
    float *C = xalloc(sizeof(float) * big);
    double best = 1e30, fl = 0;
    fill(A, big, 1, 1);
    fill(B, (size_t)a1 * f * 2, 2, 1);
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        fl = 0;
        for (int j = 0; j < k; j++) {
            int n = st[j + 1] - st[j];
            for (int i = 0; lin[i][0]; i++) {
                int o = lin[i][0], in = lin[i][1];
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o, in, 1, A, in, B, in,
                            0, C, o);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, o, 1, A, o, B, in,
                            0, C, in);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, in, n, 1, A, o, A, in,
                            1, B, in);
                fl += 3 * 2.0 * n * o * in;
            }
        }
        double t = now() - t0;
        if (r && t < best)
            best = t; /* first round warms up */
    }
    free(A);
    free(B);
    free(C);
    *secs = best;
    return fl / best * 1e-9;
}

/* attention alone (forward + backward of every piece) */
static double attn_rate(const bsipipe_model_dims_t *d, int k, const int *st, int reps, double *secs)
{
    int h = d->hidden, H = d->n_heads, S = d->seq_len;
    size_t sz = (size_t)S * h;
    float *q = xalloc(sizeof(float) * sz), *kk = xalloc(sizeof(float) * sz);
    float *v = xalloc(sizeof(float) * sz), *o = xalloc(sizeof(float) * sz);
    float *dq = xalloc(sizeof(float) * sz), *dk = xalloc(sizeof(float) * sz);
    float *dv = xalloc(sizeof(float) * sz), *lse = xalloc(sizeof(float) * (size_t)S * H);
    double best = 1e30, fl = 0;
    fill(q, sz, 3, 2);
    fill(kk, sz, 4, 2);
    fill(v, sz, 5, 2);
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        fl = 0;
        for (int j = 0; j < k; j++) {
            int s0 = st[j], n = st[j + 1] - s0;
            bsipipe_attention_forward(H, h / H, s0, n, q + (size_t)s0 * h, h, kk, v, h,
                                      o + (size_t)s0 * h, h, lse + (size_t)s0 * H);
            fl += 3 * 4.0 * h * ((double)n * s0 + (double)n * (n + 1) / 2);
        }
        for (int j = k - 1; j >= 0; j--) {
            int s0 = st[j], n = st[j + 1] - s0;
            bsipipe_attention_backward(H, h / H, s0, n, q + (size_t)s0 * h, h, kk, v, h,
                                       o + (size_t)s0 * h, o + (size_t)s0 * h, h,
                                       lse + (size_t)s0 * H, dq, h, dk, dv);
        }
        double t = now() - t0;
        if (r && t < best)
            best = t;
    }
    free(q); free(kk); free(v); free(o); free(dq); free(dk); free(dv); free(lse);
    *secs = best;
    return fl / best * 1e-9;
}

static long mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static int readable(const char *path) { return path && *path && access(path, R_OK) == 0; }

/* The PyTorch companion script: $BSIPIPE_KBENCH_TORCH; run from the build
 * tree, the source tree's; installed, pkgdatadir found from this program's
 * own directory (bindir's place relative to the prefix), so that a moved
 * install uses its own copy, then the configured pkgdatadir. NULL when none
 * is readable; `tried` lists the places looked at. */
static const char *find_torch_script(char *tried, size_t len)
{
    static char path[4096];
    const char *env = getenv("BSIPIPE_KBENCH_TORCH");
    tried[0] = '\0';
    if (env && *env) {
        snprintf(tried, len, "%s (BSIPIPE_KBENCH_TORCH)", env);
        return readable(env) ? env : NULL;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0'; /* exe: this program's directory */
    /* The build tree's program is apps/bsipipe-kbench, or libtool's apps/.libs/ one. */
    size_t np = strlen(BSIPIPE_PREFIX);
    int in_build = *BSIPIPE_BUILDDIR && (!strcmp(exe, BSIPIPE_BUILDDIR "/apps") ||
                                         !strcmp(exe, BSIPIPE_BUILDDIR "/apps/.libs"));
    const char *cands[3] = {NULL, NULL, NULL};
    int nc = 0;
    if (in_build)
        cands[nc++] = BSIPIPE_KBENCH_TORCH_SCRIPT;
    else if (np && !strncmp(BSIPIPE_BINDIR, BSIPIPE_PREFIX, np) && !strncmp(BSIPIPE_PKGDATADIR, BSIPIPE_PREFIX, np)) {
        const char *bin_rel = BSIPIPE_BINDIR + np; /* "/bin" */
        size_t ne = strlen(exe), nr = strlen(bin_rel);
        if (ne >= nr && !strcmp(exe + ne - nr, bin_rel)) {
            snprintf(path, sizeof path, "%.*s%s/" TORCH_SCRIPT_NAME, (int)(ne - nr), exe, BSIPIPE_PKGDATADIR + np);
            cands[nc++] = path;
        }
    }
    if (!in_build && *BSIPIPE_PKGDATADIR)
        cands[nc++] = BSIPIPE_PKGDATADIR "/" TORCH_SCRIPT_NAME;
    for (int i = 0; i < nc; i++) {
        size_t used = strlen(tried);
        snprintf(tried + used, len - used, "%s%s", used ? ", " : "", cands[i]);
        if (readable(cands[i]))
            return cands[i];
    }
    return NULL;
}

static const char *find_python(const char *script)
{
    static const char *cands[] = {"/usr/bin/python3", "python3"};
    static char cmd[1024];
    const char *env = getenv("BSIPIPE_PYTHON");
    if (access(script, R_OK))
        return NULL;
    if (env && *env)
        return env;
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import torch' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0)
            return cands[i];
    }
    return NULL;
}

/* PyTorch's side of one size: the block, attention alone and the matrix
 * products alone (best seconds; -1: not available, -2: skipped for memory),
 * and what it ran. */
typedef struct torch_result {
    double block, attn, gemm;
    char version[32], path[32];
} torch_result_t;

static torch_result_t torch_time(const char *py, const char *script, const bsipipe_model_dims_t *d,
                                 int threads, int reps)
{
    torch_result_t t = {-1, -1, -1, "", ""};
    char cmd[2048], line[256];
    double med;
    if (!py)
        return t;
    snprintf(cmd, sizeof cmd,
             "%s '%s' --seq %d --hidden %d --heads %d --ffn %d --family %s --threads %d "
             "--reps %d --mem-kb %ld 2>&1",
             py, script, d->seq_len, d->hidden, d->n_heads, d->ffn_hidden,
             d->family == BSIPIPE_MODEL_GPT ? "gpt" : "llama", threads, reps, mem_available());
    FILE *p = popen(cmd, "r");
    if (!p)
        return t;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "torch_seconds %lf %lf", &t.block, &med) == 2 ||
            sscanf(line, "torch_attn_seconds %lf %lf", &t.attn, &med) == 2 ||
            sscanf(line, "torch_gemm_seconds %lf %lf", &t.gemm, &med) == 2 ||
            sscanf(line, "torch_version %31s", t.version) == 1 || sscanf(line, "torch_attention %31s", t.path) == 1)
            continue;
        if (strncmp(line, "torch_skipped", 13) == 0)
            t.block = -2;
        else
            fprintf(stderr, "  [torch] %s", line);
    }
    pclose(p);
    return t;
}

/* OpenBLAS's kernel family, when the BLAS is OpenBLAS (looked up at run time
 * so that another CBLAS still links). */
static const char *blas_core(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "openblas_get_corename");
    char *(*fn)(void);
    if (!sym)
        return "not OpenBLAS";
    memcpy(&fn, &sym, sizeof fn);
    return fn();
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bsipipe-kbench [--seq 2048,4096,8192] [-k 2] [--reps 2] "
               "[--threads N]\n"
               "       [--family gpt|llama] [--hidden 1280] [--heads 32] [--ffn F] "
               "[--tiles Q,K] [--no-torch]\n"
               "threads: attention threads of bsipipe and torch.set_num_threads (default: "
               "online CPUs);\nBLAS threads follow OPENBLAS_NUM_THREADS. --version: the bsipipe version.\n");
}

int main(int argc, char **argv)
{
    char seqs[256] = "2048,4096,8192";
    int k = 2, reps = 2, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), no_torch = 0;
    int hidden = 1280, heads = 32, ffn = 0, tq = 0, tk = 0;
    bsipipe_model_family_t fam = BSIPIPE_MODEL_GPT;
    static const struct option opts[] = {
        {"seq", 1, 0, 'S'},     {"reps", 1, 0, 'r'},   {"threads", 1, 0, 't'},
        {"family", 1, 0, 'f'},  {"hidden", 1, 0, 'd'}, {"heads", 1, 0, 'H'},
        {"ffn", 1, 0, 'F'},     {"tiles", 1, 0, 'T'},  {"no-torch", 0, 0, 'n'},
        {"version", 0, 0, 'V'}, {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    int c, bad = 0;
    const char *P = "bsipipe-kbench";
    opterr = 0;
    while (!bad && (c = cli_getopt(argc, argv, "k:h", opts, "bsipipe-kbench")) != -1) {
        switch (c) {
        case 'S':
            if (strlen(optarg) >= sizeof seqs) {
                fprintf(stderr, "bsipipe-kbench: --seq list too long (at most %zu characters)\n", sizeof seqs - 1);
                return 2;
            }
            snprintf(seqs, sizeof seqs, "%s", optarg);
            break;
        case 'k': bad = cli_parse_int(P, "-k", optarg, 1, 4096, &k); break;
        case 'r': bad = cli_parse_int(P, "--reps", optarg, 1, 1000000, &reps); break;
        case 't': bad = cli_parse_int(P, "--threads", optarg, 1, 4096, &threads); break;
        case 'f':
            if (strcmp(optarg, "gpt") && strcmp(optarg, "llama")) {
                fprintf(stderr, "bsipipe-kbench: --family expects 'gpt' or 'llama', got '%s'\n", optarg);
                return 2;
            }
            fam = strcmp(optarg, "llama") ? BSIPIPE_MODEL_GPT : BSIPIPE_MODEL_LLAMA;
            break;
        case 'd': bad = cli_parse_int(P, "--hidden", optarg, 1, 65536, &hidden); break;
        case 'H': bad = cli_parse_int(P, "--heads", optarg, 1, 4096, &heads); break;
        case 'F': bad = cli_parse_int(P, "--ffn", optarg, 1, 1 << 20, &ffn); break;
        case 'T':
            if (sscanf(optarg, "%d,%d", &tq, &tk) != 2) {
                usage(stderr);
                return 2;
            }
            break;
        case 'n': no_torch = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': cli_print_version("bsipipe-kbench"); return 0;
        default:
            return cli_bad_option("bsipipe-kbench", argv[optind - 1]);
        }
    }
    if (bad)
        return 2;
    if (cli_no_operands("bsipipe-kbench", argc, argv, optind))
        return 2;
    { /* every --seq entry checked before the first one runs */
        char copy[sizeof seqs];
        int one, n = 0;
        snprintf(copy, sizeof copy, "%s", seqs);
        for (char *t = strtok(copy, ","); t; t = strtok(NULL, ","), n++)
            if (cli_parse_int(P, "--seq", t, 1, 1 << 20, &one) < 0)
                return 2;
        if (n == 0) {
            fprintf(stderr, "bsipipe-kbench: --seq expects a comma-separated list of lengths, e.g. 2048,4096\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1 || k < 1 || bsipipe_kernels_set_threads(threads) ||
        (tq && bsipipe_kernels_set_tiles(tq, tk))) {
        usage(stderr);
        return 2;
    }
    if (!ffn)
        ffn = fam == BSIPIPE_MODEL_GPT ? 4 * hidden : (8 * hidden / 3 + 63) / 64 * 64;
    char tried[8192];
    const char *script = find_torch_script(tried, sizeof tried);
    const char *py = no_torch || !script ? NULL : find_python(script);
    printf("# bsipipe-kbench: one %s block (hidden %d, %d heads, ffn %d) forward+backward, "
           "fp32, k=%d balanced pieces\n# %d attention thread(s); OPENBLAS_NUM_THREADS=%s; "
           "PyTorch: %s\n",
           fam == BSIPIPE_MODEL_GPT ? "GPT" : "LLaMA", hidden, heads, ffn, k, threads,
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "(default)",
           no_torch ? "disabled" : py ? py : script ? "not found (python3 with torch)" : "no script");
    if (script)
        printf("# PyTorch script: %s\n", script);
    else
        printf("# PyTorch script: not found (looked at %s)\n", tried[0] ? tried : "nothing: unknown install dirs");
    printf("# OpenBLAS core: %s%s\n", blas_core(),
           strcasecmp(blas_core(), "prescott") ? ""
               : " (CPU unknown to OpenBLAS: SSE3 kernels; try OPENBLAS_CORETYPE=Haswell "
                 "or SkylakeX, which applies to PyTorch's OpenBLAS as well)");
    printf("%6s %-18s %8s %8s %9s | %11s %10s %7s %7s %6s | %8s %9s %7s %7s %6s %7s\n", "seq", "pieces",
           "GFLOP", "time_s", "GFLOP/s", "sgemm GF/s", "attn GF/s", "attn_s", "rest_s", "ns/el", "torch_s",
           "torch GF/s", "attn_s", "rest_s", "ns/el", "ratio");
    int torch_said = 0;
    for (char *tok = strtok(seqs, ","); tok; tok = strtok(NULL, ",")) {
        bsipipe_model_dims_t d = {fam, 1, hidden, heads, ffn, 256, (int)strtol(tok, NULL, 10)};
        int *st = xalloc(sizeof(int) * (size_t)(k + 1)), rc;
        char pieces[64];
        if (bsipipe_model_dims_check(&d)) {
            fprintf(stderr, "bsipipe-kbench: bad dims at seq %s\n", tok);
            return 2;
        }
        rc = bsipipe_partition_balanced(&d, k, bsipipe_partition_align(d.seq_len, k, 1), st);
        if (rc) {
            fprintf(stderr, "bsipipe-kbench: %s\n", bsipipe_error_detail());
            return 2;
        }
        int S = d.seq_len, h = d.hidden;
        long lp = bsipipe_model_layer_params(&d), kv = bsipipe_model_kv_size(&d);
        size_t so = 0, *sto = xalloc(sizeof(size_t) * (size_t)(k + 1));
        for (int j = 0; j < k; j++) {
            sto[j] = so;
            so += (size_t)bsipipe_model_stash_size(&d, st[j + 1] - st[j]);
        }
        long ws = 0;
        for (int j = 0; j < k; j++)
            if (bsipipe_model_work_size(&d, st[j + 1] - st[j]) > ws)
                ws = bsipipe_model_work_size(&d, st[j + 1] - st[j]);
        float *P = xalloc(sizeof(float) * (size_t)bsipipe_model_params(&d));
        float *G = xalloc(sizeof(float) * (size_t)lp);
        float *stash = xalloc(sizeof(float) * so), *kvb = xalloc(sizeof(float) * (size_t)kv);
        float *dkv = xalloc(sizeof(float) * (size_t)kv), *work = xalloc(sizeof(float) * (size_t)ws);
        float *x = xalloc(sizeof(float) * (size_t)S * h), *y = xalloc(sizeof(float) * (size_t)S * h);
        float *dy = xalloc(sizeof(float) * (size_t)S * h);
        float *layer = P + bsipipe_model_layer_offset(&d, 0);
        double fl = 0, best = 1e30;
        bsipipe_model_init(&d, 1, P);
        fill(x, (size_t)S * h, 7, 2);
        fill(dy, (size_t)S * h, 8, 1e-3f);
        for (int j = 0; j < k; j++)
            fl += 3 * bsipipe_model_layer_flops(&d, st[j], st[j + 1] - st[j]);
        for (int r = 0; r <= reps; r++) {
            double t0 = now();
            memset(dkv, 0, sizeof(float) * (size_t)kv);
            for (int j = 0; j < k && !rc; j++)
                rc = bsipipe_chunk_forward(&d, 0, 1, st[j], st[j + 1] - st[j], layer,
                                           x + (size_t)st[j] * h, y + (size_t)st[j] * h,
                                           stash + sto[j], kvb);
            for (int j = k - 1; j >= 0 && !rc; j--)
                rc = bsipipe_chunk_backward(&d, 0, 1, st[j], st[j + 1] - st[j], layer, G,
                                            dy + (size_t)st[j] * h, y + (size_t)st[j] * h,
                                            stash + sto[j], kvb, dkv, work);
            double t = now() - t0;
            if (rc) {
                fprintf(stderr, "bsipipe-kbench: kernel error %s\n", bsipipe_strerror(rc));
                return 1;
            }
            if (r && t < best)
                best = t; /* the first round warms up (page faults, BLAS buffers) */
        }
        free(P); free(G); free(stash); free(kvb); free(dkv); free(work); free(x); free(y);
        free(dy); free(sto);
        double gemm_s, attn_s;
        double sg = sgemm_rate(&d, k, st, reps, &gemm_s), at = attn_rate(&d, k, st, reps, &attn_s);
        torch_result_t tr = torch_time(py, script, &d, threads, reps);
        double tt = tr.block;
        if (tr.version[0] && !torch_said) {
            printf("# PyTorch %s, attention: %s%s\n", tr.version, tr.path,
                   strcmp(tr.path, "sdpa") == 0 ? " (F.scaled_dot_product_attention, is_causal=True)"
                                                : " (masked softmax: materialised [H,S,S] scores; torch 1.x)");
            torch_said = 1;
        }
        snprintf(pieces, sizeof pieces, "%d", st[0]);
        for (int j = 1; j <= k; j++)
            snprintf(pieces + strlen(pieces), sizeof pieces - strlen(pieces), ",%d", st[j]);
        /* rest: the block's time outside its matrix products and attention
         * (norms, activations, residuals, copies) */
        /* ns/el: the remainder per element of one [S, hidden] activation,
         * the unit the norms, residuals and copies work in */
        double rest = best - gemm_s - attn_s, el = (double)S * h;
        printf("%6d %-18s %8.1f %8.3f %9.1f | %11.1f %10.1f %7.3f %7.3f %6.2f | ", S, pieces, fl * 1e-9,
               best, fl / best * 1e-9, sg, at, attn_s, rest, rest / el * 1e9);
        if (tt > 0) {
            double trest = tr.gemm > 0 && tr.attn > 0 ? tt - tr.gemm - tr.attn : -1.0;
            printf("%8.3f %9.1f %7.3f %7.3f %6.2f %7.2f\n", tt, fl / tt * 1e-9, tr.attn, trest,
                   trest / el * 1e9, tt / best);
        } else {
            printf("%8s %9s %7s %7s %6s %7s\n", tt == -2 ? "skip:mem" : "n/a", "-", "-", "-", "-", "-");
        }
        fflush(stdout);
        free(st);
    }
    printf("# ratio = PyTorch time / bsipipe time (> 1: bsipipe faster); torch runs the whole sequence; "
           "attn_s: attention alone, rest_s: block - matrix products alone - attention alone, "
           "ns/el: rest_s per element of [seq, hidden]\n");
    return 0;
}
