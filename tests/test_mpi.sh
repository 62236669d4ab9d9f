#!/bin/sh
# test_mpi.sh: the engine across StarPU-MPI ranks on this machine
# (tests/test_mpi_equiv.c says what is compared: bit-identical to one
# process, traffic equal to the plan), then a rank that stops responding and
# a rank that dies mid-run: the job ends with an error naming it, never hangs.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
. "${srcdir:-.}/tests/mpi_util.sh"
equiv=$build/tests/test_mpi_equiv
train=$build/apps/bsipipe-train
tmp=$(mktemp -d) || exit 99
# The fault runs train on a corpus inside $tmp: its path tells this run's
# processes apart from any other run's on the machine (pgrep/pkill by it).
trap 'pkill -9 -f "$tmp/corpus" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0

run() { # label, then the command
    local label=$1; shift
    echo "== $label"
    if ! timeout 400 "$@" >"$tmp/out" 2>&1; then
        echo "FAIL: $label" >&2; grep -v "^\[starpu\]" "$tmp/out" | tail -25 >&2; fails=$((fails + 1))
    else
        grep -E "ranks|reference|checks" "$tmp/out"
    fi
}
run "one process" "$equiv" single "$tmp/single.bin"
for np in 2 4; do
    for map in aware naive; do
        run "$np ranks, $map mapping" "${MPIRUN[@]}" -np $np "$equiv" mpi "$tmp/single.bin" $map
    done
done

# The bench's mapping ablation across 2 ranks: the aware mapping keeps
# gradient sync inside ranks, the naive one sends it across.
echo "== bsipipe-bench --mpi --preset ablation, 2 ranks"
bench=$build/apps/bsipipe-bench
if timeout 300 "${MPIRUN[@]}" -np 2 "$bench" --mpi --preset ablation --reps 1 --warmup 0 --layers 8 --hidden 32 \
        --heads 2 --seq 64 >"$tmp/bench" 2>&1; then
    grep -E "^\| bsipipe, .* mapping \| [0-9]+\.[0-9]+ \|" "$tmp/bench"
    aware=$(grep -E "^\| bsipipe, topology-aware mapping \| [0-9]+\.[0-9]+ \|" "$tmp/bench" | awk -F'|' '{print $6+0}')
    naive=$(grep -E "^\| bsipipe, naive mapping \| [0-9]+\.[0-9]+ \|" "$tmp/bench" | awk -F'|' '{print $6+0}')
    if [ "$aware" != 0 ] || [ -z "$naive" ] || [ "$naive" = 0 ]; then
        echo "FAIL: bench traffic: sync across ranks aware '$aware' (want 0), naive '$naive' (want > 0)" >&2
        fails=$((fails + 1))
    fi
else
    echo "FAIL: bsipipe-bench --mpi" >&2; tail -20 "$tmp/bench" >&2; fails=$((fails + 1))
fi

# Slow is not dead: F ops of about 1.1 s, B of 2.2 s, under a 1 s watchdog. The
# rank that waits hears the busy rank's heartbeats and goes on waiting. (At
# 0.3 s the heartbeat threads themselves were starved on a machine loaded 20x.)
run "long ops, short watchdog" "${MPIRUN[@]}" -np 2 "$build/apps/bsipipe-train" --mpi --schedule 1f1b --w 2 --m 2 \
    --iters 1 --layers 2 --hidden 32 --heads 2 --seq 32 --emulate --device-tflops 0.000001 --watchdog 1
if ! grep -q "summary: 1 iterations" "$tmp/out"; then
    echo "FAIL: a rank busy with long ops was taken for a dead one" >&2; fails=$((fails + 1))
fi

