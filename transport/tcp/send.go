package tcp

import (
	"errors"
	"hash/maphash"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/transport"
)

const (
	// directMax is the largest message that Isend writes from the caller's
	// goroutine when the socket is free (non-blocking system calls only);
	// larger messages, and the rest of any that do not fit in the socket
	// buffer at once, are queued for the writer goroutine (and for Test).
	directMax = 64 << 10
	// smallCopy is the largest payload copied next to its header so that
	// a direct send is one write(2).
	smallCopy = 16 << 10
	// stripeAlign aligns stripe boundaries.
	stripeAlign = 4096
	// maxBatch bounds the frames that one writev(2) carries.
	maxBatch = 64
	// testBudget bounds the bytes that one Test moves per connection.
	testBudget = 256 << 10
)

// frame is a queued frame: its header, its payload, and the request it
// belongs to. skip bytes of header and payload are already written.
type frame struct {
	hdr  [hdrLen]byte
	data []byte
	skip int
	req  *sendReq
}

func (f *frame) size() int { return hdrLen + len(f.data) }

var tagSeed = maphash.MakeSeed()

// streamOf picks the stream for the first frame of a message of size bytes
// under tag, out of n. Small messages all take stream 0, so that in a
// request-reply exchange each side's acknowledgement rides on its reply
// instead of costing a packet (and a wake-up) of its own; larger ones
// spread by tag. Messages with the same tag and size class always start on
// the same stream, so they arrive in order.
func streamOf(tag transport.Tag, size, n int) int {
	if n == 1 || size < directMax {
		return 0
	}
	return int(maphash.Comparable(tagSeed, tag.Key()) % uint64(n))
}

// Isend starts sending data under tag. A message up to 64 KiB is written at
// once, by non-blocking system calls, if its connection is free; the rest
// is queued for the connection's writer goroutine. Messages of at least the
// stripe size are split into one frame per connection. The request
// completes when every byte is in the socket.
func (p *peer) Isend(tag transport.Tag, data []byte) (transport.Request, error) {
	if err := p.currentErr(); err != nil {
		return transport.DoneRequest{Err: err}, err
	}
	id := p.sendID.Add(1)
	n := len(data)
	ns := len(p.streams)
	first := streamOf(tag, n, ns)
	h := header{typ: frameData, tag: tag, id: id, total: uint64(n)}
	if (n < p.m.stripeMin || ns == 1) && n <= maxFrame {
		h.length = uint32(n)
		return p.streams[first].sendOne(&h, data)
	}
	chunks := max(ns, (n+maxFrame-1)/maxFrame)
	size := (n + chunks - 1) / chunks
	size = min((size+stripeAlign-1)/stripeAlign*stripeAlign, maxFrame)
	count := (n + size - 1) / size
	r := newSendReq(p, count)
	for i := range count {
		off := i * size
		end := min(off+size, n)
		f := &frame{data: data[off:end], req: r}
		h.offset, h.length = uint64(off), uint32(end-off)
		h.encode(f.hdr[:])
		p.streams[(first+i)%ns].enqueue(f)
	}
	return r, nil
}

// sendOne sends a one-frame message.
func (s *stream) sendOne(h *header, data []byte) (transport.Request, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		err := s.p.currentErr()
		return transport.DoneRequest{Err: err}, err
	}
	if s.writing || len(s.queue) > 0 || len(data) > directMax {
		f := &frame{data: data, req: newSendReq(s.p, 1)}
		h.encode(f.hdr[:])
		s.queue = append(s.queue, f)
		idle := !s.writing
		s.mu.Unlock()
		if idle {
			s.signal()
		}
		return f.req, nil
	}
	s.writing = true
	s.mu.Unlock()

	var hb [hdrLen]byte
	h.encode(hb[:])
	n, err := s.writeDirect(hb[:], data)
	if err == nil && n == hdrLen+len(data) {
		s.release()
		return doneOK, nil
	}
	// The socket is full (or failed): the rest is queued, ahead of all else.
	f := &frame{hdr: hb, data: data, skip: n, req: newSendReq(s.p, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, nil)
	copy(s.queue[1:], s.queue)
	s.queue[0] = f
	s.mu.Unlock()
	if err != nil {
		s.failWrite(err)
	} else {
		s.release()
	}
	return f.req, nil
}

// enqueue hands f to the writer goroutine.
func (s *stream) enqueue(f *frame) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		f.req.frameDone(s.p.currentErr())
		return
	}
	s.queue = append(s.queue, f)
	idle := !s.writing
	s.mu.Unlock()
	if idle {
		s.signal()
	}
}

// acquire takes the write side if it is free and has frames to write.
func (s *stream) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writing || s.stopped || len(s.queue) == 0 {
		return false
	}
	s.writing = true
	return true
}

// release gives up the write side. Frames left in the queue go to the
// writer goroutine, woken even if it waits for room in the socket; on a
// stopped stream they fail.
func (s *stream) release() { s.releaseKick(true) }

func (s *stream) releaseKick(kick bool) {
	s.mu.Lock()
	s.writing = false
	var failed []*frame
	more := false
	if s.stopped {
		failed, s.queue = s.queue, nil
	} else {
		more = len(s.queue) > 0
	}
	s.mu.Unlock()
	s.failFrames(failed)
	if more {
		s.signal()
		if kick && s.wwaiting.Load() {
			s.conn.SetWriteDeadline(aLongTimeAgo)
		}
	}
}

