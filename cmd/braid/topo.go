package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/pack"
	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
	"github.com/braid-ccl/braid/topo"
)

const topoUsage = `usage: braid topo [flags]

Shows a topology: the one --topo names (a preset or a JSON file), else the
file $BRAID_TOPO names, else this host as discovered (sysfs for CPUs, NUMA
nodes and NICs; NVML for GPUs and NVLinks when a driver is present).

With --plan it packs spanning trees for a collective among the GPUs of an
allocation (Blink, MLSys 2020, §3) and shows them: each tree's root, weight
(GB/s), share of the data, depth and edges, and with --dot or --svg the
trees drawn over the allocation's links.

Presets: ` + "%s" + `, and <n>x<preset> for clusters.

Examples:
  braid topo                                   # this host
  braid topo --topo dgx1-v100 --dot | dot -Tsvg > dgx1.svg
  braid topo --topo dgx1-v100 --dump dgx1.json # a file BRAID_TOPO reads
  braid topo --topo dgx1-v100 --gpus 1,4,5,6 --plan bcast --size 256M
  braid topo --topo dgx1-p100 --plan allreduce --svg trees.svg

`

func topoCmd(args []string) error {
	fs := flag.NewFlagSet("braid topo", flag.ContinueOnError)
	spec := fs.String("topo", "", "preset or JSON file (default $BRAID_TOPO, else discover this host)")
	dot := fs.Bool("dot", false, "write Graphviz DOT instead of text")
	svg := fs.String("svg", "", "write an SVG drawing to this file (needs Graphviz's dot)")
	dump := fs.String("dump", "", "write the topology as JSON to this file (- for standard output)")
	planF := fs.String("plan", "", "pack trees for this collective: bcast or allreduce")
	sizeF := fs.String("size", "256M", "data size for --plan (each tree's share)")
	gpusF := fs.String("gpus", "", "GPU ordinals of the allocation, e.g. 0,1,2,5 (default: every GPU)")
	root := fs.Int("root", 0, "broadcast root, as a rank of the allocation")
	links := fs.String("links", "auto", "links the trees may use: nvlink, all (routes through switches and CPUs too), or auto (nvlink if it spans the allocation)")
	fs.Usage = func() { fmt.Fprintf(os.Stderr, topoUsage, strings.Join(topo.Presets(), ", ")); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"topo: unexpected argument " + fs.Arg(0)}
	}
	set := given(fs)
	if *planF == "" {
		for _, f := range []string{"size", "gpus", "root", "links"} {
			if set[f] {
				return usageError{fmt.Sprintf("topo: --%s is for --plan (the trees packed for a collective); give --plan bcast or --plan allreduce", f)}
			}
		}
	}
	if *dump != "" && (*dot || *svg != "" || *planF != "") {
		return usageError{"topo: --dump writes the topology as JSON; it does not combine with --dot, --svg or --plan"}
	}
	if *dot && *svg != "" {
		return usageError{"topo: --dot writes DOT text and --svg an SVG file: give one"}
	}
	for _, f := range []struct{ name, path string }{{"--svg", *svg}, {"--dump", *dump}} {
		if f.path != "" && f.path != "-" {
			if err := checkWritable("topo: "+f.name, f.path); err != nil {
				return err
			}
		}
	}
	t, err := loadTopology(*spec)
	if err != nil {
		return err
	}
	if *dump != "" {
		if *dump == "-" {
			return t.WriteJSON(os.Stdout)
		}
		if err := topo.Save(*dump, t); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "braid topo: wrote %s\n", *dump)
		return nil
	}
	var dotText bytes.Buffer
	if *planF == "" {
		if *dot || *svg != "" {
			if err := t.WriteDOT(&dotText); err != nil {
				return err
			}
		} else {
			return t.WriteText(os.Stdout)
		}
	} else {
		coll, err := sched.ParseCollective(*planF)
		if err != nil || coll != sched.Bcast && coll != sched.Allreduce {
			return usageError{fmt.Sprintf("topo: --plan %q: want bcast or allreduce", *planF)}
		}
		size, err := plan.ParseSize(*sizeF)
		if err == nil && size < 1 {
			err = fmt.Errorf("size %q: want a positive size", *sizeF)
		}
		if err != nil {
			return usageError{"topo: --size: " + err.Error()}
		}
		devs, err := allocation(t, *gpusF)
		if err != nil {
			return usageError{"topo: " + err.Error()}
		}
		if *root < 0 || *root >= len(devs) {
			return usageError{fmt.Sprintf("topo: --root %d outside the allocation's ranks 0-%d", *root, len(devs)-1)}
		}
		pt, err := packTrees(t, devs, coll, *root, *links)
		if err != nil {
			return err
		}
		if *dot || *svg != "" {
			if err := writePlanDOT(&dotText, t, devs, pt); err != nil {
				return err
			}
		} else {
			writePlanText(os.Stdout, t, devs, pt, size)
			return nil
		}
	}
	if *svg == "" {
		_, err := os.Stdout.Write(dotText.Bytes())
		return err
	}
	return renderSVG(dotText.Bytes(), *svg)
}

