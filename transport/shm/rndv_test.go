package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/par"
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
	data, buf, s, r := startPair(t, meshes, 1<<20) // 256 pieces
	copying := 0                                   // Tests that returned undone after the copy began
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

// TestRendezvousThreads: with Options.SplitCMA, a rendezvous message of an
// odd size copied by 4 threads at once (package par, from 4 KiB), in pieces of 64 KiB and 8 KiB
// (cmaChunk), arrives whole.
func TestRendezvousThreads(t *testing.T) {
	defer par.SetThreads(4, 4096)()
	defer func(c uint64) { cmaChunk = c }(cmaChunk)
	for _, chunk := range []uint64{64 << 10, 8 << 10} {
		cmaChunk = chunk
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		meshes, err := transporttest.Connect(ctx, NewWithOptions(Options{SplitCMA: true}), 2, transporttest.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		before := par.Splits()
		data, buf, s, r := startPair(t, meshes, 1<<20+4099)
		if err := transport.Wait(ctx, nil, r, s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data) {
			t.Fatalf("pieces of %d: received data differ", chunk)
		}
		cma := meshes[1].Conn(0).(*conn).cma
		meshes[0].Close()
		meshes[1].Close()
		cancel()
		if !cma {
			t.Skip("single copy unavailable here: the message went through the ring")
		}
		if par.Splits() == before {
			t.Fatalf("pieces of %d: no copy was split", chunk)
		}
	}
}

// startPair posts a message of size bytes of a known pattern from rank 1
// to rank 0 of meshes, and returns the data, the receive buffer and both
// requests.
func startPair(t *testing.T, meshes []transport.Mesh, size int) (data, buf []byte, s, r transport.Request) {
	t.Helper()
	data, buf = make([]byte, size), make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	tag := transport.Tag{Seq: 1}
	s, err := meshes[1].Conn(0).Isend(tag, data)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = meshes[0].Conn(1).Irecv(tag, buf); err != nil {
		t.Fatal(err)
	}
	return data, buf, s, r
}
