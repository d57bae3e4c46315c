package braid_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/braid-ccl/braid"
)

// TestTuningTableModel checks that the per-message overhead and the
// host's memory rate of a tuning table (braid tune measures both) reach
// the planner's model: on 16 ranks, direct allreduce of 256 B pays o for
// 14 peers in each of its two steps, and direct reduce-scatter of 16 MiB
// moves 31 MiB a rank through the host's memory.
func TestTuningTableModel(t *testing.T) {
	price := func(table, coll string, count int) float64 {
		t.Helper()
		f := filepath.Join(t.TempDir(), "tuning.txt")
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
		comms, err := braid.NewLocal(16, &braid.Options{Tuning: f})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, c := range comms {
				c.Close()
			}
		}()
		_, reason, err := comms[0].Explain(coll, count, braid.Float32, 0)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`[ :]direct ([0-9.]+)µs`).FindStringSubmatch(reason)
		if m == nil {
			t.Fatalf("%q: %s of %d: no price for direct in %q", table, coll, count, reason)
		}
		us, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return us
	}
	lo, hi := price("overhead 0us\n", "allreduce", 64), price("overhead 3us\n", "allreduce", 64)
	if d := hi - lo; d < 0.99*2*14*3 || d > 1.01*2*14*3 {
		t.Errorf("direct allreduce of 256 B on 16 ranks: %g µs with overhead 0, %g with 3 µs; want 2·14·3 = 84 µs apart", lo, hi)
	}
	const count = 16 << 20 / 4 / 16
	fast, slow := price("memory 52GB/s\n", "reducescatter", count), price("memory 5.2GB/s\n", "reducescatter", count)
	if r := slow / fast; r < 9 || r > 10.1 {
		t.Errorf("direct reduce-scatter of 16 MiB on 16 ranks: %g µs at 52 GB/s, %g at 5.2 GB/s; want about 10× apart", fast, slow)
	}
}
