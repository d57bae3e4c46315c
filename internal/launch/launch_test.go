package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braid-ccl/braid/bootstrap"
)

// childEnv makes a re-executed test binary act as a rank; its value picks
// what the rank does (see childMain).
const childEnv = "BRAID_LAUNCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := childMain(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func childMain(mode string) error {
	switch mode {
	case "store":
		info, err := bootstrap.FromEnv()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, closer, err := bootstrap.Open(ctx, &info)
		if err != nil {
			return err
		}
		defer closer()
		if err := s.Set(ctx, fmt.Sprintf("addr/%d", info.Rank), []byte(fmt.Sprint(os.Getpid()))); err != nil {
			return err
		}
		var pids []string
		for p := range info.Size {
			v, err := s.Get(ctx, fmt.Sprintf("addr/%d", p))
			if err != nil {
				return err
			}
			pids = append(pids, string(v))
		}
		n, err := s.Add(ctx, "count", 1)
		if err != nil {
			return err
		}
		fmt.Printf("rank %d of %d (%s) saw %d pids, count %d\n", info.Rank, info.Size, info.Launcher, len(pids), n)
	case "lines":
		// Long lines, each written in two pieces, to tempt interleaving.
		rank := os.Getenv(bootstrap.EnvRank)
		line := strings.Repeat(rank, 3000)
		for i := range 100 {
			os.Stdout.WriteString(fmt.Sprintf("%03d:", i) + line[:1000])
			os.Stdout.WriteString(line[1000:] + "\n")
		}
		os.Stdout.WriteString("no newline at the end")
	case "report-first", "report-dead":
		return reportChild(mode)
	case "launcher":
		// A launcher whose ranks print their pids and sleep.
		return Run(context.Background(), sh(2, `echo $$; exec sleep 60`))
	case "guarded-launcher":
		// The same, with a guardian that writes, to the file that
		// guardEnv names, "left" and the ranks still alive when it cleans.
		cfg := sh(2, `echo $$; exec sleep 60`)
		cfg.Guard = []string{"env", childEnv + "=guard", os.Args[0]}
		return Run(context.Background(), cfg)
	case "guard":
		Guard(os.Stdin, 10*time.Second, func(left []int) {
			os.WriteFile(os.Getenv(guardEnv), []byte(fmt.Sprint("left ", left)), 0o600)
		})
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	return nil
}

// reportChild is a rank that reports a failure through the store as
// braid's communicators do, in one of two scenarios:
//
//   - report-first: rank 2 reports a timeout first and exits 1 half a
//     second later; rank 0 waits for that report, reports the abort it
//     echoes and exits 3 at once (the first to exit); rank 1 reports the
//     loss of rank 0 and exits 3; rank 3 exits 0.
//   - report-dead: rank 1 dies by SIGKILL without a report; rank 0 reports
//     the loss of rank 1 and exits 3.
func reportChild(mode string) error {
	info, err := bootstrap.FromEnv()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, closer, err := bootstrap.Open(ctx, &info)
	if err != nil {
		return err
	}
	defer closer()
	report := func(kind string, peer int, echo bool, msg string) error {
		return bootstrap.ReportFailure(ctx, s, bootstrap.Failure{Rank: info.Rank, Time: time.Now(), Kind: kind, Peer: peer, Echo: echo, Msg: msg})
	}
	switch mode + "/" + strconv.Itoa(info.Rank) {
	case "report-first/2":
		if err := report("timeout", 3, false, "braid: rank 2: allreduce: timeout (peer rank 3): no progress"); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		os.Exit(1)
	case "report-first/0":
		if _, err := s.Get(ctx, "braid/bootstrap/failures/1"); err != nil {
			return err
		}
		report("aborted", 2, true, "braid: rank 0: allreduce: aborted (peer rank 2)")
		os.Exit(3)
	case "report-first/1":
		if _, err := s.Get(ctx, "braid/bootstrap/failures/2"); err != nil {
			return err
		}
		report("peer lost", 0, false, "braid: rank 1: allreduce: peer lost (peer rank 0)")
		os.Exit(3)
	case "report-dead/1":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "report-dead/0":
		time.Sleep(100 * time.Millisecond)
		report("peer lost", 1, false, "braid: rank 0: allreduce: peer lost (peer rank 1)")
		os.Exit(3)
	}
	return nil
}

// syncBuf is a bytes.Buffer safe for concurrent use.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sortedLines returns the non-empty lines of s, sorted.
func sortedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

func sh(n int, script string) Config {
	return Config{N: n, Prog: "sh", Args: []string{"-c", script}}
}

