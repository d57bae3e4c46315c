package shmfile

import "golang.org/x/sys/unix"

// allocate allocates the size bytes of the file fd.
func allocate(fd, size int) error { return unix.Fallocate(fd, 0, 0, int64(size)) }
