package plan

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/internal/textfile"
	"github.com/braid-ccl/braid/sched"
)

// A tuning table maps (collective, rank count, host count, size range) to
// an algorithm and its parameters, and may carry the machine's measured
// link figures. braid tune writes one; BRAID_TUNING names the file a job
// reads. The format is text, one entry per line:
//
//	# comments start with #
//	machine cores=16 numa=1
//	link intra alpha=1.1us beta=8.2GB/s
//	link inter alpha=25us beta=1.2GB/s
//	gamma 10.5GB/s
//	memory 52GB/s
//	core 6.5GB/s
//	overhead 0.5us
//	allreduce ranks=2 hosts=1 size=0-16K recdouble
//	allreduce ranks=2 hosts=1 size=16K-2M ring
//	allreduce ranks=* hosts=* size=2M- segring:seg=256K
//	bcast ranks=4 hosts=1 size=64K-1M knomial:k=4
//
// size=A-B is the half-open range [A, B) of sizes as braid bench reports
// them (the whole vector; see Size), B empty for no bound. ranks and hosts
// are counts or * for any. When several entries match a call, the one with
// exact rank and host counts wins over wildcards, then the first in the
// file. The choice is an algorithm name with optional parameters, as
// BRAID_ALGO takes them (see ParseChoice). Two entries for the same
// collective and counts whose sizes overlap, or a link class, gamma,
// memory, core or overhead given twice, are errors; so is any malformed line
// (ParseTable's errors say FILE:LINE). This package reads the syntax only: whether the algorithms
// exist, and take the parameters given, is checked where the algorithms
// are known (Init and NewLocal check every table they load).
//
// memory is the rate at which a host's ranks together copy and reduce
// (cost.Model.Memory), core the rate of one thread (cost.Model.Core),
// overhead the time a rank spends on each message
// of a step beyond the first (cost.Model.Overhead, LogP's o). A figure
// the file does not give is the built-in model's (cost.Default).
//
// The machine line says where the table was measured: a host table
// (braid tune) records the logical cores and NUMA nodes, "machine cores=16
// numa=1"; a device table (braid tune --device cuda), whose entries name
// fused kernels and schedules on device buffers, records the GPUs the
// driver shows and their model, spaces written as _, "machine gpus=4
// gpu=NVIDIA_H200". Init and NewLocal refuse a host table measured on
// another machine, and a device communicator a device table measured on
// other GPUs (a cached one is ignored with a warning), since its choices
// and link figures belong to that machine.
type Table struct {
	Source  string      // where it was read from, for log messages
	Model   *cost.Model // measured link figures; nil if the file has none
	Machine Machine     // zero if the file has no machine line
	Entries []Entry
}

// Machine is what a tuning table records of the machine it was measured
// on: its cores (a host table) or its GPUs (a device table), or both.
type Machine struct {
	Cores int // logical CPUs; 0 where the table records none
	NUMA  int // NUMA nodes; 0 where the table records no cores
	GPUs  int // GPUs the driver shows; 0 where the table records none
	// GPU is the GPUs' model as the driver names it, spaces written as _
	// (GPUName), "NVIDIA_H200"; "" where GPUs is 0.
	GPU string
}

// GPUName writes a GPU's name as a Machine records it: spaces and tabs
// as _, so that the machine line stays one field.
func GPUName(name string) string {
	return strings.Join(strings.Fields(name), "_")
}

// HasCores reports whether m records a host's cores (a host table's
// machine line).
func (m Machine) HasCores() bool { return m.Cores > 0 }

// HasGPUs reports whether m records GPUs (a device table's machine line).
func (m Machine) HasGPUs() bool { return m.GPUs > 0 }

