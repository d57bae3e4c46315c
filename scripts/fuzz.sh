#!/usr/bin/env bash
# The fuzz campaign (docs/RELIABILITY.md): every fuzz target of the
# repository, one at a time, for FUZZTIME each (default 10m), on one
# worker. It runs on a copy of the committed tree, so that the code can
# change meanwhile; new failing inputs are copied back into the
# package's testdata/fuzz. A summary line per target (minutes,
# executions, new corpus entries, result) goes to the end of the log.
#
#	scripts/fuzz.sh [LOGDIR]        FUZZTIME=10m, TARGETS="pkg:Name ..." to choose
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
FUZZTIME=${FUZZTIME:-10m}
LOG=${1:-/var/tmp/braid-fuzz}
mkdir -p "$LOG"
TARGETS=${TARGETS:-"./transport/tcp:FuzzHeader ./transport/tcp:FuzzServerHandshake ./transport/tcp:FuzzClientHandshake
./transport/shm:FuzzRing ./transport/shm:FuzzReadLayout ./bootstrap:FuzzDecodeFrame ./bootstrap:FuzzStoreServer ./bootstrap:FuzzStoreClient
./bootstrap:FuzzFromLookup ./topo:FuzzParse ./plan:FuzzParseTable ./cuda:FuzzParseMultiPathTable
.:FuzzOptionsResolve ./internal/choice:FuzzParseAlgo ./internal/size:FuzzParse"}
src=$(mktemp -d /var/tmp/braid-fuzz-src.XXXXXX)
trap 'rm -rf "$src"' EXIT
git archive HEAD | tar -x -C "$src"
summary="$LOG/summary.txt"
: >"$summary"
status=0
for t in $TARGETS; do
    pkg=${t%%:*} name=${t##*:}
    base=${pkg#./}
    [ "$base" = . ] && base=root
    out="$LOG/${base//\//_}-$name.log"
    echo "== $pkg $name for $FUZZTIME" | tee -a "$summary"
    start=$(date +%s)
    (cd "$src" && nice -n 10 go test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg") >"$out" 2>&1
    rc=$?
    mins=$(( ($(date +%s) - start) / 60 ))
    last=$(grep -E '^fuzz: elapsed.*execs:' "$out" | tail -1)
    execs=$(sed -n 's/.*execs: \([0-9]*\).*/\1/p' <<<"$last")
    newc=$(sed -n 's/.*new interesting: \([0-9]*\).*/\1/p' <<<"$last")
    verdict=pass
    if [ $rc != 0 ]; then
        verdict="FAIL: $(grep -m1 -E 'panic:|--- FAIL|Error|error' "$out")"
        status=1
        # Keep the failing input beside the package's seeds.
        if [ -d "$src/${pkg#./}/testdata/fuzz/$name" ]; then
            mkdir -p "${pkg#./}/testdata/fuzz/$name"
            cp -n "$src/${pkg#./}/testdata/fuzz/$name"/* "${pkg#./}/testdata/fuzz/$name/" 2>/dev/null || true
        fi
    fi
    echo "$pkg $name: ${mins} min, ${execs:-?} execs, ${newc:-?} new corpus entries, $verdict" | tee -a "$summary"
done
exit $status
