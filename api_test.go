package braid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/x448/float16"
)

// apiCtx bounds a test's calls: past it a call hangs, it is not slow.
func apiCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// apiNoErrors fails the test for every rank that returned an error.
func apiNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestSendRecvTagOrder(t *testing.T) {
	// Rank 0 sends two streams, tags 5 and 7, interleaved; rank 1 receives
	// them in another interleaving. Within a tag messages arrive in order.
	type msg struct{ tag, val int }
	sent := []msg{{5, 1}, {7, 10}, {5, 2}, {7, 20}, {5, 3}, {7, 30}}
	recvOrder := []int{7, 5, 5, 7, 7, 5}
	errs := onRanks(t, 2, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		if c.Rank() == 0 {
			for _, m := range sent {
				if err := c.Send(ctx, []int32{int32(m.val), int32(m.tag)}, 1, m.tag); err != nil {
					return err
				}
			}
			return nil
		}
		next := map[int][]int{5: {1, 2, 3}, 7: {10, 20, 30}}
		for _, tag := range recvOrder {
			buf := make([]int32, 2)
			if err := c.Recv(ctx, buf, 0, tag); err != nil {
				return err
			}
			want := next[tag][0]
			next[tag] = next[tag][1:]
			if int(buf[0]) != want || int(buf[1]) != tag {
				return fmt.Errorf("tag %d: got %v, want [%d %d]", tag, buf, want, tag)
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestSendRecvLargeOutOfOrder(t *testing.T) {
	// Messages larger than any eager limit, received in the opposite order
	// of their sends, with non-blocking calls on both sides.
	const n = 100_000
	errs := onRanks(t, 3, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		switch c.Rank() {
		case 0:
			a, b := make([]float64, n), make([]float64, n)
			for i := range a {
				a[i], b[i] = float64(i), float64(-i)
			}
			r1 := c.ISend(ctx, a, 2, 1)
			r2 := c.ISend(ctx, b, 2, 2)
			return errors.Join(r1.Wait(ctx), r2.Wait(ctx))
		case 2:
			a, b := make([]float64, n), make([]float64, n)
			r2 := c.IRecv(ctx, b, 0, 2)
			r1 := c.IRecv(ctx, a, 0, 1)
			if err := errors.Join(r2.Wait(ctx), r1.Wait(ctx)); err != nil {
				return err
			}
			for i := range a {
				if a[i] != float64(i) || b[i] != float64(-i) {
					return fmt.Errorf("element %d: %v %v", i, a[i], b[i])
				}
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestISendIRecvTest(t *testing.T) {
	posted := make(chan struct{})
	errs := onRanks(t, 2, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		if c.Rank() == 0 {
			<-posted
			r := c.ISend(ctx, []uint64{42, 43}, 1, 9)
			return r.Wait(ctx)
		}
		buf := make([]uint64, 2)
		r := c.IRecv(ctx, buf, 0, 9)
		// Nothing was sent yet.
		if done, err := r.Test(); done || err != nil {
			close(posted)
			return fmt.Errorf("Test before the send: %v, %v", done, err)
		}
		close(posted)
		for {
			done, err := r.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				return errors.New("Test never reported completion")
			}
			time.Sleep(time.Millisecond)
		}
		if err := r.Wait(ctx); err != nil {
			return err
		}
		if done, err := r.Test(); !done || err != nil {
			return fmt.Errorf("Test after completion: %v, %v", done, err)
		}
		if buf[0] != 42 || buf[1] != 43 {
			return fmt.Errorf("got %v", buf)
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestRequestWaitCtx(t *testing.T) {
	// Wait with a context that ends returns the context's error; the
	// receive itself goes on and completes later.
	errs := onRanks(t, 2, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		if c.Rank() == 0 {
			time.Sleep(30 * time.Millisecond)
			return c.Send(ctx, []int8{1}, 1, 0)
		}
		buf := make([]int8, 1)
		r := c.IRecv(ctx, buf, 0, 0)
		short, cancel := context.WithCancel(ctx)
		cancel()
		if err := r.Wait(short); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("Wait with a cancelled context: %v", err)
		}
		if err := r.Wait(ctx); err != nil {
			return err
		}
		if buf[0] != 1 {
			return fmt.Errorf("got %v", buf)
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestRecvMismatch(t *testing.T) {
	cases := []struct {
		name       string
		send, recv any
	}{
		{"short receive", []float32{1, 2, 3, 4}, make([]float32, 3)},
		{"long receive", []float32{1, 2, 3, 4}, make([]float32, 5)},
		{"other dtype", []float32{1, 2, 3, 4}, make([]int32, 4)},
		{"large short receive", make([]float64, 20_000), make([]float64, 19_999)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := onRanks(t, 2, &braid.Options{Timeout: 10 * time.Second}, func(c *braid.Comm) error {
				ctx := apiCtx(t)
				if c.Rank() == 0 {
					return c.Send(ctx, tc.send, 1, 3)
				}
				return c.Recv(ctx, tc.recv, 0, 3)
			})
			if k := braid.KindOf(errs[1]); k != braid.Mismatch && k != braid.InvalidArgument {
				t.Errorf("receiver: %v, want mismatch or invalid argument", errs[1])
			}
			// The sender either finished (its data was taken) or learns of
			// the failure.
			if k := braid.KindOf(errs[0]); errs[0] != nil && k != braid.Mismatch && k != braid.Aborted {
				t.Errorf("sender: %v", errs[0])
			}
		})
	}
}

func TestRecvTimeout(t *testing.T) {
	// A receive whose message never comes ends with the context's
	// deadline instead of hanging.
	errs := onRanks(t, 2, nil, func(c *braid.Comm) error {
		if c.Rank() == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		return c.Recv(ctx, make([]float32, 1), 0, 1)
	})
	if errs[0] != nil {
		t.Errorf("rank 0: %v", errs[0])
	}
	if k := braid.KindOf(errs[1]); k != braid.Timeout {
		t.Errorf("rank 1: %v, want timeout", errs[1])
	}
}

func TestRecvOptionsTimeout(t *testing.T) {
	// With no deadline in the context, Options.Timeout bounds a receive
	// whose message never comes (the wait counts it itself, with no
	// timer per call): it ends with Timeout, after the timeout and long
	// before the test's bound.
	const timeout = 50 * time.Millisecond
	var took time.Duration
	errs := onRanks(t, 2, &braid.Options{Timeout: timeout}, func(c *braid.Comm) error {
		if c.Rank() == 0 {
			return nil
		}
		start := time.Now()
		err := c.Recv(context.Background(), make([]float32, 1), 0, 1)
		took = time.Since(start)
		return err
	})
	if errs[0] != nil {
		t.Errorf("rank 0: %v", errs[0])
	}
	if k := braid.KindOf(errs[1]); k != braid.Timeout || took < timeout || took > 5*time.Second {
		t.Errorf("rank 1: %v after %v, want timeout after %v", errs[1], took, timeout)
	}
}

func TestP2PInvalidArguments(t *testing.T) {
	errs := onRanks(t, 3, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		buf := make([]float32, 2)
		bad := []struct {
			name string
			err  error
		}{
			{"send to self", c.Send(ctx, buf, c.Rank(), 0)},
			{"recv from self", c.Recv(ctx, buf, c.Rank(), 0)},
			{"send to -1", c.Send(ctx, buf, -1, 0)},
			{"send to Size", c.Send(ctx, buf, c.Size(), 0)},
			{"recv from Size+5", c.Recv(ctx, buf, c.Size()+5, 0)},
			{"isend to self", c.ISend(ctx, buf, c.Rank(), 0).Wait(ctx)},
			{"irecv from -2", c.IRecv(ctx, buf, -2, 0).Wait(ctx)},
			{"negative tag", c.Send(ctx, buf, (c.Rank()+1)%3, -1)},
			{"nil buffer", c.Send(ctx, nil, (c.Rank()+1)%3, 0)},
			{"unsupported type", c.Send(ctx, []int16{1}, (c.Rank()+1)%3, 0)},
		}
		for _, b := range bad {
			if braid.KindOf(b.err) != braid.InvalidArgument {
				return fmt.Errorf("%s: %v, want invalid argument", b.name, b.err)
			}
			if !errors.Is(b.err, braid.ErrInvalidArgument) {
				return fmt.Errorf("%s: errors.Is(ErrInvalidArgument) false", b.name)
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestIAllreduceOutstanding(t *testing.T) {
	// Several non-blocking allreduces of different sizes, ops and types in
	// flight at once on every rank, waited for at the end in reverse order.
	const n, calls = 4, 8
	errs := onRanks(t, n, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		r := c.Rank()
		sends := make([][]float64, calls)
		recvs := make([][]float64, calls)
		ints := make([]int64, 3)
		for i := range ints {
			ints[i] = int64(r + i)
		}
		intOut := make([]int64, 3)
		reqs := make([]*braid.Request, 0, calls+1)
		for i := range calls {
			count := 1 + i*1000
			sends[i] = make([]float64, count)
			recvs[i] = make([]float64, count)
			for j := range sends[i] {
				sends[i][j] = float64(r*(i+1) + j%7)
			}
			op := braid.Sum
			if i%2 == 1 {
				op = braid.Max
			}
			reqs = append(reqs, c.IAllreduce(ctx, sends[i], recvs[i], op))
			if i == calls/2 {
				reqs = append(reqs, c.IAllreduce(ctx, ints, intOut, braid.BOr))
			}
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			if err := reqs[i].Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		for i := range calls {
			for j, got := range recvs[i] {
				var want float64
				if i%2 == 1 {
					want = float64((n-1)*(i+1) + j%7)
				} else {
					want = float64((i+1)*n*(n-1)/2 + n*(j%7))
				}
				if got != want {
					return fmt.Errorf("call %d element %d: %v, want %v", i, j, got, want)
				}
			}
		}
		for i, got := range intOut {
			want := int64(0)
			for q := range n {
				want |= int64(q + i)
			}
			if got != want {
				return fmt.Errorf("bor element %d: %d, want %d", i, got, want)
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestIWaitOrders(t *testing.T) {
	// Non-blocking calls waited for with a context that never ends, which
	// runs a call that has not begun on the waiting goroutine: the ranks
	// wait in different orders (odd ranks last call first), so a Wait runs
	// a call whose predecessors the other ranks have not run yet, and those
	// must go on in the background. Sizes span the shared-memory and the
	// point-to-point algorithms.
	const n = 3
	errs := onRanks(t, n, nil, func(c *braid.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		counts := []int{1, 300, 5000, 70000, 2, 40000}
		bufs := make([][]float32, len(counts))
		reqs := make([]*braid.Request, 0, len(counts)+2)
		for i, k := range counts {
			bufs[i] = make([]float32, k)
			for j := range bufs[i] {
				bufs[i][j] = float32(r + i)
			}
			reqs = append(reqs, c.IAllreduce(ctx, bufs[i], bufs[i], braid.Sum))
		}
		got := make([]int32, 4)
		reqs = append(reqs, c.IRecv(ctx, got, (r+n-1)%n, 5), c.ISend(ctx, []int32{int32(r), 1, 2, 3}, (r+1)%n, 5))
		for k := range reqs {
			i := k
			if r%2 == 1 {
				i = len(reqs) - 1 - k
			}
			if err := reqs[i].Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		for i := range counts {
			want := float32(n*i + n*(n-1)/2)
			for j, v := range bufs[i] {
				if v != want {
					return fmt.Errorf("call %d element %d: %v, want %v", i, j, v, want)
				}
			}
		}
		if got[0] != int32((r+n-1)%n) || got[3] != 3 {
			return fmt.Errorf("received %v from rank %d", got, (r+n-1)%n)
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestINonBlockingMix(t *testing.T) {
	// Non-blocking collectives of several kinds outstanding together.
	const n = 3
	errs := onRanks(t, n, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		r := c.Rank()
		bc := make([]int32, 5)
		if r == 1 {
			for i := range bc {
				bc[i] = int32(100 + i)
			}
		}
		ag := make([]int32, 2*n)
		rs := make([]int32, 2)
		rsIn := make([]int32, 2*n)
		for i := range rsIn {
			rsIn[i] = int32(i)
		}
		reqs := []*braid.Request{
			c.IBcast(ctx, bc, 1),
			c.IAllgather(ctx, []int32{int32(r), int32(10 * r)}, ag),
			c.IBarrier(ctx),
			c.IReduceScatter(ctx, rsIn, rs, braid.Sum),
		}
		for i, q := range reqs {
			if err := q.Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		for i, v := range bc {
			if v != int32(100+i) {
				return fmt.Errorf("bcast: %v", bc)
			}
		}
		for q := range n {
			if ag[2*q] != int32(q) || ag[2*q+1] != int32(10*q) {
				return fmt.Errorf("allgather: %v", ag)
			}
		}
		if rs[0] != int32(n*2*r) || rs[1] != int32(n*(2*r+1)) {
			return fmt.Errorf("reducescatter: %v", rs)
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestSplit(t *testing.T) {
	const n = 5
	errs := onRanks(t, n, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		r := c.Rank()
		sub, err := c.Split(ctx, r%2, -r)
		if err != nil {
			return err
		}
		if sub == nil {
			return errors.New("Split returned nil for a defined color")
		}
		defer sub.Close()
		// Members of each color in key order: -4 < -2 < 0 and -3 < -1.
		members := [][]int{{4, 2, 0}, {3, 1}}[r%2]
		if sub.Size() != len(members) || sub.Rank() != slices.Index(members, r) {
			return fmt.Errorf("sub rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), slices.Index(members, r), len(members))
		}
		if sub.LocalSize() != sub.Size() || sub.LocalRank() != sub.Rank() || sub.Hosts() != 1 {
			return fmt.Errorf("sub local %d/%d hosts %d", sub.LocalRank(), sub.LocalSize(), sub.Hosts())
		}
		// Allgather of parent ranks shows the order; Allreduce works.
		got := make([]int32, sub.Size())
		if err := sub.Allgather(ctx, []int32{int32(r)}, got); err != nil {
			return err
		}
		for i, m := range members {
			if got[i] != int32(m) {
				return fmt.Errorf("sub allgather %v, want %v", got, members)
			}
		}
		sum := []float32{float32(r)}
		if err := sub.Allreduce(ctx, sum, sum, braid.Sum); err != nil {
			return err
		}
		want := 0
		for _, m := range members {
			want += m
		}
		if sum[0] != float32(want) {
			return fmt.Errorf("sub allreduce %v, want %d", sum[0], want)
		}
		// The parent still works, interleaved with the child.
		all := []int64{1}
		if err := c.Allreduce(ctx, all, all, braid.Sum); err != nil {
			return err
		}
		if all[0] != n {
			return fmt.Errorf("parent allreduce %d", all[0])
		}

		// Undefined leaves a rank out.
		color := 0
		if r == 2 {
			color = braid.Undefined
		}
		sub2, err := c.Split(ctx, color, r)
		if err != nil {
			return err
		}
		if r == 2 {
			if sub2 != nil {
				return fmt.Errorf("Undefined color gave a communicator of %d ranks", sub2.Size())
			}
			return nil
		}
		if sub2 == nil || sub2.Size() != n-1 {
			return fmt.Errorf("second split: %v", sub2)
		}
		if sub2.ID() == sub.ID() || sub2.ID() == c.ID() {
			return fmt.Errorf("split communicators share an id: %08x %08x %08x", c.ID(), sub.ID(), sub2.ID())
		}
		return sub2.Barrier(ctx)
	})
	apiNoErrors(t, errs)
}

func TestSplitBadColor(t *testing.T) {
	comms, err := braid.NewLocal(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	if _, err := comms[0].Split(apiCtx(t), -5, 0); braid.KindOf(err) != braid.InvalidArgument {
		t.Errorf("color -5: %v, want invalid argument", err)
	}
}

// localComms returns a local job whose comms the test closes.
func localComms(t *testing.T, n int, opts *braid.Options) []*braid.Comm {
	t.Helper()
	comms, err := braid.NewLocal(n, opts)
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func TestExplain(t *testing.T) {
	c := localComms(t, 4, nil)[0]
	// Without a tuning table the cost model chooses: the reason lists the
	// candidates cheapest first, and the choice is the first.
	for _, tc := range []struct {
		coll  string
		count int
		d     braid.DType
	}{
		{"allreduce", 4, braid.Float32}, {"allreduce", 1 << 18, braid.Float32}, {"allreduce", 1 << 20, braid.Float32},
		{"broadcast", 100, braid.Int8}, {"broadcast", 1 << 24, braid.Float32},
	} {
		algo, reason, err := c.Explain(tc.coll, tc.count, tc.d, 0)
		if err != nil {
			t.Errorf("Explain(%s, %d): %v", tc.coll, tc.count, err)
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(reason, "cost model: "), " ")
		base, _, _ := strings.Cut(algo, ":")
		if fb, _, _ := strings.Cut(first, ":"); !strings.HasPrefix(reason, "cost model: ") || fb != base {
			t.Errorf("Explain(%s, %d) = %q, %q; want the model's cheapest", tc.coll, tc.count, algo, reason)
		}
	}
	// Ranks of one host meet in their shared area.
	if algo, _, err := c.Explain("barrier", 0, braid.Uint8, 0); err != nil || algo != "shm" {
		t.Errorf("Explain(barrier) = %q, %v", algo, err)
	}
	// Every collective explains to some algorithm.
	for _, coll := range []string{"allreduce", "reduce", "bcast", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier"} {
		count := 16
		if coll == "barrier" {
			count = 0
		}
		if a, r, err := c.Explain(coll, count, braid.Float64, 3); err != nil || a == "" || r == "" {
			t.Errorf("Explain(%s) = %q, %q, %v", coll, a, r, err)
		}
	}
	if _, _, err := c.Explain("allscatter", 4, braid.Float32, 0); braid.KindOf(err) != braid.InvalidArgument {
		t.Errorf("unknown collective: %v, want invalid argument", err)
	}
	if _, _, err := c.Explain("allreduce", 4, braid.DType(0), 0); braid.KindOf(err) != braid.InvalidArgument {
		t.Errorf("invalid dtype: %v, want invalid argument", err)
	}
}

func TestForcedAlgo(t *testing.T) {
	opts := &braid.Options{Algo: "allreduce=ring"}
	c := localComms(t, 4, opts)[0]
	algo, reason, err := c.Explain("allreduce", 4, braid.Float32, 0)
	if err != nil || algo != "ring" || !strings.Contains(reason, "forced") {
		t.Errorf("forced allreduce=ring: Explain = %q, %q, %v", algo, reason, err)
	}
	// Other collectives are planned as usual.
	if algo, reason, err := c.Explain("bcast", 4, braid.Float32, 0); err != nil || strings.Contains(reason, "forced") {
		t.Errorf("bcast with allreduce forced: %q (%s), %v", algo, reason, err)
	}
	// The forced algorithm runs and gives the right result.
	errs := onRanks(t, 3, opts, func(c *braid.Comm) error {
		b := []float32{float32(c.Rank()), 1}
		if err := c.Allreduce(apiCtx(t), b, b, braid.Sum); err != nil {
			return err
		}
		if b[0] != 3 || b[1] != 3 {
			return fmt.Errorf("got %v", b)
		}
		return nil
	})
	apiNoErrors(t, errs)

	// A bare name forces it wherever the collective has it.
	c = localComms(t, 4, &braid.Options{Algo: "ring"})[0]
	for _, coll := range []string{"allreduce", "allgather", "reducescatter"} {
		if algo, _, err := c.Explain(coll, 4, braid.Float32, 0); err != nil || algo != "ring" {
			t.Errorf("Algo=ring: %s uses %q, %v", coll, algo, err)
		}
	}
	if algo, _, err := c.Explain("bcast", 4, braid.Float32, 0); err != nil || algo == "ring" {
		t.Errorf("Algo=ring: bcast uses %q, %v", algo, err)
	}
}

func TestForcedUnknownAlgo(t *testing.T) {
	// Unknown names are refused when the communicator is created, naming
	// the entry and the names there are, never left to the first call or
	// ignored.
	for _, tc := range []struct{ algo, want string }{
		{"allreduce=nosuch", `no allreduce algorithm named "nosuch" (have `},
		{"nosuch", `no collective has an algorithm named "nosuch" (algorithms: `},
		{"allscatter=ring", `unknown collective "allscatter"`},
	} {
		comms, err := braid.NewLocal(2, &braid.Options{Algo: tc.algo})
		if braid.KindOf(err) != braid.InvalidArgument || comms != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Algo %q: %v, want invalid argument with %q", tc.algo, err, tc.want)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []braid.Options{
		{Transport: "carrier-pigeon"},
		{Debug: "verbose"},
		{Algo: "nosuchcoll=ring"},
		{Check: "strcit"},
	} {
		comms, err := braid.NewLocal(2, &o)
		if braid.KindOf(err) != braid.InvalidArgument || comms != nil {
			t.Errorf("NewLocal with %+v: %v, want invalid argument", o, err)
		}
	}
	for _, n := range []int{0, -1} {
		if _, err := braid.NewLocal(n, nil); braid.KindOf(err) != braid.InvalidArgument {
			t.Errorf("NewLocal(%d): %v, want invalid argument", n, err)
		}
	}
	// Valid spellings are accepted.
	for _, o := range []braid.Options{{Transport: "inproc"}, {Debug: "none"}, {Debug: "INFO", Log: &syncBuffer{}}, {Check: "STRICT"}, {Check: "default"}} {
		comms, err := braid.NewLocal(1, &o)
		if err != nil {
			t.Errorf("NewLocal with %+v: %v", o, err)
			continue
		}
		comms[0].Close()
	}
}

// syncBuffer is a bytes.Buffer that several ranks' loggers may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDebugInfoLogsPlans(t *testing.T) {
	log := &syncBuffer{}
	errs := onRanks(t, 2, &braid.Options{Debug: "info", Log: log, Algo: "allreduce=ring"}, func(c *braid.Comm) error {
		b := []float64{1}
		return c.Allreduce(apiCtx(t), b, b, braid.Sum)
	})
	apiNoErrors(t, errs)
	if s := log.String(); !strings.Contains(s, "allreduce") || !strings.Contains(s, "ring") {
		t.Errorf("info log lacks the plan:\n%s", s)
	}
}

func TestLocalTopology(t *testing.T) {
	for _, opts := range []*braid.Options{nil, {Host: "node7"}} {
		comms := localComms(t, 3, opts)
		for r, c := range comms {
			if c.Rank() != r || c.Size() != 3 || c.LocalRank() != r || c.LocalSize() != 3 || c.Hosts() != 1 {
				t.Errorf("rank %d: rank %d size %d local %d/%d hosts %d", r, c.Rank(), c.Size(), c.LocalRank(), c.LocalSize(), c.Hosts())
			}
			if c.ID() != comms[0].ID() {
				t.Errorf("rank %d: id %08x, rank 0 %08x", r, c.ID(), comms[0].ID())
			}
		}
	}
}

// sliceCase is one Go slice type: make builds rank's input of n small
// integers (value rank+i+1); get reads element i of a buffer as float64.
type sliceCase struct {
	name string
	make func(n, rank int) any
	get  func(buf any, i int) float64
}

func sliceOf[T any](conv func(float64) T, back func(T) float64) (func(n, rank int) any, func(any, int) float64) {
	mk := func(n, rank int) any {
		s := make([]T, n)
		for i := range s {
			s[i] = conv(float64(rank + i%5 + 1))
		}
		return s
	}
	get := func(buf any, i int) float64 { return back(buf.([]T)[i]) }
	return mk, get
}

func sliceCases() []sliceCase {
	var cs []sliceCase
	add := func(name string, mk func(int, int) any, get func(any, int) float64) {
		cs = append(cs, sliceCase{name, mk, get})
	}
	mk, get := sliceOf(func(v float64) float32 { return float32(v) }, func(v float32) float64 { return float64(v) })
	add("float32", mk, get)
	mk, get = sliceOf(func(v float64) float64 { return v }, func(v float64) float64 { return v })
	add("float64", mk, get)
	mk, get = sliceOf(func(v float64) braid.Half { return braid.Half(float16.Fromfloat32(float32(v)).Bits()) },
		func(v braid.Half) float64 { return float64(float16.Frombits(uint16(v)).Float32()) })
	add("Half", mk, get)
	mk, get = sliceOf(func(v float64) braid.BF16 { return braid.BF16(math.Float32bits(float32(v)) >> 16) },
		func(v braid.BF16) float64 { return float64(math.Float32frombits(uint32(v) << 16)) })
	add("BF16", mk, get)
	mk, get = sliceOf(func(v float64) int8 { return int8(v) }, func(v int8) float64 { return float64(v) })
	add("int8", mk, get)
	mk, get = sliceOf(func(v float64) uint8 { return uint8(v) }, func(v uint8) float64 { return float64(v) })
	add("uint8", mk, get)
	mk, get = sliceOf(func(v float64) int32 { return int32(v) }, func(v int32) float64 { return float64(v) })
	add("int32", mk, get)
	mk, get = sliceOf(func(v float64) uint32 { return uint32(v) }, func(v uint32) float64 { return float64(v) })
	add("uint32", mk, get)
	mk, get = sliceOf(func(v float64) int64 { return int64(v) }, func(v int64) float64 { return float64(v) })
	add("int64", mk, get)
	mk, get = sliceOf(func(v float64) uint64 { return uint64(v) }, func(v uint64) float64 { return float64(v) })
	add("uint64", mk, get)
	return cs
}

func TestAllreduceEverySliceType(t *testing.T) {
	const n, count = 3, 11
	cases := sliceCases()
	if len(cases) != 10 {
		t.Fatalf("%d slice types", len(cases))
	}
	errs := onRanks(t, n, nil, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		for _, sc := range cases {
			send := sc.make(count, c.Rank())
			recv := sc.make(count, 50) // overwritten
			if err := c.Allreduce(ctx, send, recv, braid.Sum); err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			// In place, with the same slice twice.
			inPlace := sc.make(count, c.Rank())
			if err := c.Allreduce(ctx, inPlace, inPlace, braid.Sum); err != nil {
				return fmt.Errorf("%s in place: %w", sc.name, err)
			}
			for i := range count {
				want := 0.0
				for r := range n {
					want += float64(r + i%5 + 1)
				}
				if got := sc.get(recv, i); got != want {
					return fmt.Errorf("%s element %d: %v, want %v", sc.name, i, got, want)
				}
				if got := sc.get(inPlace, i); got != want {
					return fmt.Errorf("%s in place element %d: %v, want %v", sc.name, i, got, want)
				}
				if got, orig := sc.get(send, i), float64(c.Rank()+i%5+1); got != orig {
					return fmt.Errorf("%s: send buffer changed at %d: %v, was %v", sc.name, i, got, orig)
				}
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
}

func TestInPlaceAllgather(t *testing.T) {
	for _, count := range []int{1, 5, 3000} {
		const n = 4
		errs := onRanks(t, n, nil, func(c *braid.Comm) error {
			r := c.Rank()
			recv := make([]int32, n*count)
			for i := range recv {
				recv[i] = -1
			}
			mine := recv[r*count : (r+1)*count]
			for i := range mine {
				mine[i] = int32(r*100000 + i)
			}
			if err := c.Allgather(apiCtx(t), mine, recv); err != nil {
				return err
			}
			for q := range n {
				for i := range count {
					if got, want := recv[q*count+i], int32(q*100000+i); got != want {
						return fmt.Errorf("count %d: element %d of block %d: %d, want %d", count, i, q, got, want)
					}
				}
			}
			return nil
		})
		apiNoErrors(t, errs)
	}
}

func TestInPlaceAllreduceLarge(t *testing.T) {
	// Large enough for the bandwidth algorithms (ring, Rabenseifner).
	for _, count := range []int{5000, 200_000} {
		const n = 3
		errs := onRanks(t, n, nil, func(c *braid.Comm) error {
			b := make([]float32, count)
			for i := range b {
				b[i] = float32(c.Rank() + i%3)
			}
			if err := c.Allreduce(apiCtx(t), b, b, braid.Sum); err != nil {
				return err
			}
			for i, v := range b {
				if want := float32(3 + 3*(i%3)); v != want {
					return fmt.Errorf("count %d element %d: %v, want %v", count, i, v, want)
				}
			}
			return nil
		})
		apiNoErrors(t, errs)
	}
}
