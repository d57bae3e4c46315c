package shmcoll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport/shmreg"
)

// testMem is one goroutine rank's registered memory: pools in Go memory,
// or file pools that every rank opens the others' of and reads through its
// registration cache, as processes do.
type testMem struct {
	rank  int
	pools []*shmreg.Pool
	peers []*shmreg.Peer // file pools: this rank's views of the others'
	lie   bool           // publish a wrong generation
}

func (m *testMem) Find(b []byte) (shmreg.Ref, uint64, bool) {
	p := m.pools[m.rank]
	if !p.Shared() {
		return shmreg.Ref{}, 0, false
	}
	r, off, ok := p.Find(b)
	if ok && m.lie {
		p.Unpin(r)
		r.Gen += 1000
	}
	return r, off, ok
}

func (m *testMem) Unpin(r shmreg.Ref) { m.pools[m.rank].Unpin(r) }

func (m *testMem) Map(q int, r shmreg.Ref) ([]byte, error) {
	if m.peers != nil {
		return m.peers[q].Get(r)
	}
	return m.pools[q].Get(r)
}

// memories returns the registered memory of n goroutine ranks.
func memories(t testing.TB, n int, file bool) []*testMem {
	t.Helper()
	pools := make([]*shmreg.Pool, n)
	for r := range pools {
		pools[r] = shmreg.NewMem()
		if file {
			p, err := shmreg.Create(t.TempDir(), []byte("s"), n-1)
			if err != nil {
				t.Fatal(err)
			}
			pools[r] = p
			t.Cleanup(func() { p.Close() })
		}
	}
	ms := make([]*testMem, n)
	for r := range ms {
		ms[r] = &testMem{rank: r, pools: pools}
		if file {
			ms[r].peers = make([]*shmreg.Peer, n)
			for q := range n {
				if q == r {
					continue
				}
				p, err := shmreg.Open(pools[q].Path(), []byte("s"))
				if err != nil {
					t.Fatal(err)
				}
				ms[r].peers[q] = p
				t.Cleanup(func() { p.Close() })
			}
		}
	}
	return ms
}

// regBuf returns nbytes of rank m's registered memory if reg is set, else
// of Go memory, and a function that frees it.
func regBuf(m *testMem, nbytes int, reg bool) ([]byte, func() error) {
	if !reg || nbytes == 0 {
		return make([]byte, nbytes), func() error { return nil }
	}
	b, err := m.pools[m.rank].Alloc(nbytes)
	if err != nil {
		panic(err)
	}
	return b, func() error { return m.pools[m.rank].Free(b) }
}

