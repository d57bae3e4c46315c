package multipath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMultiPathTableRoundTrip(t *testing.T) {
	src := `# measured on two H200s
size=0-4M direct
size=4M-64M host=10% chunks=8   # trailing comment

size=256M- chunks=16 host=0.11
size=64M-256M host=0.1 chunks=8
`
	tab, err := ParseTable(strings.NewReader(src), "x")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Min: 0, Max: 4 << 20, Chunks: 1, Line: 2},
		{Min: 4 << 20, Max: 64 << 20, HostShare: 0.1, Chunks: 8, Line: 3},
		{Min: 256 << 20, HostShare: 0.11, Chunks: 16, Line: 5},
		{Min: 64 << 20, Max: 256 << 20, HostShare: 0.1, Chunks: 8, Line: 6},
	}
	if len(tab.Entries) != len(want) {
		t.Fatalf("entries %+v", tab.Entries)
	}
	for i := range want {
		if tab.Entries[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, tab.Entries[i], want[i])
		}
	}
	var b strings.Builder
	if _, err := tab.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	wantText := "size=0-4M direct\nsize=4M-64M host=0.1 chunks=8\nsize=256M- host=0.11 chunks=16\nsize=64M-256M host=0.1 chunks=8\n"
	if b.String() != wantText {
		t.Errorf("WriteTo wrote\n%s\nwant\n%s", b.String(), wantText)
	}
	again, err := ParseTable(strings.NewReader(b.String()), "y")
	if err != nil {
		t.Fatalf("reading what WriteTo wrote: %v", err)
	}
	for i := range tab.Entries {
		a, b := tab.Entries[i], again.Entries[i]
		a.Line, b.Line = 0, 0
		if a != b {
			t.Errorf("entry %d: %+v became %+v", i, a, b)
		}
	}
	for _, tc := range []struct {
		size   int
		share  float64
		chunks int
	}{
		{0, 0, 1},
		{4<<20 - 1, 0, 1},
		{4 << 20, 0.1, 8},
		{100 << 20, 0.1, 8},
		{256<<20 - 1, 0.1, 8},
		{256 << 20, 0.11, 16},
		{1 << 40, 0.11, 16},
	} {
		if share, chunks := tab.Lookup(tc.size); share != tc.share || chunks != tc.chunks {
			t.Errorf("Lookup(%d) = %v, %d; want %v, %d", tc.size, share, chunks, tc.share, tc.chunks)
		}
	}
	// Limits: up to 1 GiB the largest staged part is 11% of 1 GiB; up to
	// 100 MiB it is 10% of 100 MiB; below 4 MiB nothing is staged.
	share := 0.11
	if hb, c := tab.Limits(1 << 30); hb != int(float64(1<<30)*share) || c != 16 {
		t.Errorf("Limits(1G) = %d, %d", hb, c)
	}
	share = 0.1
	if hb, c := tab.Limits(100 << 20); hb != int(float64(100<<20)*share) || c != 8 {
		t.Errorf("Limits(100M) = %d, %d", hb, c)
	}
	if hb, c := tab.Limits(4<<20 - 1); hb != 0 || c != 1 {
		t.Errorf("Limits(4M-1) = %d, %d", hb, c)
	}
}

func TestMultiPathTableGaps(t *testing.T) {
	// Sizes no range holds, and a nil table, take the peer copy alone.
	tab, err := ParseTable(strings.NewReader("size=1M-2M host=0.5 chunks=2\n"), "gaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 1<<20 - 1, 2 << 20, 1 << 30} {
		if share, chunks := tab.Lookup(size); share != 0 || chunks != 1 {
			t.Errorf("Lookup(%d) = %v, %d outside every range", size, share, chunks)
		}
	}
	if share, chunks := tab.Lookup(1 << 20); share != 0.5 || chunks != 2 {
		t.Errorf("Lookup(1M) = %v, %d", share, chunks)
	}
	var nilTab *Table
	if share, chunks := nilTab.Lookup(1 << 20); share != 0 || chunks != 1 {
		t.Errorf("nil table: %v, %d", share, chunks)
	}
	if hb, c := nilTab.Limits(1 << 30); hb != 0 || c != 1 {
		t.Errorf("nil table limits: %d, %d", hb, c)
	}
}

