/* bsipipe_config.h: parallel configuration of a training run and its rules.
 *
 * The model's shape is a bsipipe_model_dims_t (kernels/bsipipe_model.h); the
 * way it is spread over devices is a bsipipe_parallel_config_t. Both are plain
 * values owned by the caller.
 */
#ifndef BSIPIPE_CONFIG_H
#define BSIPIPE_CONFIG_H

#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bsipipe_schedule_kind {
    BSIPIPE_SCHED_GPIPE = 0,  /* all forwards, then all backwards (micro-batches) */
    BSIPIPE_SCHED_1F1B,       /* DAPPLE / Megatron 1F1B */
    BSIPIPE_SCHED_1F1B_I,     /* Megatron interleaved 1F1B (p chunks per device) */
    BSIPIPE_SCHED_ZB_H1,      /* ZeroBubble ZB-H1: backward split into B and W */
    BSIPIPE_SCHED_CHIMERA,    /* two opposing pipelines, micro-batch level */
    BSIPIPE_SCHED_TERAPIPE,   /* GPipe at subsequence level */
    BSIPIPE_SCHED_SEQ1F1B,    /* 1F1B at subsequence level */
    BSIPIPE_SCHED_SEQ1F1B_I,  /* interleaved Seq1F1B */
    BSIPIPE_SCHED_BSIPIPE,    /* two opposing V-shaped pipelines at subsequence level */
    BSIPIPE_SCHED_BITPIPE,    /* two opposing V-shaped pipelines, micro-batch level (BitPipe) */
    BSIPIPE_SCHED_ZB_V,       /* ZeroBubble's ZB-V: one V-shaped pipe, split backward (torch's order) */
    BSIPIPE_SCHED_DUALPIPEV,  /* DeepSeek's DualPipeV: one V-shaped pipe, F&B pairs (torch's order) */
    BSIPIPE_SCHED_SEQ_ZBV,    /* ZB-V at subsequence level: one V pipe, split backward, pieces */
    BSIPIPE_SCHED_BSIPIPE_ZB, /* BSIPipe with split backward: two mirrored V pipes of pieces */
    BSIPIPE_SCHED_DUALPIPE,   /* DeepSeek's DualPipe: two opposing pipes (Chimera's placement), F&B pairs */
    BSIPIPE_SCHED_ZB_I,       /* interleaved zero bubble: 1f1b-i with split backward (torch's order) */
    BSIPIPE_SCHED_ZB_H2,      /* ZeroBubble ZB-H2: 2w-1 warmup forwards, W filling the tail */
    BSIPIPE_SCHED_COUNT
} bsipipe_schedule_kind_t;

/* Canonical lower-case names: gpipe 1f1b 1f1b-i zb-h1 chimera terapipe
 * seq1f1b seq1f1b-i bsipipe bitpipe zb-v dualpipev seq-zbv bsipipe-zb dualpipe zb-i zb-h2. */
const char *bsipipe_schedule_kind_name(bsipipe_schedule_kind_t kind);
/* Parses a name (case-insensitive, '_' accepted for '-'); -EINVAL if unknown. */
int bsipipe_schedule_kind_parse(const char *name, bsipipe_schedule_kind_t *kind);

/* What a schedule is made of. */
typedef struct bsipipe_schedule_traits {
    int bidirectional;   /* two opposing pipes (down and up) */
    int interleaved;     /* p > 1 chunks per device per pipe allowed */
    int sequence_level;  /* k > 1 subsequences allowed */
    int split_backward;  /* backward split into B (input grad) and W (weight grad) */
    int v_shape;         /* p = 2 chunks per device in a V: chunks 0..w-1 down the devices,
                            w..2w-1 back up (device d holds d and 2w-1-d) */
} bsipipe_schedule_traits_t;
bsipipe_schedule_traits_t bsipipe_schedule_kind_traits(bsipipe_schedule_kind_t kind);

typedef enum bsipipe_partition_kind {
    BSIPIPE_PARTITION_BALANCED = 0, /* equal FLOPs per piece (Seq1F1B) */
    BSIPIPE_PARTITION_EVEN          /* equal tokens per piece */
} bsipipe_partition_kind_t;

/* How SEND/RECV ops are ordered on each device (see docs/schedules.md). */
typedef enum bsipipe_comm_order {
    BSIPIPE_COMM_BSIPIPE = 0, /* early receive + reversal: each receive posted at the
                                 last boundary before its sender can send; receives
                                 before sends at every boundary */
    BSIPIPE_COMM_ORDERED,     /* complementary order only (even devices send first, odd
                                 devices receive first), receives posted just in time:
                                 no early receive (deadlocks bidirectional schedules) */
    BSIPIPE_COMM_NAIVE,       /* every device sends before it receives: deadlocks */
    BSIPIPE_COMM_NO_REVERSAL, /* the paper's ablation "w/o F-B overlap": bsipipe's early
                                 receives, but the complementary order at a boundary
                                 (even send first, odd receive first), not reversed
                                 ahead of a backward */
    BSIPIPE_COMM_COUNT
} bsipipe_comm_order_t;
const char *bsipipe_comm_order_name(bsipipe_comm_order_t order);
int bsipipe_comm_order_parse(const char *name, bsipipe_comm_order_t *order);

