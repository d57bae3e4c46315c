#!/usr/bin/env bash
# compare-imbalance.sh: Braid's arrival-aware reductions against its other
# algorithms and against Open MPI and MPICH, under the same injected
# arrival imbalance (issue 17's acceptance benchmark).
#
#   scripts/compare-imbalance.sh                        # np 4, MIF 10 20 50, allreduce and reduce, 8 B-16 MiB
#   NPS="8 16" MIFS="10 50" COLLS=allreduce scripts/compare-imbalance.sh
#
# For each rank count, collective and MIF it runs `braid bench COLL
# --imbalance MIF --algos ALGOS` (pap and papchain, the arrival-aware
# ones; the planner's choice "auto"; the collective's other algorithms), takes from its CSV the α braid used at
# each size (the smallest balanced latency of its runs), and runs
# scripts/mpi-imbalance.c built against each MPI with that α, so that MPI
# meets the same bound, the same distribution and the same seed (Go's PCG,
# ported). It prints a markdown table per case: pap's latency under
# imbalance against the best non-arrival-aware Braid run and each MPI, and
# pap's balanced latency against the fastest non-arrival-aware run's (so
# also against the planner's choice, one of them).
#
# Environment: BRAID (default: go build ./cmd/braid), MPIRUN_OPENMPI,
# MPIRUN_MPICH (default mpirun.openmpi, mpirun.mpich on PATH; a missing one
# is left out), MPIIMB_OPENMPI, MPIIMB_MPICH (the benchmark built against
# each; default: built here with mpicc.openmpi / mpicc.mpich), SIZES
# (comma-separated), BUDGET (braid's --budget; the MPI benchmark gets the
# same), SEED, OUT (default out/compare-imbalance).
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
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"
have() { command -v "$1" >/dev/null 2>&1; }
if [ -z "${BRAID:-}" ]; then
    BRAID=$OUT/braid
    go build -o "$BRAID" ./cmd/braid
fi
MPIRUN_OPENMPI=${MPIRUN_OPENMPI:-mpirun.openmpi}
MPIRUN_MPICH=${MPIRUN_MPICH:-mpirun.mpich}
libs=""
for lib in openmpi mpich; do
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
{ echo "cores: $(nproc)"; lscpu 2>/dev/null | grep -E 'Model name|NUMA node\(s\)' || true; date -u; } > "$OUT/machine.txt"

for np in $NPS; do
    ov=""; [ "$np" -gt "$(nproc)" ] && ov="--oversubscribe"
    for coll in $COLLS; do
        case $coll in
        allreduce) algos=pap,papchain,auto,shm,recdouble,rabenseifner,segring ;;
        reduce) algos=pap,papchain,auto,shm,binomial,knomial,linear ;;
        esac
        for mif in $MIFS; do
            tag=${coll}_np${np}_mif$mif
            echo "== braid $tag" >&2
            timeout 900 "$BRAID" run -n "$np" -- "$BRAID" bench "$coll" --imbalance "$mif" --seed "$SEED" --algos "$algos" \
                --sizes "$SIZES" --budget "$BUDGET" --format csv > "$OUT/braid_$tag.csv" 2> "$OUT/braid_$tag.err" \
                || echo "braid $tag failed: $? ($(tail -1 "$OUT/braid_$tag.err"))" >&2
            python3 - "$OUT/braid_$tag.csv" > "$OUT/alpha_$tag.txt" <<'EOF'
import csv, sys
alpha = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["balanced_us"]:
        b = int(r["bytes"])
        alpha[b] = min(alpha.get(b, 1e300), float(r["balanced_us"]))
for b in sorted(alpha):
    print(b, alpha[b])
EOF
            for lib in $libs; do
                var=MPIIMB_${lib^^}; run=MPIRUN_${lib^^}
                extra=""; [ "$lib" = openmpi ] && extra="$asroot $ov"
                echo "== $lib $tag" >&2
                timeout 900 "${!run}" $extra -np "$np" "${!var}" -l "$lib" -t "$coll" -f "$mif" -s "$SEED" \
                    -a "$OUT/alpha_$tag.txt" -b "$budget_s" > "$OUT/${lib}_$tag.txt" 2> "$OUT/${lib}_$tag.err" \
                    || echo "$lib $tag failed: $?" >&2
            done
        done
    done
