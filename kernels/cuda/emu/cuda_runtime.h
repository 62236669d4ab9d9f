/* kernels/cuda/emu/cuda_runtime.h: runtime API plus, in C++, the device-side emulation. */
#ifndef BSIPIPE_CUDA_EMU_RUNTIME_H
#define BSIPIPE_CUDA_EMU_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "cuda_emu_device.h"
#endif
#endif
