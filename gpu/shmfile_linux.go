package gpu

import (
	"os"

	"golang.org/x/sys/unix"
)

// reserve allocates the size bytes of the shared file f.
func reserve(f *os.File, size int) error { return unix.Fallocate(int(f.Fd()), 0, 0, int64(size)) }
