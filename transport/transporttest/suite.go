package transporttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// timeout bounds every wait of the suite, so that a transport that hangs
// fails its subtest instead of the whole test binary.
const timeout = 20 * time.Second

// Run runs the conformance suite of transport.Mesh and transport.Conn
// against the meshes that newMeshes returns. Each subtest makes its own
// meshes, with 2 or 3 ranks, and closes them when it ends.
//
// The suite checks: matching on (Comm, Seq, Step) whatever the order in which
// sends and receives are posted; zero-length, odd-sized and 64 MiB messages;
// many outstanding requests in both directions at once; ErrMismatch on a
// length or Sig difference; the Unexpected hook; ErrAborted and the Lost
// hook after a peer's Abort; ErrClosed after Close, ErrPeerLost at the
// closed rank's peers, and delivery of what was sent before Close; requests
// driven from several goroutines; the Done channel; and receives withdrawn
// by transport.Cancel, before and while their message comes. The death of a peer
// process is not tested here: each transport tests it with real processes.
func Run(t *testing.T, newMeshes Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"Conn", testConn},
		{"Ordering", testOrdering},
		{"PostOrder", testPostOrder},
		{"SameTagReuse", testSameTagReuse},
		{"ZeroLength", testZeroLength},
		{"Large", testLarge},
		{"BothDirections", testBothDirections},
		{"ManyOutstanding", testManyOutstanding},
		{"Concurrent", testConcurrent},
		{"Done", testDone},
		{"Mismatch", testMismatch},
		{"Unexpected", testUnexpected},
		{"Abort", testAbort},
		{"Close", testClose},
		{"Cancel", testCancel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newMeshes) })
	}
}

// lostEvent is one call of a Lost callback.
type lostEvent struct {
	rank, peer int
	err        error
}

// world is the meshes of one subtest and what their Lost callbacks said.
type world struct {
	t      *testing.T
	meshes []transport.Mesh
	closed []atomic.Bool

	mu         sync.Mutex
	lost       []lostEvent
	unexpected []unexpectedEvent
}

// unexpectedEvent is one call of an Unexpected callback.
type unexpectedEvent struct {
	rank, peer int
	tag        transport.Tag
}

func newWorld(t *testing.T, f Factory, n int) *world {
	t.Helper()
	w := &world{t: t, closed: make([]atomic.Bool, n)}
	w.meshes = f(t, n, Hooks{
		Lost: func(rank, peer int, err error) {
			w.mu.Lock()
			w.lost = append(w.lost, lostEvent{rank, peer, err})
			w.mu.Unlock()
		},
		Unexpected: func(rank, peer int, tag transport.Tag) {
			w.mu.Lock()
			w.unexpected = append(w.unexpected, unexpectedEvent{rank, peer, tag})
			w.mu.Unlock()
		},
	})
	if len(w.meshes) != n {
		t.Fatalf("factory returned %d meshes, want %d", len(w.meshes), n)
	}
	t.Cleanup(func() {
		for r := range w.meshes {
			w.close(r)
		}
	})
	return w
}

// close closes rank's mesh once.
func (w *world) close(rank int) error {
	if w.closed[rank].Swap(true) {
		return nil
	}
	return w.meshes[rank].Close()
}

func (w *world) conn(rank, peer int) transport.Conn {
	c := w.meshes[rank].Conn(peer)
	if c == nil {
		w.t.Fatalf("rank %d: Conn(%d) = nil", rank, peer)
	}
	return c
}

// lostCalls returns the Lost calls of rank about peer so far.
func (w *world) lostCalls(rank, peer int) []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, e := range w.lost {
		if e.rank == rank && e.peer == peer {
			errs = append(errs, e.err)
		}
	}
	return errs
}

