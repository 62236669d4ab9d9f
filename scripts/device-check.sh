#!/usr/bin/env bash
# scripts/device-check.sh — the GPU check of issue 7, in one command (docs/cuda.md).
#
#   ./scripts/device-check.sh [--out DIR] [--build auto|carried|standalone] [--quick]
#
# 1. build   auto (default): use the carried autotools build (tests/test_cuda_kernels of this
#            tree, linked against libbsipipe) when it exists and all its shared libraries
#            resolve; otherwise build a standalone copy with nvcc + gcc only (CPU kernels with
#            a plain-loop CBLAS, the CUDA kernels for sm_90 + compute_80 PTX, the three test
#            programs; no StarPU, BLAS, hwloc or MPI needed), into $BUILD (default
#            /tmp/bsipipe-devcheck).
# 2. CPU side: the CPU reference computations of every kernel case (test_cuda_kernels
#            --cpu-only --large); runs anywhere.
# 3. GPU     test_cuda_probe (a saxpy kernel); test_cuda_kernels --mode all --large (every
#            CUDA kernel vs the CPU kernel, fp32 < 1e-5, tf32, bf16 and bf16s < 1e-2, NaN
#            fails, small shapes and the bench's layer shapes; bf16s = bf16 storage of the
#            GEMM operands, fp32 accumulation); test_cuda_bench --full (one block
#            forward+backward, hidden 1280 / 32 heads / 8K tokens in k = 2, TFLOP/s and the
#            fraction of the measured cublasGemmEx bf16 rate, per mode: fp32, tf32, bf16,
#            bf16s); test_cuda_tp --mode all (every tensor-parallel segment on CUDA vs its
#            CPU twin, rank by rank: GPT and LLaMA, D_t = 2 and 4, fused and split backward;
#            fp32 < 1e-5, tf32 and bf16 < 1e-2). Skipped with a message when no
#            GPU is found.
#            engine: test_cuda_engine — one BSIPipe iteration (and ZB-H1, LLaMA; then BSIPipe,
#            Seq1F1B-I and ZB-H1 with tensor parallelism D_t = 2, and BSIPipe with per-rank
#            collectives meeting on the GPU) on CUDA
#            workers (w = 4 on the GPUs found, several workers per GPU) against the CPU
#            engine: loss, every gradient, gnorm, fp32 relative 1e-5, NaN fails. It needs the
#            autotools build (StarPU): carry devbundle/ (scripts/device-bundle.sh), or a
#            carried tree whose libraries resolve; else skipped with a message. Then the same
#            with --precision bf16s (bf16 products, tensor-core attention; relative 1e-2). With
#            two or more GPUs also --transport nccl (its TP cases: each group over 2 GPUs, NCCL).
#            pipeline: bsipipe-bench on 4 CUDA workers (BSIPipe, Seq1F1B-I, 1F1B; GPT 8 layers,
#            hidden 1280, 4K tokens), fp32 then bf16s: tokens/s, bubble, peak activation
#            memory (needs the bundle; skipped once 300 s are used).
#            compute-sanitizer (when the image has it): memcheck over the kernel cases in bf16s,
#            racecheck and synccheck over the attention cases; a tool that cannot attach or
#            times out is reported as skipped.
# 4. summary table, printed last.
#
# Exit: 0 all ran and passed; 1 a check failed; 2 no GPU (dry run: build + CPU side only).
#
# Engine step in a device session: first, here, `scripts/device-bundle.sh`, then
#   run(command="bash scripts/device-check.sh", carry=["devbundle"], timeout_s=480)
# Budget: well under 8 minutes on one H200 (standalone build ~1-2 min, tests < 1 min, bench
# < 1 min). Files: $OUT/{kernels.tsv,bench.tsv,devcheck.log} (OUT defaults to $BUILD/out,
# or the device tool's $OUT when set).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-/tmp/bsipipe-devcheck}
OUTDIR=${OUT:-$BUILD/out}
MODE=auto
QUICK=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUTDIR=$2; shift 2 ;;
        --build) MODE=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "device-check: unknown argument $1" >&2; exit 64 ;;
    esac
