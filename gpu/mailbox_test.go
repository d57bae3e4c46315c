package gpu

import (
	"os"
	"sync"
	"testing"
)

// TestMailbox passes notices between two ranks' views of one shared file,
// in order, through full rings, from two goroutines.
func TestMailbox(t *testing.T) {
	const n = 3
	path, mem0, err := createShared(mailboxSize(n))
	if err != nil {
		t.Skip("no shared memory here: ", err)
	}
	defer os.Remove(path)
	defer unmapShared(mem0)
	// Others ask for the size with a host region, or the rings alone.
	mem2, err := openShared(path, mailboxSize(n)+1<<20, mailboxSize(n))
	if err != nil || len(mem2) != mailboxSize(n) {
		t.Fatalf("opening the mailbox: %d bytes, %v", len(mem2), err)
	}
	defer unmapShared(mem2)
	if _, err := openShared(path, mailboxSize(n)+1, mailboxSize(n)+2); err == nil {
		t.Error("opening the mailbox with the wrong size succeeded")
	}
	a, b := mailbox{mem: mem0, n: n, rank: 0}, mailbox{mem: mem2, n: n, rank: 2}

	// Fill the ring 0 → 2: it holds ringNotices notices, then refuses.
	var x notice
	for i := range ringNotices {
		x = notice{Kind: noticeReady, Seq: 1, Tag: int32(i)}
		if !a.post(2, &x) {
			t.Fatalf("ring full after %d notices", i)
		}
	}
	if a.post(2, &x) {
		t.Fatal("a full ring took another notice")
	}
	var y notice
	if b.take(1, &y) {
		t.Fatal("a notice from rank 1, which sent none")
	}
	for i := range ringNotices {
		if !b.take(0, &y) || y.Tag != int32(i) {
			t.Fatalf("notice %d: got %+v", i, y)
		}
	}
	if b.take(0, &y) {
		t.Fatal("an empty ring gave a notice")
	}

	// Round trip of every field.
	x = notice{Kind: noticeDone | noticeP2P, Seq: 7, Tag: -3, Flags: flagEvent | flagBuf | flagRefused, BufID: 1 << 40, Off: 12345, Count: 1<<33 + 5, DType: 9}
	for i := range x.Mem {
		x.Mem[i], x.Event[i] = byte(i), byte(255-i)
	}
	a.post(2, &x)
	if !b.take(0, &y) || y != x {
		t.Fatalf("round trip: sent %+v, got %+v", x, y)
	}

	// Many notices through a producer and a consumer at once.
	const total = 100000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; {
			x := notice{Kind: noticeReady, Seq: uint32(i), Tag: int32(i)}
			if a.post(2, &x) {
				i++
			}
		}
	}()
	for i := 0; i < total; {
		if b.take(0, &y) {
			if y.Seq != uint32(i) || y.Tag != int32(i) {
				t.Fatalf("notice %d arrived as %+v", i, y)
			}
			i++
		}
	}
	wg.Wait()
}
