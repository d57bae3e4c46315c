package braid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/profile"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// world is what every communicator of one process in one job shares: the
// connections to every world rank and the job's failure state.
type world struct {
	rank, size int
	hosts      []string         // host identity per world rank
	numa       []int            // NUMA node per world rank; nil if unknown
	model      cost.Model       // link figures the planner costs algorithms with
	conns      []transport.Conn // by world rank; nil for self
	meshes     []transport.Mesh
	closers    []func() error
	opts       Options
	logger     *log.Logger

	failure  atomic.Pointer[Error]
	closed   atomic.Bool
	once     sync.Once
	aborting sync.WaitGroup // aborts started by failAsync

	// meshMu guards meshes (Init appends while transports' callbacks may
	// already abort) and closing, and orders aborting's Add before close's
	// Wait.
	meshMu  sync.Mutex
	closing bool

	sigs sigTable
	spin time.Duration // how long waiters poll before yielding

	collectiveClose bool // Close waits for every rank (process jobs)

	// For the shared areas of split communicators (node.go): the job's
	// secret (process jobs), or the areas that goroutine ranks pass each
	// other (NewLocal).
	secret     []byte
	localAreas *localAreas

	reg *registry // registered memory (register.go)

	// report tells the launcher of the job's first failure, through the
	// store (init.go); nil without one.
	report func(e *Error, worldPeer int)

	prof *profile.Recorder // BRAID_PROFILE's recorder (profile.go); nil when off

	agg   aggWorld // the aggregation daemons (aggregate.go)
	clock *clock   // arrival stamps on the job's common clock (arrival.go)
	// flightSig stops the flight recorder's signal handler (flight.go);
	// flightOnce dumps the recorder after the first failure.
	flightSig  func()
	flightOnce sync.Once
}

// setSpin chooses how long waiters poll: long while every local rank has a
// core, briefly when ranks outnumber cores (as Open MPI's yield_when_idle),
// and says which (level: info on the host's first rank, trace on the
// others).
func (w *world) setSpin(localRanks int, level string) {
	cpus := hostCPUs(localRanks)
	if localRanks <= cpus {
		w.spin = 50 * time.Microsecond
		w.debugf(level, "waits: %d ranks on this host's %d CPUs, a CPU each: a wait spins %v, then yields its thread between polls for up to %v, then sleeps", localRanks, cpus, w.spin, shmcoll.OwnCoreYield)
	} else {
		w.spin = -1
		w.debugf(level, "waits: %d ranks share this host's %d CPUs: a wait yields its thread after %d polls, and sleeps after %v", localRanks, cpus, transport.OverSpinPolls, transport.YieldFor)
	}
}

// fail records the job's first failure and tells every peer (through the
// transports' Abort) so that their pending calls end too.
//
// The abort carries a token (kind, the world rank concerned, this world
// rank) so that peers report the cause, e.g. "peer lost: rank 2", rather
// than only that somebody aborted.
func (w *world) fail(e *Error) { w.failPeer(e, e.Peer) }

func (w *world) failPeer(e *Error, worldPeer int) {
	if !e.wknown {
		e.wpeer, e.wknown = worldPeer, true
	}
	if w.report != nil && w.failure.Load() == nil {
		w.report(e, worldPeer) // before the peers hear of it
	}
	if w.failure.CompareAndSwap(nil, e) {
		w.abortMeshes(e, worldPeer)
	}
}

// abortMeshes tells every peer that the job failed with e.
func (w *world) abortMeshes(e *Error, worldPeer int) {
	reason := fmt.Errorf("braid-abort kind=%d peer=%d from=%d: %v", e.Kind, worldPeer, w.rank, e)
	for _, m := range w.meshList() {
		m.Abort(reason)
	}
	w.debugf("info", "communicator failed: %v", e)
}

var abortToken = regexp.MustCompile(`braid-abort kind=(\d+) peer=(-?\d+) from=(\d+)`)

// lost is the transports' callback for a dead or aborting peer.
func (w *world) lost(peer int, err error) {
	if errors.Is(err, transport.ErrPeerClosed) {
		// A clean shutdown: requests that needed that peer fail by
		// themselves; the others go on.
		w.debugf("info", "rank %d closed its connections", peer)
		return
	}
	kind := PeerLost
	if errors.Is(err, transport.ErrAborted) {
		kind = Aborted
		if k, p, from, ok := abortCause(err); ok {
			switch k {
			case PeerLost, Mismatch:
				kind = k
				if p >= 0 {
					err = fmt.Errorf("world rank %d reported %v with world rank %d first: %w", from, kind, p, err)
					peer = p
				}
			case Timeout:
				w.timedOut(from, p, err)
				return
			default:
				// The rank that failed first (it aborted, or its call
				// failed), not the one that passed its abort on.
				peer = from
			}
		}
	}
	w.fail(&Error{Kind: kind, Rank: w.rank, Call: "transport", Peer: peer, Err: err})
}

