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
	"github.com/braid-ccl/braid/internal/wait"
)

// The resident allreduce (Options.Resident). A synchronous small
// allreduce costs a kernel launch, the kernel, and the word that says it
// ran coming back (runPolled): on two H200s 15.8 µs from the call to its
// return for 8 bytes, of which the kernel is about 5. With a resident
// kernel (fused.Server, kernels/serve.cuh) the call writes its arguments,
// stamped with a ticket, into a bell of mapped pinned memory, which the
// kernel polls, and polls the word the kernel stores back: no launch, no
// worker. The same two H200s: 6.3 µs for 8 bytes, 8.6 for 16 KiB; above
// about 32 KiB the one block is slower than a launched grid (64 KiB: 18.3
// against 15.4), hence DefaultResidentMax. One GPU with no peer: 4.5 µs,
// the two trips over the bus and the kernel (fused's BenchmarkServerRing).
// A first version that polled the ticket and then read the arguments took
// 26 µs: every read of host memory from the GPU is a trip over the bus, so
// the call is now read in one (fused.Ring).
//
// The kernel runs the OneShotLL allreduce with the counters, lines and
// status word of the other fused kernels, so ranks need not agree on
// which calls it runs. It runs only synchronous calls made when nothing
// is queued on the stream (queued): those then see the counters as a
// launched kernel would. It holds one SM while it waits, and a
// synchronisation of the whole device (cudaDeviceSynchronize) waits for
// it to end: it ends after Options.Resident without a call, when another
// type or op comes (the next kernel starts then), before a reset of the
// sequence, and on Close.

// DefaultResidentMax is the largest allreduce, in bytes, that the resident
// kernel runs when Options.ResidentMax is 0.
const DefaultResidentMax = 16 << 10

// resident is a Comm's resident kernel and its bell.
type resident struct {
	idle    time.Duration
	max     int
	s       cuda.Stream
	bell    *cuda.HostBuffer
	bellDev cuda.DevicePtr
	dt      dtype.DType
	op      dtype.Op
	epoch   uint32 // the last kernel started
	live    bool   // the kernel of epoch may be running: its end not seen
	ticket  uint32 // the last call rung
	ran     uint32 // the last call run (ticket, but during a call)
	calls   int    // calls run here, for tests and logs
	starts  int    // kernels started
}

func (r *resident) word(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.bell.Bytes()[4*i]))
}

// setupResident makes the bell and the stream of the resident kernel
// where Options.Resident asks for one and the fused kernels are on, and
// no two ranks share a GPU (their kernels would take turns on it, and one
// waiting on the device would hold it from the other). Every rank calls
// it with the same options (Options.Shared holds them alike): it
// exchanges the GPUs' bus ids.
func (g *Comm) setupResident(ctx context.Context, host Host, opts Options) error {
	if opts.Resident <= 0 {
		return nil
	}
	var id [32]byte
	if g.w != nil {
		if bus, err := g.w.Device().PCIBusID(); err == nil {
			copy(id[:], bus)
		}
	}
	all := make([]byte, len(id)*g.n)
	if err := host.Allgather(ctx, id[:], all); err != nil {
		return fmt.Errorf("gpu: comparing the ranks' GPUs for the resident kernel: %w", err)
	}
	seen := map[string]int{}
	for r := range g.n {
		b := string(all[r*len(id) : (r+1)*len(id)])
		if q, ok := seen[b]; ok || b == string(make([]byte, len(id))) {
			if ok {
				g.residentOff = fmt.Sprintf("ranks %d and %d share a GPU", q, r)
			} else {
				g.residentOff = fmt.Sprintf("rank %d's GPU has no bus id", r)
			}
			return nil
		}
		seen[b] = r
	}
	if g.fused == nil {
		g.residentOff = "the fused kernels are off"
		return nil
	}
	r := &resident{idle: opts.Resident, max: opts.ResidentMax}
	if r.max == 0 {
		r.max = DefaultResidentMax
	}
	err := g.w.Do(ctx, func(c *cuda.Ctx) (err error) {
		if r.bell, err = c.HostAlloc(4*fused.BellWords, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
			return err
		}
		if r.bellDev, err = c.HostDevicePointer(r.bell.Bytes()); err != nil {
			c.FreeHost(r.bell)
			return err
		}
		clear(r.bell.Bytes())
		if r.s, err = c.NewStream(0); err != nil {
			c.FreeHost(r.bell)
		}
		return err
	})
	if err != nil {
		// This rank runs its calls as launched kernels: the others need
		// not know.
		g.residentOff = err.Error()
		return nil
	}
	g.res = r
	return nil
}

