/* schedule_ir.c: the plan's IR — the schedule handle (placement of chunks
 * on devices, layer and subsequence boundaries, one op list per device),
 * appending ops, a compute op's producers, SYNC/STEP, copy and accessors.
 * The passes (graph/bsipipe_schedule.c drives them) fill the lists: the
 * generators the compute ops, comm.c the transfers. */
#include "graph/schedule_internal.h"
#include "base/bsipipe_error.h"
#include "graph/bsipipe_layout.h"
#include "graph/bsipipe_partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_kind_names[BSIPIPE_OP_KIND_COUNT] = {
    "F", "B", "W", "SEND", "RECV", "SYNC", "STEP"};

const char *bsipipe_op_kind_name(bsipipe_op_kind_t kind)
{
    return (unsigned)kind < BSIPIPE_OP_KIND_COUNT ? op_kind_names[kind] : "?";
}

const char *bsipipe_pipe_name(bsipipe_pipe_t pipe)
{
    return pipe == BSIPIPE_PIPE_UP ? "up" : "down";
}

char *bsipipe_op_format(const bsipipe_op_t *op, char *buf, size_t len)
{
    switch (op->kind) {
    case BSIPIPE_OP_F: case BSIPIPE_OP_B: case BSIPIPE_OP_W:
        snprintf(buf, len, "%s %s mb%d s%d c%d", bsipipe_op_kind_name(op->kind),
                 bsipipe_pipe_name(op->pipe), op->mb, op->sub, op->chunk);
        break;
    case BSIPIPE_OP_SEND: case BSIPIPE_OP_RECV:
        snprintf(buf, len, "%s %s(%s mb%d s%d c%d) %s dev%d", bsipipe_op_kind_name(op->kind),
                 op->tensor == BSIPIPE_TENSOR_ACT ? "act" : "grad", bsipipe_pipe_name(op->pipe),
                 op->mb, op->sub, op->chunk, op->kind == BSIPIPE_OP_SEND ? "to" : "from", op->peer);
        break;
    case BSIPIPE_OP_SYNC:
        snprintf(buf, len, "SYNC c%d with dev%d", op->chunk, op->peer);
        break;
    default:
        snprintf(buf, len, "%s", bsipipe_op_kind_name(op->kind));
    }
    return buf;
}

int schedule_push(bsipipe_schedule_t *s, const bsipipe_op_t *op)
{
    int d = op->device;
    if (s->n_ops[d] == s->cap_ops[d]) {
        int cap = s->cap_ops[d] ? 2 * s->cap_ops[d] : 64;
        bsipipe_op_t *n = realloc(s->ops[d], (size_t)cap * sizeof *n);
        if (!n)
            return bsipipe_error_set(-ENOMEM, "out of memory growing the op list of device %d", d);
        s->ops[d] = n;
        s->cap_ops[d] = cap;
    }
    s->ops[d][s->n_ops[d]++] = *op;
    return 0;
}

int schedule_push_compute(bsipipe_schedule_t *s, bsipipe_op_kind_t kind, int mb, int sub, int chunk)
{
    int pipe = schedule_mb_pipe(s, mb);
    bsipipe_op_t op = {
        .kind = (uint8_t)kind, .pipe = (uint8_t)pipe, .tensor = BSIPIPE_TENSOR_NONE,
        .device = schedule_dev(s, pipe, chunk), .mb = mb, .sub = sub, .chunk = chunk,
        .peer = -1, .channel = -1,
    };
    return schedule_push(s, &op);
}

