package shm

import "github.com/braid-ccl/braid/internal/shmring"

// The rings of a segment are internal/shmring's: frames published by a
// mark, padded at the end of the ring, released in quarters.
type (
	frameHdr = shmring.Header
	ring     = shmring.Ring
	tx       = shmring.Tx
	rx       = shmring.Rx
)

const (
	kindData = shmring.KindData
	kindRndv = shmring.KindRndv
	hdrSize  = shmring.HeaderSize
)
