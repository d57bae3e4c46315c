package algo

import (
	"math"

	"github.com/braid-ccl/braid/sched"
)

// The chain variant, papbcast, is a dynamic algorithm (papBcastAlgo) that
// runs this type's programs; the scatter variant is simulated only.
func init() { RegisterPattern(arrivalBcast{base{"papscatter", sched.Bcast}, true}) }

// arrivalBcast is one of the two arrival-pattern-aware broadcasts for
// large messages of Patarasuk and Yuan ("Efficient MPI Bcast across
// different process arrival patterns", IPDPS 2008). Every rank tells the
// root when it arrives (a one-word message); the root serves the ranks in
// groups as they come: whenever it is free, it takes every rank whose
// notice has reached it and that it has not served, in rank order, and
//
//   - papbcast: sends them the data as one pipelined chain (root → first →
//     second → …, in segments of Params.Segment elements, ChainSegment if
//     0), and is free once it has sent its last segment (one message
//     after another, each paying the route's latency);
//   - papscatter: scatters the data among them (the i-th of k gets block
//     i of k) and they complete it with a ring allgather among
//     themselves; the root is free once it has sent the last block.
//
// If no unserved rank has arrived, the root waits for the next notice.
// (Their chain variant sends to the lowest unserved rank instead,
// relying on MPI's eager protocol to leave the data at a rank that has
// not arrived; over rendezvous messages, as Braid sends large ones, that
// would make the root wait for that rank.) A rank waits only for the root
// and the ranks of its group, never for later ones.
//
// The groups depend on when the ranks arrive and on how long the root
// takes per group, so this is a PatternAlgorithm: the schedule for a known
// pattern, the root's time per group and the notices' latency from
// MsgTime (the network idle otherwise). Run for real (papbcast, on the
// executor: papBcastAlgo), the groups are what the root sees; the
// simulator leaves the notices out of the schedule, as it does papchain's
// control words.
type arrivalBcast struct {
	base
	scatter bool
}

// Tags: the data (and, in papbcast, + segment), the allgather's steps
// from pbAllgather on.
const (
	pbData      int32 = 0
	pbAllgather int32 = 1
)

func (a arrivalBcast) Supports(p sched.Params) error { return a.base.Supports(p) }

// PatternPrograms implements PatternAlgorithm.
func (a arrivalBcast) PatternPrograms(p sched.Params, est []float64, msg MsgTime) []sched.Program {
	groups := a.groups(p, est, msg)
	progs := make([]sched.Program, p.NRanks)
	for r := range progs {
		progs[r] = a.program(p, groups, r)
	}
	return progs
}

// groups returns the groups the root serves, in order, for the arrivals
// est.
func (a arrivalBcast) groups(p sched.Params, est []float64, msg MsgTime) [][]int {
	n, root, c := p.NRanks, p.Root, p.Count
	known := make([]float64, n) // when the root has rank r's notice
	for r := range n {
		if r != root {
			known[r] = est[r] + msg(r, root, 0)
		}
	}
	served := make([]bool, n)
	served[root] = true
	left := n - 1
	t := est[root]
	var groups [][]int
	for left > 0 {
		var g []int
		next := math.Inf(1)
		for r := range n {
			switch {
			case served[r]:
			case known[r] <= t:
				g = append(g, r)
			default:
				next = min(next, known[r])
			}
		}
		if len(g) == 0 {
			t = next
			continue
		}
		for _, r := range g {
			served[r] = true
		}
		left -= len(g)
		groups = append(groups, g)
		if a.scatter {
			for i, r := range g {
				t += msg(root, r, blockOff(c, len(g), i+1)-blockOff(c, len(g), i))
			}
		} else {
			// One message per segment, each paying the route's latency
			// (as the simulator's connections move them, one at a time).
			seg, nseg := chainSegments(c, p.Segment)
			for j := range nseg {
				t += msg(root, g[0], min(seg, c-j*seg))
			}
		}
	}
	return groups
}

// program returns rank r's program when the root serves groups in order.
func (a arrivalBcast) program(p sched.Params, groups [][]int, r int) sched.Program {
	c, root := p.Count, p.Root
	g := sched.NewBuilder(r)
	in, out := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}
	seg, nseg := chainSegments(c, p.Segment)
	part := func(buf sched.Buf, j int) sched.Chunk {
		off := j * seg
		return sched.Chunk{Buf: buf, Off: off, Len: min(seg, c-off)}
	}
	blk := func(buf sched.Buf, k, i int) sched.Chunk {
		i = mod(i, k)
		lo, hi := blockOff(c, k, i), blockOff(c, k, i+1)
		return sched.Chunk{Buf: buf, Off: lo, Len: hi - lo}
	}
	if r == root {
		// One group after another: each send waits for the one before,
		// as the root's blocking sends do.
		g.Copy(in, out)
		prev := sched.None
		for _, gr := range groups {
			if a.scatter {
				for i, q := range gr {
					prev = g.Send(q, pbData, blk(sched.In, len(gr), i), prev)
				}
				continue
			}
			for j := range nseg {
				prev = g.Send(gr[0], pbData+int32(j), part(sched.In, j), prev)
			}
		}
		return g.P
	}
	var gr []int
	pos := 0
	for _, x := range groups {
		for i, q := range x {
			if q == r {
				gr, pos = x, i
			}
		}
	}
	if a.scatter {
		k := len(gr)
		have := g.Recv(root, pbData, blk(sched.Out, k, pos))
		next, prev := gr[mod(pos+1, k)], gr[mod(pos-1, k)]
		for s := range k - 1 {
			t := pbAllgather + int32(s)
			g.Send(next, t, blk(sched.Out, k, pos-s), have)
			have = g.Recv(prev, t, blk(sched.Out, k, pos-s-1))
		}
		return g.P
	}
	from := root
	if pos > 0 {
		from = gr[pos-1]
	}
	to := -1
	if pos+1 < len(gr) {
		to = gr[pos+1]
	}
	// Keep two receives posted and forward each segment once it is in,
	// as the chain broadcast does.
	recvs := make([]int32, nseg)
	if nseg > 0 {
		recvs[0] = g.Recv(from, pbData, part(sched.Out, 0))
	}
	for j := range nseg {
		if j+1 < nseg {
			recvs[j+1] = g.Recv(from, pbData+int32(j+1), part(sched.Out, j+1))
		}
		if to >= 0 {
			g.Send(to, pbData+int32(j), part(sched.Out, j), recvs[j])
		}
	}
	return g.P
}
