/* apps/train_memory.h: bsipipe-train's memory admission (--memory-limit). */
#ifndef BSIPIPE_APPS_TRAIN_MEMORY_H
#define BSIPIPE_APPS_TRAIN_MEMORY_H

#include "tasks/bsipipe_engine.h"

/* The planner's peak per-device memory (parameters, gradients and AdamW
 * moments, plus the most activations held at once) for the devices of this
 * process, plus what grows with the model besides the plan (each device's
 * scratch: a piece's logits; on the host a whole-model copy and the
 * runtime; on a GPU the CUDA libraries' reserve), against the budget: limit
 * bytes (0: the machine's available memory, or each GPU's free memory).
 * Prints a "memory:" line (rank 0). plan: a --plan's schedule, or NULL for
 * pc's preset; nranks: MPI ranks sharing the devices; act_scale: 0.5 for a
 * bf16 stash; tp_spread: TP ranks on separate GPUs. 0 when it fits or cannot
 * be estimated (the engine then reports any configuration error itself), 1
 * (message printed) when it does not fit. */
int train_memory_admit(const bsipipe_model_dims_t *dims, const bsipipe_parallel_config_t *pc,
                       const bsipipe_schedule_t *plan, int nranks, double limit, bsipipe_engine_devices_t devices,
                       int gpus_asked, double act_scale, int tp_spread);

#endif
