// Command mix is a test program for the chaos and soak campaigns
// (internal/testprog/chaos, scripts/chaos.sh): every rank runs a random
// but agreed sequence of collectives (collective, dtype, op, count, root,
// in place or not, world or a split communicator) and verifies every
// result against its definition (internal/check). With MIX_PLAN=random
// a planner that picks among the candidates by a hash of the call
// replaces the cost model, so that every algorithm a call can run,
// the host's shared area ("shm") included, is exercised.
//
//	MIX_SEED      seed of the sequence (every rank must get the same; default 1)
//	MIX_CALLS     calls to make (default 100; 0 with MIX_DURATION: until then)
//	MIX_DURATION  run until this much time has passed (a Go duration), rank 0 deciding
//	MIX_MAXBYTES  the largest buffer of a call (default 256K)
//	MIX_SPLIT     1: also run calls on communicators split from the world
//	MIX_PLAN      random: choose algorithms at random among the candidates
//	MIX_OUT       directory for rank-R.start (written as the rank starts),
//	              rank-R.pid (written once Init returns) and
//	              rank-R.json (the outcome, written before exiting)
//	MIX_COLLS     comma-separated collectives to draw from (default all)
//
// A rank exits 0 when every call succeeded and every result was right, 1
// when a result was wrong, 3 when a call failed, and 143 on SIGTERM (braid
// run stopping the ranks left after one failed); its outcome file says
// which, with the error, its kind and peer, its calls, and its RSS and
// open file descriptors at start and end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// Outcome is what a rank writes to MIX_OUT/rank-R.json.
type Outcome struct {
	Rank      int            `json:"rank"`
	PID       int            `json:"pid"`
	Calls     int            `json:"calls"`    // collectives completed
	Wrong     int            `json:"wrong"`    // of them, with a wrong result
	Splits    int            `json:"splits"`   // communicators split
	FirstBad  string         `json:"firstBad"` // the first wrong result
	Err       string         `json:"err"`      // the failed call's error
	Kind      string         `json:"kind"`     // its braid.ErrorKind
	Peer      int            `json:"peer"`     // its peer (world rank when on the world), or -1
	OnWorld   bool           `json:"onWorld"`  // whether it failed on the world communicator
	RSSStart  int64          `json:"rssStart"` // bytes, after the first calls
	RSSEnd    int64          `json:"rssEnd"`
	FDsStart  int            `json:"fdsStart"`
	FDsEnd    int            `json:"fdsEnd"`
	Plans     map[string]int `json:"plans"` // plans made per algorithm (MIX_PLAN=random)
	ByColl    map[string]int `json:"byColl"`
	ElapsedMS int64          `json:"elapsedMs"`
}

var colls = []sched.Collective{sched.Allreduce, sched.Reduce, sched.Bcast, sched.Allgather,
	sched.ReduceScatter, sched.Gather, sched.Scatter, sched.Alltoall, sched.Barrier}

var dtypes = []braid.DType{braid.Float32, braid.Float64, braid.Float16, braid.BFloat16,
	braid.Int8, braid.Uint8, braid.Int32, braid.Uint32, braid.Int64, braid.Uint64}

func envInt(k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mix: %s=%q: want an integer\n", k, v)
		os.Exit(2)
	}
	return n
}

// randomPlanner picks a candidate by a hash of the call and the seed, so
// that every rank picks the same.
type randomPlanner struct {
	seed  uint64
	mu    sync.Mutex
	plans map[string]int
}

func (p *randomPlanner) Plan(r plan.Request, cand []plan.Candidate) plan.Decision {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%v/%d/%d/%d/%d", p.seed, r.Params.Coll, r.Params.NRanks, r.Params.Count, r.Params.Root, r.ElemSize)
	for _, c := range cand {
		h.Write([]byte(c.Name))
	}
	c := cand[h.Sum64()%uint64(len(cand))]
	p.mu.Lock()
	p.plans[c.Name]++
	p.mu.Unlock()
	return plan.Decision{Algo: c.Name, Params: c.Params, Reason: "MIX_PLAN=random"}
}

func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

func fds() int {
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(e)
}

