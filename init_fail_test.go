package braid_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/bootstrap"
	"github.com/braid-ccl/braid/internal/launch"
)

func init() {
	childRoles["init"] = initChild
	childRoles["launch-init"] = launchInitChild
	childRoles["latefail"] = lateFailChild
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

// handJob is a job of 3 ranks over TCP that no launcher watches (the
// ranks are started by hand, as children running Init, rank 0 serving the
// store), and a client of its store.
type handJob struct {
	t     *testing.T
	ctx   context.Context
	env   []string
	outs  [3]lockedBuffer
	store bootstrap.Store
	rank0 *exec.Cmd
}

// startByHand starts rank 0 of a handJob named job and dials the store it
// serves; the other ranks are for the test to start (handJob.start).
func startByHand(t *testing.T, job string) *handJob {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	secret := make([]byte, 32)
	rand.Read(secret)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	j := &handJob{t: t, ctx: ctx, env: append(os.Environ(), "BRAID_TEST_CHILD=init", "BRAID_WORLD_SIZE=3", "BRAID_STORE="+addr,
		"BRAID_SECRET="+hex.EncodeToString(secret), "BRAID_JOB="+job, "BRAID_TRANSPORT=tcp", "BRAID_TIMEOUT=40s")}
	j.rank0 = j.start(0)
	if j.store, err = bootstrap.DialTCPStore(ctx, addr, secret); err != nil {
		t.Fatalf("the store rank 0 serves: %v\n%s", err, j.outs[0].String())
	}
	t.Cleanup(func() { j.store.Close() })
	return j
}

// start starts rank r; its output goes to j.outs[r].
func (j *handJob) start(r int) *exec.Cmd {
	cmd := exec.CommandContext(j.ctx, os.Args[0])
	cmd.Env = append(j.env, fmt.Sprintf("BRAID_RANK=%d", r))
	cmd.Stdout, cmd.Stderr = &j.outs[r], &j.outs[r]
	if err := cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	return cmd
}

// published waits until rank r has published its endpoint in the store:
// it is in its Init, past joining the store.
func (j *handJob) published(job string, r int) {
	if _, err := j.store.Get(j.ctx, fmt.Sprintf("braid/%s/ep/%d", job, r)); err != nil {
		j.t.Fatalf("rank %d did not publish its endpoint: %v\n%s", r, err, j.outs[r].String())
	}
}

// TestInitRankKilled kills rank 2 of 3 during its Init over TCP, under no
// launcher that watches it (the ranks are started by hand, rank 0 serving
// the store): rank 2 has joined the store and published its endpoint,
// and waits for rank 1, which starts only after rank 2's death. Ranks 0
// and 1 must fail Init with PeerLost naming rank 2 (the store saw its
// connection end), not wait for its connection until BRAID_TIMEOUT.
func TestInitRankKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const job = "initkill"
	j := startByHand(t, job)
	victim := j.start(2)
	j.published(job, 2)
	victim.Process.Kill()
	victim.Wait()
	killed := time.Now()
	rank1 := j.start(1)
	for r, cmd := range map[int]*exec.Cmd{0: j.rank0, 1: rank1} {
		cmd.Wait()
		kind, peer, msg, ok := result(j.outs[r].String())
		switch {
		case !ok:
			t.Errorf("rank %d printed no result:\n%s", r, j.outs[r].String())
		case kind != braid.PeerLost || peer != 2 || !strings.Contains(msg, "rank 2 "):
			t.Errorf("rank %d: %s; want PeerLost naming rank 2", r, msg)
		default:
			t.Logf("rank %d: %s", r, msg)
		}
	}
	t.Logf("ranks 0 and 1 ended %v after rank 2's death", time.Since(killed).Round(time.Millisecond))
}

// TestInitStoreServerKilled kills rank 0, which serves the job's TCP
// store (the ranks are started by hand, as under mpirun or torchrun), while
// rank 1 waits in its Init for rank 2, which never comes: rank 1 loses the
// store and must fail with PeerLost naming rank 0 as the store's server,
// not a store lost to nobody in particular, and not after BRAID_TIMEOUT.
func TestInitStoreServerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const job = "initserver"
	j := startByHand(t, job)
	rank1 := j.start(1)
	j.published(job, 1)
	j.rank0.Process.Kill()
	j.rank0.Wait()
	killed := time.Now()
	rank1.Wait()
	kind, peer, msg, ok := result(j.outs[1].String())
	switch {
	case !ok:
		t.Fatalf("rank 1 printed no result:\n%s", j.outs[1].String())
	case kind != braid.PeerLost || peer != 0 || !strings.Contains(msg, "rank 0, which served it, is gone"):
		t.Errorf("rank 1: %s; want PeerLost naming rank 0 as the store's server", msg)
	default:
		t.Logf("rank 1, %v after rank 0's death: %s", time.Since(killed).Round(time.Millisecond), msg)
	}
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

// lateFailChild is a rank of TestInitFailsLate: rank 1 runs on one CPU
// with BRAID_BIND=core, which fails its Init after every rank connected
// (2 ranks to bind, 1 CPU); the others call Allreduce after their Init and
// print its result as initChild prints Init's.
func lateFailChild() int {
	if os.Getenv("BRAID_RANK") == "1" {
		if os.Getenv("LATEFAIL_PINNED") == "" {
			// Every thread on CPU 0: run again (same pid) under taskset.
			ts, err := exec.LookPath("taskset")
			if err == nil {
				err = syscall.Exec(ts, append([]string{"taskset", "-c", "0"}, os.Args...), append(os.Environ(), "LATEFAIL_PINNED=1"))
			}
			fmt.Println("RESULT -1 -1 taskset:", err)
			return 1
		}
		os.Setenv("BRAID_BIND", "core")
	}
	ctx := context.Background()
	c, err := braid.Init(ctx, nil)
	if err == nil {
		b := make([]float32, 8)
		err = c.Allreduce(ctx, b, b, braid.Sum)
		defer c.Close()
	}
	var e *braid.Error
	switch {
	case err == nil:
		fmt.Println("RESULT 0 -1 ok")
	case errors.As(err, &e):
		fmt.Printf("RESULT %d %d %s\n", e.Kind, e.Peer, strings.ReplaceAll(e.Error(), "\n", " "))
	default:
		fmt.Printf("RESULT -1 -1 %v\n", err)
	}
	return 0
}

// TestInitFailsLate: a rank whose Init fails after every rank connected
// (its BRAID_BIND cannot be met) aborts its connections with its error,
// so that a peer whose Init succeeded fails its first call with Aborted
// naming that rank and its reason, not with a peer that closed its
// connections. Over shm and over tcp.
func TestInitFailsLate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			lines := procRun(t, 2, "latefail", "RESULT ", "BRAID_TRANSPORT="+tr, "BRAID_TIMEOUT=20s")
			if len(lines[1]) == 0 || !strings.Contains(lines[1][0], "CPUs to bind them to") {
				t.Fatalf("rank 1: %q, want its Init to fail binding", lines[1])
			}
			kind, peer, msg, ok := result("RESULT " + strings.Join(lines[0], ""))
			if !ok || kind != braid.Aborted || peer != 1 || !strings.Contains(msg, "CPUs to bind them to") {
				t.Errorf("rank 0: %q; want Aborted naming rank 1 and its reason", lines[0])
			}
		})
	}
}