done
mkdir -p "$BUILD" "$OUTDIR"
LOG="$OUTDIR/devcheck.log"
: > "$LOG"
T0=$SECONDS
say() { printf '[device-check %3ds] %s\n' "$((SECONDS - T0))" "$*" | tee -a "$LOG"; }
declare -A STATUS

# ---------------------------------------------------------------------------- environment
NVCC=$(command -v nvcc || true)
for c in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13.0; do
    [ -z "$NVCC" ] && [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && NVCC="$c/bin/nvcc"
done
CUDA_HOME=${CUDA_HOME:-$( [ -n "$NVCC" ] && cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd )}
say "tree: $ROOT; build dir: $BUILD; out: $OUTDIR"
say "nvcc: ${NVCC:-none} $( [ -n "$NVCC" ] && "$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/(CUDA \1)/p')"
GPU_NAME=
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n1)
    say "GPU: $GPU_NAME"
else
    say "GPU: none found by nvidia-smi"
fi

# ---------------------------------------------------------------------------- 1. build
carried_ok() {
    local t="$ROOT/tests/test_cuda_kernels" b="$ROOT/tests/test_cuda_bench"
    [ -x "$t" ] && [ -x "$b" ] || return 1
    # libtool wrappers: the real binaries are in tests/.libs
    local real=$t; [ -x "$ROOT/tests/.libs/test_cuda_kernels" ] && real="$ROOT/tests/.libs/test_cuda_kernels"
    file "$real" 2>/dev/null | grep -q ELF || head -c 4 "$real" | grep -q ELF || return 1
    LD_LIBRARY_PATH="$ROOT/.libs:$ROOT/.deps/starpu/lib:${LD_LIBRARY_PATH:-}" ldd "$real" 2>&1 \
        | grep -q 'not found' && return 1
    grep -q 'BSIPIPE_HAVE_CUDA' "$ROOT/config.status" 2>/dev/null || return 1
    return 0
}

