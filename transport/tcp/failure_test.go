package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// crash closes every socket of m as a killed process would, without
// close frames.
func crash(m transport.Mesh) {
	for _, p := range m.(*mesh).peers {
		if p == nil {
			continue
		}
		for _, s := range p.streams {
			s.conn.Close()
		}
	}
}

// TestPeerLostEOF checks that when a peer's sockets close without a word,
// pending and later requests fail with ErrPeerLost naming the peer and its
// address, Lost is called once, and the survivor keeps its other peers.
func TestPeerLostEOF(t *testing.T) {
	defer checkGoroutines(t)()
	for _, streams := range []int{1, 3} {
		var mu sync.Mutex
		var lost []string
		ms := connect(t, New(local(streams, 0)), 3, func(rank, peer int, err error) {
			if rank == 1 {
				return // the crashed rank's own view
			}
			mu.Lock()
			defer mu.Unlock()
			if !errors.Is(err, transport.ErrPeerLost) {
				t.Errorf("Lost(%d, %d, %v): not ErrPeerLost", rank, peer, err)
			}
			lost = append(lost, strings.Repeat("x", rank)+":"+string(rune('0'+peer)))
		})
		recv, _ := ms[0].Conn(1).Irecv(transport.Tag{Comm: 1}, make([]byte, 8))
		big, _ := ms[0].Conn(1).Irecv(transport.Tag{Comm: 2}, make([]byte, 8<<20))
		start := time.Now()
		crash(ms[1])
		for _, r := range []transport.Request{recv, big} {
			err := wait(t, r)
			if !errors.Is(err, transport.ErrPeerLost) {
				t.Fatalf("streams=%d: pending receive: %v, want ErrPeerLost", streams, err)
			}
			if !strings.Contains(err.Error(), "peer 1 at 127.0.0.1:") || !strings.Contains(err.Error(), "rank 0") {
				t.Errorf("error does not name the ranks and the address: %v", err)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("streams=%d: ErrPeerLost after %v", streams, d)
		}
		if _, err := ms[0].Conn(1).Isend(transport.Tag{Comm: 3}, make([]byte, 8)); !errors.Is(err, transport.ErrPeerLost) {
			t.Errorf("send after the loss: %v, want ErrPeerLost", err)
		}
		// Ranks 0 and 2 still talk.
		buf := make([]byte, 3<<20)
		rr, _ := ms[2].Conn(0).Irecv(transport.Tag{Comm: 4}, buf)
		sr, _ := ms[0].Conn(2).Isend(transport.Tag{Comm: 4}, pattern(3<<20, 4))
		if err := wait(t, rr, sr); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, pattern(3<<20, 4)) {
			t.Error("data differs")
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			mu.Lock()
			n := len(lost)
			mu.Unlock()
			if n >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		if len(lost) != 2 || lost[0] == lost[1] {
			t.Errorf("streams=%d: Lost calls %q, want one each from ranks 0 and 2 about rank 1", streams, lost)
		}
		mu.Unlock()
		for _, m := range ms {
			m.Close()
		}
	}
}

// TestLostCallsClose checks that a Lost callback may close the mesh.
func TestLostCallsClose(t *testing.T) {
	defer checkGoroutines(t)()
	var ms []transport.Mesh
	var closed atomic.Bool
	ready := make(chan struct{})
	ms = connect(t, New(local(2, 0)), 2, func(rank, peer int, err error) {
		<-ready
		if rank == 0 {
			ms[0].Close()
			closed.Store(true)
		}
	})
	close(ready)
	r, _ := ms[0].Conn(1).Irecv(transport.Tag{}, make([]byte, 8))
	ms[1].Close()
	if err := wait(t, r); !errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("receive: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !closed.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !closed.Load() {
		t.Error("Close in Lost did not return")
	}
}

// TestStriped sends messages around the stripe size, receive first and
// send first, and checks every byte and the guard bytes after each buffer.
func TestStriped(t *testing.T) {
	defer checkGoroutines(t)()
	ms := connect(t, New(local(3, 64<<10)), 2, nil)
	sizes := []int{64<<10 - 1, 64 << 10, 64<<10 + 1, 1<<20 + 3, 5<<20 + 4097, 16<<20 + 7}
	for _, recvFirst := range []bool{true, false} {
		var reqs []transport.Request
		var bufs [][]byte
		post := func() {
			for i, n := range sizes {
				b := make([]byte, n+16)
				for j := range b {
					b[j] = 0xA5
				}
				r, err := ms[1].Conn(0).Irecv(transport.Tag{Comm: 5, Step: uint32(i)}, b[:n])
				if err != nil {
					t.Fatal(err)
				}
				reqs, bufs = append(reqs, r), append(bufs, b)
			}
		}
		if recvFirst {
			post()
		}
		for i, n := range sizes {
			s, err := ms[0].Conn(1).Isend(transport.Tag{Comm: 5, Step: uint32(i)}, pattern(n, byte(i)))
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, s)
		}
		if !recvFirst {
			time.Sleep(time.Millisecond) // some arrive, some are on their way
			post()
		}
		if err := wait(t, reqs...); err != nil {
			t.Fatal(err)
		}
		for i, n := range sizes {
			if !bytes.Equal(bufs[i][:n], pattern(n, byte(i))) {
				t.Errorf("receive first %v: message of %d bytes differs", recvFirst, n)
			}
			for _, g := range bufs[i][n:] {
				if g != 0xA5 {
					t.Fatalf("receive first %v: write past a %d-byte buffer", recvFirst, n)
				}
			}
		}
	}
	ms[0].Close()
	ms[1].Close()
}

