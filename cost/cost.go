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
	return m
}

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
	return nil
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
func (m Model) Worst(l *sched.Layout, n int) Link {
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
	return m.Links[c]
}

// Flat returns the link a flat algorithm on p's ranks is costed with.
func (m Model) Flat(p sched.Params) Link { return m.Worst(p.Layout, p.NRanks) }