func main() {
	ctx := context.Background()
	start := time.Now()
	seed := uint64(envInt("MIX_SEED", 1))
	calls := envInt("MIX_CALLS", 100)
	maxBytes := envInt("MIX_MAXBYTES", 256<<10)
	split := os.Getenv("MIX_SPLIT") == "1"
	var dur time.Duration
	if s := os.Getenv("MIX_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "mix: MIX_DURATION=%q: want a positive duration\n", s)
			os.Exit(2)
		}
		dur = d
	}
	pool := colls
	if s := os.Getenv("MIX_COLLS"); s != "" {
		pool = nil
		for _, name := range strings.Split(s, ",") {
			c, err := sched.ParseCollective(name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "mix: MIX_COLLS: %v\n", err)
				os.Exit(2)
			}
			pool = append(pool, c)
		}
	}
	opts := &braid.Options{}
	rp := &randomPlanner{seed: seed, plans: map[string]int{}}
	if os.Getenv("MIX_PLAN") == "random" {
		opts.Planner = rp
	}
	out := os.Getenv("MIX_OUT")
	if r, err := strconv.Atoi(os.Getenv("BRAID_RANK")); err == nil && out != "" {
		os.WriteFile(filepath.Join(out, fmt.Sprintf("rank-%d.start", r)), nil, 0o644)
		// braid run stops with SIGTERM the ranks left after one failed,
		// Init's included: say so in the outcome.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		go func() {
			<-sigs
			exitOnce.Do(func() {
				write(out, Outcome{Rank: r, PID: os.Getpid(), Err: "terminated by SIGTERM", Kind: "terminated", Peer: -1})
				os.Exit(143)
			})
		}()
	}
	w, err := braid.Init(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mix: init:", err)
		o := Outcome{Rank: -1, PID: os.Getpid(), Err: err.Error(), Kind: braid.KindOf(err).String(), Peer: -1, OnWorld: true}
		var be *braid.Error
		if errors.As(err, &be) {
			o.Rank, o.Peer = be.Rank, be.Peer
		}
		exitOnce.Do(func() {
			if out != "" && o.Rank >= 0 {
				write(out, o)
			}
			os.Exit(3)
		})
	}
	me := w.Rank()
	if out != "" {
		f := filepath.Join(out, fmt.Sprintf("rank-%d.pid", me))
		os.WriteFile(f+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.Rename(f+".tmp", f)
	}
	o := Outcome{Rank: me, PID: os.Getpid(), Peer: -1, Plans: rp.plans, ByColl: map[string]int{}}
	m := &mixer{ctx: ctx, world: w, seed: seed, maxBytes: maxBytes, split: split, pool: pool, o: &o}
	deadline := time.Now().Add(dur)
	code := 0
	for i := 0; ; i++ {
		if dur > 0 {
			// Rank 0 decides when to stop, so that every rank stops at the
			// same call.
			stop := []int32{0}
			if i%64 == 0 {
				if me == 0 && time.Now().After(deadline) {
					stop[0] = 1
				}
				if err := w.Bcast(ctx, stop, 0); err != nil {
					m.fail(err, w)
					code = 3
					break
				}
				if stop[0] == 1 {
					break
				}
			}
		} else if i >= calls {
			break
		}
		if i == 200 || (i == calls/2 && o.RSSStart == 0 && dur == 0) {
			o.RSSStart, o.FDsStart = rss(), fds()
		}
		if err := m.step(i); err != nil {
			code = 3
			break
		}
	}
	if code == 0 && o.Wrong > 0 {
		code = 1
	}
	if m.sub != nil {
		m.sub.Close()
	}
	if err := w.Close(); err != nil && code == 0 {
		m.fail(err, w)
		code = 3
	}
	o.RSSEnd, o.FDsEnd = rss(), fds()
	if o.RSSStart == 0 {
		o.RSSStart, o.FDsStart = o.RSSEnd, o.FDsEnd
	}
	o.ElapsedMS = time.Since(start).Milliseconds()
	exitOnce.Do(func() {
		if out != "" {
			write(out, o)
		}
		finish(me, code, o)
	})
}

// exitOnce makes the outcome and the exit happen once, from main or from
// the SIGTERM handler.
var exitOnce sync.Once

func finish(me, code int, o Outcome) {
	if code != 0 {
		fmt.Fprintf(os.Stderr, "rank %d: %s%s\n", me, o.Err, o.FirstBad)
	}
	os.Exit(code)
}

func write(dir string, o Outcome) {
	b, _ := json.Marshal(o)
	f := filepath.Join(dir, fmt.Sprintf("rank-%d.json", o.Rank))
	os.WriteFile(f+".tmp", b, 0o644)
	os.Rename(f+".tmp", f)
}

type mixer struct {
	ctx      context.Context
	world    *braid.Comm
	sub      *braid.Comm // a communicator split from the world, or nil
	seed     uint64
	maxBytes int
	split    bool
	pool     []sched.Collective
	o        *Outcome
}

func (m *mixer) fail(err error, c *braid.Comm) {
	if m.o.Err != "" {
		return
	}
	m.o.Err = err.Error()
	m.o.Kind = braid.KindOf(err).String()
	m.o.OnWorld = c == m.world
	var be *braid.Error
	if errors.As(err, &be) {
		m.o.Peer = be.Peer
	}
}

