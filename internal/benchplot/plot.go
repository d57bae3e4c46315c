package benchplot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/internal/bench"
	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one line of a figure: one run's results by increasing size.
type Series struct {
	Label      string    // the run: an algorithm name, or auto
	Ran        []string  // the algorithm that ran at each size
	Bytes      []int64   // sizes
	AvgUs      []float64 // average latency over ranks, µs
	BusBW      []float64 // bus bandwidth, GB/s
	BalancedUs []float64 // with imbalance: the latency without it, µs; else nil
}

// Figure is a benchmark's picture: latency and bus bandwidth against size,
// one line per run.
type Figure struct {
	Title     string   // the collective, ranks, hosts, transport, dtype
	Coll      string   // the collective
	BusFormat string   // busbw's factor over algbw, as nccl-tests: "2(n−1)/n", "(n−1)/n", "1"
	MIF       float64  // the imbalance factor of the run, 0 if none
	Series    []Series // in the order the runs first appear in the rows
}

// New builds the figure of a benchmark's rows: one series per run
// (Row.Algo), in the order the runs first appear.
func New(h bench.Header, rows []bench.Row) (*Figure, error) {
	if len(rows) == 0 {
		return nil, errors.New("plot: no results to draw")
	}
	f := &Figure{Title: Title(h), Coll: h.Coll, BusFormat: busFormat(h.Coll), MIF: h.MIF}
	index := map[string]int{}
	for _, r := range rows {
		label := r.Algo
		if label == "" {
			label = r.Ran
		}
		if label == "" {
			label = h.Coll
		}
		i, ok := index[label]
		if !ok {
			i = len(f.Series)
			index[label] = i
			f.Series = append(f.Series, Series{Label: label})
		}
		s := &f.Series[i]
		s.Ran = append(s.Ran, r.Ran)
		s.Bytes = append(s.Bytes, r.Bytes)
		s.AvgUs = append(s.AvgUs, r.AvgUs)
		s.BusBW = append(s.BusBW, r.BusBW)
		if r.MIF > 0 {
			s.BalancedUs = append(s.BalancedUs, r.BalancedUs)
		}
	}
	for _, s := range f.Series {
		if len(s.BalancedUs) != 0 && len(s.BalancedUs) != len(s.Bytes) {
			return nil, fmt.Errorf("plot: run %s has balanced latencies for some sizes only", s.Label)
		}
	}
	return f, nil
}

// Title describes a run as the figure's title does:
// "allreduce · 4 ranks on 1 host · shm · float32 sum".
func Title(h bench.Header) string {
	parts := []string{h.Coll}
	ranks := fmt.Sprintf("%d ranks on %d host", h.Ranks, h.Hosts)
	if h.Ranks == 1 {
		ranks = fmt.Sprintf("1 rank on %d host", h.Hosts)
	}
	if h.Hosts != 1 {
		ranks += "s"
	}
	parts = append(parts, ranks)
	if h.Transport != "" {
		parts = append(parts, h.Transport)
	}
	if h.Coll != "barrier" { // which moves no data
		parts = append(parts, strings.TrimSpace(h.DType+" "+h.Op))
	}
	if h.InPlace {
		parts = append(parts, "in place")
	}
	if h.Algo != "" {
		parts = append(parts, "algo "+h.Algo)
	}
	if h.MIF > 0 {
		parts = append(parts, "imbalance MIF "+strconv.FormatFloat(h.MIF, 'g', -1, 64))
	}
	return strings.Join(parts, " · ")
}

// busFormat is nccl-tests' busbw factor for a collective, as a formula.
func busFormat(coll string) string {
	switch coll {
	case "allreduce":
		return "2(n−1)/n"
	case "allgather", "reducescatter", "alltoall", "gather", "scatter":
		return "(n−1)/n"
	}
	return "1"
}

// Write draws f into path: PNG or SVG by its extension.
func (f *Figure) Write(path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file", path)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Encode(out, format); err != nil {
		out.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return out.Close()
}

// Figure size and resolution.
const (
	width  = 13 * vg.Inch
	height = 5.2 * vg.Inch
	dpi    = 120
)

// sans is the figure's typeface.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// textStyle returns the figure's text style at size points.
func textStyle(size vg.Length) draw.TextStyle {
	return draw.TextStyle{Color: color.Black, Font: font.From(sans, size), Handler: plot.DefaultTextHandler}
}

