#!/bin/sh
# test_mpi_checkpoint.sh: checkpoints across 2 StarPU-MPI ranks (docs/checkpoint.md,
# "Across ranks").
# 1. A 2-rank run saved after 3 of 6 iterations and resumed on 2 ranks ends with
#    the same parameters (FNV-1a of every float) and losses as the uninterrupted
#    2-rank run; resumed in one process (another rank count) too.
# 2. Crashes: rounds of a 2-rank run with --checkpoint, each killed with SIGKILL
#    (rank 0, rank 1 or both) after a delay from a seeded RNG, just after a part
#    of a new save appears, or while one rank is held (BSIPIPE_FAULT_STOP) after
#    writing its part or after rank 0's commit (inside the two-phase save); every next round
#    resumes from what the directory holds (it must load), and the last one
#    ends with the uninterrupted run's parameters. The seed is printed;
#    BSIPIPE_TEST_SEED replays it, BSIPIPE_CKPT_ROUNDS sets the rounds (8).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
. "${srcdir:-.}/tests/mpi_util.sh"
train=$build/apps/bsipipe-train
tmp=$(mktemp -d) || exit 99
# The runs read a corpus inside $tmp: its path tells this test's processes
# apart from any other on the machine (pgrep/pkill by it).
trap 'pkill -9 -f "$tmp/corpus" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
for _ in $(seq 1 200); do echo "every rank writes its part and rank 0 commits the manifest"; done >"$tmp/corpus"
total=6
tiny=(--layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --lr 3e-3 --eval-every 0 --data "$tmp/corpus" --watchdog 10)
digest() { grep -E "^parameters: FNV-1a" "$1" | awk '{print $3}' | head -1; }
losses() { grep -E "^iter +[0-9]+/$total +loss" "$1" | awk '{print $2, $4, $6}'; }

echo "== uninterrupted, 2 ranks, $total iterations"
timeout 300 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters $total >"$tmp/straight" 2>&1 ||
    { fail "the uninterrupted run: $(tail -3 "$tmp/straight")"; exit 1; }
want=$(digest "$tmp/straight")
echo "   parameters: FNV-1a $want"
[ -n "$want" ] || { fail "no parameter digest printed"; exit 1; }

echo "== 3 iterations saved, then resumed on 2 ranks and in 1 process"
timeout 300 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters 3 --lr-decay-iters $total \
    --checkpoint "$tmp/ck" >"$tmp/first" 2>&1 || fail "the run with --checkpoint: $(tail -3 "$tmp/first")"
ls "$tmp/ck" | sed 's/^/   | /'
nparts=$(ls "$tmp/ck" | grep -c '^checkpoint-i3-.*\.part$')
[ "$nparts" = 2 ] || fail "want 2 parts of iteration 3 in DIR, found $nparts"
cp -r "$tmp/ck" "$tmp/ck1"
timeout 300 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters $total --checkpoint "$tmp/ck" --resume \
    --keep-last 2 >"$tmp/resumed" 2>&1 || fail "resume on 2 ranks: $(tail -3 "$tmp/resumed")"
got=$(digest "$tmp/resumed")
echo "   resumed on 2 ranks: FNV-1a $got"
[ "$got" = "$want" ] || fail "resumed on 2 ranks: parameters $got, uninterrupted $want"
a=$(losses "$tmp/straight" | tail -n $((total - 3))) b=$(losses "$tmp/resumed")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "resumed losses differ: [$a] vs [$b]"
ls "$tmp/ck" | grep -q "^checkpoint-i3-" && fail "the parts of iteration 3 are left after later saves"
# --keep-last 2: the last two saves kept as DIR/iter_NNNNNNN, each a manifest and its two parts
# (hard links), and a kept one resumes in one process to the same parameters.
kept=$(cd "$tmp/ck" && ls -d iter_* | tr '\n' ' ')
[ "$kept" = "iter_0000005 iter_0000006 " ] || fail "--keep-last 2 kept [$kept], want iterations 5 and 6"
n=$(ls "$tmp/ck/iter_0000005" | grep -c '^checkpoint-i5-.*\.part$')
[ "$n" = 2 ] && [ -f "$tmp/ck/iter_0000005/checkpoint.bin" ] || fail "iter_0000005 holds $n parts, want a manifest and 2"
STARPU_SILENT=1 timeout 300 "$train" "${tiny[@]}" --iters $total --resume-from "$tmp/ck/iter_0000005" \
    >"$tmp/fromkept" 2>&1 || fail "resume from a kept checkpoint: $(tail -3 "$tmp/fromkept")"
