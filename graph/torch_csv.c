/* torch_csv.c: a plan in torch.distributed.pipelining's per-rank action CSV
 * (the format its _dump_csv writes and _load_csv reads), written and read: one
 * row per rank, one action per cell, each written as torch's _Action is,
 * "{stage}{type}{micro-batch}": F a forward, B a full backward, I an input
 * gradient, W a weight gradient. A torch stage is a bsipipe chunk, so the
 * placement carries over: stage s on rank s % w (looped) or on the V's
 * rank (s < w ? s : 2w-1-s). A split plan's backwards are written as I and
 * W, also where a peer's source says B (a full backward) or pairs an F with
 * a B (DualPipeV's overlapped F&B): both run the same ops in the same order. */
#include "graph/bsipipe_builder.h"
#include "graph/bsipipe_draw.h"
#include "graph/bsipipe_error.h"
#include "graph/schedule_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bsipipe_export_torch_csv(FILE *out, const bsipipe_schedule_t *s)
{
    if (!out || !s)
        return bsipipe_error_set(-EINVAL, "torch CSV export: no %s given", out ? "schedule" : "output");
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    const char *name = bsipipe_schedule_kind_name(pc->schedule);
    if (bsipipe_schedule_n_pipes(s) != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: %s runs two pipes (two replicas of every chunk); "
                                 "torch's action format has one stage per chunk: export a one-pipe schedule", name);
    if (pc->k != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: %s cuts sequences into k = %d pieces; torch's action "
                                 "format names whole micro-batches: use k = 1", name, pc->k);
    if (pc->tp != 1)
        return bsipipe_error_set(-EINVAL, "torch CSV export: torch's action format has no tensor parallelism: use "
                                 "--tp 1");
    int split = bsipipe_schedule_kind_traits(pc->schedule).split_backward;
    for (int d = 0; d < bsipipe_schedule_n_devices(s); d++) {
        int n, first = 1;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n; i++) {
            const bsipipe_op_t *op = &ops[i];
            char type = op->kind == BSIPIPE_OP_F ? 'F' : op->kind == BSIPIPE_OP_W ? 'W'
                      : op->kind == BSIPIPE_OP_B ? (split ? 'I' : 'B') : 0;
            if (!type)
                continue; /* transfers, SYNC, STEP: the compute_only format has none */
            fprintf(out, "%s%d%c%d", first ? "" : ",", op->chunk, type, op->mb);
            first = 0;
        }
        fputc('\n', out);
    }
    return ferror(out) ? bsipipe_error_set(-EIO, "torch CSV export: write failed") : 0;
}

/* ---- import ------------------------------------------------------------- */

/* Plans larger than this are refused before they are read whole. */
#define TORCH_CSV_MAX_BYTES (64L << 20)

typedef struct csv_action {
    int rank, stage, mb;
    char type; /* F, I, B or W */
} csv_action_t;

typedef struct csv_plan {
    const char *name;
    csv_action_t *act;
    long n, cap, ignored;
    int ranks;
} csv_plan_t;

static int csv_push(csv_plan_t *p, int rank, int stage, char type, int mb)
{
    if (p->n == p->cap) {
        long cap = p->cap ? 2 * p->cap : 256;
        csv_action_t *a = realloc(p->act, (size_t)cap * sizeof *a);
        if (!a)
            return bsipipe_error_set(-ENOMEM, "%s: out of memory", p->name);
        p->act = a;
        p->cap = cap;
    }
    p->act[p->n++] = (csv_action_t){rank, stage, mb, type};
    return 0;
}

/* Reads a decimal number of at most 9 digits at *s; -1 if none. */
static long csv_number(const char **s)
{
    long v = 0;
    int digits = 0;
    while (isdigit((unsigned char)**s) && digits < 9) {
        v = v * 10 + (**s - '0');
        (*s)++;
        digits++;
    }
    return digits && !isdigit((unsigned char)**s) ? v : -1;
}

