package braid

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/gpu/multipath"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// TestDeviceTables checks, without a GPU, how a device communicator reads
// its tables (DeviceOptions.Tuning and MultiPath, BRAID_GPU_TUNING and
// BRAID_GPU_MULTIPATH, the cached device table): once, into Table and
// MultiPathTable; a device table measured on other GPUs, or a host
// table, is refused when named and left out aloud when cached; a table
// set in code is kept as it is.
func TestDeviceTables(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const entries = "allreduce ranks=4 hosts=1 size=0-512K gpu_oneshot\nallreduce ranks=4 hosts=1 size=512K- direct\nbcast ranks=* hosts=* size=0- fused\n"
	here := plan.Machine{GPUs: 4, GPU: "NVIDIA_H200"}
	asked := 0
	thisMachine := func() (plan.Machine, error) { asked++; return here, nil }
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	good := write("good.txt", "machine gpus=4 gpu=NVIDIA_H200\n"+entries)
	other := write("other.txt", "machine gpus=8 gpu=NVIDIA_H100_80GB_HBM3\n"+entries)
	hostTable := write("host.txt", "machine cores=16 numa=1\nallreduce ranks=* hosts=* size=0- ring\n")
	handMade := write("hand.txt", entries)
	typo := write("typo.txt", "machine gpus=4 gpu=NVIDIA_H200\nallreduce ranks=4 hosts=1 size=0- gpu_oneshoot\n")
	mp := write("mp.txt", "size=0-64M direct\nsize=64M- host=0.1 chunks=8\n")

	for _, c := range []struct {
		name  string
		opts  DeviceOptions
		env   map[string]string
		table string // the table's source, "" for none
		mp    bool
		err   string // in the error; "" for none
	}{
		{name: "nothing", table: ""},
		{name: "Tuning", opts: DeviceOptions{Tuning: good}, table: good},
		{name: "BRAID_GPU_TUNING", env: map[string]string{"BRAID_GPU_TUNING": good}, table: good},
		{name: "Tuning wins over the variable", opts: DeviceOptions{Tuning: good}, env: map[string]string{"BRAID_GPU_TUNING": other}, table: good},
		{name: "none", opts: DeviceOptions{Tuning: "none"}, env: map[string]string{"BRAID_GPU_TUNING": good}},
		{name: "written by hand", opts: DeviceOptions{Tuning: handMade}, table: handMade},
		{name: "other GPUs", opts: DeviceOptions{Tuning: other}, err: "DeviceOptions.Tuning=\"" + other + "\": tuning table " + other + " was measured on 8 GPUs NVIDIA_H100_80GB_HBM3, this machine has 4 GPUs NVIDIA_H200: run braid tune --device cuda here"},
		{name: "other GPUs by the variable", env: map[string]string{"BRAID_GPU_TUNING": other}, err: "BRAID_GPU_TUNING=\"" + other + "\": "},
		{name: "a host table", env: map[string]string{"BRAID_GPU_TUNING": hostTable}, err: "records no GPUs"},
		{name: "an unknown algorithm", env: map[string]string{"BRAID_GPU_TUNING": typo}, err: "gpu_oneshoot"},
		{name: "no such file", opts: DeviceOptions{Tuning: filepath.Join(dir, "nope.txt")}, err: "DeviceOptions.Tuning="},
		{name: "MultiPath", opts: DeviceOptions{MultiPath: mp}, mp: true},
		{name: "BRAID_GPU_MULTIPATH", env: map[string]string{"BRAID_GPU_MULTIPATH": mp}, mp: true},
		{name: "BRAID_GPU_MULTIPATH none", env: map[string]string{"BRAID_GPU_MULTIPATH": "none"}},
		{name: "a bad multi-path table", env: map[string]string{"BRAID_GPU_MULTIPATH": good}, err: "BRAID_GPU_MULTIPATH="},
	} {
		o := c.opts
		_, err := o.loadTables(env(c.env), thisMachine)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if src := ""; o.Table != nil {
			if src = o.Table.Source; src != c.table {
				t.Errorf("%s: table %q, want %q", c.name, src, c.table)
			}
		} else if c.table != "" {
			t.Errorf("%s: no table, want %q", c.name, c.table)
		}
		if (o.MultiPathTable != nil) != c.mp {
			t.Errorf("%s: multi-path table %v, want one: %v", c.name, o.MultiPathTable, c.mp)
		}
	}
	// The machine is asked only of tables that record GPUs.
	asked = 0
	o := DeviceOptions{Tuning: handMade}
	if _, err := o.loadTables(env(nil), thisMachine); err != nil || asked != 0 {
		t.Errorf("a table without a machine line: %v, the machine asked %d times", err, asked)
	}
	// Tables set in code are kept, and not read again.
	mine := &plan.Table{Source: "mine"}
	o = DeviceOptions{Table: mine, Tuning: other, MultiPathTable: multipath.DefaultTable(), MultiPath: good}
	if _, err := o.loadTables(env(nil), thisMachine); err != nil || o.Table != mine || o.MultiPathTable.Source != "built-in" {
		t.Errorf("tables set in code: %v, %v, %v", err, o.Table, o.MultiPathTable)
	}

	// The cached table: taken where it was measured here, left out aloud
	// where it was not.
	cached := DefaultDeviceTuningFile()
	if cached == "" || !strings.HasPrefix(cached, dir) {
		t.Fatalf("DefaultDeviceTuningFile %q, want it under XDG_CACHE_HOME", cached)
	}
	write(strings.TrimPrefix(cached, dir+"/"), "machine gpus=4 gpu=NVIDIA_H200\n"+entries)
	o = DeviceOptions{}
	if notes, err := o.loadTables(env(nil), thisMachine); err != nil || len(notes) != 0 || o.Table == nil || o.Table.Source != cached {
		t.Errorf("the cached table from here: %v, %q, %v", err, notes, o.Table)
	}
	write(strings.TrimPrefix(cached, dir+"/"), "machine gpus=2 gpu=NVIDIA_H200\n"+entries)
	o = DeviceOptions{}
	notes, err := o.loadTables(env(nil), thisMachine)
	if err != nil || o.Table != nil || len(notes) != 1 || !strings.Contains(notes[0], "ignoring the cached tuning table "+cached) || !strings.Contains(notes[0], "BRAID_GPU_TUNING=none") {
		t.Errorf("the cached table from other GPUs: %v, %q, %v; want it left out with a note", err, notes, o.Table)
	}
	o = DeviceOptions{}
	if notes, err := o.loadTables(env(map[string]string{"BRAID_GPU_TUNING": "none"}), thisMachine); err != nil || len(notes) != 0 || o.Table != nil {
		t.Errorf("BRAID_GPU_TUNING=none with a cached table: %v, %q, %v", err, notes, o.Table)
	}
	// The multi-path table is not read from the cache.
	write(strings.TrimPrefix(DefaultMultiPathFile(), dir+"/"), "size=0- host=0.5 chunks=2\n")
	o = DeviceOptions{}
	if _, err := o.loadTables(env(nil), thisMachine); err != nil || o.MultiPathTable != nil {
		t.Errorf("a cached multi-path table: %v, %v; want none read", err, o.MultiPathTable)
	}

	// The ranks compare what they read: a different table is a different
	// setting, the same table the same.
	a, b, c := DeviceOptions{Tuning: good}, DeviceOptions{Tuning: good}, DeviceOptions{Tuning: handMade}
	for _, x := range []*DeviceOptions{&a, &b, &c} {
		if _, err := x.loadTables(env(nil), thisMachine); err != nil {
			t.Fatal(err)
		}
	}
	setting := func(o *DeviceOptions, name string) string {
		for _, s := range o.shared() {
			if strings.HasPrefix(s.Name, name) {
				return s.Value
			}
		}
		t.Fatalf("no shared setting %s", name)
		return ""
	}
	if setting(&a, "DeviceOptions.Table") != setting(&b, "DeviceOptions.Table") || setting(&a, "DeviceOptions.Table") == setting(&c, "DeviceOptions.Table") {
		t.Errorf("table digests: %q, %q, %q; want the first two alike and the third not", setting(&a, "DeviceOptions.Table"), setting(&b, "DeviceOptions.Table"), setting(&c, "DeviceOptions.Table"))
	}
	if setting(&a, "DeviceOptions.MultiPathTable") != "none" {
		t.Errorf("no multi-path table: %q", setting(&a, "DeviceOptions.MultiPathTable"))
	}
}

