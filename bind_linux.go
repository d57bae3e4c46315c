package braid

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/topo"
)

// bindRank pins this process's threads to its share of the cores it may
// run on, as Options.Bind says, and returns what it did for the log ("" if
// nothing). local and localSize are the rank's place among the ranks of
// its host.
//
// A share is a block of the CPUs in the order of their cores (cpuOrder),
// so that the hardware threads of one core go to one rank; the blocks
// differ by at most one CPU, and every CPU is in one.
func bindRank(mode string, local, localSize int) (string, error) {
	if mode == BindNone || localSize < 1 {
		return "", nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "", fmt.Errorf("reading this process's CPU affinity: %w", err)
	}
	cpus := cpuList(&set)
	if mode == BindAuto {
		if localSize == 1 {
			return "", nil
		}
		if online := onlineCPUs(); online > 0 && len(cpus) < online {
			return fmt.Sprintf("left as it is: the process may run on %d of the %d online CPUs, a binding made by its launcher or cgroup", len(cpus), online), nil
		}
		if localSize > len(cpus) {
			return fmt.Sprintf("left as it is: %d ranks share %d CPUs", localSize, len(cpus)), nil
		}
		if 2*localSize <= len(cpus) {
			return fmt.Sprintf("left as it is: %d ranks on %d CPUs, room for the scheduler to keep them apart", localSize, len(cpus)), nil
		}
	}
	if localSize > len(cpus) {
		return "", fmt.Errorf("%d ranks on this host, %d CPUs to bind them to", localSize, len(cpus))
	}
	mine := cpus[local : local+1]
	if mode != BindCore {
		cpus = cpuOrder(cpus, readTopo)
		mine = cpus[local*len(cpus)/localSize : (local+1)*len(cpus)/localSize]
	}
	var want unix.CPUSet
	for _, c := range mine {
		want.Set(c)
	}
	if err := setThreadsAffinity(&want); err != nil {
		return "", err
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > len(mine) {
		runtime.GOMAXPROCS(len(mine))
	}
	return fmt.Sprintf("bound to CPU %s (local rank %d of %d, %d CPU(s); BRAID_BIND=none leaves ranks unbound)",
		cpuRange(mine), local, localSize, len(mine)), nil
}

// cpuOrder sorts cpus by package and core (coreOf's answers), so that the
// hardware threads of a core are next to each other: Linux numbers a
// core's second thread after every core's first. A CPU whose topology
// cannot be read keeps its place among the others' (sorted after them).
func cpuOrder(cpus []int, coreOf func(cpu int) (pkg, core int, ok bool)) []int {
	type key struct{ known, pkg, core, cpu int }
	keys := make([]key, len(cpus))
	for i, c := range cpus {
		keys[i] = key{1, 0, 0, c}
		if p, k, ok := coreOf(c); ok {
			keys[i] = key{0, p, k, c}
		}
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.known, b.known), cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.core, b.core), cmp.Compare(a.cpu, b.cpu))
	})
	out := make([]int, len(keys))
	for i, k := range keys {
		out[i] = k.cpu
	}
	return out
}

// readTopo reads a CPU's package and core from sysfs.
func readTopo(cpu int) (pkg, core int, ok bool) {
	read := func(name string) (int, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/%s", cpu, name))
		if err != nil {
			return 0, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return v, err == nil
	}
	pkg, ok1 := read("physical_package_id")
	core, ok2 := read("core_id")
	return pkg, core, ok1 && ok2
}

// setThreadsAffinity applies set to every thread of the process: Linux
// binds threads, not processes, and threads made later inherit the mask
// of the thread that makes them.
//
// A thread that one not yet bound makes while the threads are being
// bound inherits the old mask, and the Go runtime makes threads whenever
// it likes (at a process's start, in Init, most of all): under load, one
// pass over the thread list left up to a few threads a pass unbound
// (TestSetThreadsAffinityRace). So the list is read again, some
// microseconds apart, until two passes in a row find every thread on set.
func setThreadsAffinity(set *unix.CPUSet) error {
	for quiet, pass := 0, 0; quiet < 2; pass++ {
		if pass > 0 {
			time.Sleep(20 * time.Microsecond)
		}
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return unix.SchedSetaffinity(0, set)
		}
		quiet++
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			var now unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &now); err == nil && now == *set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("binding thread %d: %w", tid, err)
			}
			quiet = 0
		}
		if pass >= 1000 {
			return fmt.Errorf("binding threads: the process kept making threads on other CPUs through %d passes over its thread list", pass)
		}
	}
	return nil
}

