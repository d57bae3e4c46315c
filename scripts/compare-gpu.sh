#!/usr/bin/env bash
# compare-gpu.sh: Braid's device collectives against NCCL (called directly through ctypes,
# scripts/nccl_ctypes.py) on the same GPUs, sizes and conventions, in one run; prints the
# ratios. Run it on the GPU machine from the repository root, with bin/braid built beforehand
# (CGO_ENABLED=0 go build -o bin/braid ./cmd/braid) and carried there.
#
#   scripts/compare-gpu.sh                                   # 2 GPUs, 4 collectives, 8 B to 1 GiB
#   NGPUS="2 4" COLLS="allreduce bcast" MAX=64M scripts/compare-gpu.sh
#
# Output: DIR/braid.jsonl, DIR/nccl.jsonl and the table (DIR is $OUT/compare-gpu, or
# /tmp/compare-gpu without $OUT). Ratios: latency = Braid time / NCCL time (lower is better
# for Braid); busbw = Braid busbw / NCCL busbw (higher is better). NCCL's "async" time is its
# usual figure (a loop of calls enqueued, one synchronisation), which Braid's stream-ordered
# calls (braid bench's default) are compared with; "sync" synchronises after every call, as
# Braid's synchronous calls (BRAID_FLAGS=--sync) do, and is then the base of the ratios.
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
NGPUS=${NGPUS:-2}
COLLS=${COLLS:-allreduce bcast allgather reducescatter}
MAX=${MAX:-1G}
DIR=${DIR:-${OUT:-/tmp}/compare-gpu}
PY=${PY:-python3}
BRAID=${BRAID:-bin/braid}
BRAID_FLAGS=${BRAID_FLAGS:-}
mkdir -p "$DIR"
: > "$DIR/braid.jsonl"
: > "$DIR/nccl.jsonl"
maxb=$("$PY" -c "import sys; s=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$MAX")
for n in $NGPUS; do
	devs=$(seq -s, 0 $((n - 1)))
	for c in $COLLS; do
		echo "== braid $c on $n GPUs" >&2
		CUDA_VISIBLE_DEVICES=$devs timeout 300 "$BRAID" bench --device cuda -n "$n" "$c" --max-size "$MAX" --format json $BRAID_FLAGS >> "$DIR/braid.jsonl"
	done
	echo "== nccl on $n GPUs" >&2
	CUDA_VISIBLE_DEVICES=$devs timeout 400 "$PY" -m torch.distributed.run --standalone --nproc_per_node="$n" \
		scripts/nccl_ctypes.py --out "$DIR/nccl.jsonl" --colls "$(echo $COLLS | tr ' ' ,)" --max-bytes "$maxb" >&2
done
"$PY" - "$DIR/braid.jsonl" "$DIR/nccl.jsonl" <<'PYEOF'
import json, sys
braid = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
nccl = {}
for l in open(sys.argv[2]):
    r = json.loads(l)
    nccl[(r["op"], r["n"], r["bytes"], r["mode"])] = r
def size(b):
    for s, u in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= s and b % s == 0:
            return "%d%s" % (b // s, u)
    return str(b)
# "host us": how long Braid's host took to issue a call (the worker's
# launches); where it is close to "braid us", launches bound the rate.
print("%-13s %2s %6s %-18s %10s %8s %10s %10s %8s %8s %8s %8s %7s" % (
    "collective", "n", "size", "braid algo", "braid us", "host us", "nccl us", "nccl sync", "lat×", "lat×sync",
    "braid bw", "nccl bw", "bw×"))
for r in braid:
    # Braid's stream-ordered calls compare with NCCL's usual loop ("async"),
    # its synchronous ones (--sync) with NCCL synchronised after every call.
    a = nccl.get((r["op"], r["n"], r["bytes"], "sync" if r.get("mode") == "sync" else "async"))
    s = nccl.get((r["op"], r["n"], r["bytes"], "sync"))
    if a is None:
        continue
    print("%-13s %2d %6s %-18s %10.2f %8.2f %10.2f %10s %8.2f %8s %8.1f %8.1f %7.2f" % (
        r["op"], r["n"], size(r["bytes"]), r["algo"][:18], r["time_us"], r.get("issue_us", 0), a["time_us"],
        "%.2f" % s["time_us"] if s else "-", r["time_us"] / a["time_us"],
        "%.2f" % (r["time_us"] / s["time_us"]) if s else "-",
        r["busbw_GBps"], a["busbw_GBps"], r["busbw_GBps"] / a["busbw_GBps"]))
PYEOF
