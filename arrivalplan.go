package braid

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/sched"
)

// The planner's use of arrival statistics (issue 17, item 4). A call site
// (a plan: collective, count, root and element size) on a communicator
// with a shared area, whose algorithm the model chose, where the
// arrival-aware reductions can pay (watchable: reduce and allreduce
// above the area's FlatMax), is watched: every arrivalWindow-th call ends with an agreement
// (an allgather of four numbers a rank, as MIAD's trials end with one) on
// the window's
//
//   - spread: the worst-case imbalance time Ω of "Efficient Process
//     Arrival Pattern Aware Collective Communication for Deep Learning"
//     (Alizadeh et al., EuroMPI/USA 2022, §2.2), the latest minus the
//     earliest arrival, averaged over the window's calls whose every
//     arrival stamp a rank read (Comm.Arrivals: calls through the shared
//     area), the largest of the ranks' figures;
//   - balanced time: α, the least time from the last arrival to a rank's
//     return (Comm.Arrivals), the least of the ranks';
//   - latency: the ranks' mean call time (each rank times one call in
//     arrivalSample), averaged over the ranks, which is what braid bench
//     --imbalance reports.
//
// Where no rank read every stamp (schedules, which see only their own),
// the rule estimates the first two from the call times: the balanced time
// is the quickest call any rank made (that of a rank that arrived last and
// waited for nobody), and the spread the largest mean call time of a rank
// less it, the time a rank waits for later arrivals (about Ω/2 when the
// ranks arrive uniformly at random, Ω when one rank is always late).
//
// When the spread exceeds arrivalOn times the balanced time (the
// imbalance factor Ω/α of the paper's §2.2 above arrivalOn), the site
// switches to the
// arrival-aware reductions (choice.SharedPAP). They must then earn their
// place: if the next window's latency is more than 5 % above the balanced
// choice's in the window before, the site goes back, and tries again only
// after a back-off that doubles each time (4, 8, ... windows). A site
// whose spread falls below arrivalOff times its balanced time goes back
// too. Every
// rank decides from the same agreed figures, so every rank runs every call
// with the same algorithm. BRAID_DEBUG=info prints each move and why.
const arrivalWindow = 64

// The imbalance factors Ω/α at which a site switches to the arrival-aware
// reductions and back. Not 1: on the 16-core node, balanced back-to-back
// 8-byte and 4 KiB allreduces of 8 ranks measured Ω/α of 1.1–1.9 (the
// ranks leave a call, and so reach the next, some µs apart; α, the least
// time from the last arrival to a return, is small), and switching on
// those cost 15–50 % in the trial windows (docs/PERFORMANCE.md, issue 17).
// Patterns drawn at MIF 10 have Ω/α near 8 at 8 ranks.
const (
	arrivalOn  = 4.0
	arrivalOff = 2.0
)

// arrivalStats are the figures the rule decides on, the same on every
// rank: agreed at the end of a window.
type arrivalStats struct {
	balanced float64 // seconds: the call's time once every rank is there
	spread   float64 // seconds: the window's arrival spread
	latency  float64 // seconds: the ranks' mean call times, averaged
	measured bool    // spread and balanced come from arrival stamps
}

// statsOf returns the statistics of the ranks' figures, four a rank r at
// v[4r:]: its mean and quickest call time of the window, the window's mean
// Ω and the site's α as it measured them from arrival stamps (negative
// when it read none).
func statsOf(v []float64) arrivalStats {
	n := len(v) / 4
	st := arrivalStats{balanced: math.Inf(1)}
	worst, omega, alpha := 0.0, -1.0, math.Inf(1)
	for r := range n {
		x := v[4*r : 4*r+4]
		worst = max(worst, x[0])
		st.latency += x[0] / float64(n)
		st.balanced = min(st.balanced, x[1])
		omega = max(omega, x[2])
		if x[3] > 0 {
			alpha = min(alpha, x[3])
		}
	}
	if omega >= 0 && !math.IsInf(alpha, 1) {
		st.spread, st.balanced, st.measured = omega, alpha, true
		return st
	}
	st.spread = worst - st.balanced
	return st
}

// arrivalSample: one call in arrivalSample is timed (the window's last
// always), so that a watched call costs a clock read less often.
const arrivalSample = 4

// arrivalWatch is the arrival state of one watched plan.
type arrivalWatch struct {
	calls   atomic.Uint64                 // calls issued
	pending atomic.Pointer[chan struct{}] // closed when the last window's agreement is done
	pap     atomic.Bool                   // the site runs choice.SharedPAP now

	mu sync.Mutex // guards the rest
	// This rank's timed calls of the current window.
	n        int
	sum, min float64

	before  float64 // the balanced choice's latency in the window before the switch
	known   uint64  // the site's calls with every stamp known (Comm.Arrivals) at the last window's end
	sumΩ    float64 // and the sum of their Ω, ns
	lost    int     // times the arrival-aware reductions lost
	backoff int     // windows to wait before trying again
	reason  string  // why the site runs what it runs now
}

