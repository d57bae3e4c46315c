package braid

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	if got := parseCPUList("0-3,8,10-11"); !slices.Equal(got, []int{0, 1, 2, 3, 8, 10, 11}) {
		t.Errorf("got %v", got)
	}
	if got := parseCPUList("x,2"); !slices.Equal(got, []int{2}) {
		t.Errorf("got %v", got)
	}
	if n := numaNode(); n < 0 {
		t.Errorf("numaNode = %d", n)
	}
}
