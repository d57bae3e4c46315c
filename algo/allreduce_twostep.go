package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

func init() { Register(twostepAllreduce{base{"twostep", sched.Allreduce}}) }

// twostepAllreduce is the shared-memory two-step allreduce of MVAPICH for
// small messages: every rank sends its vector to rank 0, which adds them in
// rank order (whatever order they arrive in), then sends the sum to every
// rank. Two rounds of messages, so two α, however many ranks; it suits
// small vectors on one host, where the leader's n−1 receives and sends are
// memory copies. Large vectors travel in segments as in "direct".
//
// Cost, for M bytes on n ranks of one host joined by (α, β), in s
// segments:
//
//	T = c + r + (s−1)·max(c, r) + α + (n−1)·M/β,   c = α + (n−1)·M/(sβ), r = (n−1)·M·γ/s
//
// (the leader takes in, adds and sends out (n−1)·M bytes; the messages to
// and from distinct peers go at once, through its port). On several hosts
// the transfer terms follow exchangeTime, as for "direct". This is hier's
// cost with one group and one chunk.
type twostepAllreduce struct{ base }

func (twostepAllreduce) Program(p sched.Params, r int) sched.Program {
	return rsagProgram(p, r, allRanks(p.NRanks), 1)
}

func (twostepAllreduce) Cost(p sched.Params, es int, m cost.Model) float64 {
	return rsagCost(p, es, m, allRanks(p.NRanks), 1)
}
