package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/braid-ccl/braid/sched"
)

// Config holds the simulator's parameters besides the network. The zero
// value is valid: 4-byte elements, free computation and rendezvous
// messages.
type Config struct {
	// ElemSize is the size of one element in bytes; 0 means 4.
	ElemSize int
	// Gamma is the seconds to reduce one byte (Reduce, RecvReduce), as
	// cost.Model.Gamma.
	Gamma float64
	// CopyBandwidth is the bytes per second of a Copy; 0 means copies take
	// no time.
	CopyBandwidth float64
	// StepOverhead is seconds added to every message's latency and to
	// every Copy and Reduce.
	StepOverhead float64
	// Eager is the largest message, in bytes, sent eagerly: it starts
	// when its Send is posted, without waiting for its receive. 0 sends
	// every message by rendezvous, when both ends are posted.
	Eager int64
	// InPlace runs the in-place form of the call: In and Out share memory
	// as sched.Params.InPlaceAlias says, and a Copy whose source and
	// destination are then the same memory is skipped (costs
	// StepOverhead only), as the executor does.
	InPlace bool
	// Timeline records every message and computation in Result.Flows and
	// Result.Computes.
	Timeline bool
	// Start[r], if Start is not empty, is when rank r enters the
	// collective, in seconds from the simulation's time 0: the rank
	// issues nothing before it, so messages to it wait (eager ones at
	// the receiver) and its peers' steps that depend on them wait too.
	// This is a process arrival pattern, (a_0, ..., a_{n-1}) in the
	// PAP-aware collectives paper (Alizadeh et al., EuroMPI/USA 2022,
	// §2.2). Empty means every rank starts at 0; otherwise it has one
	// finite offset ≥ 0 per rank.
	Start []float64
}

// Result is what a simulation measured. Times are in seconds from the
// simulation's time 0, when every rank starts its program unless
// Config.Start delays it.
type Result struct {
	// Time is when the last rank completed its last step.
	Time float64
	// Finish[r] is when rank r completed its last step (its start time
	// for an empty program).
	Finish []float64
	// Start[r] is when rank r started: Config.Start[r], or 0.
	Start []float64
	// Links[i] is the traffic of the network's link i.
	Links []LinkStats
	// Messages is the number of messages and Bytes their total size.
	Messages int
	Bytes    int64
	// Events is the number of simulation events processed.
	Events int
	// Flows and Computes are filled when Config.Timeline is set: every
	// message in order of delivery, every computation in the order it
	// was scheduled.
	Flows    []Flow
	Computes []Compute

	timeline bool // Config.Timeline was set
}

// Latency returns rank r's time in the collective: from its start
// (Result.Start[r]) to its finish.
func (r *Result) Latency(rank int) float64 { return r.Finish[rank] - r.Start[rank] }

// AvgLatency returns the ranks' mean Latency. This is the collective's
// time as the PAP-aware collectives paper (Alizadeh et al., EuroMPI/USA
// 2022, §6.1) measures it under an arrival pattern, with OSU's
// micro-benchmarks: each process times its call from its own arrival to
// its exit (so an early rank's time includes its wait for the late ones),
// and the latency is the average over processes. It is measured from
// each rank's own arrival, neither from the first arrival nor from the
// last. With every rank starting at 0 it is the mean finish time, at most
// Time.
func (r *Result) AvgLatency() float64 {
	if len(r.Finish) == 0 {
		return 0
	}
	var sum float64
	for k := range r.Finish {
		sum += r.Latency(k)
	}
	return sum / float64(len(r.Finish))
}

// MaxLatency returns the largest Latency of any rank.
func (r *Result) MaxLatency() float64 {
	var m float64
	for k := range r.Finish {
		m = max(m, r.Latency(k))
	}
	return m
}

// AfterLast returns the time from the last rank's start to the end of
// the collective (Time): what the collective still costs once everyone
// has arrived.
func (r *Result) AfterLast() float64 {
	var last float64
	for _, t := range r.Start {
		last = max(last, t)
	}
	return r.Time - last
}

// LinkStats is the traffic of one link during a simulation.
type LinkStats struct {
	// Bytes is the total size of the messages that crossed the link.
	Bytes int64
	// Messages is how many crossed it.
	Messages int
	// Busy is the seconds during which at least one message's data was
	// moving over the link (for links of finite bandwidth).
	Busy float64
	// Utilization is Bytes / (Bandwidth × Result.Time): the share of the
	// link's capacity used over the whole run; 0 for an unlimited link.
	Utilization float64
}

// Flow is one message as it went.
type Flow struct {
	Src, Dst           int // ranks
	Channel            uint8
	Tag                int32
	SendStep, RecvStep int // step indices in the sender's and receiver's programs
	Bytes              int64
	// Posted is when the message could go: when both its Send and its
	// receive were posted, or its Send for an eager message.
	Posted float64
	// Head is when it reached the head of its connection's queue and
	// began paying its latency; Start when its data began to move; End
	// when its last byte arrived.
	Head, Start, End float64
	// Route is the links it crossed. The slice is shared: do not modify it.
	Route []int
}

// Compute is one computation on a rank: a Copy, a Reduce, or the reduction
// of a RecvReduce after its data arrived.
type Compute struct {
	Rank, Step int
	Kind       sched.Kind
	Bytes      int64
	Start, End float64
}

