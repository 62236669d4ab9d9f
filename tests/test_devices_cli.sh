#!/bin/sh
# test_devices_cli: bsipipe-train's (and bsipipe-bench's) device flags. Without a GPU, --devices
# cuda stops with the clear error "no CUDA device found; run with --devices
# cpu" (exit 1, never a crash); bad values are refused (exit 2); the nccl
# transport and a precision other than fp32 need CUDA devices. With a GPU the no-GPU error cannot be seen:
# exit 77 (tests/test_cuda_engine runs the engine on it instead).
set -u
prog="${top_builddir:-.}/apps/bsipipe-train"
export STARPU_SILENT=1
. "${srcdir:-.}/tests/cli_util.sh"
tiny="--layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 1"
expect 2 "unknown device kind 'gpu'" $tiny --devices gpu
expect 2 "--transport expects 'local' or 'nccl'" $tiny --transport tcp
expect 2 "--gpus expects an integer" $tiny --gpus two
expect 1 "the nccl transport needs CUDA devices" $tiny --transport nccl
expect 2 "unknown precision 'fp16' (fp32, tf32, bf16 or bf16s)" $tiny --precision fp16
expect 1 "precision bf16 needs CUDA devices (--devices cuda); the CPU kernels compute in fp32" \
    $tiny --precision bf16
expect 0 "summary: 1 iterations" $tiny --precision fp32
expect 0 "summary: 1 iterations" $tiny --devices cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    finish test_devices_cli || exit 1
    echo "SKIP: a CUDA GPU is present, so the no-GPU error of --devices cuda cannot be checked here"
    exit 77
fi
expect 1 "no CUDA device found; run with --devices cpu" $tiny --devices cuda
expect 1 "no CUDA device found; run with --devices cpu" $tiny --devices cuda --transport nccl --gpus 2
prog="${top_builddir:-.}/apps/bsipipe-bench" # the bench refuses before running anything
expect 1 "no CUDA device found; run with --devices cpu" --devices cuda --schedules 1f1b --reps 1
expect 2 "unknown precision 'half'" --precision half --schedules 1f1b --reps 1
finish test_devices_cli