// watchable reports whether a plan chosen by the planner (not forced) for
// p, of es-byte elements, may be switched by arrival statistics: cand
// offers the arrival-aware reductions, and they can differ from the
// balanced choice for p:
//
//   - reduce above the area's FlatMax: up to the root's leader chunks
//     (16 KiB) the root combines the inputs as they come and the others
//     leave once they have written theirs, where the area's own reduce
//     of such chunks (two phases) keeps every rank until the last
//     arrival: on the 16-core node under MIF 10–50 the 4 and 16 KiB
//     reduces of 8 and 16 ranks took 0.50–0.71 of the area's time
//     (session 29), though balanced the 16-rank one of 16 KiB took 1.85
//     times it; above, they form a chain in the order of arrival, 0.26–0.67
//     of the best other Braid algorithm's latency at 256 KiB–2 MiB. Up to
//     FlatMax the area's reduce is flat (the others leave at once too),
//     and watching would only cost the trial windows (docs/PERFORMANCE.md,
//     issue 17);
//   - allreduce above the area's FlatMax, where they run the pipelined
//     chain: after the last arrival one pass over the data is left (the
//     last rank combines its input with its predecessor's partial
//     result) and the copies out follow it a segment behind, where the
//     area's own allreduce still copies in, reduces and copies out. Up
//     to FlatMax their allreduce is the area's flat one (one flag line or
//     slot read after the last arrival, which no order improves), so
//     there is nothing to switch to.
func (c *Comm) watchable(p sched.Params, es int, cand []string) bool {
	if c.w.opts.DisableArrival || p.NRanks < 2 || c.node == nil || !slices.Contains(cand, papAlgo) {
		return false
	}
	b := int64(p.Count) * int64(es)
	switch p.Coll {
	case sched.Reduce, sched.Allreduce:
		return b > int64(c.node.FlatMax())
	}
	return false
}

// issueWatched issues a call of a watched plan: with the site's current
// algorithm and, at the end of a window, the agreement's sequence number.
func (c *Comm) issueWatched(k *call, pl *planned) run {
	w := pl.watch
	for {
		p := w.pending.Load()
		if p == nil {
			break
		}
		<-*p
	}
	i := w.calls.Add(1)
	r := run{pl: pl, watch: w, algo: pl.algo, timed: i%arrivalSample == 0}
	if i%arrivalWindow == 0 {
		ch := make(chan struct{})
		w.pending.Store(&ch)
		r.trial = true
	}
	if w.pap.Load() {
		r.algo = papAlgo
	}
	if choice.IsShared(k.p.Coll, r.algo) {
		// The lock that orders the area's calls (issue).
		c.w.sigs.mu.Lock()
		defer c.w.sigs.mu.Unlock()
		r.ticket = c.node.Ticket()
	} else {
		r.prog, r.seg, r.radix = pl.prog.Load(), pl.p.Segment, pl.p.Radix
	}
	trees := uint32(0)
	if r.prog != nil {
		trees = pl.treesSig
	}
	sig := c.callSig(k, r.algo, r.seg, r.radix, trees)
	if r.trial {
		r.seq, r.sig, r.agreeSig = c.chk.next2(sig, c.arrivalAgreeSig())
	} else {
		r.seq, r.sig = c.chk.next(sig)
	}
	return r
}

// runWatched runs an issued call of a watched plan, times it if it is
// sampled, and at the end of a window agrees on the statistics and
// applies the rule.
func (c *Comm) runWatched(ctx context.Context, k *call, r run) error {
	run := func() error {
		var err error
		if r.ticket != 0 {
			err = c.runNode(ctx, k, r, nil)
		} else {
			err = c.runSeq(ctx, k, r.prog, r.algo, r.seq)
		}
		if err != nil {
			return err
		}
		return c.confirm(ctx, k, r.seq)
	}
	if !r.timed {
		return run()
	}
	w := r.watch
	t0 := time.Now()
	err := run()
	el := time.Since(t0).Seconds()
	w.mu.Lock()
	if w.n == 0 {
		w.min = el
	}
	w.n++
	w.sum += el
	w.min = min(w.min, el)
	mean, quickest := w.sum/float64(w.n), w.min
	if r.trial {
		w.n, w.sum, w.min = 0, 0, 0
	}
	w.mu.Unlock()
	if !r.trial {
		return err
	}
	defer func() {
		p := w.pending.Load()
		w.pending.Store(nil)
		close(*p)
	}()
	if err != nil {
		return err
	}
	omega, alpha := w.measured(c, k)
	mine, all := []float64{mean, quickest, omega, alpha}, make([]float64, 4*c.Size())
	agree := call{name: "allgather (arrival statistics)", p: sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 4},
		in: bytesOf(mine), out: bytesOf(all), d: Float64, sig: r.agreeSig, arrive: c.w.clock.now()}
	if err := c.runSeq(ctx, &agree, c.arrivalAgreeProg(), "direct", r.seq+1); err != nil {
		return err
	}
	if err := c.settle(ctx, k.name, r.seq+1); err != nil {
		return err
	}
	st := statsOf(all)
	w.mu.Lock()
	defer w.mu.Unlock()
	c.arrivalRule(k, r.pl, w, st)
	return nil
}

