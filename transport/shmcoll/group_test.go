package shmcoll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/internal/reduce"
)

func sumF64() Reducer { return reducerF64(dtype.Sum) }

// reducerF64 returns the reducer of float64 by op.
func reducerF64(op dtype.Op) Reducer {
	k, _ := reduce.For(dtype.Float64, op)
	k3, _ := reduce.For3(dtype.Float64, op)
	return Reducer{ElemSize: 8, K: k, K3: k3}
}

func f64s(b []byte) []float64 {
	v := make([]float64, len(b)/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v
}

func bytesOf(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

// val is rank r's element i: distinct per rank and element, exact in float64 sums.
func val(r, i int) float64 { return float64(r*1000003+i%977) + 0.25 }

// runAll runs fn on every rank of a fresh local group and fails on any error.
func runAll(t *testing.T, n int, o Options, fn func(g *Group, c *Call) error) {
	t.Helper()
	gs, err := NewLocal(n, o)
	if err != nil {
		t.Fatal(err)
	}
	runGroups(t, gs, fn)
}

// TestCollectives checks every collective against a reference, for rank
// counts with and without powers of two, sizes inside a flag line, one
// phase, two phases and several chunks, in place and out of place, and
// several calls back to back (so that both parities and the claim path
// are used).
func TestCollectives(t *testing.T) {
	o := Options{Slot: 4096, FlatMax: 256}
	counts := []int{0, 1, 5, 6, 31, 32, 33, 500, 513, 1500, 2049}
	for _, n := range []int{1, 2, 3, 5, 8, 17} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("n%d/inplace=%v", n, inPlace), func(t *testing.T) {
				runAll(t, n, o, func(g *Group, c *Call) error {
					r := g.Rank()
					cs := counts
					if n > 8 {
						cs = []int{0, 1, 6, 33, 513, 1500}
					}
					for _, m := range cs {
						c.Sig = uint32(m)
						// allreduce
						in := make([]float64, m)
						for i := range in {
							in[i] = val(r, i)
						}
						ib := bytesOf(in)
						ob := make([]byte, len(ib))
						if inPlace {
							ob = ib
						}
						c.Ticket = g.Ticket()
						if err := g.Allreduce(c, ib, ob, sumF64()); err != nil {
							return fmt.Errorf("allreduce %d: %w", m, err)
						}
						if err := checkSum(ob, n, val); err != nil {
							return fmt.Errorf("allreduce %d: %w", m, err)
						}
						// reduce to root n-1
						root := n - 1
						ib = bytesOf(in)
						ob = make([]byte, len(ib))
						c.Ticket = g.Ticket()
						if err := g.Reduce(c, ib, ob, sumF64(), root); err != nil {
							return fmt.Errorf("reduce %d: %w", m, err)
						}
						if r == root {
							for i, x := range f64s(ob) {
								want := 0.0
								for q := range n {
									want += val(q, i)
								}
								if x != want {
									return fmt.Errorf("reduce %d: [%d] = %v, want %v", m, i, x, want)
								}
							}
						}
						// bcast from root 0
						bb := make([]byte, 8*m)
						if r == 0 {
							bb = bytesOf(in)
						}
						c.Ticket = g.Ticket()
						if err := g.Bcast(c, bb, 0); err != nil {
							return fmt.Errorf("bcast %d: %w", m, err)
						}
						for i, x := range f64s(bb) {
							if x != val(0, i) {
								return fmt.Errorf("bcast %d: [%d] = %v, want %v", m, i, x, val(0, i))
							}
						}
						// allgather
						out := make([]byte, 8*m*n)
						src := bytesOf(in)
						if inPlace {
							copy(out[r*8*m:], src)
							src = out[r*8*m : (r+1)*8*m]
						}
						c.Ticket = g.Ticket()
						if err := g.Allgather(c, src, out); err != nil {
							return fmt.Errorf("allgather %d: %w", m, err)
						}
						for i, x := range f64s(out) {
							if q, j := i/max(m, 1), i%max(m, 1); x != val(q, j) {
								return fmt.Errorf("allgather %d: [%d] = %v, want %v", m, i, x, val(q, j))
							}
						}
						// reduce-scatter: block q of rank r's input is val(r, q*m+i)
						full := make([]float64, n*m)
						for i := range full {
							full[i] = val(r, i)
						}
						fb := bytesOf(full)
						rb := make([]byte, 8*m)
						if inPlace {
							rb = fb[r*8*m : (r+1)*8*m]
						}
						c.Ticket = g.Ticket()
						if err := g.ReduceScatter(c, fb, rb, sumF64()); err != nil {
							return fmt.Errorf("reducescatter %d: %w", m, err)
						}
						for i, x := range f64s(rb) {
							want := 0.0
							for q := range n {
								want += val(q, r*m+i)
							}
							if x != want {
								return fmt.Errorf("reducescatter %d: [%d] = %v, want %v", m, i, x, want)
							}
						}
						c.Ticket = g.Ticket()
						if err := g.Barrier(c); err != nil {
							return fmt.Errorf("barrier: %w", err)
						}
					}
					return nil
				})
			})
		}
	}
}

