#!/usr/bin/env bash
# scripts/netns-cluster.sh: a cluster of 2-8 "nodes" on this machine, joined by a shaped link.
#
# Each node is a network namespace (and a UTS namespace, so it has its own host name). Every
# node has one interface, eth0, on a bridge that lives in a namespace of its own (the switch);
# both directions of every node's link are shaped with tc's token bucket (tbf) to --rate, and
# delayed with netem by --delay where the kernel has netem. Open MPI starts one or more ranks
# per node: mpirun runs inside node 0, and reaches the other nodes through a launch agent (this
# script, --agent) that enters their namespaces. So ranks on one node talk through shared
# memory (vader), ranks on two nodes through TCP over the shaped link.
#
# Confinement: the namespaces have no route and no interface outside themselves, so no packet
# can reach an address the script did not make. Every run is bounded by --timeout. Everything
# is removed at exit, also on INT, TERM and HUP; namespaces left by a run that was killed with
# SIGKILL are removed by the next run (their names carry the dead script's pid).
#
# Usage (as root):
#   scripts/netns-cluster.sh [OPTIONS] run PROGRAM [ARGS...]   one mpirun across the nodes
#   scripts/netns-cluster.sh [OPTIONS] probe                   the link's rate, against memory
# Options:
#   --nodes N           nodes, 2..8 (default 2)
#   --ranks-per-node R  MPI ranks on each node, 1..8 (default 1)
#   --rate RATE         each direction of each node's link, as tc writes it: 1gbit, 200mbit
#                       (default 1gbit); "none" leaves the link unshaped
#   --delay D           one-way delay added by netem, as tc writes it: 100us, 1ms (default:
#                       none; refused where the kernel has no netem)
#   --timeout S         the run's wall-clock limit in seconds (default 900)
#   --stats FILE        write the link counters after the run: one line per node,
#                       "nodeI tx_bytes=N rx_bytes=N tx_packets=N rx_packets=N"
# Exit status: the program's (124 when it ran past --timeout); 2 for a bad command line; 3 when
# namespaces cannot be made here (not root, or the kernel or container forbids them).
set -uo pipefail

me=$(readlink -f "${BASH_SOURCE[0]}")
NS_TAG=bsipipe-netns
SUBNET=10.213.0

die() { echo "netns-cluster: $1" >&2; exit "${2:-2}"; }

# ---- the launch agent: mpirun calls "agent HOST COMMAND" to start its daemon on HOST ----------
if [ "${1:-}" = --agent ]; then
    host=$2; shift 2
    case $host in node[0-9]) ;; *) die "agent: unknown host '$host' (expected node0..node7)";; esac
    [ -n "${BSIPIPE_NETNS_PREFIX:-}" ] || die "agent: BSIPIPE_NETNS_PREFIX is not set (run through netns-cluster.sh)"
    exec ip netns exec "${BSIPIPE_NETNS_PREFIX}${host#node}" unshare --uts /bin/sh -c \
        "echo $host > /proc/sys/kernel/hostname && $*"
fi

nodes=2 ranks=1 rate=1gbit delay="" timeout_s=900 stats=""
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) nodes=${2:-}; shift 2 ;;
        --ranks-per-node) ranks=${2:-}; shift 2 ;;
        --rate) rate=${2:-}; shift 2 ;;
        --delay) delay=${2:-}; shift 2 ;;
        --timeout) timeout_s=${2:-}; shift 2 ;;
        --stats) stats=${2:-}; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$me" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        run|probe) break ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
