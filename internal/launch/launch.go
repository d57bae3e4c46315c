package launch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/bootstrap"
	"github.com/braid-ccl/braid/internal/shmfile"
)

// DefaultGrace is how long Run waits, after it asked the ranks to stop
// with SIGTERM, before it kills them with SIGKILL.
const DefaultGrace = 3 * time.Second

// DefaultLinger is how long Run waits, after a rank failed, for the others
// to end by themselves before it stops them.
const DefaultLinger = 2 * time.Second

// Config says what Run starts.
type Config struct {
	N    int      // the number of ranks, at least 1
	Prog string   // the program, looked up in PATH if it has no slash
	Args []string // its arguments, without the program's name
	Env  []string // extra KEY=VALUE variables, after the inherited ones

	// Prefix prefixes each line of the ranks' output with "[RANK] ". Lines
	// of different ranks never mix, but a line longer than 64 KiB may be
	// split. Without Prefix, the ranks write straight to Stdout and Stderr
	// when they are files.
	Prefix bool

	Stdout io.Writer // the ranks' standard output; nil means os.Stdout
	Stderr io.Writer // the ranks' standard error; nil means os.Stderr

	// Timeout, if not zero, stops the ranks when it passes.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL when Run stops the
	// ranks; zero means DefaultGrace.
	Grace time.Duration
	// Linger is how long Run lets the other ranks end by themselves after
	// one failed (they notice a dead peer and print their own error) before
	// it stops them; zero means DefaultLinger, negative means at once.
	Linger time.Duration
	// JobID names the job in BRAID_JOB; empty means a fresh one.
	JobID string
	// Logf logs what the store refuses; nil means log.Printf.
	Logf func(format string, args ...any)

	// Guard, if not empty, is the command (program and arguments) of a
	// guardian that Run starts before the ranks and that outlives Run: it
	// should call Guard with its standard input, to which Run writes each
	// rank's pid. A rank killed by the death signal when Run's process
	// dies (a SIGKILL of braid run) cannot remove the shared-memory files
	// it made; the guardian does, once the ranks are gone. It runs in its
	// own process group, with no output; Run goes on without it if it
	// cannot start.
	Guard []string
}

// ExitError reports the rank that failed first: the first whose
// communicator failed by its own account (a timeout, a mismatch, ...;
// Cause holds its error), or, if none said so before, the first that
// exited with a non-zero status or was killed by a signal.
type ExitError struct {
	Rank   int
	Status int            // the exit status, or -1 if a signal killed the rank
	Signal syscall.Signal // the signal that killed the rank, or 0
	// Cause is the error the rank reported through the job's store when
	// its communicator failed, or "" if it reported none.
	Cause string
	// Stuck, if not empty, says at which call the job stuck: the ranks
	// that reported being in it (their flight recorders' oldest call in
	// flight) and the ranks that never reported reaching it.
	Stuck string
}

// Error says which rank failed and how: "rank 2 exited with signal
// killed", "rank 1 exited with status 3", "rank 3 failed first: rank 3:
// allreduce: timeout (peer rank 2): ... (it then exited with status 3)".
func (e *ExitError) Error() string {
	how := fmt.Sprintf("exited with status %d", e.Status)
	if e.Signal != 0 {
		how = fmt.Sprintf("exited with signal %v", e.Signal)
	}
	stuck := ""
	if e.Stuck != "" {
		stuck = "; " + e.Stuck
	}
	if e.Cause == "" {
		return fmt.Sprintf("rank %d %s%s", e.Rank, how, stuck)
	}
	return fmt.Sprintf("rank %d failed first: %s (it then %s)%s", e.Rank, strings.TrimPrefix(e.Cause, "braid: "), how, stuck)
}

// ExitCode returns the status a launcher should exit with: the rank's, or
// 128 plus the signal's number, as shells do; 1 if the rank reported a
// failure and exited with status 0.
func (e *ExitError) ExitCode() int {
	switch {
	case e.Signal != 0:
		return 128 + int(e.Signal)
	case e.Status == 0:
		return 1
	}
	return e.Status
}

// InterruptedError reports that Run was interrupted by a signal (SIGINT,
// SIGTERM) before any rank failed: it passed the signal on to the ranks
// that still ran.
type InterruptedError struct {
	Signal  syscall.Signal
	Stopped int // the ranks that still ran when the signal came
}

