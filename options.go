package braid

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/internal/par"
	"github.com/braid-ccl/braid/internal/size"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
	"github.com/braid-ccl/braid/transport/shm"
	"github.com/braid-ccl/braid/transport/shmcoll"
	"github.com/braid-ccl/braid/transport/tcp"
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
	// BRAID_ALGO. NewLocal and Init fail with InvalidArgument, naming the
	// entry, on an unknown collective or algorithm (a bare name must be
	// some collective's), a parameter the algorithm does not take, or a
	// second entry for the same collectives.
	Algo string

	// Tuning names a tuning table file (written by braid tune; format in
	// package plan) whose entries override the cost model and whose link
	// figures feed it. "" reads BRAID_TUNING, then the file braid tune
	// caches by default (DefaultTuningFile) if it exists; "none" uses
	// neither. A table with a malformed line, or one that names an
	// algorithm or parameter Braid does not have, makes NewLocal and Init
	// fail with InvalidArgument naming FILE:LINE; a bad cached table is
	// ignored with a message on Log.
	Tuning string

	// DisableMIAD switches off MIAD, the adaptation of pipelined
	// algorithms' segment over the first calls of a size (plan.MIAD).
	// BRAID_MIAD=off (or 0, false; on, 1, true or unset keep it on).
	DisableMIAD bool

	// DisableArrival switches off the planner's use of arrival
	// statistics: a call site of reduce above 16 KiB, or of allreduce
	// above the shared area's FlatMax (2 KiB below 16 ranks, less from
	// there: shmcoll.FlatMaxFor), on one host whose ranks
	// arrive far apart is switched to the arrival-aware reductions
	// (arrivalplan.go). BRAID_ARRIVAL=off (or 0, false; on, 1, true or unset
	// keep it on).
	DisableArrival bool

	// ClockRefresh is how often a rank on another host than rank 0's
	// refreshes the offset of its clock from rank 0's host, which its
	// arrival stamps add (Comm.ClockOffset): in the background, a few
	// ping-pongs with rank 0 each time. BRAID_CLOCK_REFRESH (a Go
	// duration, a number of seconds, or "off"); default
	// DefaultClockRefresh. Negative: never (Init's estimate only).
	ClockRefresh time.Duration

	// Timeout bounds every call that has no earlier deadline in its
	// context; a call that runs past it fails with Timeout and aborts the
	// communicator. BRAID_TIMEOUT (a Go duration such as "30s" or "5m", or
	// a number of seconds); default 30 s. A negative Timeout, or a
	// BRAID_TIMEOUT that is not a positive duration, is InvalidArgument:
	// there is no "no timeout".
	Timeout time.Duration

	// Check chooses how ranks that disagree about a call are found: ""
	// (or "default") compares the signature every message carries, so
	// that a disagreement is reported by the next call at the latest;
	// "strict" (CheckStrict) also agrees on every call's arguments before
	// any of its data moves, so that the call itself reports it, naming
	// each rank's call. See "Disagreeing ranks" in the package
	// documentation. BRAID_CHECK.
	Check string

	// Debug is "" (or "none"), "info" (log the topology and each new plan
	// with its reason, from rank 0) or "trace" (also every call, from
	// every rank), in any case. BRAID_DEBUG.
	Debug string

	// Log receives debug output; default os.Stderr.
	Log io.Writer

	// Planner chooses algorithms; default plan.Default.
	Planner plan.Planner

	// Host overrides the host identity used to group ranks (ranks with the
	// same host share memory). BRAID_HOST. Useful to test multi-host paths
	// on one machine. Empty means bootstrap.HostID: the host name with a
	// hash of the boot id, the network and PID namespaces and /dev/shm's
	// device, so that containers or namespaces that share a host name
	// are told apart. It may not contain blanks or control characters.
	Host string

	// SocketIfname chooses the network interface that TCP listens on and
	// advertises to ranks of other hosts, as NCCL_SOCKET_IFNAME does:
	// "eth0", prefixes "eth,ib", "^docker,lo" to exclude, "=eth0" for
	// exact names. Empty: an address the host name resolves to, else the
	// first interface that is up and neither loopback nor a docker or
	// libvirt bridge. BRAID_SOCKET_IFNAME.
	SocketIfname string

	// AdvertiseAddr is the address (or host name, without port) that
	// ranks of other hosts dial to reach this one over TCP, e.g. a NAT's
	// address; empty means the interface's. BRAID_ADVERTISE_ADDR.
	AdvertiseAddr string

	// LocalHosts, for NewLocal only, names the host of each rank (length
	// n), so that one process can emulate ranks spread over several hosts
	// and exercise hierarchical algorithms. Nil puts every rank on Host.
	LocalHosts []string

	// Topology is the machine the ranks run on (package topo): its
	// devices and links. With one, the planner packs weighted spanning
	// trees into the links among the communicator's ranks (package pack:
	// over NVLink where NVLink spans the ranks, else over every link and
	// route) for broadcast, reduce and allreduce, and offers the
	// tree-packing algorithm "treepack" (Blink) among the candidates;
	// device calls (DeviceComm) do too, with trees packed over the paths
	// of the GPUs' copies to each other, and the topology's narrowest
	// route between two ranks bounds their fused kernels and schedules.
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

	// KeepGOMAXPROCS leaves the Go runtime's GOMAXPROCS as it is. By
	// default Init lowers it, when the GOMAXPROCS environment variable is
	// not set and the job has several ranks on this host, to the host's
	// cores divided by its ranks (at least 1): a rank per core then keeps
	// to its core, while with Go's default every rank may run as many
	// threads as the host has cores, and the scheduler's idle threads,
	// woken whenever a waiting rank sleeps or wakes, take the cores that
	// the other ranks spin on (16 ranks on 16 cores: 8-byte allreduce of
	// recursive doubling 26–226 µs with Go's default, 5–40 µs with one
	// thread each; docs/PERFORMANCE.md). torchrun sets OMP_NUM_THREADS=1
	// for the same reason. Set GOMAXPROCS in the environment to choose
	// another figure.
	KeepGOMAXPROCS bool

	// Bind says how Init pins each rank's threads to the host's CPUs, as
	// mpirun's --bind-to does (BRAID_BIND):
	//   - "auto" (the default, also ""): where the ranks take more than
	//     half the host's CPUs, the CPUs divided among them, a block of
	//     one or two each (the hardware threads of a core stay together);
	//     nothing is changed where a launcher or cgroup has already
	//     narrowed the list of CPUs the process may use (mpirun's binding
	//     to cores, Slurm's), the host has fewer CPUs than ranks, or at
	//     least two CPUs per rank. A launcher told not to bind (mpirun
	//     --bind-to none) leaves the list whole, which auto cannot tell
	//     from no launcher's binding: set "none" too;
	//   - "none": no binding;
	//   - "share": the CPUs divided among the ranks as auto does, whatever
	//     their number, an error if there are fewer CPUs than ranks;
	//   - "core": one CPU per rank, the local rank's place in the list of
	//     CPUs the process may use, an error if there are fewer CPUs than
	//     ranks.
	// A rank spinning on CPUs of its own keeps its cache and is not moved
	// while it waits for a peer. Unbound, 16 ranks on the 16-core node were
	// moved between CPUs and queued behind each other whenever another
	// process woke: the first size of a 16-rank benchmark stalled in 6 of
	// 16 runs (8 µs an 8-byte allreduce instead of 2.5), none of 16 bound.
	// 8 ranks bound to two CPUs each gained and lost by turns (small
	// broadcasts 1.2× slower, large allgathers 0.85× the time), so auto
	// leaves them to the scheduler (docs/PERFORMANCE.md, session 25).
	// Threads and processes a bound rank starts (a data loader's workers)
	// inherit its CPUs. Bound to fewer CPUs than GOMAXPROCS, a rank also
	// lowers GOMAXPROCS to them unless the GOMAXPROCS variable is set.
	// Communicators of NewLocal, whose ranks share one process, are never
	// bound. Two jobs on one host at once would be bound to the same CPUs:
	// run them with "none".
	Bind string

	// SharedSlot is the size of a data slot of the host's shared area
	// (the "shm" collectives, transport/shmcoll): the largest chunk a
	// collective moves through it at once. Every rank of the job must use
	// the same figure. BRAID_SHM_SLOT (a size such as 256K); 0 means
	// shmcoll.SlotFor(the ranks on the host): 1 MiB up to 8 ranks, then
	// less, so that the area stays within 32 MiB.
	SharedSlot int

	// Agg names aggregation daemons (braid agg) as "host:port,...": the
	// planner may then run large allreduces through them (the "agg"
	// algorithm, package agg), with the job's secret, on a communicator
	// that spans several hosts; without a daemon, or when one is full
	// or lost, allreduce runs on host algorithms. BRAID_AGG. Under Init,
	// rank 0's value is the job's: it reaches the other ranks through the
	// bootstrap store, and a rank that names other daemons fails Init.
	Agg string

	// Profile is the prefix of the profiler's files: each rank records its
	// calls (counts, bytes, time and its share of the run, size histograms,
	// overlap of non-blocking calls, point-to-point partners, algorithms)
	// and writes PREFIX.RANK (JSON) and PREFIX.RANK.trace.json (a Chrome
	// trace) when the communicator from Init or NewLocal closes; braid prof
	// merges the ranks' files. Package profile describes them.
	// BRAID_PROFILE. Empty profiles nothing. The directory must exist and
	// be writable; a value such as "1" or "on" is InvalidArgument.
	Profile string

	// Flight says where the flight recorder's dumps go (BRAID_FLIGHT):
	// every rank keeps its last 64 collective calls (sequence number,
	// call, bytes, algorithm, state, arrival and end, arrival pattern)
	// and dumps them when a call first fails on it or Abort is called
	// (the last 16 calls), and on SIGUSR1 (all 64). Empty: to standard
	// error; a directory: appended to DIR/braid-flight.RANK; "off": no
	// dumps, and SIGUSR1 keeps its default action.
	Flight string
}