// String describes m for messages: "16 cores and 1 NUMA node", "4 GPUs
// NVIDIA_H200", or both.
func (m Machine) String() string {
	var parts []string
	if m.HasCores() {
		parts = append(parts, fmt.Sprintf("%d cores and %d NUMA node%s", m.Cores, m.NUMA, map[bool]string{true: "s"}[m.NUMA != 1]))
	}
	if m.HasGPUs() {
		parts = append(parts, fmt.Sprintf("%d GPU%s %s", m.GPUs, map[bool]string{true: "s"}[m.GPUs != 1], m.GPU))
	}
	if len(parts) == 0 {
		return "nothing recorded"
	}
	return strings.Join(parts, ", ")
}

// parseMachine reads a machine line's fields after "machine".
func parseMachine(f []string) (Machine, error) {
	const want = `want "machine cores=N numa=N" (a host table) or "machine gpus=N gpu=NAME" (a device table), or both`
	var m Machine
	seen := map[string]bool{}
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || seen[k] {
			return m, fmt.Errorf("%s, got %q", want, strings.Join(f, " "))
		}
		seen[k] = true
		if k == "gpu" {
			if v == "" {
				return m, fmt.Errorf("machine gpu=: want the GPUs' model, spaces written as _")
			}
			m.GPU = v
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return m, fmt.Errorf("machine %s: want a count ≥ 1", kv)
		}
		switch k {
		case "cores":
			m.Cores = n
		case "numa":
			m.NUMA = n
		case "gpus":
			m.GPUs = n
		default:
			return m, fmt.Errorf("unknown machine field %q (want cores= and numa=, or gpus= and gpu=)", k)
		}
	}
	if (m.Cores > 0) != (m.NUMA > 0) || (m.GPUs > 0) != (m.GPU != "") || (m.Cores == 0 && m.GPUs == 0) {
		return m, fmt.Errorf("%s, got %q", want, strings.Join(f, " "))
	}
	return m, nil
}

// line writes m as a table's machine line, without its newline.
func (m Machine) line() string {
	s := "machine"
	if m.HasCores() {
		s += fmt.Sprintf(" cores=%d numa=%d", m.Cores, m.NUMA)
	}
	if m.HasGPUs() {
		s += fmt.Sprintf(" gpus=%d gpu=%s", m.GPUs, m.GPU)
	}
	return s
}

// Entry is one line of a table.
type Entry struct {
	Coll     sched.Collective
	Ranks    int   // 0: any
	Hosts    int   // 0: any
	Min, Max int64 // sizes [Min, Max) in bytes; Max 0: no bound
	Choice   Choice
	Line     int // line in the file, 0 if built in code
}

// Matches reports whether e applies to the call.
func (e *Entry) Matches(c sched.Collective, ranks, hosts int, size int64) bool {
	return e.Coll == c && (e.Ranks == 0 || e.Ranks == ranks) && (e.Hosts == 0 || e.Hosts == hosts) &&
		size >= e.Min && (e.Max == 0 || size < e.Max)
}

// overlaps reports whether e and o are for the same collective, rank and
// host counts (wildcards equal only wildcards) and share a size.
func (e *Entry) overlaps(o *Entry) bool {
	return e.Coll == o.Coll && e.Ranks == o.Ranks && e.Hosts == o.Hosts &&
		(o.Max == 0 || e.Min < o.Max) && (e.Max == 0 || o.Min < e.Max)
}

// sizeRange writes e's sizes as a table line does: "16K-2M", "2M-".
func (e *Entry) sizeRange() string {
	hi := ""
	if e.Max > 0 {
		hi = FormatSize(e.Max)
	}
	return FormatSize(e.Min) + "-" + hi
}

// String writes e as a table line.
func (e *Entry) String() string {
	count := func(v int) string {
		if v == 0 {
			return "*"
		}
		return strconv.Itoa(v)
	}
	return fmt.Sprintf("%v ranks=%s hosts=%s size=%s %s", e.Coll, count(e.Ranks), count(e.Hosts), e.sizeRange(), e.Choice)
}

