package braid

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// Options configures a communicator. The zero value (or nil) means "let
// Braid choose"; each field left zero is taken from its environment variable,
// read once at creation, and then from the default.
type Options struct {
	// Transport between processes: "" (shm within a host, tcp across
	// hosts), "shm" or "tcp" (tcp everywhere). BRAID_TRANSPORT.
	Transport string

	// Algo forces algorithms: "ring" forces ring wherever a collective has
	// one; "allreduce=recdouble,bcast=binomial" forces per collective (an
	// explicit entry the collective cannot run is an error). A name may
	// carry parameters: "bcast=chain:seg=256K", "reduce=knomial:k=4".
	// BRAID_ALGO.
	Algo string

	// Tuning names a tuning table file (written by braid tune; format in
	// package plan) whose entries override the cost model and whose link
	// figures feed it. "" reads BRAID_TUNING, then the file braid tune
	// caches by default (DefaultTuningFile) if it exists; "none" uses
	// neither.
	Tuning string

	// DisableMIAD switches off MIAD, the adaptation of pipelined
	// algorithms' segment over the first calls of a size (plan.MIAD).
	// BRAID_MIAD=off.
	DisableMIAD bool

	// Timeout bounds every call that has no earlier deadline in its
	// context; a call that runs past it fails with Timeout and aborts the
	// communicator. BRAID_TIMEOUT (a Go duration or seconds); default 30 s.
	Timeout time.Duration

	// Check chooses how ranks that disagree about a call are found: ""
	// (or "default") compares the signature every message carries, so
	// that a disagreement is reported by the next call at the latest;
	// "strict" (CheckStrict) also agrees on every call's arguments before
	// any of its data moves, so that the call itself reports it, naming
	// each rank's call. See "Disagreeing ranks" in the package
	// documentation. BRAID_CHECK.
	Check string

	// Debug is "", "info" (log the topology and each new plan with its
	// reason, from rank 0) or "trace" (also every call, from every rank).
	// BRAID_DEBUG.
	Debug string

	// Log receives debug output; default os.Stderr.
	Log io.Writer

	// Planner chooses algorithms; default plan.Default.
	Planner plan.Planner

	// Host overrides the host identity used to group ranks (ranks with the
	// same host share memory). BRAID_HOST. Useful to test multi-host paths
	// on one machine.
	Host string

	// LocalHosts, for NewLocal only, names the host of each rank (length
	// n), so that one process can emulate ranks spread over several hosts
	// and exercise hierarchical algorithms. Nil puts every rank on Host.
	LocalHosts []string

	// Topology is the machine the ranks run on (package topo): its
	// devices and links. With one, the planner packs weighted spanning
	// trees into the links among the communicator's ranks (package pack:
	// over NVLink where NVLink spans the ranks, else over every link and
	// route) for broadcast, reduce and allreduce, and offers the
	// tree-packing algorithm "treepack" (Blink) among the candidates.
	// Nil reads BRAID_TOPO: a preset name (topo.Presets, or
	// "<n>x<preset>" for a cluster, e.g. "dgx1-v100", "2xdgx1-v100") or
	// the path of a JSON topology file (topo.Load; braid topo --dump
	// writes one). A name that is neither makes NewLocal and Init fail
	// with InvalidArgument. Without a topology no trees are packed.
	Topology *topo.Topology

	// Devices places the ranks on the topology: world rank r runs on
	// Topology.Devices[Devices[r]] (indices into Topology.Devices, one per
	// rank, all distinct). Nil puts rank r on the topology's r-th GPU
	// (Topology.GPUs order). NewLocal and Init fail with InvalidArgument
	// if the list does not fit the job (wrong length, an index out of
	// range or repeated, fewer GPUs than ranks) or is given without a
	// topology. A communicator from Split packs its trees among the
	// devices of its members.
	Devices []int
}

// DefaultTimeout is the timeout of a call when neither the context nor
// Options nor BRAID_TIMEOUT set one.
const DefaultTimeout = 30 * time.Second

