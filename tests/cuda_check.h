/* tests/cuda_check.h: the CUDA tests' fatal checks. CU(call): a CUDA runtime
 * call that must succeed; CHECK(call): a bsipipe call that must return 0.
 * Either failing prints where and why and exits 99 (a hard error, not a
 * failed comparison). Also their allocation and random data helpers.
 * Include after cuda_runtime_api.h. */
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

/* calloc that exits 99 (a hard error) when memory runs out; n = 0 gives one byte. */
static inline void *check_calloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(99);
    }
    return p;
}

/* Uniform in [0, 1) from a 64-bit LCG state (reproducible test data). */
static inline double check_urand(unsigned long long *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * (1.0 / 9007199254740992.0);
}

#endif
