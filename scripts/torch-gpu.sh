#!/usr/bin/env bash
# Braid's PyTorch backend on a GPU machine that has PyTorch 2.x with CUDA
# (and nvcc, g++) but no Go: the libraries and test binaries are built here
# and carried there.
#
#   scripts/torch-gpu.sh bundle             # here: .carry/gpu/ (about 33 MB)
#   scripts/torch-gpu.sh run [STEP...]      # there, from the repository root, .carry/gpu carried
#
# The bundle: libbraid.so.gz (the C API, cgo, linking no CUDA library: the
# driver is loaded at run time) and device (capi/testdata/device.c built
# against it) from scripts/capi-gpu.sh, braid.test.gz (the root
# package's tests, CGO_ENABLED=0) and braid.gz (the command, CGO_ENABLED=0).
# The steps of run, in the order given (default: build check cuda cpu):
#   build  the extension against the python3 there (torch/setup.py with
#          BRAID_LIB: CUDA tensors where PyTorch has CUDA and the CUDA
#          runtime's headers are found); what the build found is printed
#   check  torch/tests/cuda.py (every collective on CUDA tensors, checked)
#          and torch/tests/smoke.py (CPU tensors) with backend braid on
#          max(2, GPUs) ranks under torchrun: ranks share a GPU where they
#          outnumber them
#   cuda   torch/bench/cuda_allreduce.py: all_reduce on CUDA tensors, braid
#          against nccl, 8 B to 64 MiB, one rank per GPU (skipped below 2
#          GPUs: NCCL refuses two ranks on one GPU)
#   cpu    torch/bench/allreduce.py: all_reduce on CPU tensors, braid
#          against gloo, 8 B to 64 MiB, at CPU_RANKS ranks ("8 16")
#   native the same all_reduce without PyTorch, 64 KiB to 64 MiB, at
#          NATIVE_RANKS ranks (CPU_RANKS): capi/testdata/latency.c (the C
#          API, in place, on C heap memory: the calls the extension makes)
#          under torchrun, and braid bench allreduce in place and out of
#          place: what the extension costs over Braid's own calls
#   capi   scripts/capi-gpu.sh run 2 (the C API's device test, 2 ranks)
#   mixed  TestDeviceMixedOneComm from braid.test, BRAID_TEST_GPUS=2
#   race   scripts/htod-race.c, two at once on GPU 0 (the cause of
#          session 10's wrong reduce in the C test)
# Each step has a time limit (STEP_LIMIT seconds, 240 by default; cpu has
# CPU_LIMIT per rank count, 150). Output goes to $OUT (or
# /tmp/braid-torch-gpu): torch-gpu.txt holds everything, bench-cuda.txt,
# bench-cpu.txt and bench-native.txt the tables. Exits non-zero if a step
# failed.
#
# NVLink multicast stays off, as the machine requires (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
set -uo pipefail
cd "$(dirname "$0")/.."
B=.carry/gpu
case "${1:-}" in
bundle)
    set -e
    rm -rf $B && mkdir -p $B
    BRAID_CARRY=$B scripts/capi-gpu.sh bundle >/dev/null
    gunzip -c $B/libbraid.so.gz >/tmp/braid-libbraid.so
    if readelf -d /tmp/braid-libbraid.so | grep NEEDED | grep -qi cuda; then
        echo "libbraid.so links a CUDA library: it must load the driver at run time" >&2
        exit 1
    fi
    echo "libbraid.so needs: $(readelf -d /tmp/braid-libbraid.so | awk '/NEEDED/ {printf "%s ", $5}')"
    rm -f /tmp/braid-libbraid.so
    CGO_ENABLED=0 go test -c -ldflags='-s -w' -o $B/braid.test .
    CGO_ENABLED=0 go build -ldflags='-s -w' -o $B/braid ./cmd/braid
    gzip -9f $B/braid.test $B/braid
    ls -l $B
    du -sh $B
    exit 0
    ;;
run) shift ;;
*)
    echo "usage: $0 bundle | run [build|check|cuda|cpu|native|capi|mixed|race]..." >&2
    exit 2
    ;;
esac

