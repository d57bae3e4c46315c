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
// []uint16 looks in memory (little-endian on every platform Braid runs on).
// The length of every buffer must be the same and a multiple of the element
// size; a kernel panics otherwise, since that is a bug in the caller and not a
// condition to recover from. Buffers need not be aligned: Go slices made with
// make([]float32, n), and byte slices cut at element-size multiples of such a
// slice, are aligned and take the fast path; a buffer at an odd address is
// processed through an aligned scratch block and stays correct, only slower.
// On amd64 with AVX2 the vector kernels do not care about alignment at all.
//
// # Semantics
//
//   - Integer sum and prod wrap around in two's complement, as in Go and C.
//   - float16 and bfloat16 are widened to float32, combined, and rounded back
//     to nearest, ties to even. For sum, prod and min/max this gives exactly
//     the correctly rounded float16 or bfloat16 result: float32 has at least
//     2p+2 significand bits for both (p = 11 and 8), so rounding twice is
//     harmless.
//   - Floating-point min and max are Go's built-in min and max: a NaN operand
//     makes the result NaN, and -0 is smaller than +0. This makes them
//     commutative, so a op b and b op a give the same bits, up to which NaN
//     comes out when both operands are NaN. (The plain comparison
//     "if b < a { a = b }" is not: it keeps or drops a NaN, and picks +0 or -0,
//     depending on the order of the operands.)
//   - Sum, prod, min and max are commutative bitwise for every type (again up
//     to NaN payloads). They are not associative for floating point, so the
//     order in which ranks combine is the schedule's business, not this
//     package's.
//   - Avg reduces with the sum kernel; the caller calls Divide once on the
//     result, which divides each element by the number of ranks, rounding
//     once (float16 and bfloat16 through float32).
//
// The fast kernels give the same bits as Reference for every input, except
// that when both operands are NaN either payload may come out.
//
// # Speed
//
// The portable kernels reinterpret aligned bytes as typed slices and unroll by
// eight; bitwise operators and 8-bit sums work on 64-bit words. On amd64 with
// AVX2 (and F16C for float16) sums, float products and the bitwise
// operators run as vector assembly. Race-detector builds use the portable Go
// kernels only, so that the detector sees every access.
package reduce
