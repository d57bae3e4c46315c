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
	ts, pl, links, share, err := packTrees(t, devs, k.coll, k.root)
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
		case share > 0:
			c.w.debugf("info", "%s: packed %d trees over %s links, rate %.4g GB/s: NVLink trees %.4g GB/s of an optimum of %.4g GB/s, PCIe trees %.4g GB/s carrying %.1f%% of the bytes (Blink eq. 8)",
				where, len(ts.Tree), links, ts.Rate(), pl.Rate, pl.Optimum, ts.Rate()-pl.Rate, 100*share)
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
// of t (rank i on devs[i]) as pack.TreesFor decides them: where the
// NVLinks span the ranks, the NVLink trees with Blink's PCIe trees beside
// them (MLSys 2020, §3.4), the bytes split in proportion to the two sets'
// rates (eq. 8 with no time to switch peer access off: host transports
// have none), the PCIe trees' edges marked relayed; else trees over every
// link with routes through switches, CPUs and NICs. Broadcast trees are
// arborescences out of root; a reduce's are those of the graph with every
// edge reversed, so that each tree loads the link directions its sends
// take; an allreduce's are undirected trees rooted at their centres. It
// returns the trees, the packing of the NVLink set (or of every link; nil
// for one rank, whose one tree is the rank alone), what they were packed
// over and the PCIe trees' share of the bytes.
func packTrees(t *topo.Topology, devs []int, coll sched.Collective, root int) (*sched.Trees, *pack.Plan, string, float64, error) {
	if len(devs) == 1 {
		return &sched.Trees{Tree: []sched.Tree{{Root: 0, Parent: []int{-1}, Weight: 1}}}, nil, "", 0, nil
	}
	pk, err := pack.TreesFor(t, devs, coll, root, 0, 0)
	if errors.Is(err, pack.ErrDisconnected) {
		return nil, nil, "", 0, fmt.Errorf("no spanning trees over any links: %w", err)
	}
	if err != nil {
		return nil, nil, "", 0, err
	}
	if err := pk.Trees.Validate(len(devs)); err != nil {
		return nil, nil, "", 0, fmt.Errorf("packing over %s links: %v", pk.Links, err)
	}
	return pk.Trees, pk.Plan, pk.Links, pk.PCIeShare, nil
}
