package plan_test

import (
	"math"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

func req(c sched.Collective, n int, bytes int64) plan.Request {
	return plan.Request{Params: sched.Params{Coll: c, NRanks: n, Count: int(bytes / 4)}, ElemSize: 4}
}

func cands(r plan.Request, costs map[string]float64, names ...string) []plan.Candidate {
	var out []plan.Candidate
	for _, n := range names {
		c, ok := costs[n]
		if !ok {
			c = math.NaN()
		}
		out = append(out, plan.Candidate{Name: n, Params: r.Params, Cost: c})
	}
	return out
}

func TestDefaultPicksCheapest(t *testing.T) {
	r := req(sched.Allreduce, 4, 1<<20)
	d := plan.Default{}.Plan(r, cands(r, map[string]float64{"ring": 3e-4, "recdouble": 9e-4, "rabenseifner": 2e-4}, "recdouble", "ring", "rabenseifner"))
	if d.Algo != "rabenseifner" || d.Source != plan.FromModel {
		t.Fatalf("chose %q (%s, from the %v), want the cheapest, from the model", d.Algo, d.Reason, d.Source)
	}
	if !strings.Contains(d.Reason, "rabenseifner 200µs < ring 300µs < recdouble 900µs") {
		t.Errorf("reason %q does not list the alternatives in order", d.Reason)
	}
}

func TestDefaultFallsBackToRules(t *testing.T) {
	r := req(sched.Allreduce, 4, 8)
	d := plan.Default{}.Plan(r, cands(r, nil, "ring", "recdouble"))
	if d.Algo != "recdouble" || d.Source != plan.FromRules {
		t.Fatalf("chose %q (%s, from the %v), want the rules' recdouble", d.Algo, d.Reason, d.Source)
	}
	if d := (plan.Default{}).Plan(r, nil); d.Algo != "" {
		t.Errorf("no candidates: chose %q", d.Algo)
	}
}

func TestDefaultTableWins(t *testing.T) {
	tab, err := plan.ParseTable(strings.NewReader(`
allreduce ranks=4 hosts=* size=0-64K ring
allreduce ranks=* hosts=* size=0- segring:seg=128K
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	costs := map[string]float64{"ring": 3, "recdouble": 1, "segring": 2}
	r := req(sched.Allreduce, 4, 8)
	d := plan.Default{Table: tab}.Plan(r, cands(r, costs, "recdouble", "ring", "segring"))
	if d.Algo != "ring" || !strings.Contains(d.Reason, "tuning table t: allreduce ranks=4") || d.Source != plan.FromTable {
		t.Errorf("8 B on 4 ranks: chose %q (%s), want the table's ring", d.Algo, d.Reason)
	}
	r = req(sched.Allreduce, 2, 8)
	d = plan.Default{Table: tab}.Plan(r, cands(r, costs, "recdouble", "ring", "segring"))
	if d.Algo != "segring" || d.Params.Segment != 32<<10 {
		t.Errorf("8 B on 2 ranks: chose %q segment %d (%s), want the wildcard's segring with 32Ki elements", d.Algo, d.Params.Segment, d.Reason)
	}
	// An entry whose algorithm cannot run the call gives way to the model.
	d = plan.Default{Table: tab}.Plan(r, cands(r, costs, "recdouble", "ring"))
	if d.Algo != "recdouble" || d.Source != plan.FromModel {
		t.Errorf("table algorithm unavailable: chose %q (%s, from the %v), want the model's recdouble", d.Algo, d.Reason, d.Source)
	}
}

func TestTableRoundTrip(t *testing.T) {
	src := `# a comment
link intra alpha=1.5us beta=8GB/s
gamma 12GB/s
allreduce ranks=2 hosts=1 size=0-16K recdouble
allreduce ranks=2 hosts=1 size=16K-2M ring   # trailing comment
bcast ranks=* hosts=* size=2M- chain:seg=256K
reduce ranks=3 hosts=* size=8-1G knomial:k=4
`
	tab, err := plan.ParseTable(strings.NewReader(src), "x")
	if err != nil {
		t.Fatal(err)
	}
	if tab.Model == nil || tab.Model.Links[cost.Intra] != (cost.Link{Alpha: 1.5e-6, Beta: 8e9}) ||
		math.Abs(tab.Model.Gamma-1/12e9) > 1e-20 || tab.Model.Links[cost.Inter] != cost.Default().Links[cost.Inter] {
		t.Errorf("model %+v", tab.Model)
	}
	if len(tab.Entries) != 4 || tab.Entries[1].Line != 5 {
		t.Fatalf("entries %+v", tab.Entries)
	}
	var b strings.Builder
	if _, err := tab.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	again, err := plan.ParseTable(strings.NewReader(b.String()), "y")
	if err != nil {
		t.Fatalf("reading what WriteTo wrote: %v\n%s", err, b.String())
	}
	for i := range tab.Entries {
		a, b := tab.Entries[i], again.Entries[i]
		a.Line, b.Line = 0, 0
		if a != b {
			t.Errorf("entry %d: %+v became %+v", i, a, b)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-3*math.Abs(b) }
	for c := range tab.Model.Links {
		a, b := tab.Model.Links[c], again.Model.Links[c]
		if !near(a.Alpha, b.Alpha) || !near(a.Beta, b.Beta) {
			t.Errorf("link %d %+v became %+v", c, a, b)
		}
	}
	if !near(tab.Model.Gamma, again.Model.Gamma) {
		t.Errorf("gamma %g became %g", tab.Model.Gamma, again.Model.Gamma)
	}
	// What the file does not give (memory and overhead here) or the
	// format does not carry (eager limit) is the built-in model's, not
	// zero.
	def := cost.Default()
	for _, m := range []*cost.Model{tab.Model, again.Model} {
		if m.Memory != def.Memory || m.Overhead != def.Overhead || m.Eager != def.Eager || m.Core != def.Core || m.Cache != def.Cache {
			t.Errorf("memory %g, overhead %g, eager %g, core %g, cache %g; want the defaults %g, %g, %g, %g, %g",
				m.Memory, m.Overhead, m.Eager, m.Core, m.Cache, def.Memory, def.Overhead, def.Eager, def.Core, def.Cache)
		}
	}
	for _, tc := range []struct {
		c     sched.Collective
		n     int
		size  int64
		want  string
		found bool
	}{
		{sched.Allreduce, 2, 0, "recdouble", true},
		{sched.Allreduce, 2, 16<<10 - 1, "recdouble", true},
		{sched.Allreduce, 2, 16 << 10, "ring", true},
		{sched.Allreduce, 2, 2 << 20, "", false},
		{sched.Allreduce, 3, 8, "", false},
		{sched.Bcast, 7, 1 << 30, "chain:seg=256K", true},
		{sched.Reduce, 3, 4, "", false},
	} {
		e := tab.Lookup(tc.c, tc.n, 1, tc.size)
		if (e != nil) != tc.found || e != nil && e.Choice.String() != tc.want {
			t.Errorf("Lookup(%v, %d, %d) = %v, want %q", tc.c, tc.n, tc.size, e, tc.want)
		}
	}
}

// TestTableMemoryOverhead checks that the figures braid tune measures for
// the host's memory and the per-message overhead, and a thread's memory
// rate, survive a table's round trip, 0 µs of overhead included, and that
// each alone leaves the other figures at the built-in model's.
func TestTableMemoryOverhead(t *testing.T) {
	def := cost.Default()
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-3*math.Abs(b) }
	for _, tc := range []struct {
		src                    string
		memory, overhead, core float64
	}{
		{"memory 30GB/s\n", 30e9, def.Overhead, def.Core},
		{"overhead 0.73us\n", def.Memory, 0.73e-6, def.Core},
		{"overhead 0us\n", def.Memory, 0, def.Core},
		{"core 9GB/s\n", def.Memory, def.Overhead, 9e9},
		{"machine cores=16 numa=1\nmemory 48.5GB/s\ncore 7.25GB/s\noverhead 1250ns\n", 48.5e9, 1.25e-6, 7.25e9},
	} {
		tab, err := plan.ParseTable(strings.NewReader(tc.src), "m")
		if err != nil || tab.Model == nil {
			t.Fatalf("%q: %+v, %v", tc.src, tab, err)
		}
		if m := tab.Model; m.Memory != tc.memory || !near(m.Overhead, tc.overhead) && m.Overhead != tc.overhead || m.Core != tc.core ||
			m.Gamma != def.Gamma || m.Links != def.Links || m.Eager != def.Eager || m.Cache != def.Cache {
			t.Errorf("%q: model %+v, want memory %g, overhead %g, core %g, the rest the defaults", tc.src, *m, tc.memory, tc.overhead, tc.core)
		}
		var b strings.Builder
		if _, err := tab.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		again, err := plan.ParseTable(strings.NewReader(b.String()), "again")
		if err != nil {
			t.Fatalf("%q: reading what WriteTo wrote: %v\n%s", tc.src, err, b.String())
		}
		if m := again.Model; !near(m.Memory, tc.memory) || !near(m.Overhead, tc.overhead) && m.Overhead != tc.overhead || !near(m.Core, tc.core) {
			t.Errorf("%q: wrote\n%sread back memory %g, overhead %g, core %g", tc.src, b.String(), m.Memory, m.Overhead, m.Core)
		}
		if want := tab.Machine; again.Machine != want {
			t.Errorf("%q: machine %+v became %+v", tc.src, want, again.Machine)
		}
	}
	// The planner costs with the table's figures.
	tab, err := plan.ParseTable(strings.NewReader("overhead 2us\nmemory 20GB/s\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	if m := (plan.Default{Table: tab}).Model(); m.Overhead != 2e-6 || m.Memory != 20e9 {
		t.Errorf("plan.Default.Model: overhead %g, memory %g; want the table's 2e-6, 20e9", m.Overhead, m.Memory)
	}
}

func TestTableErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"allreduce ranks=2 hosts=1 size=0-16K", "t:1: want"},
		{"\nallreduc ranks=2 hosts=1 size=0-16K ring", "t:2: unknown collective"},
		{"allreduce ranks=0 hosts=1 size=0-16K ring", "ranks=\"0\""},
		{"allreduce ranks=2 hosts=1 size=16K-8 ring", "empty range"},
		{"allreduce ranks=2 hosts=1 size=16K ring", "a range"},
		{"allreduce ranks=2 hosts=1 size=0- ring:seg=0", "positive size"},
		{"allreduce ranks=2 hosts=1 size=0- knomial:k=1", "k=\"1\""},
		{"allreduce ranks=2 hosts=1 size=0- ring:x=1", "unknown parameter"},
		{"link intra alpha=1us beta=0GB/s", "rate"},
		{"link intra alpha=1 beta=1GB/s", "unit"},
		{"link warp alpha=1us beta=1GB/s", "unknown link class"},
		{"gamma fast", "rate"},
		{"gamma 1GB/s\ngamma 2GB/s", "t:2: gamma given twice"},
		{"memory 1GB/s\nmemory 2GB/s", "t:2: memory given twice"},
		{"memory lots", "rate"},
		{"memory", "want \"memory RATE\""},
		{"core 1GB/s\ncore 2GB/s", "t:2: core given twice"},
		{"core quick", "rate"},
		{"core", "want \"core RATE\""},
		{"overhead 1us\noverhead 2us", "t:2: overhead given twice"},
		{"overhead -1us", "non-negative"},
		{"overhead 1", "unit"},
		{"overhead", "want \"overhead TIME\""},
		{"link intra alpha=1us beta=1GB/s\nlink intra alpha=2us beta=1GB/s", "t:2: link intra given twice"},
		{"allreduce ranks=2 hosts=1 size=0-16K ring\nallreduce ranks=2 hosts=1 size=8K-1M recdouble", "t:2: sizes 8K-1M overlap line 1's 0-16K"},
		{"allreduce ranks=* hosts=1 size=1M- ring\n\nallreduce ranks=* hosts=1 size=0- recdouble", "t:3: sizes 0- overlap line 1's 1M-"},
		{"allreduce ranks=2 hosts=1 size=0-16K ring\nallreduce ranks=2 hosts=1 size=0-16K ring", "t:2: sizes 0-16K overlap"},
	} {
		_, err := plan.ParseTable(strings.NewReader(tc.src), "t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

// TestTableNoOverlap: entries that only touch, or differ in collective,
// rank or host count (wildcards included), do not overlap.
func TestTableNoOverlap(t *testing.T) {
	src := `allreduce ranks=2 hosts=1 size=0-16K ring
allreduce ranks=2 hosts=1 size=16K- recdouble
allreduce ranks=* hosts=1 size=0- segring
allreduce ranks=2 hosts=* size=0- segring
bcast ranks=2 hosts=1 size=0- chain
allreduce ranks=4 hosts=1 size=0- ring
`
	if tab, err := plan.ParseTable(strings.NewReader(src), "t"); err != nil || len(tab.Entries) != 6 {
		t.Fatalf("ParseTable: %v", err)
	}
}

func FuzzParseTable(f *testing.F) {
	f.Add("link intra alpha=1us beta=8GB/s\ngamma 10GB/s\nallreduce ranks=2 hosts=1 size=0-16K recdouble\n")
	f.Add("bcast ranks=* hosts=* size=2M- chain:seg=256K:k=3")
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := plan.ParseTable(strings.NewReader(s), "fuzz")
		if err != nil {
			return
		}
		var b strings.Builder
		tab.WriteTo(&b)
		again, err := plan.ParseTable(strings.NewReader(b.String()), "again")
		if err != nil {
			t.Fatalf("%q parsed, but what WriteTo made of it did not: %v\n%s", s, err, b.String())
		}
		if len(again.Entries) != len(tab.Entries) {
			t.Fatalf("%d entries became %d", len(tab.Entries), len(again.Entries))
		}
	})
}

func TestChoice(t *testing.T) {
	c, err := plan.ParseChoice("segring:seg=64K:k=3")
	if err != nil || c != (plan.Choice{Algo: "segring", Segment: 64 << 10, Radix: 3}) {
		t.Fatalf("ParseChoice = %+v, %v", c, err)
	}
	p := c.Apply(sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 100}, 8)
	if p.Segment != 8<<10 || p.Radix != 3 {
		t.Errorf("Apply: %+v", p)
	}
	if p := (plan.Choice{Algo: "x", Segment: 3}).Apply(sched.Params{}, 8); p.Segment != 1 {
		t.Errorf("a segment below one element became %d", p.Segment)
	}
	for _, bad := range []string{"", ":seg=1", "a=b", "ring:seg", "ring:k=x"} {
		if _, err := plan.ParseChoice(bad); err == nil {
			t.Errorf("ParseChoice(%q) accepted", bad)
		}
	}
}

// TestMIAD runs MIAD against a throughput curve with one peak and checks
// that it settles near the peak, growing first and then stepping back.
func TestMIAD(t *testing.T) {
	thr := func(seg int) float64 {
		// Throughput rises with the segment (fewer messages) until 96 Ki
		// elements, then falls (pipeline fill).
		x := math.Log2(float64(seg) / (96 << 10))
		return 10 - x*x
	}
	m := plan.NewMIAD(4<<10, 1<<10, 16<<20)
	var tried []int
	for !m.Done() {
		s := m.Segment()
		tried = append(tried, s)
		m.Observe(thr(s))
		if m.Trials() > plan.MIADMaxTrials {
			t.Fatal("MIAD does not stop")
		}
	}
	got := m.Segment()
	if got < 64<<10 || got > 128<<10 {
		t.Errorf("settled at %d (tried %v), want near the peak at 96Ki", got, tried)
	}
	if tried[1] != 2*tried[0] {
		t.Errorf("tried %v: the first move must be multiplicative", tried)
	}
	if seg := m.Segment(); !m.Done() || seg != got {
		t.Errorf("Segment after Done changed")
	}
	// A flat curve stops quickly and keeps the start.
	m = plan.NewMIAD(64<<10, 1<<10, 1<<20)
	for i := 0; !m.Done(); i++ {
		m.Observe(5)
	}
	if m.Segment() != 64<<10 || m.Trials() > 5 {
		t.Errorf("flat curve: settled at %d after %d trials", m.Segment(), m.Trials())
	}
	// Bounds hold.
	m = plan.NewMIAD(1, 16, 32)
	for !m.Done() {
		s := m.Segment()
		if s < 16 || s > 32 {
			t.Fatalf("segment %d outside [16, 32]", s)
		}
		m.Observe(float64(s))
	}
}

// TestTableMachine: the machine line round-trips and is checked.
func TestTableMachine(t *testing.T) {
	in := "machine cores=16 numa=2\nallreduce ranks=* hosts=* size=0- ring\n"
	tb, err := plan.ParseTable(strings.NewReader(in), "t")
	if err != nil {
		t.Fatal(err)
	}
	if tb.Machine != (plan.Machine{Cores: 16, NUMA: 2}) {
		t.Errorf("machine %+v", tb.Machine)
	}
	var sb strings.Builder
	tb.WriteTo(&sb)
	if sb.String() != in {
		t.Errorf("written back as %q, want %q", sb.String(), in)
	}
	// A device table records the GPUs, a table of both kinds both.
	for _, c := range []struct {
		line string
		want plan.Machine
	}{
		{"machine gpus=4 gpu=NVIDIA_H200", plan.Machine{GPUs: 4, GPU: "NVIDIA_H200"}},
		{"machine cores=16 numa=2 gpus=1 gpu=NVIDIA_H100_80GB_HBM3", plan.Machine{Cores: 16, NUMA: 2, GPUs: 1, GPU: "NVIDIA_H100_80GB_HBM3"}},
	} {
		tb, err := plan.ParseTable(strings.NewReader(c.line+"\n"), "t")
		if err != nil || tb.Machine != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.line, tb.Machine, err, c.want)
			continue
		}
		sb.Reset()
		tb.WriteTo(&sb)
		if sb.String() != c.line+"\n" {
			t.Errorf("%q written back as %q", c.line, sb.String())
		}
	}
	if got := plan.GPUName(" NVIDIA H100\t80GB HBM3 "); got != "NVIDIA_H100_80GB_HBM3" {
		t.Errorf("GPUName: %q", got)
	}
	for _, bad := range []string{"machine cores=0 numa=1", "machine cores=4", "machine cores=4 numa=1 x=2", "machine cores=4 sockets=1", "machine cores=4 numa=1\nmachine cores=4 numa=1",
		"machine", "machine gpus=4", "machine gpu=H200", "machine gpus=0 gpu=H200", "machine gpus=2 gpu=", "machine gpus=2 gpus=2 gpu=H200", "machine numa=1 gpus=2 gpu=H200"} {
		if _, err := plan.ParseTable(strings.NewReader(bad+"\n"), "t"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRulesFallbackKeepsFused: where the rules know none of the
// candidates (a device call whose only candidate is a fused kernel), the
// first candidate they fall back to keeps its kernel, so that the call
// runs it instead of looking it up as a schedule.
func TestRulesFallbackKeepsFused(t *testing.T) {
	r := req(sched.Allgather, 2, 1<<20)
	k := &plan.Fused{Kind: "allgather", Blocks: 8, Threads: 512, Rounds: 1}
	d := plan.Rules{}.Plan(r, []plan.Candidate{{Name: "fused", Params: r.Params, Cost: math.NaN(), Fused: k}})
	if d.Algo != "fused" || d.Fused != k {
		t.Fatalf("chose %q with kernel %v, want fused with its kernel", d.Algo, d.Fused)
	}
}
