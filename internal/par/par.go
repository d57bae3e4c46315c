// Package par splits a large memory-bound step of one rank, a copy or a
// reduction, across the threads the rank may use (runtime.GOMAXPROCS,
// which Braid lowers to the host's cores per local rank), so that a rank
// that has a node's cores to itself is not bound by one core's copy
// bandwidth.
//
// A call below MinSize bytes, or made while Threads is 1, runs on the
// caller's goroutine as the plain loop would: the cost is a size check.
// Above it the caller cuts the range into pieces aligned to 64 bytes and
// to the element size, wakes helpers of a persistent pool, and takes
// pieces itself; helpers take the rest, one at a time, from a shared
// counter, so a helper that wakes late does less. The call returns once
// every piece is done.
//
// One call at a time uses the pool: a call made while another holds it
// (another communicator's goroutine, a helper's own piece) runs on its
// caller alone. A call on the steady path allocates nothing.
//
// The number of threads is GOMAXPROCS, read at each large call, or the
// value of BRAID_COPY_THREADS (EnvThreads) when set: 1 turns splitting
// off. SetThreads overrides both, for tests.
package par

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/internal/size"
)

// EnvThreads is the environment variable that caps the threads one rank
// splits a large copy or reduction across: 1 turns splitting off; unset,
// it is GOMAXPROCS. It is read once, at the first large call; ParseThreads
// checks it.
const EnvThreads = "BRAID_COPY_THREADS"

// MaxThreads is the most threads a call splits across.
const MaxThreads = 64

// EnvMinSize is the environment variable that sets the least bytes a copy
// or reduction splits (MinSize; a size such as 512K or 2M). It is read
// once, at the first large call; ParseMinSize checks it.
const EnvMinSize = "BRAID_COPY_MIN"

// DefaultMinSize is the least bytes that a call splits unless EnvMinSize
// says otherwise (see MinSize). The shared area cuts calls into chunks of
// at most a slot (1 MiB up to 8 ranks), whose copies and reductions are
// split from here: on the 16-core node (session 13, 2 ranks of 8 threads)
// the area's calls of 1-64 MiB took 0.28-0.64 of their one-thread time.
// Copies of 256 KiB did not gain, they lost: the node's cores have 2 MiB
// of L2 each, a 256 KiB chunk is still in its writer's, and helpers on
// other cores pull it from there. With the split at 256 KiB (session 16,
// 2 ranks, medians of two rounds), Bruck's allgather of 512 KiB (256 KiB
// blocks) took 77.5 µs and 31.1 with it at 512 KiB, the area's allreduce
// of 256 KiB 81.3 and 44.8, its reduce-scatter of 512 KiB 84.0 and 57.1,
// its broadcast of 256 KiB 30.5 and 21.3; from 1 MiB splitting still paid
// (the area's allreduce of 1 MiB 123 µs split, 263 not; its allgather 82
// and 108), so the limit is 512 KiB. The executor's steps, whose copies
// come one at a time between transfers, split from 2 MiB (MinSizeOr; see
// package exec's splitFloor).
const DefaultMinSize = 512 << 10

// ParseMinSize parses a value of EnvMinSize: a size from 64 KiB to 1 GiB.
func ParseMinSize(v string) (int, error) {
	n, err := size.Parse(v)
	if err != nil || n < 64<<10 || n > 1<<30 {
		return 0, fmt.Errorf("%s=%q: want a size from 64K to 1G, the least bytes a rank splits a copy or reduction at across its threads (default %dK)", EnvMinSize, v, DefaultMinSize>>10)
	}
	return int(n), nil
}

// minPiece is the least bytes of a piece: a piece's hand-out costs an
// atomic add on a line every participant writes.
const minPiece = 32 << 10

// spinFor is how long an idle helper polls its mailbox before it parks:
// a collective's chunks come one after the other, each a few tens of
// microseconds apart, and waking a parked goroutine costs microseconds.
const spinFor = 50 * time.Microsecond

// ParseThreads parses a value of EnvThreads: a whole number from 1 to
// MaxThreads.
func ParseThreads(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxThreads {
		return 0, fmt.Errorf("%s=%q: want a whole number of threads from 1 (no splitting of large copies and reductions) to %d; unset, a rank uses GOMAXPROCS threads", EnvThreads, v, MaxThreads)
	}
	return n, nil
}

