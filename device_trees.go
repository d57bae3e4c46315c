package braid

import (
	"fmt"
	"math"
	"strings"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// kernelShaper is what the device planner asks of the fused kernels: the
// kernel a call would run, and its share through host memory. A
// gpu.Comm is one; so is a fused.Config, which the planner's tests use
// without a GPU.
type kernelShaper interface {
	Shape(kind fused.Kind, p sched.Params, dt dtype.DType, op dtype.Op) (fused.Kernel, bool)
	HostShareOf(a *fused.Kernel) int
}

// devTopo is what a device communicator's planner knows of the links
// among its ranks, from the communicator's topology (Options.Topology,
// BRAID_TOPO) and placement (Options.Devices, which must put each rank on
// the GPU it runs on): the narrowest route between two ranks, which bounds
// the fused kernels (every rank pushes to every peer) and the flat
// schedules (plan.DeviceModel's CostOn and ProgramsOn); and the spanning
// trees packed for the tree-packing algorithm, which the planner weighs
// against them (Blink, MLSys 2020, §3). Nil without a topology: every
// pair is then taken to be as fast as the device model's figures.
type devTopo struct {
	t       *topo.Topology
	devs    []int   // rank r runs on t.Devices[devs[r]]
	pairBps float64 // bytes a second of the narrowest route between two ranks; +Inf for one rank
	pair    [2]int  // the ranks of that route
	packs   map[treeKey]devPacking
}

// devPacking is the trees packed for one collective and root on device
// buffers, or why there are none.
type devPacking struct {
	trees *sched.Trees
	links string  // what they were packed over ("peer"; "none" for one rank)
	rate  float64 // GB/s, the trees' weights together
	err   error
}

// deviceTopo returns what the planner of c's device calls knows of its
// ranks' links, or nil if c has no topology.
func (c *Comm) deviceTopo() *devTopo {
	t := c.w.opts.Topology
	if t == nil || len(c.w.opts.Devices) == 0 {
		return nil
	}
	devs := make([]int, len(c.members))
	for i, wr := range c.members {
		devs[i] = c.w.opts.Devices[wr]
	}
	dt := &devTopo{t: t, devs: devs, pairBps: math.Inf(1), packs: map[treeKey]devPacking{}}
	r := t.Router(nil)
	for a, da := range devs {
		from := r.From(da, nil)
		for b, db := range devs {
			// An unreachable pair (width 0) bounds nothing: the topology
			// is wrong there, and the packing says so.
			if w := from.Width(db) * 1e9; a != b && w > 0 && w < dt.pairBps {
				dt.pairBps, dt.pair = w, [2]int{a, b}
			}
		}
	}
	return dt
}

// names returns the devices of the ranks, for logs.
func (dt *devTopo) names() string {
	s := make([]string, len(dt.devs))
	for i, d := range dt.devs {
		s[i] = dt.t.Devices[d].ID
	}
	return strings.Join(s, " ")
}

// narrowest describes the narrowest route between two ranks, for logs.
func (dt *devTopo) narrowest() string {
	if math.IsInf(dt.pairBps, 1) {
		return "one rank"
	}
	a, b := dt.pair[0], dt.pair[1]
	return fmt.Sprintf("ranks %d and %d (%s) at %.4g GB/s", a, b, dt.t.PathLabel(dt.devs[a], dt.devs[b]), dt.pairBps/1e9)
}

// packing returns the trees of p's collective and root, packed on first
// use and kept, over the paths of the GPUs' copies to each other
// (pack.ForCollective's "peer"): every direct link, and the widest route
// through PCIe switches, CPUs or NVSwitches between two GPUs that no
// direct link joins. Unlike a host call's (Comm.packing), they hold no
// PCIe trees between GPUs that have an NVLink: a push from one GPU to
// another takes their NVLink where they have one, whatever the tree, so
// that Blink's PCIe trees (§3.4), which need peer access switched off,
// would load the NVLinks instead.
func (dt *devTopo) packing(p sched.Params) devPacking {
	if algo.Treepack(p.Coll) == nil {
		return devPacking{}
	}
	k := treeKey{p.Coll, p.Root}
	if p.Coll == sched.Allreduce {
		k.root = 0
	}
	if e, ok := dt.packs[k]; ok {
		return e
	}
	var e devPacking
	if len(dt.devs) == 1 {
		e = devPacking{trees: &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1}, Weight: 1}}}, links: "none", rate: math.Inf(1)}
	} else if pl, g, links, err := pack.ForCollective(dt.t, dt.devs, k.coll, k.root, "peer"); err != nil {
		e.err = err
	} else {
		e = devPacking{trees: pl.SchedTrees(g), links: links, rate: pl.Rate}
		if err := e.trees.Validate(len(dt.devs)); err != nil {
			e = devPacking{err: fmt.Errorf("packing over %s links: %v", links, err)}
		}
	}
	dt.packs[k] = e
	return e
}

