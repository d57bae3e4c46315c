package braid

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/braid-ccl/braid/exec"
	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// Timeouts name the rank that was waited for.
//
// A rank whose call times out names the peer and the step its call waited
// for (exec reports the step), and its abort token names that peer to
// every rank. But the peer may itself be waiting: when one rank of a ring
// hangs, every rank waits, most of them for a rank that waits, and any of
// them might time out first and blame an innocent one. So a call that has
// stalled says so to the ranks that probed it (a notice, check.go), and a
// rank whose timed-out call waited for a rank that said it waits too holds
// its timeout back, for up to holdMost, for the abort of the rank at the
// end of the chain: the one that waited for a rank that said nothing
// (stopped, busy outside Braid, or gone). Every rank then reports that
// abort, which names the silent rank.
//
// Every wait takes part: the schedules' steps (exec's Stall), the shared
// area's waits (shmcoll's Call.Stall) and the lagged confirmations, whose
// call is active again while they wait and until their failure is
// recorded. A probe that comes while no call here has stalled (this rank
// is between calls, or its call has not waited long yet) is answered by
// the first call that stalls, whichever it is, so that each hop of a
// chain A waits for B waits for C holds, however the calls of the hops
// line up.

// holdMost bounds how long a timed-out rank waits for the timeout of the
// rank its peer waits for (a variable for tests).
var holdMost = 2 * time.Second

// timedOut handles an abort caused by a timeout: world rank from says that
// it waited for world rank p.
func (w *world) timedOut(from, p int, err error) {
	where := ""
	if m := waitedRE.FindAllStringSubmatch(err.Error(), -1); len(m) > 0 {
		where = fmt.Sprintf(" (call %s, step %s)", m[len(m)-1][1], m[len(m)-1][2])
	}
	w.failPeer(&Error{Kind: Timeout, Rank: w.rank, Call: "transport", Peer: p,
		Err: fmt.Errorf("rank %d waited for rank %d%s: %w", from, p, where, err)}, p)
}

// waitedRE finds the call and step in the message of waitedFor.
var waitedRE = regexp.MustCompile(`waited for rank \d+ \(call (\d+), step (\d+)\)`)

// waitedFor returns the start of the message of this rank's own timeout
// (err is the executor's error), and holds the timeout back while the
// rank it waited for said that it waits too (see the top of this file).
func (c *Comm) waitedFor(err error) string {
	s := fmt.Sprintf("no progress within the timeout (%v; set BRAID_TIMEOUT or a context deadline)", c.w.opts.Timeout)
	if !errors.Is(err, transport.ErrTimeout) {
		// The caller's context had a deadline, which the communicator's
		// timeout does not override.
		s = fmt.Sprintf("no progress before the call's context deadline (BRAID_TIMEOUT, %v, applies to calls without one)", c.w.opts.Timeout)
	}
	var se *exec.StepError
	var we *shmcoll.WaitError
	switch {
	case errors.As(err, &se):
		switch se.Step.Kind {
		case 1, 2, 3: // send, recv, recvreduce
			c.hold(se.Seq, c.members[se.Step.Peer])
			s += fmt.Sprintf(": waited for rank %d (call %d, step %d)", se.Step.Peer, se.Seq, se.Index)
		}
	case errors.As(err, &we) && we.Peer >= 0 && we.Peer < len(c.members):
		// The shared area's wait names its rank and call itself.
		c.hold(we.Seq, c.members[we.Peer])
	}
	return s + ": "
}

// hold waits, up to holdMost, for the job to fail elsewhere if world rank
// peer said that it waits too in call seq.
func (c *Comm) hold(seq uint32, peer int) {
	w := c.w
	t := &w.sigs
	t.mu.Lock()
	i := find(t.active, c.id, seq)
	waits := i >= 0 && t.active[i].st != nil && slices.Contains(t.active[i].st.noticed, peer)
	t.mu.Unlock()
	if !waits {
		return
	}
	w.debugf("info", "call %d: timed out waiting for rank %d, which waits too; holding the timeout back", seq, peer)
	for end := time.Now().Add(holdMost); w.failure.Load() == nil && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
}
