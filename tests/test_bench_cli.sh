#!/bin/sh
# test_bench_cli: bsipipe-bench on a tiny configuration (a table with every
# selected schedule, CSV and SVG written, a planner rule skipped with a clear
# line, a deadlock reported, not hung) and clear errors for bad flags. No
# assertion on timings.
set -u
bench="${top_builddir:-.}/apps/bsipipe-bench"
export STARPU_SILENT=1
prog=$bench
. "${srcdir:-.}/tests/cli_util.sh"
tiny="--layers 4 --hidden 32 --heads 2 --seq 32 --w 2 --m 4 --reps 2 --warmup 0"
expect 0 "Usage: bsipipe-bench" --help
expect 2 "--reps expects an integer" --reps zero
expect 2 "unknown schedule 'fast'" --schedules 1f1b,fast
expect 2 "names '1f1b' twice" --schedules 1f1b,1f1b
expect 2 "unknown or incomplete option" --bogus
expect 2 "unknown preset 'paper'" --preset paper
expect 2 "--device-tflops expects a number" --emulate --device-tflops -1
expect 2 "unexpected argument 'extra'" extra
expect 1 "cannot write" $tiny --schedules 1f1b --csv "$tmp/no/such/dir.csv"
expect 2 "--trace is not supported with --mpi" --mpi --trace "$tmp/tr"
expect 2 "unknown device kind 'tpu'" --devices tpu
expect 2 "--idle-spin expects" --idle-spin fast
expect 2 "at most 4 values" --idle-spin 1,2,3,4,5
OMPI_COMM_WORLD_SIZE=2 expect 2 "without --mpi" $tiny
expect 2 "--tp expects an integer in 1..64" --tp 100
# Emulated links: bad spellings and combinations are refused with the rule;
# a tiny run prints the traffic per link class with the prediction beside it.
expect 2 "--inter-link expects RATE[,LATENCY]" --inter-link fast
expect 2 "--intra-link expects RATE[,LATENCY]" --emulate --node-devices 2 --intra-link 5,3parsec
expect 2 "--node-devices emulates the links" --node-devices 2
expect 2 "add --node-devices G" --emulate --mapping naive
expect 2 "--mapping expects aware" --emulate --node-devices 2 --mapping sideways
expect 2 "--nic expects per-device" --emulate --node-devices 2 --nic one
"$bench" --layers 8 --hidden 32 --heads 2 --seq 32 --w 4 --m 4 --reps 1 --warmup 0 --emulate --device-tflops 0.001 \
    --node-devices 2 --inter-link 100mbit --mapping both --schedules bsipipe >"$tmp/links" 2>&1 ||
    fail "--node-devices run: $(tail -3 "$tmp/links")"
for m in aware naive; do
    grep -qE "^\| bsipipe \[$m\] \| [0-9]+ \| [0-9]+ \| emulated \| [0-9]+ \(" "$tmp/links" && ok ||
        fail "--mapping both: no measured bsipipe [$m] row"
    grep -qE "^\| bsipipe \[$m\] \| [0-9,/ ]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \|$" \
        "$tmp/links" && ok || fail "--node-devices: no traffic row for bsipipe [$m]"
done
# A table in which no row ran is a failure (exit 1), naming why.
expect 1 "no schedule ran to the end" $tiny --reps 1 --schedules 1f1b --policy nope
# Tensor parallelism: measured rows with --tp 2, the split backward (zb-h1)
# included.
"$bench" $tiny --reps 1 --tp 2 --schedules 1f1b,zb-h1 >"$tmp/tp" 2>&1 || fail "--tp 2 run: $(tail -3 "$tmp/tp")"
for s in 1f1b zb-h1; do
    if grep -qE "^\| $s \| [0-9]+ \| [0-9]+ \| real \| [0-9]+ \(" "$tmp/tp"; then ok; else fail "no measured $s row with --tp 2"; fi
done
# ... and with the collectives as one task per rank
"$bench" $tiny --reps 1 --tp 2 --tp-collectives per-rank --schedules bsipipe >"$tmp/tpr" 2>&1 ||
    fail "--tp-collectives per-rank run: $(tail -3 "$tmp/tpr")"
