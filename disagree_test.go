package braid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/launch"
)

// disagreement is a call on which the ranks of a job disagree: call makes
// rank's part of it on a communicator of n ranks.
type disagreement struct {
	name     string
	minRanks int
	call     func(ctx context.Context, c *braid.Comm) error
}

// disagreements lists the disagreements every transport must report as
// Mismatch on every rank: the cases of issue 16 (every rank a bcast root,
// bcast against reduce and against allreduce, gather with different roots)
// and a difference in each argument of the signature.
var disagreements = []disagreement{
	{"bcast-every-root", 2, func(ctx context.Context, c *braid.Comm) error {
		return c.Bcast(ctx, make([]float32, 64), c.Rank())
	}},
	{"bcast-vs-reduce", 2, func(ctx context.Context, c *braid.Comm) error {
		b := make([]float32, 64)
		if c.Rank() == 0 {
			return c.Bcast(ctx, b, 0)
		}
		return c.Reduce(ctx, b, nil, braid.Sum, 0)
	}},
	{"bcast-vs-allreduce", 2, func(ctx context.Context, c *braid.Comm) error {
		b := make([]float32, 64)
		if c.Rank() == 0 {
			return c.Bcast(ctx, b, 0)
		}
		return c.Allreduce(ctx, b, b, braid.Sum)
	}},
	{"gather-roots", 2, func(ctx context.Context, c *braid.Comm) error {
		root := c.Rank() % 2
		return c.Gather(ctx, make([]float32, 8), make([]float32, 8*c.Size()), root)
	}},
	{"reduce-roots", 2, func(ctx context.Context, c *braid.Comm) error {
		b := make([]float32, 64)
		return c.Reduce(ctx, b, make([]float32, 64), braid.Sum, c.Rank()%2)
	}},
	{"scatter-roots", 2, func(ctx context.Context, c *braid.Comm) error {
		return c.Scatter(ctx, make([]float32, 8*c.Size()), make([]float32, 8), c.Size()-1-c.Rank()%2)
	}},
	{"gather-vs-allgather", 2, func(ctx context.Context, c *braid.Comm) error {
		in, out := make([]float32, 8), make([]float32, 8*c.Size())
		if c.Rank() == c.Size()-1 {
			return c.Allgather(ctx, in, out)
		}
		return c.Gather(ctx, in, out, 0)
	}},
	{"count", 2, func(ctx context.Context, c *braid.Comm) error {
		n := 1000
		if c.Rank() == c.Size()-1 {
			n = 1001
		}
		b := make([]float32, n)
		return c.Allreduce(ctx, b, b, braid.Sum)
	}},
	{"dtype", 2, func(ctx context.Context, c *braid.Comm) error {
		if c.Rank() == c.Size()-1 {
			b := make([]int32, 100)
			return c.Allreduce(ctx, b, b, braid.Sum)
		}
		b := make([]float32, 100)
		return c.Allreduce(ctx, b, b, braid.Sum)
	}},
	{"op", 2, func(ctx context.Context, c *braid.Comm) error {
		op := braid.Sum
		if c.Rank() == c.Size()-1 {
			op = braid.Max
		}
		b := make([]float32, 100)
		return c.Allreduce(ctx, b, b, op)
	}},
	{"bcast-root", 3, func(ctx context.Context, c *braid.Comm) error {
		root := 0
		if c.Rank() == c.Size()-1 {
			root = 1
		}
		return c.Bcast(ctx, make([]float32, 100), root)
	}},
	{"reduce-vs-allreduce", 2, func(ctx context.Context, c *braid.Comm) error {
		b := make([]float32, 100)
		if c.Rank() == c.Size()-1 {
			return c.Reduce(ctx, b, b, braid.Sum, 0)
		}
		return c.Allreduce(ctx, b, b, braid.Sum)
	}},
}

// nextCall is the call the ranks make after a disagreement: none of them
// depends on every rank on every rank (a rank that only sends in it
// learns nothing from it), so a rank that got no Mismatch from the
// disagreeing call must get it from this one (the lagged confirmation,
// confirm.go).
type nextCall struct {
	name string
	call func(ctx context.Context, c *braid.Comm) error
}

