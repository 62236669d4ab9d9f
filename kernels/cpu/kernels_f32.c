/* kernels/cpu/kernels_f32.c: fp32 instance of kernels_tmpl.h (the engine's). */
#define R float
#define FN(n) n
#define GEMM cblas_sgemm
#define BSIPIPE_REAL_IS_FLOAT 1
#include "kernels/cpu/kernels_tmpl.h"
