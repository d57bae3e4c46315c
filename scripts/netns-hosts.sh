#!/usr/bin/env bash
# netns-hosts.sh: run one Braid job across N emulated hosts on this machine.
#
# Every "host" is a network namespace with one veth link into a switch
# namespace that holds a Linux bridge; nothing is added to the namespace the
# script runs in, and every address is one of the namespaces it creates
# (10.231.0.0/16: hosts 10.231.0.H+1, aggregation daemons 10.231.1.A+1).
# Each host's link is shaped in both directions with tc tbf (--rate; the
# host's side limits what it sends, the switch's side what it receives), as a
# full-duplex NIC of that rate would. The ranks run in their host's namespace
# with the environment bootstrap (BRAID_RANK, BRAID_WORLD_SIZE,
# BRAID_LOCAL_RANK/SIZE, BRAID_STORE on rank 0's address, BRAID_SECRET): rank
# 0 serves the TCP store, ranks of one host meet through shared memory and
# ranks of different hosts through TCP across the bridge. With --aggs K, K
# aggregation daemons (braid agg) run in namespaces of their own with
# --agg-rate links, and the ranks get BRAID_AGG. Everything is removed on
# exit (trap), the processes it started first.
#
#	scripts/netns-hosts.sh [flags] -- PROG [ARGS...]
#
#	-n HOSTS          hosts (default 4)
#	-r RANKS          ranks per host (default 1)
#	--rate RATE       each host's link, as tc writes it (1gbit, 10gbit) or
#	                  none (the veth's own speed, about 20 Gbit/s here)
#	--aggs K          start K daemons (default 0)
#	--agg-rate RATE   the daemons' links (default 10 × --rate, or none)
#	--agg-args ARGS   more flags for braid agg
#	--braid PATH      the braid binary for the daemons (default: braid on PATH)
#	--cc ALG          TCP congestion control in every namespace (cubic, bbr,
#	                  reno; default: what new namespaces get here). On this
#	                  machine they get bbr, which paces each flow at its own
#	                  estimate of the bottleneck and left 8-12 % of tbf's 1
#	                  Gbit/s unused in an 8-host ring; cubic fills it.
#	--jobs J          run J jobs of the same shape at once on the same hosts
#	                  and daemons (each its own store, secret and job name;
#	                  the daemons hold every job's secret, through
#	                  --secret-file); job 0's rank 0 writes to standard
#	                  output, the others' output is in the logs
#	--kill-rank J:R:SECS  kill -9 rank R of job J SECS seconds after the start
#	--agg-stats       print daemon 0's statistics (braid agg --stats) at the end
#	--kill-agg SECS   kill -9 daemon 0 SECS seconds after the ranks start
#	                  (a fault test: the job must complete or fail cleanly)
#	--tc-stats        print every shaped link's qdisc counters (bytes sent,
#	                  drops, overlimits) when the job ends
#	--logs DIR        keep every rank's and daemon's output there (default:
#	                  a temporary directory, printed when a rank fails)
#
# Rank 0's output goes to standard output; the script exits with the first
# failing rank's status. Needs root (ip netns, tc) and the sch_tbf qdisc.
#
#	scripts/netns-hosts.sh -n 8 --rate 1gbit -- braid bench allreduce \
#	    --algo ring --min-size 64M --max-size 64M --iters 5
set -uo pipefail

hosts=4 per=1 rate=none aggs=0 aggrate= aggargs= braidbin=braid logs= tcstats=0 cc= killagg= jobs=1 killrank= aggstats=0
while [ $# -gt 0 ]; do
    case $1 in
    -n) hosts=$2; shift 2 ;;
    -r) per=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --aggs) aggs=$2; shift 2 ;;
    --agg-rate) aggrate=$2; shift 2 ;;
    --agg-args) aggargs=$2; shift 2 ;;
    --braid) braidbin=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --tc-stats) tcstats=1; shift ;;
    --cc) cc=$2; shift 2 ;;
    --kill-agg) killagg=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --kill-rank) killrank=$2; shift 2 ;;
    --agg-stats) aggstats=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "netns-hosts.sh: unknown flag $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "netns-hosts.sh: no program given (scripts/netns-hosts.sh [flags] -- PROG [ARGS...])" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "netns-hosts.sh: needs root to make network namespaces" >&2
    exit 77
