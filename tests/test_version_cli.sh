#!/bin/sh
# test_version_cli: every app answers --version with the package version
# (bsipipe.pc's, which make writes from AC_INIT) and exits 0; an unknown
# option and a stray operand exit 2 naming it.
set -u
top="${top_builddir:-.}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
want=$(sed -n 's/^Version: *//p' "$top/bsipipe.pc")
fails=0 checks=0
for app in bsipipe-plan bsipipe-train bsipipe-bench bsipipe-ref bsipipe-kbench; do
    checks=$((checks + 1))
    out=$("$top/apps/$app" --version 2>&1); rc=$?
    if [ "$rc" -ne 0 ] || [ "$out" != "$app (bsipipe) $want" ]; then
        echo "FAIL: $app --version: exit $rc, '$out' (expected '$app (bsipipe) $want')" >&2
        fails=$((fails + 1))
    fi
    checks=$((checks + 1))
    "$top/apps/$app" --no-such-option >"$tmp/out" 2>&1; rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "unknown or incomplete option '--no-such-option'" "$tmp/out"; then
        echo "FAIL: $app --no-such-option: exit $rc, $(head -2 "$tmp/out")" >&2
        fails=$((fails + 1))
    fi
    checks=$((checks + 1))
    "$top/apps/$app" stray >"$tmp/out" 2>&1; rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "unexpected argument 'stray'" "$tmp/out"; then
        echo "FAIL: $app stray: exit $rc, $(head -2 "$tmp/out")" >&2
        fails=$((fails + 1))
    fi
done
# Long options are not abbreviated (getopt_long would take --w for --wd).
checks=$((checks + 1))
"$top/apps/bsipipe-ref" --w abc >"$tmp/out" 2>&1; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "unknown option '--w' (options are not abbreviated: did you mean --wd?)" "$tmp/out"; then
    echo "FAIL: bsipipe-ref --w abc: exit $rc, $(head -2 "$tmp/out")" >&2
    fails=$((fails + 1))
fi
checks=$((checks + 1))
"$top/apps/bsipipe-plan" --sched=bsipipe >"$tmp/out" 2>&1; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "did you mean --schedule?" "$tmp/out"; then
    echo "FAIL: bsipipe-plan --sched=bsipipe: exit $rc, $(head -2 "$tmp/out")" >&2
    fails=$((fails + 1))
fi
echo "test_version_cli: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