grep -qE "^\| bsipipe \| [0-9]+ \| [0-9]+ \| real \| [0-9]+ \(" "$tmp/tpr" && ok || fail "no measured row with per-rank collectives"
expect 2 "--tp-collectives expects one-task or per-rank, not 'nccl'" --tp-collectives nccl
# --preset tp (the paper's Table 3, emulated), tiny: the three (w, D_t) rows
# with measured and predicted columns, and the paper's figures beside them.
"$bench" --preset tp --reps 1 --warmup 0 --layers 16 --hidden 32 --heads 4 --seq 32 --device-tflops 1 \
    >"$tmp/tpp" 2>&1 || fail "--preset tp: $(tail -3 "$tmp/tpp")"
for row in "(8, 1)" "(4, 2)" "(2, 4)"; do
    if grep -qE "^\| \($(echo "$row" | tr -d '()')\) \| [0-9]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+% \| [0-9.]+% \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| " "$tmp/tpp"
    then ok; else fail "--preset tp: no measured row $row"; fi
done
grep -q "18.4 GiB (GPT); slowest" "$tmp/tpp" && ok || fail "--preset tp: the paper's figures are missing"
expect 2 "--preset tp sets the tensor-parallel degree itself" --preset tp --tp 2
expect 2 "a multiple of 4 from 8 to 64" --preset tp --w 6

# --idle-breakdown: a second table, a row per schedule with the idle by
# kind of op waited for (ms), the slowdown spread and the slowest device's
# idle share (a percentage of the span, so at most 100).
expect 2 "--idle-breakdown is not supported with --mpi" --mpi --idle-breakdown
"$bench" $tiny --reps 1 --schedules 1f1b,bsipipe --idle-breakdown >"$tmp/idle" 2>&1 ||
    fail "--idle-breakdown: $(tail -3 "$tmp/idle")"
grep -q "^| schedule | F | B | W | SEND | RECV | SYNC/STEP | tail | slowdown spread | slowest device idle | gap after own op µs | gap after a hand-off µs |" "$tmp/idle" &&
    ok || fail "--idle-breakdown: no idle table"
# ... and the runtime's gaps before compute ops, in µs: at w = 2 both kinds occur.
for s in 1f1b bsipipe; do
    line=$(grep -E "^\| $s \|( [0-9]+\.[0-9]+ \|){7} [0-9]+\.[0-9]% \| [0-9]+\.[0-9]% \|( [0-9]+ \|){2}$" "$tmp/idle")
    if [ -n "$line" ] && [ "$(echo "$line" | awk -F'|' '{ sub(/%/, "", $11); print ($11 <= 100) }')" = 1 ]; then ok; else
        fail "--idle-breakdown: no well-formed row for $s"; fi
done

# --calibrate: a prediction on the measured op times for every row, and
# bsipipe's twin running its plan re-timed on them.
expect 2 "--calibrate measures op times in one process" --calibrate --tp 2
"$bench" $tiny --reps 1 --schedules 1f1b,bsipipe --calibrate >"$tmp/cal" 2>&1 || fail "--calibrate: $(tail -3 "$tmp/cal")"
grep -q "predicted (measured ops)" "$tmp/cal" && ok || fail "--calibrate: no measured-ops column"
for s in "1f1b" "bsipipe" "bsipipe, planned on measured ops"; do
    if grep -qE "^\| $s \| [0-9]+ \| [0-9]+ \| real \| [0-9]+ \(.*\| [0-9.]+% \| [0-9.]+ / " "$tmp/cal"; then ok; else
        fail "--calibrate: no measured row with a measured-ops prediction for '$s'"; fi
done

# Real compute: three schedules, CSV and SVG.
"$bench" $tiny --schedules seq1f1b,seq1f1b-i,bsipipe --csv "$tmp/b.csv" --svg "$tmp/b.svg" >"$tmp/out" 2>&1 ||
    fail "tiny real run: $(tail -3 "$tmp/out")"
for s in seq1f1b seq1f1b-i bsipipe; do
    if grep -qE "^\| $s \| [0-9]+ \| [0-9]+ \| real \| [0-9]+ \(" "$tmp/out"; then ok; else fail "no measured row for $s"; fi
done
if grep -q "REAL COMPUTE" "$tmp/out"; then ok; else fail "mode not in the title"; fi
# Each row's bubble decomposed: measured, replayed on each op's own time,
# the runtime's points (measured minus replayed: an ideal runtime is never
# slower than the run, so never negative) and the plan on mean op times.
for s in seq1f1b seq1f1b-i bsipipe; do
    line=$(grep -E "^\| $s \| [0-9]+ \| [0-9]+ \| real \| [0-9]+ \(" "$tmp/out")
    if echo "$line" | awk -F'|' '$7 ~ /^ [0-9.]+% $/ && $8 ~ /^ [0-9.]+% $/ && $9 ~ /^ [+-][0-9.]+ $/ &&
        $10 ~ /^ [0-9.]+% $/ && $9 + 0 >= 0 { found = 1 } END { exit !found }'; then ok; else
        fail "$s: no replayed bubble and runtime's points, or negative points: $line"; fi
