package algo

import (
	"math"
	"math/bits"

	"github.com/braid-ccl/braid/sched"
)

func init() { RegisterPattern(prrAlgo{base{"prr", sched.Allreduce}}) }

// prrAlgo is the pre-reduced ring allreduce of Proficz ("Improving
// all-reduce collective operations for imbalanced process arrival
// patterns", The Journal of Supercomputing 2018), as reconstructed here
// from its published summary (its pseudo-code was not at hand): a ring
// allreduce whose input is pre-reduced by the processes that arrive first,
// the number of pre-reduction steps computed from the predicted arrival
// times.
//
// The ranks are sorted by predicted arrival, o_0 first. In k pre-steps the
// first k ranks reduce along a chain o_0 → o_1 → … → o_k (each adds its
// predecessor's partial sum to its input and passes it on, as the sorted
// linear tree does), so that o_k holds the sum of k+1 inputs; the ring
// allreduce then runs among o_k … o_{n−1} (m = n − k ranks, o_k with its
// pre-reduced vector); last, o_k broadcasts the result to o_0 … o_{k−1}
// down a binomial tree. k = 0 is the plain ring (in arrival order), k =
// n − 1 the sorted linear tree with a broadcast. k is the one that
// minimises the predicted end, from the predicted arrivals and MsgTime:
// the chain's hops as arrivals allow them, then 2(m−1) ring steps of
// ⌈count/m⌉ elements, then ⌈log₂(k+1)⌉ broadcast hops of the whole
// vector (reductions free).
//
// With the pattern itself as the prediction this is the clairvoyant case;
// braid sim's prr:stale predicts each call by the one before, as Proficz's
// online estimation would at best. Every block's sum is computed once (by
// its ring owner), so every rank gets the same bits.
type prrAlgo struct{ base }

// Tags of the pre-reduced ring: the chain, the broadcast, then the ring's
// steps.
const (
	prrChain int32 = 1
	prrBcast int32 = 2
	prrRing  int32 = 3
)

func (a prrAlgo) Supports(p sched.Params) error { return a.base.Supports(p) }

// PatternPrograms implements PatternAlgorithm.
func (a prrAlgo) PatternPrograms(p sched.Params, est []float64, msg MsgTime) []sched.Program {
	order := byArrival(est)
	k := prrSteps(p, order, est, msg)
	progs := make([]sched.Program, p.NRanks)
	for r := range progs {
		progs[r] = prrProgram(p, order, k, r)
	}
	return progs
}

// prrSteps returns the number of pre-reduction steps with the least
// predicted end (the least on ties).
func prrSteps(p sched.Params, order []int, est []float64, msg MsgTime) int {
	n, c := p.NRanks, p.Count
	if n <= 2 {
		return 0
	}
	// ready[i]: when o_i holds the sum of o_0 … o_i along the chain.
	ready := make([]float64, n)
	ready[0] = est[order[0]]
	for i := 1; i < n; i++ {
		ready[i] = max(ready[i-1], est[order[i]]) + msg(order[i-1], order[i], c)
	}
	last := est[order[n-1]]
	best, bestT := 0, math.Inf(1)
	for k := range n {
		m := n - k
		t := max(ready[k], last)
		if m > 1 {
			blk := ceilDiv(c, m)
			var hop float64
			for j := k; j < n; j++ {
				next := j + 1
				if next == n {
					next = k
				}
				hop = max(hop, msg(order[j], order[next], blk))
			}
			t += 2 * float64(m-1) * hop
		}
		if k > 0 {
			var hop float64
			for i := range k {
				hop = max(hop, msg(order[k], order[i], c))
			}
			t += float64(bits.Len(uint(k))) * hop // ⌈log₂(k+1)⌉
		}
		if t < bestT {
			best, bestT = k, t
		}
	}
	return best
}

// prrProgram returns rank r's program with k pre-steps in the given
// order of arrival.
func prrProgram(p sched.Params, order []int, k, r int) sched.Program {
	c := p.Count
	g := sched.NewBuilder(r)
	in, out, tmp := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}, sched.Chunk{Buf: sched.Tmp, Len: c}
	g.P.Final = []sched.Chunk{out}
	pos := 0
	for i, q := range order {
		if q == r {
			pos = i
		}
	}
	head := order[k]
	var tree []int // the broadcast's members, the head first
	if k > 0 {
		tree = append([]int{head}, order[:k]...)
	}
	if pos < k {
		// A pre-reducing rank: pass the partial sum on, then wait for the
		// result.
		last := sched.None
		if pos == 0 {
			last = g.Send(order[1], prrChain, in)
		} else {
			g.P.TmpLen = c
			cp := g.Copy(in, tmp)
			rr := g.RecvReduce(order[pos-1], prrChain, tmp, cp)
			last = g.Send(order[pos+1], prrChain, tmp, rr)
		}
		bcastTrace(g, tree, head, r, out, prrBcast, last)
		return g.P
	}
	src, ready := in, sched.None
	if pos == k && k > 0 {
		g.P.TmpLen = c
		cp := g.Copy(in, tmp)
		src, ready = tmp, g.RecvReduce(order[k-1], prrChain, tmp, cp)
	}
	done := ringTrace(g, order[k:], r, c, src, ready, out, prrRing)
	if pos == k && k > 0 {
		bcastTrace(g, tree, head, r, out, prrBcast, done...)
	}
	return g.P
}

// ringTrace adds rank's steps of a ring allreduce among ring (in ring
// order; rank is a member) of the count elements of src (which step
// ready, if not None, writes) into out, with tags from tag on, and
// returns the steps after which out holds the result. Of the count
// elements split into len(ring) blocks, block i is summed once, by member
// i−1, so every member gets the same bits.
func ringTrace(g *sched.Builder, ring []int, rank, count int, src sched.Chunk, ready int32, out sched.Chunk, tag int32) []int32 {
	m := len(ring)
	if m == 1 {
		return []int32{g.Copy(src, out, ready)}
	}
	j := 0
	for i, q := range ring {
		if q == rank {
			j = i
		}
	}
	next, prev := ring[mod(j+1, m)], ring[mod(j-1, m)]
	blk := func(c sched.Chunk, i int) sched.Chunk {
		i = mod(i, m)
		a, b := blockOff(count, m, i), blockOff(count, m, i+1)
		return sched.Chunk{Buf: c.Buf, Off: c.Off + a, Len: b - a}
	}
	// Reduce-scatter: after step s, out's block j−s−1 holds the sum of
	// s+2 members' blocks.
	sends := make([]int32, m-1)
	adds := make([]int32, m-1)
	for s := range m - 1 {
		if s == 0 {
			sends[s] = g.Send(next, tag, blk(src, j), ready)
		} else {
			sends[s] = g.Send(next, tag+int32(s), blk(out, j-s), adds[s-1])
		}
		cp := g.Copy(blk(src, j-s-1), blk(out, j-s-1), ready)
		adds[s] = g.RecvReduce(prev, tag+int32(s), blk(out, j-s-1), cp)
	}
	// Allgather: member j starts with the sum of block j+1.
	done := []int32{adds[m-2]}
	have := adds[m-2]
	for s := range m - 1 {
		t := tag + int32(m-1+s)
		g.Send(next, t, blk(out, j+1-s), have)
		// Block j−s was sent by the reduce-scatter's step s (from src at
		// step 0, which is out in place), and written by its step s−1.
		deps := []int32{sends[s]}
		if s > 0 {
			deps = append(deps, adds[s-1])
		}
		have = g.Recv(prev, t, blk(out, j-s), deps...)
		done = append(done, have)
	}
	return done
}
