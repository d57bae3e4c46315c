package plan

import (
	"fmt"
	"slices"

	"github.com/braid-ccl/braid/sched"
)

// Request describes a call to plan.
type Request struct {
	Coll   sched.Collective
	NRanks int
	NHosts int   // distinct hosts among the ranks
	Count  int   // elements, as sched.Params counts them
	Bytes  int64 // bytes of the call's buffer (Count × element size)
}

// Decision is a planner's choice.
type Decision struct {
	Algo   string // an algorithm name from the candidates
	Reason string // why, for BRAID_DEBUG=info
}

// Planner picks one of the candidate algorithms (those that support the
// call) for a request. It must return one of the candidates.
type Planner interface {
	Plan(r Request, candidates []string) Decision
}

// Default is Braid's built-in planner: latency-bound algorithms
// (recursive doubling, binomial trees) for small messages, bandwidth-bound
// ones (ring, Rabenseifner) for large messages.
type Default struct{}

// Thresholds of the Default planner, in bytes.
const (
	SmallMessage = 16 << 10
	LargeMessage = 512 << 10
	// PipelineMessage is where the segmented ring's overlap of
	// communication and reduction pays for its extra messages.
	PipelineMessage = 2 << 20
	// ChainMessage is where the pipelined chain broadcast beats the
	// binomial tree on this project's 2-core machine (measured at 64 MiB
	// on 3 and 4 ranks; at 4 MiB the tree was still faster).
	ChainMessage = 16 << 20
)

// Plan implements Planner.
func (Default) Plan(r Request, cand []string) Decision {
	pick := func(reason string, names ...string) (Decision, bool) {
		for _, n := range names {
			if slices.Contains(cand, n) {
				return Decision{Algo: n, Reason: reason}, true
			}
		}
		return Decision{}, false
	}
	var d Decision
	var ok bool
	size := fmt.Sprintf("%d B", r.Bytes)
	switch r.Coll {
	case sched.Allreduce:
		switch {
		case r.Bytes <= SmallMessage:
			d, ok = pick(size+" ≤ 16 KiB: latency-bound, log2(n) rounds", "recdouble", "rabenseifner", "ring")
		case r.Bytes < LargeMessage:
			d, ok = pick(size+" < 512 KiB: Rabenseifner halves the bytes each round in log2(n) rounds", "rabenseifner", "ring")
		case r.Bytes < PipelineMessage:
			d, ok = pick(size+" < 2 MiB: bandwidth-bound, ring moves 2(n-1)/n of the buffer per rank", "ring", "rabenseifner")
		default:
			d, ok = pick(size+" ≥ 2 MiB: segmented ring, reduction of one segment overlaps the transfer of the next and stays in cache", "segring", "ring", "rabenseifner")
		}
	case sched.Allgather:
		switch total := r.Bytes * int64(r.NRanks); {
		case total <= SmallMessage:
			d, ok = pick(size+" per rank, small: log2(n) rounds", "recdouble", "ring")
		case total < PipelineMessage:
			d, ok = pick(size+" per rank: ring is bandwidth-optimal", "ring", "recdouble")
		default:
			d, ok = pick(size+" per rank, ≥ 2 MiB in all: segmented ring pipelines each block", "segring", "ring")
		}
	case sched.Bcast:
		if r.Bytes >= ChainMessage && r.NRanks > 2 {
			d, ok = pick(size+" ≥ 16 MiB on more than 2 ranks: pipelined chain, every link busy, T = (M/C + n − 2)(α + C/β)", "chain", "binomial")
		} else {
			d, ok = pick("binomial tree: log2(n) rounds", "binomial", "linear")
		}
	case sched.Reduce:
		d, ok = pick("binomial tree: log2(n) rounds", "binomial", "linear")
	case sched.ReduceScatter:
		if r.Bytes*int64(r.NRanks) >= PipelineMessage {
			d, ok = pick(size+" per rank, ≥ 2 MiB in all: segmented ring pipelines each block", "segring", "ring")
		} else {
			d, ok = pick("ring: bandwidth-optimal", "ring")
		}
	case sched.Alltoall:
		d, ok = pick("pairwise exchange: n-1 rounds, one peer each", "pairwise")
	case sched.Barrier:
		d, ok = pick("dissemination: ceil(log2 n) rounds", "dissemination")
	}
	if !ok {
		if len(cand) == 0 {
			return Decision{}
		}
		return Decision{Algo: cand[0], Reason: "the only or first available algorithm"}
	}
	return d
}
