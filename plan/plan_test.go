package plan_test

import (
	"slices"
	"testing"

	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

func names(c sched.Collective) []string {
	var out []string
	for _, a := range algo.ForCollective(c) {
		out = append(out, a.Name())
	}
	return out
}

// subsets returns every non-empty subset of s (s is short).
func subsets(s []string) [][]string {
	var out [][]string
	for m := 1; m < 1<<len(s); m++ {
		var sub []string
		for i := range s {
			if m&(1<<i) != 0 {
				sub = append(sub, s[i])
			}
		}
		out = append(out, sub)
	}
	return out
}

func TestPlanReturnsCandidate(t *testing.T) {
	sizes := []int64{0, 1, 8, plan.SmallMessage, plan.SmallMessage + 1, plan.LargeMessage - 1, plan.LargeMessage, 1 << 30}
	for _, c := range sched.Collectives() {
		all := names(c)
		if len(all) == 0 {
			t.Errorf("%v: no registered algorithms", c)
			continue
		}
		for _, cand := range subsets(all) {
			for _, n := range []int{1, 2, 3, 8, 13} {
				for _, b := range sizes {
					r := plan.Request{Coll: c, NRanks: n, NHosts: 1, Count: int(b / 4), Bytes: b}
					d := plan.Default{}.Plan(r, cand)
					if !slices.Contains(cand, d.Algo) {
						t.Errorf("%v n=%d %d B, candidates %v: chose %q", c, n, b, cand, d.Algo)
					}
					if d.Reason == "" {
						t.Errorf("%v n=%d %d B, candidates %v: no reason", c, n, b, cand)
					}
				}
			}
		}
	}
}

func TestPlanChoices(t *testing.T) {
	allreduce := []string{"rabenseifner", "recdouble", "reducebcast", "ring"}
	cases := []struct {
		name string
		r    plan.Request
		cand []string
		want string
	}{
		{"tiny allreduce", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: 8}, allreduce, "recdouble"},
		{"16 KiB allreduce", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: plan.SmallMessage}, allreduce, "recdouble"},
		{"medium allreduce", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: 64 << 10}, allreduce, "rabenseifner"},
		{"large allreduce", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: plan.LargeMessage}, allreduce, "ring"},
		{"huge allreduce", plan.Request{Coll: sched.Allreduce, NRanks: 3, Bytes: 1 << 30}, allreduce, "ring"},
		{"tiny allreduce without recdouble", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: 8}, []string{"ring", "rabenseifner"}, "rabenseifner"},
		{"large allreduce without ring", plan.Request{Coll: sched.Allreduce, NRanks: 8, Bytes: 1 << 20}, []string{"recdouble", "rabenseifner"}, "rabenseifner"},
		{"small allgather", plan.Request{Coll: sched.Allgather, NRanks: 4, Bytes: 64}, []string{"bruck", "recdouble", "ring"}, "recdouble"},
		{"large allgather", plan.Request{Coll: sched.Allgather, NRanks: 4, Bytes: 1 << 20}, []string{"bruck", "recdouble", "ring"}, "ring"},
		{"bcast", plan.Request{Coll: sched.Bcast, NRanks: 4, Bytes: 1 << 20}, []string{"binomial", "linear"}, "binomial"},
		{"reduce", plan.Request{Coll: sched.Reduce, NRanks: 4, Bytes: 8}, []string{"linear", "binomial"}, "binomial"},
		{"barrier", plan.Request{Coll: sched.Barrier, NRanks: 4}, []string{"dissemination"}, "dissemination"},
	}
	for _, tc := range cases {
		d := plan.Default{}.Plan(tc.r, tc.cand)
		if d.Algo != tc.want {
			t.Errorf("%s: chose %q (%s), want %q", tc.name, d.Algo, d.Reason, tc.want)
		}
	}
}

func TestPlanFallsBackToFirst(t *testing.T) {
	cases := []struct {
		r    plan.Request
		cand []string
	}{
		// None of the allreduce preferences is available.
		{plan.Request{Coll: sched.Allreduce, NRanks: 4, Bytes: 8}, []string{"reducebcast", "other"}},
		{plan.Request{Coll: sched.Allreduce, NRanks: 4, Bytes: 1 << 20}, []string{"reducebcast"}},
		// Only bruck for allgather.
		{plan.Request{Coll: sched.Allgather, NRanks: 4, Bytes: 8}, []string{"bruck"}},
		// Gather and scatter have no preferences at all.
		{plan.Request{Coll: sched.Gather, NRanks: 4, Bytes: 8}, []string{"linear", "x"}},
		{plan.Request{Coll: sched.Scatter, NRanks: 4, Bytes: 8}, []string{"linear"}},
		// An unknown collective.
		{plan.Request{Coll: sched.InvalidCollective, NRanks: 4}, []string{"a", "b"}},
	}
	for _, tc := range cases {
		d := plan.Default{}.Plan(tc.r, tc.cand)
		if d.Algo != tc.cand[0] {
			t.Errorf("%v %d B, candidates %v: chose %q, want the first", tc.r.Coll, tc.r.Bytes, tc.cand, d.Algo)
		}
		if d.Reason == "" {
			t.Errorf("%v: fallback without a reason", tc.r.Coll)
		}
	}
}

func TestPlanEmptyCandidates(t *testing.T) {
	for _, c := range append(sched.Collectives(), sched.InvalidCollective) {
		for _, cand := range [][]string{nil, {}} {
			d := plan.Default{}.Plan(plan.Request{Coll: c, NRanks: 4, Bytes: 1024}, cand)
			if d.Algo != "" {
				t.Errorf("%v with no candidates: chose %q", c, d.Algo)
			}
		}
	}
}

func TestPlanDoesNotModifyCandidates(t *testing.T) {
	cand := []string{"ring", "recdouble", "rabenseifner"}
	keep := slices.Clone(cand)
	plan.Default{}.Plan(plan.Request{Coll: sched.Allreduce, NRanks: 4, Bytes: 8}, cand)
	if !slices.Equal(cand, keep) {
		t.Errorf("candidates changed to %v", cand)
	}
}

func TestDefaultIsPlanner(t *testing.T) {
	var _ plan.Planner = plan.Default{}
}