got=$(digest "$tmp/fromkept")
echo "   resumed in one process from iter_0000005: FNV-1a $got"
[ "$got" = "$want" ] || fail "resumed from iter_0000005: parameters $got, uninterrupted $want"
STARPU_SILENT=1 timeout 300 "$train" "${tiny[@]}" --iters $total --checkpoint "$tmp/ck1" --resume >"$tmp/single" 2>&1 ||
    fail "resume in one process: $(tail -3 "$tmp/single")"
got=$(digest "$tmp/single")
echo "   resumed in one process: FNV-1a $got"
[ "$got" = "$want" ] || fail "resumed in one process: parameters $got, uninterrupted $want"
# One process over a 2-rank checkpoint writes one file: the parts go.
ls "$tmp/ck1" | grep -q "\.part$" && fail "a single-process save left the parts of the 2-rank checkpoint"
# A fresh run into DIR is refused on every rank (rank 0 holds the lock and decides).
timeout 120 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters 2 --checkpoint "$tmp/ck" >"$tmp/out" 2>&1
st=$?
if [ $st -ne 1 ] || ! grep -q "already holds a checkpoint" "$tmp/out"; then
    fail "a fresh 2-rank run into a DIR with a checkpoint: exit $st, want 1 naming --resume"; tail -3 "$tmp/out" >&2
