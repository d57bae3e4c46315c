package braid

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/sched"
)

// The planner's use of arrival statistics (issue 17, item 4). A call site
// (a plan: collective, count, root and element size) of allreduce or
// reduce on a communicator with a shared area, whose algorithm the model
// chose, is watched: every rank times its calls, and every
// arrivalWindow-th call ends with an agreement (an allgather of each
// rank's mean and quickest call of the window, as MIAD's trials end with
// one) on
//
//   - the window's balanced time: the quickest call any rank made, which
//     is the call of a rank that arrived last and waited for nobody;
//   - the window's spread: the largest mean call time of a rank, less the
//     balanced time. It is the time a rank spends waiting for later
//     arrivals: about Ω/2 when the ranks arrive uniformly at random over
//     Ω (Ω, the worst-case imbalance time of "Efficient Process Arrival
//     Pattern Aware Collective Communication for Deep Learning", Alizadeh
//     et al., EuroMPI/USA 2022, §2.2), and Ω when one rank is always late;
//   - the window's latency: the ranks' mean call time, averaged over the
//     ranks (what braid bench --imbalance reports).
//
// When the spread exceeds the balanced time, the site switches to the
// arrival-aware reductions (choice.SharedPAP). They must then earn their
// place: if the next window's latency is more than 5 % above the balanced
// choice's in the window before, the site goes back, and tries again only
// after a back-off that doubles each time (4, 8, ... windows). A site
// whose spread falls below half its balanced time goes back too. Every
// rank decides from the same agreed figures, so every rank runs every call
// with the same algorithm. BRAID_DEBUG=info prints each move and why.
//
// The figures come from each rank's own clock: no clock is compared with
// another's. The rule reads them from arrivalStats, so that arrival times
// exchanged between the ranks can feed it the same way.
const arrivalWindow = 64

// arrivalStats are the figures the rule decides on, the same on every
// rank: agreed at the end of a window.
type arrivalStats struct {
	balanced float64 // seconds: the quickest call of the window on any rank
	spread   float64 // seconds: the largest mean call time of a rank, less balanced
	latency  float64 // seconds: the ranks' mean call times, averaged
}

// statsOf returns the statistics of the ranks' (mean, quickest) call
// times, v[2r] and v[2r+1] for rank r.
func statsOf(v []float64) arrivalStats {
	n := len(v) / 2
	st := arrivalStats{balanced: math.Inf(1)}
	worst := 0.0
	for r := range n {
		worst = max(worst, v[2*r])
		st.latency += v[2*r] / float64(n)
		st.balanced = min(st.balanced, v[2*r+1])
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
	lost    int     // times the arrival-aware reductions lost
	backoff int     // windows to wait before trying again
	reason  string  // why the site runs what it runs now
}

// watchable reports whether a plan chosen by the planner (not forced) for
// p may be switched by arrival statistics: cand offers the arrival-aware
// reductions.
func (c *Comm) watchable(p sched.Params, cand []string) bool {
	if c.w.opts.DisableArrival || p.NRanks < 2 || !choice.SharedPAPRuns(p.Coll) {
		return false
	}
	for _, n := range cand {
		if n == papAlgo {
			return true
		}
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
		c.nodeMu.Lock()
		defer c.nodeMu.Unlock()
		r.ticket = c.node.Ticket()
	} else {
		r.prog, r.seg, r.radix = pl.prog.Load(), pl.p.Segment, pl.p.Radix
	}
	sig := c.callSig(k, r.algo, r.seg, r.radix)
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
		if r.ticket != 0 {
			return c.runNode(ctx, k, r)
		}
		return c.runSeq(ctx, k, r.prog, r.algo, r.seq)
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
	mine, all := []float64{mean, quickest}, make([]float64, 2*c.Size())
	agree := call{name: "allgather (arrival statistics)", p: sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 2},
		in: bytesOf(mine), out: bytesOf(all), d: Float64, sig: r.agreeSig}
	if err := c.runSeq(ctx, &agree, c.arrivalAgreeProg(), "direct", r.seq+1); err != nil {
		return err
	}
	st := statsOf(all)
	w.mu.Lock()
	defer w.mu.Unlock()
	c.arrivalRule(k, r.pl, w, st)
	return nil
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
		if st.spread > st.balanced {
			w.pap.Store(true)
			w.before = st.latency
			w.reason = "arrival spread " + us(st.spread) + " exceeds the balanced call's " + us(st.balanced)
			say("arrival spread %s exceeds the balanced call's %s over the last %d calls: switching from %s to %s",
				us(st.spread), us(st.balanced), arrivalWindow, pl.algo, papAlgo)
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
	case st.spread < st.balanced/2:
		w.pap.Store(false)
		w.reason = pl.reason
		say("arrival spread %s is below half the call's %s: back to %s", us(st.spread), us(st.balanced), pl.algo)
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
// agreement: the one-step allgather of two elements a rank (no planning:
// every rank must run the same).
func (c *Comm) arrivalAgreeProg() *sched.Program {
	c.arrivalOnce.Do(func() {
		a, err := algo.Lookup(sched.Allgather, "direct")
		if err != nil {
			panic(err)
		}
		prog := a.Program(sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 2}, c.rank)
		c.arrivalAgree = &prog
	})
	return c.arrivalAgree
}

// arrivalAgreeSig is the signature of the agreement's call.
func (c *Comm) arrivalAgreeSig() uint32 {
	k := call{p: sched.Params{Coll: sched.Allgather, NRanks: c.Size(), Count: 2}, d: Float64}
	return c.callSig(&k, "direct", 0, 0)
}
