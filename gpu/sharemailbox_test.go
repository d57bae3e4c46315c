package gpu

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/braid-ccl/braid/gpu/fused"
)

// fakeHost is n in-process ranks whose Allgather meets at a barrier.
type fakeHost struct {
	rank int
	all  *fakeAll
}

type fakeAll struct {
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	gen  int
	got  int
	buf  []byte
	done []byte
}

func (h fakeHost) Rank() int { return h.rank }
func (h fakeHost) Size() int { return h.all.n }

func (h fakeHost) Allgather(_ context.Context, send, recv []byte) error {
	a := h.all
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.got == 0 {
		a.buf = make([]byte, len(send)*a.n)
	}
	copy(a.buf[h.rank*len(send):], send)
	gen := a.gen
	if a.got++; a.got == a.n {
		a.done, a.got = a.buf, 0
		a.gen++
		a.cond.Broadcast()
	}
	for gen == a.gen {
		a.cond.Wait()
	}
	copy(recv, a.done)
	return nil
}

// TestShareMailboxHostRegion checks, without a GPU, that the mailbox file
// carries the host region of the multi-path kernels when the ranks want
// one, that every rank maps the same pages, and that when rank 0 made the
// file without it (no room in /dev/shm) every rank goes without.
func TestShareMailboxHostRegion(t *testing.T) {
	const n = 3
	path, mem, err := createShared(mailboxSize(n))
	if err != nil {
		t.Skip("no shared memory here: ", err)
	}
	unmapShared(mem)
	os.Remove(path)
	run := func(share0 int) []*Comm {
		all := &fakeAll{n: n}
		all.cond = sync.NewCond(&all.mu)
		gs := make([]*Comm, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			gs[r] = &Comm{rank: r, n: n, mb: mailbox{n: n, rank: r}}
			if r == 0 {
				gs[r].hostShare = share0
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = gs[r].shareMailbox(context.Background(), fakeHost{r, all}, nil)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return gs
	}
	gs := run(0)
	for r, g := range gs {
		if h := g.hostRegion(); len(h) != fused.HostRegionBytes || g.hostShare != 0 {
			t.Errorf("rank %d: host region of %d bytes, share %d; want %d, 0", r, len(h), g.hostShare, fused.HostRegionBytes)
		}
	}
	gs[0].hostRegion()[12345] = 7
	if gs[2].hostRegion()[12345] != 7 {
		t.Error("rank 2's host region is not rank 0's")
	}
	for _, g := range gs {
		unmapShared(g.mb.mem)
	}
	// Rank 0 without the region: the others see the size and follow.
	for r, g := range run(-1) {
		if g.hostRegion() != nil || g.hostShare != -1 || len(g.mb.mem) != mailboxSize(n) {
			t.Errorf("rank %d: host region of %d bytes, share %d, mailbox %d bytes; want none, -1, %d",
				r, len(g.hostRegion()), g.hostShare, len(g.mb.mem), mailboxSize(n))
		}
		unmapShared(g.mb.mem)
	}
}
