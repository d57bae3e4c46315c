package topo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// ParseError is an error in a topology file, with its place.
type ParseError struct {
	File  string // the file name; empty when parsed from memory
	Line  int    // 1-based; 0 if unknown
	Col   int    // 1-based byte column; 0 if unknown
	Field string // the JSON path of the value at fault, e.g. "links[3].to"; may be empty
	Err   error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", e.Line, e.Col)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return "topo: " + b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

type jsonDevice struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Host  string `json:"host,omitempty"`
	Index int    `json:"index"`
	NUMA  *int   `json:"numa,omitempty"`
	Model string `json:"model,omitempty"`
	BusID string `json:"bus_id,omitempty"`
	CPUs  string `json:"cpus,omitempty"`
}

type jsonLink struct {
	From      string   `json:"from"`
	To        string   `json:"to"`
	Class     string   `json:"class"`
	Count     *int     `json:"count,omitempty"`
	Bandwidth *float64 `json:"bandwidth_GBps,omitempty"`
	Latency   float64  `json:"latency_us"`
	Duplex    bool     `json:"duplex,omitempty"`
}

// Load reads the topology file at path.
func Load(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topo: %w", err)
	}
	t, err := Parse(data)
	var pe *ParseError
	if errors.As(err, &pe) {
		pe.File = path
	}
	return t, err
}

// Save writes t to the file at path in the format Load reads.
func Save(path string, t *Topology) error {
	var b bytes.Buffer
	if err := t.WriteJSON(&b); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("topo: %w", err)
	}
	return nil
}

// WriteJSON writes t in the file format, one device or link a line; a
// link directly followed by its mirror is written once as duplex. It
// returns an error if t is not valid.
func (t *Topology) WriteJSON(w io.Writer) error {
	if err := t.Validate(); err != nil {
		return err
	}
	var b bytes.Buffer
	name, _ := json.Marshal(t.Name)
	fmt.Fprintf(&b, "{\n  \"version\": 1,\n  \"name\": %s,\n  \"devices\": [", name)
	for i, d := range t.Devices {
		jd := jsonDevice{ID: d.ID, Kind: d.Kind.String(), Host: d.Host, Index: d.Index, Model: d.Model, BusID: d.BusID, CPUs: d.CPUs}
		if d.NUMA != -1 {
			jd.NUMA = &d.NUMA
		}
		line, err := json.Marshal(jd)
		if err != nil {
			return fmt.Errorf("topo: %w", err)
		}
		b.WriteString(sep(i))
		b.Write(line)
	}
	b.WriteString("\n  ],\n  \"links\": [")
	for i, n := 0, 0; i < len(t.Links); n++ {
		l := t.Links[i]
		jl := jsonLink{From: t.Devices[l.From].ID, To: t.Devices[l.To].ID, Class: l.Class.String(), Count: &l.Count, Bandwidth: &l.Bandwidth, Latency: l.Latency}
		i++
		if i < len(t.Links) && l.From != l.To && t.Links[i] == (Link{From: l.To, To: l.From, Class: l.Class, Count: l.Count, Bandwidth: l.Bandwidth, Latency: l.Latency}) {
			jl.Duplex = true
			i++
		}
		line, err := json.Marshal(jl)
		if err != nil {
			return fmt.Errorf("topo: %w", err)
		}
		b.WriteString(sep(n))
		b.Write(line)
	}
	b.WriteString("\n  ]\n}\n")
	_, err := w.Write(b.Bytes())
	return err
}

func sep(i int) string {
	if i == 0 {
		return "\n    "
	}
	return ",\n    "
}

// Parse reads a topology from the file format. Errors are *ParseError
// values that give the line, column and field at fault.
//
// The file format (what BRAID_TOPO names, and what WriteJSON and braid
// topo --dump write) is one JSON object:
//
//	{
//	  "version": 1,
//	  "name": "dgx1-v100",
//	  "devices": [
//	    {"id": "cpu0", "kind": "cpu", "host": "dgx1v", "index": 0, "numa": 0, "cpus": "0-19,40-59"},
//	    {"id": "gpu0", "kind": "gpu", "host": "dgx1v", "index": 0, "numa": 0, "model": "Tesla V100-SXM2-16GB"}
//	  ],
//	  "links": [
//	    {"from": "cpu0", "to": "cpu0", "class": "shm", "count": 1, "bandwidth_GBps": 76.8, "latency_us": 0.2},
//	    {"from": "gpu0", "to": "cpu0", "class": "pcie", "count": 1, "bandwidth_GBps": 15.75, "latency_us": 0.5, "duplex": true}
//	  ]
//	}
//
// Devices: id (unique, required), kind (gpu, cpu, nic, pcie-switch,
// nvswitch, net-switch; required), host, index (default 0), numa (default
// -1: unknown), model, bus_id, cpus. Links: from and to (device ids,
// required), class (nvlink, pcie, xbus, shm, net; required), count (lanes,
// default 1), bandwidth_GBps (per lane and direction, required),
// latency_us (default 0), duplex (default false: true stands for two
// links, from→to then to→from). "version" may be left out; the only
// version is 1. Unknown fields are errors, so a misspelt field is not
// silently ignored.
func Parse(data []byte) (*Topology, error) {
	p := parser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	t, err := p.file()
	if err != nil {
		return nil, err
	}
	return t, nil
}

