// Package emulate imposes a network's bandwidth and latency on any
// transport, so that schedules planned for a machine this host is not (a
// DGX-1's NVLinks, a cluster's network) run for real here at that
// machine's relative speeds.
//
// A Network is links (bandwidth in bytes per second, latency) and, for
// each ordered pair of ranks, the links their messages cross; Pairs makes
// one with a link per pair. An Emulator keeps one token bucket per link,
// shared by every message that crosses it from any rank: a send is handed
// to the wrapped transport only when its route would have delivered it,
// so the receive completes then. Wrap decorates one rank's Mesh, and
// Transport a whole transport.Transport.
//
// The figures are plain numbers: package sim or topo can provide them
// (a sim.Network's links and routes map one to one), but emulate imports
// only transport. To emulate links faster than this host can copy, scale
// time: divide every bandwidth and multiply every latency by the same
// factor, and the measured times are the emulated machine's times by that
// factor.
//
// Example, four goroutine ranks on 1 GB/s links with 10 µs latency:
//
//	bw := [][]float64{...}        // 4×4, 1e9 off the diagonal
//	lat := [][]time.Duration{...} // 4×4, 10 * time.Microsecond off the diagonal
//	net, _ := emulate.Pairs(bw, lat)
//	em, _ := emulate.New(net)
//	meshes := inproc.NewWorld(4, nil)
//	m0 := em.Wrap(0, meshes[0])  // rank 0's view, held back by the links
//
// emulate imports only transport.
package emulate
