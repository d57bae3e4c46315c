package algo

import (
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// GPUOneShot is the one-shot allreduce for GPUs that all reach each other's
// memory directly (NVLink through NVSwitch, or peer-to-peer PCIe): every
// rank offers its whole input to every other rank, and each rank combines
// all n inputs itself, in rank order (in_0 op in_1 op … op in_{n−1}), so
// every rank gets the same bits. One round of messages whatever n is; each
// rank reads (n−1)·M bytes, so it suits small and medium vectors, where
// the latency of the rounds of a ring or of a reduce-scatter and allgather
// dominates.
//
// The sum is built in Tmp and copied to Out at the end: with In and Out
// aliased, Out may be written only once every peer has read In, and the
// copy is the one step that waits for that. An executor that reads peers'
// memory directly (package gpu) fuses the first copy with the first
// reduction into one kernel.
//
// It is not in the registry: a host transport would copy every input n−1
// times, which the CPU planner must not choose; the GPU path names it.
//
// Cost, for M bytes on n ranks over the slowest link (α, β):
//
//	T = α + (n−1)·M/β + (n−1)·M·γ
var GPUOneShot Algorithm = gpuOneShot{base{"gpu_oneshot", sched.Allreduce}}

type gpuOneShot struct{ base }

func (gpuOneShot) Program(p sched.Params, r int) sched.Program {
	g := newGen(p, r)
	n := p.NRanks
	in, out, acc := whole(sched.In, p.Count), whole(sched.Out, p.Count), whole(sched.Tmp, p.Count)
	if n == 1 {
		g.copy(in, out)
		return g.program()
	}
	for j := range n {
		if j != r {
			g.send(j, 0, in)
		}
	}
	if r == 0 {
		g.copy(in, acc)
	} else {
		g.recv(0, 0, acc)
	}
	for j := 1; j < n; j++ {
		if j == r {
			g.reduce(in, acc)
		} else {
			g.recvReduce(j, 0, acc)
		}
	}
	g.copy(acc, out)
	return g.program()
}

func (gpuOneShot) Cost(p sched.Params, es int, m cost.Model) float64 {
	if idle(p) {
		return 0
	}
	l := m.Flat(p)
	b := bytesOf(p.Count, es)
	return l.Alpha + float64(p.NRanks-1)*b/l.Beta + float64(p.NRanks-1)*b*m.Gamma
}
