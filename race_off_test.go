//go:build !race

package braid_test

const raceEnabled = false
