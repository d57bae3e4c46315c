package plan

// MIAD chooses the segment (chunk) of a pipelined algorithm over the first
// calls of a repeated size, as Blink does (MLSys 2020, §4.2.1): start
// small, grow the segment multiplicatively while the measured throughput
// rises, and once it falls, step back additively from the overshoot until
// the throughput stops improving; then keep the best segment seen.
//
// MIAD is a pure state machine: the caller runs each trial with Segment(),
// measures throughput (any unit where larger is better, agreed by every
// rank so that all make the same moves) and reports it with Observe, until
// Done.
type MIAD struct {
	min, max int // bounds, in elements
	seg      int // the segment under trial
	best     int
	bestThr  float64
	growing  bool
	step     int // additive step of the decrease phase
	misses   int // trials without improvement in the decrease phase
	done     bool
	trials   int
}

// MIAD's constants.
const (
	MIADFactor    = 2    // multiplicative increase
	MIADSteps     = 4    // the decrease phase steps back by 1/MIADSteps of the overshoot
	MIADTolerance = 0.02 // a throughput must beat the best by 2 % to count as a rise
	MIADMaxTrials = 16
)

// NewMIAD starts at segment start (elements), within [lo, hi].
func NewMIAD(start, lo, hi int) *MIAD {
	lo = max(1, lo)
	hi = max(lo, hi)
	return &MIAD{min: lo, max: hi, seg: min(max(start, lo), hi), growing: true}
}

// Segment returns the segment to try next, or the final one once Done.
func (m *MIAD) Segment() int {
	if m.done {
		return m.best
	}
	return m.seg
}

// Done reports whether the search has settled.
func (m *MIAD) Done() bool { return m.done }

// Trials returns how many observations MIAD has taken.
func (m *MIAD) Trials() int { return m.trials }

// Observe records the throughput of the current segment and picks the next.
func (m *MIAD) Observe(thr float64) {
	if m.done {
		return
	}
	m.trials++
	improved := m.best == 0 || thr > m.bestThr*(1+MIADTolerance)
	if improved {
		m.best, m.bestThr = m.seg, thr
	}
	switch {
	case m.trials >= MIADMaxTrials:
		m.done = true
	case m.growing && improved && m.seg < m.max:
		m.seg = min(m.seg*MIADFactor, m.max)
	case m.growing:
		// The rise stopped (or hit the bound): step back from here
		// towards the best in additive steps.
		m.growing = false
		m.step = max(1, (m.seg-m.best)/MIADSteps)
		if m.seg == m.best {
			m.step = max(1, m.best/MIADSteps)
		}
		m.next()
	default:
		if improved {
			m.misses = 0
		} else {
			m.misses++
		}
		if m.misses >= 2 {
			m.done = true
			return
		}
		m.next()
	}
}

// next steps the decrease phase down, skipping the best (already
// measured); it ends the search at the lower bound.
func (m *MIAD) next() {
	s := m.seg - m.step
	if s == m.best {
		s -= m.step
	}
	if s < m.min {
		m.done = true
		return
	}
	m.seg = s
}
