package profile_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/profile"
)

// TestSizeBin checks the bins (2^(n−1), 2^n] of Temuçin's thesis §3.3.4 at
// their edges.
func TestSizeBin(t *testing.T) {
	for _, c := range []struct {
		b   int64
		bin int
	}{{-1, -1}, {0, -1}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {8, 3}, {9, 4}, {1023, 10}, {1024, 10}, {1025, 11},
		{1 << 20, 20}, {1<<20 + 1, 21}, {1 << 62, 62}} {
		if got := profile.SizeBin(c.b); got != c.bin {
			t.Errorf("SizeBin(%d) = %d, want %d", c.b, got, c.bin)
		}
		if c.bin >= 0 {
			up := profile.BinUpper(c.bin)
			if c.b > up || c.b <= up/2 && up > 1 {
				t.Errorf("%d bytes outside its bin (%d, %d]", c.b, up/2, up)
			}
		}
	}
}

func call(name string, bytes int64, algo string, start, end int64) *profile.Call {
	return &profile.Call{Name: name, Group: 4, DType: "float32", InElems: bytes / 4, OutElems: bytes / 4,
		Bytes: bytes, Algo: algo, Peer: -1, Start: start, End: end}
}

// TestRecord records known calls and checks every figure of the summary.
func TestRecord(t *testing.T) {
	r := profile.New(filepath.Join(t.TempDir(), "p"), 1, 4, "h")
	r.Record(call("allreduce", 8, "shm", 0, 1000))
	r.Record(call("allreduce", 8, "shm", 2000, 4000))
	r.Record(call("allreduce", 4096, "ring", 5000, 5500))
	r.Record(call("allreduce", 3000, "ring", 6000, 7000))
	bad := call("allreduce", 8, "shm", 8000, 9000)
	bad.Failed = true
	r.Record(bad)
	r.Record(call("barrier", 0, "shm", 10000, 10100))
	// A non-blocking call issued in 100 ns that took 1000 ns, waited on
	// for 400 ns.
	ia := call("allreduce", 1<<20, "segring:seg=64K", 20000, 21000)
	ia.Async, ia.Issue = true, 100
	r.Record(ia)
	r.Waited("allreduce", profile.Collective, 7, 20600, 21000)
	for i, peer := range []int{0, 0, 2} {
		name := "send"
		if i == 2 {
			name = "recv"
		}
		r.Record(&profile.Call{Name: name, Kind: profile.P2P, Group: 4, DType: "uint8", Bytes: 100, Peer: peer,
			Start: int64(30000 + 1000*i), End: int64(30100 + 1000*i)})
	}
	s := r.Summary()
	if len(s.Calls) != 5 {
		t.Fatalf("%d call entries, want allreduce, barrier, iallreduce, send, recv: %+v", len(s.Calls), s.Calls)
	}
	ar := s.Calls[0]
	if ar.Name != "allreduce" || ar.Async || ar.Calls != 4 || ar.Failed != 1 || ar.Bytes != 8+8+4096+3000 {
		t.Errorf("allreduce: %+v", ar)
	}
	if ar.TimeUs != 5.5 || ar.MinUs != 0.5 || ar.MaxUs != 2 || ar.MeanUs != 4.5/4 {
		t.Errorf("allreduce times: time %v min %v max %v mean %v, want 5.5 (failed call included), 0.5, 2, 1.125",
			ar.TimeUs, ar.MinUs, ar.MaxUs, ar.MeanUs)
	}
	wantHist := []profile.Bin{{Upper: 8, Calls: 2, Timed: 2, TimeUs: 3}, {Upper: 4096, Calls: 2, Timed: 2, TimeUs: 1.5}}
	if !equalJSON(ar.Hist, wantHist) {
		t.Errorf("allreduce histogram %+v, want %+v", ar.Hist, wantHist)
	}
	wantAlgos := []profile.AlgoCount{{Algo: "shm", Upper: 8, Calls: 2}, {Algo: "ring", Upper: 4096, Calls: 2}}
	if !equalJSON(ar.Algos, wantAlgos) {
		t.Errorf("allreduce algorithms %+v, want %+v", ar.Algos, wantAlgos)
	}
	if ar.ArrivalSpreadUs != nil || ar.Overlap != nil {
		t.Errorf("allreduce: arrival spread %v, overlap %v; want none", ar.ArrivalSpreadUs, ar.Overlap)
	}
	if b := s.Calls[1]; b.Name != "barrier" || b.Calls != 1 || !equalJSON(b.Hist, []profile.Bin{{Upper: 0, Calls: 1, Timed: 1, TimeUs: 0.1}}) {
		t.Errorf("barrier: %+v", b)
	}
	ia2 := s.Calls[2]
	if !ia2.Async || ia2.Calls != 1 || ia2.SpanUs != 1 || ia2.WaitUs != 0.4 || ia2.Waits != 1 || ia2.Overlap == nil || *ia2.Overlap != 0.6 {
		t.Errorf("iallreduce: %+v (overlap %v), want span 1 µs, wait 0.4 µs, overlap 0.6", ia2, ia2.Overlap)
	}
	if ia2.TimeUs != 0.5 || ia2.MeanUs != 1 {
		t.Errorf("iallreduce: time %v µs (issue + wait), %v per call; want 0.5 and 1", ia2.TimeUs, ia2.MeanUs)
	}
	wantPeers := []profile.PeerStats{{Peer: 0, Sends: 2, SendBytes: 200}, {Peer: 2, Recvs: 1, RecvBytes: 100}}
	if !equalJSON(s.P2P, wantPeers) {
		t.Errorf("partners %+v, want %+v", s.P2P, wantPeers)
	}
	var in float64
	for _, c := range s.Calls {
		in += c.TimeUs
	}
	if math.Abs(s.BraidUs-in) > 1e-9 || s.Share <= 0 || s.Share > 1 {
		t.Errorf("in Braid %v µs (share %v), want the calls' sum %v", s.BraidUs, s.Share, in)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestSmallCallSampling: after SampleAfter small blocking calls, Begin
// times one in SampleEvery; every counter stays exact, the time is scaled
// from the timed calls, and a large call makes Begin time every call again.
func TestSmallCallSampling(t *testing.T) {
	r := profile.New(filepath.Join(t.TempDir(), "p"), 0, 2, "h")
	const n = profile.SampleAfter + 16*100
	untimed := 0
	for range n {
		t0 := r.Begin()
		if t0 == profile.Untimed {
			untimed++
		}
		c := call("allreduce", 8, "shm", t0, r.End(t0))
		if t0 != profile.Untimed {
			c.End = c.Start + 1000 // 1 µs each
		}
		r.Record(c)
	}
	s := r.Summary()
	ar := s.Calls[0]
	if ar.Calls != n || ar.Bytes != 8*n || ar.Hist[0].Calls != n || ar.Algos[0].Calls != n {
		t.Errorf("counts %+v, want %d calls of 8 B", ar, n)
	}
	if untimed < 16*100-100-1 || untimed > 16*100 || ar.Timed != uint64(n-untimed) || s.Trace.Offered != ar.Timed {
		t.Errorf("%d calls untimed, %d timed, %d traced; want about 15 in 16 of the %d after the first %d", untimed, ar.Timed, s.Trace.Offered, n-profile.SampleAfter, profile.SampleAfter)
	}
	if math.Abs(ar.TimeUs-n) > 1e-6 || math.Abs(ar.MeanUs-1) > 1e-9 || math.Abs(ar.Hist[0].TimeUs-n) > 1e-6 {
		t.Errorf("time %v µs, mean %v, bin %v: want %d µs estimated, 1 µs per call", ar.TimeUs, ar.MeanUs, ar.Hist[0].TimeUs, n)
	}
	big := call("allreduce", 1<<20, "ring", 0, 0)
	big.Start, big.End = r.Begin(), r.End(0)
	r.Record(big)
	for i := range 2 * profile.SampleEvery {
		if r.Begin() == profile.Untimed {
			t.Fatalf("call %d after a large one untimed", i)
		}
	}
}

// TestTraceSampling: beyond MaxEvents the trace keeps an even sample, every
// stride-th call, while the counters count every call.
func TestTraceSampling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p")
	r := profile.New(path, 0, 1, "h")
	const n = 2*profile.MaxEvents + 5
	for i := range n {
		c := call("allreduce", 8, "shm", int64(i)*10, int64(i)*10+5)
		c.Seq = uint32(i)
		r.Record(c)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := profile.ReadSummary(path + ".0")
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls[0].Calls != n || s.Trace.Offered != n || s.Trace.Stride != 4 {
		t.Fatalf("calls %d, offered %d, stride %d; want %d, %d, 4", s.Calls[0].Calls, s.Trace.Offered, s.Trace.Stride, n, n)
	}
	tr, err := profile.ReadTrace(filepath.Join(filepath.Dir(path), s.Trace.File))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, e := range tr.TraceEvents {
		if e["ph"] == "X" {
			seqs = append(seqs, int(e["args"].(map[string]any)["Seq"].(float64)))
		}
	}
	if len(seqs) != s.Trace.Events || len(seqs) != (n+3)/4 {
		t.Fatalf("%d events in the trace, summary says %d, want %d", len(seqs), s.Trace.Events, (n+3)/4)
	}
	for i, q := range seqs {
		if q != 4*i {
			t.Fatalf("event %d is call %d, want %d", i, q, 4*i)
		}
	}
}

// TestFiles: Close writes a summary that reads back and a Chrome trace with
// one complete event per call and wait, carrying Kineto's argument names.
func TestFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prof")
	r := profile.New(path, 2, 4, "host \"a\"")
	c := call("allreduce", 64, "ring", 100, 2100)
	c.Seq, c.Comm, c.Rank = 5, 0xabc, 2
	r.Record(c)
	// Overlapping calls (another goroutine) go on another lane.
	o := call("bcast", 16, "binomial", 1000, 3000)
	o.Async, o.Seq = true, 6
	r.Record(o)
	r.Waited("bcast", profile.Collective, 6, 2500, 3000)
	r.Record(&profile.Call{Name: "send", Kind: profile.P2P, Group: 4, DType: "int32", InElems: 3, Bytes: 12, Peer: 3, Tag: 9, Start: 4000, End: 4100})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	r.Record(call("allreduce", 64, "ring", 5000, 6000)) // after Close: dropped
	s, err := profile.ReadSummary(path + ".2")
	if err != nil {
		t.Fatal(err)
	}
	if s.Rank != 2 || s.Size != 4 || s.Host != "host \"a\"" || len(s.Calls) != 3 || s.Calls[0].Calls != 1 {
		t.Fatalf("summary %+v", s)
	}
	tr, err := profile.ReadTrace(path + ".2.trace.json")
	if err != nil {
		t.Fatal(err)
	}
	var xs []map[string]any
	for _, e := range tr.TraceEvents {
		if e["ph"] == "X" {
			xs = append(xs, e)
		}
	}
	if len(xs) != 4 {
		t.Fatalf("%d complete events, want 4 (3 calls, 1 wait): %v", len(xs), xs)
	}
	ar := xs[0]
	args := ar["args"].(map[string]any)
	want := map[string]any{"Collective name": "allreduce", "In msg nelems": 16.0, "Out msg nelems": 16.0, "Group size": 4.0,
		"dtype": "float32", "Seq": 5.0, "Algorithm": "ring", "Process Group Name": "00000abc", "Rank": 2.0, "Is asynchronized op": false}
	for k, v := range want {
		if args[k] != v {
			t.Errorf("allreduce event: args[%q] = %v, want %v", k, args[k], v)
		}
	}
	if ar["ts"] != 0.1 || ar["dur"] != 2.0 || ar["pid"] != 2.0 || ar["name"] != "allreduce" {
		t.Errorf("allreduce event %v: want ts 0.1 µs, dur 2 µs, pid 2", ar)
	}
	if xs[1]["tid"] == ar["tid"] {
		t.Errorf("overlapping calls on one lane: %v and %v", ar, xs[1])
	}
	send := xs[3]["args"].(map[string]any)
	if send["Src Rank"] != 2.0 || send["Dst Rank"] != 3.0 || send["Tag"] != 9.0 || send["In msg nelems"] != 3.0 {
		t.Errorf("send event args %v", send)
	}
	if tr.BaseTimeNS != s.Trace.BaseNS || tr.BaseTimeNS != s.Start.UnixNano() {
		t.Errorf("trace base %d, summary %d, start %v", tr.BaseTimeNS, s.Trace.BaseNS, s.Start)
	}
}

// TestLoad: a prefix stands for its rank files; bad files are refused with
// their names.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run")
	for rank := range 3 {
		r := profile.New(path, rank, 3, "h")
		r.Record(call("allreduce", 1024, "ring", 0, 10))
		r.Record(call("allreduce", 1024, "ring", 20, 30))
		if rank == 0 {
			r.Record(&profile.Call{Name: "send", Kind: profile.P2P, DType: "uint8", Bytes: 5, Peer: 2, Start: 40, End: 50})
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := profile.Load([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ranks) != 3 || rep.Ranks[2].Rank != 2 {
		t.Fatalf("loaded %d ranks", len(rep.Ranks))
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Braid profile of 3 of 3 ranks (0-2)", "allreduce  collective      6", "≤ 1K          6     0",
		"allreduce  ≤ 1K   ring       6", "     0  ·  ·  1 (5 B)", "n/a"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, out.String())
		}
	}
	merged := filepath.Join(dir, "all.json")
	if err := rep.WriteMergedTrace(merged); err != nil {
		t.Fatal(err)
	}
	tr, err := profile.ReadTrace(merged)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[float64]int{}
	for _, e := range tr.TraceEvents {
		if e["ph"] == "X" {
			pids[e["pid"].(float64)]++
		}
	}
	if len(pids) != 3 || pids[0] != 3 || pids[1] != 2 {
		t.Errorf("merged trace: events per rank %v", pids)
	}

	bad := filepath.Join(dir, "bad.0")
	os.WriteFile(bad, []byte(`{"version": 99, "rank": 0, "size": 1}`), 0o644)
	other := filepath.Join(dir, "other.0")
	o := profile.New(filepath.Join(dir, "other"), 0, 2, "h")
	o.Close()
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{filepath.Join(dir, "nosuch")}, "no profile"},
		{[]string{bad}, "bad.0: profile format version 99"},
		{[]string{path + ".0", path + ".0"}, "both hold rank 0"},
		{[]string{path + ".1", other}, "is a rank of 2 ranks"},
		{[]string{path + ".0.trace.json"}, "not a Braid profile"},
	} {
		_, err := profile.Load(c.paths)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%v): %v, want an error with %q", c.paths, err, c.want)
		}
	}
}

// BenchmarkRecord is the profiler's cost per call: two clock reads and
// Record.
func BenchmarkRecord(b *testing.B) {
	r := profile.New(filepath.Join(b.TempDir(), "p"), 0, 4, "h")
	c := call("allreduce", 1<<20, "segring:seg=64K", 0, 0)
	for b.Loop() {
		c.Start = r.Now()
		c.End = r.Now()
		r.Record(c)
	}
}

// BenchmarkRecordSampled is the cost per small call once they are sampled:
// Begin, End and Record, the clock read for one call in SampleEvery.
func BenchmarkRecordSampled(b *testing.B) {
	r := profile.New(filepath.Join(b.TempDir(), "p"), 0, 4, "h")
	c := call("allreduce", 8, "shm", 0, 0)
	for range profile.SampleAfter + 1 {
		r.Record(c)
	}
	for b.Loop() {
		c.Start = r.Begin()
		c.End = r.End(c.Start)
		r.Record(c)
	}
}
