package algo

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/braid-ccl/braid/sched"
)

// DynamicAlgorithm is an algorithm that decides as messages arrive
// (sched.Dynamic): it has no Program, the executor runs it
// (exec.RunDynamic). Dynamic algorithms have their own registry, apart
// from the schedules' (ForCollective, Lookup), so that what generates,
// validates and simulates schedules never meets one by surprise; Trace
// gives their schedule for a known order of arrival.
type DynamicAlgorithm interface {
	Name() string
	Collective() sched.Collective
	Supports(p sched.Params) error
	sched.Dynamic
}

var dynamics struct {
	sync.RWMutex
	byColl map[sched.Collective][]DynamicAlgorithm
}

// RegisterDynamic adds a to the registry of dynamic algorithms; it panics
// on a name that a schedule or another dynamic algorithm of the
// collective has.
func RegisterDynamic(a DynamicAlgorithm) {
	c := a.Collective()
	if _, err := Lookup(c, a.Name()); err == nil {
		panic(fmt.Sprintf("algo: RegisterDynamic: %v algorithm %q is a schedule's name", c, a.Name()))
	}
	dynamics.Lock()
	defer dynamics.Unlock()
	if dynamics.byColl == nil {
		dynamics.byColl = map[sched.Collective][]DynamicAlgorithm{}
	}
	for _, b := range dynamics.byColl[c] {
		if b.Name() == a.Name() {
			panic(fmt.Sprintf("algo: RegisterDynamic: %v algorithm %q registered twice", c, a.Name()))
		}
	}
	l := append(dynamics.byColl[c], a)
	slices.SortFunc(l, func(x, y DynamicAlgorithm) int { return cmp.Compare(x.Name(), y.Name()) })
	dynamics.byColl[c] = l
}

// Dynamics returns the dynamic algorithms of c, sorted by name.
func Dynamics(c sched.Collective) []DynamicAlgorithm {
	dynamics.RLock()
	defer dynamics.RUnlock()
	return slices.Clone(dynamics.byColl[c])
}

// LookupDynamic returns the dynamic algorithm of c named name, or nil.
func LookupDynamic(c sched.Collective, name string) DynamicAlgorithm {
	for _, a := range Dynamics(c) {
		if a.Name() == name {
			return a
		}
	}
	return nil
}

// ArrivalPrograms returns every rank's program of a when the ranks arrive
// in order: the schedule the validator and the simulator see.
func ArrivalPrograms(a DynamicAlgorithm, p sched.Params, order []int) []sched.Program {
	progs := make([]sched.Program, p.NRanks)
	for r := range progs {
		progs[r] = a.Trace(p, r, order)
	}
	return progs
}

func init() {
	RegisterDynamic(papChainAlgo{base{"papchain", sched.Reduce}})
	RegisterDynamic(papChainAlgo{base{"papchain", sched.Allreduce}})
}

// papChainAlgo is the Large-PAP-aware reduce of "Efficient Process Arrival
// Pattern Aware Collective Communication for Deep Learning" (Alizadeh et
// al., EuroMPI/USA 2022, Algorithm 2) over messages, and the allreduce
// built from it with a broadcast (§5.2): the ranks form a chain in the
// order in which they arrive; each combines its predecessor's partial
// result with its input and passes it on; the last passes the result to
// the root. A rank waits only for the ranks that arrived before it, never
// for later ones (but the root, and, in the allreduce, every rank for the
// broadcast).
//
// Without a shared memory to take a place in line from (the shared area's
// version, transport/shmcoll's ReducePAP, counts arrivals with one word),
// the root keeps the line: every other rank tells it that it arrived; the
// root answers each with its predecessor, and tells the predecessor its
// successor. Three control words a rank, which the early ranks send and
// receive while they would wait anyway. The allreduce reduces to rank 0
// and broadcasts from it (binomial tree). Results are the same on every
// rank (one chain combines); the order of combination, that of arrival,
// changes from call to call.
type papChainAlgo struct{ base }

// Tags of the chain's messages.
const (
	papArrive int32 = iota + 1 // rank → root: arrived
	papPred                    // root → rank: predecessor + 1 (0: first)
	papSucc                    // root → rank: successor + 1 (the root when last)
	papData                    // rank → successor: the partial result
	papBcast                   // the allreduce's broadcast
)

