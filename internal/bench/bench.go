package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/monoclock"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Config is one benchmark run.
type Config struct {
	Coll     sched.Collective
	MinSize  int64
	MaxSize  int64
	SizeList []int64 // if not empty, the sizes to measure instead of the powers of two from MinSize to MaxSize
	Iters    int     // timed iterations per size; 0 chooses by time
	Warmup   int     // warm-up iterations per size; 0 chooses by size (-1: none)
	Check    bool
	DType    braid.DType
	Op       braid.Op
	Root     int
	InPlace  bool
	// Registered takes the buffers from braid.Alloc: registered memory,
	// which the host's shared area reads in place.
	Registered bool
	Imbalance  float64 // MIF: random compute before each call, up to Imbalance × α (see Run)
	// Alpha is what α is under Imbalance: AlphaP2P (the default, "") or
	// AlphaCollective.
	Alpha  string
	Seed   uint64        // seeds the random compute, with the rank; 0 means 1
	Budget time.Duration // target time of one size's timed loop when Iters is 0 (default 250 ms)

	// Algos lists the runs to time side by side at each size: algorithm
	// names, passed to Forcer unchanged, or Auto for the planner's choice.
	// A run is left out at the sizes its algorithm cannot run. Empty means
	// one run, Auto, of c as it is configured (Options.Algo included).
	Algos []string
	// Forcer is the planner c's job was created with (Options.Planner);
	// it is required when Algos is not empty.
	Forcer *Forcer

	// Progress, if set, is called on rank 0 before each measurement.
	Progress func(Progress)
}

// Progress says how far Run has got.
type Progress struct {
	Done, Total int    // measurements finished and planned (one per size and run; two with Imbalance)
	Size        int64  // the size being measured, in bytes
	Algo        string // the run being measured
	Imbalanced  bool   // whether this measurement injects imbalance
}

// Row is one size's result for one run.
type Row struct {
	Coll  string  `json:"collective"`
	Algo  string  `json:"algo,omitempty"` // the run: an algorithm name, or auto
	Ran   string  `json:"ran,omitempty"`  // the algorithm that ran: Algo, or the planner's choice for auto
	Bytes int64   `json:"bytes"`
	Count int     `json:"count"`
	Iters int     `json:"iters"`
	AvgUs float64 `json:"avg_us"`
	MinUs float64 `json:"min_us"`
	MaxUs float64 `json:"max_us"`
	AlgBW float64 `json:"algbw_gbs"`
	BusBW float64 `json:"busbw_gbs"`
	// MIF is Config.Imbalance. When it is set, the latencies above are
	// those of the calls with injected compute (the compute itself not
	// counted), and BalancedUs is the run's average latency without it,
	// measured first.
	MIF        float64 `json:"mif,omitempty"`
	BalancedUs float64 `json:"balanced_us,omitempty"`
	// AlphaUs is the α the injected compute was drawn with (up to
	// MIF × AlphaUs before each call; see Run), the same for every run
	// of a size.
	AlphaUs float64 `json:"alpha_us,omitempty"`
	// WaitUs and TailUs split AvgUs under imbalance, on the job's common
	// clock (braid's arrival clock: Comm.ClockOffset): a rank's mean time
	// from its arrival to the last rank's arrival at the same call (the
	// wait, which no allreduce can shorten: every rank needs the last
	// one's input), and from that last arrival to its return (the tail:
	// what the algorithm does once every rank is there; negative for a
	// rank that left before the last arrival, as a reduce's non-roots
	// may), averaged over the ranks.
	WaitUs  float64 `json:"wait_us,omitempty"`
	TailUs  float64 `json:"tail_us,omitempty"`
	Correct Verdict `json:"correct"` // JSON true, false or null (not checked)
	Err     string  `json:"error,omitempty"`
}

// Verdict says whether a row's results were checked and found right. The
// table and CSV formats write it as is; JSON as true, false or null.
type Verdict string

// The verdicts.
const (
	Right     Verdict = "yes"
	Wrong     Verdict = "no"
	Unchecked Verdict = "-"
)