// Lookup returns the entry for the call, or nil. A nil table has none.
func (t *Table) Lookup(c sched.Collective, ranks, hosts int, size int64) *Entry {
	if t == nil {
		return nil
	}
	var best *Entry
	score := -1
	for i := range t.Entries {
		e := &t.Entries[i]
		if !e.Matches(c, ranks, hosts, size) {
			continue
		}
		s := 0
		if e.Ranks != 0 {
			s += 2
		}
		if e.Hosts != 0 {
			s++
		}
		if s > score {
			best, score = e, s
		}
	}
	return best
}

// LoadTable reads the table in file path.
func LoadTable(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tuning table: %w", err)
	}
	return ParseTable(bytes.NewReader(b), path)
}

// ParseTable reads a table; name says where it came from in errors.
func ParseTable(r io.Reader, name string) (*Table, error) {
	t := &Table{Source: name}
	var model cost.Model
	haveLink := [len(model.Links)]bool{}
	have := map[string]bool{} // the figures given: gamma, memory, core, overhead
	any := false
	err := textfile.Records(r, "tuning table", name, func(line int, f []string) error {
		switch f[0] {
		case "machine":
			if t.Machine != (Machine{}) {
				return fmt.Errorf("machine given twice")
			}
			m, err := parseMachine(f[1:])
			if err != nil {
				return err
			}
			t.Machine = m
		case "link":
			if len(f) != 4 {
				return fmt.Errorf("want \"link CLASS alpha=T beta=B\", got %q", strings.Join(f, " "))
			}
			c, err := cost.ParseClass(f[1])
			if err != nil {
				return err
			}
			var l cost.Link
			for _, kv := range f[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "alpha":
					l.Alpha, err = parseSeconds(v)
				case "beta":
					l.Beta, err = parseRate(v)
				default:
					err = fmt.Errorf("unknown field %q (want alpha= and beta=)", k)
				}
				if err != nil {
					return err
				}
			}
			if !l.Valid() {
				return fmt.Errorf("link %v: alpha=%g s beta=%g B/s is not a valid link", c, l.Alpha, l.Beta)
			}
			if haveLink[c] {
				return fmt.Errorf("link %v given twice", c)
			}
			model.Links[c], haveLink[c], any = l, true, true
		case "gamma", "memory", "core":
			rate, err := parseFigure(f, have, "RATE", rateHelp[f[0]], parseRate)
			if err != nil {
				return err
			}
			switch f[0] {
			case "gamma":
				model.Gamma = 1 / rate
			case "memory":
				model.Memory = rate
			default:
				model.Core = rate
			}
			any = true
		case "overhead":
			o, err := parseFigure(f, have, "TIME", "a rank's time per message beyond the first of a step, e.g. 0.5us", parseSeconds)
			if err != nil {
				return err
			}
			model.Overhead, any = o, true
		default:
			e, err := parseEntry(f)
			if err != nil {
				return err
			}
			e.Line = line
			for i := range t.Entries {
				if o := &t.Entries[i]; o.overlaps(&e) {
					return fmt.Errorf("sizes %s overlap line %d's %s for the same collective, ranks and hosts (the first would always win)",
						e.sizeRange(), o.Line, o.sizeRange())
				}
			}
			t.Entries = append(t.Entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if any {
		// Figures the file lacks come from the built-in model, and so do
		// the ones the format does not carry (the transport's eager limit,
		// a core's cache, whether ranks copy their own messages).
		def := cost.Default()
		for c, ok := range haveLink {
			if !ok {
				model.Links[c] = def.Links[c]
			}
		}
		if !have["gamma"] {
			model.Gamma = def.Gamma
		}
		if !have["memory"] {
			model.Memory = def.Memory
		}
		if !have["core"] {
			model.Core = def.Core
		}
		if !have["overhead"] {
			model.Overhead = def.Overhead
		}
		model.Eager, model.Cache, model.SelfCopy = def.Eager, def.Cache, def.SelfCopy
		t.Model = &model
	}
	return t, nil
}

func parseEntry(f []string) (Entry, error) {
	var e Entry
	c, err := sched.ParseCollective(f[0])
	if err != nil {
		return e, err
	}
	e.Coll = c
	if len(f) != 5 {
		return e, fmt.Errorf("want \"COLLECTIVE ranks=N hosts=N size=A-B ALGO[:PARAMS]\", got %d fields", len(f))
	}
	count := func(kv, key string) (int, error) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k != key {
			return 0, fmt.Errorf("want %s=N or %s=*, got %q", key, key, kv)
		}
		if v == "*" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s=%q: want a positive count or *", key, v)
		}
		return n, nil
	}
	if e.Ranks, err = count(f[1], "ranks"); err != nil {
		return e, err
	}
	if e.Hosts, err = count(f[2], "hosts"); err != nil {
		return e, err
	}
	k, v, ok := strings.Cut(f[3], "=")
	if !ok || k != "size" {
		return e, fmt.Errorf("want size=A-B, got %q", f[3])
	}
	lo, hi, ok := strings.Cut(v, "-")
	if !ok {
		return e, fmt.Errorf("size=%q: want A-B or A- (a range)", v)
	}
	if e.Min, err = ParseSize(lo); err != nil {
		return e, err
	}
	if hi != "" {
		if e.Max, err = ParseSize(hi); err != nil {
			return e, err
		}
		if e.Max <= e.Min {
			return e, fmt.Errorf("size=%q: empty range", v)
		}
	}
	if e.Choice, err = ParseChoice(f[4]); err != nil {
		return e, err
	}
	return e, nil
}

// WriteTo writes t in the file format.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	if t.Machine != (Machine{}) {
		b.WriteString(t.Machine.line() + "\n")
	}
	if t.Model != nil {
		for _, c := range cost.Classes() {
			l := t.Model.Links[c]
			fmt.Fprintf(&b, "link %v alpha=%s beta=%s\n", c, formatSecondsExact(l.Alpha), formatRate(l.Beta))
		}
		if t.Model.Gamma > 0 {
			fmt.Fprintf(&b, "gamma %s\n", formatRate(1/t.Model.Gamma))
		}
		if t.Model.Memory > 0 {
			fmt.Fprintf(&b, "memory %s\n", formatRate(t.Model.Memory))
		}
		if t.Model.Core > 0 {
			fmt.Fprintf(&b, "core %s\n", formatRate(t.Model.Core))
		}
		fmt.Fprintf(&b, "overhead %s\n", formatSecondsExact(t.Model.Overhead))
	}
	for i := range t.Entries {
		b.WriteString(t.Entries[i].String())
		b.WriteByte('\n')
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// rateHelp says what each rate line of a table gives, for its errors.
var rateHelp = map[string]string{
	"gamma":  "bytes reduced per second, e.g. 10GB/s",
	"memory": "bytes a host's ranks copy per second together, e.g. 50GB/s",
	"core":   "bytes one thread copies per second, e.g. 6.5GB/s",
}

// parseFigure reads a line "NAME VALUE" of a table's model with parse,
// once: what is the kind of VALUE for the error of a malformed line, help
// what the figure means.
func parseFigure(f []string, have map[string]bool, what, help string, parse func(string) (float64, error)) (float64, error) {
	if len(f) != 2 {
		return 0, fmt.Errorf("want \"%s %s\" (%s)", f[0], what, help)
	}
	if have[f[0]] {
		return 0, fmt.Errorf("%s given twice", f[0])
	}
	v, err := parse(f[1])
	if err != nil {
		return 0, err
	}
	have[f[0]] = true
	return v, nil
}

// parseSeconds reads a duration with a unit: 1.5us, 800ns, 2ms, 1s.
func parseSeconds(s string) (float64, error) {
	for _, u := range []struct {
		suf  string
		mult float64
	}{{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}} {
		if v, ok := strings.CutSuffix(s, u.suf); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
				return 0, fmt.Errorf("time %q: want a non-negative number and a unit (ns, us, ms, s)", s)
			}
			return x * u.mult, nil
		}
	}
	return 0, fmt.Errorf("time %q: want a unit (ns, us, ms, s)", s)
}