// loadTopology returns the topology spec names (a preset or a JSON file);
// with spec empty, the one $BRAID_TOPO names, else this host discovered.
func loadTopology(spec string) (*topo.Topology, error) {
	if spec == "" {
		spec = os.Getenv("BRAID_TOPO")
	}
	if spec == "" {
		return topo.Discover(topo.DiscoverOptions{GPU: nvmlProbe})
	}
	return topo.Open(spec)
}

// allocation returns the device indices of the GPU ordinals in list
// ("0,1,5"; empty: every GPU), in the order given: rank r runs on the
// r-th.
func allocation(t *topo.Topology, list string) ([]int, error) {
	gpus := t.GPUs()
	if len(gpus) == 0 {
		return nil, fmt.Errorf("topology %s has no GPUs", t.Name)
	}
	if strings.TrimSpace(list) == "" {
		return gpus, nil
	}
	var devs []int
	for _, f := range strings.Split(list, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g < 0 || g >= len(gpus) {
			return nil, fmt.Errorf("--gpus %q: %q is not a GPU ordinal 0-%d", list, f, len(gpus)-1)
		}
		if slices.Contains(devs, gpus[g]) {
			return nil, fmt.Errorf("--gpus %q: GPU %d given twice", list, g)
		}
		devs = append(devs, gpus[g])
	}
	if len(devs) < 1 {
		return nil, fmt.Errorf("--gpus %q: no GPU", list)
	}
	return devs, nil
}

// packedTrees is a packing and what it was packed over.
type packedTrees struct {
	plan  *pack.Plan
	graph *pack.Graph
	links string // "nvlink", "all" or "nvlink+pcie"
	// With links "nvlink+pcie", the hybrid of Blink (MLSys 2020, §3.4):
	// plan and graph are its NVLink set's, ts the trees of both sets with
	// eq. 8's split of the call, rate their rate together (GB/s) and
	// pcieShare the part of the bytes on the PCIe trees.
	hybrid    *pack.Hybrid
	ts        *sched.Trees
	rate      float64
	pcieShare float64
}

// trees returns the packing as the sched.Trees that algo's treepack takes.
func (pt *packedTrees) trees() *sched.Trees {
	if pt.ts != nil {
		return pt.ts
	}
	return pt.plan.SchedTrees(pt.graph)
}

// treeRate returns the rate of the trees together, GB/s.
func (pt *packedTrees) treeRate() float64 {
	if pt.ts != nil {
		return pt.rate
	}
	return pt.plan.Rate
}

// packHybrid returns the trees pack.TreesFor decides for coll among the
// ranks on devs and a call of bytes whose PCIe trees start tDPA seconds
// late: Blink's hybrid (MLSys 2020, §3.4) where NVLink spans the ranks and
// eq. 8 gives the PCIe trees a part, the NVLink trees alone where it
// gives none, else trees over every link.
func packHybrid(t *topo.Topology, devs []int, coll sched.Collective, root int, bytes, tDPA float64) (*packedTrees, error) {
	pk, err := pack.TreesFor(t, devs, coll, root, bytes, tDPA)
	if err != nil {
		return nil, fmt.Errorf("topo: no spanning trees: %w", err)
	}
	return &packedTrees{plan: pk.Plan, graph: pk.Graph, links: pk.Links, hybrid: pk.Hybrid, ts: pk.Trees, rate: pk.Rate, pcieShare: pk.PCIeShare}, nil
}

