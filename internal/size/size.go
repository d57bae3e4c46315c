// Package size reads and writes byte counts with binary suffixes (8, 4K,
// 64M, 1G), the form Braid's tables, flags and outputs use. Package plan
// exports it as plan.ParseSize and plan.FormatSize; packages below plan
// (cuda) use it directly.
package size

import (
	"fmt"
	"math"
	"strconv"
)

// Format writes bytes with a binary suffix: 8, 4K, 64M.
func Format(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

// Parse reads a size such as 8, 4K, 64M, 1G (binary suffixes; a trailing
// B or iB is accepted).
func Parse(s string) (int64, error) {
	orig := s
	mult := int64(1)
	for _, suf := range []string{"iB", "B", "b"} {
		if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
			s = s[:len(s)-len(suf)]
			break
		}
	}
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M or G suffix", orig)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", orig)
	}
	return v * mult, nil
}
