package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

func TestTuneSizes(t *testing.T) {
	if got := tuneSizes(8, 64<<20, 4); got[0] != 8 || got[len(got)-1] != 64<<20 || len(got) != 13 {
		t.Errorf("tuneSizes(8, 64M, 4) = %v", got)
	}
	if got := tuneSizes(8, 100, 4); !slices.Equal(got, []int64{8, 32, 100}) {
		t.Errorf("tuneSizes(8, 100, 4) = %v", got)
	}
}

func TestTableEntries(t *testing.T) {
	ch := func(s string) plan.Choice {
		c, err := plan.ParseChoice(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sizes := []int64{8, 32, 128, 512, 2048}
	best := []plan.Choice{ch("recdouble"), ch("recdouble"), ch("ring"), ch("segring:seg=64K"), ch("segring:seg=64K")}
	es := tableEntries(sched.Allreduce, 4, 1, sizes, best)
	want := []string{
		"allreduce ranks=4 hosts=1 size=0-128 recdouble",
		"allreduce ranks=4 hosts=1 size=128-512 ring",
		"allreduce ranks=4 hosts=1 size=512- segring:seg=64K",
	}
	var got []string
	for i := range es {
		got = append(got, es[i].String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%v\nwant\n%v", got, want)
	}
	// Every measured size looks up to the choice measured best there.
	tab := &plan.Table{Entries: es}
	for i, s := range sizes {
		if e := tab.Lookup(sched.Allreduce, 4, 1, s); e == nil || e.Choice != best[i] {
			t.Errorf("size %d: %v, want %v", s, e, best[i])
		}
	}
	if got := tuneRuns(sched.Bcast, 4); !slices.Contains(got, "chain:seg=256K") || !slices.Contains(got, "knomial:k=3") || !slices.Contains(got, "binomial") {
		t.Errorf("tuneRuns(bcast, 4) = %v: want parameter variants", got)
	}
}

// TestTuneWritesMachine runs a small braid tune and checks that its table
// records this machine, names the shared area where it won, and is taken
// by a job here.
func TestTuneWritesMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs braid tune")
	}
	out := filepath.Join(t.TempDir(), "t.txt")
	if o, err := run(t, 120*time.Second, nil, "tune", "-n", "2", "--colls", "allreduce", "--max-size", "64", "--budget", "2ms", "--out", out); err != nil {
		t.Fatalf("braid tune: %v\n%s", err, o)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	here := braid.ThisMachine()
	if want := fmt.Sprintf("machine cores=%d numa=%d\n", here.Cores, here.NUMA); !strings.Contains(string(b), want) {
		t.Errorf("table lacks %q:\n%s", want, b)
	}
	// Two ranks measure the memory rate, not the overhead; the table
	// says so and carries both figures.
	for _, want := range []string{"\nmemory ", "\noverhead ", "# memory, 2 ranks: reducescatter direct of 16M", "# overhead, 2 ranks: not measured"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("table lacks %q:\n%s", want, b)
		}
	}
	if o, err := run(t, 60*time.Second, []string{"BRAID_TUNING=" + out}, "run", "-n", "2", "--", braidBin(), "bench", "allreduce", "--max-size", "64", "--iters", "2", "--check"); err != nil {
		t.Errorf("a job with the table from this machine: %v\n%s", err, o)
	}
}

// TestDeviceTuneTable checks, without a GPU, what braid tune --device
// cuda times and writes: every fused kernel and schedule of a collective
// by the names the planner takes; each size's fastest (the previous
// size's choice kept within tuneTolerance); and a table that records the
// GPUs, names only algorithms Braid has, and looks up to the fastest at
// every measured size.
func TestDeviceTuneTable(t *testing.T) {
	for _, c := range []struct {
		coll sched.Collective
		want []string
	}{
		{sched.Allreduce, []string{"gpu_oneshot", "direct", "ring"}},
		{sched.Bcast, []string{"fused", "chain", "binomial"}},
		{sched.Allgather, []string{"fused", "ring"}},
		{sched.ReduceScatter, []string{"fused", "ring"}},
	} {
		runs := deviceTuneRuns(c.coll)
		for _, w := range c.want {
			if !slices.Contains(runs, w) {
				t.Errorf("%v: runs %v lack %s", c.coll, runs, w)
			}
		}
		if runs[0] != c.want[0] || len(runs) != len(slices.Compact(slices.Clone(runs))) {
			t.Errorf("%v: runs %v: want the fused kernel first, each once", c.coll, runs)
		}
	}
	// Three sizes: the one-shot wins small; direct wins at 1M, and at 16M
	// the ring is 2 % faster, within the tolerance: direct stays.
	timings := []deviceTiming{
		{64 << 10, "gpu_oneshot", 8e-6}, {64 << 10, "direct", 15e-6}, {64 << 10, "ring", 90e-6},
		{1 << 20, "gpu_oneshot", 30e-6}, {1 << 20, "direct", 20e-6}, {1 << 20, "ring", 120e-6},
		{16 << 20, "direct", 100e-6}, {16 << 20, "ring", 98e-6},
		{256 << 20, "direct", 1000e-6}, {256 << 20, "ring", 900e-6}, {256 << 20, "segring", 950e-6},
	}
	sizes, best, err := fastestBySize(timings)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range best {
		names = append(names, b.String())
	}
	if want := []string{"gpu_oneshot", "direct", "direct", "ring"}; !slices.Equal(names, want) || !slices.Equal(sizes, []int64{64 << 10, 1 << 20, 16 << 20, 256 << 20}) {
		t.Errorf("fastest: %v at %v, want %v", names, sizes, want)
	}
	tab := &plan.Table{Machine: plan.Machine{GPUs: 4, GPU: "NVIDIA_H200"}, Entries: tableEntries(sched.Allreduce, 4, 1, sizes, best)}
	var sb strings.Builder
	tab.WriteTo(&sb)
	const want = "machine gpus=4 gpu=NVIDIA_H200\n" +
		"allreduce ranks=4 hosts=1 size=0-1M gpu_oneshot\n" +
		"allreduce ranks=4 hosts=1 size=1M-256M direct\n" +
		"allreduce ranks=4 hosts=1 size=256M- ring\n"
	if sb.String() != want {
		t.Errorf("table\n%s\nwant\n%s", sb.String(), want)
	}
	back, err := plan.ParseTable(strings.NewReader(sb.String()), "cuda.txt")
	if err == nil {
		err = choice.CheckTable(back)
	}
	if err != nil {
		t.Fatalf("the written table does not read back: %v", err)
	}
	for i, s := range sizes {
		if e := back.Lookup(sched.Allreduce, 4, 1, s); e == nil || e.Choice != best[i] {
			t.Errorf("%d bytes: %v, want %v", s, e, best[i])
		}
	}
	if _, err := parseDeviceColls("allreduce,gather"); err == nil {
		t.Error("--colls gather accepted")
	}
}

// TestTuneDeviceArgs runs braid tune --device cuda's argument checks,
// which come before it looks for a GPU, and its run without one.
func TestTuneDeviceArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--colls", "barrier"}, "barrier"},
		{[]string{"--colls", "gather"}, "not tuned on devices"},
		{[]string{"--step", "1"}, "--step 1"},
		{[]string{"--min-size", "1M", "--max-size", "1K"}, "--min-size ≤ --max-size"},
		{[]string{"-n", "1"}, "GPU counts ≥ 2"},
		{[]string{"--multipath", "--reps", "0"}, "--reps ≥ 1"},
	} {
		out, err := run(t, 30*time.Second, nil, append([]string{"tune", "--device", "cuda"}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("braid tune --device cuda %v: %v, %q; want an error with %q", c.args, err, out, c.want)
		}
	}
	if _, err := cuda.DeviceCount(); err == nil {
		t.Skip("a CUDA driver is here: the run without one is not")
	}
	out, err := run(t, 30*time.Second, nil, "tune", "--device", "cuda", "--out", filepath.Join(t.TempDir(), "t.txt"))
	if err == nil || !strings.Contains(out, "no CUDA driver") {
		t.Errorf("braid tune --device cuda without a driver: %v, %q; want an error saying so", err, out)
	}
}