standalone_build() {
    [ -n "$NVCC" ] || { say "standalone build: no nvcc"; return 1; }
    local b="$BUILD/standalone" cc=${CC:-gcc} arch=${NVCC_ARCH_FLAGS:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80"}
    mkdir -p "$b"
    local inc="-I$ROOT -I$ROOT/kernels/cuda/devcheck"
    local cflags="-O2 -std=gnu11 -fPIC -DBSIPIPE_HAVE_CUDA=1 $inc -isystem $CUDA_HOME/include"
    # the plain-loop CBLAS spreads its rows over OpenMP threads when the compiler has it
    local omp=
    if echo 'int main(void){return 0;}' | $cc -fopenmp -x c - -o "$b/omp-probe" >/dev/null 2>&1; then
        omp=-fopenmp
    fi
    say "standalone build in $b ($cc, $NVCC $arch)"
    (
        set -e
        cd "$b"
        for f in kernels/cpu/model_dims.c kernels/cpu/config.c kernels/cpu/kernels_f32.c \
                 kernels/cpu/kernels_f64.c kernels/cpu/tp_common.c base/bsipipe_error.c \
                 kernels/cuda/devcheck/cblas_naive.c; do
            $cc $cflags $omp -c "$ROOT/$f" -o "$(basename "$f" .c).o" &
        done
        $cc $cflags -c "$ROOT/tests/test_cuda_kernels.c" -o test_cuda_kernels.o &
        $cc $cflags -c "$ROOT/tests/test_cuda_bench.c" -o test_cuda_bench.o &
        $cc $cflags -c "$ROOT/tests/test_cuda_probe.c" -o test_cuda_probe.o &
        $cc $cflags -c "$ROOT/tests/test_cuda_tp.c" -o test_cuda_tp.o &
        # shellcheck disable=SC2086
        "$NVCC" $arch -O2 -Xcompiler -fPIC $inc -c "$ROOT/kernels/cuda/bsipipe_cuda_probe.cu" -o probe.o &
        # shellcheck disable=SC2086
        "$NVCC" $arch -O2 -Xcompiler -fPIC $inc -c "$ROOT/kernels/cuda/bsipipe_cuda_attention_tc.cu" \
            -o cuda_attention_tc.o &
        # shellcheck disable=SC2086
        "$NVCC" $arch -O2 -Xcompiler -fPIC $inc -c "$ROOT/kernels/cuda/bsipipe_cuda_kernels.cu" -o cuda_kernels.o
        wait
        # nvcc links (static cudart, its own library path); cuBLAS from the toolkit, or from
        # the pip wheel nvidia-cublas if that is all there is
        libs=""
        for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" \
                 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
            [ -d "$d" ] || continue
            libs="$libs -L$d -Xlinker -rpath=$d"
            if [ ! -e "$d/libcublas.so" ] && ls "$d"/libcublas.so.* >/dev/null 2>&1; then
                libs="$libs $(ls "$d"/libcublas.so.[0-9]* | head -n1)"
            fi
        done
        case $libs in *libcublas.so.*) cublas= ;; *) cublas=-lcublas ;; esac
        objs="model_dims.o config.o kernels_f32.o kernels_f64.o tp_common.o bsipipe_error.o
              cblas_naive.o probe.o cuda_kernels.o cuda_attention_tc.o"
        for t in test_cuda_kernels test_cuda_bench test_cuda_probe test_cuda_tp; do
            # shellcheck disable=SC2086
            "$NVCC" -o $t $t.o $objs $libs $cublas ${omp:+-Xcompiler $omp} -lm -lpthread -ldl
        done
    ) >>"$LOG" 2>&1 || { say "standalone build FAILED (see $LOG)"; tail -n 30 "$LOG"; return 1; }
    TK="$b/test_cuda_kernels"; TB="$b/test_cuda_bench"; TP="$b/test_cuda_probe"; TT="$b/test_cuda_tp"
    return 0
}

TK=; TB=; TP=; TT=; BUILT=
case $MODE in
    carried|auto)
        if carried_ok; then
            TK="$ROOT/tests/test_cuda_kernels"; TB="$ROOT/tests/test_cuda_bench"; BUILT=carried
            # libtool wrappers hold absolute paths of the machine that built them: run the
            # real binaries with our own library path
            [ -x "$ROOT/tests/.libs/test_cuda_kernels" ] && TK="$ROOT/tests/.libs/test_cuda_kernels"
            [ -x "$ROOT/tests/.libs/test_cuda_bench" ] && TB="$ROOT/tests/.libs/test_cuda_bench"
            TP="$ROOT/tests/test_cuda_probe"
            [ -x "$ROOT/tests/.libs/test_cuda_probe" ] && TP="$ROOT/tests/.libs/test_cuda_probe"
            TT="$ROOT/tests/test_cuda_tp"
            [ -x "$ROOT/tests/.libs/test_cuda_tp" ] && TT="$ROOT/tests/.libs/test_cuda_tp"
            export LD_LIBRARY_PATH="$ROOT/.libs:$ROOT/.deps/starpu/lib:${LD_LIBRARY_PATH:-}"
            say "build: using the carried autotools build (libbsipipe + tests/test_cuda_*)"
        elif [ "$MODE" = carried ]; then
            say "build: carried build not usable (missing, or shared libraries unresolved)"; exit 1
        fi ;;
esac
if [ -z "$BUILT" ]; then
    [ "$MODE" = auto ] && say "build: carried build not usable here; building standalone"
    if standalone_build; then BUILT=standalone; else STATUS[build]=FAIL; fi
