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
	"github.com/braid-ccl/braid/gpu/fused"
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
	// hostShare is Options.HostShare, resolved (hostShare), or -1 for no
	// host path; unless -1, the mailbox file ends with the fused kernels'
	// host region (hostRegion).
	hostShare int

	mu  sync.Mutex
	seq uint32
	err error // a failed call leaves the ranks out of step: later calls fail with it

	capture *capture            // the capture under way (BeginCapture), or nil
	graphs  map[*Graph]struct{} // the graphs made here and not closed, destroyed by Close

	// A failure of a call run after Enqueue returned, for the next call
	// or Synchronize to report.
	aerrMu sync.Mutex
	aerr   error
	// refusedErr is a queued lone Send or Recv's refused message
	// (SizeMismatchError), which the next Synchronize returns and clears:
	// it leaves the ranks in step.
	refusedErr error

	fused    *fusedState // nil: one-shot allreduces run as programs
	fusedOff string      // why fused is nil, if it was asked for
	// res is the resident kernel (Options.Resident), or nil;
	// residentOff says why it is nil where it was asked for.
	res         *resident
	residentOff string
	// queued is set while calls may be queued on the stream that no
	// synchronous call or Synchronize has waited for since (Enqueue, a
	// graph's launch): the resident kernel, which does not run on the
	// stream, waits until it is clear.
	queued bool
	// multiPathSource names Options.MultiPath, for logs.
	multiPathSource string
	pushMax         int // Options.PushMax, resolved; negative: always pull
	landing         map[*sched.Program]landing
	copyS           []cuda.Stream // [peer]: pushes to peer run here, beside the main stream
	lev             []cuda.Event  // local events, drawn in order by a call (nlev)
	nlev            int
	copied          []int  // [step]: index in lev of a pushed Send's "copy done" event, or -1
	stepEv          []int  // [step]: index in lev of the event behind its main-stream work, or -1
	needEv          []bool // [step]: a push depends on it
	needs           map[*sched.Program][]bool
	synced          []bool // [step]: the main stream waits for its deps' copies
	usedS           []bool // [peer]: copyS[peer] has work of this call

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
	be      backend // the running program call's steps, for exec.Drive
	nsend   []int
	nrecv   []int
	stats   *stats // Options.Stats: where the time of calls goes
}

// stats accumulates where the time of calls goes, for Options.Stats.
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

