package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// fused is the state of the fused one-shot allreduce (cuda.OneShot): a
// region of device memory per rank, registered once when the Comm is made
// and mapped by every peer, into which the ranks push their inputs and
// raise flags from inside one kernel. Small allreduces then cost one
// kernel launch and no host round trip: no notices, no events.
type fused struct {
	slotBytes int
	blocks    int              // the most blocks of a pipelined kernel; 0 by kind and size
	minRounds int              // the fewest rounds of a pipelined kernel, where areas of 1 KiB or more allow
	llMax     int              // the largest one-shot allreduce that runs in low-latency lines
	ll2Max    int              // the largest that runs in them as a two-shot (from llMax)
	llBlocks  int              // the grid of a call in low-latency lines; 0: a thread per word
	own       cuda.DevicePtr   // this rank's region
	regions   []cuda.DevicePtr // every rank's region as mapped here
	status    *cuda.HostBuffer // a word the kernel sets when a peer does not arrive
	seq       uint32           // the next call's first sequence number; the same on every rank
	twoShot   bool             // direct allreduces run fused too
	other     bool             // broadcasts, allgathers and reduce-scatters with Call.Fuse do
}

// The algorithms whose allreduces run fused when they fit a slot: the
// one-shot, and the direct reduce-scatter and allgather as a two-shot
// kernel.
const (
	fusedAlgo    = "gpu_oneshot"
	fusedTwoShot = "direct"
)

