#!/bin/sh
# test_mpi_tp.sh: tensor parallelism across 2 StarPU-MPI ranks
# (tests/test_mpi_tp.c says what is compared: D_t = 2 and 4 on the ranks
# against D_t = 1 within test_engine_tp's tolerances, and bit for bit against
# the same D_t in one process), then bsipipe-train --mpi --tp 2 printing the
# one-process losses and parameter digest, and a checkpoint saved on 2 ranks
# with --tp 2 resumed at --tp 1 on 2 ranks and in one process. Skips (77)
# without mpirun.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
. "${srcdir:-.}/tests/mpi_util.sh"
prog=$build/tests/test_mpi_tp
train=$build/apps/bsipipe-train
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
run() { # label, then the command
    local label=$1; shift
    echo "== $label"
    if ! timeout 900 "$@" >"$tmp/out" 2>&1; then
        echo "FAIL: $label" >&2; grep -v "^\[starpu\]" "$tmp/out" | tail -25 >&2; fails=$((fails + 1))
    fi
    grep -E "ranks|one process|checks" "$tmp/out"
}
run "one process" "$prog" single "$tmp/single.bin"
run "2 ranks" "${MPIRUN[@]}" -np 2 "$prog" mpi "$tmp/single.bin"

# The app: --mpi --tp 2 on 2 ranks prints the one-process --tp 1 run's losses
# (4 decimals) and, the digest of every float being exact only for equal
# bits, the one-process --tp 2 run's parameter digest.
tiny=(--layers 8 --hidden 32 --heads 2 --seq 32 --m 4 --w 4 --iters 2 --lr 3e-3 --eval-every 0)
losses() { grep -E "^iter +[0-9]+/2 +loss" "$1" | awk '{print $2, $4}'; }
digest() { grep -E "^parameters: FNV-1a" "$1" | awk '{print $3}'; }
echo "== bsipipe-train --mpi --tp 2, 2 ranks"
timeout 300 "$train" "${tiny[@]}" >"$tmp/tp1" 2>&1 || { echo "FAIL: --tp 1" >&2; fails=$((fails + 1)); }
timeout 300 "$train" "${tiny[@]}" --tp 2 >"$tmp/tp2" 2>&1 || { echo "FAIL: --tp 2" >&2; fails=$((fails + 1)); }
if timeout 600 "${MPIRUN[@]}" -np 2 "$train" "${tiny[@]}" --tp 2 --mpi >"$tmp/mpi" 2>&1; then
    losses "$tmp/mpi" | sed 's/^/   | /'
    [ -n "$(losses "$tmp/mpi")" ] && [ "$(losses "$tmp/mpi")" = "$(losses "$tmp/tp1")" ] ||
        { echo "FAIL: --mpi --tp 2 losses [$(losses "$tmp/mpi")] vs --tp 1 [$(losses "$tmp/tp1")]" >&2; fails=$((fails + 1)); }
    [ -n "$(digest "$tmp/mpi")" ] && [ "$(digest "$tmp/mpi")" = "$(digest "$tmp/tp2")" ] ||
        { echo "FAIL: --mpi --tp 2 digest $(digest "$tmp/mpi") vs one process $(digest "$tmp/tp2")" >&2; fails=$((fails + 1)); }
else
    echo "FAIL: bsipipe-train --mpi --tp 2" >&2; grep -v "^\[starpu" "$tmp/mpi" | tail -15 >&2; fails=$((fails + 1))
fi
# Checkpoints: saved on 2 ranks with --tp 2 after 2 of 4 iterations (each
# rank writes the whole-model slices of its replicas, gathered from its
# shards), resumed on 2 ranks with --tp 1 and in one process with --tp 1:
# the uninterrupted --tp 1 run's losses, and the same parameters both ways.
ck=(--layers 8 --hidden 32 --heads 2 --seq 32 --m 4 --w 4 --lr 3e-3 --eval-every 0 --lr-decay-iters 4)
later() { grep -E "^iter +[34]/4 +loss" "$1" | awk '{print $2, $4}'; }
echo "== checkpoint: 2 ranks --tp 2 -> 2 ranks --tp 1, and -> one process --tp 1"
timeout 300 "$train" "${ck[@]}" --iters 4 >"$tmp/ref" 2>&1 || { echo "FAIL: uninterrupted run" >&2; fails=$((fails + 1)); }
if timeout 600 "${MPIRUN[@]}" -np 2 "$train" "${ck[@]}" --iters 2 --tp 2 --mpi --checkpoint "$tmp/ck" >"$tmp/save" 2>&1; then
    cp -r "$tmp/ck" "$tmp/ck1"
    timeout 600 "${MPIRUN[@]}" -np 2 "$train" "${ck[@]}" --iters 4 --mpi --checkpoint "$tmp/ck" --resume \
        >"$tmp/res2" 2>&1 || { echo "FAIL: resume on 2 ranks" >&2; grep -v "^\[starpu" "$tmp/res2" | tail -5 >&2; fails=$((fails + 1)); }
    timeout 300 "$train" "${ck[@]}" --iters 4 --checkpoint "$tmp/ck1" --resume >"$tmp/res1" 2>&1 ||
        { echo "FAIL: resume in one process" >&2; tail -5 "$tmp/res1" >&2; fails=$((fails + 1)); }
    later "$tmp/res2" | sed 's/^/   | /'
    for r in res2 res1; do
        [ -n "$(later "$tmp/$r")" ] && [ "$(later "$tmp/$r")" = "$(later "$tmp/ref")" ] ||
            { echo "FAIL: $r losses [$(later "$tmp/$r")] vs uninterrupted [$(later "$tmp/ref")]" >&2; fails=$((fails + 1)); }
    done
    [ -n "$(digest "$tmp/res2")" ] && [ "$(digest "$tmp/res2")" = "$(digest "$tmp/res1")" ] ||
        { echo "FAIL: resumed parameters differ: 2 ranks $(digest "$tmp/res2"), one process $(digest "$tmp/res1")" >&2
          fails=$((fails + 1)); }
else
    echo "FAIL: save on 2 ranks with --tp 2" >&2; grep -v "^\[starpu" "$tmp/save" | tail -10 >&2; fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "test_mpi_tp.sh: all passed" || echo "test_mpi_tp.sh: $fails failed"
[ "$fails" -eq 0 ]