// The values of Options.Bind.
const (
	BindAuto  = "auto"
	BindCore  = "core"
	BindShare = "share"
	BindNone  = "none"
)

// DefaultTimeout is the timeout of a call when neither the context nor
// Options nor BRAID_TIMEOUT set one.
const DefaultTimeout = 30 * time.Second

// resolve fills zero fields from the environment and defaults, and checks
// every value, from a field or a variable: a bad one is an error that
// names the field or variable, the value, and what it may be.
func (o *Options) resolve(getenv func(string) string) (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	// from fills *v from the variable env if it is empty, and returns the
	// name to quote in errors.
	from := func(field, env string, v *string) string {
		if *v != "" {
			return "Options." + field
		}
		*v = getenv(env)
		return env
	}
	src := from("Transport", "BRAID_TRANSPORT", &r.Transport)
	switch r.Transport {
	case "", "auto", "shm", "tcp", "inproc":
	default:
		return r, fmt.Errorf("%s=%q: want shm or tcp, or auto (the default: shm within a host, tcp across)", src, r.Transport)
	}
	src = from("Algo", "BRAID_ALGO", &r.Algo)
	if _, err := parseAlgo(r.Algo); err != nil {
		return r, fmt.Errorf("%s=%q: %w", src, r.Algo, err)
	}
	switch {
	case r.Timeout < 0:
		return r, fmt.Errorf("Options.Timeout %v: want a positive duration (0 takes BRAID_TIMEOUT, else %v)", r.Timeout, DefaultTimeout)
	case r.Timeout == 0:
		r.Timeout = DefaultTimeout
		if s := getenv("BRAID_TIMEOUT"); s != "" {
			d, err := parseTimeout(s)
			if err != nil {
				return r, fmt.Errorf("BRAID_TIMEOUT=%q: %v", s, err)
			}
			r.Timeout = d
		}
	}
	if r.ClockRefresh == 0 {
		r.ClockRefresh = DefaultClockRefresh
		switch s := getenv("BRAID_CLOCK_REFRESH"); strings.ToLower(s) {
		case "":
		case "off", "never", "0":
			r.ClockRefresh = -1
		default:
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				secs, err2 := strconv.ParseFloat(strings.TrimSpace(s), 64)
				d, err = time.Duration(secs*float64(time.Second)), err2
			}
			if err != nil || d <= 0 || d > 24*time.Hour {
				return r, fmt.Errorf("BRAID_CLOCK_REFRESH=%q: want a duration such as 10s or 1m, a number of seconds (at most a day), or off", s)
			}
			r.ClockRefresh = d
		}
	}
	src = from("Bind", "BRAID_BIND", &r.Bind)
	switch r.Bind {
	case "":
		r.Bind = BindAuto
	case BindAuto, BindNone, BindCore, BindShare:
	default:
		return r, fmt.Errorf("%s=%q: want auto (the default: a block of cores per rank where ranks take more than half the CPUs, unless already bound), none, share or core", src, r.Bind)
	}
	if r.SharedSlot < 0 {
		return r, fmt.Errorf("Options.SharedSlot %d: want a size in bytes (0 takes BRAID_SHM_SLOT, else a size by the ranks on the host)", r.SharedSlot)
	}
	if r.SharedSlot == 0 {
		if s := getenv("BRAID_SHM_SLOT"); s != "" {
			v, err := size.Parse(s)
			if err != nil {
				return r, fmt.Errorf("BRAID_SHM_SLOT=%q: %v", s, err)
			}
			r.SharedSlot = int(v)
		}
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
	if r.SharedSlot != 0 {
		if _, err := (shmcoll.Options{Slot: r.SharedSlot}).Check(1); err != nil {
			return r, fmt.Errorf("BRAID_SHM_SLOT / Options.SharedSlot: %v", err)
		}
	}
	src = from("Debug", "BRAID_DEBUG", &r.Debug)
	switch strings.ToLower(r.Debug) {
	case "", "none", "warn":
		r.Debug = ""
	case "info", "trace":
		r.Debug = strings.ToLower(r.Debug)
	default:
		return r, fmt.Errorf("%s=%q: want info (plans and their reasons), trace (also every call) or none", src, r.Debug)
	}
	if r.Log == nil {
		r.Log = os.Stderr
	}
	src = from("Tuning", "BRAID_TUNING", &r.Tuning)
	if r.Planner == nil {
		def, err := tuningPlanner(r.Tuning)
		switch {
		case err != nil && r.Tuning != "":
			return r, fmt.Errorf("%s: %w", src, err)
		case err != nil:
			// The table braid tune cached is not the job's to refuse,
			// but it is not ignored without a word either.
			fmt.Fprintf(r.Log, "braid: ignoring %v (run braid tune again, or set BRAID_TUNING=none)\n", err)
		}
		r.Planner = def
	}
	switch v := getenv("BRAID_MIAD"); strings.ToLower(v) {
	case "", "on", "1", "true":
	case "off", "0", "false":
		r.DisableMIAD = true
	default:
		return r, fmt.Errorf("BRAID_MIAD=%q: want off (keep pipelined algorithms' segment as planned) or on (the default: adapt it)", v)
	}
	switch v := getenv("BRAID_ARRIVAL"); strings.ToLower(v) {
	case "", "on", "1", "true":
	case "off", "0", "false":
		r.DisableArrival = true
	default:
		return r, fmt.Errorf("BRAID_ARRIVAL=%q: want off (keep the balanced choice whatever the arrival spread) or on (the default: switch to the arrival-aware reductions when the ranks arrive far apart)", v)
	}
	switch v := getenv(shm.EnvCMA); v {
	case "", "0", "1", "split":
	default:
		return r, fmt.Errorf("%s=%q: want 0 (copy through the shared segment), 1 (the default: single copy with process_vm_readv) or split (single copy, a large message split across the rank's threads)", shm.EnvCMA, v)
	}
	if v := getenv(shm.EnvEager); v != "" {
		if _, err := shm.ParseEager(v); err != nil {
			return r, err
		}
	}
	if v := getenv(par.EnvThreads); v != "" {
		if _, err := par.ParseThreads(v); err != nil {
			return r, err
		}
	}
	if v := getenv(par.EnvMinSize); v != "" {
		if _, err := par.ParseMinSize(v); err != nil {
			return r, err
		}
	}
	if v := getenv(par.EnvStreamMin); v != "" {
		if _, err := par.ParseStreamMin(v); err != nil {
			return r, err
		}
	}
	src = from("Host", "BRAID_HOST", &r.Host)
	if i := strings.IndexFunc(r.Host, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }); i >= 0 {
		return r, fmt.Errorf("%s=%q: want a host name, without blanks or control characters", src, r.Host)
	}
	if err := r.resolveSocket(getenv); err != nil {
		return r, err
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
	src = from("Agg", "BRAID_AGG", &r.Agg)
	if r.Agg != "" {
		if _, err := parseAgg(r.Agg); err != nil {
			return r, fmt.Errorf("%s=%q: %v", src, r.Agg, err)
		}
	}
	src = from("Profile", "BRAID_PROFILE", &r.Profile)
	if r.Profile != "" {
		if err := checkProfile(r.Profile); err != nil {
			return r, fmt.Errorf("%s=%q: %v", src, r.Profile, err)
		}
	}
	src = from("Flight", "BRAID_FLIGHT", &r.Flight)
	if err := checkFlight(r.Flight); err != nil {
		return r, fmt.Errorf("%s=%q: %v", src, r.Flight, err)
	}
	r.Devices = slices.Clone(r.Devices)
	return r, nil
}

