#!/usr/bin/env bash
# compare-gpu.sh: Braid's device collectives against NCCL on the same GPUs, sizes and conventions.
# Run it on the GPU machine from the repository root, with bin/braid built beforehand
# (CGO_ENABLED=0 go build -o bin/braid ./cmd/braid) and carried there.
#
#   scripts/compare-gpu.sh                   # 2 GPUs, 4 collectives, 8 B to 1 GiB, REPS=3 rounds
#   QUICK=1 scripts/compare-gpu.sh           # sizes 8,256,4K,64K,256K,64M,1G; short loops; rounds until BUDGET_S
#   SMOKE=1 scripts/compare-gpu.sh           # 1 GPU, sizes 8,4K,64K, one round: the harness end to end
#   NGPUS="2 4" COLLS="allreduce bcast" MAX=64M scripts/compare-gpu.sh
#
# What is measured, on both sides alike:
#  - per-call latency ("lat"): every call waited for before the next: Braid's synchronous calls
#    (braid bench --modes sync), NCCL's stream synchronised after every call; sizes to LAT_MAX;
#  - back to back ("b2b"): a loop of calls queued, one synchronisation: Braid's stream-ordered calls,
#    NCCL's usual loop; time per call and busbw;
#  - CUDA graph ("graph"): GRAPH_CALLS calls captured in one graph and replayed back to back, one
#    synchronisation; time per call; sizes to GRAPH_MAX. Braid: braid bench --modes graph
#    (DeviceComm.Capture after a few calls one by one; its fused kernels read their sequence numbers
#    from counters in device memory and advance them, so every replay runs new ones). Only calls that
#    Braid runs as fused kernels can be captured: a size it runs as a schedule (whose steps wait for
#    peers on the host) has no Braid graph figure and is listed as not capturable. NCCL:
#    torch.cuda.graph on the calls' stream.
# Inputs change call by call (INPUTS buffers in turn, out of place, distinct values that change from
# one timed loop to the next) and the last result of every timed loop is compared on every rank, on
# both sides: a wrong one is printed as WRONG RESULT, marks its row and makes the script exit 1.
# NCCL runs in every NCCL_PROTO of PROTOS, with its default buffers and with symmetric registration
# (ncclMemAlloc + ncclCommWindowRegister, NCCL 2.27+, skipped with a line where absent); the table
# names the fastest per cell. Braid runs its defaults, and also with --host-share never
# ("braid-nvl": no data through host memory and PCIe) on more than 2 GPUs, and for the broadcast on 2
# (the only collective whose default sends data through host there). REPS rounds, each Braid then
# NCCL; the table gives per cell the median over the rounds and the spread (min-max), and is
# rewritten after every round, so that a cut-off run leaves one.
#
# Other variables: NGPUS, BRAID_EXTRA (Braid alone on more ranks, sharing the GPUs), COLLS, MIN, MAX
# or SIZES, REPS, TRIALS, TARGET_MS, LAT_MAX, GRAPH_MAX, GRAPH_CALLS, INPUTS (at least 2), PROTOS,
# REGS, BUDGET_S (no new round where the last round's time would take the run past it; 0: none), BRAID_FLAGS (more braid bench flags, e.g.
# --check; not --sync, the script times both modes), RESIDENT (a duration, e.g. 500us: also time Braid's
# synchronous allreduces on the resident kernel, BRAID_GPU_RESIDENT, up to RESIDENT_MAX bytes, default 16K:
# the "braid-res" column of the per-call table), NCCL_FLAGS (more nccl_ctypes.py flags, e.g.
# --envs 'ch32:NCCL_MIN_NCHANNELS=32' for one more NCCL configuration), T_BRAID, T_NCCL (timeouts).
#
# Output, all in DIR ($OUT/compare-gpu, or /tmp/compare-gpu without $OUT): table.txt (the table),
# braid.rR.VARIANT.jsonl and nccl.rR.jsonl (every measurement of round R), *.log (the programs'
# output), env.txt (GPUs, links, versions). scripts/nccl-tests.sh writes its cross-check here too,
# and table.txt shows it once it is there (run this script after it, or
# python3 scripts/compare_gpu_table.py DIR > DIR/table.txt).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if [ -n "${SMOKE:-}" ]; then
	NGPUS=${NGPUS:-1} SIZES=${SIZES:-8,4K,64K} REPS=${REPS:-1} TARGET_MS=${TARGET_MS:-5} GRAPH_CALLS=${GRAPH_CALLS:-4}
	BRAID_EXTRA=${BRAID_EXTRA-2} T_BRAID=${T_BRAID:-90} T_NCCL=${T_NCCL:-240}
	label="SMOKE"
elif [ -n "${QUICK:-}" ]; then
	SIZES=${SIZES:-8,256,4K,64K,256K,64M,1G} TARGET_MS=${TARGET_MS:-10} BUDGET_S=${BUDGET_S:-210} T_BRAID=${T_BRAID:-150} T_NCCL=${T_NCCL:-300}
	label="QUICK"
