#!/usr/bin/env bash
# compare-imbalance.sh: Braid's arrival-aware reductions against its other
# algorithms and against Open MPI and MPICH, under the same injected
# arrival imbalance (issue 17's acceptance benchmark).
#
#   scripts/compare-imbalance.sh                        # np 4, MIF 10 20 50, allreduce and reduce
#   NPS="8 16" MIFS="10 50" COLLS=allreduce scripts/compare-imbalance.sh
#   TABLE_ONLY=1 OUT=DIR scripts/compare-imbalance.sh   # the table of a run fetched from elsewhere
#
# For each rank count, collective and MIF it runs `braid bench COLL
# --imbalance MIF --algos ALGOS` (pap, the arrival-aware one; the
# planner's choice "auto"; the collective's other algorithms), takes from
# its CSV the α braid drew with at each size (alpha_us: by default the
# paper's, one point-to-point message of the size, half the median round
# trip of a ping-pong between ranks 0 and 1), and runs
# scripts/mpi-imbalance.c built against each MPI with that α, so that MPI
# meets the same bound, the same distribution and the same seed (Go's PCG,
# ported): the same delays. mpi-imbalance measures its own α too, by the
# same ping-pong over MPI_Send/MPI_Recv, and reports it (the table's
# "Open MPI α" column); MPI_ALPHA=own makes each MPI draw with its own α
# instead of braid's. ALPHA=collective takes α as the size's balanced
# collective latency on both sides (braid bench --imbalance-alpha
# collective, mpi-imbalance -A collective). It prints markdown tables:
#
#   - per collective, rank count and MIF: pap's latency under imbalance
#     against the best non-arrival-aware Braid run and each MPI; braid
#     bench's split of Braid's latencies into the wait for the last
#     arrival and the tail after it (the part an algorithm controls), and
#     pap's tail over the best run's; α (braid's, and Open MPI's own
#     ping-pong); and the wait floor: with every rank's compute uniform in
#     [0, B] (B = MIF × α) and the ranks leaving the previous call together, a rank waits
#     on average B(n−1)/(2(n+1)) for the last arrival, which no allreduce
#     avoids (every rank needs the last rank's input); floor / best is
#     then the lowest ratio to the best run that any allreduce could show,
#     so a cell whose floor / best exceeds 0.70 cannot meet issue 17's
#     target whatever the algorithm (a reduce's non-roots need not wait:
#     no floor there). The floor is an expectation: over few calls (the
#     large sizes get 5), or where ranks leave a call at different times,
#     a run's measured wait can fall below it;
#   - per collective and rank count, balanced (the MIF run's balanced
#     phase, no compute): pap against the fastest other Braid run, the
#     planner's choice and each MPI.
#
# Environment: BRAID (default: go build ./cmd/braid), MPIRUN_OPENMPI,
# MPIRUN_MPICH (default mpirun.openmpi, mpirun.mpich on PATH; a missing one
# is left out), MPIIMB_OPENMPI, MPIIMB_MPICH (the benchmark built against
# each; default: built here with mpicc.openmpi / mpicc.mpich), LIBS
# (default "openmpi mpich"), ALGOS_ALLREDUCE, ALGOS_REDUCE (braid's
# --algos), SIZES (comma-separated), BUDGET (braid's --budget; the MPI
# benchmark gets the same), SEED, ALPHA (p2p, the default, or collective),
# MPI_ALPHA (braid, the default: MPI draws with braid's α; own: with its
# own), TIMEOUT (seconds a run may take, default 300), OUT (default
# out/compare-imbalance).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/compare-imbalance}
NPS=${NPS:-4}
MIFS=${MIFS:-"10 20 50"}
COLLS=${COLLS:-"allreduce reduce"}
SIZES=${SIZES:-8,64,512,4K,32K,256K,2M,16M}
BUDGET=${BUDGET:-100ms}
SEED=${SEED:-1}
TIMEOUT=${TIMEOUT:-300}
ALPHA=${ALPHA:-p2p}
MPI_ALPHA=${MPI_ALPHA:-braid}
case $ALPHA in p2p|collective) ;; *) echo "compare-imbalance: ALPHA=$ALPHA: want p2p or collective" >&2; exit 2 ;; esac
case $MPI_ALPHA in braid|own) ;; *) echo "compare-imbalance: MPI_ALPHA=$MPI_ALPHA: want braid or own" >&2; exit 2 ;; esac
LIBS=${LIBS:-"openmpi mpich"}
ALGOS_ALLREDUCE=${ALGOS_ALLREDUCE:-pap,auto,shm,recdouble,rabenseifner,segring,direct}
ALGOS_REDUCE=${ALGOS_REDUCE:-pap,auto,shm,binomial,knomial,linear}
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"
have() { command -v "$1" >/dev/null 2>&1; }