// TestSameBits checks that every rank gets the same bits from an allreduce
// whose sums round (the order of combination is fixed).
func TestSameBits(t *testing.T) {
	n, m := 7, 3000
	results := make([][]byte, n)
	runAll(t, n, Options{Slot: 8192, FlatMax: 512}, func(g *Group, c *Call) error {
		in := make([]float64, m)
		for i := range in {
			in[i] = 1 / float64(g.Rank()*m+i+3)
		}
		ob := make([]byte, 8*m)
		c.Ticket = g.Ticket()
		if err := g.Allreduce(c, bytesOf(in), ob, sumF64()); err != nil {
			return err
		}
		results[g.Rank()] = ob
		return nil
	})
	for r := 1; r < n; r++ {
		if string(results[r]) != string(results[0]) {
			t.Fatalf("rank %d's result differs from rank 0's", r)
		}
	}
}

// TestMismatch: ranks whose calls carry different signatures all fail
// with a MismatchError instead of reading each other's data.
func TestMismatch(t *testing.T) {
	gs, _ := NewLocal(3, Options{})
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Sig: uint32(r), Timeout: 5 * time.Second}
			errs[r] = gs[r].Barrier(c)
		}()
	}
	wg.Wait()
	for r, e := range errs {
		var m *MismatchError
		if !errors.As(e, &m) {
			t.Errorf("rank %d: %v, want a MismatchError", r, e)
		}
	}
}

// TestTimeoutNamesPeer: a rank that never arrives is named by the others.
func TestTimeoutNamesPeer(t *testing.T) {
	gs, _ := NewLocal(3, Options{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Timeout: 50 * time.Millisecond}
			errs[r] = gs[r].Allreduce(c, make([]byte, 64), make([]byte, 64), sumF64())
		}()
	}
	wg.Wait()
	for r, e := range errs {
		var w *WaitError
		if !errors.As(e, &w) || w.Peer != 2 || !errors.Is(e, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want a timeout waiting for rank 2", r, e)
		}
	}
	// The group is broken afterwards.
	c := &Call{Ctx: context.Background(), Ticket: gs[0].Ticket()}
	if err := gs[0].Barrier(c); !errors.Is(err, ErrBroken) {
		t.Errorf("after a failed call: %v, want ErrBroken", err)
	}
}

// TestStall: a wait for a rank that never arrives calls Call.Stall for it,
// with the call's number, before the call times out.
func TestStall(t *testing.T) {
	gs, _ := NewLocal(3, Options{})
	type stall struct {
		seq  uint32
		q    int
		what string
	}
	stalls := make([][]stall, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c := &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Seq: 7, Timeout: 2 * time.Second,
				StallAfter: 10 * time.Millisecond, Stall: func(seq uint32, q int, what string) {
					stalls[r] = append(stalls[r], stall{seq, q, what})
				}}
			errs[r] = gs[r].Allreduce(c, make([]byte, 64), make([]byte, 64), sumF64())
		})
	}
	wg.Wait()
	for r, e := range errs {
		var w *WaitError
		if !errors.As(e, &w) || w.Peer != 2 {
			t.Errorf("rank %d: %v, want a timeout waiting for rank 2", r, e)
		}
		// A slow start of the other rank may stall the call on it first.
		if n := len(stalls[r]); n == 0 || stalls[r][n-1].q != 2 || stalls[r][n-1].seq != 7 || stalls[r][n-1].what == "" {
			t.Errorf("rank %d: stalls %+v, want the last for rank 2 in call 7", r, stalls[r])
		}
	}
}

