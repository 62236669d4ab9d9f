/* nccl_try.h: NCCL_TRY(call) — on an NCCL error, return -EIO from the
 * enclosing function with NCCL's words in bsipipe_error_detail(). For the
 * files that call NCCL (the nccl transport, the TP groups' collectives). */
#ifndef BSIPIPE_NCCL_TRY_H
#define BSIPIPE_NCCL_TRY_H

#include <errno.h>

#include <nccl.h>

#include "base/bsipipe_error.h"

#define NCCL_TRY(x)                                                                         \
    do {                                                                                    \
        ncclResult_t r_ = (x);                                                              \
        if (r_ != ncclSuccess)                                                              \
            return bsipipe_error_set(-EIO, "NCCL: %s: %s", #x, ncclGetErrorString(r_));     \
    } while (0)

#endif
