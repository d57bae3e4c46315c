// Package cma copies memory out of another process of the host with
// process_vm_readv(2) (cross-memory attach), the single copy of the shm
// transport's large messages and of the shared area's broadcasts and
// allgathers between two processes.
package cma

import "golang.org/x/sys/unix"

// Read copies len(dst) bytes at addr in process pid into dst, in as many
// calls as the kernel takes to move them.
func Read(pid int, dst []byte, addr uint64) error {
	for len(dst) > 0 {
		local := [1]unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
		n, err := unix.ProcessVMReadv(pid, local[:], remote[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		dst = dst[n:]
		addr += uint64(n)
	}
	return nil
}
