#!/bin/sh
# test_train_cli: bsipipe-train end to end on a tiny model (loss printed and
# falling), and clear errors for bad flags and bad data files (missing, empty,
# binary, too short); nothing hangs.
set -u
train="${top_builddir:-.}/apps/bsipipe-train"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
export STARPU_SILENT=1
fails=0 checks=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
expect() {
    want=$1 needle=$2; shift 2
    "$train" "$@" >"$tmp/out" 2>&1; got=$?
    if [ "$got" -ne "$want" ]; then fail "bsipipe-train $*: exit $got, expected $want"; tail -5 "$tmp/out" >&2; return; fi
    if ! grep -qF -- "$needle" "$tmp/out"; then fail "bsipipe-train $*: no '$needle'"; tail -5 "$tmp/out" >&2; return; fi
    ok
}
tiny="--layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 6 --lr 3e-3"
expect 0 "Usage: bsipipe-train" --help
expect 0 "summary: 6 iterations" $tiny
expect 0 "summary: 6 iterations" $tiny --schedule seq1f1b-i --policy eager
expect 0 "summary: 6 iterations" $tiny --schedule zb-h1 --model llama --k 1 --p 1
expect 2 "--w expects an integer" --w many
expect 2 "unknown schedule 'fast'" --schedule fast
expect 2 "unknown or incomplete option" --bogus
expect 1 "nearest valid m" $tiny --m 6
expect 1 "cannot open data file '$tmp/none.txt'" $tiny --data "$tmp/none.txt"
: >"$tmp/empty.txt"
expect 1 "is empty" $tiny --data "$tmp/empty.txt"
printf 'abc\000def\001\002\003' >"$tmp/bin.dat"
expect 1 "looks binary" $tiny --data "$tmp/bin.dat"
printf 'short text' >"$tmp/short.txt"
expect 1 "too short for one sequence" $tiny --data "$tmp/short.txt"
expect 1 "unknown scheduling policy" $tiny --policy nosuch
# The loss falls on a repetitive text.
yes "the pipeline runs forward and backward over every chunk" | head -c 20000 >"$tmp/text.txt"
"$train" $tiny --data "$tmp/text.txt" >"$tmp/out" 2>&1 || fail "training on a text file"
if awk '/^summary/ { split($0, a, "loss "); split(a[2], b, " -> "); exit !(b[2] + 0 < b[1] + 0) }' "$tmp/out"; then ok; else
    fail "loss did not fall: $(grep summary "$tmp/out")"; fi
echo "test_train_cli: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
