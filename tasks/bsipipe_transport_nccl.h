/* bsipipe_transport_nccl.h: the `nccl` transport — point-to-point transfers
 * (ncclSend / ncclRecv) and the SYNC all-reduce (ncclAllReduce, sum) between
 * devices of one process that run on CUDA workers of different GPUs.
 *
 * One two-rank communicator per pair of devices that exchange data, created
 * with ncclCommInitAll over the pair's two GPUs (rank 0: the lower device
 * number). A pair whose two devices share one GPU gets none: NCCL refuses two
 * ranks on one GPU ("Duplicate GPU detected"), so the engine moves such a
 * pair's data with the local transport and cudaMemcpyAsync instead
 * (transport_nccl_has() says which). Each rank of a communicator is used by one
 * StarPU worker only (the worker of its device), in the plan's order, so no
 * communicator is shared between threads.
 *
 * Calls are asynchronous on the given stream (the calling worker's): NCCL
 * queues the operation; it completes on the stream when the peer has made
 * the matching call. There is no watchdog here: a mismatched plan hangs in
 * NCCL (the plan validator rules that out before any run). Errors: -EINVAL,
 * -ENOMEM, -ENODEV (no NCCL communicator for that pair), -EIO (NCCL failed;
 * NCCL's words in bsipipe_error_detail()). */
#ifndef BSIPIPE_TRANSPORT_NCCL_H
#define BSIPIPE_TRANSPORT_NCCL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_nccl transport_nccl_t;

/* n_devices devices; gpu[d] = CUDA device ordinal of device d; pairs[2i],
 * pairs[2i+1] (i < n_pairs) = devices that exchange data (repeats are fine).
 * Creates the communicators of the pairs on two different GPUs. */
int transport_nccl_create(int n_devices, const int *gpu, int n_pairs, const int *pairs, transport_nccl_t **out);
void transport_nccl_destroy(transport_nccl_t *n); /* NULL is fine */

/* 1 when devices a and b have a communicator, else 0 (also for NULL n). */
int transport_nccl_has(const transport_nccl_t *n, int a, int b);

/* Number of communicators (pairs) created. */
int transport_nccl_n_pairs(const transport_nccl_t *n);

/* From device's worker: bytes to / from peer. */
int transport_nccl_send(transport_nccl_t *n, int device, int peer, const void *buf, size_t bytes, cudaStream_t stream);
int transport_nccl_recv(transport_nccl_t *n, int device, int peer, void *buf, size_t bytes, cudaStream_t stream);

/* In place: buf (count floats) = device's buf + peer's buf, on both. */
int transport_nccl_allreduce(transport_nccl_t *n, int device, int peer, float *buf, size_t count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
