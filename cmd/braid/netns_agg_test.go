package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNetnsAgg runs a job of 3 ranks on 3 emulated hosts (network
// namespaces joined by a bridge, unshaped: scripts/netns-hosts.sh) with an
// aggregation daemon in a namespace of its own: the ranks bootstrap
// through rank 0's TCP store across the bridge, check allreduce through the
// daemon at every size, and rank 0 first shows that a client without the
// job's secret is refused, which the daemon logs. It needs root; without
// it the test says so and skips.
func TestNetnsAgg(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces (scripts/netns-hosts.sh)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to make network namespaces")
	}
	script, err := filepath.Abs("../../scripts/netns-hosts.sh")
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	prog := `if [ "$BRAID_RANK" = 0 ]; then
	BRAID_SECRET=000102030405060708090a0b0c0d0e0f "$0" agg --stats "${BRAID_AGG%%,*}" && exit 9
fi
exec "$0" bench allreduce --algo agg --check --min-size 4 --max-size 4M --iters 2 --warmup 1`
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "-n", "3", "--aggs", "1", "--braid", braidBin(), "--logs", logs,
		"--", "env", "BRAID_DEBUG=info", "sh", "-c", prog, braidBin())
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the job did not finish:\n%s", out)
	}
	if err != nil && strings.Contains(string(out), "cannot") && strings.Contains(string(out), "netns") {
		t.Skipf("cannot make network namespaces here: %s", out)
	}
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	o := string(out)
	if !strings.Contains(o, "3 ranks on 3 hosts") || !strings.Contains(o, "allreduce may run through 1 aggregation daemons") ||
		!strings.Contains(o, " agg ") || strings.Contains(o, " no\n") {
		t.Fatalf("the job did not run allreduce through the daemon, correctly:\n%s", o)
	}
	if !strings.Contains(o, "refused") {
		t.Fatalf("a client without the secret was not refused:\n%s", o)
	}
	dl, _ := os.ReadFile(filepath.Join(logs, "agg0.log"))
	if !strings.Contains(string(dl), "refused a connection from 10.231.0.1") {
		t.Fatalf("the daemon did not log the refusal:\n%s", dl)
	}
}
