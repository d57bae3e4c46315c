package sim

import (
	"context"
	"fmt"

	"github.com/braid-ccl/braid/sched"
)

// MessageTime returns the simulated one-way time, in seconds, of one
// point-to-point message of bytes bytes between ranks a and b of net: half
// the round trip of a ping-pong, a sending to b on channel 0 and b sending
// the message back once it has arrived, every other rank idle. This is α
// of the PAP-aware collectives paper (Alizadeh et al., EuroMPI/USA 2022,
// §2.2), the time of one message of the collective's size, as braid bench
// --imbalance measures it on ranks 0 and 1. It follows the simulator's
// model of a message (see the package documentation): on routes of one
// latency and bandwidth each way it is the route's latency plus
// cfg.StepOverhead plus bytes over the route's bottleneck bandwidth.
// cfg.Start and cfg.Timeline are ignored; cfg.ElemSize is not used (the
// message is bytes long).
func MessageTime(ctx context.Context, net *Network, cfg Config, a, b int, bytes int64) (float64, error) {
	switch {
	case net == nil:
		return 0, fmt.Errorf("sim: message time on no network")
	case a < 0 || b < 0 || a >= net.NRanks() || b >= net.NRanks():
		return 0, fmt.Errorf("sim: message between ranks %d and %d of %d", a, b, net.NRanks())
	case a == b:
		return 0, fmt.Errorf("sim: message from rank %d to itself", a)
	case bytes < 0 || int64(int(bytes)) != bytes:
		return 0, fmt.Errorf("sim: message of %d bytes", bytes)
	}
	n := net.NRanks()
	p := sched.Params{Coll: sched.Allreduce, NRanks: n, Count: int(bytes)}
	progs := make([]sched.Program, n)
	for r := range progs {
		progs[r].Rank = r
	}
	buf := sched.Chunk{Buf: sched.In, Len: int(bytes)}
	pa, pb := sched.NewBuilder(a), sched.NewBuilder(b)
	pa.Send(b, 0, buf)
	pa.Recv(b, 1, buf)
	got := pb.Recv(a, 0, buf)
	pb.Send(a, 1, buf, got)
	progs[a], progs[b] = pa.P, pb.P
	cfg.ElemSize, cfg.Start, cfg.Timeline = 1, nil, false
	res, err := Run(ctx, p, progs, net, cfg)
	if err != nil {
		return 0, err
	}
	return res.Time / 2, nil
}