// waitLost waits until rank's Lost callback reported peer with an error
// that wraps target.
func (w *world) waitLost(rank, peer int, target error) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		errs := w.lostCalls(rank, peer)
		if len(errs) > 1 {
			w.t.Errorf("rank %d: Lost called %d times for peer %d: %v", rank, len(errs), peer, errs)
			return
		}
		if len(errs) == 1 {
			if !errors.Is(errs[0], target) {
				w.t.Errorf("rank %d: Lost(%d, %v): error does not wrap %v", rank, peer, errs[0], target)
			}
			return
		}
		if time.Now().After(deadline) {
			w.t.Errorf("rank %d: Lost not called for peer %d within 5s", rank, peer)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ranks runs fn for every rank in its own goroutine and reports errors.
func (w *world) ranks(fn func(rank int) error) {
	w.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(w.meshes))
	for r := range w.meshes {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			w.t.Errorf("rank %d: %v", r, err)
		}
	}
}

// msg is one message of an exchange.
type msg struct {
	from, to int
	tag      transport.Tag
	size     int
}

func (m msg) seed() uint64 { return seedOf(m.from, m.to, m.tag, m.size) }

// postOrder says in which order a rank posts its part of an exchange.
type postOrder int

const (
	shuffled   postOrder = iota // sends and receives in a random order
	sendsFirst                  // every send, then every receive
	recvsFirst                  // every receive, then every send
)

// exchange posts rank's sends and receives among msgs in the given order,
// waits for all of them and checks what arrived.
func exchange(ctx context.Context, meshes []transport.Mesh, rank int, msgs []msg, order postOrder, rng *rand.Rand) error {
	type op struct {
		m    msg
		send bool
		buf  []byte
		req  transport.Request
	}
	var ops []*op
	for _, m := range msgs {
		if m.from == rank {
			data := make([]byte, m.size)
			fill(data, m.seed())
			ops = append(ops, &op{m: m, send: true, buf: data})
		}
		if m.to == rank {
			ops = append(ops, &op{m: m, buf: recvBuf(m.size)})
		}
	}
	switch order {
	case shuffled:
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	case sendsFirst, recvsFirst:
		var a, b []*op
		for _, o := range ops {
			if o.send == (order == sendsFirst) {
				a = append(a, o)
			} else {
				b = append(b, o)
			}
		}
		ops = append(a, b...)
	}
	reqs := make([]transport.Request, 0, len(ops))
	for _, o := range ops {
		var err error
		if o.send {
			o.req, err = meshes[rank].Conn(o.m.to).Isend(o.m.tag, o.buf)
		} else {
			o.req, err = meshes[rank].Conn(o.m.from).Irecv(o.m.tag, o.buf)
		}
		if err != nil {
			return fmt.Errorf("post %v of %d bytes, %d→%d: %w", o.m.tag, o.m.size, o.m.from, o.m.to, err)
		}
		reqs = append(reqs, o.req)
	}
	if err := transport.Wait(ctx, nil, reqs...); err != nil {
		return fmt.Errorf("wait for %d requests: %w", len(reqs), err)
	}
	for _, o := range ops {
		if o.send {
			continue
		}
		if err := check(o.buf, o.m.seed()); err != nil {
			return fmt.Errorf("message %v of %d bytes from rank %d: %v", o.m.tag, o.m.size, o.m.from, err)
		}
		if err := checkGuard(o.buf); err != nil {
			return fmt.Errorf("message %v from rank %d: %v", o.m.tag, o.m.from, err)
		}
	}
	return nil
}

// runExchange runs one exchange of msgs on every rank of w.
func (w *world) runExchange(msgs []msg, order postOrder) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.ranks(func(rank int) error {
		rng := rand.New(rand.NewPCG(uint64(rank), 7))
		return exchange(ctx, w.meshes, rank, msgs, order, rng)
	})
}

func testConn(t *testing.T, f Factory) {
	w := newWorld(t, f, 3)
	for r, m := range w.meshes {
		for p := range w.meshes {
			if p == r {
				continue
			}
			if got := w.conn(r, p).Peer(); got != p {
				t.Errorf("rank %d: Conn(%d).Peer() = %d", r, p, got)
			}
		}
		for _, p := range []int{-1, len(w.meshes), 1000} {
			if c := m.Conn(p); c != nil {
				t.Errorf("rank %d: Conn(%d) = %v, want nil", r, p, c)
			}
		}
	}
}

