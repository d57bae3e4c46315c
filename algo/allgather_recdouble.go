package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() {
	Register(recdoubleAllgather{base{"recdouble", sched.Allgather}})
	Register(bruckAllgather{base{"bruck", sched.Allgather}})
}

// recdoubleAllgather is recursive doubling (Thakur, Rabenseifner and Gropp
// 2005, §4.1) when n is a power of two: in round k each rank exchanges the
// 2^k blocks it has with the rank whose number differs in bit k. For other n
// it is bruckAllgather, which takes as many rounds, ⌈log2 n⌉, and moves as
// little data.
//
// Cost: ⌈log2 n⌉α + (n−1)/n·M/β for M bytes of output.
type recdoubleAllgather struct{ base }

func (recdoubleAllgather) Program(p sched.Params, r int) sched.Program {
	n, c := p.NRanks, p.Count
	if n&(n-1) != 0 {
		return bruckAllgather{}.Program(p, r)
	}
	g := newGen(p, r)
	in := whole(sched.In, c)
	g.copy(in, span(sched.Out, r*c, c))
	k := 0
	for d := 1; d < n; d *= 2 {
		peer := r ^ d
		mine, theirs := r&^(d-1), peer&^(d-1)
		src := span(sched.Out, mine*c, d*c)
		if d == 1 {
			src = in
		}
		g.send(peer, k, src)
		g.recv(peer, k, span(sched.Out, theirs*c, d*c))
		k++
	}
	return g.program()
}

// bruckAllgather is Bruck's algorithm (Bruck et al. 1997; Thakur et al.
// 2005, §4.1) for any n: in round k, with d = 2^k, rank r sends the
// min(d, n−d) blocks r, r+1, … it has to r−d and receives blocks r+d, … from
// r+d. Blocks land at their final place in Out (there is no final rotation);
// a run of blocks that wraps past the end of Out goes as two messages.
//
// Cost: ⌈log2 n⌉α + (n−1)/n·M/β for M bytes of output (Thakur et al.
// 2005, §4.1). It counts one α per round; the schedule can differ by about
// one α either way: a run that wraps goes as two messages to the same
// peer, one after the other, while a round that forwards no block
// received in the round before need not wait for it.
type bruckAllgather struct{ base }

func (bruckAllgather) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	in := whole(sched.In, c)
	// run returns blocks first, first+1, …, first+cnt−1 (mod n) of Out as
	// at most two chunks, split where the run wraps.
	run := func(first, cnt int) []sched.Chunk {
		first = mod(first, n)
		if first+cnt <= n {
			return []sched.Chunk{span(sched.Out, first*c, cnt*c)}
		}
		return []sched.Chunk{span(sched.Out, first*c, (n-first)*c), span(sched.Out, 0, (first+cnt-n)*c)}
	}
	own := span(sched.Out, r*c, c)
	k := 0
	for d := 1; d < n; d *= 2 {
		cnt := min(d, n-d)
		for i, ch := range run(r, cnt) {
			if d == 1 {
				ch = in
			}
			g.send(mod(r-d, n), 2*k+i, ch)
		}
		if d == 1 {
			// The rank's own block after the first send, as the ring
			// does: the copy overlaps the peer's reading of in (a single
			// copy over shared memory), where before the send it delayed
			// the exchange (2 ranks, 1 MiB on the 16-core node: 77–91 µs
			// against the ring's 66–72, session 29).
			g.copy(in, own)
		}
		for i, ch := range run(r+d, cnt) {
			g.recv(mod(r+d, n), 2*k+i, ch)
		}
		k++
	}
	if n == 1 {
		g.copy(in, own)
	}
	return g.program()
}

func (recdoubleAllgather) Cost(p sched.Params, es int, m cost.Model) float64 {
	return bruckAllgather{}.Cost(p, es, m) // the same closed form
}

func (bruckAllgather) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	n := p.NRanks
	return float64(ceilLog2(n))*l.Alpha + float64(n-1)*bytesOf(p.Count, es)/l.Beta
}