type parser struct {
	data []byte
	dec  *json.Decoder
}

// errAt returns a ParseError at byte offset off of the data.
func (p *parser) errAt(off int64, field string, err error) *ParseError {
	line, col := 1, 1
	for i := 0; i < int(off) && i < len(p.data); i++ {
		if p.data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &ParseError{Line: line, Col: col, Field: field, Err: err}
}

// decodeErr turns an error of encoding/json into a ParseError. A type
// error's offset counts from base, where the value being decoded starts.
// The streaming decoder counts syntax errors' offsets from different
// places, so a syntax error is located again by scanning the whole input.
func (p *parser) decodeErr(base int64, field string, err error) *ParseError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		var v any
		if errors.As(json.Unmarshal(p.data, &v), &se) {
			// The offending byte is the last one read.
			return p.errAt(max(se.Offset-1, 0), field, errors.New(strings.TrimPrefix(se.Error(), "json: ")))
		}
		return p.errAt(base, field, errors.New(strings.TrimPrefix(err.Error(), "json: ")))
	case errors.As(err, &te):
		f := field
		if te.Field != "" {
			f += "." + te.Field
		}
		return p.errAt(base+te.Offset, strings.TrimPrefix(f, "."), fmt.Errorf("cannot use a JSON %s as %s", te.Value, te.Type))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return p.errAt(int64(len(p.data)), field, errors.New("unexpected end of input"))
	}
	return p.errAt(base, field, errors.New(strings.TrimPrefix(err.Error(), "json: ")))
}

// valueStart returns where the decoder starts to read the next value it
// decodes: past white space and one comma or colon. Type errors of that
// value count their offsets from there.
func (p *parser) valueStart() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n", p.data[off]) >= 0 {
		off++
	}
	if off < int64(len(p.data)) && (p.data[off] == ',' || p.data[off] == ':') {
		off++
	}
	return off
}

// next returns the offset of the next token: the decoder's position past
// white space and commas.
func (p *parser) next() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	return off
}

