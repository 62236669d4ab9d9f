/* kernels/cuda/bsipipe_cuda_probe.h — minimal CUDA probe.
 *
 * Exists so that the nvcc build path (.cu -> libbsipipe) is exercised from day one, and so
 * that tests can ask "is there a usable GPU?". Both functions always link: without CUDA a CPU
 * stub (bsipipe_cuda_probe_stub.c) reports 0 devices and -ENODEV.
 * No pointers cross this interface; nothing to free. */
#ifndef BSIPIPE_KERNELS_CUDA_PROBE_H
#define BSIPIPE_KERNELS_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices. 0 when CUDA is not compiled in, when there is no driver or
 * no GPU; never aborts. */
int bsipipe_cuda_device_count(void);

/* Runs y = a*x + y for n floats on the current GPU and checks the result on the host.
 * Returns 0 on success, or a negative errno-style code:
 *   -ENODEV  no CUDA (not compiled in, no driver, no GPU)
 *   -EINVAL  n <= 0
 *   -ENOMEM  host or device allocation failed
 *   -EIO     a CUDA call or the kernel launch failed
 *   -EDOM    the GPU computed a wrong result */
int bsipipe_cuda_probe_saxpy(int n);

/* Free and total memory of CUDA device `dev` (cudaMemGetInfo; creates the
 * device's primary context). 0, or -ENODEV (no such device, no CUDA) or
 * -EIO (a CUDA call failed). */
int bsipipe_cuda_mem_info(int dev, size_t *free_bytes, size_t *total_bytes);

/* 1 when libbsipipe was built with CUDA (nvcc), else 0. */
int bsipipe_cuda_compiled(void);

#ifdef __cplusplus
}
#endif

#endif /* BSIPIPE_KERNELS_CUDA_PROBE_H */
