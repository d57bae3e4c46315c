package shm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/internal/cma"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/transport"
)

// doneReq is a request that completed successfully when it was posted. One
// value serves every such request, so that the common small send and the
// receive of a message that was already there allocate nothing.
type doneReq struct{}

func (*doneReq) Test() (bool, error)   { return true, nil }
func (*doneReq) Done() <-chan struct{} { return nil }

var doneOK transport.Request = &doneReq{}

// States of a receive.
const (
	recvPending = iota // posted, waiting for a frame
	recvRndv           // matched a descriptor; its owner copies in Test
	recvDone           // complete; err holds the result
)

// recvReq is a posted receive. Its fields other than state are written
// under the conn's rmu until state becomes recvRndv or recvDone; after that
// only the goroutine calling Test touches them.
type recvReq struct {
	c     *conn
	tag   transport.Tag
	buf   []byte
	state atomic.Uint32
	err   error
	got   uint64 // bytes received so far of a chunked message
	addr  uint64 // recvRndv: the sender's buffer
	slot  uint32
	gen   uint32
	cma   cmaTask // scratch of read
}

func (r *recvReq) complete(err error) {
	r.err = err
	r.state.Store(recvDone)
}

// Done returns nil: shm requests progress only when tested.
func (r *recvReq) Done() <-chan struct{} { return nil }

// Streaming: a Test that moved chunks of its own message keeps polling, so
// that a message carried in chunks flows without a return to the caller's
// backoff between chunks (the caller's backoff only resets when a request
// completes, and its sleeps last far longer than a chunk). Once data moved,
// a Test waits for more for up to streamIdle, which outlasts the longest
// backoff sleep of the peer, spinning streamSpins polls and then yielding
// the processor every 32 polls; and it returns after streamBudget in all.
const (
	streamSpins  = 256
	streamIdle   = transport.MaxSleep + time.Millisecond
	streamBudget = 5 * time.Millisecond
)

// stream tracks a streaming loop.
type stream struct {
	idle, polls int
	start       time.Time // of the first poll that moved data
	idleSince   time.Time // of the first poll since then that moved nothing
}

