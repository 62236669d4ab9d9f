/* bsipipe_kernels.h: libbsipipe's kernels, for a runtime of your own
 * (opt-in next to <bsipipe.h>, which it includes): the CPU kernels of one
 * model chunk (forward, backward split into input and weight gradients,
 * AdamW; kernels/bsipipe_kernels.h), its tensor-parallel slices
 * (kernels/bsipipe_tp.h) and the sequential reference trainer that every
 * schedule's losses and gradients are checked against
 * (kernels/reference_trainer.h). Plain C, no StarPU. */
#ifndef BSIPIPE_KERNELS_API_H
#define BSIPIPE_KERNELS_API_H

#include "bsipipe.h"
#include "kernels/bsipipe_kernels.h"
#include "kernels/bsipipe_tp.h"
#include "kernels/reference_trainer.h"

#endif