// TestDeviceTablesNoGPU runs NewDeviceComm with a bad table named by the
// variables, without a GPU: every rank fails with an InvalidArgument that
// names the variable, before it needs a driver.
func TestDeviceTablesNoGPU(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host.txt")
	if err := os.WriteFile(host, []byte("machine cores=16 numa=1\nallreduce ranks=* hosts=* size=0- ring\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, v string }{
		{"BRAID_GPU_TUNING", host},
		{"BRAID_GPU_MULTIPATH", filepath.Join(dir, "missing.txt")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.v)
			comms, err := NewLocal(2, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll(comms)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for i, c := range comms {
				wg.Go(func() { _, errs[i] = c.NewDeviceComm(ctx, 0, nil) })
			}
			wg.Wait()
			for i, err := range errs {
				var e *Error
				if !errors.As(err, &e) || e.Kind != InvalidArgument || !strings.Contains(err.Error(), c.name) {
					t.Errorf("rank %d: %v, want an InvalidArgument error naming %s", i, err, c.name)
				}
			}
		})
	}
}

// TestDeviceDecide checks the device planner's choice among a call's
// candidates without a GPU, with fake candidates: what forces one wins,
// then BRAID_ALGO's bare entry, then the tuning table (past the caps'
// defaults, not past a cap the caller set), then the model among the
// uncapped.
func TestDeviceDecide(t *testing.T) {
	const n, count = 4, 4 << 20 // 16 MiB of float32
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count}
	req := plan.Request{Params: p, ElemSize: 4}
	one := &plan.Fused{Kind: plan.FusedOneShot, Blocks: 64, Threads: 512, Rounds: 1}
	two := &plan.Fused{Kind: plan.FusedTwoShot, Blocks: 64, Threads: 512, Rounds: 2, HostBytes: 1024, HostShare: 8}
	seg := p
	seg.Segment = count / 16
	cand := []plan.Candidate{
		{Name: "gpu_oneshot", Params: p, Cost: 1e-4, Fused: one}, // the cheapest, but over the one-shot cap
		{Name: "direct", Params: p, Cost: 2e-4, Fused: two},
		{Name: "ring", Params: p, Cost: 3e-4},
		{Name: "segring", Params: seg, Cost: 4e-4},
		{Name: "recdouble", Params: p, Cost: math.NaN()},
	}
	table := func(line string) *plan.Table {
		tb, err := plan.ParseTable(strings.NewReader("machine gpus=4 gpu=NVIDIA_H200\n"+line+"\n"), "cuda.txt")
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	capped := map[string]bool{"gpu_oneshot": true}
	for _, c := range []struct {
		name   string
		dd     devDecider
		algo   string
		fused  *plan.Fused
		reason string
		seg    int
	}{
		{"the model among the uncapped", devDecider{capped: capped}, "direct", two, "cost model", 0},
		{"forced past the cap", devDecider{force: plan.Choice{Algo: "gpu_oneshot"}, forcedBy: "DeviceOptions.Algo", capped: capped},
			"gpu_oneshot", one, "forced by DeviceOptions.Algo", 0},
		{"forced over the table", devDecider{force: plan.Choice{Algo: "ring"}, forcedBy: "BRAID_ALGO=allreduce=ring", table: table("allreduce ranks=4 hosts=1 size=0- direct")},
			"ring", nil, "forced by BRAID_ALGO=allreduce=ring", 0},
		{"BRAID_ALGO's bare entry", devDecider{bare: plan.Choice{Algo: "segring"}, capped: capped, table: table("allreduce ranks=4 hosts=1 size=0- direct")},
			"segring", nil, "forced by BRAID_ALGO=segring", 0},
		{"a bare entry for a capped candidate", devDecider{bare: plan.Choice{Algo: "gpu_oneshot"}, capped: capped},
			"direct", two, "cost model", 0},
		{"the table over the model", devDecider{capped: capped, table: table("allreduce ranks=4 hosts=1 size=0- ring")},
			"ring", nil, "tuning table cuda.txt: allreduce ranks=4 hosts=1 size=0- ring", 0},
		{"the table with a segment", devDecider{capped: capped, table: table("allreduce ranks=* hosts=* size=0- segring:seg=4M")},
			"segring", nil, "tuning table cuda.txt", 1 << 20},
		{"the table past a default cap", devDecider{capped: capped, set: map[string]bool{}, table: table("allreduce ranks=4 hosts=1 size=8M- gpu_oneshot")},
			"gpu_oneshot", one, "tuning table cuda.txt", 0},
		{"not past a cap the caller set", devDecider{capped: capped, set: capped, table: table("allreduce ranks=4 hosts=1 size=8M- gpu_oneshot")},
			"direct", two, "cost model", 0},
		{"the table's entry for other sizes", devDecider{capped: capped, table: table("allreduce ranks=4 hosts=1 size=0-1M ring")},
			"direct", two, "cost model", 0},
		{"the table's entry for other GPU counts", devDecider{capped: capped, table: table("allreduce ranks=2 hosts=1 size=0- ring")},
			"direct", two, "cost model", 0},
		{"the table names a schedule the call lacks", devDecider{capped: capped, table: table("allreduce ranks=4 hosts=1 size=0- rabenseifner")},
			"direct", two, "cost model", 0},
	} {
		dec, err := c.dd.decide(req, cand)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if dec.Algo != c.algo || dec.Fused != c.fused || !strings.HasPrefix(dec.Reason, c.reason) {
			t.Errorf("%s: %s [%v] (%s), want %s [%v] (%s...)", c.name, dec.Algo, dec.Fused, dec.Reason, c.algo, c.fused, c.reason)
		}
		if c.seg > 0 && dec.Params.Segment != c.seg {
			t.Errorf("%s: segment %d elements, want %d", c.name, dec.Params.Segment, c.seg)
		}
		src := map[string]plan.Source{"cost model": plan.FromModel, "forced by": plan.FromForce, "tuning table": plan.FromTable}
		for prefix, want := range src {
			if strings.HasPrefix(c.reason, prefix) && dec.Source != want {
				t.Errorf("%s: source %v, want %v", c.name, dec.Source, want)
			}
		}
	}
	// A forced algorithm that the call has no candidate for.
	dd := devDecider{force: plan.Choice{Algo: "chain"}, forcedBy: "DeviceOptions.Algo"}
	if _, err := dd.decide(req, cand); err == nil || !strings.Contains(err.Error(), "DeviceOptions.Algo forces chain") || !strings.Contains(err.Error(), "candidates: gpu_oneshot, direct, ring") {
		t.Errorf("forcing a missing candidate: %v", err)
	}
	// No candidate: no decision.
	if dec, err := (&devDecider{}).decide(req, nil); err != nil || dec.Algo != "" {
		t.Errorf("no candidates: %q, %v", dec.Algo, err)
	}
}