func run(t *testing.T, cfg Config) (stdout, stderr string, took time.Duration, err error) {
	t.Helper()
	var o, e syncBuf
	cfg.Stdout, cfg.Stderr = &o, &e
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = Run(ctx, cfg)
	return o.String(), e.String(), time.Since(start), err
}

func TestRunOK(t *testing.T) {
	cfg := sh(3, `echo "hello from $BRAID_RANK"; echo "err $BRAID_RANK" >&2`)
	cfg.Prefix = true
	out, errOut, _, err := run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"[0] hello from 0", "[1] hello from 1", "[2] hello from 2"}
	if got := sortedLines(out); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("stdout %q; want %q", got, want)
	}
	if got := sortedLines(errOut); strings.Join(got, "|") != "[0] err 0|[1] err 1|[2] err 2" {
		t.Fatalf("stderr %q", got)
	}
}

func TestRunNoPrefix(t *testing.T) {
	out, _, _, err := run(t, sh(2, `echo "r$BRAID_RANK"`))
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedLines(out); strings.Join(got, "|") != "r0|r1" {
		t.Fatalf("stdout %q", got)
	}
}

// TestRunTorchEnv checks torchrun's variables, which PyTorch's default
// rendezvous reads, and that a launcher's own are left alone.
func TestRunTorchEnv(t *testing.T) {
	for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} {
		if _, ok := os.LookupEnv(k); ok {
			t.Skipf("%s is set in the test's environment", k)
		}
	}
	cfg := sh(2, `echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"`)
	out, _, _, err := run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := sortedLines(out)
	if len(lines) != 2 {
		t.Fatalf("output %q", out)
	}
	port := strings.Fields(lines[0])[len(strings.Fields(lines[0]))-1]
	for r, l := range lines {
		if want := fmt.Sprintf("%d 2 %d 2 127.0.0.1 %s", r, r, port); l != want || port == "" {
			t.Errorf("rank %d: %q; want %q", r, l, want)
		}
	}
	cfg = sh(2, `echo "[$RANK] [$LOCAL_RANK] $MASTER_PORT"`)
	cfg.Env = []string{"MASTER_PORT=1234"}
	out, _, _, err = run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sortedLines(out), "|"); got != "[] [] 1234|[] [] 1234" {
		t.Errorf("with MASTER_PORT set: %q", got)
	}
}

func TestRunEnv(t *testing.T) {
	cfg := sh(3, `echo "$BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK $BRAID_LOCAL_SIZE $BRAID_STORE $BRAID_SECRET $BRAID_JOB $BRAID_STORE_EXTERNAL $EXTRA"`)
	cfg.Env = []string{"EXTRA=extra", "BRAID_RANK=99"}
	cfg.JobID = "job-7"
	out, _, _, err := run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := sortedLines(out)
	if len(lines) != 3 {
		t.Fatalf("output %q", out)
	}
	var store, secret string
	for r, l := range lines {
		f := strings.Fields(l)
		if len(f) != 9 {
			t.Fatalf("rank %d: %q", r, l)
		}
		if r == 0 {
			store, secret = f[4], f[5]
		}
		want := fmt.Sprintf("%d 3 %d 3 %s %s job-7 1 extra", r, r, store, secret)
		if l != want {
			t.Errorf("rank %d: %q; want %q", r, l, want)
		}
	}
	if !strings.HasPrefix(store, "127.0.0.1:") || len(secret) != 64 {
		t.Errorf("store %q, secret %q", store, secret)
	}
}

