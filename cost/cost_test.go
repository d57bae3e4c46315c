package cost

import (
	"testing"

	"github.com/braid-ccl/braid/sched"
)

func TestDefaultValid(t *testing.T) {
	if err := Default().Valid(); err != nil {
		t.Fatal(err)
	}
	bad := Default()
	bad.Links[Cross].Beta = 0
	if bad.Valid() == nil {
		t.Fatal("zero bandwidth accepted")
	}
}

func TestClassOf(t *testing.T) {
	l := sched.NewLayout([]string{"a", "a", "b", "b"}, []int{0, 1, 0, 0})
	cases := []struct {
		a, b int
		want Class
	}{{0, 0, Intra}, {0, 1, Cross}, {0, 2, Inter}, {2, 3, Intra}, {1, 3, Inter}}
	for _, c := range cases {
		if got := ClassOf(l, c.a, c.b); got != c.want {
			t.Errorf("ClassOf(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	m := Default()
	if got := m.Worst(l, 4); got != m.Links[Inter] {
		t.Errorf("Worst = %v, want the inter link", got)
	}
	if got := m.Worst(l, 2); got != m.Links[Cross] {
		t.Errorf("Worst of 2 = %v, want the cross link", got)
	}
	if got := m.Worst(nil, 8); got != m.Links[Intra] {
		t.Errorf("Worst(nil) = %v, want the intra link", got)
	}
	if got := (Link{Alpha: 1e-6, Beta: 1e9}).Time(1e3); got != 2e-6 {
		t.Errorf("Time = %g, want 2e-6", got)
	}
	for _, c := range Classes() {
		if d, err := ParseClass(c.String()); err != nil || d != c {
			t.Errorf("ParseClass(%q) = %v, %v", c, d, err)
		}
	}
}
