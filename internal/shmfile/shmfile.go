package shmfile

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// PIDNamespace returns the inode of this process's PID namespace, or 0
// where /proc does not say.
func PIDNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// Gone reports whether no live process has pid: none has it, or it is a
// zombie, dead and waiting for its parent (or, if its parent died too,
// whoever adopts it) to reap it, which may take a while.
func Gone(pid int) bool {
	if unix.Kill(pid, 0) == unix.ESRCH {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses and may hold
	// any byte.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// ReapStale removes the files in dir that dead processes of this PID
// namespace left: the regular files owned by this user whose names re
// matches, with the maker's pid as re's first submatch and its PID
// namespace's inode as the second, where that namespace is this process's
// and no live process has that pid (a zombie counts as dead). A file made
// in another namespace is left alone, since a process there cannot be
// seen from here; so is a file whose pid was reused, which the next reaper
// judges again. It does nothing where the PID namespace is unknown.
func ReapStale(dir string, re *regexp.Regexp) {
	ns := PIDNamespace()
	if ns == 0 {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	uid := uint32(os.Geteuid())
	for _, e := range ents {
		m := re.FindStringSubmatch(e.Name())
		if len(m) < 3 || m[2] != strconv.FormatUint(ns, 10) || !e.Type().IsRegular() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || !Gone(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Uid == uid {
			unix.Unlink(path)
		}
	}
}
