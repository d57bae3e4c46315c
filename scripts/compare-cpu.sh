#!/usr/bin/env bash
# compare-cpu.sh: Braid against Open MPI and MPICH on this host, in one run.
#
#   scripts/compare-cpu.sh                          # 4 collectives, 2 / half / all cores, 8 B-64 MiB
#   COLLS="allreduce bcast" NPS="2 4" MAX=1M scripts/compare-cpu.sh
#
# For each rank count it runs Open MPI's and MPICH's mpibench (the anchor in
# ../shared/anchors/cpu/mpibench.c, or MPIBENCH_OPENMPI / MPIBENCH_MPICH)
# and Braid's bench with --check, one after another on the same sizes, and
# prints a markdown table: latency (the slowest rank's mean, µs, as both
# benchmarks report it) with Braid's figure as a ratio to the better peer,
# and from 1 MiB the bus bandwidth ratio. The closing lines count the cells
# that miss the targets (time ≤ 1.0× everywhere, ≤ 0.8× up to 4 KiB, busbw
# ≥ 1.3× from 1 MiB).
#
# REPS=N (default 1) runs the whole sweep N times, one round after another
# (so that a slow minute of the machine hits every library alike), and
# takes each cell's median over the rounds, for every library the same way:
# single runs of the same cell differ by ±30 % on the 16-core node, and a
# stall of one run can make one cell 3–40× slower, for the peers as for
# Braid.
#
# What it needs, and where it takes it from (environment variables first):
#   BRAID              the braid binary (default: go build ./cmd/braid)
#   MPIRUN_OPENMPI     Open MPI's launcher (default: mpirun.openmpi on PATH)
#   MPIRUN_MPICH       MPICH's launcher (default: mpirun.mpich on PATH)
#   MPIBENCH_OPENMPI, MPIBENCH_MPICH   the anchor built against each (default:
#                      built here with mpicc.openmpi / mpicc.mpich from ANCHOR)
# If a launcher or compiler is missing and this is a Debian machine run as
# root, it installs openmpi-bin, mpich and their -dev packages; otherwise it
# says what is missing. Raw outputs go to OUT (default out/compare-cpu);
# the table is also written to OUT/table.md. TABLE_ONLY=1 runs nothing and
# prints the table of the raw outputs already in OUT (a run fetched from
# another machine; REPS, NPS, COLLS as that run had them).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/compare-cpu}
COLLS=${COLLS:-"allreduce bcast allgather reducescatter"}
ncpu=$(nproc)
NPS=${NPS:-$(printf '%s\n' 2 $((ncpu / 2)) "$ncpu" | awk '$1 >= 2' | sort -nu | tr '\n' ' ')}
MAX=${MAX:-64M}
SIZES=${SIZES:-"8 64 256 1K 4K 16K 64K 256K 1M 4M 16M 64M"}
BUDGET=${BUDGET:-0.2}
REPS=${REPS:-1}
ANCHOR=${ANCHOR:-$ROOT/../shared/anchors/cpu/mpibench.c}
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"

have() { command -v "$1" >/dev/null 2>&1; }
if [ -z "${TABLE_ONLY:-}" ]; then
MPIRUN_OPENMPI=${MPIRUN_OPENMPI:-mpirun.openmpi}
MPIRUN_MPICH=${MPIRUN_MPICH:-mpirun.mpich}
need_build=""
[ -n "${MPIBENCH_OPENMPI:-}" ] || need_build="$need_build mpicc.openmpi"
[ -n "${MPIBENCH_MPICH:-}" ] || need_build="$need_build mpicc.mpich"
missing=""
for t in "$MPIRUN_OPENMPI" "$MPIRUN_MPICH" $need_build; do have "$t" || missing="$missing $t"; done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && have apt-get; then
        echo "== installing openmpi-bin libopenmpi-dev mpich libmpich-dev (missing:$missing)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends build-essential openmpi-bin libopenmpi-dev mpich libmpich-dev >/dev/null
    else
        echo "compare-cpu: missing$missing; install Open MPI and MPICH, or set MPIRUN_OPENMPI, MPIRUN_MPICH, MPIBENCH_OPENMPI and MPIBENCH_MPICH" >&2
        exit 1
    fi
fi
if [ -z "${MPIBENCH_OPENMPI:-}" ] || [ -z "${MPIBENCH_MPICH:-}" ]; then
    [ -f "$ANCHOR" ] || { echo "compare-cpu: $ANCHOR not found (set ANCHOR=path/to/mpibench.c)" >&2; exit 1; }
fi
if [ -z "${MPIBENCH_OPENMPI:-}" ]; then
    MPIBENCH_OPENMPI=$OUT/mpibench.openmpi
    mpicc.openmpi -O2 -o "$MPIBENCH_OPENMPI" "$ANCHOR"
fi
if [ -z "${MPIBENCH_MPICH:-}" ]; then
    MPIBENCH_MPICH=$OUT/mpibench.mpich
    mpicc.mpich -O2 -Wno-stringop-overflow -o "$MPIBENCH_MPICH" "$ANCHOR"
fi
if [ -z "${BRAID:-}" ]; then
    BRAID=$OUT/braid
    go build -o "$BRAID" ./cmd/braid
fi

tob() { python3 -c "import sys;s=sys.argv[1];m={'K':1<<10,'M':1<<20,'G':1<<30};print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
max=$(tob "$MAX")
mpitests=$(echo $COLLS | sed 's/reducescatter/reduce_scatter/g; s/ /,/g')
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}
asroot=""; [ "$(id -u)" = 0 ] && asroot="--allow-run-as-root"
{ echo "cores: $ncpu"; lscpu 2>/dev/null | grep -E 'Model name|NUMA node\(s\)|Socket' || true; date -u; } > "$OUT/machine.txt"