// TestDirect runs every collective that publishes by reference with
// inputs in registered memory on some ranks and in Go memory on others
// (which ones changes from call to call), in place and not, over pools in
// Go memory and in files, with buffers allocated and freed around every
// call so that ids and ranges are reused with new generations. After each
// call a rank that published by reference checks that every rank has
// finished reading what it published, then scribbles over its input: a
// writer that returned before its readers were done would show as a wrong
// result (or, under the race detector, a race).
func TestDirect(t *testing.T) {
	o := Options{Slot: 4096, FlatMax: 256}
	counts := []int{0, 1, 5, 33, 513, 1500, 2049}
	for _, file := range []bool{false, true} {
		for _, n := range []int{1, 2, 3, 5, 8} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("file=%v/n%d/inplace=%v", file, n, inPlace), func(t *testing.T) {
					ms := memories(t, n, file)
					var published, read atomic.Uint64
					runCancel(t, n, o, func(g *Group, c *Call) error {
						r := g.Rank()
						m := ms[r]
						g.SetMemory(m, 1)
						defer func() {
							p, q := g.DirectStats()
							published.Add(p)
							read.Add(q)
						}()
						call := 0
						// run makes one call with this rank's input in
						// registered memory or not, checks its result,
						// checks that the readers are done if it
						// published by reference, and scribbles over the
						// input.
						run := func(name string, in []byte, fn func() error, check func() error) error {
							call++
							before, _ := g.DirectStats()
							c.Ticket = g.Ticket()
							if err := fn(); err != nil {
								return fmt.Errorf("%s (call %d): %w", name, call, err)
							}
							if after, _ := g.DirectStats(); after != before {
								for q := range n {
									if d := atomic.LoadUint64(u64(g.line(q, lineDone))); q != r && d < g.lastPub {
										return fmt.Errorf("%s (call %d): returned while rank %d has finished chunk %d, before this rank's chunk %d published by reference", name, call, q, d, g.lastPub)
									}
								}
							}
							if err := check(); err != nil {
								return fmt.Errorf("%s (call %d): %w", name, call, err)
							}
							for i := range in {
								in[i] = 0xEE
							}
							return nil
						}
						for _, cnt := range counts {
							c.Sig = uint32(cnt)
							reg := func() bool { return (r+call)%3 != 0 }
							want := func(i int) float64 {
								s := 0.0
								for q := range n {
									s += val(q, i)
								}
								return s
							}
							// allreduce
							ib, free := regBuf(m, 8*cnt, reg())
							copy(ib, bytesOf(vals(r, cnt)))
							ob := make([]byte, len(ib))
							if inPlace {
								ob = ib
							}
							err := run("allreduce", ib, func() error { return g.Allreduce(c, ib, ob, sumF64()) }, func() error {
								for i, x := range f64s(ob) {
									if x != want(i) {
										return fmt.Errorf("[%d] = %v, want %v", i, x, want(i))
									}
								}
								return nil
							})
							if err != nil {
								return err
							}
							if err := free(); err != nil {
								return err
							}
							// reduce to rank n-1
							ib, free = regBuf(m, 8*cnt, reg())
							copy(ib, bytesOf(vals(r, cnt)))
							ob = make([]byte, len(ib))
							err = run("reduce", ib, func() error { return g.Reduce(c, ib, ob, sumF64(), n-1) }, func() error {
								for i, x := range f64s(ob) {
									if r == n-1 && x != want(i) {
										return fmt.Errorf("[%d] = %v, want %v", i, x, want(i))
									}
								}
								return nil
							})
							if err != nil {
								return err
							}
							free()
							// bcast from rank 1 (0 on one rank)
							root := min(1, n-1)
							bb, free := regBuf(m, 8*cnt, reg())
							if r == root {
								copy(bb, bytesOf(vals(root, cnt)))
							}
							err = run("bcast", bb, func() error { return g.Bcast(c, bb, root) }, func() error {
								for i, x := range f64s(bb) {
									if x != val(root, i) {
										return fmt.Errorf("[%d] = %v, want %v", i, x, val(root, i))
									}
								}
								return nil
							})
							if err != nil {
								return err
							}
							free()
							// allgather
							out, freeOut := regBuf(m, 8*cnt*n, reg())
							src, free := regBuf(m, 8*cnt, reg())
							copy(src, bytesOf(vals(r, cnt)))
							if inPlace {
								copy(out[r*8*cnt:], src)
								free()
								src, free = out[r*8*cnt:(r+1)*8*cnt], func() error { return nil }
							}
							err = run("allgather", src, func() error { return g.Allgather(c, src, out) }, func() error {
								for i, x := range f64s(out) {
									if q, j := i/max(cnt, 1), i%max(cnt, 1); x != val(q, j) {
										return fmt.Errorf("[%d] = %v, want %v", i, x, val(q, j))
									}
								}
								return nil
							})
							if err != nil {
								return err
							}
							free()
							freeOut()
							// reduce-scatter: block q of rank r's input is val(r, q*cnt+i)
							fb, free := regBuf(m, 8*cnt*n, reg())
							copy(fb, bytesOf(vals(r, cnt*n)))
							rb := make([]byte, 8*cnt)
							if inPlace {
								rb = fb[r*8*cnt : (r+1)*8*cnt]
							}
							err = run("reducescatter", fb, func() error { return g.ReduceScatter(c, fb, rb, sumF64()) }, func() error {
								for i, x := range f64s(rb) {
									if x != want(r*cnt+i) {
										return fmt.Errorf("[%d] = %v, want %v", i, x, want(r*cnt+i))
									}
								}
								return nil
							})
							if err != nil {
								return err
							}
							free()
						}
						c.Ticket = g.Ticket()
						return g.Barrier(c)
					})
					if n > 1 && (published.Load() == 0 || read.Load() == 0) {
						t.Errorf("%d chunks published and %d read by reference: the test did not test that", published.Load(), read.Load())
					}
				})
			}
		}
	}
}

