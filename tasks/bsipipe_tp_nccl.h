/* bsipipe_tp_nccl.h: the tensor-parallel groups' collectives over NCCL, for
 * TP groups whose D_t ranks run on D_t different GPUs of this process
 * (--devices cuda --tp N --transport nccl; docs/tensor-parallel.md, "On
 * CUDA devices").
 *
 * One D_t-rank communicator per group (a pipeline device), created with
 * ncclCommInitAll over the ranks' GPUs; rank r of the communicator is TP
 * rank r. Each rank's communicator is used by one StarPU worker only (the
 * worker of that TP rank), in the plan's order, which is the same on every
 * rank of a group, so every rank issues the group's collectives in the same
 * order and no communicator is shared between threads.
 *
 * The collectives have the layouts of kernels/bsipipe_tp.h's in-process ones
 * (bsipipe_tp_all_gather_rank and friends): an all-gather concatenates the
 * ranks' count elements in rank order, a reduce-scatter gives rank r the
 * sum of block r (count elements) over the ranks, an all-reduce sums or
 * maxes in place. NCCL sums in its own order (rings, trees), not in rank
 * order, so sums differ from the in-process ones in the last bits; every
 * rank receives the same result, which keeps the replicated tensors equal.
 *
 * Calls are asynchronous on the given stream (the calling worker's); the
 * operation completes there when every rank of the group has made its call.
 * Errors: -EINVAL, -ENOMEM, -EIO (NCCL failed; NCCL's words in
 * bsipipe_error_detail()). */
#ifndef BSIPIPE_TP_NCCL_H
#define BSIPIPE_TP_NCCL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "kernels/bsipipe_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_tp_nccl tp_nccl_t;

/* n_groups groups of `size` ranks; gpu[g * size + r] = CUDA device ordinal
 * of rank r of group g, all different within a group (NCCL refuses two ranks
 * on one GPU). A group with gpu[g * size] < 0 gets no communicator (a device
 * of another MPI rank). */
int tp_nccl_create(int n_groups, int size, const int *gpu, tp_nccl_t **out);
void tp_nccl_destroy(tp_nccl_t *n); /* NULL is fine */

/* From rank `rank` of group `group`, on `stream`. dt: F32 or F64. */
int tp_nccl_all_gather(tp_nccl_t *n, int group, int rank, const void *send, void *recv, long count,
                               bsipipe_tp_dtype_t dt, cudaStream_t stream);
int tp_nccl_reduce_scatter(tp_nccl_t *n, int group, int rank, const void *send, void *recv,
                                   long count, bsipipe_tp_dtype_t dt, cudaStream_t stream);
int tp_nccl_all_reduce(tp_nccl_t *n, int group, int rank, void *buf, long count,
                               bsipipe_tp_dtype_t dt, bsipipe_tp_op_t op, cudaStream_t stream);

/* Brackets several calls of one rank into one NCCL launch (ncclGroupStart /
 * ncclGroupEnd): the replicated tensors' all-reduces of a replica. */
int tp_nccl_batch_begin(void);
int tp_nccl_batch_end(void);

#ifdef __cplusplus
}
#endif
#endif
