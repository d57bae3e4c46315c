package plan

import "github.com/braid-ccl/braid/internal/size"

// FormatSize writes bytes with a binary suffix: 8, 4K, 64M.
func FormatSize(b int64) string { return size.Format(b) }

// ParseSize reads a size such as 8, 4K, 64M, 1G (binary suffixes; a
// trailing B or iB is accepted).
func ParseSize(s string) (int64, error) { return size.Parse(s) }
