//go:build race

package fused

// raceEnabled reports whether the tests run under the race detector, which
// makes the kernel models about ten times slower: their sweeps then run a
// sample.
const raceEnabled = true
