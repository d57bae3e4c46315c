package benchplot

import (
	"bytes"
	"encoding/xml"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/sched"
	"gonum.org/v1/plot/vg"
)

var header = bench.Header{Coll: "allreduce", DType: "float32", Op: "sum", Transport: "shm", Ranks: 4, Hosts: 1}

// sweep returns rows of runs algos at sizes 8 B to 16 MiB, interleaved by
// size as bench.Run returns them; run i's latency is (i+1) µs + 1 µs per KiB.
func sweep(algos []string, mif float64) []bench.Row {
	var rows []bench.Row
	for _, size := range bench.Sizes(8, 16<<20) {
		for i, a := range algos {
			lat := float64(i+1) + float64(size)/1024
			r := bench.Row{Coll: "allreduce", Algo: a, Ran: a, Bytes: size, AvgUs: lat, MinUs: lat, MaxUs: lat}
			r.AlgBW = float64(size) / (lat * 1e3)
			r.BusBW = r.AlgBW * bench.BusFactor(sched.Allreduce, 4)
			if mif > 0 {
				r.MIF, r.BalancedUs = mif, lat/3
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func TestNew(t *testing.T) {
	algos := []string{"rabenseifner", "recdouble", "ring", bench.Auto}
	rows := sweep(algos, 0)
	f, err := New(header, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Series) != len(algos) {
		t.Fatalf("%d series, want one per algorithm: %d", len(f.Series), len(algos))
	}
	nsizes := len(bench.Sizes(8, 16<<20))
	for i, s := range f.Series {
		if s.Label != algos[i] || len(s.Bytes) != nsizes || len(s.AvgUs) != nsizes || len(s.BusBW) != nsizes || s.BalancedUs != nil {
			t.Errorf("series %d: %s with %d sizes, want %s with %d", i, s.Label, len(s.Bytes), algos[i], nsizes)
		}
		if s.Bytes[0] != 8 || s.Bytes[nsizes-1] != 16<<20 || s.AvgUs[0] != float64(i+1)+8.0/1024 {
			t.Errorf("series %s: sizes %v, latencies %v", s.Label, s.Bytes, s.AvgUs)
		}
	}
	if f.BusFormat != "2(n−1)/n" {
		t.Errorf("allreduce busbw factor %q", f.BusFormat)
	}
	for _, want := range []string{"allreduce", "4 ranks on 1 host", "shm", "float32 sum"} {
		if !strings.Contains(f.Title, want) {
			t.Errorf("title %q lacks %q", f.Title, want)
		}
	}
	if _, err := New(header, nil); err == nil {
		t.Error("New of no rows: no error")
	}
}

func TestTitle(t *testing.T) {
	h := bench.Header{Coll: "bcast", DType: "bfloat16", Transport: "tcp", Ranks: 8, Hosts: 2, InPlace: true, MIF: 10}
	got := Title(h)
	want := "bcast · 8 ranks on 2 hosts · tcp · bfloat16 · in place · imbalance MIF 10"
	if got != want {
		t.Errorf("Title = %q, want %q", got, want)
	}
	for coll, want := range map[string]string{"allreduce": "2(n−1)/n", "allgather": "(n−1)/n", "reducescatter": "(n−1)/n", "bcast": "1", "reduce": "1"} {
		if got := busFormat(coll); got != want {
			t.Errorf("busFormat(%s) = %q, want %q", coll, got, want)
		}
	}
}

// TestBuildLines checks the data given to the plotter: one line per run in
// each panel (the planner's last, on top), plus a dotted balanced line per
// run in the latency panel with imbalance.
func TestBuildLines(t *testing.T) {
	algos := []string{bench.Auto, "recdouble", "ring"}
	for _, mif := range []float64{0, 10} {
		f, err := New(header, sweep(algos, mif))
		if err != nil {
			t.Fatal(err)
		}
		ps, err := f.build()
		if err != nil {
			t.Fatal(err)
		}
		if len(ps.plots) != 1 || len(ps.plots[0]) != 2 || len(ps.titles) != 2 {
			t.Fatalf("%d×%d panels, want latency and bandwidth side by side", len(ps.plots), len(ps.plots[0]))
		}
		wantLat := len(algos)
		if mif > 0 {
			wantLat *= 2
		}
		if len(ps.lines[0]) != wantLat || len(ps.lines[1]) != len(algos) {
			t.Fatalf("MIF %v: %d latency and %d bandwidth lines, want %d and %d", mif, len(ps.lines[0]), len(ps.lines[1]), wantLat, len(algos))
		}
		// Order of drawing: recdouble, ring, then auto on top.
		bw := ps.lines[1]
		for i, want := range []float64{2, 3, 1} {
			x, y := bw[i].XYs[0].X, f.Series[int(want)-1].BusBW[0]
			if x != 8 || bw[i].XYs[0].Y != y {
				t.Errorf("bandwidth line %d starts at (%v, %v), want (8, %v)", i, x, bw[i].XYs[0].Y, y)
			}
			if len(bw[i].XYs) != len(f.Series[0].Bytes) {
				t.Errorf("bandwidth line %d has %d points", i, len(bw[i].XYs))
			}
		}
		if c := bw[2].Color; c != color.Black || len(bw[2].Dashes) == 0 {
			t.Errorf("auto's line: color %v dashes %v, want black and dashed", c, bw[2].Dashes)
		}
		if bw[0].Color == bw[1].Color {
			t.Error("two algorithms share a color")
		}
		// Latencies from 1.008 µs to 16387 µs: the axis starts at the
		// decade below, within half a decade, and ends at the data (1e5 is
		// too far). The balanced ones start at 0.336 µs, too far from 0.1.
		lo := 1.0
		if mif > 0 {
			lo = (1 + 8.0/1024) / 3
		}
		if y := ps.plots[0][0].Y; y.Min != lo || y.Max != 16387 {
			t.Errorf("MIF %v: latency axis [%v, %v], want [%v, 16387]", mif, y.Min, y.Max, lo)
		}
	}
}

// TestWritePNG draws a real PNG and finds every run's color in it.
func TestWritePNG(t *testing.T) {
	algos := []string{"rabenseifner", "recdouble", "ring", bench.Auto}
	f, err := New(header, sweep(algos, 0))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.png")
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	img, err := png.Decode(file)
	if err != nil {
		t.Fatal(err)
	}
	wantW, wantH := math.Round(float64(width/vg.Inch)*dpi), math.Round(float64(height/vg.Inch)*dpi)
	if b := img.Bounds(); float64(b.Dx()) != wantW || float64(b.Dy()) != wantH {
		t.Errorf("image %v, want %.0f×%.0f", b, wantW, wantH)
	}
	want := map[color.RGBA]int{}
	for i := range algos[:3] {
		want[palette[i].(color.RGBA)] = 0
	}
	black := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}
			if _, ok := want[c]; ok {
				want[c]++
			}
			if c == (color.RGBA{0, 0, 0, 255}) {
				black++
			}
		}
	}
	for c, n := range want {
		// Two lines with markers and a legend entry: hundreds of pixels.
		if n < 200 {
			t.Errorf("color %v: %d pixels, want a line of it", c, n)
		}
	}
	if black < 1000 {
		t.Errorf("%d black pixels: no text or auto line", black)
	}
	if err := f.Write(filepath.Join(t.TempDir(), "out.pdf")); err == nil || !strings.Contains(err.Error(), ".png or .svg") {
		t.Errorf("Write(out.pdf): %v, want an error naming the formats", err)
	}
}

// TestWriteSVG draws an SVG: well-formed XML with the title, the axis
// labels and every run in the legend.
func TestWriteSVG(t *testing.T) {
	algos := []string{"recdouble", "ring", bench.Auto}
	f, err := New(header, sweep(algos, 5))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.Encode(&buf, "svg"); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	var texts []string
	paths := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "path" {
				paths++
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{f.Title, "latency (µs, log scale)", "bus bandwidth (GB/s)", "message size (bytes, log2 scale)",
		"recdouble", "ring", "auto (planner)", "dotted: balanced", "16M", "1K"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
	if paths < 20 {
		t.Errorf("SVG has %d paths, want lines, markers and axes", paths)
	}
	if err := f.Encode(&buf, "gif"); err == nil {
		t.Error("Encode gif: no error")
	}
}

// TestBarrierBars: a barrier has one size, 0 B; the figure is one bar per
// run.
func TestBarrierBars(t *testing.T) {
	rows := []bench.Row{{Coll: "barrier", Algo: "dissemination", AvgUs: 3}, {Coll: "barrier", Algo: bench.Auto, Ran: "dissemination", AvgUs: 3.2}}
	h := header
	h.Coll, h.Op = "barrier", ""
	f, err := New(h, rows)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := f.build()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.plots[0]) != 1 || len(ps.lines[0]) != 0 {
		t.Errorf("barrier: %d panels, %d lines; want one bar chart", len(ps.plots[0]), len(ps.lines[0]))
	}
	var names []string
	for _, tk := range ps.plots[0][0].X.Tick.Marker.Ticks(0, 1) {
		names = append(names, tk.Label)
	}
	if got := strings.Join(names, ","); got != "dissemination,auto (dissemination)" {
		t.Errorf("bars named %q", got)
	}
	if strings.Contains(f.Title, "float32") {
		t.Errorf("barrier title %q names a dtype", f.Title)
	}
	var buf bytes.Buffer
	if err := f.Encode(&buf, "png"); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Fatal(err)
	}
}

func TestTicks(t *testing.T) {
	labels := func(ts []string) string { return strings.Join(ts, " ") }
	var got []string
	for _, tk := range (pow2Ticks{}).Ticks(8, 16<<20) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if want := "16 64 256 1K 4K 16K 64K 256K 1M 4M 16M"; labels(got) != want {
		t.Errorf("size labels %q, want %q", labels(got), want)
	}
	got = nil
	for _, tk := range (logTicks{}).Ticks(1, 1000) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if want := "1 2 5 10 20 50 100 200 500 1000"; labels(got) != want {
		t.Errorf("latency labels %q, want %q", labels(got), want)
	}
	got = nil
	for _, tk := range (logTicks{}).Ticks(0.1, 1e6) {
		if tk.Label != "" {
			got = append(got, tk.Label)
		}
	}
	if want := "0.1 1 10 100 1000 10000 100000 1e+06"; labels(got) != want {
		t.Errorf("latency labels %q, want %q", labels(got), want)
	}
}
