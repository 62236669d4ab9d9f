#!/bin/sh
# test_exports: libbsipipe exports only its public API (bsipipe_* symbols).
# An internal symbol left global (generate_fixed, comm_insert, ...) lets an
# application's function of the same name silently replace the library's,
# or the other way round.
set -u
top="${top_builddir:-.}"
lib="$top/.libs/libbsipipe.so"
if [ ! -f "$lib" ]; then
    echo "test_exports: FAIL: $lib not built (a shared build is the default; see docs/building.md)" >&2
    exit 1
fi
if ! command -v nm >/dev/null 2>&1; then
    echo "test_exports: FAIL: nm (binutils) not found" >&2
    exit 1
fi
all=$(nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }')
public=$(printf '%s\n' "$all" | grep -c '^bsipipe_')
others=$(printf '%s\n' "$all" | grep -v '^bsipipe_' | grep -v '^$')
if [ -n "$others" ]; then
    echo "test_exports: FAIL: libbsipipe exports symbols outside its API:" >&2
    printf '%s\n' "$others" | head -20 >&2
    exit 1
fi
if [ "$public" -lt 50 ]; then
    echo "test_exports: FAIL: only $public bsipipe_* symbols exported (expected the whole API)" >&2
    exit 1
fi
echo "test_exports: $public symbols, all bsipipe_*"
