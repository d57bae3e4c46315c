//go:build !race

package par

import "unsafe"

// streamCopy copies n bytes, a multiple of 64, from src to dst, which is
// aligned to 64 bytes, with non-temporal stores (stream_amd64.s).
//
//go:noescape
func streamCopy(dst, src unsafe.Pointer, n uintptr)

// copyStream copies src to dst as copy does, writing dst's whole lines
// past the caches.
func copyStream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < 128 {
		return copy(dst, src)
	}
	head := int(-uintptr(unsafe.Pointer(&dst[0])) & 63)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	streamCopy(unsafe.Pointer(&dst[head]), unsafe.Pointer(&src[head]), uintptr(body))
	copy(dst[head+body:n], src[head+body:n])
	return n
}