// sizes are message sizes around the thresholds transports tend to use.
var sizes = []int{0, 1, 7, 8, 100, 4095, 4096, 4097, 8193, 16383, 16384, 16385,
	32769, 65535, 65537, 100 << 10, 262145, 1<<20 + 3}

func testOrdering(t *testing.T, f Factory) {
	w := newWorld(t, f, 3)
	var msgs []msg
	i := 0
	for from := range 3 {
		for to := range 3 {
			if from == to {
				continue
			}
			for k := range 40 {
				// The 40 tags differ from one another in one field only.
				tag := transport.Tag{Comm: uint32(k % 2), Seq: uint32(k / 2 % 4), Step: uint32(k / 8), Sig: uint32(k * 31)}
				if k%4 == 0 {
					tag.Step |= transport.P2PBit
				}
				msgs = append(msgs, msg{from, to, tag, sizes[i%len(sizes)]})
				i++
			}
		}
	}
	w.runExchange(msgs, shuffled)
}

func testPostOrder(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	for _, size := range []int{0, 8, 20000, 1 << 20} {
		for _, recvFirst := range []bool{true, false} {
			tag := transport.Tag{Comm: 9, Seq: uint32(size), Step: 1}
			if recvFirst {
				tag.Step = 2
			}
			m := msg{0, 1, tag, size}
			posted := make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			w.ranks(func(rank int) error {
				if rank == 0 {
					if recvFirst {
						<-posted
					}
					data := make([]byte, size)
					fill(data, m.seed())
					req, err := w.conn(0, 1).Isend(tag, data)
					if err != nil {
						return err
					}
					if !recvFirst {
						close(posted)
					}
					return transport.Wait(ctx, nil, req)
				}
				if !recvFirst {
					<-posted
					time.Sleep(5 * time.Millisecond) // let the message arrive first
				}
				buf := recvBuf(size)
				req, err := w.conn(1, 0).Irecv(tag, buf)
				if err != nil {
					return err
				}
				if recvFirst {
					close(posted)
				}
				if err := transport.Wait(ctx, nil, req); err != nil {
					return err
				}
				if err := check(buf, m.seed()); err != nil {
					return fmt.Errorf("%d bytes, receive first %v: %v", size, recvFirst, err)
				}
				return checkGuard(buf)
			})
			cancel()
		}
	}
}

func testSameTagReuse(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	tag := transport.Tag{Comm: 1, Seq: 1, Step: 1, Sig: 5}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.ranks(func(rank int) error {
		peer := 1 - rank
		c := w.conn(rank, peer)
		for i := range 200 {
			size := []int{8, 0, 20000, 300000, 1}[i%5]
			m := msg{i % 2, 1 - i%2, tag, size + i}
			if m.from == rank {
				data := make([]byte, m.size)
				fill(data, m.seed())
				req, err := c.Isend(tag, data)
				if err != nil {
					return err
				}
				if err := transport.Wait(ctx, nil, req); err != nil {
					return fmt.Errorf("round %d: send: %w", i, err)
				}
				continue
			}
			buf := recvBuf(m.size)
			req, err := c.Irecv(tag, buf)
			if err != nil {
				return err
			}
			if err := transport.Wait(ctx, nil, req); err != nil {
				return fmt.Errorf("round %d: receive: %w", i, err)
			}
			if err := check(buf, m.seed()); err != nil {
				return fmt.Errorf("round %d: %v", i, err)
			}
		}
		return nil
	})
}

func testZeroLength(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.ranks(func(rank int) error {
		c := w.conn(rank, 1-rank)
		var reqs []transport.Request
		for k := range 8 {
			var b []byte
			if k%2 == 1 {
				b = []byte{}
			}
			tag := transport.Tag{Comm: 2, Step: uint32(k)}
			// Rank 0 receives first for even k; rank 1 for odd k.
			first, second := c.Irecv, c.Isend
			if (k+rank)%2 == 1 {
				first, second = c.Isend, c.Irecv
			}
			for _, post := range []func(transport.Tag, []byte) (transport.Request, error){first, second} {
				req, err := post(tag, b)
				if err != nil {
					return err
				}
				reqs = append(reqs, req)
			}
		}
		return transport.Wait(ctx, nil, reqs...)
	})
}

