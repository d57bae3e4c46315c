package shm

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/braid-ccl/braid/transport"
)

// fuzzRingSize is the ring the fuzzed frames pass through: small, so
// that frames wrap around its end.
const fuzzRingSize = 4096

// fuzzConn returns a conn whose inbound ring is data, with a stand-in for
// the peer's segment (where acknowledgements go).
func fuzzConn(data []byte) *conn {
	var tail, cma uint64
	m := &mesh{rank: 0, opts: Options{RingSize: fuzzRingSize, Slots: 8}.withDefaults()}
	c := &conn{m: m, peer: 1, unexp: map[key]*unexpMsg{}, partial: map[key]partial{}}
	c.in = rx{Ring: ring{Tail: &tail, CMA: &cma, Data: data}}
	c.out = tx{Ring: ring{Tail: &tail, CMA: &cma, Data: make([]byte, fuzzRingSize)}}
	l := newLayout(1, m.opts.Slots, fuzzRingSize)
	c.peerSeg = &segment{mem: make([]byte, l.size), l: l}
	c.acks = l.slot(0, 0)
	return c
}

// FuzzRing writes the frames that spec describes into a ring as a peer
// would, applies the byte changes of corrupt to the ring, posts a receive
// for every other message, and drains the ring: with corrupt frames the
// receiver must neither panic nor loop, also when it completes the
// receives (a rendezvous one writes to the slot its frame names); without
// corruption it must deliver every message whole.
//
// spec is a list of messages, each a 12-byte header — kind (data or
// rendezvous by its low bit), comm, seq, step, sig (one byte each), total
// (2 bytes, so that allocations stay small), chunk (2 bytes), slot (1
// byte, modulo the 8 slots), gen (2 bytes) — and no payload: the payload
// is the message's index repeated. corrupt is a list of (offset: 2 bytes,
// value) triples, which may hit any byte, a header's total too: an
// unexpected message is allocated as its chunks arrive, not at the size
// its header announces.
func FuzzRing(f *testing.F) {
	msg := func(rndv bool, comm, seq, step, sig byte, total, chunk uint16, slot byte) []byte {
		b := []byte{0, comm, seq, step, sig, 0, 0, 0, 0, slot, 0, 1}
		if rndv {
			b[0] = 1
		}
		binary.LittleEndian.PutUint16(b[5:], total)
		binary.LittleEndian.PutUint16(b[7:], chunk)
		return b
	}
	two := append(msg(false, 1, 1, 1, 7, 100, 100, 0), msg(false, 1, 1, 2, 7, 3000, 700, 0)...)
	f.Add(two, []byte{})
	f.Add(append(two, msg(true, 1, 2, 1, 7, 5000, 0, 3)...), []byte{})
	f.Add(two, []byte{8, 0, 9})                                              // the first frame's kind
	f.Add(two, []byte{12, 0, 0xff})                                          // its chunk
	f.Add(msg(true, 1, 1, 1, 7, 10, 0, 0), []byte{48, 0, 0xff, 51, 0, 0xff}) // a rendezvous slot out of range
	f.Add(msg(false, 1, 1, 1, 7, 0, 0, 0), []byte{})
	f.Fuzz(func(t *testing.T, spec, corrupt []byte) {
		c := fuzzConn(make([]byte, fuzzRingSize))
		w := &c.out
		w.Data = c.in.Data
		type message struct {
			tag   transport.Tag
			total int
			rndv  bool
		}
		var msgs []message
		for i := 0; len(spec) >= 12 && i < 64; i, spec = i+1, spec[12:] {
			m := message{tag: transport.Tag{Comm: uint32(spec[1]), Seq: uint32(spec[2]), Step: uint32(spec[3]), Sig: uint32(spec[4])},
				total: int(binary.LittleEndian.Uint16(spec[5:])), rndv: spec[0]&1 == 1}
			chunk := max(1, int(binary.LittleEndian.Uint16(spec[7:])))
			data := bytes.Repeat([]byte{byte(i)}, m.total)
			h := frameHdr{Comm: m.tag.Comm, Seq: m.tag.Seq, Step: m.tag.Step, Sig: m.tag.Sig, Total: uint64(m.total)}
			if m.rndv {
				h.Kind, h.Slot, h.Gen = kindRndv, uint32(spec[9]%8), uint32(binary.LittleEndian.Uint16(spec[10:]))
				if !w.Write(&h, nil) {
					break
				}
			} else {
				h.Kind = kindData
				full := false
				for off := 0; off < m.total || off == 0; off += chunk {
					n := min(chunk, m.total-off)
					h.Chunk, h.Off = uint32(n), uint64(off)
					if !w.Write(&h, data[off:off+n]) {
						full = true
						break
					}
					if m.total == 0 {
						break
					}
				}
				if full {
					break
				}
			}
			msgs = append(msgs, m)
		}
		corrupted := false
		for ; len(corrupt) >= 3; corrupt = corrupt[3:] {
			off := int(binary.LittleEndian.Uint16(corrupt)) % fuzzRingSize
			if c.in.Data[off] != corrupt[2] {
				c.in.Data[off] = corrupt[2]
				corrupted = true
			}
		}
		// Receives for every other message, posted before the frames are
		// read; the rest arrive unexpected.
		reqs := map[int]transport.Request{}
		bufs := map[int][]byte{}
		for i, m := range msgs {
			if i%2 == 1 {
				// A posted receive drains the ring: a later message may
				// already be unexpected, and its receive done at once.
				bufs[i] = make([]byte, m.total)
				r, err := c.Irecv(m.tag, bufs[i])
				if err != nil {
					t.Fatal(err)
				}
				reqs[i] = r
			}
		}
		c.rmu.Lock()
		for range 3 {
			c.drain()
		}
		c.rmu.Unlock()
		if corrupted {
			// Anything but a panic or a loop will do, here and in the
			// receives' completion (a rendezvous one acknowledges in
			// the slot its frame names).
			for _, r := range reqs {
				r.Test()
			}
			return
		}
		if p := c.err.Load(); p != nil {
			t.Fatalf("intact frames failed the connection: %v", *p)
		}
		seen := map[key]bool{}
		for _, m := range msgs {
			if seen[m.tag.Key()] {
				return // a repeated tag: matching order is the transport's business
			}
			seen[m.tag.Key()] = true
		}
		for i, m := range msgs {
			if m.rndv {
				continue
			}
			if r, ok := reqs[i]; ok {
				if done, err := r.Test(); !done || err != nil {
					t.Fatalf("message %d (%+v): receive done %v, %v", i, m, done, err)
				}
				if !bytes.Equal(bufs[i], bytes.Repeat([]byte{byte(i)}, m.total)) {
					t.Fatalf("message %d: wrong bytes", i)
				}
				continue
			}
			u := c.unexp[m.tag.Key()]
			if u == nil || u.got != uint64(m.total) || !bytes.Equal(u.data, bytes.Repeat([]byte{byte(i)}, m.total)) {
				if u == nil {
					t.Fatalf("message %d (%+v): not received", i, m)
				}
				t.Fatalf("message %d (%+v): unexpected message of %d bytes, %d received", i, m, u.total, u.got)
			}
		}
	})
}

