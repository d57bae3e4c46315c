package braid

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The flight recorder (issue 17, item 6; as PyTorch's Flight Recorder).
//
// Every rank keeps its last flightLen collective calls in a ring: the
// communicator, sequence number, call, bytes, algorithm, state, arrival and
// end on the job's common clock (arrival.go), and what the rank knew of
// the call's arrival pattern. The ring lives in the disagreement check's
// table (check.go) and is written under its lock, which every call takes
// anyway at its start and end: it costs no allocation and no extra lock.
//
// The rank dumps the ring
//   - when a collective first returns an error on it (a timeout, an abort,
//     a lost peer) or Comm.Abort is called: the last flightShown calls;
//   - on SIGUSR1 (flightSignal): every call, for a rank that seems hung;
//
// to its standard error, or with Options.Flight (BRAID_FLIGHT) = DIR to
// DIR/braid-flight.RANK (each dump appended, whole). BRAID_FLIGHT=off
// turns dumps off and leaves SIGUSR1 alone.

// flightLen is the calls each rank's flight recorder keeps.
const flightLen = 64

// flightShown is the calls a dump after a failure shows on standard error
// (a file gets every call).
const flightShown = 16

// flightSignal makes every rank of the process dump its flight recorder.
const flightSignal = syscall.SIGUSR1

type flightState uint8

const (
	flightRunning flightState = iota + 1
	flightDone
	flightFailed
)

func (s flightState) String() string {
	switch s {
	case flightRunning:
		return "running"
	case flightDone:
		return "done"
	case flightFailed:
		return "failed"
	}
	return "?"
}

// flightEntry is one call in the ring. world.begin writes
// every field, one by one: a field added here must be added there.
type flightEntry struct {
	comm, seq   uint32
	name, algo  string
	bytes       int64
	state       flightState
	arrive, end int64 // common clock, ns; end 0 while running, or when a small call did not read it (endCall)
	waitPeer    int   // the world rank the call waited for when it stalled, or -1
	pat         pattern
}

// checkFlight checks Options.Flight.
func checkFlight(v string) error {
	switch strings.ToLower(v) {
	case "", "off":
		return nil
	case "stderr", "0", "1", "on", "true", "false", "yes", "no":
		return errors.New("want off, or a directory where each rank writes braid-flight.RANK; leave it empty for standard error")
	}
	st, err := os.Stat(v)
	if err != nil {
		return fmt.Errorf("directory %s: %v", v, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", v)
	}
	return nil
}

// flightWorlds are the worlds a flightSignal dumps.
var flightWorlds struct {
	sync.Mutex
	list map[*world]bool
	ch   chan os.Signal
}

// startFlight makes w dump its ring on flightSignal, unless dumps are off.
func (w *world) startFlight() {
	if strings.EqualFold(w.opts.Flight, "off") {
		return
	}
	f := &flightWorlds
	f.Lock()
	defer f.Unlock()
	if f.list == nil {
		f.list = map[*world]bool{}
		f.ch = make(chan os.Signal, 1)
		signal.Notify(f.ch, flightSignal)
		go func() {
			for range f.ch {
				f.Lock()
				ws := make([]*world, 0, len(f.list))
				for w := range f.list {
					ws = append(ws, w)
				}
				f.Unlock()
				for _, w := range ws {
					w.dumpFlight(fmt.Sprintf("signal %v", flightSignal), flightLen)
				}
			}
		}()
	}
	f.list[w] = true
	w.flightSig = func() {
		f.Lock()
		delete(f.list, w)
		f.Unlock()
	}
}

// stopFlight forgets w in the signal handler (Close).
func (w *world) stopFlight() {
	if w.flightSig != nil {
		w.flightSig()
		w.flightSig = nil
	}
}

// failedFlight dumps w's ring once, after its first failure.
func (w *world) failedFlight(why error) {
	w.flightOnce.Do(func() {
		w.dumpFlight(fmt.Sprintf("failure: %v", why), flightShown)
	})
}

// dumpFlight writes the ring: its last `last` calls on standard error, or
// every call to the file under Options.Flight.
func (w *world) dumpFlight(why string, last int) {
	if strings.EqualFold(w.opts.Flight, "off") {
		return
	}
	var out io.Writer = os.Stderr
	if w.opts.Flight != "" {
		path := filepath.Join(w.opts.Flight, fmt.Sprintf("braid-flight.%d", w.rank))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "braid: rank %d: flight recorder: %v\n", w.rank, err)
			return
		}
		defer f.Close()
		out, last = f, flightLen
	}
	var b strings.Builder
	w.writeFlight(&b, why, last)
	io.WriteString(out, b.String()) // one write: whole among the ranks' output
}

// writeFlight formats the ring's last `last` calls, oldest first.
func (w *world) writeFlight(b *strings.Builder, why string, last int) {
	t := &w.sigs
	t.mu.Lock()
	n := min(t.nflight, uint64(flightLen), uint64(last))
	es := make([]flightEntry, 0, n)
	for i := t.nflight - n; i < t.nflight; i++ {
		es = append(es, t.flight[i%flightLen])
	}
	t.mu.Unlock()
	now := w.clock.now()
	host := ""
	if w.rank < len(w.hosts) {
		host = w.hosts[w.rank]
	}
	fmt.Fprintf(b, "braid: rank %d (pid %d, host %s): flight recorder, the last %d of %d calls, oldest first (%s):\n",
		w.rank, os.Getpid(), host, len(es), t.nflight, why)
	fmt.Fprintf(b, "braid: rank %d:   %8s %6s %-14s %10s %-18s %-8s %12s %12s  %s\n", w.rank, "comm", "seq", "call", "bytes", "algo", "state", "arrived", "took", "arrival pattern")
	for _, e := range es {
		took := "-"
		switch {
		case e.end != 0:
			took = time.Duration(e.end - e.arrive).String()
		case e.state == flightRunning:
			took = "(" + time.Duration(now-e.arrive).String() + ")"
		}
		pat := ""
		switch {
		case e.pat.known:
			pat = fmt.Sprintf("spread %v, last rank %d", time.Duration(e.pat.worst), e.pat.lastRank)
		case e.waitPeer >= 0:
			pat = fmt.Sprintf("waited for rank %d", e.waitPeer)
		}
		if e.state != flightDone && e.waitPeer >= 0 && e.pat.known {
			pat += fmt.Sprintf("; waited for rank %d", e.waitPeer)
		}
		fmt.Fprintf(b, "braid: rank %d:   %08x %6d %-14s %10d %-18s %-8s %12s %12s  %s\n", w.rank, e.comm, e.seq, e.name, e.bytes,
			e.algo, e.state, time.Duration(now-e.arrive).Round(time.Microsecond).String()+" ago", took, pat)
	}
}

// stuckCall returns the oldest call this rank has in flight, for the
// launcher's summary: ok is false when none is, or the table is busy
// (report may run under a transport's lock, and never waits).
func (w *world) stuckCall() (e flightEntry, ok bool) {
	t := &w.sigs
	if !t.mu.TryLock() {
		return e, false
	}
	defer t.mu.Unlock()
	for i := range t.active {
		a := &t.active[i]
		if a.fl == 0 {
			continue
		}
		f := t.flight[(a.fl-1)%flightLen]
		if f.comm != a.comm || f.seq != a.seq {
			continue
		}
		if !ok || f.arrive < e.arrive {
			e, ok = f, true
			if a.waitPeer >= 0 {
				e.waitPeer = a.waitPeer
			}
		}
	}
	return e, ok
}