if [ -z "${TABLE_ONLY:-}" ]; then
if [ -z "${BRAID:-}" ]; then
    BRAID=$OUT/braid
    go build -o "$BRAID" ./cmd/braid
fi
MPIRUN_OPENMPI=${MPIRUN_OPENMPI:-mpirun.openmpi}
MPIRUN_MPICH=${MPIRUN_MPICH:-mpirun.mpich}
libs=""
for lib in $LIBS; do
    var=MPIIMB_${lib^^}
    run=MPIRUN_${lib^^}
    if [ -z "${!var:-}" ] && have "mpicc.$lib"; then
        printf -v "$var" '%s' "$OUT/mpi-imbalance.$lib"
        "mpicc.$lib" -O2 -o "${!var}" scripts/mpi-imbalance.c
    fi
    if [ -n "${!var:-}" ] && have "${!run}"; then libs="$libs $lib"; else echo "compare-imbalance: leaving out $lib (no benchmark or launcher)" >&2; fi
done
asroot=""; [ "$(id -u)" = 0 ] && asroot="--allow-run-as-root"
budget_s=$(python3 -c "import sys;s=sys.argv[1];print(float(s[:-2])/1000 if s.endswith('ms') else float(s.rstrip('s')))" "$BUDGET")
{ echo "cores: $(nproc)"; lscpu 2>/dev/null | grep -E 'Model name|NUMA node\(s\)' || true; date -u; "$BRAID" version 2>/dev/null || true; } > "$OUT/machine.txt"

for np in $NPS; do
    ov=""; [ "$np" -gt "$(nproc)" ] && ov="--oversubscribe"
    for coll in $COLLS; do
        case $coll in
        allreduce) algos=$ALGOS_ALLREDUCE ;;
        reduce) algos=$ALGOS_REDUCE ;;
        *) echo "compare-imbalance: $coll: want allreduce or reduce" >&2; exit 2 ;;
        esac
        for mif in $MIFS; do
            tag=${coll}_np${np}_mif$mif
            echo "== braid $tag ($(date -u +%T))" >&2
            timeout "$TIMEOUT" "$BRAID" run -n "$np" -- "$BRAID" bench "$coll" --imbalance "$mif" --imbalance-alpha "$ALPHA" --seed "$SEED" --algos "$algos" \
                --sizes "$SIZES" --budget "$BUDGET" --format csv > "$OUT/braid_$tag.csv" 2> "$OUT/braid_$tag.err" \
                || echo "braid $tag failed: $? ($(tail -1 "$OUT/braid_$tag.err"))" >&2
            python3 - "$OUT/braid_$tag.csv" > "$OUT/alpha_$tag.txt" <<'EOF'
import csv, sys
# The α braid drew with at each size (the same for every run of a size).
alpha = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r.get("alpha_us"):
        alpha[int(r["bytes"])] = float(r["alpha_us"])
for b in sorted(alpha):
    print(b, alpha[b])