// MarshalJSON writes v as true (Right), false (Wrong) or null.
func (v Verdict) MarshalJSON() ([]byte, error) {
	switch v {
	case Right:
		return []byte("true"), nil
	case Wrong:
		return []byte("false"), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Verdict) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*v = Right
	case "false":
		*v = Wrong
	case "null":
		*v = Unchecked
	default:
		return fmt.Errorf("bench: correct %s: want true, false or null", b)
	}
	return nil
}

// BusFactor is nccl-tests' bus bandwidth factor for coll on n ranks.
func BusFactor(coll sched.Collective, n int) float64 {
	switch coll {
	case sched.Allreduce:
		return 2 * float64(n-1) / float64(n)
	case sched.Allgather, sched.ReduceScatter, sched.Alltoall, sched.Gather, sched.Scatter:
		return float64(n-1) / float64(n)
	}
	return 1
}

// Sizes returns the sizes from min to max in powers of two.
func Sizes(min, max int64) []int64 {
	var out []int64
	if min < 1 {
		min = 1
	}
	for s := min; s <= max; s *= 2 {
		out = append(out, s)
		if s > max/2 {
			break
		}
	}
	return out
}

// sizes returns the sizes cfg asks for.
func sizes(cfg Config) []int64 {
	if cfg.Coll == sched.Barrier {
		return []int64{0}
	}
	if len(cfg.SizeList) > 0 {
		return cfg.SizeList
	}
	return Sizes(cfg.MinSize, cfg.MaxSize)
}

// CheckSizes returns an error unless some size of cfg can be measured on
// n ranks: a whole number of elements (per rank, for the collectives whose
// size is the whole vector of n blocks). Run returns the same error.
func CheckSizes(cfg Config, n int) error {
	for _, size := range sizes(cfg) {
		if _, ok := params(cfg, n, size); ok {
			return nil
		}
	}
	return noSizes(cfg, n)
}

// noSizes says why cfg has no size to measure on n ranks.
func noSizes(cfg Config, n int) error {
	d := cfg.DType
	if d == 0 {
		d = braid.Float32
	}
	what := fmt.Sprintf("from %s to %s (doubling from --min-size)", FormatSize(cfg.MinSize), FormatSize(cfg.MaxSize))
	fixMax, fixMin := "a --max-size of", "a --min-size that is"
	if len(cfg.SizeList) > 0 {
		what = fmt.Sprint(cfg.SizeList)
		fixMax, fixMin = "--sizes of", "--sizes that are"
	}
	switch cfg.Coll {
	case sched.Allgather, sched.ReduceScatter, sched.Gather, sched.Scatter, sched.Alltoall:
		return fmt.Errorf("bench: no size %s holds one %v element (%d B) per rank on %d ranks: give %s %s or more",
			what, d, d.Size(), n, fixMax, FormatSize(int64(d.Size()*n)))
	}
	return fmt.Errorf("bench: no size %s is a whole number of %v elements (%d B): give %s a multiple of %d",
		what, d, d.Size(), fixMin, d.Size())
}

// params returns the collective's params for a row of size bytes, or ok=false
// when the size does not split into whole elements per rank.
func params(cfg Config, n int, bytes int64) (sched.Params, bool) {
	es := int64(cfg.DType.Size())
	p := sched.Params{Coll: cfg.Coll, NRanks: n, Root: cfg.Root}
	switch cfg.Coll {
	case sched.Allgather, sched.ReduceScatter, sched.Gather, sched.Scatter, sched.Alltoall:
		// As nccl-tests: the vector is rounded down to whole elements per
		// rank (the row reports the bytes actually moved).
		p.Count = int(bytes / es / int64(n))
		if p.Count == 0 {
			return p, false
		}
	case sched.Barrier:
		p.Count = 0
	default:
		if bytes%es != 0 {
			return p, false
		}
		p.Count = int(bytes / es)
	}
	return p, true
}

// rowBytes is the size a row reports: the whole vector actually moved.
func rowBytes(cfg Config, p sched.Params, size int64) int64 {
	switch cfg.Coll {
	case sched.Allgather, sched.ReduceScatter, sched.Gather, sched.Scatter, sched.Alltoall:
		return int64(p.Count) * int64(p.NRanks) * int64(cfg.DType.Size())
	}
	return size
}

