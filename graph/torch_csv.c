/* torch_csv.c: a plan in torch.distributed.pipelining's per-rank action CSV
 * (the format its _dump_csv writes and _load_csv reads), written and read: one
 * row per rank, one action per cell, each written as torch's _Action is,
 * "{stage}{type}{micro-batch}": F a forward, B a full backward, I an input
 * gradient, W a weight gradient. A torch stage is a bsipipe chunk, so the
 * placement carries over: stage s on rank s % w (looped) or on the V's
 * rank (s < w ? s : 2w-1-s). A split plan's backwards are written as I and
 * W, also where a peer's source says B (a full backward) or pairs an F with
 * a B (DualPipeV's overlapped F&B): both run the same ops in the same order.
 * A pair read in is marked (BSIPIPE_OP_PAIR_F/B) for the simulator's
 * overlap_fb; the export writes its halves. */
#include "graph/bsipipe_builder.h"
#include "graph/bsipipe_draw.h"
#include "base/bsipipe_error.h"
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

/* A compute action (type F, I, B or W) or a transfer of torch's
 * compute_comms listing (type one of COMM_TYPES). */
typedef struct csv_action {
    int rank, stage, mb, col;
    char type;
    uint8_t flags; /* a half of an overlapped pair: BSIPIPE_OP_PAIR_F or _B */
} csv_action_t;

/* SEND_F, RECV_F, SEND_B, RECV_B as one letter each. */
static const char COMM_TYPES[] = "sSrR";
static const char *const comm_names[] = {"SEND_F", "SEND_B", "RECV_F", "RECV_B"};

typedef struct csv_list {
    csv_action_t *a;
    long n, cap;
} csv_list_t;

typedef struct csv_plan {
    const char *name;
    csv_list_t compute, comm;
    long ignored;
    int ranks;
} csv_plan_t;

static int csv_push(const csv_plan_t *p, csv_list_t *l, csv_action_t a)
{
    if (l->n == l->cap) {
        long cap = l->cap ? 2 * l->cap : 256;
        csv_action_t *grown = realloc(l->a, (size_t)cap * sizeof *grown);
        if (!grown)
            return bsipipe_error_set(-ENOMEM, "%s: out of memory", p->name);
        l->a = grown;
        l->cap = cap;
    }
    l->a[l->n++] = a;
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

/* One action "{stage}{type}{mb}" (cell[0..len)), appended to the plan's
 * compute or transfer list; an FSDP action is counted and skipped. */
static int csv_parse_action(csv_plan_t *p, int row, int col, const char *cell, size_t len, int in_pair)
{
    char text[64];
    if (len >= sizeof text)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: action '%.40s...' is too long",
                                 p->name, row + 1, col + 1, cell);
    memcpy(text, cell, len);
    text[len] = 0;
    const char *s = text;
    long stage = csv_number(&s);
    for (int i = 0; stage >= 0 && i < 4; i++) { /* a transfer: checked once the plan is built */
        size_t n = strlen(comm_names[i]);
        const char *t = s + n;
        long mb = -1;
        if (!strncmp(s, comm_names[i], n) && (mb = csv_number(&t)) >= 0 && *t == 0)
            return csv_push(p, &p->comm, (csv_action_t){row, (int)stage, (int)mb, col, COMM_TYPES[i], 0});
    }
    static const char *const skipped[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD"};
    for (size_t i = 0; stage >= 0 && i < sizeof skipped / sizeof skipped[0]; i++) {
        size_t n = strlen(skipped[i]);
        const char *t = s + n;
        if (!strncmp(s, skipped[i], n) && (*t == 0 || (csv_number(&t) >= 0 && *t == 0))) {
            p->ignored++; /* FSDP's: not bsipipe's business */
            return 0;
        }
    }
    char type = *s;
    if (stage >= 0 && (type == 'F' || type == 'I' || type == 'B' || type == 'W')) {
        s++;
        long mb = csv_number(&s);
        if (mb >= 0 && *s == 0)
            return csv_push(p, &p->compute, (csv_action_t){row, (int)stage, (int)mb, col, type,
                                                           !in_pair ? 0 : type == 'F' ? BSIPIPE_OP_PAIR_F
                                                                                      : BSIPIPE_OP_PAIR_B});
    }
    return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: '%s' is not a torch action: expected "
                             "{stage}{F|I|B|W}{micro-batch} such as 3F0, or {stage}{SEND|RECV}_{F|B}{micro-batch}",
                             p->name, row + 1, col + 1, text);
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
            int rc = csv_parse_action(p, row, col, a, (size_t)(end - a), 1);
            if (rc < 0)
                return rc;
            a = end + 1;
        }
        return 0;
    }
    return csv_parse_action(p, row, col, cell, len, 0);
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
 * placement, split when any I or W appears: looped and split is zb-i (p > 1)
 * or zb-h1, looped is 1f1b-i or 1f1b, a V is zb-v. */