EOF
            for lib in $libs; do
                var=MPIIMB_${lib^^}; run=MPIRUN_${lib^^}
                extra=""; [ "$lib" = openmpi ] && extra="$asroot $ov"
                # braid's α, unless asked for MPI's own or braid wrote none
                # (a failed run, or a braid from before alpha_us).
                afile=""; [ "$MPI_ALPHA" = braid ] && [ -s "$OUT/alpha_$tag.txt" ] && afile="-a $OUT/alpha_$tag.txt"
                echo "== $lib $tag ($(date -u +%T))" >&2
                timeout "$TIMEOUT" "${!run}" $extra -np "$np" "${!var}" -l "$lib" -t "$coll" -f "$mif" -s "$SEED" \
                    -A "$ALPHA" $afile -b "$budget_s" > "$OUT/${lib}_$tag.txt" 2> "$OUT/${lib}_$tag.err" \
                    || echo "$lib $tag failed: $?" >&2
            done
        done
    done
done
fi

python3 - "$OUT" "$COLLS" "$NPS" "$MIFS" <<'EOF' | tee "$OUT/table.md"
import csv, os, sys
out, colls, nps, mifs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
AWARE = ("pap", "papchain")
def size(b):
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{u}"
    return str(b)
def fmt(x): return f"{x:.1f}" if x is not None else "—"
def us(x): return "—" if x is None else f"{x:.2f}" if x < 10 else f"{x:.1f}"
def rat(x, y): return f"{x / y:.2f}" if x is not None and y else "—"
def num(r, k): return float(r[k]) if r and r.get(k) else None
def name(r): return (r["ran"] or r["algo"]) if r else ""
def split(r):
    # braid bench's split of a latency on the common clock (wait for the
    # last arrival + tail after it), where the CSV has it.
    w, t = num(r, "wait_us"), num(r, "tail_us")
    return f" ({w:.1f} + {t:.1f})" if w is not None and t is not None else ""
def load(tag):
    p = os.path.join(out, f"braid_{tag}.csv")
    rows = {}
    if os.path.exists(p) and os.path.getsize(p):
        for r in csv.DictReader(open(p)):
            rows.setdefault(int(r["bytes"]), {})[r["algo"]] = r
    peer = {}
    for lib in ("openmpi", "mpich"):
        q = os.path.join(out, f"{lib}_{tag}.txt")
        if os.path.exists(q):
            for line in open(q):
                if line.startswith("RES,"):
                    f = line.strip().split(",")
                    # latency under imbalance, balanced, the α drawn with,
                    # its own ping-pong α (the last two: runs since
                    # braid bench measured α by ping-pong).
                    a = float(f[11]) if len(f) > 11 else None
                    pp = float(f[12]) if len(f) > 12 else None
                    peer[(lib, int(f[4]))] = (float(f[6]), float(f[10]), a, pp)
    return rows, peer
def others(rs):
    # Runs that are not arrival-aware: every run but pap's, and auto only
    # if the planner had not switched it to pap by the end.
    return [r for a, r in rs.items() if a not in AWARE and r["avg_us"] and r["ran"] not in AWARE]
