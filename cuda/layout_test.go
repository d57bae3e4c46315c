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
