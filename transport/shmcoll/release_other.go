//go:build !amd64 || race

package shmcoll

import "sync/atomic"

// storeRelease stores v at *p: a sequentially consistent store where a
// plain one is not a release (other than amd64), or where the race
// detector must see the store synchronise (it does not see assembly's).
func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// storePlain stores v at *p, atomically: here a later storeRelease's
// order does not cover it (or the race detector must see it).
func storePlain(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
