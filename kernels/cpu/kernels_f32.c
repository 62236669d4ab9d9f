/* kernels/cpu/kernels_f32.c: fp32 instance of kernels_tmpl.h (the engine's) and of
 * tp_tmpl.h (tensor-parallel kernels, which use kernels_tmpl.h's helpers). */
#define R float
#define FN(n) n
#define GEMM cblas_sgemm
#define BSIPIPE_REAL_IS_FLOAT 1
#include "kernels/cpu/kernels_tmpl.h"
#include "kernels/cpu/tp_tmpl.h"
