package braid

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/internal/reduce"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// nodeAlgo is the planner's name of the collectives that run through the
// host's shared area (transport/shmcoll) instead of a schedule: the ranks of
// one host write their data once into the area and read each other's there.
const nodeAlgo = choice.Shared

// papAlgo is the shared area's arrival-aware allreduce and reduce
// (shmcoll's AllreducePAP and ReducePAP).
const papAlgo = choice.SharedPAP

// nodeSupports reports whether the shared area runs coll.
func nodeSupports(coll sched.Collective) bool { return choice.SharedRuns(coll) }

// The shared area's costs that the link model does not give: a
// synchronisation (a flag line stored by one core and polled by the others)
// and reading one flag line of every peer. Measured on the 16-core node
// (docs/PERFORMANCE.md): an 8-byte allreduce of 16 ranks through the area
// takes about 1.5 µs.
//
// The area's copies are plain loads and stores of memory every rank has
// mapped, without the shm transport's rendezvous, system calls and page
// pinning, and at most two chunks are in flight, so they stay in the
// caches. The more ranks copy at once, the more that matters: on the
// 16-core node, 16 ranks allgathered 64 MiB through the area in 23–26 ms
// and with Bruck's schedule over the shm transport (single copy with
// process_vm_readv) in 67 ms, 16 ranks reduce-scattered 16 MiB in 8.9 ms
// against the segmented ring's 14.5 ms, while 2 ranks allreduced 16 MiB in
// 6.5 ms through the area and 4.7 ms with the segmented ring. The model
// counts the area's copies at nodeCopySpeedup(n) times the intra link's
// bandwidth: 1.25 at 2 ranks, 2 at 8, 3 at 16 (a fit to those figures).
const (
	nodeSync    = 0.4e-6
	nodeLineGet = 0.06e-6
)

// nodeRound is a round of the area's recursive doubling (shmcoll's
// doubling.go): a line's round trip between two cores, 0.3–0.5 µs on the
// 16-core node (BenchmarkLinePingPong), where 16 ranks doubled 8 bytes by
// rounds of radix 2 in about the flat reduction's time (3.3–3.6 µs
// against 3.1–4.2). A round of radix 4 is priced the same, as one read
// and one reduction, though it reads and reduces three partners' results
// (not measured apart: nodeLinkCost).
const nodeRound = 0.35e-6

func nodeCopySpeedup(n int) float64 { return 1 + float64(n)/8 }

// areaOptions returns the options of a shared area for n ranks of this
// host with the given slot (0: the default): recursive doubling only while
// the ranks have a core each (cores: hostCPUs for processes, the host's
// CPUs that its ranks may run on together; GOMAXPROCS for goroutine
// ranks, which share the process's threads). Its
// rounds each wait for their partners, which a rank without a core of its
// own waits for to be scheduled; on this 2-core VM, 8 goroutine ranks
// allreduced 8 bytes through the area in 12.0 µs by doubling and 8.4 flat
// (session 18). The area's maker decides for every rank (shmcoll's
// hdrRD), so that ranks whose view of the cores differs agree.
func areaOptions(slot, n, cores int) shmcoll.Options {
	o := shmcoll.Options{Slot: slot}
	if n > cores && testDoubling.Load() == 0 {
		o.RDMax = -1
	}
	return o
}

// testDoubling, while positive, keeps recursive doubling in the areas
// made (areaOptions) whatever the cores: the tests' 16 and 17 goroutine
// ranks on a 2-core machine run it too (export_test.go).
var testDoubling atomic.Int32

// nodeHot is the largest lone chunk whose second pass an allreduce through
// the area does not pay: its copies and partial sums are still in the
// caches of the cores that wrote them. 2 ranks allreduced 64 KiB through
// the area in 10.9 µs on the 16-core node and 10.0–10.3 on this 2-core VM
// (session 16), which the model without the pass gives (10.9), against
// 16.6 and 16.1–17.3 with the segmented ring it preferred when it counted
// the pass (17.4 µs).
const nodeHot = 64 << 10

