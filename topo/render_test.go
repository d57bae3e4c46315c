package topo_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/topo"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with the file testdata/name; go test -update
// rewrites it.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what is written now (run go test -update if the change is intended):\n%s", path, got)
	}
}

// TestGolden checks the text, DOT and JSON renderings of two presets
// against testdata; the JSON files double as examples of the format that
// BRAID_TOPO reads.
func TestGolden(t *testing.T) {
	for _, tp := range []*topo.Topology{topo.DGX1V100(), topo.Mist()} {
		var txt, dot, js bytes.Buffer
		if err := tp.WriteText(&txt); err != nil {
			t.Fatal(err)
		}
		if err := tp.WriteDOT(&dot); err != nil {
			t.Fatal(err)
		}
		if err := tp.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		golden(t, tp.Name+".txt", txt.Bytes())
		golden(t, tp.Name+".dot", dot.Bytes())
		golden(t, tp.Name+".json", js.Bytes())
	}
}

// TestDOT checks the structure of the DOT output of a cluster: one
// cluster per host, every device, and one edge per duplex pair.
func TestDOT(t *testing.T) {
	c, err := topo.Cluster("dgx2", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := c.WriteDOT(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "digraph \"2xdgx2\" {") || !strings.HasSuffix(out, "}\n") {
		t.Errorf("not a digraph:\n%.200s", out)
	}
	if n := strings.Count(out, "subgraph cluster_"); n != 2 {
		t.Errorf("%d host clusters", n)
	}
	for _, d := range c.Devices {
		if !strings.Contains(out, "\""+d.ID+"\" [shape=") {
			t.Errorf("device %s missing", d.ID)
		}
	}
	edges := strings.Count(out, " -> ")
	both := strings.Count(out, "dir=both")
	if edges-both+2*both != len(c.Links) {
		t.Errorf("%d edges (%d duplex) for %d links", edges, both, len(c.Links))
	}
}

// TestTextLinkCount: the summary counts the links as the text lists them,
// a duplex pair once (it said "3 links" above two lines).
func TestTextLinkCount(t *testing.T) {
	for _, name := range []string{"dgx1-v100", "mist", "2xdgx1-p100"} {
		tp, err := topo.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		text := tp.String()
		head, rest, _ := strings.Cut(text, "\nlinks\n")
		body, _, _ := strings.Cut(rest, "gpu paths\n")
		lines := strings.Count(body, "\n")
		if want := fmt.Sprintf("; %d links\n", lines); !strings.HasSuffix(head[:strings.Index(head, "\n")+1], want) {
			t.Errorf("%s: summary %q, but %d links listed", name, head[:strings.Index(head, "\n")], lines)
		}
	}
}