int compute_deps(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3])
{
    int n = 0, last = s->n_chunks - 1, pipe = op->pipe;
#define DEP(K, MB, SUB, C)                                                          \
    do {                                                                            \
        bsipipe_op_t d_ = {.kind = (K), .pipe = (uint8_t)pipe, .mb = (MB), .sub = (SUB), \
                           .chunk = (C), .peer = -1, .channel = -1};                \
        d_.device = schedule_dev(s, pipe, (C));                                     \
        out[n++] = d_;                                                              \
    } while (0)
    switch (op->kind) {
    case BSIPIPE_OP_F:
        if (op->chunk > 0) DEP(BSIPIPE_OP_F, op->mb, op->sub, op->chunk - 1);
        if (op->sub > 0) DEP(BSIPIPE_OP_F, op->mb, op->sub - 1, op->chunk);
        break;
    case BSIPIPE_OP_B:
        DEP(BSIPIPE_OP_F, op->mb, op->sub, op->chunk);
        if (op->chunk < last) DEP(BSIPIPE_OP_B, op->mb, op->sub, op->chunk + 1);
        if (op->sub < s->pc.k - 1) DEP(BSIPIPE_OP_B, op->mb, op->sub + 1, op->chunk);
        break;
    case BSIPIPE_OP_W:
        DEP(BSIPIPE_OP_B, op->mb, op->sub, op->chunk);
        break;
    default:
        break;
    }
#undef DEP
    return n;
}

/* Placement: (pipe, chunk) -> device. */
static void place_chunks(bsipipe_schedule_t *s)
{
    for (int pipe = 0; pipe < s->n_pipes; pipe++)
        for (int c = 0; c < s->n_chunks; c++)
            s->chunk_dev[pipe * s->n_chunks + c] = bsipipe_parallel_config_chunk_device(&s->pc, pipe, c);
}

/* Gradient sync of every chunk replica (bidirectional schedules), in chunk
 * order on every device so that pairs meet in the same order, then STEP. */
int schedule_append_sync_step(bsipipe_schedule_t *s)
{
    int rc = 0;
    for (int d = 0; d < s->n_devices && rc == 0; d++) {
        if (s->n_pipes == 2)
            for (int c = 0; c < s->n_chunks && rc == 0; c++)
                for (int pipe = 0; pipe < 2 && rc == 0; pipe++) {
                    if (schedule_dev(s, pipe, c) != d)
                        continue;
                    int other = schedule_dev(s, 1 - pipe, c);
                    /* A device holding both replicas syncs once, locally. */
                    if (other == d && pipe == 1)
                        continue;
                    bsipipe_op_t op = {.kind = BSIPIPE_OP_SYNC, .pipe = (uint8_t)pipe, .device = d,
                                       .mb = -1, .sub = -1, .chunk = c, .peer = other, .channel = -1};
                    rc = schedule_push(s, &op);
                }
        bsipipe_op_t step = {.kind = BSIPIPE_OP_STEP, .device = d, .mb = -1, .sub = -1,
                             .chunk = -1, .peer = -1, .channel = -1};
        if (rc == 0)
            rc = schedule_push(s, &step);
    }
    return rc;
}

void bsipipe_schedule_destroy(bsipipe_schedule_t *s)
{
    if (!s)
        return;
    for (int d = 0; s->ops && d < s->n_devices; d++)
        free(s->ops[d]);
    free(s->ops);
    free(s->n_ops);
    free(s->cap_ops);
    free(s->chunk_dev);
    free(s->sub_starts);
    free(s->layer_starts);
    free(s->layout);
    free(s);
}

/* How a bidirectional schedule groups its micro-batches between the pipes
 * (schedule_mb_pipe): groups of w, or 2w when w is odd so that both pipes
 * get the same number; all m when m is not a multiple of that. BSIPipe
 * differs twice. With odd w and k >= 2 it runs groups of w, (w+1)/2 down
 * and (w-1)/2 up alternating (one basic unit of memory). At k = 1 with m a
 * multiple of w, two or more units, it runs groups of 2w (two units of
 * memory; an odd number of units of even w ends with a group of w, half
 * down, half up): with one unit each k = 1 junction costs idle time and the
 * bubble stays near 7-10% whatever N_s; with two it falls under the paper's
 * bound (docs/schedules.md). */
