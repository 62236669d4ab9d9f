/* bsipipe_transport.h: the `local` transport — point-to-point transfers
 * between devices of one process with rendezvous semantics (as NCCL
 * point-to-point does), and a watchdog.
 *
 * A transfer is a channel: one RECV task on the receiving device and one
 * SEND task on the sending device. The engine submits the RECV task with one
 * end dependency (starpu_task_end_dep_add(recv, 1)); its codelet calls
 * bsipipe_transport_post(), which registers the destination buffer and
 * returns at once, so the receiving worker goes on; the RECV task completes
 * only when the data has landed (the transport calls
 * starpu_task_end_dep_release on it). The SEND codelet calls
 * bsipipe_transport_send(), which blocks its worker until the matching
 * receive is posted, copies, and releases the RECV task.
 *
 * Watchdog: a send that waits longer than the timeout fails the whole
 * transport: every waiting and later send returns at once, every posted
 * receive is released (so the task graph drains instead of hanging), and
 * bsipipe_transport_failed() / _report() say which devices waited for which
 * ops. The engine then skips compute and returns an error.
 *
 * Channels are numbered 0..n_channels-1 per iteration; call
 * bsipipe_transport_reset() between iterations (no transfer in flight). Thread
 * safe: the codelets of different workers call it concurrently.
 */
#ifndef BSIPIPE_TRANSPORT_H
#define BSIPIPE_TRANSPORT_H

#include <stddef.h>

#include <stddef.h>

struct starpu_task; /* by name only, as in bsipipe_policy.h */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_transport bsipipe_transport_t;

/* n_channels transfers per iteration; timeout_s > 0 seconds a send may wait
 * for its receive. *out: free with _destroy. -EINVAL, -ENOMEM. */
int bsipipe_transport_create(long n_channels, double timeout_s, bsipipe_transport_t **out);
void bsipipe_transport_destroy(bsipipe_transport_t *t); /* NULL is fine */

/* RECV side, from the RECV task's codelet: posts `dst` (bytes) on channel
 * ch. recv_task must hold one end dependency for this channel; it is
 * released when the data has been copied (or at once if the transport has
 * failed). `what` names the op for reports (copied). 0, -EINVAL (bad channel,
 * posted twice). */
int bsipipe_transport_post(bsipipe_transport_t *t, long ch, void *dst, size_t bytes, struct starpu_task *recv_task,
                           int device, const char *what);

/* Blocking receives (the ablation's rendezvous both ways): called by a
 * RECV's codelet after bsipipe_transport_post, waits until the data of
 * channel ch has landed, so the receiving worker is held as a blocking
 * receive would hold its device. 0; -ETIMEDOUT when the watchdog fired
 * (this wait, past the timeout, fires it too); -EINVAL for a bad channel. */
int bsipipe_transport_wait_filled(bsipipe_transport_t *t, long ch);

/* SEND side, from the SEND task's codelet, on device `device`: waits until
 * channel ch is posted, copies `bytes` from src, releases the RECV task.
 * 0; -ETIMEDOUT when the watchdog fired (this or another send), nothing
 * copied; -EINVAL on a size mismatch or bad channel. `what` names the op. */
int bsipipe_transport_send(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                           const char *what);

/* Copies `bytes` from src to dst for a send whose buffers are not plain host
 * memory (CUDA device buffers): returns 0 only once the data has landed in
 * dst, or a negative code. */
typedef int (*bsipipe_transport_copy_fn)(void *dst, const void *src, size_t bytes, void *arg);

/* bsipipe_transport_send with the copy done by copy(dst, src, bytes,
 * copy_arg) instead of memcpy (NULL copy: memcpy). The RECV task is released
 * after copy returns, also when it fails; its error is returned. */
int bsipipe_transport_send_copy(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                                const char *what, bsipipe_transport_copy_fn copy, void *copy_arg);

/* Eager send (bsipipe_engine's sends fused into their producer): the
 * producer's codelet offers `src` on channel ch instead of a SEND task
 * running later. If the RECV has posted, the data is copied at once and the
 * RECV released; otherwise the offer is kept and the RECV's post copies it
 * (on the receiving worker) and releases its own task. Either way the
 * sender never waits: use it only for a plan proven free of deadlock under
 * rendezvous sends (an eager send only removes waits from such a plan).
 * done(done_arg) is called exactly once when the offer is resolved (copied,
 * or given up because the transport failed), from whichever thread resolves
 * it, without the transport's mutex; src must stay valid until then. An
 * offer whose RECV never posts is never resolved: the caller settles it
 * once every task has ended. 0; -ETIMEDOUT when the transport has failed
 * (done already called); -EINVAL on a bad channel or a second send (done
 * not called). */