var (
	forced  atomic.Int32  // SetThreads' value; 0: none
	minSize atomic.Int64  // bytes; 0: DefaultMinSize
	splits  atomic.Uint64 // calls split so far
	envOnce sync.Once
	envN    int // EnvThreads' value, 0 if unset or invalid
	envMin  int // EnvMinSize's value, 0 if unset or invalid
)

func readEnv() {
	envOnce.Do(func() {
		// Braid's Init reports a bad value.
		if v := os.Getenv(EnvThreads); v != "" {
			envN, _ = ParseThreads(v)
		}
		if v := os.Getenv(EnvMinSize); v != "" {
			envMin, _ = ParseMinSize(v)
		}
	})
}

func envThreads() int {
	readEnv()
	return envN
}

// Threads returns the threads a large call splits across now (at least 1).
func Threads() int {
	if n := forced.Load(); n > 0 {
		return int(n)
	}
	n := runtime.GOMAXPROCS(0)
	if e := envThreads(); e > 0 {
		n = min(n, e)
	}
	return min(n, MaxThreads)
}

// SetThreads makes calls split across n threads whatever GOMAXPROCS is (0:
// back to the default), and minBytes the least bytes that a call splits
// (0: DefaultMinSize); it returns a function that restores the previous
// settings. For tests and benchmarks.
func SetThreads(n, minBytes int) (restore func()) {
	if n < 0 || n > MaxThreads || minBytes < 0 {
		panic(fmt.Sprintf("par.SetThreads(%d, %d): want 0 to %d threads and a size of at least 0", n, minBytes, MaxThreads))
	}
	pn, pm := forced.Swap(int32(n)), minSize.Swap(int64(minBytes))
	return func() { forced.Store(pn); minSize.Store(pm) }
}

// Splits returns how many calls have been split across threads so far in
// this process.
func Splits() uint64 { return splits.Load() }

// MinSize returns the least bytes that a call splits: SetThreads' value,
// else EnvMinSize's, else DefaultMinSize.
func MinSize() int { return MinSizeOr(DefaultMinSize) }

// MinSizeOr is MinSize with def in place of DefaultMinSize: SetThreads'
// value or EnvMinSize's where set, else def (a caller's own default, such
// as the executor's).
func MinSizeOr(def int) int {
	if m := minSize.Load(); m > 0 {
		return int(m)
	}
	if readEnv(); envMin > 0 {
		return envMin
	}
	return def
}

// A Task is work over a range of n bytes that may be done in pieces, in any
// order and at once on several threads: Piece(lo, hi) does bytes [lo, hi).
// Pieces never overlap and together cover the range once.
type Task interface {
	Piece(lo, hi int)
}

// Copy copies src to dst like the built-in copy, split across threads when
// large, and returns the bytes copied. Overlapping slices are copied as
// copy does, on the caller's goroutine.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < MinSize() || overlap(dst[:n], src[:n]) || !split(copyTask{dst: dst[:n], src: src[:n]}) {
		return copy(dst, src)
	}
	return n
}

// CopyStream is Copy with non-temporal stores where the machine has them
// (amd64): dst's lines go to memory without first being read into the
// caches, as an ordinary store's must be, and without evicting what the
// caches hold. For a destination that will not be read again before it
// would have left the caches anyway: a large collective's output.
func CopyStream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n == 0 || overlap(dst[:n], src[:n]) {
		return copy(dst, src)
	}
	if n < MinSize() || !split(copyTask{dst: dst[:n], src: src[:n], stream: true}) {
		return copyStream(dst[:n], src[:n])
	}
	return n
}

// split runs t across the pool's threads, or reports false without doing
// anything when another call holds the pool.
func split(t copyTask) bool {
	p := &thePool
	if !p.mu.TryLock() {
		return false
	}
	p.cp = t
	p.run(len(t.dst), 1, &p.cp)
	p.cp = copyTask{}
	p.mu.Unlock()
	return true
}

func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

type copyTask struct {
	dst, src []byte
	stream   bool // CopyStream's
}

func (t *copyTask) Piece(lo, hi int) {
	if t.stream {
		copyStream(t.dst[lo:hi], t.src[lo:hi])
		return
	}
	copy(t.dst[lo:hi], t.src[lo:hi])
}

// Run does t over n bytes in pieces whose bounds are multiples of align
// (an element's size: 1 to 8 or more; pieces are also multiples of 64
// bytes), split across threads when n is at least MinSize, else as one
// piece on the caller's goroutine. It returns when every piece is done.
// Passing a pointer to a value the caller keeps allocates nothing.
func Run(n, align int, t Task) {
	if n < MinSize() {
		if n > 0 {
			t.Piece(0, n)
		}
		return
	}
	p := &thePool
	if !p.mu.TryLock() {
		t.Piece(0, n)
		return
	}
	p.run(n, align, t)
	p.mu.Unlock()
}