fi
[ -n "$BUILT" ] && STATUS[build]="ok ($BUILT, $((SECONDS - T0)) s)"
if [ -z "$BUILT" ]; then
    say "nothing to run"; exit 1
fi

# The engine test needs StarPU: the carried bundle (scripts/device-bundle.sh) or the carried
# autotools build, when every shared library it needs resolves here.
TE=
engine_libs_ok() { # binary, library path
    local miss
    miss=$(LD_LIBRARY_PATH="$2" ldd "$1" 2>&1 | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [ -z "$miss" ] && return 0
    say "engine: $1 lacks shared libraries here: $miss"
    return 1
}
CUDA_LIBDIRS="$CUDA_HOME/lib64:$CUDA_HOME/lib:$CUDA_HOME/targets/x86_64-linux/lib"
if [ -x "$ROOT/devbundle/bin/test_cuda_engine" ] &&
   engine_libs_ok "$ROOT/devbundle/bin/test_cuda_engine" "$ROOT/devbundle/lib:$CUDA_LIBDIRS:${LD_LIBRARY_PATH:-}"; then
    TE="$ROOT/devbundle/bin/test_cuda_engine"; TE_LD="$ROOT/devbundle/lib:$CUDA_LIBDIRS:${LD_LIBRARY_PATH:-}"
    say "engine: using the carried bundle devbundle/"
elif [ -x "$ROOT/tests/.libs/test_cuda_engine" ] &&
     engine_libs_ok "$ROOT/tests/.libs/test_cuda_engine" "$ROOT/.libs:$ROOT/.deps/starpu/lib:$CUDA_LIBDIRS:${LD_LIBRARY_PATH:-}"; then
    TE="$ROOT/tests/.libs/test_cuda_engine"; TE_LD="$ROOT/.libs:$ROOT/.deps/starpu/lib:$CUDA_LIBDIRS:${LD_LIBRARY_PATH:-}"
    say "engine: using the carried autotools build"
else
    say "engine: no runnable test_cuda_engine (needs StarPU): run scripts/device-bundle.sh and carry devbundle"
fi
te() { env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$TE" "$@"; }
# the schedules' bench, from the same place as the engine test
PB=
if [ -n "$TE" ]; then
    case $TE in
        */devbundle/*) PB="$ROOT/devbundle/bin/bsipipe-bench" ;;
        *) PB="$ROOT/apps/.libs/bsipipe-bench" ;;
    esac
    [ -x "$PB" ] || PB=
fi

# ---------------------------------------------------------------------------- 2. CPU side
say "CPU side: reference computations of every kernel case"
if "$TK" --cpu-only --large >>"$LOG" 2>&1; then
    STATUS[cpu]="ok ($(tail -n 1 "$LOG" | sed -n 's/.*: \([0-9]*\) CPU reference.*/\1 tensors/p'))"
else
    STATUS[cpu]=FAIL
fi
say "CPU side: ${STATUS[cpu]}"
if [ -n "$TE" ]; then
    say "CPU side: engine cases on CPU workers (test_cuda_engine --cpu-only)"
    if te --cpu-only >>"$LOG" 2>&1; then STATUS[engine_cpu]=ok; else STATUS[engine_cpu]=FAIL; fi
else
    STATUS[engine_cpu]="skipped (no runnable test_cuda_engine)"
fi
say "CPU side, engine: ${STATUS[engine_cpu]}"

# ---------------------------------------------------------------------------- 3. GPU
have_gpu=1
run_gpu() { # name, timeout, cmd...
    local name=$1 to=$2; shift 2
    say "GPU: $name: $*"
    timeout "$to" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    case $rc in
        0) STATUS[$name]=ok ;;
        77) STATUS[$name]="skipped (no CUDA GPU found)"; have_gpu=0 ;;
        124) STATUS[$name]="TIMEOUT after $to s" ;;
        *) STATUS[$name]="FAIL (exit $rc)" ;;
    esac
}
rm -f "$OUTDIR/kernels.tsv" "$OUTDIR/bench.tsv" "$OUTDIR/engine.tsv" "$OUTDIR/engine_bf16.tsv" \
    "$OUTDIR/engine_nccl.tsv"
