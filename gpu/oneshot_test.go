package gpu

import (
	"testing"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// The algorithms whose allreduces the tests ask to run fused: the
// one-shot, and the direct reduce-scatter and allgather as a two-shot.
const (
	fusedAlgo    = "gpu_oneshot"
	fusedTwoShot = "direct"
)

// tcall is a call as the tests describe it: by algorithm name, or asked
// to fuse (fuse), which kindOf maps to the kernel the planner would name.
type tcall struct {
	*Call
	fuse bool
}

// kindOf returns the fused kernel k asks for, if any.
func (k *tcall) kindOf() (cuda.FusedKind, bool) {
	switch k.Params.Coll {
	case sched.Allreduce:
		switch k.Algo {
		case fusedAlgo:
			return cuda.FusedOneShot, true
		case fusedTwoShot:
			return cuda.FusedTwoShot, true
		}
	case sched.Bcast:
		return cuda.FusedBcast, k.fuse
	case sched.Allgather:
		return cuda.FusedAllgather, k.fuse
	case sched.ReduceScatter:
		return cuda.FusedReduceScatter, k.fuse
	}
	return 0, false
}

// fits reports whether k runs as a fused kernel (fused.shape).
func (f *fused) fits(k *tcall) bool {
	kind, ok := k.kindOf()
	if !ok {
		return false
	}
	_, ok = f.shape(kind, k.Params, k.DType, k.Op)
	return ok
}

// shot is the kernel call that would run k.
func (f *fused) shot(k *tcall, _ int) cuda.OneShot {
	kind, _ := k.kindOf()
	return f.kernel(kind, k.Params, k.DType, k.Op)
}

// TestFusedChoice checks, without a GPU, which calls run fused and with
// what grid and rounds: the kernel call that every rank must build alike.
func TestFusedChoice(t *testing.T) {
	const n = 4
	f := &fused{slotBytes: DefaultSlotBytes(n), regions: make([]cuda.DevicePtr, n), seq: 1, twoShot: true, other: true}
	call := func(coll sched.Collective, algo string, count int, fuse bool) *tcall {
		return &tcall{Call: &Call{Params: sched.Params{Coll: coll, NRanks: n, Count: count}, Algo: algo,
			DType: dtype.Float32, Op: dtype.Sum}, fuse: fuse}
	}
	for _, c := range []struct {
		name   string
		k      *tcall
		fits   bool
		blocks int
	}{
		{"one-shot in a slot", call(sched.Allreduce, fusedAlgo, 1<<10, false), true, 0},
		{"one-shot larger than a slot", call(sched.Allreduce, fusedAlgo, 4<<20, false), false, 0},
		{"two-shot, 4 MiB", call(sched.Allreduce, fusedTwoShot, 1<<20, false), true, cuda.DefaultFusedBlocks},
		{"two-shot, 1 GiB", call(sched.Allreduce, fusedTwoShot, 1<<28, false), true, BigBlocks},
		{"ring allreduce", call(sched.Allreduce, "ring", 1<<20, false), false, 0},
		{"broadcast, 32 MiB", call(sched.Bcast, "", 8<<20, true), true, cuda.DefaultFusedBlocks},
		{"broadcast, 256 MiB", call(sched.Bcast, "", 64<<20, true), true, BigBlocks},
		{"broadcast not asked to fuse", call(sched.Bcast, "chain", 1<<10, false), false, 0},
		{"allgather, 8 MiB blocks", call(sched.Allgather, "", 2<<20, true), true, cuda.DefaultFusedBlocks},
		{"allgather, 16 MiB blocks", call(sched.Allgather, "", 4<<20, true), true, 128},
		{"reduce-scatter, 16 MiB blocks", call(sched.ReduceScatter, "", 4<<20, true), true, BigBlocks},
		{"small reduce-scatter", call(sched.ReduceScatter, "", 3, true), true, 1},
	} {
		if got := f.fits(c.k); got != c.fits {
			t.Errorf("%s: fits %v, want %v", c.name, got, c.fits)
			continue
		}
		if !c.fits || c.blocks == 0 {
			continue
		}
		a := f.shot(c.k, 0)
		if a.Blocks != c.blocks {
			t.Errorf("%s: %d blocks, want %d", c.name, a.Blocks, c.blocks)
		}
		if a.Rounds() < 1 {
			t.Errorf("%s: %d rounds", c.name, a.Rounds())
		}
	}
	// 1 GiB two-shot on 4 ranks through 8 MiB slots and 256 blocks of 256
	// threads: areas of 32 KiB, 4096 float32 a phase, 2^20 of each
	// 2^26-element chunk a round: 64 rounds.
	if a := f.shot(call(sched.Allreduce, fusedTwoShot, 1<<28, false), 0); a.Rounds() != 64 || a.Threads != BigThreads || a.HostBytes != 0 {
		t.Errorf("1 GiB two-shot: %d rounds, %d threads, %d bytes through host; want 64, %d, 0", a.Rounds(), a.Threads, a.HostBytes, BigThreads)
	}

	// Broadcasts: the last full round in halves from 16 MiB to below 64
	// MiB (f.ramp -1: by size), or as set. 16 MiB through 8 MiB slots
	// and 64 blocks, in rounds of up to 12 MiB: 4 MiB, then the last
	// 12 MiB in two halves.
	f.ramp = -1
	for _, c := range []struct {
		bytes, ramp, rounds int
	}{{4 << 20, 0, 1}, {16 << 20, 1, 3}, {32 << 20, 1, 4}, {64 << 20, 0, 0}} {
		a := f.shot(call(sched.Bcast, "", c.bytes/4, true), 0)
		if a.Ramp != c.ramp || (c.rounds > 0 && a.Rounds() != c.rounds) {
			t.Errorf("%d-byte broadcast: ramp %d, %d rounds; want %d, %d", c.bytes, a.Ramp, a.Rounds(), c.ramp, c.rounds)
		}
	}
	f.ramp = 3
	if a := f.shot(call(sched.Bcast, "", 1<<10, true), 0); a.Ramp != 3 {
		t.Errorf("broadcast with ramp 3 set: ramp %d", a.Ramp)
	}
	f.ramp = 0

	if got, want := sharesBySize(cuda.FusedTwoShot), "from 16 MiB: 8 %, from 64 MiB: 11 %"; got != want {
		t.Errorf("two-shot shares by size: %q, want %q", got, want)
	}
	if got, want := sharesBySize(cuda.FusedReduceScatter), "none"; got != want {
		t.Errorf("reduce-scatter shares by size: %q, want %q", got, want)
	}

	// Multi-path: with a host region, the default shares by kind and size.
	mp := &fused{slotBytes: DefaultSlotBytes(n), regions: make([]cuda.DevicePtr, n), seq: 1, twoShot: true, other: true, host: 1 << 40}
	for _, c := range []struct {
		name  string
		k     *tcall
		share int
	}{
		{"two-shot, 1 GiB", call(sched.Allreduce, fusedTwoShot, 1<<28, false), 11},
		{"two-shot, 16 MiB", call(sched.Allreduce, fusedTwoShot, 4<<20, false), 8},
		{"two-shot, 4 MiB", call(sched.Allreduce, fusedTwoShot, 1<<20, false), 0},
		{"broadcast, 1 GiB", call(sched.Bcast, "", 1<<28, true), 11},
		{"broadcast, 64 MiB", call(sched.Bcast, "", 16<<20, true), 8},
		{"broadcast, 16 MiB", call(sched.Bcast, "", 4<<20, true), 0},
		{"reduce-scatter, 1 GiB", call(sched.ReduceScatter, "", 1<<28, true), 0},
	} {
		a := f.shot(c.k, 0)
		b := mp.shot(c.k, 0)
		if c.share == 0 {
			if b.Host != 0 || b.HostBytes != 0 || b.Rounds() != a.Rounds() {
				t.Errorf("%s: %d bytes a block through host, %d rounds; want none, %d", c.name, b.HostBytes, b.Rounds(), a.Rounds())
			}
			continue
		}
		// NVLink: half an area of every chunk (two-shot) or of each of
		// n - 1 parts (broadcast) a block and round.
		nv := DefaultSlotBytes(n) / b.Blocks / 2
		if c.k.Params.Coll == sched.Bcast {
			nv *= n - 1
		}
		// At most what the host region holds (cuda.HostFits).
		want := min(nv*c.share/(100-c.share), cuda.HostFits(b.Kind, b.Blocks, n)) &^ 15
		if b.Host != mp.host || b.HostBytes != want {
			t.Errorf("%s: %d bytes a block through host, want %d", c.name, b.HostBytes, want)
		}
		if b.Rounds() > a.Rounds() || (a.Rounds() > 8 && b.Rounds() >= a.Rounds()) {
			t.Errorf("%s: %d rounds with the host path, %d without", c.name, b.Rounds(), a.Rounds())
		}
	}

	// Pipelined kernels off: only the one-shot runs fused.
	off := &fused{slotBytes: 1 << 20, regions: make([]cuda.DevicePtr, n), seq: 1}
	if off.fits(call(sched.Allreduce, fusedTwoShot, 1<<10, false)) || off.fits(call(sched.Bcast, "", 1<<10, true)) {
		t.Error("pipelined kernels run although they are off")
	}
	if !off.fits(call(sched.Allreduce, fusedAlgo, 1<<10, false)) {
		t.Error("the one-shot kernel does not run in a slot it fits")
	}

	// Low-latency lines: vectors in whole 8-byte words between 8-byte
	// aligned buffers, up to llMax.
	ll := &fused{slotBytes: 1 << 20, regions: make([]cuda.DevicePtr, n), seq: 1, llMax: DefaultLLBytes(n)}
	for _, c := range []struct {
		name    string
		count   int
		in, out cuda.DevicePtr
		want    cuda.FusedKind
	}{
		{"two float32", 2, 256, 512, cuda.FusedOneShotLL},
		{"one float32", 1, 256, 512, cuda.FusedOneShot},
		// The size chooses, which every rank shares: a rank with an odd
		// address runs the same kernel, on aligned scratch (fused.staged).
		{"odd address", 2, 260, 512, cuda.FusedOneShotLL},
		{"at the limit", DefaultLLBytes(n) / 4, 256, 256, cuda.FusedOneShotLL},
		{"above the limit", DefaultLLBytes(n)/4 + 2, 256, 256, cuda.FusedOneShot},
	} {
		k := call(sched.Allreduce, fusedAlgo, c.count, false)
		k.In, k.Out = c.in, c.out
		if a := ll.shot(k, 0); a.Kind != c.want || a.Rounds() != 1 {
			t.Errorf("%s: kind %d in %d rounds, want kind %d in 1", c.name, a.Kind, a.Rounds(), c.want)
		}
	}
	// Above them, the two-shot in lines, up to its own limit.
	ll.ll2Max = cuda.TwoShotLLMax(n)
	for _, c := range []struct {
		count  int
		want   cuda.FusedKind
		blocks int
	}{
		{DefaultLLBytes(n)/4 + 2, cuda.FusedTwoShotLL, 9},
		{cuda.TwoShotLLMax(n) / 4, cuda.FusedTwoShotLL, 32},
		{cuda.TwoShotLLMax(n)/4 + 2, cuda.FusedOneShot, 64},
	} {
		k := call(sched.Allreduce, fusedAlgo, c.count, false)
		k.In, k.Out = 256, 256
		if a := ll.shot(k, 0); a.Kind != c.want || a.Rounds() != 1 || a.Grid() != c.blocks {
			t.Errorf("%d float32: kind %d in %d rounds on %d blocks, want kind %d in 1 on %d", c.count, a.Kind, a.Rounds(), a.Grid(), c.want, c.blocks)
		}
	}
	if DefaultLL2Bytes(2) != 0 || DefaultLL2Bytes(4) != cuda.TwoShotLLMax(4) {
		t.Errorf("DefaultLL2Bytes: %d on 2, %d on 4", DefaultLL2Bytes(2), DefaultLL2Bytes(4))
	}
	for _, c := range []struct{ n, want int }{{2, 256 << 10}, {3, 256 << 10}, {4, 128 << 10}, {8, 64 << 10}} {
		if got := DefaultLLBytes(c.n); got != c.want {
			t.Errorf("DefaultLLBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	if llMax(0, 2) != DefaultLLBytes(2) || llMax(4096, 2) != 4096 || llMax(-1, 2) != 0 || llMax(1<<30, 2) != cuda.OneShotLLMax {
		t.Errorf("llMax: %d, %d, %d, %d", llMax(0, 2), llMax(4096, 2), llMax(-1, 2), llMax(1<<30, 2))
	}

	// A grid forced by Options.Blocks, and a minimum of rounds.
	g := &fused{slotBytes: 1 << 20, regions: make([]cuda.DevicePtr, n), seq: 1, twoShot: true, other: true, blocks: 8, minRounds: 4}
	a := g.shot(call(sched.Allreduce, fusedTwoShot, 1<<16, false), 0)
	if a.Blocks != 8 {
		t.Errorf("forced grid: %d blocks, want 8", a.Blocks)
	}
	if r := a.Rounds(); r < 4 || a.Area < 1024 {
		t.Errorf("minimum of 4 rounds: %d rounds with areas of %d bytes", r, a.Area)
	}
	// Too small a vector for 4 rounds of 1 KiB areas: as many as they give.
	a = g.shot(call(sched.Allreduce, fusedTwoShot, 64, false), 0)
	if a.Area < 1024 || a.Rounds() != 1 {
		t.Errorf("small vector: %d rounds with areas of %d bytes, want 1 round", a.Rounds(), a.Area)
	}
}

// TestSeqLimit checks when a fused call resets the sequence: when one of
// its rounds would pass SeqLimit, whose flags 2·seq stay below 2^31.
func TestSeqLimit(t *testing.T) {
	if 2*uint64(SeqLimit) >= 1<<31 {
		t.Fatalf("SeqLimit %d: flags 2·seq reach 2^31", SeqLimit)
	}
	f := &fused{seq: SeqLimit - 2, seqLimit: SeqLimit}
	for _, c := range []struct {
		rounds uint32
		want   bool
	}{{1, false}, {3, false}, {4, true}, {1 << 20, true}} {
		if got := f.passes(c.rounds); got != c.want {
			t.Errorf("seq %d, %d rounds: reset %v, want %v", f.seq, c.rounds, got, c.want)
		}
	}
	f.seq = 1
	if f.passes(SeqLimit) || !f.passes(SeqLimit+1) {
		t.Errorf("from 1: SeqLimit rounds reset %v, SeqLimit+1 %v", f.passes(SeqLimit), f.passes(SeqLimit+1))
	}
}