// TestTicketOrder: calls entered from several goroutines run in ticket
// order on every rank.
func TestTicketOrder(t *testing.T) {
	n, calls := 4, 20
	runAll(t, n, Options{}, func(g *Group, c0 *Call) error {
		tickets := make([]uint64, calls)
		for i := range tickets {
			tickets[i] = g.Ticket()
		}
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := calls - 1; i >= 0; i-- { // started in reverse
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := []float64{float64(i)}
				b := bytesOf(v)
				c := &Call{Ctx: context.Background(), Ticket: tickets[i], Sig: uint32(i), Timeout: 10 * time.Second}
				if errs[i] = g.Allreduce(c, b, b, sumF64()); errs[i] == nil && f64s(b)[0] != float64(n*i) {
					errs[i] = fmt.Errorf("call %d: got %v", i, f64s(b)[0])
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// runFailing runs fn on every rank of gs, each on its goroutine, as a job
// does: the first rank whose fn fails fails the job, and fail (for
// Call.Fail) gives the others that error. It returns each rank's error.
func runFailing(gs []*Group, fn func(g *Group, fail func() error) error) []error {
	errs := make([]error, len(gs))
	var failed atomic.Pointer[error]
	fail := func() error {
		if e := failed.Load(); e != nil {
			return *e
		}
		return nil
	}
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = fn(g, fail); errs[r] != nil {
				failed.CompareAndSwap(nil, &errs[r])
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestEarlierMismatch: ranks that each broadcast from themselves read
// nobody's flag; their next call finds the disagreement in the running
// hashes. A rank that finds it first fails the job (as the communicator
// does), which ends the others' waits with its error.
func TestEarlierMismatch(t *testing.T) {
	gs, _ := NewLocal(3, Options{})
	errs := runFailing(gs, func(g *Group, fail func() error) error {
		r := g.Rank()
		c := &Call{Ctx: context.Background(), Ticket: g.Ticket(), Sig: uint32(100 + r), Timeout: 5 * time.Second, Fail: fail}
		if err := g.Bcast(c, make([]byte, 8), r); err != nil {
			return fmt.Errorf("bcast: %w", err)
		}
		c = &Call{Ctx: context.Background(), Ticket: g.Ticket(), Sig: 7, Timeout: 5 * time.Second, Fail: fail}
		return g.Barrier(c)
	})
	for r, e := range errs {
		var m *MismatchError
		if !errors.As(e, &m) || !m.Earlier {
			t.Errorf("rank %d: %v, want a MismatchError about earlier calls", r, e)
		}
	}
}

// TestArrivals checks that the arrival stamps travel in the input flags:
// after each collective a rank holds its own stamp and that of every rank
// whose input it read: every rank's in allreduce (one phase, two phases,
// several chunks), allgather, reducescatter and barrier, the root's in
// bcast; in reduce the root reads every rank's, the others only in two
// phases (above FlatMax).
func TestArrivals(t *testing.T) {
	const n = 5
	o := Options{Slot: 4096, FlatMax: 256, RDMax: -1} // TestDoublingArrivals: with recursive doubling
	stamp := func(call, r int) uint64 { return uint64(call)<<16 | uint64(r+1) }
	runAll(t, n, o, func(g *Group, c *Call) error {
		r := g.Rank()
		call := 0
		c.Arrivals = make([]uint64, n)
		check := func(name string, readers func(q int) bool) error {
			got := c.Arrivals
			for q := range n {
				want := uint64(0)
				if q == r || readers(q) {
					want = stamp(call, q)
				}
				if got[q] != want {
					return fmt.Errorf("%s (call %d): rank %d's stamp %#x, want %#x", name, call, q, got[q], want)
				}
			}
			return nil
		}
		all := func(int) bool { return true }
		for _, m := range []int{1, 5, 6, 100, 1500} { // inline, one phase, two phases, several chunks
			in := bytesOf(make([]float64, m))
			out := make([]byte, len(in))
			c.Sig = uint32(m)
			call++
			c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
			if err := g.Allreduce(c, in, out, sumF64()); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("allreduce %d", m), all); err != nil {
				return err
			}
			call++
			c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
			if err := g.Reduce(c, in, out, sumF64(), 2); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("reduce %d", m), func(int) bool { return r == 2 || 8*m > o.FlatMax }); err != nil {
				return err
			}
			call++
			c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
			if err := g.Bcast(c, out, 3); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("bcast %d", m), func(q int) bool { return r != 3 && q == 3 }); err != nil {
				return err
			}
			call++
			c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
			if err := g.Allgather(c, in, make([]byte, n*len(in))); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("allgather %d", m), all); err != nil {
				return err
			}
			call++
			c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
			if err := g.ReduceScatter(c, bytesOf(make([]float64, n*m)), out, sumF64()); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("reducescatter %d", m), all); err != nil {
				return err
			}
		}
		call++
		c.Ticket, c.Arrive = g.Ticket(), stamp(call, r)
		if err := g.Barrier(c); err != nil {
			return err
		}
		return check("barrier", all)
	})
}

// TestConfirm: a call whose caller confirms it (Call.Confirmed) leaves the
// next call's entry alone, and Confirm finds the disagreement instead,
// whether it compares at the peer's last chunk (from the peer's done
// line) or at an earlier one (from its history): here rank 1 has gone on
// to chunk 2 when rank 0, still at chunk 1, confirms. With the same calls
// Confirm agrees on both ways.
func TestConfirm(t *testing.T) {
	for _, agree := range []bool{true, false} {
		gs, _ := NewLocal(2, Options{})
		call := func(r int, sig uint32) *Call {
			return &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Sig: sig, Timeout: 5 * time.Second, Confirmed: true}
		}
		confirm := func() *Call { // Confirm takes no turn
			return &Call{Ctx: context.Background(), Timeout: 5 * time.Second}
		}
		root1, sig1 := [2]int{0, 0}, [2]uint32{5, 5}
		if !agree {
			// Each rank broadcasts from itself: neither reads the other.
			root1, sig1 = [2]int{0, 1}, [2]uint32{5, 6}
		}
		var last [2]uint64
		var wg sync.WaitGroup
		errs := make([]error, 2)
		ahead := make(chan struct{})
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := call(r, sig1[r])
				if err := gs[r].Bcast(c, make([]byte, 8), root1[r]); err != nil {
					errs[r] = fmt.Errorf("first bcast: %w", err)
					return
				}
				last[r] = c.Last
				if r == 1 {
					// Chunk 2 from rank 1, which waits for nobody.
					if err := gs[1].Bcast(call(1, 9), make([]byte, 8), 1); err != nil {
						errs[1] = fmt.Errorf("second bcast: %w", err)
					}
					close(ahead)
					errs[1] = errors.Join(errs[1], gs[1].Confirm(confirm(), last[1], -1))
					return
				}
				<-ahead
				errs[0] = gs[0].Confirm(confirm(), last[0], -1)
				if err := gs[0].Bcast(call(0, 9), make([]byte, 8), 1); err != nil && errs[0] == nil {
					errs[0] = fmt.Errorf("second bcast: %w", err)
				}
			}()
		}
		wg.Wait()
		for r, e := range errs {
			var m *MismatchError
			switch {
			case agree && e != nil:
				t.Errorf("same calls, rank %d: %v", r, e)
			case !agree && (!errors.As(e, &m) || !m.Earlier || m.Peer != 1-r):
				t.Errorf("different roots, rank %d: %v, want a MismatchError naming rank %d", r, e, 1-r)
			}
		}
	}
}

