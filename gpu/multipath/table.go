package multipath

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/internal/size"
	"github.com/braid-ccl/braid/internal/textfile"
)

// MaxChunks is the largest chunk count a Table accepts.
const MaxChunks = 1024

// Table says how Copier.Copy should split a copy of a
// given size: which fraction of the bytes to stage through host memory and
// in how many chunks, or the peer copy alone where staging does not help
// (Table 4.1 of Temuçin's MASc thesis, Queen's University 2021, is such a
// table). braid tune --device cuda measures one for a pair of GPUs and
// writes it. The format is text, one size range a line:
//
//	# comments start with #
//	size=0-64M direct
//	size=64M-256M host=0.1 chunks=8
//	size=256M- host=0.11 chunks=16
//
// size=A-B is the half-open range [A, B) of copy sizes in bytes, with
// binary suffixes K, M, G; B empty for no bound. "direct" is the peer copy
// alone. host= is the staged fraction, 0 < host ≤ 1, as a decimal or a
// percentage (host=10%), and chunks= the chunk count, 1 to
// MaxChunks. Ranges must not overlap; sizes no range holds take
// the peer copy alone.
type Table struct {
	Source  string // where it was read from, for messages
	Entries []Entry
}

// Entry is one line of a Table.
type Entry struct {
	Min, Max  int     // sizes [Min, Max) in bytes; Max 0: no bound
	HostShare float64 // fraction staged through the host; 0: the peer copy alone
	Chunks    int     // host chunks; 1 for the peer copy alone
	Line      int     // line in the file, 0 if built in code
}

// Direct reports whether e is the peer copy alone.
func (e *Entry) Direct() bool { return e.HostShare == 0 }

// Holds reports whether size lies in e's range.
func (e *Entry) Holds(size int) bool {
	return size >= e.Min && (e.Max == 0 || size < e.Max)
}

// String writes e as a table line.
func (e *Entry) String() string {
	hi := ""
	if e.Max > 0 {
		hi = formatSize(e.Max)
	}
	s := "size=" + formatSize(e.Min) + "-" + hi
	if e.Direct() {
		return s + " direct"
	}
	return s + " host=" + strconv.FormatFloat(e.HostShare, 'g', -1, 64) + " chunks=" + strconv.Itoa(e.Chunks)
}

// DefaultTable returns the table used where none was measured:
// the peer copy alone at every size. A gain from staging depends on the
// machine's links, so only a table measured on the machine claims one.
func DefaultTable() *Table {
	return &Table{Source: "built-in", Entries: []Entry{{Chunks: 1}}}
}

// Lookup returns the host share and chunk count for a copy of size bytes,
// ready to pass to Copier.Copy: those of the entry whose range
// holds size, or (0, 1), the peer copy alone, where none does. A nil table
// holds no range.
func (t *Table) Lookup(size int) (hostShare float64, chunks int) {
	if t != nil {
		for i := range t.Entries {
			e := &t.Entries[i]
			if e.Holds(size) {
				if e.Direct() {
					break
				}
				return e.HostShare, e.Chunks
			}
		}
	}
	return 0, 1
}

// Limits returns what a Copier needs to serve every copy of up to
// maxSize bytes as the table says: the staging buffer's size and the chunk
// count (at least 1), for NewCopier.
func (t *Table) Limits(maxSize int) (hostBytes, chunks int) {
	chunks = 1
	if t == nil {
		return 0, chunks
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Direct() || e.Min > maxSize {
			continue
		}
		hi := maxSize
		if e.Max > 0 {
			hi = min(hi, e.Max-1)
		}
		hostBytes = max(hostBytes, int(float64(hi)*e.HostShare))
		chunks = max(chunks, e.Chunks)
	}
	return hostBytes, chunks
}

// LoadTable reads the table in file path.
func LoadTable(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("multi-path table: %w", err)
	}
	return ParseTable(bytes.NewReader(b), path)
}

