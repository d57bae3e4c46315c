package braid_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/cost"
	"github.com/braid-ccl/braid/transport/shm"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// TestPlannerReduceScatterNode checks the model's reduce-scatter choice
// (no tuning table) at 8 and 16 ranks of one host, the area's slot as
// Init sizes it, against what the 16-core node measured
// (docs/PERFORMANCE.md, "session 9": the host's memory shared by its
// ranks). The old model, which let each rank copy at its link's bandwidth
// and overlapped transfers with reductions, took the segmented ring from
// 512 KiB at 8 ranks and 2 MiB at 16, 1.4–2.2× slower than direct there.
func TestPlannerReduceScatterNode(t *testing.T) {
	type want struct {
		size  int
		algos []string
		why   string
	}
	cases := map[int][]want{
		16: {
			{256 << 10, []string{"shm"}, "braid tune (session 7) kept the area up to 2 MiB; 132 µs, below both peers"},
			{1 << 20, []string{"shm"}, "braid tune kept the area up to 2 MiB"},
			{2 << 20, []string{"direct"}, "braid tune took direct from 2 MiB"},
			{4 << 20, []string{"direct"}, "braid tune took direct from 2 MiB; session 8: direct or the area fastest from 4 MiB"},
			{16 << 20, []string{"direct"}, "session 8: direct 10.6 ms, area 14.1, segring 14.5; tune: direct 9.1, segring 14.4"},
			{64 << 20, []string{"direct", "shm"}, "session 8: direct or the area fastest from 4 MiB"},
		},
		8: {
			// Below 4 MiB no run measured the two apart (the compare run's
			// cells stalled); the memory's count rules out the rings,
			// which move 3(n−1)·M against the others' 2n·M.
			{256 << 10, []string{"shm", "direct"}, "not measured apart"},
			{1 << 20, []string{"shm", "direct"}, "not measured apart"},
			{4 << 20, []string{"direct", "shm"}, "session 8: direct or the area fastest from 4 MiB"},
			{16 << 20, []string{"direct"}, "session 8: direct 4.3 ms, area 5.2, segring 7.3"},
			{64 << 20, []string{"direct", "shm"}, "session 8: direct or the area fastest from 4 MiB"},
		},
	}
	for _, n := range []int{8, 16} {
		comms, err := braid.NewLocal(n, &braid.Options{Tuning: "none", SharedSlot: shmcoll.SlotFor(n)})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range cases[n] {
			got, reason, err := comms[0].Explain("reducescatter", w.size/4/n, braid.Float32, 0)
			if err != nil {
				t.Fatalf("%d ranks, %d B: %v", n, w.size, err)
			}
			name, _, _ := strings.Cut(got, ":")
			if !slices.Contains(w.algos, name) || !strings.HasPrefix(reason, "cost model") {
				t.Errorf("%d ranks, reduce-scatter of %s: the planner chose %s (%s); the node's measured winner: %v (%s)",
					n, fmt.Sprint(w.size>>10)+" KiB", got, reason, w.algos, w.why)
			}
		}
		for _, c := range comms {
			c.Close()
		}
	}
}

// TestModelEagerIsShm checks that the model's eager limit is the shm
// transport's, whose messages of at most that size are copied twice.
func TestModelEagerIsShm(t *testing.T) {
	if cost.DefaultEager != shm.DefaultEagerLimit {
		t.Errorf("cost.DefaultEager = %d, shm.DefaultEagerLimit = %d", cost.DefaultEager, shm.DefaultEagerLimit)
	}
}
