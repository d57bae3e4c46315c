package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braid-ccl/braid/internal/shmfile"
	"github.com/braid-ccl/braid/transport/shm"
)

// tagged returns the processes whose environment holds tag (KEY=VALUE).
func tagged(tag string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(b, []byte("\x00"+tag+"\x00")) && !bytes.HasPrefix(b, []byte(tag+"\x00")) {
			continue
		}
		if st, err := os.ReadFile(d + "/stat"); err == nil {
			f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
			if len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				continue
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

// untagged waits until no process carries tag, or limit passes, and
// returns those that still do.
func untagged(tag string, limit time.Duration) []int {
	deadline := time.Now().Add(limit)
	for {
		left := tagged(tag)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func killTagged(tag string) {
	for _, pid := range tagged(tag) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// startJob starts braid run with args and waits until want processes
// carry the job's tag.
func startJob(t *testing.T, env []string, want int, args ...string) (*exec.Cmd, *bytes.Buffer, string) {
	t.Helper()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc")
	}
	tag := fmt.Sprintf("BRAID_ORPHAN_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killTagged(tag) })
	cmd := exec.Command(braidBin(), args...)
	cmd.Env = append(append(os.Environ(), tag), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(tagged(tag)) < want {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%d processes of %d started:\n%s", len(tagged(tag)), want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, &out, tag
}

// TestLauncherKilledBehindShell: the ranks run under a shell, so that the
// parent-death signal of braid run reaches only the shells; when braid run
// is killed, the ranks notice the loss of its store and end, naming it.
func TestLauncherKilledBehindShell(t *testing.T) {
	loop := filepath.Join(binDir, "loop")
	pidfile := filepath.Join(t.TempDir(), "rank0.pid")
	// 1 launcher + 2 shells + 2 ranks carry the tag (and braid run's guardian, not waited for here).
	cmd, out, tag := startJob(t, []string{"LOOP_VICTIM=0", "LOOP_PIDFILE=" + pidfile, "LOOP_COUNT=4096"}, 5,
		"run", "-n", "2", "--", "sh", "-c", loop+"; echo shell went on")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(pidfile); err == nil {
			break // the ranks are in their loop of allreduces
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ranks never looped:\n%s", out.String())
		}
	}
	cmd.Process.Kill()
	// Wait returns once every holder of the output pipe, the orphaned
	// ranks included, has exited (or after WaitDelay).
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("braid run: %v", err)
	}
	// braid run's guardian carries the tag too, and ends once it has
	// cleaned up after the shells.
	if left := untagged(tag, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes %v outlived braid run:\n%s", left, out.String())
	}
	s := out.String()
	if n := strings.Count(s, "lost the job's store at 127.0.0.1:"); n < 1 {
		t.Fatalf("no rank names the lost store:\n%s", s)
	}
	if strings.Contains(s, "rank 0: ok") || strings.Contains(s, "rank 1: ok") {
		t.Fatalf("a rank ran to completion:\n%s", s)
	}
	t.Logf("after SIGKILL of braid run:\n%s", s)
}

// TestRunInterrupted: SIGINT to braid run stops the ranks and says so,
// rather than blaming a rank that died of the signal.
func TestRunInterrupted(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "rank.pid")
	cmd, out, _ := startJob(t, []string{"LOOP_VICTIM=1", "LOOP_PIDFILE=" + pidfile, "LOOP_COUNT=4096"}, 4,
		"run", "-n", "3", "--", filepath.Join(binDir, "loop"))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(pidfile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ranks never looped:\n%s", out.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("braid run = %v; want exit status 130\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "braid: interrupted (SIGINT): stopped 3 ranks") || strings.Contains(s, "exited with signal") {
		t.Fatalf("braid run's report of SIGINT:\n%s", s)
	}
}

// TestRunNamesHungRanksPeer: a rank stopped with SIGSTOP never fails by
// itself; braid run names the first rank whose call timed out, not the
// first to exit.
func TestRunNamesHungRanksPeer(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "victim.pid")
	cmd, out, _ := startJob(t, []string{"LOOP_VICTIM=2", "LOOP_PIDFILE=" + pidfile, "LOOP_COUNT=4096", "BRAID_TIMEOUT=2s"}, 4,
		"run", "-n", "3", "--", filepath.Join(binDir, "loop"))
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidfile); err == nil {
			pid, _ = strconv.Atoi(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim never looped:\n%s", out.String())
		}
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	s := out.String()
	if err == nil {
		t.Fatalf("braid run succeeded with a stopped rank:\n%s", s)
	}
	last := strings.TrimSpace(s[strings.LastIndex(strings.TrimSpace(s), "\n")+1:])
	if !strings.HasPrefix(last, "braid: rank 0 failed first: ") && !strings.HasPrefix(last, "braid: rank 1 failed first: ") ||
		!strings.Contains(last, "timeout") {
		t.Fatalf("braid run's last line %q does not name rank 0 or 1 timing out:\n%s", last, s)
	}
}

// TestTorchrunEnv runs two ranks with torchrun's documented variables
// only (no LOCAL_WORLD_SIZE, no BRAID_*), as a hand-written launcher
// would set them.
func TestTorchrunEnv(t *testing.T) {
	// Braid's store listens on MASTER_PORT+1 (torchrun's own store has
	// MASTER_PORT): take a free port for it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port - 1
	ln.Close()
	base := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BRAID_") || strings.HasPrefix(e, "BRAID_TUNING=") {
			base = append(base, e)
		}
	}
	start := func(rank int, addr string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(braidBin(), "bench", "allreduce", "--check", "--max-size", "64", "--iters", "2", "--warmup", "1")
		cmd.Env = append(base, "RANK="+strconv.Itoa(rank), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(rank),
			"MASTER_ADDR="+addr, "MASTER_PORT="+strconv.Itoa(port), "BRAID_TIMEOUT=20s")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 30 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	c0, o0 := start(0, "127.0.0.1")
	c1, o1 := start(1, "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); c0.Process.Kill(); c1.Process.Kill() }()
	e0, e1 := c0.Wait(), c1.Wait()
	if e0 != nil || e1 != nil || !strings.Contains(o0.String(), " yes") {
		t.Fatalf("torchrun-like ranks: %v, %v\nrank 0:\n%s\nrank 1:\n%s", e0, e1, o0, o1)
	}
	// Across hosts without BRAID_SECRET: the error names the rank.
	c1, o1 = start(1, "node-braid-test.invalid")
	if err := c1.Wait(); err == nil || !strings.Contains(o1.String(), "rank 1") || strings.Contains(o1.String(), "rank -1") ||
		!strings.Contains(o1.String(), "BRAID_SECRET") {
		t.Fatalf("rank 1 across hosts without a secret: %v\n%s", err, o1)
	}
}

// TestGuardReaps: once braid run has ended, its guardian removes the
// shared-memory files that dead processes of this PID namespace left in
// /dev/shm (as a rank killed with braid run would), and leaves a live
// process's.
func TestGuardReaps(t *testing.T) {
	ns := shmfile.PIDNamespace()
	if ns == 0 {
		t.Skip("no PID namespace in /proc")
	}
	if st, err := os.Stat(shm.DefaultDir); err != nil || !st.IsDir() {
		t.Skipf("no %s", shm.DefaultDir)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(shm.DefaultDir, fmt.Sprintf("braid-reg-p%d-n%d-%x", dead.Process.Pid, ns, time.Now().UnixNano()))
	live := filepath.Join(shm.DefaultDir, fmt.Sprintf("braid-reg-p%d-n%d-%x", os.Getpid(), ns, time.Now().UnixNano()))
	for _, f := range []string{stale, live} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Skipf("cannot write in %s: %v", shm.DefaultDir, err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	if out, err := run(t, 60*time.Second, nil, "run", "-n", "1", "--", "true"); err != nil {
		t.Fatalf("braid run: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(stale); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (its maker dead) still there 10 s after braid run ended", stale)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("the guardian removed a live process's file: %v", err)
	}
}
