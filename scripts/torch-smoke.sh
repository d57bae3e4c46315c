#!/usr/bin/env bash
# Builds Braid's PyTorch backend (torch/: libbraid.so and the c10d
# extension) and runs its smoke test (torch/tests/smoke.py: every
# collective, checked) on 2 ranks under each launcher the backend supports:
# braid run, torchrun (python3 -m torch.distributed.run) and, where Open
# MPI is installed, mpirun. Needs Go, a C++ compiler and PyTorch 1.13 with
# its headers (Debian: python3-torch libtorch-dev pybind11-dev); exits 0
# with a note when PyTorch is missing. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for p in python3 /usr/bin/python3; do
    # From / : in the repository root, the folder torch/ (this backend)
    # would be imported as PyTorch.
    if command -v "$p" >/dev/null 2>&1 && (cd / && "$p" -c 'import torch.distributed') >/dev/null 2>&1; then py=$p; break; fi
done
headers='
import os, torch.utils.cpp_extension as c
hs = ["torch/csrc/distributed/c10d/Work.hpp", "pybind11/pybind11.h"]
dirs = c.include_paths() + ["/usr/include", "/usr/local/include"]
raise SystemExit(not all(any(os.path.exists(os.path.join(d, h)) for d in dirs) for h in hs))'
if [ -z "$py" ] || ! (cd / && "$py" -c "$headers") 2>/dev/null; then
    echo "skip: no PyTorch with its C++ headers (apt-get install python3-torch libtorch-dev pybind11-dev): the torch backend is not tested"
    exit 0
fi
if ! command -v c++ >/dev/null 2>&1; then
    echo "skip: no C++ compiler: the torch backend is not tested"
    exit 0
fi
make -s -C torch PYTHON="$py" >/tmp/braid-torch-build.log 2>&1 || { cat /tmp/braid-torch-build.log; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/braid" ./cmd/braid
export PYTHONPATH="$PWD/torch" BRAID_TIMEOUT=60s
echo "== braid run"
"$bin/braid" run -n 2 --prefix -- "$py" -W ignore torch/tests/smoke.py
# torchrun: --redirects 1 --tee 1 because PyTorch 1.13's default of 0 fails
# on Python 3.11 (pytorch/pytorch#92319); --standalone picks a free port.
echo "== torchrun"
out=$("$py" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
    torch/tests/smoke.py 2>&1) || { echo "$out"; exit 1; }
grep -q "ok: braid on 2 ranks" <<<"$out" || { echo "$out"; echo "torchrun: no ok from rank 0"; exit 1; }
echo "$out" | grep "ok: "
if command -v mpirun.openmpi >/dev/null 2>&1; then
    echo "== mpirun (Open MPI)"
    root=()
    [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
    mpirun.openmpi "${root[@]}" --oversubscribe -np 2 -x PYTHONPATH -x BRAID_TIMEOUT \
        "$py" -W ignore torch/tests/smoke.py
else
    echo "note: no mpirun.openmpi: the backend under mpirun is not tested"
fi
