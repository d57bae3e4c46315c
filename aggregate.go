package braid

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/agg"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// aggAlgo is the planner's name of the allreduce through aggregation
// daemons (BRAID_AGG, package agg), in the leader-based form of "Designing
// In-network Computing Aware Reduction Collectives in MPI" (Ramesh et al.,
// HotI 2023, §IV): within each host a single-copy reduce-scatter leaves
// chunk i's host sum with local rank i; each owner streams its chunk to the
// daemons, which return the sum over the hosts (the parts pipelined, several
// in flight, as the paper overlaps one chunk's non-blocking in-network
// allreduce with the next); then each owner copies its chunk to its host's
// other ranks. A call takes three sequence numbers: the host reduce-scatter,
// an 8-byte agreement on whether every owner got its sums, and the host
// allgather — or, when some owner did not (a daemon lost, a group ended),
// the ring allreduce from the untouched input on every rank, so that a lost
// daemon costs time, never a hang or a wrong result; the communicator then
// stops using the daemons.
const aggAlgo = choice.Agg

// The communicator's state with the daemons.
const (
	aggUnset = iota // not tried yet (the first allreduce tries)
	aggBusy         // being set up
	aggOn
	aggOff
)

type aggComm struct {
	state  atomic.Int32
	mu     sync.Mutex
	groups map[int]*agg.Group // by chunk index
	why    string             // why the daemons are off
	progs  map[int]*aggProgs  // by count
	saved  []byte             // an in-place call's input, for the fallback
}

type aggProgs struct {
	rs, ag, ring sched.Program
	owned        []algo.AggChunk
}

// aggWorld is the job's connection to its daemons, shared by its
// communicators.
type aggWorld struct {
	once   sync.Once
	client *agg.Client
	err    error
	job    string
	secret []byte
}

// parseAgg checks BRAID_AGG's list of host:port.
func parseAgg(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("%q is not host:port", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no daemon address (want host:port,host:port,...)")
	}
	return out, nil
}

// aggPending reports whether the communicator should try its daemons
// before this allreduce.
func (c *Comm) aggPending() bool {
	return c.w.opts.Agg != "" && c.agg.state.Load() == aggUnset
}

// aggSetup connects the communicator's ranks to the daemons: every rank
// joins, on every daemon, the groups of the chunks it owns, and the ranks
// agree (an allreduce) that all did, or none uses them. It is collective:
// the first allreduce of every rank runs it.
func (c *Comm) aggSetup(ctx context.Context) error {
	if !c.agg.state.CompareAndSwap(aggUnset, aggBusy) {
		return nil
	}
	why := c.aggJoin(ctx)
	flag := []int32{0}
	if why != "" {
		flag[0] = 1
	}
	if err := c.Allreduce(ctx, flag, flag, Max); err != nil {
		c.aggLeave("the setup failed")
		return err
	}
	if flag[0] != 0 {
		if why == "" {
			why = "another rank could not join its groups (its BRAID_DEBUG=info log says why)"
		}
		c.aggLeave(why)
		if c.rank == 0 || flag[0] != 0 {
			c.w.debugf("info", "comm %08x: no aggregation daemons (%s): allreduce runs on host algorithms", c.id, why)
		}
		return nil
	}
	c.mu.Lock()
	clear(c.plans)
	c.last.Store(nil)
	c.mu.Unlock()
	c.agg.state.Store(aggOn)
	if c.rank == 0 {
		c.w.debugf("info", "comm %08x: allreduce may run through %d aggregation daemons (%s)", c.id, c.w.agg.client.Daemons(), c.w.opts.Agg)
	}
	return nil
}

// aggJoin joins this rank's groups; it returns why it could not.
func (c *Comm) aggJoin(ctx context.Context) string {
	switch {
	case !c.root:
		return "only the job's communicator (Init, NewLocal) uses the daemons"
	case c.nhosts < 2:
		return "one host"
	}
	aw := &c.w.agg
	aw.once.Do(func() {
		addrs, err := parseAgg(c.w.opts.Agg)
		if err != nil {
			aw.err = err
			return
		}
		if len(aw.secret) == 0 {
			aw.err = errors.New("the job has no secret to show the daemons (BRAID_SECRET)")
			return
		}
		dctx, cancel := context.WithTimeout(ctx, min(10*time.Second, c.w.opts.Timeout))
		defer cancel()
		aw.client, aw.err = agg.Dial(dctx, addrs, aw.job, aw.secret, agg.ClientOptions{})
		if aw.err == nil {
			c.w.closers = append(c.w.closers, aw.client.Close)
		}
	})
	if aw.err != nil {
		return aw.err.Error()
	}
	p := sched.Params{Coll: sched.Allreduce, NRanks: c.Size(), Count: algo.AggChunks(sched.Params{NRanks: c.Size(), Layout: c.layout}), Layout: c.layout}
	c.agg.mu.Lock()
	defer c.agg.mu.Unlock()
	c.agg.groups = map[int]*agg.Group{}
	for _, ch := range algo.AggOwned(p, c.rank) {
		g, err := aw.client.Join(ctx, fmt.Sprintf("comm %08x chunk %d", c.id, ch.Index), ch.Hosts, ch.Host)
		if err != nil {
			return err.Error()
		}
		c.agg.groups[ch.Index] = g
	}
	return ""
}

