package braid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/braid-ccl/braid/bootstrap"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shm"
	"github.com/braid-ccl/braid/transport/shmcoll"
	"github.com/braid-ccl/braid/transport/tcp"
)

// Init joins the job this process was launched into and returns the world
// communicator. It reads the rank's place from the environment (braid run,
// Open MPI, PMI, Slurm, torchrun; see package bootstrap), meets the other
// ranks through the job's store, and connects to every peer: shared memory
// within a host, TCP across hosts. A process started without a launcher is
// a job of one rank. Init blocks until every rank has joined or ctx ends.
func Init(ctx context.Context, opts *Options) (*Comm, error) {
	o, err := opts.resolve(os.Getenv)
	if err != nil {
		return nil, &Error{Kind: InvalidArgument, Rank: -1, Call: "init", Peer: -1, Err: err}
	}
	info, err := bootstrap.FromEnv()
	if err == nil {
		err = o.placeRanks(info.Size)
	}
	if err != nil {
		rank := -1
		if info.Size > 0 {
			rank = info.Rank // FromEnv read it before it failed
		}
		return nil, &Error{Kind: InvalidArgument, Rank: rank, Call: "init", Peer: -1, Err: err}
	}
	c, err := initFrom(ctx, o, info)
	if err != nil {
		return nil, classify(info.Rank, "init", err)
	}
	c.w.startProfile()
	c.w.startFlight()
	return c, nil
}

