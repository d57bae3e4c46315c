package braid_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/profile"
)

// TestProfileCounts makes a known number of calls of known sizes on four
// goroutine ranks with Options.Profile and checks every rank's counts and
// size bins exactly, the partners of its point-to-point calls, the merged
// report's histogram, and that each trace is Chrome trace JSON with one
// complete event per call carrying Kineto's argument names.
func TestProfileCounts(t *testing.T) {
	const n = 4
	path := filepath.Join(t.TempDir(), "prof")
	comms, err := braid.NewLocal(n, &braid.Options{Profile: path, Tuning: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = profiledCalls(ctx, c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Goroutine ranks close without a barrier: only once every rank is
	// done.
	for r, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatalf("rank %d: Close: %v", r, err)
		}
	}

	type want struct {
		calls, bytes uint64
		hist         []profile.Bin // bins and calls (times not compared)
		async        bool
	}
	wants := map[string]want{
		"allreduce":  {8, 5*8 + 3*4000, []profile.Bin{{Upper: 8, Calls: 5}, {Upper: 4096, Calls: 3}}, false},
		"bcast":      {2, 2 << 20, []profile.Bin{{Upper: 1 << 20, Calls: 2}}, false},
		"allgather":  {1, 4 * 12, []profile.Bin{{Upper: 64, Calls: 1}}, false},
		"barrier":    {1, 0, []profile.Bin{{Upper: 0, Calls: 1}}, false},
		"iallreduce": {4, 4 * 800, []profile.Bin{{Upper: 1024, Calls: 4}}, true},
		"send":       {1, 40, []profile.Bin{{Upper: 64, Calls: 1}}, false},
		"isend":      {1, 40, []profile.Bin{{Upper: 64, Calls: 1}}, true},
		"recv":       {1, 40, []profile.Bin{{Upper: 64, Calls: 1}}, false},
		"irecv":      {1, 40, []profile.Bin{{Upper: 64, Calls: 1}}, true},
	}
	rep, err := profile.Load([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ranks) != n {
		t.Fatalf("%d rank files, want %d", len(rep.Ranks), n)
	}
	for r, s := range rep.Ranks {
		if s.Rank != r || s.Size != n || s.Share <= 0 || s.Share > 1 {
			t.Errorf("rank %d: rank %d of %d, share %v", r, s.Rank, s.Size, s.Share)
		}
		seen := map[string]bool{}
		for _, c := range s.Calls {
			w, ok := wants[c.Label()]
			if !ok {
				t.Errorf("rank %d: unexpected call %s: %+v", r, c.Label(), c)
				continue
			}
			seen[c.Label()] = true
			if c.Calls != w.calls || c.Failed != 0 || c.Bytes != w.bytes || c.Async != w.async {
				t.Errorf("rank %d: %s: %d calls (%d failed), %d bytes, async %v; want %d, %d, %v", r, c.Label(), c.Calls, c.Failed, c.Bytes, c.Async, w.calls, w.bytes, w.async)
			}
			if len(c.Hist) != len(w.hist) {
				t.Errorf("rank %d: %s: histogram %+v, want %+v", r, c.Label(), c.Hist, w.hist)
			} else {
				for i := range c.Hist {
					if c.Hist[i].Upper != w.hist[i].Upper || c.Hist[i].Calls != w.hist[i].Calls {
						t.Errorf("rank %d: %s: histogram %+v, want %+v", r, c.Label(), c.Hist, w.hist)
						break
					}
				}
			}
			var algos uint64
			for _, a := range c.Algos {
				algos += a.Calls
				if c.Kind == "collective" && a.Algo == "" {
					t.Errorf("rank %d: %s: a call without its algorithm: %+v", r, c.Label(), c.Algos)
				}
			}
			if algos != c.Calls {
				t.Errorf("rank %d: %s: %d calls by algorithm, %d calls", r, c.Label(), algos, c.Calls)
			}
			if c.Async && (c.Waits != 1 && c.Label() != "iallreduce" || c.Label() == "iallreduce" && c.Waits != 4 || c.Overlap == nil) {
				t.Errorf("rank %d: %s: %d waits, overlap %v", r, c.Label(), c.Waits, c.Overlap)
			}
		}
		if len(seen) != len(wants) {
			t.Errorf("rank %d: calls %v, want %d kinds", r, seen, len(wants))
		}
		next, prev := (r+1)%n, (r+n-1)%n
		wantP2P := []profile.PeerStats{{Peer: next, Sends: 2, SendBytes: 80}, {Peer: prev, Recvs: 2, RecvBytes: 80}}
		if next > prev {
			wantP2P[0], wantP2P[1] = wantP2P[1], wantP2P[0]
		}
		if fmt.Sprint(s.P2P) != fmt.Sprint(wantP2P) {
			t.Errorf("rank %d: partners %+v, want %+v", r, s.P2P, wantP2P)
		}
		checkTrace(t, filepath.Join(filepath.Dir(path), s.Trace.File), r, 20, 6)
	}

	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	// The histogram over the ranks (columns allreduce, bcast, allgather,
	// barrier, ...): 4 × each rank's calls.
	for _, w := range []string{`\n +0 +0 +0 +0 +4 `, `\n +≤ 8 +20 +0 `, `\n +≤ 4K +12 +0 `, `\n +≤ 1M +0 +8 +0 `, `\n +≤ 64 +0 +0 +4 +0 +0 `} {
		if !regexp.MustCompile(w).MatchString(out.String()) {
			t.Errorf("report lacks a line matching %q:\n%s", w, out.String())
		}
	}
}

// profiledCalls makes the calls TestProfileCounts counts.
func profiledCalls(ctx context.Context, c *braid.Comm) error {
	r, n := c.Rank(), c.Size()
	small, mid := make([]float32, 2), make([]float32, 1000)
	for range 5 {
		if err := c.Allreduce(ctx, small, small, braid.Sum); err != nil {
			return err
		}
	}
	for range 3 {
		if err := c.Allreduce(ctx, mid, mid, braid.Max); err != nil {
			return err
		}
	}
	big := make([]uint8, 1<<20)
	for range 2 {
		if err := c.Bcast(ctx, big, 1); err != nil {
			return err
		}
	}
	if err := c.Allgather(ctx, make([]int32, 3), make([]int32, 3*n)); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	vs := make([][]float64, 4)
	reqs := make([]*braid.Request, 4)
	for i := range reqs {
		vs[i] = make([]float64, 100)
		reqs[i] = c.IAllreduce(ctx, vs[i], vs[i], braid.Sum)
	}
	for _, q := range reqs {
		if err := q.Wait(ctx); err != nil {
			return err
		}
	}
	// Around the ring twice: ISend and Recv, then IRecv and Send.
	next, prev := (r+1)%n, (r+n-1)%n
	a, b := make([]float32, 10), make([]float32, 10)
	s := c.ISend(ctx, a, next, 7)
	if err := c.Recv(ctx, b, prev, 7); err != nil {
		return err
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}
	q := c.IRecv(ctx, b, prev, 8)
	if err := c.Send(ctx, a, next, 8); err != nil {
		return err
	}
	return q.Wait(ctx)
}

// checkTrace parses a rank's trace as Chrome trace JSON and checks that it
// holds calls complete events of calls and waits of waits, with numeric ts
// and dur and the argument names Kineto uses.
func checkTrace(t *testing.T, path string, rank, calls, waits int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: not JSON: %v", path, err)
	}
	var nc, nw int
	for _, e := range tr.TraceEvents {
		if e["ph"] != "X" {
			continue
		}
		ts, ok1 := e["ts"].(float64)
		dur, ok2 := e["dur"].(float64)
		if !ok1 || !ok2 || ts < 0 || dur < 0 || e["pid"] != float64(rank) {
			t.Errorf("%s: event %v: want numbers ts, dur ≥ 0 and pid %d", path, e, rank)
		}
		args, _ := e["args"].(map[string]any)
		if e["cat"] == "wait" {
			nw++
			continue
		}
		nc++
		keys := []string{"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype"}
		if e["cat"] == "collective" {
			keys = append(keys, "Seq", "Algorithm")
		} else {
			keys = append(keys, "Src Rank", "Dst Rank")
		}
		for _, k := range keys {
			if _, ok := args[k]; !ok {
				t.Errorf("%s: event %v lacks %q", path, e, k)
			}
		}
		if args["Group size"] != 4.0 {
			t.Errorf("%s: event %v: group size", path, e)
		}
	}
	if nc != calls || nw != waits {
		t.Errorf("%s: %d call events and %d waits, want %d and %d", path, nc, nw, calls, waits)
	}
}

// BenchmarkCallOverheadProfiled is BenchmarkCallOverhead with the profiler
// on: the difference is what recording a call costs.
func BenchmarkCallOverheadProfiled(b *testing.B) {
	comms, err := braid.NewLocal(1, &braid.Options{Profile: filepath.Join(b.TempDir(), "prof")})
	if err != nil {
		b.Fatal(err)
	}
	defer comms[0].Close()
	ctx := context.Background()
	v := []float32{1, 2}
	b.ReportAllocs()
	for b.Loop() {
		if err := comms[0].Allreduce(ctx, v, v, braid.Sum); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProfileOverhead measures what BRAID_PROFILE costs a 4-rank
// allreduce: two jobs of goroutine ranks, one profiled, run blocks of calls
// in turn (so that the machine's other load falls on both alike), and the
// benchmark reports the profiled job's extra time in percent
// (overhead-%). docs/PERFORMANCE.md records it.
func BenchmarkProfileOverhead(b *testing.B) {
	for _, c := range []struct {
		name         string
		bytes, calls int // a block: calls of bytes
	}{{"8", 8, 400}, {"64K", 64 << 10, 40}, {"1M", 1 << 20, 4}, {"16M", 16 << 20, 1}} {
		b.Run(c.name, func(b *testing.B) {
			// MIAD off: it settles by timing, and two jobs may settle apart.
			off, err := braid.NewLocal(4, &braid.Options{Tuning: "none", DisableMIAD: true})
			if err != nil {
				b.Fatal(err)
			}
			on, err := braid.NewLocal(4, &braid.Options{Tuning: "none", DisableMIAD: true, Profile: filepath.Join(b.TempDir(), "p")})
			if err != nil {
				b.Fatal(err)
			}
			bufs := make([][]float32, 4)
			for r := range bufs {
				bufs[r] = make([]float32, c.bytes/4)
			}
			block := func(comms []*braid.Comm) time.Duration {
				t0 := time.Now()
				var wg sync.WaitGroup
				for r, cm := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range c.calls {
							if err := cm.Allreduce(context.Background(), bufs[r], bufs[r], braid.Sum); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				return time.Since(t0)
			}
			block(off)
			block(on)
			var tOff, tOn time.Duration
			for b.Loop() {
				tOff += block(off)
				tOn += block(on)
			}
			b.ReportMetric(100*(tOn.Seconds()/tOff.Seconds()-1), "overhead-%")
			b.ReportMetric(tOff.Seconds()*1e6/float64(b.N*c.calls), "off-µs/call")
			b.ReportMetric(tOn.Seconds()*1e6/float64(b.N*c.calls), "on-µs/call")
			for _, cm := range append(off, on...) {
				cm.Close()
			}
		})
	}
}
