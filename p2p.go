package braid

import (
	"context"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// Point-to-point messages between a pair of ranks with the same tag arrive
// in the order they were sent (MPI's non-overtaking rule). The receive
// buffer must have exactly the sent number of elements and the same type.

// Send sends buf to rank peer with tag and returns when the transport has
// taken the data (which may be before the peer received it).
func (c *Comm) Send(ctx context.Context, buf any, peer, tag int) error {
	return c.sendRecv(ctx, "send", buf, peer, tag, true)
}

// Recv receives the next message from rank peer with tag into buf.
func (c *Comm) Recv(ctx context.Context, buf any, peer, tag int) error {
	return c.sendRecv(ctx, "recv", buf, peer, tag, false)
}

// sendRecv is a blocking Send or Recv.
func (c *Comm) sendRecv(ctx context.Context, name string, buf any, peer, tag int, send bool) (err error) {
	if p := c.w.prof; p != nil {
		defer c.profP2P(p, name, buf, peer, tag, p.Begin(), &err)
	}
	req, err := c.p2pStart(name, buf, peer, tag, send)
	if err != nil {
		return err
	}
	return c.p2pWait(ctx, name, req, peer)
}

// ISend starts Send and returns at once; buf must not change until the
// request completes.
func (c *Comm) ISend(ctx context.Context, buf any, peer, tag int) *Request {
	return c.p2p(ctx, "send", buf, peer, tag, true)
}

// IRecv starts Recv and returns at once.
func (c *Comm) IRecv(ctx context.Context, buf any, peer, tag int) *Request {
	return c.p2p(ctx, "recv", buf, peer, tag, false)
}

// p2p starts a send or receive and waits for it in the background.
func (c *Comm) p2p(ctx context.Context, name string, buf any, peer, tag int, send bool) *Request {
	r := c.newRequest(name)
	req, err := c.p2pStart(name, buf, peer, tag, send)
	if err != nil {
		r.finish(err)
		return r
	}
	r.prof.issuedP2P(buf, peer, tag)
	r.start(func() error { return c.p2pWait(ctx, name, req, peer) })
	return r
}

// p2pStart checks the arguments and posts the transport request.
func (c *Comm) p2pStart(name string, buf any, peer, tag int, send bool) (transport.Request, error) {
	if err := c.usable(name); err != nil {
		return nil, err
	}
	b, d, err := view(buf)
	if err != nil {
		return nil, argError(c.rank, name, "buffer: %v", err)
	}
	if peer < 0 || peer >= c.Size() || peer == c.rank {
		return nil, argError(c.rank, name, "peer %d: want another rank in [0, %d)", peer, c.Size())
	}
	if tag < 0 || tag >= 1<<31 {
		return nil, argError(c.rank, name, "tag %d: want 0 ≤ tag < 2^31", tag)
	}
	key := [2]int{peer, tag}
	c.p2pMu.Lock()
	var n uint32
	if send {
		n = c.p2pSend[key]
		c.p2pSend[key] = n + 1
	} else {
		n = c.p2pRecv[key]
		c.p2pRecv[key] = n + 1
	}
	c.p2pMu.Unlock()
	t := transport.Tag{Comm: c.id, Seq: uint32(tag), Step: transport.P2PBit | (n & (transport.P2PBit - 1)), Sig: uint32(d)}
	conn := c.conn(peer)
	var req transport.Request
	if send {
		req, err = conn.Isend(t, b)
	} else {
		req, err = conn.Irecv(t, b)
	}
	if err != nil {
		return nil, c.failWithPeer(name, err, peer)
	}
	return req, nil
}

// p2pWait waits for a posted request to or from communicator rank peer
// within the call's deadline.
func (c *Comm) p2pWait(ctx context.Context, name string, req transport.Request, peer int) error {
	if err := c.p2pPoll(ctx, req); err != nil {
		// Nothing may write into the caller's buffer once it has the error.
		transport.Cancel(req)
		return c.failWithPeer(name, err, peer)
	}
	return nil
}

// p2pPoll polls req until it completes, fails, ctx ends, the job fails or
// Options.Timeout passes (when ctx has no deadline of its own), as the
// executor waits for its steps, through the backoff (transport.Backoff).
// ctx and the job's failure are checked on
// the first idle poll and, as transport.Wait does, on every poll past the
// backoff's first 64; the timeout too from then on, counted from there: a
// request that completes within those polls (a small send, a message that
// comes within microseconds) reads no clock and starts no timer. A
// context with a timer per call (Comm.deadline) was a quarter of a
// ping-pong's processor time on the 2-core VM.
func (c *Comm) p2pPoll(ctx context.Context, req transport.Request) error {
	bo := transport.Backoff{}
	var deadline time.Time
	_, ctxDeadline := ctx.Deadline()
	for polls := 0; ; polls++ {
		if done, err := req.Test(); done || err != nil {
			return err
		}
		if polls&63 == 0 || bo.Spun() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := c.w.err(); err != nil {
				return err
			}
			if !ctxDeadline && polls > 0 {
				now := time.Now()
				if deadline.IsZero() {
					deadline = now.Add(c.w.opts.Timeout)
				} else if now.After(deadline) {
					return transport.ErrTimeout
				}
			}
		}
		bo.Idle(req.Done())
	}
}