summary = []
for coll in colls:
    for np_ in nps:
        n = int(np_)
        balanced_from = None
        for mif in mifs:
            tag = f"{coll}_np{np_}_mif{mif}"
            rows, peer = load(tag)
            if not rows:
                continue
            balanced_from = balanced_from or tag
            print(f"\n### {coll}, {np_} ranks, MIF {mif}\n")
            if coll == "allreduce":
                print("wait floor: the mean wait for the last arrival, B(n−1)/(2(n+1)) with B = MIF × α, that no allreduce avoids; floor / best: the lowest ratio any allreduce could show.\n")
            print("α: braid's (what every run drew with), and Open MPI's own ping-pong of the size (MPI_Send/MPI_Recv; drawn with only under MPI_ALPHA=own).\n")
            print("| size | α µs | Open MPI α µs | pap µs (wait + tail) | best other Braid µs (wait + tail) (algo) | auto µs (ran) | Open MPI µs | MPICH µs | pap / best Braid | pap / Open MPI | tail: pap / best | wait floor µs | floor / best |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for b in sorted(rows):
                rs = rows[b]
                pap = rs.get("pap")
                pv = num(pap, "avg_us")
                if pv is None:
                    continue
                best = min(others(rs), key=lambda r: float(r["avg_us"]), default=None)
                bv = num(best, "avg_us")
                auto = rs.get("auto")
                o, _, _, opp = peer.get(("openmpi", b), (None,) * 4)
                m = peer.get(("mpich", b), (None,) * 4)[0]
                # braid's α: its alpha_us column, or in a CSV from before
                # it had one, the smallest balanced latency (what α was).
                alpha = next((float(r["alpha_us"]) for r in rs.values() if r.get("alpha_us")), None)
                if alpha is None:
                    alpha = min((float(r["balanced_us"]) for r in rs.values() if r["balanced_us"]), default=None)
                floor = None
                if coll == "allreduce" and alpha is not None:
                    floor = float(mif) * alpha * (n - 1) / (2 * (n + 1))
                print(f"| {size(b)} | {us(alpha)} | {us(opp)} | {pv:.1f}{split(pap)} | {fmt(bv)}{split(best)} ({name(best)}) | {fmt(num(auto, 'avg_us'))} ({name(auto)}) | {fmt(o)} | {fmt(m)} | {rat(pv, bv)} | {rat(pv, o)} | {rat(num(pap, 'tail_us'), num(best, 'tail_us'))} | {fmt(floor)} | {rat(floor, bv)} |")
                summary.append((tag, pv / bv if bv else None, pv / o if o else None, floor / bv if floor and bv else None))
        if balanced_from is None:
            continue
        rows, peer = load(balanced_from)
        print(f"\n### {coll}, {np_} ranks, balanced (the balanced phase of the MIF {balanced_from.rsplit('mif', 1)[1]} run)\n")
        print("| size | pap µs | fastest other Braid µs (algo) | auto µs (ran) | Open MPI µs | MPICH µs | pap / fastest | pap / Open MPI |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for b in sorted(rows):
            rs = rows[b]
            pb = num(rs.get("pap"), "balanced_us")
            if pb is None:
                continue
            fast = min((r for r in others(rs) if r["balanced_us"]), key=lambda r: float(r["balanced_us"]), default=None)
            fb = num(fast, "balanced_us")
            auto = rs.get("auto")
            o = peer.get(("openmpi", b), (None,) * 4)[1]
            m = peer.get(("mpich", b), (None,) * 4)[1]
            print(f"| {size(b)} | {pb:.1f} | {fmt(fb)} ({name(fast)}) | {fmt(num(auto, 'balanced_us'))} ({name(auto)}) | {fmt(o)} | {fmt(m)} | {rat(pb, fb)} | {rat(pb, o)} |")
            summary.append((coll + f"_np{np_}_balanced", pb / fb if fb else None, None, None))
print("\n### cells meeting the targets (pap ≤ 0.70 × the best other Braid run and × Open MPI under imbalance; balanced ≤ 1.05 × the fastest other run)\n")
for tag in dict.fromkeys(t for t, *_ in summary):
    cs = [s for s in summary if s[0] == tag]
    if tag.endswith("_balanced"):
        nl = sum(1 for s in cs if s[1] is not None and s[1] <= 1.05)
        print(f"- {tag}: {nl}/{len(cs)} within 1.05")
        continue
    nb = sum(1 for s in cs if s[1] is not None and s[1] <= 0.70)
    no = sum(1 for s in cs if s[2] is not None and s[2] <= 0.70)
    nf = sum(1 for s in cs if s[3] is not None and s[3] > 0.70)
    better = sum(1 for s in cs if s[1] is not None and s[1] < 1.0)
    line = f"- {tag}: vs best Braid {nb}/{len(cs)} (faster at all: {better}), vs Open MPI {no}/{len(cs)}"
    if any(s[3] is not None for s in cs):
        line += f"; out of any allreduce's reach (floor / best > 0.70): {nf}/{len(cs)}"
    print(line)
EOF
