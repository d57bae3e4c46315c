package profile

import (
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Kind says what sort of call a Call is.
type Kind uint8

// The kinds of calls.
const (
	Collective Kind = iota // allreduce, bcast, ..., barrier
	P2P                    // send and recv
)

func (k Kind) String() string {
	if k == P2P {
		return "p2p"
	}
	return "collective"
}

// Call is one finished call, as the communicator hands it to Record. Times
// are nanoseconds since the recorder started (Recorder.Now).
type Call struct {
	Name  string // the method without its I: "allreduce", "send", "recv"
	Kind  Kind
	Async bool   // issued by a non-blocking method (IAllreduce, ISend, ...)
	Comm  uint32 // the communicator's id
	Rank  int    // the caller's rank in the communicator
	Group int    // the communicator's size
	Seq   uint32 // the collective's sequence number in its communicator (0 for p2p)
	Tag   int    // p2p: the message's tag

	DType    string // the element type's name, "float32"
	InElems  int64  // elements of the send buffer on this rank (Kineto's "In msg nelems")
	OutElems int64  // elements of the receive buffer on this rank ("Out msg nelems")
	Bytes    int64  // the call's size, binned in the histograms (see SizeBin)
	Peer     int    // p2p: the partner's world rank; -1 for collectives
	Algo     string // the planner's choice, "ring", "segring:seg=64K", "shm"

	// Start and End are the call's entry and return (for a non-blocking
	// call, its issue and its completion); Issue is the time the issuing
	// method took, which counts towards the time spent in Braid (the rest of
	// a non-blocking call's time counts only where Wait blocks on it).
	Start, End, Issue int64

	Failed bool // the call returned an error: it counts in Failed and time, not in Calls, bytes or histograms

	// Collectives: the call's arrival (entry) and return on the job's
	// common clock, in nanoseconds (0: unknown), which go to the
	// summary's arrival log (see Summary.Arrivals); and, where this rank
	// knew every rank's arrival (calls through the host's shared area),
	// the call's worst-case and average-case imbalance times, ns.
	Arrive, Return int64
	Known          bool
	Worst, Average int64
}

// MaxEvents is how many calls a rank's trace keeps. Up to MaxEvents calls it
// keeps every one; beyond, it keeps every s-th call in the order calls end,
// s doubling each time the trace fills again, so that it samples the whole
// run evenly (the summary says s). The summary's counters and histograms
// always count every call.
const MaxEvents = 1 << 16

// Small blocking calls are timed by sampling: once a recorder has timed
// SampleAfter calls of fewer than SampleBelow bytes, and while the calls it
// records stay that small, Begin reads the clock for one call in
// SampleEvery and the others are counted (calls, bytes, bins, algorithms,
// partners: every counter stays exact) but not timed; their time is
// estimated from the timed calls of their size bin, and they are not in the
// trace. Two clock reads cost about 0.1 µs, several percent of a call of a
// few microseconds; non-blocking calls are always timed.
const (
	SampleBelow = 64 << 10
	SampleAfter = 1024
	SampleEvery = 16
)

// Untimed is the start time Begin returns for a call it does not time.
const Untimed int64 = -1 << 63

// Recorder collects one rank's calls and writes them to files at Close. Its
// methods may be called from several goroutines at once. A nil *Recorder
// means profiling is off; the communicator checks for nil before it reads
// a clock.
type Recorder struct {
	path  string
	rank  int
	size  int
	host  string
	base  time.Time
	mu    sync.Mutex
	stats map[statKey]*stat
	order []*stat // in the order of their first call
	last  *stat   // the last call's entry: training loops repeat one call
	peers map[int]*PeerStats

	events  eventList
	stride  uint64 // the trace keeps calls whose number is a multiple of stride
	ended   uint64 // calls and waits offered to the trace
	closed  bool
	endTime int64

	small    uint64      // small blocking calls recorded
	sampling atomic.Bool // Begin times one call in SampleEvery
	tick     atomic.Uint64

	arrivals []Arrival // the arrival log (see Summary.Arrivals)
}

// New returns a recorder for world rank rank of size ranks on host whose
// files are path.RANK (the summary) and path.RANK.trace.json (the trace).
// Its clock starts now.
func New(path string, rank, size int, host string) *Recorder {
	return &Recorder{path: path, rank: rank, size: size, host: host, base: time.Now(),
		stats: map[statKey]*stat{}, peers: map[int]*PeerStats{}, stride: 1}
}

// Now returns the nanoseconds since the recorder started, on the
// monotonic clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.base)) }

// Begin returns the start of a blocking call: Now, or Untimed while small
// calls are sampled and this one is not in the sample.
func (r *Recorder) Begin() int64 {
	if r.sampling.Load() && r.tick.Add(1)%SampleEvery != 0 {
		return Untimed
	}
	return r.Now()
}

// End returns the end of a blocking call that began at t0: Now, or Untimed
// if t0 is.
func (r *Recorder) End(t0 int64) int64 {
	if t0 == Untimed {
		return Untimed
	}
	return r.Now()
}

type statKey struct {
	name  string
	kind  Kind
	async bool
}

// stat accumulates the calls of one name and kind.
type stat struct {
	key      statKey
	calls    uint64
	timed    uint64 // successful calls whose time was measured
	failed   uint64
	bytes    uint64
	time     int64 // blocked in Braid: entry to return, or issue and waits (timed calls)
	span     int64 // entry to return, or issue to completion (timed successful calls)
	min, max int64 // of span
	wait     int64
	waits    uint64
	zero     bin     // calls of 0 bytes
	hist     [64]bin // hist[n]: calls of (2^(n−1), 2^n] bytes
	algos    []algoN // calls per (algorithm, bin)
	lastAlgo *algoN  // the last call's entry

	known                uint64 // calls whose every rank's arrival was known
	worst, average, wmax int64  // their imbalance times, summed (worst, average) and the largest
}

type bin struct {
	calls uint64
	timed uint64
	time  int64 // of the timed calls
}

// estimate returns the time of all of b's calls, scaled from the timed
// ones.
func (b bin) estimate() int64 {
	if b.timed == 0 || b.timed == b.calls {
		return b.time
	}
	return int64(float64(b.time) * float64(b.calls) / float64(b.timed))
}

type algoN struct {
	algo  string
	bin   int // -1 for 0 bytes
	calls uint64
}

// SizeBin returns the histogram bin of a call of b bytes: n such that b lies in
// (2^(n−1), 2^n], as Temuçin's profiler bins message sizes ("High-
// Performance Interconnect-Aware MPI Communication for Deep Learning
// Workloads", MASc thesis, Queen's University 2021, §3.3.4); -1 for b ≤ 0.
func SizeBin(b int64) int {
	if b <= 0 {
		return -1
	}
	return bits.Len64(uint64(b - 1))
}

// BinUpper returns the upper end 2^n of bin n in bytes (0 for bin -1).
func BinUpper(n int) int64 {
	if n < 0 {
		return 0
	}
	return 1 << n
}

func (r *Recorder) stat(k statKey) *stat {
	if s := r.last; s != nil && s.key == k {
		return s
	}
	s := r.stats[k]
	if s == nil {
		s = &stat{key: k}
		r.stats[k] = s
		r.order = append(r.order, s)
	}
	r.last = s
	return s
}

// Record adds a finished call.
// A call whose Start is Untimed (Begin did not time it) is counted but not
// timed or traced.
func (r *Recorder) Record(c *Call) {
	timed := c.Start != Untimed
	d := c.End - c.Start
	blocked := d
	if c.Async {
		blocked = c.Issue
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if !c.Async {
		if c.Bytes < SampleBelow {
			r.small++
		}
		if want := c.Bytes < SampleBelow && r.small > SampleAfter; r.sampling.Load() != want {
			r.sampling.Store(want)
		}
	}
	s := r.stat(statKey{c.Name, c.Kind, c.Async})
	if c.Failed {
		s.failed++
		if timed {
			s.time += blocked
			r.trace(c)
		}
		return
	}
	s.calls++
	s.bytes += uint64(max(c.Bytes, 0))
	n := SizeBin(c.Bytes)
	h := &s.zero
	if n >= 0 {
		h = &s.hist[n]
	}
	h.calls++
	if timed {
		if s.timed == 0 || d < s.min {
			s.min = d
		}
		s.max = max(s.max, d)
		s.timed++
		s.time += blocked
		s.span += d
		h.timed++
		h.time += d
	}
	if c.Known {
		s.known++
		s.worst += c.Worst
		s.average += c.Average
		s.wmax = max(s.wmax, c.Worst)
	}
	if c.Arrive != 0 && logArrival(c.Seq, len(r.arrivals)) {
		r.arrivals = append(r.arrivals, Arrival{Comm: c.Comm, Seq: c.Seq, Name: c.Name, Group: c.Group, Rank: c.Rank,
			Bytes: c.Bytes, ArriveNS: c.Arrive, ReturnNS: c.Return})
	}
	if a := s.lastAlgo; a != nil && a.algo == c.Algo && a.bin == n {
		a.calls++
	} else {
		s.countAlgo(c.Algo, n)
	}
	if c.Kind == P2P {
		p := r.peers[c.Peer]
		if p == nil {
			p = &PeerStats{Peer: c.Peer}
			r.peers[c.Peer] = p
		}
		if c.Name == "send" {
			p.Sends++
			p.SendBytes += uint64(max(c.Bytes, 0))
		} else {
			p.Recvs++
			p.RecvBytes += uint64(max(c.Bytes, 0))
		}
	}
	if timed {
		r.trace(c)
	}
}

func (s *stat) countAlgo(algo string, n int) {
	for i := range s.algos {
		if a := &s.algos[i]; a.algo == algo && a.bin == n {
			a.calls++
			s.lastAlgo = a
			return
		}
	}
	s.algos = append(s.algos, algoN{algo: algo, bin: n, calls: 1})
	s.lastAlgo = nil // append may have moved the slice
}

// Waited adds the time [start, end) that Wait blocked on a non-blocking
// call named name.
func (r *Recorder) Waited(name string, kind Kind, seq uint32, start, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	s := r.stat(statKey{name, kind, true})
	s.time += end - start
	s.wait += end - start
	s.waits++
	r.offer(event{name: name, kind: kind, wait: true, seq: seq, start: start, end: end, peer: -1})
}

// event is a call in the trace.
type event struct {
	name, dtype, algo string
	kind              Kind
	async, wait, fail bool
	comm, seq         uint32
	rank, group, tag  int
	peer              int
	in, out           int64
	start, end        int64
}

func (r *Recorder) trace(c *Call) {
	r.offer(event{name: c.Name, dtype: c.DType, algo: c.Algo, kind: c.Kind, async: c.Async, fail: c.Failed,
		comm: c.Comm, seq: c.Seq, rank: c.Rank, group: c.Group, tag: c.Tag, peer: c.Peer,
		in: c.InElems, out: c.OutElems, start: c.Start, end: c.End})
}

// offer keeps e if its number is a multiple of the stride, and thins the
// trace to every other event when it is full.
func (r *Recorder) offer(e event) {
	n := r.ended
	r.ended++
	if n%r.stride != 0 {
		return
	}
	if r.events.n == MaxEvents {
		// Events were kept at multiples of stride; keep those at
		// multiples of 2·stride.
		r.events.halve()
		r.stride *= 2
		if n%r.stride != 0 {
			return
		}
	}
	r.events.add(e)
}

// eventList holds events in blocks, so that it grows without copying;
// blocks emptied by halve are kept for reuse.
type eventList struct {
	blocks [][]event
	n      int
}

const blockEvents = 4096

func (l *eventList) add(e event) {
	b := l.n / blockEvents
	if b == len(l.blocks) {
		l.blocks = append(l.blocks, make([]event, 0, blockEvents))
	}
	l.blocks[b] = append(l.blocks[b], e)
	l.n++
}

func (l *eventList) at(i int) *event { return &l.blocks[i/blockEvents][i%blockEvents] }

// halve keeps the events at even positions.
func (l *eventList) halve() {
	k := 0
	for i := 0; i < l.n; i += 2 {
		*l.at(k) = *l.at(i)
		k++
	}
	for b := range l.blocks {
		keep := min(max(k-b*blockEvents, 0), blockEvents)
		clear(l.blocks[b][keep:])
		l.blocks[b] = l.blocks[b][:keep]
	}
	l.n = k
}

// list returns a copy of the events in order.
func (l *eventList) list() []event {
	out := make([]event, 0, l.n)
	for _, b := range l.blocks {
		out = append(out, b...)
	}
	return out
}

// Path returns the prefix of the recorder's files.
func (r *Recorder) Path() string { return r.path }

// Close stops recording and writes path.RANK and path.RANK.trace.json.
// Calls recorded after Close are dropped. Closing again does nothing.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.endTime = r.Now()
	r.mu.Unlock()
	sum := r.summary(r.endTime)
	if err := writeTrace(r.path+"."+itoa(r.rank)+".trace.json", r, sum.Trace.BaseNS); err != nil {
		return err
	}
	return WriteSummary(r.path+"."+itoa(r.rank), sum)
}

// Summary returns what the recorder has counted so far (up to Close, once
// closed).
func (r *Recorder) Summary() *Summary {
	r.mu.Lock()
	wall := r.endTime
	if !r.closed {
		wall = r.Now()
	}
	r.mu.Unlock()
	return r.summary(wall)
}

// summary builds the summary of a run of wall nanoseconds.
func (r *Recorder) summary(wall int64) *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Summary{Version: Version, Rank: r.rank, Size: r.size, Host: r.host, PID: os.Getpid(),
		Start: r.base.UTC(), WallUs: us(wall)}
	var in int64
	spans := make([]int64, len(r.order)) // estimated over all calls
	for i, st := range r.order {
		spans[i] = st.zero.estimate()
		for _, b := range st.hist {
			spans[i] += b.estimate()
		}
		// Untimed calls are blocking: their time in Braid is their span.
		in += st.time + spans[i] - st.span
	}
	s.BraidUs = us(in)
	s.Share = share(in, wall)
	for i, st := range r.order {
		t := st.time + spans[i] - st.span
		c := CallStats{Name: st.key.name, Kind: st.key.kind.String(), Async: st.key.async,
			Calls: st.calls, Timed: st.timed, Failed: st.failed, Bytes: st.bytes, TimeUs: us(t), Share: share(t, wall),
			MinUs: us(st.min), MaxUs: us(st.max)}
		if st.calls > 0 {
			c.MeanUs = us(spans[i]) / float64(st.calls)
		}
		if st.key.async {
			ov := 0.0
			if st.span > 0 {
				ov = min(1, max(0, 1-float64(st.wait)/float64(st.span)))
			}
			c.SpanUs, c.WaitUs, c.Waits, c.Overlap = us(st.span), us(st.wait), st.waits, &ov
		}
		if b := st.zero; b.calls > 0 {
			c.Hist = append(c.Hist, Bin{Upper: 0, Calls: b.calls, Timed: b.timed, TimeUs: us(b.estimate())})
		}
		for n, b := range st.hist {
			if b.calls > 0 {
				c.Hist = append(c.Hist, Bin{Upper: BinUpper(n), Calls: b.calls, Timed: b.timed, TimeUs: us(b.estimate())})
			}
		}
		for _, a := range st.algos {
			c.Algos = append(c.Algos, AlgoCount{Algo: a.algo, Upper: BinUpper(a.bin), Calls: a.calls})
		}
		if st.known > 0 {
			sp := us(st.worst) / float64(st.known)
			c.ArrivalSpreadUs = &sp
			c.ArrivalKnown = st.known
			c.ArrivalAverageUs = us(st.average) / float64(st.known)
			c.ArrivalMaxUs = us(st.wmax)
		}
		s.Calls = append(s.Calls, c)
	}
	s.Arrivals = append([]Arrival(nil), r.arrivals...)
	for _, p := range r.peers {
		s.P2P = append(s.P2P, *p)
	}
	sortPeers(s.P2P)
	s.Trace = TraceInfo{File: base(r.path) + "." + itoa(r.rank) + ".trace.json", Events: r.events.n,
		Offered: r.ended, Stride: r.stride, BaseNS: r.base.UnixNano()}
	return s
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

// The arrival log keeps, per rank, the collectives whose sequence number
// is at most ArrivalAll or a multiple of ArrivalEvery, up to MaxArrivals
// records: the same calls on every rank of a program whose ranks make the
// same calls, so that braid prof finds every rank's arrival at them.
const (
	ArrivalAll   = 4096
	ArrivalEvery = 64
	MaxArrivals  = 16384
)

func logArrival(seq uint32, n int) bool {
	return n < MaxArrivals && (seq <= ArrivalAll || seq%ArrivalEvery == 0)
}

func share(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}
