package schedtest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/braid-ccl/braid/sched"
)

// Check tests the schedule progs for p and returns nil or an error that says
// what is wrong. It
//
//   - runs sched.Validate (which also checks Program.Final);
//   - runs the schedule with integer-valued random inputs, not in place and
//     in place, and compares every output with Expect;
//   - for reducing collectives, runs it again with random fractional inputs
//     of mixed magnitudes, where the order of additions shows in the result,
//     and requires the in-place and out-of-place results to be the same bits
//     and, for Allreduce, every rank's result to be the same bits;
//   - for Barrier, checks that no rank can finish before every rank has
//     started.
//
// Inputs are drawn from a generator seeded by p, so Check is deterministic.
func Check(p sched.Params, progs []sched.Program) error {
	if err := sched.Validate(p, progs); err != nil {
		return err
	}
	what := fmt.Sprintf("%v on %d ranks, count %d", p.Coll, p.NRanks, p.Count)
	if p.Coll.Rooted() {
		what += fmt.Sprintf(", root %d", p.Root)
	}
	seed := uint64(p.Coll)<<56 ^ uint64(p.NRanks)<<40 ^ uint64(p.Count)<<8 ^ uint64(p.Root)
	rng := rand.New(rand.NewPCG(seed, 1))
	in := inputs(p, func() float64 { return float64(rng.IntN(2001) - 1000) })
	want := Expect(p, in)
	for _, inPlace := range []bool{false, true} {
		got, err := RunSeed(p, progs, in, inPlace, seed+1)
		if err != nil {
			return err
		}
		if err := compare(got, want, false); err != nil {
			return fmt.Errorf("schedtest: %s, in place %v: %w", what, inPlace, err)
		}
	}
	if p.Coll.Reduces() {
		in = inputs(p, func() float64 { return rng.NormFloat64() * math.Ldexp(1, rng.IntN(41)-20) })
		apart, err := RunSeed(p, progs, in, false, seed+2)
		if err != nil {
			return err
		}
		inPlace, err := RunSeed(p, progs, in, true, seed+3)
		if err != nil {
			return err
		}
		if err := compare(inPlace, apart, true); err != nil {
			return fmt.Errorf("schedtest: %s: in-place result differs from out-of-place result: %w", what, err)
		}
		if p.Coll == sched.Allreduce {
			for r := 1; r < p.NRanks; r++ {
				if err := compareRank(r, apart[r], apart[0], true); err != nil {
					return fmt.Errorf("schedtest: %s: result differs from rank 0's: %w", what, err)
				}
			}
		}
	}
	if p.Coll == sched.Barrier {
		if err := synchronizes(progs); err != nil {
			return fmt.Errorf("schedtest: %s: %w", what, err)
		}
	}
	return nil
}

func inputs(p sched.Params, gen func() float64) [][]float64 {
	in := make([][]float64, p.NRanks)
	for r := range in {
		in[r] = make([]float64, p.InLen(r))
		for i := range in[r] {
			in[r][i] = gen()
		}
	}
	return in
}

// compare reports the first element where got and want differ, comparing
// bits when bitwise is set.
func compare(got, want [][]float64, bitwise bool) error {
	for r := range want {
		if err := compareRank(r, got[r], want[r], bitwise); err != nil {
			return err
		}
	}
	return nil
}

func compareRank(r int, got, want []float64, bitwise bool) error {
	if len(got) != len(want) {
		return fmt.Errorf("rank %d: %d elements, want %d", r, len(got), len(want))
	}
	first, bad := -1, 0
	for i := range want {
		g, w := got[i], want[i]
		same := g == w
		if bitwise {
			same = math.Float64bits(g) == math.Float64bits(w)
		}
		if !same {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("rank %d: element %d is %v, want %v (%d of %d elements differ)",
			r, first, got[first], want[first], bad, len(want))
	}
	return nil
}

// synchronizes checks that every rank's program completes only after every
// rank's program has started, through dependencies and received messages
// alone: not program order, which an executor need not keep, and not the
// completion of sends, which may be buffered.
func synchronizes(progs []sched.Program) error {
	n := len(progs)
	words := (n + 63) / 64
	type set []uint64
	newSet := func(r int) set {
		s := make(set, words)
		s[r/64] |= 1 << (r % 64)
		return s
	}
	union := func(dst, src set) (changed bool) {
		for i := range dst {
			if v := dst[i] | src[i]; v != dst[i] {
				dst[i], changed = v, true
			}
		}
		return changed
	}
	// start[r][i]: the ranks known to have started when step i of rank r
	// starts; end[r][i]: when it completes.
	start, end := make([][]set, n), make([][]set, n)
	type key struct {
		from, to int
		tag      int32
	}
	type ref struct{ rank, step int }
	msgs := map[key][2]ref{}
	for r, prog := range progs {
		start[r], end[r] = make([]set, len(prog.Steps)), make([]set, len(prog.Steps))
		for i, s := range prog.Steps {
			start[r][i], end[r][i] = newSet(r), newSet(r)
			switch s.Kind {
			case sched.KindSend:
				k := key{r, s.Peer, s.Tag}
				m := msgs[k]
				m[0] = ref{r, i}
				msgs[k] = m
			case sched.KindRecv, sched.KindRecvReduce:
				k := key{s.Peer, r, s.Tag}
				m := msgs[k]
				m[1] = ref{r, i}
				msgs[k] = m
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for r, prog := range progs {
			for i, s := range prog.Steps {
				for _, d := range s.Deps {
					changed = union(start[r][i], end[r][d]) || changed
				}
				changed = union(end[r][i], start[r][i]) || changed
			}
		}
		// A receive completes after its send has started. A send may
		// complete before its receive starts (an eager transport buffers
		// it), so it tells the sender nothing.
		for _, m := range msgs {
			s, t := m[0], m[1]
			changed = union(end[t.rank][t.step], start[s.rank][s.step]) || changed
		}
	}
	for r := range progs {
		exit := newSet(r)
		for i := range end[r] {
			union(exit, end[r][i])
		}
		for q := range n {
			if exit[q/64]&(1<<(q%64)) == 0 {
				return fmt.Errorf("rank %d can finish before rank %d has started", r, q)
			}
		}
	}
	return nil
}
