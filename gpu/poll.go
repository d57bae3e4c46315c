package gpu

import (
	"context"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/wait"
)

// A synchronous fused call learns that its kernel has run from a word of
// mapped pinned memory, not from the worker: the worker launches the
// kernel and enqueues behind it a stream memory operation that stores the
// call's number into the word (cuStreamWriteValue32), and returns at
// once; the caller polls the word. Waiting inside a closure with
// cuStreamSynchronize and handing the answer back cost a small kernel
// 14–21 µs from the call to its return on an H100 machine, against
// 9.6–11.6 µs this way (cuda's BenchmarkCompletion, "do+streamsync"
// against "go+value", three rounds).
//
// A kernel of one block (every call up to 4 KiB) stores its end into a
// word itself, once its result is in place (kernels/fused.cuh: seq_end),
// when the call asks for it (fused.Kernel.SignalEnd: runPolled's calls
// only), and the caller polls that word instead: the worker then only
// launches, and the GPU runs no memory operation behind the kernel. Two
// H200s (session 23): synchronous calls of 8 B-4 KiB 0.91-1.00 of the
// stream's store; asked in every call, as a652fd7 did, the store cost a
// CUDA graph's 8-byte allreduce 1.5 us a call (1.74 -> 3.29 us).

// pollCheck is how often a caller whose word has not come asks the
// driver whether the stream failed (a fault in a kernel stops the stream,
// and the store behind it never comes).
const pollCheck = time.Millisecond

// setupDone allocates the word a synchronous fused call polls, and checks
// once that the stream can store into it; where it cannot, done stays nil
// and synchronous calls wait in the worker as before.
func (f *fusedState) setupDone(c *cuda.Ctx, s cuda.Stream) {
	h, err := c.HostAlloc(64, cuda.HostAllocPortable|cuda.HostAllocDeviceMap)
	if err != nil {
		return
	}
	p, err := c.HostDevicePointer(h.Bytes())
	if err == nil {
		err = c.StreamWriteValue32(s, p, 0)
	}
	if err == nil {
		err = c.StreamSynchronize(s)
	}
	if err != nil {
		c.FreeHost(h)
		return
	}
	f.done, f.doneDev = h, p
}

// polled reports whether synchronous fused calls poll the done word.
func (f *fusedState) polled() bool { return f != nil && f.done != nil }

// runPolled runs the fused call k (sequence seq) and returns once its
// kernel has run: the worker launches it and, unless the kernel stores
// its end itself (fusedState.endSeq), a call number into the done word
// behind it; the caller polls the word (wait.Backoff, the
// executor's policy), and every pollCheck asks the driver whether the
// stream has failed. The kernel's own device-side deadline (the call's)
// bounds the wait for peers, as it bounds cuStreamSynchronize's. g.mu is
// held.
func (g *Comm) runPolled(ctx context.Context, k *Call, seq uint32) error {
	if err := ctx.Err(); err != nil {
		// As Worker.Do does for a closure not yet started: nothing runs.
		return err
	}
	f := g.fused
	// The word to poll and the value to wait for, set once the worker has
	// queued the call (want first): the kernel's end in f.kernelEnd, or
	// the stream's store of doneSeq into f.done.
	var target struct {
		word atomic.Pointer[atomic.Uint32]
		want atomic.Uint32
	}
	reply := g.w.Go(func(c *cuda.Ctx) error {
		if err := g.run(ctx, c, k, seq, pollEnd, nil); err != nil {
			return err
		}
		if f.endSeq != 0 {
			target.want.Store(f.endSeq)
			target.word.Store(f.kernelEnd())
			return nil
		}
		f.doneSeq++
		if err := c.StreamWriteValue32(g.s, f.doneDev, f.doneSeq); err != nil {
			return err
		}
		target.want.Store(f.doneSeq)
		target.word.Store((*atomic.Uint32)(unsafe.Pointer(&f.done.Bytes()[0])))
		return nil
	})
	stored := func() bool {
		w := target.word.Load()
		return w != nil && w.Load() == target.want.Load()
	}
	bo := wait.Backoff{Spin: 50 * time.Microsecond, Goroutines: true}
	var next time.Time
	for i := 1; !stored(); i++ {
		select {
		case err := <-reply:
			if err != nil {
				// Launched nothing, or the store was not queued: the
				// word will not come.
				return err
			}
			reply = nil
		default:
		}
		if reply == nil && i&1023 == 0 {
			if err := g.streamFailed(g.s, &next); err != nil {
				return err
			}
		}
		if d := bo.Step(true); d > 0 {
			time.Sleep(d)
		}
	}
	if reply != nil {
		// The store came, so the closure has queued it and returns nil.
		if err := <-reply; err != nil {
			return err
		}
	}
	return f.failed(g.rank)
}

// streamFailed is a poll loop's look at stream s: every pollCheck (next
// holds when the next look is due; zero before the first) it asks the
// driver whether s failed, and returns the error if it did (a fault in a
// kernel stops the stream, and the word the loop waits for never comes).
func (g *Comm) streamFailed(s cuda.Stream, next *time.Time) error {
	now := time.Now()
	if next.IsZero() {
		*next = now.Add(pollCheck)
		return nil
	}
	if now.Before(*next) {
		return nil
	}
	*next = now.Add(pollCheck)
	return g.w.Do(context.Background(), func(c *cuda.Ctx) error {
		_, err := c.StreamQuery(s)
		return err
	})
}
