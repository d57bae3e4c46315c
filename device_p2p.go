package braid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/sched"
)

// Point-to-point messages on device buffers follow Comm's rules: messages
// between a pair of ranks with the same tag arrive in the order they were
// sent, and the receive buffer has exactly the sent number of elements and
// the same type (else both ends fail with a Mismatch error, and nothing is
// written). A message is a one-step program (a Send to the peer, a Recv
// from it) that the GPU executor runs like a collective's (package gpu):
// the receiver offers its buffer and the sender's copy engine writes into
// it. So a Send completes only once the peer has posted the matching Recv,
// as NCCL's do: two ranks that both send first wait for each other until
// the deadline. SendRecv runs a send and a receive at once, as one
// program, for rings and exchanges.
//
// Only the two ranks of a message take part: its messages are numbered
// per (peer, tag) pair, apart from the collectives' sequence, which stays
// in step on every rank. A rank that dies makes its peer's call fail when
// the call's deadline passes, with the peer named. With
// DeviceOptions.StreamOrdered the calls are queued on Stream() and return
// at once, like the collectives; their errors come back from a later call
// or Synchronize (a refused message's from Synchronize only, and it leaves
// the DeviceComm usable, as it does a synchronous call's).

// Send sends buf to rank peer with tag (0 ≤ tag < 2^31) and returns when
// the data is in the peer's buffer, or with DeviceOptions.StreamOrdered
// once the send is queued.
func (d *DeviceComm) Send(ctx context.Context, buf Device, peer, tag int) error {
	return d.p2p(ctx, "send", &buf, peer, nil, -1, tag)
}

// Recv receives the next message from rank peer with tag into buf.
func (d *DeviceComm) Recv(ctx context.Context, buf Device, peer, tag int) error {
	return d.p2p(ctx, "recv", nil, -1, &buf, peer, tag)
}

// SendRecv sends send to rank to and receives recv from rank from, both
// with tag, at once: on a ring, every rank's SendRecv to its right and from
// its left completes where Send then Recv would wait for each other. The
// two buffers must not overlap; to and from may be the same rank.
func (d *DeviceComm) SendRecv(ctx context.Context, send Device, to int, recv Device, from, tag int) error {
	return d.p2p(ctx, "sendrecv", &send, to, &recv, from, tag)
}

// p2pProgram returns rank's program for a point-to-point call: a Send of
// the whole of In (send elements) to peer to, where send ≥ 0, then a Recv
// of the whole of Out (recv elements) from peer from, where recv ≥ 0, both
// with tag and without dependencies, so that the executor runs them at
// once.
func p2pProgram(rank, send, to, recv, from int, tag int32) *sched.Program {
	b := sched.NewBuilder(rank)
	if send >= 0 {
		b.Send(to, tag, sched.Chunk{Buf: sched.In, Len: send})
	}
	if recv >= 0 {
		b.Recv(from, tag, sched.Chunk{Buf: sched.Out, Len: recv})
	}
	return &b.P
}

// p2pArgs checks the arguments of a point-to-point call: peer another
// rank of n, tag in [0, 2^31), buf a valid device buffer. what names buf
// in errors.
func p2pArgs(rank, n int, what string, buf *Device, peer, tag int) error {
	switch {
	case peer < 0 || peer >= n || peer == rank:
		return fmt.Errorf("peer %d: want another rank in [0, %d)", peer, n)
	case tag < 0 || tag >= 1<<31:
		return fmt.Errorf("tag %d: want 0 ≤ tag < 2^31", tag)
	case buf.Count < 0:
		return fmt.Errorf("%s: negative count %d", what, buf.Count)
	case !buf.Type.Valid():
		return fmt.Errorf("%s: invalid dtype %v", what, buf.Type)
	case buf.Count > 0 && buf.Ptr == 0:
		return fmt.Errorf("%s: a nil device pointer with %d elements", what, buf.Count)
	}
	return nil
}

// p2p runs a Send (recv nil), a Recv (send nil) or both at once.
func (d *DeviceComm) p2p(ctx context.Context, name string, send *Device, to int, recv *Device, from, tag int) error {
	c := d.c
	if err := c.usable(name); err != nil {
		return err
	}
	n := c.Size()
	bad := func(err error) error {
		return &Error{Kind: InvalidArgument, Rank: c.rank, Call: name, Peer: -1, Err: err}
	}
	scount, rcount := -1, -1
	dt := DType(0)
	if send != nil {
		what := "buffer"
		if recv != nil {
			what = "send"
		}
		if err := p2pArgs(c.rank, n, what, send, to, tag); err != nil {
			return bad(err)
		}
		scount, dt = send.Count, send.Type
	}
	if recv != nil {
		what := "buffer"
		if send != nil {
			what = "recv"
		}
		if err := p2pArgs(c.rank, n, what, recv, from, tag); err != nil {
			return bad(err)
		}
		rcount, dt = recv.Count, recv.Type
	}
	if send != nil && recv != nil {
		if send.Type != recv.Type {
			return bad(fmt.Errorf("send is %v and recv %v", send.Type, recv.Type))
		}
		sb, rb := send.Count*dt.Size(), recv.Count*dt.Size()
		if sb > 0 && rb > 0 && send.Ptr < recv.Ptr.Add(rb) && recv.Ptr < send.Ptr.Add(sb) {
			return bad(errors.New("send and recv overlap"))
		}
	}
	k := gpu.Call{Params: sched.Params{NRanks: n}, Algo: name, DType: dt}
	if send != nil {
		k.In = send.Ptr
	}
	if recv != nil {
		k.Out = recv.Ptr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return &Error{Kind: Aborted, Rank: c.rank, Call: name, Peer: -1, Err: errors.New("device communicator is closed")}
	}
	if d.capturing {
		return &Error{Kind: Unsupported, Rank: c.rank, Call: name, Peer: -1,
			Err: errors.New("point-to-point calls run as programs, whose steps the host issues as the peer's notices arrive, which a CUDA graph cannot hold")}
	}
	k.Prog = p2pProgram(c.rank, scount, to, rcount, from, int32(tag))
	k.P2P = make([]uint32, len(k.Prog.Steps))
	if d.p2pSend == nil {
		d.p2pSend, d.p2pRecv = map[[2]int]uint32{}, map[[2]int]uint32{}
	}
	for i, st := range k.Prog.Steps {
		m := d.p2pRecv
		if st.Kind == sched.KindSend {
			m = d.p2pSend
		}
		key := [2]int{st.Peer, tag}
		m[key]++
		k.P2P[i] = m[key]
	}
	err := d.submit(ctx, func(dl time.Time) error { return d.g.Enqueue(dl, &k) }, func(ctx context.Context) error { return d.g.Run(ctx, &k) })
	if err == nil {
		return nil
	}
	peer := to
	if send == nil || (recv != nil && from != to) {
		peer = -1
		if send == nil {
			peer = from
		}
	}
	return p2pError(c.rank, name, err, peer)
}

// p2pError turns an error of the executor in a point-to-point call into
// an *Error that names the peer: the one of the refused message or the
// one waited for (deviceError), else peer where the call has one.
func p2pError(rank int, name string, err error, peer int) error {
	e := deviceError(rank, name, err)
	var be *Error
	if errors.As(e, &be) && be.Peer < 0 {
		be.Peer = peer
	}
	return e
}
