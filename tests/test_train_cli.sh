#!/bin/sh
# test_train_cli: bsipipe-train end to end on a tiny model (loss printed and
# falling), and clear errors for bad flags and bad data files (missing, empty,
# binary, too short); nothing hangs.
set -u
train="${top_builddir:-.}/apps/bsipipe-train"
export STARPU_SILENT=1
prog=$train
. "${srcdir:-.}/tests/cli_util.sh"
tiny="--layers 8 --hidden 32 --heads 2 --seq 32 --m 8 --iters 6 --lr 3e-3"
expect 0 "Usage: bsipipe-train" --help
expect 0 "summary: 6 iterations" $tiny
expect 0 "summary: 6 iterations" $tiny --schedule seq1f1b-i --policy eager
expect 0 "summary: 6 iterations" $tiny --schedule zb-h1 --model llama --k 1 --p 1
expect 2 "--w expects an integer" --w many
expect 0 "summary: 6 iterations" $tiny --recv blocking
expect 1 "deadlock under rendezvous send/recv with blocking receives" $tiny --recv blocking --comm no-reversal
expect 2 "--recv expects posted" --recv sometimes
expect 2 "unknown schedule 'fast'" --schedule fast
expect 2 "unknown or incomplete option" --bogus
expect 1 "nearest valid m" $tiny --m 1
expect 1 "cannot open data file '$tmp/none.txt'" $tiny --data "$tmp/none.txt"
: >"$tmp/empty.txt"
expect 1 "is empty" $tiny --data "$tmp/empty.txt"
printf 'abc\000def\001\002\003' >"$tmp/bin.dat"
expect 1 "looks binary" $tiny --data "$tmp/bin.dat"
printf 'short text' >"$tmp/short.txt"
expect 1 "too short for one sequence" $tiny --data "$tmp/short.txt"
expect 1 "unknown scheduling policy" $tiny --policy nosuch
# Tensor parallelism: --tp 2 trains the same model to the same printed losses
# (docs/tensor-parallel.md; tests/test_engine_tp compares every parameter);
# degrees that do not divide the model are refused with the rule and the fix.
"$train" $tiny --iters 2 >"$tmp/tp1" 2>&1 || fail "run with --tp 1"
"$train" $tiny --iters 2 --tp 2 >"$tmp/tp2" 2>&1 || fail "run with --tp 2: $(tail -2 "$tmp/tp2")"
grep -q "tensor parallelism D_t=2" "$tmp/tp2" && ok || fail "--tp 2 does not say so"
a=$(grep -E '^iter +[12]/2 ' "$tmp/tp1" | awk '{print $3, $4, $5, $6}')
b=$(grep -E '^iter +[12]/2 ' "$tmp/tp2" | awk '{print $3, $4, $5, $6}')
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "--tp 2 losses differ from --tp 1: [$b] vs [$a]"; fi
expect 2 "--tp expects an integer in 1..64" $tiny --tp 0
expect 1 "does not divide the number of heads (2)" $tiny --tp 4
expect 1 "valid D_t here: 1, 2" $tiny --tp 4
expect 1 "does not divide the vocabulary size (256)" --layers 8 --hidden 48 --heads 6 --seq 36 --m 8 --iters 1 --tp 3
expect 1 "does not divide the FFN width (66)" --layers 8 --hidden 32 --heads 4 --ffn 66 --seq 32 --m 8 --iters 1 --tp 4
expect 1 "must be a multiple of D_t=2; nearest valid S: 30 or 32" $tiny --seq 31 --tp 2
# The split backward (zb-h1): the same printed losses as --tp 1.
zb="--schedule zb-h1 --k 1 --p 1"
"$train" $tiny --iters 2 $zb >"$tmp/zb1" 2>&1 || fail "zb-h1 with --tp 1"
"$train" $tiny --iters 2 $zb --tp 2 >"$tmp/zb2" 2>&1 || fail "zb-h1 with --tp 2: $(tail -2 "$tmp/zb2")"
a=$(grep -E '^iter +[12]/2 ' "$tmp/zb1" | awk '{print $3, $4, $5, $6}')
b=$(grep -E '^iter +[12]/2 ' "$tmp/zb2" | awk '{print $3, $4, $5, $6}')
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "zb-h1 --tp 2 losses differ from --tp 1: [$b] vs [$a]"; fi
# Emulated TP: each rank holds its share of the planner's op time
# (tests/test_engine_tp checks the shares); the bubble is reported against
# the prediction.
expect 0 "FLOPs costs of the emulated device) [EMULATED]" $tiny --tp 2 --emulate --iters 2
# Resume continues bit-identically: iterations 4-6 after a restart print the
# same losses as an uninterrupted run (the stopped run keeps the 6-iteration
# rate schedule: --lr-decay-iters).
"$train" $tiny >"$tmp/straight" 2>&1 || fail "straight run"
"$train" $tiny --iters 3 --lr-decay-iters 6 --checkpoint "$tmp/ck" >/dev/null 2>&1 || fail "run with checkpoints"
"$train" $tiny --checkpoint "$tmp/ck" --resume >"$tmp/resumed" 2>&1 || fail "resume: $(tail -2 "$tmp/resumed")"
a=$(grep -E '^iter +[456]/6' "$tmp/straight" | awk '{print $3, $4, $5}')
b=$(grep -E '^iter +[456]/6' "$tmp/resumed" | awk '{print $3, $4, $5}')
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "resumed losses differ: [$a] vs [$b]"; fi
# Checkpoints hold the whole-model vectors, so a run saved with --tp 2
# resumes with --tp 1 and one saved with --tp 1 resumes with --tp 2, with the
# uninterrupted --tp 1 run's printed losses and gradient norms.
a=$(grep -E '^iter +[456]/6' "$tmp/straight" | awk '{print $4, $6}')
for ab in 2:1 1:2; do
    ta=${ab%:*} tb=${ab#*:}
    rm -rf "$tmp/cktp"
    "$train" $tiny --iters 3 --lr-decay-iters 6 --tp $ta --checkpoint "$tmp/cktp" >/dev/null 2>&1 ||
        fail "run with --tp $ta and checkpoints"
    "$train" $tiny --tp $tb --checkpoint "$tmp/cktp" --resume >"$tmp/resumed-tp" 2>&1 ||
        fail "resume --tp $ta with --tp $tb: $(tail -2 "$tmp/resumed-tp")"
    b=$(grep -E '^iter +[456]/6' "$tmp/resumed-tp" | awk '{print $4, $6}')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "saved with --tp $ta, resumed with --tp $tb: [$b] vs [$a]"; fi
done
expect 2 "--resume needs --checkpoint DIR" $tiny --resume
expect 2 "--checkpoint with --emulate" $tiny --emulate --checkpoint "$tmp/ck"
# Scale-out flags (the runs themselves are in test_mpi.sh).
expect 2 "it needs --mpi" $tiny --naive-mapping
expect 2 "--trace is not supported with --mpi" $tiny --mpi --trace "$tmp/tr"
OMPI_COMM_WORLD_SIZE=2 expect 2 "without --mpi" $tiny
head -c 100 "$tmp/ck/checkpoint.bin" >"$tmp/ck/cut" && mkdir -p "$tmp/ck2" && mv "$tmp/ck/cut" "$tmp/ck2/checkpoint.bin"
expect 1 "cannot resume" $tiny --checkpoint "$tmp/ck2" --resume
# Emulated device time: 16 devices on this machine; every line says so.
expect 0 "[EMULATED]" --emulate --w 16 --layers 32 --hidden 32 --heads 2 --seq 32 --m 16 --iters 1
# The loss falls on a repetitive text.
yes "the pipeline runs forward and backward over every chunk" | head -c 20000 >"$tmp/text.txt"
"$train" $tiny --data "$tmp/text.txt" >"$tmp/out" 2>&1 || fail "training on a text file"
if awk '/^summary/ { split($0, a, "loss "); split(a[2], b, " -> "); exit !(b[2] + 0 < b[1] + 0) }' "$tmp/out"; then ok; else
    fail "loss did not fall: $(grep summary "$tmp/out")"; fi
# The main job of the README (defaults, 30 iterations): no iteration's loss above the first
# (at the old default lr 3e-3 it jumped from 3.08 to 11.13 at iteration 14).
"$train" >"$tmp/main" 2>&1 || fail "the main job failed: $(tail -3 "$tmp/main")"
if awk '/^iter/ && !/validation/ { for (i = 1; i < NF; i++) if ($i == "loss") { v = $(i + 1) + 0; if (n++ == 0) first = v;
        else if (v > first) bad = 1 } } END { exit !(n == 30 && !bad) }' "$tmp/main"; then ok; else
    fail "the main job's loss rose above its first iteration: $(grep -c '^iter' "$tmp/main") lines, $(grep '^iter' "$tmp/main" | awk '{print $4}' | tr '\n' ' ')"; fi
