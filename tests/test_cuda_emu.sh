#!/bin/sh
# tests/test_cuda_emu.sh — runs tests/test_cuda_kernels.c against the CUDA kernels compiled
# for the CPU: kernels/cuda/bsipipe_cuda_kernels.cu is built as C++ with the emulated CUDA
# runtime, launches and cuBLAS of kernels/cuda/emu/ (blocks one after another, threads as
# fibers, so __syncthreads / __shfl_xor_sync keep their meaning; device memory starts as NaN).
# This checks the kernels' indexing, tiling, masking and buffer layouts on a machine without
# a GPU (it says nothing about speed, races between blocks or real-GPU rounding).
# Needs only a C and a C++ compiler; skips (77) without g++.
#   BSIPIPE_CUDA_EMU_MODE=fp32|bf16|tf32|bf16s|all   (default: fp32, then bf16s)
# bf16s is the bf16-storage mode (bf16 GEMM operands, fp32 accumulation; tolerance 1e-2,
# NaN never passes); each row prints the normwise relative error and max|gpu - cpu|.
set -eu
top=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-gcc}
CXX=${CXX:-g++}
if ! command -v "$CXX" >/dev/null 2>&1; then
    echo "SKIP: no C++ compiler ($CXX) for the CUDA emulation build"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bsipipe-cuda-emu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
emu="$top/kernels/cuda/emu"
warn="-Wall -Wextra -Werror"
cflags="-O2 $warn -I$emu -I$top/kernels/cuda/devcheck -I$top"
echo "building the CUDA kernels for the CPU emulation in $tmp"
$CXX -std=c++17 $cflags -x c++ -c "$top/kernels/cuda/bsipipe_cuda_kernels.cu" -o "$tmp/cuda_kernels.o" &
$CXX -std=c++17 $cflags -x c++ -c "$top/kernels/cuda/bsipipe_cuda_attention_tc.cu" \
    -o "$tmp/cuda_attention_tc.o" &
$CXX -std=c++17 $cflags -c "$emu/cuda_emu.cc" -o "$tmp/cuda_emu.o" &
# tp_common.c and bsipipe_error.c: the TP kernels compiled into kernels_f*.c need them
for f in kernels/cpu/model_dims.c kernels/cpu/config.c kernels/cpu/kernels_f32.c \
         kernels/cpu/kernels_f64.c kernels/cpu/tp_common.c base/bsipipe_error.c \
         kernels/cuda/devcheck/cblas_naive.c kernels/cuda/emu/probe_emu.c; do
    $CC -std=gnu11 $cflags -c "$top/$f" -o "$tmp/$(basename "$f" .c).o"
done
$CC -std=gnu11 $cflags -DBSIPIPE_HAVE_CUDA=1 -c "$top/tests/test_cuda_kernels.c" -o "$tmp/test.o"
$CC -std=gnu11 $cflags -DBSIPIPE_HAVE_CUDA=1 -c "$top/tests/test_cuda_bench.c" -o "$tmp/bench.main"
$CC -std=gnu11 $cflags -DBSIPIPE_HAVE_CUDA=1 -c "$top/tests/test_cuda_tp.c" -o "$tmp/tp.main"
wait
for o in cuda_kernels cuda_attention_tc cuda_emu; do
    [ -s "$tmp/$o.o" ] || { echo "FAIL: compiling $o for the emulation"; exit 1; }
done
$CXX -o "$tmp/test_cuda_kernels_emu" "$tmp"/*.o -lm -lpthread -ldl
$CXX -o "$tmp/test_cuda_bench_emu" "$tmp/bench.main" $(ls "$tmp"/*.o | grep -v '/test.o$') -lm -lpthread -ldl
$CXX -o "$tmp/test_cuda_tp_emu" "$tmp/tp.main" $(ls "$tmp"/*.o | grep -v '/test.o$') -lm -lpthread -ldl
$CXX -std=c++17 $cflags -o "$tmp/bf16_selftest" "$emu/bf16_selftest.cc" "$tmp/cuda_emu.o" -lm
echo "emulated bf16: conversions and a bf16 GEMM with a NaN operand"
"$tmp/bf16_selftest"
echo "running tests/test_cuda_kernels on the emulated GPU"
for mode in ${BSIPIPE_CUDA_EMU_MODE:-fp32 bf16s}; do
    "$tmp/test_cuda_kernels_emu" --mode "$mode"
done
# A GPU that grants less shared memory per block (99 KB, sm_86 / sm_89): the tensor-core
# attention kernels that need more step aside for the fp32 ones (in the layers, on fp32 copies
# of the bf16 K/V), and every kernel still passes.
echo "bf16s on an emulated GPU with 99 KB of shared memory per block"
BSIPIPE_EMU_SMEM_OPTIN=101376 "$tmp/test_cuda_kernels_emu" --mode bf16s
# Strict wmma (a store writes only its lane's share, no barrier inside wmma calls) with the
# threads resumed in a scrambled order: a missing __syncwarp in the tensor-core attention
# gives stale data here, which the NaN-initialised shared memory turns into failures.
echo "bf16s with strict wmma and scrambled thread order (attention over fp32 and bf16 K/V)"
BSIPIPE_EMU_STRICT_WMMA=1 BSIPIPE_EMU_ORDER=scrambled "$tmp/test_cuda_kernels_emu" --mode bf16s
# The tensor-parallel segments (kernels/cuda/bsipipe_cuda_tp.cuh) against the CPU ones, rank by
# rank, in every product mode they take (bf16s must be refused).
echo "running tests/test_cuda_tp on the emulated GPU (fp32, tf32, bf16)"
"$tmp/test_cuda_tp_emu" --mode all
# The block benchmark's code path (every product mode, attention alone) on a small shape: it
# must run and print its table; the emulation's times mean nothing.
echo "running tests/test_cuda_bench on the emulated GPU (small shape, times meaningless)"
"$tmp/test_cuda_bench_emu" --seq 96 --hidden 48 --heads 2 --reps 1 --rate-n 0
