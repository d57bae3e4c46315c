package algo

import (
	"slices"

	"github.com/braid-ccl/braid/sched"
)

func init() { RegisterDynamic(hierPAPAlgo{base{"hierpap", sched.Allreduce}}) }

// hierPAPAlgo is Hierarchical-RSA with arrival-aware intra-node phases
// ("Efficient Process Arrival Pattern Aware Collective Communication for
// Deep Learning", Alizadeh et al., EuroMPI/USA 2022, §5.3, its
// "Hierarchical-RSA+Large-PAP-aware"): the ranks of each host reduce to the
// host's first rank along a chain in their order of arrival (papchain's,
// each host's leader keeping its line); the leaders allreduce among
// themselves by recursive doubling (non-powers of two folded in first, as
// MPICH does); each leader broadcasts the result to its host down a
// binomial tree. A rank waits for the later ranks of its own host only,
// and for other hosts only through their leaders. (The paper's inter-node
// phase is Rabenseifner's reduce-scatter and allgather; recursive doubling
// moves the whole vector each round, which matters for large messages on
// many hosts.) Results are the same on every rank: the leaders' recursive
// doubling combines the same two operands on both sides of each exchange.
type hierPAPAlgo struct{ base }

// Tags of the leaders' phase and the broadcast (the chain's are papArrive
// .. papData).
const (
	hpapFold  int32 = 16 // a folded leader's vector to its partner
	hpapRound int32 = 17 // + round: recursive doubling's exchanges
	hpapBack  int32 = 60 // the result back to a folded leader
	hpapBcast int32 = 61 // the broadcast within a host
)

func (a hierPAPAlgo) Supports(p sched.Params) error { return a.base.Supports(p) }

func (hierPAPAlgo) TmpLen(p sched.Params, rank int) int { return 2 * p.Count }

// hpapShape returns rank's host's ranks (its leader first) and the
// leaders of every host.
func hpapShape(p sched.Params, rank int) (members, leaders []int) {
	groups := p.Layout.Groups(p.NRanks) // one group when Layout is nil
	for _, g := range groups {
		leaders = append(leaders, g[0])
		if slices.Contains(g, rank) {
			members = g
		}
	}
	return members, leaders
}

// Run implements sched.Dynamic.
func (a hierPAPAlgo) Run(p sched.Params, rank int, x sched.Exec) error {
	c := p.Count
	in, out := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}
	tmp, tmp2 := sched.Chunk{Buf: sched.Tmp, Len: c}, sched.Chunk{Buf: sched.Tmp, Off: c, Len: c}
	members, leaders := hpapShape(p, rank)
	leader := members[0]
	if err := chainRun(x, members, leader, rank, in, out, tmp); err != nil {
		return err
	}
	if rank == leader {
		for _, st := range leaderSteps(leaders, rank) {
			var err error
			switch st.kind {
			case rdSend:
				err = x.Wait(x.Send(st.peer, st.tag, out))
			case rdRecv:
				err = x.Wait(x.Recv(st.peer, st.tag, out))
			case rdRecvReduce:
				err = x.Wait(x.RecvReduce(st.peer, st.tag, out))
			case rdExchange:
				// Send a copy: out changes when the peer's vector is
				// combined into it.
				x.Copy(out, tmp2)
				hs := x.Send(st.peer, st.tag, tmp2)
				hr := x.RecvReduce(st.peer, st.tag, out)
				if err = x.Wait(hs); err == nil {
					err = x.Wait(hr)
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return bcastRun(x, members, leader, rank, out, hpapBcast)
}

// Trace implements sched.Dynamic.
func (a hierPAPAlgo) Trace(p sched.Params, rank int, order []int) sched.Program {
	c := p.Count
	g := sched.NewBuilder(rank)
	g.P.TmpLen = 2 * c
	in, out := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}
	tmp, tmp2 := sched.Chunk{Buf: sched.Tmp, Len: c}, sched.Chunk{Buf: sched.Tmp, Off: c, Len: c}
	members, leaders := hpapShape(p, rank)
	leader := members[0]
	deps := []int32{chainTrace(g, members, leader, rank, order, in, out, tmp)}
	if rank == leader {
		for _, st := range leaderSteps(leaders, rank) {
			switch st.kind {
			case rdSend:
				deps = []int32{g.Send(st.peer, st.tag, out, deps...)}
			case rdRecv:
				deps = []int32{g.Recv(st.peer, st.tag, out, deps...)}
			case rdRecvReduce:
				deps = []int32{g.RecvReduce(st.peer, st.tag, out, deps...)}
			case rdExchange:
				cp := g.Copy(out, tmp2, deps...)
				deps = []int32{g.Send(st.peer, st.tag, tmp2, cp), g.RecvReduce(st.peer, st.tag, out, cp)}
			}
		}
	}
	bcastTrace(g, members, leader, rank, out, hpapBcast, deps...)
	g.P.Final = []sched.Chunk{out}
	return g.P
}

// The leaders' recursive doubling, as steps of one leader.
const (
	rdSend = iota
	rdRecv
	rdRecvReduce
	rdExchange
)

type rdStep struct {
	kind int
	peer int
	tag  int32
}

// leaderSteps returns leader rank's steps of the recursive doubling
// allreduce among leaders: with m leaders and pof2 the largest power of
// two ≤ m, the first 2(m − pof2) pair up, the even one of each pair
// handing its vector to the odd one and getting the result back at the
// end; the pof2 left exchange and combine with the leader mask apart,
// mask = 1, 2, 4, ...
func leaderSteps(leaders []int, rank int) []rdStep {
	m := len(leaders)
	i := slices.Index(leaders, rank)
	pof2 := 1
	for pof2*2 <= m {
		pof2 *= 2
	}
	rem := m - pof2
	var steps []rdStep
	if i < 2*rem {
		if i%2 == 0 {
			return []rdStep{{rdSend, leaders[i+1], hpapFold}, {rdRecv, leaders[i+1], hpapBack}}
		}
		steps = append(steps, rdStep{rdRecvReduce, leaders[i-1], hpapFold})
	}
	j := i - rem // index among the pof2
	if i < 2*rem {
		j = i / 2
	}
	real := func(j int) int {
		if j < rem {
			return leaders[2*j+1]
		}
		return leaders[j+rem]
	}
	round := int32(0)
	for mask := 1; mask < pof2; mask <<= 1 {
		steps = append(steps, rdStep{rdExchange, real(j ^ mask), hpapRound + round})
		round++
	}
	if i < 2*rem {
		steps = append(steps, rdStep{rdSend, leaders[i-1], hpapBack})
	}
	return steps
}
