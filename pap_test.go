package braid_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

// TestMatrixPAP runs the matrix's cases of allreduce and reduce through
// the shared area's arrival-aware reductions (algorithm "pap": a leader
// for small chunks, a chain in the order of arrival for large ones) while
// every rank arrives after a random delay of up to 200 µs, so that the
// leaders and the chains' orders change from call to call: every dtype
// and op at the small counts (with real values, whose sums round: every
// rank must hold the same bits, which check.VerifyReal compares), float32
// at the large ones, in place and not, every root, on 1–9 ranks, and the
// small counts on 16.
func TestMatrixPAP(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Allreduce, sched.Reduce} {
		t.Run(coll.String(), func(t *testing.T) {
			t.Parallel()
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
				var cases []mcase
				for _, k := range matrixCases(coll, nodeAlgo{coll}, n) {
					if n > 9 && k.count > 1000 {
						continue
					}
					k.delay = 200 * time.Microsecond
					cases = append(cases, k)
				}
				runCases(t, coll, "pap", n, nil, cases)
			}
		})
	}
}

// TestMatrixPAPChain runs the same cases through the executor's dynamic
// arrival-ordered chain (algorithm "papchain": Algorithm 2 over messages,
// the root keeping the line), on 1–9 and 16 ranks under random arrival
// delays, so that every order of the chain, and the root's every place in
// it, occurs.
func TestMatrixPAPChain(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Allreduce, sched.Reduce} {
		t.Run(coll.String(), func(t *testing.T) {
			t.Parallel()
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
				var cases []mcase
				for _, k := range matrixCases(coll, nodeAlgo{coll}, n) {
					if n > 9 && k.count > 1000 {
						continue
					}
					k.delay = 200 * time.Microsecond
					cases = append(cases, k)
				}
				runCases(t, coll, "papchain", n, nil, cases)
			}
		})
	}
}

// TestMatrixHierPAP runs hierpap (Hierarchical-RSA with arrival-ordered
// chains inside each host) under random arrival delays: the allreduce cases
// of the matrix on 1–9 ranks of one host, and on the matrix's emulated
// layouts of several hosts (layoutCases: float32 at every count, the
// dtypes and ops on one host).
func TestMatrixHierPAP(t *testing.T) {
	coll := sched.Allreduce
	a := nodeAlgo{coll}
	for n := 1; n <= 9; n++ {
		var cases []mcase
		for _, k := range matrixCases(coll, a, n) {
			k.delay = 200 * time.Microsecond
			cases = append(cases, k)
		}
		runCases(t, coll, "hierpap", n, nil, cases)
		if n < 2 {
			continue
		}
		for i, hosts := range matrixLayouts(n) {
			var cases []mcase
			for _, k := range layoutCases(coll, a, n, i == 0) {
				k.delay = 200 * time.Microsecond
				cases = append(cases, k)
			}
			runCases(t, coll, "hierpap", n, hosts, cases)
		}
	}
}

// TestMatrixPAPBcast runs the broadcast cases of the matrix through
// Patarasuk and Yuan's arrival-aware broadcast on the executor (algorithm
// "papbcast": the root serves the ranks that have arrived, in groups,
// each a pipelined chain) while every rank arrives after a random delay
// of up to 200 µs, so that the groups change from call to call: every
// dtype at the small counts, float32 at the large ones (in the segments
// the chain broadcast's tuning gives), in place and not, every root, on
// 1–9 ranks and the small counts on 16; and again on emulated hosts
// (matrixLayouts), whose messages cross other transports.
func TestMatrixPAPBcast(t *testing.T) {
	coll := sched.Bcast
	a := nodeAlgo{coll}
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16} {
		var cases []mcase
		for _, k := range matrixCases(coll, a, n) {
			if n > 9 && k.count > 1000 {
				continue
			}
			k.delay = 200 * time.Microsecond
			cases = append(cases, k)
		}
		runCases(t, coll, "papbcast", n, nil, cases)
		if n < 2 || n > 9 {
			continue
		}
		for i, hosts := range matrixLayouts(n) {
			var cases []mcase
			for _, k := range layoutCases(coll, a, n, i == 0) {
				k.delay = 200 * time.Microsecond
				cases = append(cases, k)
			}
			runCases(t, coll, "papbcast", n, hosts, cases)
		}
	}
}