# ... and it reports a validation loss on held-out text every 10 iterations and in its summary.
if [ "$(grep -c '^iter .*validation loss [0-9]' "$tmp/main")" -eq 3 ] &&
    grep -q '^summary: .*, validation loss [0-9.]*,' "$tmp/main"; then ok; else
    fail "the main job printed no validation loss: $(grep -E 'validation|summary' "$tmp/main" | head -5)"; fi
expect 2 "--eval-every expects" $tiny --eval-every -1
expect 2 "--lr-decay-style expects constant, linear or cosine" $tiny --lr-decay-style steps
expect 2 "--min-lr 0.1 is above --lr" $tiny --min-lr 0.1
# The rate: a warm-up over 2 iterations reaches lr at the second, then a cosine fall to --min-lr.
"$train" $tiny --lr-warmup-iters 2 --min-lr 1e-4 >"$tmp/sched" 2>&1 || fail "scheduled run"
if [ "$(grep -E '^iter +[0-9]+/6  loss' "$tmp/sched" | awk '{print $8}' | tr '\n' ' ')" = \
     "1.50e-03 3.00e-03 3.00e-03 2.28e-03 8.25e-04 1.00e-04 " ]; then ok; else
    fail "lr schedule: $(grep -E '^iter' "$tmp/sched" | awk '{print $8}' | tr '\n' ' ')"; fi