// TestRunStore: ranks (this test binary, re-executed) meet through the
// store that Run serves.
func TestRunStore(t *testing.T) {
	cfg := Config{N: 4, Prog: os.Args[0], Env: []string{childEnv + "=store"}, Prefix: true}
	out, errOut, _, err := run(t, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := sortedLines(out)
	if len(lines) != 4 {
		t.Fatalf("output %q\nstderr %s", out, errOut)
	}
	counts := map[string]bool{}
	for r, l := range lines {
		prefix := fmt.Sprintf("[%d] rank %d of 4 (braid) saw 4 pids, count ", r, r)
		if !strings.HasPrefix(l, prefix) {
			t.Errorf("%q; want %q…", l, prefix)
		}
		counts[strings.TrimPrefix(l, prefix)] = true
	}
	if len(counts) != 4 {
		t.Errorf("Add gave %v", counts)
	}
}

func TestRunPrefixWholeLines(t *testing.T) {
	cfg := Config{N: 3, Prog: os.Args[0], Env: []string{childEnv + "=lines"}, Prefix: true}
	out, errOut, _, err := run(t, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r, i int
		if _, err := fmt.Sscanf(l, "[%d] %d:", &r, &i); err != nil {
			if strings.HasSuffix(l, "] no newline at the end") {
				continue
			}
			t.Fatalf("line %.80q…: %v", l, err)
		}
		body := l[strings.Index(l, ":")+1:]
		if body != strings.Repeat(fmt.Sprint(r), 3000) {
			t.Fatalf("line of rank %d is mixed: %.80q…", r, l)
		}
		n++
	}
	if n != 300 || strings.Count(out, "no newline at the end\n") != 3 {
		t.Fatalf("%d whole lines, %d last lines", n, strings.Count(out, "no newline at the end\n"))
	}
}

func TestRunFailure(t *testing.T) {
	_, _, took, err := run(t, sh(4, `if [ "$BRAID_RANK" = 2 ]; then sleep 0.1; exit 3; fi; sleep 60`))
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Rank != 2 || exit.Status != 3 || err.Error() != "rank 2 exited with status 3" {
		t.Fatalf("Run = %v; want rank 2 exited with status 3", err)
	}
	if exit.ExitCode() != 3 {
		t.Errorf("ExitCode = %d", exit.ExitCode())
	}
	if took > 10*time.Second {
		t.Fatalf("Run took %v to stop the sleeping ranks", took)
	}
}

func TestRunKilled(t *testing.T) {
	_, _, took, err := run(t, sh(3, `if [ "$BRAID_RANK" = 1 ]; then kill -KILL $$; fi; sleep 60`))
	var exit *ExitError
	if !errors.As(err, &exit) || err.Error() != "rank 1 exited with signal killed" || exit.ExitCode() != 137 {
		t.Fatalf("Run = %v; want rank 1 exited with signal killed", err)
	}
	if took > 10*time.Second {
		t.Fatalf("Run took %v", took)
	}
}

// TestRunGrace: ranks that ignore SIGTERM are killed after the grace
// period.
func TestRunGrace(t *testing.T) {
	cfg := sh(3, `trap "" TERM; if [ "$BRAID_RANK" = 0 ]; then sleep 0.1; exit 1; fi; sleep 60`)
	cfg.Grace = 300 * time.Millisecond
	_, _, took, err := run(t, cfg)
	if err == nil || err.Error() != "rank 0 exited with status 1" {
		t.Fatalf("Run = %v", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Run took %v with a grace of %v", took, cfg.Grace)
	}
}

func TestRunTimeout(t *testing.T) {
	cfg := sh(2, `sleep 60`)
	cfg.Timeout = 200 * time.Millisecond
	_, _, took, err := run(t, cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want a deadline error", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Run took %v", took)
	}
}

func TestRunStartError(t *testing.T) {
	_, _, _, err := run(t, Config{N: 2, Prog: "/nonexistent/braid-test-prog"})
	if err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("Run = %v", err)
	}
	if _, _, _, err := run(t, Config{N: 0, Prog: "true"}); err == nil {
		t.Fatal("Run with 0 ranks succeeded")
	}
}

// TestRunForwardsSignals sends SIGINT to this process while ranks run:
// Run must pass it on to them, not die of it.
func TestRunForwardsSignals(t *testing.T) {
	ready := make(chan struct{})
	var (
		mu   sync.Mutex
		seen int
	)
	out := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		seen += strings.Count(string(p), "ready")
		if seen == 2 {
			close(ready)
		}
		return len(p), nil
	})
	go func() {
		<-ready
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	var errOut syncBuf
	cfg := sh(2, `trap "echo got INT >&2; exit 7" INT; echo ready; while :; do sleep 0.05; done`)
	cfg.Stdout, cfg.Stderr, cfg.Prefix = out, &errOut, true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := Run(ctx, cfg)
	var intr *InterruptedError
	if !errors.As(err, &intr) || err.Error() != "interrupted (SIGINT): stopped 2 ranks" || intr.ExitCode() != 130 {
		t.Fatalf("Run = %v; want interrupted (SIGINT): stopped 2 ranks", err)
	}
	if n := strings.Count(errOut.String(), "got INT"); n != 2 {
		t.Fatalf("%d ranks got SIGINT; want 2:\n%s", n, errOut.String())
	}
}