// Options tunes a Comm.
type Options struct {
	// OneShotBytes is the largest allreduce, in bytes, that the fused
	// one-shot kernel runs (calls of algorithm "gpu_oneshot"; larger ones
	// run as programs); slots are at least this large. 0 means none.
	OneShotBytes int
	// TwoShot runs allreduces of algorithm "direct" (a reduce-scatter and
	// an allgather) as the fused two-shot kernel, of any size: the vector
	// passes through the slots in rounds.
	TwoShot bool
	// Fused runs broadcasts, allgathers and reduce-scatters that ask for
	// the planner (Call.Fused) as pipelined fused kernels, of any size.
	Fused bool
	// SlotBytes is the size of each of the 2·n slots of the region every
	// rank registers for the fused kernels (what peers push into); a
	// pipelined call moves at most a slot per peer a round. 0 means
	// fused.DefaultSlotBytes(n); it is raised to OneShotBytes.
	SlotBytes int
	// LLBytes is the largest one-shot allreduce, in bytes, that runs in
	// low-latency lines (fused.OneShotLL: data and flag in one store,
	// no fence; twice the bytes on the links). Vectors in whole 8-byte
	// words qualify (a rank whose buffers are not 8-byte aligned runs
	// the kernel on aligned scratch), up to
	// fused.LLMax. 0 means fused.DefaultLLBytes(n); negative means none.
	LLBytes int
	// Blocks is the most blocks a pipelined fused kernel runs with; 0
	// means by kind and size.
	Blocks int
	// HostShare is the percentage of every round of a fused two-shot
	// allreduce, broadcast (above fused.BcastDirectMax), or pipelined
	// reduce-scatter or allgather, on more than 2 GPUs (on 2 a broadcast
	// only), that travels through pinned host memory beside NVLink
	// (multi-path; at most 50). 0 means by kind and size
	// (fused.DefaultHostShare, or MultiPath); negative means none.
	HostShare int
	// MultiPath, where not nil and HostShare is 0, gives the host share
	// of those kernels by the call's size, in place of
	// fused.DefaultHostShare (fused.Config.MultiPath); MultiPathSource
	// names it in logs. Every rank passes the same table.
	MultiPath       fused.HostShares
	MultiPathSource string
	// PushMax is the largest reducing call, in bytes, whose data moves by
	// push (each sender's copy engine writes into the receiver's memory;
	// reductions read a landing area of the receiver's scratch, which
	// grows to the bytes a rank receives to reduce in one call). Larger
	// ones, and every call when it is negative, move by pull (receivers
	// read senders' memory). Calls that do not reduce always push. 0
	// means DefaultPushMax.
	PushMax int
	// Pull moves every program's data by pull (PushMax negative).
	Pull bool
	// LL2Bytes is the largest one-shot allreduce, in bytes, that runs as
	// a two-shot in low-latency lines (fused.TwoShotLL) once it is
	// above LLBytes; 0 means fused.DefaultLL2Bytes(n), negative none. At
	// most fused.TwoShotLLMax(n).
	LL2Bytes int
	// LLBlocks is the grid of a call in low-latency lines; 0 means a
	// thread per 8-byte word.
	LLBlocks int
	// Threads is the block size of a pipelined fused kernel: 0 means
	// fused.Threads (512), else a multiple of 32 up to 512.
	Threads int
	// MinRounds is the fewest rounds a pipelined fused kernel cuts a
	// vector into, where areas of at least 1 KiB a block allow; 0 means
	// fused.DefaultMinRounds.
	MinRounds int
	// BcastRamp is how many halvings a broadcast on more than 2 GPUs cuts
	// its last full round into (fused.Kernel.Ramp): 0 means by size
	// (fused.DefaultBcastRamp), negative none, else at most fused.MaxRamp.
	BcastRamp int
	// Stats prints, when the Comm closes, where the time of its
	// synchronous program calls went.
	Stats bool
	// Shared are the settings every rank must pass alike (the options
	// above as the caller resolved them, with the names the caller knows
	// them by): New compares them across ranks and fails on every rank,
	// with a *MismatchError, where they differ, instead of letting ranks
	// that choose differently run different kernels and hang.
	Shared []Setting
	// Failed, where not nil, is why this rank cannot take part (a bad
	// setting): New takes part in the set-up's exchanges with it, so that
	// every rank fails, the others naming this rank and Failed.
	Failed error
	// FirstSeq is the fused kernels' first sequence number (0: 1), for
	// tests that start near SeqLimit to cross the reset.
	FirstSeq uint32
	// Resident, where positive, runs small synchronous allreduces (the
	// low-latency one-shot's, up to ResidentMax bytes) on a kernel that
	// stays on the GPU between calls, which ends after Resident without
	// a call (see serve.go). Every rank passes the same value.
	Resident time.Duration
	// ResidentMax is the largest allreduce, in bytes, that the resident
	// kernel runs; 0 means DefaultResidentMax.
	ResidentMax int
}

// Setting is one value that every rank must share (Options.Shared).
type Setting struct{ Name, Value string }

// MismatchError says that the ranks were made with different settings.
type MismatchError struct {
	Name         string // the setting, as Options.Shared names it
	Rank         int    // a rank whose value differs from rank 0's
	Value, Want  string // that rank's value and rank 0's
	RecordTooBig bool   // the settings did not fit the exchange
}

func (e *MismatchError) Error() string {
	if e.RecordTooBig {
		return "gpu: the settings every rank must share are too long to compare"
	}
	return fmt.Sprintf("gpu: %s is %q on rank %d and %q on rank 0: every rank must set it alike", e.Name, e.Value, e.Rank, e.Want)
}

