#!/usr/bin/env bash
# ab-gpu.sh: two builds of braid (A and B) side by side on the same GPUs,
# device collectives back to back, rounds alternated: the check that a
# change slows no size (issue 18's "before and after on the same machine").
#
# usage: scripts/ab-gpu.sh -a BRAID_A -b BRAID_B [-n GPUS] [-r ROUNDS] [-o DIR] [COLL...]
#
# For each round and collective (default: allreduce bcast allgather
# reducescatter) it runs `BRAID bench --device cuda -n GPUS COLL --min-size
# MIN --max-size MAX --format json` with A and with B, A first in odd
# rounds and B first in even ones, writes each run's JSON lines into DIR
# (default: a temporary directory, named on standard error) as
# COLL-a-R.jsonl and COLL-b-R.jsonl, and prints, per collective and size,
# the median over the rounds of the time per stream-ordered call for A and
# for B, B / A, and each side's spread; sizes where B is slower than A by
# more than LIMIT (default 0.03) are marked. MIN and MAX (default 8 and
# 1G) set the sizes, BENCH_ARGS adds flags both understand, and A_ENV and
# B_ENV are set for one side's runs only (B_ENV="BRAID_CUDA_KERNELS=dir"
# tries kernels built with cuda/kernels/gen.sh). Rerun with TABLE_ONLY=1
# -o DIR to print the table of runs already made; -o DIR1:DIR2:... then
# pools the runs of several directories (several calls' rounds). The
# last column, P, is the share of pairs of runs (one of A, one of B) in
# which B was faster: 0.5 where the builds do not differ, and a size
# whose ratio the launch's spread between processes moves shows it.
set -euo pipefail

n=2 rounds=3 a="" b="" dir=""
while getopts "a:b:n:r:o:" o; do
	case $o in
	a) a=$OPTARG ;;
	b) b=$OPTARG ;;
	n) n=$OPTARG ;;
	r) rounds=$OPTARG ;;
	o) dir=$OPTARG ;;
	*) sed -n '2,20p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
colls=("$@")
[ ${#colls[@]} -gt 0 ] || colls=(allreduce bcast allgather reducescatter)
MIN=${MIN:-8} MAX=${MAX:-1G} LIMIT=${LIMIT:-0.03}
if [ -z "$dir" ]; then
	dir=$(mktemp -d /tmp/ab-gpu.XXXXXX)
	echo "ab-gpu.sh: runs in $dir" >&2
fi
if [ -z "${TABLE_ONLY:-}" ]; then
	mkdir -p "$dir"
	for side in a b; do
		bin=$a
		[ $side = b ] && bin=$b
		[ -x "$bin" ] || { echo "ab-gpu.sh: -$side names no executable braid ($bin)" >&2; exit 2; }
	done
	for ((r = 1; r <= rounds; r++)); do
		order="a b"
		[ $((r % 2)) = 0 ] && order="b a"
		for coll in "${colls[@]}"; do
			for side in $order; do
				bin=$a envs=${A_ENV:-}
				[ $side = b ] && bin=$b envs=${B_ENV:-}
				# shellcheck disable=SC2086 # BENCH_ARGS and the env lists are word lists
				env $envs "$bin" bench --device cuda -n "$n" "$coll" --min-size "$MIN" --max-size "$MAX" --format json ${BENCH_ARGS:-} \
					> "$dir/$coll-$side-$r.jsonl" 2> "$dir/$coll-$side-$r.err" ||
					{ echo "ab-gpu.sh: $side $coll round $r failed: $(tail -n 3 "$dir/$coll-$side-$r.err")" >&2; exit 1; }
			done
		done
		echo "ab-gpu.sh: round $r of $rounds done" >&2
	done
fi
python3 - "$dir" "$LIMIT" "${colls[@]}" <<'EOF'
import collections, glob, json, os, statistics, sys
d, limit, colls = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
runs = collections.defaultdict(list)
for f in [f for one in d.split(":") for f in glob.glob(os.path.join(one, "*.jsonl"))]:
    coll, side, _ = os.path.basename(f)[:-6].rsplit("-", 2)
    for line in open(f):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "time_us" in j and "bytes" in j:
            runs[(coll, side, j["bytes"])].append(j["time_us"])
slower = 0
for coll in colls:
    sizes = sorted({k[2] for k in runs if k[0] == coll})
    if not sizes:
        continue
    print(f"{coll}: µs a call, median over the rounds (spread); B / A; P(B faster)")
    for s in sizes:
        ta, tb = runs.get((coll, "a", s)), runs.get((coll, "b", s))
        if not ta or not tb:
            continue
        ma, mb = statistics.median(ta), statistics.median(tb)
        mark = ""
        if mb / ma > 1 + limit:
            mark, slower = "  <- B slower", slower + 1
        p = sum((y < x) + 0.5 * (y == x) for x in ta for y in tb) / (len(ta) * len(tb))
        print(f"  {s:>11} B  A {ma:10.2f} ({min(ta):.2f}-{max(ta):.2f})  B {mb:10.2f} ({min(tb):.2f}-{max(tb):.2f})  {mb / ma:6.3f}  {p:4.2f}{mark}")
print(f"{slower} size(s) where B is slower than A by more than {limit:.0%}")
EOF
