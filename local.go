package braid

import (
	"context"
	"fmt"
	"log"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/inproc"
	"github.com/braid-ccl/braid/transport/shmcoll"
)

// NewLocal returns a job of n ranks that are goroutines of this process,
// one communicator per rank, connected in memory. It is what tests and
// single-process experiments use; every call on comms[r] must come from a
// different goroutine per rank, as with processes.
func NewLocal(n int, opts *Options) ([]*Comm, error) {
	if n < 1 {
		return nil, argError(-1, "newlocal", "rank count %d: want ≥ 1", n)
	}
	o, err := opts.resolve(os.Getenv)
	if err == nil {
		err = o.placeRanks(n)
	}
	if err != nil {
		return nil, &Error{Kind: InvalidArgument, Rank: -1, Call: "newlocal", Peer: -1, Err: err}
	}
	t := inproc.New(n)
	comms := make([]*Comm, n)
	job, secret := fmt.Sprintf("local-%d-%d", os.Getpid(), localJobs.Add(1)), aggSecretOf()
	hosts := make([]string, n)
	host := o.Host
	if host == "" {
		host = "local"
	}
	for i := range hosts {
		hosts[i] = host
	}
	if o.LocalHosts != nil {
		if len(o.LocalHosts) != n {
			return nil, argError(-1, "newlocal", "Options.LocalHosts names %d hosts for %d ranks", len(o.LocalHosts), n)
		}
		copy(hosts, o.LocalHosts)
	}
	// Goroutine ranks of one host share an area in memory.
	var groups []*shmcoll.Group
	areas := &localAreas{m: map[uint32]*localArea{}}
	if o.LocalHosts == nil {
		// Goroutine ranks are for tests and experiments, which make many
		// jobs: small slots unless told otherwise.
		slot := o.SharedSlot
		if slot == 0 {
			slot = localSlot
		}
		groups, err = shmcoll.NewLocal(n, areaOptions(slot, n, runtime.GOMAXPROCS(0)))
		if err != nil {
			return nil, &Error{Kind: Internal, Rank: -1, Call: "newlocal", Peer: -1, Err: err}
		}
	}
	clk := newClock() // one process: one clock, whatever hosts the ranks claim
	regs := localRegistries(n)
	for r := range n {
		w := &world{rank: r, size: n, opts: o, model: o.model(), hosts: hosts,
			conns: make([]transport.Conn, n), logger: log.New(o.Log, "braid: ", log.Lmicroseconds), clock: clk}
		w.agg.job, w.agg.secret = job, secret
		w.reg = regs[r]
		m, err := t.Connect(context.Background(), transport.Config{Self: transport.Endpoint{Rank: r}, World: n, Lost: w.lost, Unexpected: w.unexpected})
		if err != nil {
			return nil, err
		}
		w.meshes = []transport.Mesh{m}
		for p := range n {
			if p != r {
				w.conns[p] = m.Conn(p)
			}
		}
		comms[r] = newComm(w, 1, r, identity(n))
		comms[r].root = true
		w.startProfile()
		w.startFlight()
		if groups != nil {
			comms[r].setNode(groups[r])
			w.localAreas = areas
		}
	}
	return comms, nil
}

// localJobs numbers the jobs of NewLocal, which name them to aggregation
// daemons.
var localJobs atomic.Int64

// localSlot is the shared area's slot of goroutine ranks (NewLocal).
const localSlot = 64 << 10

func identity(n int) []int {
	m := make([]int, n)
	for i := range m {
		m[i] = i
	}
	return m
}