// TestBothWays16M has both ranks send 16 MiB to each other before either
// posts its receive: neither may wait for the other to read.
func TestBothWays16M(t *testing.T) {
	defer checkGoroutines(t)()
	for _, streams := range []int{1, 2} {
		ms := connect(t, New(local(streams, 0)), 2, nil)
		const n = 16 << 20
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() {
				c := ms[r].Conn(1 - r)
				var sends []transport.Request
				for k := range 2 {
					s, err := c.Isend(transport.Tag{Comm: 6, Step: uint32(k)}, pattern(n, byte(r+k)))
					if err != nil {
						t.Error(err)
						return
					}
					sends = append(sends, s)
				}
				bufs := [][]byte{make([]byte, n), make([]byte, n)}
				var recvs []transport.Request
				for k := range 2 {
					rr, _ := c.Irecv(transport.Tag{Comm: 6, Step: uint32(k)}, bufs[k])
					recvs = append(recvs, rr)
				}
				if err := wait(t, append(sends, recvs...)...); err != nil {
					t.Error(err)
					return
				}
				for k := range 2 {
					if !bytes.Equal(bufs[k], pattern(n, byte(1-r+k))) {
						t.Errorf("rank %d: message %d differs", r, k)
					}
				}
			})
		}
		wg.Wait()
		ms[0].Close()
		ms[1].Close()
	}
}

// rawPair returns a peer of a mesh with one stream whose far end the test
// drives by hand, frame by frame. No goroutines run: only Test moves data.
func rawPair(t *testing.T, logw *syncWriter) (*peer, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	far, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	near, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Logger: log.New(logw, "", 0)}
	m := newMesh(&transport.Config{Self: transport.Endpoint{Rank: 0}, World: 2}, &opts)
	p := m.newPeer(1, far.LocalAddr().String(), 1)
	if err := p.newStream(0, near.(*net.TCPConn)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		far.Close()
	})
	return p, far.(*net.TCPConn)
}

func frameBytes(h header, payload []byte) []byte {
	b := make([]byte, hdrLen, hdrLen+len(payload))
	h.encode(b)
	return append(b, payload...)
}

