//go:build unix

package gpu

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/braid-ccl/braid/internal/shmfile"
)

// shmDir is where mailbox files live: a memory file system.
const shmDir = "/dev/shm"

// createShared creates a shared-memory file of size bytes, taken now (a
// full memory file system fails here, not later with a fault), maps it,
// and returns its path and mapping (internal/shmfile, as the shm
// transport makes its segments).
func createShared(size int) (string, []byte, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", nil, err
	}
	path := fmt.Sprintf("%s/braid-gpu-%d-%s", shmDir, os.Getpid(), hex.EncodeToString(r[:]))
	mem, err := shmfile.Create(path, size)
	if err != nil {
		return "", nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	return path, mem, nil
}

// openShared maps the file at path, of size bytes, or of alt bytes where
// it has that size.
func openShared(path string, size, alt int) ([]byte, error) {
	mem, err := shmfile.Open(path, func(n int64) error {
		if n != int64(size) && n != int64(alt) {
			return fmt.Errorf("%s has %d bytes, want %d", path, n, size)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: mailbox: %w", err)
	}
	return mem, nil
}

func unmapShared(mem []byte) error { return shmfile.Unmap(mem) }