// runCancel is runAll, but the first rank to fail ends the others' waits.
func runCancel(t *testing.T, n int, o Options, fn func(g *Group, c *Call) error) {
	t.Helper()
	gs, err := NewLocal(n, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = fn(gs[r], &Call{Ctx: ctx, Timeout: 20 * time.Second}); errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for r, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			t.Fatalf("rank %d: %v", r, e)
		}
	}
}

func vals(r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = val(r, i)
	}
	return v
}

// TestDirectStale: a writer that publishes a reference its pool does not
// hold (a wrong generation) makes every reader fail naming it, and itself
// fails waiting for them, instead of anyone reading other memory.
func TestDirectStale(t *testing.T) {
	for _, file := range []bool{false, true} {
		n := 3
		ms := memories(t, n, file)
		ms[0].lie = true
		gs, _ := NewLocal(n, Options{Slot: 4096})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := gs[r]
				g.SetMemory(ms[r], 1)
				in, _ := regBuf(ms[r], 800, true)
				c := &Call{Ctx: context.Background(), Ticket: g.Ticket(), Timeout: 300 * time.Millisecond}
				errs[r] = g.Allgather(c, in, make([]byte, 800*n))
			}()
		}
		wg.Wait()
		for r, err := range errs {
			var de *DirectError
			var se *shmreg.StaleError
			var we *WaitError
			switch {
			case r == 0 && !errors.As(err, &we):
				t.Errorf("file=%v: rank 0: %v, want a wait for its readers that ends", file, err)
			case r > 0 && (!errors.As(err, &de) || de.Peer != 0 || !errors.As(err, &se)):
				t.Errorf("file=%v: rank %d: %v, want a DirectError naming rank 0's stale reference", file, r, err)
			}
		}
	}
}

// BenchmarkDirect times allgather, reduce-scatter and allreduce of two
// goroutine ranks with their inputs copied into the area (plain) and read
// in place from registered memory in a file pool (registered), per call
// (bytes: the whole vector, as braid bench counts it).
func BenchmarkDirect(b *testing.B) {
	for _, coll := range []string{"allgather", "reducescatter", "allreduce"} {
		for _, size := range []int{256 << 10, 4 << 20, 16 << 20} {
			for _, reg := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dK/registered=%v", coll, size>>10, reg)
				b.Run(name, func(b *testing.B) {
					const n = 2
					ms := memories(b, n, true)
					gs, err := NewLocal(n, Options{})
					if err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(size))
					var wg sync.WaitGroup
					errs := make([]error, n)
					for r := range n {
						wg.Add(1)
						go func() {
							defer wg.Done()
							g := gs[r]
							if reg {
								g.SetMemory(ms[r], 0)
							}
							in, _ := regBuf(ms[r], size, reg)
							out, _ := regBuf(ms[r], size, reg)
							switch coll {
							case "allgather":
								in = in[:size/n]
							case "reducescatter":
								out = out[:size/n]
							}
							c := &Call{Ctx: context.Background(), Timeout: time.Minute}
							for range b.N {
								c.Ticket = g.Ticket()
								switch coll {
								case "allgather":
									errs[r] = g.Allgather(c, in, out)
								case "reducescatter":
									errs[r] = g.ReduceScatter(c, in, out, sumF64())
								default:
									errs[r] = g.Allreduce(c, in, out, sumF64())
								}
								if errs[r] != nil {
									return
								}
							}
						}()
					}
					wg.Wait()
					for r, err := range errs {
						if err != nil {
							b.Fatalf("rank %d: %v", r, err)
						}
					}
				})
			}
		}
	}
}
