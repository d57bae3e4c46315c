package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// fusedState is the state of the fused kernels (package gpu/fused): a
// region of device memory per rank, registered once when the Comm is made
// and mapped by every peer, into which the ranks push their data and
// raise flags from inside one kernel. Small allreduces then cost one
// kernel launch and no host round trip: no notices, no events. Config
// chooses each call's kernel; the rest is this rank's.
type fusedState struct {
	fused.Config
	own cuda.DevicePtr // this rank's region
	// status is two words of mapped pinned memory: the first a kernel
	// sets when a peer does not arrive; into the second a kernel of one
	// block stores its end (its call's last sequence number + 1) once its
	// result is in place, where kernelDone and the call asked (endSeq).
	status *cuda.HostBuffer
	// done is a word of mapped pinned memory that the stream stores the
	// number of the last synchronous call into once its kernel has run
	// (runPolled); doneDev is its device address, doneSeq the last number
	// stored. done is nil where the driver cannot store from a stream.
	done    *cuda.HostBuffer
	doneDev cuda.DevicePtr
	doneSeq uint32
	seqs    cuda.DevicePtr // the kernels' sequence counters (fused.SeqWords words), which they read and advance
	overlap bool           // fused.Launch launches overlapped here (cuda.Ctx.KernelsOverlap)
	// kernelDone says that the kernels of one block store their end into
	// status's second word when asked (cuda.Ctx.KernelsSignalDone,
	// fused.Kernel.SignalEnd); endSeq is, after launch, the end the
	// call's kernel stores there, or 0 where it was not asked or the call
	// queued something else last (no kernel, a staged copy, a kernel of
	// several blocks), so that runPolled polls the stream's store instead.
	kernelDone bool
	endSeq     uint32
	// seq is the next call's first sequence number, as the counters will
	// hold it once the kernels queued so far (graph launches included)
	// have run; the same on every rank. The host counts it to reset the counters and the flags
	// before they pass seqLimit.
	seq       uint32
	seqLimit  uint32         // the last sequence number before the flags are reset (SeqLimit)
	resets    int            // how many times the sequence was reset
	stage     cuda.DevicePtr // aligned scratch for calls in low-latency lines from or to unaligned buffers; 0 until needed
	stageSize int            // its bytes
}

