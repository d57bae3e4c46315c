package check

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// opsOf lists the ops to try for coll on d: every supported one for the
// reducing collectives, Sum (ignored) for the others.
func opsOf(coll sched.Collective, d dtype.DType) []dtype.Op {
	if !coll.Reduces() {
		return []dtype.Op{dtype.Sum}
	}
	var ops []dtype.Op
	for _, o := range dtype.AllOps() {
		if dtype.Supports(d, o) {
			ops = append(ops, o)
		}
	}
	return ops
}

// expectedOut builds rank's correct output for p from Expected and the
// package's encoding.
func expectedOut(p sched.Params, d dtype.DType, op dtype.Op, rank, salt int) []byte {
	es := d.Size()
	out := make([]byte, p.OutLen(rank)*es)
	for j := range p.OutLen(rank) {
		put(d, out[j*es:], wrap(d, Expected(p, op, rank, j, salt)))
	}
	return out
}

func TestValueRange(t *testing.T) {
	for _, op := range dtype.AllOps() {
		for rank := range 4 {
			for i := range 100 {
				v := Value(op, rank, i, 17)
				if v != math.Trunc(v) || v < 1 || v > 5 || (op == dtype.Prod && v > 2) {
					t.Fatalf("Value(%v, %d, %d) = %v", op, rank, i, v)
				}
				if v != Value(op, rank, i, 17) {
					t.Fatal("Value is not deterministic")
				}
			}
		}
	}
}

func TestEncodingRoundTrip(t *testing.T) {
	for _, d := range dtype.All() {
		es := d.Size()
		buf := make([]byte, es)
		for _, v := range []float64{0, 1, 2, 3, 5, 16, 20, 64, 100} {
			put(d, buf, v)
			if got := get(d, buf); got != v {
				t.Errorf("%v: put/get %v gives %v", d, v, got)
			}
		}
	}
	// Integers wrap like the kernels: 256 is 0 in 8 bits.
	if wrap(dtype.Uint8, 256) != 0 || wrap(dtype.Int8, 128) != -128 || wrap(dtype.Int32, 1<<31) != -(1<<31) {
		t.Error("wrap does not wrap integers")
	}
}

func TestFillOffset(t *testing.T) {
	for _, d := range dtype.All() {
		es := d.Size()
		buf := make([]byte, 10*es)
		Fill(d, dtype.Sum, buf, 2, 5, 3)
		for i := range 10 {
			if got, want := get(d, buf[i*es:]), Value(dtype.Sum, 2, 5+i, 3); got != want {
				t.Fatalf("%v element %d: %v, want %v", d, i, got, want)
			}
		}
	}
}

// TestExpectedDefinition checks Expected against the collectives'
// definitions written out independently.
func TestExpectedDefinition(t *testing.T) {
	const n, count, salt = 3, 4, 9
	sum := func(op dtype.Op, i int) float64 {
		s := 0.0
		for r := range n {
			s += Value(op, r, i, salt)
		}
		return s
	}
	for rank := range n {
		for j := range count {
			p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: count}
			if got, want := Expected(p, dtype.Sum, rank, j, salt), sum(dtype.Sum, j); got != want {
				t.Errorf("allreduce sum [%d]: %v, want %v", j, got, want)
			}
			if got, want := Expected(p, dtype.Avg, rank, j, salt), sum(dtype.Avg, j)/n; got != want {
				t.Errorf("allreduce avg [%d]: %v, want %v", j, got, want)
			}
			mx := 0.0
			for r := range n {
				mx = math.Max(mx, Value(dtype.Max, r, j, salt))
			}
			if got := Expected(p, dtype.Max, rank, j, salt); got != mx {
				t.Errorf("allreduce max [%d]: %v, want %v", j, got, mx)
			}
			p.Coll = sched.ReduceScatter
			if got, want := Expected(p, dtype.Sum, rank, j, salt), sum(dtype.Sum, rank*count+j); got != want {
				t.Errorf("reducescatter rank %d [%d]: %v, want %v", rank, j, got, want)
			}
			p = sched.Params{Coll: sched.Bcast, NRanks: n, Count: count, Root: 2}
			if got, want := Expected(p, 0, rank, j, salt), Value(0, 2, j, salt); got != want {
				t.Errorf("bcast [%d]: %v, want %v", j, got, want)
			}
			p = sched.Params{Coll: sched.Scatter, NRanks: n, Count: count, Root: 1}
			if got, want := Expected(p, 0, rank, j, salt), Value(0, 1, rank*count+j, salt); got != want {
				t.Errorf("scatter [%d]: %v, want %v", j, got, want)
			}
		}
		for j := range n * count {
			p := sched.Params{Coll: sched.Allgather, NRanks: n, Count: count}
			if got, want := Expected(p, 0, rank, j, salt), Value(0, j/count, j%count, salt); got != want {
				t.Errorf("allgather [%d]: %v, want %v", j, got, want)
			}
			p.Coll = sched.Alltoall
			if got, want := Expected(p, 0, rank, j, salt), Value(0, j/count, rank*count+j%count, salt); got != want {
				t.Errorf("alltoall rank %d [%d]: %v, want %v", rank, j, got, want)
			}
		}
	}
}

