package topo

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// pairs calls f for each link, or once for a link directly followed by its
// mirror (duplex), as the file format groups them.
func (t *Topology) pairs(f func(l Link, duplex bool)) {
	for i := 0; i < len(t.Links); i++ {
		l := t.Links[i]
		duplex := i+1 < len(t.Links) && l.From != l.To &&
			t.Links[i+1] == Link{From: l.To, To: l.From, Class: l.Class, Count: l.Count, Bandwidth: l.Bandwidth, Latency: l.Latency}
		if duplex {
			i++
		}
		f(l, duplex)
	}
}

// String returns the text rendering of t (WriteText).
func (t *Topology) String() string {
	var b strings.Builder
	t.WriteText(&b)
	return b.String()
}

// WriteText writes a description of t for people: a summary line, the
// devices of each host, the links (a duplex pair on one line, "<->", and
// counted once in the summary), and
// for topologies with GPUs the matrix of GPU paths that nvidia-smi topo -m
// prints (PathLabel).
func (t *Topology) WriteText(w io.Writer) error {
	var b strings.Builder
	n := t.count()
	fmt.Fprintf(&b, "topology %s: %s", t.Name, plural(len(t.Hosts()), "host"))
	for k := range numKinds {
		if n[k] > 0 {
			fmt.Fprintf(&b, ", %s", plural(n[k], k.String()))
		}
	}
	// The links as listed below: a duplex pair is one line, one link.
	listed := 0
	t.pairs(func(Link, bool) { listed++ })
	fmt.Fprintf(&b, "; %s\n", plural(listed, "link"))
	groups := append(t.Hosts(), "")
	for _, h := range groups {
		var lines []string
		for _, d := range t.Devices {
			if d.Host != h {
				continue
			}
			s := fmt.Sprintf("  %-14s %-11s", d.ID, d.Kind)
			if d.NUMA >= 0 {
				s += fmt.Sprintf(" numa %d", d.NUMA)
			}
			for _, x := range []string{d.Model, d.BusID} {
				if x != "" {
					s += "  " + x
				}
			}
			if d.CPUs != "" {
				s += "  cpus " + d.CPUs
			}
			lines = append(lines, strings.TrimRight(s, " "))
		}
		if len(lines) == 0 {
			continue
		}
		if h == "" {
			b.WriteString("no host\n")
		} else {
			fmt.Fprintf(&b, "host %s\n", h)
		}
		b.WriteString(strings.Join(lines, "\n"))
		b.WriteByte('\n')
	}
	b.WriteString("links\n")
	t.pairs(func(l Link, duplex bool) {
		arrow := "->"
		if duplex {
			arrow = "<->"
		}
		ends := fmt.Sprintf("%s %s %s", t.Devices[l.From].ID, arrow, t.Devices[l.To].ID)
		fmt.Fprintf(&b, "  %-30s %-6s x%-2d %7s GB/s  %s µs\n", ends, l.Class, l.Count, num(l.Capacity()), num(l.Latency))
	})
	if gpus := t.GPUs(); len(gpus) > 0 {
		b.WriteString("gpu paths\n")
		fmt.Fprintf(&b, "  %-10s", "")
		for _, g := range gpus {
			fmt.Fprintf(&b, " %6s", t.Devices[g].ID)
		}
		b.WriteByte('\n')
		for _, x := range gpus {
			fmt.Fprintf(&b, "  %-10s", t.Devices[x].ID)
			for _, y := range gpus {
				fmt.Fprintf(&b, " %6s", t.PathLabel(x, y))
			}
			b.WriteByte('\n')
		}
		b.WriteString("  NV# = # NVLinks (directly or, at the narrowest hop, through an NVSwitch); PIX = one PCIe switch;\n" +
			"  PXB = several PCIe switches; PHB = through a CPU; SYS = across sockets; NET = across the network; - = none\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "h") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// num formats a figure in the fewest digits that read back to it.
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// PathLabel names the path from device a to device b in the manner of
// nvidia-smi topo -m: "X" for a itself, "NV<n>" for n direct NVLinks or a
// path through NVSwitches only (n lanes at its narrowest hop), otherwise by
// what the widest route (Route) crosses: "NET" the network, "SYS" the link
// between sockets, "PHB" a CPU, "PXB" several PCIe switches, "PIX" one;
// "-" when there is no route.
func (t *Topology) PathLabel(a, b int) string {
	if a == b {
		return "X"
	}
	if n := t.Lanes(a, b, NVLink); n > 0 {
		return fmt.Sprintf("NV%d", n)
	}
	path := t.Route(a, b, nil, nil)
	if path == nil {
		return "-"
	}
	var nvs, pcie, cpus int
	var net, sys bool
	lanes := 0
	for i, d := range path {
		if i > 0 {
			if l := t.Lanes(path[i-1], d, NVLink); l > 0 && (lanes == 0 || l < lanes) {
				lanes = l
			}
			if t.Capacity(path[i-1], d, XBus) > 0 {
				sys = true
			}
		}
		if i == 0 || i == len(path)-1 {
			continue
		}
		switch t.Devices[d].Kind {
		case NVSwitch:
			nvs++
		case PCIeSwitch:
			pcie++
		case CPU:
			cpus++
		case NetSwitch, NIC:
			net = true
		}
	}
	switch {
	case net:
		return "NET"
	case sys:
		return "SYS"
	case cpus > 0:
		return "PHB"
	case nvs > 0 && pcie == 0:
		return fmt.Sprintf("NV%d", lanes)
	case pcie > 1:
		return "PXB"
	}
	return "PIX"
}

var dotShapes = [numKinds]string{GPU: "box", CPU: "ellipse", NIC: "cds", PCIeSwitch: "hexagon", NVSwitch: "octagon", NetSwitch: "diamond"}
var dotColors = [numClasses]string{NVLink: "forestgreen", PCIe: "steelblue", XBus: "firebrick", SHM: "gray40", Network: "darkorange"}

// WriteDOT writes t as a Graphviz digraph: one cluster per host, devices
// shaped by kind, links coloured by class and labelled with their class,
// lane count and capacity; a duplex pair is one edge with arrows at both
// ends. Render with dot -Tsvg.
func (t *Topology) WriteDOT(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n", strconv.Quote(t.Name))
	node := func(d Device) string {
		label := d.ID
		if d.Model != "" {
			label += "\n" + d.Model
		}
		return fmt.Sprintf("%s [shape=%s, label=%s];", strconv.Quote(d.ID), dotShapes[d.Kind], strconv.Quote(label))
	}
	for k, h := range t.Hosts() {
		fmt.Fprintf(&b, "  subgraph cluster_%d {\n    label=%s;\n", k, strconv.Quote(h))
		for _, d := range t.Devices {
			if d.Host == h {
				fmt.Fprintf(&b, "    %s\n", node(d))
			}
		}
		b.WriteString("  }\n")
	}
	for _, d := range t.Devices {
		if d.Host == "" {
			fmt.Fprintf(&b, "  %s\n", node(d))
		}
	}
	t.pairs(func(l Link, duplex bool) {
		dir := ""
		if duplex {
			dir = ", dir=both"
		}
		label := fmt.Sprintf("%s x%d\n%s GB/s", l.Class, l.Count, num(l.Capacity()))
		fmt.Fprintf(&b, "  %s -> %s [color=%s, label=%s%s];\n", strconv.Quote(t.Devices[l.From].ID), strconv.Quote(t.Devices[l.To].ID),
			dotColors[l.Class], strconv.Quote(label), dir)
	})
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}
