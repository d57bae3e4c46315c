//go:build !linux

package wait

import "runtime"

// yieldThread yields the goroutine: sched_yield has no system call number
// in golang.org/x/sys/unix outside Linux.
func yieldThread() { runtime.Gosched() }
