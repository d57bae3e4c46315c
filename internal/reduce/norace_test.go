//go:build !race

package reduce

const raceLengthsDropped = 0
