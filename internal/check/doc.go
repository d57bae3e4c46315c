// Package check fills collective buffers with a known pattern and verifies
// results against the collective's definition, without materialising every
// rank's input. The values are small integers, exact in every dtype
// (float16 and bfloat16 included) and for every op, so results can be
// compared bit for bit; only avg, whose division rounds, is compared with a
// tolerance.
//
// The real-valued pattern (FillReal, VerifyReal) uses numbers with every
// mantissa bit in use, so that sums and products round, and checks
// reductions within RealTolerance, the bound for any order of evaluation
// in the dtype's precision. It catches rounding and division bugs that the
// integers cannot show.
//
// Example:
//
//	check.Fill(d, op, in, rank, 0, 1)
//	// ... run the collective ...
//	err := check.Verify(p, d, op, rank, out, 1)
package check
