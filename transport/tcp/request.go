package tcp

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/braid-ccl/braid/transport"
)

// Request states.
const (
	reqPending = iota
	reqFinishing
	reqDone
)

// request is the completion half shared by sends and receives. Whoever
// moves the last byte (a reader or writer goroutine, or a caller's Test)
// finishes it; the caller polls Test or blocks on Done.
type request struct {
	state atomic.Uint32
	err   error
	done  chan struct{}
}

func (r *request) init() { r.done = make(chan struct{}) }

// finish completes r with err; only the first call has an effect.
func (r *request) finish(err error) bool {
	if !r.state.CompareAndSwap(reqPending, reqFinishing) {
		return false
	}
	r.err = err
	r.state.Store(reqDone)
	close(r.done)
	return true
}

func (r *request) result() (bool, error) {
	if r.state.Load() == reqDone {
		return true, r.err
	}
	return false, nil
}

// Done returns a channel closed when the request completes or fails.
func (r *request) Done() <-chan struct{} { return r.done }

// sendReq is an Isend: it completes when all of its frames are written to
// the socket, or fails with the first error.
type sendReq struct {
	request
	p    *peer
	left atomic.Int32 // frames not yet written
}

func newSendReq(p *peer, frames int) *sendReq {
	r := &sendReq{p: p}
	r.init()
	r.left.Store(int32(frames))
	return r
}

func (r *sendReq) frameDone(err error) {
	if err != nil {
		r.finish(err)
		return
	}
	if r.left.Add(-1) == 0 {
		r.finish(nil)
	}
}

// Test reports whether the send has completed. If not, it writes what it
// can of the peer's queued frames without blocking, then looks again.
func (r *sendReq) Test() (bool, error) {
	if done, err := r.result(); done {
		return done, err
	}
	r.p.progressSend()
	return r.result()
}

// recvReq is an Irecv.
type recvReq struct {
	request
	p       *peer
	tag     transport.Tag
	buf     []byte
	stream  int  // the stream its message starts on
	striped bool // its message may come on every stream
}

// Test reports whether the receive has completed. If not, it reads what
// the peer's connections hold without blocking, then looks again.
func (r *recvReq) Test() (bool, error) {
	if done, err := r.result(); done {
		return done, err
	}
	if r.striped {
		r.p.progressRecv()
	} else {
		r.p.streams[r.stream].progress()
	}
	return r.result()
}

var doneOK transport.Request = transport.DoneRequest{}

// Buffers for unexpected messages come from pools by power-of-two size
// class, so that a steady stream of early arrivals does not allocate.
var pools [48]sync.Pool

func getBuf(n int) *[]byte {
	if n == 0 {
		b := []byte{}
		return &b
	}
	c := max(bits.Len(uint(n-1)), 6)
	if c < len(pools) {
		if p, _ := pools[c].Get().(*[]byte); p != nil {
			*p = (*p)[:n]
			return p
		}
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func putBuf(p *[]byte) {
	if p == nil || cap(*p) == 0 {
		return
	}
	c := bits.Len(uint(cap(*p) - 1))
	if 1<<c != cap(*p) || c >= len(pools) {
		return
	}
	pools[c].Put(p)
}

// Cancel withdraws the receive (transport.Canceler). It stops every
// stream's reader between two copies (a frame's payload goes into a
// receive's buffer only while its stream's rmu is held), then unposts the
// receive or detaches it from the message it matched: that message's
// frames, the one being read included, are drained and dropped.
func (r *recvReq) Cancel() {
	if done, _ := r.result(); done {
		return
	}
	p := r.p
	for _, s := range p.streams {
		s.rmu.Lock()
	}
	p.mu.Lock()
	key := r.tag.Key()
	if list := p.posted[key]; len(list) > 0 {
		keep := list[:0]
		for _, x := range list {
			if x != r {
				keep = append(keep, x)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(p.posted, key)
		} else {
			p.posted[key] = keep
		}
	}
	var mine *message
	for _, e := range p.inflight {
		if e.req == r {
			e.req = nil
			e.discard = true
			mine = e
		}
	}
	for _, s := range p.streams {
		rd := &s.rd
		if mine != nil && rd.inFrame && rd.direct && rd.e == mine {
			rd.dst, rd.direct = nil, false
			p.busy--
		}
	}
	r.finish(fmt.Errorf("tcp: rank %d: receive from peer %d (%v): %w", p.m.self, p.rank, r.tag, transport.ErrCanceled))
	p.failRequestsLocked()
	p.mu.Unlock()
	for _, s := range p.streams {
		s.rmu.Unlock()
	}
}
