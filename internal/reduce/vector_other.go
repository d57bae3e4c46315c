//go:build !amd64 || race || purego

package reduce

import "github.com/braid-ccl/braid/internal/dtype"

// useAsm is false where there are no vector kernels: other architectures,
// race-detector builds (the detector does not see accesses from assembly),
// and builds with the purego tag.
const useAsm = false

// vectorKernel returns no kernel here.
func vectorKernel(dtype.DType, dtype.Op) (func(dst, a, b *byte, n int), int) { return nil, 0 }

// vectorDivide leaves all of buf to the portable code.
func vectorDivide(_ dtype.DType, buf []byte, _ int) []byte { return buf }
