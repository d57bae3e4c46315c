package textfile

import (
	"errors"
	"strings"
	"testing"
)

func TestRecords(t *testing.T) {
	in := "# a comment\n\nfirst a=1   b=2 # trailing\n   \nsecond\n"
	var got []string
	err := Records(strings.NewReader(in), "table", "t.txt", func(line int, f []string) error {
		got = append(got, strings.Join(f, ",")+"@"+string(rune('0'+line)))
		return nil
	})
	if err != nil || strings.Join(got, " ") != "first,a=1,b=2@3 second@5" {
		t.Fatalf("records %q, error %v", got, err)
	}
	stop := errors.New("bad field")
	err = Records(strings.NewReader("a\nb\nc\n"), "table", "t.txt", func(line int, f []string) error {
		if f[0] == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || err.Error() != "table t.txt:2: bad field" {
		t.Fatalf("error %v, want \"table t.txt:2: bad field\" wrapping the callback's", err)
	}
	long := strings.Repeat("x", 2<<20)
	if err := Records(strings.NewReader(long), "table", "t.txt", func(int, []string) error { return nil }); err == nil ||
		!strings.HasPrefix(err.Error(), "table t.txt: ") {
		t.Fatalf("a 2 MiB line: %v, want a reading error", err)
	}
}