// TestPartialAttach posts a receive while its message is half in: the
// first half went to a pooled buffer, the rest goes straight to the
// receive's buffer, and the result is whole.
func TestPartialAttach(t *testing.T) {
	p, far := rawPair(t, &syncWriter{})
	tag := transport.Tag{Comm: 1, Sig: 9}
	data := pattern(300000, 3)
	h1 := header{typ: frameData, tag: tag, id: 7, total: uint64(len(data)), offset: 0, length: 100000}
	h2 := h1
	h2.offset, h2.length = 100000, 200000
	f1, f2 := frameBytes(h1, data[:100000]), frameBytes(h2, data[100000:])
	// Frame 1, and half of frame 2.
	far.Write(f1)
	far.Write(f2[:hdrLen+50000])
	other, _ := p.Irecv(transport.Tag{Comm: 99}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for p.rd0().w == 0 && len(p.unexpected) == 0 && time.Now().Before(deadline) {
		other.Test()
		time.Sleep(time.Millisecond)
	}
	for range 100 {
		other.Test()
	}
	buf := make([]byte, len(data))
	r, err := p.Irecv(tag, buf)
	if err != nil {
		t.Fatal(err)
	}
	far.Write(f2[hdrLen+50000:])
	if err := wait(t, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("data differs")
	}
}

func (p *peer) rd0() *readState {
	p.streams[0].rmu.Lock()
	defer p.streams[0].rmu.Unlock()
	return &p.streams[0].rd
}

// TestProtocolError checks that garbage on a connection loses the peer,
// with a log line, rather than crashing; so does a frame that overflows
// its message.
func TestProtocolError(t *testing.T) {
	for _, c := range []struct {
		name  string
		bytes []byte
	}{
		{"garbage", bytes.Repeat([]byte("garbage!"), 10)},
		{"overflow", append(frameBytes(header{typ: frameData, id: 1, total: 10, length: 5}, make([]byte, 5)),
			frameBytes(header{typ: frameData, id: 1, total: 10, offset: 3, length: 7}, make([]byte, 7))...)},
		{"retotal", append(frameBytes(header{typ: frameData, id: 1, total: 10, length: 5}, make([]byte, 5)),
			frameBytes(header{typ: frameData, id: 1, total: 20, offset: 5, length: 5}, make([]byte, 5))...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			logw := &syncWriter{}
			p, far := rawPair(t, logw)
			r, _ := p.Irecv(transport.Tag{Comm: 5}, make([]byte, 8))
			far.Write(c.bytes)
			if err := wait(t, r); !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "protocol error") {
				t.Errorf("receive: %v, want ErrPeerLost with a protocol error", err)
			}
			if !strings.Contains(logw.String(), "protocol error") {
				t.Errorf("log: %q", logw.String())
			}
		})
	}
}

// TestAbortWhileSending aborts a rank whose sockets are full (its peer
// does not read): Abort returns at once and the peer still learns of it.
func TestAbortWhileSending(t *testing.T) {
	defer checkGoroutines(t)()
	var mu sync.Mutex
	var lost []error
	ms := connect(t, New(local(1, 0)), 2, func(rank, peer int, err error) {
		mu.Lock()
		lost = append(lost, err)
		mu.Unlock()
	})
	s, _ := ms[0].Conn(1).Isend(transport.Tag{Comm: 1}, make([]byte, 64<<20))
	start := time.Now()
	ms[0].Abort(errors.New("out of memory"))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Abort took %v", d)
	}
	if err := wait(t, s); err != nil && !errors.Is(err, transport.ErrAborted) {
		t.Errorf("send in progress: %v, want nil or ErrAborted", err)
	}
	r, _ := ms[1].Conn(0).Irecv(transport.Tag{Comm: 2}, make([]byte, 8))
	err := wait(t, r)
	if !errors.Is(err, transport.ErrAborted) && !errors.Is(err, transport.ErrPeerLost) {
		t.Errorf("peer's receive: %v, want ErrAborted (or ErrPeerLost when the frame could not follow the cut message)", err)
	}
}

// TestCloseMidFrame closes a mesh while a frame is half read into a
// posted receive: the receive fails with ErrClosed rather than hanging.
func TestCloseMidFrame(t *testing.T) {
	p, far := rawPair(t, &syncWriter{})
	tag := transport.Tag{Comm: 1}
	r, _ := p.Irecv(tag, make([]byte, 100000))
	f := frameBytes(header{typ: frameData, tag: tag, id: 1, total: 100000, length: 100000}, make([]byte, 100000))
	far.Write(f[:hdrLen+1000])
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.Test()
		p.mu.Lock()
		busy := p.busy
		p.mu.Unlock()
		if busy == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the frame did not start")
		}
		time.Sleep(time.Millisecond)
	}
	p.m.Close()
	if err := wait(t, r); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("receive: %v, want ErrClosed", err)
	}
}