// nodeParSpeedup is how much faster than on one core a rank of n on the
// host copies and reduces a chunk that package par splits across its
// threads (more than par.MinSize bytes; par.Threads, which follows
// GOMAXPROCS: the host's cores over its ranks). The threads of all the
// host's ranks share its memory: on the 16-core node, 2 ranks of 8
// threads ran the area's allreduce, broadcast, allgather and
// reduce-scatter of 1-64 MiB 1.9-3.6 times as fast as with one thread
// each (BRAID_COPY_THREADS=1), 4 ranks of 4 threads 1.4-2.7 times (session
// 13, docs/PERFORMANCE.md): about nodeParHost cores' worth of copying
// over the host, shared by its ranks, and never more than a rank's
// threads.
func nodeParSpeedup(n, threads int) float64 {
	if threads <= 1 || n < 1 {
		return 1
	}
	return max(1, min(float64(threads), nodeParHost/float64(n)))
}

// nodeParHost is the host's copying, in cores' worth, that nodeParSpeedup
// divides among its ranks (a fit to the node's figures above).
const nodeParHost = 6

// nodeCost is the model's time of coll through g's area: nodeLinkCost,
// bounded by the host's memory where the area states what it moves there
// (nodeMoved), as algo.CostOf bounds the schedules.
func nodeCost(g *shmcoll.Group, p sched.Params, es int, m cost.Model) float64 {
	// The area's reductions add data in cache as the schedules' do.
	m = m.ForCall(p, es)
	t := nodeLinkCost(g, p, es, m)
	moved := nodeMoved(p, es)
	if moved == 0 || m.Memory <= 0 && m.Core <= 0 {
		return t
	}
	_, _, _, k := nodeChunks(g, p, es)
	return m.Bounded(p.Layout, p.NRanks, t, nodeLinkCost(g, p, es, m.Latencies()), moved, k)
}

// nodeChunks returns how the area cuts p: the number of chunks, a chunk's
// bytes, whether an allreduce's chunks take the chain, and how many times
// faster than one thread a rank copies and reduces a chunk
// (nodeParSpeedup where package par splits it: a process's chunk of
// par.MinSize bytes or more, as par splits them, not the chain's segments,
// not goroutine ranks, which share one process's pool).
func nodeChunks(g *shmcoll.Group, p sched.Params, es int) (chunks, b float64, chained bool, k float64) {
	n := float64(p.NRanks)
	slot := g.Slot()
	var bytes, per float64 // the data a chunk is counted on, and the chunks' limit
	switch p.Coll {
	case sched.ReduceScatter:
		bytes, per = float64(p.Count*es)*n, float64(slot/p.NRanks*p.NRanks)
	default:
		bytes, per = float64(p.Count*es), float64(slot)
	}
	chunks = math.Max(1, math.Ceil(bytes/per))
	b = bytes / chunks
	k = 1
	chained = p.Coll == sched.Allreduce && g.Chained(int(b))
	if !chained && !g.Goroutines() {
		k = nodeSplit(p.NRanks, b)
	}
	return chunks, b, chained, k
}

// nodeSplit is how many times faster than one thread a rank of n copies
// or reduces op bytes in one piece, which package par splits across its
// threads from par.MinSize: nodeParSpeedup from 4·par.MinSize (2 MiB), 1
// below par.MinSize, and in between in proportion to log₂ of the size.
// On the 16-core node (session 19, three rounds) the area's 2-rank
// allgather, whose copies are each a rank's block, ran 1.25 times as fast
// split as with one thread (BRAID_COPY_THREADS=1) with blocks of 512 KiB,
// 2.2 times with 1 MiB and 2.4 with 2 MiB; counting the whole
// nodeParSpeedup (3) from 512 KiB, the model priced the 2-rank allgather
// of 1 MiB at 35 µs (it took 86) and the allreduce of 512 KiB at 40 (137,
// where recursive doubling took 93).
func nodeSplit(n int, op float64) float64 {
	s, lo := nodeParSpeedup(n, par.Threads()), float64(par.MinSize())
	if s <= 1 || op < lo {
		return 1
	}
	return min(s, 1+(s-1)*math.Log2(op/lo)/2)
}

