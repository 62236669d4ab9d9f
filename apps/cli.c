/* apps/cli.c: see cli.h. */
#include "apps/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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