// TestVerifyAcceptsAndRejects builds the correct output of several
// collectives for every dtype and op, checks that Verify accepts it, and
// that it rejects the same output with any single element changed, or
// with the wrong length.
func TestVerifyAcceptsAndRejects(t *testing.T) {
	const n, count, salt = 4, 5, 11
	colls := []sched.Collective{sched.Allreduce, sched.Reduce, sched.ReduceScatter, sched.Bcast,
		sched.Allgather, sched.Gather, sched.Scatter, sched.Alltoall}
	for _, coll := range colls {
		for _, d := range dtype.All() {
			es := d.Size()
			for _, op := range opsOf(coll, d) {
				p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: 1}
				for rank := range n {
					out := expectedOut(p, d, op, rank, salt)
					if err := Verify(p, d, op, rank, out, salt); err != nil {
						t.Errorf("%v %v %v rank %d: correct output rejected: %v", coll, d, op, rank, err)
						continue
					}
					for j := range len(out) / es {
						bad := append([]byte(nil), out...)
						put(d, bad[j*es:], get(d, bad[j*es:])+1)
						err := Verify(p, d, op, rank, bad, salt)
						if err == nil {
							t.Errorf("%v %v %v rank %d: element %d changed, accepted", coll, d, op, rank, j)
							continue
						}
						if !strings.Contains(err.Error(), "1 wrong elements") {
							t.Errorf("%v %v %v rank %d: %v, want one wrong element", coll, d, op, rank, err)
						}
					}
					if err := Verify(p, d, op, rank, append(out, make([]byte, es)...), salt); err == nil {
						t.Errorf("%v %v %v rank %d: longer output accepted", coll, d, op, rank)
					}
					if len(out) > 0 {
						if err := Verify(p, d, op, rank, out[:len(out)-es], salt); err == nil {
							t.Errorf("%v %v %v rank %d: shorter output accepted", coll, d, op, rank)
						}
					}
				}
			}
		}
	}
}

func TestVerifyWrongSalt(t *testing.T) {
	p := sched.Params{Coll: sched.Allgather, NRanks: 3, Count: 64}
	out := expectedOut(p, dtype.Float32, dtype.Sum, 0, 1)
	if Verify(p, dtype.Float32, dtype.Sum, 0, out, 2) == nil {
		t.Error("output of another salt accepted")
	}
}

// TestVerifyRealJob runs collectives on a 3-rank local job for every dtype
// and checks that Verify accepts what the library computed and rejects it
// with one element changed.
func TestVerifyRealJob(t *testing.T) {
	const n, count = 3, 7
	comms, err := braid.NewLocal(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		p   sched.Params
		d   dtype.DType
		op  dtype.Op
		out []byte
	}
	results := make([][]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := comms[r]
			for _, coll := range []sched.Collective{sched.Allreduce, sched.ReduceScatter, sched.Allgather, sched.Alltoall} {
				for _, d := range dtype.All() {
					for _, op := range opsOf(coll, d) {
						p := sched.Params{Coll: coll, NRanks: n, Count: count}
						salt := int(coll)*1000 + int(d)*10 + int(op)
						in := make([]byte, p.InLen(r)*d.Size())
						out := make([]byte, p.OutLen(r)*d.Size())
						FillInput(p, d, op, in, r, salt)
						send, recv := braid.Raw{Bytes: in, Type: d}, braid.Raw{Bytes: out, Type: d}
						var err error
						switch coll {
						case sched.Allreduce:
							err = c.Allreduce(ctx, send, recv, op)
						case sched.ReduceScatter:
							err = c.ReduceScatter(ctx, send, recv, op)
						case sched.Allgather:
							err = c.Allgather(ctx, send, recv)
						case sched.Alltoall:
							err = c.Alltoall(ctx, send, recv)
						}
						if err != nil {
							errs[r] = err
							return
						}
						results[r] = append(results[r], result{p, d, op, out})
					}
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range n {
		for _, res := range results[r] {
			salt := int(res.p.Coll)*1000 + int(res.d)*10 + int(res.op)
			if err := Verify(res.p, res.d, res.op, r, res.out, salt); err != nil {
				t.Errorf("rank %d: %v", r, err)
				continue
			}
			es := res.d.Size()
			j := (r + 1) % (len(res.out) / es)
			put(res.d, res.out[j*es:], get(res.d, res.out[j*es:])+1)
			if Verify(res.p, res.d, res.op, r, res.out, salt) == nil {
				t.Errorf("rank %d %v %v %v: element %d changed, accepted", r, res.p.Coll, res.d, res.op, j)
			}
		}
	}
}
