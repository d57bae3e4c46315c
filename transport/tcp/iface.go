package tcp

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// IfaceSpec is a parsed Options.Interfaces: the interfaces to use, as
// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name them.
type IfaceSpec struct {
	Names   []string // name prefixes (exact names if Exact)
	Exact   bool     // "=" before the list: the names match whole
	Exclude bool     // "^" before the list: use the interfaces that do not match
}

// ParseIfaceSpec parses an interface list: comma-separated name prefixes
// ("eth,ib" matches eth0, eth1 and ib0), "=" before the list for exact
// names ("=eth0"), "^" before it to exclude ("^docker,lo", "^=eth1").
func ParseIfaceSpec(s string) (IfaceSpec, error) {
	var sp IfaceSpec
	rest := strings.TrimSpace(s)
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		sp.Exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		sp.Exact, rest = true, r
	}
	for _, n := range strings.Split(rest, ",") {
		n = strings.TrimSpace(n)
		if n == "" || strings.ContainsAny(n, " \t^=/") {
			return IfaceSpec{}, fmt.Errorf("interface list %q: want names or prefixes separated by commas, e.g. eth0, ^docker,lo or =eth0", s)
		}
		sp.Names = append(sp.Names, n)
	}
	return sp, nil
}

// Match reports whether the spec selects the interface named name.
func (sp IfaceSpec) Match(name string) bool {
	hit := false
	for _, n := range sp.Names {
		if name == n || !sp.Exact && strings.HasPrefix(name, n) {
			hit = true
			break
		}
	}
	return hit != sp.Exclude
}

// ifaceAddr is an interface's address.
type ifaceAddr struct {
	name     string
	ip       net.IP
	up, loop bool
}

// localAddrs lists the addresses of this network namespace's interfaces,
// in the system's order.
func localAddrs() []ifaceAddr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []ifaceAddr
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				out = append(out, ifaceAddr{name: ifc.Name, ip: n.IP,
					up: ifc.Flags&net.FlagUp != 0, loop: ifc.Flags&net.FlagLoopback != 0})
			}
		}
	}
	return out
}

// pickAddr returns the address to use among addrs: the first IPv4 address
// of an interface that is up and that sp selects, else the first such
// IPv6 address (not link-local: it would need a zone). Loopback
// interfaces count only when sp names them (not by exclusion).
func pickAddr(sp IfaceSpec, addrs []ifaceAddr) (ifaceAddr, bool) {
	for _, v4 := range []bool{true, false} {
		for _, a := range addrs {
			if !a.up || (a.ip.To4() != nil) != v4 || a.ip.IsLinkLocalUnicast() || a.ip.IsUnspecified() {
				continue
			}
			if a.loop && sp.Exclude {
				continue
			}
			if sp.Match(a.name) {
				return a, true
			}
		}
	}
	return ifaceAddr{}, false
}

// describeAddrs lists interfaces and addresses for an error message.
func describeAddrs(addrs []ifaceAddr) string {
	if len(addrs) == 0 {
		return "none found"
	}
	var parts []string
	for _, a := range addrs {
		s := a.name + " " + a.ip.String()
		if !a.up {
			s += " (down)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// InterfaceAddr returns the address that an Options.Interfaces list
// selects here, and the interface's name.
func InterfaceAddr(spec string) (net.IP, string, error) {
	sp, err := ParseIfaceSpec(spec)
	if err != nil {
		return nil, "", err
	}
	addrs := localAddrs()
	a, ok := pickAddr(sp, addrs)
	if !ok {
		return nil, "", fmt.Errorf("no interface that is up and has an address matches %q (here: %s)", spec, describeAddrs(addrs))
	}
	return a.ip, a.name, nil
}

// defaultExclude is what the default choice of interface skips, as NCCL
// does: loopback and the bridges of docker and libvirt, which other hosts
// cannot reach.
var defaultExclude = IfaceSpec{Names: []string{"lo", "docker", "virbr"}, Exclude: true}

// defaultHost picks the host to advertise for a listen address: the
// listen address's host if it names one; else an address that the
// machine's host name resolves to and that an interface here holds (a
// name that resolves to another namespace's address would mislead the
// peers); else the first address of an interface that is up, not loopback
// nor a container bridge; else 127.0.0.1.
func defaultHost(ctx context.Context, listen string) string {
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			return h
		}
	}
	addrs := localAddrs()
	if name, err := os.Hostname(); err == nil {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resolved, _ := net.DefaultResolver.LookupHost(lctx, name)
		cancel()
		for _, r := range resolved {
			ip := net.ParseIP(r)
			if ip == nil || ip.IsLoopback() {
				continue
			}
			for _, a := range addrs {
				if a.up && a.ip.Equal(ip) {
					return r
				}
			}
		}
	}
	if a, ok := pickAddr(defaultExclude, addrs); ok {
		return a.ip.String()
	}
	return "127.0.0.1"
}
