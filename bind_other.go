//go:build !linux

package braid

// bindRank binds nothing outside Linux.
func bindRank(mode string, local, localSize int) (string, error) { return "", nil }
