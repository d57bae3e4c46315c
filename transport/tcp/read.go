package tcp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/transport"
)

const (
	// readBufSize is the size of each connection's read buffer.
	readBufSize = 64 << 10
	// directRead is the payload length from which the rest of a frame is
	// read straight into its destination rather than through the buffer.
	directRead = 4 << 10
)

// readState is a stream's read side: a buffer and the frame in progress.
// Frames are parsed incrementally, so that any goroutine can move the
// stream forward with non-blocking reads and stop at any byte.
type readState struct {
	buf     []byte
	r, w    int // buf[r:w] is read but not yet used
	inFrame bool
	h       header
	left    int      // payload bytes of the frame still to read
	dst     []byte   // where they go; nil means drop them
	e       *message // the data frame's message
	direct  bool     // dst is a receive's buffer (counted in peer.busy)
	ctl     []byte   // a control frame's payload
	dead    bool     // the stream is finished; nothing more is read
	closed  bool     // the socket is closed

	// An unexpected message's frame is spilled: its payload goes into
	// chunks allocated as its bytes arrive (spillRoom).
	spill   bool
	off     int    // the message offset of the frame's next byte
	spilled int    // the frame's bytes spilled so far
	chunks  []span // the frame's chunks, handed to its message at its end
	room    []byte // the unfilled part of the last chunk
}

// spillRoom returns where the frame's next bytes go when it is spilled,
// starting a chunk when the last one is full: of what the frame has
// spilled so far, or of the bytes at hand (avail, already read into buf),
// or of a read buffer's worth (64 KiB), whichever is most, and never more
// than the frame has left. The first chunk is made once the frame's first
// bytes are at hand (pump), the others as the frame's bytes keep coming:
// the chunks hold at most twice the bytes that arrived, or 64 KiB more,
// and a frame that announces a gigabyte and ends short costs about what
// it sent. Only the frame being read (one per stream) can hold more than
// it received.
func (rd *readState) spillRoom(avail int) []byte {
	if len(rd.room) == 0 {
		b := getBuf(min(rd.left, max(avail, rd.spilled, readBufSize)))
		rd.chunks = append(rd.chunks, span{off: rd.off, buf: b})
		rd.room = *b
	}
	return rd.room
}

// spilledInto records that n bytes went into rd.room.
func (rd *readState) spilledInto(n int) {
	rd.room = rd.room[n:]
	rd.off += n
	rd.spilled += n
}

