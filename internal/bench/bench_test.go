package bench_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/sched"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "12": 12, "8": 8,
		"4K": 4 << 10, "4k": 4 << 10, "4KB": 4 << 10, "4KiB": 4 << 10, "4kb": 4 << 10,
		"64M": 64 << 20, "64MiB": 64 << 20, "1G": 1 << 30, "2g": 2 << 30, "1GiB": 1 << 30,
		"8B": 8, "8b": 8, "1536": 1536,
	}
	for s, want := range good {
		got, err := bench.ParseSize(s)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "K", "B", "KiB", "-1", "-4K", "4X", "1.5K", "abc", "4 K", " 4K", "4KK", "4T", "0x10", "K4"} {
		if got, err := bench.ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, got)
		} else if !strings.Contains(err.Error(), "size") {
			t.Errorf("ParseSize(%q): error %q does not say what was wrong", s, err)
		}
	}
}

func TestParseSizeOverflow(t *testing.T) {
	for _, s := range []string{"10000000000G", "9223372036854775807K", "9007199254740992M"} {
		if v, err := bench.ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an overflow error", s, v)
		}
	}
}

func TestFormatSize(t *testing.T) {
	cases := map[int64]string{
		0: "0", 1: "1", 8: "8", 1000: "1000", 1023: "1023", 1024: "1K", 1536: "1536",
		4 << 10: "4K", 1 << 20: "1M", 64 << 20: "64M", 1<<20 + 1<<10: "1025K",
		1 << 30: "1G", 3 << 30: "3G", 1 << 40: "1024G",
	}
	for b, want := range cases {
		if got := bench.FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestSizeRoundTrip(t *testing.T) {
	sizes := append(bench.Sizes(1, 1<<40), 0, 3, 1000, 1536, 3<<20, 5<<30, 1<<20+1)
	for _, s := range sizes {
		f := bench.FormatSize(s)
		got, err := bench.ParseSize(f)
		if err != nil || got != s {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", s, f, got, err)
		}
	}
	for _, s := range []string{"4K", "64M", "1G", "12"} {
		v, err := bench.ParseSize(s)
		if err != nil {
			t.Fatal(err)
		}
		if f := bench.FormatSize(v); f != s {
			t.Errorf("FormatSize(ParseSize(%q)) = %q", s, f)
		}
	}
}

func TestSizes(t *testing.T) {
	cases := []struct {
		min, max int64
		want     []int64
	}{
		{8, 64, []int64{8, 16, 32, 64}},
		{8, 100, []int64{8, 16, 32, 64}},
		{0, 4, []int64{1, 2, 4}},
		{-5, 2, []int64{1, 2}},
		{3, 20, []int64{3, 6, 12}},
		{1, 1, []int64{1}},
		{5, 4, nil},
	}
	for _, c := range cases {
		if got := bench.Sizes(c.min, c.max); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Sizes(%d, %d) = %v, want %v", c.min, c.max, got, c.want)
		}
	}
}

func TestSizesHugeMax(t *testing.T) {
	got := bench.Sizes(1<<61, math.MaxInt64)
	if len(got) != 2 {
		t.Errorf("Sizes(1<<61, MaxInt64) = %v, want [1<<61 1<<62]", got)
	}
}

func TestBusFactor(t *testing.T) {
	cases := []struct {
		coll sched.Collective
		n    int
		want float64
	}{
		{sched.Allreduce, 4, 1.5},
		{sched.Allreduce, 2, 1},
		{sched.Allreduce, 1, 0},
		{sched.Allgather, 4, 0.75},
		{sched.ReduceScatter, 4, 0.75},
		{sched.Alltoall, 8, 0.875},
		{sched.Gather, 2, 0.5},
		{sched.Scatter, 5, 0.8},
		{sched.Bcast, 4, 1},
		{sched.Reduce, 4, 1},
		{sched.Barrier, 4, 1},
	}
	for _, c := range cases {
		if got := bench.BusFactor(c.coll, c.n); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("BusFactor(%v, %d) = %v, want %v", c.coll, c.n, got, c.want)
		}
	}
}