OUT=${OUT:-/tmp/braid-torch-gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/torch-gpu.txt") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/torch${PYTHONPATH:+:$PYTHONPATH}" BRAID_TIMEOUT=${BRAID_TIMEOUT:-120s}
limit=${STEP_LIMIT:-240}
py=python3
steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(build check cuda cpu)
ngpus=$(cd / && $py -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
echo "== $(date -u +%FT%TZ) torch-gpu.sh ${steps[*]} at $(git rev-parse --short HEAD 2>/dev/null): $ngpus GPU(s), $(nproc) CPUs"
nvidia-smi -L 2>/dev/null
(cd / && $py -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)')
torchrun=($py -m torch.distributed.run --standalone)
rc=0
fail() {
    echo "FAIL: $*"
    rc=1
}

build() {
    gunzip -kf $B/libbraid.so.gz || return 1
    (cd / && $py - <<'EOF')
import os, shutil, sysconfig
print("Python.h:", os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")), sysconfig.get_paths()["include"])
try:
    import setuptools
    print("setuptools", setuptools.__version__)
except ImportError:
    print("setuptools: missing")
print("ninja:", shutil.which("ninja"), " nvcc:", shutil.which("nvcc"), " c++:", shutil.which("c++"), " CUDA_HOME:", os.environ.get("CUDA_HOME"))
EOF
    rm -rf torch/build torch/braid_torch/_C*.so
    if ! (cd torch && BRAID_LIB="$PWD/../$B/libbraid.so" MAX_JOBS=4 timeout "$limit" $py setup.py build_ext --inplace) >"$OUT/build.log" 2>&1; then
        grep -E "error|Error" "$OUT/build.log" | head -40
        tail -30 "$OUT/build.log"
        return 1
    fi
    grep -E -o -- "-DBRAID_TORCH_CUDA=1|-I[^ ]*cuda[^ ]*include" "$OUT/build.log" | sort -u
    rm -f "$OUT/build.log"
    (cd / && $py -c 'import braid_torch; print("braid_torch built: CUDA tensors", braid_torch._C.cuda)')
}

check() {
    local n=$((ngpus < 2 ? 2 : ngpus))
    timeout "$limit" "${torchrun[@]}" --nproc_per_node $n torch/tests/cuda.py || return 1
    timeout "$limit" "${torchrun[@]}" --nproc_per_node 2 torch/tests/smoke.py || return 1
}

cuda() {
    if [ "$ngpus" -lt 2 ]; then
        echo "skip: $ngpus GPU(s); braid against nccl needs one rank per GPU and 2 or more"
        return 0
    fi
    timeout "$limit" "${torchrun[@]}" --nproc_per_node "$ngpus" torch/bench/cuda_allreduce.py | tee -a "$OUT/bench-cuda.txt"
}

cpu_ranks=${CPU_RANKS:-8 16}

cpu() {
    local r=0 n
    for n in $cpu_ranks; do
        echo "# $n ranks" >>"$OUT/bench-cpu.txt"
        BRAID_TORCH_CUDA=0 timeout "${CPU_LIMIT:-150}" "${torchrun[@]}" --nproc_per_node $n torch/bench/allreduce.py \
            --budget 0.2 --rounds 5 | tee -a "$OUT/bench-cpu.txt" || r=1
    done
    return $r
}

native() {
    local r=0 n lat=$B/latency
    gunzip -kf $B/libbraid.so.gz $B/braid.gz && chmod +x $B/braid || return 1
    cc -O2 -o $lat capi/testdata/latency.c -Icapi -L$B -lbraid -Wl,-rpath,"$PWD/$B" -lpthread || return 1
    for n in ${NATIVE_RANKS:-$cpu_ranks}; do
        echo "# $n ranks: C API (latency.c; the extension's calls: blocking to 64K, i+wait above), us per call" >>"$OUT/bench-native.txt"
        timeout "${CPU_LIMIT:-150}" "${torchrun[@]}" --nproc_per_node $n --no-python $lat $((64 << 20)) 0.1 0 $((64 << 10)) |
            tee -a "$OUT/bench-native.txt" || r=1
        for how in --inplace ""; do
            echo "# $n ranks: braid bench allreduce ${how:-out of place}" >>"$OUT/bench-native.txt"
            timeout "${CPU_LIMIT:-150}" $B/braid bench -n $n allreduce $how --sizes 64K,256K,1M,4M,16M,32M,64M \
                --budget 100ms | tee -a "$OUT/bench-native.txt" || r=1
        done
    done
    return $r
}

capi() {
    BRAID_CARRY=$B OUT=/tmp/braid-capi timeout "$limit" scripts/capi-gpu.sh run 2
}

mixed() {
    gunzip -kf $B/braid.test.gz && chmod +x $B/braid.test || return 1
    BRAID_TEST_GPUS=2 timeout "$limit" $B/braid.test -test.run '^TestDeviceMixedOneComm$' -test.v -test.timeout 230s 2>&1 |
        grep -E "^(---|ok|FAIL|PASS)|calls on one|wrong|Error|panic" | head -40
}

race() {
    cc -O1 -o /tmp/htod-race scripts/htod-race.c -ldl || return 1
    local p r0 r1
    /tmp/htod-race 12345 3000 >/tmp/htod-race.0 2>&1 &
    p=$!
    /tmp/htod-race 12345 3000 >/tmp/htod-race.1 2>&1
    r1=$?
    wait $p
    r0=$?
    head /tmp/htod-race.0 /tmp/htod-race.1
    [ $r0 = 0 ] && [ $r1 = 0 ]
}

built=1
for s in "${steps[@]}"; do
    case $s in
    build | native | capi | mixed | race) ;;
    check | cuda | cpu)
        # Nothing of the backend runs without the extension.
        [ $built = 0 ] && fail "$s: not run, the build failed" && continue
        ;;
    *) fail "unknown step $s" && continue ;;
    esac
    echo "== $s ($(date -u +%T))"
    if ! "$s"; then
        fail "$s"
        [ $s = build ] && built=0
    fi
done
echo "== done ($(date -u +%T)): $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
