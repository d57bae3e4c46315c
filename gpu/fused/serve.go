package fused

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/internal/dtype"
)

// The resident allreduce's bell (kernels/layout.cuh, BELL_*): mapped
// pinned host memory of BellWords 32-bit words, a 64-byte line each for
// the call (from word BellArgs: in, out, n and the timeout in nanoseconds,
// each a 16-byte record that Ring writes), the ticket of the last call
// the kernel ran (BellDone), the epoch of the kernel that ended
// (BellExited), and an epoch the host asks to end (BellQuit).
const (
	BellArgs   = 0
	BellDone   = 16
	BellExited = 32
	BellQuit   = 48
	BellWords  = 64
)

// Ring writes a call into bell (BellWords words of the bell's host
// memory): each argument as a record { low word, ticket, high word,
// ticket } of two 8-byte atomic stores, so that the kernel, which reads
// each record in one 16-byte load, knows the call whole once every record
// carries ticket twice. ticket is the last call's plus 1.
func Ring(bell []byte, ticket uint32, in, out cuda.DevicePtr, n int, timeout time.Duration) {
	t := uint64(ticket) << 32
	for i, v := range [4]uint64{uint64(in), uint64(out), uint64(n), uint64(max(timeout, 0))} {
		rec := bell[4*BellArgs+16*i:]
		(*atomic.Uint64)(unsafe.Pointer(&rec[0])).Store(v&0xffffffff | t)
		(*atomic.Uint64)(unsafe.Pointer(&rec[8])).Store(v>>32 | t)
	}
}

// Server is the resident low-latency allreduce (kernels/serve.cuh,
// braid_llserve_<op>_<type>): one block that stays on the GPU and runs
// the OneShotLL allreduces of DType and Op that the host rings in, with
// the sequence counters, lines and status word of the communicator's
// other fused kernels.
type Server struct {
	DType dtype.DType
	Op    dtype.Op
	// Bell is the bell's device address (BellWords words of mapped
	// pinned host memory).
	Bell cuda.DevicePtr
	// Served is the last ticket run before this kernel starts; the first
	// call it runs is Served+1.
	Served uint32
	// Epoch names this kernel in BellQuit and BellExited.
	Epoch uint32
	// Idle ends the kernel after this long without a call; 0 never.
	Idle      time.Duration
	Seqs      cuda.DevicePtr
	Rank      int
	Regions   []cuda.DevicePtr
	SlotBytes int
	Status    cuda.DevicePtr
}

// serveArgs are braid_llserve_<op>_<type>'s parameters, in order.
type serveArgs struct {
	Bell      cuda.DevicePtr           `cu:"bell"`
	Served    uint32                   `cu:"served"`
	Epoch     uint32                   `cu:"epoch"`
	IdleNS    uint64                   `cu:"idle_ns"`
	Seqs      cuda.DevicePtr           `cu:"seqs"`
	Rank      uint32                   `cu:"rank"`
	NRanks    uint32                   `cu:"nranks"`
	SlotBytes uint64                   `cu:"slot_bytes"`
	Status    cuda.DevicePtr           `cu:"status"`
	Regions   [MaxRanks]cuda.DevicePtr `cu:"r"`
}

func (p *serveArgs) pack(dst []uint64) []uint64 {
	dst = append(dst, uint64(p.Bell), uint64(p.Served), uint64(p.Epoch), p.IdleNS, uint64(p.Seqs), uint64(p.Rank),
		uint64(p.NRanks), p.SlotBytes, uint64(p.Status))
	for _, r := range p.Regions {
		dst = append(dst, uint64(r))
	}
	return dst
}

func (v *Server) args() *serveArgs {
	a := &serveArgs{Bell: v.Bell, Served: v.Served, Epoch: v.Epoch, IdleNS: uint64(max(v.Idle, 0)), Seqs: v.Seqs,
		Rank: uint32(v.Rank), NRanks: uint32(len(v.Regions)), SlotBytes: uint64(v.SlotBytes), Status: v.Status}
	copy(a.Regions[:], v.Regions)
	return a
}

// LaunchServer starts v on s, a stream of its own that nothing else
// waits for (the kernel runs until it ends: Server). It checks v first.
func LaunchServer(c *cuda.Ctx, s cuda.Stream, v Server) error {
	n := len(v.Regions)
	switch {
	case !dtype.Supports(v.DType, v.Op):
		return fmt.Errorf("fused: resident allreduce: op %v is not defined on %v", v.Op, v.DType)
	case n < 2 || n > MaxRanks || v.Rank < 0 || v.Rank >= n:
		return fmt.Errorf("fused: resident allreduce: rank %d of %d (2 to %d ranks)", v.Rank, n, MaxRanks)
	case v.Bell == 0 || v.Seqs == 0 || v.Status == 0:
		return fmt.Errorf("fused: resident allreduce: no bell, counters or status word")
	case v.SlotBytes%256 != 0:
		return fmt.Errorf("fused: resident allreduce: slots of %d bytes", v.SlotBytes)
	}
	if err := c.LoadKernels(); err != nil {
		return err
	}
	f, err := c.Kernel("llserve", v.DType, v.Op)
	if err != nil {
		return err
	}
	var buf [maxArgs]uint64
	return c.Launch(f, cuda.D1(1), cuda.D1(Threads), 0, s, v.args().pack(buf[:0])...)
}
