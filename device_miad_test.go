package braid

import (
	"strings"
	"testing"

	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// TestDeviceMIADScope checks where MIAD adapts a device program's
// segment, without a GPU: the trees of a 256 MiB broadcast on 3 GPUs of a
// DGX-1, the planner's choice or forced without a segment, start at a
// quarter of the tuned segment; not where an option, BRAID_ALGO's segment
// or a tuning table's fixes it, not with DisableMIAD or stream-ordered
// calls, not below 1 MiB, not for a fused kernel; and host calls gate it
// alike (miadScope.start).
func TestDeviceMIADScope(t *testing.T) {
	tp := topo.DGX1V100()
	at := gpusOf(tp, 0, 1, 5)
	big := sched.Params{Coll: sched.Bcast, NRanks: 3, Count: 64 << 20, Root: 1}
	table := func(line string) *plan.Table {
		tb, err := plan.ParseTable(strings.NewReader("machine gpus=8 gpu=Tesla_V100-SXM2-16GB\n"+line+"\n"), "cuda.txt")
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	for _, c := range []struct {
		name  string
		opts  Options
		dopts DeviceOptions
		p     sched.Params
		miad  bool
	}{
		{"the planner's trees", Options{}, DeviceOptions{}, big, true},
		{"trees forced without a segment", Options{Algo: "bcast=treepack"}, DeviceOptions{}, big, true},
		{"BRAID_ALGO's segment", Options{Algo: "bcast=treepack:seg=4M"}, DeviceOptions{}, big, false},
		{"DeviceOptions.Segment", Options{}, DeviceOptions{Segment: 8 << 20}, big, false},
		{"DisableMIAD", Options{DisableMIAD: true}, DeviceOptions{}, big, false},
		{"stream-ordered", Options{}, DeviceOptions{StreamOrdered: true}, big, false},
		{"a table's entry with a segment", Options{}, DeviceOptions{Table: table("bcast ranks=3 hosts=1 size=0- treepack:seg=2M")}, big, false},
		{"a table's entry without one", Options{}, DeviceOptions{Table: table("bcast ranks=3 hosts=1 size=0- treepack")}, big, true},
		{"below 1 MiB", Options{Algo: "bcast=treepack"}, DeviceOptions{}, sched.Params{Coll: sched.Bcast, NRanks: 3, Count: 200 << 10}, false},
		{"a fused kernel", Options{Algo: "bcast=fused"}, DeviceOptions{}, big, false},
	} {
		o := c.opts
		o.Topology, o.Devices = tp, at
		d := planOnly(t, 3, &o)[0]
		d.opts = c.dopts
		pl, err := d.plan(c.p, Float32, Sum)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := pl.miad != nil; got != c.miad {
			t.Errorf("%s: %s, MIAD %v, want %v", c.name, pl.algo, got, c.miad)
			continue
		}
		if !c.miad {
			continue
		}
		// The tuned segment, as the plan had it before MIAD.
		tuned, _ := d.treeCandidate(sched.Params{Coll: c.p.Coll, NRanks: 3, Count: c.p.Count, Root: c.p.Root, Trees: pl.params.Trees}, 4, plan.Choice{})
		if want := max(tuned.Params.Segment/4, deviceMIAD.minSegment/4); pl.params.Segment != want {
			t.Errorf("%s: MIAD starts at %d elements, want %d (a quarter of %d)", c.name, pl.params.Segment, want, tuned.Params.Segment)
		}
	}
}

// TestDeviceMIADTrials feeds every rank's plan the same trial times
// (those of a pipeline whose per-message cost and fill make a best
// segment, as Blink's Figure 12 shows, MLSys 2020 §4.2.1): the ranks make
// the same moves, end on the segment MIAD alone would, with programs that
// are valid together, and rank 0 logs the settlement.
func TestDeviceMIADTrials(t *testing.T) {
	tp := topo.DGX1V100()
	var log planLog
	ds := planOnly(t, 3, &Options{Topology: tp, Devices: gpusOf(tp, 0, 1, 5), Debug: "info", Log: &log})
	p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 64 << 20}
	pls := make([]*devPlan, len(ds))
	for r, d := range ds {
		pl, err := d.plan(p, Float32, Sum)
		if err != nil || pl.miad == nil {
			t.Fatalf("rank %d: %s, MIAD %v, %v", r, pl.algo, pl.miad != nil, err)
		}
		pls[r] = pl
	}
	// Seconds for a segment: 25 µs a piece, the bytes at 40 GB/s, and a
	// fill of one piece per tree level.
	bytes := float64(plan.Size(p, 4))
	seconds := func(seg int) float64 {
		pieces := float64((p.Count + seg - 1) / seg)
		return pieces*25e-6 + bytes/40e9 + 3*float64(seg)*4/40e9
	}
	ref := plan.NewMIAD(pls[0].params.Segment, deviceMIAD.minSegment/4, p.Count)
	for trial := 0; pls[0].miad != nil; trial++ {
		if trial > plan.MIADMaxTrials {
			t.Fatal("MIAD did not settle")
		}
		seg := pls[0].params.Segment
		if seg != ref.Segment() {
			t.Fatalf("trial %d: the plan tries %d elements, MIAD alone %d", trial, seg, ref.Segment())
		}
		t.Logf("trial %d: %d elements", trial, seg)
		ti := seconds(seg)
		ref.Observe(bytes / ti)
		for r, d := range ds {
			if pls[r].params.Segment != seg {
				t.Fatalf("trial %d: rank %d tries %d elements, rank 0 %d", trial, r, pls[r].params.Segment, seg)
			}
			d.observe(pls[r], ti)
		}
	}
	if !ref.Done() || pls[0].params.Segment != ref.Segment() {
		t.Errorf("settled on %d elements, MIAD alone on %d (done %v)", pls[0].params.Segment, ref.Segment(), ref.Done())
	}
	progs := make([]sched.Program, len(pls))
	for r, pl := range pls {
		if pl.params.Segment != pls[0].params.Segment || pl.prog == nil {
			t.Fatalf("rank %d settled on %d elements, rank 0 on %d", r, pl.params.Segment, pls[0].params.Segment)
		}
		progs[r] = *pl.prog
	}
	if err := sched.Validate(pls[0].params, progs); err != nil {
		t.Errorf("the settled programs: %v", err)
	}
	if out := log.String(); !strings.Contains(out, "MIAD adapts the segment from") || !strings.Contains(out, "MIAD settled on treepack:seg=") {
		t.Errorf("the log does not show MIAD adapting and settling:\n%s", out)
	}
}
