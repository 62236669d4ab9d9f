/* kernels/cuda/devcheck/cblas_naive.c: plain-loop cblas_sgemm/cblas_dgemm (see cblas.h).
 * Slow but exact enough for the small CPU references of tests/test_cuda_kernels; only the
 * standalone device-check build links it, when no system BLAS is found. */
#include "cblas.h"

#define NAIVE_GEMM(NAME, T)                                                                  \
    void NAME(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,     \
              int m, int n, int k, T alpha, const T *a, int lda, const T *b, int ldb,       \
              T beta, T *c, int ldc)                                                        \
    {                                                                                       \
        if (order == CblasColMajor) { /* C^T = B^T A^T in row-major terms */                \
            NAME(CblasRowMajor, tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);      \
            return;                                                                         \
        }                                                                                   \
        for (int i = 0; i < m; i++)                                                         \
            for (int j = 0; j < n; j++) {                                                   \
                T s = 0;                                                                    \
                for (int p = 0; p < k; p++) {                                               \
                    T x = ta == CblasNoTrans ? a[(long)i * lda + p] : a[(long)p * lda + i]; \
                    T y = tb == CblasNoTrans ? b[(long)p * ldb + j] : b[(long)j * ldb + p]; \
                    s += x * y;                                                             \
                }                                                                           \
                T *cij = &c[(long)i * ldc + j];                                             \
                *cij = beta == 0 ? alpha * s : alpha * s + beta * *cij;                     \
            }                                                                               \
    }

NAIVE_GEMM(cblas_sgemm, float)
NAIVE_GEMM(cblas_dgemm, double)
