/* kernels/cuda/devcheck/cblas_naive.c: plain-loop cblas_sgemm/cblas_dgemm (see cblas.h).
 * Only the standalone device-check build and the CUDA emulation test link it (no system BLAS
 * needed). op(A) and op(B)^T are packed row-major, every C element is a dot product with four
 * partial sums; rows of C are spread over OpenMP threads when built with -fopenmp. Fast enough
 * for the CPU references of tests/test_cuda_kernels (also its --large case). */
#include <stdlib.h>

#include "cblas.h"

#define NAIVE_GEMM(NAME, T)                                                                  \
    void NAME(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,     \
              int m, int n, int k, T alpha, const T *a, int lda, const T *b, int ldb,       \
              T beta, T *c, int ldc)                                                        \
    {                                                                                       \
        T *ap, *bp;                                                                         \
        if (order == CblasColMajor) { /* C^T = B^T A^T in row-major terms */                \
            NAME(CblasRowMajor, tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);      \
            return;                                                                         \
        }                                                                                   \
        if (m <= 0 || n <= 0)                                                               \
            return;                                                                         \
        ap = malloc(sizeof(T) * (size_t)m * (size_t)(k > 0 ? k : 1));                       \
        bp = malloc(sizeof(T) * (size_t)n * (size_t)(k > 0 ? k : 1));                       \
        if (!ap || !bp)                                                                     \
            abort();                                                                        \
        for (long i = 0; i < m; i++) /* ap[i][p] = op(A)(i, p) */                           \
            for (long p = 0; p < k; p++)                                                    \
                ap[i * k + p] = ta == CblasNoTrans ? a[i * lda + p] : a[p * lda + i];       \
        for (long j = 0; j < n; j++) /* bp[j][p] = op(B)(p, j) */                           \
            for (long p = 0; p < k; p++)                                                    \
                bp[j * k + p] = tb == CblasNoTrans ? b[p * ldb + j] : b[j * ldb + p];       \
        NAIVE_PARALLEL_FOR                                                                  \
        for (long i = 0; i < m; i++)                                                        \
            for (long j = 0; j < n; j++) {                                                  \
                const T *x = ap + i * k, *y = bp + j * k;                                   \
                T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                           \
                long p = 0;                                                                 \
                for (; p + 4 <= k; p += 4) {                                                \
                    s0 += x[p] * y[p];                                                      \
                    s1 += x[p + 1] * y[p + 1];                                              \
                    s2 += x[p + 2] * y[p + 2];                                              \
                    s3 += x[p + 3] * y[p + 3];                                              \
                }                                                                           \
                for (; p < k; p++)                                                          \
                    s0 += x[p] * y[p];                                                      \
                T s = (s0 + s1) + (s2 + s3), *cij = &c[i * ldc + j];                        \
                *cij = beta == 0 ? alpha * s : alpha * s + beta * *cij;                     \
            }                                                                               \
        free(ap);                                                                           \
        free(bp);                                                                           \
    }

#ifdef _OPENMP
#define NAIVE_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#else
#define NAIVE_PARALLEL_FOR
#endif

NAIVE_GEMM(cblas_sgemm, float)
NAIVE_GEMM(cblas_dgemm, double)
