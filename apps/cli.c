/* apps/cli.c: see cli.h. */
#include "apps/cli.h"
#include "bsipipe.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void cli_print_policies(FILE *out)
{
    const char *names[64];
    int n = bsipipe_engine_policies(names, 64), col = 0;
    fputs("\nScheduling policies (--policy): the engine's own, then the StarPU 1.3\n"
          "policies that run its graph correctly (the others are refused; see\n"
          "docs/policies.md):\n",
          out);
    for (int i = 0; i < n && i < 64; i++) {
        int len = (int)strlen(names[i]) + 1;
        if (col > 0 && col + len > 78) {
            fputc('\n', out);
            col = 0;
        }
        col += fprintf(out, "%s%s", col ? " " : "  ", names[i]);
    }
    fputc('\n', out);
}
