package shm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/transport"
)

// mesh is one rank's shm connections.
type mesh struct {
	rank   int
	pid    int
	cfg    transport.Config
	opts   Options
	seg    *segment // ours
	path   string   // our segment's file, until unlinked
	mapped [][]byte // peers' segments
	conns  []*conn  // by world rank
	list   []*conn

	mu      sync.Mutex
	closed  bool
	aborted bool
	stop    chan struct{}
	stopped chan struct{}
}

// Conn returns the connection to peer, or nil if peer is not connected.
func (m *mesh) Conn(peer int) transport.Conn {
	if peer < 0 || peer >= len(m.conns) || m.conns[peer] == nil {
		return nil
	}
	return m.conns[peer]
}

// Abort sets this rank's state word to aborted, which every peer sees at its
// next poll or within the watchdog period, and fails this rank's own pending
// and later requests with ErrAborted.
func (m *mesh) Abort(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.aborted {
		return
	}
	m.aborted = true
	m.seg.setReason(err.Error())
	atomic.StoreUint64(m.seg.u64(offState), stateAborted)
	e := fmt.Errorf("shm: rank %d aborted: %v: %w", m.rank, err, transport.ErrAborted)
	for _, c := range m.list {
		c.fail(e, false)
	}
}

// Held returns the number of unexpected messages the connections hold
// (transport.Holder).
func (m *mesh) Held() int {
	n := 0
	for _, c := range m.list {
		c.rmu.Lock()
		for _, u := range c.unexp {
			for ; u != nil; u = u.next {
				n++
			}
		}
		c.rmu.Unlock()
	}
	return n
}

// Close marks this rank closed for its peers, fails pending requests with
// ErrClosed and unmaps the segments. It is safe to call more than once.
func (m *mesh) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	atomic.CompareAndSwapUint64(m.seg.u64(offState), stateAlive, stateClosed)
	m.mu.Unlock()
	close(m.stop)
	<-m.stopped
	for _, c := range m.list {
		c.rmu.Lock()
		c.smu.Lock()
		c.closed.Store(true)
		c.failAll(c.closedErr())
		c.smu.Unlock()
		c.rmu.Unlock()
	}
	return m.release()
}

// release unmaps every segment and removes our file if it is still there.
func (m *mesh) release() error {
	var errs []error
	for _, mem := range m.mapped {
		errs = append(errs, unix.Munmap(mem))
	}
	m.mapped = nil
	if m.seg != nil {
		errs = append(errs, unix.Munmap(m.seg.mem))
		m.seg = nil
	}
	if m.path != "" {
		if err := unix.Unlink(m.path); err != nil && err != unix.ENOENT {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shm: rank %d: close: %w", m.rank, err)
	}
	return nil
}

// watch checks, every Watchdog period until Close, that each peer's process
// lives and that the peer neither aborted nor closed, and drains the
// inbound rings that nobody is draining (pollRecv), so that messages no
// receive waits for reach Config.Unexpected even from a peer whose
// connection this rank does not poll.
func (m *mesh) watch() {
	defer close(m.stopped)
	t := time.NewTicker(m.opts.Watchdog)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		for _, c := range m.list {
			if c.err.Load() != nil {
				continue
			}
			switch c.peerSeg.state() {
			case stateAborted:
				c.fail(fmt.Errorf("shm: rank %d: peer rank %d (pid %d) aborted (%s): %w", m.rank, c.peer, c.peerPID, c.peerSeg.reason(), transport.ErrAborted), true)
				continue
			case stateClosed:
				c.fail(fmt.Errorf("shm: rank %d: peer rank %d (pid %d) %w", m.rank, c.peer, c.peerPID, transport.ErrPeerClosed), true)
				continue
			}
			if !c.alive() {
				c.fail(fmt.Errorf("shm: rank %d: peer rank %d (pid %d) died: %w", m.rank, c.peer, c.peerPID, transport.ErrPeerLost), true)
				continue
			}
			c.pollRecv()
		}
	}
}

// alive reports whether the peer's process still runs: it exists, is not a
// zombie, and is the process that connected (not a reuse of its pid).
func (c *conn) alive() bool {
	if c.peerPID == c.m.pid {
		return true
	}
	if err := unix.Kill(c.peerPID, 0); err == unix.ESRCH {
		return false
	}
	state, start, err := procStat(c.peerPID)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return state != 'Z' && state != 'X' && (c.peerStart == 0 || start == c.peerStart)
}

// procStat returns the state and start time of process pid from
// /proc/PID/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("shm: bad /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("shm: bad /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	return f[0][0], start, err
}
