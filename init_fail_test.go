package braid_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/internal/launch"
)

func init() {
	childRoles["init"] = initChild
	childRoles["launch-init"] = launchInitChild
}

// launchInitChild runs a job of 2 ranks of initChild, as braid run would,
// with their output on its own.
func launchInitChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	err := launch.Run(ctx, launch.Config{N: 2, Prog: os.Args[0], Prefix: true, Stdout: os.Stdout, Stderr: os.Stdout,
		Env: []string{"BRAID_TEST_CHILD=init"}})
	fmt.Printf("braid run: %v\n", err)
	return 0
}

// initChild is a rank that calls Init and prints its result as
// "RESULT kind peer message" (kind 0: no error), then closes.
func initChild() int {
	c, err := braid.Init(context.Background(), nil)
	if err == nil {
		fmt.Println("RESULT 0 -1 ok")
		c.Close()
		return 0
	}
	var e *braid.Error
	if !errors.As(err, &e) {
		fmt.Printf("RESULT -1 -1 %v\n", err)
		return 1
	}
	fmt.Printf("RESULT %d %d %s\n", e.Kind, e.Peer, strings.ReplaceAll(e.Error(), "\n", " "))
	return 1
}

// result parses what initChild printed.
func result(out string) (kind braid.ErrorKind, peer int, msg string, ok bool) {
	i := strings.Index(out, "RESULT ")
	if i < 0 {
		return 0, 0, "", false
	}
	var k int
	if _, err := fmt.Sscanf(out[i+len("RESULT "):], "%d %d", &k, &peer); err != nil {
		return 0, 0, "", false
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	return braid.ErrorKind(k), peer, line, true
}

// TestInitFullShm runs a job of 2 ranks on a /dev/shm of 64 KiB (a
// tmpfs mounted in a user and mount namespace of their own, where their
// launcher runs), too small for their shm segments: Init fails on every
// rank with Unsupported, the machine's doing, with ENOSPC, the segment's
// file and size, and what to do; or, on a rank that learnt of the other's
// failure first (through the store), with Aborted naming that rank and
// carrying its error.
func TestInitFullShm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const mount = `mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$0"`
	if out, err := exec.Command("unshare", "-Urm", "sh", "-c", mount, "true").CombinedOutput(); err != nil {
		t.Skipf("no user and mount namespaces to mount a small /dev/shm in: %v %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-Urm", "sh", "-c", mount, os.Args[0])
	cmd.Env = append(os.Environ(), "BRAID_TEST_CHILD=launch-init", "BRAID_TIMEOUT=20s")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("the job's launcher: %v\n%s", err, out)
	}
	lines := map[int]string{}
	for _, l := range strings.Split(out, "\n") {
		var r int
		if _, err := fmt.Sscanf(l, "[%d]", &r); err == nil && strings.Contains(l, "RESULT ") {
			lines[r] = l
		}
	}
	own := 0
	for r := range 2 {
		kind, peer, msg, ok := result(lines[r])
		if !ok {
			t.Errorf("rank %d printed no result:\n%s", r, out)
			continue
		}
		t.Logf("rank %d: %s", r, msg)
		switch {
		case kind == braid.Unsupported:
			own++
		case kind == braid.Aborted && peer == 1-r:
		default:
			t.Errorf("rank %d: kind %v, peer %d; want %v, or %v naming rank %d", r, kind, peer, braid.Unsupported, braid.Aborted, 1-r)
		}
		for _, want := range []string{"ENOSPC", "/dev/shm/braid-", "bytes", "BRAID_TRANSPORT=tcp"} {
			if !strings.Contains(msg, want) {
				t.Errorf("rank %d: want the error to say %q", r, want)
			}
		}
	}
	if own == 0 {
		t.Error("no rank reported its own ENOSPC")
	}
}