run_gpu probe 60 "$TP"
if [ $have_gpu = 1 ]; then
    run_gpu kernels 400 "$TK" --mode all --large --table "$OUTDIR/kernels.tsv"
else
    STATUS[kernels]="skipped (no CUDA GPU found)"
fi
if [ $have_gpu = 1 ] && [ -x "$TT" ]; then
    run_gpu tp_segments 200 "$TT" --mode all
elif [ $have_gpu = 1 ]; then
    STATUS[tp_segments]="skipped (no test_cuda_tp in this build)"
else
    STATUS[tp_segments]="skipped (no CUDA GPU found)"
fi
if [ $have_gpu = 1 ]; then
    if [ $QUICK = 1 ]; then
        run_gpu bench 240 "$TB" --table "$OUTDIR/bench.tsv"
    else
        run_gpu bench 240 "$TB" --full --table "$OUTDIR/bench.tsv"
    fi
else
    STATUS[bench]="skipped (no CUDA GPU found)"
fi

if [ $have_gpu = 1 ] && [ -n "$TE" ]; then
    run_gpu engine 240 env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$TE" --w 4 --table "$OUTDIR/engine.tsv"
    run_gpu engine_bf16 240 env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$TE" --w 4 --precision bf16s \
        --table "$OUTDIR/engine_bf16.tsv"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "${ngpu:-0}" -ge 2 ]; then
        run_gpu engine_nccl 240 env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$TE" --w 4 --transport nccl \
            --table "$OUTDIR/engine_nccl.tsv"
    else
        STATUS[engine_nccl]="skipped (NCCL pairs need two GPUs; ${ngpu:-0} found)"
    fi
elif [ $have_gpu = 1 ]; then
    STATUS[engine]="skipped (no runnable test_cuda_engine: carry devbundle/)"
    STATUS[engine_bf16]="skipped (no runnable test_cuda_engine)"
    STATUS[engine_nccl]="skipped (no runnable test_cuda_engine)"
else
    STATUS[engine]="skipped (no CUDA GPU found)"
    STATUS[engine_bf16]="skipped (no CUDA GPU found)"
    STATUS[engine_nccl]="skipped (no CUDA GPU found)"
fi

# The pipeline on CUDA workers: BSIPipe, Seq1F1B-I and 1F1B side by side on 4 CUDA workers of
# the GPU (GPT, 8 layers, hidden 1280, 32 heads, 4K tokens, 8 micro-batches), fp32 then
# bf16s products: tokens/s, measured against planned bubble, peak activation memory (the
# bf16 stash halves it). Timings only; a failure to run fails the step.
pipeline() { # name, precision
    local name=$1 prec=$2
    say "GPU: $name: bsipipe-bench --devices cuda --precision $prec"
    timeout 150 env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$PB" --devices cuda --precision "$prec" \
        --schedules bsipipe,seq1f1b-i,1f1b --w 4 --m 8 --layers 8 --hidden 1280 --heads 32 --seq 4096 \
        --reps 2 --warmup 1 >"$OUTDIR/$name.md" 2>&1
    local rc=$?
    tail -n 6 "$OUTDIR/$name.md" | tee -a "$LOG"
    case $rc in
        0) STATUS[$name]=ok ;;
        124) STATUS[$name]="TIMEOUT after 150 s" ;;
        *) STATUS[$name]="FAIL (exit $rc; $name.md)" ;;
    esac
}
for k in pipeline_fp32 pipeline_bf16s; do STATUS[$k]="skipped (no CUDA GPU found)"; done
if [ $have_gpu = 1 ] && [ -n "$PB" ] && [ $((SECONDS - T0)) -le 300 ]; then
    pipeline pipeline_fp32 fp32
    pipeline pipeline_bf16s bf16s
