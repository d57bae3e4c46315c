package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(recdoubleAllreduce{base{"recdouble", sched.Allreduce}}) }

// recdoubleAllreduce is recursive doubling (Thakur, Rabenseifner and Gropp
// 2005, §4.5): in round k each rank exchanges its whole vector with the rank
// whose (folded) number differs in bit k and adds it. Both partners compute
// a+b from the same two operands, and IEEE addition is commutative, so every
// rank ends with the same bits.
//
// With n not a power of two, p2 the largest power of two below n and
// rem = n−p2, the first 2·rem ranks fold first: each even one sends its
// vector to the odd one above it, which adds it and takes part in the
// doubling; at the end it sends the result back, so the even ranks receive
// it rather than recompute it (see fold).
//
// Cost: log2(p2)·(α + M/β + Mγ), plus 2(α + M/β) + Mγ when n is not a power
// of two.
type recdoubleAllreduce struct{ base }

func (recdoubleAllreduce) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	c := p.Count
	f := newFold(p.NRanks, r)
	in, out, tmp := whole(sched.In, c), whole(sched.Out, c), whole(sched.Tmp, c)
	if f.extra {
		g.send(r+1, 0, in)
		g.recv(r+1, f.log+1, out)
		return g.program()
	}
	g.copy(in, out)
	src := in
	if f.folded {
		g.recvReduce(r-1, 0, out)
		src = out
	}
	for k := range f.log {
		peer := f.rank(f.newrank ^ 1<<k)
		g.send(peer, k+1, src)
		g.recv(peer, k+1, tmp)
		g.reduce(tmp, out)
		src = out
	}
	if f.folded {
		g.send(r-1, f.log+1, out)
	}
	return g.program()
}

// fold is how recursive doubling and halving handle rank counts that are
// not powers of two: ranks 0, 2, …, 2·rem−2 (extra) hand their data to the
// rank above and sit out; ranks 1, 3, …, 2·rem−1 (folded) and ranks from
// 2·rem on take part as newrank 0, 1, …, p2−1.
type fold struct {
	p2, log, rem  int
	extra, folded bool
	newrank       int // when not extra
}

func newFold(n, r int) fold {
	p2, log := pow2Below(n)
	f := fold{p2: p2, log: log, rem: n - p2}
	switch {
	case r < 2*f.rem && r%2 == 0:
		f.extra = true
	case r < 2*f.rem:
		f.folded, f.newrank = true, r/2
	default:
		f.newrank = r - f.rem
	}
	return f
}

// rank returns the rank that takes part as newrank nr.
func (f fold) rank(nr int) int {
	if nr < f.rem {
		return 2*nr + 1
	}
	return nr + f.rem
}

func (recdoubleAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	p2, log := pow2Below(p.NRanks)
	mb := bytesOf(p.Count, es)
	step := m.Flat(p).Time(mb)
	t := float64(log) * (step + mb*m.Gamma)
	if p2 != p.NRanks {
		t += 2*step + mb*m.Gamma
	}
	return t
}
