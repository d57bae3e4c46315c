package topo

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Open returns the topology spec names: a preset (Preset, clusters
// "<n>x<preset>" included) or a JSON file (Load). BRAID_TOPO and the
// --topo flags of braid topo and braid sim take this form.
func Open(spec string) (*Topology, error) {
	if t, err := Preset(spec); err == nil {
		return t, nil
	}
	t, err := Load(spec)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%q is neither a preset (%s, or <n>x<preset>) nor a file", spec, strings.Join(Presets(), ", "))
	}
	return t, err
}
