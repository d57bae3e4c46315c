// Package cost is the α-β-γ cost model that the planner and the simulator
// share.
//
// A message of m bytes over a link costs α + m/β: α is the per-message
// latency (software overhead included) and β the link's bandwidth in bytes
// per second. Reducing m bytes of one operand into another costs m·γ. The
// model has one link per class (within a NUMA node, across NUMA nodes of a
// host, across hosts); Layout says which class joins two ranks.
//
// Algorithms state their closed-form cost against a Model (algo's Coster);
// the planner compares those figures, and the simulator (sim) checks them.
package cost

import (
	"fmt"
	"math"

	"github.com/braid-ccl/braid/sched"
)

// Class is a kind of link between two ranks.
type Class uint8

const (
	Intra Class = iota // shared memory within one NUMA node
	Cross              // shared memory across NUMA nodes (sockets) of a host
	Inter              // the network between hosts
	numClasses
)

var classNames = [...]string{"intra", "cross", "inter"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Classes lists every Class.
func Classes() []Class { return []Class{Intra, Cross, Inter} }

// ParseClass returns the class named s.
func ParseClass(s string) (Class, error) {
	for c := range numClasses {
		if classNames[c] == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("cost: unknown link class %q (want intra, cross or inter)", s)
}

// Link is the α-β model of one class of link.
type Link struct {
	Alpha float64 // seconds per message
	Beta  float64 // bytes per second
}

// Time returns the seconds one message of the given bytes takes: α + bytes/β.
func (l Link) Time(bytes float64) float64 { return l.Alpha + bytes/l.Beta }

// Valid reports whether l has a non-negative latency and a positive, finite
// bandwidth.
func (l Link) Valid() bool {
	return l.Alpha >= 0 && l.Beta > 0 && !math.IsInf(l.Beta, 0) && !math.IsNaN(l.Alpha)
}

// Model is the α-β-γ model of a machine.
type Model struct {
	Links [numClasses]Link
	// Gamma is the seconds to reduce one byte of an operand into another.
	Gamma float64
	// Overhead is the seconds a rank spends on each message it sends or
	// receives beyond the first of a step (LogP's o): the posting, polling
	// and matching that α counts once per step. An algorithm whose step
	// sends to many peers (direct exchanges, wide trees, linear roots)
	// pays it per peer, which at 16 ranks and more outweighs its saving in
	// steps.
	Overhead float64
	// Memory is the bytes per second that all the ranks of one host copy
	// or reduce together (see Shared): every copy, every receive and every
	// reduction reads and writes the host's memory, which its ranks share.
	// The links' β and γ price one rank's copies and reductions, and let
	// transfers overlap reductions; when many ranks of a host move data at
	// once, they add up against this limit instead. 0 means no limit.
	Memory float64
	// Core is the bytes per second that one thread copies or reduces
	// through memory once its data outgrows the caches (see Own): a rank
	// of a few on a host cannot draw on the host's whole Memory, which
	// takes many cores to reach. 0 means no limit.
	Core float64
	// Cache is the bytes a rank moves (as Shared counts them) before Core
	// limits it: what a core's caches hold of them. It is not carried by
	// tuning tables: the built-in figure applies.
	Cache float64
	// SelfCopy says that a rank's own thread copies the messages it sends
	// and receives over shared memory (see Serial): the shm transport's
	// sender copies a message into the receiver's ring and the receiver
	// copies it out, or, above Eager, out of the sender's memory
	// (process_vm_readv), in the calls that the executor makes between its
	// reductions; goroutine ranks (inproc) copy as well. Default sets it;
	// the programs of device buffers (plan.DeviceModel), whose copies run
	// on the GPUs' copy engines, leave it unset. Tuning tables do not carry
	// it: the built-in setting applies.
	SelfCopy bool
	// Eager is the largest message, in bytes, that the host's transport
	// copies twice: into a ring by its sender, out of it by its receiver.
	// Larger messages are copied once, by the receiver, out of the
	// sender's memory. It counts in the bytes an algorithm moves through
	// memory (Shared), not in its link times.
	Eager float64
	// CacheGamma is Gamma for a call whose data fits in a core's cache
	// (see ForCall): the seconds to reduce one byte of operands already
	// there. Tuning tables do not carry it: the built-in figure applies.
	CacheGamma float64
	// Written is the seconds per byte that a receiver takes beyond the
	// link's 1/β to copy a message whose bytes another core has just
	// written, out of that core's cache (see Serial): every eager message
	// (its sender wrote it into the ring) and a larger one that forwards
	// data the call wrote (a sum, a block received before), which the
	// receiver reads out of the sender's memory. A larger message of the
	// caller's input, which the call does not write, costs the link's
	// figure. Tuning tables do not carry it: the built-in figure applies.
	Written float64
}

// Default returns figures measured on this project's 2-core development VM
// (docs/PERFORMANCE.md): shared-memory messages of about 1 µs per
// collective step and 8 GB/s, reduction at 10 GB/s, and a 10 Gb/s network
// with 25 µs of latency. A tuning file (plan) replaces them with figures
// measured on the machine at hand.
func Default() Model {
	var m Model
	m.Links[Intra] = Link{Alpha: 1e-6, Beta: 8e9}
	m.Links[Cross] = Link{Alpha: 1.5e-6, Beta: 6e9}
	m.Links[Inter] = Link{Alpha: 25e-6, Beta: 1.25e9}
	m.Gamma = 1 / 10e9
	m.Overhead = DefaultOverhead
	m.Memory = DefaultMemory
	m.Core = DefaultCore
	m.Cache = DefaultCache
	m.Eager = DefaultEager
	m.SelfCopy = true
	m.CacheGamma = DefaultCacheGamma
	m.Written = DefaultWritten
	return m
}

// DefaultMemory is Model.Memory unless a tuning table says otherwise,
// measured on the 16-core node (docs/PERFORMANCE.md, "the host's memory
// shared by its ranks"): 36 runs of reduce-scatter (direct, segmented
// ring, shared area), allgather, allreduce and bcast (shared area) at 8
// and 16 ranks and 4–64 MiB moved 42–58 GB/s (quartiles; median 52)
// through memory, counted as Shared counts it, all ranks together, at 8
// ranks as at 16.
const DefaultMemory = 52e9

// DefaultCore is Model.Core unless a tuning table says otherwise, from
// reduce-scatters of 1–64 MiB on the 16-core node (session 13, with and
// without a rank's threads; docs/PERFORMANCE.md): counted as Shared counts
// bytes, the segmented ring on 2 ranks moved 6.0–7.7 GB/s a rank, the
// direct exchange on 4 ranks 5.5, and the shared area 6.2–7.1 a thread on
// 2 ranks with one thread each (3 times that with 8). Without this limit
// the model, which bounds those ranks only by the host's Memory shared
// among them (26 and 13 GB/s a rank), put the ring and the exchange at a
// third to a half of their measured times, and chose them over the area,
// which ran 1.3–3.6 times as fast. At 8 ranks Core equals Memory's share
// of a rank (52/8 GB/s); above, the host's limit is the tighter.
const DefaultCore = 6.5e9

// DefaultCache is Model.Cache: half the 2 MiB second-level cache of a
// core of the 16-core node's Xeons and this VM's (a call's input, output
// and the area's or the transport's copies share it). Far below it the
// ring moved its bytes faster than Core (2 ranks, 64 KiB: the segmented
// ring's reduce-scatter took 11.6 µs, which Core would put at 15 and
// more); at 1 MiB, 2 ranks, the segmented ring took 133–195 µs, the area
// 91–113, which the link model alone ranked the other way.
const DefaultCache = 1 << 20

// DefaultEager is Model.Eager unless a tuning table says otherwise: the
// shm transport's default eager limit (transport/shm.DefaultEagerLimit).
const DefaultEager = 64 << 10

// DefaultCacheGamma is Model.CacheGamma: a float32 sum of data already in
// a core's cache ran at about 20 GB/s on the 16-core node (session 18),
// twice Gamma's 10 GB/s, which prices reductions of data that comes from
// memory. In profiles of a 2-rank allreduce of 256 KiB there, the
// reductions took 7 % of direct's samples and 22 % of recursive
// doubling's, which reduces twice the bytes.
const DefaultCacheGamma = 1 / 20e9

// DefaultWritten is Model.Written, from the shm transport on the 16-core
// node (session 18, 2 ranks). A message the receiver copies out of the
// sender's memory (process_vm_readv, above Eager) ran twice as fast from a
// buffer that no core had just written as from one that one had: a
// binomial broadcast of 256 KiB from the root's buffer took 16–20 µs, a
// ping-pong of 256 KiB, which sends back the buffer it has just received,
// 37–39 µs one way; an allgather exchanged 128 KiB of its input in 14–17
// µs, while direct's allreduce of 256 KiB, whose second step exchanges
// 128 KiB of the sums it has just written, took 51–58 µs, 19–22 for its
// first step (the reduce-scatter) alone. Eager messages, which the
// receiver copies out of the ring its sender has just written, ran at the
// written rate: 64 KiB one way in 11–12 µs, an exchange in 13–15.5. The
// figure adds 0.075 ns a byte to the link's 0.125 (8 GB/s): 5.3 GB/s for
// written bytes. Without it the model chose direct's allreduce of 128 and
// 256 KiB on 2 ranks (25–32 and 51–58 µs) over recursive doubling's single
// exchange of the input (19.5–21 and 30.5–39), and direct's reduce-scatter
// of 16–128 KiB, whose eager messages it did not charge, over the shared
// area, which ran 13–27 % faster.
const DefaultWritten = 0.075e-9

// DefaultOverhead is Model.Overhead unless a tuning table says otherwise:
// on the 16-core node, an 8-byte allreduce that exchanges with every peer
// at once (direct) took about 0.7 µs more per peer than recursive doubling's
// step with one peer (docs/PERFORMANCE.md).
const DefaultOverhead = 0.5e-6

// Link returns the figures of class c.
func (m Model) Link(c Class) Link { return m.Links[c] }

// Valid returns an error unless every link is valid and γ is non-negative.
func (m Model) Valid() error {
	for c, l := range m.Links {
		if !l.Valid() {
			return fmt.Errorf("cost: %v link α=%g s β=%g B/s is not valid", Class(c), l.Alpha, l.Beta)
		}
	}
	if m.Gamma < 0 || math.IsNaN(m.Gamma) || math.IsInf(m.Gamma, 0) {
		return fmt.Errorf("cost: γ=%g s/B is not valid", m.Gamma)
	}
	if m.Overhead < 0 || math.IsNaN(m.Overhead) || math.IsInf(m.Overhead, 0) {
		return fmt.Errorf("cost: per-message overhead o=%g s is not valid", m.Overhead)
	}
	if m.Memory < 0 || math.IsNaN(m.Memory) || math.IsInf(m.Memory, 0) {
		return fmt.Errorf("cost: memory bandwidth %g B/s is not valid", m.Memory)
	}
	if m.Core < 0 || math.IsNaN(m.Core) || math.IsInf(m.Core, 0) {
		return fmt.Errorf("cost: one thread's memory bandwidth %g B/s is not valid", m.Core)
	}
	if m.Cache < 0 || math.IsNaN(m.Cache) || math.IsInf(m.Cache, 0) {
		return fmt.Errorf("cost: cache size %g B is not valid", m.Cache)
	}
	if m.CacheGamma < 0 || math.IsNaN(m.CacheGamma) || math.IsInf(m.CacheGamma, 0) {
		return fmt.Errorf("cost: in-cache γ=%g s/B is not valid", m.CacheGamma)
	}
	if m.Written < 0 || math.IsNaN(m.Written) || math.IsInf(m.Written, 0) {
		return fmt.Errorf("cost: written-data copy cost %g s/B is not valid", m.Written)
	}
	if m.Eager < 0 || math.IsNaN(m.Eager) || math.IsInf(m.Eager, 0) {
		return fmt.Errorf("cost: eager limit %g B is not valid", m.Eager)
	}
	return nil
}

// Shared returns the seconds that the ranks of layout l's busiest host
// (the most of n ranks on one host) take to move bytes each through the
// host's memory when they all do so at once: k·bytes/Memory for k ranks
// on that host; 0 when m has no memory limit. An algorithm's bytes are
// those its busiest rank copies (a Copy or a receive: each byte read once
// and written once), reduces into another operand (a Reduce, or the
// addition of a RecvReduce) and, for messages of at most Eager bytes,
// copies into the transport's ring as it sends.
func (m Model) Shared(l *sched.Layout, n int, bytes float64) float64 {
	if m.Memory <= 0 || bytes <= 0 {
		return 0
	}
	k := n
	if l != nil {
		per := make([]int, l.NHosts())
		k = 0
		for r := range n {
			h := l.HostOf(r)
			per[h]++
			k = max(k, per[h])
		}
	}
	return float64(k) * bytes / m.Memory
}

// Own returns the seconds that one rank takes to move bytes through
// memory (counted as Shared counts them) on threads of its own: the bytes
// beyond Cache at threads·Core; 0 when m has no such limit. threads below
// 1 count as 1.
func (m Model) Own(bytes, threads float64) float64 {
	if m.Core <= 0 || bytes <= m.Cache {
		return 0
	}
	return (bytes - m.Cache) / (m.Core * max(1, threads))
}

// Latencies returns m without its limits on bytes: infinite bandwidths,
// no reduction time and no memory limit. An algorithm's cost under it is
// what its steps take whatever their size: latencies, per-message
// overheads and synchronisations.
func (m Model) Latencies() Model {
	for c := range m.Links {
		m.Links[c].Beta = math.Inf(1)
	}
	m.Gamma, m.Memory, m.Core, m.CacheGamma, m.Written = 0, 0, 0, 0, 0
	return m
}

// Bounded returns an algorithm's time on m given t, its cost under m's
// links and γ, lat, its cost under m.Latencies(), moved, the bytes its
// busiest rank moves through memory (see Shared), and threads, how many
// threads that rank moves them on: the larger of t and lat plus the larger
// of Shared(l, n, moved) and Own(moved, threads). The link model lets a
// rank's transfers overlap its reductions and leaves local copies out;
// when many ranks of a host move data at once, every copy and reduction
// draws on the same memory, so the algorithm takes at least the time that
// memory needs for all of them, and when few do, the time their own
// threads need; and its steps' latencies on top of that.
func (m Model) Bounded(l *sched.Layout, n int, t, lat, moved, threads float64) float64 {
	return max(t, lat+max(m.Shared(l, n, moved), m.Own(moved, threads)))
}

// ClassOf returns the class of the link between ranks a and b of layout l
// (nil: one host, one NUMA node).
func ClassOf(l *sched.Layout, a, b int) Class {
	switch {
	case l.HostOf(a) != l.HostOf(b):
		return Inter
	case l.NUMAOf(a) != l.NUMAOf(b):
		return Cross
	}
	return Intra
}

// Between returns the link between ranks a and b of layout l.
func (m Model) Between(l *sched.Layout, a, b int) Link { return m.Links[ClassOf(l, a, b)] }

// Worst returns the slowest class of link that joins two of the n ranks of
// layout l: the link a flat algorithm (ring, tree), which ignores the
// layout, must be costed with.
func (m Model) Worst(l *sched.Layout, n int) Link { return m.Links[WorstClass(l, n)] }

// WorstClass returns the class of Model.Worst's link.
func WorstClass(l *sched.Layout, n int) Class {
	c := Intra
	for r := 1; r < n; r++ {
		c = max(c, ClassOf(l, 0, r))
		if c == Inter {
			break
		}
		for q := range r {
			c = max(c, ClassOf(l, q, r))
		}
	}
	return c
}

// Serial reports whether a rank's transfers over links of class c and its
// reductions take turns on its thread rather than overlap: where m's
// ranks copy their own messages (SelfCopy) over shared memory (Intra,
// Cross). Over the network (Inter) the NIC and the kernel move the bytes
// while the rank computes.
func (m Model) Serial(c Class) bool { return m.SelfCopy && c != Inter }

// Flat returns the link a flat algorithm on p's ranks is costed with.
func (m Model) Flat(p sched.Params) Link { return m.Worst(p.Layout, p.NRanks) }

// FlatClass returns the class of Flat's link.
func FlatClass(p sched.Params) Class { return WorstClass(p.Layout, p.NRanks) }

// ForCall returns m for a call of p with es-byte elements: with CacheGamma
// for Gamma where m's ranks copy their own messages (SelfCopy) and the
// call's input and output together fit in Cache, for its reductions then
// add operands that the call's copies have just brought into the core's
// cache. (A 2-rank allreduce of 512 KiB by recursive doubling took 168–182
// µs on the 16-core node against 30.5–39 at 256 KiB, but most of that jump
// was the executor's splitting of its copies across threads from 512 KiB,
// since moved to 2 MiB: 94 µs at 512 KiB after it, session 19.)
func (m Model) ForCall(p sched.Params, es int) Model {
	b := float64(max(p.InLen(0), p.InLen(p.Root))+max(p.OutLen(0), p.OutLen(p.Root))) * float64(es)
	if m.SelfCopy && m.CacheGamma > 0 && b <= m.Cache {
		m.Gamma = min(m.Gamma, m.CacheGamma)
	}
	return m
}
