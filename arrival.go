package braid

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/internal/monoclock"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/transport"
)

// Arrival times (issue 17, after "Efficient Process Arrival Pattern Aware
// Collective Communication for Deep Learning", Alizadeh et al.,
// EuroMPI/USA 2022, §2.2 and §4.3).
//
// Every collective call takes an arrival stamp when it enters Braid: the
// time on the job's common clock, CLOCK_MONOTONIC of rank 0's host in
// nanoseconds. Ranks on rank 0's host read that clock itself (the kernel
// keeps one for the host), so their stamps compare within 2 µs
// (the process maps Go's monotonic time onto it once: monoclock); a rank on
// another host adds an offset that Init estimates with clockRounds
// ping-pongs with rank 0 (the round with the shortest round trip; its
// error is at most half that round trip, which the rank's debug output
// states). Two hosts' monotonic clocks drift apart by their frequency
// error (NTP keeps it to some parts per million, a few µs a second), so
// such a rank refreshes the offset every Options.ClockRefresh (10 s by
// default) in the background with a few more ping-pongs (clockrefresh.go).

// What each rank learns of the others' stamps:
//
//   - Calls through the host's shared area (the "shm" collectives): the
//     stamps travel in the input flag lines (transport/shmcoll), and a
//     rank knows every rank's in allreduce, allgather, reducescatter and
//     barrier, the root's in bcast, every rank's at the root of reduce.
//     Such a call's imbalance is measured on the spot.
//   - Calls run as schedules: a rank knows its own stamp and the time of
//     its return; the profiler (BRAID_PROFILE) records each rank's stamps
//     and braid prof measures the calls' imbalance from all of them.
//
// Per call site (a communicator's collective and message size class) each
// rank keeps what it knows: ArrivalStats, which Comm.Arrivals returns for
// the planner.

// clockRounds is the ping-pongs of the clock offset estimate.
const clockRounds = 8

// clock gives arrival stamps on the job's common clock.
type clock struct {
	base   time.Time    // with its monotonic reading
	baseNS int64        // this host's CLOCK_MONOTONIC at base, ns
	off    atomic.Int64 // added to map this host's clock to rank 0's host's
	err    atomic.Int64 // bound of off's error (half the round trip), ns
	// gen is odd while the estimate (off and err) changes (set), so that
	// estimate returns an offset and its own bound, never one estimate's
	// offset with another's bound.
	gen atomic.Uint64

	// The refresher's state (clockrefresh.go): the round trip of the
	// estimate in use, and the refreshes rejected since it was made.
	rtt      int64
	rejected int
	// refreshes counts the refreshes that changed the estimate.
	refreshes atomic.Uint64
}

// set moves the offset by delta and, if bound is not negative, makes
// bound its error bound. Only one goroutine sets (Init's estimate, then
// the refresher).
func (k *clock) set(delta, bound int64) {
	k.gen.Add(1)
	k.off.Add(delta)
	if bound >= 0 {
		k.err.Store(bound)
	}
	k.gen.Add(1)
}

// estimate returns the offset and its error bound, from one estimate.
func (k *clock) estimate() (off, bound int64) {
	for {
		g := k.gen.Load()
		if g&1 == 0 {
			off, bound = k.off.Load(), k.err.Load()
			if k.gen.Load() == g {
				return off, bound
			}
		}
		runtime.Gosched()
	}
}

// newClock starts a clock on this host's CLOCK_MONOTONIC, offset 0
// (package monoclock maps Go's monotonic time onto it).
func newClock() *clock {
	k := &clock{}
	k.base, k.baseNS, _ = monoclock.Base()
	return k
}

// now returns the time on the common clock, ns.
func (k *clock) now() int64 { return k.baseNS + k.off.Load() + int64(time.Since(k.base)) }

// clockComm is the communicator id of the clock estimate's messages (a
// point-to-point exchange between rank 0 and each rank of another host,
// at Init and at each refresh), which no user communicator's id meets but
// by a 1 in 2^32 chance.
func clockComm(job uint32) uint32 { return job ^ 0x636c6f63 }

// clockRemote reports whether rank r estimates its clock's offset from
// rank 0's host (at Init and, with Options.ClockRefresh, again): it runs
// on another host than rank 0's.
func (w *world) clockRemote(r int) bool { return w.hosts[r] != w.hosts[0] }

