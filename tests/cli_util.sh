# tests/cli_util.sh: shared helpers of the command-line tests, sourced after
# setting prog (the program under test). Provides $tmp (removed on exit),
# ok, fail, expect STATUS PHRASE ARGS... (exit status and a phrase of
# stdout+stderr) and finish NAME (the summary line and the exit status).
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
expect() {
    want=$1 needle=$2; shift 2
    "$prog" "$@" >"$tmp/out" 2>&1; got=$?
    name=$(basename "$prog")
    if [ "$got" -ne "$want" ]; then fail "$name $*: exit $got, expected $want"; tail -5 "$tmp/out" >&2; return; fi
    if ! grep -qF -- "$needle" "$tmp/out"; then fail "$name $*: no '$needle' in output"; tail -5 "$tmp/out" >&2; return; fi
    ok
}
finish() {
    echo "$1: $checks checks, $fails failed"
    [ "$fails" -eq 0 ]
}
