package plan

import (
	"fmt"

	"github.com/braid-ccl/braid/sched"
)

// Rules is a planner by fixed size thresholds, measured on this project's
// 2-core machine: latency-bound algorithms (recursive doubling, binomial
// trees) for small messages, bandwidth-bound ones (ring, Rabenseifner) for
// large messages. Default falls back to it for algorithms without a cost
// model.
type Rules struct{}

// Thresholds of the Rules planner, in bytes.
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
func (Rules) Plan(r Request, cand []Candidate) Decision {
	pick := func(reason string, names ...string) (Decision, bool) {
		for _, n := range names {
			for _, c := range cand {
				if c.Name == n {
					return Decision{Algo: n, Params: c.Params, Reason: reason, Source: FromRules, Fused: c.Fused}, true
				}
			}
		}
		return Decision{}, false
	}
	var d Decision
	var ok bool
	bytes := r.Bytes()
	size := fmt.Sprintf("%d B", bytes)
	switch r.Params.Coll {
	case sched.Allreduce:
		switch {
		case bytes <= SmallMessage:
			d, ok = pick(size+" ≤ 16 KiB: latency-bound, log2(n) rounds", "recdouble", "rabenseifner", "ring")
		case bytes < LargeMessage:
			d, ok = pick(size+" < 512 KiB: Rabenseifner halves the bytes each round in log2(n) rounds", "rabenseifner", "ring")
		case bytes < PipelineMessage:
			d, ok = pick(size+" < 2 MiB: bandwidth-bound, ring moves 2(n-1)/n of the buffer per rank", "ring", "rabenseifner")
		default:
			d, ok = pick(size+" ≥ 2 MiB: segmented ring, reduction of one segment overlaps the transfer of the next and stays in cache", "segring", "ring", "rabenseifner")
		}
	case sched.Allgather:
		switch total := bytes * int64(r.Params.NRanks); {
		case total <= SmallMessage:
			d, ok = pick(size+" per rank, small: log2(n) rounds", "recdouble", "ring")
		case total < PipelineMessage:
			d, ok = pick(size+" per rank: ring is bandwidth-optimal", "ring", "recdouble")
		default:
			d, ok = pick(size+" per rank, ≥ 2 MiB in all: segmented ring pipelines each block", "segring", "ring")
		}
	case sched.Bcast:
		if bytes >= ChainMessage && r.Params.NRanks > 2 {
			d, ok = pick(size+" ≥ 16 MiB on more than 2 ranks: pipelined chain, every link busy, T = (M/C + n − 2)(α + C/β)", "chain", "binomial")
		} else {
			d, ok = pick("binomial tree: log2(n) rounds", "binomial", "linear")
		}
	case sched.Reduce:
		d, ok = pick("binomial tree: log2(n) rounds", "binomial", "linear")
	case sched.ReduceScatter:
		if bytes*int64(r.Params.NRanks) >= PipelineMessage {
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
		return Decision{Algo: cand[0].Name, Params: cand[0].Params, Reason: "the only or first available algorithm", Source: FromRules, Fused: cand[0].Fused}
	}
	return d
}
