package transporttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

func testMismatch(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	step := uint32(0)
	for _, size := range []int{8, 1 << 20} {
		for _, kind := range []string{"short", "long", "sig"} {
			for _, recvFirst := range []bool{true, false} {
				step++
				tag := transport.Tag{Comm: 7, Step: step, Sig: 11}
				rtag, rsize := tag, size
				switch kind {
				case "short":
					rsize--
				case "long":
					rsize++
				case "sig":
					rtag.Sig++
				}
				name := fmt.Sprintf("%d bytes, %s, receive first %v", size, kind, recvFirst)
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				var sreq, rreq transport.Request
				var err error
				if recvFirst {
					rreq, err = w.conn(1, 0).Irecv(rtag, make([]byte, rsize))
				} else {
					sreq, err = w.conn(0, 1).Isend(tag, make([]byte, size))
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				time.Sleep(2 * time.Millisecond)
				if recvFirst {
					sreq, err = w.conn(0, 1).Isend(tag, make([]byte, size))
				} else {
					rreq, err = w.conn(1, 0).Irecv(rtag, make([]byte, rsize))
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// The sender's request completes, successfully or with ErrMismatch.
				w.ranks(func(rank int) error {
					if rank == 0 {
						if err := transport.Wait(ctx, nil, sreq); err != nil && !errors.Is(err, transport.ErrMismatch) {
							return fmt.Errorf("%s: send: %v, want nil or ErrMismatch", name, err)
						}
						return nil
					}
					if err := transport.Wait(ctx, nil, rreq); !errors.Is(err, transport.ErrMismatch) {
						return fmt.Errorf("%s: receive: %v, want ErrMismatch", name, err)
					}
					return nil
				})
				cancel()
			}
		}
	}
	// The connection still works after mismatches.
	w.runExchange([]msg{
		{0, 1, transport.Tag{Comm: 7, Step: 100}, 8},
		{1, 0, transport.Tag{Comm: 7, Step: 100}, 1 << 20},
		{0, 1, transport.Tag{Comm: 7, Step: 101}, 1 << 20},
	}, shuffled)
}

// waitErr waits for reqs and checks that the result wraps target.
func waitErr(t *testing.T, what string, target error, reqs ...transport.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := transport.Wait(ctx, nil, reqs...)
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want %v", what, err, target)
	}
}

// postErr posts a request and checks that it fails with target, either at
// once or when waited for.
func postErr(t *testing.T, what string, target error, req transport.Request, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, target) {
			t.Errorf("%s: %v, want %v", what, err, target)
		}
		return
	}
	waitErr(t, what, target, req)
}

