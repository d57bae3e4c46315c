package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/profile"
)

// TestProfileBench is the profiler's acceptance on processes: BRAID_PROFILE
// on a 4-rank braid bench writes a summary and a trace per rank; every
// trace is Chrome trace JSON (traceEvents of complete events with numeric
// ts and dur and Kineto's argument names), and braid prof merges the files
// into tables, the two figures and one trace of four processes.
func TestProfileBench(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "prof")
	out, err := run(t, 120*time.Second, []string{"BRAID_PROFILE=" + prefix}, "bench", "-n", "4", "allreduce",
		"--min-size", "8", "--max-size", "64K", "--iters", "3", "--warmup", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for r := range 4 {
		s, err := profile.ReadSummary(prefix + "." + string(rune('0'+r)))
		if err != nil {
			t.Fatal(err)
		}
		var calls uint64
		for _, c := range s.Calls {
			if c.Name == "allreduce" && !c.Async {
				calls = c.Calls
			}
		}
		// 14 sizes (8 B to 64 KiB), each with a warm-up and 3 timed calls
		// at least.
		if calls < 14*4 {
			t.Errorf("rank %d: %d allreduces recorded, want at least %d", r, calls, 14*4)
		}
		b, err := os.ReadFile(filepath.Join(dir, s.Trace.File))
		if err != nil {
			t.Fatal(err)
		}
		var tr struct {
			TraceEvents []struct {
				Name string         `json:"name"`
				Ph   string         `json:"ph"`
				Ts   *float64       `json:"ts"`
				Dur  *float64       `json:"dur"`
				Pid  int            `json:"pid"`
				Args map[string]any `json:"args"`
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatalf("rank %d: %s is not JSON: %v", r, s.Trace.File, err)
		}
		var x uint64
		for _, e := range tr.TraceEvents {
			if e.Ph != "X" {
				continue
			}
			x++
			if e.Ts == nil || e.Dur == nil || *e.Dur < 0 || e.Pid != r {
				t.Fatalf("rank %d: event %+v: want numeric ts and dur, pid %d", r, e, r)
			}
			for _, k := range []string{"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Seq", "Algorithm"} {
				if _, ok := e.Args[k]; !ok {
					t.Fatalf("rank %d: event %+v lacks %q", r, e, k)
				}
			}
		}
		if x != s.Trace.Offered || x == 0 {
			t.Errorf("rank %d: %d complete events, the summary says %d calls ended", r, x, s.Trace.Offered)
		}
	}
	hist, share, merged := filepath.Join(dir, "h.png"), filepath.Join(dir, "s.png"), filepath.Join(dir, "all.json")
	out, err = run(t, 60*time.Second, nil, "prof", prefix, "--hist", hist, "--share", share, "--trace", merged)
	if err != nil {
		t.Fatalf("braid prof: %v\n%s", err, out)
	}
	for _, w := range []string{"Braid profile of 4 of 4 ranks (0-3)", "message sizes", "algorithms", "arrival patterns"} {
		if !strings.Contains(out, w) {
			t.Errorf("braid prof lacks %q:\n%s", w, out)
		}
	}
	// Every rank logged its arrival at every call (fewer than
	// profile.ArrivalAll): the patterns count each 8-byte allreduce once,
	// a quarter of the calls the histogram counts over the ranks.
	if m := regexp.MustCompile(`(?m)^\s*allreduce\s+≤ 8\s+(\d+)\s+1\s`).FindStringSubmatch(out); m == nil {
		t.Errorf("braid prof has no arrival pattern of the 8-byte allreduces on one host:\n%s", out)
	} else if h := regexp.MustCompile(`(?m)^\s*≤ 8\s+(\d+)\s`).FindStringSubmatch(out); h == nil || atoi(t, h[1]) != 4*atoi(t, m[1]) {
		t.Errorf("arrival patterns of %s 8-byte allreduces, histogram %v over 4 ranks", m[1], h)
	}
	for _, f := range []string{hist, share} {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: %v, not a PNG", f, err)
		}
	}
	tr, err := profile.ReadTrace(merged)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[float64]bool{}
	for _, e := range tr.TraceEvents {
		pids[e["pid"].(float64)] = true
	}
	if len(pids) != 4 {
		t.Errorf("merged trace: processes %v, want 4", pids)
	}
}

// TestProfileLoopCounts runs a known number of allreduces of a known size
// on 4 processes (braid run and the loop test program) with BRAID_PROFILE
// and checks each rank's counts and bins, and braid prof's histogram, to
// the call.
func TestProfileLoopCounts(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "loop")
	out, err := run(t, 120*time.Second, []string{"BRAID_PROFILE=" + prefix, "LOOP_ITERS=25", "LOOP_COUNT=300"},
		"run", "-n", "4", "--", filepath.Join(binDir, "loop"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rep, err := profile.Load([]string{prefix})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ranks) != 4 {
		t.Fatalf("%d ranks", len(rep.Ranks))
	}
	for _, s := range rep.Ranks {
		// Close's own barrier is not the program's and is not counted.
		if len(s.Calls) != 1 {
			t.Fatalf("rank %d: calls %+v, want allreduce only", s.Rank, s.Calls)
		}
		c := s.Calls[0]
		if c.Name != "allreduce" || c.Calls != 25 || c.Bytes != 25*1200 || len(c.Hist) != 1 || c.Hist[0].Upper != 2048 || c.Hist[0].Calls != 25 {
			t.Errorf("rank %d: %+v, want 25 allreduces of 1200 B in the bin (1K, 2K]", s.Rank, c)
		}
	}
	out, err = run(t, 60*time.Second, nil, "prof", prefix)
	if err != nil {
		t.Fatalf("braid prof: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`\n +≤ 2K +100\n`).MatchString(out) || !regexp.MustCompile(`\n +allreduce +collective +100 +0 +117\.2 KiB `).MatchString(out) {
		t.Errorf("braid prof: want 100 allreduces of 1200 B over the ranks:\n%s", out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
