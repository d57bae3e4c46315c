package topo_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/topo"
)

// samples returns every preset and a few clusters.
func samples(t testing.TB) []*topo.Topology {
	var out []*topo.Topology
	for _, name := range append(topo.Presets(), "2xdgx1-v100", "3xmist") {
		p, err := topo.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestJSONRoundTrip writes and reads back every preset: the result equals
// the original, and writing it again gives the same bytes.
func TestJSONRoundTrip(t *testing.T) {
	for _, tp := range samples(t) {
		var b bytes.Buffer
		if err := tp.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		got, err := topo.Parse(b.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", tp.Name, err, b.String())
		}
		if !reflect.DeepEqual(got, tp) {
			t.Errorf("%s: read back differs", tp.Name)
		}
		var b2 bytes.Buffer
		if err := got.WriteJSON(&b2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), b2.Bytes()) {
			t.Errorf("%s: second write differs", tp.Name)
		}
	}
}

// TestLoadSave round-trips through a file, and checks that Load names the
// file in its errors.
func TestLoadSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dgx1.json")
	tp := topo.DGX1V100()
	if err := topo.Save(path, tp); err != nil {
		t.Fatal(err)
	}
	got, err := topo.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tp) {
		t.Error("Load(Save(t)) differs from t")
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"devices\": [\n    {\"id\": \"a\", \"kind\": \"gpu\", \"colour\": 1}\n  ]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = topo.Load(bad)
	var pe *topo.ParseError
	if !errors.As(err, &pe) || pe.File != bad || pe.Line != 3 || pe.Field != "devices[0].colour" {
		t.Errorf("Load(bad): %v (%#v)", err, pe)
	}
	if !strings.Contains(err.Error(), "bad.json:3:") {
		t.Errorf("error %q does not name the file and line", err)
	}
	if _, err := topo.Load(filepath.Join(dir, "none.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

// TestJSONDefaults checks the optional fields of the format.
func TestJSONDefaults(t *testing.T) {
	tp, err := topo.Parse([]byte(`{"devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu", "numa": 1}],
		"links": [{"from": "a", "to": "b", "class": "nvlink", "bandwidth_GBps": 25, "duplex": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &topo.Topology{
		Devices: []topo.Device{{ID: "a", Kind: topo.GPU, NUMA: -1}, {ID: "b", Kind: topo.GPU, NUMA: 1}},
		Links: []topo.Link{
			{From: 0, To: 1, Class: topo.NVLink, Count: 1, Bandwidth: 25},
			{From: 1, To: 0, Class: topo.NVLink, Count: 1, Bandwidth: 25},
		},
	}
	if !reflect.DeepEqual(tp, want) {
		t.Errorf("got %+v\nwant %+v", tp, want)
	}
}

// TestJSONErrors checks that bad input gets an error with its line, column
// and field.
func TestJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		in    string
		line  int
		field string
		msg   string
	}{
		{"", 1, "", "unexpected end"},
		{"[]", 1, "", `want "{"`},
		{"{\n  \"devices\": [\n    {\"id\": \"a\", \"kind\": \"gpu\",}\n  ]\n}", 3, "devices[0]", "invalid character"},
		{"{\"version\": 2}", 1, "version", "version 2"},
		{"{\"name\": 3}", 1, "name", "cannot use"},
		{"{\"devices\": {}}", 1, "devices", `want "["`},
		{"{\n\"devices\": [\n{\"id\": \"a\", \"kind\": \"gpu\"},\n{\"id\": \"a\", \"kind\": \"cpu\"}\n]}", 4, "devices[1].id", "duplicate device id"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"tpu\"}]}", 1, "devices[0].kind", "unknown device kind"},
		{"{\"devices\": [{\"id\": \"\", \"kind\": \"gpu\"}]}", 1, "devices[0].id", "missing or empty"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\", \"index\": -1}]}", 1, "devices[0].index", "negative"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\", \"numa\": -2}]}", 1, "devices[0].numa", "want -1"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\", \"index\": \"x\"}]}", 1, "devices[0].index", "cannot use"},
		{"{\"devices\": [7]}", 1, "devices[0]", "want an object"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}],\n \"links\": [\n  {\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"bandwidth_GBps\": 1}]}", 3, "links[0].to", `unknown device "b"`},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"z\", \"to\": \"a\", \"class\": \"pcie\", \"bandwidth_GBps\": 1}]}", 1, "links[0].from", `unknown device "z"`},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"a\", \"class\": \"pcie\", \"bandwidth_GBps\": 1}]}", 1, "links[0]", "only shm links"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"cpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"a\", \"class\": \"shm\", \"bandwidth_GBps\": 1, \"duplex\": true}]}", 1, "links[0].duplex", "cannot be duplex"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"warp\", \"bandwidth_GBps\": 1}]}", 1, "links[0].class", "unknown link class"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\"}]}", 1, "links[0].bandwidth_GBps", "missing"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"bandwidth_GBps\": -3}]}", 1, "links[0].bandwidth_GBps", "positive"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"count\": 0, \"bandwidth_GBps\": 1}]}", 1, "links[0].count", "at least 1"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"count\": 1.5, \"bandwidth_GBps\": 1}]}", 1, "links[0].count", "cannot use"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"bandwidth_GBps\": 1, \"latency_us\": -1}]}", 1, "links[0].latency_us", "non-negative"},
		{"{\"devices\": [{\"id\": \"a\", \"kind\": \"gpu\"}, {\"id\": \"b\", \"kind\": \"gpu\"}], \"links\": [{\"from\": \"a\", \"to\": \"b\", \"class\": \"pcie\", \"count\": 10, \"bandwidth_GBps\": 1e308}]}", 1, "links[0].bandwidth_GBps", "finite"},
		{"{\"hosts\": []}", 1, "hosts", "unknown field"},
		{"{\"name\": \"a\", \"name\": \"b\"}", 1, "name", "given twice"},
		{"{} {}", 1, "", "data after"},
	} {
		_, err := topo.Parse([]byte(tc.in))
		var pe *topo.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: error %v is not a *ParseError", tc.in, err)
			continue
		}
		if pe.Line != tc.line || pe.Field != tc.field || !strings.Contains(pe.Err.Error(), tc.msg) || pe.Col < 1 {
			t.Errorf("%q:\n got line %d col %d field %q: %v\nwant line %d field %q: ...%s...", tc.in, pe.Line, pe.Col, pe.Field, pe.Err, tc.line, tc.field, tc.msg)
		}
	}
}

// TestJSONColumn checks that an unknown field is reported at its key.
func TestJSONColumn(t *testing.T) {
	in := "{\"devices\": [\n  {\"id\": \"a\",  \"kynd\": \"gpu\"}\n]}"
	_, err := topo.Parse([]byte(in))
	var pe *topo.ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Col != 16 || pe.Field != "devices[0].kynd" {
		t.Errorf("got %v", err)
	}
}

// FuzzParse feeds the parser arbitrary bytes: it must not panic, and what
// it accepts must survive a write and a read unchanged.
func FuzzParse(f *testing.F) {
	for _, tp := range samples(f)[:3] {
		var b bytes.Buffer
		if err := tp.WriteJSON(&b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte(`{"devices": [{"id": "a", "kind": "cpu"}], "links": [{"from": "a", "to": "a", "class": "shm", "bandwidth_GBps": 1}]}`))
	f.Add([]byte(`{"devices": [{"id": "a", "kind": "gpu", "numa": 0}, {"id": "b", "kind": "nic"}], "links": [{"from": "a", "to": "b", "class": "pcie", "count": 2, "bandwidth_GBps": 1.5, "latency_us": 3, "duplex": true}]}`))
	f.Add([]byte(`{"version": 1, "name": "x", "devices": [], "links": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tp, err := topo.Parse(data)
		if err != nil {
			var pe *topo.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		if err := tp.Validate(); err != nil {
			t.Fatalf("Parse accepted a topology Validate refuses: %v", err)
		}
		var b bytes.Buffer
		if err := tp.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		back, err := topo.Parse(b.Bytes())
		if err != nil {
			t.Fatalf("reading back: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(back, tp) {
			t.Fatalf("round trip differs:\n%+v\n%+v", tp, back)
		}
	})
}