func initFrom(ctx context.Context, o Options, info bootstrap.Info) (*Comm, error) {
	w := &world{rank: info.Rank, size: info.Size, opts: o, model: o.model(),
		logger: log.New(o.Log, "braid: ", log.Lmicroseconds), clock: newClock()}
	w.agg.job, w.agg.secret = info.JobID, info.Secret
	w.hosts = make([]string, info.Size)
	w.numa = make([]int, info.Size)
	w.conns = make([]transport.Conn, info.Size)
	host := o.Host
	if host == "" {
		host = bootstrap.HostID()
	}
	if info.Size == 1 {
		w.hosts[0] = host
		w.reg = memRegistry(1)
		c := newComm(w, jobComm(info.JobID), 0, []int{0})
		c.root = true
		if g, err := shmcoll.NewLocal(1, shmcoll.Options{Slot: o.SharedSlot}); err == nil {
			c.setNode(g[0])
		}
		return c, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	store, closeStore, err := bootstrap.Open(ctx, &info)
	if err != nil {
		return nil, fmt.Errorf("opening the job's store %q: %w", info.Store, err)
	}
	w.closers = append(w.closers, closeStore)
	w.watchStore(store, &info)
	go watchInit(ctx, stop, store, &info)
	fail := func(err error) (*Comm, error) {
		// A rank or the store was lost while this one waited (watchInit),
		// or the store was, and this rank's call on it failed first.
		cause, ok := context.Cause(ctx).(*Error)
		if !ok {
			cause = storeLost(store, &info)
		}
		if cause != nil {
			err = &Error{Kind: cause.Kind, Rank: cause.Rank, Call: cause.Call, Peer: cause.Peer,
				Err: fmt.Errorf("%w; Init stopped: %v", cause.Err, err)}
		}
		// The peers already connected learn of this failure through the
		// transports' abort, which names its cause, rather than seeing
		// this rank close and naming it; the ranks still in their Init
		// learn of it from the store (watchInit).
		e := classify(info.Rank, "init", err)
		w.fail(e)
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		bootstrap.Leave(lctx, store, fmt.Sprintf("braid-abort kind=%d peer=%d from=%d: %v", e.Kind, e.Peer, w.rank, e))
		lcancel()
		w.close()
		return nil, err
	}
	prefix := "braid/" + info.JobID
	if info.Rank == 0 {
		// The job's aggregation daemons are rank 0's (see below).
		if err := store.Set(ctx, prefix+"/agg", []byte(w.opts.Agg)); err != nil {
			return fail(fmt.Errorf("publishing BRAID_AGG: %w", err))
		}
	}
	self := transport.Endpoint{Rank: info.Rank, Host: host, PID: os.Getpid()}
	if err := store.Set(ctx, fmt.Sprintf("%s/ep/%d", prefix, info.Rank), []byte(fmt.Sprintf("%d\t%d\t%s", self.PID, numaNode(), host))); err != nil {
		return fail(fmt.Errorf("publishing this rank's endpoint: %w", err))
	}
	eps := make([]transport.Endpoint, info.Size)
	for r := range info.Size {
		v, err := store.Get(ctx, fmt.Sprintf("%s/ep/%d", prefix, r))
		if err != nil {
			return fail(fmt.Errorf("waiting for rank %d to join through the store %s (%d ranks expected): %w", r, info.Store, info.Size, err))
		}
		f := strings.SplitN(string(v), "\t", 3)
		var p, numa int
		var err1, err2 error
		if len(f) == 3 {
			p, err1 = strconv.Atoi(f[0])
			numa, err2 = strconv.Atoi(f[1])
		}
		if len(f) != 3 || err1 != nil || err2 != nil {
			return fail(fmt.Errorf("rank %d published a malformed endpoint %q", r, v))
		}
		eps[r] = transport.Endpoint{Rank: r, Host: f[2], PID: p}
		w.hosts[r] = f[2]
		w.numa[r] = numa
	}
	// The aggregation daemons reach every rank through the store: rank 0's
	// BRAID_AGG (or Options.Agg) is the job's, so that a launcher that
	// passes the variable to rank 0 alone is enough; a rank that names
	// other daemons is refused, for the ranks must agree on them.
	if info.Rank != 0 {
		v, err := store.Get(ctx, prefix+"/agg")
		if err != nil {
			return fail(fmt.Errorf("reading rank 0's BRAID_AGG from the store: %w", err))
		}
		switch job := string(v); {
		case w.opts.Agg == "":
			w.opts.Agg = job
		case w.opts.Agg != job:
			return fail(&Error{Kind: InvalidArgument, Rank: info.Rank, Call: "init", Peer: 0,
				Err: fmt.Errorf("BRAID_AGG=%q here, %q on rank 0: every rank must name the same aggregation daemons, or only rank 0", w.opts.Agg, job)})
		}
	}
	// One transport per pair: shm within a host unless tcp is forced.
	var local, remote []transport.Endpoint
	for _, e := range eps {
		if e.Rank == info.Rank {
			continue
		}
		if e.Host == host && o.Transport != "tcp" {
			local = append(local, e)
		} else {
			remote = append(remote, e)
		}
	}
	connect := func(t transport.Transport, peers []transport.Endpoint) error {
		if len(peers) == 0 {
			return nil
		}
		m, err := t.Connect(ctx, transport.Config{
			Self: self, Peers: peers, World: info.Size, Store: store,
			Prefix: prefix + "/" + t.Name(), Secret: info.Secret, Lost: w.lost,
			Unexpected: w.unexpected,
		})
		if err != nil {
			return fmt.Errorf("connecting %s to ranks %v: %w", t.Name(), ranksOf(peers), err)
		}
		w.meshMu.Lock()
		w.meshes = append(w.meshes, m)
		w.meshMu.Unlock()
		for _, p := range peers {
			w.conns[p.Rank] = m.Conn(p.Rank)
			if w.conns[p.Rank] == nil {
				return fmt.Errorf("%s did not connect rank %d", t.Name(), p.Rank)
			}
		}
		return nil
	}
	if err := connect(shm.New(), local); err != nil {
		return fail(noSpace(err))
	}
	// Registered memory (Alloc) is shared with the peers of this host.
	if len(local) == 0 {
		w.reg = memRegistry(info.Size)
	} else if err := w.joinRegistry(ctx, store, prefix, local, info.Secret); err != nil {
		return fail(err)
	}
	// TCP between ranks of one host (BRAID_TRANSPORT=tcp) stays on the
	// loopback interface unless told otherwise; across hosts it listens on
	// the interface BRAID_SOCKET_IFNAME names, or every interface, and
	// advertises BRAID_ADVERTISE_ADDR or the interface's address.
	topts := tcp.Options{Interfaces: o.SocketIfname, AdvertiseHost: o.AdvertiseAddr}
	sameHost := true
	for _, e := range remote {
		sameHost = sameHost && e.Host == host
	}
	if sameHost && o.SocketIfname == "" && o.AdvertiseAddr == "" {
		topts.ListenAddr = "127.0.0.1:0"
	}
	if err := connect(tcp.New(topts), remote); err != nil {
		return fail(err)
	}
	if e := w.failure.Load(); e != nil {
		// A peer's message or abort failed the job while the meshes were
		// being connected: tell the peers of the meshes made since.
		w.abortMeshes(e, e.Peer)
	}
	if err := w.syncClock(ctx, jobComm(info.JobID)); err != nil {
		return fail(err)
	}
	w.startClockRefresh(jobComm(info.JobID), o.ClockRefresh)
	c := newComm(w, jobComm(info.JobID), info.Rank, identity(info.Size))
	c.root = true
	if len(remote) == 0 {
		// Every rank is on this host: the collectives may run through one
		// shared area (transport/shmcoll). Every rank learns whether every
		// rank could map it, so that all use it or none.
		w.secret = info.Secret
		g, err := shmcoll.Join(ctx, shmcoll.Config{Rank: info.Rank, Ranks: info.Size, Store: store,
			Key: prefix + "/shmcoll", Secret: info.Secret, Options: areaOptions(o.SharedSlot, info.Size, hostCPUs(info.Size))})
		switch {
		case err == nil:
			c.setNode(g)
			w.closers = append(w.closers, g.Close)
		case errors.Is(err, shmcoll.ErrUnavailable):
			w.debugf("info", "no shared area for the collectives (%v): they run as schedules over shm", err)
		default:
			return fail(err)
		}
	}
	// Every rank has what it needs from the store: the last one removes
	// the files the store keeps on disk, so that nothing is left behind
	// if the job dies from here on.
	if err := bootstrap.Settle(ctx, store); err != nil {
		w.debugf("info", "settling the job's store: %v", err)
	}
	level := "trace"
	if c.LocalRank() == 0 {
		level = "info"
	}
	w.setSpin(c.LocalSize(), level)
	setProcs(w, o, c.LocalSize())
	if what, err := bindRank(o.Bind, c.LocalRank(), c.LocalSize()); err != nil {
		return fail(&Error{Kind: InvalidArgument, Rank: info.Rank, Call: "Init", Peer: -1, Err: fmt.Errorf("BRAID_BIND=%s: %w", o.Bind, err)})
	} else if what != "" {
		w.debugf(level, "%s", what)
	}
	w.collectiveClose = true
	if info.Rank == 0 {
		w.debugf("info", "job %s: %d ranks on %d hosts via %s; %d local ranks (shm), %d remote (tcp)",
			info.JobID, info.Size, c.nhosts, info.Launcher, len(local)+1, len(remote))
	}
	return c, nil
}

// watchStore makes the rank notice the loss of the job's store (its
// server, braid run or rank 0, has died: a launcher killed with SIGKILL
// leaves its ranks behind, reparented, when a shell stands between them):
// the communicator then fails with PeerLost, so that pending and later
// calls end. It also makes the rank report its first failure to a TCP
// store, where braid run reads which rank failed first.
func (w *world) watchStore(store bootstrap.Store, info *bootstrap.Info) {
	if info.Store == "" || strings.HasPrefix(info.Store, "file:") {
		return
	}
	var once sync.Once
	w.report = func(e *Error, peer int) {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			f := bootstrap.Failure{Rank: w.rank, Time: time.Now(), Kind: e.Kind.String(),
				Peer: peer, Echo: errors.Is(e.Err, transport.ErrAborted), Msg: e.Error()}
			if fe, ok := w.stuckCall(); ok {
				f.InCall, f.Comm, f.Seq, f.Call, f.Waited = true, fe.comm, fe.seq, fe.name, fe.waitPeer
			}
			bootstrap.ReportFailure(ctx, store, f)
		})
	}
	lost, why := bootstrap.Lost(store)
	if lost == nil {
		return
	}
	go func() {
		<-lost
		if err := why(); err != nil && !w.closed.Load() {
			w.fail(storeLossError(info, "store", "", err))
		}
	}()
}

