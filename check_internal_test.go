package braid

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/braid-ccl/braid/sched"
)

// fillJunk sets every field of the struct v points to (recursively) to a
// value that begin never writes.
func fillJunk(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.String:
			f.SetString("junk")
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(0x5a5a)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(0x5a)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Struct:
			fillJunk(t, f)
		default:
			t.Fatalf("field %s: kind %v has no junk value here", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// junkLeft returns the names of the fields of a and junk (structs of one
// type) that are equal: fields that begin did not write.
func junkLeft(a, junk reflect.Value) []string {
	var left []string
	for i := range a.NumField() {
		x := reflect.NewAt(a.Field(i).Type(), unsafe.Pointer(a.Field(i).UnsafeAddr())).Elem().Interface()
		y := reflect.NewAt(junk.Field(i).Type(), unsafe.Pointer(junk.Field(i).UnsafeAddr())).Elem().Interface()
		if reflect.DeepEqual(x, y) {
			left = append(left, a.Type().Field(i).Name)
		}
	}
	return left
}

// TestBeginWritesEveryField: world.begin writes the flight recorder's
// entry and the active entry field by field, into slots that held earlier
// calls; a field it forgot would carry an earlier call's value (a field
// added to flightEntry or sigEntry must be added there).
func TestBeginWritesEveryField(t *testing.T) {
	w := &world{}
	var fjunk flightEntry
	fillJunk(t, reflect.ValueOf(&fjunk).Elem())
	var ajunk sigEntry
	fillJunk(t, reflect.ValueOf(&ajunk).Elem())
	w.sigs.flight[0] = fjunk
	w.sigs.active = make([]sigEntry, 1, 2)
	w.sigs.active[0] = ajunk
	w.sigs.active = w.sigs.active[:0] // the slot an ended call left behind
	k := &call{name: "allreduce", p: sched.Params{Coll: sched.Allreduce, NRanks: 2, Count: 2}, d: Float32, sig: 7, arrive: 99}
	if _, _, bad := w.begin(3, 4, k, "shm"); bad {
		t.Fatal("begin found a mismatch in an empty table")
	}
	if len(w.sigs.active) != 1 {
		t.Fatalf("%d active entries, want 1", len(w.sigs.active))
	}
	if left := junkLeft(reflect.ValueOf(&w.sigs.flight[0]).Elem(), reflect.ValueOf(&fjunk).Elem()); len(left) > 0 {
		t.Errorf("begin left flightEntry fields %v as they were", left)
	}
	if left := junkLeft(reflect.ValueOf(&w.sigs.active[0]).Elem(), reflect.ValueOf(&ajunk).Elem()); len(left) > 0 {
		t.Errorf("begin left sigEntry fields %v as they were", left)
	}
	f, a := w.sigs.flight[0], w.sigs.active[0]
	if f.comm != 3 || f.seq != 4 || f.name != "allreduce" || f.algo != "shm" || f.bytes != 8 || f.state != flightRunning ||
		f.arrive != 99 || f.end != 0 || f.waitPeer != -1 || f.pat != (pattern{}) {
		t.Errorf("flight entry %+v", f)
	}
	if a.comm != 3 || a.seq != 4 || a.sig != 7 || a.name != "allreduce" || a.algo != "shm" || a.fl != 1 || a.waitPeer != -1 || a.st != nil {
		t.Errorf("active entry %+v", a)
	}
}

// TestCompleteForRooted checks which ranks of a rooted call need the
// aggregator's answer: on two ranks a broadcast or scatter is complete for
// the rank that is not the root (it read the root's data, the one other
// rank's), and the root gathers the confirmations without answering; on
// three ranks, or with no elements, the others still wait for its answer.
func TestCompleteForRooted(t *testing.T) {
	for _, coll := range []sched.Collective{sched.Bcast, sched.Scatter} {
		for _, tc := range []struct {
			n, count int
			want     [2]bool // root 1, then rank 0
		}{
			{2, 8, [2]bool{false, true}},
			{2, 0, [2]bool{false, false}},
			{3, 8, [2]bool{false, false}},
		} {
			p := sched.Params{Coll: coll, NRanks: tc.n, Count: tc.count, Root: 1}
			if got := [2]bool{completeFor(&p, 1), completeFor(&p, 0)}; got != tc.want {
				t.Errorf("%v on %d ranks, %d elements: complete for the root, the other: %v, want %v", coll, tc.n, tc.count, got, tc.want)
			}
		}
	}
	c := &Comm{rank: 1, members: make([]int, 3)}
	for kind, sends := range map[uint8]int{confCollect: 2, confGather: 0} {
		p := c.confirmProgram(1, kind)
		var s, r int
		for _, st := range p.Steps {
			switch st.Kind {
			case sched.KindSend:
				s++
			case sched.KindRecv:
				r++
			}
		}
		if s != sends || r != 2 {
			t.Errorf("the aggregator's program of kind %d on 3 ranks: %d sends, %d receives; want %d and 2", kind, s, r, sends)
		}
	}
}
