package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

func TestTuneSizes(t *testing.T) {
	if got := tuneSizes(8, 64<<20, 4); got[0] != 8 || got[len(got)-1] != 64<<20 || len(got) != 13 {
		t.Errorf("tuneSizes(8, 64M, 4) = %v", got)
	}
	if got := tuneSizes(8, 100, 4); !slices.Equal(got, []int64{8, 32, 100}) {
		t.Errorf("tuneSizes(8, 100, 4) = %v", got)
	}
}

func TestTableEntries(t *testing.T) {
	ch := func(s string) plan.Choice {
		c, err := plan.ParseChoice(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sizes := []int64{8, 32, 128, 512, 2048}
	best := []plan.Choice{ch("recdouble"), ch("recdouble"), ch("ring"), ch("segring:seg=64K"), ch("segring:seg=64K")}
	es := tableEntries(sched.Allreduce, 4, 1, sizes, best)
	want := []string{
		"allreduce ranks=4 hosts=1 size=0-128 recdouble",
		"allreduce ranks=4 hosts=1 size=128-512 ring",
		"allreduce ranks=4 hosts=1 size=512- segring:seg=64K",
	}
	var got []string
	for i := range es {
		got = append(got, es[i].String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%v\nwant\n%v", got, want)
	}
	// Every measured size looks up to the choice measured best there.
	tab := &plan.Table{Entries: es}
	for i, s := range sizes {
		if e := tab.Lookup(sched.Allreduce, 4, 1, s); e == nil || e.Choice != best[i] {
			t.Errorf("size %d: %v, want %v", s, e, best[i])
		}
	}
	if got := tuneRuns(sched.Bcast, 4); !slices.Contains(got, "chain:seg=256K") || !slices.Contains(got, "knomial:k=3") || !slices.Contains(got, "binomial") {
		t.Errorf("tuneRuns(bcast, 4) = %v: want parameter variants", got)
	}
}

// TestTuneWritesMachine runs a small braid tune and checks that its table
// records this machine, names the shared area where it won, and is taken
// by a job here.
func TestTuneWritesMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs braid tune")
	}
	out := filepath.Join(t.TempDir(), "t.txt")
	if o, err := run(t, 120*time.Second, nil, "tune", "-n", "2", "--colls", "allreduce", "--max-size", "64", "--budget", "2ms", "--out", out); err != nil {
		t.Fatalf("braid tune: %v\n%s", err, o)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	here := braid.ThisMachine()
	if want := fmt.Sprintf("machine cores=%d numa=%d\n", here.Cores, here.NUMA); !strings.Contains(string(b), want) {
		t.Errorf("table lacks %q:\n%s", want, b)
	}
	if o, err := run(t, 60*time.Second, []string{"BRAID_TUNING=" + out}, "run", "-n", "2", "--", braidBin(), "bench", "allreduce", "--max-size", "64", "--iters", "2", "--check"); err != nil {
		t.Errorf("a job with the table from this machine: %v\n%s", err, o)
	}
}
