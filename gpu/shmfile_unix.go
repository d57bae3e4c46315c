//go:build unix

package gpu

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"syscall"
)

// shmDir is where mailbox files live: a memory file system.
const shmDir = "/dev/shm"

// createShared creates a zeroed shared-memory file of size bytes, maps it,
// and returns its path and mapping.
func createShared(size int) (string, []byte, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", nil, err
	}
	path := fmt.Sprintf("%s/braid-gpu-%d-%s", shmDir, os.Getpid(), hex.EncodeToString(r[:]))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	// Take the memory now: a full memory file system then fails here
	// with an error, not later with a fault.
	if err := reserve(f, size); err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("gpu: mailbox of %d bytes in %s: %w", size, shmDir, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return "", nil, fmt.Errorf("gpu: mailbox: mmap: %w", err)
	}
	return path, mem, nil
}

// openShared maps the file at path, of size bytes, or of alt bytes where
// it has that size.
func openShared(path string, size, alt int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	if st.Size() == int64(alt) {
		size = alt
	}
	if st.Size() != int64(size) {
		return nil, fmt.Errorf("gpu: mailbox %s has %d bytes, want %d", path, st.Size(), size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gpu: mailbox: mmap: %w", err)
	}
	return mem, nil
}

func unmapShared(mem []byte) error { return syscall.Munmap(mem) }