done
if grep -qE '^\| bsipipe .*\| 1\.00x \|' "$tmp/out" || grep -qE '^\| seq1f1b \|.*\| 1\.00x \|' "$tmp/out"; then ok; else
    fail "no 1.00x speedup of a baseline against itself"; fi
if [ "$(wc -l <"$tmp/b.csv")" -eq 4 ] && head -1 "$tmp/b.csv" | grep -q '^preset,config,mode'; then ok; else
    fail "CSV: expected a header and 3 rows"; fi
if grep -q '<svg' "$tmp/b.svg" && grep -q '</svg>' "$tmp/b.svg" && [ "$(grep -c '<rect x=' "$tmp/b.svg")" -eq 3 ]; then
    ok; else fail "SVG: expected 3 bars"; fi
if command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$tmp/b.svg"; then ok; else
        fail "SVG does not parse"; fi
fi

# --overhead: the floor and the engine side by side, every row printed, both tables; the
# engine's SENDs do not wait on workers (the transport's count is 0), the old blocking ones
# are a row of their own. Nothing is asserted on the times.
expect 2 "--overhead runs alone" --overhead --preset devices
"$bench" --overhead --layers 4 --hidden 32 --heads 2 --seq 32 --w 2 --m 4 --reps 1 --iters 1 \
    --device-tflops 0.01 >"$tmp/out" 2>&1 || fail "--overhead: $(tail -3 "$tmp/out")"
for row in "StarPU floor as StarPU 1.3 ships it" "StarPU floor:" "+ StarPU task profiling" "+ per-iteration buffers" "engine (--emulate)" \
    "engine, old blocking SEND"; do
    if [ "$(grep -cF "| $row" "$tmp/out")" -eq 2 ]; then ok; else fail "--overhead: row '$row' not in both tables"; fi
done
if grep -E '^\| engine \(--emulate\)' "$tmp/out" | awk -F'|' '{ if ($13 + 0 != 0) bad = 1 } END { exit bad }'; then ok; else
    fail "--overhead: the engine's SENDs waited on workers"; fi

# A schedule whose rules m breaks is skipped with the planner's sentence; the run goes on.
expect 0 "skipping chimera" --emulate $tiny --w 4 --m 3 --layers 8 --schedules 1f1b,chimera
if grep -qE '^\| 1f1b \| .* emulated \| [0-9]+ \(' "$tmp/out" && grep -q "EMULATED" "$tmp/out"; then ok; else
    fail "emulated 1f1b row missing after the skip"; fi

# --idle-spin auto,0: each schedule once per value, labelled, and what auto chose.
expect 0 "idle spin (auto):" $tiny --schedules bsipipe --idle-spin auto,0
if grep -qE '^\| bsipipe \[spin auto\] \|.* \| [0-9]+ \(' "$tmp/out" &&
    grep -qE '^\| bsipipe \[sleep\] \|.* \| [0-9]+ \(' "$tmp/out"; then ok; else
    fail "--idle-spin auto,0: the two bsipipe rows are missing"; fi

# --sends eager,tasks: each schedule once per mode, labelled.
expect 0 "task sends" $tiny --schedules bsipipe --sends eager,tasks
if grep -qE '^\| bsipipe \[eager sends\] \|.* \| [0-9]+ \(' "$tmp/out" &&
    grep -qE '^\| bsipipe \[task sends\] \|.* \| [0-9]+ \(' "$tmp/out"; then ok; else
    fail "--sends eager,tasks: the two bsipipe rows are missing"; fi
expect 2 "--sends: 'fast' is not one of eager, tasks" --sends fast
expect 2 "--sends: 'eager' is not one of eager, tasks" --sends eager,eager
expect 2 "--overhead measures one send mode" --overhead --sends eager,tasks

# Every schedule refused by the planner: nothing measured is an error, not a silent exit 0.
expect 1 "nothing was measured" --schedules bitpipe --w 3 --emulate --layers 12 --hidden 32 --heads 2 --seq 32 --m 6 \
    --reps 1
# Ablation: the naive order deadlocks and is reported as such (watchdog), not hung.
expect 0 "deadlock" --preset ablation --emulate --layers 8 --hidden 32 --heads 2 --seq 32 --m 4 --reps 1 --warmup 0 \
    --watchdog 1