var sampleRows = []bench.Row{
	{Coll: "allreduce", Algo: "ring", Ran: "ring", Bytes: 4096, Count: 1024, Iters: 10, AvgUs: 12.5, MinUs: 11, MaxUs: 14.25, AlgBW: 0.287, BusBW: 0.431, Correct: "yes"},
	{Coll: "allreduce", Algo: "auto", Ran: "segring:seg=1M", Bytes: 64 << 20, Count: 16 << 20, Iters: 5, AvgUs: 1000, MinUs: 900, MaxUs: 1100, AlgBW: 61.0, BusBW: 91.5, Correct: "-"},
}

var sampleHeader = bench.Header{Coll: "allreduce", DType: "float32", Op: "sum", Transport: "inproc", Ranks: 4, Hosts: 1, InPlace: true, Algo: "ring"}

// imbalancedRows are rows of a run with --imbalance.
var imbalancedRows = []bench.Row{
	{Coll: "allreduce", Algo: "recdouble", Ran: "recdouble", Bytes: 8, Count: 2, Iters: 100, AvgUs: 30.5, MinUs: 20, MaxUs: 41, AlgBW: 0.0002, BusBW: 0.0003, MIF: 10, AlphaUs: 0.75, BalancedUs: 2.5, WaitUs: 27.25, TailUs: 3.25, Correct: "yes"},
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.Write(&buf, "table", sampleHeader, sampleRows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"# braid bench allreduce", "4 ranks", "inproc", "float32", "op sum", "in place", "algo ring",
		"size", "busbw", "correct", "4K", "64M", "yes", "12.50", "91.50", " ring ", " auto (segring:seg=1M) "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3+len(sampleRows) {
		t.Errorf("table has %d lines, want %d:\n%s", len(lines), 3+len(sampleRows), out)
	}
	if strings.Contains(out, "balanced") || strings.Contains(out, "imbalance") {
		t.Errorf("table without imbalance mentions it:\n%s", out)
	}
	// "" is the table too.
	var def bytes.Buffer
	if err := bench.Write(&def, "", sampleHeader, sampleRows); err != nil || def.String() != out {
		t.Errorf("format \"\" differs from table: %v", err)
	}
}

// TestWriteCPUs: where rank 0 runs is a line of the table's header and a
// field of JSON's, and absent when not known.
func TestWriteCPUs(t *testing.T) {
	h := sampleHeader
	h.CPUs = "0-7, GOMAXPROCS 8"
	var tab, js bytes.Buffer
	if err := bench.Write(&tab, "table", h, sampleRows); err != nil {
		t.Fatal(err)
	}
	if err := bench.Write(&js, "json", h, sampleRows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "\n# rank 0: CPUs 0-7, GOMAXPROCS 8\n") {
		t.Errorf("table lacks rank 0's CPUs:\n%s", tab.String())
	}
	if !strings.Contains(js.String(), `"cpus": "0-7, GOMAXPROCS 8"`) {
		t.Errorf("JSON lacks rank 0's CPUs:\n%s", js.String())
	}
	var none bytes.Buffer
	if err := bench.Write(&none, "json", sampleHeader, sampleRows); err != nil || strings.Contains(none.String(), "cpus") {
		t.Errorf("JSON without CPUs names them: %v\n%s", err, none.String())
	}
}

func TestWriteTableImbalance(t *testing.T) {
	var buf bytes.Buffer
	h := sampleHeader
	h.MIF = 10
	if err := bench.Write(&buf, "table", h, imbalancedRows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"imbalance MIF 10", "one point-to-point message", "α µs", "balanced µs", "wait µs", "tail µs",
		"30.50", "0.75", "2.50", "27.25", "3.25"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The old definition, named.
	buf.Reset()
	h.Alpha = bench.AlphaCollective
	if err := bench.Write(&buf, "table", h, imbalancedRows); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "smallest balanced latency (--imbalance-alpha collective)") || strings.Contains(out, "point-to-point") {
		t.Errorf("table of α collective:\n%s", out)
	}
}

func TestAlgoCell(t *testing.T) {
	for _, c := range []struct {
		algo, ran, want string
	}{
		{"ring", "ring", "ring"},
		{"ring", "", "ring"},
		{"", "ring", "ring"},
		{"auto", "recdouble", "auto (recdouble)"},
		{"segring", "segring:seg=1M", "segring:seg=1M"},
		{"segring:seg=64K", "segring:seg=64K", "segring:seg=64K"},
		{"seg", "segring", "seg (segring)"},
	} {
		if got := bench.AlgoCell(bench.Row{Algo: c.algo, Ran: c.ran}); got != c.want {
			t.Errorf("AlgoCell(algo %q, ran %q) = %q, want %q", c.algo, c.ran, got, c.want)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.Write(&buf, "csv", sampleHeader, sampleRows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	header := []string{"collective", "algo", "ran", "bytes", "count", "iters", "avg_us", "min_us", "max_us", "algbw_gbs", "busbw_gbs", "mif", "alpha_us", "balanced_us", "wait_us", "tail_us", "correct"}
	if len(recs) != 1+len(sampleRows) || !reflect.DeepEqual(recs[0], header) {
		t.Fatalf("csv records %v, want the header %v and %d rows", recs, header, len(sampleRows))
	}
	want := []string{"allreduce", "ring", "ring", "4096", "1024", "10", "12.500", "11.000", "14.250", "0.287", "0.431", "", "", "", "", "", "yes"}
	if !reflect.DeepEqual(recs[1], want) {
		t.Errorf("row 1: %v, want %v", recs[1], want)
	}
	want = []string{"allreduce", "auto", "segring:seg=1M", "67108864", "16777216", "5", "1000.000", "900.000", "1100.000", "61.000", "91.500", "", "", "", "", "", "-"}
	if !reflect.DeepEqual(recs[2], want) {
		t.Errorf("row 2: %v, want %v", recs[2], want)
	}

	buf.Reset()
	if err := bench.Write(&buf, "csv", sampleHeader, imbalancedRows); err != nil {
		t.Fatal(err)
	}
	if recs, err = csv.NewReader(&buf).ReadAll(); err != nil {
		t.Fatal(err)
	}
	want = []string{"allreduce", "recdouble", "recdouble", "8", "2", "100", "30.500", "20.000", "41.000", "0.000", "0.000", "10", "0.750", "2.500", "27.250", "3.250", "yes"}
	if len(recs) != 2 || !reflect.DeepEqual(recs[1], want) {
		t.Errorf("imbalanced csv %v, want the header and %v", recs, want)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.Write(&buf, "json", sampleHeader, sampleRows); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Run  bench.Header `json:"run"`
		Rows []bench.Row  `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, buf.String())
	}
	if got.Run != sampleHeader {
		t.Errorf("header %+v, want %+v", got.Run, sampleHeader)
	}
	if !reflect.DeepEqual(got.Rows, sampleRows) {
		t.Errorf("rows %+v, want %+v", got.Rows, sampleRows)
	}
	// The field names are the documented ones.
	for _, k := range []string{`"collective"`, `"algo"`, `"ran"`, `"bytes"`, `"avg_us"`, `"busbw_gbs"`, `"correct"`,
		`"run"`, `"ranks"`, `"transport"`, `"dtype"`} {
		if !strings.Contains(buf.String(), k) {
			t.Errorf("json lacks %s", k)
		}
	}
	if strings.Contains(buf.String(), `"mif"`) || strings.Contains(buf.String(), `"balanced_us"`) || strings.Contains(buf.String(), `"alpha`) {
		t.Errorf("json without imbalance has its fields:\n%s", buf.String())
	}
	// correct is a JSON boolean, or null where nothing was checked.
	var verdicts struct {
		Rows []struct {
			Correct *bool `json:"correct"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &verdicts); err != nil {
		t.Fatalf("correct is not a boolean or null: %v\n%s", err, buf.String())
	}
	if c := verdicts.Rows; len(c) != 2 || c[0].Correct == nil || !*c[0].Correct || c[1].Correct != nil {
		t.Errorf("correct of yes and -: %v, want true and null:\n%s", c, buf.String())
	}
	var wrong bench.Verdict
	if b, err := json.Marshal(bench.Wrong); err != nil || string(b) != "false" || json.Unmarshal(b, &wrong) != nil || wrong != bench.Wrong {
		t.Errorf("a wrong verdict: %s, %v, read back as %q", b, err, wrong)
	}
	if json.Unmarshal([]byte(`"yes"`), &wrong) == nil {
		t.Error("the string \"yes\" read as a verdict")
	}

	buf.Reset()
	h := sampleHeader
	h.MIF = 10
	h.Alpha = bench.AlphaP2P
	if err := bench.Write(&buf, "json", h, imbalancedRows); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Run  map[string]any   `json:"run"`
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Run["mif"] != 10.0 || raw.Run["alpha"] != "p2p" || len(raw.Rows) != 1 || raw.Rows[0]["mif"] != 10.0 ||
		raw.Rows[0]["alpha_us"] != 0.75 || raw.Rows[0]["balanced_us"] != 2.5 ||
		raw.Rows[0]["wait_us"] != 27.25 || raw.Rows[0]["tail_us"] != 3.25 {
		t.Errorf("imbalanced json %+v", raw)
	}

	// No rows is an empty list, not null.
	buf.Reset()
	if err := bench.Write(&buf, "json", sampleHeader, nil); err != nil || !strings.Contains(buf.String(), `"rows": []`) {
		t.Errorf("json of no rows: %v\n%s", err, buf.String())
	}
}

func TestWriteUnknownFormat(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.Write(&buf, "xml", sampleHeader, sampleRows); err == nil {
		t.Error("format xml: no error")
	}
}

// runBench runs bench.Run with cfg on every rank of a local job of n ranks
// and returns every rank's rows.
func runBench(t *testing.T, n int, cfg bench.Config) [][]bench.Row {
	t.Helper()
	comms, err := braid.NewLocal(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows := make([][]bench.Row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[r], errs[r] = bench.Run(ctx, comms[r], cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%v rank %d: %v", cfg.Coll, r, err)
		}
	}
	// Every rank has the same rows.
	for r := 1; r < n; r++ {
		if len(rows[r]) != len(rows[0]) {
			t.Fatalf("%v: rank %d has %d rows, rank 0 %d", cfg.Coll, r, len(rows[r]), len(rows[0]))
		}
		for i, row := range rows[r] {
			a := rows[0][i]
			if row.Bytes != a.Bytes || row.Count != a.Count || row.Iters != a.Iters || row.Correct != a.Correct {
				t.Errorf("%v: rank %d row %+v differs from rank 0's %+v", cfg.Coll, r, row, a)
			}
		}
	}
	return rows
}

func TestRunChecked(t *testing.T) {
	const n = 3
	cases := []struct {
		cfg   bench.Config
		bytes []int64 // the rows' sizes
	}{
		{bench.Config{Coll: sched.Allreduce, MinSize: 4, MaxSize: 1024}, []int64{4, 8, 16, 32, 64, 128, 256, 512, 1024}},
		{bench.Config{Coll: sched.Allreduce, MinSize: 8, MaxSize: 64, InPlace: true, DType: braid.Float64, Op: braid.Max}, []int64{8, 16, 32, 64}},
		{bench.Config{Coll: sched.Allreduce, MinSize: 2, MaxSize: 64, DType: braid.Float16, Op: braid.Avg}, []int64{2, 4, 8, 16, 32, 64}},
		// Allgather of 3 ranks: sizes round down to whole float32 elements
		// per rank, as nccl-tests; 8 B has none per rank and is left out.
		{bench.Config{Coll: sched.Allgather, MinSize: 8, MaxSize: 256}, []int64{12, 24, 60, 120, 252}},
		{bench.Config{Coll: sched.Allgather, MinSize: 16, MaxSize: 64, InPlace: true}, []int64{12, 24, 60}},
		{bench.Config{Coll: sched.ReduceScatter, MinSize: 16, MaxSize: 64, DType: braid.Int32}, []int64{12, 24, 60}},
		{bench.Config{Coll: sched.Alltoall, MinSize: 16, MaxSize: 64}, []int64{12, 24, 60}},
		{bench.Config{Coll: sched.Bcast, MinSize: 4, MaxSize: 256, Root: 1}, []int64{4, 8, 16, 32, 64, 128, 256}},
		{bench.Config{Coll: sched.Reduce, MinSize: 4, MaxSize: 64, Root: 2}, []int64{4, 8, 16, 32, 64}},
		{bench.Config{Coll: sched.Gather, MinSize: 12, MaxSize: 48, Root: 1}, []int64{12, 24, 48}},
		{bench.Config{Coll: sched.Scatter, MinSize: 12, MaxSize: 48, Root: 2}, []int64{12, 24, 48}},
		// Registered buffers (braid.Alloc), in place and not.
		{bench.Config{Coll: sched.ReduceScatter, MinSize: 48 << 10, MaxSize: 96 << 10, Registered: true}, []int64{48 << 10, 96 << 10}},
		{bench.Config{Coll: sched.Allgather, MinSize: 48 << 10, MaxSize: 48 << 10, InPlace: true, Registered: true}, []int64{48 << 10}},
		{bench.Config{Coll: sched.Allreduce, MinSize: 64 << 10, MaxSize: 64 << 10, InPlace: true, Registered: true}, []int64{64 << 10}},
		{bench.Config{Coll: sched.Bcast, MinSize: 4, MaxSize: 8, Registered: true}, []int64{4, 8}},
	}
	for _, tc := range cases {
		cfg := tc.cfg
		cfg.Check, cfg.Iters, cfg.Warmup = true, 2, 1
		rows := runBench(t, n, cfg)[0]
		var got []int64
		for _, row := range rows {
			got = append(got, row.Bytes)
			if row.Correct != "yes" {
				t.Errorf("%v %d B: correct %q, want yes", cfg.Coll, row.Bytes, row.Correct)
			}
			if row.Coll != cfg.Coll.String() || row.Iters != 2 || row.Err != "" {
				t.Errorf("%v row %+v", cfg.Coll, row)
			}
			if eps := 1e-9 * row.MaxUs; row.MinUs > row.AvgUs+eps || row.AvgUs > row.MaxUs+eps || row.MinUs < 0 {
				t.Errorf("%v %d B: latencies min %v avg %v max %v out of order", cfg.Coll, row.Bytes, row.MinUs, row.AvgUs, row.MaxUs)
			}
			want := row.AlgBW * bench.BusFactor(cfg.Coll, n)
			if math.Abs(row.BusBW-want) > 1e-9*math.Max(1, want) {
				t.Errorf("%v %d B: busbw %v, want algbw × factor = %v", cfg.Coll, row.Bytes, row.BusBW, want)
			}
		}
		if !reflect.DeepEqual(got, tc.bytes) {
			t.Errorf("%v (inplace %v): row sizes %v, want %v", cfg.Coll, cfg.InPlace, got, tc.bytes)
		}
	}
}

func TestRunBarrier(t *testing.T) {
	// A barrier has one row of size 0 and nothing to check.
	rows := runBench(t, 3, bench.Config{Coll: sched.Barrier, MinSize: 8, MaxSize: 1 << 20, Check: true, Iters: 3, Warmup: 1})[0]
	if len(rows) != 1 {
		t.Fatalf("barrier: %d rows, want 1: %+v", len(rows), rows)
	}
	r := rows[0]
	if r.Bytes != 0 || r.Count != 0 || r.Iters != 3 || r.Correct == "no" || r.AlgBW != 0 {
		t.Errorf("barrier row %+v", r)
	}
}

func TestRunUnchecked(t *testing.T) {
	var progress []int64
	var mu sync.Mutex
	cfg := bench.Config{Coll: sched.Allreduce, MinSize: 64, MaxSize: 128, Iters: 2, Warmup: -1,
		Progress: func(p bench.Progress) {
			mu.Lock()
			progress = append(progress, p.Size)
			if p.Total != 2 || p.Done != len(progress)-1 || p.Algo != bench.Auto {
				t.Errorf("progress %+v, want Total 2, Done %d, Algo auto", p, len(progress)-1)
			}
			mu.Unlock()
		}}
	rows := runBench(t, 2, cfg)[0]
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Correct != "-" {
			t.Errorf("unchecked row: correct %q, want -", r.Correct)
		}
		if r.Algo != bench.Auto || r.Ran == "" || r.MIF != 0 || r.BalancedUs != 0 {
			t.Errorf("row %+v: want algo auto, the algorithm that ran, no imbalance", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(progress, []int64{64, 128}) {
		t.Errorf("progress reported %v, want [64 128] from rank 0 only", progress)
	}
}

// TestCheckSizes: a range with no size to measure is an error that says
// why, up front, rather than an empty table.
func TestCheckSizes(t *testing.T) {
	for _, tc := range []struct {
		coll   sched.Collective
		d      braid.DType
		lo, hi int64
		n      int
		want   string // "" for no error
	}{
		{sched.Allreduce, braid.Float32, 3, 3, 1, "no size from 3 to 3 (doubling from --min-size) is a whole number of float32 elements (4 B)"},
		{sched.Allreduce, braid.Float64, 4, 4, 2, "of float64 elements (8 B)"},
		{sched.Allreduce, braid.Float32, 3, 12, 1, ""}, // 12 holds three
		{sched.Allreduce, braid.Float32, 4, 4, 1, ""},
		{sched.Allgather, braid.Float32, 4, 8, 4, "holds one float32 element (4 B) per rank on 4 ranks: give a --max-size of 16 or more"},
		{sched.Allgather, braid.Float32, 4, 16, 4, ""},
		{sched.Barrier, braid.Float32, 3, 3, 4, ""},
	} {
		err := bench.CheckSizes(bench.Config{Coll: tc.coll, DType: tc.d, MinSize: tc.lo, MaxSize: tc.hi}, tc.n)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v %v %d-%d on %d ranks: %v, want %q", tc.coll, tc.d, tc.lo, tc.hi, tc.n, err, tc.want)
		}
	}
	// A list of sizes (--sizes) is what to mend, not --min-size or --max-size.
	for _, tc := range []struct {
		coll sched.Collective
		want string
	}{
		{sched.Allreduce, "no size [3 5] is a whole number of float32 elements (4 B): give --sizes that are a multiple of 4"},
		{sched.Allgather, "no size [3 5] holds one float32 element (4 B) per rank on 4 ranks: give --sizes of 16 or more"},
	} {
		err := bench.CheckSizes(bench.Config{Coll: tc.coll, DType: braid.Float32, SizeList: []int64{3, 5}}, 4)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, sizes 3 and 5 on 4 ranks: %v, want %q", tc.coll, err, tc.want)
		}
	}
	// Run says the same.
	comms, err := braid.NewLocal(1, &braid.Options{Tuning: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	if _, err := bench.Run(context.Background(), comms[0], bench.Config{Coll: sched.Allreduce, MinSize: 3, MaxSize: 3}); err == nil || !strings.Contains(err.Error(), "no size") {
		t.Errorf("Run with no size to measure: %v", err)
	}
}