// Run simulates the schedule progs (progs[r] is rank r's program for p) on
// net with cfg and returns what it measured. See the package documentation
// for the model.
//
// Run checks what the simulation relies on: one program per rank, steps of
// known kinds, peers in range, Deps naming earlier steps, every Send matched
// by exactly one Recv or RecvReduce of the same length and the other way
// round, and a route for every pair that exchanges messages. It does not run
// sched.Validate (which also checks memory). A schedule that cannot finish
// gives an error that names the steps each stuck rank waits for. Run stops
// with ctx's error if ctx ends first.
func Run(ctx context.Context, p sched.Params, progs []sched.Program, net *Network, cfg Config) (*Result, error) {
	if err := sched.CheckParams(p); err != nil {
		return nil, err
	}
	if len(progs) != p.NRanks {
		return nil, fmt.Errorf("sim: %d programs for %d ranks", len(progs), p.NRanks)
	}
	if net == nil || net.NRanks() != p.NRanks {
		have := 0
		if net != nil {
			have = net.NRanks()
		}
		return nil, fmt.Errorf("sim: network of %d ranks for %d ranks", have, p.NRanks)
	}
	if cfg.ElemSize == 0 {
		cfg.ElemSize = 4
	}
	switch {
	case cfg.ElemSize < 0:
		return nil, fmt.Errorf("sim: element size %d", cfg.ElemSize)
	case !(cfg.Gamma >= 0) || math.IsInf(cfg.Gamma, 0):
		return nil, fmt.Errorf("sim: γ=%g s/B is not valid", cfg.Gamma)
	case !(cfg.CopyBandwidth >= 0):
		return nil, fmt.Errorf("sim: copy bandwidth %g B/s is not valid", cfg.CopyBandwidth)
	case !(cfg.StepOverhead >= 0) || math.IsInf(cfg.StepOverhead, 0):
		return nil, fmt.Errorf("sim: step overhead %g s is not valid", cfg.StepOverhead)
	case cfg.Eager < 0:
		return nil, fmt.Errorf("sim: eager limit %d B is negative", cfg.Eager)
	case len(cfg.Start) != 0 && len(cfg.Start) != p.NRanks:
		return nil, fmt.Errorf("sim: %d start offsets for %d ranks", len(cfg.Start), p.NRanks)
	}
	for r, t := range cfg.Start {
		if !(t >= 0) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("sim: start offset %g s of rank %d is not a finite time ≥ 0", t, r)
		}
	}
	e, err := newEngine(p, progs, net, cfg)
	if err != nil {
		return nil, err
	}
	if err := e.run(ctx); err != nil {
		return nil, err
	}
	return e.result(), nil
}

// stepError describes step i of rank r.
func stepError(r, i int, s *sched.Step, format string, args ...any) error {
	return fmt.Errorf("sim: rank %d step %d (%v): %s", r, i, s, fmt.Sprintf(format, args...))
}

// errs collects up to maxErrs errors.
type errs struct {
	list    []error
	dropped int
}

const maxErrs = 10

func (l *errs) add(err error) {
	if len(l.list) < maxErrs {
		l.list = append(l.list, err)
	} else {
		l.dropped++
	}
}

func (l *errs) err() error {
	if l.dropped > 0 {
		l.list = append(l.list, fmt.Errorf("sim: and %d more problems", l.dropped))
	}
	return errors.Join(l.list...)
}

// deadlock explains why the schedule stopped with steps left: for each
// stuck rank, the step it cannot issue and what that step waits for.
func (e *engine) deadlock() error {
	var l errs
	for r := range e.progs {
		if e.left[r] == 0 {
			continue
		}
		steps := e.progs[r].Steps
		i := e.next[r]
		var b strings.Builder
		fmt.Fprintf(&b, "sim: deadlock at t=%.9g s: rank %d", e.now, r)
		if i < len(steps) {
			fmt.Fprintf(&b, " cannot issue step %d (%v)", i, &steps[i])
			for _, d := range steps[i].Deps {
				if !e.isDone(r, int(d)) {
					fmt.Fprintf(&b, "; it waits for step %d (%v)", d, &steps[d])
					e.explain(&b, r, int(d))
					break
				}
			}
		} else {
			for d := range steps {
				if !e.isDone(r, d) {
					fmt.Fprintf(&b, " has issued every step but step %d (%v) has not completed", d, &steps[d])
					e.explain(&b, r, d)
					break
				}
			}
		}
		l.add(errors.New(b.String()))
	}
	return l.err()
}

// explain says what incomplete step d of rank r waits for.
func (e *engine) explain(b *strings.Builder, r, d int) {
	m := e.msgOf[e.base[r]+d]
	if m < 0 {
		return
	}
	msg := &e.msgs[m]
	if int(msg.send.rank) == r {
		if !msg.recvPosted {
			fmt.Fprintf(b, ", whose receive, rank %d step %d, was never posted", msg.recv.rank, msg.recv.step)
		}
	} else if !msg.sendPosted {
		fmt.Fprintf(b, ", whose send, rank %d step %d, was never posted", msg.send.rank, msg.send.step)
	}
}