if grep -qE '^\| bsipipe, naive .*DEADLOCK: .*deadlock' "$tmp/out"; then ok; else fail "naive order not reported as a deadlock"; fi
# The paper's w/o F-B overlap row runs (a throughput, not a deadlock).
if grep -qE '^\| bsipipe, no reversal .* \| emulated \| [0-9]+ \(' "$tmp/out"; then ok; else
    fail "ablation: the no-reversal row did not run"; fi
# Blocking receives: the default order runs, no-reversal deadlocks and is caught.
if grep -qE '^\| bsipipe, blocking receives .* \| emulated \| [0-9]+ \(' "$tmp/out"; then ok; else
    fail "ablation: the blocking-receive row did not run"; fi
if grep -qE '^\| no reversal, blocking receives .*DEADLOCK: .*deadlock' "$tmp/out"; then ok; else
    fail "ablation: no-reversal with blocking receives not reported as a deadlock"; fi
# Posting ahead turned off: the default order still runs with receives in place.
if grep -qE '^\| bsipipe, receives posted in place .* \| emulated \| [0-9]+ \(' "$tmp/out"; then ok; else
    fail "ablation: the receives-in-place row did not run"; fi
# ... and the mapping rows are predictions, said so, with a number each.
if grep -q "PREDICTED ONLY" "$tmp/out" && grep -qE '^\| topology-aware .*\| [0-9.]+% \| [0-9.e-]+ \|' "$tmp/out" &&
    grep -qE '^\| naive \(consecutive .*\| [0-9.]+% \| [0-9.e-]+ \|' "$tmp/out"; then ok; else
    fail "ablation: no predicted rows for topology-aware and naive mapping"; fi
# --trace DIR: one untimed traced run per schedule in DIR/<schedule>/; its
# trace.json holds every op of the plan once, the SVGs parse; the FxT files
# (paje.trace and tasks.rec naming the codelets, ops.tsv and dag.dot the ops) whenever
# starpu_fxt_tool is found.
: >"$tmp/afile"
expect 1 "--trace" $tiny --schedules 1f1b --trace "$tmp/afile/sub"
tool="${STARPU_FXT_TOOL:-}"
[ -n "$tool" ] && [ -x "$tool" ] || tool="${STARPU_BINDIR:-}/starpu_fxt_tool"
[ -x "$tool" ] || tool=$(command -v starpu_fxt_tool 2>/dev/null) || tool=
[ -n "$tool" ] && export STARPU_FXT_TOOL="$tool"
expect 0 "trace: bsipipe: $tmp/tr/bsipipe" --emulate $tiny --reps 1 --schedules 1f1b,bsipipe --trace "$tmp/tr"
plan="${top_builddir:-.}/apps/bsipipe-plan"
for s in 1f1b bsipipe; do
    d="$tmp/tr/$s"
    if [ -n "$tool" ]; then
        if [ -s "$d/paje.trace" ] && grep -q "bsipipe_fwd" "$d/paje.trace" &&
            [ "$(grep -c '^Name: bsipipe_fwd' "$d/tasks.rec")" -gt 0 ] &&
            grep -q "	F down mb0 s0 c0	" "$d/ops.tsv" && grep -q 'label="F down mb0 s0 c0"' "$d/dag.dot"; then ok
        else fail "$s: no FxT trace (paje.trace, tasks.rec, ops.tsv, dag.dot naming the ops) in $d"; fi
    fi
    if ! command -v python3 >/dev/null 2>&1; then continue; fi
    "$plan" --schedule $s --w 2 --layers 4 --hidden 32 --heads 2 --seq 32 --m 4 --format json >"$tmp/plan.json" 2>&1 ||
        { fail "bsipipe-plan $s"; continue; }
    if python3 - "$tmp/plan.json" "$d" <<'PY'
import json, sys, xml.dom.minidom
plan = json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2] + "/trace.json"))
got = sorted((e["args"]["device"], e["args"]["index"]) for e in trace["traceEvents"] if e.get("ph") == "X")
want = sorted((o["device"], o["index"]) for o in plan["ops"])
assert got == want, "trace.json ops differ from the plan: %d against %d" % (len(got), len(want))
assert trace["otherData"]["emulated"] is True
for f in ("timeline.svg", "planned.svg"):
    xml.dom.minidom.parse(sys.argv[2] + "/" + f)
PY
    then ok; else fail "$s: trace.json or the SVGs in $d"; fi
done

finish test_bench_cli
