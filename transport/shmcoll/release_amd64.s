//go:build !race

#include "textflag.h"

// func storeRelease(p *uint64, v uint64)
//
// A plain store: on amd64 (TSO) it is ordered after every earlier load and
// store of this thread, which is all a release needs. Unlike
// atomic.StoreUint64 (XCHG) it does not wait for the line's ownership, so
// the thread goes on to poll its peers' lines while the store is under way.
// As an assembly function it is also a barrier to the compiler.
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET
