package braid

import (
	"time"

	"github.com/braid-ccl/braid/transport/shmreg"
)

// Hooks for the external tests (package braid_test) of registered memory.

// SetDirectMin sets the smallest chunk that the shared areas of
// communicators made from now on publish by reference (register.go).
func SetDirectMin(n int) { regDirectMin = n }

// DirectStats returns how many chunks c's rank published by reference in
// c's shared area, and how many it read from another rank's registered
// memory.
func DirectStats(c *Comm) (published, read uint64) {
	if c.node == nil {
		return 0, 0
	}
	return c.node.DirectStats()
}

// RegCacheStats returns the sum of the registration caches' counts over
// the pools of c's peers that this rank opened (processes only).
func RegCacheStats(c *Comm) shmreg.Stats {
	var s shmreg.Stats
	for _, p := range c.w.reg.peers {
		if p, ok := p.(*shmreg.Peer); ok {
			t := p.Stats()
			s.Entries += t.Entries
			s.Maps += t.Maps
			s.Unmaps += t.Unmaps
			s.Hits += t.Hits
		}
	}
	return s
}

// RegShared reports whether the ranks of c's host can read this rank's
// registered memory.
func RegShared(c *Comm) bool { return c.w.reg.shared() }

// SkewClock adds d to the clock offset of c's rank, as a drift of its
// host's clock since the last estimate would (clockrefresh.go).
func SkewClock(c *Comm, d time.Duration) { c.w.clock.set(int64(d), -1) }

// ClockRefreshes returns how many refreshes changed the clock offset of
// c's rank.
func ClockRefreshes(c *Comm) uint64 { return c.w.clock.refreshes.Load() }

// KeepDoubling makes the shared areas of communicators made until the
// returned function is called double (shmcoll's recursive doubling) even
// where the ranks outnumber the cores.
func KeepDoubling() (undo func()) {
	testDoubling.Add(1)
	return func() { testDoubling.Add(-1) }
}