// syncClock estimates the offset of this rank's host clock from rank 0's
// host, on ranks of other hosts; rank 0 answers their pings. Ranks of
// rank 0's host exchange nothing.
func (w *world) syncClock(ctx context.Context, job uint32) error {
	if w.rank == 0 {
		var wg sync.WaitGroup
		errs := make([]error, w.size)
		for r := 1; r < w.size; r++ {
			if !w.clockRemote(r) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = w.clockServe(job, r, 0, clockRounds, func(q transport.Request) error { return transport.Wait(ctx, w.err, q) })
			}()
		}
		wg.Wait()
		for r, e := range errs {
			if e != nil {
				return fmt.Errorf("estimating rank %d's clock offset: %w", r, e)
			}
		}
		return nil
	}
	if !w.clockRemote(w.rank) {
		return nil
	}
	rtt, delta, err := w.pingClock(ctx, job, 0, clockRounds, func(r transport.Request) error { return transport.Wait(ctx, w.err, r) })
	if err != nil {
		return fmt.Errorf("estimating the clock offset from rank 0: %w", err)
	}
	w.clock.set(delta, rtt/2)
	w.clock.rtt = rtt
	w.debugf("info", "clock offset from rank 0's host %v (± %v)", time.Duration(w.clock.off.Load()), time.Duration(rtt/2))
	return nil
}

// pingClock runs rounds ping-pongs with rank 0, numbered from first (each
// round's messages are steps 2i and 2i+1 of the clock's tag), waiting for
// each request with wait, and returns the shortest round trip and the
// correction to this rank's offset that its round gives (rank 0's time
// less the midpoint of the round on this rank's common clock).
func (w *world) pingClock(ctx context.Context, job uint32, first, rounds int, wait func(transport.Request) error) (rtt, delta int64, err error) {
	c := w.conns[0]
	var out, in [8]byte
	rtt = math.MaxInt64
	for i := first; i < first+rounds; i++ {
		tag := transport.Tag{Comm: clockComm(job), Seq: uint32(w.rank), Step: transport.P2PBit | uint32(2*i)}
		back := tag
		back.Step++
		// The reply's receive first, so that it is never held as
		// unexpected.
		r, err := c.Irecv(back, in[:])
		if err != nil {
			return 0, 0, err
		}
		t1 := w.clock.now()
		binary.LittleEndian.PutUint64(out[:], uint64(t1))
		s, err := c.Isend(tag, out[:])
		if err != nil {
			transport.Cancel(r)
			return 0, 0, err
		}
		if err := wait(s); err != nil {
			transport.Cancel(r)
			return 0, 0, err
		}
		if err := wait(r); err != nil {
			transport.Cancel(r)
			return 0, 0, err
		}
		t2 := w.clock.now()
		t0 := int64(binary.LittleEndian.Uint64(in[:]))
		if t2-t1 < rtt {
			rtt, delta = t2-t1, t0-(t1+t2)/2
		}
	}
	return rtt, delta, nil
}

// clockServe answers rank r's pings numbered from first (see pingClock)
// with rank 0's time, rounds of them, waiting for each request with wait.
func (w *world) clockServe(job uint32, r, first, rounds int, wait func(transport.Request) error) error {
	c := w.conns[r]
	var buf [8]byte
	for i := first; i < first+rounds; i++ {
		tag := transport.Tag{Comm: clockComm(job), Seq: uint32(r), Step: transport.P2PBit | uint32(2*i)}
		q, err := c.Irecv(tag, buf[:])
		if err != nil {
			return err
		}
		if err := wait(q); err != nil {
			transport.Cancel(q)
			return err
		}
		binary.LittleEndian.PutUint64(buf[:], uint64(w.clock.now()))
		tag.Step++
		s, err := c.Isend(tag, buf[:])
		if err != nil {
			return err
		}
		if err := wait(s); err != nil {
			return err
		}
	}
	return nil
}