func TestDefaultMultiPathTable(t *testing.T) {
	d := DefaultTable()
	for _, size := range []int{0, 1, 4 << 20, 1 << 30, 1 << 40} {
		if share, chunks := d.Lookup(size); share != 0 || chunks != 1 {
			t.Errorf("default table at %d bytes: host share %v in %d chunks, want the peer copy alone", size, share, chunks)
		}
	}
	var b strings.Builder
	d.WriteTo(&b)
	if b.String() != "size=0- direct\n" {
		t.Errorf("default table writes %q", b.String())
	}
}

func TestMultiPathTableErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"size=0-4M", "t:1: want \"size=A-B direct\""},
		{"\n\nsize=0-4M host=0.1", "t:3: want"},
		{"sizes=0-4M direct", "want"},
		{"size=4M direct", "a range"},
		{"size=4M-1M direct", "empty range"},
		{"size=4M-4M direct", "empty range"},
		{"size=x-4M direct", "size \"x\""},
		{"size=0-99999999999G direct", "too large"},
		{"size=0- host=0 chunks=4", "for none, write direct"},
		{"size=0- host=1.5 chunks=4", "host=\"1.5\""},
		{"size=0- host=150% chunks=4", "host=\"150%\""},
		{"size=0- host=NaN chunks=4", "host=\"NaN\""},
		{"size=0- host=0.1 chunks=0", "chunks=\"0\""},
		{"size=0- host=0.1 chunks=2000", "chunks=\"2000\""},
		{"size=0- host=0.1 host=0.2", "got \"host=0.2\""},
		{"size=0- host=0.1 streams=4", "got \"streams=4\""},
		{"size=0- fast", "got 2 fields"},
		{"size=0-8M direct\nsize=4M-16M host=0.1 chunks=4", "t:2: size=4M-16M overlaps line 1 (size=0-8M)"},
		{"size=4M- direct\nsize=0-8M direct", "t:2: size=0-8M overlaps line 1"},
		{"size=1M-2M direct\nsize=0- direct", "overlaps line 1"},
	} {
		_, err := ParseTable(strings.NewReader(tc.src), "t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.src, err, tc.want)
		}
	}
	// Ranges that touch do not overlap.
	if _, err := ParseTable(strings.NewReader("size=4M- direct\nsize=0-4M direct"), "t"); err != nil {
		t.Error(err)
	}
}

func TestLoadMultiPathTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "multipath.txt")
	if err := os.WriteFile(path, []byte("size=64M- host=0.1 chunks=16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := LoadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Source != path || len(tab.Entries) != 1 {
		t.Errorf("loaded %+v", tab)
	}
	if _, err := LoadTable(filepath.Join(t.TempDir(), "none.txt")); err == nil || !strings.Contains(err.Error(), "multi-path table") {
		t.Errorf("missing file: %v", err)
	}
}

// result is a measured configuration for the choice tests.
func result(size int, share float64, chunks int, gbps float64) Result {
	return Result{Size: size, HostShare: share, Chunks: chunks, Copies: 1,
		Time: time.Duration(float64(size) / gbps), GBps: gbps}
}