elif [ $have_gpu = 1 ] && [ -n "$PB" ]; then
    for k in pipeline_fp32 pipeline_bf16s; do STATUS[$k]="skipped (time: $((SECONDS - T0)) s used)"; done
elif [ $have_gpu = 1 ]; then
    for k in pipeline_fp32 pipeline_bf16s; do STATUS[$k]="skipped (no runnable bsipipe-bench: carry devbundle/)"; done
fi

# GPU memory admission: a model far beyond one GPU's memory (GPT, hidden 16384, 64 layers on
# one GPU) must be refused before anything is allocated, naming the GPU and its free memory.
STATUS[admission]="skipped (no CUDA GPU found)"
PT=
[ -n "$PB" ] && PT="$(dirname "$PB")/bsipipe-train"
if [ $have_gpu = 1 ] && [ -x "$PT" ]; then
    say "GPU: memory admission: bsipipe-train --devices cuda, a model of ~3.2 TB"
    timeout 60 env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 "$PT" --devices cuda --gpus 1 --w 2 --m 2 \
        --layers 64 --hidden 16384 --heads 128 --seq 1024 --iters 1 >"$OUTDIR/admission.txt" 2>&1
    rc=$?
    tail -n 2 "$OUTDIR/admission.txt" | tee -a "$LOG"
    if [ $rc = 1 ] && grep -q "not enough GPU memory: GPU 0" "$OUTDIR/admission.txt"; then
        STATUS[admission]="ok ($(grep -o 'need about [0-9.]* GiB' "$OUTDIR/admission.txt" | head -1); $(grep -o '[0-9.]* GiB are free' "$OUTDIR/admission.txt" | head -1))"
    else
        STATUS[admission]="FAIL (exit $rc; admission.txt)"
    fi
elif [ $have_gpu = 1 ]; then
    STATUS[admission]="skipped (no runnable bsipipe-train: carry devbundle/)"
fi

# The estimate against the GPU's measured peak: a mid-sized model trained one iteration on one
# GPU, nvidia-smi's used memory of the process sampled every 0.1 s, against the "memory: about
# X GiB on GPU 0" line (plan, scratch, the CUDA libraries' reserve).
STATUS[gpu-peak]="skipped (no CUDA GPU found)"
if [ $have_gpu = 1 ] && [ -x "$PT" ] && command -v nvidia-smi >/dev/null; then
    say "GPU: measured peak against the admission estimate (hidden 2048, 16 layers, vocabulary 32768)"
    env "LD_LIBRARY_PATH=$TE_LD" STARPU_SILENT=1 timeout 120 "$PT" --devices cuda --gpus 1 --w 4 --m 8 \
        --layers 16 --hidden 2048 --heads 16 --seq 1024 --vocab 32768 --iters 2 --eval-every 0 \
        >"$OUTDIR/gpu-peak.txt" 2>&1 &
    tpid=$!
    peak=0
    while kill -0 $tpid 2>/dev/null; do
        u=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
            awk -F', *' -v p=$tpid '$1 == p {print $2}')
        [ -n "$u" ] && [ "$u" -gt "$peak" ] && peak=$u
        sleep 0.1
    done
    wait $tpid; rc=$?
    est=$(grep -o 'memory: about [0-9.]* GiB on GPU 0' "$OUTDIR/gpu-peak.txt" | grep -o '[0-9.]* GiB' | cut -d' ' -f1)
    pk=$(awk -v m=$peak 'BEGIN {printf "%.2f", m / 1024}')
    echo "estimate ${est:-?} GiB, measured peak $pk GiB (exit $rc)" | tee -a "$LOG"
    if [ $rc = 0 ] && [ -n "$est" ] && awk -v a="$pk" -v b="$est" 'BEGIN {exit !(a <= b)}'; then
        STATUS[gpu-peak]="ok (peak $pk GiB <= estimate $est GiB)"
    else
        STATUS[gpu-peak]="FAIL (exit $rc; peak $pk GiB, estimate ${est:-none} GiB; gpu-peak.txt)"
    fi
