// Command chaos runs Braid's chaos and soak campaigns (docs/RELIABILITY.md;
// scripts/chaos.sh builds it and runs it). It needs root and Linux: every
// job runs in a mount namespace of its own, with fresh tmpfs mounts on
// /dev/shm and /tmp, so that what a job leaves behind there is seen (and
// nothing of other jobs on the machine is), and so that a full /dev/shm is
// the job's alone.
//
// Chaos mode runs jobs of 2 to 8 ranks of internal/testprog/mix under
// braid run, with random collectives, sizes, transports and algorithms,
// and in each injects one fault at a random moment:
//
//	killrank      SIGKILL of a rank
//	stoprank      SIGSTOP of a rank (it stays stopped)
//	killlauncher  SIGKILL of braid run
//	closesocket   a TCP connection between two ranks destroyed (ss -K; BRAID_TRANSPORT=tcp)
//	fullshm       the job's /dev/shm filled to ENOSPC
//
// It checks that the job ends (every process of it gone) within
// BRAID_TIMEOUT + 2 s of the fault, that every rank that survives it either
// finished with every result right or failed with an error that names the
// faulty rank (the lost store, for the launcher; either end, for a
// connection), and that no process, no file in /dev/shm and no file in
// /tmp is left. It prints counts per fault kind and writes every job's
// record to -report.
//
// Soak mode runs one job of -ranks ranks for -duration with random
// collectives, dtypes, sizes, algorithms (MIX_PLAN=random, the shared
// area included) and communicator splits, every result verified, and
// samples the ranks' RSS and open descriptors every -sample.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// outcome mirrors internal/testprog/mix's Outcome.
type outcome struct {
	Rank     int            `json:"rank"`
	PID      int            `json:"pid"`
	Calls    int            `json:"calls"`
	Wrong    int            `json:"wrong"`
	Splits   int            `json:"splits"`
	FirstBad string         `json:"firstBad"`
	Err      string         `json:"err"`
	Kind     string         `json:"kind"`
	Peer     int            `json:"peer"`
	OnWorld  bool           `json:"onWorld"`
	RSSStart int64          `json:"rssStart"`
	RSSEnd   int64          `json:"rssEnd"`
	FDsStart int            `json:"fdsStart"`
	FDsEnd   int            `json:"fdsEnd"`
	Plans    map[string]int `json:"plans"`
	ByColl   map[string]int `json:"byColl"`
	Elapsed  int64          `json:"elapsedMs"`
}

type config struct {
	softNaming        bool
	braid, mix, work  string
	mode              string
	jobs              int
	seed              uint64
	timeout           time.Duration
	kinds             []string
	duration, sample  time.Duration
	ranks             int
	maxBytes          int
	report            string
	verbose, keepDirs bool
	faultAt           time.Duration // if ≥ 0, every fault's moment
	only              map[int]bool  // if not empty, the only jobs to run
}

var allKinds = []string{"killrank", "stoprank", "killlauncher", "closesocket", "fullshm"}

