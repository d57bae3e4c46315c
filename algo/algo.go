package algo

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/braid-ccl/braid/sched"
)

// Algorithm generates schedules for one collective.
//
// Implementations are stateless values, safe for concurrent use.
type Algorithm interface {
	// Name returns the algorithm's name, unique among the algorithms of
	// its collective ("ring", "recdouble", "binomial").
	Name() string

	// Collective returns the collective the algorithm implements.
	Collective() sched.Collective

	// Supports returns nil if the algorithm can run p, else an error
	// saying why.
	Supports(p sched.Params) error

	// Program returns rank's program for p. It is deterministic and pure:
	// no goroutines, I/O or clocks. The caller must have checked Supports;
	// the result is undefined (and Program may panic) otherwise. The
	// returned program is the caller's to keep.
	Program(p sched.Params, rank int) sched.Program
}

var registry struct {
	sync.RWMutex
	byColl map[sched.Collective][]Algorithm
}

// Register adds a to the registry. It panics if a's collective is invalid
// or an algorithm of that collective has the same name: registration
// happens in init functions, where a clash is a programming error.
func Register(a Algorithm) {
	c := a.Collective()
	if !slices.Contains(sched.Collectives(), c) {
		panic(fmt.Sprintf("algo: Register %q: invalid collective %v", a.Name(), c))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byColl == nil {
		registry.byColl = map[sched.Collective][]Algorithm{}
	}
	for _, b := range registry.byColl[c] {
		if b.Name() == a.Name() {
			panic(fmt.Sprintf("algo: Register: %v algorithm %q registered twice", c, a.Name()))
		}
	}
	l := append(registry.byColl[c], a)
	slices.SortFunc(l, func(x, y Algorithm) int { return cmp.Compare(x.Name(), y.Name()) })
	registry.byColl[c] = l
}

// Lookup returns the algorithm of collective c named name, or an error that
// lists the names c has.
func Lookup(c sched.Collective, name string) (Algorithm, error) {
	registry.RLock()
	defer registry.RUnlock()
	var names []string
	for _, a := range registry.byColl[c] {
		if a.Name() == name {
			return a, nil
		}
		names = append(names, a.Name())
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("algo: no %v algorithm named %q (there are no %v algorithms)", c, name, c)
	}
	return nil, fmt.Errorf("algo: no %v algorithm named %q (have %s)", c, name, strings.Join(names, ", "))
}

// ForCollective returns the algorithms of collective c, sorted by name.
func ForCollective(c sched.Collective) []Algorithm {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Clone(registry.byColl[c])
}

// All returns every registered algorithm, sorted by collective, then name.
func All() []Algorithm {
	var all []Algorithm
	for _, c := range sched.Collectives() {
		all = append(all, ForCollective(c)...)
	}
	return all
}

// Programs returns every rank's program of a for p, indexed by rank: the
// whole schedule, for validation and simulation. The caller must have checked
// a.Supports(p).
func Programs(a Algorithm, p sched.Params) []sched.Program {
	progs := make([]sched.Program, p.NRanks)
	for r := range progs {
		progs[r] = a.Program(p, r)
	}
	return progs
}

// base implements the parts of Algorithm every algorithm shares.
type base struct {
	name string
	coll sched.Collective
}

func (b base) Name() string                 { return b.name }
func (b base) Collective() sched.Collective { return b.coll }

// Supports accepts every valid p of the collective.
func (b base) Supports(p sched.Params) error {
	if p.Coll != b.coll {
		return fmt.Errorf("algo: %v algorithm %q cannot run %v", b.coll, b.name, p.Coll)
	}
	if err := sched.CheckParams(p); err != nil {
		return err
	}
	if p.NRanks > 1<<24 {
		return fmt.Errorf("algo: %v %q: %d ranks is more than tags can number", b.coll, b.name, p.NRanks)
	}
	return nil
}
