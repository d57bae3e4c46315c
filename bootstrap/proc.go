package bootstrap

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// hydraJobID names a job started by MPICH's hydra, which sets no job id in
// the environment. It walks up from this process to the nearest
// hydra_pmi_proxy and takes mpiexec's control port and the process group
// id from its command line ("--control-port HOST:PORT ... --pgid N"): the
// same on every host of one mpiexec and different between mpiexecs that
// run at the same time. Without one (no /proc, or another PMI launcher) it
// falls back to the parent's process id, which ranks share when the
// launcher starts them directly.
func hydraJobID() string {
	pid := os.Getppid()
	for i := 0; i < 16 && pid > 1; i++ {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "hydra_pmi_proxy" {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				break
			}
			args := strings.Split(string(cmdline), "\x00")
			port, pgid := argAfter(args, "--control-port"), argAfter(args, "--pgid")
			if port == "" {
				break
			}
			return "hydra-" + port + "-" + pgid
		}
		ppid, _, ok := procStat(pid)
		if !ok {
			break
		}
		pid = ppid
	}
	return fmt.Sprintf("pmi-ppid-%d", os.Getppid())
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// procStat returns a process's parent and its start time (in clock ticks
// since boot, field 22 of /proc/PID/stat), which together with the pid
// identify a process across pid reuse. ok is false without /proc or when
// the process does not exist.
func procStat(pid int) (ppid int, start uint64, ok bool) {
	ppid, start, _, ok = procState(pid)
	return ppid, start, ok
}

// procState is procStat with the process's state (field 3: "R", "S", "Z"
// for a zombie, ...).
func procState(pid int) (ppid int, start uint64, state string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, "", false
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 20 {
		return 0, 0, "", false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return ppid, start, f[0], true
}

// procAlive reports whether the process pid that started at start still
// runs; a zombie (dead, not yet reaped by its parent) does not. Without
// /proc it cannot tell and says yes.
func procAlive(pid int, start uint64) bool {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return true
	}
	_, s, state, ok := procState(pid)
	return ok && s == start && state != "Z" && state != "X"
}

// checkPrivate reports an error unless path is owned by this user, grants
// nothing to others, and is not a symbolic link.
func checkPrivate(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("bootstrap: %s is a symbolic link; remove it", path)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("bootstrap: %s belongs to user %d, not %d; remove it", path, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("bootstrap: %s has mode %v, open to other users; remove it or chmod go-rwx", path, fi.Mode().Perm())
	}
	return nil
}
