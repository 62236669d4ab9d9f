/* reference_trainer.h: the sequential single-device trainer, the oracle that
 * every pipeline schedule is compared with (DESIGN.md §8).
 *
 * One iteration = m micro-batches of one sequence of S tokens each, every
 * sequence run whole (k = 1) or as k pieces with the given boundaries
 * (forward in order with the KV prefix, backward in reverse); loss = mean
 * cross-entropy over all m*S tokens; gradients of that mean; then one AdamW
 * step (global-norm clipping, decay on matrices only). fp32, deterministic:
 * same seed, data and partition => bitwise the same result (OpenBLAS with a
 * fixed thread count).
 *
 * Ownership: the trainer owns params, grads and optimizer state; the
 * pointers returned by _params/_grads stay valid until _destroy. Token arrays
 * are borrowed for the duration of a call. */
#ifndef BSIPIPE_REFERENCE_TRAINER_H
#define BSIPIPE_REFERENCE_TRAINER_H

#include "kernels/bsipipe_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_ref_trainer bsipipe_ref_trainer_t;

/* Parameters from bsipipe_model_init(dims, seed); grads and moments zero.
 * *out receives a trainer to free with _destroy. -EINVAL, -ENOMEM. */
int bsipipe_ref_trainer_create(const bsipipe_model_dims_t *dims, const bsipipe_adamw_t *opt,
                               unsigned long long seed, bsipipe_ref_trainer_t **out);
void bsipipe_ref_trainer_destroy(bsipipe_ref_trainer_t *t); /* NULL is fine */

long bsipipe_ref_trainer_n_params(const bsipipe_ref_trainer_t *t);
float *bsipipe_ref_trainer_params(bsipipe_ref_trainer_t *t);      /* [n_params] */
const float *bsipipe_ref_trainer_grads(const bsipipe_ref_trainer_t *t);
long bsipipe_ref_trainer_steps(const bsipipe_ref_trainer_t *t);    /* AdamW steps done */

/* Copies params (n_params floats) in and resets grads, moments, step count. */
int bsipipe_ref_trainer_set_params(bsipipe_ref_trainer_t *t, const float *params);

/* Zeroes the gradients, then accumulates those of the iteration:
 * tokens[m][S], targets[m][S] in [0, V); starts[0..k] the piece boundaries of
 * every sequence (NULL with k = 1: whole sequence). *loss = mean CE. */
int bsipipe_ref_trainer_forward_backward(bsipipe_ref_trainer_t *t, int m, const int *tokens,
                                         const int *targets, int k, const int *starts,
                                         double *loss);
/* One AdamW step with the current gradients; *gnorm (may be NULL) gets the
 * global gradient norm before clipping. */
int bsipipe_ref_trainer_step(bsipipe_ref_trainer_t *t, double *gnorm);
/* forward_backward + step. */
int bsipipe_ref_trainer_iteration(bsipipe_ref_trainer_t *t, int m, const int *tokens,
                                  const int *targets, int k, const int *starts, double *loss,
                                  double *gnorm);

#ifdef __cplusplus
}
#endif
#endif
