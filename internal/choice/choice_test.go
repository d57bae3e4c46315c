package choice

import (
	"slices"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

func TestParseAlgo(t *testing.T) {
	for _, tc := range []struct {
		in      string
		bare    string            // the bare entry as plan.Choice writes it
		perColl map[string]string // collective → choice
		err     string            // "" for success; else a part of the error
	}{
		{in: ""},
		{in: " , ,"},
		{in: "ring", bare: "ring"},
		{in: "segring:seg=64K", bare: "segring:seg=64K"},
		{in: "knomial:k=4", bare: "knomial:k=4"},
		{in: "allreduce=recdouble, bcast=chain:seg=256K", perColl: map[string]string{"allreduce": "recdouble", "bcast": "chain:seg=256K"}},
		{in: "ring,bcast=binomial", bare: "ring", perColl: map[string]string{"bcast": "binomial"}},
		{in: "reduce=knomial:k=4", perColl: map[string]string{"reduce": "knomial:k=4"}},
		{in: "broadcast=treepack:seg=1M", perColl: map[string]string{"bcast": "treepack:seg=1M"}},
		// A bare name some collective has is legal even where others lack it.
		{in: "chain", bare: "chain"},

		{in: "rign", err: `entry "rign": no collective has an algorithm named "rign" (algorithms: `},
		{in: "rign", err: "ring"},
		{in: "allreduce=rign", err: `entry "allreduce=rign": no allreduce algorithm named "rign" (have agg, direct,`},
		{in: "allscatter=ring", err: `entry "allscatter=ring": unknown collective "allscatter" (want one of allreduce,`},
		{in: "allreduce=", err: `entry "allreduce=": algorithm ""`},
		{in: "=ring", err: `unknown collective ""`},
		{in: "allreduce=segring:seg=0", err: `seg="0": want a positive size`},
		{in: "allreduce=segring:seg=-4K", err: `seg="-4K"`},
		{in: "allreduce=segring:seg=lots", err: `seg="lots"`},
		{in: "reduce=knomial:k=1", err: `k="1": want an integer ≥ 2`},
		{in: "reduce=knomial:k=two", err: `k="two"`},
		{in: "allreduce=ring:seg=64K", err: `allreduce algorithm "ring" takes no parameters, not seg`},
		{in: "allreduce=segring:k=4", err: `allreduce algorithm "segring" takes only seg, not k`},
		{in: "bcast=knomial:seg=4K", err: `bcast algorithm "knomial" takes only k, not seg`},
		{in: "ring:k=3", err: `"ring" takes no parameters, not k`},
		{in: "allreduce=ring:frob=1", err: `unknown parameter "frob"`},
		{in: "ring,recdouble", err: `entry "recdouble": a second algorithm for every collective, after "ring"`},
		{in: "allreduce=ring,allreduce=recdouble", err: `allreduce is forced twice (ring and recdouble)`},
	} {
		bare, perColl, err := ParseAlgo(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseAlgo(%q): error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseAlgo(%q): %v", tc.in, err)
			continue
		}
		if got := bare.String(); bare.Algo != "" && got != tc.bare || bare.Algo == "" && tc.bare != "" {
			t.Errorf("ParseAlgo(%q): bare entry %q, want %q", tc.in, got, tc.bare)
		}
		if len(perColl) != len(tc.perColl) {
			t.Errorf("ParseAlgo(%q): per collective %v, want %v", tc.in, perColl, tc.perColl)
		}
		for c, want := range tc.perColl {
			coll, _ := sched.ParseCollective(c)
			if got := perColl[coll].String(); got != want {
				t.Errorf("ParseAlgo(%q): %s=%s, want %s", tc.in, c, got, want)
			}
		}
	}
}

// TestTakes checks the parameters found by probing against the
// algorithms' documented ones.
func TestTakes(t *testing.T) {
	for _, tc := range []struct {
		coll       sched.Collective
		name       string
		seg, radix bool
	}{
		{sched.Allreduce, "segring", true, false},
		{sched.Allreduce, "hierpipe", true, false},
		{sched.Allreduce, "treepack", true, false},
		{sched.Allreduce, "ring", false, false},
		{sched.Bcast, "chain", true, false},
		{sched.Bcast, "topochain", true, false},
		{sched.Bcast, "hier", true, false},
		{sched.Bcast, "treepack", true, false},
		{sched.Bcast, "knomial", false, true},
		{sched.Bcast, "binomial", false, false},
		{sched.Reduce, "knomial", false, true},
		{sched.Reduce, "treepack", true, false},
		{sched.Allgather, "segring", true, false},
		{sched.ReduceScatter, "segring", true, false},
	} {
		p, ok := takes()[key{tc.coll, tc.name}]
		if !ok || p.seg != tc.seg || p.radix != tc.radix {
			t.Errorf("%v %s: takes seg %v k %v (registered %v), want seg %v k %v", tc.coll, tc.name, p.seg, p.radix, ok, tc.seg, tc.radix)
		}
	}
}

func TestCheckTable(t *testing.T) {
	good := "allreduce ranks=2 hosts=1 size=0-16K recdouble\nbcast ranks=* hosts=* size=0- chain:seg=256K\n"
	for _, tc := range []struct{ src, want string }{
		{good, ""},
		{good + "allreduce ranks=4 hosts=1 size=0- rign\n", `tuning table t.txt:3: no allreduce algorithm named "rign" (have `},
		{"\n\nreduce ranks=4 hosts=1 size=0- knomial:seg=4K\n", `tuning table t.txt:3: reduce algorithm "knomial" takes only k, not seg`},
	} {
		tab, err := plan.ParseTable(strings.NewReader(tc.src), "t.txt")
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		err = CheckTable(tab)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%q: CheckTable: %v, want %q", tc.src, err, tc.want)
		}
	}
	if CheckTable(nil) != nil {
		t.Error("CheckTable(nil) failed")
	}
}

