// layout.cuh: the layout constants of the fused kernels, in one place.
// Package gpu/fused computes regions and rounds with the same numbers
// (gpu/fused/layout.go: MaxBlocks, SlotsOffset, HostRegionBytes, LLMax,
// BcastDirectMax), and TestKernelLayout (gpu/fused/layout_test.go) reads
// these #defines and fails when the two sides differ. The region every
// rank registers is
//
//     flags: u32 [ONESHOT_BLOCKS][8] at offset 0 (flag [b][from])
//     slots: 2 parities x nranks slots of slot_bytes, from offset ONESHOT_SLOTS
//     lines: 2 parities x nranks sources x ONESHOT_LL_SLOT bytes, after the
//            slots (the low-latency kernels' only, ll.cuh)
//
// oneshot.cuh says how the flags and slots are used, pipeline.cuh how the
// pipelined kernels cut the slots into areas.

// ONESHOT_BLOCKS is the most blocks a fused kernel's grid has: a row of
// flags and a sequence counter (fused.cuh) each.
#define ONESHOT_BLOCKS 256
// ONESHOT_SLOTS is where the slots start, after the flags of ONESHOT_BLOCKS
// blocks and 8 ranks.
#define ONESHOT_SLOTS 8192
// The host region of the multi-path kernels (mapped pinned memory that
// every rank sees) has a half per parity, of HOST_HALF bytes each: round g
// uses half g & 1 only, whatever the kernel, as with the slots.
#define HOST_HALF (8 << 20)
// ONESHOT_LL_SLOT is the bytes of one source's lines of a parity in the
// low-latency kernels (ll.cuh): a line carries 8 bytes of data in 16, so
// ONESHOT_LL_SLOT / 2 bytes of data.
#define ONESHOT_LL_SLOT (512 << 10)
// BCAST_DIRECT_MAX is the largest broadcast that the root pushes to every
// peer in one phase (bcast.cuh); larger ones on more than 2 GPUs scatter
// parts, which the others then exchange.
#define BCAST_DIRECT_MAX (1 << 20)

// The resident allreduce's bell (serve.cuh): mapped pinned host memory of
// BELL_WORDS 32-bit words, a 64-byte line each for the call's arguments (the
// host's), the kernel's done and exited words, and the host's quit word
// (package gpu/fused mirrors these: Bell*).
#define BELL_ARGS 0
#define BELL_DONE 16
#define BELL_EXITED 32
#define BELL_QUIT 48
#define BELL_WORDS 64