// Encode draws f as "png" or "svg" to w.
func (f *Figure) Encode(w io.Writer, format string) error {
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("format %q: want png or svg", format)
	}
	if err := f.draw(draw.New(c)); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

// panels are the plots of a figure, with the lines drawn in each (for
// tests: the data given to the plotter), and the legend.
type panels struct {
	plots  [][]*plot.Plot
	titles []string          // per plot
	lines  [][]*plotter.Line // per plot, every line added
	legend *plot.Legend      // nil: none
}

// draw draws f on dc: the title on a band at the top, the legend on a band
// at the right, the panels in between.
func (f *Figure) draw(dc draw.Canvas) error {
	ps, err := f.build()
	if err != nil {
		return err
	}
	const band = 0.5 * vg.Inch
	bg := dc
	bg.SetColor(color.White)
	bg.Fill(bg.Rectangle.Path())
	title := textStyle(15)
	title.XAlign, title.YAlign = draw.XCenter, draw.YCenter
	title.Font.Weight = xfont.WeightBold
	dc.FillText(title, vg.Point{X: dc.Center().X, Y: dc.Max.Y - band/2}, f.Title)
	var legendW vg.Length
	if ps.legend != nil {
		r := ps.legend.Rectangle(dc)
		legendW = min(max(r.Max.X-r.Min.X+vg.Points(24), 1.3*vg.Inch), 3.2*vg.Inch)
		head := textStyle(11)
		head.Font.Weight = xfont.WeightBold
		head.YAlign = draw.YTop
		lc := draw.Crop(dc, dc.Max.X-dc.Min.X-legendW, 0, 0, -band-vg.Points(24))
		lc.FillText(head, vg.Point{X: lc.Min.X, Y: lc.Max.Y}, "algorithm")
		ps.legend.Draw(draw.Crop(lc, 0, 0, 0, -vg.Points(18)))
	}
	// The panels' titles go on a band of their own, centred over the data
	// areas (which Align lines up), not over the tiles.
	const titleBand = 0.15 * vg.Inch
	body := draw.Crop(dc, 0, -legendW, 0, -band-titleBand)
	tiles := draw.Tiles{Rows: 1, Cols: len(ps.plots[0]), PadX: 0.45 * vg.Inch,
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(8), PadRight: vg.Points(10)}
	cs := plot.Align(ps.plots, tiles, body)
	sub := textStyle(12)
	sub.XAlign, sub.YAlign = draw.XCenter, draw.YCenter
	for i, p := range ps.plots[0] {
		p.Draw(cs[0][i])
		da := p.DataCanvas(cs[0][i])
		dc.FillText(sub, vg.Point{X: da.Center().X, Y: da.Max.Y + vg.Points(14)}, ps.titles[i])
	}
	return nil
}