// buffers holds one row's memory.
type buffers struct {
	in, out []byte
	send    any // what the call is given
	recv    any
	held    [][]byte // registered memory to free
}

// alloc returns a row's buffers: Go memory, or with cfg.Registered
// memory from braid.Alloc in the same layout.
func alloc(c *braid.Comm, cfg Config, p sched.Params, rank int) (*buffers, error) {
	b := &buffers{}
	b.in, b.out = check.Buffers(p, rank, cfg.DType.Size(), cfg.InPlace)
	if cfg.Registered {
		if err := b.register(c); err != nil {
			b.free(c)
			return nil, err
		}
	} else {
		// Fresh Go memory of a large row comes straight from the kernel,
		// untouched: until written, every page of it reads as the one
		// shared zero page, always in cache. An input that no call
		// writes (out of place, without --check) then costs no memory
		// traffic, unlike a caller's real data (a PyTorch tensor): on
		// this VM, 2 ranks, --algo shm, allreduces of 4 and 64 MiB took
		// 0.70-0.78 of their time with --check, which writes the inputs
		// (issue 20). Writing the buffers once gives every page its own
		// memory.
		clear(b.in)
		clear(b.out)
	}
	b.send = braid.Raw{Bytes: b.in, Type: cfg.DType}
	b.recv = braid.Raw{Bytes: b.out, Type: cfg.DType}
	return b, nil
}

// register moves the buffers into registered memory: an in-place pair
// stays one buffer and a part of it.
func (b *buffers) register(c *braid.Comm) error {
	get := func(g []byte) ([]byte, error) {
		if len(g) == 0 {
			return g, nil
		}
		r, err := braid.Alloc[uint8](c, len(g))
		if err == nil {
			b.held = append(b.held, r)
		}
		return r, err
	}
	addr := func(s []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }
	in, out := b.in, b.out
	if len(in) > 0 && len(out) > 0 && addr(in) < addr(out)+uintptr(len(out)) && addr(out) < addr(in)+uintptr(len(in)) {
		big := out
		if len(in) > len(out) {
			big = in
		}
		r, err := get(big)
		if err != nil {
			return err
		}
		i, o := int(addr(in)-addr(big)), int(addr(out)-addr(big))
		b.in, b.out = r[i:i+len(in)], r[o:o+len(out)]
		return nil
	}
	var err error
	if b.in, err = get(in); err != nil {
		return err
	}
	b.out, err = get(out)
	return err
}

// free releases registered memory.
func (b *buffers) free(c *braid.Comm) error {
	var first error
	for _, r := range b.held {
		if err := c.Free(r); err != nil && first == nil {
			first = err
		}
	}
	b.held = nil
	return first
}

// call runs the collective once.
func call(ctx context.Context, c *braid.Comm, cfg Config, b *buffers) error {
	return Call(ctx, c, cfg.Coll, b.send, b.recv, cfg.Op, cfg.Root)
}

// Call runs one collective on c by its sched name; send is ignored by bcast
// and barrier, recv by barrier, op by collectives that do not reduce, root
// by those without one.
func Call(ctx context.Context, c *braid.Comm, coll sched.Collective, send, recv any, op braid.Op, root int) error {
	switch coll {
	case sched.Allreduce:
		return c.Allreduce(ctx, send, recv, op)
	case sched.Reduce:
		return c.Reduce(ctx, send, recv, op, root)
	case sched.Bcast:
		return c.Bcast(ctx, recv, root)
	case sched.Allgather:
		return c.Allgather(ctx, send, recv)
	case sched.ReduceScatter:
		return c.ReduceScatter(ctx, send, recv, op)
	case sched.Gather:
		return c.Gather(ctx, send, recv, root)
	case sched.Scatter:
		return c.Scatter(ctx, send, recv, root)
	case sched.Alltoall:
		return c.Alltoall(ctx, send, recv)
	case sched.Barrier:
		return c.Barrier(ctx)
	}
	return fmt.Errorf("unknown collective %v", coll)
}

