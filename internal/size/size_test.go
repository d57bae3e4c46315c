package size

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"8", 8}, {"4K", 4096}, {"4k", 4096}, {"4KB", 4096}, {"4KiB", 4096},
		{"64M", 64 << 20}, {"1G", 1 << 30}, {"1GiB", 1 << 30}, {"8589934591G", 8589934591 << 30},
	} {
		if got, err := Parse(tc.in); err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "K", "-1", "-1K", "1.5K", "1T", "8589934592G", "9223372036854775808", " 1", "1 K", "0x10", "B", "iB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d; want an error", in, got)
		} else if !strings.Contains(err.Error(), "size") {
			t.Errorf("Parse(%q): %v does not say what it read", in, err)
		}
	}
}

// FuzzParse checks that Parse never panics, accepts only sizes ≥ 0, and
// that what Format writes parses back to the same size.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "8", "4K", "64M", "1G", "1GiB", "4kb", "-1", "1T", "9223372036854775807", "8589934592G", "", "K", "+5", "0x10", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("Parse(%q) = %d", s, v)
		}
		back, err := Parse(Format(v))
		if err != nil || back != v {
			t.Fatalf("Parse(%q) = %d; Format gives %q, which parses to %d, %v", s, v, Format(v), back, err)
		}
	})
}
