// Package exec runs one rank's schedule program. It is the single point
// every program passes through, on the host and on GPUs: one dependency
// loop starts the program's steps in order once the steps they depend on
// have completed, lets steps complete out of order, waits the Braid way
// (spin, yield, block: transport.Backoff, with Env's parameters) without
// ever waiting forever, reports stalls (Env.Stall), and ends at ctx's end,
// Env.Deadline, Env.Timeout or Env.Fail with a StepError naming the step
// it failed at or waited for.
//
// What a step does is a backend's. Run's backend is the executor's own:
// sends and receives over transports (Env.Conn) on host memory, combined
// with the host reduction kernels; the loop calls it directly, with no
// indirect call per step. Drive runs the same loop over any Backend:
// package gpu's moves data with copies on CUDA streams, reduction
// kernels, interprocess events and notices between the ranks' executors.
// RunDynamic runs dynamic algorithms (sched.Dynamic) over transports with
// the same environment.
//
// Example:
//
//	err := exec.Run(ctx, &prog, &exec.Env{Conn: conns, Tag: base, Fail: comm.failed},
//		exec.Buffers{In: in, Out: out, DType: dtype.Float32, Op: dtype.Sum, NRanks: n})
package exec
