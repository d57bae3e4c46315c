package tcp

import (
	"bytes"
	"testing"

	"github.com/braid-ccl/braid/transport"
)

// FuzzHeader checks that decoding never panics, that what it accepts is
// consistent, and that it encodes back to the same bytes.
func FuzzHeader(f *testing.F) {
	for _, h := range []header{
		{typ: frameData, tag: transport.Tag{Comm: 1, Seq: 2, Step: 3, Sig: 4}, id: 5, total: 100, offset: 40, length: 60},
		{typ: frameData},
		{typ: frameAbort, length: 12},
		{typ: frameClose},
	} {
		b := make([]byte, hdrLen)
		h.encode(b)
		f.Add(b)
	}
	f.Add(bytes.Repeat([]byte{0xff}, hdrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < hdrLen {
			return
		}
		var h header
		if err := h.decode(b); err != nil {
			return
		}
		if h.typ == frameData && (h.offset+uint64(h.length) > h.total || h.total > maxMessage) {
			t.Fatalf("accepted %+v", h)
		}
		if h.typ != frameData && h.length > maxReason {
			t.Fatalf("accepted %+v", h)
		}
		out := make([]byte, hdrLen)
		h.encode(out)
		if !bytes.Equal(out, b[:hdrLen]) {
			t.Fatalf("round trip: %x → %+v → %x", b[:hdrLen], h, out)
		}
	})
}

func TestHeaderRejects(t *testing.T) {
	good := header{typ: frameData, total: 10, offset: 2, length: 8}
	b := make([]byte, hdrLen)
	good.encode(b)
	var h header
	if err := h.decode(b); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(b []byte){
		"magic":   func(b []byte) { b[0] = 0 },
		"version": func(b []byte) { b[2] = 9 },
		"type":    func(b []byte) { b[3] = 7 },
		"past":    func(b []byte) { b[40] = 9 },
	} {
		c := append([]byte(nil), b...)
		mut(c)
		if err := h.decode(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
