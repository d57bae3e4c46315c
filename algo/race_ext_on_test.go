//go:build race

package algo_test

// raceEnabled reports whether the tests run under the race detector, which
// makes the schedule simulations about ten times slower: the largest
// sweeps then run a sample.
const raceEnabled = true
