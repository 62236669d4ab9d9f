/* fuzz_cli: the apps' number parsers (apps/cli.c) and the name parsers of
 * the planner (schedule, comm order) on arbitrary strings.
 *
 * Input: one byte choosing the parser and its range (the ranges the apps
 * use), then the argument (up to the first NUL).
 * Properties: a parser returns 0 or -1; on -1, *out is untouched; on 0 the
 * value is in its range (and finite, for doubles and byte counts), and a
 * number printed back (%d, %llu, %a) parses to itself; a parsed name is the
 * canonical name of what it returned, up to case and '_' for '-'. */
#include "fuzz/fuzz_util.h"
#include "apps/cli.h"
#include "graph/bsipipe_config.h"
#include "base/bsipipe_error.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_silence_stderr(); /* every refusal prints "PROG: OPT expects ..." */
    return 0;
}

static const struct { int lo, hi; } int_ranges[] = {
    {1, 4096}, {0, INT_MAX}, {1, INT_MAX}, {INT_MIN, INT_MAX}, {-1, 1}, {2, 64}, {0, 0},
};
static const struct { double lo, hi; } double_ranges[] = {
    {0, 10}, {0.01, 86400}, {1e-6, 1e6}, {0, 1e30}, {-1e308, 1e308}, {0, 0},
};
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

/* Equal up to case and '_' for '-' (bsipipe_config.c's rule). */
static int same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int ca = *a == '_' ? '-' : tolower((unsigned char)*a), cb = *b == '_' ? '-' : tolower((unsigned char)*b);
        if (ca != cb)
            return 0;
    }
    return *a == *b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    char *arg = malloc(size);
    FUZZ_REQUIRE(arg != NULL, "out of memory");
    memcpy(arg, data + 1, size - 1);
    arg[size - 1] = '\0';
    switch (sel % 6) {
    case 0: {
        int r = sel / 6 % N_OF(int_ranges);
        int lo = int_ranges[r].lo, hi = int_ranges[r].hi;
        int v = 12345, rc = cli_parse_int("fuzz", "--int", arg, lo, hi, &v);
        FUZZ_REQUIRE(rc == 0 || rc == -1, "rc %d", rc);
        if (rc < 0) {
            FUZZ_REQUIRE(v == 12345, "a refusal wrote %d", v);
            break;
        }
        FUZZ_REQUIRE(v >= lo && v <= hi, "'%s' -> %d outside %d..%d", arg, v, lo, hi);
        char back[32];
        int w = -1;
        snprintf(back, sizeof back, "%d", v);
        FUZZ_REQUIRE(cli_parse_int("fuzz", "--int", back, lo, hi, &w) == 0 && w == v, "'%s' does not reparse", back);
        break;
    }
    case 1: {
        int r = sel / 6 % N_OF(double_ranges);
        double lo = double_ranges[r].lo, hi = double_ranges[r].hi;
        double v = -7.5;
        int rc = cli_parse_double("fuzz", "--float", arg, lo, hi, &v);
        FUZZ_REQUIRE(rc == 0 || rc == -1, "rc %d", rc);
        if (rc < 0) {
            FUZZ_REQUIRE(v == -7.5, "a refusal wrote %g", v);
            break;
        }
        FUZZ_REQUIRE(isfinite(v) && v >= lo && v <= hi, "'%s' -> %g outside %g..%g", arg, v, lo, hi);
        char back[64];
        double w = 0;
        snprintf(back, sizeof back, "%a", v); /* exact: hex digits (a decimal subnormal is ERANGE) */
        FUZZ_REQUIRE(cli_parse_double("fuzz", "--float", back, lo, hi, &w) == 0 && w == v, "'%s' does not reparse",
                     back);
        break;
    }
    case 2: {
        double v = -7.5;
        int rc = cli_parse_bytes("fuzz", "--bytes", arg, &v);
        FUZZ_REQUIRE(rc == 0 || rc == -1, "rc %d", rc);
        if (rc < 0)
            FUZZ_REQUIRE(v == -7.5, "a refusal wrote %g", v);
        else
            FUZZ_REQUIRE(isfinite(v) && v > 0 && v <= 1e18, "'%s' -> %g bytes", arg, v);
        break;
    }
    case 3: {
        unsigned long long v = 777;
        int rc = cli_parse_ull("fuzz", "--ull", arg, &v);
        FUZZ_REQUIRE(rc == 0 || rc == -1, "rc %d", rc);
        if (rc < 0) {
            FUZZ_REQUIRE(v == 777, "a refusal wrote %llu", v);
            break;
        }
        char back[32];
        unsigned long long w = 0;
        snprintf(back, sizeof back, "%llu", v);
        FUZZ_REQUIRE(cli_parse_ull("fuzz", "--ull", back, &w) == 0 && w == v, "'%s' does not reparse", back);
        break;
    }
    case 4: {
        bsipipe_schedule_kind_t k = BSIPIPE_SCHED_COUNT;
        int rc = bsipipe_schedule_kind_parse(arg, &k);
        if (rc < 0)
            FUZZ_REQUIRE(rc == -EINVAL && k == BSIPIPE_SCHED_COUNT, "rc %d, kind %d", rc, (int)k);
        else
            FUZZ_REQUIRE((unsigned)k < BSIPIPE_SCHED_COUNT && same_name(arg, bsipipe_schedule_kind_name(k)),
                         "'%s' -> %d", arg, (int)k);
        break;
    }
    default: {
        bsipipe_comm_order_t o = BSIPIPE_COMM_COUNT;
        int rc = bsipipe_comm_order_parse(arg, &o);
        if (rc < 0)
            FUZZ_REQUIRE(rc == -EINVAL && o == BSIPIPE_COMM_COUNT, "rc %d, order %d", rc, (int)o);
        else
            FUZZ_REQUIRE((unsigned)o < BSIPIPE_COMM_COUNT && same_name(arg, bsipipe_comm_order_name(o)),
                         "'%s' -> %d", arg, (int)o);
        break;
    }
    }
    free(arg);
    return 0;
}
