package launch

import (
	"bufio"
	"errors"
	"io"
	"sync"
)

// maxLine is the longest line that copyLines keeps whole.
const maxLine = 64 << 10

// output serialises the ranks' writes to the launcher's stdout and
// stderr, which may be one terminal.
type output struct{ mu sync.Mutex }

func (o *output) write(w io.Writer, b []byte) {
	o.mu.Lock()
	w.Write(b)
	o.mu.Unlock()
}

// copyLines copies r to w a line at a time, each line whole and prefixed.
// A last line without newline gets one. A line longer than maxLine is
// written in pieces, the first one prefixed.
func (o *output) copyLines(w io.Writer, r io.Reader, prefix string) {
	br := bufio.NewReaderSize(r, maxLine)
	buf := []byte(prefix)
	atStart := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			buf = buf[:0]
			if atStart {
				buf = append(buf, prefix...)
			}
			buf = append(buf, line...)
			atStart = line[len(line)-1] == '\n'
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !atStart {
				buf = append(buf, '\n')
			}
			o.write(w, buf)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// copyRaw copies r to w as it comes.
func (o *output) copyRaw(w io.Writer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.write(w, buf[:n])
		}
		if err != nil {
			return
		}
	}
}