// pool is the helpers, started as calls first need them; mu is held by
// the one call that uses them.
type pool struct {
	mu      sync.Mutex
	workers []*worker
	cp      copyTask // Copy's task, kept here so that it does not escape

	// the current job, written under mu before the helpers are posted
	task    Task
	n       int
	piece   int
	count   int
	_       [64]byte
	next    atomic.Int64 // the next piece to hand out
	_       [56]byte
	pending atomic.Int32 // helpers that have not finished the job
	done    chan struct{}
}

var thePool = pool{done: make(chan struct{}, 1)}

// worker is one helper's mailbox.
type worker struct {
	seq    atomic.Uint32 // jobs posted to it
	parked atomic.Bool   // it waits on wake
	wake   chan struct{}
	_      [48]byte
}

// lcm64 returns the least multiple of both 64 and align.
func lcm64(align int) int {
	a, b := 64, align
	for b != 0 {
		a, b = b, a%b
	}
	return 64 / a * align
}

// run does the job; the caller holds p.mu.
func (p *pool) run(n, align int, t Task) {
	if align < 1 {
		align = 1
	}
	threads := Threads()
	step := lcm64(align)
	// pieces: about four per thread, of at least minPiece bytes (or
	// MinSize, where a test set it lower)
	piece := max(min(minPiece, MinSize()), n/(4*threads))
	piece = (piece + step - 1) / step * step
	count := (n + piece - 1) / piece
	helpers := min(threads, count) - 1
	if helpers <= 0 {
		t.Piece(0, n)
		return
	}
	for len(p.workers) < helpers {
		w := &worker{wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		go p.serve(w)
	}
	splits.Add(1)
	p.task, p.n, p.piece, p.count = t, n, piece, count
	p.next.Store(0)
	p.pending.Store(int32(helpers))
	for _, w := range p.workers[:helpers] {
		w.seq.Add(1)
		if w.parked.Load() && w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	p.take()
	// Wait for the helpers' last pieces by polling, as they wait for jobs,
	// for up to spinFor before blocking: a blocked caller costs a wake-up
	// when the last helper finishes. On the 16-core node (session 16, 2
	// ranks, three alternated rounds of 512 KiB-4 MiB) this took the area's
	// broadcasts to 0.86-0.92 of the time with 1,024 polls, the other
	// collectives within their rounds' spread.
	start := time.Now()
	for i := 0; p.pending.Load() != 0; i++ {
		if i&63 == 63 {
			if time.Since(start) > spinFor {
				break
			}
			runtime.Gosched()
		}
	}
	<-p.done
	p.task = nil
}

// take does pieces until none is left.
func (p *pool) take() {
	for {
		i := int(p.next.Add(1) - 1)
		if i >= p.count {
			return
		}
		lo := i * p.piece
		p.task.Piece(lo, min(lo+p.piece, p.n))
	}
}

// serve is a helper: it waits for a job in its mailbox and takes pieces of
// it.
func (p *pool) serve(w *worker) {
	var seen uint32
	for {
		seen = w.wait(seen)
		p.take()
		if p.pending.Add(-1) == 0 {
			p.done <- struct{}{}
		}
	}
}

// wait returns the count of jobs posted to w (seq) once it differs from
// seen, the count the helper has done: it polls for spinFor, then parks
// until a caller wakes it.
func (w *worker) wait(seen uint32) uint32 {
	for {
		start := time.Now()
		for i := 0; ; i++ {
			if s := w.seq.Load(); s != seen {
				return s
			}
			if i&63 == 63 {
				if time.Since(start) >= spinFor {
					break
				}
				runtime.Gosched()
			}
		}
		w.parked.Store(true)
		if s := w.seq.Load(); s != seen && w.parked.CompareAndSwap(true, false) {
			return s
		}
		// A caller cleared parked and sends. The wake may be for a job
		// already done: a caller posts (seq) before it looks at parked, and
		// one held up in between, off its core, can find the helper parked
		// again after it did that job. So the helper looks at seq again;
		// taking a job on the wake alone counted it out twice (pending),
		// which let a call return while other helpers were still at work
		// and still reading the job that the next call rewrote.
		<-w.wake
	}
}