// DefaultPushMax is Options.PushMax's default: pushes use the links both
// ways at full speed where pulls from both ends at once do not (two H200s:
// 778 GB/s of pushes both ways, 420–470 GB/s of pulls), at the cost of
// landing scratch.
const DefaultPushMax = 4 << 30

// New makes the executor of host.Rank() on the GPU of w, which the caller
// keeps and closes after the Comm. Every rank of host calls New at the
// same time, each with a worker of a different GPU of this host and the
// same options. A rank that could not get a worker calls New with w nil:
// it fails, and so do the others, instead of waiting for it.
func New(ctx context.Context, host Host, w *cuda.Worker, opts Options) (*Comm, error) {
	g := &Comm{
		w: w, rank: host.Rank(), n: host.Size(),
		exports: map[uint64]export{},
		mapped:  map[peerBuf]cuda.DevicePtr{},
		opened:  map[cuda.IPCEventHandle]cuda.Event{},
		stash:   map[stashKey]notice{},
		landing: map[*sched.Program]landing{},
		needs:   map[*sched.Program][]bool{},
		graphs:  map[*Graph]struct{}{},
		pushMax: opts.PushMax,
	}
	if g.pushMax == 0 {
		g.pushMax = DefaultPushMax
	}
	if opts.Pull {
		g.pushMax = -1
	}
	g.ready = make([][]ownEvent, g.n)
	g.done = make([][]ownEvent, g.n)
	g.outbox = make([][]notice, g.n)
	g.copyS = make([]cuda.Stream, g.n)
	g.usedS = make([]bool, g.n)
	g.nsend = make([]int, g.n)
	g.nrecv = make([]int, g.n)
	g.mb = mailbox{n: g.n, rank: g.rank}
	g.multiPathSource = opts.MultiPathSource
	g.hostShare = -1 // no host region without pipelined kernels
	if g.n > 1 && (opts.Fused || opts.TwoShot) {
		g.hostShare = hostShare(opts.HostShare)
	}
	if opts.Stats {
		g.stats = &stats{}
	}
	err := opts.Failed
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
	if err == nil {
		// Every rank gets here or none does: shareMailbox fails alike.
		err = g.agree(ctx, host, opts.Shared)
	}
	if err == nil {
		err = g.setupFused(ctx, host, opts)
	}
	if err == nil {
		err = g.setupResident(ctx, host, opts)
	}
	if err != nil {
		g.release()
		return nil, err
	}
	return g, nil
}

// agreeRecord is the bytes each rank sends to compare Options.Shared.
const agreeRecord = 4096

// agree compares the settings every rank must share across the ranks;
// every rank calls it, and every rank gets the same answer.
func (g *Comm) agree(ctx context.Context, host Host, settings []Setting) error {
	if g.n == 1 {
		return nil
	}
	var text []byte
	for _, s := range settings {
		text = append(text, s.Name...)
		text = append(text, 0)
		text = append(text, s.Value...)
		text = append(text, 0)
	}
	rec := make([]byte, agreeRecord)
	if len(text) < agreeRecord {
		rec[0] = 1
		copy(rec[1:], text)
	}
	all := make([]byte, agreeRecord*g.n)
	if err := host.Allgather(ctx, rec, all); err != nil {
		return fmt.Errorf("gpu: comparing the ranks' settings: %w", err)
	}
	parse := func(b []byte) map[string]string {
		m := map[string]string{}
		f := bytes.Split(bytes.TrimRight(b[1:], "\x00"), []byte{0})
		for i := 0; i+1 < len(f); i += 2 {
			m[string(f[i])] = string(f[i+1])
		}
		return m
	}
	want := parse(all[:agreeRecord])
	for r := range g.n {
		b := all[r*agreeRecord : (r+1)*agreeRecord]
		if b[0] != 1 {
			return &MismatchError{RecordTooBig: true, Rank: r}
		}
		got := parse(b)
		for _, s := range settings { // the same names, in the same order, on every rank
			if got[s.Name] != want[s.Name] {
				return &MismatchError{Name: s.Name, Rank: r, Value: got[s.Name], Want: want[s.Name]}
			}
		}
	}
	return nil
}