func main() {
	var cfg config
	var kinds, only string
	flag.StringVar(&cfg.braid, "braid", "", "the braid binary")
	flag.StringVar(&cfg.mix, "mix", "", "the internal/testprog/mix binary")
	flag.StringVar(&cfg.work, "work", "", "directory for the jobs' files (not under /tmp, which each job mounts over)")
	flag.StringVar(&cfg.mode, "mode", "chaos", "chaos or soak")
	flag.IntVar(&cfg.jobs, "jobs", 200, "chaos: jobs to run")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the jobs' draws")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Second, "BRAID_TIMEOUT of the jobs")
	flag.StringVar(&kinds, "kinds", strings.Join(allKinds, ","), "chaos: fault kinds, taken in turn")
	flag.DurationVar(&cfg.duration, "duration", time.Hour, "soak: how long")
	flag.DurationVar(&cfg.sample, "sample", time.Minute, "soak: how often to sample RSS and descriptors")
	flag.IntVar(&cfg.ranks, "ranks", 4, "soak: ranks")
	flag.IntVar(&cfg.maxBytes, "max-bytes", 0, "largest buffer of a call (default 256K for chaos, 1M for soak)")
	flag.StringVar(&cfg.report, "report", "", "write every job's record here as JSON lines")
	flag.BoolVar(&cfg.verbose, "v", false, "print every job")
	flag.BoolVar(&cfg.softNaming, "soft-naming", false, "chaos: exit 0 when the only failures are errors that name another rank than the faulty one (they are still counted and printed); hangs, slow ends, wrong results, files left and failures without a fault still fail")
	flag.BoolVar(&cfg.keepDirs, "keep", false, "keep the jobs' directories")
	flag.DurationVar(&cfg.faultAt, "fault-at", -1, "inject every fault this long after braid run starts (default: at random within 1.5 s)")
	flag.StringVar(&only, "only", "", "chaos: run only these jobs of the -jobs (comma-separated numbers), with the same draws as in the whole run")
	flag.Parse()
	if flag.NArg() > 0 {
		die("unexpected arguments %q", flag.Args())
	}
	if cfg.braid == "" || cfg.mix == "" || cfg.work == "" {
		die("-braid, -mix and -work are required")
	}
	for _, p := range []*string{&cfg.braid, &cfg.mix, &cfg.work} {
		a, err := filepath.Abs(*p)
		if err != nil {
			die("%v", err)
		}
		*p = a
	}
	if strings.HasPrefix(cfg.work+"/", "/tmp/") || strings.HasPrefix(cfg.braid, "/tmp/") || strings.HasPrefix(cfg.mix, "/tmp/") {
		die("-work, -braid and -mix must not be under /tmp: every job mounts a fresh /tmp")
	}
	if os.Geteuid() != 0 {
		die("needs root: every job mounts its own /dev/shm and /tmp")
	}
	for _, k := range strings.Split(kinds, ",") {
		if !contains(allKinds, k) {
			die("-kinds: unknown fault kind %q (kinds: %s)", k, strings.Join(allKinds, ", "))
		}
		cfg.kinds = append(cfg.kinds, k)
	}
	if only != "" {
		cfg.only = map[int]bool{}
		for _, f := range strings.Split(only, ",") {
			i, err := strconv.Atoi(f)
			if err != nil || i < 0 || i >= cfg.jobs {
				die("-only: %q is not a job number below -jobs %d", f, cfg.jobs)
			}
			cfg.only[i] = true
		}
	}
	if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		die("%v", err)
	}
	var rep io.Writer = io.Discard
	if cfg.report != "" {
		f, err := os.Create(cfg.report)
		if err != nil {
			die("%v", err)
		}
		defer f.Close()
		rep = f
	}
	switch cfg.mode {
	case "chaos":
		if cfg.maxBytes == 0 {
			cfg.maxBytes = 256 << 10
		}
		if !chaos(cfg, rep) {
			os.Exit(1)
		}
	case "soak":
		if cfg.maxBytes == 0 {
			cfg.maxBytes = 1 << 20
		}
		if !soak(cfg, rep) {
			os.Exit(1)
		}
	default:
		die("-mode %q: want chaos or soak", cfg.mode)
	}
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos: "+format+"\n", args...)
	os.Exit(2)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// record is one job's result.
type record struct {
	Job        int       `json:"job"`
	Kind       string    `json:"kind"`
	Ranks      int       `json:"ranks"`
	Transport  string    `json:"transport"`
	Algo       string    `json:"algo"`
	FaultAtMS  int64     `json:"faultAtMs"` // after braid run started
	Injected   bool      `json:"injected"`
	Fault      string    `json:"fault"` // what was done
	Faulty     []int     `json:"faulty"`
	EndMS      int64     `json:"endMs"` // from the fault (or the start) to the last process's end
	Launcher   string    `json:"launcher"`
	Passed     bool      `json:"passed"`
	Reasons    []string  `json:"reasons"`
	Completed  int       `json:"completed"`  // ranks that finished every call right
	Named      int       `json:"named"`      // ranks that failed naming the faulty rank
	Stopped    int       `json:"stopped"`    // ranks braid run terminated after another rank failed
	NotStarted int       `json:"notStarted"` // ranks that never started (braid run was killed first)
	Outcomes   []outcome `json:"outcomes"`
}

// job is one run of braid run in its own mount namespace.
type job struct {
	cfg     config
	id      int
	n       int
	dir     string
	token   string
	holder  *exec.Cmd
	stdin   io.WriteCloser
	lpid    int
	started time.Time
}