// TestConfirmAggregator: with an aggregator, the ranks that are not it
// read its verification (or the rank it found disagreeing) instead of
// every rank's hash; a rank whose history differs from the aggregator's
// finds it in the aggregator's running hash even if the aggregator never
// confirms (it named another aggregator).
func TestConfirmAggregator(t *testing.T) {
	type plan struct {
		roots [3]int
		sigs  [3]uint32
		aggs  [3]int // the aggregator each rank names; -1: it confirms nothing
		want  [3]int // the rank each rank's MismatchError names; -1: success
	}
	for name, p := range map[string]plan{
		"agree":            {roots: [3]int{0, 0, 0}, sigs: [3]uint32{5, 5, 5}, aggs: [3]int{0, 0, 0}, want: [3]int{-1, -1, -1}},
		"agree at 1":       {roots: [3]int{1, 1, 1}, sigs: [3]uint32{5, 5, 5}, aggs: [3]int{1, 1, 1}, want: [3]int{-1, -1, -1}},
		"two roots":        {roots: [3]int{1, 1, 2}, sigs: [3]uint32{5, 5, 6}, aggs: [3]int{1, 1, 2}, want: [3]int{2, 2, 0}},
		"other aggregator": {roots: [3]int{0, 0, 2}, sigs: [3]uint32{5, 5, 6}, aggs: [3]int{-1, -1, 1}, want: [3]int{-1, -1, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			gs, _ := NewLocal(3, Options{})
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for r := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &Call{Ctx: context.Background(), Ticket: gs[r].Ticket(), Sig: p.sigs[r], Timeout: 5 * time.Second, Confirmed: true}
					if err := gs[r].Bcast(c, make([]byte, 8), p.roots[r]); err != nil {
						errs[r] = fmt.Errorf("bcast: %w", err)
						return
					}
					if p.aggs[r] >= 0 {
						errs[r] = gs[r].Confirm(&Call{Ctx: context.Background(), Timeout: 5 * time.Second}, c.Last, p.aggs[r])
					}
				}()
			}
			wg.Wait()
			for r, e := range errs {
				var m *MismatchError
				switch {
				case p.want[r] < 0 && e != nil:
					t.Errorf("rank %d: %v, want success", r, e)
				case p.want[r] >= 0 && (!errors.As(e, &m) || !m.Earlier || m.Peer != p.want[r]):
					t.Errorf("rank %d: %v, want a MismatchError naming rank %d", r, e, p.want[r])
				}
			}
		})
	}
}