func TestChooseMultiPath(t *testing.T) {
	const M = 1 << 20
	res := []Result{
		// 4M: staging loses.
		result(4*M, 0, 1, 100), result(4*M, 1, 8, 20), result(4*M, 0.04, 4, 90), result(4*M, 0.1, 8, 80),
		// 16M: a 2% gain, below the 3% asked for.
		result(16*M, 0, 1, 300), result(16*M, 1, 8, 40), result(16*M, 0.04, 4, 306),
		// 64M and 256M: the same split wins, 10%.
		result(64*M, 0, 1, 380), result(64*M, 1, 16, 50), result(64*M, 1, 8, 48), result(64*M, 0.1, 8, 418), result(64*M, 0.12, 8, 400),
		result(256*M, 0, 1, 390), result(256*M, 1, 8, 50), result(256*M, 0.1, 8, 430), result(256*M, 0.06, 16, 420),
		// 1G: two splits tie; the smaller host share wins.
		result(1024*M, 0, 1, 395), result(1024*M, 0.12, 16, 440), result(1024*M, 0.1, 16, 440), result(1024*M, 1, 8, 50),
	}
	sums, err := Summarize(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 5 || sums[0].Size != 4*M || sums[4].Size != 1024*M {
		t.Fatalf("summaries %+v", sums)
	}
	s := sums[2]
	if s.Direct.GBps != 380 || len(s.Staged) != 2 || s.Staged[0].Chunks != 8 || s.Staged[1].Chunks != 16 ||
		s.Best.HostShare != 0.1 || s.Best.Chunks != 8 || s.Gain < 0.099 || s.Gain > 0.101 {
		t.Errorf("64M summary %+v", s)
	}
	if b := sums[4].Best; b.HostShare != 0.1 || b.Chunks != 16 {
		t.Errorf("1G best %+v, want the smaller share of a tie", b)
	}
	tab := Choose(sums, 0.03)
	var b strings.Builder
	tab.WriteTo(&b)
	want := "size=0-64M direct\nsize=64M-1G host=0.1 chunks=8\nsize=1G- host=0.1 chunks=16\n"
	if b.String() != want {
		t.Errorf("chose\n%s\nwant\n%s", b.String(), want)
	}
	// The chosen table is a valid table.
	if _, err := ParseTable(strings.NewReader(b.String()), "chosen"); err != nil {
		t.Error(err)
	}
	// With a 1% threshold, 16M stages too.
	b.Reset()
	Choose(sums, 0.01).WriteTo(&b)
	if want := "size=0-16M direct\nsize=16M-64M host=0.04 chunks=4\n"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("threshold 1%%: chose\n%s\nwant it to start with\n%s", b.String(), want)
	}
	// A sweep where staging never helps gives the peer copy alone.
	sums, err = Summarize(res[:7])
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	Choose(sums, 0.03).WriteTo(&b)
	if b.String() != "size=0- direct\n" {
		t.Errorf("no gain: chose\n%s", b.String())
	}
	// A size without the peer copy alone is an error.
	if _, err := Summarize(res[1:4]); err == nil {
		t.Error("results without the peer copy alone accepted")
	}
}

func FuzzParseMultiPathTable(f *testing.F) {
	f.Add("size=0-4M direct\nsize=4M- host=0.1 chunks=8 # c\n")
	f.Add("size=64M-1G chunks=16 host=11%\nsize=1G- host=1 chunks=1024")
	f.Add("size=0-1K direct\nsize=512-2K direct")
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := ParseTable(strings.NewReader(s), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "multi-path table fuzz") {
				t.Fatalf("error without the table's name: %v", err)
			}
			return
		}
		for _, e := range tab.Entries {
			if !(e.HostShare >= 0 && e.HostShare <= 1) || e.Chunks < 1 || e.Chunks > MaxChunks ||
				e.Min < 0 || e.Max != 0 && e.Max <= e.Min || e.Direct() && e.Chunks != 1 {
				t.Fatalf("%q gave a bad entry %+v", s, e)
			}
			share, chunks := tab.Lookup(e.Min)
			if share != e.HostShare || chunks != e.Chunks {
				t.Fatalf("%q: Lookup(%d) = %v, %d; entry %+v", s, e.Min, share, chunks, e)
			}
			if _, err := SplitBytes(e.Min, share, chunks); err != nil {
				t.Fatalf("%q: entry %+v does not suit Copy: %v", s, e, err)
			}
		}
		var b strings.Builder
		tab.WriteTo(&b)
		again, err := ParseTable(strings.NewReader(b.String()), "again")
		if err != nil {
			t.Fatalf("%q parsed, but what WriteTo made of it did not: %v\n%s", s, err, b.String())
		}
		if len(again.Entries) != len(tab.Entries) {
			t.Fatalf("%d entries became %d", len(tab.Entries), len(again.Entries))
		}
		for i := range tab.Entries {
			a, b := tab.Entries[i], again.Entries[i]
			a.Line, b.Line = 0, 0
			if a != b {
				t.Fatalf("entry %d: %+v became %+v", i, a, b)
			}
		}
	})
}