// build makes the panels: latency and bus bandwidth against size, or, when
// every row has size 0 (barrier), one bar chart of latency per run.
func (f *Figure) build() (*panels, error) {
	sized := false
	for _, s := range f.Series {
		for _, b := range s.Bytes {
			if b > 0 {
				sized = true
			}
		}
	}
	if !sized {
		return f.bars()
	}
	lat, bw := newPanel(), newPanel()
	lat.Y.Label.Text = "latency (µs, log scale)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = logTicks{}
	bw.Y.Label.Text = "bus bandwidth (GB/s)"
	bw.Y.Min = 0
	for _, p := range []*plot.Plot{lat, bw} {
		p.X.Label.Text = "message size (bytes, log2 scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = pow2Ticks{}
	}
	legend := plot.NewLegend()
	legend.TextStyle = textStyle(10.5)
	legend.ThumbnailWidth = vg.Points(28)
	legend.Padding = vg.Points(5)
	legend.Top, legend.Left = true, true
	ps := &panels{plots: [][]*plot.Plot{{lat, bw}}, lines: make([][]*plotter.Line, 2), legend: &legend,
		titles: []string{"Latency (mean over ranks)", "Bus bandwidth (algbw × " + f.BusFormat + ", slowest rank)"}}
	// The planner's choice is drawn last, on top, dashed, so that it shows
	// which algorithm it follows at each size.
	order := make([]int, 0, len(f.Series))
	for i, s := range f.Series {
		if s.Label != bench.Auto {
			order = append(order, i)
		}
	}
	for i, s := range f.Series {
		if s.Label == bench.Auto {
			order = append(order, i)
		}
	}
	hasBalanced := false
	for k, i := range order {
		s := f.Series[i]
		st := styleOf(k, s.Label)
		label := s.Label
		if s.Label == bench.Auto {
			label = "auto (planner)"
		}
		l, err := st.add(lat, xys(s.Bytes, s.AvgUs, true))
		if err != nil {
			return nil, err
		}
		ps.lines[0] = append(ps.lines[0], l)
		legend.Add(label, st.thumbs(l)...)
		if l, err = st.add(bw, xys(s.Bytes, s.BusBW, false)); err != nil {
			return nil, err
		}
		ps.lines[1] = append(ps.lines[1], l)
		if len(s.BalancedUs) > 0 {
			hasBalanced = true
			bl, err := plotter.NewLine(xys(s.Bytes, s.BalancedUs, true))
			if err != nil {
				return nil, err
			}
			bl.Color = st.color
			bl.Width = vg.Points(1.2)
			bl.Dashes = balancedDashes
			lat.Add(bl)
			ps.lines[0] = append(ps.lines[0], bl)
		}
	}
	if hasBalanced {
		key, _ := plotter.NewLine(plotter.XYs{})
		key.Color = color.Gray{Y: 80}
		key.Width = vg.Points(1.2)
		key.Dashes = balancedDashes
		legend.Add("dotted: balanced", key)
	}
	snap(lat, f.Series)
	// Headroom, so that the highest line does not run along the frame.
	bw.Y.Max *= 1.06
	return ps, nil
}

// snap widens a log axis of latencies to the decade below and above the
// data where that adds at most half a decade, so that both ends are
// labelled.
func snap(p *plot.Plot, series []Series) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, vs := range [][]float64{s.AvgUs, s.BalancedUs} {
			for _, v := range vs {
				if v > 0 && !math.IsInf(v, 0) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
	}
	if lo > hi {
		return
	}
	if d := math.Pow(10, math.Floor(math.Log10(lo))); lo/d <= math.Sqrt(10) {
		p.Y.Min = d
	}
	if d := math.Pow(10, math.Ceil(math.Log10(hi))); d/hi <= math.Sqrt(10) {
		p.Y.Max = d
	}
}

// balancedDashes draws the balanced latencies of an imbalanced run.
var balancedDashes = []vg.Length{vg.Points(1.5), vg.Points(2.5)}

// bars draws one latency bar per run: a barrier has no size to draw
// against.
func (f *Figure) bars() (*panels, error) {
	p := newPanel()
	p.Y.Label.Text = "latency (µs)"
	p.Y.Min = 0
	vals := make(plotter.Values, len(f.Series))
	names := make([]string, len(f.Series))
	for i, s := range f.Series {
		if len(s.AvgUs) > 0 {
			vals[i] = s.AvgUs[0]
		}
		names[i] = s.Label
		if len(s.Ran) > 0 {
			names[i] = bench.AlgoCell(bench.Row{Algo: s.Label, Ran: s.Ran[0]})
		}
	}
	b, err := plotter.NewBarChart(vals, vg.Points(48))
	if err != nil {
		return nil, err
	}
	b.Color = palette[0]
	b.LineStyle.Width = 0
	p.Add(b)
	// Each bar's value above it.
	top := 0.0
	var at plotter.XYs
	var text []string
	for i, v := range vals {
		top = math.Max(top, v)
		at = append(at, plotter.XY{X: float64(i), Y: v})
		text = append(text, strconv.FormatFloat(v, 'f', 2, 64)+" µs")
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: text})
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i] = textStyle(10)
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.Offset = vg.Point{Y: vg.Points(4)}
	}
	p.Add(labels)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.75, float64(len(vals))-0.25
	p.Y.Max = 1.2 * top
	return &panels{plots: [][]*plot.Plot{{p}}, lines: [][]*plotter.Line{nil}, titles: []string{"Latency (mean over ranks)"}}, nil
}

func newPanel() *plot.Plot {
	p := plot.New()
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 11)
		a.Tick.Label.Font = font.From(sans, 9.5)
		a.Label.Padding = vg.Points(4)
	}
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	return p
}

