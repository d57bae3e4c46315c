package braid

import (
	"bytes"
	"log"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport/shmcoll"
)

// TestSetSpin: ranks with a CPU each spin and then yield for
// shmcoll.OwnCoreYield; ranks that outnumber the CPUs spin briefly; the
// log says which, at the level given.
func TestSetSpin(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		ranks int
		spin  time.Duration
		say   string
	}{
		{1, 50 * time.Microsecond, "a CPU each: a wait spins 50µs, then yields its thread between polls for up to " + shmcoll.OwnCoreYield.String()},
		{cpus, 50 * time.Microsecond, "a CPU each"}, // hostCPUs counts NumCPU at least
		{1 << 20, -1, "share this host's"},
	} {
		var out bytes.Buffer
		w := &world{logger: log.New(&out, "", 0)}
		w.opts.Debug = "info"
		w.setSpin(tc.ranks, "info")
		if w.spin != tc.spin || !strings.Contains(out.String(), tc.say) {
			t.Errorf("%d ranks on %d CPUs: spin %v, log %q; want spin %v and %q", tc.ranks, cpus, w.spin, out.String(), tc.spin, tc.say)
		}
		out.Reset()
		w.setSpin(tc.ranks, "trace")
		if out.Len() != 0 {
			t.Errorf("%d ranks: logged %q at trace under BRAID_DEBUG=info", tc.ranks, out.String())
		}
	}
}
