/* kernels/cuda/bsipipe_cuda_probe_stub.c — CPU stand-in for bsipipe_cuda_probe.cu, compiled
 * only when configure found no CUDA toolkit. */
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <errno.h>

int bsipipe_cuda_compiled(void) { return 0; }

int bsipipe_cuda_device_count(void) { return 0; }

int bsipipe_cuda_probe_saxpy(int n)
{
    return n <= 0 ? -EINVAL : -ENODEV;
}

int bsipipe_cuda_mem_info(int dev, size_t *free_bytes, size_t *total_bytes)
{
    (void)dev;
    *free_bytes = *total_bytes = 0;
    return -ENODEV;
}