// Validate returns the error that NewLocal and Init would return for o
// and the environment's BRAID_* knobs, an *Error of kind InvalidArgument
// naming the field or variable, without creating anything: a launcher can
// check a job's configuration before it starts the ranks. (Devices is
// checked against the job's size, which only NewLocal and Init know.)
func (o *Options) Validate() error {
	var c Options
	if o != nil {
		c = *o
	}
	c.Log = io.Discard // a cached table's warning is for the ranks to give
	if _, err := c.resolve(os.Getenv); err != nil {
		return &Error{Kind: InvalidArgument, Rank: -1, Call: "validate", Peer: -1, Err: err}
	}
	return nil
}

// resolveSocket fills and checks SocketIfname and AdvertiseAddr.
func (r *Options) resolveSocket(getenv func(string) string) error {
	ifKnob, addrKnob := "Options.SocketIfname", "Options.AdvertiseAddr"
	if r.SocketIfname == "" {
		r.SocketIfname, ifKnob = getenv("BRAID_SOCKET_IFNAME"), "BRAID_SOCKET_IFNAME"
	}
	if r.AdvertiseAddr == "" {
		r.AdvertiseAddr, addrKnob = getenv("BRAID_ADVERTISE_ADDR"), "BRAID_ADVERTISE_ADDR"
	}
	if r.SocketIfname != "" {
		if _, err := tcp.ParseIfaceSpec(r.SocketIfname); err != nil {
			return fmt.Errorf("%s=%q: %v", ifKnob, r.SocketIfname, err)
		}
	}
	if a := r.AdvertiseAddr; a != "" && net.ParseIP(a) == nil && strings.ContainsAny(a, ":/ \t[]") {
		return fmt.Errorf("%s=%q: want an IP address or a host name, without port", addrKnob, a)
	}
	return nil
}