// TestPAPSameBits: with a random order of arrival each call, every rank
// of an arrival-aware allreduce holds the same bits, for every dtype and
// op: real values whose sums and products round for the floating-point
// types (one rank combines, the others copy), the matrix's exact pattern
// for the integer ones. The counts take every path of pap's allreduce:
// inline and slot-sized chunks reduced flat (up to FlatMax), the chain in
// one segment and in many (16 KiB segments of 256 KiB slots), calls of
// several chunks, on 5 and 8 ranks. Under the race detector it takes a
// sample of the dtypes (see below); scripts/test.sh's matrix step runs it
// whole without it.
func TestPAPSameBits(t *testing.T) {
	const calls = 3
	type key struct {
		d     dtype.DType
		op    dtype.Op
		count int
	}
	for _, n := range []int{5, 8} {
		var keys []key
		for i, d := range dtype.All() {
			// Under the race detector each dtype but float32 runs on one
			// of the two rank counts (odd indices in dtype.All() on 5,
			// even on 8); scripts/test.sh runs this test again without
			// it, every dtype on both.
			if raceEnabled && !full && d != dtype.Float32 && i%2 != n%2 {
				continue
			}
			for _, op := range opsFor(sched.Allreduce, d) {
				for _, count := range []int{3, 300, 1000} {
					keys = append(keys, key{d, op, count})
				}
				// Many segments and chunks: where sums and products
				// round, and one integer type. Under the race detector,
				// outside the full run, only float32's (sum and prod,
				// 280 kB: a chunk of 16 segments and a smaller one) and
				// int32's sum: the chain's segments and chunks take the
				// same goroutines and synchronisation for every dtype
				// and op (a kernel runs in one goroutine; the element
				// size changes only how many segments), and these calls
				// took 26 of the test's 29 s under it. scripts/test.sh's
				// matrix step runs this test again without it, every
				// dtype and op here.
				many := d.IsFloat() && (op == dtype.Sum || op == dtype.Prod) || d == dtype.Int32
				if raceEnabled && !full && d != dtype.Float32 && (d != dtype.Int32 || op != dtype.Sum) {
					many = false
				}
				if many {
					keys = append(keys, key{d, op, 70000})
				}
			}
		}
		got := make([][][]byte, n)
		errs := onRanks(t, n, &braid.Options{Algo: "allreduce=pap", SharedSlot: 256 << 10}, func(c *braid.Comm) error {
			r := c.Rank()
			rng := rand.New(rand.NewPCG(uint64(n), uint64(r)))
			for _, k := range keys {
				p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: k.count}
				for i := range calls {
					in, out := check.Buffers(p, r, k.d.Size(), false)
					salt := i + k.count
					real := k.d.IsFloat()
					if real {
						check.FillReal(k.d, k.op, in, r, 0, salt)
					} else {
						check.FillInput(p, k.d, k.op, in, r, salt)
					}
					if d := rng.IntN(300); d < 200 {
						time.Sleep(time.Duration(d) * time.Microsecond)
					}
					if err := c.Allreduce(context.Background(), braid.Raw{Bytes: in, Type: k.d}, braid.Raw{Bytes: out, Type: k.d}, k.op); err != nil {
						return err
					}
					var err error
					if real {
						err = check.VerifyReal(p, k.d, k.op, r, out, salt)
					} else {
						err = check.Verify(p, k.d, k.op, r, out, salt)
					}
					if err != nil {
						return fmt.Errorf("%v %v count %d: %w", k.d, k.op, k.count, err)
					}
					got[r] = append(got[r], out)
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%d ranks: rank %d: %v", n, r, err)
			}
		}
		for r := 1; r < n; r++ {
			for i := range got[0] {
				if string(got[r][i]) != string(got[0][i]) {
					k := keys[i/calls]
					t.Fatalf("%d ranks, %v %v count %d, call %d: rank %d's result differs from rank 0's", n, k.d, k.op, k.count, i%calls, r)
				}
			}
		}
	}
}

// TestPAPTimeoutNamesAbsent: a rank that never arrives at an
// arrival-aware allreduce, through the shared area (pap) and through the
// executor's dynamic chain (papchain), is named in the other ranks'
// errors.
func TestPAPTimeoutNamesAbsent(t *testing.T) {
	for _, name := range []string{"pap", "papchain"} {
		comms, err := braid.NewLocal(3, &braid.Options{Algo: "allreduce=" + name, Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, c := range comms[:2] {
			go func() {
				errs <- c.Allreduce(context.Background(), []float32{1}, make([]float32, 1), braid.Sum)
			}()
		}
		for range 2 {
			err := <-errs
			var be *braid.Error
			if !errors.As(err, &be) || be.Kind != braid.Timeout && be.Kind != braid.Aborted || !strings.Contains(err.Error(), "rank 2") {
				t.Errorf("%s: %v, want a timeout naming rank 2", name, err)
			}
		}
		for _, c := range comms {
			c.Close()
		}
	}
}

// TestPAPBcastTimeoutNamesAbsent: the root of papbcast waits for the word
// of a rank that never arrives and names it in its error; a rank served
// before that returns with the data, or fails naming the absent rank (a
// broadcast is confirmed a call late, at the root).
func TestPAPBcastTimeoutNamesAbsent(t *testing.T) {
	comms, err := braid.NewLocal(3, &braid.Options{Algo: "bcast=papbcast", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	errs := make([]error, 2)
	bufs := [][]float32{{7, 8}, make([]float32, 2)}
	done := make(chan int, 2)
	for r, c := range comms[:2] {
		go func() {
			errs[r] = c.Bcast(context.Background(), bufs[r], 0)
			done <- r
		}()
	}
	for range 2 {
		<-done
	}
	var be *braid.Error
	if !errors.As(errs[0], &be) || be.Kind != braid.Timeout && be.Kind != braid.Aborted || !strings.Contains(errs[0].Error(), "rank 2") {
		t.Errorf("root: %v, want a timeout naming rank 2", errs[0])
	}
	if errs[1] == nil && (bufs[1][0] != 7 || bufs[1][1] != 8) {
		t.Errorf("rank 1 returned %v without error, want the root's [7 8]", bufs[1])
	}
	if errs[1] != nil && !strings.Contains(errs[1].Error(), "rank 2") {
		t.Errorf("rank 1: %v, want nil or an error naming rank 2", errs[1])
	}
}