func testLarge(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	w.runExchange([]msg{
		{0, 1, transport.Tag{Comm: 3, Step: 1}, 64 << 20},
		{1, 0, transport.Tag{Comm: 3, Step: 1}, 1<<20 + 3},
		{1, 0, transport.Tag{Comm: 3, Step: 2}, 4<<20 - 1},
		{0, 1, transport.Tag{Comm: 3, Step: 2}, 3<<20 + 5},
	}, shuffled)
}

func testBothDirections(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	var msgs []msg
	for k := range 4 {
		for from := range 2 {
			msgs = append(msgs, msg{from, 1 - from, transport.Tag{Comm: 4, Step: uint32(k)}, 8 << 20})
		}
	}
	w.runExchange(msgs, sendsFirst)
	w.close(0)
	w.close(1)

	w = newWorld(t, f, 3)
	msgs = msgs[:0]
	for from := range 3 {
		for to := range 3 {
			if from != to {
				msgs = append(msgs, msg{from, to, transport.Tag{Comm: 4, Step: 9}, 2<<20 + from})
			}
		}
	}
	w.runExchange(msgs, sendsFirst)
}

func testManyOutstanding(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	var msgs []msg
	for k := range 400 {
		size := 4096
		if k%50 == 0 {
			size = 1 << 20
		}
		for from := range 2 {
			msgs = append(msgs, msg{from, 1 - from, transport.Tag{Comm: 5, Seq: uint32(k), Step: 3}, size + k})
		}
	}
	w.runExchange(msgs, sendsFirst)
	w.runExchange(msgs, recvsFirst)
}

func testConcurrent(t *testing.T, f Factory) {
	const goroutines, rounds = 4, 8
	w := newWorld(t, f, 3)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.ranks(func(rank int) error {
		var wg sync.WaitGroup
		errs := make([]error, goroutines)
		for g := range goroutines {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(rank), uint64(g)))
				for round := range rounds {
					var msgs []msg
					for a := range 3 {
						for b := range 3 {
							if a != b {
								size := []int{8, 0, 3000, 20000, 200000}[(round+a+g)%5]
								msgs = append(msgs, msg{a, b, transport.Tag{Comm: uint32(100 + g), Seq: uint32(round)}, size})
							}
						}
					}
					if err := exchange(ctx, w.meshes, rank, msgs, shuffled, rng); err != nil {
						errs[g] = fmt.Errorf("goroutine %d, round %d: %w", g, round, err)
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

func testDone(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	for _, size := range []int{8, 4 << 20} {
		tag := transport.Tag{Comm: 6, Step: uint32(size)}
		data := make([]byte, size)
		buf := make([]byte, size)
		rreq, err := w.conn(1, 0).Irecv(tag, buf)
		if err != nil {
			t.Fatal(err)
		}
		sreq, err := w.conn(0, 1).Isend(tag, data)
		if err != nil {
			t.Fatal(err)
		}
		var polled []transport.Request
		for _, req := range []transport.Request{rreq, sreq} {
			ch := req.Done()
			if ch == nil {
				polled = append(polled, req)
				continue
			}
			select {
			case <-ch:
			case <-time.After(timeout):
				t.Fatalf("%d bytes: Done channel not closed without Test", size)
			}
			if done, err := req.Test(); !done || err != nil {
				t.Errorf("%d bytes: Test after Done closed = %v, %v", size, done, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if err := transport.Wait(ctx, nil, polled...); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		cancel()
		for _, req := range []transport.Request{rreq, sreq} {
			for range 3 {
				if done, err := req.Test(); !done || err != nil {
					t.Errorf("%d bytes: Test after completion = %v, %v", size, done, err)
				}
			}
			if ch := req.Done(); ch != nil {
				select {
				case <-ch:
				default:
					t.Errorf("%d bytes: Done channel open after completion", size)
				}
			}
		}
	}
}
