package braid

import (
	"strings"
	"testing"
)

// TestSocketOptions: BRAID_SOCKET_IFNAME and BRAID_ADVERTISE_ADDR are read
// like the other knobs, an option in code wins, and a malformed value is
// an error that names the knob.
func TestSocketOptions(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	o, err := (&Options{Tuning: "none"}).resolve(env(map[string]string{"BRAID_SOCKET_IFNAME": "^docker,lo", "BRAID_ADVERTISE_ADDR": "10.0.0.7"}))
	if err != nil || o.SocketIfname != "^docker,lo" || o.AdvertiseAddr != "10.0.0.7" {
		t.Fatalf("resolve = %+v, %v", o, err)
	}
	o, err = (&Options{Tuning: "none", SocketIfname: "=ib0", AdvertiseAddr: "node7.example"}).resolve(env(map[string]string{"BRAID_SOCKET_IFNAME": "eth"}))
	if err != nil || o.SocketIfname != "=ib0" || o.AdvertiseAddr != "node7.example" {
		t.Fatalf("options in code: %+v, %v", o, err)
	}
	if o, err := (&Options{Tuning: "none"}).resolve(env(map[string]string{"BRAID_ADVERTISE_ADDR": "fd00::2"})); err != nil || o.AdvertiseAddr != "fd00::2" {
		t.Fatalf("an IPv6 address: %+v, %v", o, err)
	}
	for _, tc := range []struct {
		opts Options
		env  map[string]string
		want string
	}{
		{Options{}, map[string]string{"BRAID_SOCKET_IFNAME": "eth0,,ib0"}, `BRAID_SOCKET_IFNAME="eth0,,ib0"`},
		{Options{}, map[string]string{"BRAID_SOCKET_IFNAME": "^"}, `BRAID_SOCKET_IFNAME="^"`},
		{Options{SocketIfname: "eth 0"}, nil, `Options.SocketIfname="eth 0"`},
		{Options{}, map[string]string{"BRAID_ADVERTISE_ADDR": "10.0.0.7:4000"}, `BRAID_ADVERTISE_ADDR="10.0.0.7:4000": want an IP address or a host name, without port`},
		{Options{AdvertiseAddr: "[fd00::2]:1"}, nil, `Options.AdvertiseAddr="[fd00::2]:1"`},
	} {
		tc.opts.Tuning = "none"
		if _, err := tc.opts.resolve(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %v: %v; want an error containing %q", tc.opts, tc.env, err, tc.want)
		}
	}
}
