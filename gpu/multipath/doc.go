// Package multipath copies buffers from one GPU to another over two paths
// at once, the direct peer copy and a copy staged through pinned host
// memory in chunks (Algorithm 4.1 of Temuçin's MASc thesis, Queen's
// University 2021), measures the split at every size (Measure, Summarize,
// Choose), and reads and writes the table of splits that braid tune
// --device cuda --multipath writes (Table). A device communicator given a
// table (BRAID_GPU_MULTIPATH) sends the table's share of its fused
// kernels' large allreduces and broadcasts through host memory (package
// gpu/fused); the copier itself reaches the GPUs through package cuda.
//
// # Example
//
//	m, err := multipath.NewCopier(ctx, w0, w1, 64<<20, 16)
//	if err != nil {
//		return err
//	}
//	defer m.Close(ctx)
//	share, chunks := table.Lookup(n) // (0, 1): the peer copy alone
//	split, err := m.Copy(ctx, dst, src, n, share, chunks)
package multipath
