package check

import (
	"fmt"
	"math"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// RealValue is element i of rank's input for a run with salt of the
// real-valued pattern: a number with every mantissa bit in use, so that
// sums and products round. It lies in [-1, 1) for sum, avg, min and max
// (signs mixed, so that sums cancel) and in [0.5, 2) for prod (products of
// 9 values stay within float16's range).
func RealValue(op dtype.Op, rank, i, salt int) float64 {
	h := uint64(rank)*0x9e3779b97f4a7c15 + uint64(i)*0xbf58476d1ce4e5b9 + uint64(salt)*0x94d049bb133111eb + 0x2545f4914f6cdd1d
	h ^= h >> 31
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	u := float64(h>>11) / (1 << 53) // [0, 1)
	if op == dtype.Prod {
		return 0.5 * math.Exp2(2*u)
	}
	return 2*u - 1
}

// FillReal writes rank's input of the real-valued pattern for salt into
// buf (a floating-point dtype), starting at element index first.
func FillReal(d dtype.DType, op dtype.Op, buf []byte, rank, first, salt int) {
	es := d.Size()
	for i := 0; i < len(buf)/es; i++ {
		put(d, buf[i*es:], RealValue(op, rank, first+i, salt))
	}
}

// unitRoundoff is half the distance from 1 to the next number of d.
func unitRoundoff(d dtype.DType) float64 {
	switch d {
	case dtype.Float64:
		return 0x1p-53
	case dtype.Float32:
		return 0x1p-24
	case dtype.Float16:
		return 0x1p-11
	case dtype.BFloat16:
		return 0x1p-8
	}
	return 0
}

// RealTolerance returns how far a reduction of n values v (already
// rounded to d) with op may be from the exact one, in any order of
// evaluation in d's precision: each of the n−1 operations and the final
// division of avg rounds once, by at most the unit roundoff u of d
// relative to its result. So a sum or avg may be off by (n+1)·u·Σ|v|
// (divided by n for avg), a product by (n+1)·u·|Π v|; min and max are
// exact. A result off by more than this is wrong, not rounded.
func RealTolerance(d dtype.DType, op dtype.Op, v []float64) float64 {
	u := unitRoundoff(d)
	n := float64(len(v))
	switch op {
	case dtype.Sum, dtype.Avg:
		s := 0.0
		for _, x := range v {
			s += math.Abs(x)
		}
		if op == dtype.Avg {
			s /= n
		}
		return (n + 1) * u * s
	case dtype.Prod:
		p := 1.0
		for _, x := range v {
			p *= x
		}
		return (n + 1) * u * math.Abs(p)
	}
	return 0
}

// VerifyReal compares rank's output of a run of the real-valued pattern
// with the collective's definition, computed in float64 from the inputs as
// d stores them: reductions within RealTolerance, everything else
// exactly. It reports the first wrong element.
func VerifyReal(p sched.Params, d dtype.DType, op dtype.Op, rank int, out []byte, salt int) error {
	if !d.IsFloat() {
		return fmt.Errorf("the real-valued pattern needs a floating-point dtype, not %v", d)
	}
	es := d.Size()
	n := p.OutLen(rank)
	if len(out) != n*es {
		return fmt.Errorf("output has %d bytes, want %d", len(out), n*es)
	}
	in := func(r, i int) float64 { return wrap(d, RealValue(op, r, i, salt)) }
	vals := make([]float64, p.NRanks)
	bad := 0
	var first error
	for j := 0; j < n; j++ {
		var want, tol float64
		elem := -1
		switch p.Coll {
		case sched.Allreduce, sched.Reduce:
			elem = j
		case sched.ReduceScatter:
			elem = rank*p.Count + j
		default:
			want = wrap(d, expectedFrom(in, p, rank, j))
		}
		if elem >= 0 {
			for r := range vals {
				vals[r] = in(r, elem)
			}
			want = reduceExact(op, vals)
			tol = RealTolerance(d, op, vals)
		}
		got := get(d, out[j*es:])
		if math.Abs(got-want) <= tol {
			continue
		}
		if bad == 0 {
			first = fmt.Errorf("rank %d: %v %v %v (real values): element %d of %d is %v, want %v within %.3g", rank, p.Coll, d, op, j, n, got, want, tol)
		}
		bad++
	}
	if bad > 0 {
		return fmt.Errorf("%w (%d wrong elements)", first, bad)
	}
	return nil
}

// reduceExact reduces v with op in float64.
func reduceExact(op dtype.Op, v []float64) float64 {
	acc := v[0]
	for _, x := range v[1:] {
		switch op {
		case dtype.Sum, dtype.Avg:
			acc += x
		case dtype.Prod:
			acc *= x
		case dtype.Min:
			acc = math.Min(acc, x)
		case dtype.Max:
			acc = math.Max(acc, x)
		}
	}
	if op == dtype.Avg {
		acc /= float64(len(v))
	}
	return acc
}
