package shmcoll

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// mappedGroups returns n groups over one area file mapped n times, as n
// processes would map it: the groups wait by spinning, without the
// goroutine ranks' wake-ups.
func mappedGroups(tb testing.TB, n int) []*Group {
	tb.Helper()
	var o Options
	// BRAID_BENCH_FLATMAX sets the groups' FlatMax (bytes), to compare
	// one phase with two on a machine.
	o.FlatMax, _ = strconv.Atoi(os.Getenv("BRAID_BENCH_FLATMAX"))
	// BRAID_BENCH_RDMAX sets RDMax (-1: no recursive doubling).
	o.RDMax, _ = strconv.Atoi(os.Getenv("BRAID_BENCH_RDMAX"))
	o.RDRanks, _ = strconv.Atoi(os.Getenv("BRAID_BENCH_RDRANKS"))
	return areaGroups(tb, n, o)
}

// areaGroups returns n groups over one area file mapped n times in this
// process, as processes map it (with o): they wait by spinning, and may
// publish by address (each reads the others' memory with
// process_vm_readv on this process).
func areaGroups(tb testing.TB, n int, o Options) []*Group {
	tb.Helper()
	g0, path, err := Make(tb.TempDir(), n, o, []byte("area"))
	if err != nil {
		tb.Fatal(err)
	}
	gs := []*Group{g0}
	for r := 1; r < n; r++ {
		g, err := Open(path, r, n, o, []byte("area"))
		if err != nil {
			tb.Fatal(err)
		}
		gs = append(gs, g)
	}
	Unlink(path)
	tb.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// BenchmarkArea times the area's own collectives between n ranks, each on
// a locked thread of this process (so with n cores or more, as processes
// with a core each): the area's flag protocol and copies, without the
// communicator's call path (BenchmarkCallOverheadShm in the root package
// times that). Set GOMAXPROCS to at least the largest n. The sizes are a
// rank's input (allreduce, bcast, allgather) or output (reducescatter);
// BRAID_BENCH_RANKS and BRAID_BENCH_SIZES (comma-separated) replace the
// lists below.
func BenchmarkArea(b *testing.B) {
	for _, n := range benchList(b, "BRAID_BENCH_RANKS", []int{2, 4, 8, 16}) {
		if n > runtime.GOMAXPROCS(0) {
			continue
		}
		for _, size := range benchList(b, "BRAID_BENCH_SIZES", []int{8, 256, 1024, 4096, 16384}) {
			for _, coll := range []string{"allreduce", "bcast", "allgather", "reducescatter"} {
				b.Run(coll+"/n"+strconv.Itoa(n)+"/"+strconv.Itoa(size), func(b *testing.B) {
					benchArea(b, n, size, coll)
				})
			}
		}
	}
}

// benchList returns the integers of the comma-separated list in the
// environment variable env, or def where it is unset.
func benchList(b *testing.B, env string, def []int) []int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var l []int
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || x <= 0 {
			b.Fatalf("%s=%q: want positive integers, comma-separated", env, v)
		}
		l = append(l, x)
	}
	return l
}

func benchArea(b *testing.B, n, size int, coll string) {
	gs := mappedGroups(b, n)
	red := sumF64()
	iters := b.N
	var wg sync.WaitGroup
	errs := make([]error, n)
	b.ResetTimer()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			g := gs[r]
			in := make([]byte, size)
			out := make([]byte, size)
			switch coll {
			case "allgather":
				out = make([]byte, size*n)
			case "reducescatter":
				in = make([]byte, size*n)
			}
			// The communicator's spin while every rank has a core (its
			// setSpin): with the default 64 polls the waits yield their
			// thread, and the 2-rank 8-byte allreduce took 0.66-0.74 µs on
			// the 2-core VM against 0.50 through the whole call path.
			c := &Call{Ctx: context.Background(), Timeout: 20 * time.Second, Spin: 50 * time.Microsecond}
			if n > runtime.NumCPU() {
				c.Spin = -1
			}
			for range iters {
				c.Ticket = g.Ticket()
				var err error
				switch coll {
				case "allreduce":
					err = g.Allreduce(c, in, out, red)
				case "bcast":
					err = g.Bcast(c, in, 0)
				case "allgather":
					err = g.Allgather(c, in, out)
				case "reducescatter":
					err = g.ReduceScatter(c, in, out, red)
				}
				if err != nil {
					errs[r] = err
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
}

// BenchmarkLinePingPong is the floor of any exchange between two cores: one
// cache line passed back and forth between two locked threads, each
// storing a counter the other polls. ns/op is one round trip (two
// one-way transfers of a line).
func BenchmarkLinePingPong(b *testing.B) { linePingPong(b, atomic.StoreUint64) }

// BenchmarkLinePingPongRelease is BenchmarkLinePingPong with the stores
// the area publishes with (storeRelease): the difference is what a locked
// exchange costs a hand-off.
func BenchmarkLinePingPongRelease(b *testing.B) { linePingPong(b, storeRelease) }

func linePingPong(b *testing.B, store func(*uint64, uint64)) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two threads")
	}
	words := make([]uint64, 32)
	base := uintptr(unsafe.Pointer(&words[0]))
	off := (64 - base%64) % 64 / 8
	ping, pong := &words[off], &words[off+8] // separate lines
	iters := uint64(b.N)
	var wg sync.WaitGroup
	wg.Add(1)
	b.ResetTimer()
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := uint64(1); i <= iters; i++ {
			for atomic.LoadUint64(ping) != i {
			}
			store(pong, i)
		}
	}()
	runtime.LockOSThread()
	for i := uint64(1); i <= iters; i++ {
		store(ping, i)
		for atomic.LoadUint64(pong) != i {
		}
	}
	runtime.UnlockOSThread()
	wg.Wait()
}