// parseTimeout reads BRAID_TIMEOUT: a Go duration ("30s", "2m", "1h30m")
// or a number of seconds ("90", "2.5"), positive and finite. There is no
// value for "no timeout": a call that never returns is what the timeout
// exists to prevent; a long job gives a long one ("24h").
func parseTimeout(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, err2 := strconv.ParseFloat(s, 64)
		if err2 != nil {
			return 0, fmt.Errorf("want a duration such as 30s, 5m or 90 (seconds)")
		}
		if !(secs*float64(time.Second) < math.MaxInt64) || math.IsNaN(secs) {
			return 0, fmt.Errorf("want a duration such as 30s, 5m or 90 (seconds), at most %v", time.Duration(math.MaxInt64))
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("want a positive duration such as 30s, 5m or 90 (seconds); there is no \"no timeout\", give a long one (24h) instead")
	}
	return d, nil
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
// table cannot be read, or has a line that is not well formed or names an
// algorithm or parameter Braid does not have (the error says FILE:LINE);
// Init and NewLocal then plan without the cached table (saying so on
// Options.Log), but fail on a table named explicitly.
func TuningPlanner(tuning string) (plan.Default, error) {
	src := ""
	if tuning == "" {
		if tuning = os.Getenv("BRAID_TUNING"); tuning != "" {
			src = "BRAID_TUNING: "
		}
	}
	def, err := tuningPlanner(tuning)
	if err != nil {
		return def, fmt.Errorf("%s%w", src, err)
	}
	return def, nil
}

// tuningPlanner is TuningPlanner for a name already taken from the
// environment: "" is the cached table.
func tuningPlanner(tuning string) (plan.Default, error) {
	switch tuning {
	case "none":
		return plan.Default{}, nil
	case "":
		path := DefaultTuningFile()
		if path == "" {
			return plan.Default{}, nil
		}
		t, err := loadTable(path)
		if errors.Is(err, fs.ErrNotExist) {
			return plan.Default{}, nil
		}
		if err != nil {
			return plan.Default{}, fmt.Errorf("the cached %w", err)
		}
		return plan.Default{Table: t}, nil
	}
	t, err := loadTable(tuning)
	if err != nil {
		return plan.Default{}, err
	}
	return plan.Default{Table: t}, nil
}

// loadTable reads the tuning table in path and checks its choices
// against the algorithms.
func loadTable(path string) (*plan.Table, error) {
	t, err := plan.LoadTable(path)
	if err == nil {
		err = choice.CheckTable(t)
	}
	if err != nil {
		return t, err
	}
	switch m := t.Machine; {
	case m.HasGPUs() && !m.HasCores():
		err = fmt.Errorf("tuning table %s records GPUs (%v) and no cores: it is a device table from braid tune --device cuda, for BRAID_GPU_TUNING", path, m)
	case m.HasCores():
		if here := ThisMachine(); m.Cores != here.Cores || m.NUMA != here.NUMA {
			err = fmt.Errorf("tuning table %s was measured on a machine with %v, this one has %v: run braid tune here", path, plan.Machine{Cores: m.Cores, NUMA: m.NUMA}, here)
		}
	}
	return t, err
}

// ThisMachine returns what a tuning table records of this machine: its
// CPUs as hostCPUs counts them for one rank (the cgroup's set where a
// launcher bound this process to a share of it, so that a table tuned
// under braid run still matches ranks that mpirun --bind-to core or srun
// bound to one CPU each), and its NUMA nodes.
func ThisMachine() plan.Machine {
	nodes, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	return plan.Machine{Cores: hostCPUs(1), NUMA: max(1, len(nodes))}
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

// parseAlgo reads Options.Algo (choice.ParseAlgo), checking every name
// and parameter.
func parseAlgo(s string) (algoForce, error) {
	bare, perCol, err := choice.ParseAlgo(s)
	return algoForce{any: bare, perCol: perCol}, err
}