// setupFused registers this rank's region and maps every peer's. Every
// rank calls it; if any rank cannot take part (too many ranks, no memory,
// a peer's region that cannot be mapped), none uses the fused kernel and
// the Comm runs one-shot allreduces as programs instead.
func (g *Comm) setupFused(ctx context.Context, host Host, opts Options) error {
	if g.n < 2 || (opts.OneShotBytes <= 0 && !opts.TwoShot && !opts.Fused) {
		return nil
	}
	slotBytes := opts.SlotBytes
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes(g.n)
	}
	slotBytes = max(slotBytes, opts.OneShotBytes)
	slotBytes = (slotBytes + 255) / 256 * 256
	minRounds := DefaultMinRounds
	if v, err := strconv.Atoi(os.Getenv("BRAID_GPU_ROUNDS")); err == nil && v > 0 {
		minRounds = v
	}
	blocks := max(opts.Blocks, 0) // 0: by kind and size (blocksFor)
	if v, err := strconv.Atoi(os.Getenv("BRAID_GPU_BLOCKS")); err == nil && v > 0 && blocks == 0 {
		blocks = v
	}
	f := &fused{slotBytes: slotBytes, blocks: min(blocks, cuda.OneShotMaxBlocks), regions: make([]cuda.DevicePtr, g.n),
		seq: 1, twoShot: opts.TwoShot, other: opts.Fused, minRounds: minRounds, llMax: llMax(opts.LLBytes, g.n), ll2Max: ll2Max(g.n)}
	if v, err := strconv.Atoi(os.Getenv("BRAID_GPU_LL_BLOCKS")); err == nil && v > 0 {
		f.llBlocks = min(v, cuda.OneShotMaxBlocks)
	}
	var local error
	var h cuda.IPCMemHandle
	if g.n > cuda.OneShotMaxRanks {
		local = fmt.Errorf("%d ranks: the fused kernel takes at most %d", g.n, cuda.OneShotMaxRanks)
	} else {
		local = g.w.Do(ctx, func(c *cuda.Ctx) (err error) {
			size := cuda.OneShotRegionBytes(g.n, slotBytes)
			if f.own, err = c.Alloc(size); err != nil {
				return err
			}
			if err = c.Memset8(f.own, 0, cuda.OneShotSlotsOffset, 0); err != nil {
				return err
			}
			ll := cuda.OneShotLLOffset(g.n, slotBytes)
			if err = c.Memset8(f.own.Add(ll), 0, size-ll, 0); err != nil {
				return err
			}
			if err = c.Synchronize(); err != nil {
				return err
			}
			if h, err = c.IPCGetMemHandle(f.own); err != nil {
				return err
			}
			f.status, err = c.HostAlloc(4, cuda.HostAllocPortable|cuda.HostAllocDeviceMap)
			return err
		})
	}
	// Round 1: every rank's handle, or that it cannot take part.
	const recLen = 1 + len(h)
	rec := make([]byte, recLen)
	if local == nil {
		rec[0] = 1
		copy(rec[1:], h[:])
	}
	all := make([]byte, recLen*g.n)
	if err := host.Allgather(ctx, rec, all); err != nil {
		g.freeFused(f)
		return fmt.Errorf("gpu: sharing the one-shot regions: %w", err)
	}
	ok := true
	for r := range g.n {
		ok = ok && all[r*recLen] == 1
	}
	if ok {
		local = g.w.Do(ctx, func(c *cuda.Ctx) error {
			for r := range g.n {
				if r == g.rank {
					f.regions[r] = f.own
					continue
				}
				var ph cuda.IPCMemHandle
				copy(ph[:], all[r*recLen+1:])
				p, err := c.IPCOpenMemHandle(ph)
				if err != nil {
					return fmt.Errorf("mapping rank %d's one-shot region: %w", r, err)
				}
				f.regions[r] = p
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
func (g *Comm) freeFused(f *fused) error {
	if f == nil || g.w == nil {
		return nil
	}
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		var errs []error
		for r, p := range f.regions {
			if p != 0 && r != g.rank {
				errs = append(errs, c.IPCCloseMemHandle(p))
			}
		}
		if f.own != 0 {
			errs = append(errs, c.Free(f.own))
		}
		if f.status != nil {
			errs = append(errs, c.FreeHost(f.status))
		}
		return errors.Join(errs...)
	})
}

// DefaultMinRounds is the fewest rounds a pipelined fused kernel cuts a
// vector into, where areas of at least 1 KiB a block allow; BRAID_GPU_ROUNDS
// overrides it.
const DefaultMinRounds = 1

// llMax is the largest one-shot allreduce in low-latency lines on n
// ranks: Options.LLBytes where not zero (negative: none), else
// BRAID_GPU_LL_MAX (bytes, 0 for none) where set, else DefaultLLBytes(n);
// at most cuda.OneShotLLMax.
func llMax(opt, n int) int {
	v := opt
	if v == 0 {
		v = DefaultLLBytes(n)
		if e, err := strconv.Atoi(os.Getenv("BRAID_GPU_LL_MAX")); err == nil {
			v = e
		}
	}
	return min(max(v, 0), cuda.OneShotLLMax)
}

// ll2Max is the largest one-shot allreduce (above llMax) that runs as a
// two-shot in low-latency lines on n ranks: BRAID_GPU_LL2_MAX (bytes)
// where set, else DefaultLL2Bytes(n); at most cuda.TwoShotLLMax(n).
func ll2Max(n int) int {
	v := DefaultLL2Bytes(n)
	if e, err := strconv.Atoi(os.Getenv("BRAID_GPU_LL2_MAX")); err == nil {
		v = e
	}
	return min(max(v, 0), cuda.TwoShotLLMax(n))
}

// DefaultLL2Bytes is the largest allreduce that runs as a two-shot in
// low-latency lines by default on n ranks: none on 2 (where it sends as
// much as the one-shot, with a hop more), else cuda.TwoShotLLMax(n).
func DefaultLL2Bytes(n int) int {
	if n <= 2 {
		return 0
	}
	return cuda.TwoShotLLMax(n)
}

// DefaultLLBytes is Options.LLBytes's default on n ranks: the largest
// power of two whose lines, sent to every peer, stay within 1 MiB
// (2·(n−1)·bytes ≤ 1 MiB), at most cuda.OneShotLLMax: 256 KiB on 2 and 3
// GPUs, 128 KiB on 4, 64 KiB on 8. On four H200s the lines won up to
// 128 KiB (6.9 against 7.7 µs) and lost at 256 KiB (9.5 against 9.0);
// on two they won at every size to 256 KiB (5.3 against 6.8 µs).
func DefaultLLBytes(n int) int {
	b := cuda.OneShotLLMax
	for b > 8 && 2*(n-1)*b > 1<<20 {
		b /= 2
	}
	return b
}

// DefaultSlotBytes is Options.SlotBytes's default on n GPUs: 32 MiB / n,
// so that the region (2·n slots) takes 64 MiB.
func DefaultSlotBytes(n int) int { return (32 << 20) / max(n, 1) }

// fits reports whether k runs as a fused kernel: a one-shot allreduce
// whose vector fits a slot, or a pipelined kernel that is on and whose
// rounds the slots can hold.
func (f *fused) fits(k *Call) bool {
	if f == nil {
		return false
	}
	kind, ok := fusedKind(k)
	switch {
	case !ok:
		return false
	case kind == cuda.FusedOneShot:
		return kind.Slot(k.Params.Count, k.DType.Size(), k.Params.NRanks) <= f.slotBytes
	case kind == cuda.FusedTwoShot && !f.twoShot, kind != cuda.FusedTwoShot && !f.other:
		return false
	}
	a := f.shot(k, 0)
	return a.Rounds() > 0
}

// fusedKind returns the fused kernel that would run k, if any: allreduces
// by their algorithm, broadcasts, allgathers and reduce-scatters that ask
// for it (Call.Fuse).
func fusedKind(k *Call) (cuda.FusedKind, bool) {
	switch k.Params.Coll {
	case sched.Allreduce:
		switch k.Algo {
		case fusedAlgo:
			return cuda.FusedOneShot, true
		case fusedTwoShot:
			return cuda.FusedTwoShot, true
		}
	case sched.Bcast:
		return cuda.FusedBcast, k.Fuse
	case sched.Allgather:
		return cuda.FusedAllgather, k.Fuse
	case sched.ReduceScatter:
		return cuda.FusedReduceScatter, k.Fuse
	}
	return 0, false
}

// launch enqueues k as one fused kernel on s, with a wait for peers
// bounded by deadline.
func (f *fused) launch(c *cuda.Ctx, s cuda.Stream, rank int, k *Call, deadline time.Time) error {
	if err := f.failed(rank); err != nil {
		return err
	}
	// The call takes its sequence numbers even if it fails here, so that
	// a rank never reuses numbers its peers have used.
	a := f.shot(k, rank)
	f.seq += uint32(max(a.Rounds(), 1))
	wait := time.Until(deadline)
	if wait <= 0 {
		return fmt.Errorf("gpu: rank %d: the call's deadline passed before it started: %w", rank, context.DeadlineExceeded)
	}
	a.Timeout, a.Status = wait, f.status.Ptr()
	return c.LaunchOneShot(s, a)
}

// bigFused is the size (the vector of an allreduce, a rank's block of an
// allgather or reduce-scatter, a broadcast) from which pipelined kernels
// run with cuda.OneShotMaxBlocks blocks instead of
// cuda.DefaultFusedBlocks. On H200s 128 blocks moved more than 64 at
// 1 GiB: allreduce 333 against 317 GB/s busbw on four GPUs, reduce-scatter
// 318 against 298 (352 against 330 on two), allgather 342 against 329
// (355 against 337), broadcast 328 against 312; and as much from 64 MiB,
// but for the broadcast, which lost 4 % there and is switched at 256 MiB.
func bigFused(kind cuda.FusedKind, n int) int {
	switch kind {
	case cuda.FusedBcast:
		return 256 << 20
	case cuda.FusedAllgather, cuda.FusedReduceScatter:
		return (64 << 20) / max(n, 1)
	}
	return 64 << 20
}

// blocksFor is the most blocks a pipelined kernel of kind runs with for
// bytes on n ranks: Options.Blocks (or BRAID_GPU_BLOCKS) where set, else
// cuda.DefaultFusedBlocks, or all of cuda.OneShotMaxBlocks from bigFused.
func (f *fused) blocksFor(kind cuda.FusedKind, bytes, n int) int {
	switch {
	case f.blocks > 0:
		return f.blocks
	case bytes >= bigFused(kind, n):
		return cuda.OneShotMaxBlocks
	}
	return cuda.DefaultFusedBlocks
}

// shot is the kernel call that runs k on rank, but for its timeout and
// status word.
func (f *fused) shot(k *Call, rank int) cuda.OneShot {
	kind, _ := fusedKind(k)
	op := k.Op
	if !k.Params.Coll.Reduces() {
		op = dtype.Sum // unused, but checked: any op the type has
	}
	a := cuda.OneShot{
		Kind:  kind,
		Root:  k.Params.Root,
		DType: k.DType, Op: op, In: k.In, Out: k.Out, Count: k.Params.Count,
		Seq: f.seq, Rank: rank, Regions: f.regions, SlotBytes: f.slotBytes,
	}
	if kind == cuda.FusedOneShot {
		switch b := k.Params.Count * k.DType.Size(); {
		case b <= f.llMax && cuda.LLFits(k.In, k.Out, k.Params.Count, k.DType.Size()):
			a.Kind = cuda.FusedOneShotLL
		case b > f.llMax && b <= f.ll2Max && cuda.TwoShotLLFits(k.In, k.Out, k.Params.Count, k.DType.Size(), k.Params.NRanks):
			a.Kind = cuda.FusedTwoShotLL
		}
		if a.Kind != cuda.FusedOneShot && f.llBlocks > 0 {
			a.Blocks = f.llBlocks
		}
	}
	if kind != cuda.FusedOneShot {
		a.Blocks = cuda.FusedBlocks(k.Params.Count*k.DType.Size(), f.blocksFor(kind, k.Params.Count*k.DType.Size(), k.Params.NRanks))
		// Vectors that a few rounds would carry run in at least minRounds
		// (smaller areas, down to 1 KiB a block), so that pushes overlap.
		if f.minRounds > 1 {
			a.Area = f.slotBytes / a.Blocks
			for a.Area > 1024 && a.Rounds() < f.minRounds {
				a.Area /= 2
			}
		}
	}
	return a
}

// failed returns an error if a fused kernel gave up waiting for a peer.
// It reads what kernels finished so far have written.
func (f *fused) failed(rank int) error {
	if f == nil {
		return nil
	}
	if p := atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.status.Bytes()[0]))); p != 0 {
		return fmt.Errorf("gpu: rank %d: rank %d did not reach a fused kernel (device-side wait) before the deadline of the call that launched it: %w",
			rank, p-1, context.DeadlineExceeded)
	}
	return nil
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