const holderScript = `set -u
mount -t tmpfs -o size=$CHAOS_SHM,mode=1777 chaos-shm /dev/shm || exit 90
mount -t tmpfs -o size=64m,mode=1777 chaos-tmp /tmp || exit 91
if [ -n "${CHAOS_PREFILL:-}" ]; then
	dd if=/dev/zero of=/dev/shm/chaos-fill bs=1M 2>/dev/null
fi
if [ -n "${CHAOS_WRAP:-}" ]; then
	"$CHAOS_BRAID" run -n "$CHAOS_N" -- /bin/sh -c '"$CHAOS_MIX"; true' >"$CHAOS_DIR/stdout" 2>"$CHAOS_DIR/stderr" </dev/null &
else
	"$CHAOS_BRAID" run -n "$CHAOS_N" -- "$CHAOS_MIX" >"$CHAOS_DIR/stdout" 2>"$CHAOS_DIR/stderr" </dev/null &
fi
echo $! >"$CHAOS_DIR/launcher.tmp" && mv "$CHAOS_DIR/launcher.tmp" "$CHAOS_DIR/launcher.pid"
wait $!
echo $? >"$CHAOS_DIR/rc.tmp" && mv "$CHAOS_DIR/rc.tmp" "$CHAOS_DIR/rc"
read -r _
`

