package braid

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/braid-ccl/braid/topo"
)

// numaNode returns the NUMA node this process is bound to: the node whose
// CPUs hold every CPU of the process's affinity mask. A process free to
// run on several nodes (not bound), or a machine without NUMA information,
// gives 0: the planner then treats the host as one node.
func numaNode() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	nodes, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	if len(nodes) < 2 {
		return 0
	}
	for _, dir := range nodes {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "cpulist"))
		if err != nil {
			continue
		}
		cpus, err := topo.ParseCPUList(string(b))
		if err != nil {
			continue
		}
		inside := 0
		for _, c := range cpus {
			if set.IsSet(c) {
				inside++
			}
		}
		if inside > 0 && inside == set.Count() {
			return id
		}
	}
	return 0
}
