//go:build !race

package shmcoll

// storeRelease stores v at *p with release order only (release_amd64.s).
//
//go:noescape
func storeRelease(p *uint64, v uint64)