fi
# A missing part is refused by name, on every rank, before anything changes.
cp -r "$tmp/ck" "$tmp/ck2" && rm -f "$tmp/ck2"/*-r1.part
timeout 120 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters 20 --checkpoint "$tmp/ck2" --resume >"$tmp/out" 2>&1
st=$?
if [ $st -ne 1 ] || ! grep -q "which is missing" "$tmp/out"; then
    fail "a manifest naming a missing part: exit $st, want 1 naming the part"; tail -3 "$tmp/out" >&2
fi
# A manifest that disagrees with its part (a replica's offset one float further, the
# manifest's CRC made valid) is refused naming both, not loaded shifted (fuzz/fuzz_checkpoint,
# docs/fuzzing.md finding 9).
if command -v python3 >/dev/null 2>&1; then
    cp -r "$tmp/ck" "$tmp/ck3"
    python3 - "$tmp/ck3/checkpoint.bin" <<'PY' || fail "could not shift a replica in the manifest"
import struct, sys, zlib
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
pipes, chunks = struct.unpack_from("<II", b, 152)
nrep, nparts = pipes * chunks, struct.unpack_from("<I", b, 160)[0]
parts = 176 + 40 * nrep
for i in range(nrep):  # a replica with data after it in its part: the shift stays inside the part
    t = 176 + 40 * i
    part, n, off = struct.unpack_from("<i", b, t + 12)[0], struct.unpack_from("<q", b, t + 24)[0], struct.unpack_from("<Q", b, t + 32)[0]
    pbytes = struct.unpack_from("<Q", b, parts + 80 * part + 64)[0]
    if off + 12 * n + 4 <= pbytes - 4:
        struct.pack_into("<Q", b, t + 32, off + 4)
        break
else:
    sys.exit(1)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xffffffff)
open(path, "wb").write(b)
PY
    timeout 120 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters 20 --checkpoint "$tmp/ck3" --resume >"$tmp/out" 2>&1
    st=$?
    if [ $st -ne 1 ] || ! grep -q "the manifest and the part disagree" "$tmp/out"; then
        fail "a manifest whose replica offset disagrees with its part: exit $st, want 1 naming both"
        tail -3 "$tmp/out" >&2
    fi
else
    echo "test_mpi_checkpoint: no python3: the manifest-part disagreement check is skipped"
fi

# ---- crashes during saves ----
seed=${BSIPIPE_TEST_SEED:-$(( $(date +%s) % 100000 ))}
rounds=${BSIPIPE_CKPT_ROUNDS:-8}
echo "== $rounds rounds killed with SIGKILL (seed $seed; BSIPIPE_TEST_SEED=$seed replays them)"
RANDOM=$seed
ranks() { # pids of the ranks of this test, "rank pid" lines
    local p r
    for p in $(pgrep -f "$tmp/corpus"); do
        r=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ -n "$r" ] && echo "$r $p"
    done
}
dir=$tmp/crash
mkdir "$dir"
for round in $(seq 1 "$rounds"); do
    flags=()
    [ -e "$dir/checkpoint.bin" ] && flags=(--resume)
    mode=$((RANDOM % 3)) whom=$((RANDOM % 3)) fault=
    if [ $mode = 2 ]; then
        points=(checkpoint-part checkpoint-commit)
        fault="$((RANDOM % 2)):${points[$((RANDOM % 2))]}"
    fi
    before=$(ls "$dir" | grep '\.part$' | sort | tr '\n' ' ')
    BSIPIPE_FAULT_STOP=$fault "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters $total --checkpoint "$dir" \
        "${flags[@]}" >"$tmp/round" 2>&1 &
    job=$!
    if [ $mode = 0 ]; then # a delay over start-up and iterations
        delay=$(printf "%d.%02d" $((1 + RANDOM % 4)) $((RANDOM % 100)))
        how="after ${delay} s"
        sleep "$delay"
    elif [ $mode = 1 ]; then # just after a part of a new save appears
        extra=$((RANDOM % 30))
        how="${extra} ms after a new part appeared"
        for _ in $(seq 1 3000); do
            kill -0 $job 2>/dev/null || break
            now=$(ls "$dir" 2>/dev/null | grep '\.part$' | sort | tr '\n' ' ')
            [ "$now" != "$before" ] && [ -n "$now" ] && break
            sleep 0.002
        done
        sleep "0.0$(printf %02d $extra)"
    else # one rank held inside the save
        extra=$((RANDOM % 50))
        how="${extra} ms after rank ${fault%%:*} stopped at ${fault#*:}"
        for _ in $(seq 1 1500); do
            kill -0 $job 2>/dev/null || break
            grep -q "stops itself at" "$tmp/round" && break
            sleep 0.01
        done
        sleep "0.0$(printf %02d $extra)"
    fi
    victims=$(ranks | awk -v w=$whom '(w == 2 || $1 == w) {print $2}')
    [ -n "$victims" ] && kill -9 $victims 2>/dev/null
    for _ in $(seq 1 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    kill -0 $job 2>/dev/null && { kill -9 $job; pkill -9 -f "$tmp/corpus"; }
    wait $job 2>/dev/null
    pkill -9 -f "$tmp/corpus" 2>/dev/null
    if grep -q "cannot resume" "$tmp/round"; then
        fail "round $round: the directory did not resume: $(grep "cannot resume" "$tmp/round" | head -1)"
        break
    fi
    saved=$(grep -E "^resumed from" "$tmp/round" | awk '{print $NF}')
    last=$(grep -E "^iter +[0-9]+/$total +loss" "$tmp/round" | tail -1 | awk '{split($2, a, "/"); print a[1]}')
    echo "   round $round: killed $( [ $whom = 2 ] && echo both ranks || echo rank $whom) $how;" \
         "resumed from ${saved:-nothing}, last iteration printed ${last:-none}; DIR: $(ls "$dir" | grep -c '\.part$') parts"
    grep -q "^summary:" "$tmp/round" && break
done
echo "== the last resume, to the end"
# Always: a round can print its summary and still be killed before it exits
# (its lock file then stays, as after any SIGKILL); the resume takes the
# stale lock over and leaves DIR clean.
{
    flags=()
    [ -e "$dir/checkpoint.bin" ] && flags=(--resume)
    # A round killed after its last save but before it printed its summary
    # leaves a finished checkpoint: the resume then has nothing to do (exit
    # 1) and prints the checkpoint's parameters digest instead.
    timeout 300 "${MPIRUN[@]}" -np 2 "$train" --mpi "${tiny[@]}" --iters $total --checkpoint "$dir" "${flags[@]}" \
        >"$tmp/round" 2>&1 || grep -q "nothing to do" "$tmp/round" ||
        fail "the last resume: $(grep -v '^\[' "$tmp/round" | tail -3)"
}
got=$(digest "$tmp/round")
echo "   parameters: FNV-1a $got"
[ "$got" = "$want" ] || fail "after the crashes (seed $seed): parameters $got, uninterrupted $want"
left=$(ls -A "$dir" | grep -v -E '^checkpoint\.bin$|^checkpoint-i'$total'-[0-9a-f]{16}-r[01]\.part$' | tr '\n' ' ')
[ -z "$left" ] || fail "files left in DIR after the last save: $left"
# Layers placed by cost across ranks: 10 layers on 4 chunks, 2 ranks, the digest of one process.
lay=(--layers 10 --hidden 32 --heads 2 --seq 32 --m 4 --iters 2 --eval-every 0 --schedule 1f1b --w 4 --layout auto)
timeout 300 "${MPIRUN[@]}" -np 2 "$train" --mpi "${lay[@]}" >"$tmp/lay-mpi" 2>&1 || fail "--layout auto on 2 ranks"
timeout 300 "$train" "${lay[@]}" >"$tmp/lay-one" 2>&1 || fail "--layout auto in one process"
got=$(digest "$tmp/lay-mpi")
echo "   --layout auto on 2 ranks: FNV-1a $got"
[ -n "$got" ] && [ "$got" = "$(digest "$tmp/lay-one")" ] || fail "--layout auto: 2 ranks $got, one process $(digest "$tmp/lay-one")"
echo "test_mpi_checkpoint: $fails failed"
[ "$fails" -eq 0 ]