// setupFused registers this rank's region and maps every peer's. Every
// rank calls it; if any rank cannot take part (too many ranks, no memory,
// a peer's region that cannot be mapped), none uses the fused kernel and
// the Comm runs one-shot allreduces as programs instead.
func (g *Comm) setupFused(ctx context.Context, host Host, opts Options) error {
	if g.n < 2 || (opts.OneShotBytes <= 0 && !opts.TwoShot && !opts.Fused) {
		return nil
	}
	first := opts.FirstSeq
	if first == 0 {
		first = 1
	}
	f := &fusedState{Config: fused.NewConfig(g.n, fused.Settings{OneShotBytes: opts.OneShotBytes, SlotBytes: opts.SlotBytes,
		Blocks: opts.Blocks, Threads: opts.Threads, MinRounds: opts.MinRounds, LLBytes: opts.LLBytes, LL2Bytes: opts.LL2Bytes,
		LLBlocks: opts.LLBlocks, BcastRamp: opts.BcastRamp, TwoShot: opts.TwoShot, Other: opts.Fused, MultiPath: opts.MultiPath}),
		seq: first, seqLimit: SeqLimit}
	slotBytes := f.SlotBytes
	var local error
	var h cuda.IPCMemHandle
	hostOK := false
	if g.n > fused.MaxRanks {
		local = fmt.Errorf("%d ranks: the fused kernel takes at most %d", g.n, fused.MaxRanks)
	} else {
		local = g.w.Do(ctx, func(c *cuda.Ctx) (err error) {
			size := fused.RegionBytes(g.n, slotBytes)
			if f.own, err = c.Alloc(size); err != nil {
				return err
			}
			if err = c.Memset8(f.own, 0, fused.SlotsOffset, 0); err != nil {
				return err
			}
			ll := fused.LLOffset(g.n, slotBytes)
			if err = c.Memset8(f.own.Add(ll), 0, size-ll, 0); err != nil {
				return err
			}
			if f.seqs, err = c.Alloc(4 * fused.SeqWords); err != nil {
				return err
			}
			if err = c.Memset32(f.seqs, first, fused.SeqWords, 0); err != nil {
				return err
			}
			if err = c.Synchronize(); err != nil {
				return err
			}
			if h, err = c.IPCGetMemHandle(f.own); err != nil {
				return err
			}
			if f.status, err = c.HostAlloc(8, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
				return err
			}
			f.setupDone(c, g.s)
			f.overlap = c.KernelsOverlap()
			f.kernelDone = c.KernelsSignalDone()
			// The host region: a failure only leaves the host path out.
			if hm := g.hostRegion(); hm != nil {
				if c.HostRegister(hm, cuda.HostRegisterPortable|cuda.HostRegisterDeviceMap) == nil {
					if f.Host, err = c.HostDevicePointer(hm); err != nil {
						c.HostUnregister(hm)
						f.Host = 0
					}
				}
			}
			hostOK = f.Host != 0
			return nil
		})
	}
	// Round 1: every rank's handle, or that it cannot take part, and
	// whether it mapped the host region.
	const recLen = 2 + len(h)
	rec := make([]byte, recLen)
	if local == nil {
		rec[0] = 1
		if hostOK {
			rec[1] = 1
		}
		copy(rec[2:], h[:])
	}
	all := make([]byte, recLen*g.n)
	if err := host.Allgather(ctx, rec, all); err != nil {
		g.freeFused(f)
		return fmt.Errorf("gpu: sharing the one-shot regions: %w", err)
	}
	ok := true
	for r := range g.n {
		ok = ok && all[r*recLen] == 1
		hostOK = hostOK && all[r*recLen+1] == 1
	}
	if !hostOK && f.Host != 0 {
		// Some rank cannot use it: none does.
		g.unregisterHost(f)
	}
	f.HostShare = g.hostShare
	if ok {
		local = g.w.Do(ctx, func(c *cuda.Ctx) error {
			for r := range g.n {
				if r == g.rank {
					f.Regions[r] = f.own
					continue
				}
				var ph cuda.IPCMemHandle
				copy(ph[:], all[r*recLen+2:])
				p, err := c.IPCOpenMemHandle(ph)
				if err != nil {
					return fmt.Errorf("mapping rank %d's one-shot region: %w", r, err)
				}
				f.Regions[r] = p
			}
			return nil
		})
	}
	// Round 2: whether every rank mapped every region.
	rec2 := []byte{0}
	if ok && local == nil {
		rec2[0] = 1
	}
	all2 := make([]byte, g.n)
	if err := host.Allgather(ctx, rec2, all2); err != nil {
		g.freeFused(f)
		return fmt.Errorf("gpu: sharing the one-shot regions: %w", err)
	}
	for _, b := range all2 {
		ok = ok && b == 1
	}
	if !ok {
		g.fusedOff = "a rank could not register its region"
		if local != nil {
			g.fusedOff = local.Error()
		}
		g.freeFused(f)
		return nil
	}
	g.fused = f
	return nil
}

// freeFused releases what setupFused made of f.
func (g *Comm) freeFused(f *fusedState) error {
	if f == nil || g.w == nil {
		return nil
	}
	g.unregisterHost(f)
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		var errs []error
		for r, p := range f.Regions {
			if p != 0 && r != g.rank {
				errs = append(errs, c.IPCCloseMemHandle(p))
			}
		}
		if f.own != 0 {
			errs = append(errs, c.Free(f.own))
		}
		if f.seqs != 0 {
			errs = append(errs, c.Free(f.seqs))
		}
		if f.status != nil {
			errs = append(errs, c.FreeHost(f.status))
		}
		if f.done != nil {
			errs = append(errs, c.FreeHost(f.done))
		}
		if f.stage != 0 {
			errs = append(errs, c.Free(f.stage))
		}
		return errors.Join(errs...)
	})
}

