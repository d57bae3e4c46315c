// Package transporttest is the conformance suite that every Braid
// transport runs: matching and ordering, zero-length and 64 MiB messages,
// many outstanding requests, mismatches, the Unexpected and Lost hooks,
// Abort, Close, concurrency and the Done channel. It also has MemKV, an
// in-memory transport.KV, and Connect, which connects n ranks of a
// transport as goroutines of the test process.
//
// Example, in a transport's tests:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.FactoryFor(mytransport.New()))
//	}
//
// A transport whose meshes are not made by Connect writes its own Factory:
//
//	transporttest.Run(t, func(t *testing.T, n int, h transporttest.Hooks) []transport.Mesh {
//		return makeMeshes(n, h.Lost, h.Unexpected)
//	})
//
// Peer death of a real process is not covered: each transport tests it with
// processes of its own.
package transporttest
