package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(rabenseifnerAllreduce{base{"rabenseifner", sched.Allreduce}}) }

// rabenseifnerAllreduce is Rabenseifner's algorithm (Thakur, Rabenseifner
// and Gropp 2005, §4.4): a reduce-scatter by recursive halving (in round k
// each rank sends half of the part it still reduces to the rank at distance
// p2/2^(k+1) and adds the other half it receives) leaves newrank i with the
// sum of block i of p2; a recursive-doubling allgather then spreads the sums.
// Rank counts that are not powers of two fold as in recdouble. Each sum is
// computed by one rank only, so every rank gets the same bits.
//
// Cost: 2·log2(p2)·α + 2(p2−1)/p2·M/β + (p2−1)/p2·Mγ, plus 2(α + M/β) + Mγ
// when n is not a power of two.
type rabenseifnerAllreduce struct{ base }

func (rabenseifnerAllreduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	c := p.Count
	f := newFold(p.NRanks, r)
	in, out := whole(sched.In, c), whole(sched.Out, c)
	last := 2*f.log + 1
	if f.extra {
		g.send(r+1, 0, in)
		g.recv(r+1, last, out)
		return g.program()
	}
	part := func(buf sched.Buf, lo, hi int) sched.Chunk { return blocks(buf, c, f.p2, lo, hi) }
	src := sched.In // where this rank's data is until it is in Out
	if f.folded {
		g.copy(in, out)
		g.recvReduce(r-1, 0, out)
		src = sched.Out
	} else if f.log == 0 {
		g.copy(in, out)
	}
	tag := 1
	lo, hi := 0, f.p2
	for d := f.p2 / 2; d >= 1; d /= 2 {
		peer := f.rank(f.newrank ^ d)
		mid := (lo + hi) / 2
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if f.newrank&d != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		g.send(peer, tag, part(src, sendLo, sendHi))
		if src == sched.In {
			g.copy(part(sched.In, keepLo, keepHi), part(sched.Out, keepLo, keepHi))
		}
		g.recvReduce(peer, tag, part(sched.Out, keepLo, keepHi))
		lo, hi, src = keepLo, keepHi, sched.Out
		tag++
	}
	for d := 1; d < f.p2; d *= 2 {
		peer := f.rank(f.newrank ^ d)
		mine, theirs := f.newrank&^(d-1), (f.newrank^d)&^(d-1)
		g.send(peer, tag, part(sched.Out, mine, mine+d))
		g.recv(peer, tag, part(sched.Out, theirs, theirs+d))
		tag++
	}
	if f.folded {
		g.send(r-1, last, out)
	}
	return g.program()
}

func (rabenseifnerAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	p2, log := pow2Below(p.NRanks)
	mb := bytesOf(p.Count, es)
	l := m.Flat(p)
	frac := float64(p2-1) / float64(p2)
	t := 2*float64(log)*l.Alpha + 2*frac*mb/l.Beta + frac*mb*m.Gamma
	if p2 != p.NRanks {
		t += 2*l.Time(mb) + mb*m.Gamma
	}
	return t
}