// watchInit stops Init (through stop, with the *Error to report) when a
// peer is lost during its set-up, which the job's TCP store sees
// (bootstrap.LostRank: a rank killed before its peers connect to it would
// otherwise leave them waiting for it until the timeout), or when the
// store itself is lost. It returns when ctx ends.
func watchInit(ctx context.Context, stop context.CancelCauseFunc, store bootstrap.Store, info *bootstrap.Info) {
	if lost, _ := bootstrap.Lost(store); lost != nil {
		go func() {
			select {
			case <-lost:
				if e := storeLost(store, info); e != nil {
					stop(e)
				}
			case <-ctx.Done():
			}
		}()
	}
	l, err := bootstrap.LostRank(ctx, store)
	if err != nil || l.Rank == info.Rank {
		return
	}
	if !l.Failed {
		stop(&Error{Kind: PeerLost, Rank: info.Rank, Call: "init", Peer: l.Rank,
			Err: fmt.Errorf("rank %d is gone: %s (the job's store at %s saw it): %w", l.Rank, l.Why, info.Store, transport.ErrPeerLost)})
		return
	}
	// Rank l.Rank's Init failed; its reason carries an abort token, as an
	// abort through the transports would: report the cause it names.
	e := &Error{Kind: Aborted, Rank: info.Rank, Call: "init", Peer: l.Rank,
		Err: fmt.Errorf("rank %d's Init failed: %s: %w", l.Rank, l.Why, transport.ErrAborted)}
	if k, p, _, ok := abortCause(e.Err); ok && (k == PeerLost || k == Mismatch || k == Timeout) && p >= 0 && p != info.Rank {
		e.Kind, e.Peer = k, p
	}
	stop(e)
}

