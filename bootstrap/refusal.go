package bootstrap

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// refusalLog logs the clients a store server refuses without letting a
// flood of them flood the log: the first burst of each interval one line
// each, then one line at the end of the interval that counts the others
// and names the addresses they came from.
type refusalLog struct {
	logf     func(format string, args ...any)
	burst    int
	interval time.Duration

	mu         sync.Mutex
	start      time.Time      // of the current interval
	logged     int            // lines logged in it
	suppressed int            // refusals not logged in it
	from       map[string]int // their addresses
	all        int            // refusals since the start
	timer      *time.Timer    // flushes at the end of the interval
	stopped    bool
}

func newRefusalLog(logf func(string, ...any), burst int, interval time.Duration) *refusalLog {
	return &refusalLog{logf: logf, burst: burst, interval: interval, from: map[string]int{}}
}

// add records the refusal of a client at addr, for why.
func (l *refusalLog) add(addr net.Addr, why string) {
	l.mu.Lock()
	l.all++
	now := time.Now()
	var summary string
	if now.Sub(l.start) >= l.interval {
		summary = l.summaryLocked()
		l.start, l.logged = now, 0
	}
	if l.logged < l.burst || l.stopped {
		l.logged++
		l.mu.Unlock()
		if summary != "" {
			l.logf("%s", summary)
		}
		l.logf("bootstrap: store: refused client %s: %s", addr, why)
		return
	}
	l.suppressed++
	l.from[clientIP(addr)]++
	if l.timer == nil {
		l.timer = time.AfterFunc(l.start.Add(l.interval).Sub(now), l.flush)
	}
	l.mu.Unlock()
	if summary != "" {
		l.logf("%s", summary)
	}
}

// summaryLocked returns the line that counts the suppressed refusals, or
// "" if there are none, and resets the count.
func (l *refusalLog) summaryLocked() string {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.suppressed == 0 {
		return ""
	}
	addrs := make([]string, 0, len(l.from))
	for a := range l.from {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool {
		if l.from[addrs[i]] != l.from[addrs[j]] {
			return l.from[addrs[i]] > l.from[addrs[j]]
		}
		return addrs[i] < addrs[j]
	})
	var b strings.Builder
	for i, a := range addrs {
		if i == 3 {
			fmt.Fprintf(&b, ", %d more addresses", len(addrs)-3)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s ×%d", a, l.from[a])
	}
	s := fmt.Sprintf("bootstrap: store: refused %d more clients since %s, not logged one by one (from %s)",
		l.suppressed, l.start.Format("15:04:05"), b.String())
	l.suppressed = 0
	clear(l.from)
	return s
}

// flush logs the summary of the interval.
func (l *refusalLog) flush() {
	l.mu.Lock()
	s := l.summaryLocked()
	l.mu.Unlock()
	if s != "" {
		l.logf("%s", s)
	}
}

// stop logs what is left and stops the timer; later refusals are logged
// one by one (there are none once the server is closed).
func (l *refusalLog) stop() {
	l.mu.Lock()
	l.stopped = true
	s := l.summaryLocked()
	l.mu.Unlock()
	if s != "" {
		l.logf("%s", s)
	}
}

// total returns the number of refusals so far.
func (l *refusalLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}
