#!/bin/sh
# test_mpi_deadline.sh: a rank stopped (SIGSTOP) at any moment ends a 2-rank job with an
# error, never a hang: right after launch (rank 0 waits inside MPI_Init_thread, where no
# heartbeat exists yet: a deadline), at start-up after MPI is up (rank 0 waits in the
# ranks' first agreement), inside a checkpoint save (rank 0 waits in the barrier), and
# at the engine's end (rank 0 waits for its last heartbeat). Mid-run stops are in
# test_mpi.sh. The stops inside the program come from BSIPIPE_FAULT_STOP=RANK:POINT.
# `timeout 60` only detects a hang; no time is asserted.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
. "${srcdir:-.}/tests/mpi_util.sh"
train=$build/apps/bsipipe-train
tmp=$(mktemp -d) || exit 99
trap 'pkill -9 -f "$tmp/corpus" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
for _ in $(seq 1 100); do echo "a stopped rank is named, not waited for"; done >"$tmp/corpus"
tiny=(--layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 3 --eval-every 0 --watchdog 2 --data "$tmp/corpus")
rank1_pid() {
    local p
    for p in $(pgrep -f "$tmp/corpus"); do
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && echo "$p"
    done
}
check() { # label, status, pattern
    local label=$1 status=$2 want=$3
    echo "== $label: exit $status"
    grep -E "$want" "$tmp/out" | head -1 | sed 's/^/   | /'
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || ! grep -qE "$want" "$tmp/out"; then
        fail_msg="exit $status (124: a hang), want an error matching '$want'"
        echo "FAIL: $label: $fail_msg" >&2; grep -v '^\[' "$tmp/out" | tail -8 >&2; fails=$((fails + 1))
    fi
    pkill -9 -f "$tmp/corpus" 2>/dev/null
}

# Right after launch: stop rank 1 as soon as it exists.
timeout 60 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" >"$tmp/out" 2>&1 &
job=$!
for _ in $(seq 1 2000); do
    v=$(rank1_pid | head -1)
    [ -n "$v" ] && { kill -STOP "$v"; break; }
    sleep 0.005
done
wait $job
check "rank 1 stopped right after launch" $? "has not returned after|rank 1.*(died or hangs|failed before starting)"

for point in start-up checkpoint-part checkpoint-commit end; do
    rm -rf "$tmp/ck"
    BSIPIPE_FAULT_STOP=1:$point timeout 60 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --checkpoint "$tmp/ck" \
        >"$tmp/out" 2>&1
    check "rank 1 stopped at $point" $? "rank 1.*died or hangs"
done
echo "test_mpi_deadline: $fails failed"
[ "$fails" -eq 0 ]