else
	label="FULL"
fi
NGPUS=${NGPUS:-2}
BRAID_EXTRA=${BRAID_EXTRA:-}
RESIDENT=${RESIDENT:-}
RESIDENT_MAX=${RESIDENT_MAX:-16K}
COLLS=${COLLS:-allreduce bcast allgather reducescatter}
MIN=${MIN:-8}
MAX=${MAX:-1G}
SIZES=${SIZES:-}
REPS=${REPS:-3}
TRIALS=${TRIALS:-1}
TARGET_MS=${TARGET_MS:-50}
LAT_MAX=${LAT_MAX:-4M}
GRAPH_MAX=${GRAPH_MAX:-4M}
GRAPH_CALLS=${GRAPH_CALLS:-20}
INPUTS=${INPUTS:-4}
PROTOS=${PROTOS:-default,LL,LL128,Simple}
REGS=${REGS:-none,sym}
BUDGET_S=${BUDGET_S:-0}
DIR=${DIR:-${OUT:-/tmp}/compare-gpu}
PY=${PY:-python3}
BRAID=${BRAID:-bin/braid}
BRAID_FLAGS=${BRAID_FLAGS:-}
NCCL_FLAGS=${NCCL_FLAGS:-}
T_BRAID=${T_BRAID:-600}
T_NCCL=${T_NCCL:-1800}
here=$(cd "$(dirname "$0")" && pwd)

maxn=0
for n in $NGPUS; do [ "$n" -gt "$maxn" ] && maxn=$n; done
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
	gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ "$gpus" -lt 1 ]; then
	echo "compare-gpu.sh: SKIP: no GPU here (nvidia-smi absent or lists none)"
	exit 0
fi
if [ "$gpus" -lt "$maxn" ]; then
	echo "compare-gpu.sh: SKIP: NGPUS=\"$NGPUS\" needs $maxn GPUs, this machine has $gpus (SMOKE=1 runs on one)"
	exit 0
fi
if [ "$INPUTS" -lt 2 ]; then
	echo "compare-gpu.sh: INPUTS=$INPUTS: want 2 or more (the inputs change call by call)" >&2
	exit 2
fi
if [ ! -x "$BRAID" ]; then
	echo "compare-gpu.sh: no $BRAID: build it (CGO_ENABLED=0 go build -o bin/braid ./cmd/braid) and carry it" >&2
	exit 2
fi
if ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
	echo "compare-gpu.sh: $PY has no torch, which drives NCCL here" >&2
	exit 2
fi
mkdir -p "$DIR"
rm -f "$DIR"/braid.r*.jsonl "$DIR"/nccl.r*.jsonl "$DIR"/braid.log "$DIR"/nccl.log "$DIR"/table.txt

tobytes() { "$PY" -c "import sys; s=sys.argv[1].upper(); m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }
if [ -n "$SIZES" ]; then
	bsizes=(--sizes "$SIZES")
	nsizes=(--sizes "$SIZES")
else
	bsizes=(--min-size "$MIN" --max-size "$MAX")
	nsizes=(--min-bytes "$(tobytes "$MIN")" --max-bytes "$(tobytes "$MAX")")
fi

{
	echo "# compare-gpu.sh $label, $(date -u +%FT%TZ)"
	echo "NGPUS=$NGPUS COLLS=$COLLS SIZES=${SIZES:-$MIN..$MAX} REPS=$REPS TRIALS=$TRIALS TARGET_MS=$TARGET_MS LAT_MAX=$LAT_MAX GRAPH_MAX=$GRAPH_MAX GRAPH_CALLS=$GRAPH_CALLS INPUTS=$INPUTS PROTOS=$PROTOS REGS=$REGS BUDGET_S=$BUDGET_S BRAID_FLAGS=$BRAID_FLAGS NCCL_FLAGS=$NCCL_FLAGS"
	env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|BRAID_|CUDA_VISIBLE)' | sort
	nvidia-smi -L
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
	nvidia-smi topo -m 2>&1 | head -20
	"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
	"$PY" -m pip list 2>/dev/null | grep -i -E 'nccl|torch' || true
	git log -1 --format='braid commit %H %s' 2>/dev/null || true
	ls -l "$BRAID"
} >"$DIR/env.txt" 2>&1