func (p *parser) delim(want json.Delim, field string) error {
	off := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return p.decodeErr(off, field, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return p.errAt(off, field, fmt.Errorf("want %q, found %s", want, describe(tok)))
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", v)
	case string:
		return fmt.Sprintf("string %q", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// element is one array element and its place.
type element struct {
	off int64
	raw json.RawMessage
}

// array reads a JSON array of objects into its elements.
func (p *parser) array(field string) ([]element, error) {
	if err := p.delim('[', field); err != nil {
		return nil, err
	}
	var out []element
	for p.dec.More() {
		off, base := p.next(), p.valueStart()
		var raw json.RawMessage
		if err := p.dec.Decode(&raw); err != nil {
			return nil, p.decodeErr(base, fmt.Sprintf("%s[%d]", field, len(out)), err)
		}
		out = append(out, element{off, raw})
	}
	return out, p.delim(']', field)
}

// strict decodes an element into v, refusing unknown fields.
func (p *parser) strict(e element, field string, v any) error {
	d := json.NewDecoder(bytes.NewReader(e.raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return p.errAt(e.off, field, fmt.Errorf("want an object, found a JSON %s", te.Value))
			}
			return p.errAt(e.off+keyOffset(e.raw, te.Field), field+"."+te.Field, fmt.Errorf("cannot use a JSON %s as %s", te.Value, te.Type))
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			key := strings.Trim(name, `"`)
			return p.errAt(e.off+keyOffset(e.raw, key), field+"."+key, errors.New("unknown field"))
		}
		return p.decodeErr(e.off, field, err)
	}
	return nil
}

// keyOffset returns the offset of key within the JSON object raw, or 0.
func keyOffset(raw []byte, key string) int64 {
	d := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	for d.More() {
		off := d.InputOffset()
		for off < int64(len(raw)) && strings.IndexByte(" \t\r\n,", raw[off]) >= 0 {
			off++
		}
		tok, err := d.Token()
		if err != nil {
			return 0
		}
		if tok == key {
			return off
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return 0
		}
	}
	return 0
}

func (p *parser) file() (*Topology, error) {
	if err := p.delim('{', ""); err != nil {
		return nil, err
	}
	t := &Topology{}
	var devices, links []element
	seen := map[string]bool{}
	for p.dec.More() {
		off := p.next()
		tok, err := p.dec.Token()
		if err != nil {
			return nil, p.decodeErr(off, "", err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, p.errAt(off, key, errors.New("given twice"))
		}
		seen[key] = true
		voff, base := p.next(), p.valueStart()
		switch key {
		case "version":
			var v int
			if err := p.dec.Decode(&v); err != nil {
				return nil, p.decodeErr(base, key, err)
			}
			if v != 1 {
				return nil, p.errAt(voff, key, fmt.Errorf("version %d, want 1", v))
			}
		case "name":
			if err := p.dec.Decode(&t.Name); err != nil {
				return nil, p.decodeErr(base, key, err)
			}
		case "devices":
			if devices, err = p.array(key); err != nil {
				return nil, err
			}
		case "links":
			if links, err = p.array(key); err != nil {
				return nil, err
			}
		default:
			return nil, p.errAt(off, key, errors.New("unknown field (want version, name, devices, links)"))
		}
	}
	if err := p.delim('}', ""); err != nil {
		return nil, err
	}
	if off := p.next(); off < int64(len(p.data)) {
		return nil, p.errAt(off, "", errors.New("data after the topology object"))
	}
	ids := make(map[string]int, len(devices))
	for i, e := range devices {
		field := fmt.Sprintf("devices[%d]", i)
		var jd jsonDevice
		if err := p.strict(e, field, &jd); err != nil {
			return nil, err
		}
		at := func(key string, err error) error { return p.errAt(e.off+keyOffset(e.raw, key), field+"."+key, err) }
		d := Device{ID: jd.ID, Host: jd.Host, Index: jd.Index, NUMA: -1, Model: jd.Model, BusID: jd.BusID, CPUs: jd.CPUs}
		var err error
		if d.Kind, err = ParseKind(jd.Kind); err != nil {
			return nil, at("kind", err)
		}
		switch {
		case jd.ID == "":
			return nil, at("id", errors.New("missing or empty"))
		case ids[jd.ID] > 0:
			return nil, at("id", fmt.Errorf("%w %q (also devices[%d])", ErrDuplicate, jd.ID, ids[jd.ID]-1))
		case jd.Index < 0:
			return nil, at("index", fmt.Errorf("%d is negative", jd.Index))
		case jd.NUMA != nil && *jd.NUMA < -1:
			return nil, at("numa", fmt.Errorf("%d, want -1 (unknown) or more", *jd.NUMA))
		}
		if jd.NUMA != nil {
			d.NUMA = *jd.NUMA
		}
		ids[jd.ID] = i + 1
		t.Devices = append(t.Devices, d)
	}
	for i, e := range links {
		field := fmt.Sprintf("links[%d]", i)
		var jl jsonLink
		if err := p.strict(e, field, &jl); err != nil {
			return nil, err
		}
		at := func(key string, err error) error { return p.errAt(e.off+keyOffset(e.raw, key), field+"."+key, err) }
		l := Link{From: ids[jl.From] - 1, To: ids[jl.To] - 1, Count: 1, Latency: jl.Latency}
		var err error
		switch {
		case l.From < 0:
			return nil, at("from", fmt.Errorf("unknown device %q", jl.From))
		case l.To < 0:
			return nil, at("to", fmt.Errorf("unknown device %q", jl.To))
		}
		if l.Class, err = ParseClass(jl.Class); err != nil {
			return nil, at("class", err)
		}
		if jl.Count != nil {
			l.Count = *jl.Count
		}
		switch {
		case l.Count < 1:
			return nil, at("count", fmt.Errorf("%d, want at least 1", l.Count))
		case jl.Bandwidth == nil:
			return nil, p.errAt(e.off, field+".bandwidth_GBps", errors.New("missing"))
		case !(*jl.Bandwidth > 0) || math.IsInf(float64(l.Count)**jl.Bandwidth, 0):
			return nil, at("bandwidth_GBps", fmt.Errorf("%g, want a positive number (GB/s per lane) whose product with count is finite", *jl.Bandwidth))
		case !(l.Latency >= 0):
			return nil, at("latency_us", fmt.Errorf("%g, want a non-negative number (µs)", l.Latency))
		case jl.Duplex && l.From == l.To:
			return nil, at("duplex", errors.New("a link from a device to itself cannot be duplex"))
		}
		l.Bandwidth = *jl.Bandwidth
		if err := t.checkLink(l); err != nil {
			return nil, p.errAt(e.off, field, err)
		}
		t.Links = append(t.Links, l)
		if jl.Duplex {
			t.Links = append(t.Links, Link{From: l.To, To: l.From, Class: l.Class, Count: l.Count, Bandwidth: l.Bandwidth, Latency: l.Latency})
		}
	}
	return t, nil
}
