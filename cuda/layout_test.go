package cuda

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKernelLayout checks, without a GPU, that the layout constants the
// Go side computes regions and rounds with are the ones kernels/reduce.cu
// was written with: a #define changed on one side only would make the
// host and the kernels disagree on where flags, slots and lines are.
func TestKernelLayout(t *testing.T) {
	src, err := os.ReadFile("kernels/reduce.cu")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define ([A-Z_]+) \(?(\d+)(?: << (\d+))?\)?\s*$`).FindAllSubmatch(src, -1) {
		v, _ := strconv.Atoi(string(m[2]))
		if len(m[3]) > 0 {
			s, _ := strconv.Atoi(string(m[3]))
			v <<= s
		}
		defs[string(m[1])] = v
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"ONESHOT_BLOCKS", OneShotMaxBlocks},
		{"ONESHOT_SLOTS", OneShotSlotsOffset},
		{"BCAST_DIRECT_MAX", BcastDirectMax},
		{"HOST_HALF", HostRegionBytes / 2},
		{"ONESHOT_LL_SLOT", 2 * OneShotLLMax}, // a line carries 8 bytes in 16
	} {
		got, ok := defs[c.name]
		if !ok {
			t.Errorf("kernels/reduce.cu has no #define %s", c.name)
			continue
		}
		if got != c.want {
			t.Errorf("kernels/reduce.cu: %s is %d, the Go side %d", c.name, got, c.want)
		}
	}
	// The flags, [ONESHOT_BLOCKS][OneShotMaxRanks] words, end where the
	// slots start, and the kernels take one region base per rank.
	if OneShotMaxBlocks*OneShotMaxRanks*4 != OneShotSlotsOffset {
		t.Errorf("flags of %d blocks × %d ranks take %d bytes, the slots start at %d", OneShotMaxBlocks, OneShotMaxRanks, OneShotMaxBlocks*OneShotMaxRanks*4, OneShotSlotsOffset)
	}
	if !strings.Contains(string(src), "blockIdx.x * 8 + rank") {
		t.Errorf("kernels/reduce.cu: the flag of (block, rank) is no longer blockIdx.x * 8 + rank (OneShotMaxRanks = %d)", OneShotMaxRanks)
	}
	if !strings.Contains(string(src), "char *r7") {
		t.Errorf("kernels/reduce.cu: the kernels no longer take r0..r7 (OneShotMaxRanks = %d)", OneShotMaxRanks)
	}
}

// TestLaunchArgs checks, without a GPU, that launchArgs packs every fused
// kernel's arguments as kernels/reduce.cu declares its parameters: the
// same count, and the parameter list the packer was written against.
func TestLaunchArgs(t *testing.T) {
	src, err := os.ReadFile("kernels/reduce.cu")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(src), "\\\n", " ")), " ")
	params := func(sig string) []string {
		var names []string
		for _, p := range strings.Split(sig, ",") {
			f := strings.Fields(strings.NewReplacer("*", " ", "const", " ").Replace(p))
			if len(f) > 0 {
				names = append(names, f[len(f)-1])
			}
		}
		return names
	}
	sigOf := func(re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("kernels/reduce.cu: no match for %s", re)
		}
		return m[1]
	}
	fused := sigOf(`braid_##kind##_##opname##_##tname\( (.*?)\) \{`)
	regions := "r0 r1 r2 r3 r4 r5 r6 r7"
	want := map[string]string{
		"bcast_fused":     "buf bytes root ramp_in seq rank nranks slot_bytes area_bytes host host_bytes timeout_ns status " + regions,
		"allgather_fused": "in out bytes seq rank nranks slot_bytes area_bytes timeout_ns status " + regions,
		"fused":           "in out n seq rank nranks slot_bytes area_bytes HOST timeout_ns status " + regions,
	}
	for name, sig := range map[string]string{
		"bcast_fused":     sigOf(`void __launch_bounds__\(512\) braid_bcast_fused\( (.*?)\) \{`),
		"allgather_fused": sigOf(`void __launch_bounds__\(512\) braid_allgather_fused\( (.*?)\) \{`),
		"fused":           strings.Replace(fused, "HOST u64 timeout_ns", "u64 HOST, u64 timeout_ns", 1),
	} {
		if got := strings.Join(params(sig), " "); got != want[name] {
			t.Errorf("kernels/reduce.cu: %s takes (%s), the packer was written for (%s)", name, got, want[name])
		}
	}
	regs := []DevicePtr{0x100, 0x200, 0x300, 0x400}
	for _, c := range []struct {
		kind   FusedKind
		family string
		host   bool
	}{
		{FusedOneShot, "oneshot", false}, {FusedOneShotLL, "oneshotll", false}, {FusedTwoShotLL, "twoshotll", false},
		{FusedTwoShot, "twoshot", true}, {FusedReduceScatter, "rsfused", false},
		{FusedBcast, "bcast_fused", true}, {FusedAllgather, "allgather_fused", false},
	} {
		a := OneShot{Kind: c.kind, Count: 1000, DType: 1, Regions: regs, Seq: 7, Rank: 2, SlotBytes: 4096, Host: 0x1000, HostBytes: 64, Timeout: 5, Status: 0x77}
		family, args := a.launchArgs()
		n := len(strings.Fields(want["fused"])) - 1 // HOST is a marker
		switch {
		case c.kind == FusedBcast:
			n = len(strings.Fields(want["bcast_fused"]))
		case c.kind == FusedAllgather:
			n = len(strings.Fields(want["allgather_fused"]))
		case c.host:
			n += 2
		}
		if family != c.family || len(args) != n {
			t.Errorf("kind %d: family %s with %d arguments, want %s with %d", c.kind, family, len(args), c.family, n)
		}
		seqAt := 3 // after in, out, n (or bytes)
		if c.kind == FusedBcast {
			seqAt = 4 // after buf, bytes, root, ramp_in
		}
		if args[seqAt] != 7 || args[seqAt+1] != 2 || args[seqAt+2] != 4 || args[seqAt+3] != 4096 {
			t.Errorf("kind %d: seq, rank, nranks, slot_bytes are not at %d: %v", c.kind, seqAt, args)
		}
		if c.host && (args[seqAt+5] != 0x1000 || args[seqAt+6] != 64) {
			t.Errorf("kind %d: host, host_bytes are not after area_bytes: %v", c.kind, args)
		}
		if args[len(args)-OneShotMaxRanks-2] != 5 || args[len(args)-OneShotMaxRanks-1] != 0x77 {
			t.Errorf("kind %d: timeout_ns, status are not before the regions: %v", c.kind, args)
		}
		r := args[len(args)-OneShotMaxRanks:]
		if r[0] != 0x100 || r[3] != 0x400 || r[4] != 0 || r[7] != 0 {
			t.Errorf("kind %d: the regions are not the last %d arguments: %v", c.kind, OneShotMaxRanks, args)
		}
	}
}