// step runs call i. Every draw from r is made by every rank alike.
func (m *mixer) step(i int) error {
	r := rand.New(rand.NewPCG(m.seed, uint64(i)))
	w := m.world
	c := w
	if m.split {
		// Every 100 calls: a new split of the world, by colors and keys
		// drawn for every rank.
		if i%100 == 0 {
			if m.sub != nil {
				if err := m.sub.Close(); err != nil {
					m.fail(err, m.sub)
					return err
				}
				m.sub = nil
			}
			colors := make([]int, w.Size())
			keys := make([]int, w.Size())
			for k := range colors {
				colors[k] = r.IntN(3) - 1 // braid.Undefined, 0 or 1
				keys[k] = r.IntN(10)
			}
			sub, err := w.Split(m.ctx, colors[w.Rank()], keys[w.Rank()])
			if err != nil {
				m.fail(err, w)
				return err
			}
			m.sub = sub
			m.o.Splits++
		}
		// A third of the calls run on the split: the ranks outside it
		// (Undefined) skip them.
		if r.IntN(3) == 0 {
			if m.sub == nil {
				return nil
			}
			c = m.sub
		}
	}
	coll := m.pool[r.IntN(len(m.pool))]
	d := dtypes[r.IntN(len(dtypes))]
	var op braid.Op
	for coll.Reduces() {
		op = braid.Op(1 + r.IntN(8))
		if (op == braid.Avg && !d.IsFloat()) || (op >= braid.BAnd && d.IsFloat()) {
			continue
		}
		break
	}
	n := c.Size()
	es := d.Size()
	// Log-uniform byte counts up to maxBytes, a tenth of them 0.
	maxCount := m.maxBytes / es
	switch coll {
	case sched.Allgather, sched.Gather, sched.ReduceScatter, sched.Scatter, sched.Alltoall:
		maxCount /= n
	}
	count := 0
	if r.IntN(10) != 0 && maxCount > 0 {
		count = int(float64(maxCount)*math.Exp2(-r.Float64()*20)) + r.IntN(3)
		count = min(count, maxCount)
	}
	p := sched.Params{Coll: coll, NRanks: n, Count: count, Root: r.IntN(n)}
	inPlace := r.IntN(2) == 0
	salt := int(r.Uint32() >> 1)
	rank := c.Rank()
	in, out := check.Buffers(p, rank, es, inPlace)
	for k := range out {
		out[k] = 0xA5
	}
	if coll == sched.Bcast {
		if rank == p.Root {
			check.Fill(d, op, out, rank, 0, salt)
		}
	} else {
		check.Fill(d, op, in, rank, 0, salt)
	}
	err := call(m.ctx, c, coll, braid.Raw{Bytes: in, Type: d}, braid.Raw{Bytes: out, Type: d}, op, p.Root)
	if err != nil {
		m.fail(fmt.Errorf("call %d (%v %v %v count %d root %d on %d ranks): %w", i, coll, d, op, count, p.Root, n, err), c)
		var be *braid.Error
		if errors.As(err, &be) {
			m.o.Peer = be.Peer
			if c != w && be.Peer >= 0 {
				m.o.Peer = -1 // a rank of the split, not of the world
			}
		}
		m.o.Kind = braid.KindOf(err).String()
		return err
	}
	m.o.Calls++
	m.o.ByColl[coll.String()]++
	if coll != sched.Barrier {
		if err := check.Verify(p, d, op, rank, out[:p.OutLen(rank)*es], salt); err != nil {
			m.o.Wrong++
			if m.o.FirstBad == "" {
				m.o.FirstBad = fmt.Sprintf("call %d (in place %v): %v", i, inPlace, err)
			}
		}
	}
	return nil
}

func call(ctx context.Context, c *braid.Comm, coll sched.Collective, send, recv braid.Raw, op braid.Op, root int) error {
	s, rv := send, recv
	switch coll {
	case sched.Allreduce:
		return c.Allreduce(ctx, s, rv, op)
	case sched.Reduce:
		return c.Reduce(ctx, s, rv, op, root)
	case sched.Bcast:
		return c.Bcast(ctx, rv, root)
	case sched.Allgather:
		return c.Allgather(ctx, s, rv)
	case sched.ReduceScatter:
		return c.ReduceScatter(ctx, s, rv, op)
	case sched.Gather:
		return c.Gather(ctx, s, rv, root)
	case sched.Scatter:
		return c.Scatter(ctx, s, rv, root)
	case sched.Alltoall:
		return c.Alltoall(ctx, s, rv)
	case sched.Barrier:
		return c.Barrier(ctx)
	}
	return fmt.Errorf("unknown collective %v", coll)
}
