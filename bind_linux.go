package braid

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bindRank pins this process's threads to its share of the cores it may
// run on, as Options.Bind says, and returns what it did for the log ("" if
// nothing). local and localSize are the rank's place among the ranks of
// its host.
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
		if online := onlineCPUs(); online > 0 && len(cpus) < online {
			return fmt.Sprintf("left as it is: the process may run on %d of the %d online CPUs, a binding made by its launcher or cgroup", len(cpus), online), nil
		}
		if localSize > len(cpus) {
			return fmt.Sprintf("left as it is: %d ranks share %d CPUs", localSize, len(cpus)), nil
		}
	}
	if localSize > len(cpus) {
		return "", fmt.Errorf("%d ranks on this host, %d CPUs to bind them to", localSize, len(cpus))
	}
	share := 1
	if mode == BindShare {
		share = len(cpus) / localSize
	}
	mine := cpus[local*share : (local+1)*share]
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
	return fmt.Sprintf("bound to CPU %s (local rank %d of %d, %d CPU(s) each; BRAID_BIND=none leaves ranks unbound)",
		cpuRange(mine), local, localSize, share), nil
}

// setThreadsAffinity applies set to every thread of the process: Linux
// binds threads, not processes, and threads made later inherit the mask
// of the thread that makes them.
func setThreadsAffinity(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return unix.SchedSetaffinity(0, set)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("binding thread %d: %w", tid, err)
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
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, ok := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if ok {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a {
			return 0
		}
		n += b - a + 1
	}
	return n
}

// cpuRange writes cpus as Linux's lists do: "3", "0-7" or "0,2,4".
func cpuRange(cpus []int) string {
	if n := len(cpus); n > 1 && cpus[n-1]-cpus[0] == n-1 {
		return fmt.Sprintf("%d-%d", cpus[0], cpus[n-1])
	}
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