// nodeShape says how the area runs p, for the planner's reason (Explain,
// BRAID_DEBUG=info): an allreduce or reduce flat, in two phases, along the
// chain or by recursive doubling, an allgather or reduce-scatter by
// recursive doubling, and the chunks of a call cut in several; "" where
// there is nothing to say.
func nodeShape(g *shmcoll.Group, p sched.Params, es int) string {
	if g == nil {
		return ""
	}
	chunks, b, chained, _ := nodeChunks(g, p, es)
	var s string
	switch p.Coll {
	case sched.Allreduce, sched.Reduce:
		switch rounds := g.DoublingRounds(int(b)); {
		case p.Coll == sched.Allreduce && rounds > 0:
			s = fmt.Sprintf("recursive doubling in %d rounds (one call in 16 flat)", rounds)
		case chained:
			s = "the pipelined chain in rank order"
		case b <= float64(g.FlatMax()):
			s = "one phase (every rank reads every input)"
		default:
			s = "two phases (a reduce-scatter, then an allgather)"
		}
	case sched.Allgather:
		if rounds := g.GatherDoublingRounds(int(b)); rounds > 0 {
			s = fmt.Sprintf("recursive doubling in %d rounds (one call in 16 flat)", rounds)
		} else if g.ByAddress(p.Count * es) {
			s = "single copy (each rank reads the others' blocks out of their processes, where the kernel lets it)"
		}
	case sched.Bcast:
		if g.ByAddress(p.Count * es) {
			s = "single copy (the others read the root's buffer out of its process, where the kernel lets them)"
		}
	case sched.ReduceScatter:
		switch rounds, halving := g.ScatterDoublingRounds(int(b)); {
		case halving:
			s = fmt.Sprintf("recursive halving in %d rounds (one call in 16 flat)", rounds)
		case rounds > 0:
			s = fmt.Sprintf("the whole input by recursive doubling in %d rounds (one call in 16 flat)", rounds)
		}
	}
	if chunks > 1 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d chunks of %s", int(chunks), plan.FormatSize(int64(b)))
	}
	return s
}

// nodeMoved returns the bytes each rank moves through memory in the area
// for p, as cost.Model.Shared counts them, or 0 where the model does not
// count them. A reduce-scatter copies the rank's whole input (n blocks of
// M bytes) into the area and adds n blocks: 2n·M. The other collectives
// are left to the link model, as the schedules they compete with are
// (algo.Mover): only the reduce-scatters' memory traffic has been
// measured against their times (docs/PERFORMANCE.md).
func nodeMoved(p sched.Params, es int) float64 {
	if p.Coll == sched.ReduceScatter {
		return 2 * float64(p.NRanks) * float64(p.Count*es)
	}
	return 0
}