fi
if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 200 ] || [ "$per" -lt 1 ] || [ "$aggs" -lt 0 ] || [ "$aggs" -gt 200 ]; then
    echo "netns-hosts.sh: -n must be 1..200, -r at least 1, --aggs 0..200" >&2
    exit 2
fi
if [ -z "$aggrate" ]; then
    case $rate in
    none) aggrate=none ;;
    *gbit) aggrate=$((${rate%gbit} * 10))gbit ;;
    *mbit) aggrate=$((${rate%mbit} * 10))mbit ;;
    *) aggrate=$rate ;;
    esac
fi

# Names unique to this run, short enough for interface names (15 bytes).
tag=b$$
sw=${tag}sw
world=$((hosts * per))
port=$((20000 + $$ % 20000))
aggport=$((port + 1))
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
own_logs=0
if [ -z "$logs" ]; then logs=$(mktemp -d /tmp/netns-hosts.XXXXXX); own_logs=1; fi
mkdir -p "$logs"

pids=()
nss=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    for p in "${nss[@]}"; do ip netns del "$p" 2>/dev/null; done
    if [ "$own_logs" = 1 ]; then rm -rf "$logs"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

must() {
    if ! out=$("$@" 2>&1); then
        echo "netns-hosts.sh: $*: $out" >&2
        exit 1
    fi
}

# shape DEV NS RATE: tbf on DEV's egress in NS. The burst is a few
# milliseconds' worth at the rate (tbf needs at least rate/HZ), the queue
# 50 ms.
shape() {
    local dev=$1 ns=$2 r=$3 burst
    [ "$r" = none ] && return
    case $r in
    *gbit) burst=$((${r%gbit} * 1024))kb ;;
    *) burst=1mb ;;
    esac
    must ip -n "$ns" link set "$dev" txqueuelen 10000
    must ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$r" burst "$burst" latency 50ms
}

must ip netns add "$sw"
nss+=("$sw")
must ip -n "$sw" link add br0 type bridge
must ip -n "$sw" link set br0 up
must ip -n "$sw" link set lo up

# node NAME ADDR RATE: a namespace with eth0 at ADDR, linked to the bridge.
node() {
    local ns=$1 addr=$2 r=$3 port=$4
    must ip netns add "$ns"
    nss+=("$ns")
    must ip link add eth0 netns "$ns" type veth peer name "$port" netns "$sw"
    must ip -n "$ns" addr add "$addr/16" dev eth0
    must ip -n "$ns" link set lo up
    must ip -n "$ns" link set eth0 up
    [ -n "$cc" ] && must ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"
    must ip -n "$sw" link set "$port" master br0
    must ip -n "$sw" link set "$port" up
    shape eth0 "$ns" "$r"
    shape "$port" "$sw" "$r"
}

for ((h = 0; h < hosts; h++)); do
    node "${tag}h$h" "10.231.0.$((h + 1))" "$rate" "h$h"
done
secrets=("$secret")
for ((j = 1; j < jobs; j++)); do
    secrets+=("$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')")
done
printf '%s\n' "${secrets[@]}" >"$logs/secrets"
chmod 600 "$logs/secrets"
aggaddrs=
for ((a = 0; a < aggs; a++)); do
    node "${tag}a$a" "10.231.1.$((a + 1))" "$aggrate" "a$a"
    ip netns exec "${tag}a$a" env BRAID_SECRET="$secret" "$braidbin" agg --secret-file "$logs/secrets" \
        --listen "10.231.1.$((a + 1)):$aggport" $aggargs >"$logs/agg$a.log" 2>&1 &
    pids+=($!)
    aggaddrs+=${aggaddrs:+,}10.231.1.$((a + 1)):$aggport
