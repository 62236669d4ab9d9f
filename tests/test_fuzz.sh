#!/bin/sh
# test_fuzz: a short fuzz run of every libFuzzer target (fuzz/, docs/fuzzing.md): each
# replays its seed corpus (regression inputs of past findings included), then runs a
# fixed number of mutated inputs with a fixed seed. Any crash, sanitizer report, leak,
# broken property (the targets abort naming it), hang over 60 s on one input or use of
# over 2 GiB fails the test and keeps the input. The number of runs is fixed, not the
# time; -max_total_time only caps a very slow machine (a run cut short still passes:
# every input it tried kept the properties).
# Knobs: FUZZ_SMOKE_RUNS=N (runs per target; default per target below), FUZZ_SMOKE_CAP=s.
# Skips (77) only when configure found no clang with -fsanitize=fuzzer (or was told
# --disable-fuzzers).
set -u
top="${top_builddir:-.}"
src="${srcdir:-.}"
if [ "${BSIPIPE_FUZZERS:-no}" != yes ]; then
    echo "test_fuzz: SKIP: the fuzzers are not configured (no clang with -fsanitize=fuzzer found, or" \
         "--disable-fuzzers); install clang and libclang-rt-dev and re-run configure"
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/bsipipe-fuzz.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
cap=${FUZZ_SMOKE_CAP:-60}
status=0
for t in ${FUZZ_ALL:-config cli topology checkpoint import}; do
    prog="$top/fuzz/fuzz_$t"
    corpus="$src/fuzz/corpus/$t"
    if [ ! -x "$prog" ]; then
        echo "test_fuzz: FAIL: $prog not built (make fuzzers)" >&2
        status=1
        continue
    fi
    # Runs sized to some seconds each here (2 shared cores): exec/s differ a hundredfold.
    case $t in
    cli) runs=400000 ;;
    checkpoint) runs=60000 ;;
    import) runs=20000 ;;
    config) runs=8000 ;;
    *) runs=6000 ;;
    esac
    runs=${FUZZ_SMOKE_RUNS:-$runs}
    mkdir -p "$work/$t" "$work/artifacts"
    log="$work/$t.log"
    "$prog" -runs="$runs" -seed=1 -max_total_time="$cap" -timeout=60 -rss_limit_mb=2048 \
        -artifact_prefix="$work/artifacts/$t-" "$work/$t" "$corpus" >"$log" 2>&1
    rc=$?
    stats=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | sed 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*//')
    if [ $rc -ne 0 ]; then
        echo "test_fuzz: FAIL: fuzz/fuzz_$t exited $rc; its report:" >&2
        grep -E -A25 'property failed|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | head -60 >&2
        for a in "$work/artifacts/$t-"*; do
            [ -f "$a" ] || continue
            echo "test_fuzz: the input ($(wc -c <"$a") bytes, hex), to add to $corpus once fixed:" >&2
            od -An -tx1 "$a" | head -20 >&2
        done
        status=1
        continue
    fi
    seeds=$(ls "$corpus" | wc -l)
    echo "test_fuzz: fuzz/fuzz_$t: $seeds seeds replayed, $runs runs: ${stats:-no stats}"
done
exit $status
