package algo

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/braid-ccl/braid/sched"
)

// MsgTime gives the seconds a message of count elements takes from rank
// from to rank to on an otherwise idle network: the route's latency plus
// its bytes over the route's narrowest link, as the simulator's network
// would move it alone.
type MsgTime func(from, to, count int) float64

// PatternAlgorithm is an algorithm whose schedule is built for an arrival
// pattern: when each rank enters the call, known beforehand or predicted.
// Such algorithms come from the literature on process arrival patterns and
// are evaluated in the simulator only (braid sim): none has an executor's
// Run, so they have their own registry, apart from the schedules' and the
// dynamic algorithms', and the planner never meets one.
//
// PatternPrograms returns every rank's program for p when the ranks arrive
// at the times est (seconds on any common origin, one per rank), msg
// giving the time of one message on an idle network (the algorithm's
// model of the machine, for the choices it makes from est). It is
// deterministic and pure, and the caller must have checked Supports.
type PatternAlgorithm interface {
	Name() string
	Collective() sched.Collective
	Supports(p sched.Params) error
	PatternPrograms(p sched.Params, est []float64, msg MsgTime) []sched.Program
}

var patterns struct {
	sync.RWMutex
	byColl map[sched.Collective][]PatternAlgorithm
}

// RegisterPattern adds a to the registry of pattern algorithms; it panics
// on a name that a schedule, a dynamic algorithm or another pattern
// algorithm of the collective has.
func RegisterPattern(a PatternAlgorithm) {
	c := a.Collective()
	if _, err := Lookup(c, a.Name()); err == nil || LookupDynamic(c, a.Name()) != nil {
		panic(fmt.Sprintf("algo: RegisterPattern: %v algorithm %q is taken", c, a.Name()))
	}
	patterns.Lock()
	defer patterns.Unlock()
	if patterns.byColl == nil {
		patterns.byColl = map[sched.Collective][]PatternAlgorithm{}
	}
	for _, b := range patterns.byColl[c] {
		if b.Name() == a.Name() {
			panic(fmt.Sprintf("algo: RegisterPattern: %v algorithm %q registered twice", c, a.Name()))
		}
	}
	l := append(patterns.byColl[c], a)
	slices.SortFunc(l, func(x, y PatternAlgorithm) int { return cmp.Compare(x.Name(), y.Name()) })
	patterns.byColl[c] = l
}

// Patterns returns the pattern algorithms of c, sorted by name.
func Patterns(c sched.Collective) []PatternAlgorithm {
	patterns.RLock()
	defer patterns.RUnlock()
	return slices.Clone(patterns.byColl[c])
}

// LookupPattern returns the pattern algorithm of c named name, or nil.
func LookupPattern(c sched.Collective, name string) PatternAlgorithm {
	for _, a := range Patterns(c) {
		if a.Name() == name {
			return a
		}
	}
	return nil
}

// byArrival returns the ranks sorted by est (ties by rank).
func byArrival(est []float64) []int {
	order := make([]int, len(est))
	for r := range order {
		order[r] = r
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(est[a], est[b]) })
	return order
}
