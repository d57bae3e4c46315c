#!/usr/bin/env bash
# check-tuning.sh: does the planner, with a tuning table, keep up with the
# best single algorithm at every size?
#
#   scripts/check-tuning.sh                       # tunes, then checks allreduce and bcast on 2 and 4 ranks
#   TABLE=tuning.txt NPS="2 4" COLLS="allreduce bcast" SIZES="8 64M" scripts/check-tuning.sh
#
# With TABLE unset it first runs `braid tune` (writing $OUT/tuning.txt).
# Then, for each collective and rank count, one `braid bench --all-algos`
# times every algorithm and the planner's choice ("auto", reading the
# table through BRAID_TUNING) side by side, and the script prints per size
# auto's latency over the best algorithm's. A ratio above 1.10 is flagged.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/check-tuning}
NPS=${NPS:-"2 4"}
COLLS=${COLLS:-"allreduce bcast"}
SIZES=${SIZES:-"8 64M"}
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$OUT"
go build -o "$OUT/braid" ./cmd/braid
set -- $SIZES
min=$1; max=${2:-$1}
if [ -z "${TABLE:-}" ]; then
    TABLE=$OUT/tuning.txt
    "$OUT/braid" tune -n "$(echo $NPS | tr ' ' ,)" --colls "$(echo $COLLS | tr ' ' ,)" \
        --min-size "$min" --max-size "$max" --step 4 --out "$TABLE" > /dev/null
fi
for np in $NPS; do
    for coll in $COLLS; do
        BRAID_TUNING=$TABLE "$OUT/braid" bench -n "$np" "$coll" --all-algos --check \
            --min-size "$min" --max-size "$max" --reps "${REPS:-2}" --budget "${BUDGET:-100ms}" --format csv > "$OUT/${coll}_np$np.csv"
    done
done
python3 - "$OUT" "$NPS" "$COLLS" <<'PY'
import csv, os, sys
out, nps, colls = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| collective | ranks | size | auto µs (ran) | best algorithm µs | auto / best |")
print("|---|---:|---:|---:|---:|---:|")
worst = 0
for coll in colls:
    for np_ in nps:
        by = {}
        for r in csv.DictReader(open(os.path.join(out, f"{coll}_np{np_}.csv"))):
            if r.get("error"):
                continue
            by.setdefault(int(r["bytes"]), []).append(r)
        for b in sorted(by):
            rows = by[b]
            auto = [r for r in rows if r["algo"] == "auto"]
            rest = [r for r in rows if r["algo"] != "auto"]
            if not auto or not rest:
                continue
            a = float(auto[0]["avg_us"])
            best = min(rest, key=lambda r: float(r["avg_us"]))
            ratio = a / float(best["avg_us"])
            worst = max(worst, ratio)
            flag = " **over 1.10**" if ratio > 1.10 else ""
            print(f"| {coll} | {np_} | {b} | {a:.2f} ({auto[0]['ran']}) | {float(best['avg_us']):.2f} ({best['algo']}) | {ratio:.2f}{flag} |")
print(f"\nworst auto / best: {worst:.2f}")
PY
