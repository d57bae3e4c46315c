package braid

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
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
	// explicit entry the collective cannot run is an error). BRAID_ALGO.
	Algo string

	// Timeout bounds every call that has no earlier deadline in its
	// context; a call that runs past it fails with Timeout and aborts the
	// communicator. BRAID_TIMEOUT (a Go duration or seconds); default 30 s.
	Timeout time.Duration

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
	if r.Planner == nil {
		r.Planner = plan.Default{}
	}
	if r.Host == "" {
		r.Host = getenv("BRAID_HOST")
	}
	return r, nil
}

// algoForce is a parsed Options.Algo.
type algoForce struct {
	any    string                      // applies wherever available
	perCol map[sched.Collective]string // explicit per collective
}

func parseAlgo(s string) (algoForce, error) {
	f := algoForce{perCol: map[sched.Collective]string{}}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			f.any = part
			continue
		}
		c, err := sched.ParseCollective(k)
		if err != nil {
			return f, fmt.Errorf("BRAID_ALGO entry %q: %v", part, err)
		}
		f.perCol[c] = strings.TrimSpace(v)
	}
	return f, nil
}
