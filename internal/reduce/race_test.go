//go:build race

package reduce

const raceLengthsDropped = 1