// measured returns the window's mean Ω and the site's α (seconds) from
// what this rank read of the arrival stamps (Comm.Arrivals), -1 where it
// read none.
func (w *arrivalWatch) measured(c *Comm, k *call) (omega, alpha float64) {
	omega, alpha = -1, -1
	s, err := c.Arrivals(k.p.Coll.String(), callBytes(k))
	if err != nil {
		return omega, alpha
	}
	sum := float64(s.MeanWorst) * float64(s.Known)
	if s.Known > w.known {
		omega = (sum - w.sumΩ) / float64(s.Known-w.known) / 1e9
	}
	w.known, w.sumΩ = s.Known, sum
	if s.Alpha > 0 {
		alpha = s.Alpha.Seconds()
	}
	return omega, alpha
}

// arrivalRule moves a watched site between its balanced choice and the
// arrival-aware reductions (see arrivalWindow). w.mu is held.
func (c *Comm) arrivalRule(k *call, pl *planned, w *arrivalWatch, st arrivalStats) {
	say := func(format string, args ...any) {
		if c.rank == 0 {
			c.w.debugf("info", "%v comm %08x count=%d root=%d: "+format,
				append([]any{k.p.Coll, c.id, k.p.Count, k.p.Root}, args...)...)
		}
	}
	us := formatUs
	if !w.pap.Load() {
		if w.backoff > 0 {
			w.backoff--
			return
		}
		if st.spread > arrivalOn*st.balanced {
			w.pap.Store(true)
			w.before = st.latency
			how := "estimated from the call times"
			if st.measured {
				how = "Ω and α measured from the arrival stamps"
			}
			w.reason = "arrival spread " + us(st.spread) + " is more than " + fmt.Sprint(arrivalOn) + " × the balanced call's " + us(st.balanced) + " (" + how + ")"
			say("arrival spread %s is more than %g × the balanced call's %s over the last %d calls (%s): switching from %s to %s",
				us(st.spread), arrivalOn, us(st.balanced), arrivalWindow, how, pl.algo, papAlgo)
		}
		return
	}
	switch {
	case st.latency > 1.05*w.before:
		w.pap.Store(false)
		w.lost++
		w.backoff = 4 << min(w.lost-1, 8)
		w.reason = pl.reason
		say("%s took %s a call, %s %s before: back to %s (next try in %d windows of %d calls)",
			papAlgo, us(st.latency), pl.algo, us(w.before), pl.algo, w.backoff, arrivalWindow)
	case st.spread < arrivalOff*st.balanced:
		w.pap.Store(false)
		w.reason = pl.reason
		say("arrival spread %s is below %g × the call's %s: back to %s", us(st.spread), arrivalOff, us(st.balanced), pl.algo)
	}
}

// formatUs writes a duration of s seconds in µs (ms from 1 ms).
func formatUs(s float64) string {
	us := s * 1e6
	switch {
	case math.IsNaN(us):
		return "?"
	case us < 10:
		return fmt.Sprintf("%.2fµs", us)
	case us < 1000:
		return fmt.Sprintf("%.1fµs", us)
	}
	return fmt.Sprintf("%.2fms", us/1e3)
}

// arrivalAgreeProg returns the program of the arrival statistics'
// agreement: the one-step allgather of four elements a rank (no planning:
// every rank must run the same).
func (c *Comm) arrivalAgreeProg() *sched.Program {
	c.arrivalOnce.Do(func() {
		a, err := algo.Lookup(sched.Allgather, "direct")
		if err != nil {
			panic(err)
		}
		prog := a.Program(sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 4}, c.rank)
		c.arrivalAgree = &prog
	})
	return c.arrivalAgree
}

// arrivalAgreeSig is the signature of the agreement's call.
func (c *Comm) arrivalAgreeSig() uint32 {
	k := call{p: sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 4}, d: Float64}
	return c.callSig(&k, "direct", 0, 0, 0)
}
