package main

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
)

// synthetic returns the overhead fit's runs on n ranks, timed as the
// model says they take with step latency alpha and overhead o.
func synthetic(t *testing.T, n int, alpha, o float64) []overheadRun {
	t.Helper()
	runs, _, err := overheadCases(n, cost.Default())
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		runs[i].Secs = runs[i].C0 + runs[i].A*alpha + runs[i].O*o
	}
	return runs
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))+1e-18 }

// TestCostTerms checks the overhead fit's terms against the costs they
// split: the model's cost of each run under any α and o is C0 + A·α +
// O·o, direct pays o for every peer beyond the first of its two steps,
// and recursive doubling pays none.
func TestCostTerms(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 16} {
		runs, ps, err := overheadCases(n, cost.Default())
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range runs {
			coll, _ := sched.ParseCollective(r.Coll)
			a, _ := algo.Lookup(coll, r.Algo)
			m := cost.Default()
			for c := range m.Links {
				m.Links[c].Alpha = 1.7e-6
			}
			m.Overhead = 0.35e-6
			if got, want := r.C0+r.A*1.7e-6+r.O*0.35e-6, a.(algo.Coster).Cost(ps[i], 4, m); !near(got, want) {
				t.Errorf("%d ranks, %s %s: terms give %g s, the model %g", n, r.Coll, r.Algo, got, want)
			}
			switch r.Algo {
			case "recdouble":
				if math.Abs(r.O) > 1e-9 {
					t.Errorf("%d ranks, %s recdouble: o counted %g times, want 0 (one peer a step)", n, r.Coll, r.O)
				}
			case "direct":
				if steps := map[string]float64{"allreduce": 2, "allgather": 1}[r.Coll]; !near(r.O, steps*float64(n-2)) {
					t.Errorf("%d ranks, %s direct: o counted %g times, want %g (n−2 a step)", n, r.Coll, r.O, steps*float64(n-2))
				}
			}
		}
	}
}

// TestFitOverhead checks the fit on synthetic timings: it recovers the
// α and o they were made with, at 3 to 16 ranks; it clamps an overhead
// the times make negative to 0 and fits α alone; and it refuses 2 ranks,
// where no run tells o from α.
func TestFitOverhead(t *testing.T) {
	for _, n := range []int{3, 4, 5, 8, 16} {
		for _, want := range [][2]float64{{1e-6, 0.5e-6}, {2.3e-6, 0.07e-6}, {0.8e-6, 0}} {
			alpha, o, ok := fitOverhead(synthetic(t, n, want[0], want[1]))
			if !ok || !near(alpha, want[0]) || math.Abs(o-want[1]) > 1e-15 {
				t.Errorf("%d ranks, made with α %g, o %g: fit α %g, o %g, ok %v", n, want[0], want[1], alpha, o, ok)
			}
		}
	}
	// The node's 8-byte allreduce at 16 ranks (docs/PERFORMANCE.md):
	// direct about 0.7 µs more per peer than a recursive-doubling step.
	// Direct runs faster than α alone allows: o would be negative.
	runs := synthetic(t, 8, 1e-6, 0.5e-6)
	for i := range runs {
		if runs[i].Algo == "direct" {
			runs[i].Secs = runs[i].C0 + runs[i].A*1e-6 - 0.2e-6
		}
	}
	alpha, o, ok := fitOverhead(runs)
	if !ok || o != 0 || alpha <= 0 {
		t.Errorf("direct faster than its steps' α: fit α %g, o %g, ok %v; want o = 0 and α > 0", alpha, o, ok)
	}
	var saa, say float64
	for _, r := range runs {
		saa += r.A * r.A
		say += r.A * (r.Secs - r.C0)
	}
	if !near(alpha, say/saa) {
		t.Errorf("with o clamped to 0, α = %g; want α fitted alone, %g", alpha, say/saa)
	}
	if _, _, ok := fitOverhead(synthetic(t, 2, 1e-6, 0.5e-6)); ok {
		t.Error("2 ranks: the fit claims to tell o from α")
	}
	if _, _, ok := fitOverhead(synthetic(t, 4, 1e-6, 0.5e-6)[:1]); ok {
		t.Error("one run: the fit claims to tell o from α")
	}
}

// TestMemoryRate checks the memory rate's arithmetic, on a figure the
// default was fitted to: session 8's 16-rank direct reduce-scatter of
// 16 MiB on the 16-core node, 10,617 µs, is 49 GB/s through memory, within
// the quartiles (42–58 GB/s) of DefaultMemory's fit.
func TestMemoryRate(t *testing.T) {
	m := cost.Default()
	a, err := algo.Lookup(sched.ReduceScatter, "direct")
	if err != nil {
		t.Fatal(err)
	}
	p := sched.Params{Coll: sched.ReduceScatter, NRanks: 16, Count: memoryBytes / 4 / 16}
	moved := a.(algo.Mover).Moved(p, 4, m)
	if want := float64(2*16-1) * (1 << 20); moved != want {
		t.Errorf("direct reduce-scatter of 16 MiB on 16 ranks moves %g B a rank, want (2n−1)·M = %g", moved, want)
	}
	lat := a.(algo.Coster).Cost(p, 4, m.Latencies())
	rate := memoryRate(16, moved, 10617e-6, lat)
	if rate < 48e9 || rate > 50e9 {
		t.Errorf("node's 10,617 µs: %g B/s, want 49 GB/s", rate)
	}
	// The rate is what Bounded inverts: a time made with it gives it back.
	if got := memoryRate(16, moved, lat+m.Shared(nil, 16, moved), lat); !near(got, m.Memory) {
		t.Errorf("a time made with %g B/s gives %g", m.Memory, got)
	}
	for _, c := range []struct {
		secs, lat float64
	}{{1e-3, 1e-3}, {1e-3, 2e-3}, {math.Inf(1), 0}, {math.NaN(), 0}} {
		if got := memoryRate(4, 1e6, c.secs, c.lat); got != 0 {
			t.Errorf("memoryRate(secs %g, lat %g) = %g, want 0: no time left for the bytes", c.secs, c.lat, got)
		}
	}
}

