// Package textfile reads Braid's line-oriented text files (the tuning
// table, the multi-path table): one record a line, its fields separated by
// blanks, and # starting a comment that runs to the end of the line.
package textfile

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Records calls fn with the fields of every line of r that has any, and
// the line's number from 1. An error from fn is returned as
// "WHAT NAME:LINE: ERR", one from reading as "WHAT NAME: ERR"; either stops
// the reading. Lines may be up to 1 MiB long.
func Records(r io.Reader, what, name string, fn func(line int, fields []string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if err := fn(line, f); err != nil {
			return fmt.Errorf("%s %s:%d: %w", what, name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	return nil
}
