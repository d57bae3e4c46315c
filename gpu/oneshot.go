package gpu

import (
	"context"
	"errors"
	"fmt"
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
	own       cuda.DevicePtr   // this rank's region
	regions   []cuda.DevicePtr // every rank's region as mapped here
	status    *cuda.HostBuffer // a word the kernel sets when a peer does not arrive
	seq       uint32           // fused calls so far; the same on every rank
	twoShot   bool             // direct allreduces run fused too
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
func (g *Comm) setupFused(ctx context.Context, host Host, oneShot, twoShot, other int) error {
	slotBytes := max(oneShot, other, 0)
	if twoShot > 0 && g.n > 1 {
		// Chunks of wider elements round up by up to 16 bytes more each.
		slotBytes = max(slotBytes, cuda.TwoShotSlot(twoShot, 1, g.n)+64)
	}
	if slotBytes <= 0 || g.n < 2 {
		return nil
	}
	slotBytes = (slotBytes + 255) / 256 * 256
	f := &fused{slotBytes: slotBytes, regions: make([]cuda.DevicePtr, g.n), twoShot: twoShot > 0}
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

// fits reports whether k runs as a fused kernel: a one-shot allreduce
// whose vector fits a slot, or a direct (two-shot) allreduce whose two
// chunks do.
func (f *fused) fits(k *Call) bool {
	if f == nil {
		return false
	}
	kind, ok := fusedKind(k)
	return ok && (kind != cuda.FusedTwoShot || f.twoShot) &&
		kind.Slot(k.Params.Count, k.DType.Size(), k.Params.NRanks) <= f.slotBytes
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
	f.seq++
	if f.seq == 0 {
		f.seq = 1 // 0 is the flags' initial value
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		return fmt.Errorf("gpu: rank %d: the call's deadline passed before it started: %w", rank, context.DeadlineExceeded)
	}
	kind, _ := fusedKind(k)
	op := k.Op
	if !k.Params.Coll.Reduces() {
		op = dtype.Sum // unused, but checked: any op the type has
	}
	return c.LaunchOneShot(s, cuda.OneShot{
		Kind:  kind,
		Root:  k.Params.Root,
		DType: k.DType, Op: op, In: k.In, Out: k.Out, Count: k.Params.Count,
		Seq: f.seq, Rank: rank, Regions: f.regions, SlotBytes: f.slotBytes,
		Timeout: wait, Status: f.status.Ptr(),
	})
}

// failed returns an error if a fused kernel gave up waiting for a peer.
// It reads what kernels finished so far have written.
func (f *fused) failed(rank int) error {
	if f == nil {
		return nil
	}
	if p := atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.status.Bytes()[0]))); p != 0 {
		return fmt.Errorf("gpu: rank %d: rank %d did not reach a one-shot allreduce before the call's deadline (device-side wait): %w",
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
