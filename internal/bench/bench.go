package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/sched"
)

// Config is one benchmark run.
type Config struct {
	Coll      sched.Collective
	MinSize   int64
	MaxSize   int64
	Iters     int // timed iterations per size; 0 chooses by time
	Warmup    int // warm-up iterations per size; 0 chooses by size (-1: none)
	Check     bool
	DType     braid.DType
	Op        braid.Op
	Root      int
	InPlace   bool
	Imbalance float64       // MIF: random compute before each call, up to Imbalance × the balanced latency
	Budget    time.Duration // target time of one size's timed loop when Iters is 0 (default 250 ms)
	Progress  func(size int64)
}

// Row is one size's result.
type Row struct {
	Coll    string  `json:"collective"`
	Algo    string  `json:"algo,omitempty"`
	Bytes   int64   `json:"bytes"`
	Count   int     `json:"count"`
	Iters   int     `json:"iters"`
	AvgUs   float64 `json:"avg_us"`
	MinUs   float64 `json:"min_us"`
	MaxUs   float64 `json:"max_us"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	Correct string  `json:"correct"` // "yes", "no" or "-" (not checked)
	Err     string  `json:"error,omitempty"`
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
}

func alloc(cfg Config, p sched.Params, rank int) *buffers {
	b := &buffers{}
	b.in, b.out = check.Buffers(p, rank, cfg.DType.Size(), cfg.InPlace)
	b.send = braid.Raw{Bytes: b.in, Type: cfg.DType}
	b.recv = braid.Raw{Bytes: b.out, Type: cfg.DType}
	return b
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

// Run benchmarks cfg on c and returns the rows (complete on every rank).
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
	n, rank := c.Size(), c.Rank()
	sizes := Sizes(cfg.MinSize, cfg.MaxSize)
	if cfg.Coll == sched.Barrier {
		sizes = []int64{0}
	}
	var rows []Row
	rng := uint64(rank)*0x9e3779b97f4a7c15 + 1
	for _, size := range sizes {
		p, ok := params(cfg, n, size)
		if !ok {
			continue
		}
		if cfg.Progress != nil && rank == 0 {
			cfg.Progress(size)
		}
		b := alloc(cfg, p, rank)
		size = rowBytes(cfg, p, size)
		row := Row{Coll: cfg.Coll.String(), Bytes: size, Count: p.Count, Correct: "-"}
		if cfg.Check && cfg.Coll != sched.Barrier {
			fill(cfg, p, rank, b, int(size))
			if err := call(ctx, c, cfg, b); err != nil {
				return rows, err
			}
			ok := check.Verify(p, cfg.DType, cfg.Op, rank, b.out[:p.OutLen(rank)*cfg.DType.Size()], int(size)) == nil
			// Every rank learns whether every rank was right.
			flag := []int32{0}
			if !ok {
				flag[0] = 1
			}
			if err := c.Allreduce(ctx, flag, flag, braid.Max); err != nil {
				return rows, err
			}
			row.Correct = "yes"
			if flag[0] != 0 {
				row.Correct = "no"
			}
		}
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
		t0 := time.Now()
		for i := 0; i < warm; i++ {
			if err := call(ctx, c, cfg, b); err != nil {
				return rows, err
			}
		}
		iters := cfg.Iters
		per := float64(time.Since(t0).Nanoseconds()) / float64(max(warm, 1))
		if iters == 0 {
			// All ranks agree on the count: the slowest warm-up decides.
			t := []float64{per}
			if err := c.Allreduce(ctx, t, t, braid.Max); err != nil {
				return rows, err
			}
			iters = int(float64(cfg.Budget.Nanoseconds()) / math.Max(t[0], 1))
			iters = min(max(iters, 5), 20000)
		}
		if err := c.Barrier(ctx); err != nil {
			return rows, err
		}
		var spin time.Duration
		start := time.Now()
		for i := 0; i < iters; i++ {
			if cfg.Imbalance > 0 {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				d := time.Duration(float64(rng%1000) / 1000 * cfg.Imbalance * per)
				spin += d
				busy(d)
			}
			if err := call(ctx, c, cfg, b); err != nil {
				return rows, err
			}
		}
		el := time.Since(start) - spin
		mean := float64(el.Nanoseconds()) / 1e3 / float64(iters)
		stats := []float64{mean, -mean, mean}
		if err := c.Allreduce(ctx, stats[:1], stats[:1], braid.Sum); err != nil {
			return rows, err
		}
		mm := []float64{mean, -mean}
		if err := c.Allreduce(ctx, mm, mm, braid.Max); err != nil {
			return rows, err
		}
		row.Iters = iters
		row.AvgUs = stats[0] / float64(n)
		row.MaxUs = mm[0]
		row.MinUs = -mm[1]
		if size > 0 && row.MaxUs > 0 {
			row.AlgBW = float64(size) / (row.MaxUs * 1e3)
			row.BusBW = row.AlgBW * BusFactor(cfg.Coll, n)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// busy spins for d, standing in for compute.
func busy(d time.Duration) {
	end := time.Now().Add(d)
	x := 0.0
	for time.Now().Before(end) {
		for i := 0; i < 100; i++ {
			x += math.Sqrt(float64(i))
		}
	}
	sink = x
}

//lint:ignore U1000 written so that the compiler keeps busy's loop
var sink float64
