package algo

import (
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sched/schedtest"
)

// raceInterpret: under the race detector, checkSched interprets about one
// schedule in raceInterpret (and each test's first).
const raceInterpret = 4

// checkSched is schedtest.Check(p, progs) for the sweeps of these tests,
// except under the race detector. There it validates every schedule
// (sched.Validate: the steps, the matching of messages, no hazard, no
// deadlock) but runs the reference interpreter only on the first schedule
// of each test t and then on a deterministic pseudo-random one in
// raceInterpret. The interpreter is one goroutine adding float64 slices,
// where the race detector has nothing to find and takes ten times as long
// (most of this package's time under it); the programs, which the
// algorithms generate in parallel subtests, are all still generated and
// validated. scripts/test.sh runs this package again without the race
// detector, where every schedule is interpreted.
func checkSched(t testing.TB, p sched.Params, progs []sched.Program) error {
	if raceEnabled && !interpretNext(t) {
		return sched.Validate(p, progs)
	}
	return schedtest.Check(p, progs)
}

// calls counts checkSched's calls per test (testing.TB -> *atomic.Uint64).
var calls sync.Map

// interpretNext reports whether t's next schedule is interpreted under the
// race detector: its first, then those whose index, mixed with the test's
// name, falls in one of raceInterpret classes. A test's calls come in a
// fixed order, so the choice is the same on every run; the mixing keeps it
// from following the period of a loop.
func interpretNext(t testing.TB) bool {
	c, _ := calls.LoadOrStore(t, new(atomic.Uint64))
	i := c.(*atomic.Uint64).Add(1) - 1
	if i == 0 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return splitmix(i^h.Sum64())%raceInterpret == 0
}

// splitmix is the finalizer of SplitMix64 (Steele, Lea and Flood,
// OOPSLA 2014): a bijection of uint64 whose outputs look independent.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