// aggLeave stops using the daemons.
func (c *Comm) aggLeave(why string) {
	c.agg.mu.Lock()
	for _, g := range c.agg.groups {
		g.Leave()
	}
	c.agg.groups = nil
	c.agg.why = why
	c.agg.mu.Unlock()
	c.agg.state.Store(aggOff)
	c.mu.Lock()
	clear(c.plans)
	c.last.Store(nil)
	c.mu.Unlock()
}

// aggCandidate returns the daemons as a candidate for p, when the
// communicator has them. The model: the host phases as hier's; each host
// sends its M bytes once and receives the sums once over its network link,
// plus a part to fill the pipeline, two network latencies, and the
// agreement's recursive doubling.
func (c *Comm) aggCandidate(p sched.Params, es int) (plan.Candidate, bool) {
	if p.Coll != sched.Allreduce || c.agg.state.Load() != aggOn || c.Size() < 2 {
		return plan.Candidate{}, false
	}
	m := c.w.model
	inter, intra := m.Links[cost.Inter], m.Links[cost.Intra]
	bytes := float64(p.Count) * float64(es)
	t := 2*inter.Alpha + bytes/inter.Beta + min(bytes, agg.DefaultPart)/inter.Beta +
		math.Ceil(math.Log2(float64(c.Size())))*inter.Alpha
	if l := float64(algo.AggChunks(p)); l > 1 {
		t += 2*intra.Alpha + 2*(l-1)/l*bytes/intra.Beta + (l-1)/l*bytes*m.Gamma
	}
	return plan.Candidate{Name: aggAlgo, Params: p, Cost: t}, true
}

// aggForced reports whether BRAID_ALGO names agg for coll.
func (c *Comm) aggForced(coll sched.Collective) bool {
	if ch, ok := c.force.perCol[coll]; ok {
		return ch.Algo == aggAlgo
	}
	return c.force.any.Algo == aggAlgo && choice.AggRuns(coll)
}

// aggUnavailable is the planner's note when BRAID_ALGO forces agg and the
// communicator has no daemons.
func (c *Comm) aggUnavailable() string {
	if st := c.agg.state.Load(); st != aggOff && c.w.opts.Agg != "" {
		return "" // not set up yet: plans made now are made again then
	}
	c.agg.mu.Lock()
	defer c.agg.mu.Unlock()
	why := c.agg.why
	if why == "" {
		why = "BRAID_AGG names none"
	}
	return "BRAID_ALGO forces agg but there are no aggregation daemons (" + why + ")"
}

// progs returns the programs of a call of count elements.
func (c *Comm) aggPrograms(p sched.Params) *aggProgs {
	c.agg.mu.Lock()
	defer c.agg.mu.Unlock()
	if c.agg.progs == nil {
		c.agg.progs = map[int]*aggProgs{}
	}
	if ap := c.agg.progs[p.Count]; ap != nil {
		return ap
	}
	if len(c.agg.progs) > 256 {
		clear(c.agg.progs)
	}
	ap := &aggProgs{owned: algo.AggOwned(p, c.rank)}
	ap.rs, ap.ag = algo.AggPrograms(p, c.rank)
	ring, err := algo.Lookup(sched.Allreduce, "ring")
	if err != nil {
		panic(err)
	}
	ap.ring = ring.Program(p, c.rank)
	c.agg.progs[p.Count] = ap
	return ap
}

// nextN takes len(sigs) consecutive sequence numbers for calls of those
// signatures, and returns the first with their chained signatures.
func (k *commCheck) nextN(sigs []uint32) (uint32, []uint32) {
	out := make([]uint32, len(sigs))
	for {
		old := k.state.Load()
		seq := uint32(old>>32) + 1
		prev := uint32(old)
		for i, s := range sigs {
			prev = chain(prev, seq+uint32(i), s)
			out[i] = prev
		}
		if k.state.CompareAndSwap(old, uint64(seq+uint32(len(sigs)-1))<<32|uint64(prev)) {
			return seq, out
		}
	}
}

