package shmcoll

import (
	"fmt"
	"testing"

	"github.com/braid-ccl/braid/internal/par"
)

// TestCollectivesThreads runs the collectives' and the chain's correctness
// cases with every copy and combination of 1 KiB or more split across 4
// threads (package par): the ranks are goroutines of one process, so one
// of them at a time has the helpers and the others run alone.
func TestCollectivesThreads(t *testing.T) {
	defer par.SetThreads(4, 1024)()
	before := par.Splits()
	TestCollectives(t)
	TestAllreduceChain(t)
	TestSameBits(t)
	if par.Splits() == before {
		t.Fatal("no copy or combination was split")
	}
}

// TestLargeThreads: allreduce, reduce, bcast, allgather and reduce-scatter
// of a few MiB, in slots of 1 MiB, split at the default least size.
func TestLargeThreads(t *testing.T) {
	defer par.SetThreads(4, 0)()
	for _, n := range []int{2, 3} {
		before := par.Splits()
		m := 3<<17 + 5 // float64s: 3 MiB and 40 bytes
		runAll(t, n, Options{Slot: 1 << 20}, func(g *Group, c *Call) error {
			r := g.Rank()
			in := make([]float64, m)
			for i := range in {
				in[i] = val(r, i)
			}
			sum := func(i int) float64 {
				s := 0.0
				for q := range n {
					s += val(q, i)
				}
				return s
			}
			c.Sig = 1
			ob := make([]byte, 8*m)
			c.Ticket = g.Ticket()
			if err := g.Allreduce(c, bytesOf(in), ob, sumF64()); err != nil {
				return err
			}
			for i, x := range f64s(ob) {
				if x != sum(i) {
					return fmt.Errorf("allreduce: [%d] = %v, want %v", i, x, sum(i))
				}
			}
			ob = make([]byte, 8*m)
			c.Sig, c.Ticket = 2, g.Ticket()
			if err := g.Reduce(c, bytesOf(in), ob, sumF64(), 0); err != nil {
				return err
			}
			if r == 0 {
				for i, x := range f64s(ob) {
					if x != sum(i) {
						return fmt.Errorf("reduce: [%d] = %v, want %v", i, x, sum(i))
					}
				}
			}
			bb := make([]byte, 8*m)
			if r == n-1 {
				bb = bytesOf(in)
			}
			c.Sig, c.Ticket = 3, g.Ticket()
			if err := g.Bcast(c, bb, n-1); err != nil {
				return err
			}
			for i, x := range f64s(bb) {
				if x != val(n-1, i) {
					return fmt.Errorf("bcast: [%d] = %v, want %v", i, x, val(n-1, i))
				}
			}
			out := make([]byte, 8*m*n)
			c.Sig, c.Ticket = 4, g.Ticket()
			if err := g.Allgather(c, bytesOf(in), out); err != nil {
				return err
			}
			for i, x := range f64s(out) {
				if q, j := i/m, i%m; x != val(q, j) {
					return fmt.Errorf("allgather: [%d] = %v, want %v", i, x, val(q, j))
				}
			}
			full := make([]float64, n*m)
			for i := range full {
				full[i] = val(r, i)
			}
			rb := make([]byte, 8*m)
			c.Sig, c.Ticket = 5, g.Ticket()
			if err := g.ReduceScatter(c, bytesOf(full), rb, sumF64()); err != nil {
				return err
			}
			for i, x := range f64s(rb) {
				if x != sum(r*m+i) {
					return fmt.Errorf("reducescatter: [%d] = %v, want %v", i, x, sum(r*m+i))
				}
			}
			return nil
		})
		if par.Splits() == before {
			t.Fatalf("n=%d: no copy or combination was split", n)
		}
	}
}