// nodeLinkCost is the area's time under the link model: chunks of at most
// g.Slot bytes, each with its synchronisations, copies (at the intra link's
// bandwidth) and reductions (γ).
func nodeLinkCost(g *shmcoll.Group, p sched.Params, es int, m cost.Model) float64 {
	n := float64(p.NRanks)
	beta, gamma := nodeCopySpeedup(p.NRanks)*m.Links[cost.Intra].Beta, m.Gamma
	sync := nodeSync + n*nodeLineGet
	if p.Coll == sched.Barrier {
		return sync
	}
	chunks, b, chained, k := nodeChunks(g, p, es)
	// The chunk's copies and reductions are split across the rank's
	// threads (package par) from par.MinSize: on the node a 2-rank
	// broadcast of 1 MiB took 38 µs through the area with 8 threads,
	// binomial 78. (Counting only chunks above it, the model priced
	// 2-rank allgathers of 512 KiB a rank as unsplit, and the planner
	// ran Bruck's, 122-149 µs, where the split area took 70-82; session
	// 16.) The reductions and copies of an allreduce's or a
	// reduce-scatter's slices are each a chunk's n-th (nodeSplit of it,
	// sbeta and sgamma).
	ks := k
	if k > 1 {
		ks = nodeSplit(p.NRanks, b/n)
	}
	beta, gamma, sbeta, sgamma := beta*k, gamma/k, beta*ks, gamma/ks
	var t float64
	switch p.Coll {
	case sched.Allreduce, sched.Reduce:
		if rounds := g.DoublingRounds(int(b)); p.Coll == sched.Allreduce && rounds > 0 {
			// Recursive doubling: a round is an exchange of a line (or
			// a few) and a reduction. Rounds of radix 4 read and reduce
			// three partners' results, which this counts as one: at
			// most 1 KiB (RDMax), the two more of each of a 16-rank
			// call's two rounds are about 0.4 µs the model leaves out,
			// where the schedules it weighs the area against take
			// several microseconds.
			t = float64(rounds) * (nodeRound + b/beta + b*gamma)
		} else if b <= float64(g.FlatMax()) {
			// Every rank reads every input: n lines or slots.
			t = sync + b/beta + (n-1)*b*gamma + n*b/beta
		} else {
			// Copy in, reduce a slice of every input, copy the slices
			// out; a chunk's copies overlap the others' reductions of
			// the chunk before (two slots), so a chunk costs about one
			// pass over its bytes and the reduction.
			t = 2*sync + b/beta + (n-1)*b/n*sgamma
			if chunks == 1 && !chained && b > nodeHot {
				// Nothing to overlap with; the chain pipelines a chunk
				// in segments (on the node, 4 ranks, 1 MiB: the chain
				// 285 µs, the segmented ring the model preferred 374).
				// A chunk of at most nodeHot bytes is still in its
				// writers' caches when it is copied out.
				t += b / sbeta
			}
		}
	case sched.Bcast:
		// The root copies a chunk in, the others copy it out: two passes
		// over a lone chunk; chunks after the first overlap the copy-out
		// of the one before (two slots). On the node, a 2-rank broadcast
		// of 256 KiB–1 MiB through the area took twice a binomial's time
		// over the shm transport's single copy (process_vm_readv), which
		// the model with one pass had ranked the other way. Below the
		// transport's eager limit its messages are copied twice too (in
		// and out of its ring), which the link model does not price: the
		// second pass is left out there, or the area would lose sizes it
		// wins (the node, 2 ranks, 16 KiB: the area 3.0–3.4 µs, binomial
		// 3.65–4.3; at 64 KiB binomial's single copy wins, 6.7–8 against
		// 7.7–9). A message of exactly the eager limit is eager too
		// (transport/shm sends up to the limit through its ring), so the
		// second pass starts above it: with a broadcast of up to a
		// quarter slot placed in the next quarter part of the slots
		// (shmcoll's Bcast), a 2-rank 64 KiB broadcast on this 2-core VM
		// took 4.7–4.8 µs through the area against binomial's 5.5–5.7
		// (5 alternated rounds, medians; 6.5–6.7 in whole slots).
		t = sync + b/beta
		switch {
		case g.ByAddress(p.Count * es):
			// The readers copy each chunk out of the root's buffer
			// (shmcoll's single copy by address), and the root waits for
			// them.
			t += sync
		case chunks == 1 && b > m.Eager:
			t += b / beta
		}
	case sched.Allgather:
		if rounds := g.GatherDoublingRounds(int(b)); rounds > 0 {
			// Rounds of a few partners (shmcoll's gatherDoubling), the
			// blocks read in all of them the output's.
			t = float64(rounds)*nodeRound + n*b/beta
		} else if g.ByAddress(p.Count * es) {
			// Each rank copies the others' blocks out of their buffers
			// (single copy by address), and waits for them to have read
			// its own.
			t = 2*sync + (n-1)*b/beta
		} else {
			t = sync + n*b/beta
		}
	case sched.ReduceScatter:
		switch rounds, halving := g.ScatterDoublingRounds(int(b)); {
		case halving:
			// Recursive halving (shmcoll's scatterHalving): the input
			// copied into the area, and parts that shrink by the radix
			// a round read and reduced, about the input once.
			t = float64(rounds)*nodeRound + 2*b/beta + b*gamma
		case rounds > 0:
			// The whole input by recursive doubling, as an allreduce's
			// (shmcoll's scatterDoubling).
			t = float64(rounds) * (nodeRound + b/beta + b*gamma)
		default:
			t = sync + b/beta + (n-1)*b/n*sgamma
		}
	}
	return t * chunks
}

// nodeCandidate returns the shared area as a candidate for p, if c has an
// area and it runs p.
func (c *Comm) nodeCandidate(p sched.Params, es int) (candidateNode, bool) {
	if c.node == nil || !nodeSupports(p.Coll) || p.NRanks != c.node.Size() {
		return candidateNode{}, false
	}
	if p.Coll == sched.ReduceScatter && c.node.Slot()/p.NRanks < es {
		return candidateNode{}, false
	}
	return candidateNode{cost: nodeCost(c.node, p, es, c.w.model)}, true
}

type candidateNode struct{ cost float64 }

