#!/bin/sh
# test_plan_json_cli: plans from JSON on the command line.
#  - bsipipe-plan --plan: the hand-written plan of tests/data is validated,
#    simulated and printed; every schedule's export read back and exported
#    again is the same file byte for byte;
#  - bsipipe-train --plan runs the hand-written plan and gives the losses of
#    the Seq1F1B preset on the same model and data (that preset matches the
#    reference trainer: test_engine_equiv; the plan itself: test_plan_engine);
#  - bad plans and conflicting flags: the named error, exit 2, no crash.
set -u
plan="${top_builddir:-.}/apps/bsipipe-plan"
train="${top_builddir:-.}/apps/bsipipe-train"
data="${srcdir:-.}/tests/data/plan-seq1f1b-w2.json"
export STARPU_SILENT=1
prog=$plan
. "${srcdir:-.}/tests/cli_util.sh"

# ---- bsipipe-plan --plan ----
expect 0 "seq1f1b order of 16 compute ops, valid" --plan "$data"
expect 0 "| seq1f1b    | 1 | 2 |    4 |       20.00% |" --plan "$data"
expect 0 "dev1  |" --plan "$data" --draw --width 60
for s in gpipe 1f1b 1f1b-i zb-h1 chimera terapipe seq1f1b seq1f1b-i bsipipe bitpipe; do
    "$plan" --schedule "$s" --w 4 --m 8 --format json >"$tmp/$s.json" 2>"$tmp/err" || fail "$s: export: $(cat "$tmp/err")"
    "$plan" --plan "$tmp/$s.json" --format json >"$tmp/$s.again.json" 2>"$tmp/err" || fail "$s: --plan: $(cat "$tmp/err")"
    if cmp -s "$tmp/$s.json" "$tmp/$s.again.json"; then ok; else fail "$s: export -> --plan -> export differs"; fi
done
# the flops cost model reads the same plan
expect 0 "tokens/s" --plan "$tmp/bsipipe.json" --cost flops

# ---- bad plans: named error, exit 2 ----
bad() { # NAME PHRASE: $tmp/bad.json must be refused with PHRASE
    for p in "$plan" "$train"; do
        "$p" --plan "$tmp/bad.json" >"$tmp/out" 2>&1; got=$?
        if [ "$got" -eq 2 ] && grep -qF -- "$2" "$tmp/out"; then ok; else
            fail "$1: $(basename "$p") exit $got, expected 2 with '$2': $(tail -2 "$tmp/out")"; fi
    done
}
printf '{"format": "bsipipe-plan/1", "config": {"schedule": ' >"$tmp/bad.json"
bad "broken JSON" "bad.json:1:52: malformed JSON"
sed 's/"mb": 1, "sub": 0, "chunk": 0}/"mb": 1, "sub": 0}/' "$data" >"$tmp/bad.json"
bad "missing field" "bad.json: ops[2]: missing field \"chunk\""
sed '/"device": 0, "kind": "B", "mb": 0, "sub": 1/s/"kind": "B"/"kind": "Q"/' "$data" >"$tmp/bad.json"
bad "unknown kind" "bad.json: ops[4]: unknown kind \"Q\""
sed 's/"device": 0, "kind": "F", "mb": 0, "sub": 0, "chunk": 0/"device": 1, "kind": "F", "mb": 0, "sub": 0, "chunk": 0/' \
    "$data" >"$tmp/bad.json"
bad "wrong device" "ops[0]: seq1f1b: F down mb0 s0 c0 runs on device 1, placement says device 0"
grep -v '"device": 1, "kind": "F", "mb": 1, "sub": 1' "$data" >"$tmp/bad.json"
bad "missing op" "compute op F down mb1 s1 c1 is missing from every device"
sed 's/"device": 1, "kind": "B", "mb": 1, "sub": 0, "chunk": 1/"device": 1, "kind": "B", "mb": 1, "sub": 1, "chunk": 1/' \
    "$data" >"$tmp/bad.json"
bad "duplicate op" "B down mb1 s1 c1 appears twice"
sed 's/"layers": 4/"layers": 5/' "$data" >"$tmp/bad.json"
bad "config rule" "config and model: layers L=5 must be a multiple of p*w = 2"
expect 2 "cannot open the plan" --plan "$tmp/none.json"