static int csv_config(const csv_plan_t *p, bsipipe_parallel_config_t *pc, int *split)
{
    int w = p->ranks, stages = 0, m = 0;
    *split = 0;
    for (long i = 0; i < p->compute.n; i++) {
        if (p->compute.a[i].stage + 1 > stages) stages = p->compute.a[i].stage + 1;
        if (p->compute.a[i].mb + 1 > m) m = p->compute.a[i].mb + 1;
        *split |= p->compute.a[i].type == 'I' || p->compute.a[i].type == 'W';
    }
    if (w == 0 || p->compute.n == 0)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: no actions: a torch plan has one row of actions per rank",
                                 p->name);
    if (stages % w)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: %d stages on %d ranks: a torch plan bsipipe runs has the "
                                 "same number of stages on every rank", p->name, stages, w);
    int per = stages / w, v = per == 2, looped = 1;
    for (long i = 0; i < p->compute.n; i++) {
        int s = p->compute.a[i].stage, r = p->compute.a[i].rank;
        v &= r == (s < w ? s : 2 * w - 1 - s);
        looped &= r == s % w;
    }
    if (!v && !looped)
        return bsipipe_error_set(BSIPIPE_EFORMAT, "%s: stages are placed neither looped (stage s on rank s %% w) "
                                 "nor in a V (stage s and 2w-1-s on rank s): bsipipe has no such placement", p->name);
    bsipipe_schedule_kind_t kind = v ? BSIPIPE_SCHED_ZB_V
                                 : per > 1 ? (*split ? BSIPIPE_SCHED_ZB_I : BSIPIPE_SCHED_1F1B_I)
                                 : *split ? BSIPIPE_SCHED_ZB_H1 : BSIPIPE_SCHED_1F1B;
    *split |= v; /* the V schedules split every backward: a B is B then W */
    *pc = bsipipe_parallel_config_default(kind);
    pc->w = w;
    pc->p = per;
    pc->m = m;
    return 0;
}

/* ---- compute_comms: the file's transfers against the derived ones ------- */

/* The transfer a SEND/RECV op of the plan is in torch's terms: a forward's
 * output leaves stage c as c's SEND_F and arrives as c+1's RECV_F; an
 * input gradient leaves stage c as SEND_B and arrives as c-1's RECV_B. */
static csv_action_t comm_of_op(const bsipipe_op_t *op, int device)
{
    int act = op->tensor == BSIPIPE_TENSOR_ACT, send = op->kind == BSIPIPE_OP_SEND;
    int stage = send ? op->chunk : act ? op->chunk + 1 : op->chunk - 1;
    return (csv_action_t){device, stage, op->mb, -1, COMM_TYPES[(send ? 0 : 2) + !act], 0};
}

static int cmp_comm(const void *x, const void *y)
{
    const csv_action_t *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->type != b->type) return a->type < b->type ? -1 : 1;
    if (a->stage != b->stage) return a->stage < b->stage ? -1 : 1;
    if (a->mb != b->mb) return a->mb < b->mb ? -1 : 1;
    return a->col < b->col ? -1 : a->col > b->col;
}

/* The same transfer, wherever the row lists it. */
static int cmp_transfer(const csv_action_t *a, const csv_action_t *b)
{
    csv_action_t x = *a, y = *b;
    x.col = y.col = 0;
    return cmp_comm(&x, &y);
}

static const char *comm_name(char type)
{
    return comm_names[strchr(COMM_TYPES, type) - COMM_TYPES];
}

/* Column (0-based) of each stage's forward and backward (I or B) of each
 * micro-batch in its rank's row, by (stage * m + mb) * 2 + backward: where
 * a transfer's producer (SEND) or consumer (RECV) stands; -1 if absent.
 * Freshly allocated, NULL when out of memory. */
static int *compute_cols(const csv_plan_t *p, int stages, int m)
{
    int *col = malloc(sizeof(int) * 2 * (size_t)stages * (size_t)m);
    for (long i = 0; col && i < 2L * stages * m; i++)
        col[i] = -1;
    for (long i = 0; col && i < p->compute.n; i++) {
        const csv_action_t *a = &p->compute.a[i];
        if (a->type != 'W' && a->stage < stages && a->mb < m)
            col[((long)a->stage * m + a->mb) * 2 + (a->type != 'F')] = a->col;
    }
    return col;
}

/* A compute_comms file: its SEND/RECV actions must be the transfers the
 * plan derives, rank by rank, each send after the op that produces it and
 * each receive before the op that consumes it. */
