package braid

import "testing"

func TestNumaNode(t *testing.T) {
	if n := numaNode(); n < 0 {
		t.Errorf("numaNode = %d", n)
	}
}
