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

// TestDeviceTable reads a device tuning table as braid tune --device cuda
// writes it (its machine line records the GPUs; its entries name fused
// kernels and schedules with the host's syntax), looks calls up in it,
// and checks the planner's use of it with fake candidates: an entry wins
// over the model, carries the fused kernel of the candidate it names or
// the schedule's parameters, and gives way to the model where it names no
// candidate of the call.
func TestDeviceTable(t *testing.T) {
	const in = `# braid device tuning table
machine gpus=4 gpu=NVIDIA_H200
allreduce ranks=4 hosts=1 size=0-512K gpu_oneshot
allreduce ranks=4 hosts=1 size=512K-256M direct
allreduce ranks=4 hosts=1 size=256M- segring:seg=16M
bcast ranks=* hosts=* size=0- fused
`
	tb, err := ParseTable(strings.NewReader(in), "cuda.txt")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Machine{GPUs: 4, GPU: "NVIDIA_H200"}); tb.Machine != want || !tb.Machine.HasGPUs() || tb.Machine.HasCores() {
		t.Errorf("machine %+v, want %+v", tb.Machine, want)
	}
	if got := tb.Machine.String(); got != "4 GPUs NVIDIA_H200" {
		t.Errorf("machine described as %q", got)
	}
	var sb strings.Builder
	tb.WriteTo(&sb)
	if want := strings.TrimPrefix(in, "# braid device tuning table\n"); sb.String() != want {
		t.Errorf("written back as\n%s\nwant\n%s", sb.String(), want)
	}
	// Lookups: a device communicator asks with hosts 1.
	for _, c := range []struct {
		coll  sched.Collective
		n     int
		bytes int64
		want  string
	}{
		{sched.Allreduce, 4, 8, "gpu_oneshot"},
		{sched.Allreduce, 4, 512 << 10, "direct"},
		{sched.Allreduce, 4, 1 << 30, "segring:seg=16M"},
		{sched.Allreduce, 2, 8, ""},
		{sched.Bcast, 3, 1 << 20, "fused"},
		{sched.Allgather, 4, 1 << 20, ""},
	} {
		got := ""
		if e := tb.Lookup(c.coll, c.n, 1, c.bytes); e != nil {
			got = e.Choice.String()
		}
		if got != c.want {
			t.Errorf("%v on %d GPUs, %d bytes: %q, want %q", c.coll, c.n, c.bytes, got, c.want)
		}
	}

	// Fake candidates of an allreduce on 4 GPUs: two fused kernels and two
	// schedules, costed so that the model alone would take the ring.
	oneShot := &Fused{Kind: FusedOneShotLL, Blocks: 1, Threads: 512, Rounds: 1}
	twoShot := &Fused{Kind: FusedTwoShot, Blocks: 256, Threads: 256, Rounds: 64, HostBytes: 1632, HostShare: 11}
	cands := func(count int) []Candidate {
		p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: count}
		seg := p
		seg.Segment = count / 16
		return []Candidate{
			{Name: "gpu_oneshot", Params: p, Cost: 3e-3, Fused: oneShot},
			{Name: "direct", Params: p, Cost: 2e-3, Fused: twoShot},
			{Name: "ring", Params: p, Cost: 1e-3},
			{Name: "segring", Params: seg, Cost: 1.5e-3},
		}
	}
	req := func(count int) Request {
		return Request{Params: sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: count}, ElemSize: 4}
	}
	for _, c := range []struct {
		count int
		algo  string
		fused *Fused
		seg   int
	}{
		{1024, "gpu_oneshot", oneShot, 0},    // 4 KiB
		{16 << 20, "direct", twoShot, 0},     // 64 MiB
		{128 << 20, "segring", nil, 4 << 20}, // 512 MiB: seg=16M of float32
	} {
		dec, ok := tb.Choose(req(c.count), 1, cands(c.count))
		if !ok || dec.Algo != c.algo || dec.Fused != c.fused || !strings.HasPrefix(dec.Reason, "tuning table cuda.txt: ") {
			t.Errorf("%d float32: %q [%v] (%q, %v), want %q [%v] from the table", c.count, dec.Algo, dec.Fused, dec.Reason, ok, c.algo, c.fused)
		}
		if c.seg > 0 && dec.Params.Segment != c.seg {
			t.Errorf("%d float32: segment %d elements, want %d (the entry's seg=16M)", c.count, dec.Params.Segment, c.seg)
		}
		if d := (Default{Table: tb}).Plan(req(c.count), cands(c.count)); d.Algo != c.algo || d.Fused != c.fused {
			t.Errorf("%d float32: Default with the table chose %q, want %q", c.count, d.Algo, c.algo)
		}
	}
	// An entry that names no candidate of the call (the fused kernels
	// cannot run it, say): the model decides.
	noFused := cands(16 << 20)[2:]
	if _, ok := tb.Choose(req(16<<20), 1, noFused); ok {
		t.Error("the table chose a candidate the call does not have")
	}
	if d := (Default{Table: tb}).Plan(req(16<<20), noFused); d.Algo != "ring" || !strings.HasPrefix(d.Reason, "cost model") {
		t.Errorf("without the entry's candidate: %q (%s), want the model's ring", d.Algo, d.Reason)
	}
	// Another GPU count has no entry: the model decides.
	r2 := Request{Params: sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 1024}, ElemSize: 4}
	if _, ok := tb.Choose(r2, 1, cands(1024)); ok {
		t.Error("an entry for 4 GPUs chose for 2")
	}
	var none *Table
	if _, ok := none.Choose(req(1024), 1, cands(1024)); ok {
		t.Error("a nil table chose")
	}
}