// Error says "interrupted (SIGINT): stopped 4 ranks".
func (e *InterruptedError) Error() string {
	ranks := "ranks"
	if e.Stopped == 1 {
		ranks = "rank"
	}
	return fmt.Sprintf("interrupted (%s): stopped %d %s", unix.SignalName(e.Signal), e.Stopped, ranks)
}

// ExitCode returns 128 plus the signal's number, as shells do.
func (e *InterruptedError) ExitCode() int { return 128 + int(e.Signal) }

// Run starts cfg.N ranks of cfg.Prog on this host and waits for them.
//
// It serves the job's TCP store on 127.0.0.1 with a fresh random secret,
// and gives each rank BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK,
// BRAID_LOCAL_SIZE, BRAID_STORE, BRAID_SECRET (hex), BRAID_JOB and
// BRAID_STORE_EXTERNAL=1 (see bootstrap.FromEnv), and, unless the
// environment sets them, torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (see torchEnv). Each rank runs in its own
// process group, with standard input from /dev/null, and is killed if Run's
// process dies (Linux).
//
// Run forwards SIGINT and SIGTERM to the ranks; a second one kills them.
// When a rank exits with a non-zero status or by a signal, Run stops the
// others (SIGTERM to their process groups, SIGKILL after cfg.Grace) and
// returns an *ExitError naming the rank that failed first: ranks report
// the failure of their communicator through the store, with its time, and
// the earliest report that is not a consequence of another rank's failure
// (an abort heard from a peer, the loss of a rank that died) names it;
// without one, the first rank to exit badly. When a signal came before any
// failure it returns an *InterruptedError. When ctx ends or cfg.Timeout
// passes, it stops the ranks likewise and returns an error wrapping ctx's.
// It returns nil only if every rank exits with status 0.
func Run(ctx context.Context, cfg Config) error {
	if cfg.N < 1 {
		return fmt.Errorf("launch: %d ranks: want at least 1", cfg.N)
	}
	if cfg.Prog == "" {
		return errors.New("launch: no program")
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.JobID == "" {
		var b [4]byte
		rand.Read(b[:])
		cfg.JobID = fmt.Sprintf("braid-%d-%x", os.Getpid(), b)
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}

	secret := bootstrap.NewSecret()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("launch: serving the store: %w", err)
	}
	srv := bootstrap.ServeTCPStore(context.Background(), ln, secret, cfg.Logf)
	defer srv.Close()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	j := &job{cfg: cfg, out: &output{}, store: srv.Local()}
	env := append(append(os.Environ(), cfg.Env...),
		bootstrap.EnvSize+"="+strconv.Itoa(cfg.N),
		bootstrap.EnvLocalSize+"="+strconv.Itoa(cfg.N),
		bootstrap.EnvStore+"="+srv.Addr().String(),
		bootstrap.EnvStoreExternal+"=1",
		bootstrap.EnvSecret+"="+hex.EncodeToString(secret),
		bootstrap.EnvJob+"="+cfg.JobID,
	)
	if extra, err := torchEnv(env, cfg.N); err != nil {
		return err
	} else if extra != nil {
		env = append(env, extra...)
		j.torch = true
	}
	if len(cfg.Guard) > 0 {
		g, err := startGuard(cfg.Guard)
		if err != nil {
			cfg.Logf("launch: no guardian (%v): if this launcher is killed, the ranks' shared-memory files stay until the next job on the host removes them", err)
		}
		j.guard = g
		// Closing its input, as this process's death does, lets it act.
		defer j.closeGuard()
	}
	if err := j.start(env); err != nil {
		return err
	}
	return j.wait(ctx, sigs)
}

// startGuard starts the guardian command and returns the write end of its
// standard input. Its process is waited for in the background, so that
// it leaves no zombie in a process that goes on after Run.
func startGuard(argv []string) (*os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pr.Close()
	if err != nil {
		pw.Close()
		return nil, err
	}
	go cmd.Wait()
	return pw, nil
}

// closeGuard ends the guardian's input: it then waits for the ranks whose
// pids it read to be gone and cleans up after them.
func (j *job) closeGuard() {
	if j.guard != nil {
		j.guard.Close()
	}
}

