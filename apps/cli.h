/* apps/cli.h: strict command-line number parsing shared by the apps. On a
 * bad value both print "PROG: OPT expects ..., got 'ARG'" to stderr and
 * return -1; *out is untouched. */
#ifndef BSIPIPE_APPS_CLI_H
#define BSIPIPE_APPS_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "graph/bsipipe_schedule.h"

/* An integer in lo..hi, the whole argument (no trailing characters). */
int cli_parse_int(const char *prog, const char *opt, const char *arg, int lo, int hi, int *out);
/* A finite number in lo..hi, the whole argument. */
int cli_parse_double(const char *prog, const char *opt, const char *arg, double lo, double hi, double *out);
/* A byte count: a number with an optional binary suffix K, M, G or T (KiB,
 * MiB, GiB, TiB; "KB"/"KiB" spellings too), e.g. 24G, 1.5T, 4096. */
int cli_parse_bytes(const char *prog, const char *opt, const char *arg, double *out);
/* A link, "RATE[,LATENCY]": RATE as tc writes it (1gbit, 200mbit, 500kbit)
 * or in bytes (25GB/s, 300MB/s; decimal units), LATENCY with us, ms or s
 * (left out: *latency untouched). E.g. "1gbit", "25GB/s,10us". The same
 * spelling as scripts/netns-cluster.sh --rate, so a shaped run and its
 * prediction take one value. */
int cli_parse_link(const char *prog, const char *opt, const char *arg, double *bytes_per_s, double *latency);
/* --recv posted|in-place|blocking: the receive semantics (posted, the
 * default, posts the receives behind a compute op before it starts;
 * in-place posts each where it stands; blocking holds its device until the
 * data has landed) as the cost model's / engine's two flags. */
int cli_parse_recv(const char *prog, const char *arg, int *blocking, int *in_place);
/* An unsigned decimal (or 0x hex) integer, the whole argument; no sign. */
int cli_parse_ull(const char *prog, const char *opt, const char *arg, unsigned long long *out);

/* getopt_long without its prefix matching: a long option must be given in
 * full (getopt_long would read `--w abc` as `--wd abc`). An abbreviation
 * prints "PROG: unknown option '--w' (options are not abbreviated: did you
 * mean --wd?)" and exits 2; everything else is getopt_long's. */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *prog);

/* --version: "PROG (bsipipe) X.Y.Z" on stdout, the library's version at run
 * time, and the headers' too when the two differ. */
void cli_print_version(const char *prog);
/* An option getopt did not accept: "PROG: unknown or incomplete option 'ARG';
 * see --help" on stderr. Returns 2 (the apps' exit code for bad usage). */
int cli_bad_option(const char *prog, const char *arg);
/* Operands left after the options (none are taken): a message naming the
 * first, and 2; else 0. */
int cli_no_operands(const char *prog, int argc, char **argv, int first);

/* --plan FILE: the flags a user gave explicitly (CLI_SET_* bits) and their
 * values, to be checked against what the file fixes. */
enum {
    CLI_SET_SCHEDULE = 1 << 0, CLI_SET_W = 1 << 1, CLI_SET_P = 1 << 2, CLI_SET_K = 1 << 3, CLI_SET_M = 1 << 4,
    CLI_SET_TP = 1 << 5, CLI_SET_COMM = 1 << 6, CLI_SET_PARTITION = 1 << 7, CLI_SET_NO_CONCAT = 1 << 8,
    CLI_SET_MODEL = 1 << 9, CLI_SET_LAYERS = 1 << 10, CLI_SET_HIDDEN = 1 << 11, CLI_SET_HEADS = 1 << 12,
    CLI_SET_FFN = 1 << 13, CLI_SET_VOCAB = 1 << 14, CLI_SET_SEQ = 1 << 15, CLI_SET_LAYOUT = 1 << 16
};
typedef struct cli_plan_flags {
    unsigned set;
    bsipipe_parallel_config_t pc; /* schedule, w, p, k, m, tp, comm, partition, concat, layout */
    bsipipe_model_dims_t dims;
} cli_plan_flags_t;
/* The first explicit flag that disagrees with the plan s read from `file`
 * (its config; its model only when has_model): "PROG: --w 4 conflicts with
 * the plan's w=2 (FILE): drop --w, or edit the plan" on stderr and 2; else
 * 0. */
int cli_plan_conflicts(const char *prog, const char *file, const cli_plan_flags_t *f, const bsipipe_schedule_t *s,
                       int has_model);

/* The policies --policy accepts (bsipipe_engine_policies), wrapped under a
 * heading, for --help. */
void cli_print_policies(FILE *out);

#endif
