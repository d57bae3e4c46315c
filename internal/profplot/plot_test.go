package profplot_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/profplot"
	"github.com/braid-ccl/braid/profile"
)

func report(t *testing.T) *profile.Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p")
	for rank := range 3 {
		r := profile.New(path, rank, 3, "h")
		for i := range 20 {
			size := int64(8) << (i % 12)
			r.Record(&profile.Call{Name: "allreduce", DType: "float32", Bytes: size, Algo: "ring", Peer: -1, Start: int64(i) * 100, End: int64(i)*100 + 50})
		}
		r.Record(&profile.Call{Name: "barrier", Algo: "shm", Peer: -1, Start: 3000, End: 3010})
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := profile.Load([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestFigures draws both figures as PNG and SVG, and refuses other files.
func TestFigures(t *testing.T) {
	rep := report(t)
	dir := t.TempDir()
	for _, ext := range []string{".png", ".svg"} {
		for name, draw := range map[string]func(*profile.Report, string) error{"hist": profplot.Histograms, "share": profplot.Shares} {
			path := filepath.Join(dir, name+ext)
			if err := draw(rep, path); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := []byte("\x89PNG")
			if ext == ".svg" {
				want = []byte("<?xml")
			}
			if !bytes.HasPrefix(b, want) || len(b) < 1000 {
				t.Errorf("%s: %d bytes starting %q", path, len(b), b[:min(len(b), 8)])
			}
		}
	}
	if err := profplot.Histograms(rep, filepath.Join(dir, "x.pdf")); err == nil || !strings.Contains(err.Error(), "want a .png or .svg file") {
		t.Errorf("x.pdf: %v", err)
	}
	if err := profplot.Shares(&profile.Report{}, filepath.Join(dir, "e.png")); err == nil {
		t.Error("an empty report drew")
	}
}