// packTrees packs trees for coll among the ranks on devs as
// pack.ForCollective does. links says over what: "nvlink" the direct NVLinks,
// "all" every link with routes through switches, CPUs and NICs, "auto"
// NVLink where it spans the ranks, else all.
func packTrees(t *topo.Topology, devs []int, coll sched.Collective, root int, links string) (*packedTrees, error) {
	var tries []string
	switch links {
	case "auto":
		tries = []string{"nvlink", "all"}
	case "nvlink", "all":
		tries = []string{links}
	default:
		return nil, usageError{fmt.Sprintf("--links %q: want nvlink, all or auto", links)}
	}
	p, g, l, err := pack.ForCollective(t, devs, coll, root, tries...)
	if errors.Is(err, pack.ErrDisconnected) {
		return nil, fmt.Errorf("topo: no spanning trees over %s links: %w", links, err)
	}
	if err != nil {
		return nil, err
	}
	return &packedTrees{plan: p, graph: g, links: l}, nil
}

// devName returns the ID of the device rank r runs on.
func devName(t *topo.Topology, devs []int, r int) string { return t.Devices[devs[r]].ID }

// writePlanText describes the packing: a summary, then per tree its root,
// weight, share of size bytes, depth and edges.
func writePlanText(w io.Writer, t *topo.Topology, devs []int, pt *packedTrees, size int64) {
	p := pt.plan
	names := make([]string, len(devs))
	for r := range devs {
		names[r] = devName(t, devs, r)
	}
	fmt.Fprintf(w, "%v trees over the %s links of %s, ranks %s\n", p.Op, pt.links, t.Name, strings.Join(names, " "))
	if len(p.Trees) == 0 {
		fmt.Fprintln(w, "one rank: nothing to send")
		return
	}
	fmt.Fprintf(w, "%d trees, rate %.4g GB/s of an optimum of %.4g GB/s; %s moves in %.1f µs at that rate\n",
		len(p.Trees), p.Rate, p.Optimum, plan.FormatSize(size), float64(size)/(p.Rate*1e9)*1e6)
	shares := p.Split(int(size))
	for i, tr := range p.Trees {
		var edges []string
		for _, v := range tr.Order()[1:] {
			hop := names[tr.Parent[v]] + "->" + names[v]
			if tr.Edge[v] >= 0 && len(pt.graph.Edges[tr.Edge[v]].Path) > 2 {
				var via []string
				for _, d := range pt.graph.Edges[tr.Edge[v]].Path[1 : len(pt.graph.Edges[tr.Edge[v]].Path)-1] {
					via = append(via, t.Devices[d].ID)
				}
				hop += " (via " + strings.Join(via, ",") + ")"
			}
			edges = append(edges, hop)
		}
		fmt.Fprintf(w, "tree %d: root %s, weight %.4g GB/s, %s, depth %d: %s\n", i, names[tr.Root], tr.Weight,
			humanSize(float64(shares[i][1]-shares[i][0])), tr.Depth(), strings.Join(edges, " "))
	}
}

// humanSize writes b bytes with a binary suffix and up to four digits:
// 128M, 1.554M, 12K.
func humanSize(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.4gG", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.4gM", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.4gK", b/(1<<10))
	}
	return fmt.Sprintf("%.0f", b)
}