// shortErr is the error of a connection that ended inside a frame's
// payload.
func (rd *readState) shortErr() error {
	h := &rd.h
	if h.typ != frameData {
		return fmt.Errorf("the connection ended %d bytes into a control frame of %d: %w", int(h.length)-rd.left, h.length, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("the connection ended %d bytes into a frame of %d (message %d, %v, of %d bytes; the frame at offset %d): %w",
		int(h.length)-rd.left, h.length, h.id, h.tag, h.total, h.offset, io.ErrUnexpectedEOF)
}

// dropChunks frees the chunks of a frame that will not be delivered.
func (rd *readState) dropChunks() {
	for i, sp := range rd.chunks {
		putBuf(sp.buf)
		rd.chunks[i] = span{}
	}
	rd.chunks, rd.room, rd.spill = rd.chunks[:0], nil, false
}

var errProtocol = errors.New("protocol error")

// Pump events.
const (
	evAgain  = iota // the socket is empty
	evBudget        // the budget is spent; the socket may hold more
	evEnded         // the peer ended the stream cleanly
	evAbort         // the peer aborted
	evError         // the connection failed
	evDead          // the stream was already finished
	evDone          // a receive completed (when pump was asked to stop there)
)

type event struct {
	kind int
	err  error  // evError
	text string // evEnded: why; evAbort: the peer's reason
}

// pump reads and delivers frames with non-blocking reads until the socket
// is empty, the stream ends, or budget bytes (if budget >= 0) are read;
// or, if yield, a receive completed.
// The caller holds rmu, and handles the event after letting go of it.
func (s *stream) pump(budget int, yield bool) event {
	rd := &s.rd
	switch {
	case rd.dead:
		return event{kind: evDead}
	case rd.closed:
		return s.die(event{kind: evDead})
	}
	for {
		if !rd.inFrame {
			if rd.w-rd.r < hdrLen {
				if budget == 0 {
					return event{kind: evBudget}
				}
				if rd.r > 0 {
					rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
					rd.r = 0
				}
				n, err := s.sysread(rd.buf[rd.w:])
				if err != nil {
					if err == unix.EAGAIN {
						return event{kind: evAgain}
					}
					if err == io.EOF && rd.w == 0 {
						return s.die(event{kind: evEnded, text: "connection closed by the peer"})
					}
					if err == io.EOF {
						err = fmt.Errorf("the connection ended %d bytes into a frame header: %w", rd.w, io.ErrUnexpectedEOF)
					}
					return s.die(event{kind: evError, err: err})
				}
				rd.w += n
				budget = spend(budget, n)
				continue
			}
			if err := rd.h.decode(rd.buf[rd.r:]); err != nil {
				return s.die(event{kind: evError, err: fmt.Errorf("%w: %v", errProtocol, err)})
			}
			rd.r += hdrLen
			rd.inFrame = true
			rd.left = int(rd.h.length)
			rd.dst, rd.e, rd.direct, rd.ctl = nil, nil, false, rd.ctl[:0]
			rd.spill, rd.spilled, rd.room = false, 0, nil
			if rd.h.typ == frameData {
				unexpected, err := s.p.beginFrame(rd)
				if err != nil {
					rd.inFrame = false
					return s.die(event{kind: evError, err: fmt.Errorf("%w: %v", errProtocol, err)})
				}
				if unexpected && s.p.m.unexpected != nil {
					s.p.m.unexpected(s.p.rank, rd.h.tag)
				}
			}
		}
		for rd.left > 0 {
			if rd.r < rd.w {
				k := min(rd.left, rd.w-rd.r)
				b := rd.buf[rd.r : rd.r+k]
				switch {
				case rd.dst != nil:
					rd.dst = rd.dst[copy(rd.dst, b):]
				case rd.spill:
					k = copy(rd.spillRoom(k), b)
					rd.spilledInto(k)
				case rd.h.typ == frameAbort:
					rd.ctl = append(rd.ctl, b...)
				}
				rd.r += k
				rd.left -= k
				continue
			}
			rd.r, rd.w = 0, 0
			if budget == 0 {
				return event{kind: evBudget}
			}
			var n int
			var err error
			switch {
			case rd.dst != nil && rd.left >= directRead:
				if n, err = s.sysread(rd.dst[:rd.left]); err == nil {
					rd.dst = rd.dst[n:]
					rd.left -= n
				}
			case rd.spill && rd.left >= directRead && (len(rd.room) >= directRead || rd.spilled > 0):
				// Straight into a chunk, a new one if the last is full
				// and some of the frame's bytes came already.
				if n, err = s.sysread(rd.spillRoom(0)); err == nil {
					rd.spilledInto(n)
					rd.left -= n
				}
			default:
				if n, err = s.sysread(rd.buf); err == nil {
					rd.w = n
				}
			}
			if err != nil {
				if err == unix.EAGAIN {
					return event{kind: evAgain}
				}
				if err == io.EOF {
					err = rd.shortErr()
				}
				return s.die(event{kind: evError, err: err})
			}
			budget = spend(budget, n)
		}
		rd.inFrame = false
		switch rd.h.typ {
		case frameData:
			if s.p.endFrame(rd) && yield {
				return event{kind: evDone}
			}
		case frameAbort:
			return s.die(event{kind: evAbort, text: string(rd.ctl)})
		case frameClose:
			return s.die(event{kind: evEnded, text: reasonClosed})
		}
	}
}

// reasonClosed is why a stream ends when the peer closed its mesh.
const reasonClosed = "the peer closed its mesh"

func spend(budget, n int) int {
	if budget < 0 {
		return budget
	}
	return max(budget-n, 0)
}

// die finishes the stream's read side with ev.
func (s *stream) die(ev event) event {
	rd := &s.rd
	rd.dead = true
	if rd.inFrame && rd.direct {
		p := s.p
		p.mu.Lock()
		p.busy--
		p.failRequestsLocked()
		p.mu.Unlock()
	}
	rd.inFrame, rd.dst, rd.e, rd.direct = false, nil, nil, false
	rd.dropChunks()
	return ev
}

func (s *stream) sysread(b []byte) (int, error) {
	for {
		n, err := unix.Read(s.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// handle acts on what pump returned, without holding rmu. It reports
// whether the stream's read side is finished.
func (s *stream) handle(ev event) bool {
	p := s.p
	switch ev.kind {
	case evAgain, evBudget, evDone:
		return false
	case evEnded:
		p.streamEnded(s, ev.text)
	case evAbort:
		p.fail(fmt.Errorf("tcp: rank %d: peer %d at %s %w: %s", p.m.self, p.rank, p.addr, transport.ErrAborted, ev.text), true, true)
	case evError:
		if p.failed.Load() {
			s.closeConn()
		} else {
			if errors.Is(ev.err, errProtocol) {
				p.m.log.Printf("braid/tcp: rank %d: peer %d at %s: %v; dropping the connection", p.m.self, p.rank, p.addr, ev.err)
			}
			p.fail(p.lostErr(ev.err), true, true)
		}
	}
	return true
}

// progressRecv reads what the peer's sockets hold now, for Test.
func (p *peer) progressRecv() {
	for _, s := range p.streams {
		s.progress()
	}
}

// progress reads what the socket holds now, unless someone else is
// reading it. If it stops before the socket is empty, it wakes the reader
// goroutine to go on.
func (s *stream) progress() {
	if !s.rmu.TryLock() {
		return
	}
	ev := s.pump(testBudget, false)
	s.rmu.Unlock()
	switch {
	case ev.kind == evBudget:
		if s.rwaiting.Load() {
			s.conn.SetReadDeadline(aLongTimeAgo)
		}
	case ev.kind != evAgain:
		s.handle(ev)
		s.conn.SetReadDeadline(aLongTimeAgo) // let the reader goroutine see it
	}
}

// readLoop is the stream's reader goroutine. It delivers frames as they
// come, and parks in the netpoller while the socket is empty.
func (s *stream) readLoop() {
	defer s.p.m.wg.Done()
	for {
		s.rmu.Lock()
		ev := s.pump(-1, true)
		s.rmu.Unlock()
		if s.handle(ev) {
			return
		}
		if ev.kind == evDone {
			// Let the receive's waiter, just woken, run on this thread
			// before the reader finishes its round.
			runtime.Gosched()
			continue
		}
		s.rwaiting.Store(true)
		err := s.raw.Read(func(uintptr) bool {
			// Wait unless the socket has data (or news) already.
			var b [1]byte
			_, _, err := unix.Recvfrom(s.fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			return err != unix.EAGAIN
		})
		s.rwaiting.Store(false)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.conn.SetReadDeadline(time.Time{})
		}
	}
}
