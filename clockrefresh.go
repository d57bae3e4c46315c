package braid

import (
	"context"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// The refresh of the clock offset of ranks on other hosts than rank 0's
// (arrival.go). Init's estimate (clockRounds ping-pongs with rank 0)
// ages as the hosts' clocks drift apart, by some parts per million: a few
// µs a second, as much as an arrival spread worth measuring after a
// minute. So each such rank repeats the estimate every
// Options.ClockRefresh (DefaultClockRefresh), in the background, with
// clockRefreshRounds ping-pongs: eight 8-byte messages every 10 s, off
// every call's path. Rank 0 answers from one goroutine per such rank,
// blocked on its receive between refreshes (no polling), each answer
// stamped with rank 0's common clock when it leaves.
//
// A refresh replaces the estimate only when its best round trip is at
// most twice the shortest any estimate of this rank has had, its bound
// (half the round trip) then comparable to Init's; a refresh that a busy
// rank 0 or network made slower is left out, and the limit doubles with
// each one left out in a row, so that a lasting change of the network
// does not freeze the estimate.

// DefaultClockRefresh is how often a rank on another host than rank 0's
// refreshes its clock offset when Options.ClockRefresh and
// BRAID_CLOCK_REFRESH leave it to Braid.
const DefaultClockRefresh = 10 * time.Second

// clockRefreshRounds is the ping-pongs of a refresh.
const clockRefreshRounds = 4

// clockSpin is how long the refresher polls for rank 0's answer before it
// blocks on the request: about a round trip on a fast network, so that
// the wake-up of a blocked goroutine does not lengthen the rounds it
// times.
const clockSpin = 100 * time.Microsecond

// startClockRefresh starts the refresh, every period (none if period is
// not positive): rank 0 serves each rank of another host, and such a rank
// refreshes. World close stops them.
func (w *world) startClockRefresh(job uint32, period time.Duration) {
	if period <= 0 || w.size < 2 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	switch {
	case w.rank == 0:
		for r := 1; r < w.size; r++ {
			if !w.clockRemote(r) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.serveClock(ctx, job, r)
			}()
		}
	case w.clockRemote(w.rank):
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.refreshClock(ctx, job, period)
		}()
	}
	w.closers = append(w.closers, func() error {
		cancel()
		wg.Wait()
		return nil
	})
}

// serveClock answers rank r's refreshes until ctx ends or the connection
// fails (the collectives report a lost peer; the clock has nothing to
// add).
func (w *world) serveClock(ctx context.Context, job uint32, r int) {
	wait := func(q transport.Request) error { return awaitQuiet(ctx, q, 0) }
	for i := clockRounds; ctx.Err() == nil; i++ {
		if w.clockServe(job, r, i, 1, wait) != nil {
			return
		}
	}
}

// refreshClock refreshes this rank's offset every period until ctx ends
// or a ping fails.
func (w *world) refreshClock(ctx context.Context, job uint32, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	wait := func(q transport.Request) error { return awaitQuiet(ctx, q, clockSpin) }
	for next := clockRounds; ; next += clockRefreshRounds {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		rtt, delta, err := w.pingClock(ctx, job, next, clockRefreshRounds, wait)
		if err != nil {
			return
		}
		level := "trace"
		if delta > w.clock.err.Load() || -delta > w.clock.err.Load() {
			level = "info" // the clocks drifted by more than the bound
		}
		if w.clock.update(rtt, delta) {
			w.debugf(level, "clock offset from rank 0's host refreshed: %v (± %v), moved %v",
				time.Duration(w.clock.off.Load()), time.Duration(rtt/2), time.Duration(delta))
		} else {
			w.debugf("trace", "clock refresh left out: round trip %v, more than %d × the shortest %v",
				time.Duration(rtt), 2<<min(w.clock.rejected-1, 20), time.Duration(w.clock.rtt))
		}
	}
}

// update takes a refresh's estimate, its shortest round trip rtt and the
// correction delta of its offset, if rtt is at most twice the shortest
// round trip of any estimate so far, or 2^(k+1) times after k refreshes
// left out in a row; it reports whether it did. Only the refresher calls
// it (and syncClock before it starts).
func (k *clock) update(rtt, delta int64) bool {
	if rtt > 2*k.rtt<<min(k.rejected, 20) {
		k.rejected++
		return false
	}
	k.set(delta, rtt/2)
	k.rtt = min(k.rtt, rtt)
	k.rejected = 0
	k.refreshes.Add(1)
	return true
}

// awaitQuiet waits for q: it polls for spin, then blocks on the request's
// channel (or polls every millisecond where the transport has none) until
// q completes or ctx ends. A receive left waiting is withdrawn by its
// caller.
func awaitQuiet(ctx context.Context, q transport.Request, spin time.Duration) error {
	end := time.Now().Add(spin)
	for {
		if done, err := q.Test(); done || err != nil {
			return err
		}
		if !time.Now().Before(end) {
			break
		}
	}
	ch := q.Done()
	var tick *time.Ticker
	if ch == nil {
		tick = time.NewTicker(time.Millisecond)
		defer tick.Stop()
	}
	for {
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if done, err := q.Test(); done || err != nil {
			return err
		}
	}
}
