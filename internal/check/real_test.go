package check

import (
	"math/rand/v2"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// roundedReduce reduces element elem of the n ranks' real-valued inputs in
// d's precision, rounding after every step, in the order perm (as some
// algorithm might), and divides by div for avg.
func roundedReduce(d dtype.DType, op dtype.Op, n, elem, salt int, perm []int, div int) float64 {
	in := func(r int) float64 { return wrap(d, RealValue(op, r, elem, salt)) }
	acc := in(perm[0])
	for _, r := range perm[1:] {
		switch op {
		case dtype.Sum, dtype.Avg:
			acc = wrap(d, acc+in(r))
		case dtype.Prod:
			acc = wrap(d, acc*in(r))
		case dtype.Min:
			acc = min(acc, in(r))
		case dtype.Max:
			acc = max(acc, in(r))
		}
	}
	if op == dtype.Avg {
		acc = wrap(d, acc/float64(div))
	}
	return acc
}

// TestVerifyRealTolerance checks that VerifyReal accepts reductions done
// in each float dtype's precision in random orders, on 2 to 9 ranks, and
// rejects an avg divided by n−1 and a sum that leaves a rank out.
func TestVerifyRealTolerance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const count, salt = 50, 3
	for _, d := range []dtype.DType{dtype.Float64, dtype.Float32, dtype.Float16, dtype.BFloat16} {
		es := d.Size()
		for n := 2; n <= 9; n++ {
			p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count}
			for _, op := range []dtype.Op{dtype.Sum, dtype.Prod, dtype.Min, dtype.Max, dtype.Avg} {
				out := make([]byte, count*es)
				for j := range count {
					put(d, out[j*es:], roundedReduce(d, op, n, j, salt, rng.Perm(n), n))
				}
				if err := VerifyReal(p, d, op, 0, out, salt); err != nil {
					t.Errorf("%v %v n=%d: a reduction in %v's precision rejected: %v", d, op, n, d, err)
				}
			}
			out := make([]byte, count*es)
			for j := range count {
				put(d, out[j*es:], roundedReduce(d, dtype.Avg, n, j, salt, rng.Perm(n), n-1))
			}
			if n > 2 && VerifyReal(p, d, dtype.Avg, 0, out, salt) == nil {
				t.Errorf("%v n=%d: avg divided by n-1 accepted", d, n)
			}
			for j := range count {
				put(d, out[j*es:], roundedReduce(d, dtype.Sum, n, j, salt, rng.Perm(n)[1:], n))
			}
			if VerifyReal(p, d, dtype.Sum, 0, out, salt) == nil {
				t.Errorf("%v n=%d: a sum without one rank accepted", d, n)
			}
		}
	}
}

// TestVerifyRealMoves checks VerifyReal on collectives that move data:
// exact copies pass, one changed element fails.
func TestVerifyRealMoves(t *testing.T) {
	const n, count, salt = 4, 6, 9
	for _, coll := range []sched.Collective{sched.Bcast, sched.Allgather, sched.Gather, sched.Scatter, sched.Alltoall} {
		for _, d := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			es := d.Size()
			p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: 2}
			in := func(r, i int) float64 { return wrap(d, RealValue(dtype.Sum, r, i, salt)) }
			for rank := range n {
				out := make([]byte, p.OutLen(rank)*es)
				for j := range p.OutLen(rank) {
					put(d, out[j*es:], expectedFrom(in, p, rank, j))
				}
				if err := VerifyReal(p, d, dtype.Sum, rank, out, salt); err != nil {
					t.Errorf("%v %v rank %d: exact output rejected: %v", coll, d, rank, err)
				}
				if len(out) > 0 {
					put(d, out, get(d, out)/2)
					if VerifyReal(p, d, dtype.Sum, rank, out, salt) == nil {
						t.Errorf("%v %v rank %d: a changed element accepted", coll, d, rank)
					}
				}
			}
		}
	}
}
