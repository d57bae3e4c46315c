#!/usr/bin/env bash
# node-imbalance.sh: scripts/compare-imbalance.sh on a machine without MPI
# or package access (the device machine's CPUs), from carried binaries.
#
#   scripts/node-imbalance.sh prepare DIR     # here: braid, mpi-imbalance and these scripts into DIR
#   bash DIR/scripts/node-imbalance.sh DIR    # there, with DIR carried (or bash scripts/node-imbalance.sh DIR)
#
# prepare builds braid (static, CGO_ENABLED=0, xz-compressed as braid.xz)
# and scripts/mpi-imbalance.c against Open MPI and MPICH (mpicc.openmpi,
# mpicc.mpich; a missing one is left out) into DIR, and copies this script
# and compare-imbalance.sh into DIR/scripts, so that DIR runs on its own
# whatever the checkout it lands in. DIR must also hold mpiroot.tar.xz, the
# MPI runtimes that ../shared/anchors/cpu/device/prepare.sh packs (copied
# from .node if that has it, else made by running prepare.sh). DIR must be
# a folder of the checkout that git ignores (.carry, .carry-NAME), named
# in the device run's carry list; about 20 MB.
#
# The run unpacks the runtimes into /tmp/mpiroot and braid into /tmp, runs
# compare-imbalance.sh with its results in /tmp/imbalance, and packs them
# into one archive, $OUT/imbalance.tgz (OUT: the device run's folder that
# comes back; default /tmp/out), every 20 s while it runs and once at the
# end, so that a run cut off at the device's limit still brings back what
# it measured; the table goes to standard output and $OUT/table.md.
# Defaults (each can be set in the environment): NPS="8 16" MIFS="10 50"
# COLLS=allreduce LIBS=openmpi SIZES=8,4K,32K,256K,1M,4M,16M BUDGET=60ms
# TIMEOUT=150, and compare-imbalance.sh's ALPHA and MPI_ALPHA. Issue 17's
# full run (8 and 16 ranks, MIF 10, 20, 50 and balanced, allreduce and
# reduce, 8 B-16 MiB; about 4-5 minutes estimated from this VM, not yet
# timed on the node):
#
#   NPS="8 16" MIFS="10 20 50" COLLS="allreduce reduce" SIZES=8,64,256,1K,4K,16K,64K,256K,1M,4M,16M \
#     BUDGET=50ms TIMEOUT=100 timeout 440 bash DIR/scripts/node-imbalance.sh DIR
set -u
if [ "${1:-}" != prepare ]; then
    D=$(cd "${1:?usage: node-imbalance.sh DIR (or prepare DIR)}" && pwd) || exit 2
fi
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
    set -e
    D=${2:?usage: node-imbalance.sh prepare DIR}
    mkdir -p "$D/scripts"
    if [ ! -f "$D/mpiroot.tar.xz" ] && [ -f .node/mpiroot.tar.xz ]; then
        cp .node/mpiroot.tar.xz "$D/"
    elif [ ! -f "$D/mpiroot.tar.xz" ]; then
        ../shared/anchors/cpu/device/prepare.sh "$D"
    fi
    export PATH=$PATH:/usr/local/go/bin
    CGO_ENABLED=0 go build -ldflags "-s -w" -o "$D/braid" ./cmd/braid
    xz -T0 -6 -f "$D/braid"
    for lib in openmpi mpich; do
        if command -v "mpicc.$lib" >/dev/null; then
            "mpicc.$lib" -O2 -o "$D/mpi-imbalance.$lib" scripts/mpi-imbalance.c
        else
            echo "node-imbalance: no mpicc.$lib: $lib left out" >&2
        fi
    done
    cp scripts/node-imbalance.sh scripts/compare-imbalance.sh "$D/scripts/"
    git rev-parse HEAD > "$D/braid.commit" 2>/dev/null || true
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo "+ uncommitted changes" >> "$D/braid.commit"; fi
    ls -la "$D" "$D/scripts"
    du -sh "$D"
    exit 0
fi
R=/tmp/mpiroot
if [ ! -d $R/usr ]; then mkdir -p $R && tar -C $R -xJf "$D/mpiroot.tar.xz"; fi
L=$R/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openmpi/lib PATH=$R/usr/bin:$PATH OPAL_PREFIX=$R/usr
export OMPI_MCA_btl_vader_single_copy_mechanism=cma OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader PMIX_MCA_pcompress=^zlib
B=$D/braid
if [ ! -x "$B" ] && [ -f "$D/braid.xz" ]; then B=/tmp/braid-node; xz -dc "$D/braid.xz" > $B && chmod +x $B; fi
export BRAID=$B MPIRUN_OPENMPI=mpirun.openmpi MPIRUN_MPICH=mpirun.mpich
export MPIIMB_OPENMPI=$D/mpi-imbalance.openmpi MPIIMB_MPICH=$D/mpi-imbalance.mpich
export NPS=${NPS:-"8 16"} MIFS=${MIFS:-"10 50"} COLLS=${COLLS:-allreduce} LIBS=${LIBS:-openmpi}
export SIZES=${SIZES:-8,4K,32K,256K,1M,4M,16M} BUDGET=${BUDGET:-60ms} TIMEOUT=${TIMEOUT:-150}
DEST=${OUT:-/tmp/out}
mkdir -p "$DEST"
export OUT=/tmp/imbalance
rm -rf $OUT && mkdir -p $OUT
cp "$D/braid.commit" $OUT/ 2>/dev/null || true
pack() { tar -C /tmp -czf "$DEST/imbalance.tgz.tmp" imbalance 2>/dev/null && mv "$DEST/imbalance.tgz.tmp" "$DEST/imbalance.tgz"; }
( while sleep 20; do pack; done ) &
packer=$!
bash scripts/compare-imbalance.sh 2> $OUT/log.txt
echo "compare-imbalance rc=$?" >> $OUT/log.txt
kill $packer 2>/dev/null
wait $packer 2>/dev/null
pack
cp $OUT/table.md "$DEST/" 2>/dev/null
tail -3 $OUT/log.txt