// more reports whether to poll again after a poll that moved data or not.
func (s *stream) more(moved bool) bool {
	if moved {
		s.idle = 0
		s.polls++
		if s.polls == 1 {
			s.start = time.Now()
		} else if s.polls%16 == 0 && time.Since(s.start) > streamBudget {
			return false
		}
		return true
	}
	if s.polls == 0 {
		return false
	}
	s.idle++
	switch {
	case s.idle == 1:
		s.idleSince = time.Now()
	case s.idle > streamSpins && s.idle%32 == 0:
		if time.Since(s.idleSince) > streamIdle || time.Since(s.start) > streamBudget {
			return false
		}
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	return true
}

// Test drains the inbound ring, unless another goroutine is doing so, and
// copies a rendezvous message matched to r; see transport.Request.
func (r *recvReq) Test() (bool, error) {
	var st stream
	for {
		switch r.state.Load() {
		case recvDone:
			return true, r.err
		case recvRndv:
			return r.copyRndv()
		}
		c := r.c
		if !c.rmu.TryLock() {
			return false, nil
		}
		got := r.got
		c.progress()
		if c.closed.Load() && r.state.Load() == recvPending {
			c.unpost(r)
			r.complete(c.closedErr())
		}
		moved := r.got != got // a chunked message is coming in
		c.rmu.Unlock()
		if r.state.Load() == recvPending && !st.more(moved) {
			return false, nil
		}
	}
}

// Cancel withdraws the receive (transport.Canceler). Under rmu, which
// every drain of the ring holds, it unposts the receive, or makes the
// chunked message it was receiving drop its remaining chunks. A rendezvous
// message it had matched is left uncopied: only the receive's owner copies
// one (in Test), the owner is the caller, and the request is done once
// Cancel returns.
func (r *recvReq) Cancel() {
	c := r.c
	c.rmu.Lock()
	defer c.rmu.Unlock()
	switch r.state.Load() {
	case recvDone:
		return
	case recvRndv:
		// Only Test copies a rendezvous message, and a done request's
		// Test never does. The sender is not told: it waits for the
		// acknowledgement as it did before a receive could be withdrawn,
		// until its own call fails or its job aborts. (Acknowledging a
		// failure here made it fail at once, naming this rank, before the
		// rank whose stop caused it all was found: 2 to 5 of 40 chaos jobs
		// with a stopped rank named the wrong one.)
	default:
		c.unpost(r)
		for k, p := range c.partial {
			if p.r == r {
				c.partial[k] = partial{drop: true}
			}
		}
	}
	r.complete(fmt.Errorf("shm: rank %d: receive of %v from rank %d: %w", c.m.rank, r.tag, c.peer, transport.ErrCanceled))
}

// A Test copies a rendezvous message in pieces of cmaChunk bytes, for up
// to streamBudget, so that a Test of a 64 MiB receive leaves the caller's
// other requests a turn. It goes on to the next piece itself rather than
// returning after each: the caller's backoff resets only when a request
// completes, so a message copied one piece per Test waited out a backoff
// sleep (up to transport.MaxSleep) between pieces; every message over one
// piece was then 3–6× slower (2 ranks on the 16-core node, allgather of
// 16 MiB: 7.9 ms in 4 MiB pieces, 2.3–2.9 ms in one; docs/PERFORMANCE.md).
var cmaChunk uint64 = 4 << 20 // a variable for the tests

// copyRndv copies the next part of a rendezvous message from the sender's
// memory into r.buf, and acknowledges the message when all of it is there.
func (r *recvReq) copyRndv() (bool, error) {
	c := r.c
	if err := c.failure(); err != nil {
		r.complete(err)
		return true, err
	}
	if r.got == 0 {
		c.rmu.Lock()
		if !c.closed.Load() {
			c.ack(r.slot, r.gen, ackBusy)
		}
		c.rmu.Unlock()
	}
	var err error
	var start time.Time
	for {
		end := min(r.got+cmaChunk, uint64(len(r.buf)))
		err = r.read(c.peerPID, r.buf[r.got:end], r.addr+r.got)
		if err != nil || end == uint64(len(r.buf)) {
			break
		}
		r.got = end
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > streamBudget {
			return false, nil
		}
	}
	status := uint64(ackOK)
	if err != nil {
		status = ackFailed
		if errors.Is(err, unix.ESRCH) {
			err = fmt.Errorf("shm: rank %d: peer rank %d (pid %d) died: %w", c.m.rank, c.peer, c.peerPID, transport.ErrPeerLost)
			c.fail(err, true)
		} else {
			err = fmt.Errorf("shm: rank %d: copy of message %v (%d bytes) from rank %d: %w", c.m.rank, r.tag, len(r.buf), c.peer, err)
		}
	}
	c.rmu.Lock()
	if c.closed.Load() {
		if err == nil {
			err = c.closedErr()
		}
	} else {
		c.ack(r.slot, r.gen, status)
	}
	c.rmu.Unlock()
	r.complete(err)
	return true, err
}

// read copies len(dst) bytes at addr in process pid into dst; with
// Options.SplitCMA, from par.MinSize on, the rank's threads (package par)
// each copy a share of the pages with process_vm_readv calls of their own.
func (r *recvReq) read(pid int, dst []byte, addr uint64) error {
	if len(dst) < par.MinSize() || !r.c.m.opts.SplitCMA {
		return cma.Read(pid, dst, addr)
	}
	t := &r.cma
	t.pid, t.dst, t.addr, t.err = pid, dst, addr, nil
	par.Run(len(dst), 4096, t)
	err := t.err
	t.dst, t.err = nil, nil
	return err
}

// cmaTask is a process_vm_readv copy that package par splits; err is the
// first piece's failure.
type cmaTask struct {
	pid  int
	dst  []byte
	addr uint64
	mu   sync.Mutex
	err  error
}

func (t *cmaTask) Piece(lo, hi int) {
	if err := cma.Read(t.pid, t.dst[lo:hi], t.addr+uint64(lo)); err != nil {
		t.mu.Lock()
		if t.err == nil {
			t.err = err
		}
		t.mu.Unlock()
	}
}

// sendReq is a send that did not complete when posted: a message waiting
// for ring space, or a rendezvous send waiting for the receiver's copy.
// Its fields other than state are guarded by the conn's smu.
type sendReq struct {
	c    *conn
	tag  transport.Tag
	data []byte
	progress
	rndv    bool
	busy    bool // the receiver said it is copying
	hasSlot bool
	slot    uint32
	gen     uint32
	state   atomic.Uint32 // 1 when done
	err     error
}

// Done returns nil: shm requests progress only when tested.
func (s *sendReq) Done() <-chan struct{} { return nil }

// Test writes what fits of the message into the ring, or checks whether the
// receiver copied it; see transport.Request.
func (s *sendReq) Test() (bool, error) {
	if s.state.Load() != 0 {
		return true, s.err
	}
	c := s.c
	var st stream
	for {
		c.smu.Lock()
		sent := s.sent
		done, err := s.advance()
		moved := s.sent != sent
		c.smu.Unlock()
		if done {
			s.err = err
			s.state.Store(1)
			return true, err
		}
		c.pollRecv()
		if s.busy {
			// The receiver is copying the message: wait here rather than
			// in the caller's backoff, which may sleep far longer than the
			// copy takes. Yield now and then, for the copier may need
			// this processor.
			moved = true
			if st.polls%32 == 31 {
				unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
		if !st.more(moved) {
			return false, nil
		}
	}
}

// advance makes what progress it can. Called under smu.
func (s *sendReq) advance() (bool, error) {
	c := s.c
	if c.closed.Load() {
		c.releaseSlot(s)
		return true, c.closedErr()
	}
	var v uint64 // the completion word of a rendezvous send
	if s.rndv && s.started {
		v = atomic.LoadUint64((*uint64)(unsafe.Pointer(&c.m.seg.mem[c.mySlots+8*int(s.slot)])))
		if uint32(v>>8) == s.gen && v&0xff != ackBusy {
			c.releaseSlot(s)
			switch v & 0xff {
			case ackOK:
				return true, nil
			case ackMismatch:
				return true, fmt.Errorf("shm: rank %d: rank %d refused message %v of %d bytes: %w", c.m.rank, c.peer, s.tag, len(s.data), transport.ErrMismatch)
			}
			return true, fmt.Errorf("shm: rank %d: rank %d failed to copy message %v of %d bytes", c.m.rank, c.peer, s.tag, len(s.data))
		}
	}
	if err := c.failure(); err != nil {
		c.releaseSlot(s)
		return true, err
	}
	switch {
	case !s.rndv:
		return c.pushData(s.tag, s.data, &s.progress), nil
	case !s.started:
		c.pushRndv(s)
	default:
		s.busy = v == uint64(s.gen)<<8|ackBusy
	}
	return false, nil
}