// TestAbortThenClose: a process that aborts its mesh and closes it at once
// (as one does that exits after a failure) still gives every peer its
// reason: the peers fail with ErrAborted carrying it, not with a
// connection closed without a word, which would make them name this rank
// instead of the cause (the chaos campaign's echoes over TCP).
func TestAbortThenClose(t *testing.T) {
	defer checkGoroutines(t)()
	for _, streams := range []int{1, 3} {
		ms := connect(t, New(local(streams, 0)), 3, func(int, int, error) {})
		var reqs []transport.Request
		for _, r := range []int{1, 2} {
			req, _ := ms[r].Conn(0).Irecv(transport.Tag{Comm: 1}, make([]byte, 8))
			reqs = append(reqs, req)
		}
		ms[0].Abort(errors.New("braid-abort kind=3 peer=7 from=0: rank 7 died"))
		ms[0].Close()
		for i, req := range reqs {
			err := wait(t, req)
			if !errors.Is(err, transport.ErrAborted) || !strings.Contains(err.Error(), "rank 7 died") {
				t.Errorf("streams=%d: rank %d's receive: %v; want ErrAborted with the reason", streams, i+1, err)
			}
		}
		for _, m := range ms[1:] {
			m.Close()
		}
	}
}

// TestAnnouncedLength sends the first bytes of a message whose frame
// announces far more than comes, then ends the connection: the receiver
// allocates about what arrived, not what was announced (up to 2^42 bytes,
// more than any machine could), and fails with an error that names the
// peer and how far the frame got.
func TestAnnouncedLength(t *testing.T) {
	for _, c := range []struct {
		name          string
		total, length uint64
	}{
		{"max", maxMessage, maxFrame},
		{"8M", 8 << 20, 8 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, far := rawPair(t, &syncWriter{})
			r, _ := p.Irecv(transport.Tag{Comm: 5}, make([]byte, 8))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			const sent = 100000
			h := header{typ: frameData, tag: transport.Tag{Comm: 1}, id: 1, total: c.total, length: uint32(c.length)}
			far.Write(frameBytes(h, pattern(sent, 1)))
			far.Close()
			err := wait(t, r)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), io.ErrUnexpectedEOF.Error()) {
				t.Fatalf("receive: %v, want ErrPeerLost for a connection that ended short", err)
			}
			want := fmt.Sprintf("peer 1 at %s", far.LocalAddr())
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes into a frame of %d", sent, c.length)) {
				t.Errorf("error %q: want it to name %q and how far the frame got", err, want)
			}
			if d := after.TotalAlloc - before.TotalAlloc; d > 2<<20 {
				t.Errorf("%d bytes allocated for %d bytes received", d, sent)
			}
		})
	}
}

// TestUnexpectedInPieces sends messages before their receives, in pieces
// of awkward sizes with pauses that let the receiver read each piece
// alone, so that their payload is spilled chunk by chunk; the receive
// posted afterwards gets every byte. Messages of 1 and 3 stripes.
func TestUnexpectedInPieces(t *testing.T) {
	p, far := rawPair(t, &syncWriter{})
	cuts := []int{1, 7, 44, 4095, 4097, 65536, 70000, 1, 200000, 3}
	for i, size := range []int{1, 5000, 100000, 700000} {
		tag := transport.Tag{Comm: 1, Seq: uint32(i), Sig: 3}
		data := pattern(size, byte(i))
		var stream []byte
		stripes := []int{size}
		if size > 3 {
			stripes = []int{size / 3, size / 3, size - 2*(size/3)}
		}
		off := 0
		for _, n := range stripes {
			h := header{typ: frameData, tag: tag, id: uint32(i), total: uint64(size), offset: uint64(off), length: uint32(n)}
			stream = append(stream, frameBytes(h, data[off:off+n])...)
			off += n
		}
		probe, _ := p.Irecv(transport.Tag{Comm: 99}, nil)
		for j := 0; len(stream) > 0; j++ {
			n := min(cuts[j%len(cuts)], len(stream))
			far.Write(stream[:n])
			stream = stream[n:]
			for range 3 {
				probe.Test()
				time.Sleep(100 * time.Microsecond)
			}
		}
		buf := make([]byte, size)
		r, err := p.Irecv(tag, buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(t, r); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(buf, data) {
			t.Fatalf("size %d: data differs", size)
		}
	}
}