// TestTryConfirm: TryConfirm reports false, publishing nothing, where
// Confirm would wait (the aggregator before the other rank finished the
// call, the other rank before the aggregator verified it), true once
// Confirm would return nil, and the MismatchError of a disagreement
// without waiting for anything.
func TestTryConfirm(t *testing.T) {
	for _, agree := range []bool{true, false} {
		gs, _ := NewLocal(2, Options{})
		sig1, root1 := uint32(5), 0
		if !agree {
			sig1, root1 = 6, 1 // rank 1 broadcasts from itself: neither reads the other
		}
		try := func(r int, f uint64) (bool, error) {
			return gs[r].TryConfirm(&Call{Ctx: context.Background()}, f, 0)
		}
		c0 := &Call{Ctx: context.Background(), Ticket: gs[0].Ticket(), Sig: 5, Timeout: 5 * time.Second, Confirmed: true}
		if err := gs[0].Bcast(c0, make([]byte, 8), 0); err != nil {
			t.Fatal(err)
		}
		if done, err := try(0, c0.Last); done || err != nil {
			t.Errorf("agree=%v: the aggregator before rank 1 ended the call: %v, %v; want false, nil", agree, done, err)
		}
		c1 := &Call{Ctx: context.Background(), Ticket: gs[1].Ticket(), Sig: sig1, Timeout: 5 * time.Second, Confirmed: true}
		if err := gs[1].Bcast(c1, make([]byte, 8), root1); err != nil {
			t.Fatal(err)
		}
		done1, err1 := try(1, c1.Last)
		done0, err0 := try(0, c0.Last)
		var m *MismatchError
		if agree {
			if done1 || err1 != nil {
				t.Errorf("rank 1 before the aggregator verified: %v, %v; want false, nil", done1, err1)
			}
			if !done0 || err0 != nil {
				t.Errorf("the aggregator once both ended: %v, %v; want true, nil", done0, err0)
			}
			if done, err := try(1, c1.Last); !done || err != nil {
				t.Errorf("rank 1 once the aggregator verified: %v, %v; want true, nil", done, err)
			}
			continue
		}
		if !errors.As(err1, &m) || !m.Earlier || m.Peer != 0 {
			t.Errorf("different roots, rank 1: %v, %v; want a MismatchError naming rank 0", done1, err1)
		}
		if !errors.As(err0, &m) || !m.Earlier || m.Peer != 1 {
			t.Errorf("different roots, rank 0: %v, %v; want a MismatchError naming rank 1", done0, err0)
		}
	}
}

// TestAllreduceChain: with the rank-order chain on (a small ChainMin and
// ChainRanks), allreduces whose chunks take it, one or several chunks,
// back to back, in and out of place, every dtype's reducer of the test
// (sum of float64s), give every rank the rank-order sum bit for bit, the
// same bits as the two phases (the chain off), for 2, 3, 5 and 8 ranks.
func TestAllreduceChain(t *testing.T) {
	counts := []int{600, 1500, 4096, 9001}
	for _, n := range []int{2, 3, 5, 8} {
		results := map[bool][][]byte{}
		for _, on := range []bool{true, false} {
			o := Options{Slot: 8192, FlatMax: 256, ChainMin: 1024, ChainRanks: 2}
			if !on {
				o.ChainMin = -1
			}
			outs := make([][]byte, n)
			var mu sync.Mutex
			runAll(t, n, o, func(g *Group, c *Call) error {
				r := g.Rank()
				var all []byte
				for k, m := range counts {
					in := make([]float64, m)
					for i := range in {
						in[i] = val(r, i) * (1 + 1e-7*float64(k+r))
					}
					ib := bytesOf(in)
					ob := make([]byte, len(ib))
					if k%2 == 1 {
						ob = ib
					}
					c.Sig, c.Ticket = uint32(m), g.Ticket()
					if err := g.Allreduce(c, ib, ob, sumF64()); err != nil {
						return fmt.Errorf("allreduce %d: %w", m, err)
					}
					for i, x := range f64s(ob) {
						want := 0.0
						for q := range n {
							want += val(q, i) * (1 + 1e-7*float64(k+q))
						}
						if x != want {
							return fmt.Errorf("allreduce %d: [%d] = %v, want %v (rank order)", m, i, x, want)
						}
					}
					all = append(all, ob...)
				}
				mu.Lock()
				outs[r] = all
				mu.Unlock()
				return nil
			})
			results[on] = outs
		}
		for r := range n {
			if !bytes.Equal(results[true][r], results[false][r]) || !bytes.Equal(results[true][r], results[true][0]) {
				t.Errorf("n=%d rank %d: the chain's bits differ from the two phases' or from rank 0's", n, r)
			}
		}
	}
}

