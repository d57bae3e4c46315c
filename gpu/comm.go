package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// Host is what the executor needs of the host communicator: the ranks'
// places, and one gather of a few bytes from every rank, used when a Comm
// is made to share the mailbox's name. A *braid.Comm provides it through
// an adapter in package braid.
type Host interface {
	Rank() int
	Size() int
	// Allgather writes rank r's len(send) bytes to recv[r*len(send):] for
	// every rank r.
	Allgather(ctx context.Context, send, recv []byte) error
}

// Comm runs schedules on the device buffers of one rank. Every rank of the
// host communicator makes one, on its own GPU, and then calls Run with the
// same sequence of calls. A Comm runs one call at a time; concurrent Runs
// are serialised.
type Comm struct {
	w    *cuda.Worker
	rank int
	n    int
	s    cuda.Stream
	mb   mailbox

	mu  sync.Mutex
	seq uint32
	err error // a failed call leaves the ranks out of step: later calls fail with it

	// Owned by the worker closure of the running call (under mu).
	exports map[uint64]export          // this rank's allocations, by buffer id
	mapped  map[peerBuf]cuda.DevicePtr // peers' allocations opened here
	opened  map[cuda.IPCEventHandle]cuda.Event
	ready   [][]ownEvent // [peer]: recorded before a chunk may be read
	done    [][]ownEvent // [peer]: recorded after a peer's chunk was read
	tmp     cuda.DevicePtr
	tmpSize int
	oldTmp  []cuda.DevicePtr
	stash   map[stashKey]notice
	outbox  [][]notice // [peer]: notices waiting for room in the ring
	state   []uint8
	nsend   []int
	nrecv   []int
	stats   *stats // BRAID_GPU_STATS=1: where the time of calls goes
}

// stats accumulates where the time of calls goes, for BRAID_GPU_STATS.
type stats struct {
	calls, steps int
	run          time.Duration // Run, from the caller's side
	issue        time.Duration // the closure until the final synchronisation
	wait         time.Duration // of which polling for peers' notices
	sync         time.Duration // the final stream synchronisation
}

func (s *stats) String() string {
	if s.calls == 0 {
		return "no calls"
	}
	per := func(d time.Duration) string { return fmt.Sprintf("%.2fus", d.Seconds()*1e6/float64(s.calls)) }
	return fmt.Sprintf("%d calls, %.1f steps each; per call: run %s = issue %s (waiting for peers %s) + final sync %s + hand-off %s",
		s.calls, float64(s.steps)/float64(s.calls), per(s.run), per(s.issue), per(s.wait), per(s.sync), per(s.run-s.issue-s.sync))
}

type export struct {
	base cuda.DevicePtr
	size int
	mem  cuda.IPCMemHandle
}

type peerBuf struct {
	peer int
	id   uint64
}

type ownEvent struct {
	ev cuda.Event
	h  cuda.IPCEventHandle
}

type stashKey struct {
	peer int32
	kind uint32
	seq  uint32
	tag  int32
}

// New makes the executor of host.Rank() on the GPU of w, which the caller
// keeps and closes after the Comm. Every rank of host calls New at the
// same time, each with a worker of a different GPU of this host. A rank
// that could not get a worker calls New with w nil: it fails, and so do
// the others, instead of waiting for it.
func New(ctx context.Context, host Host, w *cuda.Worker) (*Comm, error) {
	g := &Comm{
		w: w, rank: host.Rank(), n: host.Size(),
		exports: map[uint64]export{},
		mapped:  map[peerBuf]cuda.DevicePtr{},
		opened:  map[cuda.IPCEventHandle]cuda.Event{},
		stash:   map[stashKey]notice{},
	}
	g.ready = make([][]ownEvent, g.n)
	g.done = make([][]ownEvent, g.n)
	g.outbox = make([][]notice, g.n)
	g.nsend = make([]int, g.n)
	g.nrecv = make([]int, g.n)
	g.mb = mailbox{n: g.n, rank: g.rank}
	if os.Getenv("BRAID_GPU_STATS") == "1" {
		g.stats = &stats{}
	}
	err := loadExtra()
	if err == nil && w == nil {
		err = errors.New("gpu: no GPU worker")
	}
	if err == nil {
		err = w.Do(ctx, func(c *cuda.Ctx) (err error) {
			if err := c.LoadKernels(); err != nil {
				return err
			}
			g.s, err = c.NewStream(0)
			return err
		})
	}
	// Every rank takes part in the exchange even if its own set-up failed,
	// so that the others learn of it instead of waiting.
	if merr := g.shareMailbox(ctx, host, err); merr != nil {
		if err == nil {
			err = merr
		}
	}
	if err != nil {
		g.release()
		return nil, err
	}
	return g, nil
}

