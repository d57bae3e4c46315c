package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// TestRendezvousStreams checks that a rendezvous message of many pieces is
// copied by one Test, not one piece per Test: between Tests the caller
// backs off, and its sleeps made every message over one piece several
// times slower.
func TestRendezvousStreams(t *testing.T) {
	defer func(c uint64) { cmaChunk = c }(cmaChunk)
	cmaChunk = 4 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	meshes, err := transporttest.Connect(ctx, New(), 2, transporttest.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer meshes[0].Close()
	defer meshes[1].Close()
	const size = 1 << 20 // 256 pieces
	data, buf := make([]byte, size), make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	tag := transport.Tag{Seq: 1}
	s, err := meshes[1].Conn(0).Isend(tag, data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := meshes[0].Conn(1).Irecv(tag, buf)
	if err != nil {
		t.Fatal(err)
	}
	copying := 0 // Tests that returned undone after the copy began
	for {
		done, err := r.Test()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if r.(*recvReq).got > 0 {
			copying++
		}
		if ctx.Err() != nil {
			t.Fatal("the receive did not complete")
		}
	}
	if err := transport.Wait(ctx, nil, s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("received data differ")
	}
	if !meshes[1].Conn(0).(*conn).cma {
		t.Skip("single copy unavailable here: the message went through the ring")
	}
	// A Test returns early only after streamBudget of copying; 1 MiB
	// takes far less, but a loaded machine may pause the copy once or so.
	if copying > 8 {
		t.Errorf("%d Tests returned between pieces of one message; want the pieces copied in one Test", copying)
	}
}
