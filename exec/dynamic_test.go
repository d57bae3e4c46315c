package exec_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/inproc"
)

// firstCome is a dynamic allreduce for the tests: every other rank tells
// rank 0 a word and sends its input; rank 0 combines the inputs in the
// order the words arrive (WaitAny), answers each rank with its place in
// that order, and sends the sum back.
type firstCome struct {
	order []int // rank 0's order of arrival, for the test to read
}

func (*firstCome) TmpLen(p sched.Params, rank int) int { return 0 }

func (*firstCome) Trace(p sched.Params, rank int, order []int) sched.Program {
	return sched.Program{Rank: rank}
}

func (f *firstCome) Run(p sched.Params, rank int, x sched.Exec) error {
	n, c := p.NRanks, p.Count
	in, out := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}
	if rank != 0 {
		x.SendWord(0, 1, uint64(100+rank))
		if err := x.Wait(x.Send(0, 2, in)); err != nil {
			return err
		}
		h := x.RecvWord(0, 3)
		if err := x.Wait(h); err != nil {
			return err
		}
		if place := int(x.Word(h)); place < 1 || place >= n {
			return fmt.Errorf("rank %d: place %d", rank, place)
		}
		return x.Wait(x.Recv(0, 4, out))
	}
	x.Copy(in, out)
	var hs []sched.Handle
	var who []int
	for q := 1; q < n; q++ {
		hs = append(hs, x.RecvWord(q, 1))
		who = append(who, q)
	}
	for len(hs) > 0 {
		i, err := x.WaitAny(hs)
		if err != nil {
			return err
		}
		q := who[i]
		if w := x.Word(hs[i]); w != uint64(100+q) {
			return fmt.Errorf("word %d from rank %d, want %d", w, q, 100+q)
		}
		f.order = append(f.order, q)
		if err := x.Wait(x.RecvReduce(q, 2, out)); err != nil {
			return err
		}
		x.SendWord(q, 3, uint64(len(f.order)))
		hs = append(hs[:i], hs[i+1:]...)
		who = append(who[:i], who[i+1:]...)
	}
	var sends []sched.Handle
	for q := 1; q < n; q++ {
		sends = append(sends, x.Send(q, 4, out))
	}
	for _, h := range sends {
		if err := x.Wait(h); err != nil {
			return err
		}
	}
	return nil
}

// TestRunDynamic: a dynamic algorithm's words, waits in the order of
// arrival, receive-and-reduce and sends give every rank the sum (and the
// average, which RunDynamic divides), with rank 0 first and the others in reverse order.
func TestRunDynamic(t *testing.T) {
	const n = 4
	for _, op := range []dtype.Op{dtype.Sum, dtype.Avg} {
		meshes := inproc.NewWorld(n, nil)
		f := &firstCome{}
		outs := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r > 0 { // rank 0 first, then n-1, ..., 1
					time.Sleep(time.Duration(n-r) * 5 * time.Millisecond)
				}
				outs[r] = make([]byte, 8)
				p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: 2}
				ctx, cancel := context.WithTimeout(context.Background(), hang)
				defer cancel()
				errs[r] = exec.RunDynamic(ctx, f, p, r, envFor(meshes[r]),
					exec.Buffers{In: f32(float32(r), float32(2*r)), Out: outs[r], DType: dtype.Float32, Op: op, NRanks: n})
			}()
		}
		wg.Wait()
		for _, m := range meshes {
			m.Close()
		}
		want := []float32{6, 12}
		if op == dtype.Avg {
			want = []float32{1.5, 3}
		}
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("%v: rank %d: %v", op, r, errs[r])
			}
			if got := floats(outs[r]); !equal(got, want) {
				t.Errorf("%v: rank %d: %v, want %v", op, r, got, want)
			}
		}
		// Every other rank once, in the order WaitAny saw them (usually
		// n-1 first; a loaded machine may wake the sleepers late).
		seen := map[int]bool{}
		for _, q := range f.order {
			if q > 0 && q < n {
				seen[q] = true
			}
		}
		if len(f.order) != n-1 || len(seen) != n-1 {
			t.Errorf("%v: order of arrival %v, want each of ranks 1-%d once", op, f.order, n-1)
		}
		t.Logf("%v: order of arrival %v", op, f.order)
	}
}

// TestRunDynamicTimeout: a rank that never comes is named by the StepError
// of the request waited for, after the run reported its stall.
func TestRunDynamicTimeout(t *testing.T) {
	meshes := inproc.NewWorld(3, nil)
	defer func() {
		for _, m := range meshes {
			m.Close()
		}
	}()
	env := envFor(meshes[0])
	env.Timeout = time.Second
	env.StallAfter = 5 * time.Millisecond
	var stalled []int
	env.Stall = func(index int, s *sched.Step, tag transport.Tag) { stalled = append(stalled, s.Peer) }
	done := make(chan error, 2)
	go func() {
		p := sched.Params{Coll: sched.Allreduce, NRanks: 3, Count: 1}
		done <- exec.RunDynamic(context.Background(), &firstCome{}, p, 0, env,
			exec.Buffers{In: f32(1), Out: make([]byte, 4), DType: dtype.Float32, Op: dtype.Sum, NRanks: 3})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(hang):
		t.Fatal("RunDynamic did not return")
	}
	var se *exec.StepError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) || se.Step.Peer != 1 && se.Step.Peer != 2 {
		t.Fatalf("got %v, want a StepError waiting for rank 1 or 2 with DeadlineExceeded", err)
	}
	if len(stalled) != 2 {
		t.Errorf("stall reported for ranks %v, want 1 and 2", stalled)
	}
}
