/* kernels/cuda/emu/probe_emu.c: bsipipe_cuda_probe.h for the CPU emulation build: one
 * (emulated) device, so the CUDA tests run their GPU path against the emulator. */
#include "kernels/cuda/bsipipe_cuda_probe.h"

#include <errno.h>

int bsipipe_cuda_compiled(void) { return 1; }
int bsipipe_cuda_device_count(void) { return 1; }
int bsipipe_cuda_probe_saxpy(int n) { return n <= 0 ? -EINVAL : -ENODEV; }