action=${1:-}
[ -n "$action" ] || die "say what to do: 'run PROGRAM [ARGS...]' or 'probe' (see --help)"
shift
[[ $nodes =~ ^[2-8]$ ]] || die "--nodes $nodes: give 2 to 8 nodes"
[[ $ranks =~ ^[1-8]$ ]] || die "--ranks-per-node $ranks: give 1 to 8"
[[ $timeout_s =~ ^[0-9]+$ ]] && [ "$timeout_s" -ge 1 ] || die "--timeout $timeout_s: give whole seconds, at least 1"
[[ $rate == none || $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] ||
    die "--rate $rate: write it as tc does (1gbit, 200mbit, 500kbit) or 'none'"
[ -z "$delay" ] || [[ $delay =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$ ]] || die "--delay $delay: write it as tc does (100us, 1ms)"
[ "$action" != run ] || [ $# -ge 1 ] || die "run: name the program to start on every rank"
[ "$action" = run ] || [ "$action" = probe ] || die "unknown action '$action' (run or probe)"

[ "$(id -u)" = 0 ] || die "making network namespaces needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): run as root, as CI does" 3
for tool in ip tc unshare timeout; do
    command -v $tool >/dev/null || die "$tool is missing (packages iproute2, util-linux, coreutils: scripts/setup.sh installs them)" 3
done
if [ "$action" = run ]; then
    mpirun_bin=${MPIEXEC:-$(command -v mpirun || true)}
    [ -n "$mpirun_bin" ] || die "no mpirun (package openmpi-bin: scripts/setup.sh installs it)" 3
fi

# ---- remove what a killed run left (its pid is gone) ------------------------------------------
ns_remove() { # namespace
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null
    ip netns del "$1" 2>/dev/null
    rm -rf "/etc/netns/$1"
}
for ns in $( (ip netns list 2>/dev/null | awk '{print $1}'; ls /etc/netns 2>/dev/null) | grep "^$NS_TAG-[0-9]*-" | sort -u); do
    pid=${ns#$NS_TAG-}; pid=${pid%%-*}
    # Its owner lives if that pid is still this script (a zombie's command line is empty;
    # a reused pid runs something else).
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q netns-cluster || ns_remove "$ns"
done
for f in "${TMPDIR:-/tmp}"/netns-cluster-[0-9]*-hosts.*; do
    [ -e "$f" ] || continue
    pid=${f##*/netns-cluster-}; pid=${pid%%-*}
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q netns-cluster || rm -f "$f"
done

prefix=$NS_TAG-$$-
made=()
cleanup() {
    local ns
    for ns in "${made[@]}"; do ns_remove "$ns"; done
    made=()
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

ns_add() {
    local err
    if ! err=$(ip netns add "$1" 2>&1); then
        die "cannot make a network namespace here ($err): the kernel or the container forbids it" 3
    fi
    made+=("$1")
}
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# tbf needs a bucket of at least one timer tick's bytes; 4 ms of the rate, at least 32 KiB.
shape() { # namespace device
    local dev=$2 bits burst
    [ "$rate" = none ] && [ -z "$delay" ] && return 0
    if [ -n "$delay" ]; then
        in_ns "$1" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" 2>/dev/null ||
            die "--delay: this kernel has no netem qdisc (sch_netem); leave --delay out" 3
        [ "$rate" = none ] && return 0
        set -- "$1" parent 1:1 handle 10:
    else
        set -- "$1" root
    fi
    local ns=$1; shift
    bits=$(awk -v r="$rate" 'BEGIN { m = 1; if (r ~ /bps$/) m = 8; n = r + 0;
        if (r ~ /^[0-9.]+k/) n *= 1e3; else if (r ~ /^[0-9.]+m/) n *= 1e6; else if (r ~ /^[0-9.]+g/) n *= 1e9;
        printf "%d", n * m }')
    burst=$(( bits / 8 / 250 )); [ "$burst" -ge 32768 ] || burst=32768
    in_ns "$ns" tc qdisc add dev "$dev" "$@" tbf rate "$rate" burst "$burst" latency 50ms ||
        die "tc could not shape $dev with tbf at $rate" 3
}

sw=${prefix}sw
ns_add "$sw"
in_ns "$sw" ip link add br0 type bridge
in_ns "$sw" ip link set br0 up
hosts="127.0.0.1 localhost"
for ((i = 0; i < nodes; i++)); do hosts+=$'\n'"$SUBNET.$((i + 1)) node$i"; done
for ((i = 0; i < nodes; i++)); do
    node=$prefix$i
    ns_add "$node"
    mkdir -p "/etc/netns/$node"   # ip netns exec mounts it over /etc/hosts inside the node only
    printf '%s\n' "$hosts" >"/etc/netns/$node/hosts"
    in_ns "$sw" ip link add "port$i" type veth peer name eth0 netns "$node" ||
        die "cannot make a veth pair between namespaces" 3
    in_ns "$sw" ip link set "port$i" master br0 up
    in_ns "$node" ip addr add "$SUBNET.$((i + 1))/24" dev eth0
    in_ns "$node" ip link set eth0 up
    in_ns "$node" ip link set lo up
    shape "$node" eth0       # node -> switch
    shape "$sw" "port$i"     # switch -> node
done

counters() { # -> stats file and a table on stderr
    local i dir=/sys/class/net/eth0/statistics line
    echo "netns-cluster: link counters (eth0 of each node, bytes on the wire incl. TCP/IP headers):" >&2
    for ((i = 0; i < nodes; i++)); do
        line="node$i tx_bytes=$(in_ns "$prefix$i" cat $dir/tx_bytes) rx_bytes=$(in_ns "$prefix$i" cat $dir/rx_bytes)"
        line+=" tx_packets=$(in_ns "$prefix$i" cat $dir/tx_packets) rx_packets=$(in_ns "$prefix$i" cat $dir/rx_packets)"
        echo "  $line" >&2
        [ -z "$stats" ] || echo "$line" >>"$stats"
    done
}
[ -z "$stats" ] || : >"$stats" || die "--stats $stats: cannot write it"

echo "netns-cluster: $nodes nodes x $ranks ranks, link rate ${rate}${delay:+, delay $delay} (namespaces $prefix*)" >&2
rc=0
if [ "$action" = probe ]; then
    command -v python3 >/dev/null || die "probe needs python3" 3
    # 64 MiB through one TCP connection: node0 -> node1 over the link, then node0 -> itself (lo).
    probe_py='
import socket, sys, time
mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
total, chunk = 64 << 20, b"\0" * (1 << 20)
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); s.settimeout(30); c, _ = s.accept(); n = 0
    while n < total:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    c.sendall(b"k"); c.close()
else:
    for attempt in range(100):
        try: c = socket.create_connection((addr, port), timeout=30); break
        except OSError: time.sleep(0.05)
    t = time.time()
    for _ in range(total >> 20): c.sendall(chunk)
    c.recv(1); dt = time.time() - t
    print("%.1f" % (total * 8 / dt / 1e6))
'
    probe() { # server-namespace address
        in_ns "$1" timeout 60 python3 -c "$probe_py" server "$2" 5201 &
        local srv=$!
        in_ns "${prefix}0" timeout 60 python3 -c "$probe_py" client "$2" 5201
        wait $srv
    }
    link=$(probe "${prefix}1" "$SUBNET.2") || rc=1
    mem=$(probe "${prefix}0" 127.0.0.1) || rc=1
    echo "link_mbit=${link:-?} memory_mbit=${mem:-?} configured=$rate"
else
    hostfile=$(mktemp "${TMPDIR:-/tmp}/netns-cluster-$$-hosts.XXXXXX") || die "cannot write a hostfile" 3
    trap 'cleanup; rm -f "$hostfile"' EXIT
    for ((i = 0; i < nodes; i++)); do echo "node$i slots=$ranks"; done >"$hostfile"
    opts=(--hostfile "$hostfile" -np $((nodes * ranks)) --map-by "ppr:$ranks:node" --bind-to none
          --oversubscribe --allow-run-as-root
          --mca plm_rsh_agent "$me --agent" --mca plm_rsh_no_tree_spawn 1
          --mca oob_tcp_if_include eth0 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0
          --mca btl_vader_single_copy_mechanism none)
    export BSIPIPE_NETNS_PREFIX=$prefix
    printf -v cmd '%q ' "$mpirun_bin" "${opts[@]}" "$@"
    timeout --kill-after=10 "$timeout_s" ip netns exec "${prefix}0" unshare --uts /bin/sh -c \
        "echo node0 > /proc/sys/kernel/hostname && exec $cmd"
    rc=$?
    [ $rc -ne 124 ] || echo "netns-cluster: the run passed --timeout $timeout_s s and was stopped" >&2
fi
counters
exit $rc