// start launches the job: env holds its BRAID_ and MIX_ variables.
func start(cfg config, id, n int, env []string, shmSize string) (*job, error) {
	j := &job{cfg: cfg, id: id, n: n, dir: filepath.Join(cfg.work, fmt.Sprintf("job-%04d", id))}
	os.RemoveAll(j.dir)
	if err := os.MkdirAll(filepath.Join(j.dir, "out"), 0o755); err != nil {
		return nil, err
	}
	j.token = fmt.Sprintf("%d-%d-%d", os.Getpid(), id, time.Now().UnixNano())
	cmd := exec.Command("/bin/sh", "-c", holderScript)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BRAID_") && !strings.HasPrefix(e, "MIX_") && !strings.HasPrefix(e, "TMPDIR=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Env = append(cmd.Env, "CHAOS_JOB="+j.token, "CHAOS_SHM="+shmSize, "CHAOS_BRAID="+cfg.braid,
		"CHAOS_MIX="+cfg.mix, "CHAOS_DIR="+j.dir, "CHAOS_N="+strconv.Itoa(n), "MIX_OUT="+filepath.Join(j.dir, "out"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
	var err error
	if j.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	var hout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &hout, &hout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j.holder = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(j.dir, "launcher.pid")); err == nil {
			j.lpid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			j.started = time.Now()
			return j, nil
		}
		if time.Now().After(deadline) {
			j.finish()
			return nil, fmt.Errorf("job %d: braid run did not start: %s", id, hout.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// proc is a live process of the job.
type proc struct {
	pid, ppid int
	rank      int // BRAID_RANK, or -1
	state     byte
	name      string
}

// procs returns the job's processes other than the holder: those whose
// environment carries the job's token.
func (j *job) procs() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == j.holder.Process.Pid {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte("CHAOS_JOB="+j.token+"\x00")) {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		p := proc{pid: pid, rank: -1}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+4 > len(s) {
			continue
		}
		p.name = s[strings.IndexByte(s, '(')+1 : i]
		p.state = s[i+2]
		f := strings.Fields(s[i+2:])
		if len(f) > 1 {
			p.ppid, _ = strconv.Atoi(f[1])
		}
		if p.state == 'Z' || p.state == 'X' {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("BRAID_RANK=")); ok {
				p.rank, _ = strconv.Atoi(string(v))
			}
		}
		out = append(out, p)
	}
	return out
}

// rankPID returns the pid of rank r, a child of braid run, or 0.
func (j *job) rankPID(r int) int {
	for _, p := range j.procs() {
		if p.rank == r && p.ppid == j.lpid {
			return p.pid
		}
	}
	return 0
}

// launcherDone reports whether braid run has exited, and its status.
func (j *job) launcherDone() (bool, string) {
	b, err := os.ReadFile(filepath.Join(j.dir, "rc"))
	if err != nil {
		return false, ""
	}
	return true, strings.TrimSpace(string(b))
}

// waitEnd waits until braid run has exited and no process of the job is
// left, or until limit; it returns the time the job ended, or false.
func (j *job) waitEnd(limit time.Time) (time.Time, bool) {
	for {
		if done, _ := j.launcherDone(); done && len(j.procs()) == 0 {
			return time.Now(), true
		}
		if time.Now().After(limit) {
			return time.Time{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill ends every process of the job that is left.
func (j *job) kill() []string {
	var left []string
	for _, p := range j.procs() {
		left = append(left, fmt.Sprintf("pid %d (%s, rank %d, state %c)", p.pid, p.name, p.rank, p.state))
		syscall.Kill(p.pid, syscall.SIGKILL)
		syscall.Kill(p.pid, syscall.SIGCONT)
	}
	return left
}

// leftFiles lists what the job left in its /dev/shm and /tmp, but for
// skip (the fill file of a full /dev/shm).
func (j *job) leftFiles(skip string) []string {
	var left []string
	root := fmt.Sprintf("/proc/%d/root", j.holder.Process.Pid)
	for _, d := range []string{"/dev/shm", "/tmp"} {
		ents, err := os.ReadDir(root + d)
		if err != nil {
			left = append(left, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		for _, e := range ents {
			if d+"/"+e.Name() != skip {
				left = append(left, d+"/"+e.Name())
			}
		}
	}
	return left
}

// finish releases the holder, which ends the namespace and its mounts.
func (j *job) finish() {
	if j.stdin != nil {
		j.stdin.Close()
	}
	done := make(chan struct{})
	go func() { j.holder.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-j.holder.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if !j.cfg.keepDirs {
		os.RemoveAll(j.dir)
	}
}

// outcomes reads the ranks' outcome files; a missing one is nil.
func (j *job) outcomes() []*outcome {
	out := make([]*outcome, j.n)
	for r := range out {
		b, err := os.ReadFile(filepath.Join(j.dir, "out", fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			continue
		}
		var o outcome
		if json.Unmarshal(b, &o) == nil {
			out[r] = &o
		}
	}
	return out
}

// startedRank reports whether rank r's process started (mix wrote its
// start file).
func (j *job) startedRank(r int) bool {
	_, err := os.Stat(filepath.Join(j.dir, "out", fmt.Sprintf("rank-%d.start", r)))
	return err == nil
}

func (j *job) launcherOutput() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "stderr"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// braid run's own verdict is its last line.
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "braid") {
			return lines[i]
		}
	}
	if len(lines) > 0 {
		return lines[len(lines)-1]
	}
	return ""
}

// algos a job may force with BRAID_ALGO ("" lets the planner choose; "random"
// sets MIX_PLAN=random instead).
var algos = []string{"", "", "random", "random", "shm", "ring", "recdouble", "binomial", "linear", "allreduce=rabenseifner,bcast=scatterallgather"}

func chaos(cfg config, rep io.Writer) bool {
	type tally struct {
		jobs, injected, passed int
		endMax                 int64
		reasons                map[string]int
	}
	tallies := map[string]*tally{}
	for _, k := range cfg.kinds {
		tallies[k] = &tally{reasons: map[string]int{}}
	}
	t0 := time.Now()
	ok, ran := true, 0
	for i := 0; i < cfg.jobs; i++ {
		if len(cfg.only) > 0 && !cfg.only[i] {
			continue
		}
		ran++
		kind := cfg.kinds[i%len(cfg.kinds)]
		r := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		rec := chaosJob(cfg, i, kind, r)
		t := tallies[kind]
		t.jobs++
		if rec.Injected {
			t.injected++
		}
		if rec.EndMS > t.endMax {
			t.endMax = rec.EndMS
		}
		if rec.Passed {
			t.passed++
		} else {
			if !cfg.softNaming || !namingOnly(rec.Reasons) {
				ok = false
			}
			classes := map[string]bool{}
			for _, why := range rec.Reasons {
				classes[reasonClass(why)] = true
			}
			for c := range classes {
				t.reasons[c]++ // jobs with at least one such reason
			}
		}
		b, _ := json.Marshal(rec)
		fmt.Fprintln(rep, string(b))
		if cfg.verbose || !rec.Passed {
			verdict := "pass"
			if !rec.Passed {
				verdict = "FAIL: " + strings.Join(rec.Reasons, "; ")
			}
			fmt.Printf("job %d %s n=%d %s algo=%q fault@%dms %s end+%dms completed=%d named=%d stopped=%d: %s\n",
				i, kind, rec.Ranks, rec.Transport, rec.Algo, rec.FaultAtMS, rec.Fault, rec.EndMS, rec.Completed, rec.Named, rec.Stopped, verdict)
		}
	}
	fmt.Printf("\nchaos: %d jobs in %v, BRAID_TIMEOUT=%v, seed %d\n", ran, time.Since(t0).Round(time.Second), cfg.timeout, cfg.seed)
	fmt.Printf("%-13s %5s %9s %7s %7s  %s\n", "fault", "jobs", "injected", "passed", "maxend", "jobs failed, by reason (a job may have several)")
	for _, k := range cfg.kinds {
		t := tallies[k]
		var rs []string
		for why, c := range t.reasons {
			rs = append(rs, fmt.Sprintf("%d %s", c, why))
		}
		sort.Strings(rs)
		fmt.Printf("%-13s %5d %9d %7d %6.1fs  %s\n", k, t.jobs, t.injected, t.passed, float64(t.endMax)/1000, strings.Join(rs, "; "))
	}
	return ok
}

// namingOnly reports whether every reason is about which rank an error
// names, not about the job's end, results or leftovers.
func namingOnly(reasons []string) bool {
	for _, why := range reasons {
		if !strings.HasPrefix(why, "names no faulty rank") && !strings.HasPrefix(why, "echo ") &&
			!strings.HasPrefix(why, "timeout naming no peer") && !strings.HasPrefix(why, "does not name the lost store") {
			return false
		}
	}
	return len(reasons) > 0
}

// reasonClass strips a reason's numbers so that like reasons count together.
var digits = regexp.MustCompile(`[0-9]+`)

func reasonClass(why string) string {
	if i := strings.Index(why, ": "); i > 0 {
		why = why[:i]
	}
	return digits.ReplaceAllString(why, "N")
}

// unnamedClass says how an error fails to name the faulty rank.
func unnamedClass(o *outcome) string {
	if o.Kind == "timeout" && o.Peer < 0 {
		return "timeout naming no peer"
	}
	return "names no faulty rank"
}

func chaosJob(cfg config, id int, kind string, r *rand.Rand) record {
	n := 2 + r.IntN(7)
	transport := "shm"
	if kind == "closesocket" || r.IntN(3) == 0 {
		transport = "tcp"
	}
	algo := algos[r.IntN(len(algos))]
	if transport == "tcp" && algo == "shm" {
		algo = "" // the shared area needs shm's world
	}
	faultAt := time.Duration(r.Int64N(int64(1500 * time.Millisecond)))
	prefill := kind == "fullshm" && r.IntN(3) == 0 // before the ranks start: their segments do not fit
	if cfg.faultAt >= 0 {
		faultAt = cfg.faultAt
	}
	rec := record{Job: id, Kind: kind, Ranks: n, Transport: transport, Algo: algo, FaultAtMS: faultAt.Milliseconds()}
	env := []string{"BRAID_TIMEOUT=" + cfg.timeout.String(), "MIX_DURATION=1500ms",
		"MIX_SEED=" + strconv.Itoa(int(r.Uint32())), "MIX_MAXBYTES=" + strconv.Itoa(cfg.maxBytes)}
	if transport == "tcp" {
		env = append(env, "BRAID_TRANSPORT=tcp")
	}
	switch algo {
	case "":
	case "random":
		env = append(env, "MIX_PLAN=random")
	default:
		env = append(env, "BRAID_ALGO="+algo)
	}
	// Half the launcher kills find the ranks behind a shell, which the
	// launcher's death signal does not reach: they must notice the lost
	// store. The ranks that are its children die with it.
	wrapped := kind == "killlauncher" && r.IntN(2) == 0
	if wrapped {
		env = append(env, "CHAOS_WRAP=1")
		rec.Fault = "behind sh -c: "
	}
	if prefill {
		env = append(env, "CHAOS_PREFILL=1")
		faultAt, rec.FaultAtMS = 0, 0
	}
	j, err := start(cfg, id, n, env, "256m")
	if err != nil {
		rec.Reasons = append(rec.Reasons, "start: "+err.Error())
		return rec
	}
	defer j.finish()
	time.Sleep(faultAt)
	injectedAt := time.Now()
	fill := ""
	switch kind {
	case "killrank", "stoprank":
		v := r.IntN(n)
		sig := syscall.SIGKILL
		if kind == "stoprank" {
			sig = syscall.SIGSTOP
		}
		rec.Faulty = []int{v}
		// The rank may not have started yet: wait a little for it.
		for k := 0; k < 50; k++ {
			if pid := j.rankPID(v); pid > 0 {
				if syscall.Kill(pid, sig) == nil {
					injectedAt = time.Now()
					rec.Injected = true
					rec.Fault = fmt.Sprintf("%v rank %d (pid %d)", sig, v, pid)
				}
				break
			}
			if done, _ := j.launcherDone(); done {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "killlauncher":
		if done, _ := j.launcherDone(); !done && syscall.Kill(j.lpid, syscall.SIGKILL) == nil {
			rec.Injected = true
			rec.Fault += fmt.Sprintf("SIGKILL braid run (pid %d)", j.lpid)
		}
	case "closesocket":
		for k := 0; k < 50 && !rec.Injected; k++ {
			if a, b, what, ok := closeSocket(j, r); ok {
				injectedAt = time.Now()
				rec.Injected, rec.Faulty, rec.Fault = true, []int{a, b}, what
				break
			}
			if done, _ := j.launcherDone(); done {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "fullshm":
		fill = "/dev/shm/chaos-fill"
		rec.Injected = true
		if prefill {
			rec.Fault = "filled /dev/shm before braid run started"
			break
		}
		n, err := fillUp(fmt.Sprintf("/proc/%d/root%s", j.holder.Process.Pid, fill))
		rec.Fault = fmt.Sprintf("filled /dev/shm with %d MiB (%v)", n>>20, err)
	}
	if !rec.Injected {
		rec.Fault += "none (the job had ended)"
		injectedAt = j.started
	}
	// A stopped rank is the fault; the job must end without anyone
	// continuing it. Give the job far more than its bound before
	// stopping it by force, to tell slow from hung.
	end, ended := j.waitEnd(injectedAt.Add(cfg.timeout + 15*time.Second))
	if !ended {
		left := j.kill()
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("hang: still running %v after the fault: %s", cfg.timeout+15*time.Second, strings.Join(left, ", ")))
		j.waitEnd(time.Now().Add(5 * time.Second))
	} else {
		rec.EndMS = end.Sub(injectedAt).Milliseconds()
		if end.Sub(injectedAt) > cfg.timeout+2*time.Second {
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("slow end: the job ended %.1fs after the fault, over BRAID_TIMEOUT+2s", end.Sub(injectedAt).Seconds()))
		}
	}
	_, rc := j.launcherDone()
	rec.Launcher = fmt.Sprintf("exit %s: %s", rc, j.launcherOutput())
	if files := j.leftFiles(fill); len(files) > 0 {
		if fill != "" {
			os.Remove(fmt.Sprintf("/proc/%d/root%s", j.holder.Process.Pid, fill))
		}
		after := j.nextJob(fill)
		how := "the next job on the host removed them"
		if len(after) > 0 {
			how = "still there after the next job: " + strings.Join(after, ", ")
		}
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("files left (%s): %s", how, strings.Join(files, ", ")))
	}
	outs := j.outcomes()
	for rank, o := range outs {
		if o != nil {
			rec.Outcomes = append(rec.Outcomes, *o)
		}
		victim := rec.Injected && (kind == "killrank" || kind == "stoprank") && rank == rec.Faulty[0]
		if victim {
			continue
		}
		switch {
		case o == nil && kind == "killlauncher" && rec.Injected && !wrapped:
			// Killed by the death signal braid run gives its children.
			rec.Named++
		case o == nil && !j.startedRank(rank):
			// Never started (braid run died first): nothing to judge.
			rec.NotStarted++
		case o == nil:
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("no outcome: rank %d died or never started", rank))
		case o.Wrong > 0:
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("wrong results: rank %d: %d wrong: %s", rank, o.Wrong, o.FirstBad))
		case o.Err == "":
			rec.Completed++
		case o.Kind == "terminated":
			// braid run stopped it after another rank failed (or died: a
			// rank killed during Init, before its peers connect to it):
			// that rank's error, or braid run's, is the one to judge.
			if failed(outs, rank) || launcherNames(rec.Launcher, rec.Faulty) {
				rec.Stopped++
			} else {
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("terminated, no rank failed and braid run names none: rank %d", rank))
			}
		case !rec.Injected:
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("failed without a fault: rank %d: %s", rank, o.Err))
		case kind == "fullshm":
			// No rank is at fault: an error (not a crash) is what is asked.
			rec.Named++
		case kind == "killlauncher":
			if strings.Contains(o.Err, "store") {
				rec.Named++
			} else if x := echoOf(outs, o, func(o *outcome) bool { return strings.Contains(o.Err, "store") }); x >= 0 {
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("echo (names a rank that lost the store first, directly or through others): rank %d names rank %d: %s", rank, x, clip(o.Err)))
			} else {
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("does not name the lost store: rank %d: %s", rank, clip(o.Err)))
			}
		default:
			if names(o, rec.Faulty) {
				rec.Named++
			} else if x := echoOf(outs, o, func(o *outcome) bool { return names(o, rec.Faulty) }); x >= 0 {
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("echo (names a rank that failed from the fault first, directly or through others): rank %d names rank %d, not %v: %s", rank, x, rec.Faulty, clip(o.Err)))
			} else {
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("%s: rank %d, faulty %v: %s (peer %d)", unnamedClass(o), rank, rec.Faulty, clip(o.Err), o.Peer))
			}
		}
	}
	rec.Passed = len(rec.Reasons) == 0
	return rec
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// names reports whether a rank's error names one of the faulty ranks: as
// the error's peer, or in its text as "peer rank N" or "rank N" other than
// the reporting rank's own.
func names(o *outcome, faulty []int) bool {
	for _, f := range faulty {
		if o.OnWorld && o.Peer == f {
			return true
		}
		text := strings.ReplaceAll(o.Err, fmt.Sprintf("rank %d:", o.Rank), "")
		if regexp.MustCompile(fmt.Sprintf(`\brank %d\b`, f)).MatchString(text) {
			return true
		}
	}
	return false
}

// named returns the rank an error names: its peer, or the first "rank N"
// of its text other than the reporting rank's own; -1 if none.
func named(o *outcome) int {
	if o.OnWorld && o.Peer >= 0 {
		return o.Peer
	}
	for _, m := range rankRe.FindAllStringSubmatch(o.Err, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n != o.Rank {
			return n
		}
	}
	return -1
}

var rankRe = regexp.MustCompile(`\brank ([0-9]+)\b`)

// echoOf follows the ranks that errors name, from o's, and returns the
// first rank o names if the chain reaches a rank whose error is right
// (names the fault), else -1: o's error echoes a rank that failed from
// the fault before it rather than naming the fault itself.
func echoOf(outs []*outcome, o *outcome, right func(*outcome) bool) int {
	first := named(o)
	seen := map[int]bool{o.Rank: true}
	for x := first; x >= 0 && x < len(outs) && !seen[x]; x = named(outs[x]) {
		seen[x] = true
		if outs[x] == nil || outs[x].Err == "" {
			return -1
		}
		if right(outs[x]) {
			return first
		}
	}
	return -1
}

// launcherNames reports whether braid run's verdict names a faulty rank.
func launcherNames(verdict string, faulty []int) bool {
	for _, f := range faulty {
		if regexp.MustCompile(fmt.Sprintf(`\brank %d\b`, f)).MatchString(verdict) {
			return true
		}
	}
	return false
}

// failed reports whether a rank other than except failed with an error
// of its own (not a termination).
func failed(outs []*outcome, except int) bool {
	for r, o := range outs {
		if r != except && o != nil && o.Err != "" && o.Kind != "terminated" {
			return true
		}
	}
	return false
}

// nextJob runs a small job in j's namespace, as the next job on the host
// would be, and returns the files left then (but skip).
func (j *job) nextJob(skip string) []string {
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(j.holder.Process.Pid), "-m", "--", j.cfg.braid, "run", "-n", "2", "--", j.cfg.mix)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BRAID_") && !strings.HasPrefix(e, "MIX_") && !strings.HasPrefix(e, "TMPDIR=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "MIX_CALLS=20", "BRAID_TIMEOUT=10s")
	if out, err := cmd.CombinedOutput(); err != nil {
		return []string{fmt.Sprintf("(the next job failed: %v: %s)", err, clip(string(out)))}
	}
	return j.leftFiles(skip)
}