// TestAnnouncedLength reads the first chunk of a message whose header
// announces 2^42 bytes, more than any machine has, before its receive is
// posted: the receiver keeps what arrived and allocates about that much.
func TestAnnouncedLength(t *testing.T) {
	c := fuzzConn(make([]byte, fuzzRingSize))
	c.out.Data = c.in.Data
	tag := transport.Tag{Comm: 1, Seq: 2, Step: 3, Sig: 4}
	data := bytes.Repeat([]byte{7}, 1000)
	h := frameHdr{Kind: kindData, Comm: tag.Comm, Seq: tag.Seq, Step: tag.Step, Sig: tag.Sig, Total: maxMessage, Chunk: uint32(len(data))}
	if !c.out.Write(&h, data) {
		t.Fatal("the frame does not fit the ring")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c.rmu.Lock()
	c.drain()
	c.rmu.Unlock()
	runtime.ReadMemStats(&after)
	if p := c.err.Load(); p != nil {
		t.Fatalf("the connection failed: %v", *p)
	}
	u := c.unexp[tag.Key()]
	if u == nil || u.got != uint64(len(data)) || !bytes.Equal(u.data, data) {
		t.Fatalf("unexpected message %+v, want its first %d bytes", u, len(data))
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("%d bytes allocated for %d bytes received", d, len(data))
	}
}