typedef void (*bsipipe_transport_done_fn)(void *arg);
int bsipipe_transport_offer(bsipipe_transport_t *t, long ch, const void *src, size_t bytes, int device,
                            const char *what, bsipipe_transport_done_fn done, void *done_arg);

/* With staging on, an offer made before its RECV posted copies src into a
 * buffer of the transport's (kept and reused for later offers) and calls
 * done before returning: src is free once bsipipe_transport_offer returns,
 * whatever the receiver does (MPI's eager protocol). Offers that meet a
 * posted receive copy straight into it as before; an offer that finds no
 * memory for its copy fails the transport (as bsipipe_transport_abort, so
 * no receive waits for it) and returns -ENOMEM (done not called). A staged
 * offer's done means its source is free, not that the data has landed.
 * Off by default.
 * 0, or -EINVAL without a transport. */
int bsipipe_transport_set_offer_staging(bsipipe_transport_t *t, int on);
/* Bytes copied into staging buffers since the transport was created. */
double bsipipe_transport_staged_bytes(bsipipe_transport_t *t);

/* Fails the transport by hand, as the watchdog would (same effects: every
 * posted receive is released without data, waiting and later sends return
 * -ETIMEDOUT, later posts are released at once, _failed() is 1), with a
 * report that starts "transport aborted (why): " and names every pending
 * transfer. For what the send-side watchdog cannot see: a submission that
 * stopped half way (RECVs posted whose SENDs will never run), or an engine
 * timer that finds no progress while no send waits (a cycle through RECV
 * completions only). 0 (also when already failed: the first report stays),
 * -EINVAL. */
int bsipipe_transport_abort(bsipipe_transport_t *t, const char *why);

/* Rendezvous as a dependency (how the engine uses this transport): the SEND
 * task is not released to a worker until its RECV has posted, so
 * bsipipe_transport_send never waits; the engine's own watchdog finds a SEND
 * held at the head of its device (it cannot run until the post, the device
 * cannot go past it) and reports it through these calls.
 *
 * note_held: SEND `what` of `device` on channel ch has been held for
 * waited_s seconds, its receive not posted; the report lists it as a waiting
 * send ("device D waited X s in SEND ... (receive not posted)"). Nothing
 * changes if the channel's send already started. 0, -EINVAL. */
int bsipipe_transport_note_held(bsipipe_transport_t *t, long ch, int device, const char *what, double waited_s);
/* 1 when channel ch has been posted (0 for a bad channel). */
int bsipipe_transport_posted(bsipipe_transport_t *t, long ch);
/* The watchdog's verdict from outside a send: fails the transport as a send
 * whose deadline passed would ("transport watchdog fired (timeout T s, first
 * expired: channel ch): ..."), releasing posted RECVs. 0 (also when already
 * failed), -EINVAL. */
int bsipipe_transport_expire(bsipipe_transport_t *t, long ch);
/* The timeout given at creation (seconds). */
double bsipipe_transport_timeout(const bsipipe_transport_t *t);

/* Prepares the channels for the next iteration. 0, or -EBUSY if a transfer is
 * still in flight. */
int bsipipe_transport_reset(bsipipe_transport_t *t);

/* 1 once the watchdog has fired. */
int bsipipe_transport_failed(const bsipipe_transport_t *t);

/* After a failure: a sentence naming every device that waited, the op it
 * waited in and the peer it waited for, e.g. "device 1 waited 2.0 s in SEND
 * act(down mb0 s0 c1) to device 2 (not posted); ...". Owned by t. */
const char *bsipipe_transport_report(const bsipipe_transport_t *t);

/* Sends waiting for their receive right now (for tests and reports). */
long bsipipe_transport_waiting(bsipipe_transport_t *t);

/* Seconds sends have spent inside bsipipe_transport_send waiting for their
 * receive to be posted, summed over all sends so far (a worker held). */
double bsipipe_transport_wait_seconds(bsipipe_transport_t *t);

/* Bytes copied so far (all channels, all iterations). */
double bsipipe_transport_bytes(const bsipipe_transport_t *t);

#ifdef __cplusplus
}
#endif
#endif
