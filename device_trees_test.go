package braid

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
	"github.com/braid-ccl/braid/topo"
)

// planOnly returns device communicators of n ranks whose planner runs
// without a GPU: every rank's DeviceComm plans as NewDeviceComm's would
// (the communicator's topology and placement, the fused kernels that
// gpu.New would shape with the default settings, the default device
// model), but has no worker and runs nothing. opts may be nil; its Log
// gets the plans (Debug info).
func planOnly(t *testing.T, n int, opts *Options) []*DeviceComm {
	t.Helper()
	comms, err := NewLocal(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(comms) })
	ds := make([]*DeviceComm, n)
	for r, c := range comms {
		d := &DeviceComm{c: c, plans: map[devKey]*devPlan{}, model: plan.DefaultDeviceModel(), topo: c.deviceTopo()}
		cfg := fused.NewConfig(n, fused.Settings{OneShotBytes: d.oneShotMax(), TwoShot: true, Other: true})
		d.shape = &cfg
		ds[r] = d
	}
	return ds
}

// gpusOf returns the topology's devices of the GPUs numbered gpus.
func gpusOf(tp *topo.Topology, gpus ...int) []int {
	all := tp.GPUs()
	out := make([]int, len(gpus))
	for i, g := range gpus {
		out[i] = all[g]
	}
	return out
}

// TestDeviceTreesDGX1 checks the device planner on 3 of the 8 GPUs of a
// DGX-1 V100, GPUs 0, 1 and 5 (Blink, MLSys 2020, §2.1: an allocation
// that no NVLink ring spans: 0 and 5 meet through PCIe and the CPUs):
// broadcast, reduce and allreduce of 256 MiB run as Blink's packed trees
// (over the NVLinks 0-1 and 1-5), which the model costs below the fused
// kernels and the schedules, all bounded by the PCIe route; an 8-byte
// allreduce still runs one-shot. Every rank's program of the choice is
// valid (sched.Validate), and on the simulated DGX-1 (sim.FromTopology)
// faster than the ring, the direct (the two-shot kernel's program) and
// the chain.
func TestDeviceTreesDGX1(t *testing.T) {
	tp := topo.DGX1V100()
	var log planLog
	ds := planOnly(t, 3, &Options{Topology: tp, Devices: gpusOf(tp, 0, 1, 5), Debug: "info", Log: &log})
	const count = 64 << 20 // float32: 256 MiB
	net, err := sim.FromTopology(tp, gpusOf(tp, 0, 1, 5))
	if err != nil {
		t.Fatal(err)
	}
	for _, coll := range []sched.Collective{sched.Bcast, sched.Reduce, sched.Allreduce} {
		p := sched.Params{Coll: coll, NRanks: 3, Count: count, Root: 0}
		if coll == sched.Bcast {
			p.Root = 1
		}
		progs, pl := programsOf(t, ds, p, "")
		if pl.algo != "treepack" {
			t.Errorf("%v of 256 MiB: %s, want treepack\n%s", coll, pl.algo, log.String())
			continue
		}
		tree := simulated(t, net, progs, pl)
		for _, other := range []string{"ring", "direct", "chain", "linear"} {
			if a, err := algo.Lookup(coll, other); err != nil || a.Supports(p) != nil {
				continue
			}
			oprogs, opl := programsOf(t, ds, p, other)
			if o := simulated(t, net, oprogs, opl); o <= tree {
				t.Errorf("%v of 256 MiB on the simulated DGX-1: %s %.3f ms, not slower than treepack's %.3f ms", coll, other, o*1e3, tree*1e3)
			} else {
				t.Logf("%v of 256 MiB on the simulated DGX-1: treepack %.3f ms, %s %.3f ms", coll, tree*1e3, other, o*1e3)
			}
		}
	}
	small, err := ds[0].plan(sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 2}, Float32, Sum)
	if err != nil || small.fused == nil || small.algo != algo.GPUOneShot.Name() {
		t.Errorf("allreduce of 8 B: %+v, %v: want the fused one-shot", small, err)
	}
	out := log.String()
	for _, want := range []string{
		"device bcast root 1 on dgx1-v100 (gpu0 gpu1 gpu5): packed",
		"over peer links",
		"the ranks' narrowest route: ranks 0 and 2 (SYS) at 15.75 GB/s",
		"device allreduce n=3 count=67108864 (268435456 B) root=0: treepack",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestDeviceTreesH200 checks that on an H200 node, whose NVSwitch joins
// the GPUs all to all, the fused kernels still win at 256 MiB, and that
// the log says why: the trees are among the candidates, at a higher cost.
// BRAID_ALGO forces them.
func TestDeviceTreesH200(t *testing.T) {
	tp := topo.HGXH200()
	var log planLog
	ds := planOnly(t, 4, &Options{Topology: tp, Debug: "info", Log: &log})
	for _, coll := range []sched.Collective{sched.Bcast, sched.Allreduce} {
		pl, err := ds[0].plan(sched.Params{Coll: coll, NRanks: 4, Count: 64 << 20}, Float32, Sum)
		if err != nil {
			t.Fatal(err)
		}
		if pl.fused == nil {
			t.Errorf("%v of 256 MiB: %s, want a fused kernel\n%s", coll, pl.algo, log.String())
		}
	}
	out := log.String()
	for _, want := range []string{
		"device bcast n=4 count=67108864 (268435456 B) root=0: fused",
		"device allreduce n=4 count=67108864 (268435456 B) root=0: direct",
	} {
		i := strings.Index(out, want)
		if i < 0 {
			t.Errorf("the log lacks %q:\n%s", want, out)
			continue
		}
		line, _, _ := strings.Cut(out[i:], "\n")
		if !strings.Contains(line, "< treepack:seg=") {
			t.Errorf("the plan's line does not cost the trees: %s", line)
		}
	}
	forced := planOnly(t, 4, &Options{Topology: tp, Algo: "bcast=treepack,allreduce=treepack:seg=1M"})
	for _, coll := range []sched.Collective{sched.Bcast, sched.Allreduce} {
		progs, pl := programsOf(t, forced, sched.Params{Coll: coll, NRanks: 4, Count: 64 << 20}, "")
		if pl.algo != "treepack" || pl.prog == nil {
			t.Errorf("%v forced to treepack: %s", coll, pl.algo)
		}
		if coll == sched.Allreduce && progs[0].Params.Segment != 1<<18 {
			t.Errorf("allreduce forced with seg=1M: segment %d elements", progs[0].Params.Segment)
		}
	}
}

// TestDeviceTreesNoTopology checks that without a topology the trees are
// no candidate, and that forcing them says what is missing.
func TestDeviceTreesNoTopology(t *testing.T) {
	ds := planOnly(t, 2, &Options{Algo: "bcast=treepack"})
	_, err := ds[0].plan(sched.Params{Coll: sched.Bcast, NRanks: 2, Count: 1 << 20}, Float32, Sum)
	var e *Error
	if !errors.As(err, &e) || e.Kind != InvalidArgument || !strings.Contains(err.Error(), "trees are packed from a topology") {
		t.Errorf("treepack forced without a topology: %v", err)
	}
	pl, err := ds[0].plan(sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 1 << 20}, Float32, Sum)
	if err != nil || pl.algo == "treepack" {
		t.Errorf("allreduce without a topology: %+v, %v", pl, err)
	}
}

