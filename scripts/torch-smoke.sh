#!/usr/bin/env bash
# Builds Braid's PyTorch backend (torch/: libbraid.so and the c10d
# extension) and runs its smoke test (torch/tests/smoke.py: every
# collective, checked) on 2 ranks under braid run. Needs Go, a C++ compiler
# and PyTorch 1.13 with its headers (Debian: python3-torch libtorch-dev);
# exits 0 with a note when PyTorch is missing. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
py=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1; then py=$p; break; fi
done
headers='
import os, torch.utils.cpp_extension as c
h = "torch/csrc/distributed/c10d/ProcessGroup.hpp"
raise SystemExit(not any(os.path.exists(os.path.join(d, h)) for d in c.include_paths()))'
if [ -z "$py" ] || ! "$py" -c "$headers" 2>/dev/null; then
    echo "skip: no PyTorch with its C++ headers (apt-get install python3-torch libtorch-dev): the torch backend is not tested"
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
PYTHONPATH="$PWD/torch" BRAID_TIMEOUT=60s "$bin/braid" run -n 2 --prefix -- "$py" -W ignore torch/tests/smoke.py