func (a papChainAlgo) Supports(p sched.Params) error { return a.base.Supports(p) }

func (papChainAlgo) TmpLen(p sched.Params, rank int) int { return p.Count }

func (a papChainAlgo) root(p sched.Params) int {
	if a.coll == sched.Allreduce {
		return 0
	}
	return p.Root
}

// Run implements sched.Dynamic.
func (a papChainAlgo) Run(p sched.Params, rank int, x sched.Exec) error {
	n, c, root := p.NRanks, p.Count, a.root(p)
	in, out, tmp := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}, sched.Chunk{Buf: sched.Tmp, Len: c}
	all := allRanks(n)[0]
	if err := chainRun(x, all, root, rank, in, out, tmp); err != nil {
		return err
	}
	if a.coll == sched.Allreduce {
		return bcastRun(x, all, root, rank, out, papBcast)
	}
	return nil
}

// chainRun is rank's part of the arrival-ordered chain among members
// (which hold rank and root): the result goes to root's out; the others'
// partial results pass through tmp.
func chainRun(x sched.Exec, members []int, root, rank int, in, out, tmp sched.Chunk) error {
	if len(members) == 1 {
		x.Copy(in, out)
		return nil
	}
	if rank == root {
		return keepLine(x, members, root, in, out)
	}
	x.SendWord(root, papArrive, 0)
	hp := x.RecvWord(root, papPred)
	if err := x.Wait(hp); err != nil {
		return err
	}
	pred := int(x.Word(hp)) - 1
	part, hr := in, sched.Handle(-1)
	if pred >= 0 {
		x.Copy(in, tmp)
		part, hr = tmp, x.RecvReduce(pred, papData, tmp)
	}
	hs := x.RecvWord(root, papSucc)
	if err := x.Wait(hs); err != nil {
		return err
	}
	if hr >= 0 {
		if err := x.Wait(hr); err != nil {
			return err
		}
	}
	return x.Wait(x.Send(int(x.Word(hs))-1, papData, part))
}

// keepLine is the root's part: it orders the arrivals of members, answers
// them, and takes its own place in the chain when it arrives itself.
func keepLine(x sched.Exec, members []int, root int, in, out sched.Chunk) error {
	n := len(members)
	var waits []sched.Handle
	var who []int
	for _, q := range members {
		if q != root {
			waits = append(waits, x.RecvWord(q, papArrive))
			who = append(who, q)
		}
	}
	order := make([]int, 0, n)
	recv, send := sched.Handle(-1), sched.Handle(-1) // the root's own chain step
	add := func(q int) error {
		k := len(order)
		order = append(order, q)
		prev := -1
		if k > 0 {
			prev = order[k-1]
		}
		if q == root {
			x.Copy(in, out)
			if prev >= 0 {
				recv = x.RecvReduce(prev, papData, out)
				x.SendWord(prev, papSucc, uint64(root+1))
			}
			return nil
		}
		x.SendWord(q, papPred, uint64(prev+1))
		if prev == root {
			if recv >= 0 {
				if err := x.Wait(recv); err != nil {
					return err
				}
			}
			send = x.Send(q, papData, out)
		} else if prev >= 0 {
			x.SendWord(prev, papSucc, uint64(q+1))
		}
		return nil
	}
	// The ranks whose word is here already arrived before the root.
	waits, who, err := takeArrived(x, waits, who, add)
	if err != nil {
		return err
	}
	if err := add(root); err != nil {
		return err
	}
	for len(waits) > 0 {
		i, err := x.WaitAny(waits)
		if err != nil {
			return err
		}
		if err := add(who[i]); err != nil {
			return err
		}
		waits, who = slices.Delete(waits, i, i+1), slices.Delete(who, i, i+1)
	}
	last := order[n-1]
	if last == root {
		if recv >= 0 {
			return x.Wait(recv)
		}
		return nil
	}
	x.SendWord(last, papSucc, uint64(root+1))
	if send >= 0 {
		if err := x.Wait(send); err != nil {
			return err
		}
	}
	return x.Wait(x.Recv(last, papData, out))
}

