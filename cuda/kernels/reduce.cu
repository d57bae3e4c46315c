// Braid's CUDA kernels, compiled to PTX and an sm_90 cubin and embedded in
// package cuda (cuda/reduce.go). This file is their one translation unit:
// it includes the files below, one per kernel family, in this order, and
// is the only file nvcc compiles; a .cuh here is a part of it, not a header
// that stands alone, and reads what the files before it define. The PTX
// and cubin beside it are generated from it and committed; regenerate them
// with (needs nvcc 13.0, e.g. on the GPU machine):
//
//     bash cuda/kernels/gen.sh [DIR]
//
// which runs nvcc -ptx and -cubin -arch=sm_90 -O3 -std=c++17 on this file.
// The files include no system or CUDA header, only each other, so that any
// CUDA C++ compiler builds them the same way; float16 and bfloat16
// conversions are written as PTX instructions.
//
// The semantics are those of Braid's host kernels (internal/reduce), bit for
// bit: integers wrap; float16 and bfloat16 are widened to float32, combined and
// rounded back to nearest even; min and max propagate NaN and order -0 below
// +0 (Go's built-in min and max); division rounds once.
//
// Every kernel is launched with 512 threads a block (__launch_bounds__), any
// number of blocks.
//
// The tests that read these files without a GPU (TestKernelLayout and
// TestKernelArgs in gpu/fused/layout_test.go) follow the #include lines
// below, so a file added here is read by them too.

// Types, storage tags and traits, operators, combine, Vec.
#include "types.cuh"
// braid_reduce_<op>_<type> and braid_divide_<type>: elementwise, one GPU.
#include "elementwise.cuh"

// The fused kernels: one kernel a collective, with every rank's region
// mapped, no host in the loop.
//
// Layout constants (ONESHOT_BLOCKS, ONESHOT_SLOTS, HOST_HALF,
// ONESHOT_LL_SLOT, BCAST_DIRECT_MAX), which gpu/fused mirrors.
#include "layout.cuh"
// Shared: sequence counters, flags and signal_wait, copies, reduce_into.
#include "fused.cuh"
// The one-shot allreduce's body (and the flags' and slots' protocol).
#include "oneshot.cuh"
// Low-latency lines: the one-shot and two-shot LL allreduces' bodies, and
// the reduce-scatter's and the allgather's in lines.
#include "ll.cuh"
// The resident low-latency allreduce's body (on ll.cuh's).
#include "serve.cuh"
// The pipelined kernels' rounds and areas (block_area, split, pipeline, AREA).
#include "pipeline.cuh"
// The two-shot allreduce's body, with the multi-path host share.
#include "twoshot.cuh"
// The reduce-scatter's body.
#include "reducescatter.cuh"
// braid_allgather_fused and braid_allgather_ll.
#include "allgather.cuh"
// braid_bcast_fused.
#include "bcast.cuh"
#undef AREA
// braid_<kind>_<op>_<type> for oneshot, oneshotll, twoshotll, twoshot,
// rsfused and rsll, every op and type.
#include "fused_kernels.cuh"