// failWrite gives up the write side after a write error: the peer is lost.
// The read side usually learns why first (an abort frame that the peer
// sent before it closed is still to be read): it has writeErrGrace to say
// so before the write error is reported.
func (s *stream) failWrite(err error) {
	s.mu.Lock()
	s.broken = true
	s.stopped = true
	s.mu.Unlock()
	s.release()
	p := s.p
	p.m.wg.Add(1)
	go func() {
		defer p.m.wg.Done()
		for end := time.Now().Add(writeErrGrace); !p.failed.Load() && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		p.fail(p.lostErr(err), true, false)
	}()
}

// writeErrGrace is how long a write error waits for the read side's
// account of the peer's end.
const writeErrGrace = 250 * time.Millisecond

// writeDirect writes header and payload with non-blocking system calls
// until they are written or the socket is full, and returns the number of
// bytes written. The caller owns the write side.
func (s *stream) writeDirect(hdr, data []byte) (int, error) {
	total := len(hdr) + len(data)
	small := len(data) <= smallCopy
	if small {
		copy(s.scratch, hdr)
		copy(s.scratch[len(hdr):], data)
	}
	n := 0
	for n < total {
		var k int
		var err error
		switch {
		case small:
			k, err = unix.Write(s.fd, s.scratch[n:total])
		case n < len(hdr):
			k, err = unix.Writev(s.fd, [][]byte{hdr[n:], data})
		default:
			k, err = unix.Write(s.fd, data[n-len(hdr):])
		}
		switch err {
		case nil:
			n += k
		case unix.EINTR:
		case unix.EAGAIN:
			return n, nil
		default:
			return n, err
		}
	}
	return n, nil
}

// Push results.
const (
	pushEmpty  = iota // the queue is empty
	pushAgain         // the socket is full
	pushBudget        // the budget is spent
	pushError
)

// push writes queued frames, several per writev(2), until the queue is
// empty, the socket is full, or budget bytes (if budget >= 0) are written.
// It completes the frames written. The caller owns the write side.
func (s *stream) push(budget int) (int, error) {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return pushEmpty, nil
		}
		batch := append(s.batch[:0], s.queue[:min(len(s.queue), maxBatch)]...)
		s.mu.Unlock()
		if budget == 0 {
			return pushBudget, nil
		}
		iov := s.iov[:0]
		for _, f := range batch {
			if f.skip < hdrLen {
				iov = append(iov, f.hdr[f.skip:])
				if len(f.data) > 0 {
					iov = append(iov, f.data)
				}
			} else if d := f.data[f.skip-hdrLen:]; len(d) > 0 {
				iov = append(iov, d)
			}
		}
		n, err := unix.Writev(s.fd, iov)
		clear(iov)
		s.iov = iov[:0]
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			clear(batch)
			return pushAgain, nil
		default:
			clear(batch)
			return pushError, err
		}
		if budget > 0 {
			budget = max(budget-n, 0)
		}
		done := 0
		for _, f := range batch {
			left := f.size() - f.skip
			if n < left {
				f.skip += n
				break
			}
			n -= left
			f.skip = f.size()
			done++
		}
		s.mu.Lock()
		copy(s.queue, s.queue[done:])
		clear(s.queue[len(s.queue)-done:])
		s.queue = s.queue[:len(s.queue)-done]
		s.mu.Unlock()
		for _, f := range batch[:done] {
			f.req.frameDone(nil)
		}
		clear(batch)
		s.batch = batch[:0]
	}
}

// pushOwned runs push for a caller that took the write side, then lets go
// (waking the writer goroutine if kick and frames are left).
func (s *stream) pushOwned(budget int, kick bool) int {
	res, err := s.push(budget)
	if err != nil {
		s.failWrite(err)
		return res
	}
	s.releaseKick(kick)
	return res
}

// progressSend writes what the peer's sockets take now, for Test.
func (p *peer) progressSend() {
	for _, s := range p.streams {
		if s.acquire() {
			s.pushOwned(testBudget, true)
		}
	}
}

// writeLoop is the stream's writer goroutine. It writes queued frames when
// woken, and parks in the netpoller while the socket is full.
func (s *stream) writeLoop() {
	defer s.p.m.wg.Done()
	defer close(s.wexit)
	for range s.wake {
		for {
			s.mu.Lock()
			stopped := s.stopped
			s.mu.Unlock()
			if stopped {
				return
			}
			if !s.acquire() {
				break // empty, or the owner wakes us when it lets go
			}
			s.wwaiting.Store(true)
			if s.pushOwned(-1, false) != pushAgain {
				s.wwaiting.Store(false)
				break
			}
			err := s.raw.Write(func(uintptr) bool {
				// Wait unless the socket has room already.
				var pfd = []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
				n, _ := unix.Poll(pfd, 0)
				return n > 0
			})
			s.wwaiting.Store(false)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.conn.SetWriteDeadline(time.Time{})
			} else if err != nil {
				return
			}
		}
	}
}