func testAbort(t *testing.T, f Factory) {
	w := newWorld(t, f, 3)
	tag := transport.Tag{Comm: 8, Step: 1}
	small1, err := w.conn(1, 0).Irecv(tag, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	large1, err := w.conn(1, 0).Irecv(transport.Tag{Comm: 8, Step: 2}, make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	small2, err := w.conn(2, 0).Irecv(tag, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	w.meshes[0].Abort(errors.New("transporttest: rank 0 gives up"))

	waitErr(t, "rank 1: pending small receive from aborted rank 0", transport.ErrAborted, small1)
	waitErr(t, "rank 1: pending large receive from aborted rank 0", transport.ErrAborted, large1)
	waitErr(t, "rank 2: pending receive from aborted rank 0", transport.ErrAborted, small2)
	w.waitLost(1, 0, transport.ErrAborted)
	w.waitLost(2, 0, transport.ErrAborted)

	req, err := w.conn(1, 0).Isend(transport.Tag{Comm: 8, Step: 3}, make([]byte, 8))
	postErr(t, "rank 1: send to aborted rank 0", transport.ErrAborted, req, err)
	req, err = w.conn(1, 0).Irecv(transport.Tag{Comm: 8, Step: 4}, make([]byte, 8))
	postErr(t, "rank 1: receive from aborted rank 0", transport.ErrAborted, req, err)

	// Ranks 1 and 2 still talk to each other.
	w.exchangeWithout(0, []msg{{1, 2, transport.Tag{Comm: 8, Step: 5}, 1000}, {2, 1, transport.Tag{Comm: 8, Step: 5}, 1 << 20}})
	if n := len(w.lostCalls(1, 0)); n != 1 {
		t.Errorf("rank 1: Lost called %d times for aborted rank 0, want 1", n)
	}
}

// exchangeWithout runs an exchange of msgs on every rank but skip.
func (w *world) exchangeWithout(skip int, msgs []msg) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.ranks(func(rank int) error {
		if rank == skip {
			return nil
		}
		return exchange(ctx, w.meshes, rank, msgs, shuffled, rand.New(rand.NewPCG(uint64(rank), 3)))
	})
}

func testClose(t *testing.T, f Factory) {
	w := newWorld(t, f, 3)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	// A message whose send completed before Close is still delivered.
	delivered := transport.Tag{Comm: 9, Step: 1}
	m := msg{0, 1, delivered, 100}
	data := make([]byte, m.size)
	fill(data, m.seed())
	c01 := w.conn(0, 1)
	req, err := c01.Isend(delivered, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.Wait(ctx, nil, req); err != nil {
		t.Fatal(err)
	}

	pending1, err := w.conn(1, 0).Irecv(transport.Tag{Comm: 9, Step: 2}, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	rreq, err := c01.Irecv(transport.Tag{Comm: 9, Step: 3}, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	sreq, err := c01.Isend(transport.Tag{Comm: 9, Step: 4}, make([]byte, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.close(0); err != nil {
		t.Errorf("rank 0: Close: %v", err)
	}
	waitErr(t, "rank 0: pending receive after Close", transport.ErrClosed, rreq)
	if err := transport.Wait(ctx, nil, sreq); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("rank 0: pending send after Close: %v, want nil or ErrClosed", err)
	}
	req, err = c01.Isend(transport.Tag{Comm: 9, Step: 5}, make([]byte, 8))
	postErr(t, "rank 0: send after Close", transport.ErrClosed, req, err)
	req, err = c01.Irecv(transport.Tag{Comm: 9, Step: 6}, make([]byte, 8))
	postErr(t, "rank 0: receive after Close", transport.ErrClosed, req, err)

	buf := recvBuf(m.size)
	req, err = w.conn(1, 0).Irecv(delivered, buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.Wait(ctx, nil, req); err != nil {
		t.Errorf("rank 1: message sent before rank 0 closed: %v", err)
	} else if err := check(buf, m.seed()); err != nil {
		t.Errorf("rank 1: message sent before rank 0 closed: %v", err)
	}
	waitErr(t, "rank 1: pending receive from closed rank 0", transport.ErrPeerLost, pending1)
	w.waitLost(1, 0, transport.ErrPeerLost)
	w.waitLost(2, 0, transport.ErrPeerLost)

	// Ranks 1 and 2 still talk to each other.
	w.exchangeWithout(0, []msg{{1, 2, transport.Tag{Comm: 9, Step: 7}, 1000}, {2, 1, transport.Tag{Comm: 9, Step: 7}, 1 << 20}})
}

// sawUnexpected reports whether rank's Unexpected hook reported tag from peer.
func (w *world) sawUnexpected(rank, peer int, tag transport.Tag) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.unexpected {
		if e.rank == rank && e.peer == peer && e.tag == tag {
			return true
		}
	}
	return false
}

func testUnexpected(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c01, c10 := w.conn(0, 1), w.conn(1, 0)
	// Rank 1 polls a receive of another tag, which makes polling transports
	// look at what arrived.
	other, err := c10.Irecv(transport.Tag{Comm: 10, Step: 99}, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{100, 1 << 20} {
		tag := transport.Tag{Comm: 10, Seq: 1, Step: uint32(i), Sig: 3}
		m := msg{0, 1, tag, size}
		data := make([]byte, size)
		fill(data, m.seed())
		sreq, err := c01.Isend(tag, data)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !w.sawUnexpected(1, 0, tag) {
			if time.Now().After(deadline) {
				t.Fatalf("%d bytes: Unexpected(1, 0, %v) not called within 5s", size, tag)
			}
			if _, err := other.Test(); err != nil {
				t.Fatal(err)
			}
			if _, err := sreq.Test(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
		buf := recvBuf(size)
		rreq, err := c10.Irecv(tag, buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := transport.Wait(ctx, nil, sreq, rreq); err != nil {
			t.Fatal(err)
		}
		if err := check(buf, m.seed()); err != nil {
			t.Errorf("%d bytes: %v", size, err)
		}
	}
	// A message whose receive was posted first is not unexpected.
	tag := transport.Tag{Comm: 10, Seq: 2}
	rreq, err := c10.Irecv(tag, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	sreq, err := c01.Isend(tag, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.Wait(ctx, nil, sreq, rreq); err != nil {
		t.Fatal(err)
	}
	if w.sawUnexpected(1, 0, tag) {
		t.Errorf("Unexpected(1, 0, %v) called for a message whose receive was posted first", tag)
	}
}