// ArrivalStats is what one rank knows of the arrival pattern of one call
// site: a communicator's collective at one message size class. Times are
// on the job's common clock (see Comm.Arrivals).
type ArrivalStats struct {
	// Calls is the calls recorded at the site; Known, those in which
	// this rank knew every rank's arrival (calls through the host's
	// shared area that read every rank's input).
	Calls, Known uint64

	// Over the Known calls: the worst-case imbalance time Ω (the latest
	// minus the earliest arrival) and the average-case imbalance time Δ̄
	// (the mean distance of the arrivals from their mean), as
	// "Efficient Process Arrival Pattern Aware Collective Communication
	// for Deep Learning" (EuroMPI/USA 2022, §2.2) defines them: their
	// means, Ω's largest, and the last known call's (Last).
	MeanWorst, MaxWorst, MeanAverage, LastWorst time.Duration
	// LastRank is the communicator rank that arrived last in the last
	// Known call, or -1.
	LastRank int

	// Alpha is the least time, over the Known calls (small calls: in the
	// sample that reads the clock at their end), from the last
	// arrival to this rank's return: the site's time once every rank is
	// there, the α that the paper's imbalance factors divide by (0
	// before a Known call).
	Alpha time.Duration

	// Over all calls (small calls: a sample, after a communicator's
	// first 1,024 calls one in 16): the time from this rank's arrival to
	// its return (mean and largest). It holds the wait for the late
	// ranks.
	MeanTime, MaxTime time.Duration
}

// WorstFactor returns the site's mean worst-case imbalance factor Ω/α
// (0 when unknown).
func (s ArrivalStats) WorstFactor() float64 {
	if s.Alpha <= 0 {
		return 0
	}
	return float64(s.MeanWorst) / float64(s.Alpha)
}

// AverageFactor returns the site's mean average-case imbalance factor
// Δ̄/α (0 when unknown).
func (s ArrivalStats) AverageFactor() float64 {
	if s.Alpha <= 0 {
		return 0
	}
	return float64(s.MeanAverage) / float64(s.Alpha)
}

// siteStats accumulates one site's ArrivalStats.
type siteStats struct {
	calls, known, timed                   uint64
	sumWorst, maxWorst, sumAvg, lastWorst int64
	lastRank                              int
	alpha                                 int64
	sumTime, maxTime                      int64
}

// sizeClasses is the number of message size classes of a site: bin n
// holds calls of (2^(n−1), 2^n] bytes, bin 0 those of at most one byte.
const sizeClasses = 64

// sizeClass returns the size class of a call of b bytes.
func sizeClass(b int64) int {
	if b <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(b-1)), sizeClasses-1)
}

// arrivalSites is a communicator's per-site statistics, under its world's
// sigs.mu (which every call takes as it ends: check.go's end).
type arrivalSites struct {
	sites [sched.Barrier + 1][sizeClasses]siteStats
}

// callBytes returns the bytes a call moves as the profiler counts them:
// one rank's vector, or the whole for the gathering and scattering
// collectives.
func callBytes(k *call) int64 {
	b := int64(k.p.Count) * int64(k.d.Size())
	switch k.p.Coll {
	case sched.Allgather, sched.Gather, sched.ReduceScatter, sched.Scatter, sched.Alltoall:
		b *= int64(k.p.NRanks)
	case sched.Barrier:
		b = 0
	}
	return b
}

// pattern is one call's arrival pattern as this rank knows it.
type pattern struct {
	known              bool  // every rank's stamp
	first, last        int64 // ns
	lastRank           int
	worst, avg         int64
	arrive, end, bytes int64
}

// measure fills p from the stamps of every rank (all nonzero).
func (p *pattern) measure(stamps []uint64) {
	base := int64(stamps[0])
	p.first, p.last, p.lastRank = math.MaxInt64, math.MinInt64, -1
	var sum float64
	for r, s := range stamps {
		t := int64(s)
		if t < p.first {
			p.first = t
		}
		if t > p.last {
			p.last, p.lastRank = t, r
		}
		sum += float64(t - base)
	}
	mean := sum / float64(len(stamps))
	var dev float64
	for _, s := range stamps {
		dev += math.Abs(float64(int64(s)-base) - mean)
	}
	p.known = true
	p.worst = p.last - p.first
	p.avg = int64(dev / float64(len(stamps)))
}

// record adds one call to its site; called under sigs.mu.
func (a *arrivalSites) record(coll sched.Collective, p *pattern) {
	if coll > sched.Barrier {
		return
	}
	s := &a.sites[coll][sizeClass(p.bytes)]
	s.calls++
	if p.end != 0 {
		t := p.end - p.arrive
		s.timed++
		s.sumTime += t
		s.maxTime = max(s.maxTime, t)
	}
	if p.known {
		s.known++
		s.sumWorst += p.worst
		s.maxWorst = max(s.maxWorst, p.worst)
		s.sumAvg += p.avg
		s.lastWorst, s.lastRank = p.worst, p.lastRank
		if al := p.end - p.last; p.end != 0 && al > 0 && (s.alpha == 0 || al < s.alpha) {
			s.alpha = al
		}
	}
}

