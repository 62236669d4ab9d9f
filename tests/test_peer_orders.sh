#!/bin/sh
# test_peer_orders: zb-v, dualpipev and zb-i op for op against their peers'
# orders (tests/peer_orders.py, written from torch's ScheduleZBVZeroBubble,
# ScheduleDualPipeV, the latter DeepSeek's dualpipev.py, and
# ScheduleInterleavedZeroBubble), compared through
# torch's per-rank action CSV (bsipipe-plan --format torch-csv), and
# dualpipe against DeepSeek's dualpipe.py through the JSON export; torch's CSV
# read back (--plan FILE.csv), round trips, its compute_comms SEND/RECV
# checked against the derived transfers, malformed actions; and the
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
# DualPipe (two pipes: no torch CSV) through the JSON export.
for w in 2 4 6 8; do
    for m in $((2 * w)) $((2 * w + 2)) $((3 * w + w % 4)) $((4 * w)); do
        "$plan" --schedule dualpipe --w $w --m $m --layers $((3 * w)) --format json >"$tmp/dp.json" 2>"$tmp/err" ||
            { fail "dualpipe w=$w m=$m: export: $(cat "$tmp/err")"; continue; }
        python3 "$peer" --json "$tmp/dp.json" >"$tmp/ours"
        python3 "$peer" dualpipe $w $m >"$tmp/theirs"
        if cmp -s "$tmp/ours" "$tmp/theirs"; then ok; else
            fail "dualpipe w=$w m=$m: order differs from DeepSeek's"; diff "$tmp/theirs" "$tmp/ours" | head -6 >&2
        fi
        n=$((n + 1))
    done
done
# 1f1b-i against Megatron's interleaved schedule (any m >= w: micro-batch groups of the smallest
# size Megatron accepts, w when w divides m, as its default).
compare_p() { # schedule w p m whose -- the peer's arguments; a peer that refuses the m skips it
    s=$1 w=$2 p=$3 m=$4 whose=$5
    shift 5
    python3 "$peer" "$@" >"$tmp/theirs" 2>/dev/null || return 0
    "$plan" --schedule "$s" --w "$w" --p "$p" --m "$m" --layers $((p * w)) --format torch-csv >"$tmp/ours" \
        2>"$tmp/err" || { fail "$s w=$w p=$p m=$m: export: $(cat "$tmp/err")"; return 0; }
    if cmp -s "$tmp/ours" "$tmp/theirs"; then ok; else
        fail "$s w=$w p=$p m=$m: order differs from $whose"; diff "$tmp/theirs" "$tmp/ours" | head -4 >&2
    fi
    n=$((n + 1))
}
n0=$n
for w in 2 3 4 6 8; do
    for p in 2 3; do
        for m in $w $((w + 1)) $((3 * w / 2)) $((2 * w - 1)) $((2 * w)) $((3 * w + 1)); do
            compare_p 1f1b-i $w $p $m "Megatron's" 1f1b-i $w $m $p 0
        done
    done
done
[ $((n - n0)) -eq 60 ] || fail "$((n - n0)) of 60 1f1b-i orders compared: Megatron's transcription refused some"
# zb-i against torch's ScheduleInterleavedZeroBubble (any m that is a multiple of its rounds,
# max(1, m / w), m < w included).
for w in 1 2 3 4 5 8; do
    for p in 2 3; do
        for m in 1 3 $w $((w + 1)) $((2 * w - 1)) $((2 * w)) $((3 * w)) $((4 * w + 2)); do
            compare_p zb-i $w $p $m "torch's" zb-i $w $m $p
        done
    done