// closeSocket destroys a random established TCP connection between two
// ranks of j with ss -K and returns their ranks.
func closeSocket(j *job, r *rand.Rand) (int, int, string, bool) {
	ranks := map[int]int{} // pid → rank
	for _, p := range j.procs() {
		if p.rank >= 0 && p.ppid == j.lpid {
			ranks[p.pid] = p.rank
		}
	}
	out, err := exec.Command("ss", "-tnpH", "state", "established").Output()
	if err != nil {
		return 0, 0, "", false
	}
	type sock struct {
		local, peer string
		rank        int
	}
	var socks []sock
	byLocal := map[string]int{}
	pidRe := regexp.MustCompile(`pid=([0-9]+)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		m := pidRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		rank, ok := ranks[pid]
		if !ok {
			continue
		}
		s := sock{local: f[2], peer: f[3], rank: rank}
		socks = append(socks, s)
		byLocal[s.local] = rank
	}
	var between []sock
	for _, s := range socks {
		if _, ok := byLocal[s.peer]; ok {
			between = append(between, s)
		}
	}
	if len(between) == 0 {
		return 0, 0, "", false
	}
	s := between[r.IntN(len(between))]
	if err := exec.Command("ss", "-K", "-tn", "src", s.local, "dst", s.peer).Run(); err != nil {
		return 0, 0, "", false
	}
	b := byLocal[s.peer]
	return s.rank, b, fmt.Sprintf("ss -K the connection %s (rank %d) - %s (rank %d)", s.local, s.rank, s.peer, b), true
}

// fillUp writes to path until the file system is full; it returns the
// bytes written.
func fillUp(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return n, nil
			}
			return n, err
		}
	}
}

// usage samples a process's RSS (bytes) and open descriptors.
func usage(pid int) (int64, int) {
	rss := int64(-1)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			rss = pages * int64(os.Getpagesize())
		}
	}
	fds := -1
	if e, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(e)
	}
	return rss, fds
}

func soak(cfg config, rep io.Writer) bool {
	env := []string{"BRAID_TIMEOUT=30s", "MIX_DURATION=" + cfg.duration.String(), "MIX_SPLIT=1", "MIX_PLAN=random",
		"MIX_SEED=" + strconv.FormatUint(cfg.seed, 10), "MIX_MAXBYTES=" + strconv.Itoa(cfg.maxBytes)}
	j, err := start(cfg, 0, cfg.ranks, env, "1g")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return false
	}
	defer j.finish()
	fmt.Printf("soak: %d ranks for %v, seed %d, buffers up to %d bytes; sampling every %v\n", cfg.ranks, cfg.duration, cfg.seed, cfg.maxBytes, cfg.sample)
	ok := true
	limit := j.started.Add(cfg.duration + 2*time.Minute)
	next := time.Now()
	for {
		if done, _ := j.launcherDone(); done {
			break
		}
		if time.Now().After(limit) {
			fmt.Printf("soak: HANG: still running %v after its end: %s\n", 2*time.Minute, strings.Join(j.kill(), ", "))
			ok = false
			break
		}
		if time.Now().After(next) {
			var parts []string
			for _, p := range j.procs() {
				if p.rank >= 0 {
					rss, fds := usage(p.pid)
					parts = append(parts, fmt.Sprintf("rank %d rss %.1fM fds %d", p.rank, float64(rss)/(1<<20), fds))
					fmt.Fprintf(rep, "{\"t\":%.0f,\"rank\":%d,\"rss\":%d,\"fds\":%d}\n", time.Since(j.started).Seconds(), p.rank, rss, fds)
				}
			}
			sort.Strings(parts)
			fmt.Printf("soak: %6.0fs %s\n", time.Since(j.started).Seconds(), strings.Join(parts, "; "))
			next = next.Add(cfg.sample)
		}
		time.Sleep(100 * time.Millisecond)
	}
	j.waitEnd(time.Now().Add(10 * time.Second))
	_, rc := j.launcherDone()
	fmt.Printf("soak: braid run exit %s after %v: %s\n", rc, time.Since(j.started).Round(time.Second), j.launcherOutput())
	if rc != "0" {
		ok = false
	}
	if left := j.kill(); len(left) > 0 {
		fmt.Printf("soak: processes left: %s\n", strings.Join(left, ", "))
		ok = false
	}
	if files := j.leftFiles(""); len(files) > 0 {
		fmt.Printf("soak: files left: %s\n", strings.Join(files, ", "))
		ok = false
	}
	total, wrong := 0, 0
	plans := map[string]int{}
	for r, o := range j.outcomes() {
		if o == nil {
			fmt.Printf("soak: rank %d left no outcome\n", r)
			ok = false
			continue
		}
		total += o.Calls
		wrong += o.Wrong
		for k, v := range o.Plans {
			plans[k] += v
		}
		fmt.Printf("soak: rank %d: %d calls, %d wrong, %d splits, rss %.1fM → %.1fM, fds %d → %d, %s%s\n",
			r, o.Calls, o.Wrong, o.Splits, float64(o.RSSStart)/(1<<20), float64(o.RSSEnd)/(1<<20), o.FDsStart, o.FDsEnd, o.Err, o.FirstBad)
		if o.Err != "" || o.Wrong > 0 {
			ok = false
		}
		b, _ := json.Marshal(o)
		fmt.Fprintln(rep, string(b))
	}
	var ps []string
	for k, v := range plans {
		ps = append(ps, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ps)
	fmt.Printf("soak: %d calls over all ranks, %d wrong; plans per algorithm (all ranks): %s\n", total, wrong, strings.Join(ps, ", "))
	return ok
}
