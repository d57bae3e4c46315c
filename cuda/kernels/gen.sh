#!/usr/bin/env bash
# Regenerates the kernels package cuda embeds from cuda/kernels/reduce.cu with
# nvcc (CUDA 13.0 was used for the committed files; the GPU machine has it at
# /usr/local/cuda/bin/nvcc). reduce.cu is the one translation unit: it
# includes the .cuh files beside it, one per kernel family (its top says
# which holds what), so a change to any of them needs this run. Run from
# anywhere:
#
#     bash cuda/kernels/gen.sh [DIR]
#
# It writes DIR/reduce.ptx.gz and DIR/reduce_sm90.cubin.gz (DIR defaults to this
# script's directory) with
#
#     nvcc -ptx   -arch=sm_90 -O3 -std=c++17 -o reduce.ptx        reduce.cu
#     nvcc -cubin -arch=sm_90 -O3 -std=c++17 -o reduce_sm90.cubin reduce.cu
#     gzip -9 -n reduce.ptx reduce_sm90.cubin
#
# The cubin runs on compute capability 9.0 (H100, H200) without compilation;
# other devices load the PTX, which their driver compiles (newer
# architectures too). To try a build before committing it, point
# BRAID_CUDA_KERNELS at DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here}
mkdir -p "$out"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -ptx -arch=sm_90 -O3 -std=c++17 -o "$out/reduce.ptx" "$here/reduce.cu" &
"$nvcc" -cubin -arch=sm_90 -O3 -std=c++17 -o "$out/reduce_sm90.cubin" "$here/reduce.cu" &
wait %1
wait %2
gzip -9 -n -f "$out/reduce_sm90.cubin" "$out/reduce.ptx"
echo "wrote $out/reduce.ptx.gz and $out/reduce_sm90.cubin.gz with $("$nvcc" --version | tail -n 2 | head -n 1)"
