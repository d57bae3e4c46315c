package shmcoll

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
)

// TestDoubling runs allreduces by recursive doubling back to back (both
// sets of entries, many times over, with data that changes every call),
// for powers of two and not up to the largest group that doubles (64
// ranks: three rounds), sizes inside the flag line and in the data
// lines up to RDMax, in place and not, and checks that every rank gets
// the exact sum and the same bits: also of sums that round, and of a
// maximum over NaNs with different payloads, whose result depends on the
// order of the operands.
func TestDoubling(t *testing.T) {
	const calls = 40
	for _, n := range []int{4, 5, 7, 8, 16, 17, 33, 64} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			var mu sync.Mutex
			results := make([][]byte, n)
			var doubled atomic.Int64
			runAll(t, n, Options{RDRanks: 4}, func(g *Group, c *Call) error {
				r := g.Rank()
				var all []byte
				for k := range calls {
					m := []int{1, 5, 6, 33, 128}[k%5] // 8, 40, 48, 264 and 1024 bytes
					in := make([]float64, m)
					for i := range in {
						in[i] = val(r, i) + float64(k)
					}
					ib := bytesOf(in)
					ob := make([]byte, len(ib))
					if k%2 == 1 {
						ob = ib
					}
					before := g.rdCalls
					c.Sig, c.Ticket = uint32(k), g.Ticket()
					if err := g.Allreduce(c, ib, ob, sumF64()); err != nil {
						return fmt.Errorf("call %d: %w", k, err)
					}
					if r == 0 && g.rdCalls > before {
						doubled.Add(1)
					}
					if err := checkSum(ob, n, func(q, i int) float64 { return val(q, i) + float64(k) }); err != nil {
						return fmt.Errorf("call %d (%d B): %w", k, 8*m, err)
					}
					// Sums that round, and a maximum over NaNs.
					for i := range in {
						in[i] = 1 / float64(r*m+i+3+k)
					}
					ib = bytesOf(in)
					c.Sig, c.Ticket = uint32(1000+k), g.Ticket()
					if err := g.Allreduce(c, ib, ib, sumF64()); err != nil {
						return fmt.Errorf("call %d (rounding): %w", k, err)
					}
					all = append(all, ib...)
					for i := range in {
						in[i] = math.Float64frombits(0x7ff8000000000000 | uint64(r+1)<<8 | uint64(i&0xff))
						if (i+r)%3 == 0 {
							in[i] = float64(r)
						}
					}
					ib = bytesOf(in)
					c.Sig, c.Ticket = uint32(2000+k), g.Ticket()
					if err := g.Allreduce(c, ib, ib, reducerF64(dtype.Max)); err != nil {
						return fmt.Errorf("call %d (max): %w", k, err)
					}
					all = append(all, ib...)
				}
				mu.Lock()
				results[r] = all
				mu.Unlock()
				return nil
			})
			for r := 1; r < n; r++ {
				if string(results[r]) != string(results[0]) {
					t.Fatalf("rank %d's results differ from rank 0's", r)
				}
			}
			// Every call doubles but one in rdSample: the first call of
			// round k is the group's eligible call 3k+1.
			want := int64(0)
			for k := range calls {
				if (3*k+1)%rdSample != 0 {
					want++
				}
			}
			if got := doubled.Load(); got != want {
				t.Errorf("%d of %d checked calls doubled, want %d", got, calls, want)
			}
		})
	}
}

// TestDoublingScope: RDMax < 0, fewer than RDRanks ranks (by default 16)
// but for 4 and 8, 8 ranks' data inside a flag line, and chunks above
// RDMax reduce flat (or in two phases), never by doubling; with the
// default options 4 and 8 ranks double (8 above a flag line's data), and
// 16 and 17 at every size up to RDMax: every call but one in rdSample.
func TestDoublingScope(t *testing.T) {
	for _, tc := range []struct {
		n       int
		o       Options
		m       int
		doubled uint64 // of 3 calls
	}{
		{8, Options{RDMax: -1, RDRanks: 4}, 1, 0},
		{3, Options{RDRanks: 4}, 1, 0},
		{3, Options{}, 1, 0},  // below DefaultRDRanks
		{6, Options{}, 33, 0}, // below DefaultRDRanks, not a power of two
		{15, Options{}, 1, 0}, // likewise
		{8, Options{}, 5, 0},  // 40 bytes: inside a flag line
		{8, Options{RDMax: 256, RDRanks: 4}, 33, 0},
		{16, Options{}, 129, 0},
		{65, Options{RDRanks: 4}, 1, 0}, // above rdMaxRanks
		{4, Options{}, 1, 3},
		{8, Options{}, 6, 3},
		{16, Options{}, 1, 3},
		{17, Options{}, 128, 3},
	} {
		runAll(t, tc.n, tc.o, func(g *Group, c *Call) error {
			for range 3 {
				in := bytesOf(make([]float64, tc.m))
				c.Ticket = g.Ticket()
				if err := g.Allreduce(c, in, in, sumF64()); err != nil {
					return err
				}
			}
			if g.rdCalls != tc.doubled {
				return fmt.Errorf("n=%d %+v %d B: %d calls of 3 doubled, want %d", tc.n, tc.o, 8*tc.m, g.rdCalls, tc.doubled)
			}
			return nil
		})
	}
	if _, err := (Options{RDMax: rdCap + 8}).Check(8); err == nil {
		t.Error("RDMax above the entries' capacity accepted")
	}
}

