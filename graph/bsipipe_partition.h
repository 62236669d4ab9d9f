/* bsipipe_partition.h: splitting a sequence into k subsequences.
 *
 * Piece j covers tokens [starts[j], starts[j+1]); starts has k+1 entries,
 * starts[0] = 0 and starts[k] = seq_len, all boundaries multiples of `align`
 * (the tensor-parallel degree D_t, so that every piece shards evenly).
 * The caller owns `starts`.
 */
#ifndef BSIPIPE_PARTITION_H
#define BSIPIPE_PARTITION_H

#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cost of the first P tokens of a sequence through one layer, per the
 * Seq1F1B FLOPs model: a linear part (projections, MLP) per token plus
 * causal attention, where token i attends to i+1 keys. A piece [a, b) then
 * costs C(b) - C(a) = lin·s + att·(s·b - s(s-1)/2) with s = b - a. */
typedef struct bsipipe_piece_cost {
    double linear_per_token; /* FLOPs per token in the layer's matrix products */
    double attn_per_pair;    /* FLOPs per (query, key) pair in attention */
} bsipipe_piece_cost_t;

/* Forward FLOPs coefficients of one transformer layer of `dims`. */
bsipipe_piece_cost_t bsipipe_piece_cost_of_model(const bsipipe_model_dims_t *dims);

/* Forward FLOPs of one layer on tokens [start, end) (with the KV prefix). */
double bsipipe_piece_flops(bsipipe_piece_cost_t cost, long start, long end);

/* Token granule of the CPU kernels: the fp32 vector width of AVX-512 and
 * OpenBLAS's row unroll. A piece boundary that is not a multiple of it
 * leaves partial vectors and edge tiles in every product and attention tile
 * of both pieces (measured: a 512-token sequence cut at 287 costs 6.5% more
 * forward time than in one piece, cut at 256 or 288 3-4%; docs/schedules.md). */
#define BSIPIPE_PARTITION_GRANULE 16

/* The alignment the planner cuts a sequence of seq_len tokens into k pieces
 * with, for tensor-parallel degree tp: lcm(BSIPIPE_PARTITION_GRANULE, tp)
 * when seq_len is a multiple of it and the mean piece is at least 8 of it
 * (rounding a boundary then moves at most 1/16 of a piece), else tp. */
int bsipipe_partition_align(int seq_len, int k, int tp);

/* Even split: piece lengths differ by at most `align` tokens.
 * Returns 0, or -EINVAL (seq_len not a multiple of align, k < 1, or more
 * pieces than seq_len/align) with a detail sentence. */
int bsipipe_partition_even(int seq_len, int k, int align, int *starts);

/* Compute-balanced split (Seq1F1B): every piece has the same FLOPs up to the
 * rounding of boundaries to multiples of `align`; earlier pieces are longer.
 * Each boundary is the multiple of `align` whose prefix cost is nearest the
 * ideal, kept strictly increasing. Same errors as the even split. */
int bsipipe_partition_balanced_cost(int seq_len, int k, int align,
                                    bsipipe_piece_cost_t cost, int *starts);

/* The same with the cost coefficients of `dims` and seq_len = dims->seq_len. */
int bsipipe_partition_balanced(const bsipipe_model_dims_t *dims, int k,
                               int align, int *starts);

#ifdef __cplusplus
}
#endif
#endif
