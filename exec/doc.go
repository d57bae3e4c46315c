// Package exec runs one rank's schedule program over transports. It is the
// single point every collective passes through: it issues the program's
// steps in order, lets sends and receives complete out of order, combines
// received data with the host reduction kernels, and waits the Braid way
// (spin, yield, block) without ever waiting forever.
//
// Example:
//
//	err := exec.Run(ctx, &prog, &exec.Env{Conn: conns, Tag: base, Fail: comm.failed},
//		exec.Buffers{In: in, Out: out, DType: dtype.Float32, Op: dtype.Sum, NRanks: n})
package exec
