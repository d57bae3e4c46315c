package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(scatterAllgatherBcast{base{"scatterallgather", sched.Bcast}}) }

// scatterAllgatherBcast is van de Geijn's broadcast for long messages (Xin,
// Xie and Li, Computer Systems & Applications 2020, §3.1; Thakur,
// Rabenseifner and Gropp 2005, §4.2): the vector is cut into n blocks as
// evenly as possible (some empty when Count < n), block v belonging to the
// rank at distance v from the root; a binomial scatter gives every rank v the
// blocks of its subtree, v to v + lowbit(v) − 1, and a ring allgather then
// passes the blocks on, in step s rank v sending block v−s to v+1. A rank
// neither sends a block to a rank that has it from the scatter nor receives
// one it has, so the root receives nothing.
//
// Cost, for M bytes on n ranks (Xin, Xie and Li, Computer Systems &
// Applications 2020, eq. 4):
//
//	T = (⌈log2 n⌉ + n − 1)·α + 2·(n−1)/n·M/β
//
// the scatter's ⌈log2 n⌉ rounds move (n−1)/n·M out of the root, and the
// ring's n−1 steps move a block each over every link. (The paper's first
// line writes the ring's term as (n−1)(t_s + M/B·1/B); its second line,
// the one here, is right.) Against the binomial tree's ⌈log2 n⌉·M/β it
// trades α·(n−1) for bandwidth.
type scatterAllgatherBcast struct{ base }

func (scatterAllgatherBcast) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	v := mod(r-p.Root, n)
	actual := func(u int) int { return mod(u+p.Root, n) }
	src := sched.Out // where v's blocks are once it has them
	if v == 0 {
		src = sched.In
	}
	blk := func(buf sched.Buf, lo, hi int) sched.Chunk { return blocks(buf, c, n, lo, min(hi, n)) }
	// Scatter: v gets blocks [v, v+low) from its parent and passes on the
	// upper halves.
	low := lowbit(v, n)
	if v != 0 {
		g.recv(actual(v-low), 0, blk(sched.Out, v, v+low))
	}
	for m := low / 2; m >= 1; m /= 2 {
		if v+m < n {
			g.send(actual(v+m), 0, blk(src, v+m, v+2*m))
		}
	}
	// Ring allgather: in step s, v has block v−s (from the scatter or from
	// step s−1).
	holds := func(u, b int) bool { return u == 0 || (b >= u && b < u+lowbit(u, n)) }
	next := mod(v+1, n)
	for s := range n - 1 {
		if b := mod(v-s, n); !holds(next, b) {
			g.send(actual(next), s+1, blk(src, b, b+1))
		}
		if b := mod(v-s-1, n); !holds(v, b) {
			g.recv(actual(v-1), s+1, blk(sched.Out, b, b+1))
		}
	}
	if v == 0 {
		g.copy(whole(sched.In, c), whole(sched.Out, c))
	}
	return g.program()
}

// lowbit returns v's lowest set bit, or for v = 0 the least power of two
// not below n: the span of v's subtree in a binomial tree on n ranks.
func lowbit(v, n int) int {
	if v == 0 {
		l := 1
		for l < n {
			l *= 2
		}
		return l
	}
	return v & -v
}

func (scatterAllgatherBcast) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	n := float64(p.NRanks)
	l := m.Flat(p)
	return float64(ceilLog2(p.NRanks)+p.NRanks-1)*l.Alpha + 2*(n-1)/n*bytesOf(p.Count, es)/l.Beta
}