// Guard is the guardian's work (see Config.Guard): it reads pids from in,
// one per line, until in ends (Run returned, or its process died); then
// waits until none of those processes lives (a zombie counts as gone), or
// until limit passes, and calls clean with those that still live (none,
// unless the limit passed).
func Guard(in io.Reader, limit time.Duration, clean func(left []int)) {
	var pids []int
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	deadline := time.Now().Add(limit)
	var left []int
	for _, pid := range pids {
		for !shmfile.Gone(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !shmfile.Gone(pid) {
			left = append(left, pid)
		}
	}
	clean(left)
}

// job is a running set of ranks.
type job struct {
	cfg     Config
	out     *output
	cmds    []*exec.Cmd
	copiers sync.WaitGroup  // the goroutines that copy the ranks' output
	pipes   []*os.File      // their read ends
	release chan struct{}   // closed when the ranks are reaped: see start
	store   bootstrap.Store // the job's store, where ranks report failures
	torch   bool            // the ranks get RANK and LOCAL_RANK too: see torchEnv
	guard   *os.File        // the guardian's input (Config.Guard), or nil
}

// torchEnv returns torchrun's job-wide variables for a job of n ranks on
// this host (WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, a
// port of 127.0.0.1 free now), so that a PyTorch program under braid run
// finds its place with torch.distributed's default "env://" rendezvous
// (whatever its backend: Braid's, Gloo); Run then gives each rank RANK and
// LOCAL_RANK too. It returns nil when env sets any of them already: a
// launcher outside braid run (or the user) has chosen them. Braid itself
// reads its own variables first (bootstrap.FromEnv).
func torchEnv(env []string, n int) ([]string, error) {
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT":
			return nil, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("launch: choosing MASTER_PORT: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return []string{"WORLD_SIZE=" + strconv.Itoa(n), "LOCAL_WORLD_SIZE=" + strconv.Itoa(n),
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port)}, nil
}

// start starts the ranks. It does so from a goroutine locked to its OS
// thread that stays until the ranks are reaped, because Linux sends the
// parent-death signal when the thread that forked a child exits, not the
// process.
func (j *job) start(env []string) error {
	j.release = make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- j.startLocked(env)
		<-j.release
	}()
	if err := <-errc; err != nil {
		j.stop(syscall.SIGKILL)
		for _, c := range j.cmds {
			c.Wait()
		}
		close(j.release)
		j.closeOutput(j.cfg.Grace)
		return err
	}
	return nil
}

