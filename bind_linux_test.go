package braid

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBindChild runs in a child process of TestBind: binding changes the
// whole process, so the test binary itself is never bound.
func TestBindChild(t *testing.T) {
	spec := os.Getenv("BRAID_TEST_BIND_CHILD")
	if spec == "" {
		t.Skip("runs as TestBind's child")
	}
	var mode string
	var local, size int
	if _, err := fmt.Sscanf(spec, "%s %d %d", &mode, &local, &size); err != nil {
		t.Fatal(err)
	}
	what, err := bindRank(mode, local, size)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return
	}
	fmt.Printf("what: %s\n", what)
	for _, th := range threadCPUs() {
		fmt.Printf("thread %s: %s\n", th.tid, th.cpus)
	}
}

type threadMask struct{ tid, cpus string }

// threadCPUs lists every thread of this process with the CPUs it may run
// on, as Linux writes them in its status file ("0-7"); a thread that ends
// while it is read is left out.
func threadCPUs() []threadMask {
	var out []threadMask
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				out = append(out, threadMask{task.Name(), strings.TrimSpace(v)})
			}
		}
	}
	return out
}

func TestBind(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skip(err)
	}
	cpus := cpuList(&set)
	run := func(mode string, local, size int) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run", "^TestBindChild$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("BRAID_TEST_BIND_CHILD=%s %d %d", mode, local, size))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %d %d: %v\n%s", mode, local, size, err, out)
		}
		return string(out)
	}
	threads := func(out string) []string {
		var masks []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "thread ") {
				masks = append(masks, line[strings.Index(line, ": ")+2:])
			}
		}
		return masks
	}
	// One CPU per rank: every thread of the last local rank on its CPU.
	n := len(cpus)
	out := run(BindCore, n-1, n)
	masks := threads(out)
	if len(masks) == 0 {
		t.Fatalf("no threads listed:\n%s", out)
	}
	for _, m := range masks {
		if m != strconv.Itoa(cpus[n-1]) {
			t.Errorf("core, local rank %d of %d: a thread allowed on %q, want %d\n%s", n-1, n, m, cpus[n-1], out)
		}
	}
	// More ranks than CPUs: auto leaves the process alone, core refuses.
	if out := run(BindAuto, 0, n+1); !strings.Contains(out, "left as it is") || len(threads(out)) == 0 ||
		threads(out)[0] != cpuRange(cpus) {
		t.Errorf("auto with %d ranks on %d CPUs: want the process left on every CPU\n%s", n+1, n, out)
	}
	if out := run(BindCore, 0, n+1); !strings.Contains(out, "error: ") || !strings.Contains(out, "CPUs to bind them to") {
		t.Errorf("core with %d ranks on %d CPUs: want an error\n%s", n+1, n, out)
	}
	if out := run(BindNone, 0, 1); strings.Contains(out, "what: bound") {
		t.Errorf("none bound the process:\n%s", out)
	}
	if out := run(BindAuto, 0, 1); strings.Contains(out, "what: bound") {
		t.Errorf("auto bound a rank alone on its host:\n%s", out)
	}
	// Share, and auto where the ranks take more than half the CPUs: every
	// CPU in one rank's block, the blocks in the order of the cores,
	// differing by at most one CPU. Auto leaves fewer ranks unbound.
	ordered := cpuOrder(cpus, readTopo)
	for _, size := range []int{n, n/2 + 1, max(1, n/2)} {
		for _, mode := range []string{BindAuto, BindShare} {
			var all []int
			for local := range size {
				masks := threads(run(mode, local, size))
				if len(masks) == 0 {
					t.Fatalf("%s, local rank %d of %d: no threads listed", mode, local, size)
				}
				block := ordered[local*n/size : (local+1)*n/size]
				want := cpuRange(block)
				if mode == BindAuto && 2*size <= n {
					want = cpuRange(cpus)
				}
				for _, m := range masks {
					if m != want && (size > 1 || m != cpuRange(cpus)) {
						t.Errorf("%s, local rank %d of %d: a thread allowed on %q, want %s", mode, local, size, m, want)
					}
				}
				all = append(all, block...)
			}
			if len(all) != n {
				t.Errorf("%s, %d ranks: the blocks cover %d of %d CPUs", mode, size, len(all), n)
			}
		}
	}
}

func TestBindOption(t *testing.T) {
	o := Options{Bind: "cores"}
	if _, err := o.resolve(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), `Options.Bind="cores"`) {
		t.Errorf("Options.Bind cores: %v", err)
	}
	env := func(k string) string {
		if k == "BRAID_BIND" {
			return "sockets"
		}
		return ""
	}
	if _, err := (&Options{}).resolve(env); err == nil || !strings.Contains(err.Error(), `BRAID_BIND="sockets"`) {
		t.Errorf("BRAID_BIND=sockets: %v", err)
	}
	r, err := (&Options{}).resolve(func(string) string { return "" })
	if err != nil || r.Bind != BindAuto {
		t.Errorf("default Bind %q, %v; want auto", r.Bind, err)
	}
}