// parseRate reads a rate in bytes per second: 8.2GB/s, 900MB/s (decimal
// units, as DESIGN.md's figures are).
func parseRate(s string) (float64, error) {
	for _, u := range []struct {
		suf  string
		mult float64
	}{{"GB/s", 1e9}, {"MB/s", 1e6}, {"KB/s", 1e3}, {"B/s", 1}} {
		if v, ok := strings.CutSuffix(s, u.suf); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x <= 0 || math.IsInf(x, 0) || math.IsNaN(x) {
				return 0, fmt.Errorf("rate %q: want a positive number and a unit (GB/s, MB/s, KB/s, B/s)", s)
			}
			return x * u.mult, nil
		}
	}
	return 0, fmt.Errorf("rate %q: want a unit (GB/s, MB/s, KB/s, B/s)", s)
}

func formatSecondsExact(s float64) string { return strconv.FormatFloat(s*1e6, 'g', 4, 64) + "us" }
func formatRate(r float64) string         { return strconv.FormatFloat(r/1e9, 'g', 4, 64) + "GB/s" }

// Choice is an algorithm with optional parameters, written
// "name[:seg=SIZE][:k=K]": seg is the segment (chunk) of pipelined
// algorithms in bytes, k the radix of k-nomial trees. "segring:seg=256K",
// "knomial:k=4", "ring".
type Choice struct {
	Algo    string
	Segment int64 // bytes; 0: the algorithm's or the model's choice
	Radix   int   // 0: the algorithm's or the model's choice
}

