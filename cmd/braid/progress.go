package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/braid-ccl/braid/internal/bench"
)

// progressLine draws bench's progress on one terminal line:
//
//	allreduce [██████████░░░░░░░░░░]  50%  12/24  1M ring  3.2s
func progressLine(coll string, p bench.Progress, elapsed time.Duration, width int) string {
	frac := 0.0
	if p.Total > 0 {
		frac = float64(p.Done) / float64(p.Total)
	}
	frac = min(max(frac, 0), 1)
	full := int(frac*float64(width) + 0.5)
	bar := strings.Repeat("█", full) + strings.Repeat("░", width-full)
	what := bench.FormatSize(p.Size)
	if p.Algo != "" {
		what += " " + p.Algo
	}
	if p.Imbalanced {
		what += " (imbalanced)"
	}
	return fmt.Sprintf("%s [%s] %3.0f%%  %d/%d  %s  %.1fs", coll, bar, 100*frac, p.Done, p.Total, what, elapsed.Seconds())
}
