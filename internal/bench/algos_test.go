package bench_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// runOn runs bench.Run with cfg on every rank of a local job of n ranks
// created with opts, and returns rank 0's rows and every rank's error.
func runOn(t *testing.T, n int, opts *braid.Options, cfg bench.Config) ([]bench.Row, []error) {
	t.Helper()
	comms, err := braid.NewLocal(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows := make([][]bench.Row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[r], errs[r] = bench.Run(ctx, comms[r], cfg)
		}()
	}
	wg.Wait()
	for r := 1; r < n; r++ {
		if len(rows[r]) != len(rows[0]) {
			t.Fatalf("rank %d has %d rows, rank 0 %d", r, len(rows[r]), len(rows[0]))
		}
		for i := range rows[r] {
			if a, b := rows[r][i], rows[0][i]; a.Algo != b.Algo || a.Ran != b.Ran || a.Bytes != b.Bytes || a.Iters != b.Iters {
				t.Errorf("rank %d row %+v differs from rank 0's %+v", r, a, b)
			}
		}
	}
	return rows[0], errs
}

// TestRunAlgos times several algorithms side by side: at each size one row
// per algorithm, in the order given, each checked, each run by the
// algorithm it names.
func TestRunAlgos(t *testing.T) {
	const n = 3
	f, err := bench.NewForcer("none")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range algo.ForCollective(sched.Allreduce) {
		// Algorithms this job cannot run (treepack: it needs trees
		// packed from a topology) are not candidates; Run skips them.
		if a.Supports(sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 2}) != nil {
			continue
		}
		names = append(names, a.Name())
	}
	names = append(names, "segring:seg=64", bench.Auto)
	var progress []bench.Progress
	cfg := bench.Config{Coll: sched.Allreduce, MinSize: 8, MaxSize: 1024, Iters: 2, Warmup: 1, Check: true,
		Algos: names, Forcer: f, Progress: func(p bench.Progress) { progress = append(progress, p) }}
	rows, errs := runOn(t, n, &braid.Options{Planner: f}, cfg)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	sizes := bench.Sizes(8, 1024)
	if len(rows) != len(sizes)*len(names) {
		t.Fatalf("%d rows, want %d sizes × %d algorithms", len(rows), len(sizes), len(names))
	}
	for i, row := range rows {
		name := names[i%len(names)]
		if row.Bytes != sizes[i/len(names)] || row.Algo != name {
			t.Errorf("row %d is %s at %d B, want %s at %d B", i, row.Algo, row.Bytes, name, sizes[i/len(names)])
		}
		if row.Correct != "yes" {
			t.Errorf("%s at %d B: correct %q", row.Algo, row.Bytes, row.Correct)
		}
		ran, err := plan.ParseChoice(row.Ran)
		if err != nil {
			t.Errorf("%s at %d B ran %q: %v", row.Algo, row.Bytes, row.Ran, err)
			continue
		}
		switch {
		case name == bench.Auto:
			// A schedule, or the ranks' shared area.
			if err := choice.Check(sched.Allreduce, ran); err != nil {
				t.Errorf("auto at %d B ran %q: %v", row.Bytes, row.Ran, err)
			}
		case name == "segring:seg=64":
			if row.Ran != name {
				t.Errorf("%s at %d B ran %q, want the segment given", name, row.Bytes, row.Ran)
			}
		default:
			if ran.Algo != name {
				t.Errorf("%s at %d B ran %q", name, row.Bytes, row.Ran)
			}
		}
	}
	if len(progress) != len(rows) {
		t.Fatalf("%d progress reports, want %d", len(progress), len(rows))
	}
	for i, p := range progress {
		if p.Done != i || p.Total != len(rows) || p.Algo != rows[i].Algo || p.Size != rows[i].Bytes || p.Imbalanced {
			t.Errorf("progress %d: %+v, row %+v", i, p, rows[i])
		}
	}
}

// fixed is a planner that always picks one algorithm.
type fixed string

func (f fixed) Plan(r plan.Request, cand []plan.Candidate) plan.Decision {
	for _, c := range cand {
		if c.Name == string(f) {
			return plan.Decision{Algo: c.Name, Params: c.Params, Reason: "test"}
		}
	}
	return plan.Default{}.Plan(r, cand)
}