// HostPath says how much of the fused kernels' data goes through host
// memory (Options.HostShare, Options.MultiPath), for logs.
func (g *Comm) HostPath() string {
	if g.fused == nil {
		return "off"
	}
	return g.fused.HostPath(g.multiPathSource)
}

// HasHostPath says whether the fused kernels may send part of their data
// through the host region (fused.Config.HostPathOn): it is mapped on
// every rank and no option turned it off.
func (g *Comm) HasHostPath() bool { return g != nil && g.fused != nil && g.fused.HostPathOn() }

// unregisterHost undoes the registration of the host region, if f has it.
func (g *Comm) unregisterHost(f *fusedState) error {
	if f == nil || f.Host == 0 {
		return nil
	}
	f.Host = 0
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error { return c.HostUnregister(g.hostRegion()) })
}

// hostShare resolves Options.HostShare: 0 (by kind and size), negative
// (none, -1) or a percentage, at most 50.
func hostShare(opt int) int {
	return min(max(opt, -1), 50)
}

// mailboxAlign is where the host region starts in the mailbox file: on a
// boundary of this many bytes, so that it can be registered on its own.
const mailboxAlign = 64 << 10

// mbBytes is the size of the mailbox file: the rings, then, unless the
// host path is off, the host region.
func (g *Comm) mbBytes() int {
	if g.hostShare < 0 {
		return mailboxSize(g.n)
	}
	return (mailboxSize(g.n)+mailboxAlign-1)/mailboxAlign*mailboxAlign + fused.HostRegionBytes
}

// hostRegion is the host region in the mailbox file, or nil without one.
func (g *Comm) hostRegion() []byte {
	if g.hostShare < 0 || len(g.mb.mem) < mailboxSize(g.n)+fused.HostRegionBytes {
		return nil
	}
	return g.mb.mem[len(g.mb.mem)-fused.HostRegionBytes:]
}

// Shape returns the fused kernel of kind that would run a call of p, of
// dt and op, on this Comm, or false if none would (fused.Config.Shape);
// the planner costs it and Call.Fused carries it to Run.
func (g *Comm) Shape(kind fused.Kind, p sched.Params, dt dtype.DType, op dtype.Op) (fused.Kernel, bool) {
	if g.fused == nil {
		return fused.Kernel{}, false
	}
	return g.fused.Shape(kind, p, dt, op)
}

// SeqLimit is the last sequence number of the fused kernels before the
// flags are reset. Flags are compared by signed difference of 32-bit
// words and carry 2·seq; a flag that a block of the grid last raised
// 2^30 sequence numbers ago (blocks 64 to 255 run only in calls of 64 MiB
// and more) would read as ahead of the call that waits for it, and the
// low-latency lines compare seq for equality. So the sequence stays
// within [1, SeqLimit], where every flag and line value differs from
// every wait's by less than 2^31: a call that would pass SeqLimit first
// resets the regions (resetFused) and starts again at 1.
const SeqLimit = 1<<30 - 1

