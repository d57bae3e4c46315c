//go:build unix && !linux

package gpu

import "os"

// reserve does nothing where fallocate is missing: the file stays sparse.
func reserve(*os.File, int) error { return nil }
