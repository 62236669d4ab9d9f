/* apps/cli.c: see cli.h. */
#include "apps/cli.h"
#include "bsipipe.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cli_parse_int(const char *prog, const char *opt, const char *arg, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in %d..%d, got '%s'\n", prog, opt, lo, hi, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_ull(const char *prog, const char *opt, const char *arg, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = isdigit((unsigned char)*arg) ? strtoull(arg, &end, 0) : 0;
    if (!isdigit((unsigned char)*arg) || *end != '\0' || errno) {
        fprintf(stderr, "%s: %s expects a non-negative integer, got '%s'\n", prog, opt, arg);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_bytes(const char *prog, const char *opt, const char *arg, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end), scale = 1;
    if (end != arg && *end) {
        const char *units = "KMGT";
        for (int i = 0; units[i]; i++)
            if (toupper((unsigned char)*end) == units[i])
                scale = (double)(1ull << (10 * (i + 1)));
        if (scale > 1) {
            end++;
            if (*end == 'i' || *end == 'I')
                end++;
            if (*end == 'B' || *end == 'b')
                end++;
        }
    }
    if (end == arg || *end != '\0' || errno || !(v > 0) || v * scale > 1e18) {
        fprintf(stderr, "%s: %s expects a positive byte count such as 24G, 512M or 1073741824, got '%s'\n", prog,
                opt, arg);
        return -1;
    }
    *out = v * scale;
    return 0;
}

static double unit_scale(const char *unit, const char *const *names, const double *scales, int n)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(unit, names[i]) == 0)
            return scales[i];
    return 0;
}

int cli_parse_link(const char *prog, const char *opt, const char *arg, double *bytes_per_s, double *latency)
{
    static const char *const rates[] = {"bit", "kbit", "mbit", "gbit", "B/s", "kB/s", "MB/s", "GB/s"};
    static const double rate_scales[] = {1 / 8., 1e3 / 8, 1e6 / 8, 1e9 / 8, 1, 1e3, 1e6, 1e9};
    static const char *const times[] = {"s", "ms", "us"};
    static const double time_scales[] = {1, 1e-3, 1e-6};
    char rate_unit[16] = "", lat_unit[8] = "";
    double rate = 0, lat = -1;
    const char *comma = strchr(arg, ',');
    char *end;
    errno = 0;
    rate = strtod(arg, &end);
    size_t ulen = (size_t)((comma ? comma : arg + strlen(arg)) - end);
    int ok = end != arg && !errno && rate > 0 && ulen > 0 && ulen < sizeof rate_unit;
    if (ok) {
        memcpy(rate_unit, end, ulen);
        double sc = unit_scale(rate_unit, rates, rate_scales, 8);
        ok = sc > 0 && rate * sc <= 1e15;
        rate *= sc;
    }
    if (ok && comma) {
        lat = strtod(comma + 1, &end);
        ok = end != comma + 1 && !errno && lat >= 0 && strlen(end) > 0 && strlen(end) < sizeof lat_unit;
        if (ok) {
            snprintf(lat_unit, sizeof lat_unit, "%s", end);
            double sc = unit_scale(lat_unit, times, time_scales, 3);
            ok = sc > 0 && lat * sc <= 10;
            lat *= sc;
        }
    }
    if (!ok) {
        fprintf(stderr, "%s: %s expects RATE[,LATENCY] such as 1gbit, 200mbit, 25GB/s or 25GB/s,10us (rate units "
                "bit, kbit, mbit, gbit, B/s, kB/s, MB/s, GB/s; latency units s, ms, us, at most 10 s), got '%s'\n",
                prog, opt, arg);
        return -1;
    }
    *bytes_per_s = rate;
    if (comma)
        *latency = lat;
    return 0;
}

