package braid

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// placeRanks checks o.Devices for a job of n ranks, or fills it with the
// default placement (rank r on the topology's r-th GPU); see
// Options.Devices.
func (o *Options) placeRanks(n int) error {
	t := o.Topology
	if t == nil {
		if o.Devices != nil {
			return errors.New("Options.Devices places ranks on a topology, but there is none (set Options.Topology or BRAID_TOPO)")
		}
		return nil
	}
	if o.Devices == nil {
		gpus := t.GPUs()
		if len(gpus) < n {
			return fmt.Errorf("topology %s has %d GPUs for %d ranks: place the ranks with Options.Devices or give a larger topology", t.Name, len(gpus), n)
		}
		o.Devices = slices.Clone(gpus[:n])
		return nil
	}
	if len(o.Devices) != n {
		return fmt.Errorf("Options.Devices places %d ranks, the job has %d", len(o.Devices), n)
	}
	on := make(map[int]int, n)
	for r, d := range o.Devices {
		if d < 0 || d >= len(t.Devices) {
			return fmt.Errorf("Options.Devices puts rank %d on device %d; topology %s has devices 0-%d", r, d, t.Name, len(t.Devices)-1)
		}
		if q, ok := on[d]; ok {
			return fmt.Errorf("Options.Devices puts ranks %d and %d both on device %s", q, r, t.Devices[d].ID)
		}
		on[d] = r
	}
	return nil
}

// treeCache holds a communicator's packings, by collective and root.
type treeCache struct {
	mu    sync.Mutex
	byKey map[treeKey]packing
}

type treeKey struct {
	coll sched.Collective
	root int // 0 for allreduce
}

// packing is the outcome of packing trees for one collective and root:
// the trees, or why there are none.
type packing struct {
	trees *sched.Trees
	err   error
}

// trees returns the spanning trees the tree-packing algorithm runs p on
// among this communicator's ranks, packed on first use for p's collective
// and root and kept; nil if the communicator has no topology, the
// collective has no tree-packing algorithm, or packing failed (rank 0
// logs why under BRAID_DEBUG=info).
func (c *Comm) trees(p sched.Params) *sched.Trees {
	return c.packing(p).trees
}

func (c *Comm) packing(p sched.Params) packing {
	t := c.w.opts.Topology
	if t == nil || algo.Treepack(p.Coll) == nil {
		return packing{}
	}
	k := treeKey{p.Coll, p.Root}
	if p.Coll == sched.Allreduce {
		k.root = 0
	}
	tc := &c.packs
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if e, ok := tc.byKey[k]; ok {
		return e
	}
	devs := make([]int, len(c.members))
	for i, wr := range c.members {
		devs[i] = c.w.opts.Devices[wr]
	}
	ts, pl, links, err := packTrees(t, devs, k.coll, k.root)
	e := packing{trees: ts, err: err}
	if tc.byKey == nil {
		tc.byKey = map[treeKey]packing{}
	}
	tc.byKey[k] = e
	if c.rank == 0 {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = t.Devices[d].ID
		}
		where := fmt.Sprintf("comm %08x %v root %d on %s (%s)", c.id, k.coll, k.root, t.Name, strings.Join(names, " "))
		if k.coll == sched.Allreduce {
			where = fmt.Sprintf("comm %08x %v on %s (%s)", c.id, k.coll, t.Name, strings.Join(names, " "))
		}
		switch {
		case err != nil:
			c.w.debugf("info", "%s: no trees, treepack is not a candidate: %v", where, err)
		case pl == nil:
			c.w.debugf("info", "%s: one rank, one tree", where)
		default:
			c.w.debugf("info", "%s: packed %d trees over %s links, rate %.4g GB/s of an optimum of %.4g GB/s",
				where, len(ts.Tree), links, pl.Rate, pl.Optimum)
		}
	}
	return e
}

// treesNote explains, for an error about a forced algorithm a, why p has
// no trees when a is the tree-packing algorithm: "" otherwise.
func (c *Comm) treesNote(a algo.Algorithm, p sched.Params) string {
	if p.Trees != nil || a != algo.Treepack(p.Coll) {
		return ""
	}
	if c.w.opts.Topology == nil {
		return " (trees are packed from a topology: set Options.Topology or BRAID_TOPO)"
	}
	if err := c.packing(p).err; err != nil {
		return fmt.Sprintf(" (packing trees on %s failed: %v)", c.w.opts.Topology.Name, err)
	}
	return ""
}

// packTrees packs spanning trees for coll among the ranks on devices devs
// of t (rank i on devs[i]): arborescences out of root for a broadcast;
// for a reduce, whose data flows from the leaves to the root, the
// arborescences out of root of the graph with every edge reversed, so that
// each tree loads the link directions its sends take; for an allreduce,
// undirected trees rooted at their centres (pack.AllReduce). It packs over
// the NVLinks where they span the ranks, else over every link with routes
// through switches, CPUs and NICs, and returns the trees, the packing (nil
// for one rank, whose one tree is the rank alone) and which links it used.
func packTrees(t *topo.Topology, devs []int, coll sched.Collective, root int) (*sched.Trees, *pack.Plan, string, error) {
	if len(devs) == 1 {
		return &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1}, Weight: 1}}}, nil, "", nil
	}
	pl, g, links, err := pack.ForCollective(t, devs, coll, root, "nvlink", "all")
	if errors.Is(err, pack.ErrDisconnected) {
		return nil, nil, "", fmt.Errorf("no spanning trees over any links: %w", err)
	}
	if err != nil {
		return nil, nil, "", err
	}
	ts := pl.SchedTrees(g)
	if err := ts.Validate(len(devs)); err != nil {
		return nil, nil, "", fmt.Errorf("packing over %s links: %v", links, err)
	}
	return ts, pl, links, nil
}