/* One action "{stage}{type}{mb}" (cell[0..len)), appended to the plan;
 * a communication or FSDP action is counted and skipped. */
static int csv_parse_action(csv_plan_t *p, int row, int col, const char *cell, size_t len)
{
    char text[64];
    if (len >= sizeof text)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: action '%.40s...' is too long",
                                 p->name, row + 1, col + 1, cell);
    memcpy(text, cell, len);
    text[len] = 0;
    const char *s = text;
    long stage = csv_number(&s);
    static const char *const skipped[] = {"SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD",
                                          "REDUCE_GRAD"};
    for (size_t i = 0; stage >= 0 && i < sizeof skipped / sizeof skipped[0]; i++) {
        size_t n = strlen(skipped[i]);
        const char *t = s + n;
        if (!strncmp(s, skipped[i], n) && (*t == 0 || (csv_number(&t) >= 0 && *t == 0))) {
            p->ignored++; /* derived again, or not bsipipe's business */
            return 0;
        }
    }
    char type = *s;
    if (stage >= 0 && (type == 'F' || type == 'I' || type == 'B' || type == 'W')) {
        s++;
        long mb = csv_number(&s);
        if (mb >= 0 && *s == 0)
            return csv_push(p, row, (int)stage, type, (int)mb);
    }
    return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: '%s' is not a torch action: expected "
                             "{stage}{F|I|B|W}{micro-batch} such as 3F0 (or a SEND/RECV, skipped)", p->name,
                             row + 1, col + 1, text);
}

/* An overlapped pair "(a;b)OVERLAP_F_B": its actions in order. */
static int csv_parse_cell(csv_plan_t *p, int row, int col, const char *cell, size_t len)
{
    if (len && cell[0] == '(') {
        const char *close = memchr(cell, ')', len);
        static const char suffix[] = "OVERLAP_F_B";
        if (!close || (size_t)(cell + len - close - 1) != strlen(suffix) || strncmp(close + 1, suffix, strlen(suffix)))
            return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: '%.*s' is not an overlapped pair "
                                     "(a;b)OVERLAP_F_B", p->name, row + 1, col + 1, (int)(len < 60 ? len : 60), cell);
        const char *a = cell + 1;
        while (a < close) {
            const char *end = memchr(a, ';', (size_t)(close - a));
            if (!end)
                end = close;
            int rc = csv_parse_action(p, row, col, a, (size_t)(end - a));
            if (rc < 0)
                return rc;
            a = end + 1;
        }
        return 0;
    }
    return csv_parse_action(p, row, col, cell, len);
}

static int csv_parse(csv_plan_t *p, const char *text)
{
    int row = 0, last = -1; /* last: the last row with a cell (blank lines at the end are not ranks) */
    const char *line = text;
    while (*line) {
        const char *eol = line + strcspn(line, "\r\n");
        int col = 0;
        for (const char *c = line; c <= eol; col++) {
            const char *end = c;
            while (end < eol && *end != ',')
                end++;
            const char *a = c, *b = end;
            while (a < b && isspace((unsigned char)*a)) a++;
            while (b > a && isspace((unsigned char)b[-1])) b--;
            if (b > a) { /* an empty cell is an empty slot */
                int rc = csv_parse_cell(p, row, col, a, (size_t)(b - a));
                if (rc < 0)
                    return rc;
                last = row;
            } else if (end < eol) {
                last = row; /* "," alone: a rank whose slots are all empty */
            }
            c = end + 1;
        }
        row++;
        line = eol;
        if (*line == '\r') line++;
        if (*line == '\n') line++;
    }
    p->ranks = last + 1;
    return 0;
}

/* The config the actions describe: w ranks, p = stages / w, V or looped
 * placement, split when any I or W appears. */