for rep in $(seq 1 "$REPS"); do
sfx=""; [ "$REPS" -gt 1 ] && sfx="_r$rep"
for np in $NPS; do
    ov=""; [ "$np" -gt "$ncpu" ] && ov="--oversubscribe"
    echo "== openmpi np=$np$sfx" >&2
    timeout 900 "$MPIRUN_OPENMPI" $asroot $ov -np "$np" "$MPIBENCH_OPENMPI" -l openmpi -x \
        -t "$mpitests" -n 8 -m "$max" -b "$BUDGET" > "$OUT/openmpi_np$np$sfx.txt" || echo "openmpi np=$np failed: $?" >&2
    echo "== mpich np=$np$sfx" >&2
    timeout 900 "$MPIRUN_MPICH" -np "$np" "$MPIBENCH_MPICH" -l mpich -x \
        -t "$mpitests" -n 8 -m "$max" -b "$BUDGET" > "$OUT/mpich_np$np$sfx.txt" || echo "mpich np=$np failed: $?" >&2
    for coll in $COLLS; do
        echo "== braid $coll np=$np$sfx" >&2
        timeout 900 "$BRAID" run -n "$np" -- "$BRAID" bench "$coll" --check --min-size 8 --max-size "$max" \
            --budget "${BUDGET}s" --format csv ${BRAID_FLAGS:-} > "$OUT/braid_${coll}_np$np$sfx.csv" 2> "$OUT/braid_${coll}_np$np$sfx.err" \
            || echo "braid $coll np=$np failed: $? ($(tail -1 "$OUT/braid_${coll}_np$np$sfx.err"))" >&2
    done
done
done
fi

python3 - "$OUT" "$COLLS" "$NPS" "$SIZES" "$REPS" <<'EOF' | tee "$OUT/table.md"
import csv, sys, os, statistics
out, colls, nps, sizes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
reps = int(sys.argv[5])
sfxs = [f"_r{i}" for i in range(1, reps + 1)] if reps > 1 else [""]
def med(xs):
    return statistics.median(xs)
def tob(s):
    m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)
runs = {}
for lib in ("openmpi", "mpich"):
    for np_ in nps:
        for sfx in sfxs:
            p = os.path.join(out, f"{lib}_np{np_}{sfx}.txt")
            if not os.path.exists(p):
                continue
            for line in open(p):
                if not line.startswith("RES,"):
                    continue
                f = line.strip().split(",")
                test = f[2].replace("reduce_scatter", "reducescatter")
                runs.setdefault((lib, test, int(f[3]), int(f[4])), []).append((float(f[6]), float(f[10])))
# a cell's figure: the median latency over the rounds, and the median bandwidth
peer = {k: (med([x[0] for x in v]), med([x[1] for x in v])) for k, v in runs.items()}
print("| collective | ranks | size | Braid µs | Open MPI µs | MPICH µs | time ratio | Braid busbw | best peer busbw | busbw ratio | algorithm | correct |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
miss, cells, wrong = [], 0, 0
for coll in colls:
    for np_ in nps:
        allrows = {}
        for sfx in sfxs:
            p = os.path.join(out, f"braid_{coll}_np{np_}{sfx}.csv")
            if os.path.exists(p) and os.path.getsize(p):
                for r in csv.DictReader(open(p)):
                    allrows.setdefault(int(r["bytes"]), []).append(r)
        rows = {}
        for b, rs in allrows.items():
            # the median round by latency; correct only if every round was
            rs.sort(key=lambda r: float(r["max_us"]))
            r = dict(rs[(len(rs) - 1) // 2])
            r["max_us"] = str(med([float(x["max_us"]) for x in rs]))
            r["busbw_gbs"] = str(med([float(x["busbw_gbs"]) for x in rs]))
            if any(x["correct"] not in ("yes", "true") for x in rs):
                r["correct"] = next(x["correct"] for x in rs if x["correct"] not in ("yes", "true"))
            rows[b] = r
        for s in sizes:
            b = tob(s)
            r = rows.get(b)
            o = peer.get(("openmpi", coll, int(np_), b))
            m = peer.get(("mpich", coll, int(np_), b))
            if r is None or (o is None and m is None):
                continue
            ps = [x for x in (o, m) if x]
            lat, bw = float(r["max_us"]), float(r["busbw_gbs"])
            best_lat, best_bw = min(x[0] for x in ps), max(x[1] for x in ps)
            ratio = lat / best_lat
            bwr = bw / best_bw if best_bw else 0
            ok = r["correct"] in ("yes", "true")
            wrong += not ok
            cells += 1
            target = 0.8 if b <= 4096 else 1.0
            why = []
            if ratio > target:
                why.append(f"time {ratio:.2f}× > {target}")
            if b >= 1 << 20 and bwr < 1.3:
                why.append(f"busbw {bwr:.2f}× < 1.3")
            if why:
                miss.append(f"{coll} np={np_} {s}: " + ", ".join(why))
            fo = f"{o[0]:.2f}" if o else "—"
            fm = f"{m[0]:.2f}" if m else "—"
            bws = f"{bwr:.2f}" if b >= 1 << 20 else ""
            print(f"| {coll} | {np_} | {s} | {lat:.2f} | {fo} | {fm} | {ratio:.2f} | {bw:.2f} | {best_bw:.2f} | {bws} | {r.get('ran') or r['algo']} | {r['correct']} |")
print()
print(f"cells: {cells} (median of {reps} round(s) each); wrong results: {wrong}; cells that miss a target: {len(miss)}")
for x in miss:
    print(f"- {x}")
EOF
