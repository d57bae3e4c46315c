package braid_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/algo"
	"github.com/braid-ccl/braid/internal/bench"
	"github.com/braid-ccl/braid/internal/check"
	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

// full runs the whole product of the matrix (BRAID_TEST_FULL=1): every
// collective × algorithm × dtype × op × rank count 1–9 × every count. The
// default run covers each dimension fully but not every combination: see
// TestMatrix.
var full = os.Getenv("BRAID_TEST_FULL") != ""

// maxCount, if set (BRAID_TEST_MAXCOUNT), leaves out larger counts. On the
// 2-core machine the full product up to 65537 takes about 2.5 minutes; every
// case at 2^20+3 is 16 times larger and the whole takes far longer.
var maxCount = func() int {
	n, err := strconv.Atoi(os.Getenv("BRAID_TEST_MAXCOUNT"))
	if err != nil {
		return 0
	}
	return n
}()

var (
	smallCounts = []int{0, 1, 7, 1000}
	largeCounts = []int{65537, 1<<20 + 3}
)

// onRanks runs f on every rank of a fresh local job and returns the errors.
func onRanks(t testing.TB, n int, opts *braid.Options, f func(c *braid.Comm) error) []error {
	t.Helper()
	comms, err := braid.NewLocal(n, opts)
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(comms[r])
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatalf("%d ranks: hang: not every rank returned within 120 s", n)
	}
	for _, c := range comms {
		c.Close()
	}
	return errs
}

// mcase is one call of the matrix.
type mcase struct {
	d       dtype.DType
	op      dtype.Op
	count   int
	root    int
	inPlace bool
	real    bool // the real-valued pattern (check.FillReal), not small integers
	// delay, if set, makes each rank wait a random time of up to delay
	// before the call, so that the ranks arrive in a random order.
	delay time.Duration
}

