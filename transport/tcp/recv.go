package tcp

import (
	"fmt"

	"github.com/braid-ccl/braid/transport"
)

// message is a message whose first frame has arrived. Until an Irecv
// matches it, its payload goes into pooled chunks (it is "unexpected"),
// allocated as its bytes arrive rather than at the length its frames
// announce, so that a corrupt or hostile length costs nothing until its
// bytes come; once an Irecv matches it, later frames go straight into the
// Irecv's buffer and the chunks are copied when the last frame is in.
type message struct {
	id       uint32
	tag      transport.Tag
	total    int
	got      int    // payload bytes read
	claimed  int    // payload bytes of the frames begun
	spill    []span // parts of the payload read into chunks
	req      *recvReq
	discard  bool // a mismatch: drain the rest, deliver nothing
	complete bool
}

// span is a chunk of a message's payload that starts at offset off.
type span struct {
	off int
	buf *[]byte
}

// copySpill copies the chunks of e into buf and frees them.
func (e *message) copySpill(buf []byte) {
	for _, sp := range e.spill {
		copy(buf[sp.off:], *sp.buf)
	}
	e.freeSpill()
}

// freeSpill returns e's chunks to their pools.
func (e *message) freeSpill() {
	for i, sp := range e.spill {
		putBuf(sp.buf)
		e.spill[i] = span{}
	}
	e.spill = nil
}

// Irecv posts a receive of the message with tag into buf. If the message
// has already arrived (in part or in full) it is taken from the unexpected
// messages; otherwise the reader fills buf directly when it arrives.
func (p *peer) Irecv(tag transport.Tag, buf []byte) (transport.Request, error) {
	ns := len(p.streams)
	r := &recvReq{p: p, tag: tag, buf: buf, stream: streamOf(tag, len(buf), ns), striped: ns > 1 && len(buf) >= p.m.stripeMin}
	r.init()
	key := tag.Key()
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.takeUnexpectedLocked(key, len(buf))
	if e == nil {
		if p.err != nil {
			return transport.DoneRequest{Err: p.err}, p.err
		}
		p.posted[key] = append(p.posted[key], r)
		return r, nil
	}
	if !p.attachLocked(e, r) {
		return r, nil
	}
	if e.complete {
		e.copySpill(buf)
		r.finish(nil)
	}
	return r, nil
}

// attachLocked matches receive r with message e, failing r on a length or
// signature mismatch (e's payload is then dropped). It reports whether r
// still waits on e.
func (p *peer) attachLocked(e *message, r *recvReq) bool {
	if e.total != len(r.buf) || e.tag.Sig != r.tag.Sig {
		r.finish(fmt.Errorf("tcp: rank %d: receive from peer %d (%v): %w: message of %d bytes with signature %08x, receive of %d bytes with signature %08x",
			p.m.self, p.rank, r.tag, transport.ErrMismatch, e.total, e.tag.Sig, len(r.buf), r.tag.Sig))
		e.discard = true
		if e.complete {
			e.freeSpill()
		}
		return false
	}
	e.req = r
	return true
}

// takeUnexpectedLocked removes and returns the oldest unexpected message
// with key, preferring one of length n.
func (p *peer) takeUnexpectedLocked(key [3]uint32, n int) *message {
	list := p.unexpected[key]
	if len(list) == 0 {
		return nil
	}
	best := -1
	for i, e := range list {
		if e.total == n && (best < 0 || int32(e.id-list[best].id) < 0) {
			best = i
		}
	}
	if best < 0 {
		best = 0
		for i, e := range list {
			if int32(e.id-list[best].id) < 0 {
				best = i
			}
		}
	}
	e := list[best]
	if len(list) == 1 {
		delete(p.unexpected, key)
	} else {
		p.unexpected[key] = append(list[:best:best], list[best+1:]...)
	}
	return e
}

// takePostedLocked removes and returns the first posted receive with key,
// preferring one of length n.
func (p *peer) takePostedLocked(key [3]uint32, n int) *recvReq {
	list := p.posted[key]
	if len(list) == 0 {
		return nil
	}
	best := 0
	for i, r := range list {
		if len(r.buf) == n {
			best = i
			break
		}
	}
	r := list[best]
	if len(list) == 1 {
		delete(p.posted, key)
	} else {
		p.posted[key] = append(list[:best:best], list[best+1:]...)
	}
	return r
}

// beginFrame finds the destination of a data frame whose header rd holds:
// the message it belongs to (new messages are matched with a posted
// receive, or become unexpected), and where in it the payload goes.
// It returns an error if the frame does not fit its message, and whether
// the frame began an unexpected message.
func (p *peer) beginFrame(rd *readState) (unexpected bool, err error) {
	h := &rd.h
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return false, nil // drop it
	}
	e := p.inflight[h.id]
	if e != nil && (e.tag != h.tag || uint64(e.total) != h.total || e.claimed+int(h.length) > e.total) {
		return false, fmt.Errorf("frame of %d bytes at %d does not fit message %d (%v, %d bytes)", h.length, h.offset, h.id, e.tag, e.total)
	}
	if e == nil {
		e = &message{id: h.id, tag: h.tag, total: int(h.total)}
		key := h.tag.Key()
		if r := p.takePostedLocked(key, e.total); r != nil {
			p.attachLocked(e, r)
		} else {
			p.unexpected[key] = append(p.unexpected[key], e)
			unexpected = true
		}
		p.inflight[h.id] = e
	}
	rd.e = e
	off, n := int(h.offset), int(h.length)
	e.claimed += n
	switch {
	case e.discard:
	case e.req != nil:
		rd.dst = e.req.buf[off : off+n]
		rd.direct = true
		p.busy++
	default:
		rd.spill, rd.off = true, off
	}
	return unexpected, nil
}

// endFrame records that the frame rd describes is in, completing its
// message if it was the last. It reports whether a receive completed.
func (p *peer) endFrame(rd *readState) bool {
	e := rd.e
	p.mu.Lock()
	defer p.mu.Unlock()
	if rd.direct {
		p.busy--
	}
	rd.e, rd.dst, rd.direct = nil, nil, false
	if e == nil {
		rd.dropChunks()
		return false
	}
	if rd.spill {
		e.spill = append(e.spill, rd.chunks...)
		clear(rd.chunks)
		rd.chunks, rd.spill = rd.chunks[:0], false
		if e.discard {
			e.freeSpill()
		}
	}
	completed := false
	e.got += int(rd.h.length)
	if e.got == e.total {
		delete(p.inflight, e.id)
		e.complete = true
		switch {
		case e.discard:
			e.freeSpill()
		case e.req != nil:
			e.copySpill(e.req.buf)
			e.req.finish(nil)
			completed = true
		}
	}
	p.failRequestsLocked()
	return completed
}
