/* schedule_internal.h: the schedule's insides, shared by the files of graph/
 * that build and read it. Not installed. */
#ifndef BSIPIPE_SCHEDULE_INTERNAL_H
#define BSIPIPE_SCHEDULE_INTERNAL_H

#include "graph/bsipipe_schedule.h"

#include <stdio.h>

struct bsipipe_schedule {
    bsipipe_parallel_config_t pc;
    bsipipe_model_dims_t dims;
    int n_devices, n_pipes, n_chunks;
    int *chunk_dev;    /* [pipe * n_chunks + chunk] -> device */
    int *sub_starts;   /* k + 1 token boundaries */
    int *layer_starts; /* n_chunks + 1 layer boundaries: chunk c holds [c], [c+1]) */
    char *layout;      /* pc.layout resolved to its explicit string (NULL: the even split) */
    int *n_ops, *cap_ops;
    bsipipe_op_t **ops; /* per device, in order */
    int n_channels;
    int mb_group, mb_alternate; /* micro-batch grouping: schedule_mb_pipe */
};

/* Node of pipeline device d under cost model c (graph/sim_links.c): its
 * device_node entry, else d's TP group's GPUs / devices_per_node, else 0.
 * Needs graph/bsipipe_sim.h. */
struct bsipipe_cost_model;
int sim_node_of(const bsipipe_schedule_t *s, const struct bsipipe_cost_model *c, int d);

/* A schedule of pc (validated against dims; dims NULL: the nominal model)
 * with its placement and partition and empty op lists: the common start of
 * bsipipe_schedule_create (then a generator fills the lists) and of the
 * builder (the caller does). */
int schedule_alloc(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out);

/* Appends the gradient SYNC of every replicated chunk and the STEP to every
 * device's list (after comm_insert). */
int schedule_append_sync_step(bsipipe_schedule_t *s);

/* The validator's checks of one compute op `op` at position i of device d's
 * list (bsipipe_validate.c): it claims device d, is in range (W only where
 * the backward is split), its pipe is its micro-batch's, placement puts its
 * chunk on d, and it was not seen before (seen[] by compute index, marked
 * here). 0 or -EINVAL with the validator's sentence. */
int schedule_check_compute_op(const bsipipe_schedule_t *s, const bsipipe_op_t *op, int d, int i,
                              unsigned char *seen);

/* Every compute op of the plan was seen: 0, or -EINVAL naming the first
 * missing op and the device placement gives it. */
int schedule_check_missing(const bsipipe_schedule_t *s, const unsigned char *seen);

/* Reads a plan file whole (plan_file.c): a regular file of at most
 * max_bytes, never waiting on a FIFO or device with no writer; *out
 * (malloc'ed, NUL-terminated: the caller frees it) holds *len bytes.
 * -errno naming the file when it cannot be opened or read, -ENOMEM,
 * BSIPIPE_EFORMAT for a file that is not regular or too large. */
int plan_file_read(const char *path, long max_bytes, char **out, long *len);

/* Appends an op to its device's list; -ENOMEM on failure. */
int schedule_push(bsipipe_schedule_t *s, const bsipipe_op_t *op);

/* Appends a compute op (F/B/W) of (mb, sub, chunk) on the device placement
 * gives it. */
int schedule_push_compute(bsipipe_schedule_t *s, bsipipe_op_kind_t kind, int mb, int sub, int chunk);

static inline int schedule_dev(const bsipipe_schedule_t *s, int pipe, int chunk)
{
    return s->chunk_dev[pipe * s->n_chunks + chunk];
}
/* Micro-batches of one group (bidirectional schedules; set once by
 * schedule_alloc, bsipipe_schedule.c says how it is chosen): the first half
 * of each group goes down, the second half up (a last, shorter group too:
 * BSIPipe at k = 1 with an odd number of units); with mb_alternate (BSIPipe,
 * odd w, groups of w) (w+1)/2 down in even groups and (w-1)/2 in odd ones. */
static inline int schedule_mb_group(const bsipipe_schedule_t *s)
{
    return s->mb_group;
}
static inline int schedule_mb_pipe(const bsipipe_schedule_t *s, int mb)
{
    if (s->n_pipes == 1)
        return 0;
    int group = s->mb_group, base = mb / group * group;
    int size = s->pc.m - base < group ? s->pc.m - base : group; /* a last, partial group */
    int down = size / 2;
    if (s->mb_alternate && (mb / group) % 2 == 0)
        down++;
    return mb - base >= down;
}

/* Compute-order generators: fill the per-device lists with F/B/W ops. */
int generate_fixed(bsipipe_schedule_t *s);  /* the unidirectional and chimera */
/* BSIPipe's list schedule with sub-units of `subunit` subsequences per pipe
 * (0: the whole basic unit); gen_greedy.c. */
int generate_greedy(bsipipe_schedule_t *s, int subunit);
int generate_bitpipe(bsipipe_schedule_t *s); /* bitpipe; bsipipe at k = 1 when shorter */
/* BSIPipe's construction search (gen_bsipipe.c): *io is replaced by the
 * plan kept (the others freed; on an error the first stays). */
int generate_bsipipe(bsipipe_schedule_t **io);
/* The split-backward schedules: zb-v, dualpipev, dualpipe (the peers'
 * orders), seq-zbv and bsipipe-zb (a list schedule); gen_zb.c. */
int generate_zb(bsipipe_schedule_t *s);

/* Inserts SEND/RECV ops for every cross-device dependency, ordered per
 * s->pc.comm from the timeline of the compute ops under `cost` (NULL: unit
 * costs), removing any existing ones first. */
struct bsipipe_cost_model;
int comm_insert(bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost);

/* End time of every compute op (by compute index; -1 for absent ops) when
 * each device runs its compute ops in list order as early as their inputs
 * allow under `cost` (not NULL). BSIPIPE_EDEPEND if the order cannot finish. */
int schedule_compute_timeline(const bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost, double *end);

/* Peak activation memory of the compute ops ops[0..n) of one device, from
 * their start and end times (bsipipe_sim.c: the simulator's accounting):
 * units (subsequence-chunk stashes) and bytes. -ENOMEM. */
int schedule_peak_memory(const bsipipe_schedule_t *s, double bytes_per_element, const bsipipe_op_t *ops,
                         const double *start, const double *end, int n, int *peak_units, double *peak_bytes);

/* The optimising pass (opt_justify.c) over the compute ops of s: reorders
 * them so the makespan under `cost` (NULL: unit costs) can only fall, each
 * device holding at most max(budget, its current peak) stashes (budget 0:
 * its current peak, and no more activation bytes than now either). Leaves only compute ops in the lists: the caller
 * inserts transfers and SYNC/STEP again. */
int schedule_optimise(bsipipe_schedule_t *s, const struct bsipipe_cost_model *cost, int budget,
                      bsipipe_optimise_report_t *report);

/* Dense index of a compute op (kind F/B/W, mb, sub, chunk). */
static inline long compute_index(const bsipipe_schedule_t *s, int kind, int mb, int sub, int chunk)
{
    return (((long)kind * s->pc.m + mb) * s->pc.k + sub) * s->n_chunks + chunk;
}
static inline long compute_index_count(const bsipipe_schedule_t *s)
{
    return 3L * s->pc.m * s->pc.k * s->n_chunks;
}

/* The producers a compute op needs (F/B/W ops of the same pipe): up to 3.
 * Returns how many were written to out (as bsipipe_op_t with kind, mb, sub,
 * chunk, pipe and device filled). */
int compute_deps(const bsipipe_schedule_t *s, const bsipipe_op_t *op, bsipipe_op_t out[3]);

#endif