// xys pairs sizes with values, leaving out points a log scale cannot show.
func xys(bytes []int64, v []float64, logY bool) plotter.XYs {
	var out plotter.XYs
	for i, b := range bytes {
		y := v[i]
		if b <= 0 || math.IsNaN(y) || math.IsInf(y, 0) || (logY && y <= 0) {
			continue
		}
		out = append(out, plotter.XY{X: float64(b), Y: y})
	}
	return out
}

// palette is a set of colors that stay apart on screen and in print
// (Tableau 10).
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // blue
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // orange
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // green
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, // red
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // purple
	color.RGBA{0x8c, 0x56, 0x4b, 0xff}, // brown
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, // pink
	color.RGBA{0x17, 0xbe, 0xcf, 0xff}, // cyan
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, // olive
	color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, // gray
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.PyramidGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
}

// style is how one series is drawn.
type style struct {
	color  color.Color
	glyph  draw.GlyphDrawer // nil: no markers
	dashes []vg.Length
	width  vg.Length
}

// styleOf returns the k-th series' style; the planner's choice is black
// and dashed, without markers.
func styleOf(k int, label string) style {
	if label == bench.Auto {
		return style{color: color.Black, dashes: []vg.Length{vg.Points(5), vg.Points(3)}, width: vg.Points(1.8)}
	}
	return style{color: palette[k%len(palette)], glyph: glyphs[k%len(glyphs)], width: vg.Points(1.8)}
}

// add draws xy on p in s's style and returns the line.
func (s style) add(p *plot.Plot, xy plotter.XYs) (*plotter.Line, error) {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width, l.Dashes = s.color, s.width, s.dashes
	p.Add(l)
	if s.glyph != nil {
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: s.color, Radius: vg.Points(2.6), Shape: s.glyph}
		p.Add(sc)
	}
	return l, nil
}

// thumbs returns the legend thumbnails of a series drawn as l.
func (s style) thumbs(l *plotter.Line) []plot.Thumbnailer {
	t := []plot.Thumbnailer{l}
	if s.glyph != nil {
		sc, _ := plotter.NewScatter(plotter.XYs{})
		sc.GlyphStyle = draw.GlyphStyle{Color: s.color, Radius: vg.Points(2.6), Shape: s.glyph}
		t = append(t, sc)
	}
	return t
}

// pow2Ticks marks every power of two in range and labels evenly spaced
// ones with binary suffixes (8, 1K, 64M), at most about a dozen.
type pow2Ticks struct{}

func (pow2Ticks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= 0 || max < min {
		return nil
	}
	lo, hi := int(math.Ceil(math.Log2(min)-1e-9)), int(math.Floor(math.Log2(max)+1e-9))
	step := 1
	for (hi-lo)/step+1 > 12 {
		step++
	}
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		t := plot.Tick{Value: math.Ldexp(1, e)}
		if e%step == 0 || (lo == hi) {
			t.Label = bench.FormatSize(int64(t.Value))
			if e < 0 {
				t.Label = strconv.FormatFloat(t.Value, 'g', -1, 64)
			}
		}
		ticks = append(ticks, t)
	}
	if len(ticks) < 2 {
		// A range within one power of two: label its ends.
		ticks = append(ticks, plot.Tick{Value: min, Label: bench.FormatSize(int64(min))}, plot.Tick{Value: max, Label: bench.FormatSize(int64(max))})
	}
	return ticks
}

// logTicks labels the decades of a log axis, and also 2× and 5× when the
// range spans less than two decades; minor ticks mark the other digits.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max <= 0 || max < min {
		return nil
	}
	lo, hi := math.Floor(math.Log10(min)), math.Ceil(math.Log10(max))
	dense := math.Log10(max/min) <= 3
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		dec := math.Pow(10, e)
		for d := 1; d <= 9; d++ {
			v := dec * float64(d)
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if d == 1 || (dense && (d == 2 || d == 5)) {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
				if v >= 1e6 {
					t.Label = strconv.FormatFloat(v, 'g', 3, 64)
				}
			}
			ticks = append(ticks, t)
		}
	}
	labelled := 0
	for _, t := range ticks {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 {
		// Too narrow a range for round labels: label the ends.
		ticks = append(ticks, plot.Tick{Value: min, Label: strconv.FormatFloat(min, 'g', 3, 64)}, plot.Tick{Value: max, Label: strconv.FormatFloat(max, 'g', 3, 64)})
	}
	return ticks
}