var nextCalls = []nextCall{
	{"bcast-root0", func(ctx context.Context, c *braid.Comm) error {
		return c.Bcast(ctx, make([]float32, 16), 0)
	}},
	{"reduce-root-last", func(ctx context.Context, c *braid.Comm) error {
		return c.Reduce(ctx, make([]float32, 16), make([]float32, 16), braid.Sum, c.Size()-1)
	}},
	{"scatter-root0", func(ctx context.Context, c *braid.Comm) error {
		return c.Scatter(ctx, make([]float32, 4*c.Size()), make([]float32, 4), 0)
	}},
	{"gather-root0", func(ctx context.Context, c *braid.Comm) error {
		return c.Gather(ctx, make([]float32, 4), make([]float32, 4*c.Size()), 0)
	}},
}

// nextFor returns the next call of case i on n ranks: the cases take the
// next calls in turn.
func nextFor(i, n int) nextCall { return nextCalls[(i+n)%len(nextCalls)] }

// schedOnly is a BRAID_ALGO that keeps every collective off the host's
// shared area (schedules over the transport); "shm" puts every collective
// the area runs on it.
const schedOnly = "allreduce=ring,reduce=binomial,bcast=binomial,allgather=ring,reducescatter=ring,barrier=dissemination"

// disagreeOutcome is what one rank saw: the error of the disagreeing call
// and of the next call.
type disagreeOutcome struct {
	call, next error
}

// verdict returns "" if the rank reported Mismatch in time: at the
// disagreeing call in strict mode, else at that call or the next.
func (o disagreeOutcome) verdict(strict bool) string {
	k1, k2 := braid.KindOf(o.call), braid.KindOf(o.next)
	switch {
	case k1 == braid.Mismatch:
		return ""
	case strict:
		return fmt.Sprintf("strict mode: the call returned %v, want Mismatch", o.call)
	case o.call != nil:
		return fmt.Sprintf("the call returned %v, want Mismatch", o.call)
	case k2 == braid.Mismatch:
		return ""
	default:
		return fmt.Sprintf("the call succeeded and the next returned %v, want Mismatch", o.next)
	}
}

// TestDisagreementLocal runs every disagreement on goroutine ranks (2 to 5
// of them), on schedules over the in-process transport and on the shared
// area, in the default mode and in strict mode, and checks that every rank
// reports Mismatch: in strict mode from the call itself, else at the
// latest from its next call, which is one that does not depend on every
// rank (a broadcast, reduce, scatter or gather: see nextCalls).
func TestDisagreementLocal(t *testing.T) {
	for _, path := range []string{"sched", "area"} {
		for _, mode := range []string{"default", "strict"} {
			for i, d := range disagreements {
				for n := max(2, d.minRanks); n <= 5; n++ {
					if testing.Short() && n != 3 && n != d.minRanks {
						continue
					}
					next := nextFor(i, n)
					t.Run(fmt.Sprintf("%s/%s/%s/n=%d/then-%s", path, mode, d.name, n, next.name), func(t *testing.T) {
						t.Parallel()
						opts := &braid.Options{Timeout: 5 * time.Second, Algo: schedOnly}
						if path == "area" {
							opts.Algo = "shm"
						}
						if mode == "strict" {
							opts.Check = "strict"
						}
						start := time.Now()
						outs := make([]disagreeOutcome, n)
						onRanks(t, n, opts, func(c *braid.Comm) error {
							ctx := context.Background()
							o := &outs[c.Rank()]
							o.call = d.call(ctx, c)
							o.next = next.call(ctx, c)
							return nil
						})
						for r, o := range outs {
							if v := o.verdict(mode == "strict"); v != "" {
								t.Errorf("rank %d: %s", r, v)
							}
						}
						if t.Failed() {
							t.Logf("after %v", time.Since(start).Round(time.Millisecond))
						}
					})
				}
			}
		}
	}
}

