//go:build !race

package shmcoll

// storeRelease stores v at *p with release order only (release_amd64.s).
//
//go:noescape
func storeRelease(p *uint64, v uint64)

// storePlain stores v at *p with a plain store, which a later storeRelease
// publishes (amd64 keeps stores in order, and the compiler keeps them
// before the call).
func storePlain(p *uint64, v uint64) { *p = v }
