#!/usr/bin/env bash
# The C API's device calls on a GPU machine that has no Go: capi/testdata/
# device.c on N ranks (2 by default) sharing the machine's GPUs (rank r on
# GPU r mod the count), started with torchrun's variables, which
# braid_init reads, so that no launcher is needed there.
#
#   scripts/capi-gpu.sh bundle   # here: .carry/capi/ (libbraid.so.gz, device; about 10 MB)
#   scripts/capi-gpu.sh run [N]  # there, with .carry/capi carried
#
# BRAID_CARRY names another folder than .carry/capi (scripts/torch-gpu.sh
# bundles into .carry/gpu).
#
# run builds device.c against the carried library where a C compiler is
# there (cc or gcc), else runs the carried binary; it runs the "nodriver"
# mode first (BRAID_CUDA_LIB naming no library: every device call must
# fail with BRAID_ERR_UNSUPPORTED), then the "gpu" mode. Each rank's
# output goes to $OUT (or /tmp) as capi-device-rank*.log; it exits
# non-zero if a rank failed.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BRAID_CARRY:-.carry/capi}
case "${1:-}" in
bundle)
    set -e
    rm -rf $B && mkdir -p $B # only what travels: no unpacked library or binary of an earlier run
    go build -buildmode=c-shared -ldflags='-s -w' -o $B/libbraid.so ./capi
    rm -f $B/libbraid.h
    cc -Wall -Wextra -Werror -O1 -o $B/device capi/testdata/device.c -Icapi -L$B -lbraid -Wl,-rpath,'$ORIGIN' -ldl
    gzip -9f $B/libbraid.so
    ls -l $B
    ;;
run)
    n=${2:-2}
    log=${OUT:-/tmp}
    mkdir -p "$log"
    gunzip -kf $B/libbraid.so.gz || exit 1
    prog=$B/device
    cc=$(command -v cc || command -v gcc || true)
    if [ -n "$cc" ] && "$cc" -Wall -O1 -o $B/device-here capi/testdata/device.c -Icapi -L$B -lbraid -Wl,-rpath,'$ORIGIN' -ldl; then
        prog=$B/device-here
        echo "built capi/testdata/device.c there with $cc"
    else
        echo "no C compiler there (or it failed): running the carried binary"
    fi
    nvidia-smi -L 2>/dev/null
    rc=0
    port=$((29400 + RANDOM % 500 * 2))
    for mode in nodriver gpu; do
        extra=()
        [ $mode = nodriver ] && extra=(BRAID_CUDA_LIB=/nonexistent/libcuda.so.1)
        pids=()
        for ((r = 0; r < n; r++)); do
            env ${extra[@]+"${extra[@]}"} RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$port BRAID_TIMEOUT=60s timeout 300 $prog $mode >"$log/capi-device-$mode-rank$r.log" 2>&1 &
            pids+=($!)
        done
        for ((r = 0; r < n; r++)); do
            wait ${pids[$r]}
            s=$?
            echo "== $mode rank $r: exit $s"
            cat "$log/capi-device-$mode-rank$r.log"
            [ $s = 0 ] || rc=1
        done
        port=$((port + 2))
    done
    [ $rc = 0 ] && echo "PASS: device calls of the C API on $n ranks" || echo "FAIL"
    exit $rc
    ;;
*)
    echo "usage: $0 bundle | run [N]" >&2
    exit 2
    ;;
esac