// bcastByte is byte i of the k-th broadcast's data.
func bcastByte(k, i int) byte { return byte(k*131 + i*7 + i>>8) }

// TestBcastChunks checks broadcasts cut in chunks smaller than the slot
// (parts of the slot, up to eight in flight) and placed in quarter parts:
// sizes of one byte, inside a flag line, at and around chunk and slot
// boundaries and not multiples of the chunk, from every root, with
// allgathers and allreduces in whole slots between them, so that the
// claims cross from one layout to the other both ways.
func TestBcastChunks(t *testing.T) {
	const slot = 4096
	for _, n := range []int{2, 3, 5} {
		for _, seg := range []int{0, 64, 1000, 1024, slot} {
			t.Run(fmt.Sprintf("n%d/seg%d", n, seg), func(t *testing.T) {
				g0 := seg &^ (lineSize - 1)
				if g0 == 0 {
					g0 = slot / 4
				}
				sizes := []int{0, 1, 39, 40, 41, 63, 64, 65, g0 - 1, g0, g0 + 1, 3*g0 + 7, 8*g0 + 1,
					slot/4 - 1, slot / 4, slot/4 + 1, slot - 1, slot, slot + 1, 5*slot + 3}
				runAll(t, n, Options{Slot: slot, FlatMax: 256, BcastSeg: seg}, func(g *Group, c *Call) error {
					r := g.Rank()
					for k, m := range sizes {
						for rep := range 3 {
							root := (k + rep) % n
							buf := make([]byte, m)
							for i := range buf {
								if r == root {
									buf[i] = bcastByte(k+rep, i)
								} else {
									buf[i] = 0xee
								}
							}
							c.Sig, c.Ticket = uint32(2*k+1), g.Ticket()
							if err := g.Bcast(c, buf, root); err != nil {
								return fmt.Errorf("bcast %d B from %d: %w", m, root, err)
							}
							for i, x := range buf {
								if want := bcastByte(k+rep, i); x != want {
									return fmt.Errorf("bcast %d B from %d: [%d] = %d, want %d", m, root, i, x, want)
								}
							}
						}
						// Whole slots between the broadcasts.
						in := make([]float64, m/8+1)
						for i := range in {
							in[i] = val(r, i)
						}
						out := make([]byte, 8*len(in)*n)
						c.Sig, c.Ticket = uint32(2*k+2), g.Ticket()
						if err := g.Allgather(c, bytesOf(in), out); err != nil {
							return fmt.Errorf("allgather after bcast %d B: %w", m, err)
						}
						for i, x := range f64s(out) {
							if q, j := i/len(in), i%len(in); x != val(q, j) {
								return fmt.Errorf("allgather after bcast %d B: [%d] = %v, want %v", m, i, x, val(q, j))
							}
						}
						ob := make([]byte, 8*len(in))
						c.Ticket = g.Ticket()
						if err := g.Allreduce(c, bytesOf(in), ob, sumF64()); err != nil {
							return fmt.Errorf("allreduce after bcast %d B: %w", m, err)
						}
						if err := checkSum(ob, n, val); err != nil {
							return fmt.Errorf("allreduce after bcast %d B: %w", m, err)
						}
					}
					return nil
				})
			})
		}
	}
}

