#!/usr/bin/env bash
# compare-cpu.sh: Braid against Open MPI and MPICH on this host, in one run.
#
#   scripts/compare-cpu.sh                      # allreduce and bcast, 2 and 4 ranks
#   COLLS="allreduce bcast allgather" NPS="2 4" SIZES="8 4K 1M 64M" scripts/compare-cpu.sh
#
# Installs Debian's openmpi-bin and mpich (with their compilers) if missing,
# builds ../shared/anchors/cpu/mpibench.c against each MPI, runs Braid's
# bench and mpibench on the same sizes and rank counts, and prints a
# markdown table: latency (slowest rank's mean, µs) and busbw (GB/s), with
# Braid's figure as a ratio to the better peer. Raw outputs go to $OUT
# (default out/compare-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/compare-cpu}
COLLS=${COLLS:-"allreduce bcast"}
NPS=${NPS:-"2 4"}
SIZES=${SIZES:-"8 4K 1M 64M"}
BUDGET=${BUDGET:-0.25}
ANCHOR=${ANCHOR:-$ROOT/../shared/anchors/cpu/mpibench.c}
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"

if ! dpkg -s openmpi-bin libopenmpi-dev mpich libmpich-dev build-essential >/dev/null 2>&1; then
    echo "== installing openmpi-bin libopenmpi-dev mpich libmpich-dev" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends build-essential openmpi-bin libopenmpi-dev mpich libmpich-dev >/dev/null
fi
[ -f "$ANCHOR" ] || { echo "compare-cpu: $ANCHOR not found (set ANCHOR=path/to/mpibench.c)" >&2; exit 1; }
mpicc.openmpi -O2 -o "$OUT/mpibench.openmpi" "$ANCHOR"
mpicc.mpich -O2 -Wno-stringop-overflow -o "$OUT/mpibench.mpich" "$ANCHOR"
go build -o "$OUT/braid" ./cmd/braid

tomb() { python3 -c "import sys;s=sys.argv[1];m={'K':1<<10,'M':1<<20,'G':1<<30};print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
min=$(tomb "$(echo $SIZES | tr ' ' '\n' | head -1)")
max=$(tomb "$(echo $SIZES | tr ' ' '\n' | tail -1)")
mpitests=$(echo $COLLS | sed 's/reducescatter/reduce_scatter/g; s/ /,/g')
export OMPI_MCA_btl_vader_single_copy_mechanism=cma

for np in $NPS; do
    ov=""; [ "$np" -gt "$(nproc)" ] && ov="--oversubscribe"
    for coll in $COLLS; do
        echo "== braid $coll np=$np" >&2
        "$OUT/braid" run -n "$np" -- "$OUT/braid" bench "$coll" --check --min-size "$min" --max-size "$max" \
            --format csv > "$OUT/braid_${coll}_np$np.csv"
    done
    echo "== openmpi np=$np" >&2
    timeout 900 mpirun.openmpi --allow-run-as-root $ov -np "$np" "$OUT/mpibench.openmpi" -l openmpi -x \
        -t "$mpitests" -n "$min" -m "$max" -b "$BUDGET" > "$OUT/openmpi_np$np.txt"
    echo "== mpich np=$np" >&2
    timeout 900 mpirun.mpich -np "$np" "$OUT/mpibench.mpich" -l mpich -x \
        -t "$mpitests" -n "$min" -m "$max" -b "$BUDGET" > "$OUT/mpich_np$np.txt"
done

python3 - "$OUT" "$COLLS" "$NPS" "$SIZES" <<'EOF'
import csv, sys, os
out, colls, nps, sizes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def tob(s):
    m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)
peer = {}
for lib in ("openmpi", "mpich"):
    for np_ in nps:
        for line in open(os.path.join(out, f"{lib}_np{np_}.txt")):
            if not line.startswith("RES,"):
                continue
            f = line.strip().split(",")
            test = f[2].replace("reduce_scatter", "reducescatter")
            peer[(lib, test, int(f[3]), int(f[4]))] = (float(f[6]), float(f[10]))
print("| collective | ranks | size | Braid µs | Open MPI µs | MPICH µs | latency ratio (Braid / best) | Braid busbw | best peer busbw | busbw ratio (Braid / best) | algo | correct |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
for coll in colls:
    for np_ in nps:
        rows = {int(r["bytes"]): r for r in csv.DictReader(open(os.path.join(out, f"braid_{coll}_np{np_}.csv")))}
        for s in sizes:
            b = tob(s)
            r = rows.get(b)
            o = peer.get(("openmpi", coll, int(np_), b))
            m = peer.get(("mpich", coll, int(np_), b))
            if r is None or o is None or m is None:
                continue
            lat = float(r["max_us"]); bw = float(r["busbw_gbs"])
            best_lat = min(o[0], m[0]); best_bw = max(o[1], m[1])
            print(f"| {coll} | {np_} | {s} | {lat:.2f} | {o[0]:.2f} | {m[0]:.2f} | {lat/best_lat:.2f} | {bw:.2f} | {best_bw:.2f} | {bw/best_bw if best_bw else 0:.2f} | {r.get('ran') or r['algo']} | {r['correct']} |")
EOF