// issueAgg takes the call's three sequence numbers.
func (c *Comm) issueAgg(k *call, pl *planned) run {
	seq, sigs := c.chk.nextN([]uint32{c.callSig(k, aggAlgo, 0, 0, 0), c.agreeSig(), c.callSig(k, aggAlgo+"/host", 0, 0, 0)})
	return run{pl: pl, seq: seq, sig: sigs[0], agg: true, aggSigs: [2]uint32{sigs[1], sigs[2]}}
}

// runAgg runs an issued call through the daemons.
func (c *Comm) runAgg(ctx context.Context, k *call, r run) error {
	p := k.p
	n := p.NRanks
	ap := c.aggPrograms(p)
	es := k.d.Size()
	op := k.op
	if op == Avg {
		op = Sum
	}
	local := len(ap.rs.Steps) > 0 && c.LocalSize() > 1
	in := k.in
	if len(k.in) > 0 && &k.in[0] == &k.out[0] {
		// In place: keep the input for the fallback, in a buffer the
		// communicator reuses; a call that runs while another holds it
		// (non-blocking calls) takes one of its own.
		c.agg.mu.Lock()
		saved := c.agg.saved
		c.agg.saved = nil
		c.agg.mu.Unlock()
		if cap(saved) < len(k.in) {
			saved = make([]byte, len(k.in))
		}
		in = saved[:len(k.in)]
		copy(in, k.in)
		defer func() {
			c.agg.mu.Lock()
			if cap(saved) > cap(c.agg.saved) {
				c.agg.saved = saved
			}
			c.agg.mu.Unlock()
		}()
	}
	// 1. The host reduce-scatter.
	k1 := *k
	k1.op = op
	if local {
		if err := c.runSeq(ctx, &k1, &ap.rs, aggAlgo, r.seq); err != nil {
			return err
		}
	}
	// 2. The owners' chunks through the daemons.
	actx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.w.opts.Timeout)
		defer cancel()
	}
	var aerr error
	c.agg.mu.Lock()
	groups := c.agg.groups
	c.agg.mu.Unlock()
	for _, ch := range ap.owned {
		lo, hi := ch.Off*es, (ch.Off+ch.Len)*es
		src := k.in[lo:hi]
		if local {
			src = k.out[lo:hi]
		}
		g := groups[ch.Index]
		if g == nil {
			aerr = errors.New("no group")
			break
		}
		if aerr = g.Allreduce(actx, k.d, op, src, k.out[lo:hi]); aerr != nil {
			break
		}
	}
	// 3. Agree that every owner has its sums.
	flag := []float64{0}
	if aerr != nil {
		flag[0] = 1
		c.w.debugf("info", "comm %08x allreduce seq %d: the aggregation failed here: %v", c.id, r.seq, aerr)
	}
	agree := call{name: "allreduce (agg agreement)", p: sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 1},
		in: bytesOf(flag), out: bytesOf(flag), d: Float64, op: Max, sig: r.aggSigs[0], arrive: c.w.clock.now()}
	if err := c.runSeq(ctx, &agree, c.agreeProg(), "recdouble", r.seq+1); err != nil {
		return err
	}
	k3 := *k
	k3.sig = r.aggSigs[1]
	if flag[0] == 0 {
		// 4. The host allgather.
		k3.op = op
		if local && len(ap.ag.Steps) > 0 {
			if err := c.runSeq(ctx, &k3, &ap.ag, aggAlgo, r.seq+2); err != nil {
				return err
			}
		}
		if k.op == Avg {
			if err := reduce.Divide(k.d, k.out, n); err != nil {
				return c.failWith(k.name, err)
			}
		}
		return nil
	}
	// Some owner has no sums: every rank runs the ring from its input, and
	// the communicator stops using the daemons.
	why := "an owner lost its aggregation group mid-call"
	if aerr != nil {
		why = aerr.Error()
	}
	c.aggLeave(why)
	if c.rank == 0 {
		c.w.debugf("info", "comm %08x allreduce seq %d: the aggregation failed (%s): this call and the next run on host algorithms", c.id, r.seq, why)
	}
	k3.in = in
	return c.runSeq(ctx, &k3, &ap.ring, "ring", r.seq+2)
}

// aggSecretOf reads the job secret that goroutine ranks show the daemons:
// BRAID_SECRET, in hex.
func aggSecretOf() []byte {
	b, _ := hex.DecodeString(strings.TrimSpace(os.Getenv("BRAID_SECRET")))
	return b
}