// TestDoublingArrivals: an allreduce by doubling gives each rank its own
// stamp and its partners' (the ranks it read: those of its rounds, and the
// extra rank above it or the rank below an extra one); one call in
// rdSample runs flat, so that every rank's stamps are seen.
func TestDoublingArrivals(t *testing.T) {
	for _, tc := range []struct {
		n    int
		read map[int][]int
	}{
		// p = 4, one round of radix 4: ranks 4 and 5 fold into 0 and 1.
		{6, map[int][]int{0: {1, 2, 3, 4}, 1: {0, 2, 3, 5}, 2: {0, 1, 3}, 3: {0, 1, 2}, 4: {0}, 5: {1}}},
		// p = 8: a round of radix 4 (bits 0-1), then one of radix 2 (bit 2).
		{8, map[int][]int{0: {1, 2, 3, 4}, 1: {0, 2, 3, 5}, 2: {0, 1, 3, 6}, 3: {0, 1, 2, 7},
			4: {5, 6, 7, 0}, 5: {4, 6, 7, 1}, 6: {4, 5, 7, 2}, 7: {4, 5, 6, 3}}},
	} {
		testDoublingArrivals(t, tc.n, tc.read)
	}
}

func testDoublingArrivals(t *testing.T, n int, read map[int][]int) {
	stamp := func(call, r int) uint64 { return uint64(call)<<16 | uint64(r+1) }
	runAll(t, n, Options{RDRanks: 4}, func(g *Group, c *Call) error {
		r := g.Rank()
		c.Arrivals = make([]uint64, n)
		for call := 1; call <= rdSample; call++ {
			c.Sig, c.Ticket, c.Arrive = uint32(call), g.Ticket(), stamp(call, r)
			in := bytesOf([]float64{1})
			if err := g.Allreduce(c, in, in, sumF64()); err != nil {
				return err
			}
			for q := range n {
				want := uint64(0)
				if q == r || call%rdSample == 0 || contains(read[r], q) {
					want = stamp(call, q)
				}
				if c.Arrivals[q] != want {
					return fmt.Errorf("call %d: rank %d's stamp %#x, want %#x", call, q, c.Arrivals[q], want)
				}
			}
		}
		return nil
	})
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestDoublingMismatch: one rank of 8 whose call carries another signature
// makes the allreduce fail on every rank (its partners find the
// signature; the others wait for partners that failed, and end with the
// failure the first one reported, as the communicator spreads it): no rank
// returns success.
func TestDoublingMismatch(t *testing.T) {
	const n = 8
	for _, odd := range []int{0, 5} {
		gs, _ := NewLocal(n, Options{RDRanks: 4})
		errs := runFailing(gs, func(g *Group, fail func() error) error {
			sig := uint32(7)
			if g.Rank() == odd {
				sig = 8
			}
			c := &Call{Ctx: context.Background(), Ticket: g.Ticket(), Sig: sig, Timeout: 5 * time.Second, Fail: fail}
			in := bytesOf([]float64{float64(g.Rank())})
			return g.Allreduce(c, in, in, sumF64())
		})
		for r, e := range errs {
			var m *MismatchError
			if e == nil || !errors.As(e, &m) {
				t.Errorf("odd rank %d: rank %d: %v, want a MismatchError", odd, r, e)
			}
		}
	}
}

// TestDoublingMaker: the ranks that map an area take its maker's scope of
// recursive doubling, whatever options they were given.
func TestDoublingMaker(t *testing.T) {
	g0, path, err := Make(t.TempDir(), 4, Options{RDMax: -1, RDRanks: 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g0.Close()
	g1, err := Open(path, 1, 4, Options{}, nil)
	Unlink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g1.Close()
	for _, g := range []*Group{g0, g1} {
		if g.rdMax != -1 || g.rdRanks != 6 {
			t.Errorf("rank %d: doubling up to %d bytes from %d ranks, want the maker's -1 and 6", g.Rank(), g.rdMax, g.rdRanks)
		}
	}
}

// TestDoublingReduceScatter runs small reduce-scatters, which go by
// recursive halving on a power of two ranks and by recursive doubling of
// the whole input on others (scatterDoubling), back to back
// with data that changes every call, in place and not, between doubling
// allreduces (which take the same sets of entries) and reduce-scatters
// too large to double, for powers of two and not: every rank gets the
// exact sum of its block, and every call doubles but one in rdSample.
func TestDoublingReduceScatter(t *testing.T) {
	const calls = 24
	for _, n := range []int{4, 5, 8, 16, 17, 32, 33} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			var scattered, doubled atomic.Int64
			runAll(t, n, Options{RDRanks: 4}, func(g *Group, c *Call) error {
				r := g.Rank()
				for k := range calls {
					// Blocks of 1 to 3 float64s, the whole input at most
					// RDMax (rdCap) bytes; a block over a line, which
					// halves on 4 and 8 ranks and goes flat on the others;
					// a whole input too large to double.
					m := 1 + k%3
					if 8*m*n > rdCap {
						m = 1
					}
					switch k % 4 {
					case 2:
						m = lineSize/8 + 1
					case 3:
						m = rdCap/8/n + 1
					}
					in := make([]float64, n*m)
					for i := range in {
						in[i] = val(r, i) + float64(k)
					}
					ib := bytesOf(in)
					ob := make([]byte, 8*m)
					if k%2 == 1 {
						ob = ib[r*8*m : (r+1)*8*m]
					}
					before := g.rdCalls
					c.Sig, c.Ticket = uint32(k), g.Ticket()
					if err := g.ReduceScatter(c, ib, ob, sumF64()); err != nil {
						return fmt.Errorf("call %d: %w", k, err)
					}
					if r == 0 && g.scatterDoubles(len(ib)) {
						scattered.Add(1)
						if g.rdCalls > before {
							doubled.Add(1)
						}
					}
					// rdSeen counts the eligible calls, the allreduces'
					// too: one in rdSample goes flat.
					if went, want := g.rdCalls > before, g.scatterDoubles(len(ib)) && g.rdSeen%rdSample != 0; went != want {
						return fmt.Errorf("call %d (%d B): doubled %v, want %v", k, len(ib), went, want)
					}
					if err := checkSum(ob, n, func(q, i int) float64 { return val(q, r*m+i) + float64(k) }); err != nil {
						return fmt.Errorf("call %d (%d B a block): %w", k, 8*m, err)
					}
					// A doubling allreduce between: the other set of entries.
					a := bytesOf([]float64{float64(r), float64(k)})
					c.Sig, c.Ticket = uint32(1000+k), g.Ticket()
					if err := g.Allreduce(c, a, a, sumF64()); err != nil {
						return fmt.Errorf("call %d (allreduce): %w", k, err)
					}
					if got := f64s(a); got[0] != float64(n*(n-1)/2) || got[1] != float64(n*k) {
						return fmt.Errorf("call %d (allreduce): %v", k, got)
					}
				}
				return nil
			})
			if doubled.Load() == 0 {
				t.Errorf("none of %d eligible reduce-scatters doubled", scattered.Load())
			}
		})
	}
}

