/* kernels/cuda/devcheck/cblas.h: the few CBLAS declarations the CPU kernels use, for the
 * standalone build of scripts/device-check.sh on a machine without a BLAS (the GPU machine's
 * image has none). Paired with cblas_naive.c; never used by the autotools build. */
#ifndef BSIPIPE_DEVCHECK_CBLAS_H
#define BSIPIPE_DEVCHECK_CBLAS_H
#ifdef __cplusplus
extern "C" {
#endif
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc);
void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int m, int n, int k, double alpha, const double *a, int lda, const double *b,
                 int ldb, double beta, double *c, int ldc);
#ifdef __cplusplus
}
#endif
#endif
