package gpu

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// emptyProgram is rank r's program of pulled messages of no elements with
// the other rank: a Send, a RecvReduce, a Reduce and the Copy of its
// result (which the reduction kernel writes, fused), a Recv and a Send.
// Nothing in it needs a GPU: empty chunks move no memory and carry no
// events.
func emptyProgram(r int) *sched.Program {
	q := 1 - r
	b := sched.NewBuilder(r)
	none := func(buf sched.Buf) sched.Chunk { return sched.Chunk{Buf: buf} }
	b.Send(q, int32(10+r), none(sched.In))
	rr := b.RecvReduce(q, int32(10+q), none(sched.Out))
	red := b.Reduce(none(sched.In), none(sched.Out), rr)
	b.Copy(none(sched.Out), none(sched.Tmp), red)
	b.Recv(q, int32(20+q), none(sched.Tmp))
	b.Send(q, int32(20+r), none(sched.In))
	return &b.P
}

func emptyCall(prog *sched.Program, p2p []uint32) *call {
	k := &Call{Params: sched.Params{NRanks: 2}, Prog: prog, DType: dtype.Float32, Op: dtype.Sum, P2P: p2p}
	return &call{k: k, steps: prog.Steps, seq: 1, es: 4, state: make([]uint8, len(prog.Steps))}
}

// driveBoth runs calls[r] on rank r of a p2pPair through Comm.drive,
// without a GPU, and returns both ranks' errors.
func driveBoth(t *testing.T, calls [2]*call, ctxs [2]context.Context) [2]error {
	t.Helper()
	gs := p2pPair()
	var errs [2]error
	var wg sync.WaitGroup
	for r := range gs {
		if calls[r] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = gs[r].drive(ctxs[r], nil, calls[r])
		}()
	}
	wg.Wait()
	return errs
}

// TestDriveNotices runs two ranks' programs through the executor's loop
// (exec.Drive over this package's backend) without a GPU: every step
// completes, the fused copy included, and no notice is left behind.
func TestDriveNotices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := [2]*call{emptyCall(emptyProgram(0), nil), emptyCall(emptyProgram(1), nil)}
	errs := driveBoth(t, calls, [2]context.Context{ctx, ctx})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if n := countDone(calls[r].state); n != len(calls[r].steps) {
			t.Errorf("rank %d: %d of %d steps done", r, n, len(calls[r].steps))
		}
	}
}

// TestBackendFuses checks what the backend tells the loop of a reduction
// whose result's copy it writes in the same kernel: two steps done.
func TestBackendFuses(t *testing.T) {
	g := p2pPair()[0]
	k := emptyCall(emptyProgram(0), nil)
	k.state[1] = stDone // the RecvReduce the reduction depends on
	b := backend{g: g, k: k}
	n, err := b.Start(2)
	if err != nil || n != 2 || k.state[2] != stDone || k.state[3] != stDone {
		t.Fatalf("the reduction: %d steps done (%v), state %v; want it and its copy", n, err, k.state)
	}
}

// TestDriveP2PErrors checks a point-to-point call's failures through the
// loop: ends of different lengths are refused on both ranks (a
// *SizeMismatchError naming the other), and a receive whose peer stays
// away ends at the deadline as a *PeerWaitError naming the peer.
func TestDriveP2PErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := &sched.Program{Rank: 0, Steps: []sched.Step{{Kind: sched.KindSend, Peer: 1, Tag: 3, Src: sched.Chunk{Buf: sched.In}}}}
	recv := &sched.Program{Rank: 1, Steps: []sched.Step{{Kind: sched.KindRecv, Peer: 0, Tag: 3, Dst: sched.Chunk{Buf: sched.Out, Len: 5}}}}
	errs := driveBoth(t, [2]*call{emptyCall(send, []uint32{1}), emptyCall(recv, []uint32{1})}, [2]context.Context{ctx, ctx})
	for r, err := range errs {
		var sm *SizeMismatchError
		if !errors.As(err, &sm) || sm.Peer != 1-r {
			t.Errorf("rank %d: %v, want a SizeMismatchError naming rank %d", r, err, 1-r)
		}
	}

	dl := deadlineCtx{time.Now().Add(50 * time.Millisecond)}
	errs = driveBoth(t, [2]*call{nil, emptyCall(recv, []uint32{1})}, [2]context.Context{nil, dl})
	var pw *PeerWaitError
	if err := errs[1]; !errors.As(err, &pw) || pw.Peer != 0 || pw.Rank != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a receive from a rank that stays away: %v, want a PeerWaitError naming rank 0", err)
	}
}

// TestRendezvous checks the fused kernels' reset rendezvous through the
// executor's loop without a GPU: two ranks meet; a rank whose peer stays
// away fails at its deadline.
func TestRendezvous(t *testing.T) {
	gs := p2pPair()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var errs [2]error
	var wg sync.WaitGroup
	for r := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = gs[r].rendezvous(ctx, 7, resetEnded)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	dl := deadlineCtx{time.Now().Add(50 * time.Millisecond)}
	if err := gs[0].rendezvous(dl, 8, resetCleared); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a rendezvous alone: %v, want the deadline", err)
	}
}
