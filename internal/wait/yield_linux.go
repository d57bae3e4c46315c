package wait

import "golang.org/x/sys/unix"

// yieldThread gives the OS thread's processor to another thread or
// process (sched_yield), keeping the Go processor.
func yieldThread() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
