package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// netnsPair makes two network namespaces joined by a veth pair,
// 10.99.0.1/24 in the first and 10.99.0.2/24 in the second (addresses that
// exist only inside them), and removes them when the test ends. It skips
// the test where namespaces cannot be made (not root, no ip, no
// CAP_NET_ADMIN).
func netnsPair(t *testing.T) (a, b, ifA string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs ip (iproute2) to make network namespaces")
	}
	id := os.Getpid() % 100000
	a, b = fmt.Sprintf("braidA%d", id), fmt.Sprintf("braidB%d", id)
	ifA, ifB := fmt.Sprintf("vbA%d", id), fmt.Sprintf("vbB%d", id)
	cleanup := func() {
		exec.Command(ip, "netns", "del", a).Run()
		exec.Command(ip, "netns", "del", b).Run()
	}
	cleanup()
	t.Cleanup(cleanup)
	for _, args := range [][]string{
		{"netns", "add", a},
		{"netns", "add", b},
		{"link", "add", ifA, "type", "veth", "peer", "name", ifB},
		{"link", "set", ifA, "netns", a},
		{"link", "set", ifB, "netns", b},
		{"-n", a, "addr", "add", "10.99.0.1/24", "dev", ifA},
		{"-n", b, "addr", "add", "10.99.0.2/24", "dev", ifB},
		{"-n", a, "link", "set", ifA, "up"},
		{"-n", b, "link", "set", ifB, "up"},
		{"-n", a, "link", "set", "lo", "up"},
		{"-n", b, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Skipf("cannot make network namespaces: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return a, b, ifA
}

// TestNetnsSameHostname runs the two ranks of a job in two network
// namespaces of this machine: they share the host name, the boot id and
// /dev/shm, and only their network namespaces tell them apart. The ranks
// must see two hosts and connect over TCP through the veth pair; a wrong
// interface or a loopback advertise address gives an error that shows the
// addresses tried and what to set.
func TestNetnsSameHostname(t *testing.T) {
	nsA, nsB, ifA := netnsPair(t)
	secret := hex.EncodeToString([]byte("netns-test-secret-0123456789abcd"))
	run2 := func(env ...string) (string, string, error, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var outs [2]bytes.Buffer
		var cmds [2]*exec.Cmd
		port := 20000 + os.Getpid()%20000
		for r, ns := range []string{nsA, nsB} {
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, braidBin(), "bench", "allreduce", "--check",
				"--max-size", "64K", "--iters", "2", "--warmup", "1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("BRAID_RANK=%d", r), "BRAID_WORLD_SIZE=2",
				fmt.Sprintf("BRAID_STORE=10.99.0.1:%d", port), "BRAID_SECRET="+secret, "BRAID_DEBUG=info")
			cmd.Env = append(cmd.Env, env...)
			cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[r] = cmd
		}
		e0, e1 := cmds[0].Wait(), cmds[1].Wait()
		if ctx.Err() != nil {
			t.Fatalf("the ranks did not finish:\nrank 0:\n%s\nrank 1:\n%s", outs[0].String(), outs[1].String())
		}
		return outs[0].String(), outs[1].String(), e0, e1
	}

	for _, env := range [][]string{nil, {"BRAID_SOCKET_IFNAME=vbA,vbB"}, {"BRAID_SOCKET_IFNAME=^lo"}} {
		o0, o1, e0, e1 := run2(env...)
		if e0 != nil || e1 != nil || !strings.Contains(o0, " yes") || strings.Contains(o0, " no") {
			t.Fatalf("%v: %v, %v\nrank 0:\n%s\nrank 1:\n%s", env, e0, e1, o0, o1)
		}
		if !strings.Contains(o0, "2 ranks on 2 hosts") || !strings.Contains(o0, "1 remote (tcp)") {
			t.Fatalf("%v: the ranks did not take each other for remote hosts:\n%s", env, o0)
		}
	}

	// An interface that does not exist: the error names the knob and
	// lists the interfaces.
	o0, _, e0, _ := run2("BRAID_SOCKET_IFNAME=nosuch0", "BRAID_TIMEOUT=5s")
	if e0 == nil || !strings.Contains(o0, `BRAID_SOCKET_IFNAME (Options.Interfaces): no interface that is up and has an address matches "nosuch0"`) ||
		!strings.Contains(o0, ifA+" 10.99.0.1") {
		t.Fatalf("BRAID_SOCKET_IFNAME=nosuch0: %v\n%s", e0, o0)
	}

	// Both ranks advertise 127.0.0.1, which is another interface in each
	// namespace: Init fails with the addresses and the hint.
	o0, o1, e0, e1 := run2("BRAID_ADVERTISE_ADDR=127.0.0.1", "BRAID_TIMEOUT=3s")
	for r, o := range []string{o0, o1} {
		if []error{e0, e1}[r] == nil || !strings.Contains(o, "ranks 0 and 1 both advertise 127.0.0.1 but are on different machines or network namespaces that share the host name") ||
			!strings.Contains(o, "set BRAID_SOCKET_IFNAME") || !strings.Contains(o, "127.0.0.1:") {
			t.Fatalf("rank %d advertising 127.0.0.1 from another namespace:\n%s", r, o)
		}
	}
	t.Logf("rank 0 advertising 127.0.0.1:\n%s", o0)
}
