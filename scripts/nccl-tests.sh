#!/usr/bin/env bash
# nccl-tests.sh: NVIDIA's nccl-tests, built from source on the GPU machine against the NCCL of the
# pip wheel that PyTorch uses (site-packages/nvidia/nccl, found at run time), run as the cross-check
# of scripts/compare-gpu.sh: NCCL measured by NVIDIA's own harness, no Python in its path.
#
# The source is not part of this repository. Bring it with the session's fetch tool
# (github:NVIDIA/nccl-tests) and unpack it into the git-ignored .carry/ on the machine that starts
# the device run, which carries it:
#
#   scripts/nccl-tests.sh --unpack /work/.mirror/NVIDIA+nccl-tests/repo   # writes .carry/nccl-tests
#
# On the GPU machine, from the repository root (carry .carry/nccl-tests):
#
#   scripts/nccl-tests.sh                     # 2 GPUs, 8 B to 1 GiB by powers of 2
#   QUICK=1 scripts/nccl-tests.sh             # 8 B to 1 GiB by powers of 8 (10 sizes), fewer iterations
#   SMOKE=1 scripts/nccl-tests.sh             # 1 GPU, tiny sizes: the build and the runs end to end
#
# Variables: NCCL_TESTS_SRC (the source; default .carry/nccl-tests), NCCL_TESTS_BUILD (default
# /tmp/nccl-tests-build), NGPUS, TESTS, VARIANTS, ITERS, WARMUP, NVCC_GENCODE (default sm_90 only:
# H100 and H200), PY, DIR (default $OUT/compare-gpu, else /tmp/compare-gpu).
#
# Runs every test of TESTS (all_reduce_perf broadcast_perf all_gather_perf reduce_scatter_perf) in
# one process driving NGPUS GPUs (-g), float32, sum, with its check of every result (-c 1), once per
# variant of VARIANTS:
#   base   NCCL's default buffers;
#   sym    -R 2: buffers from ncclMemAlloc registered as symmetric windows (NCCL 2.27+);
#   graph  -G 20: each timed loop's ITERS calls captured in a CUDA graph, the graph launched 20 times.
# Output: DIR/nccl-tests.TEST.VARIANT.txt (nccl-tests' own table), and a line per run on stdout.
# scripts/compare_gpu_table.py reads those files into the cross-check section of DIR/table.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [ "${1:-}" = "--unpack" ]; then
	mirror=${2:?usage: scripts/nccl-tests.sh --unpack GIT_DIR, the git directory that the fetch tool made}
	dst=${NCCL_TESTS_SRC:-.carry/nccl-tests}
	rm -rf "$dst" && mkdir -p "$dst" || exit 1
	git --git-dir="$mirror" archive HEAD | tar -x -C "$dst" || exit 1
	echo "nccl-tests.sh: unpacked $(git --git-dir="$mirror" log -1 --format='%h %s' HEAD) into $dst ($(du -sh "$dst" | cut -f1))"
	exit 0
fi

SRC=${NCCL_TESTS_SRC:-.carry/nccl-tests}
BUILD=${NCCL_TESTS_BUILD:-/tmp/nccl-tests-build}
PY=${PY:-python3}
DIR=${DIR:-${OUT:-/tmp}/compare-gpu}
TESTS=${TESTS:-all_reduce_perf broadcast_perf all_gather_perf reduce_scatter_perf}
VARIANTS=${VARIANTS:-base sym graph}
if [ -n "${SMOKE:-}" ]; then
	NGPUS=${NGPUS:-1} MINB=${MINB:-8} MAXB=${MAXB:-64K} STEP=${STEP:-8} ITERS=${ITERS:-10} WARMUP=${WARMUP:-2}
elif [ -n "${QUICK:-}" ]; then
	NGPUS=${NGPUS:-2} MINB=${MINB:-8} MAXB=${MAXB:-1G} STEP=${STEP:-8} ITERS=${ITERS:-50} WARMUP=${WARMUP:-10}
else
	NGPUS=${NGPUS:-2} MINB=${MINB:-8} MAXB=${MAXB:-1G} STEP=${STEP:-2} ITERS=${ITERS:-100} WARMUP=${WARMUP:-20}
fi
mkdir -p "$DIR"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "nccl-tests.sh: SKIP: no GPU here (nvidia-smi absent or failing)"
	exit 0
fi
if [ ! -f "$SRC/src/common.cu" ]; then
	echo "nccl-tests.sh: no nccl-tests source at $SRC (NCCL_TESTS_SRC): unpack it with --unpack and carry it" >&2
	exit 2
fi
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
	echo "nccl-tests.sh: no nvcc" >&2
	exit 2
