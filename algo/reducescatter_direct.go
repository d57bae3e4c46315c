package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(directReduceScatterAlgo{base{"direct", sched.ReduceScatter}}) }

// directReduceScatterAlgo is the one-step reduce-scatter: every rank sends
// block j of its input straight to rank j and adds the n−1 blocks it
// receives to its own block, always in rank order whatever order they
// arrive in, so the result has the same bits on every run. One round of
// latency instead of the ring's n−1. Over shared memory, messages above the
// transport's eager limit are read by the receiver straight from the
// sender's buffer (process_vm_readv), so this is the single-copy reduction
// of Ramesh et al. (HotI 2023): local rank i reduces chunk i of every peer.
// Blocks travel in segments of Params.Segment elements (DirectSegment when
// 0), two per peer posted ahead, so that the receiver adds a segment while
// the next arrive and its scratch stays at 2(n−1) segments.
//
// Cost, for M bytes of output per rank on n ranks of one host joined by
// (α, β), in s segments:
//
//	T = c + r + (s−1)·max(c, r),   c = α + (n−1)·M/(sβ), r = (n−1)·M·γ/s
//
// (one α per round: the messages a rank exchanges with distinct peers go
// at once, through its port; the receiver takes in and adds (n−1)·M bytes,
// a segment's additions overlapping the next one's transfer). On several
// hosts the transfer term is the largest of a rank's bytes through its
// port, a pair's over its link and a host's over its network link, which
// all its ranks share (exchangeTime).
//
// Memory traffic (Mover), per rank: its own block copied to Out, and each
// of the n−1 blocks it receives written into scratch and added to Out:
// (2n−1)·M, and the (n−1)·M it sends copied once more where segments are
// small enough to go through the transport's ring. The segmented ring
// moves 3(n−1)·M: each of its n−1 steps also copies the rank's own block
// into the partial sum it receives into. On the 16-core node, where 8 or
// 16 ranks share the memory, that is what made this 1.4–1.7× faster than
// the ring from 4 MiB (docs/PERFORMANCE.md).
type directReduceScatterAlgo struct{ base }

func (directReduceScatterAlgo) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n, c := p.NRanks, p.Count
	parts := make([]part, n)
	for j := range parts {
		parts[j] = part{owner: j, src: span(sched.In, j*c, c), dst: whole(sched.Out, c)}
	}
	directReduceScatter(g, allRanks(n)[0], r, parts, p.Segment, 0)
	return g.program()
}

func (directReduceScatterAlgo) Cost(p sched.Params, es int, m cost.Model) float64 {
	n := p.NRanks
	if n == 1 || p.Count == 0 {
		return 0
	}
	_, s := directSegments(n, p.Count, p.Segment)
	c := exchangeTime(p, m, allToAll(n, float64(p.Count*es)), 1/float64(s))
	return pipelined(s, c, float64((n-1)*p.Count*es)*m.Gamma/float64(s))
}

// Moved implements Mover.
func (directReduceScatterAlgo) Moved(p sched.Params, es int, m cost.Model) float64 {
	n, mb := p.NRanks, bytesOf(p.Count, es)
	if n == 1 || p.Count == 0 {
		return mb
	}
	seg, _ := directSegments(n, p.Count, p.Segment)
	return mb + float64(n-1)*(2*mb+eagerBytes(p.Count, seg, es, m.Eager))
}

// allToAll returns the flows of every rank sending bytes to every other.
func allToAll(n int, bytes float64) []flow {
	flows := make([]flow, 0, n*(n-1))
	for a := range n {
		for b := range n {
			if a != b {
				flows = append(flows, flow{a, b, bytes})
			}
		}
	}
	return flows
}
