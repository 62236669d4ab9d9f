/* apps/train_log.h: bsipipe-train's machine-readable log (--log-json FILE):
 * one JSON object per line, per iteration, with the throughput a Megatron
 * user compares runs by: tokens/s, achieved model TFLOP/s and MFU against a
 * stated per-device peak. */
#ifndef BSIPIPE_APPS_TRAIN_LOG_H
#define BSIPIPE_APPS_TRAIN_LOG_H

#include "kernels/bsipipe_model.h"

typedef struct train_log train_log_t;

/* Model FLOPs of one training iteration: m sequences of S tokens, forward
 * and backward (3x the forward's matrix products: every layer over the
 * causal sequence, and the LM head). */
double train_log_iteration_flops(const bsipipe_model_dims_t *d, int m);

/* Opens path for appending (a resumed run continues the file; nothing
 * already written is lost). peak_tflops: one device's peak (0: no MFU),
 * devices: how many share the work (w x tp). 0, or -errno with a message
 * on stderr naming the file. */
int train_log_open(const char *path, double peak_tflops, int devices, train_log_t **out);
/* One line: {"iteration", "iterations", "loss", "grad_norm", "lr",
 * "tokens_per_s", "iteration_s", "tflops", "mfu" (null without a peak),
 * "bubble", "validation_loss" (null when none)}; flushed. */
void train_log_iteration(train_log_t *l, int it, int iters, double loss, double gnorm, double lr, double tokens_s,
                         double wall_s, double flops, double bubble, double val_loss);
void train_log_close(train_log_t *l);

#endif