fi

# compute-sanitizer, where the image has it and its runtime lets it attach: memcheck over
# every kernel case (bf16s: the tensor-core attention too), racecheck and synccheck over the
# attention cases. A time-out or a tool that cannot attach is reported, not failed.
sanitize() { # name, tool, timeout, test flags...
    local name=$1 tool=$2 to=$3; shift 3
    say "GPU: $name: compute-sanitizer --tool $tool $TK $*"
    timeout "$to" "$CS" --tool "$tool" "$TK" "$@" >"$OUTDIR/$name.log" 2>&1
    local rc=$? summary
    summary=$(grep -E "ERROR SUMMARY: [0-9]+ error" "$OUTDIR/$name.log" | tail -n 1)
    tail -n 3 "$OUTDIR/$name.log" | tee -a "$LOG"
    if [ $rc = 124 ]; then STATUS[$name]="skipped (timeout after $to s)"
    elif [ -z "$summary" ]; then STATUS[$name]="skipped (compute-sanitizer did not run: $(tail -n 1 "$OUTDIR/$name.log"))"
    elif echo "$summary" | grep -q "ERROR SUMMARY: 0 errors" && [ $rc = 0 ]; then STATUS[$name]="ok ($summary)"
    else STATUS[$name]="FAIL ($summary; exit $rc; $name.log)"
    fi
}
CS=$(command -v compute-sanitizer || true)
[ -z "$CS" ] && [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && CS="$CUDA_HOME/bin/compute-sanitizer"
for k in memcheck racecheck synccheck; do STATUS[$k]="skipped (no CUDA GPU found)"; done
if [ $have_gpu = 1 ] && [ -n "$CS" ] && [ $((SECONDS - T0)) -gt 330 ]; then
    # the whole check must end within 8 minutes with its summary: the sanitizers (up to
    # 150 s) only run when there is room
    for k in memcheck racecheck synccheck; do STATUS[$k]="skipped (time: $((SECONDS - T0)) s used)"; done
elif [ $have_gpu = 1 ] && [ -n "$CS" ]; then
    sanitize memcheck memcheck 60 --mode bf16s
    sanitize racecheck racecheck 45 --mode bf16s --attention-only
    sanitize synccheck synccheck 45 --mode bf16s --attention-only
elif [ $have_gpu = 1 ]; then
    for k in memcheck racecheck synccheck; do STATUS[$k]="skipped (no compute-sanitizer on this image)"; done
fi

# ---------------------------------------------------------------------------- 4. summary
{
    echo
    echo "================ bsipipe device check: summary ================"
    echo "GPU:        ${GPU_NAME:-none}"
    echo "build:      ${STATUS[build]}"
    echo "CPU side:   ${STATUS[cpu]}"
    echo "probe:      ${STATUS[probe]}"
    echo "kernels:    ${STATUS[kernels]}"
    echo "tp segments: ${STATUS[tp_segments]}"
    echo "bench:      ${STATUS[bench]}"
    echo "engine CPU: ${STATUS[engine_cpu]}"
    echo "engine:     ${STATUS[engine]}"
    echo "engine bf16s: ${STATUS[engine_bf16]}"
    echo "engine nccl: ${STATUS[engine_nccl]}"
    echo "pipeline fp32:  ${STATUS[pipeline_fp32]}"
    echo "pipeline bf16s: ${STATUS[pipeline_bf16s]}"
    echo "admission:      ${STATUS[admission]}"
    echo "GPU peak:       ${STATUS[gpu-peak]}"
    echo "memcheck:   ${STATUS[memcheck]}"
    echo "racecheck:  ${STATUS[racecheck]}"
    echo "synccheck:  ${STATUS[synccheck]}"
    for t in engine engine_bf16 engine_nccl; do
        [ -s "$OUTDIR/$t.tsv" ] || continue
        echo
        case $t in
            engine_bf16) tl="bf16s products and tensor-core attention < 1e-2" ;;
            *) tl="fp32 < 1e-5" ;;
        esac
        echo "$t: CUDA workers vs CPU workers, relative error ($tl):"
        printf '%-30s %10s %10s %10s  %s\n' case loss gnorm grads result
        awk -F'\t' '{ printf "%-30s %10s %10s %10s  %s (worst %s)\n", $1, $2, $3, $4, $6, $5 }' "$OUTDIR/$t.tsv"
    done
    if [ -s "$OUTDIR/kernels.tsv" ]; then
        echo
        echo "per-kernel worst relative error (over configs and tensors):"
        printf '%-24s %15s %15s %15s %15s\n' kernel "fp32 (<1e-5)" "tf32 (<1e-2)" "bf16 (<1e-2)" \
            "bf16s (<1e-2)"
        awk -F'\t' '{ key = $2 "\t" $1; e = ($5 ~ /nan/) ? -1 : $5 + 0;
                      if (!(key in w) || e < 0 || (w[key] >= 0 && e > w[key])) w[key] = e;
                      if ($7 != "ok") bad[key] = 1; names[$2] = 1 }
             END { split("fp32 tf32 bf16 bf16s", ms, " ");
                   for (k in names) { printf "%-24s", k;
                       for (i = 1; i <= 4; i++) { key = k "\t" ms[i];
                           if (!(key in w)) printf " %15s", "-";
                           else if (w[key] < 0) printf " %12s %-2s", "NaN", "!!";
                           else printf " %12.2e %-2s", w[key], (key in bad) ? "!!" : "ok" }
                       printf "\n" } }' "$OUTDIR/kernels.tsv" | sort
    fi
    if [ -s "$OUTDIR/bench.tsv" ]; then
        echo
        echo "block forward+backward (model FLOPs), hidden/heads/seq as given, k = 2:"
        printf '%-6s %6s %6s %6s %9s %11s %9s %12s %9s %10s\n' gemm hidden heads seq fwd_ms fwdbwd_ms \
            TFLOP/s of_bf16_gemm attn_ms attn_TF/s
        awk -F'\t' '{ printf "%-6s %6d %6d %6d %9.2f %11.2f %9.2f %11.1f%% %9.2f %10.2f\n", $1, $2, $3, $4, $5, $6, $7, 100 * $8, $10, $11; r = $9 }
                    END { if (r) printf "measured cublasGemmEx bf16 rate: %.1f TFLOP/s\n", r }' "$OUTDIR/bench.tsv"
    fi
    for t in pipeline_fp32 pipeline_bf16s; do
        [ -s "$OUTDIR/$t.md" ] && grep -q '^| bsipipe ' "$OUTDIR/$t.md" || continue
        echo
        echo "$t: schedules on 4 CUDA workers of one GPU (tokens/s, bubble, peak activation MiB):"
        grep -E '^\| (schedule|bsipipe|seq1f1b-i|1f1b) ' "$OUTDIR/$t.md" | cut -d'|' -f2,6,7,8,10
    done
    echo "total time: $((SECONDS - T0)) s; log: $LOG"
} | tee -a "$LOG"

fail=0
for k in build cpu probe kernels tp_segments bench engine_cpu engine engine_bf16 engine_nccl pipeline_fp32 pipeline_bf16s \
    admission gpu-peak memcheck racecheck synccheck; do
    case ${STATUS[$k]:-FAIL} in ok*|skipped*) ;; *) fail=1 ;; esac
done
[ $fail = 1 ] && exit 1
[ $have_gpu = 0 ] && exit 2
exit 0