// TestRunBlamesFirstFailure: the rank named is the one whose failure came
// first by the ranks' reports, not the first to exit; echoes of another
// rank's abort and losses of a rank that died are not causes.
func TestRunBlamesFirstFailure(t *testing.T) {
	cfg := Config{N: 4, Prog: os.Args[0], Env: []string{childEnv + "=report-first"}, Prefix: true}
	_, errOut, _, err := run(t, cfg)
	var exit *ExitError
	want := "rank 2 failed first: rank 2: allreduce: timeout (peer rank 3): no progress (it then exited with status 1)"
	if !errors.As(err, &exit) || exit.Rank != 2 || err.Error() != want || exit.ExitCode() != 1 {
		t.Fatalf("Run = %v\nwant %s\n%s", err, want, errOut)
	}
	cfg.Env = []string{childEnv + "=report-dead"}
	cfg.N = 2
	_, errOut, _, err = run(t, cfg)
	if !errors.As(err, &exit) || err.Error() != "rank 1 exited with signal killed" {
		t.Fatalf("Run = %v; want rank 1 exited with signal killed\n%s", err, errOut)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startLauncher starts this test binary as a launcher (env picks which)
// whose two ranks print their pids, and returns it once they have.
func startLauncher(t *testing.T, env ...string) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 2 && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("launcher printed %q", sc.Text())
		}
		pids = append(pids, pid)
	}
	return cmd, pids
}

// TestRunDiesWithParent: when the launcher is killed, so are its ranks.
func TestRunDiesWithParent(t *testing.T) {
	cmd, pids := startLauncher(t, childEnv+"=launcher")
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("rank %d outlived its launcher", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// guardEnv names the file where the guardian of guarded-launcher writes.
const guardEnv = "BRAID_LAUNCH_TEST_GUARD"

// TestGuardAfterLauncherKilled: the guardian outlives a launcher killed by
// SIGKILL, and cleans up once the ranks its death killed are gone.
func TestGuardAfterLauncherKilled(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "cleaned")
	cmd, pids := startLauncher(t, childEnv+"=guarded-launcher", guardEnv+"="+mark)
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the guardian cleaned while the launcher ran")
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(mark)
		if err == nil && len(b) > 0 {
			if got := string(b); got != "left []" {
				t.Fatalf("the guardian cleaned with ranks alive: %q (ranks %v)", got, pids)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no guardian cleaned within 10 s of the launcher's death")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range pids {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("rank %d outlived its launcher", pid)
		}
	}
}

// TestGuardWaits: Guard cleans only once the processes it read are gone,
// or the limit passed, and names those left.
func TestGuardWaits(t *testing.T) {
	short := exec.Command("sleep", "0.3")
	long := exec.Command("sleep", "60")
	for _, c := range []*exec.Cmd{short, long} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer long.Process.Kill()
	go short.Wait()
	in := fmt.Sprintf("%d\n", short.Process.Pid)
	var cleaned bool
	Guard(strings.NewReader(in), 10*time.Second, func(left []int) {
		cleaned = true
		if len(left) != 0 || alive(short.Process.Pid) {
			t.Errorf("cleaned with %v left, sleep 0.3 alive %v", left, alive(short.Process.Pid))
		}
	})
	if !cleaned {
		t.Fatal("Guard did not clean")
	}
	start := time.Now()
	Guard(strings.NewReader(fmt.Sprintf("%d\n", long.Process.Pid)), 200*time.Millisecond, func(left []int) {
		if len(left) != 1 || left[0] != long.Process.Pid {
			t.Errorf("left %v, want [%d]", left, long.Process.Pid)
		}
		if time.Since(start) < 200*time.Millisecond {
			t.Errorf("cleaned %v after its start, before the limit", time.Since(start))
		}
	})
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestRunStoppedRank: a rank stopped by SIGSTOP neither ends by itself
// nor acts on SIGTERM; once every other rank has ended, Run stops it at
// once rather than after the linger and grace periods (an hour each here,
// so a Run that waited for either would not return before the test's
// context ends).
func TestRunStoppedRank(t *testing.T) {
	// Rank 0 fails once rank 1 is stopped, so that Run finds it stopped
	// however slowly the shells start.
	cfg := sh(3, `case "$BRAID_RANK" in
	0) while [ ! -s "$STOPPED" ]; do sleep 0.01; done
	   until [ "$(sed 's/.*) //' /proc/$(cat "$STOPPED")/stat | cut -c1)" = T ]; do sleep 0.01; done
	   exit 1;;
	1) echo $$ >"$STOPPED.tmp"; mv "$STOPPED.tmp" "$STOPPED"; kill -STOP $$; exit 0;;
	esac; exit 0`)
	cfg.Env = []string{"STOPPED=" + filepath.Join(t.TempDir(), "stopped")}
	cfg.Grace, cfg.Linger = time.Hour, time.Hour
	_, _, took, err := run(t, cfg)
	if err == nil || err.Error() != "rank 0 exited with status 1" {
		t.Fatalf("Run = %v after %v; want rank 0 exited with status 1", err, took)
	}
}