// runCases runs every case, in order, on one local job of n ranks with the
// collective's algorithm forced, and verifies every rank's output. hosts,
// if not nil, names each rank's emulated host (Options.LocalHosts).
func runCases(t *testing.T, coll sched.Collective, algoName string, n int, hosts []string, cases []mcase) {
	t.Helper()
	if len(cases) == 0 {
		return
	}
	opts := &braid.Options{LocalHosts: hosts}
	if algoName != "" {
		opts.Algo = coll.String() + "=" + algoName
	}
	if treeDependent[coll.String()+"/"+algoName] {
		opts.Topology = matrixTopology(t, n)
	}
	errs := onRanks(t, n, opts, func(c *braid.Comm) error {
		for _, k := range cases {
			if err := oneCall(c, coll, k); err != nil {
				err = fmt.Errorf("%v %v count=%d root=%d inplace=%v real=%v: %w", k.d, k.op, k.count, k.root, k.inPlace, k.real, err)
				// A wrong result ends the job at once: the other ranks'
				// next calls fail instead of waiting out the timeout.
				c.Abort(err)
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("%v algo=%s n=%d hosts=%v: rank %d: %v", coll, algoName, n, hosts, r, err)
		}
	}
}

func oneCall(c *braid.Comm, coll sched.Collective, k mcase) error {
	n, rank, d, op, root := c.Size(), c.Rank(), k.d, k.op, k.root
	p := sched.Params{Coll: coll, NRanks: n, Count: k.count, Root: root}
	es := d.Size()
	salt := k.count + 7*n + int(d)*13 + int(op)*101
	in, out := check.Buffers(p, rank, es, k.inPlace)
	for i := range out {
		out[i] = 0xA5
	}
	fill, verify := check.Fill, check.Verify
	if k.real {
		fill, verify = check.FillReal, check.VerifyReal
	}
	if coll == sched.Bcast {
		if rank == root {
			fill(d, op, out, rank, 0, salt)
		}
	} else {
		fill(d, op, in, rank, 0, salt)
	}
	if k.delay > 0 {
		time.Sleep(time.Duration(rand.Int64N(int64(k.delay))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send, recv := braid.Raw{Bytes: in, Type: d}, braid.Raw{Bytes: out, Type: d}
	err := bench.Call(ctx, c, coll, send, recv, op, root)
	if err != nil {
		return err
	}
	return verify(p, d, op, rank, out[:p.OutLen(rank)*es], salt)
}

func opsFor(coll sched.Collective, d dtype.DType) []dtype.Op {
	if !coll.Reduces() {
		return []dtype.Op{dtype.Sum}
	}
	var ops []dtype.Op
	for _, o := range dtype.AllOps() {
		if dtype.Supports(d, o) {
			ops = append(ops, o)
		}
	}
	return ops
}

func rootsFor(coll sched.Collective, n int) []int {
	if !coll.Rooted() || n == 1 {
		return []int{0}
	}
	if n == 2 {
		return []int{0, 1}
	}
	return []int{0, n - 1, n / 2}
}

// TestMatrix checks every collective against its definition over inproc
// ranks. By default it covers:
//   - schedules: every algorithm × rank counts 1–9 × counts {0, 1, 7,
//     1000, 65537} × roots × in-place and not, with float32 sum
//     (schedules do not depend on the dtype or op), and 1<<20+3 on the
//     rank counts of largestRanks (up to 5 where growsWithRanks);
//   - kernels in collectives: every dtype × every op it supports × rank
//     counts 1–9 × counts {0, 1, 7, 1000}, with every algorithm; in place
//     too for every op of float32 and int32; for the floating-point
//     reductions also with real values (check.FillReal), within the
//     tolerance check.RealTolerance states.
//   - layouts: the algorithms of layoutDependent again on 2–9 ranks over
//     emulated hosts (matrixLayouts), float32 sum, every count (see
//     layoutCases for the roots).
//   - trees: the algorithms of treeDependent run, in all of the above, on
//     jobs given a topology (matrixTopology), with the trees the
//     communicator packs from it.
//
// Under the race detector it takes a sample (matrixCases: the rank counts
// of raceRanks, the large counts on 5 ranks only, each dtype but float32
// on a third of the rank counts, and no real values); scripts/test.sh
// runs the default matrix again without it.
// BRAID_TEST_FULL=1 runs the complete product.
func TestMatrix(t *testing.T) {
	for _, coll := range sched.Collectives() {
		for _, a := range algo.ForCollective(coll) {
			t.Run(coll.String()+"/"+a.Name(), func(t *testing.T) {
				t.Parallel()
				for n := 1; n <= 9; n++ {
					runCases(t, coll, a.Name(), n, nil, matrixCases(coll, a, n))
				}
				if !layoutDependent[coll.String()+"/"+a.Name()] {
					return
				}
				for n := 2; n <= 9; n++ {
					for i, hosts := range matrixLayouts(n) {
						runCases(t, coll, a.Name(), n, hosts, layoutCases(coll, a, n, i == 0))
					}
				}
			})
		}
	}
}

// layoutDependent lists the algorithms ("collective/name") whose schedule
// depends on the hosts of the ranks; the matrix runs them again over
// emulated hosts. The others ignore sched.Params.Layout.
var layoutDependent = map[string]bool{
	"allreduce/hier":     true,
	"allreduce/hierpipe": true,
	"bcast/hier":         true,
	"bcast/topochain":    true,
}

// treeDependent lists the algorithms ("collective/name") that run on the
// spanning trees the communicator packs from its topology; the matrix
// gives their jobs a topology (matrixTopology), on whose GPUs rank r runs
// on the r-th, and the packing's trees.
var treeDependent = map[string]bool{
	"bcast/treepack":     true,
	"reduce/treepack":    true,
	"allreduce/treepack": true,
}

// matrixTopology returns the topology of a job of n ranks of a
// tree-dependent algorithm: a DGX-1 V100 (8 GPUs, the machine of Blink,
// MLSys 2020) up to 8 ranks, whose NVLinks span every prefix of its GPUs
// but with uneven trees (one tree for 5 GPUs, 4 for the whole machine); two
// of them for 9, where the ninth rank is on the second node and the trees
// cross the network through PCIe switches, CPUs and NICs.
func matrixTopology(t *testing.T, n int) *topo.Topology {
	if n <= 8 {
		return topo.DGX1V100()
	}
	tp, err := topo.Preset("2xdgx1-v100")
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// matrixTrees returns trees that a tree-dependent algorithm accepts for p
// (a chain from the root), to ask it which calls it supports; the job's
// own trees come from its topology.
func matrixTrees(p sched.Params) *sched.Trees {
	tr := sched.Tree{Root: p.Root, Parent: make([]int, p.NRanks), Weight: 1}
	prev := -1
	for i := range p.NRanks {
		r := (p.Root + i) % p.NRanks
		tr.Parent[r] = prev
		prev = r
	}
	return &sched.Trees{Tree: []sched.Tree{tr}}
}

// matrixLayouts returns the emulated layouts the matrix runs the
// layout-dependent algorithms on for n ranks: two hosts with the ranks
// interleaved (a b a b ...), and up to three hosts of uneven sizes, partly
// interleaved (a b a a c ...: 3 ranks on a and 1 on b at n = 4; b has one
// rank up to n = 7). The full run adds two contiguous hosts and a host per
// rank.
func matrixLayouts(n int) [][]string {
	uneven := []string{"a", "b", "a", "a", "c", "a", "c", "b", "a"}
	var interleaved, contiguous, own []string
	for r := range n {
		interleaved = append(interleaved, string(rune('a'+r%2)))
		contiguous = append(contiguous, string(rune('a'+2*r/n)))
		own = append(own, fmt.Sprint("h", r))
	}
	ls := [][]string{interleaved, uneven[:n]}
	if full {
		ls = append(ls, contiguous, own)
	}
	return ls
}

// layoutCases lists the calls of a layout-dependent algorithm on emulated
// hosts: the schedule cases of matrixCases (float32 and its first op; the
// dtypes and ops do not depend on the layout), every root for the small
// counts and, if large is set, one root other than 0 for the large counts
// (where the model picks pipelined shapes), in place and not. The full run
// takes every case of matrixCases.
func layoutCases(coll sched.Collective, a algo.Algorithm, n int, large bool) []mcase {
	roots := rootsFor(coll, n)
	var cases []mcase
	for _, k := range matrixCases(coll, a, n) {
		if !full && (k.d != dtype.Float32 || k.op != opsFor(coll, k.d)[0]) {
			continue
		}
		if k.count > 1000 && !full && (!large || k.root != roots[len(roots)-1]) {
			continue
		}
		cases = append(cases, k)
	}
	return cases
}

// matrixCases lists the calls of one (collective, algorithm, rank count).
func matrixCases(coll sched.Collective, a algo.Algorithm, n int) []mcase {
	if raceEnabled && !full && !raceRanks(n) {
		return nil
	}
	var cases []mcase
	counts := append(append([]int{}, smallCounts...), largeCounts...)
	if coll == sched.Barrier {
		counts = []int{0}
	}
	for _, count := range counts {
		large := count > 1000
		if large && testing.Short() || maxCount > 0 && count > maxCount {
			continue
		}
		if count > 1<<17 && !full && (!largestRanks(n) || n > 5 && growsWithRanks(coll)) {
			continue
		}
		if large && !full && raceEnabled && (n != 5 || count > 1<<17) {
			// The race detector makes large counts slow: under it, only
			// 65537 on 5 ranks; scripts/test.sh runs the whole default
			// matrix again without it.
			continue
		}
		for _, root := range rootsFor(coll, n) {
			q := sched.Params{Coll: coll, NRanks: n, Count: count, Root: root}
			if treeDependent[coll.String()+"/"+a.Name()] {
				q.Trees = matrixTrees(q)
			}
			if a.Supports(q) != nil {
				continue
			}
			dts := []dtype.DType{dtype.Float32}
			if full || !large {
				dts = dtype.All()
			}
			for _, d := range dts {
				if raceSkipsDType(d, n) {
					continue
				}
				ops := opsFor(coll, d)
				if !full && large {
					ops = ops[:1]
				}
				for _, op := range ops {
					for _, inPlace := range []bool{false, true} {
						// In place: every op (its last step, avg's
						// division, may treat an aliased buffer
						// differently), of float32 and of int32 (the
						// bitwise ops), every dtype in the full run; at
						// the large counts float32's first op only.
						if !full && inPlace && d != dtype.Float32 && d != dtype.Int32 {
							continue
						}
						cases = append(cases, mcase{d: d, op: op, count: count, root: root, inPlace: inPlace})
					}
					// Real values, whose sums and products round, for the
					// floating-point reductions at the small counts. Not
					// under the race detector, outside the full run: the
					// pattern changes the values only, not the code a call
					// runs nor which goroutine touches which bytes (what
					// the race detector watches), and the check is the
					// kernels' rounding, which one goroutine computes.
					// scripts/test.sh's matrix step (go test -run
					// 'TestMatrix|TestPAPSameBits' ., without the race
					// detector) runs every one of them, in each test that
					// takes its cases from matrixCases.
					if coll.Reduces() && d.IsFloat() && !large && (!raceEnabled || full) {
						cases = append(cases, mcase{d: d, op: op, count: count, root: root, real: true})
					}
				}
			}
		}
	}
	return cases
}

// largestRanks reports whether the default run (not BRAID_TEST_FULL)
// runs the largest count, 1<<20+3, on n ranks: 2 (the pair's own paths),
// 3 and 5 (odd, blocks of uneven size), 8 (a power of two, the area's
// doubling) and 9 (beyond 8, two emulated nodes for the trees). The
// paths a size that large takes (pipelined segments, copies split
// across a rank's threads, the transport's rendezvous) depend on the
// size, not on which of these counts; leaving out 1, 4, 6 and 7 ranks
// there took the matrix step from 334 to 229 s on a 2-core machine
// (session 21), and 65537 still runs on them.
func largestRanks(n int) bool { return n == 2 || n == 3 || n == 5 || n == 8 || n == 9 }

// growsWithRanks reports whether a collective's buffers hold a block per
// rank (n × count elements): the default run takes their largest count
// on 2, 3 and 5 ranks only. A block of 1<<20+3 elements takes the same
// paths there as on 8 and 9 ranks, where a rank's buffers are 32–36 MiB;
// those cases were most of the matrix's allgather, gather, scatter and
// alltoall time, which was 41 % of the whole (session 23), and 65537
// still runs on 8 and 9.
func growsWithRanks(coll sched.Collective) bool {
	switch coll {
	case sched.Allgather, sched.Gather, sched.Scatter, sched.Alltoall:
		return true
	}
	return false
}

// raceRanks reports whether the matrix runs on n ranks under the race
// detector, outside the full run: 1, 2, 3, 5, 8 and 9 (one rank, a pair,
// odd counts, a power of two, and beyond 8, two emulated nodes for the
// trees), not 4, 6 and 7. The race detector watches the executor's and the
// transports' goroutines, whose interleavings these counts already give;
// scripts/test.sh's matrix step runs every count without it. Leaving the
// three out took about a third of the matrix's time under the race
// detector, the longest part of CI's race run (session 21).
func raceRanks(n int) bool { return n != 4 && n != 6 && n != 7 }

// raceSkipsDType reports whether the matrix leaves out dtype d on n ranks:
// under the race detector, outside the full run, each dtype but float32
// runs only on the rank counts n where its index in dtype.All() plus n is
// divisible by 3 (three of 1–9: a small, a middle and a large count), with
// every op, count, root and placement there. The race detector watches
// the executor's goroutines, whose work a dtype changes only through its
// element size, and every rank count still runs float32 and three other
// dtypes, of two or three sizes other than float32's. The kernels of each
// dtype and op on every rank count run in the same cases without the race
// detector in scripts/test.sh's matrix step (go test -run TestMatrix .),
// which the tests sharing matrixCases (TestMatrixShm, TestMatrixPAP,
// TestMatrixPAPChain, TestMatrixHierPAP, TestMatrixPAPBcast, TestMatrixAgg)
// are part of. Under the race detector these cases were 95 % of the
// matrix's calls.
func raceSkipsDType(d dtype.DType, n int) bool {
	if !raceEnabled || full || d == dtype.Float32 {
		return false
	}
	return (slices.Index(dtype.All(), d)+n)%3 != 0
}

func TestMain(m *testing.M) {
	// A tuning table cached by braid tune on this machine must not change
	// what the tests plan.
	if os.Getenv("BRAID_TUNING") == "" {
		os.Setenv("BRAID_TUNING", "none")
	}
	// Nor may a topology in the environment (it adds tree-packing plans,
	// and jobs of more ranks than its GPUs fail): tests that want one set
	// it.
	os.Unsetenv("BRAID_TOPO")
	if v := os.Getenv("BRAID_TEST_CHILD"); v != "" {
		os.Exit(childMain(v))
	}
	quickRaceExit()
	// The tests fail calls on purpose by the hundred, and every rank of
	// each dumps its flight recorder: on standard error that was 570 KB of
	// the package's output, in which CI's tail of the log lost the one
	// test that failed. The dumps go to files here instead (the same
	// code), for the tests' processes too, unless BRAID_FLIGHT is set;
	// TestFlightRecorder reads its own directory.
	flight := ""
	if _, ok := os.LookupEnv("BRAID_FLIGHT"); !ok {
		if d, err := os.MkdirTemp("", "braid-test-flight-"); err == nil {
			flight = d
			os.Setenv("BRAID_FLIGHT", d)
		}
	}
	code := m.Run()
	if flight != "" {
		os.RemoveAll(flight)
	}
	os.Exit(code)
}

// quickRaceExit sets GORACE's atexit_sleep_ms to 0 for the processes the
// tests start, unless GORACE already sets it. A process built with the race
// detector sleeps that long at exit (default 1000 ms) before ending, in case
// goroutines still running race then; a race found during the run, which is
// what the tests look for, still makes the process exit with status 66 and
// the test fail. The tests start hundreds of such processes, most of them
// in sequence, so the default costs minutes. GORACE=atexit_sleep_ms=1000
// restores it.
func quickRaceExit() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

// childComm initialises a child process's communicator from the
// environment its test set. fail ends the child on an error after that:
// it prints the error, aborts the job and returns the child's exit
// status. c is nil, the error printed, where Init failed.
func childComm(ctx context.Context) (c *braid.Comm, fail func(error) int) {
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, nil
	}
	return c, func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		c.Abort(err)
		return 1
	}
}

func childMain(role string) int {
	if f := childRoles[role]; f != nil {
		return f()
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}
