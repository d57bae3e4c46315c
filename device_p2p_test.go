package braid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/sched"
)

// TestDeviceP2PProgram checks the programs of device point-to-point calls:
// one step per message, addressing the whole buffer, with the tag and no
// dependencies (so that a SendRecv's two run at once).
func TestDeviceP2PProgram(t *testing.T) {
	send := sched.Step{Kind: sched.KindSend, Peer: 3, Tag: 9, Src: sched.Chunk{Buf: sched.In, Len: 17}}
	recv := sched.Step{Kind: sched.KindRecv, Peer: 2, Tag: 9, Dst: sched.Chunk{Buf: sched.Out, Len: 5}}
	for _, k := range []struct {
		name           string
		scount, rcount int
		want           []sched.Step
	}{
		{"send", 17, -1, []sched.Step{send}},
		{"recv", -1, 5, []sched.Step{recv}},
		{"sendrecv", 17, 5, []sched.Step{send, recv}},
		{"empty send", 0, -1, []sched.Step{{Kind: sched.KindSend, Peer: 3, Tag: 9, Src: sched.Chunk{Buf: sched.In}}}},
	} {
		p := p2pProgram(1, k.scount, 3, k.rcount, 2, 9)
		if p.Rank != 1 || fmt.Sprint(p.Steps) != fmt.Sprint(k.want) {
			t.Errorf("%s: rank %d, steps %v, want rank 1, %v", k.name, p.Rank, p.Steps, k.want)
		}
		for _, st := range p.Steps {
			if len(st.Deps) != 0 {
				t.Errorf("%s: step %v has dependencies", k.name, st)
			}
		}
	}
}

// TestDeviceP2PArgs checks the argument errors of device point-to-point
// calls, which name the argument as Comm's Send and Recv do.
func TestDeviceP2PArgs(t *testing.T) {
	ok := Device{Ptr: 0x1000, Count: 4, Type: Float32}
	for _, k := range []struct {
		buf       Device
		peer, tag int
		want      string
	}{
		{ok, 1, 0, ""},
		{Device{Type: Float32}, 1, 0, ""}, // empty: no pointer needed
		{ok, 0, 0, "peer 0: want another rank in [0, 3)"},
		{ok, 3, 0, "peer 3: want another rank"},
		{ok, -1, 0, "peer -1"},
		{ok, 2, -1, "tag -1: want 0 ≤ tag < 2^31"},
		{ok, 2, 1 << 31, "tag 2147483648"},
		{Device{Ptr: 0x1000, Count: -1, Type: Float32}, 1, 0, "buffer: negative count -1"},
		{Device{Ptr: 0x1000, Count: 1, Type: 99}, 1, 0, "buffer: invalid dtype"},
		{Device{Count: 3, Type: Int8}, 1, 0, "buffer: a nil device pointer with 3 elements"},
	} {
		err := p2pArgs(0, 3, "buffer", &k.buf, k.peer, k.tag)
		switch {
		case k.want == "" && err != nil:
			t.Errorf("%+v peer %d tag %d: %v", k.buf, k.peer, k.tag, err)
		case k.want != "" && (err == nil || !strings.Contains(err.Error(), k.want)):
			t.Errorf("%+v peer %d tag %d: %v, want an error containing %q", k.buf, k.peer, k.tag, err, k.want)
		}
	}
}

// TestDeviceP2PErrorKinds checks that a point-to-point call's executor
// errors become the host's kinds, naming the peer.
func TestDeviceP2PErrorKinds(t *testing.T) {
	e := p2pError(1, "recv", fmt.Errorf("gpu: rank 1: %w", context.DeadlineExceeded), 0)
	var be *Error
	if !errors.As(e, &be) || be.Kind != Timeout || be.Peer != 0 {
		t.Errorf("a timed-out recv from rank 0: %v (%#v), want a Timeout naming peer 0", e, be)
	}
}

