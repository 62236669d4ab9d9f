# tests/valgrind_util.sh: runs test programs under valgrind memcheck, for the
# *_valgrind.sh tests. Sourced; exits 77 when valgrind is absent. Then
# `valgrind_tests NAME...` runs tests/NAME under memcheck (no invalid access,
# no uninitialised value, no definite leak outside tests/valgrind.supp) and
# exits with 0 or 1.
top_builddir=${top_builddir:-.}
srcdir=${srcdir:-.}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "SKIP: valgrind not found (apt-get install valgrind)"
    exit 77
fi
valgrind_tests() {
    # the tests are libtool wrappers around the real binaries
    run=
    [ -x "$top_builddir/libtool" ] && run="$top_builddir/libtool --mode=execute"
    status=0
    for t in "$@"; do
        echo "== valgrind $t"
        $run valgrind -q --error-exitcode=42 --leak-check=full --errors-for-leak-kinds=definite \
            --suppressions="$srcdir/tests/valgrind.supp" \
            "$top_builddir/tests/$t" || { echo "FAIL: $t under valgrind (exit $?)"; status=1; }
    done
    exit $status
}
