package shmcoll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// runGroups runs fn on every group, one goroutine each, and fails the
// test with the first error.
func runGroups(t *testing.T, gs []*Group, fn func(g *Group, c *Call) error) {
	t.Helper()
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(g, &Call{Ctx: context.Background(), Timeout: 20 * time.Second})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// pat is byte i of a pattern s that does not repeat within a call.
func pat(i, s int) byte { return byte(uint32(i)*2654435761>>24) + byte(s) }

// cmaCalls runs broadcasts from every root and allgathers, in place and
// not, of sizes around the scope's edge and over several chunks, with data
// that changes every call, and checks every byte.
func cmaCalls(g *Group, c *Call) error {
	r, n := g.Rank(), g.Size()
	sizes := []int{8, DefaultCMAMin - 8, DefaultCMAMin, 64 << 10, 200<<10 + 24, cmaMax + 8}
	for k, b := range sizes {
		for root := range n {
			buf := make([]byte, b)
			if r == root {
				for i := range buf {
					buf[i] = pat(i, k+root)
				}
			}
			c.Sig, c.Ticket = uint32(100*k+root), g.Ticket()
			if err := g.Bcast(c, buf, root); err != nil {
				return fmt.Errorf("bcast of %d B from %d: %w", b, root, err)
			}
			for i, v := range buf {
				if v != pat(i, k+root) {
					return fmt.Errorf("bcast of %d B from %d: byte %d is %d, want %d", b, root, i, v, pat(i, k+root))
				}
			}
		}
		for _, inPlace := range []bool{false, true} {
			out := make([]byte, n*b)
			in := make([]byte, b)
			if inPlace {
				in = out[r*b : (r+1)*b]
			}
			for i := range in {
				in[i] = pat(i, 3*k+r)
			}
			c.Sig, c.Ticket = uint32(1000+k), g.Ticket()
			if err := g.Allgather(c, in, out); err != nil {
				return fmt.Errorf("allgather of %d B a rank: %w", b, err)
			}
			for q := range n {
				for i, v := range out[q*b : (q+1)*b] {
					if v != pat(i, 3*k+q) {
						return fmt.Errorf("allgather of %d B a rank (in place %v): block %d byte %d is %d, want %d", b, inPlace, q, i, v, pat(i, 3*k+q))
					}
				}
			}
		}
	}
	return nil
}

// TestCMA: 2 ranks broadcast and allgather by address from DefaultCMAMin
// (cma.go), with slots small enough that large calls take several chunks,
// and every byte arrives; so do 3 ranks with CMARanks 4; smaller calls
// and groups out of scope copy through the slots, and so does a group
// with CMAMin negative.
func TestCMA(t *testing.T) {
	for _, tc := range []struct {
		n      int
		o      Options
		byAddr bool
	}{
		{2, Options{Slot: 64 << 10}, true},
		{2, Options{}, true},
		{3, Options{Slot: 64 << 10, CMARanks: 4}, true},
		{3, Options{Slot: 64 << 10}, false},
		{2, Options{CMAMin: -1}, false},
	} {
		t.Run(fmt.Sprintf("n%d-slot%d-min%d-ranks%d", tc.n, tc.o.Slot, tc.o.CMAMin, tc.o.CMARanks), func(t *testing.T) {
			gs := areaGroups(t, tc.n, tc.o)
			runGroups(t, gs, cmaCalls)
			var pub, read uint64
			for _, g := range gs {
				p, r := g.DirectStats()
				pub, read = pub+p, read+r
			}
			if tc.byAddr && (pub == 0 || read == 0) {
				t.Errorf("published %d chunks by address, read %d: want some", pub, read)
			}
			if !tc.byAddr && pub+read != 0 {
				t.Errorf("published %d chunks by address, read %d: want none", pub, read)
			}
		})
	}
}

// TestCMAUnreadable: a rank whose process the others cannot read (here a
// pid that names no process, as the kernel's refusal would look) makes
// every rank copy through the slots, and every byte still arrives.
func TestCMAUnreadable(t *testing.T) {
	gs := areaGroups(t, 2, Options{})
	*u64(gs[1].line(1, lineCMA)[cmaPID:]) = 1 << 30
	runGroups(t, gs, cmaCalls)
	for r, g := range gs {
		if p, rd := g.DirectStats(); p+rd != 0 {
			t.Errorf("rank %d published %d chunks by address and read %d: want none", r, p, rd)
		}
		if g.cma.Load() != cmaNo {
			t.Errorf("rank %d: single copy by address %d, want cmaNo", r, g.cma.Load())
		}
	}
}

// TestCMALocal: goroutine ranks (NewLocal) never publish by address.
func TestCMALocal(t *testing.T) {
	gs, err := NewLocal(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runGroups(t, gs, cmaCalls)
	for r, g := range gs {
		if p, rd := g.DirectStats(); p+rd != 0 {
			t.Errorf("rank %d published %d chunks by address and read %d: want none", r, p, rd)
		}
	}
}

// TestCMAOneRoot: a broadcast loop from one root publishes by address
// although the other rank never writes (it probes at its calls too).
func TestCMAOneRoot(t *testing.T) {
	gs := areaGroups(t, 2, Options{})
	runGroups(t, gs, func(g *Group, c *Call) error {
		for k := range 4 {
			buf := make([]byte, 64<<10)
			if g.Rank() == 0 {
				for i := range buf {
					buf[i] = pat(i, k)
				}
			}
			c.Sig, c.Ticket = uint32(k), g.Ticket()
			if err := g.Bcast(c, buf, 0); err != nil {
				return err
			}
			for i, v := range buf {
				if v != pat(i, k) {
					return fmt.Errorf("call %d: byte %d is %d, want %d", k, i, v, pat(i, k))
				}
			}
		}
		return nil
	})
	if p, _ := gs[0].DirectStats(); p == 0 {
		t.Error("the root published nothing by address")
	}
	if _, r := gs[1].DirectStats(); r == 0 {
		t.Error("the other rank read nothing by address")
	}
}

// TestCMAReadFails: a reader that cannot read the root's process (here
// the root's published pid changed after every rank agreed, as a root
// that died would look) fails the call with a DirectError naming the
// root, and the root, which waits for its reader, ends with a WaitError
// naming the reader at its timeout instead of hanging.
func TestCMAReadFails(t *testing.T) {
	gs := areaGroups(t, 2, Options{})
	runGroups(t, gs, cmaCalls) // every rank agrees on the single copy
	if gs[0].cma.Load() != cmaYes || gs[1].cma.Load() != cmaYes {
		t.Fatalf("single copy by address not agreed: %d, %d", gs[0].cma.Load(), gs[1].cma.Load())
	}
	*u64(gs[0].line(0, lineCMA)[cmaPID:]) = 1 << 30
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &Call{Ctx: context.Background(), Timeout: 300 * time.Millisecond, Sig: 7, Ticket: g.Ticket()}
			errs[r] = g.Bcast(c, make([]byte, 64<<10), 0)
		}()
	}
	wg.Wait()
	var de *DirectError
	if !errors.As(errs[1], &de) || de.Peer != 0 || !de.ByAddr || !strings.Contains(errs[1].Error(), "process_vm_readv") {
		t.Errorf("reader: %v, want a DirectError naming rank 0 and process_vm_readv", errs[1])
	}
	var we *WaitError
	if !errors.As(errs[0], &we) || we.Peer != 1 || !strings.Contains(we.What, "single copy") {
		t.Errorf("root: %v, want a WaitError naming rank 1", errs[0])
	}
}

