/* bsipipe_kernels.h: CPU transformer kernels on raw pointers (no StarPU).
 *
 * Every function exists in fp32 (plain name) and fp64 (suffix _f64; the same
 * source compiled with double, used by the finite-difference tests). The
 * declarations are in bsipipe_kernels_decl.h, included once per precision.
 *
 * Unit of work: one piece (subsequence) [start, start+len) of one sequence of
 * S tokens, through a chunk = layers [l0, l1). Queries of the piece attend to
 * keys 0..start+i (KV prefix written by earlier pieces of the same sequence,
 * causal inside the piece, positions offset by start).
 *
 * Protocol for one sequence split into pieces 0..k-1 (DESIGN.md §5):
 *   forward : pieces in order 0..k-1. Each writes its K/V rows into the
 *             chunk's kv buffer and reads the rows of earlier pieces.
 *   head    : the last chunk's piece output goes through bsipipe_head_*;
 *             bsipipe_head_forward_backward returns the loss and d(output).
 *   backward: pieces in reverse order k-1..0. Zero the chunk's dkv buffer
 *             before the first backward of a sequence (i.e. of piece k-1).
 *             Piece j adds the gradient of its queries' attention into dK/dV
 *             rows 0..start+len-1 and then consumes its own rows, which by then
 *             hold every later piece's contribution.
 *   Weight gradients are ACCUMULATED (+=) into the caller's gradient buffers,
 *   across pieces and micro-batches; the caller zeroes them per iteration.
 *
 * Ownership: the caller allocates and frees every buffer; no function keeps a
 * pointer after it returns. Sizes: see bsipipe_model.h. Buffers passed as
 * const are only read. Attention uses a small per-call heap scratch (a few
 * tiles), hence -ENOMEM is possible.
 * Return values: 0, -EINVAL (bad dims, range, NULL pointer, token out of
 * vocab), -ENOMEM.
 *
 * A CUDA twin of each function takes the same arguments plus a stream/cuBLAS
 * handle (kernels/cuda/).
 */
#ifndef BSIPIPE_KERNELS_H
#define BSIPIPE_KERNELS_H

#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bsipipe_adamw_t (the optimizer's hyper-parameters): kernels/bsipipe_model.h */

/* Tuning knobs (process-wide; set before running kernels, not thread-safe
 * against concurrent kernel calls).
 * Attention tile sizes (queries x keys), defaults 64 x 128; -EINVAL if < 1. */
int bsipipe_kernels_set_tiles(int tile_q, int tile_k);
/* Threads used inside one kernel call, default 1 (a StarPU CPU worker is
 * one core): attention heads, row blocks of the norms / activations /
 * copies, and the parts of every large matrix product, all on one
 * persistent pool. With n > 1 each part is a single-threaded BLAS call:
 * OpenBLAS's own thread count is set to 1 for the duration of the product
 * and restored after (process-wide, like these knobs). Results are bitwise
 * the same for every n. */
int bsipipe_kernels_set_threads(int n);
int bsipipe_kernels_get_threads(void);

#define BSIPIPE_R float
#define BSIPIPE_FN(n) n
#include "kernels/bsipipe_kernels_decl.h"
#undef BSIPIPE_R
#undef BSIPIPE_FN

#define BSIPIPE_R double
#define BSIPIPE_FN(n) n##_f64
#include "kernels/bsipipe_kernels_decl.h"
#undef BSIPIPE_R
#undef BSIPIPE_FN

#ifdef __cplusplus
}
#endif
#endif
