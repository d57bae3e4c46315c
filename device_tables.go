package braid

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/braid-ccl/braid/cuda"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/gpu/multipath"
	"github.com/braid-ccl/braid/internal/choice"
	"github.com/braid-ccl/braid/plan"
)

// DefaultDeviceTuningFile is where braid tune --device cuda writes its
// table unless told otherwise, and where a device communicator looks for
// one when neither DeviceOptions.Tuning nor BRAID_GPU_TUNING names a file:
// tuning-cuda.txt beside DefaultTuningFile. "" if there is no cache
// directory.
func DefaultDeviceTuningFile() string { return besideTuningFile("tuning-cuda.txt") }

// DefaultMultiPathFile is where braid tune --device cuda --multipath
// writes its table unless told otherwise: multipath.txt beside
// DefaultTuningFile. A device communicator reads a multi-path table only
// where DeviceOptions.MultiPath or BRAID_GPU_MULTIPATH names it: the
// table records no machine, so a cached one could not be told from
// another machine's. "" if there is no cache directory.
func DefaultMultiPathFile() string { return besideTuningFile("multipath.txt") }

// besideTuningFile is the file name in DefaultTuningFile's directory.
func besideTuningFile(name string) string {
	d := DefaultTuningFile()
	if d == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(d), name)
}

// ThisGPUs returns what a device tuning table records of this machine:
// how many GPUs the driver shows, and the model of dev (plan.GPUName).
func ThisGPUs(dev cuda.Device) (plan.Machine, error) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return plan.Machine{}, err
	}
	name, err := dev.Name()
	if err != nil {
		return plan.Machine{}, err
	}
	return plan.Machine{GPUs: n, GPU: plan.GPUName(name)}, nil
}

// loadTables reads the tables that o names, once, into Table and
// MultiPathTable where the caller left those nil: DeviceOptions.Tuning,
// else BRAID_GPU_TUNING, else the cached DefaultDeviceTuningFile if it
// exists; DeviceOptions.MultiPath, else BRAID_GPU_MULTIPATH. here gives
// this machine's GPUs; it is asked only of a table that records GPUs. A
// table named by a field or a variable that cannot be taken is an error
// that names the field or the variable; the cached table is left out
// instead, and notes says why, for Options.Log.
func (o *DeviceOptions) loadTables(getenv func(string) string, here func() (plan.Machine, error)) (notes []string, err error) {
	named := func(field, env, v string) (src, name string) {
		if v != "" {
			return "DeviceOptions." + field, v
		}
		return env, getenv(env)
	}
	if o.Table == nil {
		switch src, name := named("Tuning", "BRAID_GPU_TUNING", o.Tuning); name {
		case "none":
		case "":
			path := DefaultDeviceTuningFile()
			if path == "" {
				break
			}
			t, err := loadDeviceTable(path, here)
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				notes = append(notes, fmt.Sprintf("braid: ignoring the cached %v (run braid tune --device cuda again, or set BRAID_GPU_TUNING=none)", err))
			default:
				o.Table = t
			}
		default:
			t, err := loadDeviceTable(name, here)
			if err != nil {
				return notes, fmt.Errorf("%s=%q: %w", src, name, err)
			}
			o.Table = t
		}
	}
	if o.MultiPathTable == nil {
		switch src, name := named("MultiPath", "BRAID_GPU_MULTIPATH", o.MultiPath); name {
		case "", "none":
		default:
			t, err := multipath.LoadTable(name)
			if err != nil {
				return notes, fmt.Errorf("%s=%q: %w", src, name, err)
			}
			o.MultiPathTable = t
		}
	}
	return notes, nil
}

// loadDeviceTable reads the device tuning table in path and checks it:
// its choices against the algorithms, and its machine line against this
// machine's GPUs (here). A table without a machine line (written by hand)
// is taken as it is, as a host table without one is; one that records no
// GPUs is a host table, and is refused.
func loadDeviceTable(path string, here func() (plan.Machine, error)) (*plan.Table, error) {
	t, err := plan.LoadTable(path)
	if err == nil {
		err = choice.CheckTable(t)
	}
	if err != nil {
		return nil, err
	}
	switch m := t.Machine; {
	case m == (plan.Machine{}):
	case !m.HasGPUs():
		return nil, fmt.Errorf("tuning table %s records no GPUs (%v): it is a host table from braid tune, and braid tune --device cuda writes the device's", path, m)
	default:
		h, err := here()
		if err != nil {
			return nil, fmt.Errorf("tuning table %s: this machine's GPUs: %w", path, err)
		}
		if m.GPUs != h.GPUs || m.GPU != h.GPU {
			return nil, fmt.Errorf("tuning table %s was measured on %v, this machine has %v: run braid tune --device cuda here",
				path, plan.Machine{GPUs: m.GPUs, GPU: m.GPU}, h)
		}
	}
	return t, nil
}

// multiPathShares is t as the fused kernels take it: nil for none (a nil
// *multipath.Table in the interface would not be).
func multiPathShares(t *multipath.Table) fused.HostShares {
	if t == nil {
		return nil
	}
	return t
}

// multiPathSource names t for logs.
func multiPathSource(t *multipath.Table) string {
	if t == nil {
		return ""
	}
	return t.Source
}

// tableDigest names a table's content for the ranks to compare (its
// entries as its file format writes them, hashed): "none" for nil.
func tableDigest[T any, P interface {
	*T
	WriteTo(io.Writer) (int64, error)
}](t P) string {
	if t == nil {
		return "none"
	}
	var b bytes.Buffer
	t.WriteTo(&b)
	return digest(b.String())
}

// digest is a short hash of s, for settings too long to compare whole.
func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:8])
}