// TestRunAlgosSkips: a run whose communicator does not run its algorithm
// (here because the Forcer given is not the communicator's planner, which
// always picks recdouble) is left out, on every rank alike.
func TestRunAlgosSkips(t *testing.T) {
	comm := &bench.Forcer{Next: fixed("recdouble")}
	other := &bench.Forcer{}
	var progress []bench.Progress
	cfg := bench.Config{Coll: sched.Allreduce, MinSize: 64, MaxSize: 256, Iters: 2, Warmup: 1, Imbalance: 1,
		Algos: []string{"ring", "recdouble"}, Forcer: other, Progress: func(p bench.Progress) { progress = append(progress, p) }}
	rows, errs := runOn(t, 2, &braid.Options{Planner: comm}, cfg)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("rows %+v, want recdouble's 3 sizes only", rows)
	}
	for _, r := range rows {
		if r.Algo != "recdouble" || r.Ran != "recdouble" {
			t.Errorf("row %+v, want recdouble", r)
		}
	}
	// Each size has two runs of two measurements; ring's are skipped.
	if len(progress) != 3*3 {
		t.Fatalf("%d progress reports, want 9: %+v", len(progress), progress)
	}
	last := progress[len(progress)-1]
	if last.Total != 12 || last.Done != 11 || !last.Imbalanced {
		t.Errorf("last progress %+v, want 11 of 12 done, imbalanced", last)
	}
}

func TestRunAlgosErrors(t *testing.T) {
	f := &bench.Forcer{}
	for _, c := range []struct {
		cfg  bench.Config
		want string
	}{
		{bench.Config{Coll: sched.Allreduce, Algos: []string{"ring"}}, "Forcer"},
		{bench.Config{Coll: sched.Allreduce, Algos: []string{"nosuch"}, Forcer: f}, `no allreduce algorithm named "nosuch"`},
		{bench.Config{Coll: sched.Allreduce, Algos: []string{"ring", "ring"}, Forcer: f}, "twice"},
		{bench.Config{Coll: sched.Allreduce, Algos: []string{"ring:seg"}, Forcer: f}, "key=value"},
		{bench.Config{Coll: sched.Bcast, Algos: []string{"ring"}, Forcer: f}, "no bcast algorithm"},
		{bench.Config{Coll: sched.Allreduce, Imbalance: -1}, "imbalance"},
	} {
		c.cfg.MinSize, c.cfg.MaxSize, c.cfg.Iters = 8, 8, 1
		_, errs := runOn(t, 1, &braid.Options{Planner: f}, c.cfg)
		if errs[0] == nil || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("Algos %q: error %v, want one that says %q", c.cfg.Algos, errs[0], c.want)
		}
	}
}

func TestForcer(t *testing.T) {
	p := sched.Params{Coll: sched.Bcast, NRanks: 4, Count: 1 << 20}
	cand := []plan.Candidate{
		{Name: "binomial", Params: p, Cost: 2},
		{Name: "chain", Params: sched.Params{Coll: sched.Bcast, NRanks: 4, Count: 1 << 20, Segment: 4096}, Cost: 1},
	}
	req := plan.Request{Params: p, ElemSize: 4}
	f := &bench.Forcer{Next: fixed("binomial")}
	for _, c := range []struct {
		set     string
		algo    string
		segment int
	}{
		{"", "binomial", 0},                  // Next
		{bench.Auto, "binomial", 0},          // Next
		{"chain", "chain", 4096},             // the candidate's tuned segment
		{"chain:seg=64K", "chain", 16 << 10}, // the given segment, in elements
		{"knomial", "binomial", 0},           // not a candidate: Next
	} {
		if err := f.Set(c.set); err != nil {
			t.Fatalf("Set(%q): %v", c.set, err)
		}
		d := f.Plan(req, cand)
		if d.Algo != c.algo || d.Params.Segment != c.segment {
			t.Errorf("Set(%q): decision %s segment %d, want %s segment %d", c.set, d.Algo, d.Params.Segment, c.algo, c.segment)
		}
	}
	if err := f.Set("chain:k"); err == nil {
		t.Error(`Set("chain:k"): no error`)
	}
	// The cost model is Next's, so that candidates are costed as without
	// the Forcer.
	var tuned cost.Model = cost.Default()
	tuned.Gamma *= 3
	if m := (&bench.Forcer{Next: plan.Default{Table: &plan.Table{Model: &tuned}}}).Model(); m != tuned {
		t.Errorf("Model() with a table's model = %+v, want %+v", m, tuned)
	}
	if m := (&bench.Forcer{Next: fixed("ring")}).Model(); m != cost.Default() {
		t.Errorf("Model() with a Next without a model = %+v, want the default", m)
	}
}
