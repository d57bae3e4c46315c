package braid_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
// of them), in the default mode and in strict mode, and checks that every
// rank reports Mismatch: in strict mode from the call itself, else at the
// latest from its next call (a barrier).
func TestDisagreementLocal(t *testing.T) {
	for _, mode := range []string{"default", "strict"} {
		for _, d := range disagreements {
			for n := max(2, d.minRanks); n <= 5; n++ {
				if testing.Short() && n != 3 && n != d.minRanks {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/n=%d", mode, d.name, n), func(t *testing.T) {
					t.Parallel()
					opts := &braid.Options{Timeout: 5 * time.Second}
					if mode == "strict" {
						opts.Check = "strict"
					}
					start := time.Now()
					outs := make([]disagreeOutcome, n)
					onRanks(t, n, opts, func(c *braid.Comm) error {
						ctx := context.Background()
						o := &outs[c.Rank()]
						o.call = d.call(ctx, c)
						o.next = c.Barrier(ctx)
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
// disagreeing call BRAID_TEST_CASE names, then closes the communicator,
// and prints what each returned.
func disagreeChild() int {
	name := os.Getenv("BRAID_TEST_CASE")
	var d *disagreement
	for i := range disagreements {
		if disagreements[i].name == name {
			d = &disagreements[i]
		}
	}
	if d == nil {
		fmt.Fprintf(os.Stderr, "unknown case %q\n", name)
		return 2
	}
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	o := disagreeOutcome{call: d.call(ctx, c)}
	o.next = c.Close()
	fmt.Printf("RESULT %d %d %s\n", braid.KindOf(o.call), braid.KindOf(o.next), time.Since(start).Round(time.Millisecond))
	fmt.Printf("ERRORS %v | %v\n", o.call, o.next)
	return 0
}

// TestDisagreementProcs runs every disagreement on processes, over shm and
// over tcp (BRAID_TRANSPORT=tcp), in the default mode and in strict mode
// (BRAID_CHECK=strict): every rank must report Mismatch, in strict mode
// from the call, else at the latest from Close (collective for processes).
// Under the race detector, strict mode runs each case over one transport.
func TestDisagreementProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tr := range []string{"shm", "tcp"} {
		for _, mode := range []string{"default", "strict"} {
			for i, d := range disagreements {
				n := max(3, d.minRanks)
				if d.name == "gather-roots" {
					n = 2
				}
				if raceEnabled && mode == "strict" && (i%2 == 0) != (tr == "shm") {
					// Under the race detector (CI), strict mode on one
					// transport per case, alternately.
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", tr, mode, d.name), func(t *testing.T) {
					t.Parallel()
					env := []string{"BRAID_TEST_CASE=" + d.name, "BRAID_TRANSPORT=" + tr, "BRAID_TIMEOUT=10s"}
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
							t.Errorf("rank %d: call %v, close %v after %s: %s", r, braid.ErrorKind(k1), braid.ErrorKind(k2), took, errs)
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