// meshList returns the world's meshes.
func (w *world) meshList() []transport.Mesh {
	w.meshMu.Lock()
	defer w.meshMu.Unlock()
	return slices.Clone(w.meshes)
}

// held returns the messages this rank's transports hold for receives not
// yet posted (transport.Holder), for tests and diagnostics.
func (w *world) held() int {
	n := 0
	for _, m := range w.meshList() {
		if h, ok := m.(transport.Holder); ok {
			n += h.Held()
		}
	}
	return n
}

// abortCause returns the kind and world ranks (the one concerned and the
// one that reported it) of the innermost abort token in err, which names
// the first cause.
func abortCause(err error) (kind ErrorKind, peer, from int, ok bool) {
	m := abortToken.FindAllStringSubmatch(err.Error(), -1)
	if len(m) == 0 {
		return 0, 0, 0, false
	}
	last := m[len(m)-1]
	k, _ := strconv.Atoi(last[1])
	peer, _ = strconv.Atoi(last[2])
	from, _ = strconv.Atoi(last[3])
	return ErrorKind(k), peer, from, true
}

func (w *world) err() error {
	if e := w.failure.Load(); e != nil {
		return e
	}
	return nil
}

func (w *world) debugf(level, format string, args ...any) {
	if w.opts.Debug == "" || (level == "trace" && w.opts.Debug != "trace") {
		return
	}
	w.logger.Printf("rank %d: "+format, append([]any{w.rank}, args...)...)
}

func (w *world) close() error {
	var first error
	w.once.Do(func() {
		w.meshMu.Lock()
		w.closing = true
		w.meshMu.Unlock()
		w.aborting.Wait() // the peers hear why before the connections close
		w.closed.Store(true)
		for _, m := range w.meshList() {
			if err := m.Close(); err != nil && first == nil {
				first = err
			}
		}
		for i := len(w.closers) - 1; i >= 0; i-- {
			if err := w.closers[i](); err != nil && first == nil {
				first = err
			}
		}
	})
	return first
}

// Comm is a communicator: a group of ranks that call collectives together.
// Its methods may be called from several goroutines, but every rank must
// issue the collectives of one communicator in the same order, as in MPI.
type Comm struct {
	w       *world
	id      uint32
	rank    int
	members []int // communicator rank -> world rank
	local   struct{ rank, size int }
	nhosts  int
	layout  *sched.Layout // hosts (and NUMA nodes) of the members, for the planner
	force   algoForce

	chk    commCheck // sequence numbers and signatures (check.go)
	splits atomic.Uint32

	mu      sync.Mutex
	plans   map[planKey]*planned
	last    atomic.Pointer[lastPlan]
	lastSig atomic.Pointer[lastSig] // the shared area's (coll.go)
	packs   treeCache               // spanning trees packed for tree-packing plans (topology.go)

	agreeOnce sync.Once
	agree     *sched.Program // MIAD's agreement allreduce

	arrivalOnce  sync.Once
	arrivalAgree *sched.Program // the arrival statistics' agreement (arrival.go)

	p2pMu   sync.Mutex
	p2pSend map[[2]int]uint32 // (peer, tag) -> messages sent
	p2pRecv map[[2]int]uint32 // (peer, tag) -> messages received

	root bool // owns the world (created by Init or NewLocal)

	// node is the host's shared area, when every rank is on this host.
	// Its calls take their sequence numbers and tickets under w.sigs.mu
	// (issue), which orders them.
	node *shmcoll.Group

	dev struct { // the device communicator of Comm's calls on Device buffers (device.go)
		mu     sync.Mutex
		d      *DeviceComm
		closed bool
	}
	agg aggComm // allreduce through aggregation daemons (aggregate.go)

	connFn func(int) transport.Conn // c.conn, made once: a method value per call allocates
	errFn  func() error             // c.w.err, likewise

	arrivals arrivalSites // what this rank knows of its calls' arrival patterns (arrival.go)
}