static void mb_grouping(const bsipipe_parallel_config_t *pc, int *group, int *alternate)
{
    int bsi = pc->schedule == BSIPIPE_SCHED_BSIPIPE, pairs = pc->m % (2 * pc->w) == 0;
    *alternate = bsi && pc->w % 2 && pc->k >= 2 && pairs;
    int k1_pairs = bsi && pc->k == 1 && pc->m >= 2 * pc->w;
    *group = (pc->w % 2 && !*alternate) || k1_pairs ? 2 * pc->w : pc->w;
    if (bsi && pc->k == 1 && pc->m > pc->w && pc->m < 2 * pc->w)
        *group = pc->m;
    /* Else one group of m; not for k1_pairs (an odd number of units ends
     * with a group of w), bsipipe or bitpipe (a last partial group). */
    if ((pc->m % *group && !k1_pairs && !bsi && pc->schedule != BSIPIPE_SCHED_BITPIPE) ||
        pc->schedule == BSIPIPE_SCHED_DUALPIPE) /* DeepSeek's: the first half of the batch down, the rest up */
        *group = pc->m;
}

/* The layer boundaries of pc's layout over s's model; an explicit layout
 * is kept as its canonical string (an "auto" one resolved), so that the
 * plan written out and read back places the same layers. */
static int place_layers(bsipipe_schedule_t *s, const bsipipe_parallel_config_t *pc)
{
    int C = s->n_chunks, *counts = s->layer_starts + 1; /* counts, then summed in place */
    int rc = bsipipe_parallel_config_layers(pc, &s->dims, counts);
    if (rc < 0)
        return rc;
    if (pc->layout) {
        size_t len = (size_t)C * 16 + 16;
        if (!(s->layout = malloc(len)) || !bsipipe_layout_format(counts, C, s->layout, len))
            return bsipipe_error_set(-ENOMEM, "out of memory");
        s->pc.layout = s->layout;
    }
    s->layer_starts[0] = 0;
    for (int c = 1; c <= C; c++)
        s->layer_starts[c] += s->layer_starts[c - 1];
    return 0;
}

/* Ops per iteration must stay addressable by int per device. */
enum { MAX_COMPUTE_OPS = 1 << 26 };