// TestBcastChunkDisagree: ranks told different broadcast chunks either
// agree on a call of one chunk (whose place in the slot travels with it)
// or fail it with a mismatch; they never take wrong data.
func TestBcastChunkDisagree(t *testing.T) {
	const slot = 4096
	for _, tc := range []struct {
		segs     [2]int
		size     int
		mismatch bool
	}{
		{[2]int{0, 512}, 300, false},   // one chunk: a quarter part against an eighth
		{[2]int{2048, 64}, 60, false},  // one chunk both ways
		{[2]int{0, 512}, 1000, true},   // 1000 B against 512 + 488
		{[2]int{1024, 0}, 5000, true},  // 1024-byte chunks against whole slots
		{[2]int{0, 1024}, 1024, false}, // a quarter part both ways
		{[2]int{0, 1024}, 3000, true},  // one slot-sized chunk against three
		{[2]int{64, 128}, 4096, true},  // 64 chunks against 32
		{[2]int{slot, 0}, 4097, false}, // whole slots both ways
		{[2]int{slot, 0}, 100, false},  // one chunk at different places
		{[2]int{100, 0}, 100, true},    // 64-byte chunks (100 rounded down) against one
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.segs, tc.size), func(t *testing.T) {
			gs, err := NewLocal(2, Options{Slot: slot})
			if err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				gs[r].bcastSeg = tc.segs[r]
			}
			errs := make([]error, 2)
			bufs := make([][]byte, 2)
			var failed atomic.Bool // the reader's call failed: the root's ends too
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g := gs[r]
					bufs[r] = make([]byte, tc.size)
					for rep := range 3 { // successive parts of the slots
						for i := range bufs[r] {
							bufs[r][i] = 0xee
							if r == 0 {
								bufs[r][i] = bcastByte(rep, i)
							}
						}
						c := &Call{Ctx: context.Background(), Ticket: g.Ticket(), Sig: 7, Timeout: 5 * time.Second,
							Fail: func() error {
								if failed.Load() {
									return errors.New("the reader failed")
								}
								return nil
							}}
						if errs[r] = g.Bcast(c, bufs[r], 0); errs[r] != nil {
							failed.Store(true)
							return
						}
						if r == 1 {
							for i, x := range bufs[r] {
								if want := bcastByte(rep, i); x != want {
									errs[r] = fmt.Errorf("call %d: [%d] = %d, want %d", rep, i, x, want)
									failed.Store(true)
									return
								}
							}
						}
					}
				}()
			}
			wg.Wait()
			var m *MismatchError
			switch {
			case tc.mismatch && !errors.As(errs[1], &m):
				t.Errorf("reader: %v, want a MismatchError", errs[1])
			case !tc.mismatch && (errs[0] != nil || errs[1] != nil):
				t.Errorf("root: %v, reader: %v; want both to succeed", errs[0], errs[1])
			}
		})
	}
}

// checkSum checks that ob, float64s, holds at each i the sum over the n
// ranks q of val(q, i), added in rank order.
func checkSum(ob []byte, n int, val func(q, i int) float64) error {
	for i, x := range f64s(ob) {
		want := 0.0
		for q := range n {
			want += val(q, i)
		}
		if x != want {
			return fmt.Errorf("[%d] = %v, want %v", i, x, want)
		}
	}
	return nil
}

