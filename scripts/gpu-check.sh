#!/usr/bin/env bash
# gpu-check.sh: the checks a change to the device path owes, in one call to
# the GPU machine (which has no Go): the binaries are built here, carried
# there, and run in one batch whose results come back as one tarball.
#
#   scripts/gpu-check.sh bundle [REV]    # here: .carry/check/ (about 30 MB; 45 with REV)
#   scripts/gpu-check.sh run [STEP...]   # there, from the repository root, .carry/check carried
#
# The bundle: braid (this tree's command), braid.test (the root package's
# tests: the device matrix), fused.test (package gpu/fused's, with its GPU
# tests), all CGO_ENABLED=0 and stripped, xz-compressed; with REV also
# braid-before, the command built at that revision (a git worktree), for
# the before/after steps.
#
# The steps of run, in the order given (default: matrix shared ab):
#   gen      build the kernels from this tree (cuda/kernels/gen.sh, 2-3
#            minutes) and load them in every later step of the new build
#            (BRAID_CUDA_KERNELS): a kernel change checked before its PTX
#            is committed; commit the PTX it wrote (r/kernels) unchanged
#   matrix   the device matrix on the machine's GPUs, one rank per GPU
#            (BRAID_TEST_DEVICE_SAMPLE=$SAMPLE, default 10), then fused.test
#   shared   the one-GPU test mode: for each N of SHARED (default "4 2 3"),
#            N ranks sharing the GPUs (BRAID_TEST_GPUS=N) when N is more
#            than there are; SHARED_LIMIT seconds each (default 260)
#   ab       scripts/ab-gpu.sh braid-before against braid: ROUNDS rounds
#            (default 8) of 8 B to AB_MAX (default 1M), then 2 of 4M to 1G
#   sync     scripts/ab-gpu.sh in synchronous calls (--modes sync, each
#            call waited for): ROUNDS rounds of 8 B to SYNC_MAX (default
#            256K), the per-call latency of a change to how a call ends
#   graph    braid bench --modes graph, both builds alternated,
#            GRAPH_ROUNDS rounds (default 3), sizes 8,256,4K,64K,256K,
#            inputs changing per call and checked
#   compare  scripts/compare-gpu.sh QUICK=1 on the machine's GPUs
#            (BUDGET_S, default 180)
# Every step has a time limit; a step that fails is reported and the next
# one runs. Results go to $OUT/r (a step's directory each, progress.txt
# with each step's end and status), tarred into $OUT/res.tgz at the end
# (the device tool returns at most 8 files). Exits non-zero if a step
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
B=.carry/check
case "${1:-}" in
bundle)
    set -e
    rev=${2:-}
    rm -rf $B && mkdir -p $B
    CGO_ENABLED=0 go build -ldflags='-s -w' -o $B/braid ./cmd/braid
    CGO_ENABLED=0 go test -c -ldflags='-s -w' -o $B/braid.test .
    CGO_ENABLED=0 go test -c -ldflags='-s -w' -o $B/fused.test ./gpu/fused
    if [ -n "$rev" ]; then
        wt=$(mktemp -d /tmp/gpu-check-wt.XXXXXX)
        git worktree add -f --detach "$wt" "$rev" >/dev/null
        (cd "$wt" && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$OLDPWD/$B/braid-before" ./cmd/braid)
        git worktree remove --force "$wt"
        git rev-parse --short "$rev" > $B/before.rev
    fi
    git rev-parse --short HEAD > $B/head.rev
    git status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)" >> $B/head.rev
    xz -T0 -6 $B/braid $B/braid.test $B/fused.test ${rev:+$B/braid-before}
    ls -l $B
    du -sh $B
    exit 0
    ;;
run) shift ;;
*)
    echo "usage: $0 bundle [REV] | run [gen|matrix|shared|ab|sync|graph|compare]..." >&2
    exit 2
    ;;
esac

[ -d $B ] || { echo "gpu-check.sh: no $B here: run 'scripts/gpu-check.sh bundle' where Go is, and carry $B" >&2; exit 2; }
OUT=${OUT:-/tmp/braid-gpu-check}
R=$OUT/r
mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=/tmp/braid-gpu-check
mkdir -p $bin
for f in braid braid.test fused.test braid-before; do
    [ -f $B/$f.xz ] && xz -dc $B/$f.xz > $bin/$f && chmod +x $bin/$f
