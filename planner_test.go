package braid_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/braid-ccl/braid"
)

// lockedBuf is a log sink several ranks write to.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestForceWithParameters(t *testing.T) {
	errs := onRanks(t, 3, &braid.Options{Algo: "allreduce=segring:seg=4K,bcast=chain:seg=8K", Tuning: "none"}, func(c *braid.Comm) error {
		for _, tc := range []struct{ coll, want string }{{"allreduce", "segring:seg=4K"}, {"bcast", "chain:seg=8K"}} {
			got, reason, err := c.Explain(tc.coll, 1<<16, braid.Float32, 0)
			if err != nil {
				return err
			}
			if got != tc.want || !strings.Contains(reason, "BRAID_ALGO") {
				t.Errorf("%s: Explain = %q (%s), want %q", tc.coll, got, reason, tc.want)
			}
		}
		v := make([]float32, 1<<16)
		for i := range v {
			v[i] = float32(c.Rank() + i%7)
		}
		if err := c.Allreduce(context.Background(), v, v, braid.Sum); err != nil {
			return err
		}
		for i, x := range v {
			if want := float32(0+1+2) + 3*float32(i%7); x != want {
				t.Errorf("rank %d: v[%d] = %v, want %v", c.Rank(), i, x, want)
				break
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := braid.NewLocal(2, &braid.Options{Algo: "allreduce=ring:seg=0"}); err == nil {
		t.Error("a zero segment was accepted")
	}
}

func TestTuningTable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "t.txt")
	if err := os.WriteFile(file, []byte("link intra alpha=2us beta=5GB/s\nallreduce ranks=2 hosts=1 size=0-1K ring\nallreduce ranks=* hosts=* size=1K- reducebcast\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := onRanks(t, 2, &braid.Options{Tuning: file}, func(c *braid.Comm) error {
		for _, tc := range []struct {
			count int
			want  string
		}{{8, "ring"}, {1 << 20, "reducebcast"}} {
			got, reason, err := c.Explain("allreduce", tc.count, braid.Float32, 0)
			if err != nil {
				return err
			}
			if got != tc.want || !strings.Contains(reason, "tuning table "+file) {
				t.Errorf("count %d: Explain = %q (%s), want the table's %q", tc.count, got, reason, tc.want)
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("allreduce ranks=2 hosts=1 size=0-1K\n"), 0o644)
	_, err := braid.NewLocal(2, &braid.Options{Tuning: bad})
	var e *braid.Error
	if !errors.As(err, &e) || e.Kind != braid.InvalidArgument || !strings.Contains(err.Error(), "bad.txt:1") {
		t.Errorf("bad table: error %v, want InvalidArgument naming the line", err)
	}
	_, err = braid.NewLocal(2, &braid.Options{Tuning: filepath.Join(dir, "missing.txt")})
	if err == nil {
		t.Error("a missing table was accepted")
	}
}

// TestTableSegmentAndMIAD: a tuning table's entry that names a segment
// fixes it, one that names none leaves MIAD to adapt it, as for the
// model's choice (the planner's decision says it came from the table:
// plan.FromTable).
func TestTableSegmentAndMIAD(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		entry string
		miad  bool
	}{
		{"allreduce ranks=2 hosts=1 size=0- segring:seg=256K", false},
		{"allreduce ranks=2 hosts=1 size=0- segring", true},
	} {
		file := filepath.Join(dir, "t.txt")
		if err := os.WriteFile(file, []byte(tc.entry+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		errs := onRanks(t, 2, &braid.Options{Tuning: file}, func(c *braid.Comm) error {
			got, reason, err := c.Explain("allreduce", 4<<20, braid.Float32, 0)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(got, "segring") || !strings.Contains(reason, "tuning table "+file) {
				t.Errorf("%s: Explain = %q (%s), want the table's segring", tc.entry, got, reason)
			}
			if adapts := strings.Contains(reason, "MIAD adapts the segment"); adapts != tc.miad {
				t.Errorf("%s: MIAD adapts: %v, want %v (%s)", tc.entry, adapts, tc.miad, reason)
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMIAD runs a pipelined allreduce repeatedly: MIAD must settle on a
// segment within its trial budget, every rank must agree on every move
// (else the calls would fail with Mismatch), and every result must be
// right.
func TestMIAD(t *testing.T) {
	if testing.Short() {
		t.Skip("MIAD needs many 4 MiB calls")
	}
	log := &lockedBuf{}
	const count = 1 << 20
	errs := onRanks(t, 3, &braid.Options{Algo: "allreduce=segring", Tuning: "none", Debug: "info", Log: log}, func(c *braid.Comm) error {
		v := make([]float32, count)
		for call := range 40 {
			for i := range v {
				v[i] = float32(c.Rank()*call + i%5)
			}
			if err := c.Allreduce(context.Background(), v, v, braid.Sum); err != nil {
				return err
			}
			for i, x := range v {
				if want := float32(3*call) + 3*float32(i%5); x != want {
					t.Errorf("call %d rank %d: v[%d] = %v, want %v", call, c.Rank(), i, x, want)
					return nil
				}
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	out := log.String()
	if !strings.Contains(out, "MIAD adapts the segment") || !strings.Contains(out, "MIAD settled on segring:seg=") {
		t.Errorf("log does not show MIAD adapting and settling:\n%s", out)
	}
	// Switched off, the segment stays as planned.
	log = &lockedBuf{}
	errs = onRanks(t, 2, &braid.Options{Algo: "allreduce=segring", Tuning: "none", Debug: "info", Log: log, DisableMIAD: true}, func(c *braid.Comm) error {
		v := make([]float32, count)
		return c.Allreduce(context.Background(), v, v, braid.Sum)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(log.String(), "MIAD") {
		t.Errorf("MIAD ran though disabled:\n%s", log.String())
	}
}