// TestByAddressStable: ByAddress, by which every rank's planner prices
// the area, says the same before the probe, after it agreed and after it
// refused, so that ranks whose probes end at different calls plan alike;
// and it follows the scope (size, ranks, CMAMin, goroutine ranks).
func TestByAddressStable(t *testing.T) {
	g := areaGroups(t, 2, Options{})[0]
	for _, state := range []uint64{0, cmaYes, cmaNo} {
		g.cma.Store(state)
		if !g.ByAddress(64<<10) || g.ByAddress(DefaultCMAMin-1) || g.ByAddress(cmaMax+1) {
			t.Errorf("probe state %d: ByAddress 64 KiB %v, below the scope %v, above it %v; want true, false, false",
				state, g.ByAddress(64<<10), g.ByAddress(DefaultCMAMin-1), g.ByAddress(cmaMax+1))
		}
	}
	if g3 := areaGroups(t, 3, Options{})[0]; g3.ByAddress(64 << 10) {
		t.Error("3 ranks, CMARanks 2: ByAddress true")
	}
	if g := areaGroups(t, 2, Options{CMAMin: -1})[0]; g.ByAddress(64 << 10) {
		t.Error("CMAMin -1: ByAddress true")
	}
	local, err := NewLocal(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if local[0].ByAddress(64 << 10) {
		t.Error("goroutine ranks: ByAddress true")
	}
}