// TestAgreementNextCalls checks the other side of the lagged confirmation:
// ranks that agree run long sequences of calls that are not complete
// everywhere (broadcasts, reduces, scatters and gathers from every root,
// and calls of no elements), on schedules and on the shared area, with
// right results and no error.
func TestAgreementNextCalls(t *testing.T) {
	for _, path := range []string{"sched", "area"} {
		for n := 2; n <= 4; n++ {
			t.Run(fmt.Sprintf("%s/n=%d", path, n), func(t *testing.T) {
				t.Parallel()
				opts := &braid.Options{Timeout: 10 * time.Second, Algo: schedOnly}
				if path == "area" {
					opts.Algo = "shm"
				}
				errs := onRanks(t, n, opts, func(c *braid.Comm) error {
					ctx := context.Background()
					for i := range 60 {
						root := i % n
						b := make([]float32, 8)
						if c.Rank() == root {
							for j := range b {
								b[j] = float32(i + j)
							}
						}
						var err error
						switch i % 5 {
						case 0:
							if err = c.Bcast(ctx, b, root); err == nil && b[7] != float32(i+7) {
								return fmt.Errorf("call %d: bcast gave %v", i, b)
							}
						case 1:
							out := make([]float32, 8)
							in := []float32{1, 1, 1, 1, 1, 1, 1, 1}
							if err = c.Reduce(ctx, in, out, braid.Sum, root); err == nil && c.Rank() == root && out[0] != float32(n) {
								return fmt.Errorf("call %d: reduce gave %v", i, out)
							}
						case 2:
							err = c.Scatter(ctx, make([]float32, 2*n), make([]float32, 2), root)
						case 3:
							err = c.Gather(ctx, make([]float32, 2), make([]float32, 2*n), root)
						case 4:
							err = c.Bcast(ctx, []float32{}, root)
						}
						if err != nil {
							return fmt.Errorf("call %d: %w", i, err)
						}
					}
					return c.Barrier(ctx)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// childRoles are the programs a test's child processes run (TestMain
// dispatches on BRAID_TEST_CHILD).
var childRoles = map[string]func() int{
	"disagree": disagreeChild,
}

// procRun starts n ranks of this test binary as a job (like braid run),
// in role with env added, and returns each rank's lines of standard
// output that begin with marker (the marker cut off).
func procRun(t *testing.T, n int, role, marker string, env ...string) map[int][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut lockedBuffer
	err := launch.Run(ctx, launch.Config{N: n, Prog: os.Args[0], Prefix: true, Stdout: &out, Stderr: &errOut,
		Env: append([]string{"BRAID_TEST_CHILD=" + role}, env...)})
	if err != nil {
		t.Errorf("%d ranks of %s %v: %v\n%s", n, role, env, err, errOut.String())
	}
	lines := map[int][]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		var r int
		var rest string
		if i := strings.Index(l, "] "+marker); i > 0 && l[0] == '[' {
			if _, err := fmt.Sscanf(l[1:i], "%d", &r); err == nil {
				rest = l[i+2+len(marker):]
				lines[r] = append(lines[r], rest)
			}
		}
	}
	return lines
}

// lockedBuffer is a bytes.Buffer safe for the launcher's copiers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// disagreeChild is one rank of TestDisagreementProcs: it makes the
// disagreeing call BRAID_TEST_CASE names, then the next call
// BRAID_TEST_NEXT names, then closes the communicator, and prints what
// each returned.
func disagreeChild() int {
	name, nextName := os.Getenv("BRAID_TEST_CASE"), os.Getenv("BRAID_TEST_NEXT")
	var d *disagreement
	for i := range disagreements {
		if disagreements[i].name == name {
			d = &disagreements[i]
		}
	}
	if name == sameArgs.name {
		d = &sameArgs
	}
	var next *nextCall
	for i := range nextCalls {
		if nextCalls[i].name == nextName {
			next = &nextCalls[i]
		}
	}
	if d == nil || next == nil {
		fmt.Fprintf(os.Stderr, "unknown case %q or next call %q\n", name, nextName)
		return 2
	}
	if a := os.Getenv("BRAID_TEST_ALGO_LAST"); a != "" && os.Getenv("BRAID_RANK") == fmt.Sprint(mustAtoi(os.Getenv("BRAID_WORLD_SIZE"))-1) {
		// The last rank plans differently (TestAreaAgainstSchedule).
		os.Setenv("BRAID_ALGO", a)
	}
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	o := disagreeOutcome{call: d.call(ctx, c)}
	o.next = next.call(ctx, c)
	cerr := c.Close()
	fmt.Printf("RESULT %d %d %s\n", braid.KindOf(o.call), braid.KindOf(o.next), time.Since(start).Round(time.Millisecond))
	fmt.Printf("ERRORS %v | %v | close: %v\n", o.call, o.next, cerr)
	return 0
}

// TestDisagreementProcs runs every disagreement on processes (2 to 5 of
// them, in turn): on schedules over shm and over tcp, and on the host's
// shared area (BRAID_ALGO=shm, for the collectives it runs), in the
// default mode and in strict mode (BRAID_CHECK=strict). Every rank must
// report Mismatch: in strict mode from the call, else at the latest from
// the next call, which does not depend on every rank (nextCalls), not
// from Close. Under the race detector, strict mode runs each case on one
// path.
func TestDisagreementProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for pi, path := range []string{"shm", "tcp", "area"} {
		for _, mode := range []string{"default", "strict"} {
			for i, d := range disagreements {
				n := max(2+(i+pi)%4, d.minRanks)
				if raceEnabled && mode == "strict" && i%3 != pi {
					// Under the race detector (CI), strict mode on one
					// path per case, in turn.
					continue
				}
				next := nextFor(i+pi, n)
				t.Run(fmt.Sprintf("%s/%s/%s/n=%d/then-%s", path, mode, d.name, n, next.name), func(t *testing.T) {
					t.Parallel()
					env := []string{"BRAID_TEST_CASE=" + d.name, "BRAID_TEST_NEXT=" + next.name, "BRAID_TIMEOUT=10s"}
					switch path {
					case "area":
						env = append(env, "BRAID_TRANSPORT=shm", "BRAID_ALGO=shm")
					default:
						env = append(env, "BRAID_TRANSPORT="+path, "BRAID_ALGO="+schedOnly)
					}
					if mode == "strict" {
						env = append(env, "BRAID_CHECK=strict")
					}
					res := procRun(t, n, "disagree", "", env...)
					for r := range n {
						var k1, k2 int
						var took string
						var errs string
						for _, l := range res[r] {
							if s, ok := strings.CutPrefix(l, "RESULT "); ok {
								fmt.Sscanf(s, "%d %d %s", &k1, &k2, &took)
							}
							if s, ok := strings.CutPrefix(l, "ERRORS "); ok {
								errs = s
							}
						}
						ok := braid.ErrorKind(k1) == braid.Mismatch || mode == "default" && k1 == 0 && braid.ErrorKind(k2) == braid.Mismatch
						if !ok {
							t.Errorf("rank %d: call %v, next call %v after %s: %s", r, braid.ErrorKind(k1), braid.ErrorKind(k2), took, errs)
						}
					}
				})
			}
		}
	}
}

// TestStrictNamesCalls checks that strict mode's Mismatch names every
// rank's call, the same on every rank.
func TestStrictNamesCalls(t *testing.T) {
	var d disagreement
	for _, x := range disagreements {
		if x.name == "bcast-vs-reduce" {
			d = x
		}
	}
	errs := onRanks(t, 3, &braid.Options{Check: braid.CheckStrict}, func(c *braid.Comm) error {
		return d.call(context.Background(), c)
	})
	want := []string{"call 1 (BRAID_CHECK=strict): the ranks disagree: rank 0: bcast root 0 of 64 × float32 via ",
		"; ranks 1, 2: reduce root 0 of 64 × float32 sum via "}
	for r, err := range errs {
		if braid.KindOf(err) != braid.Mismatch {
			t.Errorf("rank %d: %v, want Mismatch", r, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("rank %d: %q does not say %q", r, err, w)
			}
		}
	}
}

// TestMismatchPeerOnSplit checks that a Mismatch on a split communicator
// names its peer by its rank in that communicator, not in the world: 4
// ranks split in reverse order (rank r of the split is world rank 3−r),
// and the split's rank 0 broadcasts where the others reduce.
func TestMismatchPeerOnSplit(t *testing.T) {
	const n = 4
	var d disagreement
	for _, x := range disagreements {
		if x.name == "bcast-vs-reduce" {
			d = x
		}
	}
	type seen struct {
		rank int
		err  error
	}
	got := make([]seen, n)
	onRanks(t, n, &braid.Options{Timeout: 5 * time.Second, Algo: schedOnly}, func(c *braid.Comm) error {
		ctx := context.Background()
		s := &got[c.Rank()]
		sub, err := c.Split(ctx, 0, -c.Rank())
		if err != nil {
			s.rank, s.err = -1, fmt.Errorf("Split: %w", err)
			return err
		}
		s.rank = sub.Rank()
		if s.err = d.call(ctx, sub); s.err == nil {
			s.err = nextCalls[0].call(ctx, sub)
		}
		return nil
	})
	worldRE := regexp.MustCompile(`world rank (\d+)'s messages for it carry signature`)
	direct := 0
	for w, s := range got {
		var be *braid.Error
		if !errors.As(s.err, &be) || be.Kind != braid.Mismatch {
			t.Errorf("world rank %d (split rank %d): %v, want Mismatch", w, s.rank, s.err)
			continue
		}
		if s.rank == -1 {
			// Still in Split's last step when the others, done with it,
			// disagreed: the job's failure reaches it there, as it may.
			continue
		}
		if s.rank != n-1-w {
			t.Fatalf("world rank %d is rank %d of the split, want %d: %v", w, s.rank, n-1-w, s.err)
		}
		if be.Peer < -1 || be.Peer >= n {
			t.Errorf("world rank %d: Peer %d out of range: %v", w, be.Peer, s.err)
		}
		// The rank that compared the signatures names the sender by world
		// rank in the text and by split rank in Peer.
		if m := worldRE.FindStringSubmatch(s.err.Error()); m != nil && strings.Count(s.err.Error(), "messages for it carry signature") == 1 {
			var wp int
			fmt.Sscan(m[1], &wp)
			if be.Peer != n-1-wp {
				t.Errorf("world rank %d: Peer %d, but the sender was world rank %d, rank %d of the split: %v", w, be.Peer, wp, n-1-wp, s.err)
			}
			direct++
		}
	}
	if direct == 0 {
		t.Errorf("no rank reported the signatures it compared: %v", got)
	}
}

// sameArgs is a call on which the ranks agree, unless they plan it
// differently (TestAreaAgainstSchedule).
var sameArgs = disagreement{"same-args", 2, func(ctx context.Context, c *braid.Comm) error {
	b := make([]float32, 64)
	return c.Allreduce(ctx, b, b, braid.Sum)
}}

// TestAreaAgainstSchedule runs each disagreement, and a call whose
// arguments agree, on processes whose last rank plans differently from
// the others: the others through the host's shared area (BRAID_ALGO=shm)
// and the last on schedules over shm, or the other way round. A rank
// that waits in the area for a rank that runs a schedule of the same call
// number, or the reverse, must get Mismatch (naming its own call and how
// it ran it), by the next call at the latest, not a Timeout.
func TestAreaAgainstSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cases := append([]disagreement{sameArgs}, disagreements...)
	for li, lastArea := range []bool{false, true} {
		for i, d := range cases {
			n := max(2+(i+li)%3, d.minRanks)
			next := nextFor(i+li, n)
			base, last := "shm", schedOnly
			if lastArea {
				base, last = schedOnly, "shm"
			}
			t.Run(fmt.Sprintf("last-area=%v/%s/n=%d/then-%s", lastArea, d.name, n, next.name), func(t *testing.T) {
				t.Parallel()
				res := procRun(t, n, "disagree", "", "BRAID_TEST_CASE="+d.name, "BRAID_TEST_NEXT="+next.name, "BRAID_TIMEOUT=10s",
					"BRAID_TRANSPORT=shm", "BRAID_ALGO="+base, "BRAID_TEST_ALGO_LAST="+last)
				for r := range n {
					var k1, k2 int
					var took, errs string
					for _, l := range res[r] {
						if s, ok := strings.CutPrefix(l, "RESULT "); ok {
							fmt.Sscanf(s, "%d %d %s", &k1, &k2, &took)
						}
						if s, ok := strings.CutPrefix(l, "ERRORS "); ok {
							errs = s
						}
					}
					if braid.ErrorKind(k1) != braid.Mismatch && (k1 != 0 || braid.ErrorKind(k2) != braid.Mismatch) {
						t.Errorf("rank %d: call %v, next call %v after %s: %s", r, braid.ErrorKind(k1), braid.ErrorKind(k2), took, errs)
					}
				}
			})
		}
	}
}