// bcastRun broadcasts out from root to members down a binomial tree.
func bcastRun(x sched.Exec, members []int, root, rank int, out sched.Chunk, tag int32) error {
	m := len(members)
	ri := slices.Index(members, root)
	v := (slices.Index(members, rank) - ri + m) % m
	at := func(j int) int { return members[(j+ri)%m] }
	mask := 1
	for ; mask < m; mask <<= 1 {
		if v&mask != 0 {
			if err := x.Wait(x.Recv(at(v-mask), tag, out)); err != nil {
				return err
			}
			break
		}
	}
	var hs []sched.Handle
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < m {
			hs = append(hs, x.Send(at(v+mask), tag, out))
		}
	}
	for _, h := range hs {
		if err := x.Wait(h); err != nil {
			return err
		}
	}
	return nil
}

// Trace implements sched.Dynamic: the chain's data for the given order.
func (a papChainAlgo) Trace(p sched.Params, rank int, order []int) sched.Program {
	n, c, root := p.NRanks, p.Count, a.root(p)
	g := sched.NewBuilder(rank)
	g.P.TmpLen = c
	in, out, tmp := sched.Chunk{Buf: sched.In, Len: c}, sched.Chunk{Buf: sched.Out, Len: c}, sched.Chunk{Buf: sched.Tmp, Len: c}
	all := allRanks(n)[0]
	last := chainTrace(g, all, root, rank, order, in, out, tmp)
	if a.coll == sched.Allreduce {
		bcastTrace(g, all, root, rank, out, papBcast, last)
	}
	if a.coll == sched.Allreduce || rank == root {
		g.P.Final = []sched.Chunk{out}
	}
	return g.P
}

// chainTrace adds rank's steps of the chain among members in the order
// of arrival order (which may hold other ranks too) and returns its last
// step.
func chainTrace(g *sched.Builder, members []int, root, rank int, order []int, in, out, tmp sched.Chunk) int32 {
	if len(members) == 1 {
		return g.Copy(in, out)
	}
	var line []int
	for _, q := range order {
		if slices.Contains(members, q) {
			line = append(line, q)
		}
	}
	n := len(line)
	pos := slices.Index(line, rank)
	if rank == root {
		last := g.Copy(in, out)
		if pos > 0 {
			last = g.RecvReduce(line[pos-1], papData, out, last)
		}
		if pos < n-1 {
			s := g.Send(line[pos+1], papData, out, last)
			last = g.Recv(line[n-1], papData, out, s)
		}
		return last
	}
	part, dep := in, int32(-1)
	if pos > 0 {
		cp := g.Copy(in, tmp)
		part, dep = tmp, g.RecvReduce(line[pos-1], papData, tmp, cp)
	}
	succ := root
	if pos < n-1 {
		succ = line[pos+1]
	}
	return g.Send(succ, papData, part, dep)
}

// bcastTrace adds rank's steps of bcastRun after steps deps.
func bcastTrace(g *sched.Builder, members []int, root, rank int, out sched.Chunk, tag int32, deps ...int32) {
	m := len(members)
	ri := slices.Index(members, root)
	v := (slices.Index(members, rank) - ri + m) % m
	at := func(j int) int { return members[(j+ri)%m] }
	mask := 1
	for ; mask < m; mask <<= 1 {
		if v&mask != 0 {
			deps = []int32{g.Recv(at(v-mask), tag, out, deps...)}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < m {
			g.Send(at(v+mask), tag, out, deps...)
		}
	}
}

// takeArrived passes got, in order, every rank of who whose arrival word
// (the receive of the same index in waits) is in, and returns waits and who
// without them; it does not wait.
func takeArrived(x sched.Exec, waits []sched.Handle, who []int, got func(q int) error) ([]sched.Handle, []int, error) {
	for i := 0; i < len(waits); {
		done, err := x.Test(waits[i])
		if err != nil {
			return waits, who, err
		}
		if !done {
			i++
			continue
		}
		if err := got(who[i]); err != nil {
			return waits, who, err
		}
		waits, who = slices.Delete(waits, i, i+1), slices.Delete(who, i, i+1)
	}
	return waits, who, nil
}
