package braid_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
)

func init() {
	childRoles["regmatrix"] = regMatrixChild
	childRoles["regstale"] = regStaleChild
}

// TestAllocLocal: goroutine ranks allocate registered buffers, the shared
// area reads them in place (chunks published by reference), and Free takes
// only what Alloc gave, once.
func TestAllocLocal(t *testing.T) {
	const n, m = 3, 20000
	errs := onRanks(t, n, &braid.Options{Algo: "shm"}, func(c *braid.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		in, err := braid.Alloc[float32](c, m)
		if err != nil {
			return err
		}
		for i := range in {
			in[i] = float32(r*m + i)
		}
		out, err := braid.Alloc[float32](c, n*m)
		if err != nil {
			return err
		}
		if err := c.Allgather(ctx, in, out); err != nil {
			return err
		}
		for i, x := range out {
			if x != float32(i) {
				return fmt.Errorf("allgather: [%d] = %v, want %v", i, x, float32(i))
			}
		}
		if err := c.ReduceScatter(ctx, out, out[r*m:(r+1)*m], braid.Max); err != nil {
			return err
		}
		if p, q := braid.DirectStats(c); p == 0 || q == 0 {
			return fmt.Errorf("%d chunks published and %d read by reference, want some", p, q)
		}
		if err := c.Free(out[1:]); braid.KindOf(err) != braid.InvalidArgument {
			return fmt.Errorf("Free of the middle of a buffer: %v, want InvalidArgument", err)
		}
		if err := c.Free(make([]float32, 4)); braid.KindOf(err) != braid.InvalidArgument {
			return fmt.Errorf("Free of Go memory: %v, want InvalidArgument", err)
		}
		if err := c.Free(in); err != nil {
			return err
		}
		if err := c.Free(in); braid.KindOf(err) != braid.InvalidArgument {
			return fmt.Errorf("second Free: %v, want InvalidArgument", err)
		}
		if err := c.Free(braid.Raw{Bytes: unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out)), Type: braid.Float32}); err != nil {
			return fmt.Errorf("Free of a Raw: %v", err)
		}
		empty, err := braid.Alloc[braid.Half](c, 0)
		if err != nil || len(empty) != 0 {
			return fmt.Errorf("Alloc of nothing: %v, %d", err, len(empty))
		}
		if _, err := braid.Alloc[int64](c, -1); braid.KindOf(err) != braid.InvalidArgument {
			return fmt.Errorf("Alloc of -1: %v, want InvalidArgument", err)
		}
		return c.Free(empty)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestAllocSplit: a communicator split from the world, its ranks in
// another order, reads its members' registered buffers by their world
// ranks.
func TestAllocSplit(t *testing.T) {
	const n, m = 5, 8192
	errs := onRanks(t, n, &braid.Options{Algo: "shm"}, func(c *braid.Comm) error {
		ctx := context.Background()
		sub, err := c.Split(ctx, c.Rank()%2, n-c.Rank()) // reversed order
		if err != nil {
			return err
		}
		defer sub.Close()
		in, err := braid.Alloc[int64](c, m)
		if err != nil {
			return err
		}
		defer c.Free(in)
		for i := range in {
			in[i] = int64(c.Rank()*m + i)
		}
		out := make([]int64, sub.Size()*m)
		if err := sub.Allgather(ctx, in, out); err != nil {
			return err
		}
		for q := range sub.Size() {
			// Sub rank q is world rank c.Rank()%2 + 2(size−1−q).
			w := c.Rank()%2 + 2*(sub.Size()-1-q)
			for i := range m {
				if x := out[q*m+i]; x != int64(w*m+i) {
					return fmt.Errorf("split allgather: block %d [%d] = %d, want %d", q, i, x, w*m+i)
				}
			}
		}
		if sub.Size() > 1 {
			if p, q := braid.DirectStats(sub); p == 0 || q == 0 {
				return fmt.Errorf("split: %d chunks published and %d read by reference, want some", p, q)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// regColls are the collectives that read registered inputs in place.
var regColls = []sched.Collective{sched.Allreduce, sched.Reduce, sched.Bcast, sched.Allgather, sched.ReduceScatter}

// regCases lists the calls of the registered-buffer matrix for coll on n
// ranks: every dtype and op at counts 0, 1, 7 and 1000, in place and not,
// every root; on up to 9 ranks also 65537 float32 elements (several chunks
// of the 64 KiB slots the test's jobs use), in place and not.
func regCases(coll sched.Collective, n int) []mcase {
	var cases []mcase
	for _, count := range smallCounts {
		for _, root := range rootsFor(coll, n) {
			for _, d := range dtype.All() {
				for _, op := range opsFor(coll, d) {
					for _, inPlace := range []bool{false, true} {
						cases = append(cases, mcase{d: d, op: op, count: count, root: root, inPlace: inPlace})
					}
				}
			}
		}
	}
	if n <= 9 {
		for _, root := range rootsFor(coll, n) {
			for _, inPlace := range []bool{false, true} {
				cases = append(cases, mcase{d: dtype.Float32, op: dtype.Sum, count: 65537, root: root, inPlace: inPlace})
			}
		}
	}
	return cases
}

// TestMatrixRegisteredProcs runs the matrix of regCases through the shared
// area (BRAID_ALGO=shm) over processes, on 1–9, 16 and 17 ranks, each rank
// taking its input and output in registered memory or not as the call's
// number and its rank say (so every call mixes both across ranks), every
// chunk published by reference when its input is registered: every result
// is checked, and the job must have read chunks by reference.
func TestMatrixRegisteredProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}
	if raceEnabled && !full {
		// Under the race detector, outside the full run: 1, 2, 3 and 5
		// ranks. Each rank is a process, whose own goroutines are all the
		// race detector watches, and a rank's goroutines are the same on
		// 5 ranks as on 17 (from 16 ranks the area's thresholds change:
		// FlatMaxFor). 17 ranks took 12 of this test's 26 s under it.
		// scripts/test.sh's matrix step (go test -run
		// 'TestMatrix|TestPAPSameBits' ., without the race detector) runs
		// this test on every count here; TestMatrixShm runs 16 and 17
		// ranks through the area under the race detector, as goroutines
		// of one process.
		ns = []int{1, 2, 3, 5}
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			res := procRun(t, n, "regmatrix", "REG ", "BRAID_ALGO=shm", "BRAID_SHM_SLOT=64K", "BRAID_TIMEOUT=60s")
			var published, read uint64
			for r := range n {
				if len(res[r]) != 1 {
					t.Errorf("rank %d reported %q", r, res[r])
					continue
				}
				var p, q uint64
				var calls int
				if _, err := fmt.Sscanf(res[r][0], "%d calls, %d published, %d read", &calls, &p, &q); err != nil {
					t.Errorf("rank %d: %q: %v", r, res[r][0], err)
				}
				published += p
				read += q
			}
			t.Logf("%d ranks: %d chunks published and %d read by reference", n, published, read)
			if n > 1 && (published == 0 || read == 0) {
				t.Errorf("%d chunks published and %d read by reference: the registered path did not run", published, read)
			}
		})
	}
}

// regMatrixChild is one rank of TestMatrixRegisteredProcs.
func regMatrixChild() int {
	braid.SetDirectMin(1)
	ctx := context.Background()
	c, fail := childComm(ctx)
	if c == nil {
		return 1
	}
	n, rank := c.Size(), c.Rank()
	calls := 0
	for _, coll := range regColls {
		for _, k := range regCases(coll, n) {
			calls++
			regIn, regOut := (rank+calls)%2 == 0, (rank+calls)%3 == 0
			if err := regCall(c, coll, k, regIn, regOut); err != nil {
				return fail(fmt.Errorf("%v %v %v count=%d root=%d inplace=%v registered in=%v out=%v: %w", coll, k.d, k.op, k.count, k.root, k.inPlace, regIn, regOut, err))
			}
		}
	}
	p, q := braid.DirectStats(c)
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("REG %d calls, %d published, %d read\n", calls, p, q)
	return 0
}

// regCall is oneCall with the buffers in registered memory where regIn
// (the input; a bcast's buffer) and regOut (the output) say.
func regCall(c *braid.Comm, coll sched.Collective, k mcase, regIn, regOut bool) error {
	n, rank, d, op, root := c.Size(), c.Rank(), k.d, k.op, k.root
	p := sched.Params{Coll: coll, NRanks: n, Count: k.count, Root: root}
	es := d.Size()
	salt := k.count + 7*n + int(d)*13 + int(op)*101
	in, out, free, err := regBuffers(c, p, rank, es, k.inPlace, regIn, regOut)
	if err != nil {
		return err
	}
	defer free()
	for i := range out {
		out[i] = 0xA5
	}
	if coll == sched.Bcast {
		if rank == root {
			check.Fill(d, op, out, rank, 0, salt)
		}
	} else {
		check.Fill(d, op, in, rank, 0, salt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bench.Call(ctx, c, coll, braid.Raw{Bytes: in, Type: d}, braid.Raw{Bytes: out, Type: d}, op, root); err != nil {
		return err
	}
	return check.Verify(p, d, op, rank, out[:p.OutLen(rank)*es], salt)
}

// regBuffers returns the buffers check.Buffers would, in the same layout
// (in place: one buffer and a part of it), with the input in registered
// memory if regIn is set and the output if regOut is (an in-place pair,
// and a bcast's buffer, by regIn), and a function that frees them.
func regBuffers(c *braid.Comm, p sched.Params, rank, es int, inPlace, regIn, regOut bool) (in, out []byte, free func() error, err error) {
	gin, gout := check.Buffers(p, rank, es, inPlace)
	var held [][]byte
	free = func() error {
		for _, b := range held {
			if err := c.Free(b); err != nil {
				return err
			}
		}
		return nil
	}
	alloc := func(g []byte, reg bool) ([]byte, error) {
		if len(g) == 0 || !reg {
			return g, nil
		}
		b, err := braid.Alloc[uint8](c, len(g))
		if err == nil {
			held = append(held, b)
		}
		return b, err
	}
	addr := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	if p.Coll == sched.Bcast {
		out, err = alloc(gout, regIn)
		return gin, out, free, err
	}
	if len(gin) > 0 && len(gout) > 0 && addr(gin) < addr(gout)+uintptr(len(gout)) && addr(gout) < addr(gin)+uintptr(len(gin)) {
		big := gout
		if len(gin) > len(gout) {
			big = gin
		}
		b, err := alloc(big, regIn)
		if err != nil {
			return nil, nil, free, err
		}
		i, o := int(addr(gin)-addr(big)), int(addr(gout)-addr(big))
		return b[i : i+len(gin)], b[o : o+len(gout)], free, nil
	}
	if in, err = alloc(gin, regIn); err != nil {
		return nil, nil, free, err
	}
	out, err = alloc(gout, regOut)
	return in, out, free, err
}

// TestRegisteredStaleProcs: over processes, every rank frees its
// registered buffers and allocates new ones between calls, many times,
// with new contents each time, their ids and file ranges now reused and
// now moved (a rank-dependent dummy allocation comes and goes before
// them), and every result is checked: a reader that used a stale mapping
// would read the freed buffer's range (now holding no memory, or another
// buffer). Each new buffer's generation must have been mapped anew by
// every reader, and at the end, after everything is freed and one more
// buffer read, each reader's cache must hold that one mapping per peer.
// Last, a communicator split from the world in another rank order reads
// its members' buffers (by their world ranks).
func TestRegisteredStaleProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			res := procRun(t, n, "regstale", "STALE ", "BRAID_ALGO=shm", "BRAID_SHM_SLOT=16K", "BRAID_TIMEOUT=60s")
			for r := range n {
				if len(res[r]) != 1 {
					t.Errorf("rank %d reported %q", r, res[r])
					continue
				}
				var iters, maps, entries, unmaps int
				if _, err := fmt.Sscanf(res[r][0], "%d iterations, %d maps, %d entries, %d unmaps", &iters, &maps, &entries, &unmaps); err != nil {
					t.Fatalf("rank %d: %q: %v", r, res[r][0], err)
				}
				if r == 0 {
					t.Logf("rank 0: %s", res[r][0])
				}
				// Three buffers a step, each read by every reader.
				if want := 3 * iters * (n - 1); maps < want {
					t.Errorf("rank %d mapped %d allocations of its peers, want at least %d (a new mapping for each new generation)", r, maps, want)
				}
				if entries != n-1 {
					t.Errorf("rank %d's cache holds %d mappings at the end, want %d (one per peer)", r, entries, n-1)
				}
			}
		})
	}
}

