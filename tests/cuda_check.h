/* tests/cuda_check.h: the CUDA tests' fatal checks. CU(call): a CUDA runtime
 * call that must succeed; CHECK(call): a bsipipe call that must return 0.
 * Either failing prints where and why and exits 99 (a hard error, not a
 * failed comparison). Include after cuda_runtime_api.h. */
#ifndef BSIPIPE_TESTS_CUDA_CHECK_H
#define BSIPIPE_TESTS_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                \
            exit(99);                                                                       \
        }                                                                                   \
    } while (0)

#define CHECK(call)                                                                         \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_) {                                                                          \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, rc_);     \
            exit(99);                                                                       \
        }                                                                                   \
    } while (0)

#endif