# Megatron's flags: AdamW's hyper-parameters, a log interval, a JSON-lines log with tokens/s,
# TFLOP/s and MFU against a stated peak, a save interval; their ranges and pairings refused.
expect 2 "--adam-beta1 expects" $tiny --adam-beta1 1
expect 2 "--adam-eps expects" $tiny --adam-eps 0
expect 2 "--clip-grad expects" $tiny --clip-grad -1
expect 2 "--save-interval needs --checkpoint" $tiny --save-interval 2
expect 2 "--peak-tflops gives the MFU of --log-json" $tiny --peak-tflops 100
"$train" $tiny --weight-decay 0 --adam-beta1 0.8 --adam-beta2 0.99 --adam-eps 1e-6 --clip-grad 0.5 \
    --log-interval 4 --log-json "$tmp/log.jsonl" --peak-tflops 1 --eval-every 3 >"$tmp/flags" 2>&1 ||
    fail "run with the optimizer and log flags: $(tail -2 "$tmp/flags")"
# lines printed: iterations 1 (the first), 4 and 6 (the last); the log has all 6
if [ "$(grep -E '^iter +[0-9]+/6  loss' "$tmp/flags" | awk '{print $2}' | tr '\n' ' ')" = "1/6 4/6 6/6 " ]; then ok; else
    fail "--log-interval 4 printed: $(grep -E '^iter' "$tmp/flags" | awk '{print $2}' | tr '\n' ' ')"; fi