[ -n "$BRAID_EXTRA" ] && notes0="Braid alone also on $BRAID_EXTRA ranks (BRAID_EXTRA; more ranks than the $gpus GPU(s) share them; NCCL runs one rank a GPU); " || notes0=""
notes=("$notes0$label run: NGPUS=$NGPUS, sizes ${SIZES:-$MIN..$MAX}, $INPUTS input buffers in turn, loops of ${TARGET_MS} ms, $TRIALS loop(s) per cell per round; lat to $LAT_MAX, graph ($GRAPH_CALLS calls a graph) to $GRAPH_MAX")
fails=0
table() {
	"$PY" "$here/compare_gpu_table.py" "$DIR" "${notes[@]}" >"$DIR/table.txt"
	return $?
}
start=$(date +%s)
rounds=0
last=0 # seconds the last round took
for r in $(seq 1 "$REPS"); do
	now=$(($(date +%s) - start))
	if [ "$BUDGET_S" -gt 0 ] && [ "$rounds" -ge 1 ] && [ $((now + last)) -gt "$BUDGET_S" ]; then
		notes+=("stopped after $rounds of REPS=$REPS rounds: another round of ${last} s would pass BUDGET_S=$BUDGET_S s (at $now s)")
		echo "compare-gpu.sh: $rounds round(s) in $now s; another of ${last} s would pass BUDGET_S=$BUDGET_S: no more rounds"
		break
	fi
	rstart=$(date +%s)
	for n in $NGPUS $BRAID_EXTRA; do
		# More Braid ranks than GPUs (BRAID_EXTRA) share them: rank r on GPU r mod the GPUs.
		devs=$(seq -s, 0 $(($(( n < gpus ? n : gpus )) - 1)))
		for c in $COLLS; do
			# On 2 GPUs only the broadcast sends data through host by default.
			cv="default"
			[ "$n" -gt 2 ] || [ "$c" = bcast ] && cv="default nvl"
			[ -n "$RESIDENT" ] && [ "$c" = allreduce ] && cv="$cv res"
			for v in $cv; do
				vflags=() venv=()
				[ "$v" = nvl ] && vflags=(--host-share never)
				[ "$v" = res ] && vflags=(--modes sync) venv=(BRAID_GPU_RESIDENT="$RESIDENT" BRAID_GPU_RESIDENT_MAX="$RESIDENT_MAX")
				echo "== round $r: braid $c on $n GPUs ($v) [$(($(date +%s) - start)) s]"
				echo "== round $r: braid $c on $n GPUs ($v)" >>"$DIR/braid.log"
				env ${venv[@]+"${venv[@]}"} CUDA_VISIBLE_DEVICES=$devs timeout "$T_BRAID" "$BRAID" bench --device cuda -n "$n" "$c" "${bsizes[@]}" --inputs "$INPUTS" \
					--modes ordered,sync,graph --sync-max "$LAT_MAX" --graph-max "$GRAPH_MAX" --graph-calls "$GRAPH_CALLS" \
					--trials "$TRIALS" --target "${TARGET_MS}ms" --format json ${vflags[@]+"${vflags[@]}"} $BRAID_FLAGS \
					>>"$DIR/braid.r$r.$v.jsonl" 2>>"$DIR/braid.log"
				rc=$?
				if [ $rc -ne 0 ]; then
					fails=$((fails + 1))
					echo "compare-gpu.sh: FAILED: round $r braid $c on $n GPUs ($v): status $rc$(grep -q 'WRONG RESULT' "$DIR/braid.log" && echo ', WRONG RESULTS (braid.log)')"
					tail -5 "$DIR/braid.log"
				fi
			done
		done
		case " $NGPUS " in *" $n "*) ;; *) continue ;; esac
		echo "== round $r: nccl on $n GPUs [$(($(date +%s) - start)) s]"
		echo "== round $r: nccl on $n GPUs" >>"$DIR/nccl.log"
		CUDA_VISIBLE_DEVICES=$devs timeout "$T_NCCL" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$n" \
			"$here/nccl_ctypes.py" --out "$DIR/nccl.r$r.jsonl" --round "$r" --colls "$(echo $COLLS | tr ' ' ,)" "${nsizes[@]}" \
			--target-ms "$TARGET_MS" --trials "$TRIALS" --lat-max "$(tobytes "$LAT_MAX")" --graph-max "$(tobytes "$GRAPH_MAX")" \
			--graph-calls "$GRAPH_CALLS" --inputs "$INPUTS" --protos "$PROTOS" --regs "$REGS" $NCCL_FLAGS >>"$DIR/nccl.log" 2>&1
		rc=$?
		sed -n "/^== round $r: nccl on $n GPUs\$/,\$p" "$DIR/nccl.log" | grep -E 'nccl_ctypes: (NCCL|SKIP)' | sed 's/^/   /' | head -3
		if [ $rc -ne 0 ]; then
			fails=$((fails + 1))
			echo "compare-gpu.sh: FAILED: round $r nccl on $n GPUs: status $rc$(grep -q 'WRONG RESULT' "$DIR/nccl.log" && echo ', WRONG RESULTS (nccl.log)')"
			tail -8 "$DIR/nccl.log"
		fi
	done
	rounds=$r
	last=$(($(date +%s) - rstart))
	table
done
table
trc=$?
echo "compare-gpu.sh: $rounds round(s) in $(($(date +%s) - start)) s; $fails program(s) failed; table: $DIR/table.txt"
cat "$DIR/table.txt"
if [ $fails -gt 0 ] || [ $trc -ne 0 ]; then
	echo "compare-gpu.sh: FAILURES or WRONG RESULTS above" >&2
	exit 1
fi