// TestDoublingAllgather runs small allgathers, which go by recursive
// doubling on a power of two ranks (gatherDoubling), back to back with
// data that changes every call, in place and not, between doubling
// allreduces (which take the same sets of entries) and allgathers too
// large to double: every rank gets every block, and every eligible call
// doubles but one in rdSample; on other rank counts none doubles.
func TestDoublingAllgather(t *testing.T) {
	const calls = 24
	for _, n := range []int{4, 5, 8, 12, 16, 32, 64} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			var doubled atomic.Int64
			runAll(t, n, Options{RDRanks: 4}, func(g *Group, c *Call) error {
				r := g.Rank()
				for k := range calls {
					// Blocks of 1 to 3 bytes, of up to 5 float64s (the
					// whole output at most RDMax, rdCap), and too large.
					blk := 1 + k%3
					switch k % 4 {
					case 2:
						blk = min(40, rdCap/n)
					case 3:
						blk = rdCap/n + 1
					}
					in := make([]byte, blk)
					for i := range in {
						in[i] = byte(r*7 + i + k)
					}
					out := make([]byte, n*blk)
					if k%2 == 1 {
						copy(out[r*blk:], in)
						in = out[r*blk : (r+1)*blk]
					}
					before := g.rdCalls
					c.Sig, c.Ticket = uint32(k), g.Ticket()
					if err := g.Allgather(c, in, out); err != nil {
						return fmt.Errorf("call %d: %w", k, err)
					}
					went := g.rdCalls > before
					if want := g.gatherDoubles(blk) && g.rdSeen%rdSample != 0; went != want {
						return fmt.Errorf("call %d (%d B blocks): doubled %v, want %v", k, blk, went, want)
					}
					if went && r == 0 {
						doubled.Add(1)
					}
					for q := range n {
						for i := range blk {
							if got, want := out[q*blk+i], byte(q*7+i+k); got != want {
								return fmt.Errorf("call %d (%d B blocks): block %d byte %d = %d, want %d", k, blk, q, i, got, want)
							}
						}
					}
					a := bytesOf([]float64{float64(r)})
					c.Sig, c.Ticket = uint32(1000+k), g.Ticket()
					if err := g.Allreduce(c, a, a, sumF64()); err != nil {
						return fmt.Errorf("call %d (allreduce): %w", k, err)
					}
					if got := f64s(a)[0]; got != float64(n*(n-1)/2) {
						return fmt.Errorf("call %d (allreduce): %v", k, got)
					}
				}
				return nil
			})
			if pow := n&(n-1) == 0; pow != (doubled.Load() > 0) {
				t.Errorf("%d ranks: %d allgathers doubled", n, doubled.Load())
			}
		})
	}
}