static int csv_config(const csv_plan_t *p, bsipipe_parallel_config_t *pc, int *split)
{
    int w = p->ranks, stages = 0, m = 0;
    *split = 0;
    for (long i = 0; i < p->n; i++) {
        if (p->act[i].stage + 1 > stages) stages = p->act[i].stage + 1;
        if (p->act[i].mb + 1 > m) m = p->act[i].mb + 1;
        *split |= p->act[i].type == 'I' || p->act[i].type == 'W';
    }
    if (w == 0 || p->n == 0)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: no actions: a torch plan has one row of actions per rank",
                                 p->name);
    if (stages % w)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %d stages on %d ranks: a torch plan bsipipe runs has the "
                                 "same number of stages on every rank", p->name, stages, w);
    int per = stages / w, v = per == 2, looped = 1;
    for (long i = 0; i < p->n; i++) {
        int s = p->act[i].stage, r = p->act[i].rank;
        v &= r == (s < w ? s : 2 * w - 1 - s);
        looped &= r == s % w;
    }
    if (!v && !looped)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: stages are placed neither looped (stage s on rank s %% w) "
                                 "nor in a V (stage s and 2w-1-s on rank s): bsipipe has no such placement", p->name);
    bsipipe_schedule_kind_t kind = v ? BSIPIPE_SCHED_ZB_V
                                 : per > 1 ? BSIPIPE_SCHED_1F1B_I
                                 : *split ? BSIPIPE_SCHED_ZB_H1 : BSIPIPE_SCHED_1F1B;
    if (!v && per > 1 && *split)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: a looped plan with %d stages per rank and a split backward "
                                 "(interleaved zero bubble) has no bsipipe schedule yet", p->name, per);
    *split |= v; /* the V schedules split every backward: a B is B then W */
    *pc = bsipipe_parallel_config_default(kind);
    pc->w = w;
    pc->p = per;
    pc->m = m;
    return 0;
}

int bsipipe_schedule_import_torch_csv(const char *path, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out,
                                      bsipipe_import_info_t *info)
{
    *out = NULL;
    if (info)
        memset(info, 0, sizeof *info);
    char *text;
    long len;
    int rc0 = plan_file_read(path, TORCH_CSV_MAX_BYTES, &text, &len);
    if (rc0 < 0)
        return rc0;
    size_t got = (size_t)len;
    csv_plan_t p = {.name = path};
    bsipipe_parallel_config_t pc;
    bsipipe_builder_t *b = NULL;
    int split = 0, rc = strlen(text) != got
                            ? bsipipe_error_set(BSIPIPE_EFORMAT, "%s: a NUL byte: not a text file", path)
                            : csv_parse(&p, text);
    if (rc == 0)
        rc = csv_config(&p, &pc, &split);
    if (rc == 0)
        rc = bsipipe_builder_create(&pc, dims, &b);
    for (long i = 0; rc == 0 && i < p.n; i++) {
        const csv_action_t *a = &p.act[i];
        bsipipe_op_kind_t kind = a->type == 'F' ? BSIPIPE_OP_F : a->type == 'W' ? BSIPIPE_OP_W : BSIPIPE_OP_B;
        rc = bsipipe_builder_append(b, a->rank, kind, BSIPIPE_PIPE_DOWN, a->mb, 0, a->stage);
        if (rc == 0 && split && a->type == 'B') /* a full backward of a split plan */
            rc = bsipipe_builder_append(b, a->rank, BSIPIPE_OP_W, BSIPIPE_PIPE_DOWN, a->mb, 0, a->stage);
        if (rc < 0) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", bsipipe_error_detail());
            rc = bsipipe_error_set(rc, "%s: rank %d's action %d%c%d: %s", path, a->rank, a->stage, a->type, a->mb,
                                   detail);
        }
    }
    if (rc == 0) {
        rc = bsipipe_builder_finish(b, out);
        b = NULL; /* spent */
        if (rc < 0) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", bsipipe_error_detail());
            rc = bsipipe_error_set(rc, "%s: %s", path, detail);
        }
    }
    if (rc == 0 && info) {
        info->compute_ops = p.n;
        info->ignored_ops = p.ignored;
    }
    bsipipe_builder_destroy(b);
    free(p.act);
    free(text);
    return rc;
}