// TestCPUOrder: a core's hardware threads, which Linux numbers apart
// (0 and 4 on a 4-core, 8-thread package), come out side by side, so that
// auto's blocks of two CPUs are whole cores; a CPU of unknown topology
// goes last.
func TestCPUOrder(t *testing.T) {
	topo := func(cpu int) (int, int, bool) {
		if cpu == 9 {
			return 0, 0, false
		}
		return cpu / 8, cpu % 4, true
	}
	got := cpuOrder([]int{9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 12}, topo)
	want := []int{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9}
	if !slices.Equal(got, want) {
		t.Fatalf("cpuOrder: %v, want %v", got, want)
	}
}

func TestCPURange(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{[]int{3}, "3"}, {[]int{0, 1}, "0-1"}, {[]int{0, 1, 2, 3, 4, 5, 6, 7}, "0-7"}, {[]int{0, 4}, "0,4"},
		{[]int{0, 1, 2, 3, 8, 9, 10, 11}, "0-3,8-11"}, {[]int{0, 2, 3, 4, 9}, "0,2-4,9"},
		{[]int{0, 16, 1, 17}, "0-1,16-17"}, // a block of two cores' hardware threads (cpuOrder)
	} {
		if got := cpuRange(c.cpus); got != c.want {
			t.Errorf("cpuRange(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
}

// TestSetThreadsAffinityRace binds a process's threads while goroutines
// make new threads all the time (a goroutine that ends locked to its
// thread takes the thread with it), then lists every thread's mask: none
// may be left on the CPUs it had. One pass over the thread list left
// 9-55 threads unbound over these 150 bindings here (2 CPUs, quiet or
// loaded). It runs in a child process, as TestBindChild does.
func TestSetThreadsAffinityRace(t *testing.T) {
	if os.Getenv("BRAID_TEST_BIND_RACE") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSetThreadsAffinityRace$", "-test.v")
		cmd.Env = append(os.Environ(), "BRAID_TEST_BIND_RACE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestSetThreadsAffinityRace") {
			t.Fatalf("the child: %v\n%s", err, out)
		}
		return
	}
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Skip(err)
	}
	cpus := cpuList(&all)
	one.Set(cpus[len(cpus)-1])
	want := strconv.Itoa(cpus[len(cpus)-1])
	stop := make(chan struct{})
	defer close(stop)
	for range 8 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				done := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					unix.Nanosleep(&unix.Timespec{Nsec: 20000}, nil)
					close(done)
				}()
				<-done
			}
		}()
	}
	escaped := 0
	for i := range 150 {
		if err := setThreadsAffinity(&all); err != nil {
			t.Fatal(err)
		}
		if err := setThreadsAffinity(&one); err != nil {
			t.Fatal(err)
		}
		for _, th := range threadCPUs() {
			if th.cpus != want {
				escaped++
				t.Logf("binding %d: thread %s allowed on %s, want %s", i, th.tid, th.cpus, want)
			}
		}
	}
	if escaped > 0 {
		t.Errorf("%d threads left off the binding", escaped)
	}
}

// TestHostCPUs: a process that its launcher bound to one CPU (taskset here,
// as mpirun --bind-to core does) counts its cgroup's CPUs for the host's
// ranks where their shares fit the cgroup's set, and its own one where
// they do not (a job confined as a whole); unbound, its own count. Its
// tuning tables record the cgroup's CPUs (ThisMachine), as an unbound
// process's do.
func TestHostCPUs(t *testing.T) {
	if os.Getenv("BRAID_TEST_HOSTCPUS_CHILD") != "" {
		cg := cgroupCPUs()
		fmt.Printf("counts %d %d %d %d %d\n", runtime.NumCPU(), hostCPUs(cg), hostCPUs(cg+1), cg, ThisMachine().Cores)
		return
	}
	if got, own := hostCPUs(1), runtime.NumCPU(); got < own {
		t.Fatalf("hostCPUs(1) = %d, fewer than this process's %d", got, own)
	}
	cg := cgroupCPUs()
	if cg < 2 {
		t.Skipf("the cgroup's cpuset has %d CPUs (or none to read): nothing to narrow", cg)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("no taskset to bind the child with")
	}
	cmd := exec.Command(taskset, "-c", "0", os.Args[0], "-test.run", "^TestHostCPUs$")
	cmd.Env = append(os.Environ(), "BRAID_TEST_HOSTCPUS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var own, fit, over, cgroup, machine int
	for _, l := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(l, "counts %d %d %d %d %d", &own, &fit, &over, &cgroup, &machine); err == nil {
			break
		}
	}
	if own != 1 || fit != cg || over != 1 || cgroup != cg || machine != cg {
		t.Fatalf("bound to CPU 0: NumCPU %d, hostCPUs %d for %d ranks and %d for %d, cgroupCPUs %d, ThisMachine's cores %d; want 1, %d, 1, %d, %d\n%s",
			own, fit, cg, over, cg+1, cgroup, machine, cg, cg, cg, out)
	}
}

func TestParentCgroup(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a", "/a/b/": "/a", "/a": "/", "/": "/", "": "/"} {
		if got := parentCgroup(in); got != want {
			t.Errorf("parentCgroup(%q) = %q, want %q", in, got, want)
		}
	}
}