func newComm(w *world, id uint32, rank int, members []int) *Comm {
	c := &Comm{w: w, id: id, rank: rank, members: members,
		plans: map[planKey]*planned{}, p2pSend: map[[2]int]uint32{}, p2pRecv: map[[2]int]uint32{}}
	c.force, _ = parseAlgo(w.opts.Algo)
	c.connFn, c.errFn = c.conn, w.err
	c.chk.stallFn = c.stall
	c.chk.nodeStallFn = c.nodeStall
	me := w.hosts[members[rank]]
	hosts := map[string]bool{}
	for i, wr := range members {
		h := w.hosts[wr]
		hosts[h] = true
		if h == me {
			if i == rank {
				c.local.rank = c.local.size
			}
			c.local.size++
		}
	}
	c.nhosts = len(hosts)
	names := make([]string, len(members))
	var numa []int
	if w.numa != nil {
		numa = make([]int, len(members))
	}
	for i, wr := range members {
		names[i] = w.hosts[wr]
		if numa != nil {
			numa[i] = w.numa[wr]
		}
	}
	c.layout = sched.NewLayout(names, numa)
	return c
}

// table returns the tuning table the default planner uses, or nil.
func (w *world) table() *plan.Table {
	if d, ok := w.opts.Planner.(plan.Default); ok {
		return d.Table
	}
	return nil
}

// Rank returns this process's rank in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Comm) Size() int { return len(c.members) }

// LocalRank returns this rank's index among the communicator's ranks on the
// same host.
func (c *Comm) LocalRank() int { return c.local.rank }

// LocalSize returns the number of the communicator's ranks on this host.
func (c *Comm) LocalSize() int { return c.local.size }

// Hosts returns the number of distinct hosts among the communicator's ranks.
func (c *Comm) Hosts() int { return c.nhosts }

// HostOf returns the host number of rank r: hosts are numbered 0 to
// Hosts()-1 in the order of their first rank. -1 if r is out of range.
func (c *Comm) HostOf(r int) int {
	if r < 0 || r >= c.Size() {
		return -1
	}
	return c.layout.HostOf(r)
}

// ID returns the communicator's id, the same on every member.
func (c *Comm) ID() uint32 { return c.id }

// conn returns the connection to communicator rank peer.
func (c *Comm) conn(peer int) transport.Conn { return c.w.conns[c.members[peer]] }

// peerIn returns the rank in c of the peer that e names: e's world rank
// when e is the job's recorded failure (-1 if that rank is not in c),
// else e.Peer.
func (c *Comm) peerIn(e *Error) int {
	if !e.wknown {
		return e.Peer
	}
	if e.wpeer < 0 {
		return -1
	}
	return c.commRank(e.wpeer)
}

// usable returns an error if the communicator can no longer be used.
func (c *Comm) usable(call string) error {
	if c.w.closed.Load() {
		return &Error{Kind: Aborted, Rank: c.rank, Call: call, Peer: -1, Err: errors.New("communicator is closed")}
	}
	if e := c.w.failure.Load(); e != nil {
		return &Error{Kind: e.Kind, Rank: c.rank, Call: call, Peer: c.peerIn(e), Err: fmt.Errorf("communicator failed earlier: %w", e)}
	}
	return nil
}

// deadline applies the communicator's timeout to ctx if ctx has none.
func (c *Comm) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.w.opts.Timeout)
}

// failWith classifies err, records it as the job's failure and returns it.
func (c *Comm) failWith(call string, err error) *Error { return c.failWithPeer(call, err, -1) }

// failWithPeer is failWith for a call that concerns communicator rank
// peer alone (point-to-point): the error names peer where err itself names
// no peer (a transport's error, a timeout).
func (c *Comm) failWithPeer(call string, err error, peer int) *Error {
	e := classify(c.rank, call, err)
	var be *Error
	own := !errors.As(err, &be) // from the executor or a transport, not a recorded failure
	if own && e.Peer < 0 {
		e.Peer = peer
	}
	if !own && be.wknown {
		// A failure recorded for the job names its peer by world rank.
		if e == be {
			cp := *be
			e = &cp
		}
		e.Peer = c.peerIn(be)
	}
	if own && e.Kind == Timeout {
		e.Err = fmt.Errorf("%s%w", c.waitedFor(err), e.Err)
		if prior := c.w.failure.Load(); prior != nil {
			// Another rank's timeout came while this one was held back
			// (blame.go), or another failure: report that one.
			e = &Error{Kind: prior.Kind, Rank: c.rank, Call: call, Peer: c.peerIn(prior), Err: prior}
		}
	}
	if own && e.Kind == Aborted && errors.Is(err, transport.ErrAborted) {
		// The abort's token says why, as the Lost callback would.
		wp := -1
		if e.Peer >= 0 && e.Peer < len(c.members) {
			wp = c.members[e.Peer]
		}
		c.w.lost(wp, err)
	}
	if prior := c.w.failure.Load(); prior != nil && (e.Kind == Aborted || e.Kind == Internal) {
		// Report the cause rather than its echo.
		e = &Error{Kind: prior.Kind, Rank: c.rank, Call: call, Peer: c.peerIn(prior), Err: prior}
	}
	wp := e.Peer
	if wp >= 0 && wp < len(c.members) {
		wp = c.members[wp]
	}
	if c.split() && e.Rank == c.rank {
		// Give the world ranks too: the transports' words name those
		// (the peer's is wpeer, which failPeer records).
		if e == be {
			cp := *be
			e = &cp
		}
		e.split, e.worldRank = true, c.members[c.rank]
	}
	c.w.failPeer(e, wp)
	c.w.failedFlight(e)
	return e
}