// Fused reports whether the fused kernels run (Options.OneShotBytes,
// TwoShot, Fused), and if not, why.
func (g *Comm) Fused() (bool, string) { return g.fused != nil, g.fusedOff }

// Overlapped reports whether the fused kernels are launched overlapped:
// each may begin as the kernel ahead of it on the stream ends
// (fused.Launch, cuda.Ctx.LaunchOverlapped).
func (g *Comm) Overlapped() bool { return g.fused != nil && g.fused.overlap }

// FusedResets is how many times the fused kernels' sequence reached
// SeqLimit and their flags were reset.
func (g *Comm) FusedResets() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fused == nil {
		return 0
	}
	return g.fused.resets
}

// LLBytes is the largest one-shot allreduce that runs in low-latency
// lines (Options.LLBytes), 0 without fused kernels.
func (g *Comm) LLBytes() int {
	if g.fused == nil {
		return 0
	}
	return g.fused.LLMax
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
	size := g.mbBytes()
	var path string
	if local == nil && g.rank == 0 {
		path, g.mb.mem, local = createShared(size)
		if local != nil && g.hostShare >= 0 {
			// No room for the host region (a small /dev/shm): the
			// rings alone, and no host path. The others see the size.
			g.hostShare, size = -1, mailboxSize(g.n)
			path, g.mb.mem, local = createShared(size)
		}
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
		g.mb.mem, local = openShared(text(all[:recLen]), size, mailboxSize(g.n))
		if local == nil && len(g.mb.mem) != size {
			g.hostShare = -1 // rank 0 made the file without the host region
		}
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

// Call is one collective call on device buffers: a fused kernel (Fused)
// or a program (Prog), as the planner decided.
type Call struct {
	Params sched.Params
	Algo   string // the planner's choice, for messages
	// Fused, where not nil, is the fused kernel that runs the call, from
	// Shape: Run launches it with the call's buffers and this Comm's
	// sequence number, and Prog is not used.
	Fused *fused.Kernel
	Prog  *sched.Program // this rank's program for Params, unless Fused
	DType dtype.DType
	Op    dtype.Op
	In    cuda.DevicePtr // Params.InLen(rank) elements; may be 0 when that is 0
	Out   cuda.DevicePtr // Params.OutLen(rank) elements
	// P2P, where not nil, makes the call point-to-point: only the ranks
	// its Prog's Send and Recv steps name take part (Params.Coll is
	// InvalidCollective, Params.Count unused, and In and Out hold what
	// the steps' chunks address). P2P[i] is the number of step i's
	// message among those of its (peer, tag) pair in its direction,
	// which the caller counts from 1: the call takes no sequence number
	// of the communicator's, so the collectives of every rank stay in
	// step, and its notices never meet a collective's. A message whose
	// ends differ in length or type is refused on both (a
	// *SizeMismatchError), before anything is written.
	P2P []uint32
}

// SizeMismatchError says that the two ends of a point-to-point message
// differ in length or type: nothing was written.
type SizeMismatchError struct {
	Rank, Peer int
	Tag        int32
	Send       bool // this rank's end is the Send
	Count      int  // this rank's elements
	DType      dtype.DType
	PeerCount  int // the peer's
	PeerDType  dtype.DType
}

func (e *SizeMismatchError) Error() string {
	me, other := "recv", "send"
	if e.Send {
		me, other = other, me
	}
	return fmt.Sprintf("gpu: rank %d: %s of %d %v elements with tag %d, and rank %d's matching %s has %d %v elements: the two ends must have the same length and type",
		e.Rank, me, e.Count, e.DType, e.Tag, e.Peer, other, e.PeerCount, e.PeerDType)
}

// Run runs k on this rank and returns once its results are in k.Out and no
// peer reads this rank's buffers any more. The buffers must be ready when
// Run is called: the work that wrote them must have completed.
func (g *Comm) Run(ctx context.Context, k *Call) error {
	if err := g.check(k); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.capturable(k); err != nil {
		return err
	}
	seq, err := g.next(k)
	if err != nil {
		return err
	}
	var t0 time.Time
	if g.stats != nil {
		t0 = time.Now()
	}
	cp := g.capture
	switch {
	case g.serves(k):
		err = g.runResident(ctx, k)
	case k.Fused != nil && cp == nil && g.fused.polled():
		err = g.runPolled(ctx, k, seq)
	default:
		err = g.w.Do(ctx, func(c *cuda.Ctx) error { return g.run(ctx, c, k, seq, waitStream, cp) })
	}
	if err == nil && cp == nil {
		g.queued = false // the call waited for the stream
	}
	if g.stats != nil {
		g.stats.run += time.Since(t0)
	}
	var sm *SizeMismatchError
	if err != nil && !(errors.As(err, &sm) && len(k.Prog.Steps) == 1) {
		// A refused message of a lone Send or Recv leaves nothing behind:
		// both ends refused it before anything moved.
		g.err = fmt.Errorf("gpu: rank %d: an earlier call failed: %w", g.rank, err)
	}
	return err
}

// Enqueue queues k on this rank's stream and returns at once, as NCCL's
// calls do: the worker issues it after the calls queued before, and the
// GPU runs it after the work queued before on the stream. k's buffers
// must be ready when the stream reaches the call, and hold the result
// once Synchronize returns (or once work queued on the stream after the
// call has run). The deadline bounds the call's waits for its peers. An
// error of the call is returned by a later call or by Synchronize.
func (g *Comm) Enqueue(dl time.Time, k *Call) error {
	if err := g.check(k); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.capturable(k); err != nil {
		return err
	}
	seq, err := g.next(k)
	if err != nil {
		return err
	}
	kc := *k
	cp := g.capture
	g.queued = true
	g.w.Post(func(c *cuda.Ctx) error {
		if err := g.run(deadlineCtx{dl}, c, &kc, seq, streamOrdered, cp); err != nil {
			g.aerrMu.Lock()
			var sm *SizeMismatchError
			if errors.As(err, &sm) && len(kc.Prog.Steps) == 1 {
				if g.refusedErr == nil {
					g.refusedErr = err
				}
			} else if g.aerr == nil {
				g.aerr = fmt.Errorf("gpu: rank %d: an earlier call failed: %w", g.rank, err)
			}
			g.aerrMu.Unlock()
		}
		return nil
	})
	return nil
}

// Synchronize waits until every call queued so far has run on the GPU,
// and returns the first error of a call queued by Enqueue. A queued lone
// Send or Recv whose message was refused (SizeMismatchError) is reported
// here once, and leaves the Comm usable.
func (g *Comm) Synchronize(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.capture != nil {
		// A synchronisation would invalidate the capture.
		return fmt.Errorf("gpu: rank %d: Synchronize during a capture (the calls are recorded, not run; EndCapture ends it): %w", g.rank, ErrNotCapturable)
	}
	err := g.w.Do(ctx, func(c *cuda.Ctx) error { return c.StreamSynchronize(g.s) })
	if err == nil {
		g.queued = false
		err = g.fused.failed(g.rank)
	}
	if aerr := g.asyncErr(); aerr != nil {
		err = aerr
	}
	g.aerrMu.Lock()
	if err == nil {
		err = g.refusedErr
	}
	g.refusedErr = nil
	g.aerrMu.Unlock()
	var sm *SizeMismatchError
	if errors.As(err, &sm) {
		return err // the ranks are in step
	}
	if err != nil && g.err == nil {
		g.err = err
	}
	return err
}

// capturable returns an error, without failing the Comm, if k cannot be
// recorded into the capture under way: a program. Every rank refuses the
// same calls. g.mu is held.
func (g *Comm) capturable(k *Call) error {
	if g.capture == nil || k.Fused != nil {
		return nil
	}
	return g.programCaptureError(k, cuda.CaptureActive)
}

// next returns the sequence number of a new call, or the error of an
// earlier call (a failed call leaves the ranks out of step). g.mu is held.
// A point-to-point call (Call.P2P) takes none: it numbers its own
// messages.
func (g *Comm) next(k *Call) (uint32, error) {
	if g.err == nil {
		g.err = g.asyncErr()
	}
	if g.err != nil {
		return 0, g.err
	}
	if k.P2P != nil {
		return 0, nil
	}
	g.seq++
	return g.seq, nil
}

func (g *Comm) asyncErr() error {
	g.aerrMu.Lock()
	defer g.aerrMu.Unlock()
	return g.aerr
}

// check validates a call.
func (g *Comm) check(k *Call) error {
	if k.Params.NRanks != g.n {
		return fmt.Errorf("gpu: a call for %d ranks on a communicator of %d", k.Params.NRanks, g.n)
	}
	if k.Fused != nil {
		if g.fused == nil {
			return fmt.Errorf("gpu: rank %d was given a fused kernel, and has none", g.rank)
		}
	} else if k.Prog == nil || k.Prog.Rank != g.rank {
		return fmt.Errorf("gpu: rank %d was given no program of its own", g.rank)
	}
	if k.P2P != nil {
		if k.Fused != nil || len(k.P2P) != len(k.Prog.Steps) || k.Params.Coll != sched.InvalidCollective {
			return fmt.Errorf("gpu: rank %d: a point-to-point call is a program with a message number per step", g.rank)
		}
		for i, st := range k.Prog.Steps {
			switch {
			case st.Kind != sched.KindSend && st.Kind != sched.KindRecv && st.Kind != sched.KindCopy:
				return fmt.Errorf("gpu: rank %d: step %d (%v) of a point-to-point call: only sends, receives and copies", g.rank, i, &st)
			case st.Kind != sched.KindCopy && (st.Peer < 0 || st.Peer >= g.n || st.Peer == g.rank):
				return fmt.Errorf("gpu: rank %d: step %d (%v) names no other rank of %d", g.rank, i, &st, g.n)
			}
		}
	}
	if !k.DType.Valid() {
		return fmt.Errorf("gpu: invalid dtype %v", k.DType)
	}
	if k.Params.Coll.Reduces() && !dtype.Supports(k.DType, k.Op) {
		return fmt.Errorf("gpu: op %v is not defined on %v", k.Op, k.DType)
	}
	return nil
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
	// The resident kernel reads the regions and counters freed below.
	errs = append(errs, g.freeResident())
	err := g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		var errs []error
		for _, p := range g.mapped {
			errs = append(errs, c.IPCCloseMemHandle(p))
		}
		for gr := range g.graphs {
			errs = append(errs, c.DestroyGraphExec(gr.exec))
		}
		if g.capture != nil {
			if graph, err := c.EndCapture(g.s); err == nil {
				errs = append(errs, c.DestroyGraph(graph))
			}
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
		if f := g.fused; f != nil {
			for r, p := range f.Regions {
				if p != 0 && r != g.rank {
					errs = append(errs, c.IPCCloseMemHandle(p))
				}
			}
			if f.Host != 0 {
				errs = append(errs, c.HostUnregister(g.hostRegion()))
			}
			errs = append(errs, c.Free(f.own), c.Free(f.seqs), c.FreeHost(f.status))
			if f.stage != 0 {
				errs = append(errs, c.Free(f.stage))
			}
		}
		for _, p := range append(g.oldTmp, g.tmp) {
			if p != 0 {
				errs = append(errs, c.Free(p))
			}
		}
		for _, ev := range g.lev {
			errs = append(errs, c.DestroyEvent(ev))
		}
		for _, s := range g.copyS {
			if s != 0 {
				errs = append(errs, c.DestroyStream(s))
			}
		}
		if g.s != 0 {
			errs = append(errs, c.DestroyStream(g.s))
		}
		return errors.Join(errs...)
	})
	errs = append(errs, err)
	g.mapped, g.opened, g.ready, g.done, g.oldTmp, g.tmp, g.s, g.fused = nil, nil, nil, nil, nil, 0, 0, nil
	g.lev, g.copyS, g.graphs, g.capture = nil, nil, nil, nil
	if g.mb.mem != nil {
		errs = append(errs, unmapShared(g.mb.mem))
		g.mb.mem = nil
	}
	return errors.Join(errs...)
}
