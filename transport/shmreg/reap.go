package shmreg

import (
	"fmt"
	"regexp"

	"github.com/braid-ccl/braid/internal/shmfile"
)

// poolName is the name of a pool file: the maker's pid and PID namespace,
// by which ReapStale judges the file without opening it.
func poolName(pid int, ns uint64, rnd [6]byte) string {
	return fmt.Sprintf("braid-reg-p%d-n%d-%x", pid, ns, rnd)
}

var poolRe = regexp.MustCompile(`^braid-reg-p([0-9]+)-n([0-9]+)-[0-9a-f]+$`)

// pidNS returns the inode of this process's PID namespace, or 0.
func pidNS() uint64 { return shmfile.PIDNamespace() }

// ReapStale removes the pool files in dir that dead processes of this PID
// namespace made and left (a process killed before every reader opened its
// pool, and before its Close), as the shm transport's segments and the
// shared areas' files are reaped (internal/shmfile).
func ReapStale(dir string) { shmfile.ReapStale(dir, poolRe) }
