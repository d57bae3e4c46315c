//go:build race

package pack_test

const raceEnabled = true
