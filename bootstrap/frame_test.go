package bootstrap

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func testFrames() []frame {
	n32 := bytes.Repeat([]byte{7}, 32)
	return []frame{
		{op: opHello, value: n32},
		{op: opAuth, value: append(append([]byte{}, n32...), n32...)},
		{op: opWelcome, id: 0, value: n32},
		{op: opSet, id: 1, key: "rank/0/addr", value: []byte("127.0.0.1:4242")},
		{op: opSet, id: 2, key: "empty", value: []byte{}},
		{op: opGet, id: 3, key: "rank/1/addr"},
		{op: opAdd, id: 1 << 31, key: "barrier", delta: -3},
		{op: opCancel, id: 3},
		{op: opOK, id: 4, value: []byte("x")},
		{op: opOK, id: 5, value: []byte{}},
		{op: opErr, id: 6, value: []byte("bootstrap: no")},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range testFrames() {
		b := appendFrame(nil, f)
		got, err := readFrame(bufio.NewReader(bytes.NewReader(b)), maxFrame)
		if err != nil {
			t.Fatalf("frame %+v: %v", f, err)
		}
		if len(got.value) == 0 && len(f.value) == 0 {
			got.value, f.value = nil, nil
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("decoded %+v; want %+v", got, f)
		}
	}
}

func TestFrameErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", []byte{opGet, 0, 0}, "3 bytes"},
		{"unknown op", []byte{99, 0, 0, 0, 1}, "unknown op 99"},
		{"no key", []byte{opGet, 0, 0, 0, 1}, "no key"},
		{"empty key", []byte{opGet, 0, 0, 0, 1, 0, 0}, "key of 0 bytes"},
		{"key past the end", []byte{opGet, 0, 0, 0, 1, 0, 9, 'a'}, "key of 9 bytes in 1"},
		{"get with extra", []byte{opGet, 0, 0, 0, 1, 0, 1, 'a', 'b'}, "has 1 bytes, want 0"},
		{"add without delta", []byte{opAdd, 0, 0, 0, 1, 0, 1, 'a', 1}, "has 1 bytes, want 8"},
		{"short hello", []byte{opHello, 0, 0, 0, 0, 1, 2}, "has 2 bytes, want 32"},
	} {
		_, err := decodeFrame(tc.b)
		if !errors.Is(err, errFrame) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
	// A length prefix over the limit is refused before reading the body.
	_, err := readFrame(bufio.NewReader(bytes.NewReader([]byte{0, 0, 1, 0})), maxHandshakeFrame)
	if !errors.Is(err, errFrame) {
		t.Errorf("oversized frame: %v", err)
	}
}

// FuzzDecodeFrame checks that the decoder never panics on any input and
// that whatever it accepts re-encodes to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range testFrames() {
		f.Add(appendFrame(nil, fr)[4:])
	}
	f.Add([]byte{})
	f.Add([]byte{opSet, 0, 0, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		if again := appendFrame(nil, fr)[4:]; !bytes.Equal(again, b) {
			t.Fatalf("decoded %x as %+v, which encodes to %x", b, fr, again)
		}
	})
}
