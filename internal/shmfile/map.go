package shmfile

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Create makes the file at path, which must not exist, with its size
// bytes allocated now, and maps it shared: a file system without room
// fails here with ENOSPC, not with a bus error at a later write to a
// page it cannot supply (where the file system or the system cannot
// allocate ahead, the file is sized sparse). A file that Create fails to
// finish is removed. The shm transport's segments, the host collectives'
// areas and package gpu's mailbox are made here.
func Create(path string, size int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) ([]byte, error) {
		unix.Unlink(path)
		return nil, fmt.Errorf("%s %s (%d bytes): %w", what, path, size, err)
	}
	if err := allocate(fd, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return fail("allocate", err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return fail("size", err)
		}
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	return mem, nil
}

// Open maps the whole file at path shared. check, if not nil, sees the
// file's size first and may refuse it.
func Open(path string, check func(size int64) error) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if check != nil {
		if err := check(st.Size); err != nil {
			return nil, err
		}
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// Unmap unmaps memory from Create or Open.
func Unmap(mem []byte) error { return unix.Munmap(mem) }
