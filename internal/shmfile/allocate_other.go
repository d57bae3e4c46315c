//go:build !linux

package shmfile

import "golang.org/x/sys/unix"

// allocate cannot allocate ahead here: Create sizes the file sparse.
func allocate(fd, size int) error { return unix.EOPNOTSUPP }
