package braid

import (
	"io"
	"strings"
	"testing"
)

// FuzzOptionsResolve feeds every knob that resolve reads from the
// environment: it must never panic, and must either accept the values or
// return an error that names the knob it refuses. BRAID_TOPO is limited to
// presets and names without a slash, so that no file outside the package
// directory is read.
func FuzzOptionsResolve(f *testing.F) {
	f.Add("tcp", "ring", "5s", "64K", "info", "off", "1", "h1", "eth0", "10.0.0.7", "dgx1-v100", "none")
	f.Add("", "allreduce=recdouble,bcast=chain:seg=256K", "30", "", "trace", "", "0", "", "^docker,lo", "", "2xdgx1-v100", "none")
	f.Add("rdma", "rign", "0", "-5", "loud", "maybe", "2", "a b", "=ib", "[::1]", "9xnothing", "missing-table")
	f.Add("shm", "shm", "-5s", "3", "NONE", "TRUE", "", "h\x00", "eth,ib", "host:1", "0xdgx1-v100", "")
	f.Add("", "", "", "", "", "", "", "", "", "", "100000000xdgx1-v100", "none") // a typo that used to exhaust the memory
	f.Fuzz(func(t *testing.T, transport, algo, timeout, slot, debug, miad, cma, host, ifname, addr, topoSpec, tuning string) {
		if strings.Contains(topoSpec, "/") || strings.Contains(tuning, "/") {
			return
		}
		env := map[string]string{
			"BRAID_TRANSPORT": transport, "BRAID_ALGO": algo, "BRAID_TIMEOUT": timeout,
			"BRAID_SHM_SLOT": slot, "BRAID_DEBUG": debug, "BRAID_MIAD": miad, "BRAID_SHM_CMA": cma,
			"BRAID_HOST": host, "BRAID_SOCKET_IFNAME": ifname, "BRAID_ADVERTISE_ADDR": addr,
			"BRAID_TOPO": topoSpec, "BRAID_TUNING": tuning,
		}
		o, err := (&Options{Log: io.Discard}).resolve(func(k string) string { return env[k] })
		if err != nil {
			named := false
			for k := range env {
				named = named || strings.Contains(err.Error(), k)
			}
			if !named {
				t.Fatalf("resolve: %v names no knob", err)
			}
			return
		}
		if o.Timeout <= 0 {
			t.Fatalf("accepted BRAID_TIMEOUT=%q as %v", timeout, o.Timeout)
		}
		if o.Planner == nil {
			t.Fatal("no planner")
		}
	})
}
