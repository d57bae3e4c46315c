package braid_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/agg"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/sched"
)

var aggTestSecret = []byte("braid-agg-test-secret-0123456789")

// aggDaemon starts an aggregation daemon in this process on loopback,
// and points the jobs the test makes (BRAID_AGG, BRAID_SECRET) at it.
func aggDaemon(t *testing.T, cfg agg.Config) (*agg.Server, string) {
	t.Helper()
	cfg.Secrets = [][]byte{aggTestSecret}
	if cfg.Log == nil {
		cfg.Log = log.New(io.Discard, "", 0)
	}
	s := agg.NewServer(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	t.Setenv("BRAID_AGG", l.Addr().String())
	t.Setenv("BRAID_SECRET", hex.EncodeToString(aggTestSecret))
	return s, l.Addr().String()
}

// TestMatrixAgg is the correctness matrix of the agg allreduce (BRAID_ALGO
// allreduce=agg) through a daemon in this process: rank counts 1–9 over
// emulated hosts (two interleaved, uneven, one per rank), every dtype and
// op at the small counts, in place and not, and float32 sum at the large
// ones.
func TestMatrixAgg(t *testing.T) {
	s, _ := aggDaemon(t, agg.Config{})
	ring, err := algo.Lookup(sched.Allreduce, "ring")
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 9; n++ {
		own := make([]string, n)
		for r := range own {
			own[r] = fmt.Sprint("h", r)
		}
		layouts := append(matrixLayouts(n), own)
		for i, hosts := range layouts {
			cases := matrixCases(sched.Allreduce, ring, n)
			if i > 0 {
				cases = layoutCases(sched.Allreduce, ring, n, false)
			}
			before := s.Stats().Calls
			runCases(t, sched.Allreduce, "agg", n, hosts, cases)
			if after := s.Stats().Calls; after == before && n > 1 && len(cases) > 0 {
				t.Errorf("n=%d hosts %v: no call went through the daemon", n, hosts)
			}
		}
	}
}

// TestAggUsed: with a daemon, the planner runs large allreduces of a job
// over several hosts through it (the daemon counts the calls), and says so.
func TestAggUsed(t *testing.T) {
	s, _ := aggDaemon(t, agg.Config{})
	var logb strings.Builder
	opts := &braid.Options{LocalHosts: []string{"a", "b", "c", "a"}, Debug: "info", Log: &syncWriter{w: &logb}}
	errs := onRanks(t, 4, opts, func(c *braid.Comm) error {
		buf := make([]float32, 1<<20)
		for i := range buf {
			buf[i] = float32(c.Rank() + 1)
		}
		for range 3 {
			if err := c.Allreduce(context.Background(), buf, buf, braid.Sum); err != nil {
				return err
			}
		}
		if buf[0] != 10*4*4 || buf[len(buf)-1] != 160 {
			return fmt.Errorf("got %v", buf[0])
		}
		algo, _, err := c.Explain("allreduce", 1<<20, braid.Float32, 0)
		if err != nil || algo != "agg" {
			return fmt.Errorf("Explain: %q, %v", algo, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, logb.String())
		}
	}
	// The job is gone: the daemon frees its groups as it notices.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if st.Calls >= 3 && st.Groups == 0 && st.Reserved == 0 {
			if st.Aborted != 0 {
				t.Fatalf("a job that closed in good order ended %d groups by failure: %+v", st.Aborted, st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon stats after the job: %+v\n%s", st, logb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAggFallback: a daemon that is full (no resources) or absent leaves
// the job on host algorithms, with the reason in the log; a daemon that
// dies between calls makes the next call fall back, correctly, on every
// rank.
func TestAggFallback(t *testing.T) {
	sum := func(c *braid.Comm) error {
		buf := make([]float64, 300000)
		for i := range buf {
			buf[i] = float64(c.Rank() + i%7)
		}
		if err := c.Allreduce(context.Background(), buf, buf, braid.Sum); err != nil {
			return err
		}
		for i, v := range buf {
			if want := float64(6 + 4*(i%7)); v != want {
				return fmt.Errorf("element %d: %v, want %v", i, v, want)
			}
		}
		return nil
	}
	hosts := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name string
		cfg  agg.Config
		want string
	}{
		{"full", agg.Config{MaxMemory: 1 << 20}, "no resources"},
		{"absent", agg.Config{}, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aggDaemon(t, tc.cfg)
			if tc.name == "absent" {
				// An address where nothing listens.
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				l.Close()
				t.Setenv("BRAID_AGG", l.Addr().String())
			}
			var logb strings.Builder
			opts := &braid.Options{LocalHosts: hosts, Algo: "allreduce=agg", Debug: "info", Log: &syncWriter{w: &logb}}
			for r, err := range onRanks(t, 4, opts, sum) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if !strings.Contains(logb.String(), tc.want) || !strings.Contains(logb.String(), "allreduce runs on host algorithms") {
				t.Fatalf("log does not say why:\n%s", logb.String())
			}
		})
	}
	t.Run("lost", func(t *testing.T) {
		s, _ := aggDaemon(t, agg.Config{})
		var logb strings.Builder
		opts := &braid.Options{LocalHosts: hosts, Algo: "allreduce=agg", Debug: "info", Log: &syncWriter{w: &logb}, Timeout: 20 * time.Second}
		ready := make(chan struct{}, 4)
		goOn := make(chan struct{})
		go func() {
			for range 4 {
				<-ready
			}
			s.Close()
			close(goOn)
		}()
		errs := onRanks(t, 4, opts, func(c *braid.Comm) error {
			if err := sum(c); err != nil {
				return err
			}
			ready <- struct{}{}
			<-goOn
			for range 2 {
				if err := sum(c); err != nil {
					return err
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v\n%s", r, err, logb.String())
			}
		}
		if !strings.Contains(logb.String(), "the aggregation failed") {
			t.Fatalf("log:\n%s", logb.String())
		}
	})
	t.Run("midcall", func(t *testing.T) {
		// The daemon dies while it sums the parts of a call: every rank
		// completes that call, correctly, through the ring.
		s, _ := aggDaemon(t, agg.Config{})
		var logb strings.Builder
		opts := &braid.Options{LocalHosts: hosts, Algo: "allreduce=agg", Debug: "info", Log: &syncWriter{w: &logb}, Timeout: 20 * time.Second}
		go func() {
			for s.Stats().Parts < 5 {
				time.Sleep(100 * time.Microsecond)
			}
			s.Close()
		}()
		errs := onRanks(t, 4, opts, func(c *braid.Comm) error {
			buf := make([]float32, 8<<20) // 32 MiB: 32 parts a call
			for i := range 3 {
				for j := range buf {
					buf[j] = float32(c.Rank() + j%5 + i)
				}
				if err := c.Allreduce(context.Background(), buf, buf, braid.Sum); err != nil {
					return err
				}
				for j, v := range buf {
					if want := float32(6 + 4*(j%5+i)); v != want {
						return fmt.Errorf("call %d element %d: %v, want %v", i, j, v, want)
					}
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v\n%s", r, err, logb.String())
			}
		}
		if !strings.Contains(logb.String(), "seq 2: the aggregation failed") {
			t.Fatalf("the daemon was not lost in the first call through it:\n%s", logb.String())
		}
	})
}

// syncWriter serialises the ranks' log lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.w)
}

// TestAggOption: a daemon list that is not host:port is InvalidArgument
// naming the knob.
func TestAggOption(t *testing.T) {
	for _, bad := range []string{"nohost", ",", "a:1,b"} {
		err := (&braid.Options{Agg: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "Options.Agg") {
			t.Errorf("Agg %q: %v", bad, err)
		}
	}
	t.Setenv("BRAID_AGG", "10.0.0.1")
	if err := (&braid.Options{}).Validate(); err == nil || !strings.Contains(err.Error(), "BRAID_AGG") {
		t.Errorf("BRAID_AGG=10.0.0.1: %v", err)
	}
	t.Setenv("BRAID_AGG", "10.0.0.1:7470,[::1]:7470")
	if err := (&braid.Options{}).Validate(); err != nil {
		t.Errorf("a good list: %v", err)
	}
}