// split reports whether c's ranks differ from the world's (a communicator
// made by Split that is not a copy of the world).
func (c *Comm) split() bool {
	if len(c.members) != c.w.size {
		return true
	}
	for i, wr := range c.members {
		if wr != i {
			return true
		}
	}
	return false
}

// Abort ends the communicator (and every communicator of this job in this
// process) from any goroutine: pending and later calls here fail with
// Aborted, and peers' calls fail too. It does not block.
func (c *Comm) Abort(reason error) {
	if reason == nil {
		reason = errors.New("Abort called")
	}
	e := &Error{Kind: Aborted, Rank: c.rank, Call: "abort", Peer: -1, Err: reason}
	c.w.fail(e)
	c.w.failedFlight(e)
}

// Close releases the communicator. Closing the communicator returned by
// Init or NewLocal closes the job's connections, and with them every
// communicator split from it; closing a split communicator only forgets it.
//
// Like MPI_Finalize, closing the job's communicator made by Init is
// collective: it waits
// (up to ten seconds, or the timeout if shorter) for every rank to close, so
// that no rank leaves while a peer is still finishing its last call. Being
// a call on every rank, it reports a disagreement that no earlier call
// reported (see "Disagreeing ranks" in the package documentation). Close
// returns the job's failure, if the job failed, so that a failure that no
// call reported is not lost.
func (c *Comm) Close() error {
	derr := c.closeDevice()
	if !c.root {
		serr := c.settleAtClose(min(c.w.opts.Timeout, 10*time.Second))
		if c.node != nil {
			return errors.Join(serr, derr, c.node.Close())
		}
		return errors.Join(serr, derr)
	}
	perr := c.w.stopProfile()
	c.w.stopFlight()
	var err error
	if c.w.collectiveClose && c.w.failure.Load() == nil && !c.w.closed.Load() && c.Size() > 1 {
		d := min(c.w.opts.Timeout, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		if err = c.Barrier(ctx); err != nil {
			c.w.debugf("info", "close: not every rank closed within %v: %v", d, err)
		}
		cancel()
	}
	if cerr := c.w.close(); err == nil {
		err = cerr
	}
	if f := c.w.failure.Load(); err == nil && f != nil {
		err = &Error{Kind: f.Kind, Rank: c.rank, Call: "close", Peer: c.peerIn(f), Err: fmt.Errorf("the communicator failed: %w", f)}
	}
	if err == nil {
		err = perr
	}
	if err == nil {
		err = derr
	}
	return err
}

// Undefined is the color that excludes a rank from Split.
const Undefined = -1

// Split partitions the communicator: ranks that pass the same color form a
// new communicator, ordered by key and then by their rank here. Every rank
// must call Split; a rank that passes Undefined gets nil. It works like
// MPI_Comm_split.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	const call = "split"
	if color < 0 && color != Undefined {
		return nil, argError(c.rank, call, "color %d: want ≥ 0 or braid.Undefined", color)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.Size())
	if err := c.Allgather(ctx, mine, all); err != nil {
		return nil, err
	}
	n := c.splits.Add(1)
	if color == Undefined {
		// The others may set up a shared area: take part in its exchange.
		return nil, c.splitArea(ctx, nil, nil)
	}
	type ent struct{ key, rank int }
	var ents []ent
	for r := 0; r < c.Size(); r++ {
		if all[2*r] == int64(color) {
			ents = append(ents, ent{int(all[2*r+1]), r})
		}
	}
	sort.SliceStable(ents, func(i, j int) bool {
		if ents[i].key != ents[j].key {
			return ents[i].key < ents[j].key
		}
		return ents[i].rank < ents[j].rank
	})
	members := make([]int, len(ents))
	rank := -1
	for i, e := range ents {
		members[i] = c.members[e.rank]
		if e.rank == c.rank {
			rank = i
		}
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d/%d", c.id, n, color)
	sub := newComm(c.w, h.Sum32(), rank, members)
	parents := make([]int, len(ents))
	for i, e := range ents {
		parents[i] = e.rank
	}
	if err := c.splitArea(ctx, sub, parents); err != nil {
		return nil, err
	}
	c.w.debugf("info", "split comm %08x color %d: comm %08x, %d ranks, rank %d", c.id, color, sub.id, len(members), rank)
	return sub, nil
}
