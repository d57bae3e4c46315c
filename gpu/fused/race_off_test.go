//go:build !race

package fused

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
