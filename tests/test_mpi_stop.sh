#!/bin/sh
# test_mpi_stop.sh: a rank stopped (SIGSTOP) at a random moment of a 2-rank checkpointed
# run (MPI start-up, the engine's start, iterations, saves, the final agreement, MPI's
# end) ends the job every time: a non-zero exit within the watchdog time plus 10 s, and
# the other rank names the stopped one. Each rank is stopped at N moments drawn from the
# first 15 s of the run (N = 2; BSIPIPE_STOP_SWEEP=full: N = 20). The moments come from
# BSIPIPE_STOP_SEED (printed), so a failure can be replayed.
# The fixed points (inside a save, at the engine's end) are in test_mpi_deadline.sh.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
. "${srcdir:-.}/tests/mpi_util.sh"
train=$build/apps/bsipipe-train
tmp=$(mktemp -d) || exit 99
trap 'pkill -9 -f "$tmp/corpus" 2>/dev/null; rm -rf "$tmp"' EXIT
n=2
[ "${BSIPIPE_STOP_SWEEP:-}" = full ] && n=20
seed=${BSIPIPE_STOP_SEED:-$$}
RANDOM=$seed
watchdog=5
bound=$((watchdog + 10))
echo "test_mpi_stop: $n stops per rank, seed $seed (BSIPIPE_STOP_SEED=$seed replays them), watchdog $watchdog s"
for _ in $(seq 1 100); do echo "a stopped rank is named, not waited for"; done >"$tmp/corpus"
run=(--mpi --layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 200 --eval-every 0 --watchdog "$watchdog"
     --data "$tmp/corpus")
rank_pid() { # rank
    local p
    for p in $(pgrep -f "$tmp/corpus"); do
        { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p"
    done
}
fails=0 runs=0 worst=0
for victim_rank in 0 1; do
    other=$((1 - victim_rank))
    for i in $(seq 1 "$n"); do
        delay_ms=$((200 + RANDOM % 14800))
        rm -rf "$tmp/ck"
        timeout 90 "${MPIRUN[@]}" -np 2 "$train" "${run[@]}" --checkpoint "$tmp/ck" >"$tmp/out" 2>&1 &
        job=$!
        sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        victim=$(rank_pid "$victim_rank" | head -1)
        label="rank $victim_rank stopped at $((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000))) s"
        # Stopped before it existed (mpirun still starting): stop it as soon as it appears.
        for _ in $(seq 1 400); do
            [ -n "$victim" ] && break
            kill -0 "$job" 2>/dev/null || break
            sleep 0.01
            victim=$(rank_pid "$victim_rank" | head -1)
        done
        if [ -z "$victim" ]; then
            echo "FAIL: $label: rank $victim_rank never appeared" >&2; tail -5 "$tmp/out" >&2
            fails=$((fails + 1)); kill -9 "$job" 2>/dev/null; pkill -9 -f "$tmp/corpus"; continue
        fi
        kill -STOP "$victim"
        t0=$(date +%s%N)
        wait "$job"; status=$?
        took=$((($(date +%s%N) - t0) / 1000000))
        kill -9 "$victim" 2>/dev/null; pkill -9 -f "$tmp/corpus" 2>/dev/null
        runs=$((runs + 1))
        [ "$took" -gt "$worst" ] && worst=$took
        # The other rank's message names the stopped one.
        named=$(grep -E "^bsipipe engine: rank $other\b.*rank $victim_rank\b" "$tmp/out" | head -1)
        printf '== %s: exit %d after %d.%03d s\n' "$label" "$status" $((took / 1000)) $((took % 1000))
        [ -n "$named" ] && echo "   | $named"
        why=
        if [ "$status" -eq 124 ]; then why="the job hung (killed by timeout 90)"
        elif [ "$status" -eq 0 ]; then why="exit status 0"
        elif [ "$took" -gt $((bound * 1000)) ]; then why="it took more than $bound s to end"
        elif [ -z "$named" ]; then why="rank $other did not name rank $victim_rank"
        fi
        if [ -n "$why" ]; then
            echo "FAIL: $label: $why" >&2; grep -v '^\[' "$tmp/out" | tail -8 >&2
            fails=$((fails + 1))
        fi
    done
done
printf 'test_mpi_stop: %d runs, %d failed; the slowest ended %d.%03d s after its stop (bound %d s)\n' \
    "$runs" "$fails" $((worst / 1000)) $((worst % 1000)) "$bound"
[ "$fails" -eq 0 ]