// launch enqueues k as one fused kernel on s, with a wait for peers
// bounded by deadline. The kernel reads its sequence numbers from f.seqs
// and advances them; the host counts them in f.seq (advance), and where
// the call would pass f.seqLimit, reset is called first: it clears this
// rank's flags and lines and sets the counters to 1 once no peer uses
// them (every rank resets at the same call, since every rank has the same
// sequence). In a capture (cp not nil) the kernel is recorded into a
// graph and does not run now: nothing is reset or counted here, and cp
// adds up the rounds that every launch of the graph takes (Graph).
// scratch holds, for a reduce-scatter staged at an aligned stride
// (fused.Kernel.Stride), n + 1 blocks at that stride. With signal (a
// synchronous call that runPolled waits for), a plain kernel of one block
// stores its end (fused.Kernel.SignalEnd) and f.endSeq says the value.
func (f *fusedState) launch(c *cuda.Ctx, s cuda.Stream, rank int, k *Call, deadline time.Time, cp *capture, reset func() error, scratch cuda.DevicePtr, signal bool) error {
	f.endSeq = 0
	if err := f.failed(rank); err != nil {
		return err
	}
	a := *k.Fused
	if a.Count == 0 {
		return nil // no kernel, no sequence number
	}
	a.In, a.Out, a.Seqs, a.Rank, a.Regions = k.In, k.Out, f.seqs, rank, f.Regions
	rounds := uint32(max(a.Rounds(), 1))
	if cp != nil {
		cp.calls++
		cp.rounds += uint64(rounds)
	} else if err := f.advance(rounds, reset); err != nil {
		return err
	}
	wait, err := peerWait(rank, deadline)
	if err != nil {
		return err
	}
	a.Timeout, a.Status = wait, f.status.Ptr()
	if a.Kind.Lines() && (a.In|a.Out)&7 != 0 {
		// Every rank runs the kernel in lines that the size chose; a rank
		// whose buffers are not 8-byte aligned runs it on aligned scratch.
		return f.staged(c, s, a)
	}
	if a.Kind == fused.ReduceScatter && a.Stride > a.Count {
		return f.strided(c, s, a, scratch)
	}
	a.SignalEnd = signal && f.kernelDone && cp == nil && a.Grid() == 1
	if err := fused.Launch(c, s, a); err != nil {
		return err
	}
	if a.SignalEnd {
		f.endSeq = f.seq
	}
	return nil
}

// kernelEnd is the status buffer's second word, where a kernel of one
// block stores its end (kernelDone).
func (f *fusedState) kernelEnd() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&f.status.Bytes()[4]))
}

// strided runs a, a reduce-scatter whose kernel reads the blocks at an
// aligned stride (fused.Kernel.Stride, which the size chose, so that every
// rank stages alike), through scratch: In's n blocks copied there at that
// stride, the kernel from there into the block after them, and Count
// elements of its result copied to Out. Every block then starts 16-byte
// aligned, where In's blocks of Count elements start at odd offsets.
func (f *fusedState) strided(c *cuda.Ctx, s cuda.Stream, a fused.Kernel, scratch cuda.DevicePtr) error {
	n := len(a.Regions)
	b, st := a.Count*a.DType.Size(), a.Stride*a.DType.Size()
	if scratch == 0 || scratch&15 != 0 {
		return fmt.Errorf("gpu: a reduce-scatter staged at a stride of %d bytes needs aligned scratch", st)
	}
	for p := range n {
		if err := c.Copy(scratch.Add(p*st), a.In.Add(p*b), b, s); err != nil {
			return err
		}
	}
	out := a.Out
	a.In, a.Out = scratch, scratch.Add(n*st)
	if err := fused.Launch(c, s, a); err != nil {
		return err
	}
	return c.Copy(out, a.Out, b, s)
}

// advance counts rounds more sequence numbers, those of a kernel or of a
// graph's launch about to be queued, after calling reset where they would
// pass f.seqLimit. They are counted even if the launch then fails, so
// that the host's count is never behind the counters.
func (f *fusedState) advance(rounds uint32, reset func() error) error {
	if f.passes(rounds) {
		if err := reset(); err != nil {
			return err
		}
		f.seq = 1
		f.resets++
		if f.status != nil {
			// No kernel is queued (reset synchronised the stream): an end
			// stored before the reset must not match one after it.
			f.kernelEnd().Store(0)
		}
	}
	f.seq += rounds
	return nil
}

// passes reports whether a call of rounds rounds from f.seq would pass
// f.seqLimit.
func (f *fusedState) passes(rounds uint32) bool {
	return uint64(f.seq)+uint64(rounds)-1 > uint64(f.seqLimit)
}