// shareMailbox creates the mailbox on rank 0 and maps it everywhere. Each
// rank's record is a status byte (1 ready, 2 failed) and a text: rank 0's
// path, or an error.
func (g *Comm) shareMailbox(ctx context.Context, host Host, local error) error {
	if g.n == 1 {
		return local
	}
	const recLen = 256
	rec := func(err error, text string) []byte {
		b := make([]byte, recLen)
		b[0] = 1
		if err != nil {
			b[0], text = 2, err.Error()
		}
		copy(b[1:], text)
		return b
	}
	text := func(b []byte) string { return string(bytes.TrimRight(b[1:], "\x00")) }
	size := mailboxSize(g.n)
	var path string
	if local == nil && g.rank == 0 {
		path, g.mb.mem, local = createShared(size)
	}
	all := make([]byte, recLen*g.n)
	if err := host.Allgather(ctx, rec(local, path), all); err != nil {
		if path != "" {
			os.Remove(path)
		}
		return fmt.Errorf("gpu: sharing the mailbox: %w", err)
	}
	status := func(all []byte) error {
		for r := range g.n {
			b := all[r*recLen : (r+1)*recLen]
			if b[0] != 1 {
				return fmt.Errorf("gpu: rank %d failed to set up: %s", r, text(b))
			}
		}
		return nil
	}
	first := status(all)
	if first == nil && g.rank != 0 {
		g.mb.mem, local = openShared(text(all[:recLen]), size)
	}
	if first != nil && local == nil {
		local = first
	}
	// The second exchange tells rank 0 that every rank has mapped the file
	// (or given up), so that it can remove the name.
	err := host.Allgather(ctx, rec(local, ""), all)
	if path != "" {
		os.Remove(path)
	}
	if err != nil {
		return fmt.Errorf("gpu: sharing the mailbox: %w", err)
	}
	if first != nil {
		return first
	}
	return status(all)
}

// Rank returns the rank of this executor.
func (g *Comm) Rank() int { return g.rank }

// Size returns the number of ranks.
func (g *Comm) Size() int { return g.n }

// Worker returns the worker of this rank's GPU.
func (g *Comm) Worker() *cuda.Worker { return g.w }

// Stream returns the stream the calls run on.
func (g *Comm) Stream() cuda.Stream { return g.s }

// Call is one collective call on device buffers.
type Call struct {
	Params sched.Params
	Prog   *sched.Program // this rank's program for Params
	DType  dtype.DType
	Op     dtype.Op
	In     cuda.DevicePtr // Params.InLen(rank) elements; may be 0 when that is 0
	Out    cuda.DevicePtr // Params.OutLen(rank) elements
}

// Run runs k on this rank and returns once its results are in k.Out and no
// peer reads this rank's buffers any more. The buffers must be ready when
// Run is called: the work that wrote them must have completed.
func (g *Comm) Run(ctx context.Context, k *Call) error {
	if k.Params.NRanks != g.n {
		return fmt.Errorf("gpu: a call for %d ranks on a communicator of %d", k.Params.NRanks, g.n)
	}
	if k.Prog == nil || k.Prog.Rank != g.rank {
		return fmt.Errorf("gpu: rank %d was given no program of its own", g.rank)
	}
	if !k.DType.Valid() {
		return fmt.Errorf("gpu: invalid dtype %v", k.DType)
	}
	if k.Params.Coll.Reduces() && !dtype.Supports(k.DType, k.Op) {
		return fmt.Errorf("gpu: op %v is not defined on %v", k.Op, k.DType)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	g.seq++
	seq := g.seq
	var t0 time.Time
	if g.stats != nil {
		t0 = time.Now()
	}
	err := g.w.Do(ctx, func(c *cuda.Ctx) error { return g.run(ctx, c, k, seq) })
	if g.stats != nil {
		g.stats.run += time.Since(t0)
	}
	if err != nil {
		g.err = fmt.Errorf("gpu: rank %d: an earlier call failed: %w", g.rank, err)
	}
	return err
}

// Close releases the stream, events, scratch and peer mappings, and the
// mailbox. The worker stays open. Every rank closes its Comm after its
// last call; none of a rank's memory is read by peers once Run returned.
func (g *Comm) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = errors.New("gpu: communicator closed")
	}
	if g.stats != nil {
		fmt.Fprintf(os.Stderr, "braid gpu: rank %d: %v\n", g.rank, g.stats)
	}
	return g.release()
}

func (g *Comm) release() error {
	var errs []error
	if g.w == nil {
		return nil
	}
	err := g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		var errs []error
		for _, p := range g.mapped {
			errs = append(errs, c.IPCCloseMemHandle(p))
		}
		for _, ev := range g.opened {
			errs = append(errs, c.DestroyEvent(ev))
		}
		for _, l := range [][][]ownEvent{g.ready, g.done} {
			for _, evs := range l {
				for _, e := range evs {
					errs = append(errs, c.DestroyEvent(e.ev))
				}
			}
		}
		for _, p := range append(g.oldTmp, g.tmp) {
			if p != 0 {
				errs = append(errs, c.Free(p))
			}
		}
		if g.s != 0 {
			errs = append(errs, c.DestroyStream(g.s))
		}
		return errors.Join(errs...)
	})
	errs = append(errs, err)
	g.mapped, g.opened, g.ready, g.done, g.oldTmp, g.tmp, g.s = nil, nil, nil, nil, nil, 0, 0
	if g.mb.mem != nil {
		errs = append(errs, unmapShared(g.mb.mem))
		g.mb.mem = nil
	}
	return errors.Join(errs...)
}