// storeLost returns the error of a rank whose connection to the job's
// store ended during Init, or nil while it holds (or the store is not one
// that another process serves). Where rank 0 serves the store (started by
// hand, mpirun, torchrun), the loss is rank 0's: the error names it.
func storeLost(store bootstrap.Store, info *bootstrap.Info) *Error {
	lost, why := bootstrap.Lost(store)
	if lost == nil {
		return nil
	}
	select {
	case <-lost:
	default:
		return nil
	}
	err := why()
	if err == nil {
		return nil
	}
	return storeLossError(info, "init", " during Init", err)
}

// storeLossError is the error of a rank that lost the job's store (err):
// PeerLost, naming rank 0 where it served the store.
func storeLossError(info *bootstrap.Info, call, when string, err error) *Error {
	peer, who := -1, "the launcher or the rank that served it is gone"
	if info.RankZeroServes && info.Rank != 0 {
		peer, who = 0, "rank 0, which served it, is gone"
	}
	return &Error{Kind: PeerLost, Rank: info.Rank, Call: call, Peer: peer,
		Err: fmt.Errorf("lost the job's store at %s%s: %s: %w", info.Store, when, who, err)}
}

func ranksOf(eps []transport.Endpoint) []int {
	out := make([]int, len(eps))
	for i, e := range eps {
		out[i] = e.Rank
	}
	return out
}

func jobComm(job string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(job))
	return h.Sum32()
}

// setProcs lowers GOMAXPROCS to this host's share of cores per rank (see
// Options.KeepGOMAXPROCS).
func setProcs(w *world, o Options, localRanks int) {
	if o.KeepGOMAXPROCS || localRanks < 2 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	want := max(1, runtime.NumCPU()/localRanks)
	if cur := runtime.GOMAXPROCS(0); want < cur {
		runtime.GOMAXPROCS(want)
		if w.rank == 0 {
			w.debugf("info", "GOMAXPROCS %d -> %d: %d ranks share this host's %d cores (Options.KeepGOMAXPROCS or the GOMAXPROCS variable keep another figure)",
				cur, want, localRanks, runtime.NumCPU())
		}
	}
}
