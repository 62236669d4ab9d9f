#!/usr/bin/env bash
# scripts/device-bundle.sh — packs what the device check's engine step needs from this
# machine's autotools build into devbundle/ (git-ignored), to be carried to the GPU machine,
# whose image has no StarPU, OpenBLAS or hwloc:
#
#   devbundle/bin/test_cuda_engine   the real binary (not the libtool wrapper)
#   devbundle/bin/bsipipe-bench      the schedules side by side (the device check's pipeline
#                                    step runs them on CUDA workers)
#   devbundle/bin/bsipipe-train      the admission step (GPU memory checked before allocating)
#   devbundle/lib/                   libbsipipe and every shared library it needs, except
#                                    glibc's own and the CUDA toolkit's (cudart, cuBLAS, NCCL
#                                    come from the GPU machine's toolkit); stripped copies
#
# Then, in a session with the device:
#   run(command="bash scripts/device-check.sh", carry=["devbundle"], timeout_s=480)
# Refuses a bundle over 60 MiB (the carry limit is 64 MiB for everything carried).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B="$ROOT/devbundle"
real="$ROOT/tests/.libs/test_cuda_engine"
[ -x "$real" ] || real="$ROOT/tests/test_cuda_engine"
if [ ! -x "$real" ] || ! head -c 4 "$real" | grep -q ELF; then
    echo "device-bundle: build first: make check TESTS= (tests/test_cuda_engine missing)" >&2
    exit 1
fi
bench="$ROOT/apps/.libs/bsipipe-bench"
[ -x "$bench" ] || bench="$ROOT/apps/bsipipe-bench"
if [ ! -x "$bench" ] || ! head -c 4 "$bench" | grep -q ELF; then
    echo "device-bundle: build first: make (apps/bsipipe-bench missing)" >&2
    exit 1
fi
train="$ROOT/apps/.libs/bsipipe-train"
[ -x "$train" ] || train="$ROOT/apps/bsipipe-train"
rm -rf "$B"
mkdir -p "$B/bin" "$B/lib"
cp "$real" "$B/bin/test_cuda_engine"
cp "$bench" "$B/bin/bsipipe-bench"
cp "$train" "$B/bin/bsipipe-train"
export LD_LIBRARY_PATH="$ROOT/.libs:$ROOT/.deps/starpu/lib:${LD_LIBRARY_PATH:-}"
{ ldd "$real"; ldd "$bench"; ldd "$train"; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
    case $lib in
        */libc.so.*|*/libm.so.*|*/libdl.so.*|*/libpthread.so.*|*/librt.so.*|*/ld-linux*) continue ;;
        */cuda*/*|*/libcuda.so*|*/libcudart*|*/libcublas*|*/libnccl*|*/libnvJitLink*|*/libcusparse*) continue ;;
    esac
    cp -L "$lib" "$B/lib/$(basename "$lib")"
done
strip --strip-unneeded "$B/bin/test_cuda_engine" "$B/bin/bsipipe-bench" "$B/bin/bsipipe-train" "$B"/lib/*.so* 2>/dev/null || true
size=$(du -sm "$B" | cut -f1)
ls -la "$B/lib"
echo "device-bundle: $B, $size MiB"
if [ "$size" -gt 60 ]; then
    echo "device-bundle: over 60 MiB: too large to carry" >&2
    exit 1
fi
