#!/usr/bin/env bash
# bench-registered.sh: registered buffers (braid.Alloc) against plain Go
# slices through the host's shared area (algorithm shm), side by side.
#
# usage: scripts/bench-registered.sh [-n RANKS] [-r ROUNDS] [-b BRAID] [-o DIR] [COLL...]
#
# For each round and collective (default: reducescatter allgather
# allreduce) it runs `braid bench -n RANKS COLL --algo shm` from 64 KiB to
# 64 MiB twice, plain and with --registered, alternating which goes first,
# writes each run's CSV into DIR (default: a temporary directory, named on
# standard error), and prints the median over the rounds of each size's
# average latency, plain and registered, their ratio, and the registered
# run's bus bandwidth. Extra braid bench flags go in BENCH_ARGS (for
# example BENCH_ARGS="--inplace"); MIN and MAX change the sizes.
set -euo pipefail

n=2 rounds=5 braid=bin/braid dir=""
while getopts "n:r:b:o:" o; do
	case $o in
	n) n=$OPTARG ;;
	r) rounds=$OPTARG ;;
	b) braid=$OPTARG ;;
	o) dir=$OPTARG ;;
	*) sed -n '2,15p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
colls=("$@")
[ ${#colls[@]} -gt 0 ] || colls=(reducescatter allgather allreduce)
[ -x "$braid" ] || { echo "bench-registered.sh: no braid binary at $braid (go build -o bin/braid ./cmd/braid)" >&2; exit 2; }
if [ -z "$dir" ]; then
	dir=$(mktemp -d /tmp/braid-registered.XXXXXX)
fi
mkdir -p "$dir"
echo "bench-registered.sh: CSVs in $dir" >&2

for r in $(seq 1 "$rounds"); do
	for c in "${colls[@]}"; do
		modes=(plain registered)
		if [ $((r % 2)) -eq 0 ]; then modes=(registered plain); fi
		for m in "${modes[@]}"; do
			flag=""
			[ "$m" = registered ] && flag=--registered
			# shellcheck disable=SC2086
			"$braid" bench -n "$n" "$c" --algo shm $flag --min-size "${MIN:-64K}" --max-size "${MAX:-64M}" \
				--format csv ${BENCH_ARGS:-} >"$dir/$c-$m-$r.csv"
		done
	done
done

# Medians of avg_us (column 7) per (collective, bytes, mode): sort puts
# each key's values in order, and awk takes the middle one(s). busbw is
# nccl-tests': algbw × (n−1)/n, × 2 for allreduce.
for c in "${colls[@]}"; do
	for m in plain registered; do
		for f in "$dir/$c-$m-"*.csv; do
			awk -F, -v c="$c" -v m="$m" 'NR > 1 { print c, $4, m, $7 }' "$f"
		done
	done
done | sort -k1,1 -k2,2n -k3,3 -k4,4g | awk -v n="$n" '
function flush() {
	if (cnt == 0) return
	med[key] = (cnt % 2) ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
	if (!(kc " " kb in seen)) { seen[kc " " kb] = 1; order[++no] = kc " " kb }
	cnt = 0
}
{
	k = $1 " " $2 " " $3
	if (k != key) { flush(); key = k; kc = $1; kb = $2 }
	v[++cnt] = $4
}
END {
	flush()
	printf "%-14s %10s %12s %14s %7s %12s %12s\n", "collective", "bytes", "plain µs", "registered µs", "ratio", "plain busbw", "reg busbw"
	for (i = 1; i <= no; i++) {
		split(order[i], f, " ")
		p = med[f[1] " " f[2] " plain"]; q = med[f[1] " " f[2] " registered"]
		fac = (n - 1) / n; if (f[1] == "allreduce") fac *= 2
		printf "%-14s %10d %12.1f %14.1f %7.2f %12.2f %12.2f\n", f[1], f[2], p, q, q / p, f[2] / p / 1e3 * fac, f[2] / q / 1e3 * fac
	}
}'
