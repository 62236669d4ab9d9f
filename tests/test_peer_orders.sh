#!/bin/sh
# test_peer_orders: zb-v and dualpipev op for op against their peers' orders
# (tests/peer_orders.py, written from torch's ScheduleZBVZeroBubble and
# ScheduleDualPipeV, the latter DeepSeek's dualpipev.py), compared through
# torch's per-rank action CSV (bsipipe-plan --format torch-csv); and the
# export's refusals of plans torch cannot express.
set -u
plan="${top_builddir:-.}/apps/bsipipe-plan"
prog=$plan
. "${srcdir:-.}/tests/cli_util.sh"
peer="${srcdir:-.}/tests/peer_orders.py"
if ! command -v python3 >/dev/null; then
    echo "FAIL: python3 not found (scripts/setup.sh installs it)" >&2
    exit 1
fi

compare() { # schedule w m
    s=$1 w=$2 m=$3
    layers=$((2 * w))
    if ! "$plan" --schedule "$s" --w "$w" --m "$m" --layers "$layers" --format torch-csv >"$tmp/ours" 2>"$tmp/err"; then
        fail "$s w=$w m=$m: export: $(cat "$tmp/err")"; return
    fi
    python3 "$peer" "$s" "$w" "$m" >"$tmp/theirs" || { fail "$s w=$w m=$m: peer_orders.py failed"; return; }
    if cmp -s "$tmp/ours" "$tmp/theirs"; then ok; else
        fail "$s w=$w m=$m: order differs from the peer's"; diff "$tmp/theirs" "$tmp/ours" | head -6 >&2
    fi
}
n=0
for w in 1 2 3 4 5 6 8; do
    for m in 1 2 3 $w $((2 * w - 1)) $((2 * w)) $((3 * w + 1)) $((4 * w)); do
        [ "$m" -ge 1 ] || continue
        compare zb-v "$w" "$m"; n=$((n + 1))
        if [ "$m" -ge $((2 * w)) ]; then compare dualpipev "$w" "$m"; n=$((n + 1)); fi
    done
done
echo "test_peer_orders: $n orders compared with the peers'"
# A one-pipe, whole-micro-batch plan's export names every compute op once.
"$plan" --schedule 1f1b --w 4 --m 8 --format torch-csv >"$tmp/1f1b" 2>&1
[ "$(wc -l <"$tmp/1f1b")" -eq 4 ] && [ "$(tr ',' '\n' <"$tmp/1f1b" | grep -c '^[0-9]*[FB][0-9]*$')" -eq 64 ] && ok ||
    fail "1f1b export: 4 rows of 64 F/B actions expected: $(head -2 "$tmp/1f1b")"
expect 1 "runs two pipes" --schedule bsipipe-zb --format torch-csv
expect 1 "cuts sequences into k = 2 pieces" --schedule seq-zbv --format torch-csv
expect 2 "--format expects 'table', 'json' or 'torch-csv'" --schedule zb-v --format csv
finish test_peer_orders