fi
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
# The wheel's NCCL: nvidia/nccl in site-packages (a namespace package), include/nccl.h and lib/libnccl.so.2.
NCCL_DIR=$("$PY" - <<'EOF'
import glob, os, site
c = []
try:
    import nvidia.nccl as m
    c += list(m.__path__)
except Exception:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    c.append(os.path.join(sp, "nvidia", "nccl"))
for d in c:
    if glob.glob(os.path.join(d, "lib", "libnccl.so*")):
        print(d)
        break
EOF
)
if [ -z "$NCCL_DIR" ] || [ ! -f "$NCCL_DIR/include/nccl.h" ]; then
	echo "nccl-tests.sh: no NCCL wheel with headers found (site-packages/nvidia/nccl/{include/nccl.h,lib/libnccl.so.2}; found '${NCCL_DIR}')" >&2
	exit 2
fi
LIB=$(ls "$NCCL_DIR"/lib/libnccl.so* | head -1)
# nccl-tests links -lnccl: a libnccl.so beside links to the wheel's library.
mkdir -p "$BUILD/nccl/lib" "$BUILD/out"
ln -sfn "$NCCL_DIR/include" "$BUILD/nccl/include"
ln -sfn "$LIB" "$BUILD/nccl/lib/libnccl.so"
ln -sfn "$LIB" "$BUILD/nccl/lib/libnccl.so.2"
GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
bins=""
for t in $TESTS; do bins="$bins $BUILD/out/$t"; done
# A build of the same source, library and targets is kept (a later call on the same machine).
stamp="$LIB $GENCODE $NVCC $(find "$SRC" -type f | LC_ALL=C sort | xargs cat | md5sum | cut -c1-32)"
built=1
for b in $bins; do [ -x "$b" ] || built=0; done
if [ $built = 1 ] && [ "$(cat "$BUILD/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "nccl-tests.sh: the build in $BUILD/out is of this source and library: kept"
else
	rm -rf "$BUILD/src" "$BUILD/out" "$BUILD/stamp" && mkdir -p "$BUILD/out" && cp -r "$SRC" "$BUILD/src"
	echo "nccl-tests.sh: building$(for t in $TESTS; do printf ' %s' "$t"; done) with $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*')) against $LIB"
	start=$(date +%s)
	if ! make -C "$BUILD/src/src" -j"$(nproc)" BUILDDIR="$BUILD/out" CUDA_HOME="$CUDA_HOME" NVCC="$NVCC" NCCL_HOME="$BUILD/nccl" \
		NVCC_GENCODE="$GENCODE" $bins >"$DIR/nccl-tests.build.log" 2>&1; then
		tail -30 "$DIR/nccl-tests.build.log" >&2
		echo "nccl-tests.sh: BUILD FAILED (log: $DIR/nccl-tests.build.log)" >&2
		exit 1
	fi
	echo "$stamp" >"$BUILD/stamp"
	echo "nccl-tests.sh: built in $(($(date +%s) - start)) s"
fi

# The wheel's NCCL, and the toolkit's CUDA runtime that nccl-tests links.
export LD_LIBRARY_PATH="$NCCL_DIR/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! ldd "$BUILD/out/${TESTS%% *}" >"$DIR/nccl-tests.ldd.txt" 2>&1 || grep -q 'not found' "$DIR/nccl-tests.ldd.txt"; then
	echo "nccl-tests.sh: the built tests miss libraries:" >&2
	grep 'not found' "$DIR/nccl-tests.ldd.txt" >&2
	exit 1
fi
grep -E 'libnccl|libcudart' "$DIR/nccl-tests.ldd.txt" | sed 's/^[[:space:]]*/nccl-tests.sh: uses /'
fail=0
for v in $VARIANTS; do
	case $v in
	base) extra="" ;;
	sym) extra="-R 2" ;;
	graph) extra="-G 20" ;;
	*) echo "nccl-tests.sh: variant $v: want base, sym or graph" >&2; exit 2 ;;
	esac
	for t in $TESTS; do
		f="$DIR/nccl-tests.${t%_perf}.$v.txt"
		CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((NGPUS - 1))) timeout 300 "$BUILD/out/$t" -b "$MINB" -e "$MAXB" -f "$STEP" -g "$NGPUS" \
			-d float -o sum -c 1 -n "$ITERS" -w "$WARMUP" $extra >"$f" 2>&1
		rc=$?
		wrong=$(awk -F: '/# Out of bounds values/ {split($2, a, " "); print a[1]}' "$f")
		avg=$(awk -F: '/# Avg bus bandwidth/ {split($2, a, " "); print a[1]}' "$f")
		if [ $rc -ne 0 ] || [ "${wrong:-1}" != "0" ]; then
			fail=1
			echo "nccl-tests.sh: $t $v: FAILED (status $rc, out-of-bounds values ${wrong:-?}); see $f" >&2
			tail -5 "$f" >&2
		else
			echo "nccl-tests.sh: $t $v ($extra): ok, avg busbw $avg GB/s -> $f"
		fi
	done
done
exit $fail
