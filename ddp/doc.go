// Package ddp is data-parallel training on Braid: it averages each step's
// gradients across the ranks of a communicator, fusing small gradients
// into larger allreduces and starting each one as soon as its gradients
// are ready, so that communication overlaps the rest of the backward pass.
// It knows nothing of any framework: gradients are Go slices
// ([]float32, []float64, []braid.Half, []braid.BF16) or braid.Raw, which
// a framework can point at its own memory.
//
// A training loop registers its gradient buffers once, broadcasts the
// initial parameters from rank 0, and then, each step, tells the Reducer
// which gradients are written and waits for the averages:
//
//	grads := []any{gradW1, gradB1, gradW2, gradB2}
//	r, err := ddp.New(ctx, comm, grads, nil)
//	if err != nil { ... }
//	defer r.Close()
//	err = ddp.Broadcast(ctx, comm, []any{w1, b1, w2, b2}, 0)
//	for step := range steps {
//		forward()
//		backward(func(i int) { r.Ready(i) }) // as each gradient is written
//		err = r.Wait(ctx)                    // every gradient now holds the average
//		apply()
//	}
//
// A framework that produces all gradients at once (one compiled graph)
// calls Wait alone, which marks every gradient ready.
//
// # Tensor fusion
//
// The Reducer follows Horovod's tensor fusion (Sergeev and Del Balso,
// "Horovod: fast and easy distributed deep learning in TensorFlow", 2018;
// described in Temuçin, "High-Performance Interconnect-Aware MPI
// Communication for Deep Learning Workloads", MASc thesis, Queen's
// University 2021, §2.5.2). A background loop runs in cycles: each cycle
// it agrees with the other ranks on which gradients are ready everywhere
// (an allreduce of a bit mask with bitwise and, the 8-byte BAND messages
// that the thesis finds in Horovod's profiles, §3), packs those of one
// element type into fusion buffers of at most FusionThreshold bytes (64
// MiB, Horovod's default until v0.21), and starts a non-blocking
// allreduce (Comm.IAllreduce) on each. A gradient larger than the
// threshold, or one alone in its bucket, is reduced in place without a
// copy. Cycles start CycleTime apart (5 ms, Horovod's default until
// v0.21), so that gradients that become ready close together travel
// together; a cycle starts at once when every gradient of the step is
// ready here, since waiting can then fuse nothing more.
//
// Because the ranks agree on the ready set before any gradient moves,
// every rank makes the same calls in the same order, whatever the order
// and timing in which its own gradients become ready. The Reducer makes
// its calls on a communicator of its own (split from the one given to
// New), so the training loop may use the original one meanwhile.
package ddp
