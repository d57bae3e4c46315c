package bootstrap

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks a re-executed test binary that acts as a rank.
const childEnv = "BRAID_BOOTSTRAP_TEST_CHILD"

// crashEnv makes rank 1 of the child ranks kill itself: "before-settle"
// (right after Open) or "after-settle".
const crashEnv = "BRAID_BOOTSTRAP_TEST_CRASH"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := childMain(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childMain is a rank: it reads its place, opens the store, exchanges a
// key with every peer and prints what it learned.
func childMain() error {
	info, err := FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, closer, err := Open(ctx, &info)
	if err != nil {
		return err
	}
	defer closer()
	crash := os.Getenv(crashEnv)
	if crash == "before-settle" && info.Rank == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if err := s.Set(ctx, fmt.Sprint(info.Rank), []byte(info.JobID)); err != nil {
		return err
	}
	for p := range info.Size {
		v, err := s.Get(ctx, fmt.Sprint(p))
		if err != nil {
			return err
		}
		if string(v) != info.JobID {
			return fmt.Errorf("rank %d has job %q, rank %d %q", info.Rank, info.JobID, p, v)
		}
	}
	// Barrier before rank 0 closes the store.
	if _, err := s.Add(ctx, "done", 1); err != nil {
		return err
	}
	for {
		v, err := s.Get(ctx, "done")
		if err != nil {
			return err
		}
		if string(v) == fmt.Sprint(info.Size) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := Settle(ctx, s); err != nil {
		return err
	}
	if crash == "after-settle" {
		// Once the last rank has settled (the files are gone), rank 1
		// dies and the launcher kills the others.
		dir := strings.TrimPrefix(info.Store, "file:")
		for _, err := os.Stat(dir); err == nil; _, err = os.Stat(dir) {
			if ctx.Err() != nil {
				return fmt.Errorf("%s still there after every rank settled", dir)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if info.Rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(20 * time.Second)
	}
	fmt.Printf("rank=%d size=%d local=%d/%d launcher=%s job=%s secret=%x\n",
		info.Rank, info.Size, info.LocalRank, info.LocalSize, info.Launcher, info.JobID, info.Secret)
	return nil
}

// runLauncher runs a real launcher over re-executed test binaries and
// checks what the ranks report.
func runLauncher(t *testing.T, env []string, launcher, name string, args ...string) []string {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	tmp := t.TempDir()
	cmd.Env = append(append(os.Environ(), childEnv+"=1", "TMPDIR="+tmp, "OMPI_MCA_plm_rsh_agent=false"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "rank=") {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	if len(lines) != 3 {
		t.Fatalf("%s: %d ranks reported:\n%s", cmd, len(lines), out)
	}
	job := strings.Fields(lines[0])[4]
	secret := strings.Fields(lines[0])[5]
	for r, l := range lines {
		want := fmt.Sprintf("rank=%d size=3 local=%d/3 launcher=%s %s %s", r, r, launcher, job, secret)
		if l != want {
			t.Errorf("got  %s\nwant %s", l, want)
		}
	}
	t.Log(lines[0])
	// Rank 0 removed what the job left.
	left, _ := filepath.Glob(filepath.Join(tmp, "braid-*", "*"))
	if len(left) > 0 {
		t.Errorf("the job left %v", left)
	}
	return lines
}

// TestMPICHHydra runs three ranks under MPICH's mpiexec (hydra), one of
// them under a shell, so that the job id comes from the proxy above it.
func TestMPICHHydra(t *testing.T) {
	lines := runLauncher(t, nil, "pmi", "mpirun.mpich", "-n", "2", os.Args[0], ":", "-n", "1", "sh", "-c", `"$0"; exit $?`, os.Args[0])
	if !strings.Contains(lines[0], "job=hydra-") {
		t.Errorf("job id not from hydra's proxy: %s", lines[0])
	}
}

func TestOpenMPI(t *testing.T) {
	lines := runLauncher(t, nil, "openmpi", "mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", "3", os.Args[0])
	if !strings.Contains(lines[0], "job=ompi-") {
		t.Errorf("job id not from Open MPI: %s", lines[0])
	}
}

// TestMPICHHydraTCPStore: with BRAID_STORE=HOST:PORT, rank 0 serves a TCP
// store; the secret comes through a private file since the job is on one
// host.
func TestMPICHHydraTCPStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	runLauncher(t, []string{"BRAID_STORE=" + addr}, "pmi", "mpirun.mpich", "-n", "3", os.Args[0])
}

// TestOpenMPICrashLeavesNothing: an Open MPI job whose rank dies leaves no
// file in $TMPDIR/braid-UID: a crash after the set-up finds the files
// removed already (Settle), and what a crash during the set-up leaves is
// removed by the next job's rank 0.
func TestOpenMPICrashLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi is not installed")
	}
	tmp := t.TempDir()
	crashed := func(mode string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "3", os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+tmp, crashEnv+"="+mode, "OMPI_MCA_plm_rsh_agent=false")
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("%s: mpirun = %v, want a failure (rank 1 killed itself)\n%s", mode, err, out)
		}
		left, _ := filepath.Glob(filepath.Join(tmp, "braid-*", "*"))
		return left
	}
	if left := crashed("after-settle"); len(left) > 0 {
		t.Errorf("a job killed after its set-up left %v", left)
	}
	left := crashed("before-settle")
	if len(left) == 0 {
		t.Fatal("a job killed during its set-up left nothing: the reaper is not tested")
	}
	t.Logf("a job killed during its set-up left %v", left)
	runLauncher(t, []string{"TMPDIR=" + tmp}, "openmpi", mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "3", os.Args[0])
	if left, _ := filepath.Glob(filepath.Join(tmp, "braid-*", "*")); len(left) > 0 {
		t.Errorf("the next job's rank 0 did not remove %v", left)
	}
}
