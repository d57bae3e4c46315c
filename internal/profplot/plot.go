// Package profplot draws the figures of braid prof from a merged profile
// (package profile): the message-size histograms, one panel per call (calls
// over all ranks per bin (2^(n−1), 2^n] bytes, as in Temuçin's thesis,
// "High-Performance Interconnect-Aware MPI Communication for Deep Learning
// Workloads", MASc thesis, Queen's University 2021, figures 3.7–3.10), and
// the share of each rank's wall time spent in each call, stacked per rank
// (its figures 3.5 and 3.6).
//
// Example:
//
//	rep, err := profile.Load([]string{"/tmp/prof"})
//	if err == nil {
//		err = profplot.Histograms(rep, "hist.png")
//	}
package profplot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/profile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// palette is the calls' colours (Okabe and Ito's, safe for colour-blind
// readers), in the order calls first appear.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{86, 180, 233, 255}, color.RGBA{213, 94, 0, 255},
	color.RGBA{240, 228, 66, 255}, color.RGBA{0, 0, 0, 255},
}

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// Histograms draws one bar chart per call of rep: its calls (over all
// ranks) per size bin. path ends in .png or .svg.
func Histograms(rep *profile.Report, path string) error {
	ms := rep.Calls()
	var drawn []*profile.Merged
	for _, m := range ms {
		if m.Calls > 0 {
			drawn = append(drawn, m)
		}
	}
	if len(drawn) == 0 {
		return errors.New("no successful calls to draw")
	}
	cols := min(3, len(drawn))
	rows := (len(drawn) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, m := range drawn {
		p, err := histogram(m, palette[i%len(palette)])
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = p
	}
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] == nil {
				plots[r][c] = plot.New()
				plots[r][c].HideAxes()
			}
		}
	}
	w := vg.Length(cols) * 5 * vg.Inch
	h := vg.Length(rows)*3.6*vg.Inch + 0.5*vg.Inch
	title := fmt.Sprintf("Message sizes: calls over %d ranks per bin (2^(n−1), 2^n] bytes", len(rep.Ranks))
	return write(path, w, h, func(dc draw.Canvas) {
		body := titled(dc, title)
		tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: 0.3 * vg.Inch, PadY: 0.3 * vg.Inch,
			PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(8), PadRight: vg.Points(10)}
		cs := plot.Align(plots, tiles, body)
		for r := range plots {
			for c := range plots[r] {
				plots[r][c].Draw(cs[r][c])
			}
		}
	})
}

func histogram(m *profile.Merged, col color.Color) (*plot.Plot, error) {
	bins := profile.Bins([]*profile.Merged{m})
	vals := make(plotter.Values, len(bins))
	names := make([]string, len(bins))
	top := 0.0
	for i, b := range bins {
		vals[i] = float64(m.Hist[b])
		names[i] = strings.TrimPrefix(profile.BinLabel(b), "≤ ")
		top = math.Max(top, vals[i])
	}
	p := panel()
	p.Title.Text = m.Label
	p.Title.TextStyle.Font = font.From(sans, 12)
	p.X.Label.Text = "bytes (upper end of the bin)"
	p.Y.Label.Text = "calls"
	b, err := plotter.NewBarChart(vals, vg.Points(max(6, min(28, 300/float64(len(vals))))))
	if err != nil {
		return nil, err
	}
	b.Color = col
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalX(names...)
	if len(names) > 6 {
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.X.Min, p.X.Max = -0.75, float64(len(vals))-0.25
	p.Y.Min, p.Y.Max = 0, 1.12*top
	p.Y.Tick.Marker = counts{}
	return p, nil
}

// Shares draws, per rank, the share of its wall time spent in each call,
// stacked. path ends in .png or .svg.
func Shares(rep *profile.Report, path string) error {
	ms := rep.Calls()
	if len(ms) == 0 {
		return errors.New("no calls to draw")
	}
	p := panel()
	p.X.Label.Text = "rank"
	p.Y.Label.Text = "share of the wall time from Init to Close (%)"
	n := len(rep.Ranks)
	names := make([]string, n)
	for i, s := range rep.Ranks {
		names[i] = strconv.Itoa(s.Rank)
	}
	width := vg.Points(max(8, min(40, 500/float64(n))))
	var below *plotter.BarChart
	legend := plot.NewLegend()
	legend.TextStyle.Font = font.From(sans, 10)
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(14)
	total := make([]float64, n)
	for i, m := range ms {
		vals := make(plotter.Values, n)
		for r := range vals {
			vals[r] = 100 * m.Shares[r]
			total[r] += vals[r]
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		legend.Add(m.Label, b)
	}
	top := 0.0
	for _, t := range total {
		top = math.Max(top, t)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.75, float64(n)-0.25
	p.Y.Min, p.Y.Max = 0, 100
	if top > 100 { // calls from several goroutines at once
		p.Y.Max = math.Ceil(1.05*top/10) * 10
	}
	const legendW = 1.8 * vg.Inch
	w := max(6*vg.Inch, vg.Length(n)*0.5*vg.Inch+legendW+1.5*vg.Inch)
	title := fmt.Sprintf("Time in Braid's calls per rank (%d ranks)", n)
	return write(path, w, 5*vg.Inch, func(dc draw.Canvas) {
		body := titled(dc, title)
		lc := draw.Crop(body, body.Max.X-body.Min.X-legendW+vg.Points(12), -vg.Points(6), 0, -vg.Points(12))
		legend.Draw(lc)
		p.Draw(draw.Crop(body, vg.Points(6), -legendW, vg.Points(6), 0))
	})
}

// counts labels an axis of counts with whole numbers.
type counts struct{}

func (counts) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

func panel() *plot.Plot {
	p := plot.New()
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 10.5)
		a.Tick.Label.Font = font.From(sans, 9)
	}
	g := plotter.NewGrid()
	g.Vertical.Width = 0
	g.Horizontal.Color = color.Gray{Y: 220}
	p.Add(g)
	return p
}

// titled writes title at the top of dc on white and returns the rest.
func titled(dc draw.Canvas, title string) draw.Canvas {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	st := draw.TextStyle{Color: color.Black, Font: font.From(sans, 14), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YCenter}
	const band = 0.45 * vg.Inch
	dc.FillText(st, vg.Point{X: dc.Center().X, Y: dc.Max.Y - band/2}, title)
	return draw.Crop(dc, 0, 0, 0, -band)
}

// write draws a w × h figure with drawFn into path, PNG or SVG by its
// extension.
func write(path string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	var c vg.CanvasWriterTo
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	case ".svg":
		c = vgsvg.New(w, h)
	default:
		return fmt.Errorf("%s: want a .png or .svg file", path)
	}
	drawFn(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
