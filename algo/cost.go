package algo

import (
	"math"
	"slices"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Coster is an algorithm with a closed-form cost in the α-β-γ model of
// package cost. The planner compares these figures to choose, and the
// simulator checks them.
type Coster interface {
	// Cost returns the predicted seconds of p, with es-byte elements,
	// under m: the time until the slowest rank finishes. Parameters p
	// leaves at 0 (Segment, Radix) count as the values Program would use.
	Cost(p sched.Params, es int, m cost.Model) float64
}

// Tuner is an algorithm with parameters (Params.Segment, Params.Radix).
type Tuner interface {
	// Tune returns p with the parameters that minimise Cost under m
	// filled in. Parameters p sets already (non-zero) are kept.
	Tune(p sched.Params, es int, m cost.Model) sched.Params
}

// Mover is an algorithm that states what its ranks move through memory,
// for the model's limits on a host's memory and a thread's
// (cost.Model.Memory, cost.Model.Core).
type Mover interface {
	// Moved returns the bytes that p's busiest rank, with es-byte
	// elements, moves through memory as cost.Model.Shared counts them:
	// what its Copy and Recv steps write, what its Reduce and RecvReduce
	// steps add (a RecvReduce also receives), and what its Send steps
	// copy into the transport's ring, for messages of at most m.Eager
	// bytes.
	Moved(p sched.Params, es int, m cost.Model) float64
}

// CostOf returns the predicted seconds of a on p with es-byte elements
// under m, as the planner compares them: a's Cost under m for the call
// (cost.Model.ForCall: reductions of data in cache at CacheGamma), plus
// the extra time of copying data another core has just written
// (writtenBytes at cost.Model.Written), raised for a Mover to
// the time its ranks' memory traffic takes when they share their host's
// memory, or on one thread each, plus its latencies (cost.Model.Bounded).
// It is NaN if a has no cost model.
func CostOf(a Algorithm, p sched.Params, es int, m cost.Model) float64 {
	k, ok := a.(Coster)
	if !ok {
		return math.NaN()
	}
	m = m.ForCall(p, es)
	t := k.Cost(p, es, m) + writtenBytes(a, p, es, m)*m.Written
	mv, ok := a.(Mover)
	if !ok || m.Memory <= 0 && m.Core <= 0 {
		return t
	}
	// One thread: the executor splits a step's large copies and
	// reductions across the rank's threads (package par), but not the
	// transport's receives, and Core was fitted to schedules run so.
	return m.Bounded(p.Layout, p.NRanks, t, k.Cost(p, es, m.Latencies()), mv.Moved(p, es, m), 1)
}

// eagerBytes returns the bytes, among count elements of es bytes cut into
// segments of seg elements (the last one shorter), of the segments of at
// most eager bytes: those the shared-memory transport copies through its
// ring (cost.Model.Eager).
func eagerBytes(count, seg, es int, eager float64) float64 {
	if count <= 0 || seg <= 0 {
		return 0
	}
	full, rest := count/seg, count%seg
	var b float64
	if bytesOf(seg, es) <= eager {
		b += float64(full) * bytesOf(seg, es)
	}
	if rest > 0 && bytesOf(rest, es) <= eager {
		b += bytesOf(rest, es)
	}
	return b
}

// writtenRanks is the most ranks whose programs writtenBytes reads. Every
// rank's program of every candidate made planning 17 times as slow at 16
// goroutine ranks (four plans: 4.4 ms against 0.26 on the 2-core VM) and
// 50 times at 64 (81 ms against 1.6); and the written copies moved no
// choice at 8 or 16 ranks in the 16-core node's grids (session 19), where
// the shared area runs the small and medium calls and the host's memory
// bounds the large ones.
const writtenRanks = 8

// writtenBytes returns the most bytes that one rank of p receives, over
// links whose copies its own thread makes (cost.Model.Serial), in messages
// whose bytes another core has just written (cost.Model.Written): eager
// ones, and larger ones sent from Out or Tmp, which hold what the call
// wrote, rather than from In. The receives of a rank are copied one after
// the other by its thread, so their extra times add up. It is 0 on
// several hosts, where the model does not price the hosts' shared-memory
// copies message by message, for trees packed over a topology's links
// (Params.Trees), which state their own rates, and where m has no Written
// figure. It reads every rank's program, as the simulator does, and so
// only up to writtenRanks ranks.
func writtenBytes(a Algorithm, p sched.Params, es int, m cost.Model) float64 {
	if m.Written <= 0 || p.NRanks < 2 || p.NRanks > writtenRanks || p.Count == 0 || p.Trees != nil || p.Layout != nil && p.Layout.NHosts() > 1 {
		return 0
	}
	w := make([]float64, p.NRanks)
	for r := range p.NRanks {
		prog := a.Program(p, r)
		for i := range prog.Steps {
			s := &prog.Steps[i]
			if s.Kind != sched.KindSend || !m.Serial(cost.ClassOf(p.Layout, r, s.Peer)) {
				continue
			}
			if b := bytesOf(s.Src.Len, es); b <= m.Eager || s.Src.Buf != sched.In {
				w[s.Peer] += b
			}
		}
	}
	return slices.Max(w)
}
