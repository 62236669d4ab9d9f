#!/usr/bin/env bash
# scripts/sanitize-check.sh — build the committed tree (HEAD) with AddressSanitizer and
# UndefinedBehaviorSanitizer in a scratch directory and run a subset of the test suite there:
# the planner, kernels, checkpoints, the apps' command lines, and the engine on StarPU CPU
# workers. .ci/run calls it after `make check`; run it by hand the same way. Needs the StarPU
# that scripts/setup.sh built (.deps/starpu).
#
# Left out: the valgrind tests (valgrind and ASan do not mix), the MPI tests (mpirun), the
# CUDA emulation (long under ASan) and the equivalence sweep (covered by make check).
# Leak detection is off: StarPU (not instrumented) keeps allocations until exit by design; the
# valgrind tests of make check cover our leaks.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${JOBS:-$(nproc)}
STARPU="$ROOT/.deps/starpu"
[ -d "$STARPU" ] || { echo "sanitize-check: no StarPU in $STARPU: run scripts/setup.sh first" >&2; exit 1; }
command -v git >/dev/null || { echo "sanitize-check: git is needed to export HEAD" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bsipipe-sanitize.XXXXXX")
trap 'rm -rf "$work"' EXIT
git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$work"
cd "$work"
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
echo "== sanitize-check: building HEAD with $flags in $work"
autoreconf -fi >autoreconf.log 2>&1 || { tail -20 autoreconf.log; exit 1; }
# No -Werror here: -O1 with the sanitizers changes GCC's flow analysis and its warnings
# (format-truncation guesses); the warnings are checked by the regular -Werror build.
# --disable-fuzzers: the fuzz targets (clang, ASan+UBSan of their own) ran in make check.
./configure --with-starpu="$STARPU" --disable-fuzzers CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
    >configure.log 2>&1 || { tail -30 configure.log; exit 1; }
make -j"$JOBS" >make.log 2>&1 || { tail -40 make.log; exit 1; }

tests="tests/test_partition tests/test_config tests/test_schedules tests/test_comm_order tests/test_mapping
       tests/test_validate_mutations tests/test_bsipipe_bound tests/test_kernel_grad tests/test_kernel_errors
       tests/test_kernel_split tests/test_checkpoint tests/test_plan_cli.sh tests/test_train_cli.sh
       tests/test_train_robust.sh tests/test_version_cli.sh tests/test_engine_run tests/test_transport_data
       tests/test_transport_rendezvous tests/test_transport_deadlock tests/test_transport_reset
       tests/test_policy_order tests/test_engine_starpu_running tests/test_blas_threads
       tests/test_plan_import tests/test_plan_json_cli.sh tests/test_tp_cost tests/test_kernel_tp
       tests/test_critical_path tests/test_engine_tp tests/test_checkpoint_format tests/test_zero_bubble tests/test_shapes tests/test_layout
       tests/test_peer_orders.sh"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== sanitize-check: running $(echo $tests | wc -w) tests under ASan+UBSan"
if ! make -j"$JOBS" check TESTS="$(echo $tests)" >check.log 2>&1; then
    grep -E '^(FAIL|ERROR):' check.log >&2 || true
    for log in tests/*.log; do
        grep -qE 'AddressSanitizer|runtime error|FAIL' "$log" 2>/dev/null || continue
        echo "---- $log ----" >&2
        grep -E -A12 'ERROR: AddressSanitizer|runtime error|FAIL' "$log" | head -40 >&2
    done
    echo "== sanitize-check: FAILED" >&2
    exit 1
fi
grep -E '^# (TOTAL|PASS|SKIP|FAIL)' check.log
echo "== sanitize-check: passed"
