package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run Braid as users do: real processes started by braid run
// (or mpirun), over shm and tcp.

var binDir string

func TestMain(m *testing.M) {
	// A tuning table cached by braid tune on this machine must not change
	// what the tests plan.
	if os.Getenv("BRAID_TUNING") == "" {
		os.Setenv("BRAID_TUNING", "none")
	}
	// braid and the programs it starts are built with the race detector
	// when the tests are; each such process sleeps GORACE's
	// atexit_sleep_ms (default 1000 ms) at exit, in case goroutines still
	// running race then. A race found during the run still makes it exit
	// with status 66 and the test fail; the tests start hundreds of them,
	// so the sleep is 0 unless GORACE sets it (atexit_sleep_ms=1000
	// restores the default).
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
	dir, err := os.MkdirTemp("", "braid-cmd-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for _, b := range [][2]string{{"braid", "."}, {"loop", "../../internal/testprog/loop"}} {
		args := []string{"build", "-o", filepath.Join(dir, b[0])}
		if raceOn {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, b[1])...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b[0], ":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func braidBin() string { return filepath.Join(binDir, "braid") }

// run executes braid with args and returns its combined output.
func run(t *testing.T, timeout time.Duration, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, braidBin(), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("braid %v: did not finish within %v:\n%s", args, timeout, out.String())
	}
	return out.String(), err
}

func TestBenchCheckAllCollectives(t *testing.T) {
	colls := []string{"allreduce", "reduce", "bcast", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier"}
	for _, tr := range []string{"shm", "tcp"} {
		for _, coll := range colls {
			t.Run(tr+"/"+coll, func(t *testing.T) {
				out, err := run(t, 120*time.Second, nil, "run", "-n", "3", "--", "braid", "bench", coll,
					"--check", "--min-size", "4", "--max-size", "1M", "--iters", "3", "--warmup", "1",
					"--transport", tr, "--root", "1")
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if strings.Contains(out, " no") {
					t.Fatalf("wrong results:\n%s", out)
				}
				if coll != "barrier" && !strings.Contains(out, " yes") {
					t.Fatalf("no checked rows:\n%s", out)
				}
			})
		}
	}
}

func TestBenchInPlaceAndDtypes(t *testing.T) {
	for _, args := range [][]string{
		{"allreduce", "--dtype", "bfloat16", "--inplace"},
		{"allreduce", "--dtype", "float16", "--op", "max"},
		{"allreduce", "--dtype", "int64", "--op", "bxor"},
		{"allgather", "--inplace"},
		{"reducescatter", "--inplace", "--dtype", "float64", "--op", "avg"},
		{"alltoall", "--inplace"},
		{"reducescatter", "--registered", "--algo", "shm"},
		{"allgather", "--inplace", "--registered", "--algo", "shm"},
		{"allreduce", "--inplace", "--registered", "--dtype", "int32", "--op", "bor"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			full := append([]string{"run", "-n", "4", "--", "braid", "bench"}, args...)
			full = append(full, "--check", "--max-size", "256K", "--iters", "2", "--warmup", "1")
			out, err := run(t, 120*time.Second, nil, full...)
			if err != nil || strings.Contains(out, " no") {
				t.Fatalf("%v\n%s", err, out)
			}
			if slices.Contains(args, "--registered") && !strings.Contains(out, "registered buffers") {
				t.Errorf("the header does not say the buffers were registered:\n%s", out)
			}
		})
	}
}

// TestKillRank kills one rank in the middle of an allreduce: the others
// must fail with "peer lost" within 10 s, and braid run must exit non-zero
// naming the killed rank.
func TestKillRank(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "victim.pid")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, braidBin(), "run", "-n", "4", "--", filepath.Join(binDir, "loop"))
			cmd.Env = append(os.Environ(), "LOOP_VICTIM=2", "LOOP_PIDFILE="+pidfile, "LOOP_COUNT=262144", "BRAID_TRANSPORT="+tr)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			for pid == 0 {
				if ctx.Err() != nil {
					t.Fatalf("victim never started:\n%s", out.String())
				}
				if b, err := os.ReadFile(pidfile); err == nil {
					pid, _ = strconv.Atoi(string(b))
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			killed := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			el := time.Since(killed)
			s := out.String()
			if err == nil {
				t.Fatalf("braid run exited 0 after a rank was killed:\n%s", s)
			}
			if el > 10*time.Second {
				t.Errorf("took %v to end after the kill", el)
			}
			if !strings.Contains(s, "rank 2") {
				t.Errorf("braid run does not name rank 2:\n%s", s)
			}
			lost := strings.Count(s, "peer lost")
			if lost < 3 {
				t.Errorf("want the 3 survivors to report peer lost, %d did:\n%s", lost, s)
			}
			t.Logf("ended %v after the kill:\n%s", el, s)
		})
	}
}

// TestMpirun runs the benchmark under Debian's Open MPI, from Open MPI's
// environment alone.
func TestMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not installed (scripts/test.sh installs openmpi-bin)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "4",
		braidBin(), "bench", "allreduce", "--check", "--max-size", "1M", "--iters", "3", "--warmup", "1")
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BRAID_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " yes") || strings.Contains(string(out), " no") {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4 ranks") {
		t.Fatalf("bench did not see 4 ranks:\n%s", out)
	}
}

// TestBenchSelfLaunch: bench -n N starts its own ranks, with flags before
// or after the collective.
func TestBenchSelfLaunch(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "-n", "3", "gather", "--root", "2", "--max-size", "64", "--check", "--iters", "2", "--warmup", "1"},
		{"bench", "--check", "-n", "2", "allreduce", "--max-size", "64", "--iters", "2", "--warmup", "1"},
	} {
		out, err := run(t, 60*time.Second, nil, args...)
		if err != nil || !strings.Contains(out, " yes") || strings.Contains(out, " no") {
			t.Fatalf("braid %v: %v\n%s", args, err, out)
		}
	}
	out, err := run(t, 60*time.Second, []string{"BRAID_ALGO=allreduce=nosuch"}, "bench", "-n", "2", "allreduce", "--max-size", "8")
	if err == nil || !strings.Contains(out, `no allreduce algorithm named "nosuch"`) || strings.Contains(out, "braid: braid:") {
		t.Fatalf("unknown forced algorithm: %v\n%s", err, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "allfoo"},
		{"bench", "allreduce", "--dtype", "float128"},
		{"bench", "allreduce", "--op", "bxor"},
		{"run", "--", "true"},
		{"frobnicate"},
	} {
		out, err := run(t, 30*time.Second, nil, args...)
		if err == nil {
			t.Errorf("braid %v: exit 0, want a usage error:\n%s", args, out)
		}
		if !strings.Contains(out, "braid") {
			t.Errorf("braid %v: unclear message:\n%s", args, out)
		}
	}
}
