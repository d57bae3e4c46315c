package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// inflight checks that no piece of a call is still running when the call
// returns: it counts the pieces running and the bytes done.
type inflight struct {
	running atomic.Int32
	bytes   atomic.Int64
	spin    int
}

func (f *inflight) Piece(lo, hi int) {
	f.running.Add(1)
	for i := 0; i < f.spin; i++ {
		if i&15 == 15 {
			runtime.Gosched()
		}
	}
	f.bytes.Add(int64(hi - lo))
	f.running.Add(-1)
}

// TestBackToBackJobs: many tiny split calls back to back from one caller,
// with the threads oversubscribed (GOMAXPROCS above the cores, and burners)
// so that the OS takes the caller off its core at any point, between
// posting a job to a helper and looking whether it is parked too, while
// helpers spin out and park between calls. When a call returns, each of
// its pieces must be done, none still running, and no helper pending. (On
// a 2-core VM it caught the late wake that TestLateWake stages in about a
// fifth of its runs under the race detector, a third without.)
func TestBackToBackJobs(t *testing.T) {
	d := time.Second
	if testing.Short() {
		d = 200 * time.Millisecond
	}
	cpus := min(runtime.NumCPU(), 8)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * cpus))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * cpus {
		wg.Add(1)
		go func() { // a burner, so that threads wait for cores
			defer wg.Done()
			for x := 0; !stop.Load(); x++ {
				if x&(1<<20-1) == 0 {
					time.Sleep(time.Duration(x>>20%7) * 10 * time.Microsecond)
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	start := time.Now()
	calls := 0
	for i := 0; time.Since(start) < d; i++ {
		threads := 2 + i%3
		restore := SetThreads(threads, 64)
		n := 64 * (1 + i%(4*threads+1))
		f := &inflight{spin: i % 5 * 8}
		Run(n, 1, f)
		restore()
		if r := f.running.Load(); r != 0 {
			t.Fatalf("call %d (%d bytes, %d threads): %d pieces still running when it returned", i, n, threads, r)
		}
		if b := f.bytes.Load(); b != int64(n) {
			t.Fatalf("call %d (%d bytes, %d threads): %d bytes done when it returned", i, n, threads, b)
		}
		if p := thePool.pending.Load(); p != 0 {
			t.Fatalf("call %d (%d bytes, %d threads): %d helpers pending after it returned", i, n, threads, p)
		}
		if i%64 == 63 { // sometimes long enough for the helpers to park
			time.Sleep(time.Duration(i%3) * 40 * time.Microsecond)
		}
		calls++
	}
	t.Logf("%d calls", calls)
}

// TestLateWake: a caller posts a job to a helper (seq) and then looks
// whether it is parked; one held up in between can find the helper parked
// again after it did the job, and wake it. The helper must not take that
// wake for a new job: doing so counted it out of the job twice, so that a
// call could return while another helper was still at its pieces and
// reading the job's fields, which the next call rewrote (the race detector
// caught that in shmcoll's TestCollectivesThreads). Here the test is the
// caller, on a pool of its own with one helper.
func TestLateWake(t *testing.T) {
	p := &pool{done: make(chan struct{}, 1)}
	w := &worker{wake: make(chan struct{}, 1)}
	p.workers = []*worker{w}
	go p.serve(w) // parks for good when the test ends
	post := func(n int, lookAtParked func()) {
		f := &inflight{}
		p.task, p.n, p.piece, p.count = f, n, 64, (n+63)/64
		p.next.Store(0)
		p.pending.Store(1)
		w.seq.Add(1)
		lookAtParked()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the helper did not do a job of %d bytes in 10 s", n)
		}
		if b := f.bytes.Load(); b != int64(n) {
			t.Fatalf("%d bytes of %d done", b, n)
		}
	}
	wakeIfParked := func() { // run's look at parked
		if w.parked.Load() && w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	late := 0 // rounds whose wake came after the helper did the job
	for start := time.Now(); late < 20; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d late wakes in 10 s", late)
		}
		// the caller is held up after posting until the helper has parked,
		// (most often) once it has done the job
		post(1024, func() {
			for !w.parked.Load() {
				time.Sleep(10 * time.Microsecond)
			}
			if p.pending.Load() == 0 {
				late++
			}
			wakeIfParked()
		})
		for t0 := time.Now(); time.Since(t0) < 2*time.Millisecond; runtime.Gosched() {
			if n := p.pending.Load(); n != 0 {
				t.Fatalf("a late wake for a job done made the helper count itself out again (pending %d)", n)
			}
		}
		select {
		case <-p.done:
			t.Fatal("a late wake for a job done made the helper signal done again")
		default:
		}
		// and the helper still does the next jobs, spinning or parked when
		// they are posted
		post(4096, wakeIfParked)
		if late%2 == 1 {
			time.Sleep(200 * time.Microsecond)
		}
		post(4096, wakeIfParked)
	}
}