// resolve fills zero fields from the environment and defaults.
func (o *Options) resolve(getenv func(string) string) (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Transport == "" {
		r.Transport = getenv("BRAID_TRANSPORT")
	}
	switch r.Transport {
	case "", "auto", "shm", "tcp", "inproc":
	default:
		return r, fmt.Errorf("unknown transport %q (want shm, tcp or empty for automatic)", r.Transport)
	}
	if r.Algo == "" {
		r.Algo = getenv("BRAID_ALGO")
	}
	if _, err := parseAlgo(r.Algo); err != nil {
		return r, err
	}
	if r.Timeout == 0 {
		if s := getenv("BRAID_TIMEOUT"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				var secs float64
				if _, err2 := fmt.Sscanf(s, "%g", &secs); err2 != nil || secs <= 0 {
					return r, fmt.Errorf("BRAID_TIMEOUT=%q: want a duration such as 30s or a number of seconds", s)
				}
				d = time.Duration(secs * float64(time.Second))
			}
			r.Timeout = d
		}
	}
	if r.Timeout <= 0 {
		r.Timeout = DefaultTimeout
	}
	if r.Check == "" {
		r.Check = getenv("BRAID_CHECK")
	}
	switch strings.ToLower(r.Check) {
	case "", "default":
		r.Check = ""
	case CheckStrict:
		r.Check = CheckStrict
	default:
		return r, fmt.Errorf("BRAID_CHECK=%q (or Options.Check): want default or %s", r.Check, CheckStrict)
	}
	if r.Debug == "" {
		r.Debug = getenv("BRAID_DEBUG")
	}
	switch strings.ToLower(r.Debug) {
	case "", "none", "warn":
		r.Debug = ""
	case "info", "trace":
		r.Debug = strings.ToLower(r.Debug)
	default:
		return r, fmt.Errorf("BRAID_DEBUG=%q: want info or trace", r.Debug)
	}
	if r.Log == nil {
		r.Log = os.Stderr
	}
	if r.Tuning == "" {
		r.Tuning = getenv("BRAID_TUNING")
	}
	if r.Planner == nil {
		def, err := TuningPlanner(r.Tuning)
		// A cached table that cannot be read is ignored; a named one is
		// an error.
		if err != nil && r.Tuning != "" {
			return r, err
		}
		r.Planner = def
	}
	switch strings.ToLower(getenv("BRAID_MIAD")) {
	case "", "on", "1", "true":
	case "off", "0", "false":
		r.DisableMIAD = true
	default:
		return r, fmt.Errorf("BRAID_MIAD=%q: want on or off", getenv("BRAID_MIAD"))
	}
	if r.Host == "" {
		r.Host = getenv("BRAID_HOST")
	}
	if r.Topology == nil {
		if spec := getenv("BRAID_TOPO"); spec != "" {
			t, err := topo.Open(spec)
			if err != nil {
				return r, fmt.Errorf("BRAID_TOPO: %v", err)
			}
			r.Topology = t
		}
	}
	r.Devices = slices.Clone(r.Devices)
	return r, nil
}

// DefaultTuningFile is where braid tune writes its table unless told
// otherwise, and where a job looks for one when neither Options.Tuning nor
// BRAID_TUNING names a file: $XDG_CACHE_HOME/braid/tuning.txt (on Linux,
// ~/.cache/braid/tuning.txt). "" if there is no cache directory.
func DefaultTuningFile() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "braid", "tuning.txt")
}

// TuningPlanner returns the default planner with the tuning table tuning
// names: a file, "none" for no table, or "" for BRAID_TUNING, then the
// file braid tune caches (DefaultTuningFile) if it exists. It fails if the
// table cannot be read; Init and NewLocal then plan without the cached
// table, but fail on a table named explicitly.
func TuningPlanner(tuning string) (plan.Default, error) {
	if tuning == "" {
		tuning = os.Getenv("BRAID_TUNING")
	}
	switch tuning {
	case "none":
		return plan.Default{}, nil
	case "":
		path := DefaultTuningFile()
		if path == "" {
			return plan.Default{}, nil
		}
		t, err := plan.LoadTable(path)
		if errors.Is(err, fs.ErrNotExist) {
			return plan.Default{}, nil
		}
		if err != nil {
			return plan.Default{}, fmt.Errorf("tuning table %s: %w", path, err)
		}
		return plan.Default{Table: t}, nil
	}
	t, err := plan.LoadTable(tuning)
	if err != nil {
		return plan.Default{}, fmt.Errorf("BRAID_TUNING: %w", err)
	}
	return plan.Default{Table: t}, nil
}

// model returns the link figures the planner costs algorithms with.
func (o *Options) model() cost.Model {
	// plan.Default, and planners that wrap one (braid bench's), say
	// which figures they plan with.
	if m, ok := o.Planner.(interface{ Model() cost.Model }); ok {
		return m.Model()
	}
	return cost.Default()
}

// algoForce is a parsed Options.Algo.
type algoForce struct {
	any    plan.Choice                      // applies wherever available
	perCol map[sched.Collective]plan.Choice // explicit per collective
}

func parseAlgo(s string) (algoForce, error) {
	f := algoForce{perCol: map[sched.Collective]plan.Choice{}}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.Contains(k, ":") {
			// "ring" or "chain:seg=256K": no collective named.
			ch, err := plan.ParseChoice(part)
			if err != nil {
				return f, fmt.Errorf("BRAID_ALGO entry %q: %v", part, err)
			}
			f.any = ch
			continue
		}
		c, err := sched.ParseCollective(k)
		if err != nil {
			return f, fmt.Errorf("BRAID_ALGO entry %q: %v", part, err)
		}
		ch, err := plan.ParseChoice(v)
		if err != nil {
			return f, fmt.Errorf("BRAID_ALGO entry %q: %v", part, err)
		}
		f.perCol[c] = ch
	}
	return f, nil
}
