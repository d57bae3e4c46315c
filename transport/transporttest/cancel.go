package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// testCancel: a receive withdrawn by transport.Cancel is never written to
// afterwards, whether it was withdrawn before its message came or while
// the message was coming; it reports ErrCanceled unless it had completed;
// and the connection goes on carrying other messages both ways.
func testCancel(t *testing.T, f Factory) {
	w := newWorld(t, f, 2)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	step := uint32(0)
	// roundTrip exchanges a message each way under a fresh tag and checks
	// both, so that each side has read what its peer sent before.
	roundTrip := func(size int) {
		t.Helper()
		step++
		tag := transport.Tag{Comm: 11, Seq: 1, Step: step}
		w.ranks(func(rank int) error {
			c := w.conn(rank, 1-rank)
			out := make([]byte, size)
			fill(out, uint64(rank+1))
			in := make([]byte, size)
			s, err := c.Isend(tag, out)
			if err != nil {
				return err
			}
			r, err := c.Irecv(tag, in)
			if err != nil {
				return err
			}
			if err := transport.Wait(ctx, nil, s, r); err != nil {
				return err
			}
			return check(in, uint64(2-rank))
		})
	}
	for _, size := range []int{1, 100, 70 << 10, 5 << 20, 64 << 20} {
		for _, during := range []bool{false, true} {
			if during && size < 1<<20 {
				continue
			}
			t.Run(fmt.Sprintf("%d/during=%v", size, during), func(t *testing.T) {
				step++
				tag := transport.Tag{Comm: 11, Seq: 2, Step: step}
				buf := bytes.Repeat([]byte{0xEE}, size)
				data := make([]byte, size)
				fill(data, 7)
				recv, err := w.conn(1, 0).Irecv(tag, buf)
				if err != nil {
					t.Fatal(err)
				}
				var send transport.Request
				if during {
					// The message is on its way while the receive is tested.
					if send, err = w.conn(0, 1).Isend(tag, data); err != nil {
						t.Fatal(err)
					}
					for range 50 {
						if done, _ := recv.Test(); done {
							break
						}
						send.Test()
						time.Sleep(100 * time.Microsecond)
					}
				}
				transport.Cancel(recv)
				done, rerr := recv.Test()
				if !done {
					t.Fatalf("a canceled receive is not done")
				}
				completed := rerr == nil
				if rerr != nil && !errors.Is(rerr, transport.ErrCanceled) {
					t.Fatalf("a canceled receive failed with %v, want ErrCanceled", rerr)
				}
				snap := bytes.Clone(buf)
				if !during {
					if send, err = w.conn(0, 1).Isend(tag, data); err != nil {
						t.Fatal(err)
					}
				}
				// Let the message arrive (or be dropped) in full, then
				// make sure the connection still works both ways.
				deadline := time.Now().Add(2 * time.Second)
				for time.Now().Before(deadline) {
					if done, _ := send.Test(); done {
						break
					}
					time.Sleep(time.Millisecond)
				}
				roundTrip(100)
				roundTrip(3 << 20)
				if !bytes.Equal(buf, snap) {
					t.Fatalf("the buffer of a canceled receive changed after Cancel returned")
				}
				if completed {
					if err := check(buf, 7); err != nil {
						t.Fatalf("a receive that completed before Cancel: %v", err)
					}
				} else if !during && !bytes.Equal(buf, bytes.Repeat([]byte{0xEE}, size)) {
					t.Fatalf("a receive canceled before its message came was written to")
				}
			})
		}
	}
}
