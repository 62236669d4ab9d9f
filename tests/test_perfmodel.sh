#!/bin/sh
# test_perfmodel: the engine's codelets have StarPU performance models
# (tasks/engine_perfmodel.c). After runs with STARPU_CALIBRATE=1 (STARPU_HOME
# a temporary directory, so ~/.starpu is left alone):
#  - starpu_perfmodel_display -l lists bsipipe_fwd, bsipipe_fwd_head,
#    bsipipe_bwd, bsipipe_wgrad (ZB-H1's split backward), bsipipe_send and
#    bsipipe_recv;
#  - -s bsipipe_fwd shows calibrated entries, one footprint per piece shape:
#    with k = 2 compute-balanced pieces (Seq1F1B) the two pieces of a chunk
#    get two footprints (their lengths and starts differ), and a second
#    hidden size adds more (the footprint holds the model's widths);
#  - the models land under $STARPU_HOME/.starpu, not $HOME.
# Exit 77 (skip) only when starpu_perfmodel_display cannot be found.
set -u
top="${top_builddir:-.}"
train="$top/apps/bsipipe-train"
tool="${STARPU_BINDIR:-}/starpu_perfmodel_display"
[ -x "$tool" ] || tool=$(command -v starpu_perfmodel_display 2>/dev/null) || tool=
if [ -z "$tool" ] || [ ! -x "$tool" ]; then
    echo "test_perfmodel: SKIP: starpu_perfmodel_display not found (set STARPU_BINDIR)" >&2
    exit 77
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/starpu" "$tmp/home"
export STARPU_HOME="$tmp/starpu" HOME="$tmp/home" STARPU_CALIBRATE=1 STARPU_SILENT=1
fails=0 checks=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }

tiny="--w 2 --m 4 --layers 2 --heads 2 --seq 32 --iters 2 --eval-every 0"
# --sends tasks: SEND tasks of their own, so that their model calibrates too
for run in "--schedule zb-h1 --hidden 32 --sends tasks" "--schedule seq1f1b --k 2 --hidden 32" "--schedule seq1f1b --k 2 --hidden 64"; do
    # shellcheck disable=SC2086
    if timeout 120 "$train" $tiny $run >"$tmp/train.log" 2>&1; then ok; else
        fail "bsipipe-train $run: exit $?"; tail -5 "$tmp/train.log" >&2; fi
done

"$tool" -l >"$tmp/list" 2>&1 || fail "starpu_perfmodel_display -l: exit $?"
for sym in bsipipe_fwd bsipipe_fwd_head bsipipe_bwd bsipipe_wgrad bsipipe_send bsipipe_recv; do
    if grep -q "<$sym\." "$tmp/list"; then ok; else fail "-l does not list $sym"; cat "$tmp/list" >&2; fi
done

"$tool" -s bsipipe_fwd >"$tmp/fwd" 2>&1 || fail "starpu_perfmodel_display -s bsipipe_fwd: exit $?"
# entry lines: footprint (hex), size, flops, mean, stddev, samples
entries=$(grep -cE '^[0-9a-f]{8}[[:space:]]' "$tmp/fwd")
echo "bsipipe_fwd: $entries calibrated footprints"
# zb-h1: 1 shape; seq1f1b k=2: 2 pieces; hidden 64: 2 more (chunk 0 only: F of the last chunk is _head)
if [ "$entries" -ge 5 ]; then ok; else fail "-s bsipipe_fwd: $entries entries, expected 5 or more"; cat "$tmp/fwd" >&2; fi
if awk '/^[0-9a-f]{8}[ \t]/ { if ($4 + 0 <= 0 || $6 + 0 < 1) bad = 1 } END { exit bad }' "$tmp/fwd"; then ok; else
    fail "an entry without a positive mean or samples"; cat "$tmp/fwd" >&2; fi
if [ -d "$STARPU_HOME/.starpu/sampling/codelets" ] && [ ! -e "$HOME/.starpu/sampling/codelets" ]; then ok; else
    fail "models not under STARPU_HOME only"; fi

echo "test_perfmodel: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