func TestSaturated(t *testing.T) {
	for _, c := range []struct {
		k, cores int
		all, one float64
		want     bool
	}{
		{2, 2, 20e9, 10e9, true},   // a rank per core
		{4, 2, 20e9, 10e9, true},   // oversubscribed
		{4, 16, 39e9, 10e9, false}, // copies scale with the ranks: a lower bound
		{4, 16, 29e9, 10e9, true},  // below 0.75 × 4 × one rank's
		{16, 16, 60e9, 10e9, true}, // a rank per core
		{4, 16, 0, 10e9, false},    // not measured
	} {
		if got := saturated(c.k, c.cores, c.all, c.one); got != c.want {
			t.Errorf("saturated(%d ranks, %d cores, %g, %g) = %v, want %v", c.k, c.cores, c.all, c.one, got, c.want)
		}
	}
}

// TestCombineFits checks which job's figures a table gets: the largest
// memory rate among jobs whose ranks contend, the largest rate of a rank
// among jobs whose ranks do not, the overhead of the job with the most
// ranks that measured it, and the defaults otherwise, with a note for
// each.
func TestCombineFits(t *testing.T) {
	def := cost.Default()
	two := modelFit{Ranks: 2, Cores: 16,
		Memory:   memoryFit{Bytes: 16 << 20, Secs: 3e-3, Moved: 24 << 20, Rate: 17e9, CopyAll: 19e9, CopyOne: 10e9},
		Overhead: overheadFit{Skipped: "on 2 ranks every step of these algorithms has one peer"}}
	four := modelFit{Ranks: 4, Cores: 16,
		Memory:   memoryFit{Bytes: 16 << 20, Secs: 4e-3, Moved: 28 << 20, Rate: 30e9, CopyAll: 25e9, CopyOne: 10e9, Saturated: true},
		Overhead: overheadFit{OK: true, Alpha: 1e-6, O: 0.3e-6, Runs: []overheadRun{{Coll: "allreduce", Algo: "direct", Secs: 3e-6}}}}
	eight := modelFit{Ranks: 8, Cores: 16,
		Memory:   memoryFit{Bytes: 16 << 20, Secs: 6e-3, Moved: 30 << 20, Rate: 40e9, CopyAll: 60e9, CopyOne: 10e9, Saturated: true},
		Overhead: overheadFit{OK: true, Alpha: 1e-6, O: 0.6e-6}}
	for _, c := range []struct {
		name                   string
		fits                   []modelFit
		memory, core, overhead float64
		notes                  []string
	}{
		{"2 and 4 ranks", []modelFit{two, four}, 30e9, 8.5e9, 0.3e-6,
			[]string{"memory, 2 ranks", "a lower bound", "overhead, 2 ranks: not measured", "memory, 4 ranks", "o 0.30us", "memory: the 4-rank figure",
				"core: a rank's rate in the 2-rank job", "overhead: the 4-rank figure"}},
		{"8, 4 and 2 ranks", []modelFit{eight, four, two}, 40e9, 8.5e9, 0.6e-6,
			[]string{"memory: the 8-rank figure", "overhead: the 8-rank figure"}},
		{"2 ranks", []modelFit{two}, def.Memory, 8.5e9, def.Overhead,
			[]string{"memory: the built-in 52GB/s", "-n 16", "overhead: the built-in 0.50us"}},
		{"4 and 8 ranks, contending", []modelFit{four, eight}, 40e9, def.Core, 0.6e-6,
			[]string{"core: the built-in 6.5GB/s", "-n 2"}},
		{"tcp", []modelFit{{Ranks: 4, Cores: 16, Memory: memoryFit{Skipped: "tcp"}, Overhead: overheadFit{Skipped: "tcp"}}}, def.Memory, def.Core, def.Overhead,
			[]string{"memory, 4 ranks: not measured (tcp)", "overhead, 4 ranks: not measured (tcp)"}},
	} {
		memory, core, overhead, notes := combineFits(c.fits, def)
		if memory != c.memory || core != c.core || overhead != c.overhead {
			t.Errorf("%s: memory %g, core %g, overhead %g; want %g, %g, %g", c.name, memory, core, overhead, c.memory, c.core, c.overhead)
		}
		all := strings.Join(notes, "\n")
		for _, w := range c.notes {
			if !strings.Contains(all, w) {
				t.Errorf("%s: notes lack %q:\n%s", c.name, w, all)
			}
		}
	}
	file := filepath.Join(t.TempDir(), "part.fit")
	if err := writeFit(file, four); err != nil {
		t.Fatal(err)
	}
	if back, err := readFit(file); err != nil || !reflect.DeepEqual(back, four) {
		t.Errorf("fit file: %+v, %v; want %+v", back, err, four)
	}
}