// ResidentState is what Resident reports of a Comm's resident kernel.
type ResidentState struct {
	On     bool   // small synchronous allreduces run on it
	Off    string // where On is false though Options.Resident asked for it: why
	Max    int    // the largest allreduce it runs, in bytes
	Calls  int    // calls it ran so far
	Starts int    // kernels started so far
}

// Resident says whether this Comm runs small allreduces on a resident
// kernel (Options.Resident), or why not, and what it has done.
func (g *Comm) Resident() ResidentState {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.res
	if r == nil {
		return ResidentState{Off: g.residentOff}
	}
	return ResidentState{On: true, Max: r.max, Calls: r.calls, Starts: r.starts}
}

// serves reports whether the resident kernel may run k now. g.mu is held.
func (g *Comm) serves(k *Call) bool {
	r := g.res
	if r == nil || g.queued || k.Fused == nil || g.capture != nil {
		return false
	}
	a := k.Fused
	return a.Kind == fused.OneShotLL && a.Count*a.DType.Size() <= r.max &&
		fused.LLFits(k.In, k.Out, a.Count, a.DType.Size()) && !g.fused.passes(1)
}

// runResident runs k on the resident kernel, starting one first where
// none runs for k's type and op. g.mu is held; serves(k) said yes.
func (g *Comm) runResident(ctx context.Context, k *Call) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, f := g.res, g.fused
	if err := f.failed(g.rank); err != nil {
		return err
	}
	if r.live && (r.dt != k.Fused.DType || r.op != k.Fused.Op) {
		if err := g.stopResident(ctx); err != nil {
			return err
		}
	}
	if r.live && r.word(fused.BellExited).Load() == r.epoch {
		r.live = false // it ended on its own (idle)
	}
	if !r.live {
		if err := g.startResident(ctx, k.Fused.DType, k.Fused.Op); err != nil {
			return err
		}
	}
	left, err := peerWait(g.rank, callDeadline(ctx))
	if err != nil {
		return err
	}
	f.seq++ // serves checked that no reset is due
	r.ticket++
	t := r.ticket
	fused.Ring(r.bell.Bytes(), t, k.In, k.Out, k.Fused.Count, left)
	done, exited := r.word(fused.BellDone), r.word(fused.BellExited)
	bo := wait.Backoff{Spin: 50 * time.Microsecond, Goroutines: true}
	var next time.Time
	for i := 1; done.Load() != t; i++ {
		if i&255 == 0 && exited.Load() == r.epoch {
			// It ended (idle) before it saw the ticket: the done word is
			// stored before the end, so the call did not run. Start
			// another, which takes it.
			if done.Load() == t {
				break
			}
			if err := g.startResident(ctx, k.Fused.DType, k.Fused.Op); err != nil {
				return err
			}
		}
		if i&1023 == 0 {
			if err := g.streamFailed(r.s, &next); err != nil {
				r.live = false
				return err
			}
		}
		if d := bo.Step(true); d > 0 {
			time.Sleep(d)
		}
	}
	r.ran = t
	r.calls++
	if err := f.failed(g.rank); err != nil {
		r.live = false // it ended after the failed call
		return err
	}
	return nil
}

// startResident starts a resident kernel for dt and op, taking the calls
// after r.ran. g.mu is held.
func (g *Comm) startResident(ctx context.Context, dt dtype.DType, op dtype.Op) error {
	r, f := g.res, g.fused
	r.epoch++
	v := fused.Server{DType: dt, Op: op, Bell: r.bellDev, Served: r.ran, Epoch: r.epoch, Idle: r.idle, Seqs: f.seqs,
		Rank: g.rank, Regions: f.Regions, SlotBytes: f.SlotBytes, Status: f.status.Ptr()}
	if err := g.w.Do(ctx, func(c *cuda.Ctx) error { return fused.LaunchServer(c, r.s, v) }); err != nil {
		return err
	}
	r.dt, r.op, r.live = dt, op, true
	r.starts++
	return nil
}

// stopResident ends the resident kernel, if one runs, and waits until it
// has. g.mu is held.
func (g *Comm) stopResident(ctx context.Context) error {
	r := g.res
	if r == nil || !r.live {
		return nil
	}
	r.word(fused.BellQuit).Store(r.epoch)
	err := g.w.Do(ctx, func(c *cuda.Ctx) error { return c.StreamSynchronize(r.s) })
	r.live = false
	return err
}

// freeResident stops the kernel and frees its bell and stream; Close
// calls it before the regions go.
func (g *Comm) freeResident() error {
	r := g.res
	if r == nil {
		return nil
	}
	err := g.stopResident(context.Background())
	g.res = nil
	return errors.Join(err, g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		return errors.Join(c.DestroyStream(r.s), c.FreeHost(r.bell))
	}))
}