// rankProgram is a rank's program with the params it was generated for.
type rankProgram struct {
	sched.Program
	Params sched.Params
}

// noFused shapes no fused kernel: every call runs as a program.
type noFused struct{}

func (noFused) Shape(fused.Kind, sched.Params, DType, Op) (fused.Kernel, bool) {
	return fused.Kernel{}, false
}
func (noFused) HostShareOf(*fused.Kernel) int { return 0 }

// programsOf plans p on every rank of ds (forcing algorithm name, unless
// empty, through DeviceOptions.Algo, as a program where a fused kernel
// would stand for it) and returns each rank's program and rank 0's plan;
// every rank must choose alike.
func programsOf(t *testing.T, ds []*DeviceComm, p sched.Params, name string) ([]rankProgram, *devPlan) {
	t.Helper()
	var first *devPlan
	var out []rankProgram
	for r, d := range ds {
		shape := d.shape
		if name != "" {
			d.opts.Algo = map[string]string{p.Coll.String(): name}
			d.shape = noFused{}
			clear(d.plans)
		}
		pl, err := d.plan(p, Float32, Sum)
		if name != "" {
			d.opts.Algo, d.shape = nil, shape
			clear(d.plans)
		}
		if err != nil {
			t.Fatalf("rank %d: %v of %d: %v", r, p.Coll, p.Count, err)
		}
		if first == nil {
			first = pl
		}
		if pl.algo != first.algo || (pl.prog == nil) != (first.prog == nil) {
			t.Fatalf("rank %d plans %s, rank 0 %s", r, pl.algo, first.algo)
		}
		if pl.prog != nil {
			out = append(out, rankProgram{*pl.prog, pl.params})
		}
	}
	return out, first
}

// simulated validates the ranks' programs and returns their time on net.
func simulated(t *testing.T, net *sim.Network, progs []rankProgram, pl *devPlan) float64 {
	t.Helper()
	if len(progs) == 0 {
		t.Fatalf("%s: no programs", pl.algo)
	}
	p := progs[0].Params
	ps := make([]sched.Program, len(progs))
	for r, x := range progs {
		ps[r] = x.Program
	}
	if err := sched.Validate(p, ps); err != nil {
		t.Fatalf("%s: %v", pl.algo, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sim.Run(ctx, p, ps, net, sim.Config{ElemSize: 4})
	if err != nil {
		t.Fatalf("%s: %v", pl.algo, err)
	}
	return res.Time
}

// planLog is a log that the ranks of a test may share.
type planLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *planLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *planLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