if python3 - "$tmp/log.jsonl" "$tmp/flags" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
text = [l for l in open(sys.argv[2]) if l.startswith("iter ") and " loss " in l and "validation" not in l]
ok = len(rows) == 6 and [r["iteration"] for r in rows] == list(range(1, 7))
ok = ok and all(r["tokens_per_s"] > 0 and r["tflops"] > 0 and abs(r["mfu"] - r["tflops"] / 4) < 1e-9 for r in rows)
ok = ok and [r["validation_loss"] is not None for r in rows] == [False, False, True, False, False, True]
# the printed loss of iteration 4 is the logged one
ok = ok and abs(float(text[1].split()[3]) - rows[3]["loss"]) < 1e-4
sys.exit(0 if ok else 1)
PY
then ok; else fail "--log-json: $(head -2 "$tmp/log.jsonl")"; fi
# another AdamW weight decay trains differently (the flag reaches the optimizer)
"$train" $tiny --weight-decay 0 --iters 3 --eval-every 0 >"$tmp/wd0" 2>&1
"$train" $tiny --weight-decay 0.5 --lr 3e-2 --iters 3 --eval-every 0 >"$tmp/wd5" 2>&1
if [ "$(grep '^parameters:' "$tmp/wd0")" != "$(grep '^parameters:' "$tmp/wd5")" ] && grep -q '^parameters:' "$tmp/wd0"; then ok
else fail "--weight-decay changed nothing"; fi
# --save-interval 2 over 5 iterations: saves after 2 and 4, and after the last (5)
"$train" $tiny --iters 5 --eval-every 0 --checkpoint "$tmp/ck-si" --save-interval 2 >"$tmp/si" 2>&1 ||
    fail "save interval: $(tail -2 "$tmp/si")"
expect 1 "checkpoint.bin holds 5 iterations and --iters is 5" $tiny --iters 5 --checkpoint "$tmp/ck-si" --resume
# --keep-last 2: DIR/iter_0000004 and iter_0000005 (hard links of the saves, the older ones
# removed); a user's file keeps its directory; --resume-from a kept one continues bit for bit.
"$train" $tiny --iters 3 --eval-every 0 --checkpoint "$tmp/ck-kl" --keep-last 2 >"$tmp/kl" 2>&1 ||
    fail "keep-last: $(tail -2 "$tmp/kl")"
echo mine >"$tmp/ck-kl/iter_0000002/notes.txt"
"$train" $tiny --iters 5 --eval-every 0 --checkpoint "$tmp/ck-kl" --keep-last 2 --resume >"$tmp/kl" 2>&1 ||
    fail "keep-last, resumed: $(tail -2 "$tmp/kl")"
kept=$(cd "$tmp/ck-kl" && ls -d iter_* | tr '\n' ' ')
if [ "$kept" = "iter_0000002 iter_0000004 iter_0000005 " ] && [ -f "$tmp/ck-kl/iter_0000002/notes.txt" ] &&
   [ ! -e "$tmp/ck-kl/iter_0000002/checkpoint.bin" ] && [ ! -e "$tmp/ck-kl/iter_0000003" ] &&
   [ "$(stat -c %i "$tmp/ck-kl/checkpoint.bin")" = "$(stat -c %i "$tmp/ck-kl/iter_0000005/checkpoint.bin")" ]; then ok
else fail "--keep-last 2 left [$kept]: $(ls -R "$tmp/ck-kl" | tr '\n' ' ')"; fi
"$train" $tiny --iters 5 --eval-every 0 --resume-from "$tmp/ck-kl/iter_0000004" --checkpoint "$tmp/ck-rf" \
    >"$tmp/rf" 2>&1 || fail "resume-from: $(tail -2 "$tmp/rf")"
if grep -q "resumed from $tmp/ck-kl/iter_0000004/checkpoint.bin after iteration 4" "$tmp/rf" &&
   [ "$(grep '^parameters:' "$tmp/rf")" = "$(grep '^parameters:' "$tmp/kl")" ]; then ok
else fail "--resume-from iter_0000004: $(grep -E '^(resumed|parameters)' "$tmp/rf" "$tmp/kl")"; fi
expect 1 "which the first save would replace with a continuation of" $tiny \
    --resume-from "$tmp/ck-kl/iter_0000004" --checkpoint "$tmp/ck-rf"
