package fused

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/plan"
)

// kernelUnit is the one file of the kernels' CUDA C that nvcc compiles,
// which includes the others; kernelDir is where they are.
const kernelUnit = "reduce.cu"

var kernelDir = findKernelDir()

// findKernelDir returns the directory of the kernels' CUDA C, package
// cuda's cuda/kernels: from this package's directory, where go test runs
// its tests, or from the working directory or one above it, so that a
// test binary run from the repository's root (as on the GPU machine)
// finds it too. Where none has it, the relative path stays, and the tests
// that read the files fail naming it.
func findKernelDir() string {
	const rel = "../../cuda/kernels"
	if _, err := os.Stat(filepath.Join(rel, kernelUnit)); err == nil {
		return rel
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			k := filepath.Join(d, "cuda", "kernels")
			if _, err := os.Stat(filepath.Join(k, kernelUnit)); err == nil {
				return k
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return rel
}

// includeLine is a #include of one of the kernels' own files.
var includeLine = regexp.MustCompile(`(?m)^#include "([^"]+)"[ \t]*$`)

// kernelSource returns the kernels' translation unit as the compiler
// sees it before macros: kernels/reduce.cu with every #include "file"
// replaced by that file's text, recursively, and the names of the files
// read, in include order. A file that is missing, or included twice,
// fails the test.
func kernelSource(t *testing.T) (string, []string) {
	t.Helper()
	var files []string
	seen := map[string]bool{}
	var read func(name, from string) string
	read = func(name, from string) string {
		if seen[name] {
			t.Fatalf("cuda/kernels/%s includes %s a second time", from, name)
		}
		seen[name] = true
		files = append(files, name)
		b, err := os.ReadFile(filepath.Join(kernelDir, name))
		if err != nil && from != "" {
			t.Fatalf("cuda/kernels/%s includes %s: %v", from, name, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return includeLine.ReplaceAllStringFunc(string(b), func(line string) string {
			return read(includeLine.FindStringSubmatch(line)[1], name)
		})
	}
	src := read(kernelUnit, "")
	return src, files
}

// TestKernelSources checks that the kernels' translation unit includes
// every .cuh file in cuda/kernels, so that the tests here, which read
// what reduce.cu includes, read every kernel nvcc compiles and no file
// lies there unbuilt.
func TestKernelSources(t *testing.T) {
	_, files := kernelSource(t)
	cuh, err := filepath.Glob(filepath.Join(kernelDir, "*.cuh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cuh {
		if !slices.Contains(files, filepath.Base(p)) {
			t.Errorf("cuda/kernels/%s: %s does not include it", filepath.Base(p), kernelUnit)
		}
	}
	if len(files) < 2 {
		t.Errorf("cuda/kernels/%s includes no file", kernelUnit)
	}
}

// TestKernelLayout checks, without a GPU, that the layout constants the
// Go side computes regions and rounds with are the ones the kernels
// (kernels/reduce.cu and the files it includes; kernels/layout.cuh holds
// them) were written with: a #define changed on one side only would make
// the host and the kernels disagree on where flags, slots and lines are.
func TestKernelLayout(t *testing.T) {
	src, _ := kernelSource(t)
	defs := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define ([A-Z_]+) \(?(\d+)(?: << (\d+))?\)?\s*$`).FindAllStringSubmatch(src, -1) {
		v, _ := strconv.Atoi(m[2])
		if len(m[3]) > 0 {
			s, _ := strconv.Atoi(m[3])
			v <<= s
		}
		if old, ok := defs[m[1]]; ok && old != v {
			t.Errorf("cuda/kernels: %s is defined as %d and as %d", m[1], old, v)
		}
		defs[m[1]] = v
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"ONESHOT_BLOCKS", MaxBlocks},
		{"ONESHOT_SLOTS", SlotsOffset},
		{"BCAST_DIRECT_MAX", BcastDirectMax},
		{"HOST_HALF", HostRegionBytes / 2},
		{"ONESHOT_LL_SLOT", 2 * LLMax}, // a line carries 8 bytes in 16
		{"BELL_ARGS", BellArgs},
		{"BELL_DONE", BellDone},
		{"BELL_EXITED", BellExited},
		{"BELL_QUIT", BellQuit},
		{"BELL_WORDS", BellWords},
	} {
		got, ok := defs[c.name]
		if !ok {
			t.Errorf("cuda/kernels: neither reduce.cu nor a file it includes has #define %s", c.name)
			continue
		}
		if got != c.want {
			t.Errorf("cuda/kernels: %s is %d, the Go side %d", c.name, got, c.want)
		}
	}
	// The flags, [ONESHOT_BLOCKS][MaxRanks] words, end where the slots
	// start, and the kernels take one region base per rank.
	if MaxBlocks*MaxRanks*4 != SlotsOffset {
		t.Errorf("flags of %d blocks × %d ranks take %d bytes, the slots start at %d", MaxBlocks, MaxRanks, MaxBlocks*MaxRanks*4, SlotsOffset)
	}
	if !strings.Contains(src, "blockIdx.x * 8 + rank") {
		t.Errorf("cuda/kernels: the flag of (block, rank) is no longer blockIdx.x * 8 + rank (MaxRanks = %d)", MaxRanks)
	}
	if !strings.Contains(src, "char *r7") {
		t.Errorf("cuda/kernels: the kernels no longer take r0..r7 (MaxRanks = %d)", MaxRanks)
	}
	if n := strings.Count(src, "__launch_bounds__(512)"); n == 0 {
		t.Errorf("cuda/kernels: no kernel is bounded at 512 threads a block (Threads = %d)", Threads)
	}
}

// field is one parameter of a typed argument list: its name in
// the kernels' source (the cu tag), its size in bytes and its value.
type field struct {
	name  string
	size  int
	value uint64
}

// flatten walks v, a kernelArgs struct, in field order, as the kernel
// takes its parameters: embedded lists inline, arrays element by element
// (tag "r" gives r0, r1, ...).
func flatten(t *testing.T, v reflect.Value) []field {
	var out []field
	for i := range v.NumField() {
		sf, fv := v.Type().Field(i), v.Field(i)
		switch {
		case sf.Anonymous:
			out = append(out, flatten(t, fv)...)
		case fv.Kind() == reflect.Array:
			for j := range fv.Len() {
				out = append(out, field{fmt.Sprintf("%s%d", sf.Tag.Get("cu"), j), int(fv.Index(j).Type().Size()), fv.Index(j).Uint()})
			}
		case sf.Tag.Get("cu") == "":
			t.Fatalf("%v.%s has no cu tag", v.Type(), sf.Name)
		default:
			out = append(out, field{sf.Tag.Get("cu"), int(sf.Type.Size()), fv.Uint()})
		}
	}
	return out
}

// kernelText is the kernels' translation unit on one line: its macros'
// continuation lines joined, every run of white space one space.
func kernelText(t *testing.T) string {
	src, _ := kernelSource(t)
	return strings.Join(strings.Fields(strings.ReplaceAll(src, "\\\n", " ")), " ")
}

// kernelParams is the parameters' names of a kernel's signature, in order.
func kernelParams(sig string) []string {
	var names []string
	for _, p := range strings.Split(sig, ",") {
		f := strings.Fields(strings.NewReplacer("*", " ", "const", " ").Replace(p))
		if len(f) > 0 {
			names = append(names, f[len(f)-1])
		}
	}
	return names
}

// ptxWidths is the bytes of every parameter of every kernel in the
// embedded PTX (or BRAID_CUDA_KERNELS'), by kernel.
func ptxWidths(t *testing.T) map[string][]int {
	ptx, err := cuda.ReducePTX()
	if err != nil {
		t.Fatal(err)
	}
	widths := map[string][]int{}
	for _, m := range regexp.MustCompile(`\.entry (\w+)\(([^)]*)\)`).FindAllSubmatch(ptx, -1) {
		widths[string(m[1])] = []int{}
		for _, p := range regexp.MustCompile(`\.param \.[a-z](\d+) `).FindAllSubmatch(m[2], -1) {
			b, _ := strconv.Atoi(string(p[1]))
			widths[string(m[1])] = append(widths[string(m[1])], b/8)
		}
	}
	return widths
}

// TestKernelArgs checks, without a GPU, that every fused kernel's typed
// argument list is the kernel's parameter list: the names in the order
// the kernels' source (kernels/reduce.cu and the files it includes)
// declares them, the sizes the embedded PTX gives them
// (a u32 where the kernel takes a u32), and that pack writes each field
// at its place. It also checks that Kernel's fields land in the
// parameters of the same meaning.
func TestKernelArgs(t *testing.T) {
	text := kernelText(t)
	params := kernelParams
	sigOf := func(re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("cuda/kernels: no match for %s", re)
		}
		return m[1]
	}
	fused := sigOf(`braid_##kind##_##opname##_##tname\( (.*?)\) \{`)
	// The multi-path kernels get HOST_PARAMS where FUSED_KERNEL says HOST.
	hostParams := strings.TrimSuffix(sigOf(`#define HOST_PARAMS (.*?) #define`), ",")
	source := map[string][]string{
		"bcast_fused":     params(sigOf(`void __launch_bounds__\(512\) braid_bcast_fused\( (.*?)\) \{`)),
		"allgather_fused": params(sigOf(`void __launch_bounds__\(512\) braid_allgather_fused\( (.*?)\) \{`)),
		"allgather_ll":    params(sigOf(`void __launch_bounds__\(512\) braid_allgather_ll\( (.*?)\) \{`)),
		"vec":             params(strings.Replace(fused, "HOST u64 timeout_ns", "u64 timeout_ns", 1)),
		"hostvec":         params(strings.Replace(fused, "HOST u64 timeout_ns", hostParams+", u64 timeout_ns", 1)),
	}
	widths := ptxWidths(t)

	regs := []cuda.DevicePtr{0x100, 0x200, 0x300, 0x400}
	for _, c := range []struct {
		kind   Kind
		family string // cuda.Ctx.Kernel's
		list   string // source's
	}{
		{OneShot, "oneshot", "vec"}, {OneShotLL, "oneshotll", "vec"}, {TwoShotLL, "twoshotll", "vec"},
		{TwoShot, "twoshot", "hostvec"}, {ReduceScatter, "rsfused", "hostvec"},
		{Bcast, "bcast_fused", "bcast_fused"}, {Allgather, "allgather_fused", "allgather_fused"},
		{ReduceScatterLL, "rsll", "vec"}, {AllgatherLL, "allgather_ll", "allgather_ll"},
	} {
		a := Kernel{Kind: c.kind, Count: 1000, DType: dtype.Float32, Op: dtype.Sum, In: 0xa0, Out: 0xb0, Regions: regs,
			Seqs: 0x5e0, Rank: 2, SlotBytes: 4096, Area: 1024, Host: 0x1000, HostBytes: 64, Timeout: 5, Status: 0x77, Root: 3, Ramp: 2}
		family, args := a.args(new(argSet))
		if family != c.family {
			t.Errorf("%v: family %s, want %s", c.kind, family, c.family)
			continue
		}
		fs := flatten(t, reflect.ValueOf(args).Elem())
		var names []string
		var sizes []int
		var values []uint64
		for _, f := range fs {
			names, sizes, values = append(names, f.name), append(sizes, f.size), append(values, f.value)
		}
		if !slices.Equal(names, source[c.list]) {
			t.Errorf("%v: the typed arguments are (%s), the kernels' source declares (%s)", c.kind, strings.Join(names, " "), strings.Join(source[c.list], " "))
		}
		entry := "braid_" + family
		if family != "bcast_fused" && family != "allgather_fused" && family != "allgather_ll" {
			entry += "_sum_f32"
		}
		if w := widths[entry]; !slices.Equal(sizes, w) {
			t.Errorf("%v: the typed arguments' sizes are %v, the PTX's %s takes %v (a PTX older than the kernels' source? cuda/kernels/gen.sh regenerates it; BRAID_CUDA_KERNELS tries a build)", c.kind, sizes, entry, w)
		}
		if got := args.pack(nil); !slices.Equal(got, values) {
			t.Errorf("%v: pack writes %v, the fields in order are %v", c.kind, got, values)
		}
		if len(values) > maxArgs {
			t.Errorf("%v: %d arguments, maxArgs is %d", c.kind, len(values), maxArgs)
		}
		// Kernel's fields, by the parameters' names.
		by := map[string]uint64{}
		for _, f := range fs {
			by[f.name] = f.value
		}
		rounds := a.Rounds()
		if rounds < 1 {
			t.Fatalf("%v: the test's call takes %d rounds", c.kind, rounds)
		}
		want := map[string]uint64{"seqs": 0x5e0, "rounds": uint64(rounds), "rank": 2, "nranks": 4, "slot_bytes": 4096, "area_bytes": 1024, "timeout_ns": 5,
			"status": 0x77, "r0": 0x100, "r3": 0x400, "r4": 0, "r7": 0}
		switch c.kind {
		case Bcast:
			want["buf"], want["bytes"], want["root"], want["ramp_in"] = 0xb0, 4000, 3, 2
		case Allgather, AllgatherLL:
			want["in"], want["out"], want["bytes"] = 0xa0, 0xb0, 4000
		default:
			want["in"], want["out"], want["n"] = 0xa0, 0xb0, 1000
		}
		if c.kind == Bcast || c.kind == TwoShot || c.kind == ReduceScatter || c.kind == Allgather {
			want["host"], want["host_bytes"] = 0x1000, 64
		}
		for k, v := range want {
			if got, ok := by[k]; !ok || got != v {
				t.Errorf("%v: parameter %s is %#x (present %v), want %#x", c.kind, k, got, ok, v)
			}
		}
	}
}

// TestServeArgs is TestKernelArgs for the resident allreduce
// (braid_llserve_<op>_<type>), and checks that the bell's three groups of
// words sit on separate 64-byte lines, the arguments on the host's.
func TestServeArgs(t *testing.T) {
	m := regexp.MustCompile(`braid_llserve_##opname##_##tname\( (.*?)\) \{`).FindStringSubmatch(kernelText(t))
	if m == nil {
		t.Fatal("cuda/kernels: no braid_llserve_##opname##_##tname")
	}
	names := kernelParams(m[1])
	v := Server{DType: dtype.Float32, Op: dtype.Sum, Bell: 0xbe11, Served: 7, Epoch: 3, Idle: 9, Seqs: 0x5e0, Rank: 1,
		Regions: []cuda.DevicePtr{0x100, 0x200, 0x300}, SlotBytes: 4096, Status: 0x77}
	args := v.args()
	fs := flatten(t, reflect.ValueOf(args).Elem())
	var got []string
	var sizes []int
	var values []uint64
	by := map[string]uint64{}
	for _, f := range fs {
		got, sizes, values = append(got, f.name), append(sizes, f.size), append(values, f.value)
		by[f.name] = f.value
	}
	if !slices.Equal(got, names) {
		t.Errorf("the typed arguments are (%s), the kernels' source declares (%s)", strings.Join(got, " "), strings.Join(names, " "))
	}
	widths, ok := ptxWidths(t)["braid_llserve_sum_f32"]
	if !ok {
		t.Fatal("the embedded PTX has no braid_llserve_sum_f32 (older than the kernels' source? cuda/kernels/gen.sh regenerates it)")
	}
	if !slices.Equal(sizes, widths) {
		t.Errorf("the typed arguments' sizes are %v, the PTX's braid_llserve_sum_f32 takes %v", sizes, widths)
	}
	if p := args.pack(nil); !slices.Equal(p, values) {
		t.Errorf("pack writes %v, the fields in order are %v", p, values)
	}
	want := map[string]uint64{"bell": 0xbe11, "served": 7, "epoch": 3, "idle_ns": 9, "seqs": 0x5e0, "rank": 1, "nranks": 3,
		"slot_bytes": 4096, "status": 0x77, "r0": 0x100, "r2": 0x300, "r3": 0}
	for k, w := range want {
		if g, ok := by[k]; !ok || g != w {
			t.Errorf("parameter %s is %#x (present %v), want %#x", k, g, ok, w)
		}
	}
	line := func(w int) int { return w * 4 / 64 }
	if line(BellArgs) != line(BellArgs+15) || BellArgs%16 != 0 || line(BellDone) == line(BellArgs) || line(BellExited) == line(BellDone) ||
		line(BellQuit) == line(BellExited) || line(BellQuit) == line(BellArgs) || BellWords*4 != 4*64 {
		t.Errorf("the bell's words (args %d, done %d, exited %d, quit %d of %d) are not on lines of their own", BellArgs, BellDone,
			BellExited, BellQuit, BellWords)
	}
	// Ring's records: { low, ticket, high, ticket } for in, out, n, timeout.
	bell := make([]byte, 4*BellWords)
	Ring(bell, 9, 0x1122334455667788, 0xa0, 1000, 7)
	for i, v := range []uint64{0x1122334455667788, 0xa0, 1000, 7} {
		w := func(j int) uint32 { return binary.LittleEndian.Uint32(bell[4*BellArgs+16*i+4*j:]) }
		if w(1) != 9 || w(3) != 9 || uint64(w(0))|uint64(w(2))<<32 != v {
			t.Errorf("record %d is %#x %#x %#x %#x, want %#x with ticket 9 twice", i, w(0), w(1), w(2), w(3), v)
		}
	}
}

// TestKindNames checks that every kind's name is the one the planner's
// decisions carry (plan.Fused.Kind), so that a decision names the kernel
// that runs.
func TestKindNames(t *testing.T) {
	want := map[Kind]string{OneShot: plan.FusedOneShot, OneShotLL: plan.FusedOneShotLL, TwoShotLL: plan.FusedTwoShotLL,
		TwoShot: plan.FusedTwoShot, Bcast: plan.FusedBcast, Allgather: plan.FusedAllgather, ReduceScatter: plan.FusedReduceScatter,
		ReduceScatterLL: plan.FusedReduceScatterLL, AllgatherLL: plan.FusedAllgatherLL}
	for k := OneShot; k <= AllgatherLL; k++ {
		if k.String() != want[k] {
			t.Errorf("kind %d is %q, plan names it %q", int(k), k, want[k])
		}
		if lines := strings.HasSuffix(want[k], "-ll"); k.Lines() != lines {
			t.Errorf("kind %v: Lines %v, want %v (its name ends in -ll)", k, k.Lines(), lines)
		}
	}
	if s := Kind(99).String(); s != "kind 99" {
		t.Errorf("an unknown kind is %q", s)
	}
}

// TestKernelCheckSeqs checks that a kernel without sequence counters or
// status words is refused before launch (it would read its sequence
// number from address 0, or store its end at address 4), and that the
// same kernel with them passes the check.
func TestKernelCheckSeqs(t *testing.T) {
	a := Kernel{Kind: OneShotLL, Count: 2, DType: dtype.Float32, Op: dtype.Sum, In: 0x100, Out: 0x200,
		Regions: []cuda.DevicePtr{0x1000, 0x2000}, SlotBytes: 4096, Status: 0x4000}
	if err := a.check(); err == nil || !strings.Contains(err.Error(), "sequence counters") {
		t.Errorf("a kernel without Seqs: %v, want an error naming the sequence counters", err)
	}
	a.Seqs, a.Status = 0x3000, 0
	if err := a.check(); err == nil || !strings.Contains(err.Error(), "status words") {
		t.Errorf("a kernel without Status: %v, want an error naming the status words", err)
	}
	a.Status = 0x4000
	if err := a.check(); err != nil {
		t.Errorf("with Seqs and Status: %v", err)
	}
	family, args := a.args(new(argSet))
	if p := args.pack(nil); family != "oneshotll" || p[3] != 0x3000 || p[4] != 1 {
		t.Errorf("%s packs seqs %#x and rounds %d, want 0x3000 and 1", family, p[3], p[4])
	}
}

// TestKernelSignalEnd checks that a kernel asked to store its end
// carries the request in the top bit of its rounds, and that only a
// kernel of one block may be asked (one of several blocks does not store
// it, and its caller would poll a word that never comes).
func TestKernelSignalEnd(t *testing.T) {
	a := Kernel{Kind: OneShotLL, Count: 2, DType: dtype.Float32, Op: dtype.Sum, In: 0x100, Out: 0x200,
		Regions: []cuda.DevicePtr{0x1000, 0x2000}, SlotBytes: 4096, Seqs: 0x3000, Status: 0x4000, SignalEnd: true}
	if err := a.check(); err != nil {
		t.Fatalf("a kernel of one block asked to store its end: %v", err)
	}
	if _, args := a.args(new(argSet)); args.pack(nil)[4] != endFlag|1 {
		t.Errorf("rounds %#x, want %#x (one round, the end asked for)", args.pack(nil)[4], endFlag|1)
	}
	a.SignalEnd = false
	if _, args := a.args(new(argSet)); args.pack(nil)[4] != 1 {
		t.Errorf("rounds %#x without SignalEnd, want 1", args.pack(nil)[4])
	}
	a.SignalEnd, a.Blocks = true, 2
	if a.Grid() != 2 {
		t.Fatalf("grid %d, want 2", a.Grid())
	}
	if err := a.check(); err == nil || !strings.Contains(err.Error(), "one block") {
		t.Errorf("a kernel of %d blocks asked to store its end: %v, want a refusal", a.Grid(), err)
	}
}