int cli_parse_double(const char *prog, const char *opt, const char *arg, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (*arg == '\0' || *end != '\0' || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s expects a number in %g..%g, got '%s'\n", prog, opt, lo, hi, arg);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_recv(const char *prog, const char *arg, int *blocking, int *in_place)
{
    static const char *const names[] = {"posted", "in-place", "blocking"};
    for (int i = 0; i < 3; i++)
        if (strcmp(arg, names[i]) == 0) {
            *in_place = i == 1;
            *blocking = i == 2;
            return 0;
        }
    fprintf(stderr, "%s: --recv expects posted (a RECV posts its buffer and its device goes on; the receives "
                    "behind a compute op are posted before it starts), in-place (each posted where it stands) "
                    "or blocking (it holds its device until the data has landed), got '%s'\n", prog, arg);
    return -1;
}

void cli_print_version(const char *prog)
{
    const char *lib = bsipipe_version();
    if (strcmp(lib, BSIPIPE_VERSION_STRING) == 0)
        printf("%s (bsipipe) %s\n", prog, lib);
    else
        printf("%s (bsipipe) %s, built with the %s headers\n", prog, lib, BSIPIPE_VERSION_STRING);
}

int cli_bad_option(const char *prog, const char *arg)
{
    fprintf(stderr, "%s: unknown or incomplete option '%s'; see --help\n", prog, arg);
    return 2;
}

int cli_no_operands(const char *prog, int argc, char **argv, int first)
{
    if (first >= argc)
        return 0;
    fprintf(stderr, "%s: unexpected argument '%s'; see --help\n", prog, argv[first]);
    return 2;
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *prog)
{
    int index = -1;
    int c = getopt_long(argc, argv, shortopts, longopts, &index);
    if (c == -1 || c == '?' || index < 0)
        return c;
    /* The element that held the option: the one before its separate value. */
    const char *given = optarg && optind >= 2 && argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1];
    if (strncmp(given, "--", 2) != 0)
        return c;
    const char *name = longopts[index].name;
    size_t n = strcspn(given + 2, "=");
    if (n == strlen(name) && strncmp(given + 2, name, n) == 0)
        return c;
    fprintf(stderr, "%s: unknown option '%.*s' (options are not abbreviated: did you mean --%s?); see --help\n", prog,
            (int)(n + 2), given, name);
    exit(2);
}

int cli_plan_conflicts(const char *prog, const char *file, const cli_plan_flags_t *f, const bsipipe_schedule_t *s,
                       int has_model)
{
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s), *my = &f->pc;
    const bsipipe_model_dims_t *d = bsipipe_schedule_model(s), *md = &f->dims;
    static const char *const part[2] = {"balanced", "even"}, *const fam[2] = {"gpt", "llama"};
    unsigned model = has_model ? ~0u : ~(unsigned)(CLI_SET_MODEL | CLI_SET_LAYERS | CLI_SET_HIDDEN | CLI_SET_HEADS |
                                                 CLI_SET_FFN | CLI_SET_VOCAB | CLI_SET_SEQ);
    char mine[64], theirs[64];
#define CONFLICT(bit, flag, key, fmt, a, b)                                                                      \
    if ((f->set & model & (bit))) {                                                                            \
        snprintf(mine, sizeof mine, fmt, a);                                                                   \
        snprintf(theirs, sizeof theirs, fmt, b);                                                               \
        if (strcmp(mine, theirs) != 0) {                                                                       \
            fprintf(stderr, "%s: %s%s%s conflicts with the plan's %s=%s (%s): drop %s, or edit the plan\n", prog, \
                    flag, (bit) == CLI_SET_NO_CONCAT ? "" : " ", (bit) == CLI_SET_NO_CONCAT ? "" : mine, key,      \
                    theirs, file, flag);                                                                           \
            return 2;                                                                                          \
        }                                                                                                      \
    }
    CONFLICT(CLI_SET_SCHEDULE, "--schedule", "schedule", "%s", bsipipe_schedule_kind_name(my->schedule),
             bsipipe_schedule_kind_name(pc->schedule))
    CONFLICT(CLI_SET_W, "--w", "w", "%d", my->w, pc->w)
    CONFLICT(CLI_SET_P, "--p", "p", "%d", my->p, pc->p)
    CONFLICT(CLI_SET_K, "--k", "k", "%d", my->k, pc->k)
    CONFLICT(CLI_SET_M, "--m", "m", "%d", my->m, pc->m)
    CONFLICT(CLI_SET_TP, "--tp", "tp", "%d", my->tp, pc->tp)
    CONFLICT(CLI_SET_COMM, "--comm", "comm", "%s", bsipipe_comm_order_name(my->comm), bsipipe_comm_order_name(pc->comm))
    CONFLICT(CLI_SET_PARTITION, "--partition", "partition", "%s", part[my->partition == BSIPIPE_PARTITION_EVEN],
             part[pc->partition == BSIPIPE_PARTITION_EVEN])
    CONFLICT(CLI_SET_NO_CONCAT, "--no-concat", "concat", "%s", my->concat ? "true" : "false",
             pc->concat ? "true" : "false")
    CONFLICT(CLI_SET_MODEL, "--model", "family", "%s", fam[md->family == BSIPIPE_MODEL_LLAMA],
             fam[d->family == BSIPIPE_MODEL_LLAMA])
    CONFLICT(CLI_SET_LAYERS, "--layers", "layers", "%d", md->n_layers, d->n_layers)
    CONFLICT(CLI_SET_HIDDEN, "--hidden", "hidden", "%d", md->hidden, d->hidden)
    CONFLICT(CLI_SET_HEADS, "--heads", "heads", "%d", md->n_heads, d->n_heads)
    CONFLICT(CLI_SET_FFN, "--ffn", "ffn", "%d", md->ffn_hidden, d->ffn_hidden)
    CONFLICT(CLI_SET_VOCAB, "--vocab", "vocab", "%d", md->vocab, d->vocab)
    CONFLICT(CLI_SET_SEQ, "--seq", "seq_len", "%d", md->seq_len, d->seq_len)
#undef CONFLICT
    if ((f->set & CLI_SET_LAYOUT) && my->layout) {
        /* compared as placed: "auto" conflicts only with another split */
        bsipipe_parallel_config_t mine_pc = *pc;
        mine_pc.layout = my->layout;
        int C = bsipipe_schedule_n_chunks(s), differs = 0, *counts = malloc(sizeof(int) * (size_t)C);
        if (!counts || bsipipe_parallel_config_layers(&mine_pc, d, counts) < 0)
            differs = 1;
        for (int c = 0; c < C && !differs; c++) {
            int l0, l1;
            bsipipe_schedule_chunk_layers(s, c, &l0, &l1);
            differs = counts[c] != l1 - l0;
        }
        free(counts);
        if (differs) {
            fprintf(stderr, "%s: --layout %s conflicts with the plan's layout=%s (%s): drop --layout, or edit the "
                    "plan\n", prog, my->layout, pc->layout ? pc->layout : "even", file);
            return 2;
        }
    }
    return 0;
}