# ---- explicit flags that disagree with the file ----
expect 2 "--w 4 conflicts with the plan's w=2" --plan "$data" --w 4
expect 2 "--schedule gpipe conflicts with the plan's schedule=seq1f1b" --plan "$data" --schedule gpipe
expect 2 "--layers 8 conflicts with the plan's layers=4" --plan "$data" --layers 8
expect 0 "valid" --plan "$data" --w 2 --k 2 --layers 4
expect 2 "--plan and --preset paper" --plan "$data" --preset paper
# without a model in the file the flags give it
grep -v '"model":' "$data" >"$tmp/nomodel.json"
expect 0 "L=8, hidden=64" --plan "$tmp/nomodel.json" --layers 8 --hidden 64

# ---- bsipipe-train --plan ----
prog=$train
expect 2 "--w 4 conflicts with the plan's w=2" --plan "$data" --w 4
expect 2 "--k 1 conflicts with the plan's k=2" --plan "$data" --k 1
expect 2 "--hidden 64 conflicts with the plan's hidden=32" --plan "$data" --hidden 64
expect 2 "--comm naive conflicts with the plan's comm=bsipipe" --plan "$data" --comm naive
"$train" --plan "$data" --iters 3 --lr 3e-3 >"$tmp/plan.out" 2>&1 || fail "bsipipe-train --plan: $(tail -3 "$tmp/plan.out")"
grep -qF "plan $data: the seq1f1b placement in the file's order" "$tmp/plan.out" && ok ||
    fail "bsipipe-train --plan does not say it runs the file's plan: $(head -2 "$tmp/plan.out")"
"$train" --schedule seq1f1b --w 2 --m 2 --k 2 --layers 4 --hidden 32 --heads 2 --seq 32 --iters 3 --lr 3e-3 \
    >"$tmp/preset.out" 2>&1 || fail "the preset run: $(tail -3 "$tmp/preset.out")"
a=$(grep -E '^iter +[0-9]+/3  loss' "$tmp/plan.out" | awk '{print $4}' | tr '\n' ' ')
b=$(grep -E '^iter +[0-9]+/3  loss' "$tmp/preset.out" | awk '{print $4}' | tr '\n' ' ')
# same model, data and seed; only the order of independent ops differs: the
# losses agree to fp32 rounding (printed with 4 decimals)
if [ -n "$a" ] && [ "$(echo "$a" | wc -w)" -eq 3 ] && awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x); split(b, y);
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 2e-4 * (y[i] < 0 ? -y[i] : y[i]) + 1e-4) exit 1 }
        exit 0 }'; then ok; else fail "--plan losses [$a] differ from the preset's [$b]"; fi
# a plan without a model takes the trainer's flags
expect 0 "summary: 2 iterations" --plan "$tmp/nomodel.json" --layers 4 --hidden 32 --heads 2 --seq 32 --iters 2
# A FIFO with no writer is refused at once, never waited on (issue 35); a
# file past the size bound is refused before it is parsed (a sparse file:
# no disk used).
mkfifo "$tmp/fifo.json"
prog=$plan
expect 2 "fifo.json: not a regular file (a FIFO, a terminal or a device)" --plan "$tmp/fifo.json"
prog=$train
expect 2 "fifo.json: not a regular file" --plan "$tmp/fifo.json"
truncate -s 300M "$tmp/huge.json"
prog=$plan
expect 2 "huge.json: 300 MiB, more than the 256 MiB a plan file may have" --plan "$tmp/huge.json"
# Under the cap, the plan's own config bounds it before the document is parsed whole: a
# w=4 m=8 plan padded to 40 MiB (its config allows 1.6 MiB), one with 100000 extra
# objects, and a file over 1 MiB without a config are refused, naming the bound.
"$plan" --schedule 1f1b --w 4 --m 8 --format json >"$tmp/small.json"
cp "$tmp/small.json" "$tmp/padded.json"
head -c 41943040 /dev/zero | tr '\0' ' ' >>"$tmp/padded.json"
expect 2 "padded.json: $(wc -c <"$tmp/padded.json" | tr -d ' ') bytes, more than a plan of its config (w=4 p=1 k=1 m=8: at most 616 ops) can take (1679360 bytes)" --plan "$tmp/padded.json"
{ sed '$d' "$tmp/small.json"; printf ', "pad": ['; for _ in $(seq 1 100000); do printf '{},'; done; printf '{}]}\n'; } \
    >"$tmp/objects.json"
expect 2 "objects.json: 100" --plan "$tmp/objects.json"
expect 2 "JSON objects, more than a plan of its config (w=4 p=1 k=1 m=8) has ops (at most 616)" --plan "$tmp/objects.json"
head -c 2097152 /dev/zero | tr '\0' ' ' >"$tmp/noconfig.json"
expect 2 "noconfig.json: 2 MiB without a readable \"config\"" --plan "$tmp/noconfig.json"
finish test_plan_json_cli
