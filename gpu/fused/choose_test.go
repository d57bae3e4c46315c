package fused

import (
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// call is a float32 sum of count elements (a block, for allgather and
// reduce-scatter) on n ranks.
func call(coll sched.Collective, n, count int) sched.Params {
	return sched.Params{Coll: coll, NRanks: n, Count: count}
}

// shape is c.Shape for a float32 sum.
func (c *Config) shape(kind Kind, p sched.Params) (Kernel, bool) {
	return c.Shape(kind, p, dtype.Float32, dtype.Sum)
}

// TestChoice checks, without a GPU, which calls run fused and with what
// grid and rounds: the kernel call that every rank must build alike.
func TestChoice(t *testing.T) {
	const n = 4
	all := func() Config {
		c := NewConfig(n, Settings{TwoShot: true, Other: true})
		c.LLMax, c.LL2Max = 0, 0
		return c
	}
	f := all()
	for _, c := range []struct {
		name   string
		kind   Kind
		p      sched.Params
		fits   bool
		blocks int
	}{
		{"one-shot in a slot", OneShot, call(sched.Allreduce, n, 1<<10), true, 0},
		{"one-shot larger than a slot", OneShot, call(sched.Allreduce, n, 4<<20), false, 0},
		{"two-shot, 4 MiB", TwoShot, call(sched.Allreduce, n, 1<<20), true, DefaultBlocks},
		{"two-shot, 1 GiB", TwoShot, call(sched.Allreduce, n, 1<<28), true, BigBlocks},
		{"broadcast, 32 MiB", Bcast, call(sched.Bcast, n, 8<<20), true, DefaultBlocks},
		{"broadcast, 256 MiB", Bcast, call(sched.Bcast, n, 64<<20), true, BigBlocks},
		{"allgather, 8 MiB blocks", Allgather, call(sched.Allgather, n, 2<<20), true, DefaultBlocks},
		{"allgather, 16 MiB blocks", Allgather, call(sched.Allgather, n, 4<<20), true, 128},
		{"reduce-scatter, 16 MiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 4<<20), true, BigBlocks},
		{"small reduce-scatter", ReduceScatter, call(sched.ReduceScatter, n, 3), true, 1},
		{"a call for other ranks", TwoShot, call(sched.Allreduce, n+1, 1<<10), false, 0},
	} {
		a, ok := f.shape(c.kind, c.p)
		if ok != c.fits {
			t.Errorf("%s: fits %v, want %v", c.name, ok, c.fits)
			continue
		}
		if !c.fits || c.blocks == 0 {
			continue
		}
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
	if a, _ := f.shape(TwoShot, call(sched.Allreduce, n, 1<<28)); a.Rounds() != 64 || a.Threads != BigThreads || a.HostBytes != 0 {
		t.Errorf("1 GiB two-shot: %d rounds, %d threads, %d bytes through host; want 64, %d, 0", a.Rounds(), a.Threads, a.HostBytes, BigThreads)
	}

	// A reduce-scatter on more than 2 ranks runs in half areas (rsArea):
	// 16 MiB blocks on 4 ranks through 8 MiB slots and 256 blocks, areas
	// of 16 KiB, 4 MiB a round: 4 rounds. On 2 ranks the whole share of
	// a 16 MiB slot: one round.
	if a, _ := f.shape(ReduceScatter, call(sched.ReduceScatter, n, 4<<20)); a.Rounds() != 4 || a.Area != 16<<10 {
		t.Errorf("4-rank reduce-scatter of 16 MiB blocks: %d rounds, areas of %d bytes; want 4, %d", a.Rounds(), a.Area, 16<<10)
	}
	two := NewConfig(2, Settings{Other: true})
	if a, _ := two.Shape(ReduceScatter, call(sched.ReduceScatter, 2, 4<<20), dtype.Float32, dtype.Sum); a.Area != 0 || a.Rounds() != 1 {
		t.Errorf("2-rank reduce-scatter of 16 MiB blocks: %d rounds, areas of %d bytes; want 1, the whole share", a.Rounds(), a.Area)
	}

	// Broadcasts: the last full round in halves from 16 MiB to below 64
	// MiB (Ramp -1: by size), or as set. 16 MiB through 8 MiB slots and
	// 64 blocks, in rounds of up to 12 MiB: 4 MiB, then the last 12 MiB
	// in two halves.
	if f.Ramp != -1 {
		t.Fatalf("BcastRamp 0 resolves to ramp %d, want -1 (by size)", f.Ramp)
	}
	for _, c := range []struct {
		bytes, ramp, rounds int
	}{{4 << 20, 0, 1}, {16 << 20, 1, 3}, {32 << 20, 1, 4}, {64 << 20, 0, 0}} {
		a, _ := f.shape(Bcast, call(sched.Bcast, n, c.bytes/4))
		if a.Ramp != c.ramp || (c.rounds > 0 && a.Rounds() != c.rounds) {
			t.Errorf("%d-byte broadcast: ramp %d, %d rounds; want %d, %d", c.bytes, a.Ramp, a.Rounds(), c.ramp, c.rounds)
		}
	}
	for _, c := range []struct{ set, ramp int }{{3, 3}, {-1, 0}, {9, MaxRamp}} {
		g := NewConfig(n, Settings{Other: true, BcastRamp: c.set})
		if a, _ := g.shape(Bcast, call(sched.Bcast, n, 1<<10)); a.Ramp != c.ramp {
			t.Errorf("broadcast with BcastRamp %d: ramp %d, want %d", c.set, a.Ramp, c.ramp)
		}
	}

	if got, want := sharesBySize(TwoShot), "from 16 MiB: 8 %, from 64 MiB: 11 %"; got != want {
		t.Errorf("two-shot shares by size: %q, want %q", got, want)
	}
	if got, want := sharesBySize(ReduceScatter), "from 256 MiB: 8 %"; got != want {
		t.Errorf("reduce-scatter shares by size: %q, want %q", got, want)
	}

	// Multi-path: with a host region, the default shares by kind and size.
	mp := all()
	mp.Host = 1 << 40
	for _, c := range []struct {
		name  string
		kind  Kind
		p     sched.Params
		share int
	}{
		{"two-shot, 1 GiB", TwoShot, call(sched.Allreduce, n, 1<<28), 11},
		{"two-shot, 16 MiB", TwoShot, call(sched.Allreduce, n, 4<<20), 8},
		{"two-shot, 4 MiB", TwoShot, call(sched.Allreduce, n, 1<<20), 0},
		{"broadcast, 1 GiB", Bcast, call(sched.Bcast, n, 1<<28), 11},
		{"broadcast, 64 MiB", Bcast, call(sched.Bcast, n, 16<<20), 8},
		{"broadcast, 16 MiB", Bcast, call(sched.Bcast, n, 4<<20), 0},
		{"reduce-scatter, 1 GiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 1<<28), 8},
		{"reduce-scatter, 256 MiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 1<<26), 8},
		{"reduce-scatter, 64 MiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 1<<24), 0},
		{"allgather, 256 MiB blocks", Allgather, call(sched.Allgather, n, 1<<26), 0},
	} {
		a, _ := f.shape(c.kind, c.p)
		b, _ := mp.shape(c.kind, c.p)
		checkShare(t, c.name, &mp, a, b, c.share)
	}

	// Pipelined kernels off: only the one-shot runs fused.
	off := NewConfig(n, Settings{SlotBytes: 1 << 20})
	if _, ok := off.shape(TwoShot, call(sched.Allreduce, n, 1<<10)); ok {
		t.Error("the two-shot kernel runs although it is off")
	}
	if _, ok := off.shape(Bcast, call(sched.Bcast, n, 1<<10)); ok {
		t.Error("the broadcast kernel runs although it is off")
	}
	if _, ok := off.shape(OneShot, call(sched.Allreduce, n, 1<<10)); !ok {
		t.Error("the one-shot kernel does not run in a slot it fits")
	}

	// Low-latency lines: vectors in whole 8-byte words, up to LLMax; the
	// size chooses, which every rank shares (a rank with an odd address
	// runs the same kernel, on aligned scratch: package gpu).
	ll := NewConfig(n, Settings{SlotBytes: 1 << 20, LL2Bytes: -1})
	if ll.LLMax != DefaultLLBytes(n) || ll.LL2Max != 0 {
		t.Fatalf("LLBytes 0, LL2Bytes -1: LLMax %d, LL2Max %d; want %d, 0", ll.LLMax, ll.LL2Max, DefaultLLBytes(n))
	}
	for _, c := range []struct {
		name  string
		count int
		want  Kind
	}{
		{"two float32", 2, OneShotLL},
		{"one float32", 1, OneShot},
		{"at the limit", DefaultLLBytes(n) / 4, OneShotLL},
		{"above the limit", DefaultLLBytes(n)/4 + 2, OneShot},
	} {
		if a, _ := ll.shape(OneShot, call(sched.Allreduce, n, c.count)); a.Kind != c.want || a.Rounds() != 1 {
			t.Errorf("%s: kind %v in %d rounds, want kind %v in 1", c.name, a.Kind, a.Rounds(), c.want)
		}
	}
	// Above them, the two-shot in lines, up to its own limit.
	ll.LL2Max = TwoShotLLMax(n)
	for _, c := range []struct {
		count  int
		want   Kind
		blocks int
	}{
		{DefaultLLBytes(n)/4 + 2, TwoShotLL, 9},
		{TwoShotLLMax(n) / 4, TwoShotLL, 32},
		{TwoShotLLMax(n)/4 + 2, OneShot, 64},
	} {
		if a, _ := ll.shape(OneShot, call(sched.Allreduce, n, c.count)); a.Kind != c.want || a.Rounds() != 1 || a.Grid() != c.blocks {
			t.Errorf("%d float32: kind %v in %d rounds on %d blocks, want kind %v in 1 on %d", c.count, a.Kind, a.Rounds(), a.Grid(), c.want, c.blocks)
		}
	}
	if DefaultLL2Bytes(2) != 0 || DefaultLL2Bytes(4) != TwoShotLLMax(4) {
		t.Errorf("DefaultLL2Bytes: %d on 2, %d on 4", DefaultLL2Bytes(2), DefaultLL2Bytes(4))
	}
	for _, c := range []struct{ n, want int }{{2, 256 << 10}, {3, 256 << 10}, {4, 128 << 10}, {8, 64 << 10}} {
		if got := DefaultLLBytes(c.n); got != c.want {
			t.Errorf("DefaultLLBytes(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	if llMax(0, 2) != DefaultLLBytes(2) || llMax(4096, 2) != 4096 || llMax(-1, 2) != 0 || llMax(1<<30, 2) != LLMax {
		t.Errorf("llMax: %d, %d, %d, %d", llMax(0, 2), llMax(4096, 2), llMax(-1, 2), llMax(1<<30, 2))
	}

	// A grid forced by Settings.Blocks, and a minimum of rounds.
	g := NewConfig(n, Settings{SlotBytes: 1 << 20, TwoShot: true, Other: true, Blocks: 8, MinRounds: 4})
	a, _ := g.shape(TwoShot, call(sched.Allreduce, n, 1<<16))
	if a.Blocks != 8 {
		t.Errorf("forced grid: %d blocks, want 8", a.Blocks)
	}
	if r := a.Rounds(); r < 4 || a.Area < 1024 {
		t.Errorf("minimum of 4 rounds: %d rounds with areas of %d bytes", r, a.Area)
	}
	// Too small a vector for 4 rounds of 1 KiB areas: as many as they give.
	a, _ = g.shape(TwoShot, call(sched.Allreduce, n, 64))
	if a.Area < 1024 || a.Rounds() != 1 {
		t.Errorf("small vector: %d rounds with areas of %d bytes, want 1 round", a.Rounds(), a.Area)
	}
}

// checkShare checks b, a kernel shaped with the host region, against a,
// the same call without it: share percent of what a block sends a round
// through host (none where share is 0), and no more rounds.
func checkShare(t *testing.T, name string, mp *Config, a, b Kernel, share int) {
	t.Helper()
	n := len(mp.Regions)
	if share == 0 {
		if b.Host != 0 || b.HostBytes != 0 || b.Rounds() != a.Rounds() {
			t.Errorf("%s: %d bytes a block through host, %d rounds; want none, %d", name, b.HostBytes, b.Rounds(), a.Rounds())
		}
		return
	}
	// NVLink: half an area of every chunk (two-shot), of each of n - 1
	// parts (broadcast) or of every block (the reduce-scatter's half
	// areas, rsArea), or an area (allgather), a block and round.
	nv := mp.SlotBytes / b.Blocks / 2
	switch {
	case b.Kind == Bcast && n == 2:
		nv = mp.SlotBytes / b.Blocks
	case b.Kind == Bcast:
		nv *= n - 1
	case b.Kind == Allgather:
		nv = mp.SlotBytes / b.Blocks
	}
	// At most what the host region holds (HostFits).
	want := min(nv*share/(100-share), HostFits(b.Kind, b.Blocks, n)) &^ 15
	if b.Host != mp.Host || b.HostBytes != want {
		t.Errorf("%s: %d bytes a block through host, want %d", name, b.HostBytes, want)
	}
	if got := mp.HostShareOf(&b); got != share {
		t.Errorf("%s: HostShareOf %d, want %d", name, got, share)
	}
	if b.Rounds() > a.Rounds() || (a.Rounds() > 8 && b.Rounds() >= a.Rounds()) {
		t.Errorf("%s: %d rounds with the host path, %d without", name, b.Rounds(), a.Rounds())
	}
}

// table is a multi-path table as HostShares: the share by size range.
type table []struct {
	lo, hi int // [lo, hi), hi 0: no bound
	share  float64
}

func (t table) Lookup(size int) (float64, int) {
	for _, e := range t {
		if size >= e.lo && (e.hi == 0 || size < e.hi) {
			return e.share, 8
		}
	}
	return 0, 1
}

// TestMultiPathShares checks that a multi-path table, where set, gives
// the host share of the kernels with the host path by the call's size, in
// place of DefaultHostShare; that HostShare, where set, wins over it; and
// that kernels without the host path, or communicators without the
// region, stay as they were.
func TestMultiPathShares(t *testing.T) {
	const n = 4
	plain := NewConfig(n, Settings{TwoShot: true, Other: true})
	tab := table{{0, 16 << 20, 0}, {16 << 20, 256 << 20, 0.05}, {256 << 20, 0, 0.3}}
	mp := NewConfig(n, Settings{TwoShot: true, Other: true, MultiPath: tab})
	mp.Host = 1 << 40
	for _, c := range []struct {
		name  string
		kind  Kind
		p     sched.Params
		share int
	}{
		// 1 GiB: 0.3 of the table (DefaultHostShare would say 11).
		{"two-shot, 1 GiB", TwoShot, call(sched.Allreduce, n, 1<<28), 30},
		// 64 MiB: 0.05 (the default: 11).
		{"two-shot, 64 MiB", TwoShot, call(sched.Allreduce, n, 16<<20), 5},
		// 8 MiB: direct in the table.
		{"two-shot, 8 MiB", TwoShot, call(sched.Allreduce, n, 2<<20), 0},
		{"broadcast, 1 GiB", Bcast, call(sched.Bcast, n, 1<<28), 30},
		{"broadcast, 32 MiB", Bcast, call(sched.Bcast, n, 8<<20), 5},
		{"reduce-scatter, 1 GiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 1<<28), 30},
		{"allgather, 256 MiB blocks", Allgather, call(sched.Allgather, n, 1<<26), 30},
		{"allgather, 8 MiB blocks", Allgather, call(sched.Allgather, n, 2<<20), 0},
		// 8 MiB blocks: direct in the table.
		{"reduce-scatter, 8 MiB blocks", ReduceScatter, call(sched.ReduceScatter, n, 2<<20), 0},
	} {
		a, _ := plain.shape(c.kind, c.p)
		b, ok := mp.shape(c.kind, c.p)
		if !ok {
			t.Fatalf("%s: no kernel", c.name)
		}
		checkShare(t, c.name, &mp, a, b, c.share)
	}
	// A share above 50 % is held at 50.
	half := mp
	half.MultiPath = table{{0, 0, 0.9}}
	if got := half.shareFor(TwoShot, 1<<30); got != 50 {
		t.Errorf("a table's share of 0.9: %d %%, want 50", got)
	}
	// HostShare wins over the table.
	set := mp
	set.HostShare = 8
	b, _ := set.shape(TwoShot, call(sched.Allreduce, n, 1<<28))
	a, _ := plain.shape(TwoShot, call(sched.Allreduce, n, 1<<28))
	checkShare(t, "two-shot, 1 GiB, HostShare 8", &set, a, b, 8)
	// No host path: none, whatever the table says.
	never := mp
	never.HostShare = -1
	if b, _ := never.shape(TwoShot, call(sched.Allreduce, n, 1<<28)); b.HostBytes != 0 {
		t.Errorf("HostShare -1 with a table: %d bytes through host", b.HostBytes)
	}
	noRegion := NewConfig(n, Settings{TwoShot: true, MultiPath: tab})
	if b, _ := noRegion.shape(TwoShot, call(sched.Allreduce, n, 1<<28)); b.HostBytes != 0 {
		t.Errorf("no host region, a table: %d bytes through host", b.HostBytes)
	}
	two := NewConfig(2, Settings{TwoShot: true, Other: true, MultiPath: tab})
	two.Host = 1 << 40
	if b, _ := two.shape(TwoShot, call(sched.Allreduce, 2, 1<<28)); b.HostBytes != 0 {
		t.Errorf("2 GPUs, a table: %d bytes through host", b.HostBytes)
	}
	// On 2 GPUs a broadcast takes the host path (the table's share, else
	// HostShare, else DefaultHostShare's), an allreduce not.
	twoPlain := NewConfig(2, Settings{TwoShot: true, Other: true})
	a2, _ := twoPlain.shape(Bcast, call(sched.Bcast, 2, 1<<28))
	if b2, ok := two.shape(Bcast, call(sched.Bcast, 2, 1<<28)); !ok {
		t.Fatal("2 GPUs, a 1 GiB broadcast: no kernel")
	} else {
		checkShare(t, "2 GPUs, broadcast, 1 GiB, a table", &two, a2, b2, 30)
	}
	twoSet := two
	twoSet.MultiPath, twoSet.HostShare = nil, 8
	b2, _ := twoSet.shape(Bcast, call(sched.Bcast, 2, 1<<28))
	checkShare(t, "2 GPUs, broadcast, 1 GiB, HostShare 8", &twoSet, a2, b2, 8)
	twoDefault := twoSet
	twoDefault.HostShare = 0
	b2, _ = twoDefault.shape(Bcast, call(sched.Bcast, 2, 1<<28))
	checkShare(t, "2 GPUs, broadcast, 1 GiB, the default", &twoDefault, a2, b2, DefaultHostShare(Bcast, 1<<30))
	if b, _ := twoDefault.shape(Bcast, call(sched.Bcast, 2, 1<<18)); b.HostBytes != 0 {
		t.Errorf("2 GPUs, broadcast, 1 MiB, the default: %d bytes through host", b.HostBytes)
	}
	if b, _ := twoSet.shape(TwoShot, call(sched.Allreduce, 2, 1<<28)); b.HostBytes != 0 {
		t.Errorf("2 GPUs, two-shot, HostShare 8: %d bytes through host", b.HostBytes)
	}
	if got, want := twoDefault.HostPath(""), "by size (broadcasts from 64 MiB: 8 %, from 256 MiB: 11 %; on 2 GPUs nothing else)"; got != want {
		t.Errorf("HostPath on 2 GPUs: %q, want %q", got, want)
	}
	if got := mp.HostPath("mp.txt"); got != "by size, as the multi-path table mp.txt says" {
		t.Errorf("HostPath with a table: %q", got)
	}
	if got := plain.HostPath(""); got != "off" {
		t.Errorf("HostPath without the region: %q", got)
	}
	var none *Config
	if _, ok := none.Shape(OneShot, call(sched.Allreduce, n, 1), dtype.Float32, dtype.Sum); ok || none.HostShareOf(&Kernel{HostBytes: 16}) != 0 {
		t.Error("a nil Config shapes a kernel")
	}
}

// TestReduceScatterStride checks the aligned stride of a reduce-scatter
// (3 GPUs, 64 MiB of float32: blocks of 22369620 bytes, 4 past a 16-byte
// word): set from StrideMin where a block is not whole 16-byte words, to
// the next word, the kernel given it and its rounds counted over it; not
// set below StrideMin or for aligned blocks; refused by the launch's
// check where it is not in whole words or below the count.
func TestReduceScatterStride(t *testing.T) {
	c := NewConfig(3, Settings{Other: true})
	for _, k := range []struct {
		count, es, stride int
	}{
		{(64 << 20) / 3 / 4, 4, (64<<20)/3/4 + 3}, // 5592405 float32: 5592408
		{StrideMin/2 + 1, 2, StrideMin/2 + 8},
		{StrideMin/8 + 1, 8, StrideMin/8 + 2},
		{StrideMin/4 + 4, 4, 0},            // whole words
		{StrideMin/4 - 1, 4, 0},            // below StrideMin
		{StrideMin + 1, 1, StrideMin + 16}, // bytes
	} {
		dt := map[int]dtype.DType{1: dtype.Uint8, 2: dtype.Float16, 4: dtype.Float32, 8: dtype.Float64}[k.es]
		a, ok := c.Shape(ReduceScatter, sched.Params{Coll: sched.ReduceScatter, NRanks: 3, Count: k.count}, dt, dtype.Sum)
		if !ok {
			t.Fatalf("%d × %d B: no kernel", k.count, k.es)
		}
		if a.Stride != k.stride {
			t.Errorf("%d × %d B: stride %d, want %d", k.count, k.es, a.Stride, k.stride)
		}
		if k.stride == 0 {
			continue
		}
		if k.stride*k.es%16 != 0 {
			t.Errorf("%d × %d B: stride %d is not whole 16-byte words", k.count, k.es, k.stride)
		}
		_, args := a.args(new(argSet))
		if n := args.(*hostVecArgs).N; n != uint64(k.stride) {
			t.Errorf("%d × %d B: the kernel's n is %d, want the stride %d", k.count, k.es, n, k.stride)
		}
		b := a
		b.Stride = 0
		if a.Rounds() < b.Rounds() {
			t.Errorf("%d × %d B: %d rounds at the stride, %d without", k.count, k.es, a.Rounds(), b.Rounds())
		}
		a.Rank, a.Seqs, a.Status = 0, 0x3000, 0x4000
		if err := a.check(); err != nil {
			t.Errorf("%d × %d B: %v", k.count, k.es, err)
		}
		for _, bad := range []int{k.count - 1, k.stride + 1} {
			a.Stride = bad
			if err := a.check(); err == nil || !strings.Contains(err.Error(), "stride") {
				t.Errorf("%d × %d B, stride %d: check %v", k.count, k.es, bad, err)
			}
		}
	}
	// Another kind with a stride.
	b := Kernel{Kind: Allgather, DType: dtype.Float32, Count: 5, Stride: 8, Regions: make([]cuda.DevicePtr, 2), SlotBytes: 4096}
	if err := b.check(); err == nil {
		t.Error("an allgather with a stride passes the check")
	}
}

// TestChoiceLines checks which reduce-scatters and allgathers run in
// low-latency lines: blocks in whole 8-byte words up to LLMax (by default
// DefaultLLBytes(n), the one-shot's limit), from the size alone, with a
// thread per word, one round and no stride; none where LLMax is negative.
func TestChoiceLines(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		c := NewConfig(n, Settings{TwoShot: true, Other: true})
		if c.LLMax != DefaultLLBytes(n) {
			t.Fatalf("n=%d: LLMax %d, want DefaultLLBytes %d", n, c.LLMax, DefaultLLBytes(n))
		}
		for _, k := range []struct {
			kind, lines Kind
			coll        sched.Collective
		}{{ReduceScatter, ReduceScatterLL, sched.ReduceScatter}, {Allgather, AllgatherLL, sched.Allgather}} {
			for _, x := range []struct {
				bytes int // a block, of float32
				lines bool
			}{{8, true}, {4000, true}, {DefaultLLBytes(n), true}, {4, false}, {12, false}, {2 * DefaultLLBytes(n), false}} {
				a, ok := c.shape(k.kind, call(k.coll, n, x.bytes/4))
				if !ok {
					t.Fatalf("n=%d %v of %d-byte blocks: does not fit", n, k.kind, x.bytes)
				}
				if got := a.Kind == k.lines; got != x.lines {
					t.Errorf("n=%d %v of %d-byte blocks: runs as %v, want lines %v", n, k.kind, x.bytes, a.Kind, x.lines)
				}
				if x.lines && (a.Rounds() != 1 || a.Stride != 0 || a.Grid() != Blocks(x.bytes)) {
					t.Errorf("n=%d %v of %d-byte blocks: %d rounds, stride %d, %d blocks; want 1, 0, %d", n, a.Kind, x.bytes, a.Rounds(), a.Stride, a.Grid(), Blocks(x.bytes))
				}
			}
		}
		off := NewConfig(n, Settings{TwoShot: true, Other: true, LLBytes: -1})
		if a, _ := off.shape(ReduceScatter, call(sched.ReduceScatter, n, 1000)); a.Kind != ReduceScatter {
			t.Errorf("n=%d, no lines: a 4000-byte reduce-scatter runs as %v", n, a.Kind)
		}
	}
}