// runNode runs an issued call through the shared area. With s, a call
// that ends well records what it owes of the lagged confirmations and
// takes those due (confirm) in the lock that ends it, for its caller to
// run (runDue).
func (c *Comm) runNode(ctx context.Context, k *call, r run, s *settling) (rerr error) {
	defer func() {
		if x := recover(); x != nil {
			e := &Error{Kind: Internal, Rank: c.rank, Call: k.name, Peer: -1, Err: fmt.Errorf("panic in call %d: %v", r.seq, x)}
			c.w.fail(e)
			rerr = e
		}
	}()
	// The call's chained signature (check.go): a reader that finds
	// another in a peer's flag knows that rank disagreed about this call
	// or an earlier one. The sequence number is registered as the
	// schedules' calls do, so that a peer that ran this call as a schedule
	// is found by its messages; strict mode agrees before the area moves
	// anything.
	var err error
	if b := &k.begun; b.done {
		err = c.begun(ctx, k, k.algo, r.seq, b.peer, b.other, b.bad)
	} else {
		err = c.beginCall(ctx, k, k.algo, r.seq)
	}
	if err != nil {
		c.node.Skip(ctx, r.ticket)
		return err
	}
	stamps := getStamps(c.Size())
	// A wait that stalls probes the rank it waits for and answers the
	// ranks that probed this one, as the schedules' calls do, so that a
	// timeout holds back while the rank it waited for waits too
	// (blame.go). Field by field: a composite literal of the call (336
	// bytes) is built aside and copied, which cost 3-7 % of a 2-rank
	// broadcast loop's profile.
	var cl shmcoll.Call
	cl.Ctx, cl.Ticket, cl.Sig, cl.Fail, cl.Name, cl.Seq = ctx, r.ticket, k.sig, c.errFn, k.name, r.seq
	cl.Arrive, cl.Arrivals, cl.Confirmed = uint64(k.arrive), *stamps, c.confirms(k)
	cl.Stall, cl.StallAfter, cl.Spin = c.chk.nodeStallFn, c.w.stallAfter(), c.w.spin
	var settle *settling // set once the call ended well
	defer func() {
		c.endCall(k, r.seq, rerr != nil, *stamps, settle)
		stampPool.Put(stamps)
	}()
	if _, ok := ctx.Deadline(); !ok {
		cl.Timeout = c.w.opts.Timeout
	}
	if c.w.opts.Debug == "trace" {
		c.w.debugf("trace", "%s seq %d count %d via %s", k.name, r.seq, k.p.Count, k.algo)
	}
	g := c.node
	switch k.p.Coll {
	case sched.Allreduce, sched.Reduce, sched.ReduceScatter:
		var red shmcoll.Reducer
		red, err = nodeReducer(k.d, k.op)
		if err != nil {
			break
		}
		pap := k.algo == papAlgo
		switch k.p.Coll {
		case sched.Allreduce:
			if pap {
				err = g.AllreducePAP(&cl, k.in, k.out, red, 0) // no leader: the chain above FlatMax
			} else {
				err = g.Allreduce(&cl, k.in, k.out, red)
			}
		case sched.Reduce:
			if pap {
				err = g.ReducePAP(&cl, k.in, k.out, red, k.p.Root, shmcoll.DefaultPAPLeaderMax)
			} else {
				err = g.Reduce(&cl, k.in, k.out, red, k.p.Root)
			}
		default:
			err = g.ReduceScatter(&cl, k.in, k.out, red)
		}
		if err == nil && k.op == Avg && (k.p.Coll != sched.Reduce || c.rank == k.p.Root) {
			err = reduce.Divide(k.d, k.out, k.p.NRanks)
		}
	case sched.Bcast:
		err = g.Bcast(&cl, k.out, k.p.Root)
	case sched.Allgather:
		err = g.Allgather(&cl, k.in, k.out)
	case sched.Barrier:
		err = g.Barrier(&cl)
	default:
		err = fmt.Errorf("the shared area does not run %v", k.p.Coll)
	}
	if err != nil {
		return c.failWith(k.name, err)
	}
	k.chunk = cl.Last
	if s != nil {
		s.seq = r.seq
		s.owes = c.nodeOwed(k, r.seq, &s.owed)
		settle = s
	}
	return nil
}

// nodeReducers caches the reducers per (dtype, op): making one allocates.
var nodeReducers = func() (t [32][16]*shmcoll.Reducer) {
	for _, d := range dtype.All() {
		for _, o := range dtype.AllOps() {
			k, err1 := reduce.For(d, o)
			k3, err2 := reduce.For3(d, o)
			if err1 == nil && err2 == nil && int(d) < len(t) && int(o) < len(t[0]) {
				t[d][o] = &shmcoll.Reducer{ElemSize: d.Size(), K: k, K3: k3}
			}
		}
	}
	return t
}()