// treeCandidate returns the tree-packing algorithm's candidate for p (whose
// Trees are set) on device buffers: with DeviceOptions.Segment, or the
// segment forced, else the segment that minimises its cost; costed by
// algo.TreepackOnLinks with the device model's programs for the ranks'
// ports and the trees' weights (GB/s) for their links. ok is false where
// the algorithm cannot run p.
func (d *DeviceComm) treeCandidate(p sched.Params, es int, force plan.Choice) (plan.Candidate, bool) {
	a := algo.Treepack(p.Coll)
	if a == nil || p.Trees == nil {
		return plan.Candidate{}, false
	}
	p.Segment = 0
	if d.opts.Segment > 0 {
		p.Segment = max(d.opts.Segment/es, 1)
	}
	if force.Algo == a.Name() {
		p = force.Apply(p, es)
	}
	if a.Supports(p) != nil {
		return plan.Candidate{}, false
	}
	p, c := algo.TreepackOnLinks(p, es, d.model.Programs, 1e9)
	return plan.Candidate{Name: a.Name(), Params: p, Cost: c}, true
}

// trees returns the trees that p's tree-packing candidate runs on, or
// nil; rank 0 logs the packing the first time (BRAID_DEBUG=info).
func (d *DeviceComm) trees(p sched.Params) *sched.Trees {
	dt := d.topo
	if dt == nil {
		return nil
	}
	k := treeKey{p.Coll, p.Root}
	if p.Coll == sched.Allreduce {
		k.root = 0
	}
	_, seen := dt.packs[k]
	e := dt.packing(p)
	if c := d.c; !seen && c.rank == 0 && algo.Treepack(p.Coll) != nil {
		where := fmt.Sprintf("device %v root %d on %s (%s)", k.coll, k.root, dt.t.Name, dt.names())
		if k.coll == sched.Allreduce {
			where = fmt.Sprintf("device %v on %s (%s)", k.coll, dt.t.Name, dt.names())
		}
		if e.err != nil {
			c.w.debugf("info", "%s: no trees, treepack is not a candidate: %v", where, e.err)
		} else {
			c.w.debugf("info", "%s: packed %d trees over %s links, rate %.4g GB/s (the ranks' narrowest route: %s)",
				where, len(e.trees.Tree), e.links, e.rate, dt.narrowest())
		}
	}
	return e.trees
}

// treesNote explains, for an error about a forced tree-packing algorithm
// on device buffers, why p has no trees: "" otherwise.
func (d *DeviceComm) treesNote(force plan.Choice, p sched.Params) string {
	a := algo.Treepack(p.Coll)
	if a == nil || force.Algo != a.Name() || p.Trees != nil {
		return ""
	}
	if d.topo == nil {
		return " (trees are packed from a topology: set Options.Topology or BRAID_TOPO, and Options.Devices where the ranks are not on the topology's first GPUs in order)"
	}
	if err := d.topo.packing(p).err; err != nil {
		return fmt.Sprintf(" (packing trees on %s failed: %v)", d.topo.t.Name, err)
	}
	return ""
}

// pairBps is the bytes a second of the narrowest route between two ranks
// (devTopo), +Inf without a topology.
func (d *DeviceComm) pairBps() float64 {
	if d.topo == nil {
		return math.Inf(1)
	}
	return d.topo.pairBps
}
