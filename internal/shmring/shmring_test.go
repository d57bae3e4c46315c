package shmring

import (
	"bytes"
	"sync"
	"testing"
	"unsafe"
)

// aligned returns n zeroed bytes at an 8-byte aligned address.
func aligned(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// TestRing passes frames through a ring laid out by At: in order, with
// their headers and payloads, through a full ring and its end (pads),
// and from a producer and a consumer goroutine at once.
func TestRing(t *testing.T) {
	mem := aligned(CtrlSize + 4096)
	tx, rx := Tx{Ring: At(mem)}, Rx{Ring: At(mem)}
	if len(tx.Data) != 4096 {
		t.Fatalf("%d ring bytes, want 4096", len(tx.Data))
	}
	// 100-byte payloads take 192-byte frames: the ring takes 21 of them
	// (it keeps 64 bytes for the mark of the frame after the last).
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100) }
	n := 0
	for tx.Write(&Header{Kind: KindData, Chunk: 100, Seq: uint32(n)}, payload(n)) {
		n++
	}
	if want := int((4096 - 64) / FrameLen(100)); n != want {
		t.Errorf("the ring took %d frames, want %d", n, want)
	}
	for i := range n {
		h, p := rx.Next()
		if h == nil || h.Seq != uint32(i) || h.Kind != KindData || !bytes.Equal(p, payload(i)) {
			t.Fatalf("frame %d: %+v %v", i, h, p)
		}
		rx.Release(h.Chunk)
	}
	if h, _ := rx.Next(); h != nil {
		t.Fatalf("an empty ring gave %+v", h)
	}
	rx.Flush()

	// Frames of 0 to 299 bytes (Chunk is the payload's length).
	long := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 300) }
	const total = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; {
			size := i % 300
			if tx.Write(&Header{Kind: KindData, Chunk: uint32(size), Seq: uint32(i)}, long(i)[:size]) {
				i++
			}
		}
	}()
	for i := 0; i < total; {
		h, p := rx.Next()
		if h == nil {
			rx.Flush()
			continue
		}
		if h.Seq != uint32(i) || int(h.Chunk) != i%300 || !bytes.Equal(p, long(i)[:i%300]) {
			t.Fatalf("frame %d arrived as %+v", i, h)
		}
		rx.Release(h.Chunk)
		i++
	}
	wg.Wait()
}