// writePlanDOT draws the allocation's part of t (Sub) with its links in
// grey and each tree's edges over them in a colour of its own, labelled
// with the tree's number and weight.
func writePlanDOT(w io.Writer, t *topo.Topology, devs []int, pt *packedTrees) error {
	sub, idx, err := t.Sub(devs)
	if err != nil {
		return err
	}
	p := pt.plan
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  label=%q;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n",
		t.Name, fmt.Sprintf("%v: %d trees, %.4g GB/s (%s links)", p.Op, len(p.Trees), p.Rate, pt.links))
	rank := map[int]int{}
	for r, d := range devs {
		rank[idx[d]] = r
	}
	for i, d := range sub.Devices {
		label := d.ID
		shape := "ellipse"
		if r, ok := rank[i]; ok {
			label = fmt.Sprintf("rank %d\n%s", r, d.ID)
			shape = "box"
		}
		fmt.Fprintf(&b, "  %q [shape=%s, label=%q];\n", d.ID, shape, label)
	}
	seen := map[[2]int]bool{}
	for _, l := range sub.Links {
		if l.From == l.To || seen[[2]int{l.To, l.From}] || seen[[2]int{l.From, l.To}] {
			continue
		}
		seen[[2]int{l.From, l.To}] = true
		fmt.Fprintf(&b, "  %q -> %q [dir=none, color=gray80, fontcolor=gray50, label=%q];\n",
			sub.Devices[l.From].ID, sub.Devices[l.To].ID, fmt.Sprintf("%s x%d", l.Class, l.Count))
	}
	for i, tr := range p.Trees {
		hue := float64(i) / float64(max(len(p.Trees), 1))
		for _, v := range tr.Order()[1:] {
			path := []int{devs[tr.Parent[v]], devs[v]}
			if tr.Edge[v] >= 0 && pt.graph.Edges[tr.Edge[v]].Path != nil {
				path = pt.graph.Edges[tr.Edge[v]].Path
			}
			for k := 1; k < len(path); k++ {
				fmt.Fprintf(&b, "  %q -> %q [color=\"%.3f 0.8 0.7\", penwidth=2, label=\"t%d %.3g\"];\n",
					t.Devices[path[k-1]].ID, t.Devices[path[k]].ID, hue, i, tr.Weight)
			}
		}
	}
	b.WriteString("}\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// renderSVG runs Graphviz's dot on a DOT text and writes the SVG to file.
func renderSVG(dotText []byte, file string) error {
	bin, err := osexec.LookPath("dot")
	if err != nil {
		return errors.New("topo: --svg needs Graphviz's dot, which is not installed (apt-get install graphviz); --dot writes the DOT text to render elsewhere")
	}
	cmd := osexec.Command(bin, "-Tsvg", "-o", file)
	cmd.Stdin = bytes.NewReader(dotText)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("topo: dot -Tsvg: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	fmt.Fprintf(os.Stderr, "braid topo: wrote %s\n", file)
	return nil
}

// nvmlProbe adds this host's GPUs as NVML reports them: one device per
// GPU on the NUMA node of its PCI address, a PCIe link to that node's CPU,
// its NVLinks to other GPUs, and one NVSwitch device for the GPUs whose
// links go to switches. Lane bandwidths are the nominal ones of the GPU's
// generation (NVLink 1: 20 GB/s, later 25 GB/s per direction; PCIe 3, 4
// or 5 x16); measured figures belong in a topology file.
func nvmlProbe(t *topo.Topology, host string) error {
	g, err := cuda.DiscoverGPUTopology()
	if err != nil {
		return fmt.Errorf("%w: %v", topo.ErrNoGPU, err)
	}
	if len(g.GPUs) == 0 {
		return topo.ErrNoGPU
	}
	nvGBps, pcieGBps := 25.0, 15.75
	dev := make(map[int]int)
	for _, gpu := range g.GPUs {
		switch m := gpu.Name; {
		case strings.Contains(m, "P100"):
			nvGBps = 20
		case strings.Contains(m, "H100"), strings.Contains(m, "H200"), strings.Contains(m, "H20"), strings.Contains(m, "B200"):
			pcieGBps = 63
		case strings.Contains(m, "A100"):
			pcieGBps = 31.5
		}
		numa := topo.PCINode("", strings.ToLower(gpu.BusID))
		i, err := t.AddDevice(topo.Device{ID: fmt.Sprintf("gpu%d", gpu.Index), Kind: topo.GPU, Host: host, Index: gpu.Index,
			NUMA: numa, BusID: gpu.BusID, Model: gpu.Name})
		if err != nil {
			return err
		}
		dev[gpu.Index] = i
		cpu := t.NUMANode(host, max(numa, 0))
		if cpu < 0 {
			if cpus := t.OfKind(topo.CPU); len(cpus) > 0 {
				cpu = cpus[0]
			}
		}
		if cpu >= 0 {
			if err := t.AddDuplex(i, cpu, topo.PCIe, 1, pcieGBps, 0.5); err != nil {
				return err
			}
		}
	}
	sw := -1
	for _, gpu := range g.GPUs {
		lanes := 0
		for _, l := range gpu.Links {
			if l.Remote == cuda.RemoteSwitch {
				lanes++
			}
		}
		if lanes == 0 {
			continue
		}
		if sw < 0 {
			if sw, err = t.AddDevice(topo.Device{ID: "nvswitch0", Kind: topo.NVSwitch, Host: host, NUMA: -1}); err != nil {
				return err
			}
		}
		if err := t.AddDuplex(dev[gpu.Index], sw, topo.NVLink, lanes, nvGBps, 1); err != nil {
			return err
		}
	}
	for _, pr := range g.Pairs {
		if pr.NVLinks > 0 && !pr.ViaSwitch {
			if err := t.AddDuplex(dev[pr.A], dev[pr.B], topo.NVLink, pr.NVLinks, nvGBps, 1); err != nil {
				return err
			}
		}
	}
	return nil
}