done
echo "test_peer_orders: $n orders compared with the peers'"
# torch's own notation (a full backward B, overlapped pairs): for w = 4,
# m = 10 this is byte for byte torch's test artifact dualpipev_4rank_10mb.csv.
# It imports (--plan *.csv), validates, simulates to dualpipev's bubble and
# exports back to the same order.
python3 "$peer" --torch-notation dualpipev 4 10 >"$tmp/torch.csv"
bubble() { "$plan" "$@" 2>&1 | awk -F'|' '/^\| [a-z]/ && $6 ~ /%/ { gsub(/ /, "", $6); print $6; exit }'; }
want=$(bubble --schedule dualpipev --w 4 --m 10 --layers 8)
got=$(bubble --plan "$tmp/torch.csv" --layers 8)
[ -n "$want" ] && [ "$want" = "$got" ] && ok || fail "torch's dualpipev CSV: bubble '$got', dualpipev's '$want'"
want_seq=$want
"$plan" --plan "$tmp/torch.csv" --layers 8 --format torch-csv >"$tmp/back.csv" 2>&1
python3 "$peer" dualpipev 4 10 >"$tmp/norm.csv"
cmp -s "$tmp/back.csv" "$tmp/norm.csv" && ok || fail "torch's dualpipev CSV did not come back as dualpipev's order"
# DualPipeV's overlapped F&B pairs: as many as torch's order holds, kept through the JSON export,
# read from torch's notation; with --overlap-fb 0.6 (halves sharing the device) the artifact and
# the preset simulate alike, below the halves in sequence.
for wm in "4 8" "4 10" "6 12" "8 20"; do
    set -- $wm
    want=$(python3 "$peer" --torch-notation dualpipev $1 $2 | grep -o OVERLAP_F_B | wc -l)
    "$plan" --schedule dualpipev --w $1 --m $2 --layers $((2 * $1)) --format json >"$tmp/dpv.json"
    got=$(grep -c '"pair": "F"' "$tmp/dpv.json")
    back=$("$plan" --plan "$tmp/dpv.json" --format json | grep -c '"pair": "F"')
    [ "$want" -gt 0 ] && [ "$got" = "$want" ] && [ "$back" = "$want" ] && ok ||
        fail "dualpipev w=$1 m=$2: $got pairs marked ($back after a round trip), torch's order has $want"
done
shared=$(bubble --schedule dualpipev --w 4 --m 10 --layers 8 --overlap-fb 0.6)
got=$(bubble --plan "$tmp/torch.csv" --layers 8 --overlap-fb 0.6)
[ -n "$shared" ] && [ "$shared" = "$got" ] && [ "$shared" != "$want_seq" ] && ok ||
    fail "torch's dualpipev CSV under --overlap-fb 0.6: bubble '$got', the preset's '$shared'"
sed 's/"pair": "F"/"pair": "B"/' "$tmp/dpv.json" >"$tmp/bad.json"
expect 2 'field "pair": "B" on a F op' --plan "$tmp/bad.json"
expect 2 "--overlap-fb expects the share of a pair's summed cost it takes" --schedule dualpipev --overlap-fb 1.5
# Round trips: every exportable plan comes back op for op.
for s in gpipe 1f1b 1f1b-i zb-h1 zb-v dualpipev zb-i zb-h2; do
    for wm in "2 4" "4 8" "3 12"; do
        set -- $wm
        "$plan" --schedule $s --w $1 --m $2 --layers 12 --format torch-csv >"$tmp/a.csv" 2>"$tmp/err" || {
            grep -q "nearest valid" "$tmp/err" && continue; fail "$s w=$1 m=$2: $(cat "$tmp/err")"; continue; }
        "$plan" --plan "$tmp/a.csv" --layers 12 --format torch-csv >"$tmp/b.csv" 2>"$tmp/err" &&
            cmp -s "$tmp/a.csv" "$tmp/b.csv" && ok || fail "$s w=$1 m=$2: round trip changed the plan: $(cat "$tmp/err")"
    done
