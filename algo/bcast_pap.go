package algo

import (
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// papBcastAlgo is Patarasuk and Yuan's arrival-pattern-aware broadcast for
// large messages ("Efficient MPI Bcast across different process arrival
// patterns", IPDPS 2008), chain variant, run by the executor: every
// non-root rank tells the root that it arrived (one word); whenever the
// root is free it takes every rank whose word is in and that it has not
// served, in rank order, tells each its predecessor and successor in that
// group's chain (one word: the root is the first's predecessor, the last
// has no successor), and sends the first the vector in segments of
// Params.Segment elements (ChainSegment if 0), keeping up to papWindow
// segments in flight; every member forwards each segment to its successor
// as soon as it has it. The root is free again once the first has taken
// its last segment; with no unserved rank in, it waits for the next word.
// A rank waits only for the root and for the ranks served with it, never
// for later ones; the root stays until the last rank is served.
//
// Its data movement is that of arrivalBcast's program for the groups the
// root forms, so the simulator runs it by those (PatternPrograms: the
// groups predicted from the arrival times and the root's time per group);
// Trace, which knows only the order of arrival, takes the ranks that
// arrived before the root as its first group and each later rank as a
// group of its own (what the root sees when their words are in by its
// arrival and the later ranks come further apart than it takes to serve
// one). Tune gives the segment of a chain of every rank (the chain
// broadcast's: the balanced call's one group), which the planner sets and
// the simulator searches around, as it does for every pipelined schedule.
type papBcastAlgo struct{ a arrivalBcast }

func init() {
	RegisterDynamic(papBcastAlgo{arrivalBcast{base{"papbcast", sched.Bcast}, false}})
}

// Tags of the broadcast's control words; its data's are pbData +
// segment (below maxChainSegments).
const (
	pbArrive int32 = maxChainSegments + 1 + iota // rank → root: arrived
	pbLine                                       // root → rank: predecessor and successor
)

// papWindow is how many segments a rank keeps in flight to or from one
// peer: enough to keep a link busy, few enough to stay within what a
// transport queues per peer (256 rendezvous sends over shared memory).
const papWindow = 8

func (b papBcastAlgo) Name() string                      { return b.a.Name() }
func (b papBcastAlgo) Collective() sched.Collective      { return b.a.Collective() }
func (b papBcastAlgo) Supports(p sched.Params) error     { return b.a.Supports(p) }
func (papBcastAlgo) TmpLen(p sched.Params, rank int) int { return 0 }

// Tune implements Tuner: Params.Segment, if 0, as the chain broadcast
// tunes it for p (the segment Run uses when it stays 0 is ChainSegment).
func (papBcastAlgo) Tune(p sched.Params, es int, m cost.Model) sched.Params {
	return chainBcast{}.Tune(p, es, m)
}

// PatternPrograms implements PatternAlgorithm: the programs for the
// groups the root would form under arrival times est (arrivalBcast's
// prediction), which the simulator runs.
func (b papBcastAlgo) PatternPrograms(p sched.Params, est []float64, msg MsgTime) []sched.Program {
	return b.a.PatternPrograms(p, est, msg)
}

// Trace implements sched.Dynamic (see papBcastAlgo).
func (b papBcastAlgo) Trace(p sched.Params, rank int, order []int) sched.Program {
	return b.a.program(p, traceGroups(p, order), rank)
}

// traceGroups returns the groups of papbcast's Trace for an order of
// arrival: the ranks before the root, in rank order, then every later
// rank alone, in order of arrival.
func traceGroups(p sched.Params, order []int) [][]int {
	i := slices.Index(order, p.Root)
	var groups [][]int
	if i > 0 {
		first := slices.Clone(order[:i])
		slices.Sort(first)
		groups = append(groups, first)
	}
	for _, q := range order[i+1:] {
		groups = append(groups, []int{q})
	}
	return groups
}

// lineWord packs a member's predecessor and successor (-1: none) into
// one word, each + 1 in 32 bits.
func lineWord(pred, succ int) uint64 { return uint64(pred+1) | uint64(succ+1)<<32 }

func fromLineWord(w uint64) (pred, succ int) {
	return int(w&0xffffffff) - 1, int(w>>32) - 1
}

// Run implements sched.Dynamic.
func (b papBcastAlgo) Run(p sched.Params, rank int, x sched.Exec) error {
	n, c, root := p.NRanks, p.Count, p.Root
	if rank == root {
		x.Copy(sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c})
	}
	if n == 1 || c == 0 {
		return nil
	}
	seg, nseg := chainSegments(c, p.Segment)
	part := func(buf sched.Buf, j int) sched.Chunk {
		off := j * seg
		return sched.Chunk{Buf: buf, Off: off, Len: min(seg, c-off)}
	}
	if rank == root {
		return b.serve(x, p, part, nseg)
	}
	x.SendWord(root, pbArrive, 0)
	h := x.RecvWord(root, pbLine)
	if err := x.Wait(h); err != nil {
		return err
	}
	pred, succ := fromLineWord(x.Word(h))
	recvs := make([]sched.Handle, nseg)
	var sends []sched.Handle
	posted := 0
	for ; posted < min(nseg, papWindow); posted++ {
		recvs[posted] = x.Recv(pred, pbData+int32(posted), part(sched.Out, posted))
	}
	for j := range nseg {
		if err := x.Wait(recvs[j]); err != nil {
			return err
		}
		if posted < nseg {
			recvs[posted] = x.Recv(pred, pbData+int32(posted), part(sched.Out, posted))
			posted++
		}
		if succ < 0 {
			continue
		}
		if j >= papWindow {
			if err := x.Wait(sends[j-papWindow]); err != nil {
				return err
			}
		}
		sends = append(sends, x.Send(succ, pbData+int32(j), part(sched.Out, j)))
	}
	for _, h := range sends[max(0, len(sends)-papWindow):] {
		if err := x.Wait(h); err != nil {
			return err
		}
	}
	return nil
}

