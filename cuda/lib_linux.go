//go:build linux

package cuda

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/ebitengine/purego"
)

// openLib opens the first of names that the dynamic loader finds.
func openLib(names []string) (uintptr, error) {
	var first error
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, nil
		}
		if first == nil {
			first = err
		}
	}
	if len(names) > 1 {
		return 0, fmt.Errorf("%w (also tried %s)", first, strings.Join(names[1:], ", "))
	}
	return 0, first
}

// symbol returns the address of name in the library h, or 0.
func symbol(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}

// ccall calls the C function at fn with integer and pointer arguments and
// returns its integer result. A pointer converted to uintptr in the argument
// list stays valid and in place for the call (go:uintptrescapes).
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// registerFunc makes the Go function pointed to by fptr call the C function
// at addr, converting arguments (structs passed by value included) by the
// platform's C ABI.
func registerFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }

// gettid returns the id of the calling OS thread.
func gettid() int { return syscall.Gettid() }