done

python3 - "$OUT" "$COLLS" "$NPS" "$MIFS" <<'EOF' | tee "$OUT/table.md"
import csv, os, sys
out, colls, nps, mifs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def size(b):
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{u}"
    return str(b)
summary = []
for coll in colls:
    for np_ in nps:
        for mif in mifs:
            tag = f"{coll}_np{np_}_mif{mif}"
            p = os.path.join(out, f"braid_{tag}.csv")
            if not os.path.exists(p) or not os.path.getsize(p):
                continue
            rows = {}
            for r in csv.DictReader(open(p)):
                rows.setdefault(int(r["bytes"]), []).append(r)
            peer = {}
            for lib in ("openmpi", "mpich"):
                q = os.path.join(out, f"{lib}_{tag}.txt")
                if os.path.exists(q):
                    for line in open(q):
                        if line.startswith("RES,"):
                            f = line.strip().split(",")
                            peer[(lib, int(f[4]))] = float(f[6])
            print(f"\n### {coll}, {np_} ranks, MIF {mif}\n")
            print("| size | pap µs | papchain µs | best other Braid µs (algo) | Open MPI µs | MPICH µs | pap / best Braid | pap / Open MPI | balanced: pap µs | fastest other µs (algo) | pap / fastest | auto µs (ran) |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for b in sorted(rows):
                rs = {r["algo"]: r for r in rows[b]}
                pap = rs.get("pap")
                if pap is None or not pap["avg_us"]:
                    continue
                # Runs that are not arrival-aware: every run but pap, and
                # auto only if the planner had not switched it to pap.
                aware = ("pap", "papchain")
                others = [r for a, r in rs.items() if a not in aware and r["avg_us"] and r["ran"] not in aware]
                ch = rs.get("papchain")
                cv = float(ch["avg_us"]) if ch and ch["avg_us"] else None
                best = min(others, key=lambda r: float(r["avg_us"])) if others else None
                fast = min((r for r in others if r["balanced_us"]), key=lambda r: float(r["balanced_us"]), default=None)
                auto = rs.get("auto")
                o, m = peer.get(("openmpi", b)), peer.get(("mpich", b))
                pv = float(pap["avg_us"])
                bv = float(best["avg_us"]) if best else None
                def fmt(x): return f"{x:.1f}" if x is not None else "—"
                def rat(x, y): return f"{x / y:.2f}" if x is not None and y else "—"
                def name(r): return (r["ran"] or r["algo"]) if r else ""
                fb = float(fast["balanced_us"]) if fast else None
                pb = float(pap["balanced_us"]) if pap["balanced_us"] else None
                ab = float(auto["balanced_us"]) if auto and auto["balanced_us"] else None
                print(f"| {size(b)} | {pv:.1f} | {fmt(cv)} | {fmt(bv)} ({name(best)}) | {fmt(o)} | {fmt(m)} | {rat(pv, bv)} | {rat(pv, o)} | {fmt(pb)} | {fmt(fb)} ({name(fast)}) | {rat(pb, fb)} | {fmt(ab)} ({name(auto)}) |")
                summary.append((tag, b, pv / bv if bv else None, pv / o if o else None, pb / fb if pb and fb else None))
print("\n### cells meeting the targets (pap ≤ 0.70 × best other Braid and × Open MPI under imbalance; balanced ≤ 1.05 × the fastest other run, so also × the planner's choice)\n")
for tag in dict.fromkeys(t for t, *_ in summary):
    cs = [s for s in summary if s[0] == tag]
    nb = sum(1 for s in cs if s[2] is not None and s[2] <= 0.70)
    no = sum(1 for s in cs if s[3] is not None and s[3] <= 0.70)
    nl = sum(1 for s in cs if s[4] is not None and s[4] <= 1.05)
    print(f"- {tag}: vs best Braid {nb}/{len(cs)}, vs Open MPI {no}/{len(cs)}, balanced {nl}/{len(cs)}")
EOF
