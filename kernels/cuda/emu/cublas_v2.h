/* kernels/cuda/emu/cublas_v2.h: the cuBLAS calls bsipipe uses, on the CPU (see
 * cuda_runtime_api.h). Column-major like cuBLAS; the FAST_16BF compute type rounds the
 * inputs to bf16 and the FAST_TF32 one to tf32 (10-bit mantissa), accumulating in float;
 * cublasGemmEx also takes CUDA_R_16BF A and B (bf16 storage) with fp32 C and
 * CUBLAS_COMPUTE_32F, accumulating in float. */
#ifndef BSIPIPE_CUDA_EMU_CUBLAS_V2_H
#define BSIPIPE_CUDA_EMU_CUBLAS_V2_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
extern "C" {
#endif
typedef struct bsipipe_emu_cublas *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1,
               CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75,
               CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *a, cudaDataType at,
                            int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                            void *c, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo);
#ifdef __cplusplus
}
#endif
#endif