func cpuList(set *unix.CPUSet) []int {
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// onlineCPUs counts /sys/devices/system/cpu/online ("0-15,32-47"), or 0.
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	cpus, err := topo.ParseCPUList(string(b))
	if err != nil {
		return 0
	}
	return len(cpus)
}

// cpuRange writes cpus as Linux's lists do: "3", "0-1", "0,4" or
// "0-3,8-11" (in ascending order, runs of consecutive CPUs as ranges).
func cpuRange(cpus []int) string {
	cpus = slices.Sorted(slices.Values(cpus))
	var s []string
	for i := 0; i < len(cpus); {
		j := i + 1
		for j < len(cpus) && cpus[j] == cpus[j-1]+1 {
			j++
		}
		if j-i == 1 {
			s = append(s, strconv.Itoa(cpus[i]))
		} else {
			s = append(s, fmt.Sprintf("%d-%d", cpus[i], cpus[j-1]))
		}
		i = j
	}
	return strings.Join(s, ",")
}

// hostCPUs returns how many CPUs the localRanks ranks of this host may
// run on together, for the choices that ask whether ranks outnumber cores
// (how long waiters spin, whether the shared area doubles). It is this
// process's CPU count (runtime.NumCPU, its affinity at start), unless a
// launcher narrowed each rank's affinity to its share of the cgroup's CPU
// set (mpirun --bind-to core, srun --cpu-bind): then the host's ranks have
// the whole set. Under mpirun --bind-to core on the 16-core node, 16 ranks
// each saw one CPU, waited as ranks that outnumber the cores do and never
// doubled: the 8- and 16-byte allreduces took 3.11 and 4.24 µs against
// 2.84 and 2.78 unbound (session 27). Whether the shares are disjoint
// cannot be seen from one rank: the cgroup's set counts only where the
// ranks' shares fit in it (localRanks × this rank's CPUs at most the
// set), so that a job confined as a whole to fewer CPUs than its ranks
// (taskset -c 0-3 for 16 ranks) still counts its own.
func hostCPUs(localRanks int) int {
	own := runtime.NumCPU()
	if cg := cgroupCPUsOnce(); cg > own && localRanks*own <= cg {
		return cg
	}
	return own
}

// cgroupCPUsOnce is cgroupCPUs, read once per process as runtime.NumCPU
// is (Init asks twice, and every split of a communicator once more).
var cgroupCPUsOnce = sync.OnceValue(cgroupCPUs)

// cgroupCPUs counts the CPUs of this process's cgroup's cpuset (cgroup v2's
// cpuset.cpus.effective, of the nearest cgroup up the path that has one;
// or v1's cpuset.effective_cpus), or 0 where there is none to read.
func cgroupCPUs() int {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var files []string
		switch {
		case f[0] == "0" && f[1] == "":
			for p := f[2]; ; p = parentCgroup(p) {
				files = append(files, "/sys/fs/cgroup"+strings.TrimSuffix(p, "/")+"/cpuset.cpus.effective")
				if p == "/" || p == "" {
					break
				}
			}
		case slices.Contains(strings.Split(f[1], ","), "cpuset"):
			files = []string{"/sys/fs/cgroup/cpuset" + strings.TrimSuffix(f[2], "/") + "/cpuset.effective_cpus"}
		}
		for _, file := range files {
			if c, err := os.ReadFile(file); err == nil {
				if cpus, err := topo.ParseCPUList(strings.TrimSpace(string(c))); err == nil && len(cpus) > 0 {
					return len(cpus)
				}
			}
		}
	}
	return 0
}

// parentCgroup returns the cgroup path above p ("/a/b" → "/a" → "/").
func parentCgroup(p string) string {
	if i := strings.LastIndexByte(strings.TrimSuffix(p, "/"), '/'); i > 0 {
		return p[:i]
	}
	return "/"
}
