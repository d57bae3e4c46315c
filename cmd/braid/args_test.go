package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// quiet runs f with standard error sent to /dev/null: the commands print
// their usage there.
func quiet(t *testing.T, f func() error) error {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	saved := os.Stderr
	os.Stderr = null
	defer func() { os.Stderr = saved }()
	return f()
}

// TestBadArguments runs each subcommand in this process on arguments it
// must refuse before it starts anything: the error is a usage error (exit
// status 2) that names the flag or word and says what is wanted.
func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nosuch")
	cmds := map[string]func([]string) error{"bench": benchCmd, "run": runCmd, "tune": tuneCmd, "topo": topoCmd, "sim": simCmd, "prof": profCmd}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "allreduce", "extra", "--max-size", "64"}, "bench: unexpected argument extra"},
		{[]string{"bench", "allreduce", "--max-size", "64", "--", "extra"}, "bench: unexpected argument extra"},
		{[]string{"bench", "allreduce", "--iters", "-5"}, "bench: --iters -5: want a count ≥ 1"},
		{[]string{"bench", "allreduce", "--warmup", "-2"}, "bench: --warmup -2"},
		{[]string{"bench", "-n", "0", "allreduce"}, "bench: -n 0: want N ≥ 1"},
		{[]string{"bench", "-n", "-3", "allreduce"}, "bench: -n -3: want N ≥ 1"},
		{[]string{"bench", "allreduce", "--min-size", "3", "--max-size", "3"}, "bench: no size from 3 to 3 (doubling from --min-size) is a whole number of float32 elements (4 B)"},
		{[]string{"bench", "-n", "4", "allgather", "--max-size", "8"}, "per rank on 4 ranks: give a --max-size of 16 or more"},
		{[]string{"bench", "allreduce", "--plot", filepath.Join(missing, "x.png")}, "bench: --plot " + filepath.Join(missing, "x.png") + ": cannot write in " + missing},
		{[]string{"bench", "allreduce", "--plot", filepath.Join(dir, "x.pdf")}, "want a .png or .svg file"},
		{[]string{"bench", "allreduce", "--algo", "rign"}, `bench: --algo "rign": entry "rign": no collective has an algorithm named "rign" (algorithms: `},
		{[]string{"bench", "allreduce", "--algo", "allreduce=ring:seg=4K"}, `"ring" takes no parameters, not seg`},
		{[]string{"bench", "allreduce", "--algos", "ring,segring:k=3"}, `"segring" takes only seg, not k`},
		{[]string{"bench", "allreduce", "--algos", "rign"}, `no allreduce algorithm named "rign"`},
		{[]string{"bench", "allreduce", "--format", "xml"}, `bench: --format "xml": want table, csv or json`},
		{[]string{"bench", "allreduce", "--transport", "udp"}, `bench: --transport "udp": want shm or tcp`},
		{[]string{"bench", "allreduce", "--reps", "0"}, "bench: --reps 0"},
		{[]string{"bench", "allreduce", "--budget", "0s"}, "bench: --budget 0s: want a positive duration"},
		{[]string{"bench", "bcast", "--root", "-1"}, "bench: --root -1"},
		{[]string{"bench", "-n", "2", "bcast", "--root", "2"}, "bench: --root 2: want a rank of the job (0 to 1 with -n 2)"},
		{[]string{"bench", "allreduce", "--imbalance", "-1"}, "bench: --imbalance -1"},
		{[]string{"bench", "allreduce", "--imbalance", "10", "--imbalance-alpha", "message"}, `bench: --imbalance-alpha "message": want p2p or collective`},
		{[]string{"bench", "allreduce", "--imbalance-alpha", "collective"}, "bench: --imbalance-alpha applies only to --imbalance"},
		{[]string{"bench", "-n", "1", "allreduce", "--imbalance", "10"}, "bench: --imbalance with α p2p (one message between two ranks) needs -n 2 or more"},
		{[]string{"bench", "allreduce", "--nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"bench", "--device", "cuda", "allreduce", "extra"}, "bench: unexpected argument extra"},
		{[]string{"bench", "--device", "cuda", "-n", "0", "allreduce"}, "bench: -n 0"},
		{[]string{"bench", "--device", "cuda", "allreduce", "--trials", "0"}, "bench: --trials 0"},
		{[]string{"bench", "--device", "cuda", "allreduce", "--algo", "ring", "--algos", "ring,direct"}, "give one"},
		{[]string{"bench", "--device", "cuda", "allreduce", "--format", "csv"}, `--format "csv": want table or json`},
		{[]string{"bench", "--device", "cuda", "allreduce", "--modes", "ordered,replay"}, "--modes ordered,replay: want ordered, sync, graph"},
		{[]string{"bench", "--device", "cuda", "allreduce", "--modes", "graph", "--graph-calls", "0"}, "--graph-calls 0: want at least 1"},
		{[]string{"bench", "--device", "cuda", "allreduce", "--graph-max", "4Q"}, "bench: --graph-max"},

		{[]string{"run", "-n", "-3", "--", "true"}, "run: -n -3: want N ≥ 1"},
		{[]string{"run", "-n", "0", "--", "true"}, "run: -n 0: want N ≥ 1"},
		{[]string{"run", "--", "true"}, "run: -n N (N ≥ 1) is required"},
		{[]string{"run", "-n", "2"}, "run: no program given"},

		{[]string{"tune", "extra"}, "tune: unexpected argument extra"},
		{[]string{"tune", "-n", "2,2"}, `tune: -n "2,2": 2 given twice`},
		{[]string{"tune", "-n", "1"}, `tune: -n "1": want rank counts ≥ 2`},
		{[]string{"tune", "--colls", "allreduce,allreduce"}, "allreduce given twice"},
		{[]string{"tune", "--colls", "barrier"}, "barrier has no sizes"},
		{[]string{"tune", "--min-size", "0", "--max-size", "0"}, "tune: --max-size 0: want a positive size"},
		{[]string{"tune", "--min-size", "64", "--max-size", "8"}, "tune: --max-size 8 is smaller than --min-size 64"},
		{[]string{"tune", "--step", "1"}, "tune: --step 1: want a factor ≥ 2"},
		{[]string{"tune", "--reps", "0"}, "tune: --reps 0"},
		{[]string{"tune", "--budget", "-1s"}, "tune: --budget -1s"},
		{[]string{"tune", "--transport", "udp"}, `tune: --transport "udp"`},
		{[]string{"tune", "--out", filepath.Join(missing, "t.txt")}, "tune: --out " + filepath.Join(missing, "t.txt") + ": cannot write in"},

		{[]string{"topo", "extra"}, "topo: unexpected argument extra"},
		{[]string{"topo", "--topo", "mist", "--size", "4M"}, "topo: --size is for --plan"},
		{[]string{"topo", "--topo", "mist", "--gpus", "0,1"}, "topo: --gpus is for --plan"},
		{[]string{"topo", "--topo", "mist", "--links", "nvlink"}, "topo: --links is for --plan"},
		{[]string{"topo", "--topo", "mist", "--dump", filepath.Join(dir, "m.json"), "--dot"}, "topo: --dump writes the topology as JSON; it does not combine"},
		{[]string{"topo", "--topo", "dgx1-v100", "--plan", "bcast", "--dot", "--svg", filepath.Join(dir, "x.svg")}, "give one"},
		{[]string{"topo", "--topo", "dgx1-v100", "--plan", "bcast", "--size", "0"}, `topo: --size: size "0": want a positive size`},
		{[]string{"topo", "--topo", "dgx1-v100", "--plan", "bcast", "--links", "nv"}, `--links "nv": want nvlink, all or auto`},
		{[]string{"topo", "--topo", "dgx1-v100", "--dump", filepath.Join(missing, "x.json")}, "topo: --dump " + filepath.Join(missing, "x.json") + ": cannot write in"},

		{[]string{"sim", "--topo", "dgx1-v100", "--size", "0"}, "sim: --size 0: want a positive multiple of 4 bytes"},
		{[]string{"sim", "--topo", "dgx1-v100", "--size", "6"}, "sim: --size 6"},
		{[]string{"sim", "--sweep", "dgx1-v100", "--topo", "mist"}, "sim: --topo does not apply to --sweep"},
		{[]string{"sim", "--sweep", "dgx1-v100", "--algos", "ring"}, "sim: --algos does not apply to --sweep"},
		{[]string{"sim", "--topo", "dgx1-v100", "--pcie", "-3"}, "sim: --pcie -3"},
		{[]string{"sim", "--topo", "dgx1-v100", "--overhead", "-1us"}, "sim: --overhead -1µs"},
		{[]string{"sim", "--topo", "dgx1-v100", "--links", "nv"}, `sim: --links "nv"`},
		{[]string{"sim", "--topo", "dgx1-v100", "--timeline", filepath.Join(missing, "t.svg")}, "sim: --timeline " + filepath.Join(missing, "t.svg") + ": cannot write in"},
		{[]string{"sim", "--topo", "dgx1-v100", "extra"}, "sim: unexpected argument extra"},
		{[]string{"sim", "--topo", "dgx1-v100", "--imbalance", "-1"}, "sim: --imbalance -1: want a maximum imbalance factor ≥ 0"},
		{[]string{"sim", "--topo", "dgx1-v100", "--imbalance", "NaN"}, "sim: --imbalance NaN"},
		{[]string{"sim", "--topo", "dgx1-v100", "--imbalance", "10", "--trials", "0"}, "sim: --trials 0"},
		{[]string{"sim", "--topo", "dgx1-v100", "--seed", "3"}, "sim: --seed applies only to --imbalance"},
		{[]string{"sim", "--topo", "dgx1-v100", "--imbalance", "10", "--start", "0,1"}, "sim: --imbalance draws the arrival patterns and --start gives one"},
		{[]string{"sim", "--topo", "dgx1-v100", "--start", "0,x"}, `sim: --start "0,x": offset "x" of rank 1`},
		{[]string{"sim", "--topo", "dgx1-v100", "--start", "0,-5"}, `offset "-5" of rank 1 is not a number of microseconds ≥ 0`},
		{[]string{"sim", "--topo", "dgx1-v100", "--start", ","}, "no offsets"},
		{[]string{"sim", "--topo", "dgx1-v100", "--start", "0,1,2"}, "sim: --start 0,1,2: 3 offsets for 8 ranks"},
		{[]string{"sim", "--sweep", "dgx1-v100", "--imbalance", "10"}, "sim: --imbalance does not apply to --sweep"},

		{[]string{"prof"}, "prof: which profile?"},
		{[]string{"prof", filepath.Join(missing, "p")}, "prof: " + filepath.Join(missing, "p") + ": neither a profile nor the prefix of one"},
		{[]string{"prof", filepath.Join(dir, "x")}, "prof: no profile " + filepath.Join(dir, "x") + " nor " + filepath.Join(dir, "x") + ".RANK files"},
		{[]string{"prof", "p", "--hist", filepath.Join(dir, "h.pdf")}, "prof: --hist " + filepath.Join(dir, "h.pdf") + ": want a .png or .svg file"},
		{[]string{"prof", "p", "--share", filepath.Join(missing, "s.png")}, "prof: --share " + filepath.Join(missing, "s.png") + ": cannot write in"},
		{[]string{"prof", "p", "--trace", filepath.Join(missing, "t.json")}, "prof: --trace " + filepath.Join(missing, "t.json") + ": cannot write in"},
	} {
		err := quiet(t, func() error { return cmds[tc.args[0]](tc.args[1:]) })
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("braid %s: %v (%T), want a usage error with %q", strings.Join(tc.args, " "), err, err, tc.want)
		}
	}
}

