package shmreg

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// poolName is the name of a pool file: the maker's pid and PID namespace,
// by which reapStale judges the file without opening it.
func poolName(pid int, ns uint64, rnd [6]byte) string {
	return fmt.Sprintf("braid-reg-p%d-n%d-%x", pid, ns, rnd)
}

var poolRe = regexp.MustCompile(`^braid-reg-p([0-9]+)-n([0-9]+)-[0-9a-f]+$`)

// pidNS returns the inode of this process's PID namespace, or 0.
func pidNS() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// reapStale removes the pool files in dir that dead processes of this PID
// namespace made and left (a process killed before every reader opened its
// pool, and before its Close). It judges only files this user owns whose
// name names its PID namespace, so that a process it cannot see is never
// taken for dead; a pid that was reused keeps its file, which the next
// reaper judges again. The shm transport's segments are reaped the same
// way.
func reapStale(dir string) {
	ns := pidNS()
	if ns == 0 {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	uid := uint32(os.Geteuid())
	for _, e := range ents {
		m := poolRe.FindStringSubmatch(e.Name())
		if m == nil || m[2] != strconv.FormatUint(ns, 10) || !e.Type().IsRegular() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Uid == uid {
			unix.Unlink(path)
		}
	}
}
