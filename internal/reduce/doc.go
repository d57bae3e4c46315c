// Package reduce holds Braid's reduction kernels on host memory: for every
// element type and operator of package dtype, a function that combines two
// buffers elementwise. Every collective that reduces (allreduce, reduce,
// reduce-scatter) spends its arithmetic here, so the kernels are written for
// speed, and each has a plain reference loop beside it that the tests treat as
// the specification.
//
// # Buffers
//
// Kernels work on raw bytes in the host's byte order, as a []float32 or
// []uint16 looks in memory. The buffers of one call must have the same
// length, a multiple of the element size; a kernel panics otherwise, since
// that is a bug in the caller and not a condition to recover from. Buffers need not be aligned: Go slices made with
// make([]float32, n), and byte slices cut at element-size multiples of such a
// slice, are aligned and take the fast path; a buffer at an odd address is
// processed through an aligned scratch block and stays correct, only slower.
// On amd64 with AVX2 the vector kernels do not care about alignment at all.
//
// # Semantics
//
//   - Integer sum and prod wrap around in two's complement, as in Go and C.
//   - float16 and bfloat16 are widened to float32, combined, and rounded back
//     to nearest, ties to even. For sum and prod this gives exactly the
//     correctly rounded float16 or bfloat16 result, as native 16-bit
//     arithmetic would: float32 has at least 2p+2 significand bits for both
//     (p = 11 and 8), so rounding twice is harmless. Min and max are exact.
//   - Floating-point min and max are Go's built-in min and max: a NaN operand
//     makes the result NaN, and -0 is smaller than +0. The plain comparison
//     "if b < a { a = b }" would keep or drop a NaN, and pick +0 or -0,
//     depending on the order of the operands.
//   - Sum, prod, min and max are therefore commutative bitwise for every
//     type: a op b and b op a give the same bits, up to which NaN comes out.
//     They are not associative for floating point, so the order in which
//     ranks combine is the schedule's business, not this package's.
//   - Avg reduces with the sum kernel; the caller calls Divide once on the
//     result, which divides each element by the number of ranks, rounding
//     once (float16 and bfloat16 through float32).
//
// The fast kernels give the same bits as Reference for every input, except
// for which NaN comes out where the result is NaN: the payload and sign of a
// NaN result are not specified (the vector max, for one, returns all ones).
//
// # Speed
//
// The portable kernels reinterpret aligned bytes as typed slices and unroll by
// eight; bitwise operators and 8-bit sums work on 64-bit words; float16 and
// bfloat16 are widened a block at a time (float16 through a 256 KiB table
// built on first use). On amd64 with AVX2 (and F16C for float16), sum for
// every type, prod, min and max for the floating-point types, the bitwise
// operators and Divide run as vector assembly over 64- or 128-byte blocks,
// with the portable kernels finishing the last few elements. Race-detector
// builds and builds tagged purego use the portable kernels only, so that the
// detector sees every access. Kernels run on the calling goroutine; splitting
// a large buffer across cores is the caller's choice.
package reduce
