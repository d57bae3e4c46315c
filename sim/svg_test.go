package sim_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// ring5 simulates algo's ring allreduce on 5 ranks, two hosts, with
// reductions, copies and overhead, and a timeline.
func ring5(t *testing.T) (*sim.Network, *sim.Result) {
	m := cost.Default()
	p := sched.Params{Coll: sched.Allreduce, NRanks: 5, Count: 5 * 1000, Layout: &sched.Layout{Host: []int{0, 0, 0, 1, 1}}}
	net, err := sim.FromModel(m, p.Layout, p.NRanks, sim.SharedNIC)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), p, schedule(t, "ring", p), net,
		sim.Config{Gamma: m.Gamma, CopyBandwidth: 5e9, StepOverhead: 1e-7, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	return net, res
}

// TestTraceGolden compares the trace of the ring on 5 ranks with
// testdata/ring5.trace (go test -run TraceGolden -update rewrites it).
func TestTraceGolden(t *testing.T) {
	_, res := ring5(t)
	var b bytes.Buffer
	if err := sim.WriteTrace(&b, res); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "ring5.trace")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("trace differs from %s (rerun with -update if the change is intended):\n%s", path, got)
	}
}

func TestSVG(t *testing.T) {
	net, res := ring5(t)
	for _, byRank := range []bool{false, true} {
		var b bytes.Buffer
		if err := sim.WriteSVG(&b, net, res, sim.SVGOptions{ByRank: byRank, Title: "ring <5>"}); err != nil {
			t.Fatal(err)
		}
		rects, texts := 0, []string{}
		d := xml.NewDecoder(&b)
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("by rank %v: not well-formed XML: %v", byRank, err)
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				if tok.Name.Local == "rect" {
					rects++
				}
			case xml.CharData:
				texts = append(texts, string(tok))
			}
		}
		all := strings.Join(texts, "|")
		want := []string{"ring <5>", "h0 up", "h1 down", "r0->r1", "r3->r4"}
		if byRank {
			want = []string{"ring <5>", "rank 0", "rank 4", "recvreduce step"}
		}
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("by rank %v: no %q in the text", byRank, w)
			}
		}
		// A background, a row per link or rank, and bars.
		if rects < 10 {
			t.Errorf("by rank %v: only %d rects", byRank, rects)
		}
	}
	empty := []sched.Program{{Rank: 0}, {Rank: 1}}
	res2, err := sim.Run(context.Background(), sched.Params{Coll: sched.Barrier, NRanks: 2}, empty, sim.NewNetwork(2), sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.WriteSVG(io.Discard, sim.NewNetwork(2), res2, sim.SVGOptions{}); !errors.Is(err, sim.ErrNoTimeline) {
		t.Errorf("no timeline: err = %v", err)
	}
}
