#!/bin/sh
# test_netns.sh: two nodes on this machine joined by a slow, shaped link
# (scripts/netns-cluster.sh: network namespaces, veth, tc tbf).
#   1. The link runs at its configured rate (200 Mbit/s, within 25 %), far
#      below memory (TCP inside one node).
#   2. StarPU-MPI ranks on the two nodes, talking TCP over that link, give the
#      one-process engine's losses and gradients bit for bit, under the
#      topology-aware and the naive mapping (tests/test_mpi_equiv.c), with the
#      bytes they send across equal to the planner's count.
#   3. The bench's mapping ablation across the nodes: the cross-node bytes the
#      engine counts equal the planner's, row by row, and the link's own
#      counters saw at least those bytes (and not much more).
# Skipped (77), with the reason, where namespaces cannot be made: not root, or
# a kernel or container that forbids them.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
build=${top_builddir:-.}
src=${srcdir:-.}
. "$src/tests/mpi_util.sh"
cluster=$src/scripts/netns-cluster.sh
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }

echo "== the link: 200mbit, measured with 64 MiB over TCP"
timeout 120 "$cluster" --rate 200mbit probe >"$tmp/probe" 2>&1
rc=$?
if [ $rc = 3 ]; then
    echo "SKIP: network namespaces cannot be made here: $(grep netns-cluster: "$tmp/probe" | tail -1)"
    exit 77
fi
cat "$tmp/probe"
link=$(sed -n 's/.*link_mbit=\([0-9.]*\).*/\1/p' "$tmp/probe")
mem=$(sed -n 's/.*memory_mbit=\([0-9.]*\).*/\1/p' "$tmp/probe")
if [ $rc != 0 ] || [ -z "$link" ] || [ -z "$mem" ]; then
    fail "the probe did not run (exit $rc)"
elif ! awk -v l="$link" -v m="$mem" 'BEGIN { exit !(l >= 150 && l <= 210 && m >= 5 * l) }'; then
    fail "link $link Mbit/s (want 150..210 for tbf at 200mbit), memory $mem Mbit/s (want 5x the link)"
fi

equiv=$build/tests/test_mpi_equiv
export BSIPIPE_TEST_SCHEDULES=bsipipe,seq1f1b-i,chimera
echo "== one process"
if ! timeout 300 "$equiv" single "$tmp/single.bin" >"$tmp/out" 2>&1; then
    fail "one process"; tail -20 "$tmp/out" >&2
fi
for map in aware naive; do
    echo "== 2 nodes over a 1gbit link, $map mapping"
    if timeout 400 "$cluster" --rate 1gbit --timeout 300 run "$equiv" mpi "$tmp/single.bin" $map >"$tmp/out" 2>&1; then
        grep -E "ranks|reference|checks" "$tmp/out"
    else
        fail "2 nodes, $map mapping"; grep -v "^\[starpu\]" "$tmp/out" | tail -25 >&2
    fi
done

echo "== bsipipe-bench --mpi --preset ablation over a 1gbit link"
bench=$build/apps/bsipipe-bench
if timeout 400 "$cluster" --rate 1gbit --timeout 300 --stats "$tmp/stats" run env STARPU_SILENT=1 "$bench" --mpi \
        --preset ablation --reps 1 --warmup 0 --iters 1 --layers 8 --hidden 64 --heads 2 --seq 128 >"$tmp/bench" 2>&1; then
    grep -E "^\| bsipipe, .* mapping \||^\| (topology-aware|naive) \(|node[0-9] tx" "$tmp/bench"
    # measured per mapping: | variant | act in | act across | sync in | sync across |
    # predicted per mapping: | mapping | nodes | bubble | iter | act across | sync across |
    got=$(awk -F'|' '/^\| bsipipe, topology-aware mapping \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { a1 = $4; a2 = $6 }
        /^\| bsipipe, naive mapping \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { n1 = $4; n2 = $6 }
        END { print a1 + 0, a2 + 0, n1 + 0, n2 + 0 }' "$tmp/bench")
    want=$(awk -F'|' '/^\| topology-aware \(/ { a1 = $6; a2 = $7 } /^\| naive \(/ { n1 = $6; n2 = $7 }
        END { print a1 + 0, a2 + 0, n1 + 0, n2 + 0 }' "$tmp/bench")
    echo "cross-node MB (aware act, sync; naive act, sync): measured $got, planned $want"
    if [ "$got" != "$want" ] || [ "$got" = "0 0 0 0" ]; then
        fail "cross-node bytes measured ($got) differ from the planner's ($want)"
    fi
    # One iteration per mapping: the wire carries both mappings' payload plus
    # TCP/IP headers, Open MPI's start-up and the watchdogs' heartbeats.
    payload=$(echo "$got" | awk '{ printf "%d", ($1 + $2 + $3 + $4) * 1e6 }')
    wire=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^tx_bytes=/) t += substr($i, 10) } END { printf "%d", t }' "$tmp/stats")
    echo "link counters: $wire bytes sent by the nodes, $payload bytes of payload across nodes"
    if [ "$wire" -lt "$payload" ] || [ "$wire" -gt $((payload * 5 / 4 + 2000000)) ]; then
        fail "the link carried $wire bytes for $payload bytes of payload (want between 1x and 1.25x + 2 MB)"
    fi
else
    fail "bsipipe-bench across 2 nodes"; grep -v "^\[starpu\]" "$tmp/bench" | tail -25 >&2
fi
[ $fails = 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "test_netns: all checks passed"