# CUDA devices across ranks: without a GPU every rank stops with the same clear error (exit 1,
# no hang); the nccl transport is refused across ranks on any machine.
mpi_refuses() { # label, expected message, then train flags
    local label=$1 want=$2; shift 2
    echo "== $label"
    timeout 120 "${MPIRUN[@]}" -np 2 "$train" --mpi --layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 1 \
        "$@" >"$tmp/out" 2>&1
    local status=$?
    grep -F "$want" "$tmp/out" | head -1 | sed 's/^/   | /'
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || ! grep -qF "$want" "$tmp/out"; then
        echo "FAIL: $label: exit $status, want an error with '$want'" >&2; tail -10 "$tmp/out" >&2
        fails=$((fails + 1))
    fi
}
mpi_refuses "2 ranks, --transport nccl" "the nccl transport pairs the GPUs of one process" \
    --devices cuda --transport nccl
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== 2 ranks, --devices cuda: not checked (a GPU is present; the no-GPU error cannot show)"
else
    mpi_refuses "2 ranks, --devices cuda, no GPU" "no CUDA device found; run with --devices cpu" --devices cuda
fi

# A rank that fails to start alone (here rank 1 asks for CUDA devices this machine lacks,
# rank 0 for CPU ones): every rank stops with an error naming it, none waits for it (this
# hung before the ranks agreed on the device setup).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== rank 1 alone cannot start its devices: not checked (a GPU is present)"
else
    echo "== rank 1 alone cannot start its devices"
    small="--mpi --layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 1"
    # shellcheck disable=SC2086
    timeout 60 "${MPIRUN[@]}" -np 1 "$train" $small : -np 1 "$train" $small --devices cuda >"$tmp/out" 2>&1
    status=$?
    grep -E "rank 1 could not start" "$tmp/out" | head -1 | sed 's/^/   | /'
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || ! grep -q "rank 1 could not start" "$tmp/out"; then
        echo "FAIL: one rank failing its device setup: exit $status (124: a hang)" >&2; tail -10 "$tmp/out" >&2
        fails=$((fails + 1))
    fi
fi

# Fault injection into a running 2-rank training (small model, watchdog 3 s).
for _ in $(seq 1 200); do echo "the pipeline sends activations forward and gradients back"; done >"$tmp/corpus"
rank1_pid() {
    local p
    for p in $(pgrep -f "$tmp/corpus"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && echo "$p"
    done
}
fault() { # signal, pattern expected in the output
    local sig=$1 want=$2 victim= job status start
    echo "== rank 1 gets SIG$sig mid-run"
    "${MPIRUN[@]}" -np 2 "$train" --mpi --iters 100000 --layers 8 --hidden 32 --heads 2 --seq 32 --m 8 \
        --watchdog 3 --data "$tmp/corpus" >"$tmp/fault" 2>&1 &
    job=$!
    for _ in $(seq 1 900); do # up to 90 s for two iterations to pass
        kill -0 "$job" 2>/dev/null || break
        if grep -q "iter    2/" "$tmp/fault"; then
            victim=$(rank1_pid | head -1)
            [ -n "$victim" ] && break
        fi
        sleep 0.1
    done
    if [ -z "$victim" ]; then
        echo "FAIL: SIG$sig: the run did not start" >&2; tail -20 "$tmp/fault" >&2
        fails=$((fails + 1)); kill -9 "$job" 2>/dev/null; return
    fi
    start=$(date +%s)
    kill -"$sig" "$victim"
    for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
        echo "FAIL: SIG$sig: the job still runs 60 s after rank 1 stopped (a hang)" >&2
        fails=$((fails + 1)); kill -9 "$victim" "$job" 2>/dev/null; pkill -9 -f "$tmp/corpus"; return
    fi
    wait "$job"; status=$?
    kill -9 "$victim" 2>/dev/null; pkill -9 -f "$tmp/corpus"
    echo "   the job ended $(( $(date +%s) - start )) s after the signal, exit status $status:"
    grep -E "rank 1" "$tmp/fault" | head -2 | sed 's/^/   | /'
    if [ "$status" -eq 0 ]; then echo "FAIL: SIG$sig: exit status 0" >&2; fails=$((fails + 1)); fi
    if ! grep -qE "$want" "$tmp/fault"; then
        echo "FAIL: SIG$sig: nothing matches '$want' in the output" >&2; tail -20 "$tmp/fault" >&2
        fails=$((fails + 1))
    fi
}
fault STOP "rank 1.*(died or hangs)"
fault KILL "process rank 1 .*exited|rank 1.*died or hangs"
echo "test_mpi: $fails failed"
[ "$fails" -eq 0 ]
