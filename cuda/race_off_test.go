//go:build !race

package cuda

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
