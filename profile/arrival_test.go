package profile_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/profile"
)

// TestPatterns: four ranks on two hosts arrive at 0, 10, 20 and 50 µs and
// return at 60, 60, 60 and 70 µs, in two calls (sequence numbers 1 and 2);
// a third call is in rank 3's log only. Cluster-wide Ω = 50, ā = 20, Δ̄ =
// (20+10+0+30)/4 = 15; node-wide host A (0, 10): Ω 10, Δ̄ 5, host B (20,
// 50): Ω 30, Δ̄ 15, means 20 and 10; α = 70 − 50 = 20: factors 2.5, 0.75,
// node-wide 1 and 0.5.
func TestPatterns(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prof")
	arrive := []int64{0, 10, 20, 50}
	ret := []int64{60, 60, 60, 70}
	hosts := []string{"A", "A", "B", "B"}
	const base = 1 << 40 // the job's clock does not start at 0
	for r := range 4 {
		rec := profile.New(path, r, 4, hosts[r])
		for seq := uint32(1); seq <= 3; seq++ {
			if seq == 3 && r != 3 {
				continue
			}
			rec.Record(&profile.Call{Name: "allreduce", Comm: 7, Rank: r, Group: 4, Seq: seq, DType: "float32", Bytes: 8, Peer: -1,
				Start: 1, End: 2, Arrive: base + 1000*(arrive[r]+int64(seq)*1000), Return: base + 1000*(ret[r]+int64(seq)*1000)})
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := profile.Load([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	ps := rep.Patterns()
	if len(ps) != 1 {
		t.Fatalf("patterns %+v, want allreduce's", ps)
	}
	p := ps[0]
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	if p.Name != "allreduce" || p.Upper != 8 || p.Calls != 2 || p.Hosts != 2 || p.Factored != 2 {
		t.Errorf("%+v: want 2 calls on 2 hosts, both with α", p)
	}
	near("Ω", p.Worst, 50)
	near("max Ω", p.MaxWorst, 50)
	near("Δ̄", p.Average, 15)
	near("node-wide Ω", p.NodeWorst, 20)
	near("node-wide Δ̄", p.NodeAverage, 10)
	near("Ω/α", p.WorstFactor, 2.5)
	near("Δ̄/α", p.AverageFactor, 0.75)
	near("node-wide Ω/α", p.NodeWorstFactor, 1)
	near("node-wide Δ̄/α", p.NodeAverageFactor, 0.5)
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "allreduce    ≤ 8      2      2       50.0  50.0        15.0  2.5  0.75            20.0   10.0    1   0.5") {
		t.Errorf("the report lacks the pattern's row:\n%s", out.String())
	}
}
