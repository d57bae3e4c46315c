package agg

import (
	"bytes"
	"testing"
)

// FuzzFrame feeds the daemon's and the client's frame decoders arbitrary
// bytes: they return an error or a header whose fields are in range, and
// never panic; a join payload likewise. Seeds are in testdata/fuzz.
func FuzzFrame(f *testing.F) {
	var b [headerLen]byte
	(&header{typ: tData, code: 1, handle: 3, part: 1, parts: 4, length: 64, seq: 9}).put(b[:])
	f.Add(b[:], (&join{members: 4, member: 1, part: 1 << 20, window: 4, key: "k"}).encode())
	(&header{typ: tResult, code: 3 | 1<<4, handle: 1, parts: 1, length: 6}).put(b[:])
	f.Add(b[:], []byte{})
	f.Add(bytes.Repeat([]byte{0xB7}, headerLen), bytes.Repeat([]byte{0xff}, 20))
	f.Fuzz(func(t *testing.T, hb, jb []byte) {
		for _, server := range []bool{false, true} {
			h, err := parseHeader(hb, server)
			if err != nil {
				continue
			}
			if h.typ < 1 || h.typ > tMax {
				t.Fatalf("type %d accepted", h.typ)
			}
			if (h.typ == tData || h.typ == tResult) && (h.length > MaxPart || h.part >= h.parts) {
				t.Fatalf("data frame out of range accepted: %+v", h)
			}
			var again [headerLen]byte
			h.put(again[:])
			if !bytes.Equal(again[:], hb[:headerLen]) {
				t.Fatalf("header does not round-trip: %x -> %+v -> %x", hb[:headerLen], h, again)
			}
		}
		if j, err := parseJoin(jb); err == nil {
			if j.members < 1 || j.member >= j.members || j.part > MaxPart || j.window > MaxWindow || len(j.key) == 0 {
				t.Fatalf("join out of range accepted: %+v", j)
			}
		}
		parseAnswerFixed(hb)
	})
}
