#!/usr/bin/env bash
# Regenerates cuda/kernels/reduce.ptx from cuda/kernels/reduce.cu with nvcc
# (CUDA 13.0 was used for the committed file; the GPU machine has it at
# /usr/local/cuda/bin/nvcc). Run from anywhere:
#
#     bash cuda/kernels/gen.sh [OUTPUT]
#
# OUTPUT defaults to reduce.ptx beside this script. The command it runs is
#
#     nvcc -ptx -arch=sm_90 -O3 -std=c++17 -o cuda/kernels/reduce.ptx cuda/kernels/reduce.cu
#
# sm_90 is Hopper; the driver compiles the PTX for the device it loads on
# (newer architectures too) when package cuda loads the module.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/reduce.ptx}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -ptx -arch=sm_90 -O3 -std=c++17 -o "$out" "$here/reduce.cu"
echo "wrote $out with $("$nvcc" --version | tail -n 2 | head -n 1)"