func (j *job) startLocked(env []string) error {
	for r := range j.cfg.N {
		cmd := exec.Command(j.cfg.Prog, j.cfg.Args...)
		cmd.Env = append(env[:len(env):len(env)],
			bootstrap.EnvRank+"="+strconv.Itoa(r),
			bootstrap.EnvLocalRank+"="+strconv.Itoa(r))
		if j.torch {
			cmd.Env = append(cmd.Env, "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r))
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var closeAfter []*os.File
		for _, s := range []struct {
			dst  *io.Writer
			w    io.Writer
			name string
		}{{&cmd.Stdout, j.cfg.Stdout, "stdout"}, {&cmd.Stderr, j.cfg.Stderr, "stderr"}} {
			if f, ok := s.w.(*os.File); ok && !j.cfg.Prefix {
				*s.dst = f
				continue
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("launch: rank %d: %w", r, err)
			}
			*s.dst = pw
			closeAfter = append(closeAfter, pw)
			j.pipes = append(j.pipes, pr)
			j.copiers.Add(1)
			go func() {
				defer j.copiers.Done()
				if j.cfg.Prefix {
					j.out.copyLines(s.w, pr, fmt.Sprintf("[%d] ", r))
				} else {
					j.out.copyRaw(s.w, pr)
				}
			}()
		}
		err := cmd.Start()
		for _, f := range closeAfter {
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("launch: rank %d: %w", r, err)
		}
		j.cmds = append(j.cmds, cmd)
		if j.guard != nil {
			fmt.Fprintf(j.guard, "%d\n", cmd.Process.Pid)
		}
	}
	return nil
}

// stop signals the process group of every rank started.
func (j *job) stop(sig syscall.Signal) {
	for _, c := range j.cmds {
		syscall.Kill(-c.Process.Pid, sig)
	}
}

// allStopped reports whether every rank still running (not in ended) is
// stopped by a signal (SIGSTOP): one that cannot notice a failure and end
// by itself, so that lingering for it is pointless.
func (j *job) allStopped(ended []*exit) bool {
	for r, c := range j.cmds {
		if ended[r] != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		if err != nil {
			return false
		}
		// The state follows the command name, which ends at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// exit is a rank's end.
type exit struct {
	rank int
	err  *ExitError // nil if it exited with status 0
	at   time.Time
}

func exitOf(rank int, state *os.ProcessState) *ExitError {
	ws, ok := state.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		return &ExitError{Rank: rank, Status: -1, Signal: ws.Signal()}
	case state.ExitCode() != 0:
		return &ExitError{Rank: rank, Status: state.ExitCode()}
	}
	return nil
}

// wait reaps the ranks, stopping them all when one fails, ctx ends, or a
// signal comes, and returns the first failure.
func (j *job) wait(ctx context.Context, sigs <-chan os.Signal) error {
	exits := make(chan exit, len(j.cmds))
	for r, c := range j.cmds {
		go func() {
			c.Wait()
			exits <- exit{r, exitOf(r, c.ProcessState), time.Now()}
		}()
	}
	var (
		first    error
		stopping bool
		kill     <-chan time.Time
		linger   <-chan time.Time
		signals  int
		done     = ctx.Done()
		ended    = make([]*exit, len(j.cmds))
		stopAt   time.Time // when Run first signalled the ranks
		intr     *InterruptedError
	)
	signalled := func() {
		if stopAt.IsZero() {
			stopAt = time.Now()
		}
	}
	stopAll := func() {
		if !stopping {
			stopping = true
			signalled()
			j.stop(syscall.SIGTERM)
			// A stopped rank (SIGSTOP, a debugger gone) acts on SIGTERM
			// only once continued.
			j.stop(syscall.SIGCONT)
			kill = time.After(j.cfg.Grace)
		}
	}
	for running := len(j.cmds); running > 0; {
		select {
		case e := <-exits:
			running--
			ended[e.rank] = &e
			if e.err != nil && first == nil {
				first = e.err
				if j.cfg.Linger > 0 && !j.allStopped(ended) {
					// The others should notice and end by themselves,
					// each with its own message.
					linger = time.After(j.cfg.Linger)
				} else {
					stopAll()
				}
			}
			if linger != nil && j.allStopped(ended) {
				// Those left cannot end by themselves.
				linger = nil
				stopAll()
			}
		case <-linger:
			linger = nil
			stopAll()
		case <-done:
			done = nil
			if first == nil {
				first = fmt.Errorf("launch: stopped the ranks: %w", ctx.Err())
			}
			stopAll()
		case s := <-sigs:
			signals++
			if intr == nil && first == nil {
				intr = &InterruptedError{Signal: s.(syscall.Signal), Stopped: running}
			}
			signalled()
			if signals == 1 {
				j.stop(s.(syscall.Signal))
			} else {
				j.stop(syscall.SIGKILL)
			}
		case <-kill:
			kill = nil
			j.stop(syscall.SIGKILL)
		}
	}
	if blamed := j.blame(ended, stopAt); blamed != nil {
		first = blamed
	} else if intr != nil {
		first = intr
	}
	close(j.release)
	// Processes that a rank left behind may hold its output open: give them
	// the grace period, then kill them and stop copying.
	j.closeOutput(j.cfg.Grace)
	return first
}

// blame returns the error that names the rank that failed first, from the
// failures the ranks reported through the store and their exits, or nil
// if no rank failed before stopAt (when Run began to stop the ranks; zero
// if it never did). A report that echoes another rank's abort, or that
// names the loss of a rank that itself exited badly, is a consequence, not
// a cause; so is the exit of a rank that reported.
func (j *job) blame(ended []*exit, stopAt time.Time) *ExitError {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	reports, _ := bootstrap.Failures(ctx, j.store)
	cancel()
	before := func(t time.Time) bool { return stopAt.IsZero() || t.Before(stopAt) }
	bad := func(r int) bool {
		return r >= 0 && r < len(ended) && ended[r] != nil && ended[r].err != nil && before(ended[r].at)
	}
	// A job whose every rank exited with status 0 succeeded, whatever its
	// ranks reported on the way (a program may handle a failed call, as
	// the disagreement tests do): the reports only say who to blame for a
	// failed exit.
	failed := false
	for r := range ended {
		failed = failed || bad(r)
	}
	if !failed {
		return nil
	}
	reported := map[int]bool{}
	var (
		best   *ExitError
		bestAt time.Time
	)
	consider := func(e *ExitError, at time.Time) {
		if before(at) && (best == nil || at.Before(bestAt)) {
			best, bestAt = e, at
		}
	}
	for _, f := range reports {
		if f.Rank < 0 || f.Rank >= len(ended) || reported[f.Rank] {
			continue
		}
		reported[f.Rank] = true
		if f.Echo || f.Kind == "peer lost" && bad(f.Peer) {
			continue
		}
		e := &ExitError{Rank: f.Rank, Cause: f.Msg}
		if x := ended[f.Rank]; x != nil && x.err != nil {
			e.Status, e.Signal = x.err.Status, x.err.Signal
		}
		consider(e, f.Time)
	}
	for r, x := range ended {
		if bad(r) && !reported[r] {
			consider(x.err, x.at)
		}
	}
	if best != nil {
		b := *best
		b.Stuck = stuckAt(reports, len(ended))
		best = &b
	}
	return best
}

// stuckAt summarises where the ranks' reports say the job stuck: the
// earliest call that a reporting rank was in, on the communicator most
// reports name; the ranks that were in it, and the ranks of the job that
// reported neither it nor a later call of that communicator (for the
// world communicator, the ranks that never arrived; a rank stopped inside
// the call, which cannot report, counts among them). Empty when no
// report says where its rank was.
func stuckAt(reports []bootstrap.Failure, n int) string {
	byComm := map[uint32]int{}
	var comm uint32
	for _, f := range reports {
		if f.InCall {
			byComm[f.Comm]++
			if byComm[f.Comm] > byComm[comm] || byComm[comm] == 0 {
				comm = f.Comm
			}
		}
	}
	if len(byComm) == 0 {
		return ""
	}
	var seq uint32
	name, first := "", true
	for _, f := range reports {
		if f.InCall && f.Comm == comm && (first || int32(f.Seq-seq) < 0) {
			seq, name, first = f.Seq, f.Call, false
		}
	}
	seen := make([]bool, n)
	var in, past []int
	var waits []string
	for _, f := range reports {
		if !f.InCall || f.Comm != comm || f.Rank < 0 || f.Rank >= n || seen[f.Rank] || int32(f.Seq-seq) < 0 {
			continue
		}
		seen[f.Rank] = true
		if f.Seq == seq {
			in = append(in, f.Rank)
			if f.Waited >= 0 {
				waits = append(waits, fmt.Sprintf("rank %d for rank %d", f.Rank, f.Waited))
			}
		} else {
			past = append(past, f.Rank)
		}
	}
	var missing []int
	for r := range n {
		if !seen[r] {
			missing = append(missing, r)
		}
	}
	slices.Sort(in)
	s := fmt.Sprintf("the job stuck at call %d (%s) of communicator %08x: %s in it", seq, name, comm, rankList(in))
	if len(waits) > 0 {
		slices.Sort(waits)
		s += " (waiting: " + strings.Join(waits, ", ") + ")"
	}
	if len(past) > 0 {
		slices.Sort(past)
		s += fmt.Sprintf("; %s past it, in a later call", rankList(past))
	}
	if len(missing) > 0 {
		s += fmt.Sprintf("; %s never reported reaching it (stopped, hung, dead or outside Braid)", rankList(missing))
	}
	return s
}

// rankList writes "rank 2" or "ranks 0, 1, 3".
func rankList(rs []int) string {
	if len(rs) == 0 {
		return "no rank"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// closeOutput waits up to grace for the output copiers to finish, then
// kills what is left in the ranks' process groups and closes the pipes.
func (j *job) closeOutput(grace time.Duration) {
	done := make(chan struct{})
	go func() { j.copiers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		j.stop(syscall.SIGKILL)
		for _, p := range j.pipes {
			p.Close()
		}
		<-done
	}
	for _, p := range j.pipes {
		p.Close()
	}
}
