package braid

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/plan"
)

// TestResolveKnobs runs every environment knob, and the Options fields
// they stand for, through resolve: good values are taken, bad ones are
// errors that name the variable (or field), quote the value and say what
// it may be.
func TestResolveKnobs(t *testing.T) {
	dir := t.TempDir()
	table := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodTable := table("good.txt", "allreduce ranks=2 hosts=1 size=0- ring\n")
	unknownAlgo := table("unknown.txt", "# header\nallreduce ranks=2 hosts=1 size=0-16K ring\nallreduce ranks=2 hosts=1 size=16K- rign\n")
	badParam := table("param.txt", "bcast ranks=* hosts=* size=0- binomial:seg=64K\n")
	badField := table("field.txt", "allreduce ranks=two hosts=1 size=0- ring\n")

	for _, tc := range []struct {
		name  string
		env   map[string]string
		opts  Options
		want  []string // parts of the error; nil for success
		check func(t *testing.T, o Options)
	}{
		{name: "defaults", check: func(t *testing.T, o Options) {
			if o.Timeout != DefaultTimeout || o.Debug != "" || o.DisableMIAD || o.Transport != "" {
				t.Errorf("defaults: %+v", o)
			}
		}},

		// BRAID_ALGO and Options.Algo.
		{name: "algo bare", env: map[string]string{"BRAID_ALGO": "ring"}},
		{name: "algo bare for some collectives", env: map[string]string{"BRAID_ALGO": "chain:seg=256K"}},
		{name: "algo per collective", env: map[string]string{"BRAID_ALGO": "allreduce=recdouble,bcast=chain:seg=256K,reduce=knomial:k=4"}},
		{name: "algo typo", env: map[string]string{"BRAID_ALGO": "rign"},
			want: []string{`BRAID_ALGO="rign"`, `no collective has an algorithm named "rign"`, "recdouble", "segring"}},
		{name: "algo typo in Options", opts: Options{Algo: "rign"},
			want: []string{`Options.Algo="rign"`, `no collective has an algorithm named "rign"`}},
		{name: "algo unknown for collective", env: map[string]string{"BRAID_ALGO": "allreduce=binomial"},
			want: []string{`BRAID_ALGO="allreduce=binomial"`, `no allreduce algorithm named "binomial" (have `, "recdouble"}},
		{name: "algo unknown collective", env: map[string]string{"BRAID_ALGO": "allscatter=ring"},
			want: []string{`BRAID_ALGO=`, `unknown collective "allscatter" (want one of allreduce,`}},
		{name: "algo zero segment", env: map[string]string{"BRAID_ALGO": "allreduce=segring:seg=0"},
			want: []string{`BRAID_ALGO=`, `seg="0": want a positive size`}},
		{name: "algo bad radix", env: map[string]string{"BRAID_ALGO": "bcast=knomial:k=1"},
			want: []string{`BRAID_ALGO=`, `k="1"`}},
		{name: "algo parameter not taken", env: map[string]string{"BRAID_ALGO": "allreduce=ring:seg=64K"},
			want: []string{`BRAID_ALGO=`, `"ring" takes no parameters, not seg`}},
		{name: "algo two bare", env: map[string]string{"BRAID_ALGO": "ring,recdouble"},
			want: []string{`BRAID_ALGO=`, "a second algorithm for every collective"}},
		{name: "algo field wins over env", env: map[string]string{"BRAID_ALGO": "rign"}, opts: Options{Algo: "ring"}},

		// BRAID_TIMEOUT and Options.Timeout.
		{name: "timeout duration", env: map[string]string{"BRAID_TIMEOUT": "5s"}, check: func(t *testing.T, o Options) {
			if o.Timeout != 5*time.Second {
				t.Errorf("timeout %v", o.Timeout)
			}
		}},
		{name: "timeout seconds", env: map[string]string{"BRAID_TIMEOUT": "2.5"}, check: func(t *testing.T, o Options) {
			if o.Timeout != 2500*time.Millisecond {
				t.Errorf("timeout %v", o.Timeout)
			}
		}},
		{name: "timeout zero", env: map[string]string{"BRAID_TIMEOUT": "0"}, want: []string{`BRAID_TIMEOUT="0": want a positive duration`}},
		{name: "timeout zero seconds", env: map[string]string{"BRAID_TIMEOUT": "0s"}, want: []string{`BRAID_TIMEOUT="0s": want a positive duration`}},
		{name: "timeout negative", env: map[string]string{"BRAID_TIMEOUT": "-5s"}, want: []string{`BRAID_TIMEOUT="-5s": want a positive duration`}},
		{name: "timeout negative seconds", env: map[string]string{"BRAID_TIMEOUT": "-3"}, want: []string{`BRAID_TIMEOUT="-3": want a positive`}},
		{name: "timeout text", env: map[string]string{"BRAID_TIMEOUT": "abc"}, want: []string{`BRAID_TIMEOUT="abc": want a duration such as 30s`}},
		{name: "timeout trailing text", env: map[string]string{"BRAID_TIMEOUT": "30abc"}, want: []string{`BRAID_TIMEOUT="30abc"`}},
		{name: "timeout NaN", env: map[string]string{"BRAID_TIMEOUT": "NaN"}, want: []string{`BRAID_TIMEOUT="NaN"`}},
		{name: "timeout too long", env: map[string]string{"BRAID_TIMEOUT": "1e300"}, want: []string{`BRAID_TIMEOUT="1e300"`, "at most"}},
		{name: "timeout field negative", opts: Options{Timeout: -time.Second}, want: []string{"Options.Timeout -1s: want a positive duration"}},

		// BRAID_TRANSPORT and Options.Transport.
		{name: "transport tcp", env: map[string]string{"BRAID_TRANSPORT": "tcp"}},
		{name: "transport auto", env: map[string]string{"BRAID_TRANSPORT": "auto"}},
		{name: "transport unknown", env: map[string]string{"BRAID_TRANSPORT": "TCP"}, want: []string{`BRAID_TRANSPORT="TCP": want shm or tcp`}},
		{name: "transport field", opts: Options{Transport: "udp"}, want: []string{`Options.Transport="udp": want shm or tcp`}},

		// BRAID_DEBUG and Options.Debug.
		{name: "debug INFO", env: map[string]string{"BRAID_DEBUG": "INFO"}, check: func(t *testing.T, o Options) {
			if o.Debug != "info" {
				t.Errorf("debug %q", o.Debug)
			}
		}},
		{name: "debug unknown", env: map[string]string{"BRAID_DEBUG": "verbose"}, want: []string{`BRAID_DEBUG="verbose": want info`, "trace"}},
		{name: "debug field", opts: Options{Debug: "loud"}, want: []string{`Options.Debug="loud"`}},

		// BRAID_MIAD.
		{name: "miad off", env: map[string]string{"BRAID_MIAD": "OFF"}, check: func(t *testing.T, o Options) {
			if !o.DisableMIAD {
				t.Error("BRAID_MIAD=OFF left MIAD on")
			}
		}},
		{name: "miad on", env: map[string]string{"BRAID_MIAD": "1"}},
		{name: "miad unknown", env: map[string]string{"BRAID_MIAD": "no"}, want: []string{`BRAID_MIAD="no": want off`, "on"}},

		// BRAID_CLOCK_REFRESH and Options.ClockRefresh.
		{name: "clock refresh default", check: func(t *testing.T, o Options) {
			if o.ClockRefresh != DefaultClockRefresh {
				t.Errorf("clock refresh %v, want %v", o.ClockRefresh, DefaultClockRefresh)
			}
		}},
		{name: "clock refresh", env: map[string]string{"BRAID_CLOCK_REFRESH": "2m"}, check: func(t *testing.T, o Options) {
			if o.ClockRefresh != 2*time.Minute {
				t.Errorf("clock refresh %v, want 2m", o.ClockRefresh)
			}
		}},
		{name: "clock refresh seconds", env: map[string]string{"BRAID_CLOCK_REFRESH": "0.5"}, check: func(t *testing.T, o Options) {
			if o.ClockRefresh != 500*time.Millisecond {
				t.Errorf("clock refresh %v, want 500ms", o.ClockRefresh)
			}
		}},
		{name: "clock refresh off", env: map[string]string{"BRAID_CLOCK_REFRESH": "Off"}, check: func(t *testing.T, o Options) {
			if o.ClockRefresh >= 0 {
				t.Errorf("clock refresh %v, want off (negative)", o.ClockRefresh)
			}
		}},
		{name: "clock refresh field", opts: Options{ClockRefresh: time.Second}, env: map[string]string{"BRAID_CLOCK_REFRESH": "off"}, check: func(t *testing.T, o Options) {
			if o.ClockRefresh != time.Second {
				t.Errorf("clock refresh %v, want the field's 1s", o.ClockRefresh)
			}
		}},
		{name: "clock refresh bad", env: map[string]string{"BRAID_CLOCK_REFRESH": "-3s"}, want: []string{`BRAID_CLOCK_REFRESH="-3s": want a duration`}},
		{name: "clock refresh word", env: map[string]string{"BRAID_CLOCK_REFRESH": "often"}, want: []string{`BRAID_CLOCK_REFRESH="often"`}},

		// BRAID_SHM_CMA (read by the shm transport, checked here).
		{name: "cma 0", env: map[string]string{"BRAID_SHM_CMA": "0"}},
		{name: "cma 1", env: map[string]string{"BRAID_SHM_CMA": "1"}},
		{name: "cma unknown", env: map[string]string{"BRAID_SHM_CMA": "off"}, want: []string{`BRAID_SHM_CMA="off": want 0`, "1 (the default", "or split"}},
		{name: "cma split", env: map[string]string{"BRAID_SHM_CMA": "split"}},
		{name: "eager 16K", env: map[string]string{"BRAID_SHM_EAGER": "16K"}},
		{name: "eager too large", env: map[string]string{"BRAID_SHM_EAGER": "2M"}, want: []string{`BRAID_SHM_EAGER="2M": want a size from 1 byte to 256 KiB`}},
		{name: "eager not a size", env: map[string]string{"BRAID_SHM_EAGER": "big"}, want: []string{`BRAID_SHM_EAGER="big"`}},
		{name: "copy threads 1", env: map[string]string{"BRAID_COPY_THREADS": "1"}},
		{name: "copy threads 0", env: map[string]string{"BRAID_COPY_THREADS": "0"}, want: []string{`BRAID_COPY_THREADS="0": want a whole number of threads from 1`}},
		{name: "copy threads not a number", env: map[string]string{"BRAID_COPY_THREADS": "many"}, want: []string{`BRAID_COPY_THREADS="many"`}},
		{name: "copy min 2M", env: map[string]string{"BRAID_COPY_MIN": "2M"}},
		{name: "copy min too small", env: map[string]string{"BRAID_COPY_MIN": "4K"}, want: []string{`BRAID_COPY_MIN="4K": want a size from 64K to 1G`}},
		{name: "copy min not a size", env: map[string]string{"BRAID_COPY_MIN": "big"}, want: []string{`BRAID_COPY_MIN="big"`}},
		{name: "stream min 8M", env: map[string]string{"BRAID_STREAM_MIN": "8M"}},
		{name: "stream min off", env: map[string]string{"BRAID_STREAM_MIN": "off"}},
		{name: "stream min too small", env: map[string]string{"BRAID_STREAM_MIN": "4K"}, want: []string{`BRAID_STREAM_MIN="4K": want a size from 64K`}},
		{name: "bind auto by default", check: func(t *testing.T, o Options) {
			if o.Bind != BindAuto {
				t.Errorf("Bind %q, want auto", o.Bind)
			}
		}},
		{name: "bind none", env: map[string]string{"BRAID_BIND": "none"}, check: func(t *testing.T, o Options) {
			if o.Bind != BindNone {
				t.Errorf("Bind %q, want none", o.Bind)
			}
		}},

		// BRAID_HOST and Options.Host.
		{name: "host", env: map[string]string{"BRAID_HOST": "node-1.example"}, check: func(t *testing.T, o Options) {
			if o.Host != "node-1.example" {
				t.Errorf("host %q", o.Host)
			}
		}},
		{name: "host blank", env: map[string]string{"BRAID_HOST": "node1 "}, want: []string{`BRAID_HOST="node1 ": want a host name`}},
		{name: "host control", opts: Options{Host: "a\tb"}, want: []string{`Options.Host="a\tb"`}},

		// BRAID_TUNING and Options.Tuning.
		{name: "tuning none", env: map[string]string{"BRAID_TUNING": "none"}},
		{name: "tuning good", env: map[string]string{"BRAID_TUNING": goodTable}},
		{name: "tuning missing", env: map[string]string{"BRAID_TUNING": filepath.Join(dir, "nosuch.txt")},
			want: []string{"BRAID_TUNING: tuning table: open ", "nosuch.txt"}},
		{name: "tuning unknown algorithm", env: map[string]string{"BRAID_TUNING": unknownAlgo},
			want: []string{"BRAID_TUNING: tuning table " + unknownAlgo + ":3: ", `no allreduce algorithm named "rign"`}},
		{name: "tuning parameter not taken", opts: Options{Tuning: badParam},
			want: []string{"Options.Tuning: tuning table " + badParam + ":1: ", `"binomial" takes no parameters, not seg`}},
		{name: "tuning bad field", env: map[string]string{"BRAID_TUNING": badField},
			want: []string{"BRAID_TUNING: tuning table " + badField + ":1: ", `ranks="two"`}},

		// BRAID_TOPO.
		{name: "topo preset", env: map[string]string{"BRAID_TOPO": "dgx1-v100"}, check: func(t *testing.T, o Options) {
			if o.Topology == nil {
				t.Error("no topology")
			}
		}},
		{name: "topo unknown", env: map[string]string{"BRAID_TOPO": "dgx9"}, want: []string{`BRAID_TOPO: "dgx9" is neither a preset`, "dgx1-v100"}},

		// BRAID_PROFILE and Options.Profile.
		{name: "profile", env: map[string]string{"BRAID_PROFILE": filepath.Join(dir, "prof")}, check: func(t *testing.T, o Options) {
			if o.Profile != filepath.Join(dir, "prof") {
				t.Errorf("profile %q", o.Profile)
			}
		}},
		{name: "profile field wins", env: map[string]string{"BRAID_PROFILE": "1"}, opts: Options{Profile: filepath.Join(dir, "p")}},
		{name: "profile on", env: map[string]string{"BRAID_PROFILE": "1"},
			want: []string{`BRAID_PROFILE="1": want the prefix of the files to write`, "PREFIX.RANK.trace.json"}},
		{name: "profile no directory", env: map[string]string{"BRAID_PROFILE": filepath.Join(dir, "nosuch", "p")},
			want: []string{`BRAID_PROFILE="` + filepath.Join(dir, "nosuch", "p") + `": directory ` + filepath.Join(dir, "nosuch") + ": no such file or directory"}},
		{name: "profile a directory", opts: Options{Profile: dir},
			want: []string{`Options.Profile="` + dir + `": is a directory`}},
		{name: "profile trailing slash", env: map[string]string{"BRAID_PROFILE": dir + "/"},
			want: []string{`BRAID_PROFILE="` + dir + `/": want a file prefix, not a directory`}},
		{name: "profile in a file", env: map[string]string{"BRAID_PROFILE": filepath.Join(goodTable, "p")},
			want: []string{`BRAID_PROFILE=`, goodTable + " is not a directory"}},
		{name: "flight stderr", env: map[string]string{"BRAID_FLIGHT": ""}},
		{name: "flight off", env: map[string]string{"BRAID_FLIGHT": "off"}},
		{name: "flight dir", env: map[string]string{"BRAID_FLIGHT": dir}},
		{name: "flight on", env: map[string]string{"BRAID_FLIGHT": "1"},
			want: []string{`BRAID_FLIGHT="1": want off, or a directory`}},
		{name: "flight no directory", opts: Options{Flight: filepath.Join(dir, "nosuch")},
			want: []string{`Options.Flight="` + filepath.Join(dir, "nosuch") + `": directory`, "no such file or directory"}},
		{name: "flight in a file", env: map[string]string{"BRAID_FLIGHT": goodTable},
			want: []string{`BRAID_FLIGHT=`, goodTable + " is not a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"BRAID_TUNING": "none"}
			for k, v := range tc.env {
				env[k] = v
			}
			opts := tc.opts
			opts.Log = &bytes.Buffer{}
			o, err := opts.resolve(func(k string) string { return env[k] })
			if tc.want == nil {
				if err != nil {
					t.Fatalf("resolve: %v", err)
				}
				if tc.check != nil {
					tc.check(t, o)
				}
				return
			}
			if err == nil {
				t.Fatalf("resolve accepted it, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestCachedTableIgnoredAloud: a cached table braid tune wrote that
// Braid cannot use does not stop a job, but is not ignored in silence.
func TestCachedTableIgnoredAloud(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("BRAID_TUNING", "")
	path := DefaultTuningFile()
	if !strings.HasPrefix(path, cache) {
		t.Skipf("the cache directory is %s, not under XDG_CACHE_HOME", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("allreduce ranks=* hosts=* size=0- oldname\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	o, err := (&Options{Log: &log}).resolve(func(string) string { return "" })
	if err != nil {
		t.Fatalf("a bad cached table failed the job: %v", err)
	}
	if d, ok := o.Planner.(plan.Default); !ok || d.Table != nil {
		t.Errorf("planner %#v, want plan.Default without a table", o.Planner)
	}
	if got := log.String(); !strings.Contains(got, "ignoring the cached tuning table "+path+":1") || !strings.Contains(got, `"oldname"`) {
		t.Errorf("log %q: want it to say the cached table is ignored, and why", got)
	}
	// Named explicitly, the same table is an error.
	if _, err := (&Options{Log: &log, Tuning: path}).resolve(func(string) string { return "" }); err == nil {
		t.Error("a bad table named in Options.Tuning was accepted")
	}
}

// TestValidate: Validate reports what NewLocal and Init would, without
// creating anything.
func TestValidate(t *testing.T) {
	t.Setenv("BRAID_TUNING", "none")
	t.Setenv("BRAID_ALGO", "rign")
	err := (&Options{}).Validate()
	if KindOf(err) != InvalidArgument || !strings.Contains(err.Error(), `BRAID_ALGO="rign"`) {
		t.Errorf("Validate with BRAID_ALGO=rign: %v", err)
	}
	if err := (&Options{Algo: "ring"}).Validate(); err != nil {
		t.Errorf("Validate with Options.Algo=ring over BRAID_ALGO=rign: %v", err)
	}
	t.Setenv("BRAID_ALGO", "")
	if err := (*Options)(nil).Validate(); err != nil {
		t.Errorf("Validate(nil): %v", err)
	}
}

// TestTableOtherMachine: a tuning table measured on another machine (its
// machine line) is refused when named, and ignored aloud when cached; one
// measured here is taken.
func TestTableOtherMachine(t *testing.T) {
	dir := t.TempDir()
	here := ThisMachine()
	other := plan.Machine{Cores: here.Cores + 1, NUMA: here.NUMA}
	write := func(name string, m plan.Machine) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf("machine cores=%d numa=%d\nallreduce ranks=* hosts=* size=0- ring\n", m.Cores, m.NUMA)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	none := func(string) string { return "" }
	if _, err := (&Options{Tuning: write("here.txt", here)}).resolve(none); err != nil {
		t.Errorf("a table from this machine: %v", err)
	}
	_, err := (&Options{Tuning: write("other.txt", other)}).resolve(none)
	if err == nil || !strings.Contains(err.Error(), "was measured on a machine with "+other.String()) || !strings.Contains(err.Error(), "run braid tune here") {
		t.Errorf("a table from another machine: %v, want an error naming both machines", err)
	}
	// A device table (its machine line records GPUs, no cores) is for
	// BRAID_GPU_TUNING, not for host calls.
	dev := filepath.Join(dir, "cuda.txt")
	if err := os.WriteFile(dev, []byte("machine gpus=4 gpu=NVIDIA_H200\nallreduce ranks=* hosts=* size=0- direct\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Options{Tuning: dev}).resolve(none); err == nil || !strings.Contains(err.Error(), "BRAID_GPU_TUNING") {
		t.Errorf("a device table as the host's: %v, want an error pointing to BRAID_GPU_TUNING", err)
	}
}