// regStaleChild is one rank of TestRegisteredStaleProcs.
func regStaleChild() int {
	braid.SetDirectMin(1)
	ctx := context.Background()
	c, fail := childComm(ctx)
	if c == nil {
		return 1
	}
	n, rank := c.Size(), c.Rank()
	v := func(q, i, j int) int32 { return int32(q*1000003 + i*7919 + j) }
	alloc := func(m int) []int32 {
		b, err := braid.Alloc[int32](c, m)
		if err != nil {
			panic(err)
		}
		return b
	}
	const iters = 120
	for i := range iters {
		var dummy []int32
		if (i+rank)%3 != 0 {
			dummy = alloc(1000 * (1 + (i*7+rank)%5))
		}
		m := []int{3000, 3000, 5000, 12000}[i%4]
		ag := alloc(m)
		for j := range ag {
			ag[j] = v(rank, i, j)
		}
		rs := alloc(n * m)
		for j := range rs {
			rs[j] = v(rank, i, j)
		}
		ar := alloc(m)
		for j := range ar {
			ar[j] = v(rank, i, j)
		}
		out := make([]int32, n*m)
		if err := c.Allgather(ctx, ag, out); err != nil {
			return fail(err)
		}
		for j, x := range out {
			if q := j / m; x != v(q, i, j%m) {
				return fail(fmt.Errorf("step %d: allgather [%d] = %d, want %d", i, j, x, v(q, i, j%m)))
			}
		}
		rso := make([]int32, m)
		if err := c.ReduceScatter(ctx, rs, rso, braid.Sum); err != nil {
			return fail(err)
		}
		for j, x := range rso {
			var want int32
			for q := range n {
				want += v(q, i, rank*m+j)
			}
			if x != want {
				return fail(fmt.Errorf("step %d: reducescatter [%d] = %d, want %d", i, j, x, want))
			}
		}
		if err := c.Allreduce(ctx, ar, ar, braid.Sum); err != nil {
			return fail(err)
		}
		for j, x := range ar {
			var want int32
			for q := range n {
				want += v(q, i, j)
			}
			if x != want {
				return fail(fmt.Errorf("step %d: allreduce [%d] = %d, want %d", i, j, x, want))
			}
		}
		for _, b := range [][]int32{ar, ag, rs, dummy} {
			if b != nil {
				if err := c.Free(b); err != nil {
					return fail(err)
				}
			}
		}
	}
	// Everything is freed: one more buffer, read by every rank, and each
	// reader's cache sweeps the freed mappings out.
	if err := c.Barrier(ctx); err != nil {
		return fail(err)
	}
	last := alloc(4096)
	if err := c.Allgather(ctx, last, make([]int32, n*4096)); err != nil {
		return fail(err)
	}
	s := braid.RegCacheStats(c)
	// A split communicator, its ranks in another order, reads its
	// members' registered buffers by their world ranks.
	sub, err := c.Split(ctx, rank%2, n-rank)
	if err != nil {
		return fail(err)
	}
	sout := make([]int32, sub.Size()*4096)
	for j := range last {
		last[j] = v(rank, iters, j)
	}
	if err := sub.Allgather(ctx, last, sout); err != nil {
		return fail(err)
	}
	for q := range sub.Size() {
		w := rank%2 + 2*(sub.Size()-1-q)
		for j := range 4096 {
			if x := sout[q*4096+j]; x != v(w, iters, j) {
				return fail(fmt.Errorf("split allgather: block %d [%d] = %d, want %d", q, j, x, v(w, iters, j)))
			}
		}
	}
	if p, q := braid.DirectStats(sub); sub.Size() > 1 && (p == 0 || q == 0) {
		return fail(fmt.Errorf("split: %d chunks published and %d read by reference", p, q))
	}
	if err := sub.Close(); err != nil {
		return fail(err)
	}
	if err := c.Close(); err != nil {
		return fail(err)
	}
	fmt.Printf("STALE %d iterations, %d maps, %d entries, %d unmaps\n", iters, s.Maps, s.Entries, s.Unmaps)
	return 0
}
