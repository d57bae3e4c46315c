//go:build !linux

package braid

import "runtime"

// bindRank binds nothing outside Linux.
func bindRank(mode string, local, localSize int) (string, error) { return "", nil }

// hostCPUs is this process's CPU count outside Linux.
func hostCPUs(localRanks int) int { return runtime.NumCPU() }
