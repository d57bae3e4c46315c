package tcp

import (
	"context"
	"io"
	"log"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

func TestParseIfaceSpec(t *testing.T) {
	for _, tc := range []struct {
		spec       string
		match, not []string
	}{
		{"eth", []string{"eth0", "eth1", "eth"}, []string{"ib0", "veth0", "lo"}},
		{"eth,ib", []string{"eth0", "ib1"}, []string{"lo", "docker0"}},
		{"=eth0", []string{"eth0"}, []string{"eth01", "eth1"}},
		{"^docker,lo", []string{"eth0", "veth1", "ib0"}, []string{"docker0", "lo"}},
		{"^=eth0", []string{"eth01", "eth1", "lo"}, []string{"eth0"}},
		{" eth0 , ib ", []string{"eth0", "ib3"}, []string{"eth1"}},
	} {
		sp, err := ParseIfaceSpec(tc.spec)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		for _, n := range tc.match {
			if !sp.Match(n) {
				t.Errorf("%q does not select %s", tc.spec, n)
			}
		}
		for _, n := range tc.not {
			if sp.Match(n) {
				t.Errorf("%q selects %s", tc.spec, n)
			}
		}
	}
	for _, bad := range []string{"", "^", "=", "eth0,,eth1", "eth 0", "^^eth", "a/b"} {
		if _, err := ParseIfaceSpec(bad); err == nil {
			t.Errorf("ParseIfaceSpec(%q) succeeded", bad)
		}
	}
}

func TestPickAddr(t *testing.T) {
	ip := net.ParseIP
	addrs := []ifaceAddr{
		{name: "lo", ip: ip("127.0.0.1"), up: true, loop: true},
		{name: "docker0", ip: ip("172.17.0.1"), up: true},
		{name: "eth0", ip: ip("fe80::1"), up: true},
		{name: "eth0", ip: ip("2001:db8::5"), up: true},
		{name: "eth1", ip: ip("10.1.0.5"), up: false},
		{name: "eth2", ip: ip("10.2.0.5"), up: true},
		{name: "ib0", ip: ip("10.3.0.5"), up: true},
	}
	for spec, want := range map[string]string{
		"eth":        "10.2.0.5",    // eth1 is down; IPv4 before eth0's IPv6
		"=eth0":      "2001:db8::5", // not the link-local one
		"ib":         "10.3.0.5",
		"lo":         "127.0.0.1", // named: loopback is allowed
		"^docker,lo": "10.2.0.5",
		"^eth,ib,lo": "172.17.0.1",
		"nosuch":     "",
	} {
		sp, err := ParseIfaceSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		a, ok := pickAddr(sp, addrs)
		if got := a.ip.String(); ok != (want != "") || ok && got != want {
			t.Errorf("%q picks %v (%v); want %q", spec, got, ok, want)
		}
	}
	if a, ok := pickAddr(defaultExclude, addrs); !ok || a.ip.String() != "10.2.0.5" {
		t.Errorf("the default picks %v", a.ip)
	}
	if d := describeAddrs(addrs[3:5]); d != "eth0 2001:db8::5, eth1 10.1.0.5 (down)" {
		t.Errorf("describeAddrs = %q", d)
	}
}

func TestInterfaces(t *testing.T) {
	ip, name, err := InterfaceAddr("lo")
	if err != nil || !ip.IsLoopback() || name != "lo" {
		t.Skipf("no interface lo with an address here: %v, %v, %v", ip, name, err)
	}
	if _, _, err := InterfaceAddr("braid-nosuch"); err == nil || !strings.Contains(err.Error(), `matches "braid-nosuch" (here: `) ||
		!strings.Contains(err.Error(), "lo 127.0.0.1") {
		t.Fatalf("InterfaceAddr of no interface = %v", err)
	}
	// Connect listens on and advertises the interface's address.
	tr := New(Options{Interfaces: "lo"})
	kv := &transporttest.MemKV{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := []transport.Endpoint{{Rank: 0}, {Rank: 1}}
	errc := make(chan error, 2)
	meshes := make([]transport.Mesh, 2)
	for r := range 2 {
		go func() {
			m, err := tr.Connect(ctx, transport.Config{Self: eps[r], Peers: []transport.Endpoint{eps[1-r]}, World: 2, Store: kv, Prefix: "j", Secret: []byte("s")})
			meshes[r] = m
			errc <- err
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range meshes {
		m.Close()
	}
	v, _ := kv.Get(ctx, AddrKey("j", 1))
	if !strings.HasPrefix(string(v), "127.0.0.1:") {
		t.Fatalf("rank 1 advertised %q; want lo's 127.0.0.1", v)
	}
	_, err = New(Options{Interfaces: "braid-nosuch"}).Connect(ctx, transport.Config{Self: eps[0], Peers: eps[1:], World: 2, Store: kv, Prefix: "k", Secret: []byte("s")})
	if err == nil || !strings.Contains(err.Error(), "BRAID_SOCKET_IFNAME") {
		t.Fatalf("Connect with no such interface = %v; want an error naming BRAID_SOCKET_IFNAME", err)
	}
}

// TestUnreachableHint: ranks of two machines (or network namespaces)
// that share a host name both advertise 127.0.0.1; each side's error names
// the addresses it tried and says what to set.
func TestUnreachableHint(t *testing.T) {
	opts := Options{ListenAddr: "127.0.0.1:0", Logger: log.New(io.Discard, "", 0)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	eps := []transport.Endpoint{{Rank: 0, Host: "node#aaaa0000"}, {Rank: 1, Host: "node#bbbb1111"}}
	for r := range 2 {
		kv := &transporttest.MemKV{}
		kv.Set(context.Background(), AddrKey("j", 1-r), []byte(dead)) // the other rank, in its namespace
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := New(opts).Connect(ctx, transport.Config{Self: eps[r], Peers: []transport.Endpoint{eps[1-r]}, World: 2, Store: kv, Prefix: "j", Secret: []byte("s")})
		cancel()
		if err == nil {
			t.Fatalf("rank %d connected to nothing", r)
		}
		msg := err.Error()
		want := []string{"still waiting for ranks [" + string(rune('0'+1-r)) + "]", dead,
			"ranks 0 and 1 both advertise 127.0.0.1 but are on different machines or network namespaces that share the host name node",
			"set BRAID_SOCKET_IFNAME"}
		if r == 0 {
			want = append(want, "dials, the last one:", "connection refused")
		} else {
			want = append(want, "(at "+dead+") has not connected to 127.0.0.1:")
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("rank %d: error %q lacks %q", r, msg, w)
			}
		}
		t.Logf("rank %d: %v", r, err)
	}
}
