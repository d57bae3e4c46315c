package schedtest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/braid-ccl/braid/sched"
)

// Run executes the schedule progs (progs[r] is rank r's program for p) on the
// inputs in (in[r] holds p.InLen(r) elements; Run does not modify it) with
// the sum operator and returns every rank's output buffer (p.OutLen(r)
// elements each).
//
// When inPlace is true, each rank's In and Out share memory as the in-place
// call of p defines (see sched.Params.InPlaceAlias). Out and Tmp start filled
// with NaN, so an element a program forgets to write shows. Run validates
// the schedule first and returns sched.Validate's error if it fails.
//
// Run picks among the steps that may proceed in a fixed pseudo-random order:
// a Send's data moves at some moment after both it and its receive have
// started, a Copy or Reduce at some moment after it started. It is the same
// as RunSeed with seed 1.
func Run(p sched.Params, progs []sched.Program, in [][]float64, inPlace bool) (out [][]float64, err error) {
	return RunSeed(p, progs, in, inPlace, 1)
}

// RunSeed is Run with the interleaving chosen by seed.
func RunSeed(p sched.Params, progs []sched.Program, in [][]float64, inPlace bool, seed uint64) (out [][]float64, err error) {
	if err := sched.Validate(p, progs); err != nil {
		return nil, err
	}
	if len(in) != p.NRanks {
		return nil, fmt.Errorf("schedtest: %d inputs for %d ranks", len(in), p.NRanks)
	}
	for r := range in {
		if len(in[r]) != p.InLen(r) {
			return nil, fmt.Errorf("schedtest: rank %d: input has %d elements, %v wants %d", r, len(in[r]), p.Coll, p.InLen(r))
		}
	}
	m := newMachine(p, progs, in, inPlace, seed)
	if err := m.run(); err != nil {
		return nil, err
	}
	out = make([][]float64, p.NRanks)
	for r := range out {
		out[r] = append([]float64{}, m.mem[r][sched.Out]...)
	}
	return out, nil
}

// ref names one step of one rank.
type ref struct{ rank, step int }

// machine is the state of one run.
type machine struct {
	progs   []sched.Program
	mem     [][3][]float64 // per rank: In, Out, Tmp
	partner [][]ref
	next    []int // steps [0, next) have started
	done    [][]bool
	local   []ref   // started Copy and Reduce steps
	ready   [][]ref // started sends and receives whose partner has started: {send, recv}
	rng     *rand.Rand
}

func nans(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

func newMachine(p sched.Params, progs []sched.Program, in [][]float64, inPlace bool, seed uint64) *machine {
	m := &machine{
		progs:   progs,
		mem:     make([][3][]float64, p.NRanks),
		partner: make([][]ref, p.NRanks),
		next:    make([]int, p.NRanks),
		done:    make([][]bool, p.NRanks),
		rng:     rand.New(rand.NewPCG(seed, 0x5eed)),
	}
	type key struct {
		from, to int
		tag      int32
	}
	recvs := map[key]ref{}
	for r, prog := range progs {
		inLen, outLen := p.InLen(r), p.OutLen(r)
		var bin, bout []float64
		inner, off, alias := p.InPlaceAlias(r)
		switch {
		case !inPlace || !alias:
			bin, bout = append([]float64{}, in[r]...), nans(outLen)
		case inner == sched.In:
			bout = nans(outLen)
			copy(bout[off:], in[r])
			bin = bout[off : off+inLen]
		default:
			bin = append([]float64{}, in[r]...)
			bout = bin[off : off+outLen]
		}
		m.mem[r] = [3][]float64{sched.In: bin, sched.Out: bout, sched.Tmp: nans(prog.TmpLen)}
		m.partner[r] = make([]ref, len(prog.Steps))
		m.done[r] = make([]bool, len(prog.Steps))
		for i, s := range prog.Steps {
			if s.Kind == sched.KindRecv || s.Kind == sched.KindRecvReduce {
				recvs[key{s.Peer, r, s.Tag}] = ref{r, i}
			}
		}
	}
	for r, prog := range progs {
		for i, s := range prog.Steps {
			if s.Kind == sched.KindSend {
				t := recvs[key{r, s.Peer, s.Tag}]
				m.partner[r][i], m.partner[t.rank][t.step] = t, ref{r, i}
			}
		}
	}
	return m
}

func (m *machine) chunk(r int, c sched.Chunk) []float64 {
	return m.mem[r][c.Buf][c.Off:c.End()]
}

func (m *machine) depsDone(r, i int) bool {
	for _, d := range m.progs[r].Steps[i].Deps {
		if !m.done[r][d] {
			return false
		}
	}
	return true
}

func (m *machine) run() error {
	var issuable []int
	for {
		issuable = issuable[:0]
		for r := range m.progs {
			if m.next[r] < len(m.progs[r].Steps) && m.depsDone(r, m.next[r]) {
				issuable = append(issuable, r)
			}
		}
		total := len(issuable) + len(m.local) + len(m.ready)
		if total == 0 {
			break
		}
		switch k := m.rng.IntN(total); {
		case k < len(issuable):
			m.issue(issuable[k])
		case k < len(issuable)+len(m.local):
			k -= len(issuable)
			x := m.local[k]
			m.local[k] = m.local[len(m.local)-1]
			m.local = m.local[:len(m.local)-1]
			m.execLocal(x)
		default:
			k -= len(issuable) + len(m.local)
			x := m.ready[k]
			m.ready[k] = m.ready[len(m.ready)-1]
			m.ready = m.ready[:len(m.ready)-1]
			m.transfer(x[0], x[1])
		}
	}
	for r := range m.progs {
		for i, d := range m.done[r] {
			if !d {
				// Validate proves this cannot happen.
				return fmt.Errorf("schedtest: rank %d step %d (%v) never completed", r, i, m.progs[r].Steps[i])
			}
		}
	}
	return nil
}

func (m *machine) issue(r int) {
	i := m.next[r]
	m.next[r]++
	s := &m.progs[r].Steps[i]
	switch s.Kind {
	case sched.KindCopy, sched.KindReduce:
		m.local = append(m.local, ref{r, i})
	case sched.KindSend, sched.KindRecv, sched.KindRecvReduce:
		t := m.partner[r][i]
		if m.next[t.rank] > t.step {
			if s.Kind == sched.KindSend {
				m.ready = append(m.ready, []ref{{r, i}, t})
			} else {
				m.ready = append(m.ready, []ref{t, {r, i}})
			}
		}
	}
}

func (m *machine) execLocal(x ref) {
	s := &m.progs[x.rank].Steps[x.step]
	src, dst := m.chunk(x.rank, s.Src), m.chunk(x.rank, s.Dst)
	if s.Kind == sched.KindCopy {
		copy(dst, src)
	} else {
		add(dst, src)
	}
	m.done[x.rank][x.step] = true
}

func (m *machine) transfer(snd, rcv ref) {
	ss, rs := &m.progs[snd.rank].Steps[snd.step], &m.progs[rcv.rank].Steps[rcv.step]
	src, dst := m.chunk(snd.rank, ss.Src), m.chunk(rcv.rank, rs.Dst)
	if rs.Kind == sched.KindRecv {
		copy(dst, src)
	} else {
		add(dst, src)
	}
	m.done[snd.rank][snd.step], m.done[rcv.rank][rcv.step] = true, true
}

// add computes dst = dst + src elementwise, the order RecvReduce and Reduce
// define.
func add(dst, src []float64) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