func nodeReducer(d DType, op Op) (shmcoll.Reducer, error) {
	if int(d) < len(nodeReducers) && int(op) < len(nodeReducers[0]) && nodeReducers[d][op] != nil {
		return *nodeReducers[d][op], nil
	}
	return shmcoll.Reducer{}, fmt.Errorf("no reduction of %v by %v", d, op)
}

// localAreas passes the shared areas of split communicators between the
// goroutine ranks of a NewLocal job.
type localAreas struct {
	mu sync.Mutex
	m  map[uint32]*localArea
}

type localArea struct {
	groups []*shmcoll.Group
	taken  int
}

// splitArea gives sub, a communicator split from c (nil on a rank that
// passed Undefined), a shared area of its own when c has one: every rank of
// c takes part, since the exchange runs on c. sub's rank 0 makes the area
// (a file for processes, memory for goroutine ranks) and the others map
// it; a split communicator whose ranks could not all map it runs its
// collectives as schedules. parents[i] is the rank in c of sub's rank i.
func (c *Comm) splitArea(ctx context.Context, sub *Comm, parents []int) error {
	if c.node == nil {
		return nil
	}
	if sub != nil && sub.Size() == 1 {
		g, err := shmcoll.NewLocal(1, shmcoll.Options{})
		if err == nil {
			sub.setNode(g[0])
		}
	}
	multi := sub != nil && sub.Size() > 1
	if la := c.w.localAreas; la != nil {
		if multi && sub.rank == 0 {
			slot := c.w.opts.SharedSlot
			if slot == 0 {
				slot = localSlot
			}
			gs, err := shmcoll.NewLocal(sub.Size(), areaOptions(slot, sub.Size(), runtime.GOMAXPROCS(0)))
			if err != nil {
				return &Error{Kind: Internal, Rank: c.rank, Call: "split", Peer: -1, Err: err}
			}
			la.mu.Lock()
			la.m[sub.id] = &localArea{groups: gs}
			la.mu.Unlock()
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if multi {
			la.mu.Lock()
			a := la.m[sub.id]
			sub.setNode(a.groups[sub.rank])
			if a.taken++; a.taken == sub.Size() {
				delete(la.m, sub.id)
			}
			la.mu.Unlock()
		}
		return nil
	}
	// Processes: sub's rank 0 makes the file and every rank of c learns its
	// path through c; then every rank says whether it mapped it.
	const rec = 512
	mine := make([]byte, rec)
	var g *shmcoll.Group
	var path string
	opts := areaOptions(c.w.opts.SharedSlot, sub.Size(), hostCPUs(c.LocalSize()))
	if multi && sub.rank == 0 {
		var err error
		if g, path, err = shmcoll.Make("", sub.Size(), opts, c.w.secret); err != nil {
			copy(mine, "err "+err.Error())
		} else {
			copy(mine, "ok "+path)
		}
	}
	fail := func(err error) error {
		if g != nil {
			g.Close()
		}
		if path != "" {
			shmcoll.Unlink(path)
		}
		return err
	}
	all := make([]byte, rec*c.Size())
	if err := c.Allgather(ctx, mine, all); err != nil {
		return fail(err)
	}
	status := []byte{0}
	if multi {
		status[0] = 1
		r0 := all[parents[0]*rec : (parents[0]+1)*rec]
		r0 = r0[:max(0, strings.IndexByte(string(r0), 0))]
		switch {
		case sub.rank == 0:
			if g == nil {
				status[0] = 2
			}
		case strings.HasPrefix(string(r0), "ok "):
			var err error
			if g, err = shmcoll.Open(string(r0[3:]), sub.rank, sub.Size(), opts, c.w.secret); err != nil {
				status[0] = 2
				c.w.debugf("info", "split comm %08x: mapping the shared area: %v", sub.id, err)
			}
		default:
			status[0] = 2
		}
	}
	every := make([]byte, c.Size())
	if err := c.Allgather(ctx, status, every); err != nil {
		return fail(err)
	}
	if !multi {
		return nil
	}
	if path != "" {
		shmcoll.Unlink(path)
		path = ""
	}
	for _, p := range parents {
		if every[p] != 1 {
			c.w.debugf("info", "split comm %08x: no shared area (rank %d of the parent could not map it): collectives run as schedules", sub.id, p)
			return fail(nil)
		}
	}
	sub.setNode(g)
	return nil
}