done
# torch's compute_comms listing (its _add_send_recv over our compute_only export): the SEND/RECV
# actions are checked against the transfers bsipipe derives, then the plan exports back unchanged.
for s in 1f1b zb-h1 1f1b-i zb-i zb-v dualpipev; do
    place=looped; case $s in zb-v|dualpipev) place=v ;; esac
    "$plan" --schedule $s --w 4 --m 8 --layers 8 --format torch-csv >"$tmp/c.csv" &&
        python3 "$peer" --comms $place "$tmp/c.csv" >"$tmp/cc.csv" || { fail "$s: compute_comms listing"; continue; }
    expect 0 "the file's SEND/RECV actions are those transfers" --plan "$tmp/cc.csv" --layers 8
    "$plan" --plan "$tmp/cc.csv" --layers 8 --format torch-csv | cmp -s - "$tmp/c.csv" && ok ||
        fail "$s: the compute_comms file did not come back as the plan's order"
done
"$plan" --schedule zb-v --w 4 --m 8 --format torch-csv >"$tmp/c.csv" && python3 "$peer" --comms v "$tmp/c.csv" >"$tmp/cc.csv"
sed '2s/^1RECV_F0,//' "$tmp/cc.csv" >"$tmp/bad.csv"
expect 2 "line 2 lacks 1RECV_F0, a transfer the plan needs" --plan "$tmp/bad.csv"
sed '4s/^/3SEND_F0,/' "$tmp/cc.csv" >"$tmp/bad.csv" # stage 3 -> 4 stays on rank 3 in the V
expect 2 "line 4, column 1: 3SEND_F0 is not a transfer of this plan" --plan "$tmp/bad.csv"
sed '1s/^0F0,0SEND_F0,/0F0,0SEND_F0,0SEND_F0,/' "$tmp/cc.csv" >"$tmp/bad.csv"
expect 2 "(listed on rank 0: a second time)" --plan "$tmp/bad.csv"
sed '1s/^0F0,0SEND_F0,/0SEND_F0,0F0,/' "$tmp/cc.csv" >"$tmp/bad.csv"
expect 2 "line 1, column 1: 0SEND_F0 comes before the op it sends the output of (column 2)" --plan "$tmp/bad.csv"
sed '2s/^1RECV_F0,1F0,/1F0,1RECV_F0,/' "$tmp/cc.csv" >"$tmp/bad.csv"
expect 2 "line 2, column 2: 1RECV_F0 comes after the op it feeds (column 1)" --plan "$tmp/bad.csv"
# Blank lines after the last rank (a hand-edited file) are not ranks.
"$plan" --schedule zb-v --w 4 --m 8 --format torch-csv >"$tmp/blank.csv" && printf '\n\n' >>"$tmp/blank.csv"
expect 0 "zb-v order of 192 compute ops, valid" --plan "$tmp/blank.csv"
# Malformed actions are refused with their line and column, never cut short
# (torch's own pattern reads the legacy token 2BW0 as a B with no micro-batch).
printf '0F0,0B0\n1F0,2BW0\n' >"$tmp/bad.csv"
expect 2 "bad.csv: line 2, column 2: '2BW0' is not a torch action" --plan "$tmp/bad.csv"
printf '0F0,(0F1;1B0)OVERLAP\n' >"$tmp/bad.csv"
expect 2 "line 1, column 2: '(0F1;1B0)OVERLAP' is not an overlapped pair" --plan "$tmp/bad.csv"
mkfifo "$tmp/fifo.csv" && expect 2 "not a regular file" --plan "$tmp/fifo.csv"
# A one-pipe, whole-micro-batch plan's export names every compute op once.
"$plan" --schedule 1f1b --w 4 --m 8 --format torch-csv >"$tmp/1f1b" 2>&1
[ "$(wc -l <"$tmp/1f1b")" -eq 4 ] && [ "$(tr ',' '\n' <"$tmp/1f1b" | grep -c '^[0-9]*[FB][0-9]*$')" -eq 64 ] && ok ||
    fail "1f1b export: 4 rows of 64 F/B actions expected: $(head -2 "$tmp/1f1b")"
expect 1 "runs two pipes" --schedule bsipipe-zb --format torch-csv
expect 1 "cuts sequences into k = 2 pieces" --schedule seq-zbv --format torch-csv
expect 2 "--format expects 'table', 'json' or 'torch-csv'" --schedule zb-v --format csv
finish test_peer_orders
