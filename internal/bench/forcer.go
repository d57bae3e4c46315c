package bench

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Auto is the name of the run that lets the planner choose the algorithm
// at each size.
const Auto = "auto"

// Forcer is a plan.Planner that lets one job time several algorithms side
// by side. Give it as Options.Planner when creating the communicator; Run
// gives each algorithm of Config.Algos its own communicator (split from
// it, so with its own plan cache) and sets the Forcer's choice before that
// communicator plans a call. With no choice, or with Auto, it asks Next.
//
// A Forcer is safe for concurrent use, but its choice is one per process:
// the communicators that share it must not plan calls concurrently.
type Forcer struct {
	// Next chooses for the Auto run and for calls the chosen algorithm
	// cannot run; nil means plan.Default{}.
	Next plan.Planner

	mu     sync.Mutex
	choice plan.Choice
	name   string
}

// NewForcer returns a Forcer whose Next is the planner a communicator gets
// by default: plan.Default with the tuning table that Options.Tuning
// (tuning) or else BRAID_TUNING names, or else braid.DefaultTuningFile if
// it exists; "none" means no table. A table named by either that cannot
// be used is an error; a cached one is ignored with a message on standard
// error, as Init does.
func NewForcer(tuning string) (*Forcer, error) {
	def, err := braid.TuningPlanner(tuning)
	if err != nil {
		if tuning != "" || os.Getenv("BRAID_TUNING") != "" {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "braid: ignoring %v (run braid tune again, or set BRAID_TUNING=none)\n", err)
	}
	return &Forcer{Next: def}, nil
}

// CheckAlgos returns an error if a name of algos is neither Auto nor an
// algorithm of coll (with parameters as plan.ParseChoice reads them, and
// only those it takes: choice.Check), or is listed twice.
func CheckAlgos(coll sched.Collective, algos []string) error {
	seen := map[string]bool{}
	for _, name := range algos {
		if seen[name] {
			return fmt.Errorf("algorithm %q listed twice", name)
		}
		seen[name] = true
		if name == Auto {
			continue
		}
		ch, err := plan.ParseChoice(name)
		if err != nil {
			return err
		}
		if err := choice.Check(coll, ch); err != nil {
			return err
		}
	}
	return nil
}

// Set makes name the choice for the calls planned from now on: an
// algorithm as plan.ParseChoice reads it ("ring", "segring:seg=64K"), or ""
// or Auto for Next's choice.
func (f *Forcer) Set(name string) error {
	var ch plan.Choice
	if name != "" && name != Auto {
		var err error
		if ch, err = plan.ParseChoice(name); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.choice, f.name = ch, name
	f.mu.Unlock()
	return nil
}

// Plan returns the chosen algorithm, with the parameters the choice gives
// and the candidate's for the rest, when it is one of the candidates, and
// Next's decision otherwise.
func (f *Forcer) Plan(r plan.Request, cand []plan.Candidate) plan.Decision {
	f.mu.Lock()
	ch, name := f.choice, f.name
	f.mu.Unlock()
	if ch.Algo != "" {
		for _, c := range cand {
			if c.Name == ch.Algo {
				return plan.Decision{Algo: c.Name, Params: ch.Apply(c.Params, r.ElemSize), Reason: "chosen by braid bench: " + name, Source: plan.FromForce, Fixed: true}
			}
		}
	}
	return f.next().Plan(r, cand)
}

// Model returns Next's cost model if it has one, the built-in one
// otherwise.
func (f *Forcer) Model() cost.Model {
	if m, ok := f.next().(interface{ Model() cost.Model }); ok {
		return m.Model()
	}
	return cost.Default()
}

func (f *Forcer) next() plan.Planner {
	if f.Next != nil {
		return f.Next
	}
	return plan.Default{}
}

// errNoForcer is Run's error for Algos without a Forcer.
var errNoForcer = errors.New("bench: Config.Algos needs Config.Forcer, the planner the communicator was created with")
