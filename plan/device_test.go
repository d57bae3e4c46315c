package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/sched"
)

// TestDeviceModelFit checks DefaultDeviceModel against the H200 figures
// it was fitted to (its doc comment): every point within 15 %, but the
// reduce-scatter at 64 MiB, which the doc says it misses.
func TestDeviceModelFit(t *testing.T) {
	m := DefaultDeviceModel()
	const es = 4
	us := func(kind string, n int, bytes int64, host bool) float64 {
		p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: int(bytes / es)}
		f := &Fused{Kind: kind}
		if host {
			f.HostBytes = 1
		}
		return m.Cost(f, p, es) * 1e6
	}
	busbw := func(kind string, n int, bytes int64, host bool) float64 {
		p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: int(bytes / es)}
		f := &Fused{Kind: kind}
		if host {
			f.HostBytes = 1
		}
		t := m.Cost(f, p, es)
		switch kind {
		case FusedTwoShot:
			return 2 * float64(n-1) / float64(n) * float64(bytes) / t / 1e9
		case FusedAllgather, FusedReduceScatter: // bytes is a block
			return float64(n-1) * float64(bytes) / t / 1e9
		}
		return float64(bytes) / t / 1e9
	}
	const K, M, G = 1 << 10, 1 << 20, 1 << 30
	for _, c := range []struct {
		what     string
		got, was float64
	}{
		{"one-shot 2 GPUs 256 KiB µs", us(FusedOneShot, 2, 256*K, false), 6.8},
		{"one-shot 2 GPUs 4 MiB µs", us(FusedOneShot, 2, 4*M, false), 21.6},
		{"one-shot 2 GPUs 16 MiB µs", us(FusedOneShot, 2, 16*M, false), 64.9},
		{"one-shot 3 GPUs 1 MiB µs", us(FusedOneShot, 3, 1*M, false), 17.2},
		{"one-shot 4 GPUs 128 KiB µs", us(FusedOneShot, 4, 128*K, false), 7.7},
		{"one-shot 4 GPUs 256 KiB µs", us(FusedOneShot, 4, 256*K, false), 9.0},
		{"one-shot 4 GPUs 512 KiB µs", us(FusedOneShot, 4, 512*K, false), 14.9},
		{"lines 2 GPUs 256 KiB µs", us(FusedOneShotLL, 2, 256*K, false), 5.3},
		{"lines 4 GPUs 128 KiB µs", us(FusedOneShotLL, 4, 128*K, false), 6.9},
		{"lines 4 GPUs 256 KiB µs", us(FusedOneShotLL, 4, 256*K, false), 9.5},
		{"two-shot 2 GPUs 16 MiB µs", us(FusedTwoShot, 2, 16*M, false), 63.5},
		{"two-shot 3 GPUs 1 MiB µs", us(FusedTwoShot, 3, 1*M, false), 18.8},
		{"two-shot 4 GPUs 512 KiB µs", us(FusedTwoShot, 4, 512*K, false), 14.8},
		{"two-shot 4 GPUs 1 GiB GB/s", busbw(FusedTwoShot, 4, 1*G, false), 343},
		{"two-shot 4 GPUs 1 GiB, host path, GB/s", busbw(FusedTwoShot, 4, 1*G, true), 372},
		{"bcast 4 GPUs 64 MiB GB/s", busbw(FusedBcast, 4, 64*M, false), 320},
		{"bcast 4 GPUs 1 GiB GB/s", busbw(FusedBcast, 4, 1*G, false), 342},
		{"allgather 4 GPUs 1 GiB GB/s", busbw(FusedAllgather, 4, G/4, false), 342},
		{"reduce-scatter 4 GPUs 256 MiB GB/s", busbw(FusedReduceScatter, 4, 64*M, false), 297},
		{"reduce-scatter 4 GPUs 1 GiB GB/s", busbw(FusedReduceScatter, 4, G/4, false), 330},
	} {
		if math.Abs(c.got/c.was-1) > 0.15 {
			t.Errorf("%s: model %.1f, measured %.1f", c.what, c.got, c.was)
		}
	}
	// The one-shot wins where it was measured to win, and the two-shot
	// where the one-shot lost.
	for _, c := range []struct {
		n       int
		bytes   int64
		oneShot bool
	}{{2, 4 * M, true}, {3, 1 * M, true}, {4, 128 * K, true}} {
		if got := us(FusedOneShot, c.n, c.bytes, false) < us(FusedTwoShot, c.n, c.bytes, false); got != c.oneShot {
			t.Errorf("%d GPUs, %d bytes: one-shot cheaper %v, measured %v", c.n, c.bytes, got, c.oneShot)
		}
	}
}

// TestDefaultPlanFused checks that the planner carries a fused
// candidate's kernel to its decision, by cost and by a table entry.
func TestDefaultPlanFused(t *testing.T) {
	p := sched.Params{Coll: sched.Bcast, NRanks: 4, Count: 1 << 20}
	f := &Fused{Kind: FusedBcast, Blocks: 64, Threads: 512, Rounds: 3}
	cand := []Candidate{{Name: "chain", Params: p, Cost: 2e-3}, {Name: "fused", Params: p, Cost: 1e-3, Fused: f}}
	d := Default{}.Plan(Request{Params: p, ElemSize: 4}, cand)
	if d.Algo != "fused" || d.Fused != f || !strings.Contains(d.Reason, "fused [bcast 64×512 in 3 rounds]") || !strings.Contains(d.Reason, "< chain") {
		t.Errorf("by cost: %+v", d)
	}
	tab, err := ParseTable(strings.NewReader("bcast ranks=* hosts=* size=0- chain\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	if d := (Default{Table: tab}).Plan(Request{Params: p, ElemSize: 4}, cand); d.Algo != "chain" || d.Fused != nil {
		t.Errorf("a table naming chain: %+v", d)
	}
	tab, _ = ParseTable(strings.NewReader("bcast ranks=* hosts=* size=0- fused\n"), "t")
	cand[1].Cost = 3e-3
	if d := (Default{Table: tab}).Plan(Request{Params: p, ElemSize: 4}, cand); d.Algo != "fused" || d.Fused != f {
		t.Errorf("a table naming fused: %+v", d)
	}
}