// ParseTable reads a table in the format Table
// describes; name says where it came from in errors, which name the line.
func ParseTable(r io.Reader, name string) (*Table, error) {
	t := &Table{Source: name}
	err := textfile.Records(r, "multi-path table", name, func(line int, f []string) error {
		e, err := parseEntry(f)
		if err != nil {
			return err
		}
		e.Line = line
		for _, o := range t.Entries {
			if e.Min < o.Max || o.Max == 0 {
				if o.Min < e.Max || e.Max == 0 {
					return fmt.Errorf("%s overlaps line %d (%s)", strings.Fields(e.String())[0], o.Line, strings.Fields(o.String())[0])
				}
			}
		}
		t.Entries = append(t.Entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

func parseEntry(f []string) (Entry, error) {
	const want = `want "size=A-B direct" or "size=A-B host=SHARE chunks=N"`
	e := Entry{Chunks: 1}
	k, v, ok := strings.Cut(f[0], "=")
	if !ok || k != "size" {
		return e, fmt.Errorf("%s, got %q", want, f[0])
	}
	lo, hi, ok := strings.Cut(v, "-")
	if !ok {
		return e, fmt.Errorf("size=%q: want A-B or A- (a range)", v)
	}
	var err error
	if e.Min, err = parseSize(lo); err != nil {
		return e, err
	}
	if hi != "" {
		if e.Max, err = parseSize(hi); err != nil {
			return e, err
		}
		if e.Max <= e.Min {
			return e, fmt.Errorf("size=%q: empty range", v)
		}
	}
	if len(f) == 2 && f[1] == "direct" {
		return e, nil
	}
	if len(f) != 3 {
		return e, fmt.Errorf("%s, got %d fields", want, len(f))
	}
	var haveShare, haveChunks bool
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "host" && !haveShare:
			if e.HostShare, err = parseShare(v); err != nil {
				return e, err
			}
			haveShare = true
		case k == "chunks" && !haveChunks:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxChunks {
				return e, fmt.Errorf("chunks=%q: want a count from 1 to %d", v, MaxChunks)
			}
			e.Chunks, haveChunks = n, true
		default:
			return e, fmt.Errorf("%s, got %q", want, kv)
		}
	}
	return e, nil
}

// parseShare reads a host share: 0.1 or 10%, more than 0 and at
// most 1.
func parseShare(s string) (float64, error) {
	v, pct := strings.CutSuffix(s, "%")
	x, err := strconv.ParseFloat(v, 64)
	if pct {
		x /= 100
	}
	if err != nil || !(x > 0 && x <= 1) {
		return 0, fmt.Errorf("host=%q: want a share above 0 and at most 1 (0.1 or 10%%); for none, write direct", s)
	}
	return x, nil
}

// WriteTo writes t in the format ParseTable reads.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	for i := range t.Entries {
		b.WriteString(t.Entries[i].String())
		b.WriteByte('\n')
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// formatSize writes bytes with a binary suffix: 8, 4K, 64M, as
// package plan's tables do.
func formatSize(b int) string { return size.Format(int64(b)) }

// parseSize reads a size such as 8, 4K, 64M, 1G (binary
// suffixes).
func parseSize(s string) (int, error) {
	v, err := size.Parse(s)
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int(v), nil
}

// Summary is one size's figures from Measure.
type Summary struct {
	Size   int
	Direct Result   // the peer copy alone
	Staged []Result // the host-staged path alone, by chunk count
	Best   Result   // the fastest split over both paths; zero if none was timed
	Gain   float64  // Best.GBps / Direct.GBps - 1
}

// Summarize groups Measure's results by size, in
// ascending order. Every size needs a result of the peer copy alone.
func Summarize(results []Result) ([]Summary, error) {
	bySize := map[int]*Summary{}
	var sizes []int
	for _, r := range results {
		s := bySize[r.Size]
		if s == nil {
			s = &Summary{Size: r.Size}
			bySize[r.Size] = s
			sizes = append(sizes, r.Size)
		}
		switch {
		case r.HostShare == 0:
			s.Direct = r
		case r.HostShare == 1:
			s.Staged = append(s.Staged, r)
		case r.GBps > s.Best.GBps || r.GBps == s.Best.GBps && r.HostShare < s.Best.HostShare:
			s.Best = r
		}
	}
	slices.Sort(sizes)
	out := make([]Summary, 0, len(sizes))
	for _, n := range sizes {
		s := bySize[n]
		if s.Direct.GBps <= 0 {
			return nil, fmt.Errorf("multipath: results for %d bytes lack the peer copy alone", n)
		}
		if s.Best.GBps > 0 {
			s.Gain = s.Best.GBps/s.Direct.GBps - 1
		}
		slices.SortFunc(s.Staged, func(a, b Result) int { return a.Chunks - b.Chunks })
		out = append(out, *s)
	}
	return out, nil
}

// Choose makes a table from measured sizes (ascending, as
// Summarize returns them): at each size the fastest split if it
// beats the peer copy alone by at least minGain (0.03 for 3%), else the
// peer copy alone. Each choice holds from its size up to the next measured
// size, the last one without bound; sizes below the smallest measured take
// the peer copy alone, since nothing was measured there. Neighbours with
// the same choice merge.
func Choose(sums []Summary, minGain float64) *Table {
	t := &Table{}
	add := func(e Entry) {
		if k := len(t.Entries) - 1; k >= 0 {
			last := &t.Entries[k]
			if last.HostShare == e.HostShare && last.Chunks == e.Chunks {
				last.Max = e.Max
				return
			}
		}
		t.Entries = append(t.Entries, e)
	}
	for i, s := range sums {
		e := Entry{Min: s.Size, Chunks: 1}
		if i == 0 && s.Size > 0 {
			add(Entry{Min: 0, Max: s.Size, Chunks: 1})
		}
		if i+1 < len(sums) {
			e.Max = sums[i+1].Size
		}
		if s.Best.GBps > 0 && s.Gain >= minGain {
			e.HostShare, e.Chunks = s.Best.HostShare, s.Best.Chunks
		}
		add(e)
	}
	return t
}