// TestHelp: -h and --help of every subcommand print the usage and exit 0
// (they exited 2 with "flag: help requested").
func TestHelp(t *testing.T) {
	for _, sub := range [][]string{{"run"}, {"bench"}, {"bench", "--device", "cuda"}, {"tune"}, {"tune", "--device", "cuda"}, {"topo"}, {"sim"}, {"prof"}} {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, sub...), h)
			out, err := run(t, 30*time.Second, nil, args...)
			if err != nil || !strings.Contains(out, "usage: braid "+sub[0]) || strings.Contains(out, "help requested") {
				t.Errorf("braid %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
}

// TestHelpListsEnvironment: braid help names every variable of the
// README's table of knobs.
func TestHelpListsEnvironment(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile("(?m)^\\| `(BRAID_[A-Z0-9_]+)`").FindAllStringSubmatch(string(readme), -1)
	if len(vars) < 8 {
		t.Fatalf("found %d knobs in the README's table", len(vars))
	}
	out, err := run(t, 30*time.Second, nil, "help")
	if err != nil {
		t.Fatalf("braid help: %v\n%s", err, out)
	}
	for _, v := range vars {
		if !strings.Contains(out, v[1]) {
			t.Errorf("braid help does not list %s", v[1])
		}
	}
	for _, v := range []string{"BRAID_HOST", "BRAID_SHM_CMA", "BRAID_GPU_", "BRAID_TIMEOUT", "BRAID_PROFILE"} {
		if !strings.Contains(out, v) {
			t.Errorf("braid help does not list %s", v)
		}
	}
}

// TestEnvironmentCheckedBeforeLaunch: with -n, a bad knob is reported once,
// by the launching process, before any rank starts.
func TestEnvironmentCheckedBeforeLaunch(t *testing.T) {
	for _, env := range []string{"BRAID_ALGO=rign", "BRAID_TIMEOUT=0", "BRAID_TRANSPORT=udp", "BRAID_PROFILE=1"} {
		out, err := run(t, 30*time.Second, []string{env}, "bench", "-n", "2", "allreduce", "--max-size", "8")
		name, _, _ := strings.Cut(env, "=")
		if err == nil || !strings.Contains(out, name) || strings.Count(out, name) != 1 || strings.Contains(out, "rank 0 exited") {
			t.Errorf("%s: %v\n%s", env, err, out)
		}
	}
}

// TestBindEnv: braid run's --bind reaches the ranks as BRAID_BIND; without
// it the ranks keep the environment's, or Options.Bind's default.
func TestBindEnv(t *testing.T) {
	for _, c := range []struct {
		flag string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{"none", []string{"BRAID_BIND=none"}, false},
		{"auto", []string{"BRAID_BIND=auto"}, false},
		{"core", []string{"BRAID_BIND=core"}, false},
		{"cores", nil, true},
	} {
		got, err := bindEnv(c.flag)
		if (err != nil) != c.bad || !slices.Equal(got, c.want) {
			t.Errorf("bindEnv(%q) = %v, %v; want %v (error: %v)", c.flag, got, err, c.want, c.bad)
		}
	}
}