// TestDeviceModelOn checks CostOn and ProgramsOn: no change without a
// route's bound or where the narrowest route is an H200's NVSwitch links
// (450 GB/s, faster than the fit's figures), and the pair's bytes over the
// route where it is PCIe (a DGX-1's GPUs without NVLink, 15.75 GB/s).
func TestDeviceModelOn(t *testing.T) {
	m := DefaultDeviceModel()
	const es = 4
	kinds := []string{FusedOneShot, FusedOneShotLL, FusedTwoShotLL, FusedTwoShot, FusedBcast, FusedAllgather, FusedReduceScatter,
		FusedReduceScatterLL, FusedAllgatherLL}
	for _, n := range []int{2, 3, 4, 8} {
		for _, bytes := range []int{8, 1 << 20, 1 << 30} {
			p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: bytes / es}
			for _, k := range kinds {
				f := &Fused{Kind: k}
				c := m.Cost(f, p, es)
				for _, bps := range []float64{0, math.Inf(1), 450e9} {
					if got := m.CostOn(f, p, es, bps); got != c {
						t.Errorf("%s n=%d %d B on %g B/s: %g, Cost %g", k, n, bytes, bps, got, c)
					}
				}
				p0 := p
				p0.Count = 0
				want := max(c, m.Cost(f, p0, es)+m.PairBytes(f, p, es)/15.75e9)
				if got := m.CostOn(f, p, es, 15.75e9); got != want || bytes == 1<<30 && got <= c {
					t.Errorf("%s n=%d %d B over PCIe: %g, want %g (Cost %g)", k, n, bytes, got, want, c)
				}
			}
		}
	}
	// The pair's bytes: a 3-GPU one-shot pushes the vector to each peer,
	// a two-shot 2/3 of it, a broadcast half of it; a third through host
	// memory leaves two thirds.
	p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 3 << 20}
	for _, c := range []struct {
		f    Fused
		want float64
	}{
		{Fused{Kind: FusedOneShot}, 12 << 20},
		{Fused{Kind: FusedTwoShot}, 8 << 20},
		{Fused{Kind: FusedTwoShot, HostBytes: 1, HostShare: 25}, 6 << 20},
		{Fused{Kind: FusedBcast}, 6 << 20},
	} {
		if got := m.PairBytes(&c.f, p, es); got != c.want {
			t.Errorf("PairBytes(%v) = %g, want %g", &c.f, got, c.want)
		}
	}
	if pm := m.ProgramsOn(math.Inf(1)); pm != m.Programs {
		t.Errorf("ProgramsOn(+Inf) changed the model: %+v", pm)
	}
	pm := m.ProgramsOn(15.75e9)
	for c, l := range pm.Links {
		if l.Beta != 15.75e9 || l.Alpha != m.Programs.Links[c].Alpha {
			t.Errorf("ProgramsOn(PCIe) link %d: %+v", c, l)
		}
	}
	if pm := m.ProgramsOn(450e9); pm != m.Programs {
		t.Errorf("ProgramsOn(450 GB/s) changed the model: %+v", pm)
	}
}