static int csv_check_comms(const csv_plan_t *p, const bsipipe_schedule_t *s)
{
    if (p->comm.n == 0)
        return 0; /* compute_only: nothing to check */
    csv_list_t want = {0};
    const bsipipe_parallel_config_t *pc = bsipipe_schedule_config(s);
    int rc = 0, stages = bsipipe_schedule_n_chunks(s), *cols = compute_cols(p, stages, pc->m);
    if (!cols)
        return bsipipe_error_set(-ENOMEM, "%s: out of memory", p->name);
    for (int d = 0; d < bsipipe_schedule_n_devices(s) && rc == 0; d++) {
        int n;
        const bsipipe_op_t *ops = bsipipe_schedule_device_ops(s, d, &n);
        for (int i = 0; i < n && rc == 0; i++)
            if (ops[i].kind == BSIPIPE_OP_SEND || ops[i].kind == BSIPIPE_OP_RECV)
                rc = csv_push(p, &want, comm_of_op(&ops[i], d));
    }
    csv_action_t *got = rc == 0 ? malloc(sizeof *got * (size_t)p->comm.n) : NULL;
    if (rc == 0 && !got)
        rc = bsipipe_error_set(-ENOMEM, "%s: out of memory", p->name);
    if (rc == 0) {
        memcpy(got, p->comm.a, sizeof *got * (size_t)p->comm.n);
        qsort(got, (size_t)p->comm.n, sizeof *got, cmp_comm);
        if (want.n)
            qsort(want.a, (size_t)want.n, sizeof *want.a, cmp_comm);
    }
    for (long i = 0, j = 0; rc == 0 && (i < p->comm.n || j < want.n);) {
        const csv_action_t *g = i < p->comm.n ? &got[i] : NULL, *x = j < want.n ? &want.a[j] : NULL;
        int c = g && x ? cmp_transfer(g, x) : g ? -1 : 1;
        if (c < 0)
            rc = bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: %d%s%d is not a transfer of this plan: "
                                   "bsipipe derives a %s where stage %d's %s of micro-batch %d crosses ranks, once "
                                   "(listed on rank %d: %s)", p->name, g->rank + 1, g->col + 1, g->stage,
                                   comm_name(g->type), g->mb, comm_name(g->type), g->stage,
                                   g->type == 's' || g->type == 'r' ? "forward output" : "input gradient", g->mb,
                                   g->rank, i > 0 && cmp_transfer(&got[i - 1], g) == 0 ? "a second time" : "no such transfer");
        else if (c > 0)
            rc = bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d lacks %d%s%d, a transfer the plan needs (the "
                                   "file lists its other SEND/RECV actions; list every one, or none)", p->name,
                                   x->rank + 1, x->stage, comm_name(x->type), x->mb);
        else {
            int send = g->type == 's' || g->type == 'S', fwd = g->type == 's' || g->type == 'r';
            int partner = cols[((long)g->stage * pc->m + g->mb) * 2 + !fwd]; /* a derived transfer's: in range */
            if (partner >= 0 && (send ? partner >= g->col : partner <= g->col))
                rc = bsipipe_error_set(BSIPIPE_EFORMAT, "%s: line %d, column %d: %d%s%d comes %s the op it %s "
                                       "(column %d): a send follows its producer, a receive precedes its consumer",
                                       p->name, g->rank + 1, g->col + 1, g->stage, comm_name(g->type), g->mb,
                                       send ? "before" : "after", send ? "sends the output of" : "feeds", partner + 1);
            i++;
            j++;
        }
    }
    free(got);
    free(want.a);
    free(cols);
    return rc;
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
    for (long i = 0; rc == 0 && i < p.compute.n; i++) {
        const csv_action_t *a = &p.compute.a[i];
        bsipipe_op_kind_t kind = a->type == 'F' ? BSIPIPE_OP_F : a->type == 'W' ? BSIPIPE_OP_W : BSIPIPE_OP_B;
        bsipipe_op_t op = {.kind = (uint8_t)kind, .pipe = BSIPIPE_PIPE_DOWN, .flags = a->flags, .device = a->rank,
                           .mb = a->mb, .sub = 0, .chunk = a->stage, .peer = -1, .channel = -1};
        rc = bsipipe_builder_append_op(b, &op);
        if (rc == 0 && split && a->type == 'B') { /* a full backward of a split plan */
            op.kind = BSIPIPE_OP_W;
            rc = bsipipe_builder_append_op(b, &op);
        }
        if (rc < 0) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", bsipipe_error_detail());
            rc = bsipipe_error_set(rc, "%s: rank %d's action %d%c%d: %s", path, a->rank, a->stage, a->type, a->mb,
                                   detail);
        }
    }
    if (rc == 0) {
        rc = bsipipe_builder_finish(b, out); /* b keeps no plan; destroyed below */
        if (rc < 0) {
            char detail[512];
            snprintf(detail, sizeof detail, "%s", bsipipe_error_detail());
            rc = bsipipe_error_set(rc, "%s: %s", path, detail);
        }
        if (rc == 0 && (rc = csv_check_comms(&p, *out)) < 0) {
            bsipipe_schedule_destroy(*out);
            *out = NULL;
        }
    }
    if (rc == 0 && info) {
        info->compute_ops = p.compute.n;
        info->comm_ops = p.comm.n;
        info->ignored_ops = p.ignored;
    }
    bsipipe_builder_destroy(b);
    free(p.compute.a);
    free(p.comm.a);
    free(text);
    return rc;
}
