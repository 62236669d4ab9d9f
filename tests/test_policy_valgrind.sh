#!/bin/sh
# test_policy_valgrind.sh: the policy tests under valgrind memcheck (no
# invalid read/write, no use of uninitialised values, no definite leak outside
# StarPU's own one-time ones, see tests/valgrind.supp). Skips (77) only when
# valgrind is absent.
top_builddir=${top_builddir:-.}
srcdir=${srcdir:-.}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: valgrind not found (apt-get install valgrind)"
    exit 77
fi
if [ -x "$top_builddir/libtool" ]; then
    run="$top_builddir/libtool --mode=execute"
else
    run=
fi
status=0
for t in test_policy_unplanned test_policy_wait test_policy_order; do
    echo "== valgrind $t"
    $run valgrind -q --error-exitcode=42 --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="$srcdir/tests/valgrind.supp" \
        "$top_builddir/tests/$t" || { echo "FAIL: $t under valgrind (exit $?)"; status=1; }
done
exit $status