int schedule_alloc(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out)
{
    *out = NULL;
    int align, rc = bsipipe_parallel_config_validate(pc, dims);
    if (rc < 0)
        return rc;
    bsipipe_schedule_traits_t t = bsipipe_schedule_kind_traits(pc->schedule);
    long compute_ops = 3L * pc->m * pc->k * pc->p * pc->w;
    if (compute_ops > MAX_COMPUTE_OPS)
        return bsipipe_error_set(BSIPIPE_ECONFIG,
            "plan too large: %ld compute ops (m*k*p*w*3) exceeds %d; reduce m, k or w",
            compute_ops, MAX_COMPUTE_OPS);

    bsipipe_schedule_t *s = calloc(1, sizeof *s);
    if (!s)
        return bsipipe_error_set(-ENOMEM, "out of memory");
    s->pc = *pc;
    mb_grouping(pc, &s->mb_group, &s->mb_alternate);
    if (dims) {
        s->dims = *dims;
    } else { /* a nominal model: one layer per chunk, k tokens per piece, a head per TP rank */
        s->dims = (bsipipe_model_dims_t){BSIPIPE_MODEL_GPT, pc->p * pc->w, 64 * pc->tp, pc->tp, 256, 256,
                                         pc->k * pc->tp};
    }
    s->n_devices = pc->w;
    s->n_pipes = t.bidirectional ? 2 : 1;
    s->n_chunks = pc->p * pc->w;
    s->chunk_dev = malloc(sizeof(int) * (size_t)(s->n_pipes * s->n_chunks));
    s->sub_starts = malloc(sizeof(int) * (size_t)(pc->k + 1));
    s->layer_starts = malloc(sizeof(int) * (size_t)(s->n_chunks + 1));
    s->n_ops = calloc((size_t)s->n_devices, sizeof(int));
    s->cap_ops = calloc((size_t)s->n_devices, sizeof(int));
    s->ops = calloc((size_t)s->n_devices, sizeof *s->ops);
    if (!s->chunk_dev || !s->sub_starts || !s->layer_starts || !s->n_ops || !s->cap_ops || !s->ops) {
        bsipipe_schedule_destroy(s);
        return bsipipe_error_set(-ENOMEM, "out of memory");
    }
    s->pc.layout = NULL; /* the caller's string: replaced by the schedule's own below */
    if ((rc = place_layers(s, pc)) < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    place_chunks(s);
    align = bsipipe_partition_align(s->dims.seq_len, pc->k, pc->tp);
    rc = pc->partition == BSIPIPE_PARTITION_EVEN
             ? bsipipe_partition_even(s->dims.seq_len, pc->k, align, s->sub_starts)
             : bsipipe_partition_balanced(&s->dims, pc->k, align, s->sub_starts);
    if (rc < 0) {
        bsipipe_schedule_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}
int bsipipe_schedule_copy(const bsipipe_schedule_t *s, bsipipe_schedule_t **out)
{
    *out = NULL;
    if (!s)
        return bsipipe_error_set(-EINVAL, "schedule copy: no schedule given");
    bsipipe_schedule_t *c;
    int rc = schedule_alloc(&s->pc, &s->dims, &c);
    if (rc < 0)
        return rc;
    /* Same config and model: same placement and partition; the op lists
     * are copied as they are. */
    for (int d = 0; d < s->n_devices; d++) {
        if (s->n_ops[d] == 0)
            continue;
        c->ops[d] = malloc(sizeof *c->ops[d] * (size_t)s->n_ops[d]);
        if (!c->ops[d]) {
            bsipipe_schedule_destroy(c);
            return bsipipe_error_set(-ENOMEM, "out of memory copying a schedule");
        }
        memcpy(c->ops[d], s->ops[d], sizeof *c->ops[d] * (size_t)s->n_ops[d]);
        c->n_ops[d] = c->cap_ops[d] = s->n_ops[d];
    }
    c->n_channels = s->n_channels;
    *out = c;
    return 0;
}
const bsipipe_parallel_config_t *bsipipe_schedule_config(const bsipipe_schedule_t *s) { return &s->pc; }
const bsipipe_model_dims_t *bsipipe_schedule_model(const bsipipe_schedule_t *s) { return &s->dims; }
int bsipipe_schedule_n_devices(const bsipipe_schedule_t *s) { return s->n_devices; }
int bsipipe_schedule_n_pipes(const bsipipe_schedule_t *s) { return s->n_pipes; }
int bsipipe_schedule_n_chunks(const bsipipe_schedule_t *s) { return s->n_chunks; }
int bsipipe_schedule_n_channels(const bsipipe_schedule_t *s) { return s->n_channels; }
const int *bsipipe_schedule_sub_starts(const bsipipe_schedule_t *s) { return s->sub_starts; }

bsipipe_pipe_t bsipipe_schedule_mb_pipe(const bsipipe_schedule_t *s, int mb)
{
    return (bsipipe_pipe_t)schedule_mb_pipe(s, mb);
}

int bsipipe_schedule_op_inputs(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3])
{
    return s && op && out && op->kind <= BSIPIPE_OP_W ? compute_deps(s, op, out) : 0;
}

int bsipipe_schedule_chunk_device(const bsipipe_schedule_t *s, bsipipe_pipe_t pipe, int chunk)
{
    if ((int)pipe >= s->n_pipes || chunk < 0 || chunk >= s->n_chunks)
        return -EINVAL;
    return schedule_dev(s, pipe, chunk);
}

void bsipipe_schedule_chunk_layers(const bsipipe_schedule_t *s, int chunk, int *first, int *last)
{
    *first = s->layer_starts[chunk];
    *last = s->layer_starts[chunk + 1];
}

const bsipipe_op_t *bsipipe_schedule_device_ops(const bsipipe_schedule_t *s, int device, int *n_ops)
{
    if (device < 0 || device >= s->n_devices) {
        *n_ops = 0;
        return NULL;
    }
    *n_ops = s->n_ops[device];
    return s->ops[device];
}

long bsipipe_schedule_n_ops(const bsipipe_schedule_t *s)
{
    long n = 0;
    for (int d = 0; d < s->n_devices; d++)
        n += s->n_ops[d];
    return n;
}