// Arrivals returns what this rank knows of the arrival pattern of the
// calls of coll ("allreduce", ...) of bytes bytes (as the profiler counts
// them: the whole vector of allgather, gather, reducescatter, scatter and
// alltoall) on this communicator: the calls of the same size class, (2^(n−1),
// 2^n] bytes. A planner that switches on it must make every rank decide
// alike: the ranks' figures differ where they know different stamps.
func (c *Comm) Arrivals(coll string, bytes int64) (ArrivalStats, error) {
	col, err := sched.ParseCollective(coll)
	if err != nil {
		return ArrivalStats{}, argError(c.rank, "arrivals", "%v", err)
	}
	if bytes < 0 {
		return ArrivalStats{}, argError(c.rank, "arrivals", "negative size %d", bytes)
	}
	c.w.sigs.mu.Lock()
	s := c.arrivals.sites[col][sizeClass(bytes)]
	c.w.sigs.mu.Unlock()
	out := ArrivalStats{Calls: s.calls, Known: s.known, LastRank: -1}
	if s.timed > 0 {
		out.MeanTime = time.Duration(s.sumTime / int64(s.timed))
		out.MaxTime = time.Duration(s.maxTime)
	}
	if s.known > 0 {
		out.MeanWorst = time.Duration(s.sumWorst / int64(s.known))
		out.MaxWorst = time.Duration(s.maxWorst)
		out.MeanAverage = time.Duration(s.sumAvg / int64(s.known))
		out.LastWorst, out.LastRank = time.Duration(s.lastWorst), s.lastRank
		out.Alpha = time.Duration(s.alpha)
	}
	return out, nil
}

// endCall ends call k (number seq) on this rank: it measures what the rank
// knew of the call's arrival pattern (stamps: every rank's arrival from
// the shared area, or nil) and records it in the flight recorder and the
// call's site; s, if not nil, is what the call settles of the lagged
// confirmations (settling), taken in the same lock.
func (c *Comm) endCall(k *call, seq uint32, failed bool, stamps []uint64, s *settling) {
	p := &k.pat
	*p = pattern{arrive: k.arrive, bytes: callBytes(k), lastRank: -1}
	// A clock read costs 40-60 ns on a VM: small calls read their end
	// only in a sample (the same calls on every rank of a program whose
	// ranks make the same calls), after the first endAll of the
	// communicator.
	// The call's sequence number counts the communicator's calls, and is
	// the same on every rank: no counter of its own to update.
	if n := seq; failed || n <= endAll || n%endEvery == 0 || p.bytes >= endBelow {
		p.end = c.w.clock.now()
	}
	if len(stamps) == c.Size() && len(stamps) > 0 && !slices.Contains(stamps, 0) {
		p.measure(stamps)
	}
	c.w.end(c.id, seq, failed, p, &c.arrivals, k.p.Coll, s)
}

// ClockOffset returns the offset this rank adds to its host's monotonic
// clock to read the job's common clock (that of rank 0's host), and a
// bound of its error: both zero on rank 0's host, where the ranks read the
// clock itself; elsewhere the latest estimate from ping-pongs with rank 0
// (Init's, or a refresh's: Options.ClockRefresh) and half its round trip.
func (c *Comm) ClockOffset() (offset, bound time.Duration) {
	off, b := c.w.clock.estimate()
	return time.Duration(off), time.Duration(b)
}

// Small calls read the clock at their end (pattern.end: their time, α)
// for the first endAll calls of a communicator, then one in endEvery;
// calls of endBelow bytes or more, and failed calls, always.
const (
	endAll   = 1024
	endEvery = 16
	endBelow = 64 << 10
)

// stampPool recycles the slices that calls through the shared area
// receive the ranks' stamps in.
var stampPool sync.Pool

// getStamps returns a zeroed slice of n stamps from stampPool.
func getStamps(n int) *[]uint64 {
	p, _ := stampPool.Get().(*[]uint64)
	if p == nil || cap(*p) < n {
		s := make([]uint64, n)
		return &s
	}
	*p = (*p)[:n]
	clear(*p)
	return p
}