// deviceP2PEnv marks the ranks that TestDeviceP2P starts.
const deviceP2PEnv = "BRAID_DEVICE_TEST_P2P"

// TestDeviceP2P runs device point-to-point calls between processes, one
// GPU each (or sharing one: BRAID_TEST_GPUS=2 on a one-GPU machine): a
// ping-pong between ranks 0 and 1 over dtypes and counts from 0 to 4 MiB
// (odd ones included), messages of one tag arriving in order, a ring of
// SendRecv, all interleaved with allreduces that every rank checks (the
// point-to-point calls leave the collectives' sequence in step), each
// synchronous, stream-ordered and by pull; then a size mismatch (both
// ends fail with Mismatch naming the other, and the next messages still
// arrive), and, synchronous, a receive whose peer stays away (a Timeout
// naming it).
func TestDeviceP2P(t *testing.T) {
	if os.Getenv(deviceP2PEnv) != "" {
		deviceP2PRank(t)
		return
	}
	launchDeviceTest(t, "TestDeviceP2P", deviceP2PEnv, 6*time.Minute)
}

// p2pPattern is the bytes that rank from sends in message salt.
func p2pPattern(b []byte, from, salt int) {
	x := uint32(from*7919 + salt*104729 + 1)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

func deviceP2PRank(t *testing.T) {
	ctx, c, dev := deviceTestInit(t, 5*time.Minute)
	n, rank := c.Size(), c.Rank()
	// The largest message (the ring's 1 Mi + 1 four-byte elements) and
	// the 64 guard bytes get reads past it.
	const maxBytes = 4<<20 + 4 + 64
	for _, mode := range []struct {
		name string
		opts DeviceOptions
	}{
		{"synchronous", DeviceOptions{}},
		{"stream-ordered", DeviceOptions{StreamOrdered: true}},
		{"pull", DeviceOptions{Pull: true}},
	} {
		opts := mode.opts
		d, err := c.NewDeviceComm(ctx, dev, &opts)
		if err != nil {
			t.Fatalf("rank %d: %s: %v", rank, mode.name, err)
		}
		w := d.Worker()
		var a, b, s cuda.DevicePtr
		if err := w.Do(ctx, func(cc *cuda.Ctx) (err error) {
			if a, err = cc.Alloc(maxBytes); err != nil {
				return err
			}
			if b, err = cc.Alloc(maxBytes); err != nil {
				return err
			}
			s, err = cc.Alloc(4096)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		put := func(p cuda.DevicePtr, data []byte) {
			t.Helper()
			if err := w.Do(ctx, func(cc *cuda.Ctx) error {
				if err := cc.Memset8(p, 0xa5, maxBytes, 0); err != nil {
					return err
				}
				if err := cc.CopyHtoD(p, data, 0); err != nil {
					return err
				}
				return cc.Synchronize()
			}); err != nil {
				t.Fatal(err)
			}
		}
		get := func(p cuda.DevicePtr, nb int) []byte {
			t.Helper()
			if err := d.Synchronize(ctx); err != nil {
				t.Fatalf("rank %d: %s: synchronize: %v", rank, mode.name, err)
			}
			out := make([]byte, nb+64)
			if err := readDevice(ctx, w, out, p); err != nil {
				t.Fatal(err)
			}
			for i, v := range out[nb:] {
				if v != 0xa5 {
					t.Fatalf("rank %d: %s: byte %d past the message's %d was overwritten", rank, mode.name, nb+i, nb)
				}
			}
			return out[:nb]
		}
		expect := func(what string, got []byte, from, salt int) {
			t.Helper()
			want := make([]byte, len(got))
			p2pPattern(want, from, salt)
			if !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("rank %d: %s: %s: %d bytes from rank %d differ from byte %d on", rank, mode.name, what, len(got), from, i)
			}
		}
		// allreduce sums rank+salt over the ranks on the small buffer and
		// checks the result: every rank calls it between the messages.
		allreduce := func(salt int) {
			t.Helper()
			v := make([]byte, 4*7)
			for i := range 7 {
				putU32(v[4*i:], uint32(rank+salt+i))
			}
			if err := w.Do(ctx, func(cc *cuda.Ctx) error {
				if err := cc.CopyHtoD(s, v, 0); err != nil {
					return err
				}
				return cc.Synchronize()
			}); err != nil {
				t.Fatal(err)
			}
			buf := Device{Ptr: s, Count: 7, Type: Int32}
			if err := d.Allreduce(ctx, buf, buf, Sum); err != nil {
				t.Fatalf("rank %d: %s: allreduce %d: %v", rank, mode.name, salt, err)
			}
			if err := d.Synchronize(ctx); err != nil {
				t.Fatal(err)
			}
			if err := readDevice(ctx, w, v, s); err != nil {
				t.Fatal(err)
			}
			for i := range 7 {
				if got, want := getU32(v[4*i:]), uint32(n*(salt+i)+n*(n-1)/2); got != want {
					t.Fatalf("rank %d: %s: allreduce %d element %d: %d, want %d", rank, mode.name, salt, i, got, want)
				}
			}
		}
		salt := 0
		for _, dt := range []DType{Float32, Float64, Float16, BFloat16, Int8, Uint8, Int64} {
			for _, count := range []int{0, 1, 7, 1000, 65537, (4<<20)/dt.Size() - 3} {
				salt++
				nb := count * dt.Size()
				buf := func(p cuda.DevicePtr) Device { return Device{Ptr: p, Count: count, Type: dt} }
				what := fmt.Sprintf("ping-pong %v × %d", dt, count)
				msg := make([]byte, nb)
				switch rank {
				case 0:
					p2pPattern(msg, 0, salt)
					put(a, msg)
					put(b, nil)
					if err := d.Send(ctx, buf(a), 1, salt); err != nil {
						t.Fatalf("rank 0: %s: %s: send: %v", mode.name, what, err)
					}
					if err := d.Recv(ctx, buf(b), 1, salt); err != nil {
						t.Fatalf("rank 0: %s: %s: recv: %v", mode.name, what, err)
					}
					expect(what, get(b, nb), 1, salt)
				case 1:
					put(b, nil)
					if err := d.Recv(ctx, buf(b), 0, salt); err != nil {
						t.Fatalf("rank 1: %s: %s: recv: %v", mode.name, what, err)
					}
					expect(what, get(b, nb), 0, salt)
					p2pPattern(msg, 1, salt)
					put(a, msg)
					if err := d.Send(ctx, buf(a), 0, salt); err != nil {
						t.Fatalf("rank 1: %s: %s: send: %v", mode.name, what, err)
					}
				}
				if count == 1000 || count == 0 {
					allreduce(salt)
				}
			}
		}

		// Two messages of one tag arrive in the order they were sent;
		// one of another tag between them does not disturb them.
		salt++
		const m = 4099
		half := Device{Ptr: a, Count: m, Type: Float32}
		switch rank {
		case 0:
			msg := make([]byte, 2*4*m)
			p2pPattern(msg[:4*m], 0, salt)
			p2pPattern(msg[4*m:], 0, salt+1)
			put(a, msg)
			if err := d.Send(ctx, half, 1, 77); err != nil {
				t.Fatal(err)
			}
			if err := d.Send(ctx, Device{Ptr: a.Add(4 * m), Count: m, Type: Float32}, 1, 78); err != nil {
				t.Fatal(err)
			}
			if err := d.Send(ctx, Device{Ptr: a.Add(4 * m), Count: m, Type: Float32}, 1, 77); err != nil {
				t.Fatal(err)
			}
			if mode.opts.StreamOrdered {
				// The sends read a until the stream has run them.
				if err := d.Synchronize(ctx); err != nil {
					t.Fatal(err)
				}
			}
		case 1:
			for i, k := range []struct{ tag, salt int }{{77, salt}, {78, salt + 1}, {77, salt + 1}} {
				put(b, nil)
				if err := d.Recv(ctx, Device{Ptr: b, Count: m, Type: Float32}, 0, k.tag); err != nil {
					t.Fatal(err)
				}
				expect(fmt.Sprintf("message %d of tag %d", i, k.tag), get(b, 4*m), 0, k.salt)
			}
		}
		allreduce(salt)
		salt++

		// A ring: every rank sends to its right and receives from its
		// left at once.
		for _, count := range []int{1, 33, 1<<20 + 1} {
			salt++
			msg := make([]byte, 4*count)
			p2pPattern(msg, rank, salt)
			put(a, msg)
			put(b, nil)
			right, left := (rank+1)%n, (rank+n-1)%n
			if err := d.SendRecv(ctx, Device{Ptr: a, Count: count, Type: Uint32}, right, Device{Ptr: b, Count: count, Type: Uint32}, left, 5); err != nil {
				t.Fatalf("rank %d: %s: ring of %d: %v", rank, mode.name, count, err)
			}
			expect(fmt.Sprintf("ring of %d", count), get(b, 4*count), left, salt)
			allreduce(salt)
		}

		// Every rank counts the next message, so that the allreduce after
		// it expects the same salt everywhere (ranks 2 and up take no part).
		salt++
		if rank < 2 {
			// The ends of a message differ: both fail, naming each other
			// (stream-ordered: from Synchronize), and nothing is written;
			// the next message arrives whole.
			peer := 1 - rank
			put(b, nil)
			var err error
			if rank == 0 {
				err = d.Send(ctx, Device{Ptr: a, Count: 10, Type: Float32}, 1, 3)
			} else {
				err = d.Recv(ctx, Device{Ptr: b, Count: 12, Type: Float32}, 0, 3)
			}
			if err == nil && mode.opts.StreamOrdered {
				err = d.Synchronize(ctx)
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != Mismatch || e.Peer != peer || !strings.Contains(err.Error(), "10 float32 elements") {
				t.Fatalf("rank %d: a send of 10 elements into a recv of 12: %v, want a Mismatch naming peer %d and the send's 10 elements", rank, err, peer)
			}
			get(b, 0) // nothing was written
			msg := make([]byte, 40)
			p2pPattern(msg, 0, salt)
			if rank == 0 {
				put(a, msg)
				err = d.Send(ctx, Device{Ptr: a, Count: 10, Type: Float32}, 1, 3)
			} else {
				err = d.Recv(ctx, Device{Ptr: b, Count: 10, Type: Float32}, 0, 3)
			}
			if err != nil {
				t.Fatalf("rank %d: the message after a refused one: %v", rank, err)
			}
			if rank == 1 {
				expect("the message after a refused one", get(b, 40), 0, salt)
			}
		}
		allreduce(salt + 1)

		if mode.name == "synchronous" && rank == 0 {
			// Rank 1 stays away: the receive fails once its deadline
			// passes, naming rank 1. The DeviceComm is broken after it.
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			start := time.Now()
			err := d.Recv(cctx, Device{Ptr: b, Count: 10, Type: Float32}, 1, 999)
			ccancel()
			var e *Error
			if !errors.As(err, &e) || e.Kind != Timeout || e.Peer != 1 || !strings.Contains(err.Error(), "rank 1") {
				t.Fatalf("rank 0: a recv from a rank that stays away: %v, want a Timeout naming rank 1", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("rank 0: the recv's error came after %v, for a deadline of 1s", took)
			}
			t.Logf("rank 0: recv from a rank that stays away: %v", err)
		}
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		w.Do(ctx, func(cc *cuda.Ctx) error { return errors.Join(cc.Free(a), cc.Free(b), cc.Free(s)) })
		d.Close()
		t.Logf("rank %d: %s: %d messages checked", rank, mode.name, salt)
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func getU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