// TestAllgatherParts checks allgathers, reduce-scatters and allreduces
// whose chunks take at most a quarter slot, which go round the quarter
// parts of the slots, back to back with data
// that changes every call, between calls that use whole slots (a larger
// allgather, an allreduce of two phases) and with ranks that lag by
// turns, so that a reader reads a part while its writer has gone on to
// the next ones.
func TestAllgatherParts(t *testing.T) {
	const slot = 4096
	sizes := []int{41, 64, 1000, slot/4 - 8, slot / 4, slot/4 + 8, slot, 3*slot + 8}
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			runAll(t, n, Options{Slot: slot, FlatMax: 256}, func(g *Group, c *Call) error {
				r := g.Rank()
				for k, blk := range sizes {
					for rep := range 11 {
						if (rep+k)%n == r {
							time.Sleep(time.Duration(rep%3) * 50 * time.Microsecond)
						}
						in := make([]byte, blk)
						for i := range in {
							in[i] = bcastByte(r*31+k*7+rep, i)
						}
						out := make([]byte, n*blk)
						c.Sig, c.Ticket = uint32(k*16+rep), g.Ticket()
						if err := g.Allgather(c, in, out); err != nil {
							return fmt.Errorf("allgather of %d B, call %d: %w", blk, rep, err)
						}
						for i, x := range out {
							q, j := i/blk, i%blk
							if want := bcastByte(q*31+k*7+rep, j); x != want {
								return fmt.Errorf("allgather of %d B, call %d: block %d [%d] = %d, want %d", blk, rep, q, j, x, want)
							}
						}
						// A reduce-scatter whose input (n blocks) of m
						// float64s a block takes a part as well, or not.
						m := blk/(8*n) + 1
						full := make([]float64, n*m)
						for i := range full {
							full[i] = val(r, i+rep)
						}
						rb := make([]byte, 8*m)
						c.Sig, c.Ticket = uint32(1<<19+k*16+rep), g.Ticket()
						if err := g.ReduceScatter(c, bytesOf(full), rb, sumF64()); err != nil {
							return fmt.Errorf("reducescatter of %d×%d float64s, call %d: %w", n, m, rep, err)
						}
						for i, x := range f64s(rb) {
							want := 0.0
							for q := range n {
								want += val(q, r*m+i+rep)
							}
							if x != want {
								return fmt.Errorf("reducescatter of %d×%d float64s, call %d: [%d] = %v, want %v", n, m, rep, i, x, want)
							}
						}
						// An allreduce of as many float64s: two phases
						// above FlatMax, each phase's chunks in parts.
						ar := make([]float64, blk/8+1)
						for i := range ar {
							ar[i] = val(r, i+rep)
						}
						ab := make([]byte, 8*len(ar))
						c.Sig, c.Ticket = uint32(1<<18+k*16+rep), g.Ticket()
						if err := g.Allreduce(c, bytesOf(ar), ab, sumF64()); err != nil {
							return fmt.Errorf("allreduce of %d float64s, call %d: %w", len(ar), rep, err)
						}
						if err := checkSum(ab, n, func(q, i int) float64 { return val(q, i+rep) }); err != nil {
							return fmt.Errorf("allreduce of %d float64s, call %d: %w", len(ar), rep, err)
						}
						if rep%4 == 3 {
							// Whole slots between them.
							ib := bytesOf([]float64{val(r, 0), val(r, 1), val(r, 2)})
							big := make([]byte, slot/2+8)
							ib = append(ib, big...)
							ob := make([]byte, len(ib))
							c.Sig, c.Ticket = uint32(1<<20+k*16+rep), g.Ticket()
							if err := g.Allreduce(c, ib, ob, sumF64()); err != nil {
								return fmt.Errorf("allreduce after allgather of %d B: %w", blk, err)
							}
							if got, want := f64s(ob[:24]), []float64{0, 0, 0}; len(got) == 3 {
								for q := range n {
									for i := range want {
										want[i] += val(q, i)
									}
								}
								for i := range want {
									if got[i] != want[i] {
										return fmt.Errorf("allreduce after allgather of %d B: [%d] = %v, want %v", blk, i, got[i], want[i])
									}
								}
							}
						}
					}
				}
				return nil
			})
		})
	}
}

// TestBcastChunksStreamed runs TestBcastChunks with every output written
// by non-temporal stores (par.CopyOut), whatever its size: the copies
// out of broadcasts, allgathers and two-phase allreduces.
func TestBcastChunksStreamed(t *testing.T) {
	defer par.SetStreamMin(1)()
	TestBcastChunks(t)
}

// TestChainStreamed runs TestAllreduceChain and TestPAP with every output
// written by non-temporal stores (par.CopyOut), whatever its size: the
// chain's copies out, its last rank's and the others'.
func TestChainStreamed(t *testing.T) {
	defer par.SetStreamMin(1)()
	t.Run("chain", TestAllreduceChain)
	t.Run("pap", TestPAP)
}

// TestPace: a call, and a confirmation, of a rank with a core of its own
// (a positive Spin) yield for OwnCoreYield before they sleep; others keep
// the backoff's own yield phase.
func TestPace(t *testing.T) {
	for _, spin := range []time.Duration{0, -1, 50 * time.Microsecond} {
		want := time.Duration(0)
		if spin > 0 {
			want = OwnCoreYield
		}
		gs := areaGroups(t, 1, Options{})
		c := &Call{Ctx: context.Background(), Ticket: gs[0].Ticket(), Sig: 1, Timeout: 5 * time.Second, Spin: spin}
		c.bo.Yield = time.Hour // what an earlier policy left
		v := make([]byte, 8)
		if err := gs[0].Allreduce(c, v, v, sumF64()); err != nil {
			t.Fatal(err)
		}
		if c.bo.Yield != want || c.bo.Spin != spin {
			t.Errorf("Spin %v: a call yields for %v (spin %v), want %v", spin, c.bo.Yield, c.bo.Spin, want)
		}
		k := &Call{Ctx: context.Background(), Timeout: 5 * time.Second, Spin: spin}
		k.bo.Yield = time.Hour
		if err := gs[0].Confirm(k, c.Last, 0); err != nil {
			t.Fatal(err)
		}
		if k.bo.Yield != want {
			t.Errorf("Spin %v: a confirmation yields for %v, want %v", spin, k.bo.Yield, want)
		}
	}
}
