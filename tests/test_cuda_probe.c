/* tests/test_cuda_probe.c — the nvcc-built probe runs a kernel on a real GPU.
 * Skips (exit 77) when there is no CUDA GPU, or when libbsipipe was built without CUDA. */
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    int ndev = bsipipe_cuda_device_count();
    printf("libbsipipe built with CUDA: %s; CUDA devices: %d\n",
           bsipipe_cuda_compiled() ? "yes" : "no", ndev);
    if (ndev < 0) {
        fprintf(stderr, "FAIL: negative device count %d\n", ndev);
        return 1;
    }
    if (ndev == 0) {
        /* without a GPU the probe must fail cleanly, not abort */
        int rc = bsipipe_cuda_probe_saxpy(1000);
        if (rc != -ENODEV) {
            fprintf(stderr, "FAIL: probe without GPU returned %d, expected -ENODEV\n", rc);
            return 1;
        }
        printf("SKIP: no CUDA GPU found (test needs one)\n");
        return 77;
    }
    if (bsipipe_cuda_probe_saxpy(0) != -EINVAL) {
        fprintf(stderr, "FAIL: n=0 not rejected\n");
        return 1;
    }
    const int sizes[] = {1, 255, 256, 257, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int rc = bsipipe_cuda_probe_saxpy(sizes[i]);
        printf("saxpy n=%d: %s (%d)\n", sizes[i], rc == 0 ? "ok" : "FAILED", rc);
        if (rc != 0)
            return 1;
    }
    printf("PASS\n");
    return 0;
}