// FuzzParseAlgo checks that ParseAlgo never panics, that whatever it
// accepts passes Check (or CheckAny for the bare entry), and that the
// accepted entries written back with Choice.String parse to the same.
func FuzzParseAlgo(f *testing.F) {
	for _, s := range []string{
		"", "ring", "shm", "rign", "allreduce=ring", "allreduce=recdouble,bcast=binomial",
		"bcast=chain:seg=256K", "reduce=knomial:k=4", "chain:seg=64K", "knomial:k=3",
		"allreduce=ring,allreduce=ring", "ring,recdouble", "allreduce=shm", "gather=shm",
		"bcast=chain:seg=0", "bcast=chain:seg=-1", "reduce=knomial:k=1", "allreduce=ring:k=2",
		"=ring", "allreduce=", ",,,", " allreduce = ring ", "bcast=chain:seg=1G:seg=2K", "ring:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bare, per, err := ParseAlgo(s)
		if err != nil {
			if !strings.Contains(err.Error(), "entry") {
				t.Fatalf("ParseAlgo(%q): %v does not quote the entry", s, err)
			}
			return
		}
		var parts []string
		if bare.Algo != "" {
			if err := CheckAny(bare); err != nil {
				t.Fatalf("ParseAlgo(%q) accepted bare %v: %v", s, bare, err)
			}
			parts = append(parts, bare.String())
		}
		for c, ch := range per {
			if err := Check(c, ch); err != nil {
				t.Fatalf("ParseAlgo(%q) accepted %v=%v: %v", s, c, ch, err)
			}
			parts = append(parts, c.String()+"="+ch.String())
		}
		again := strings.Join(parts, ",")
		bare2, per2, err := ParseAlgo(again)
		if err != nil || bare2 != bare || len(per2) != len(per) {
			t.Fatalf("ParseAlgo(%q) = %v %v; written back %q: %v %v, %v", s, bare, per, again, bare2, per2, err)
		}
		for c, ch := range per {
			if per2[c] != ch {
				t.Fatalf("ParseAlgo(%q): %v=%v; written back %q gives %v", s, c, ch, again, per2[c])
			}
		}
	})
}

// TestDeviceOnly checks the names of the fused kernels: BRAID_ALGO takes
// them for the collectives that have one, without parameters.
func TestDeviceOnly(t *testing.T) {
	for _, s := range []string{"bcast=fused", "allgather=fused,reducescatter=fused", "allreduce=gpu_oneshot", "fused", "gpu_oneshot"} {
		if _, _, err := ParseAlgo(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"reduce=fused", "bcast=fused:seg=1M", "bcast=gpu_oneshot", "fused:k=2"} {
		if _, _, err := ParseAlgo(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
	if !DeviceOnly(sched.Bcast, Fused) || DeviceOnly(sched.Bcast, "chain") || !DeviceOnly(sched.Allreduce, "gpu_oneshot") {
		t.Error("DeviceOnly")
	}
}

// TestNamesOf: Check accepts every name its error lists for a collective,
// and the list holds the shared area's and the dynamic algorithms' names
// beside the schedules.
func TestNamesOf(t *testing.T) {
	for _, coll := range sched.Collectives() {
		names := NamesOf(coll)
		for _, n := range names {
			if err := Check(coll, plan.Choice{Algo: n}); err != nil {
				t.Errorf("%v: NamesOf lists %q, which Check refuses: %v", coll, n, err)
			}
		}
		err := Check(coll, plan.Choice{Algo: "nosuch"})
		if err == nil || !strings.Contains(err.Error(), strings.Join(names, ", ")) {
			t.Errorf("%v: Check of an unknown name: %v; want it to list %v", coll, err, names)
		}
	}
	for _, tc := range []struct {
		coll sched.Collective
		name string
	}{{sched.Allreduce, Shared}, {sched.Allreduce, SharedPAP}, {sched.Allreduce, Agg}, {sched.Allreduce, "papchain"}, {sched.Bcast, Fused}, {sched.Barrier, Shared}} {
		if !slices.Contains(NamesOf(tc.coll), tc.name) {
			t.Errorf("NamesOf(%v) = %v: no %q", tc.coll, NamesOf(tc.coll), tc.name)
		}
	}
}
