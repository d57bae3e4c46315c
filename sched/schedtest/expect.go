package schedtest

import (
	"fmt"

	"github.com/braid-ccl/braid/sched"
)

// Expect returns what the collective p computes with the sum operator on the
// inputs in (in[r] holds p.InLen(r) elements): out[r] holds p.OutLen(r)
// elements, never nil. Sums add the ranks' values in rank order.
//
//	Allreduce:     every out is the elementwise sum of all ins.
//	Reduce:        the root's out is that sum.
//	Bcast:         every out is the root's in.
//	Allgather:     every out is the ins concatenated in rank order.
//	ReduceScatter: out[r] is the sum of block r of every in.
//	Gather:        the root's out is the ins concatenated in rank order.
//	Scatter:       out[r] is block r of the root's in.
//	Alltoall:      block j of out[r] is block r of in[j].
//	Barrier:       nothing.
//
// Expect panics if in does not have the lengths p gives.
func Expect(p sched.Params, in [][]float64) [][]float64 {
	if err := sched.CheckParams(p); err != nil {
		panic(err)
	}
	if len(in) != p.NRanks {
		panic(fmt.Sprintf("schedtest: %d inputs for %d ranks", len(in), p.NRanks))
	}
	for r := range in {
		if len(in[r]) != p.InLen(r) {
			panic(fmt.Sprintf("schedtest: rank %d: input has %d elements, %v wants %d", r, len(in[r]), p.Coll, p.InLen(r)))
		}
	}
	n, c := p.NRanks, p.Count
	out := make([][]float64, n)
	for r := range out {
		out[r] = make([]float64, p.OutLen(r))
	}
	block := func(s []float64, i int) []float64 { return s[i*c : (i+1)*c] }
	sum := func(i0 int) []float64 { // the sum over ranks of in[r][i0 : i0+c]
		s := make([]float64, c)
		for r := range in {
			add(s, in[r][i0:i0+c])
		}
		return s
	}
	switch p.Coll {
	case sched.Allreduce:
		s := sum(0)
		for r := range out {
			copy(out[r], s)
		}
	case sched.Reduce:
		copy(out[p.Root], sum(0))
	case sched.Bcast:
		for r := range out {
			copy(out[r], in[p.Root])
		}
	case sched.Allgather:
		for r := range out {
			for j := range in {
				copy(block(out[r], j), in[j])
			}
		}
	case sched.ReduceScatter:
		for r := range out {
			copy(out[r], sum(r*c))
		}
	case sched.Gather:
		for j := range in {
			copy(block(out[p.Root], j), in[j])
		}
	case sched.Scatter:
		for r := range out {
			copy(out[r], block(in[p.Root], r))
		}
	case sched.Alltoall:
		for r := range out {
			for j := range in {
				copy(block(out[r], j), block(in[j], r))
			}
		}
	}
	return out
}
