package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(directAllreduce{base{"direct", sched.Allreduce}}) }

// directAllreduce is a direct reduce-scatter followed by a direct allgather
// (see reducescatter "direct" and allgather "direct"): the count is cut
// into n blocks as evenly as possible; every rank sends block j of its
// input to rank j, which adds the n−1 blocks it receives to its own in rank
// order, and then sends the sum to every other rank. Each sum is made by
// one rank, so every rank gets the same bits. Over shared memory the large
// messages go by single copy, so this is the intra-node reduction of Ramesh
// et al. (HotI 2023), where local rank i reduces chunk i of every peer's
// buffer. Large blocks travel in segments of Params.Segment elements
// (DirectSegment when 0), so that the owner adds one segment while the next
// arrives.
//
// Cost, for M bytes on n ranks of one host joined by (α, β), blocks of
// B = M/n bytes in s segments:
//
//	T = c + r + (s−1)·max(c, r) + α + (n−1)·B/β,   c = α + (n−1)·B/(sβ), r = (n−1)·B·γ/s
//
// one α per round (the messages a rank exchanges with distinct peers go at
// once, through its port), a segment's additions overlapping the next
// segment's transfer. On one host, where the ranks copy their own messages
// (cost.Model.Serial), they take turns instead: the first three terms
// become s·(c + r). On several hosts the transfer terms become the
// largest of a rank's bytes through its port, a pair's over its link and a
// host's over its network link (exchangeTime). This is hier's cost with one
// group of n ranks.
type directAllreduce struct{ base }

func (directAllreduce) Program(p sched.Params, r int) sched.Program {
	return rsagProgram(p, r, allRanks(p.NRanks), p.NRanks)
}

func (directAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	return rsagCost(p, es, m, allRanks(p.NRanks), p.NRanks)
}

// allRanks returns one group of ranks 0 to n−1.
func allRanks(n int) [][]int {
	g := make([]int, n)
	for i := range g {
		g[i] = i
	}
	return [][]int{g}
}