done
cat $B/*.rev > "$R/revs.txt" 2>/dev/null
nvidia-smi -L > "$R/gpus.txt" 2>&1
gpus=$(grep -c '^GPU' "$R/gpus.txt" || true)
steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(matrix shared ab)
t0=$(date +%s)
failed=0
kernels=""  # BRAID_CUDA_KERNELS=dir for the new build, once gen has run

step() { # name limit command...: runs the command under its limit, logs its end
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@"
    local rc=$?
    echo "$name rc $rc at $(($(date +%s) - t0)) s" >> "$R/progress.txt"
    [ $rc = 0 ] || failed=1
    return $rc
}

for s in "${steps[@]}"; do
    case $s in
    gen)
        mkdir -p "$R/kernels"
        step gen 400 bash cuda/kernels/gen.sh "$R/kernels" > "$R/gen.txt" 2>&1 && kernels="BRAID_CUDA_KERNELS=$R/kernels"
        ;;
    matrix)
        mkdir -p "$R/matrix"
        step matrix 400 env $kernels BRAID_TEST_DEVICE_SAMPLE=${SAMPLE:-10} $bin/braid.test -test.run '^TestDevice' -test.short -test.count=1 -test.v > "$R/matrix/device.txt" 2>&1
        # fused.test reads the kernels' CUDA C from the repository's root.
        step fused 120 env $kernels $bin/fused.test -test.count=1 > "$R/matrix/fused.txt" 2>&1
        ;;
    shared)
        mkdir -p "$R/shared"
        for n in ${SHARED:-4 2 3}; do
            step "shared-$n" "${SHARED_LIMIT:-260}" env $kernels BRAID_TEST_GPUS="$n" BRAID_TEST_DEVICE_SAMPLE=${SAMPLE:-10} $bin/braid.test -test.run '^TestDevice' -test.short -test.count=1 -test.v > "$R/shared/device-$n.txt" 2>&1
        done
        ;;
    ab)
        [ -x $bin/braid-before ] || { echo "ab: no braid-before in the bundle (bundle REV)" >> "$R/progress.txt"; failed=1; continue; }
        step ab-small 300 env B_ENV="$kernels" MAX=${AB_MAX:-1M} bash scripts/ab-gpu.sh -a $bin/braid-before -b $bin/braid -r "${ROUNDS:-8}" -o "$R/ab/small" > "$R/ab-small.txt" 2>&1
        step ab-large 150 env B_ENV="$kernels" MIN=4M bash scripts/ab-gpu.sh -a $bin/braid-before -b $bin/braid -r 2 -o "$R/ab/large" > "$R/ab-large.txt" 2>&1
        ;;
    sync)
        [ -x $bin/braid-before ] || { echo "sync: no braid-before in the bundle (bundle REV)" >> "$R/progress.txt"; failed=1; continue; }
        step ab-sync 300 env B_ENV="$kernels" BENCH_ARGS="--modes sync" MAX=${SYNC_MAX:-256K} bash scripts/ab-gpu.sh -a $bin/braid-before -b $bin/braid -r "${ROUNDS:-8}" -o "$R/ab/sync" > "$R/ab-sync.txt" 2>&1
        ;;
    graph)
        [ -x $bin/braid-before ] || { echo "graph: no braid-before in the bundle (bundle REV)" >> "$R/progress.txt"; failed=1; continue; }
        mkdir -p "$R/graph"
        for ((round = 1; round <= ${GRAPH_ROUNDS:-3}; round++)); do
            for c in allreduce bcast allgather reducescatter; do
                step "graph-$c-a-$round" 60 $bin/braid-before bench --device cuda -n "$gpus" "$c" --modes graph --sizes 8,256,4K,64K,256K --inputs 4 --format json > "$R/graph/$c-a-$round.jsonl" 2>&1
                step "graph-$c-b-$round" 60 env $kernels $bin/braid bench --device cuda -n "$gpus" "$c" --modes graph --sizes 8,256,4K,64K,256K --inputs 4 --format json > "$R/graph/$c-b-$round.jsonl" 2>&1
            done
        done
        TABLE_ONLY=1 bash scripts/ab-gpu.sh -o "$R/graph" > "$R/graph.txt" 2>&1
        ;;
    compare)
        mkdir -p bin && cp $bin/braid bin/braid
        step compare 600 env $kernels QUICK=1 NGPUS="$gpus" BUDGET_S=${BUDGET_S:-180} OUT="$R" bash scripts/compare-gpu.sh > "$R/compare.txt" 2>&1
        ;;
    *)
        echo "gpu-check.sh: unknown step $s" >&2
        exit 2
        ;;
    esac
done
find "$R" -name '*.log' -size +200k -delete
(cd "$OUT" && tar czf res.tgz r)
cat "$R/progress.txt"
exit $failed