expect 2 "--keep-last needs --checkpoint" $tiny --keep-last 2
expect 2 "--keep-last expects" $tiny --checkpoint "$tmp/ck-x" --keep-last 0
expect 2 "--resume and --resume-from both" $tiny --checkpoint "$tmp/ck-kl" --resume --resume-from "$tmp/ck-kl"
expect 1 "no checkpoint at $tmp/none/checkpoint.bin" $tiny --resume-from "$tmp/none"
# Layers placed by --layout: 30 layers on w = 8 by cost with m = 12; a checkpoint of one layout
# continues under another bit for bit (1F1B's order and arithmetic do not depend on the layout).
lay="--layers 10 --hidden 32 --heads 2 --seq 32 --m 8 --lr 3e-3 --eval-every 0 --schedule 1f1b --lr-decay-iters 5"
expect 0 "layers per chunk: Et*3|(t*4|)*6t*3L" --layers 30 --hidden 32 --heads 2 --seq 32 --w 8 --m 12 --iters 2 \
    --schedule 1f1b --layout auto
"$train" $lay --iters 5 --layout 'Et*3|t*3|t*2|t*2L' >"$tmp/lay-b" 2>&1 || fail "layout B: $(tail -2 "$tmp/lay-b")"
"$train" $lay --iters 3 --layout auto --checkpoint "$tmp/ck-lay" >"$tmp/lay-a" 2>&1 || fail "layout A: $(tail -2 "$tmp/lay-a")"
"$train" $lay --iters 5 --layout 'Et*3|t*3|t*2|t*2L' --checkpoint "$tmp/ck-lay" --resume >"$tmp/lay-ab" 2>&1 ||
    fail "layout A resumed under B: $(tail -2 "$tmp/lay-ab")"
if grep -q "resumed from" "$tmp/lay-ab" && grep -q '^parameters:' "$tmp/lay-b" &&
   [ "$(grep '^parameters:' "$tmp/lay-ab")" = "$(grep '^parameters:' "$tmp/lay-b")" ]; then ok
else fail "resumed under another layout: $(grep -E '^(resumed|parameters)' "$tmp/lay-ab" "$tmp/lay-b")"; fi
# ... and under tensor parallelism (each rank's shards cut from the uneven chunks): --tp 2's printed losses
"$train" $lay --iters 2 --layout auto --tp 2 >"$tmp/lay-tp2" 2>&1 || fail "--layout auto --tp 2: $(tail -2 "$tmp/lay-tp2")"
"$train" $lay --iters 2 --layout auto >"$tmp/lay-tp1" 2>&1 || fail "--layout auto --tp 1"
a=$(grep -E '^iter +[12]/2 ' "$tmp/lay-tp1" | awk '{print $3, $4, $5, $6}')
b=$(grep -E '^iter +[12]/2 ' "$tmp/lay-tp2" | awk '{print $3, $4, $5, $6}')
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else fail "--layout auto --tp 2 losses differ from --tp 1: [$b] vs [$a]"; fi
expect 1 "layout \"Et*3|t*3L\", position 9: 2 stages, but the plan has p*w = 4 chunks" $lay --layout 'Et*3|t*3L'
expect 1 "nearest valid L: 8 or 12, or place them with --layout auto" $lay
# The header line reaches a file or a pipe at once, not when the first (slow) iteration ends.
"$train" --emulate --device-tflops 0.00005 --layers 8 --hidden 64 --heads 2 --seq 64 --m 4 --iters 50 \
    >"$tmp/header" 2>&1 &
pid=$!
seen=
for _ in $(seq 1 100); do
    if grep -q "^bsipipe-train: GPT model" "$tmp/header"; then seen=1; break; fi
    sleep 0.1
done
if [ -n "$seen" ] && ! grep -q "^iter" "$tmp/header"; then ok; else
    fail "the header line was not in the output before the first iteration ended: $(head -2 "$tmp/header")"; fi
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
finish test_train_cli
