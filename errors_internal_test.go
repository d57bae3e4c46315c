package braid

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestNoSpaceKind: Init failing because /dev/shm is full (the shm
// transport's segment cannot be allocated: ENOSPC) is reported as
// Unsupported, the machine's doing, not as an internal error, and the
// message keeps the file and its size and adds ENOSPC and what to do.
func TestNoSpaceKind(t *testing.T) {
	const seg = "/dev/shm/braid-0123456789abcdef-0-p42-n4026531836-01020304"
	cause := fmt.Errorf("connecting shm to ranks [1 2]: shm: rank 0: allocate segment %s (4202496 bytes) in /dev/shm: %w", seg, syscall.ENOSPC)
	e := classify(0, "init", noSpace(cause))
	if e.Kind != Unsupported {
		t.Errorf("kind %v, want %v: %v", e.Kind, Unsupported, e)
	}
	for _, want := range []string{seg, "4202496 bytes", "ENOSPC", "BRAID_TRANSPORT=tcp", "/dev/shm"} {
		if !strings.Contains(e.Error(), want) {
			t.Errorf("%q: want it to say %q", e, want)
		}
	}
	// Other failures keep their kind and message.
	other := fmt.Errorf("connecting shm to ranks [1]: %w", syscall.EACCES)
	if got := noSpace(other); got != other {
		t.Errorf("noSpace(%v) = %v, want it unchanged", other, got)
	}
	if e := classify(0, "init", other); e.Kind != Internal {
		t.Errorf("EACCES: kind %v, want %v", e.Kind, Internal)
	}
}
