package sim

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
)

// SVGOptions says how WriteSVG draws a timeline. The zero value draws one
// row per link, 1000 pixels wide.
type SVGOptions struct {
	// ByRank draws one row per rank, its outgoing messages above (coloured
	// by destination) and its computations below (grey), instead of one
	// row per link of finite bandwidth that carried data (messages coloured
	// by source rank).
	ByRank bool
	// Width is the width of the time axis in pixels; 0 means 1000.
	Width int
	// Title is drawn above the timeline; empty means a line that gives the
	// total time.
	Title string
}

// ErrNoTimeline is returned by WriteSVG for a Result of a run without
// Config.Timeline.
var ErrNoTimeline = errors.New("sim: result has no timeline (set Config.Timeline)")

const (
	svgLabelW = 170
	svgRowH   = 16
	svgGap    = 3
	svgTop    = 44
	svgBottom = 20
	svgRight  = 80
)

// bar is one rectangle of the timeline; bars of one row and colour closer
// than a pixel are merged.
type bar struct {
	row, lane  int
	colour     string
	start, end float64
	n          int
	what       string
}

// WriteSVG draws res, from a run on net with Config.Timeline set, as an SVG
// timeline: time runs left to right, and each message is a bar from when
// its data began to move to when it arrived (computations likewise). Bars
// of one row and colour less than a pixel apart are drawn as one, so the
// picture stays small however many messages there are. It writes with the
// standard library only.
func WriteSVG(w io.Writer, net *Network, res *Result, opt SVGOptions) error {
	if !res.timeline {
		return ErrNoTimeline
	}
	width := opt.Width
	if width <= 0 {
		width = 1000
	}
	total := res.Time
	if !(total > 0) {
		total = 1e-9
	}
	px := total / float64(width) // seconds per pixel
	links := net.Links()
	nranks := len(res.Finish)

	var labels []string
	var notes []string
	var bars []bar
	if opt.ByRank {
		for r := range nranks {
			labels = append(labels, fmt.Sprintf("rank %d", r))
			notes = append(notes, fmt.Sprintf("%.4g µs", res.Finish[r]*1e6))
		}
		for i := range res.Flows {
			f := &res.Flows[i]
			bars = append(bars, bar{row: f.Src, lane: 0, colour: hue(f.Dst, nranks), start: f.Start, end: f.End, n: 1,
				what: fmt.Sprintf("r%d→r%d tag %d, %d B", f.Src, f.Dst, f.Tag, f.Bytes)})
		}
		for i := range res.Computes {
			c := &res.Computes[i]
			bars = append(bars, bar{row: c.Rank, lane: 1, colour: "#606060", start: c.Start, end: c.End, n: 1,
				what: fmt.Sprintf("%v step %d, %d B", c.Kind, c.Step, c.Bytes)})
		}
	} else {
		rowOf := map[int]int{}
		for id, l := range links {
			if id < len(res.Links) && res.Links[id].Bytes > 0 && !math.IsInf(l.Bandwidth, 1) {
				rowOf[id] = len(labels)
				labels = append(labels, l.Name)
				notes = append(notes, fmt.Sprintf("%.0f%%", 100*res.Links[id].Utilization))
			}
		}
		for i := range res.Flows {
			f := &res.Flows[i]
			for _, id := range f.Route {
				if row, ok := rowOf[id]; ok {
					bars = append(bars, bar{row: row, colour: hue(f.Src, nranks), start: f.Start, end: f.End, n: 1,
						what: fmt.Sprintf("r%d→r%d tag %d, %d B", f.Src, f.Dst, f.Tag, f.Bytes)})
				}
			}
		}
	}
	bars = mergeBars(bars, px)

	height := svgTop + len(labels)*(svgRowH+svgGap) + svgBottom
	fullW := svgLabelW + width + svgRight
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		fullW, height, fullW, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", fullW, height)
	title := opt.Title
	if title == "" {
		title = fmt.Sprintf("simulated: %.4g µs, %d messages, %d bytes", res.Time*1e6, res.Messages, res.Bytes)
	}
	fmt.Fprintf(bw, `<text x="4" y="14" font-size="13">%s</text>`+"\n", html.EscapeString(title))

	// Time axis: ticks at 1, 2 or 5 times a power of ten microseconds.
	axisY := svgTop - 6
	step := niceStep(total / 8)
	fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", svgLabelW, axisY, svgLabelW+width, axisY)
	for t := 0.0; t <= total*(1+1e-9); t += step {
		x := float64(svgLabelW) + t/px
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`+"\n", x, axisY, x, height-svgBottom)
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, axisY-4, fmtMicros(t))
	}
	fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="end">µs</text>`+"\n", fullW-4, axisY-4)

	for i, l := range labels {
		y := svgTop + i*(svgRowH+svgGap)
		fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLabelW-6, y+svgRowH-4, html.EscapeString(l))
		fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", svgLabelW, y, width, svgRowH)
		fmt.Fprintf(bw, `<text x="%d" y="%d">%s</text>`+"\n", svgLabelW+width+4, y+svgRowH-4, html.EscapeString(notes[i]))
	}
	for _, b := range bars {
		y := svgTop + b.row*(svgRowH+svgGap)
		h := svgRowH
		if opt.ByRank {
			h = svgRowH / 2
			y += b.lane * h
		}
		x := float64(svgLabelW) + b.start/px
		wd := max((b.end-b.start)/px, 0.5)
		what := b.what
		if b.n > 1 {
			what = fmt.Sprintf("%d bars", b.n)
		}
		fmt.Fprintf(bw, `<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s: %s to %s µs</title></rect>`+"\n",
			x, y, wd, h, b.colour, html.EscapeString(what), fmtMicros(b.start), fmtMicros(b.end))
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// mergeBars sorts bars by row, lane, colour and start and joins those of
// the same row, lane and colour that overlap or lie less than gap apart.
func mergeBars(bars []bar, gap float64) []bar {
	slices.SortStableFunc(bars, func(a, b bar) int {
		return cmp.Or(cmp.Compare(a.row, b.row), cmp.Compare(a.lane, b.lane), cmp.Compare(a.colour, b.colour), cmp.Compare(a.start, b.start))
	})
	var out []bar
	for _, b := range bars {
		if k := len(out) - 1; k >= 0 && out[k].row == b.row && out[k].lane == b.lane && out[k].colour == b.colour && b.start <= out[k].end+gap {
			out[k].end = max(out[k].end, b.end)
			out[k].n += b.n
			continue
		}
		out = append(out, b)
	}
	return out
}

// hue returns a colour for index i of n, spread around the colour wheel.
func hue(i, n int) string {
	h := math.Mod(float64(i)*137.508, 360)
	return fmt.Sprintf("hsl(%.0f,65%%,50%%)", h)
}

// niceStep returns 1, 2 or 5 times a power of ten, at least x.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// fmtMicros formats seconds as microseconds.
func fmtMicros(t float64) string { return fmt.Sprintf("%.4g", t*1e6) }

// WriteTrace writes res's timeline (a run with Config.Timeline) as text,
// one line per message and per computation, in order of start time (ties:
// messages first, then by source rank and step), times in microseconds:
//
//	flow SRC DST CHANNEL TAG BYTES POSTED HEAD START END
//	compute RANK STEP KIND BYTES START END
func WriteTrace(w io.Writer, res *Result) error {
	if !res.timeline {
		return ErrNoTimeline
	}
	type line struct {
		start      float64
		kind, rank int
		step       int
		text       string
	}
	var lines []line
	for _, f := range res.Flows {
		lines = append(lines, line{f.Start, 0, f.Src, f.SendStep, fmt.Sprintf("flow %d %d %d %d %d %.4f %.4f %.4f %.4f",
			f.Src, f.Dst, f.Channel, f.Tag, f.Bytes, f.Posted*1e6, f.Head*1e6, f.Start*1e6, f.End*1e6)})
	}
	for _, c := range res.Computes {
		lines = append(lines, line{c.Start, 1, c.Rank, c.Step, fmt.Sprintf("compute %d %d %v %d %.4f %.4f",
			c.Rank, c.Step, c.Kind, c.Bytes, c.Start*1e6, c.End*1e6)})
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.kind, b.kind), cmp.Compare(a.rank, b.rank), cmp.Compare(a.step, b.step))
	})
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# time %.4f us, %d messages, %d bytes\n", res.Time*1e6, res.Messages, res.Bytes)
	fmt.Fprintln(bw, "# flow SRC DST CHANNEL TAG BYTES POSTED HEAD START END (us)")
	fmt.Fprintln(bw, "# compute RANK STEP KIND BYTES START END (us)")
	for _, l := range lines {
		fmt.Fprintln(bw, l.text)
	}
	return bw.Flush()
}
