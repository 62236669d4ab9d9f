/* kernels/cpu/kernels_f64.c: fp64 instance of kernels_tmpl.h and tp_tmpl.h (finite
 * differences and exact-math checks; names end in _f64). */
#define R double
#define FN(n) n##_f64
#define GEMM cblas_dgemm
#define BSIPIPE_REAL_IS_FLOAT 0
#include "kernels/cpu/kernels_tmpl.h"
#include "kernels/cpu/tp_tmpl.h"
