// Package topo describes the machines Braid runs on: a graph of devices
// (GPUs, CPUs as NUMA nodes, NICs, PCIe switches, NVSwitches, network
// switches) grouped by host, joined by directed links that carry a class
// (NVLink, PCIe, inter-socket X-Bus/QPI/UPI, shared memory, network), a
// lane count for bonded parallel links, a bandwidth and a latency.
//
// Units: bandwidth in GB/s (10^9 bytes per second) per lane and per
// direction, latency in microseconds; Link.Cost converts a link to the
// α-β model of package cost (seconds, bytes per second). A physical
// duplex link is two directed Links (AddDuplex).
//
// A topology comes from one of three places:
//
//   - Discover reads this host from sysfs (NUMA nodes, their CPUs, NICs)
//     and asks a GPUProbe, where NVML plugs in, for the GPUs;
//   - Load reads a JSON file (the format is described at Parse), which
//     is what BRAID_TOPO names and what WriteJSON and Save write, so a
//     machine can be dumped, carried in a bug report and planned for
//     anywhere;
//   - the presets: DGX1P100, DGX1V100, DGX2, HGXH200, Mist, Cedar, and
//     clusters of any of them on a switched network (Cluster, Join,
//     Preset("2xdgx1-v100")).
//
// Sub cuts out the part of a machine an allocation of GPUs can use, Route
// finds the path a transfer takes, Layout gives the sched.Layout of ranks
// placed on devices, and WriteText and WriteDOT draw a topology.
//
// Example, the NVLinks of a DGX-1 V100 allocation:
//
//	t := topo.DGX1V100()
//	gpus := t.GPUs()
//	sub, idx, err := t.Sub([]int{gpus[1], gpus[4], gpus[5], gpus[6]})
//	if err != nil { ... }
//	fmt.Println(sub.Lanes(idx[gpus[5]], idx[gpus[6]], topo.NVLink)) // 2
//	sub.WriteDOT(os.Stdout)
//
// topo imports only sched and cost of Braid.
package topo