// ParseChoice reads a Choice.
func ParseChoice(s string) (Choice, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	c := Choice{Algo: parts[0]}
	if c.Algo == "" || strings.ContainsAny(c.Algo, "= ,") {
		return c, fmt.Errorf("algorithm %q: want a name, then optional :seg=SIZE or :k=K", s)
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return c, fmt.Errorf("algorithm %q: parameter %q is not key=value", s, kv)
		}
		switch k {
		case "seg", "segment", "chunk":
			n, err := ParseSize(v)
			if err != nil || n < 1 {
				return c, fmt.Errorf("algorithm %q: seg=%q: want a positive size", s, v)
			}
			c.Segment = n
		case "k", "radix":
			n, err := strconv.Atoi(v)
			if err != nil || n < 2 || n > 1<<16 {
				return c, fmt.Errorf("algorithm %q: k=%q: want an integer ≥ 2", s, v)
			}
			c.Radix = n
		default:
			return c, fmt.Errorf("algorithm %q: unknown parameter %q (want seg or k)", s, k)
		}
	}
	return c, nil
}

// String writes c as ParseChoice reads it.
func (c Choice) String() string {
	s := c.Algo
	if c.Segment > 0 {
		s += ":seg=" + FormatSize(c.Segment)
	}
	if c.Radix > 0 {
		s += ":k=" + strconv.Itoa(c.Radix)
	}
	return s
}

// Apply returns p with c's parameters set: the segment in whole elements
// of es bytes (at least one), the radix as is. Parameters c leaves at 0
// keep p's.
func (c Choice) Apply(p sched.Params, es int) sched.Params {
	if c.Segment > 0 {
		p.Segment = int(max(1, c.Segment/int64(max(es, 1))))
	}
	if c.Radix > 0 {
		p.Radix = c.Radix
	}
	return p
}

// Sort orders entries by collective, ranks, hosts and size.
func (t *Table) Sort() {
	slices.SortStableFunc(t.Entries, func(a, b Entry) int {
		switch {
		case a.Coll != b.Coll:
			return int(a.Coll) - int(b.Coll)
		case a.Ranks != b.Ranks:
			return a.Ranks - b.Ranks
		case a.Hosts != b.Hosts:
			return a.Hosts - b.Hosts
		case a.Min != b.Min:
			if a.Min < b.Min {
				return -1
			}
			return 1
		}
		return 0
	})
}
