//go:build !linux

package cuda

import (
	"errors"
	"runtime"
)

// openLib reports that CUDA is not available on this operating system.
func openLib(names []string) (uintptr, error) {
	return 0, errors.New("CUDA is supported only on linux, not " + runtime.GOOS)
}

// symbol is never reached: openLib fails first.
func symbol(h uintptr, name string) uintptr { return 0 }

// ccall is never reached: no library was opened, so there is no function to call.
func ccall(fn uintptr, args ...uintptr) uintptr {
	panic("cuda: C call without a loaded library on " + runtime.GOOS)
}

// registerFunc is never reached: openLib fails first.
func registerFunc(fptr any, addr uintptr) {
	panic("cuda: C call without a loaded library on " + runtime.GOOS)
}

// gettid has no thread ids to offer here; workers never start.
func gettid() int { return 0 }