// serve is the root's part: it serves the arrived ranks in groups until
// every rank is served.
func (b papBcastAlgo) serve(x sched.Exec, p sched.Params, part func(sched.Buf, int) sched.Chunk, nseg int) error {
	var waits []sched.Handle
	var who []int
	for q := range p.NRanks {
		if q != p.Root {
			waits = append(waits, x.RecvWord(q, pbArrive))
			who = append(who, q)
		}
	}
	// take moves every rank whose word is in to group.
	var group []int
	join := func(q int) error { group = append(group, q); return nil }
	take := func() (err error) {
		waits, who, err = takeArrived(x, waits, who, join)
		return err
	}
	for len(waits) > 0 {
		// Every rank whose word is in; if none, the next to come and any
		// that came with it.
		group = group[:0]
		if err := take(); err != nil {
			return err
		}
		if len(group) == 0 {
			i, err := x.WaitAny(waits)
			if err != nil {
				return err
			}
			group = append(group, who[i])
			waits, who = slices.Delete(waits, i, i+1), slices.Delete(who, i, i+1)
			if err := take(); err != nil {
				return err
			}
		}
		slices.Sort(group)
		for i, q := range group {
			pred, succ := p.Root, -1
			if i > 0 {
				pred = group[i-1]
			}
			if i+1 < len(group) {
				succ = group[i+1]
			}
			x.SendWord(q, pbLine, lineWord(pred, succ))
		}
		sends := make([]sched.Handle, 0, nseg)
		for j := range nseg {
			if j >= papWindow {
				if err := x.Wait(sends[j-papWindow]); err != nil {
					return err
				}
			}
			sends = append(sends, x.Send(group[0], pbData+int32(j), part(sched.In, j)))
		}
		for _, h := range sends[max(0, nseg-papWindow):] {
			if err := x.Wait(h); err != nil {
				return err
			}
		}
	}
	return nil
}
