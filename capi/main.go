// Command capi is Braid's C API: built with
//
//	go build -buildmode=c-shared -o libbraid.so ./capi
//
// it is libbraid.so (and libbraid.h, which cgo writes beside it and C
// programs do not need), whose functions braid.h declares: communicators
// from the launcher's environment or from a unique id, the collectives on
// host buffers, blocking and non-blocking, and on GPU memory (device.go),
// blocking or ordered on a CUDA stream, and errors that carry the
// text, kind, rank, call and peer of Go's *braid.Error. A C program:
//
//	cc -o prog prog.c -I capi -L. -lbraid -Wl,-rpath,'$ORIGIN'
//	braid run -n 4 -- ./prog
//
// The package keeps no Go pointer in C: communicators and requests are
// numbers in tables here, and the buffers are C memory that Go reads
// through unsafe.Slice while a call runs. Without cgo (CGO_ENABLED=0, or no
// C compiler) the package builds as an empty program and its test skips.
package main

func main() {}