done
if [ "$aggs" -gt 0 ]; then
    # Wait until every daemon listens (or has died).
    for ((a = 0; a < aggs; a++)); do
        for ((i = 0; i < 100; i++)); do
            ip netns exec "${tag}a$a" ss -Hltn "sport = :$aggport" 2>/dev/null | grep -q . && break
            kill -0 "${pids[$a]}" 2>/dev/null || { echo "netns-hosts.sh: daemon $a died:" >&2; cat "$logs/agg$a.log" >&2; exit 1; }
            sleep 0.05
        done
    done
fi

rankpids=() # job j's rank r at j*world+r
for ((j = 0; j < jobs; j++)); do
    for ((h = 0; h < hosts; h++)); do
        for ((l = 0; l < per; l++)); do
            r=$((h * per + l))
            env=(BRAID_RANK=$r BRAID_WORLD_SIZE=$world BRAID_LOCAL_RANK=$l BRAID_LOCAL_SIZE=$per
                BRAID_STORE=10.231.0.1:$((port + 2 + j)) BRAID_SECRET=${secrets[$j]} BRAID_JOB=netns$$-$j)
            [ -n "$aggaddrs" ] && env+=(BRAID_AGG=$aggaddrs)
            log=$logs/rank$r.log
            [ "$j" -gt 0 ] && log=$logs/job$j-rank$r.log
            if [ "$r$j" = 00 ]; then
                ip netns exec "${tag}h$h" env "${env[@]}" "$@" 2> >(tee "$log" >&2) &
            else
                ip netns exec "${tag}h$h" env "${env[@]}" "$@" >"$log" 2>&1 &
            fi
            rankpids+=($!)
            pids+=($!)
        done
    done
done
if [ -n "$killrank" ]; then
    IFS=: read -r kj kr ks <<<"$killrank"
    kp=${rankpids[$((kj * world + kr))]}
    (sleep "$ks"; kill -9 "$kp" 2>/dev/null && echo "netns-hosts.sh: killed rank $kr of job $kj (pid $kp) at ${ks}s" >&2) &
    pids+=($!)
fi
if [ -n "$killagg" ] && [ "$aggs" -gt 0 ]; then
    (sleep "$killagg"; kill -9 "${pids[0]}" 2>/dev/null && echo "netns-hosts.sh: killed daemon 0 (pid ${pids[0]}) at ${killagg}s" >&2) &
    pids+=($!)
fi
status=0
tc_report() {
    local ns p
    for ns in "${nss[@]}"; do
        [ "$ns" = "$sw" ] && continue
        p=${ns#$tag}
        echo "tc $p up:   $(ip netns exec "$ns" tc -s qdisc show dev eth0 | grep -o 'Sent [0-9]* bytes [0-9]* pkt (dropped [0-9]*, overlimits [0-9]*')"
        echo "tc $p down: $(ip netns exec "$sw" tc -s qdisc show dev "$p" | grep -o 'Sent [0-9]* bytes [0-9]* pkt (dropped [0-9]*, overlimits [0-9]*')"
    done >&2
}
for ((j = 0; j < jobs; j++)); do
    codes=
    for ((r = 0; r < world; r++)); do
        wait "${rankpids[$((j * world + r))]}"
        s=$?
        codes+=" $s"
        if [ "$s" != 0 ] && [ "$status" = 0 ]; then status=$s; fi
        log=$logs/rank$r.log
        [ "$j" -gt 0 ] && log=$logs/job$j-rank$r.log
        if [ "$s" != 0 ] && [ "$r$j" != 00 ]; then
            echo "netns-hosts.sh: job $j rank $r exited with status $s:" >&2
            tail -n 5 "$log" >&2
        fi
    done
    [ "$jobs" -gt 1 ] && echo "netns-hosts.sh: job $j: ranks exited with$codes" >&2
done
if [ "$aggstats" = 1 ] && [ "$aggs" -gt 0 ]; then
    ip netns exec "${tag}a0" env BRAID_SECRET="$secret" "$braidbin" agg --stats "${aggaddrs%%,*}" >&2
fi
[ "$tcstats" = 1 ] && tc_report
exit "$status"
