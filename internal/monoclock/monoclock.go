// Package monoclock maps Go's monotonic time onto the host's
// CLOCK_MONOTONIC, which every process of the host reads alike: Go hides
// its monotonic reading (time.Time keeps it relative to the process's
// start), so a process reads CLOCK_MONOTONIC just before and just after a
// time.Now once, and adds time elapsed since that time.Now to the pair's
// midpoint.
//
// The midpoint's error is half the gap between the two reads: tens of
// nanoseconds, unless the thread is descheduled in between. On a loaded
// machine it was (a gap of 300 µs put a rank's arrival stamps 151 µs off
// its host's other ranks'), so Base repeats the reads until the gap is at
// most MaxGap, up to Tries times, and keeps the narrowest pair.
package monoclock

import (
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// Tries and MaxGap bound Base's search for a narrow pair of reads.
const (
	Tries  = 100
	MaxGap = 2 * time.Microsecond
)

// Base returns a time.Now reading and the host's CLOCK_MONOTONIC at that
// moment, in nanoseconds (within half of the gap it reports).
func Base() (base time.Time, ns int64, gap time.Duration) {
	return From(func() int64 {
		var t unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &t)
		return t.Nano()
	}, time.Now)
}

// From is Base with the clocks it reads given: mono for CLOCK_MONOTONIC
// in nanoseconds, now for time.Now.
func From(mono func() int64, now func() time.Time) (base time.Time, ns int64, gap time.Duration) {
	best := int64(math.MaxInt64)
	for range Tries {
		a := mono()
		t := now()
		b := mono()
		if g := b - a; g < best {
			best, base, ns = g, t, (a+b)/2
		}
		if best <= int64(MaxGap) {
			break
		}
	}
	return base, ns, time.Duration(best)
}