// fill writes the check pattern into the input (for bcast, into the root's
// buffer) and poisons the output.
func fill(cfg Config, p sched.Params, rank int, b *buffers, salt int) {
	for i := range b.out {
		b.out[i] = 0xA5
	}
	if cfg.Coll == sched.Bcast {
		if rank == p.Root {
			check.Fill(cfg.DType, cfg.Op, b.out, rank, 0, salt)
		}
		return
	}
	check.Fill(cfg.DType, cfg.Op, b.in, rank, 0, salt)
}

// run is one of Config.Algos with the communicator it runs on.
type run struct {
	name string
	comm *braid.Comm
}

// Run benchmarks cfg on c and returns the rows (complete on every rank),
// by size and, at each size, in the order of cfg.Algos.
//
// At each size each run is checked if asked, warmed up, and timed in a loop
// of back-to-back calls: a rank's latency is its loop's time over the
// iterations. With cfg.Imbalance (the maximum imbalance factor, MIF) set,
// the runs are then timed again as "Efficient Process Arrival Pattern
// Aware Collective Communication for Deep Learning" (EuroMPI/USA 2022)
// §6.1 does: before each call every rank computes for a random time drawn
// uniformly from [0, MIF × α], so that every algorithm meets the same
// arrival pattern. α is the paper's (§2.2: "the time it takes to
// communicate a message (equal to the size of the message in the
// collective)"): the one-way time of one point-to-point message of the
// row's size between ranks 0 and 1, half the median round trip of a
// ping-pong that rank 0 then broadcasts (see messageTime), measured once
// per size before the imbalanced runs. With cfg.Alpha AlphaCollective α
// is instead the smallest balanced average latency among the runs at that
// size (the collective's whole time, far more than one message's).
// Each call is then timed alone, the compute left out, as OSU's
// benchmarks time MPI_Allreduce: a rank's latency includes its wait for
// the ranks that arrive after it.
func Run(ctx context.Context, c *braid.Comm, cfg Config) ([]Row, error) {
	if cfg.Budget == 0 {
		cfg.Budget = 250 * time.Millisecond
	}
	if cfg.Coll.Reduces() && cfg.Op == 0 {
		cfg.Op = braid.Sum
	}
	if cfg.DType == 0 {
		cfg.DType = braid.Float32
	}
	if cfg.Imbalance < 0 || math.IsNaN(cfg.Imbalance) || math.IsInf(cfg.Imbalance, 0) {
		return nil, fmt.Errorf("bench: imbalance factor %v: want a finite number ≥ 0", cfg.Imbalance)
	}
	if err := CheckAlpha(cfg.Alpha); err != nil {
		return nil, err
	}
	if cfg.Imbalance > 0 && cfg.Alpha != AlphaCollective && c.Size() < 2 {
		return nil, errAlphaOneRank
	}
	runs, err := setup(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Forcer != nil {
		defer cfg.Forcer.Set("")
	}
	n, rank := c.Size(), c.Rank()
	type point struct {
		p    sched.Params
		size int64
	}
	var points []point
	for _, size := range sizes(cfg) {
		if p, ok := params(cfg, n, size); ok {
			points = append(points, point{p, size})
		}
	}
	if len(points) == 0 {
		return nil, noSizes(cfg, n)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = 1
	}
	m := &meter{ctx: ctx, ctrl: c, cfg: cfg, rank: rank, n: n,
		rng: rand.New(rand.NewPCG(seed, uint64(rank)))}
	m.progress.Total = len(points) * len(runs)
	if cfg.Imbalance > 0 {
		m.progress.Total *= 2
	}
	if cfg.Iters == 0 && len(runs) > 0 {
		if err := m.settle(runs[0], points[0].p); err != nil {
			return nil, err
		}
	}
	var rows []Row
	for _, pt := range points {
		at, err := m.point(runs, pt.p, rowBytes(cfg, pt.p, pt.size))
		rows = append(rows, at...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// point measures every run at one size.
func (m *meter) point(runs []run, p sched.Params, size int64) (at []Row, err error) {
	cfg, c := m.cfg, m.ctrl
	b, err := alloc(c, cfg, p, m.rank)
	if err != nil {
		return nil, err
	}
	defer func() {
		if ferr := b.free(c); err == nil {
			err = ferr
		}
	}()
	var on []run
	for _, r := range runs {
		m.report(size, r.name, false)
		ran, ok, err := m.plan(r, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			m.skip()
			continue
		}
		row, err := m.balanced(r, p, b, size)
		if err != nil {
			return nil, err
		}
		// The plan may have adapted its parameters while it ran.
		if a, err := m.explain(r, p); err == nil {
			ran = a
		}
		row.Algo, row.Ran = r.name, ran
		at = append(at, row)
		on = append(on, r)
	}
	if cfg.Imbalance > 0 && len(at) > 0 {
		var alpha float64
		if cfg.Alpha == AlphaCollective {
			alpha = at[0].AvgUs
			for _, row := range at {
				alpha = math.Min(alpha, row.AvgUs)
			}
		} else if alpha, err = m.messageTime(size); err != nil {
			return nil, err
		}
		for i, r := range on {
			m.report(size, r.name, true)
			if cfg.Forcer != nil {
				cfg.Forcer.Set(r.name) // checked by setup
			}
			if err := m.imbalanced(r, b, &at[i], alpha); err != nil {
				return nil, err
			}
		}
	}
	return at, nil
}

// The definitions of α under Config.Imbalance (Config.Alpha, braid bench
// --imbalance-alpha).
const (
	// AlphaP2P, the default, is the paper's α: the one-way time of one
	// point-to-point message of the row's size between two ranks.
	AlphaP2P = "p2p"
	// AlphaCollective is the size's smallest balanced latency among the
	// runs: the collective's whole time (braid bench's α before
	// 2026-11-27).
	AlphaCollective = "collective"
)

// CheckAlpha returns an error unless a names a definition of α ("" is
// AlphaP2P).
func CheckAlpha(a string) error {
	switch a {
	case "", AlphaP2P, AlphaCollective:
		return nil
	}
	return fmt.Errorf("bench: α %q: want %s (one message between two ranks) or %s (the balanced collective)", a, AlphaP2P, AlphaCollective)
}

var errAlphaOneRank = fmt.Errorf("bench: imbalance with α of %s (one message between two ranks) needs 2 ranks or more (or α %s)", AlphaP2P, AlphaCollective)

// The ping-pong that measures α: pingPongWarm round trips not timed, then
// pingPongTrips timed one by one.
const (
	pingPongWarm  = 3
	pingPongTrips = 11
	pingPongTag   = 0x61 // 'a'; the control communicator carries no other point-to-point message
)

// messageTime returns α at a row of size bytes, µs, the same on every
// rank: ranks 0 and 1 bounce one message of size bytes (one byte at
// least) back and forth, and α is half the median of rank 0's timed round
// trips, which rank 0 broadcasts. The other ranks wait in the broadcast.
func (m *meter) messageTime(size int64) (float64, error) {
	ctx, c := m.ctx, m.ctrl
	alpha := []float64{0}
	if m.rank <= 1 {
		buf := make([]byte, max(size, 1))
		trips := make([]float64, pingPongTrips)
		for i := -pingPongWarm; i < pingPongTrips; i++ {
			t0 := time.Now()
			var err error
			if m.rank == 0 {
				if err = c.Send(ctx, buf, 1, pingPongTag); err == nil {
					err = c.Recv(ctx, buf, 1, pingPongTag)
				}
			} else if err = c.Recv(ctx, buf, 0, pingPongTag); err == nil {
				err = c.Send(ctx, buf, 0, pingPongTag)
			}
			if err != nil {
				return 0, fmt.Errorf("bench: ping-pong for α at %s: %w", FormatSize(size), err)
			}
			if i >= 0 {
				trips[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
			}
		}
		slices.Sort(trips)
		alpha[0] = trips[len(trips)/2] / 2
	}
	if err := c.Bcast(ctx, alpha, 0); err != nil {
		return 0, err
	}
	return alpha[0], nil
}

// setup returns the runs of cfg: one communicator per algorithm, split
// from c so that each has its own plans.
func setup(ctx context.Context, c *braid.Comm, cfg Config) ([]run, error) {
	if len(cfg.Algos) == 0 {
		if cfg.Forcer != nil {
			cfg.Forcer.Set("")
		}
		return []run{{Auto, c}}, nil
	}
	if cfg.Forcer == nil {
		return nil, errNoForcer
	}
	if err := CheckAlgos(cfg.Coll, cfg.Algos); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var runs []run
	for _, name := range cfg.Algos {
		sub, err := c.Split(ctx, 0, c.Rank())
		if err != nil {
			return nil, err
		}
		runs = append(runs, run{name, sub})
	}
	return runs, nil
}

// meter takes the measurements of one Run.
type meter struct {
	ctx      context.Context
	ctrl     *braid.Comm // for agreeing on counts and gathering times
	cfg      Config
	rank, n  int
	rng      *rand.Rand
	progress Progress
}

func (m *meter) report(size int64, algo string, imbalanced bool) {
	if m.cfg.Progress == nil || m.rank != 0 {
		return
	}
	m.progress.Size, m.progress.Algo, m.progress.Imbalanced = size, algo, imbalanced
	m.cfg.Progress(m.progress)
	m.progress.Done++
}

// skip accounts for the measurements of a run left out at a size.
func (m *meter) skip() {
	if m.cfg.Imbalance > 0 {
		m.progress.Done++
	}
}

// plan makes r's plan for p (setting the Forcer's choice first) and
// returns the algorithm it runs; ok is false when r names an algorithm
// that cannot run p. Every rank comes to the same answer without talking.
func (m *meter) plan(r run, p sched.Params) (ran string, ok bool, err error) {
	if m.cfg.Forcer != nil {
		if err := m.cfg.Forcer.Set(r.name); err != nil {
			return "", false, err
		}
	}
	a, err := m.explain(r, p)
	if r.name == Auto {
		return a, err == nil, err
	}
	want, _ := plan.ParseChoice(r.name)
	got, _ := plan.ParseChoice(a)
	if err != nil || got.Algo != want.Algo {
		return a, false, nil
	}
	return a, true, nil
}

// explain returns the algorithm, with its parameters, that r's
// communicator runs for p.
func (m *meter) explain(r run, p sched.Params) (string, error) {
	d := m.cfg.DType
	if p.Coll == sched.Barrier {
		d = braid.Uint8 // what the call plans with
	}
	a, _, err := r.comm.Explain(p.Coll.String(), p.Count, d, p.Root)
	return a, err
}

// settleTime is how long Run calls the first size before it times
// anything: on the 16-core node the first ~50 ms of a job ran 5–20 times
// slower than the rest (8-byte allreduce of 16 ranks: 29–52 µs in the
// first size's loop, 3–5 µs at the next), whatever the algorithm, as idle
// cores woke up.
const settleTime = 200 * time.Millisecond

// settle calls r at the first size until settleTime has passed on the
// slowest rank (the ranks agree after every batch, so that all make the
// same calls).
func (m *meter) settle(r run, p sched.Params) (err error) {
	if m.cfg.Coll == sched.Barrier {
		p.Count = 0
	}
	b, err := alloc(m.ctrl, m.cfg, p, m.rank)
	if err != nil {
		return err
	}
	defer func() {
		if ferr := b.free(m.ctrl); err == nil {
			err = ferr
		}
	}()
	if m.cfg.Forcer != nil {
		if err := m.cfg.Forcer.Set(r.name); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for {
		for range 20 {
			if err := call(m.ctx, r.comm, m.cfg, b); err != nil {
				return err
			}
		}
		t := []float64{time.Since(t0).Seconds()}
		if err := m.ctrl.Allreduce(m.ctx, t, t, braid.Max); err != nil {
			return err
		}
		if t[0] >= settleTime.Seconds() {
			return nil
		}
	}
}

// balanced checks (if asked) and times r at one size without imbalance.
func (m *meter) balanced(r run, p sched.Params, b *buffers, size int64) (Row, error) {
	ctx, cfg := m.ctx, m.cfg
	row := Row{Coll: cfg.Coll.String(), Bytes: size, Count: p.Count, Correct: Unchecked}
	if cfg.Check && cfg.Coll != sched.Barrier {
		fill(cfg, p, m.rank, b, int(size))
		if err := call(ctx, r.comm, cfg, b); err != nil {
			return row, err
		}
		ok := check.Verify(p, cfg.DType, cfg.Op, m.rank, b.out[:p.OutLen(m.rank)*cfg.DType.Size()], int(size)) == nil
		// Every rank learns whether every rank was right.
		flag := []int32{0}
		if !ok {
			flag[0] = 1
		}
		if err := m.ctrl.Allreduce(ctx, flag, flag, braid.Max); err != nil {
			return row, err
		}
		row.Correct = Right
		if flag[0] != 0 {
			row.Correct = Wrong
		}
	}
	// As Go's testing does before every benchmark: garbage from the last
	// size is collected now, not inside this size's timed loop.
	runtime.GC()
	warm := cfg.Warmup
	if warm == 0 {
		switch {
		case size <= 64<<10:
			warm = 50
		case size <= 4<<20:
			warm = 5
		default:
			warm = 2
		}
	}
	// The count is calibrated on the warm-up's second half: the first
	// calls of a run pay for its plans and first touches, and a count
	// calibrated on them made the first size's loop short, so that one
	// stall of the host weighed on it as on no other size. On the 16-core
	// node (session 18) the first size of four of eight 16-rank runs
	// timed 2,114 to 9,619 calls where the next size timed 20,000, and
	// two of those took 1.5 and 2.7 times as long a call as the next.
	t0, half := time.Now(), warm/2
	for i := 0; i < warm; i++ {
		if i == half {
			t0 = time.Now()
		}
		if err := call(ctx, r.comm, cfg, b); err != nil {
			return row, err
		}
	}
	iters := cfg.Iters
	if iters == 0 {
		// All ranks agree on the count: the slowest warm-up decides.
		t := []float64{float64(time.Since(t0).Nanoseconds()) / float64(max(warm-half, 1))}
		if err := m.ctrl.Allreduce(ctx, t, t, braid.Max); err != nil {
			return row, err
		}
		iters = int(float64(cfg.Budget.Nanoseconds()) / math.Max(t[0], 1))
		iters = min(max(iters, 5), 20000)
	}
	if err := m.ctrl.Barrier(ctx); err != nil {
		return row, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := call(ctx, r.comm, cfg, b); err != nil {
			return row, err
		}
	}
	mean := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters)
	row.Iters = iters
	return row, m.spread(&row, mean)
}

// imbalanced times r again with random compute before each call, up to
// MIF × alpha µs (alpha: see Run), and replaces row's latencies with those of the calls.
func (m *meter) imbalanced(r run, b *buffers, row *Row, alpha float64) error {
	ctx, cfg := m.ctx, m.cfg
	bound := cfg.Imbalance * alpha * 1e3 // ns
	iters := cfg.Iters
	if iters == 0 {
		// Every rank computes the same count from the same agreed figures.
		perCall := math.Max(row.MaxUs*1e3+bound/2, 1)
		iters = min(max(int(float64(cfg.Budget.Nanoseconds())/perCall), 5), 20000)
	}
	row.MIF = cfg.Imbalance
	row.BalancedUs = row.AvgUs
	row.AlphaUs = alpha
	if err := m.ctrl.Barrier(ctx); err != nil {
		return err
	}
	var inCalls time.Duration
	off, _ := m.ctrl.ClockOffset()
	clk := newCommonClock(off)
	starts, ends := make([]int64, iters), make([]int64, iters)
	for i := 0; i < iters; i++ {
		compute(time.Duration(m.rng.Float64() * bound))
		t0 := time.Now()
		if err := call(ctx, r.comm, cfg, b); err != nil {
			return err
		}
		t1 := time.Now()
		inCalls += t1.Sub(t0)
		starts[i], ends[i] = clk.at(t0), clk.at(t1)
	}
	row.Iters = iters
	if err := m.split(row, starts, ends); err != nil {
		return err
	}
	return m.spread(row, float64(inCalls.Nanoseconds())/1e3/float64(iters))
}

// commonClock maps this process's clock readings to the job's common
// clock (braid's arrival clock): this host's CLOCK_MONOTONIC plus its
// offset from rank 0's host, read once, so that a call's timing costs no
// more than its two time.Now.
type commonClock struct {
	base   time.Time
	baseNS int64
}

func newCommonClock(off time.Duration) commonClock {
	base, ns, _ := monoclock.Base()
	return commonClock{base: base, baseNS: ns + int64(off)}
}

// at returns t on the common clock, ns.
func (k commonClock) at(t time.Time) int64 { return k.baseNS + int64(t.Sub(k.base)) }

// split fills row's WaitUs and TailUs from this rank's arrival and
// return times of each call (starts, ends; ns on the common clock): every
// rank learns each call's last arrival, and the ranks' means are
// averaged.
func (m *meter) split(row *Row, starts, ends []int64) error {
	last := append([]int64(nil), starts...)
	if err := m.ctrl.Allreduce(m.ctx, last, last, braid.Max); err != nil {
		return err
	}
	var wait, tail float64
	for i := range starts {
		wait += float64(last[i] - starts[i])
		tail += float64(ends[i] - last[i])
	}
	k := float64(max(len(starts), 1)) * 1e3
	sum := []float64{wait / k, tail / k}
	if err := m.ctrl.Allreduce(m.ctx, sum, sum, braid.Sum); err != nil {
		return err
	}
	row.WaitUs, row.TailUs = sum[0]/float64(m.n), sum[1]/float64(m.n)
	return nil
}

// spread fills row's latencies from every rank's mean (µs) and its
// bandwidths from the slowest rank.
func (m *meter) spread(row *Row, mean float64) error {
	sum := []float64{mean}
	if err := m.ctrl.Allreduce(m.ctx, sum, sum, braid.Sum); err != nil {
		return err
	}
	mm := []float64{mean, -mean}
	if err := m.ctrl.Allreduce(m.ctx, mm, mm, braid.Max); err != nil {
		return err
	}
	row.AvgUs = sum[0] / float64(m.n)
	row.MaxUs = mm[0]
	row.MinUs = -mm[1]
	row.AlgBW, row.BusBW = 0, 0
	if row.Bytes > 0 && row.MaxUs > 0 {
		row.AlgBW = float64(row.Bytes) / (row.MaxUs * 1e3)
		row.BusBW = row.AlgBW * BusFactor(m.cfg.Coll, m.n)
	}
	return nil
}

// compute stands in for the application's compute before a call; a test
// replaces it to see the delays.
var compute = busy

// busy spins for d, standing in for compute.
func busy(d time.Duration) {
	end := time.Now().Add(d)
	x := 0.0
	for time.Now().Before(end) {
		for i := 0; i < 100; i++ {
			x += math.Sqrt(float64(i))
		}
	}
	sink.Store(math.Float64bits(x))
}

// sink keeps busy's loop from being compiled away; ranks that are
// goroutines of one process write it at once.
var sink atomic.Uint64

// Fastest merges two sweeps of the same configuration: for each size and
// run it keeps the row with the lower average latency (an erroneous row
// loses). Rows of b that a has no counterpart for are appended.
func Fastest(a, b []Row) []Row {
	type key struct {
		bytes int64
		algo  string
	}
	idx := map[key]int{}
	for i, r := range a {
		idx[key{r.Bytes, r.Algo}] = i
	}
	out := append([]Row(nil), a...)
	for _, r := range b {
		i, ok := idx[key{r.Bytes, r.Algo}]
		switch {
		case !ok:
			out = append(out, r)
		case out[i].Err != "" && r.Err == "", r.Err == "" && r.Iters > 0 && r.AvgUs < out[i].AvgUs:
			out[i] = r
		}
	}
	return out
}