// staged runs a, a call in low-latency lines, through f.stage: a copy of
// the input there, the kernel in place there, a copy of the result out.
// An allreduce's vector is both; a reduce-scatter's n blocks go in and
// its own block (in place: block Rank of the input) comes out; an
// allgather's block goes in at its place among the n that come out.
func (f *fusedState) staged(c *cuda.Ctx, s cuda.Stream, a fused.Kernel) error {
	b := a.Count * a.DType.Size()
	n := len(a.Regions)
	if err := f.ensureStage(c); err != nil {
		return err
	}
	whole := b
	if a.Kind == fused.ReduceScatterLL || a.Kind == fused.AllgatherLL {
		whole = n * b
	}
	if whole > f.stageSize {
		return fmt.Errorf("gpu: a call in low-latency lines of %d bytes, above the %d the scratch holds", whole, f.stageSize)
	}
	in, out := a.In, a.Out
	a.In, a.Out = f.stage, f.stage
	inBytes, outBytes := b, b
	switch a.Kind {
	case fused.ReduceScatterLL:
		inBytes, a.Out = whole, f.stage.Add(a.Rank*b)
	case fused.AllgatherLL:
		outBytes, a.In = whole, f.stage.Add(a.Rank*b)
	}
	if err := c.Copy(a.In, in, inBytes, s); err != nil {
		return err
	}
	if err := fused.Launch(c, s, a); err != nil {
		return err
	}
	return c.Copy(out, a.Out, outBytes, s)
}

// ensureStage allocates f.stage if it is not yet: once, at the most the
// lines carry, so that it is never freed while a queued kernel may still
// use it.
func (f *fusedState) ensureStage(c *cuda.Ctx) error {
	if f.stage != 0 {
		return nil
	}
	size := max(f.LLMax, f.LL2Max, 8)
	if f.Other {
		size = max(size, len(f.Regions)*f.LLMax) // n blocks of a reduce-scatter or allgather in lines
	}
	p, err := c.Alloc(size)
	if err != nil {
		return fmt.Errorf("gpu: scratch for a call in low-latency lines: %w", err)
	}
	f.stage, f.stageSize = p, size
	return nil
}

// HostShareOf is the percentage of a's rounds that goes through host
// memory, for a kernel from Shape that has HostBytes.
func (g *Comm) HostShareOf(a *fused.Kernel) int {
	if g.fused == nil {
		return 0
	}
	return g.fused.HostShareOf(a)
}

// failed returns an error if a fused kernel gave up waiting for a peer.
// It reads what kernels finished so far have written.
func (f *fusedState) failed(rank int) error {
	if f == nil {
		return nil
	}
	if p := atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.status.Bytes()[0]))); p != 0 {
		return fmt.Errorf("gpu: rank %d: rank %d did not reach a fused kernel (device-side wait) before the deadline of the call that launched it: %w",
			rank, p-1, context.DeadlineExceeded)
	}
	return nil
}

// callDeadline is the deadline of a fused call made with ctx: ctx's, or
// an hour from now without one.
func callDeadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(time.Hour)
}

// peerWait is how long a fused kernel of a call with deadline dl may wait
// for its peers on the GPU, or an error where dl has passed.
func peerWait(rank int, dl time.Time) (time.Duration, error) {
	wait := time.Until(dl)
	if wait <= 0 {
		return 0, fmt.Errorf("gpu: rank %d: the call's deadline passed before it started: %w", rank, context.DeadlineExceeded)
	}
	return wait, nil
}

// deadlineCtx is the context of a call that runs after its caller has
// returned (Enqueue): only its deadline is kept, without the timer and
// allocations of context.WithDeadline.
type deadlineCtx struct{ dl time.Time }

func (d deadlineCtx) Deadline() (time.Time, bool) { return d.dl, true }
func (d deadlineCtx) Done() <-chan struct{}       { return nil }
func (d deadlineCtx) Value(any) any               { return nil }
func (d deadlineCtx) Err() error {
	if time.Now().After(d.dl) {
		return context.DeadlineExceeded
	}
	return nil
}