typedef struct bsipipe_parallel_config {
    bsipipe_schedule_kind_t schedule;
    int w;                 /* pipeline depth: devices per pipeline */
    int p;                 /* interleaving factor: chunks per device per pipe */
    int k;                 /* subsequences per micro-batch */
    int m;                 /* micro-batches per iteration */
    int tp;                /* tensor-parallel degree D_t (boundaries align to it) */
    int nodes;             /* hosts; 0 = all devices on one node */
    int devices_per_node;  /* 0 = w / nodes */
    bsipipe_partition_kind_t partition;
    bsipipe_comm_order_t comm;
    int concat;            /* BSIPipe: 1 = basic-unit concatenation, 0 = all forwards
                              of the iteration first (memory grows with N_s) */
    int optimise;          /* BSIPipe: 1 = the optimising pass runs on the constructed
                              order (unit costs, never more memory); 0 = as constructed */
    const char *layout;    /* which layers each chunk holds (graph/bsipipe_layout.h):
                              NULL = L/(p*w) each, "auto" = split by cost, else a
                              Megatron-style string. Not owned: the caller keeps it
                              alive while it uses this config; a schedule holds its
                              own copy, resolved to the explicit string */
} bsipipe_parallel_config_t;

/* The defaults for `kind`: w=4, p=2 where the schedule interleaves (BSIPipe,
 * 1F1B-I, Seq1F1B-I) else 1, k=2 for sequence-level schedules else 1, m=8,
 * tp=1, balanced partition, BSIPipe comm order, concatenation on, optimising pass on. */
bsipipe_parallel_config_t bsipipe_parallel_config_default(bsipipe_schedule_kind_t kind);

/* Subsequences per iteration N_s = m·k. */
static inline int bsipipe_parallel_config_ns(const bsipipe_parallel_config_t *pc)
{
    return pc->m * pc->k;
}

/* The micro-batch counts a schedule runs, as one sentence ("any m >= 1",
 * "m even, ..."), for --help and error messages; the rules themselves are
 * bsipipe_parallel_config_validate's. */
const char *bsipipe_schedule_kind_m_rule(bsipipe_schedule_kind_t kind);

/* Megatron's micro-batch group of the interleaved schedules (1f1b-i,
 * seq1f1b-i; Megatron's microbatch_group_size_per_vp_stage over units, a
 * unit being one (micro-batch, subsequence)): a device's forwards run chunk
 * 0 of G units, then chunk 1 of the same G, and so on, group after group; the
 * last group holds the remainder N_s mod G when it is not 0. Megatron refuses
 * a remainder below w (that group's chunk c+1 would wait for its chunk c to
 * come round the ring), so G is the smallest value in w..N_s whose remainder
 * is 0 or at least w: w itself when w divides N_s (Megatron's default, G =
 * the pipeline size), N_s at worst. Any N_s >= w has one. 0 when N_s < w. */
int bsipipe_interleave_group(int ns, int w);
/* zb-i's rounds (torch's ScheduleInterleavedZeroBubble): max(1, floor(m/w));
 * m must be a multiple of them, each round m / rounds micro-batches. */
int bsipipe_zb_i_rounds(int m, int w);

/* The device of (pipe, chunk) under pc (the placement of every plan):
 * chunk c on device c mod w (sequential, interleaved), or c for c < w and
 * 2w-1-c after (V-shaped); the up pipe (pipe 1) of a bidirectional schedule
 * mirrors the down pipe, device w-1-d. */
int bsipipe_parallel_config_chunk_device(const bsipipe_parallel_config_t *pc, int pipe, int chunk);

/* Layers each of the p*w chunks holds under pc->layout for model d, into
 * counts[0..p*w) (caller-owned): the even split when pc->layout is NULL.
 * 0, or BSIPIPE_ECONFIG naming the problem (an even split that does not
 * divide, a layout string's error and its position). */
int bsipipe_parallel_config_layers(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *d, int *counts);

/* Checks every rule of the parallel config against the model (dims may be
 * NULL to check the parallel config alone; a layout needs the model). Returns 0 or BSIPIPE_ECONFIG with
 * a detail sentence naming the rule and the nearest valid values. */
int bsipipe_parallel_config_validate(const bsipipe_parallel_config_t *pc,
                                     const bsipipe_model_dims_t *dims);

/* Checks a model's dimensions (positive, heads divide hidden, ...). */
int bsipipe_model_dims_validate(const bsipipe_model_dims_t *dims);

#ifdef __cplusplus
}
#endif
#endif
