package plan

import (
	"fmt"
	"math"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// Fused is a decision to run a call on device buffers as one fused kernel
// (package gpu: every rank pushes into its peers' registered regions and
// raises flags there, from inside the kernel) rather than as a schedule.
// A Candidate that carries one competes with the schedules on its Cost;
// the Decision that chooses it carries it on, and the executor launches
// exactly this kernel.
type Fused struct {
	// Kind is the kernel: FusedOneShot, FusedOneShotLL, FusedTwoShotLL,
	// FusedTwoShot, FusedBcast, FusedAllgather, FusedReduceScatter,
	// FusedReduceScatterLL or FusedAllgatherLL.
	Kind    string
	Blocks  int // the grid
	Threads int // a block's threads
	Rounds  int // sequence numbers the call takes: 1, or the rounds of a pipelined kernel
	// HostBytes is what a block moves through pinned host memory a round,
	// beside NVLink (multi-path); 0 for none.
	HostBytes int
	// HostShare is HostBytes as a percentage of a round's bytes.
	HostShare int
	Area      int // a block's bytes of a slot a round; 0: the slot's share
	Ramp      int // a broadcast's halvings of its last round
}

// The kinds of fused kernel, as Fused.Kind names them.
const (
	FusedOneShot       = "oneshot"
	FusedOneShotLL     = "oneshot-ll"
	FusedTwoShotLL     = "twoshot-ll"
	FusedTwoShot       = "twoshot"
	FusedBcast         = "bcast"
	FusedAllgather     = "allgather"
	FusedReduceScatter = "reducescatter"
	// The reduce-scatter and the allgather of small blocks in
	// low-latency lines, as the one-shot's.
	FusedReduceScatterLL = "reducescatter-ll"
	FusedAllgatherLL     = "allgather-ll"
)

// String writes f for logs: "twoshot 256×256 in 5 rounds, 11 % through host".
func (f *Fused) String() string {
	s := fmt.Sprintf("%s %d×%d", f.Kind, f.Blocks, f.Threads)
	if f.Rounds > 1 {
		s += fmt.Sprintf(" in %d rounds", f.Rounds)
	}
	if f.HostBytes > 0 {
		s += fmt.Sprintf(", %d %% through host", f.HostShare)
	}
	if f.Ramp > 0 {
		s += fmt.Sprintf(", ramp %d", f.Ramp)
	}
	return s
}

// DeviceModel costs calls on device buffers: the fused kernels from their
// structure (what each rank pushes over NVLink, in how many phases, and a
// fixed cost per call that covers the launch, the flag exchanges and the
// waits), and schedules through Programs, the α-β-γ model of programs
// between GPUs (every message costs notices and interprocess events).
//
// The figures are a fit to measurements on H200s (docs/PERFORMANCE.md,
// docs/PERFORMANCE-HISTORY.md, and those quoted in package gpu and
// device.go), not a measurement of their own; DefaultDeviceModel says
// which points they reproduce and where they miss.
type DeviceModel struct {
	// The one-shot kernel: each rank pushes the vector to n−1 peers.
	OneShotAlpha float64    // seconds a call
	OneShotBeta  [2]float64 // bytes a second out of a GPU, on 2 GPUs and on more
	// Low-latency lines (one-shot and two-shot): 16 bytes carry 8, with
	// no separate flag.
	LLAlpha, LL2Alpha float64
	LLBeta            [2]float64 // line bytes a second out of a GPU, on 2 GPUs and on more
	// The two-shot allreduce: a reduce-scatter and an allgather through
	// the slots, 2(n−1)/n of the vector out of each GPU.
	TwoShotAlpha float64
	TwoShotBeta  float64
	// The pipelined broadcast, allgather and reduce-scatter.
	BcastAlpha, BcastBeta     float64 // the vector out of the root (2 GPUs), or in (n−1)/n parts (more)
	GatherAlpha, GatherBeta   float64 // (n−1) blocks into each GPU
	ScatterAlpha, ScatterBeta float64 // (n−1) blocks out of each GPU, reduced
	// HostGain is the bandwidth that the multi-path share through host
	// memory adds to the two-shot and the broadcast, as a fraction.
	HostGain float64
	// Programs is the model of schedules run as programs on device
	// buffers (gpu.Comm.Run: copy-engine pushes, reduction kernels,
	// notices and events between processes).
	Programs cost.Model
}

// DefaultDeviceModel returns the H200 fit:
//
//   - one-shot: 5.5 µs + (n−1)·bytes / (290 GB/s on 2 GPUs, 170 on
//     more). Measured against it: 2 GPUs 256 KiB 6.8 µs (model 6.4),
//     4 MiB 21.6 (19.9), 16 MiB 64.9 (63.4); 3 GPUs 1 MiB 17.2 (17.8);
//     4 GPUs 128 KiB 7.7 (7.8), 256 KiB 9.0 (10.1), 512 KiB 14.9 (14.8).
//   - lines: 3.5 µs + 2·(n−1)·bytes / (290 GB/s on 2, 250 on more): 2 GPUs
//     256 KiB 5.3 µs (5.3); 4 GPUs 128 KiB 6.9 (6.6), 256 KiB 9.5 (9.8).
//     The two-shot in lines (no figure of its own was recorded): 5 µs and
//     twice the one-shot's lines of 2(n−1)/n of the vector. The
//     reduce-scatter and allgather in lines: the one-shot's fit, with a
//     rank's block for the vector (each sends n−1 blocks, doubled).
//   - two-shot: 14 µs + 2(n−1)/n·bytes / 340 GB/s: 2 GPUs 16 MiB 63.5 µs
//     (63.3), 3 GPUs 1 MiB 18.8 (18.1), 4 GPUs 512 KiB 14.8 (16.3), 4 GPUs
//     1 GiB 343 GB/s busbw without the host path (339); the host path's 8–11 %
//     took it to 367–372 (HostGain 8 %: 366).
//   - broadcast: 15 µs + bytes / 340 GB/s (4 GPUs 1 GiB 342 GB/s, 64 MiB
//     320 GB/s against the model's 316; 2 GPUs 1 GiB 337);
//     allgather: 15 µs + (n−1)·block / 342 GB/s (4 GPUs 1 GiB: 342);
//     reduce-scatter: 15 µs + (n−1)·block / 320 GB/s (4 GPUs 64 MiB, 256 MiB,
//     1 GiB: 219, 297, 330 GB/s busbw; the model 292, 312, 318: it misses
//     64 MiB by a third, where the kernel's flag waits show; it still costs
//     the kernel below the ring program there, 172 µs against 262, as the
//     measurement ranks them).
//   - programs: α 25 µs a message ("tens of microseconds" of notices and
//     events), β 310 GB/s, γ 0.5 ps a byte, which gives the ring allreduce
//     on 4 GPUs at 1 GiB its measured 282 GB/s busbw. It misses the lone
//     copy-engine push of a broadcast on 2 GPUs (386 GB/s measured, 310 in
//     the model), which the device communicator covers by capping the fused
//     broadcast on 2 GPUs at 64 MiB where the host path is off
//     (braid.DefaultFusedMax), above which the push was measured to win;
//     with the host path on, the kernel wins there (407 GB/s at 1 GiB).
//
// The crossovers it gives between the one-shot and the two-shot (16 MiB
// on 2 GPUs, 1.03 MiB on 3, 627 KiB on 4) agree with the measured ones
// (the one-shot won at 4 MiB and lost by 2 % at 16 on 2, won at 1 MiB on
// 3, tied at 512 KiB on 4); the device communicator caps the one-shot at
// the measured limits (braid.DefaultOneShotMax: 8 MiB, 1 MiB, 512 KiB),
// beyond which nothing was measured.
func DefaultDeviceModel() DeviceModel {
	m := DeviceModel{
		OneShotAlpha: 5.5e-6, OneShotBeta: [2]float64{290e9, 170e9},
		LLAlpha: 3.5e-6, LL2Alpha: 5e-6, LLBeta: [2]float64{290e9, 250e9},
		TwoShotAlpha: 14e-6, TwoShotBeta: 340e9,
		BcastAlpha: 15e-6, BcastBeta: 340e9,
		GatherAlpha: 15e-6, GatherBeta: 342e9,
		ScatterAlpha: 15e-6, ScatterBeta: 320e9,
		HostGain: 0.08,
	}
	for c := range m.Programs.Links {
		m.Programs.Links[c] = cost.Link{Alpha: 25e-6, Beta: 310e9}
	}
	m.Programs.Gamma = 0.5e-12
	return m
}

// Cost returns the model's seconds for f running a call of p with
// elements of es bytes. Count is the vector (allreduce, bcast) or a rank's
// block (allgather, reduce-scatter), as sched.Params counts it.
func (m DeviceModel) Cost(f *Fused, p sched.Params, es int) float64 {
	n := float64(p.NRanks)
	b := float64(p.Count) * float64(es)
	more := 0
	if p.NRanks > 2 {
		more = 1
	}
	gain := 1.0
	if f.HostBytes > 0 {
		gain += m.HostGain
	}
	switch f.Kind {
	case FusedOneShot:
		return m.OneShotAlpha + (n-1)*b/m.OneShotBeta[more]
	case FusedOneShotLL:
		return m.LLAlpha + 2*(n-1)*b/m.LLBeta[more]
	case FusedTwoShotLL:
		return m.LL2Alpha + 2*2*(n-1)/n*b/m.LLBeta[more]
	case FusedReduceScatterLL, FusedAllgatherLL:
		return m.LLAlpha + 2*(n-1)*b/m.LLBeta[more]
	case FusedTwoShot:
		return m.TwoShotAlpha + 2*(n-1)/n*b/(m.TwoShotBeta*gain)
	case FusedBcast:
		return m.BcastAlpha + b/(m.BcastBeta*gain)
	case FusedAllgather:
		return m.GatherAlpha + (n-1)*b/m.GatherBeta
	case FusedReduceScatter:
		return m.ScatterAlpha + (n-1)*b/m.ScatterBeta
	}
	return 0
}

// PairBytes returns the bytes f moves from one rank to another (the most
// between any ordered pair) in a call of p with elements of es bytes:
// the vector for a one-shot allreduce (twice in low-latency lines, whose
// 16-byte stores carry 8), 2/n of it for a two-shot (a chunk to its
// owner, the result back), 1/(n−1) of it for a broadcast (a part from the
// root, then the parts among the others), a block for an allgather or a
// reduce-scatter; less the share that goes through host memory.
func (m DeviceModel) PairBytes(f *Fused, p sched.Params, es int) float64 {
	n := float64(p.NRanks)
	b := float64(p.Count) * float64(es)
	var pair float64
	switch f.Kind {
	case FusedOneShot:
		pair = b
	case FusedOneShotLL:
		pair = 2 * b
	case FusedTwoShotLL:
		pair = 2 * 2 * b / n
	case FusedReduceScatterLL, FusedAllgatherLL:
		pair = 2 * b
	case FusedTwoShot:
		pair = 2 * b / n
	case FusedBcast:
		pair = b / max(n-1, 1)
	case FusedAllgather, FusedReduceScatter:
		pair = b
	}
	if f.HostBytes > 0 {
		pair *= 1 - float64(f.HostShare)/100
	}
	return pair
}

// CostOn returns Cost where the narrowest route between two of the ranks
// moves pairBps bytes a second (the topology's, package topo): a fused
// kernel pushes to every peer at once, so its call takes at least its
// fixed cost (Cost of no elements) plus PairBytes over that route. The
// figures of the model are a fit to GPUs that an NVSwitch joins all to
// all, where no pair is narrower than a GPU's own links; on a DGX-1 the
// GPUs without an NVLink between them reach each other through PCIe
// switches and the CPUs' link, and that pair sets the pace (Blink, MLSys
// 2020, §2.1). A pairBps of 0 or +Inf means no bound: Cost.
func (m DeviceModel) CostOn(f *Fused, p sched.Params, es int, pairBps float64) float64 {
	c := m.Cost(f, p, es)
	if pairBps <= 0 || math.IsInf(pairBps, 1) {
		return c
	}
	p0 := p
	p0.Count = 0
	return max(c, m.Cost(f, p0, es)+m.PairBytes(f, p, es)/pairBps)
}

// ProgramsOn returns Programs with every link no faster than pairBps
// bytes a second, the narrowest route between two of the ranks: the link
// a flat schedule (a ring, a tree in rank order), which ignores the
// topology, is costed with, as cost.Model.Worst has it for hosts. A
// pairBps of 0 or +Inf leaves Programs as it is.
func (m DeviceModel) ProgramsOn(pairBps float64) cost.Model {
	pm := m.Programs
	if pairBps <= 0 || math.IsInf(pairBps, 1) {
		return pm
	}
	for c := range pm.Links {
		pm.Links[c].Beta = min(pm.Links[c].Beta, pairBps)
	}
	return pm
}
