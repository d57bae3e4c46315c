package braid_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/braid-ccl/braid"
	"github.com/braid-ccl/braid/topo"
)

// costs parses the cost model's reason ("cost model: a:seg=4K 1.5µs < b
// 2ms ...") into each candidate's cost in seconds, by algorithm name.
func costs(t *testing.T, reason string) map[string]float64 {
	t.Helper()
	list, ok := strings.CutPrefix(reason, "cost model: ")
	if !ok {
		t.Fatalf("reason %q is not the cost model's", reason)
	}
	list, _, _ = strings.Cut(list, ";")
	unit := map[string]float64{"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1}
	re := regexp.MustCompile(`^([a-z]+)(:\S+)? ([0-9.e+]+)(ns|µs|ms|s)$`)
	out := map[string]float64{}
	for _, c := range strings.Split(list, " < ") {
		m := re.FindStringSubmatch(strings.TrimSpace(c))
		if m == nil {
			t.Fatalf("candidate %q of reason %q", c, reason)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = v * unit[m[4]]
	}
	return out
}

// TestTopologyPlansTreepack gives 4 local ranks a DGX-1 V100 through
// BRAID_TOPO: broadcast, reduce and allreduce then have the tree-packing
// algorithm among their candidates, costed on the packed trees; the
// planner picks it where the model says it is the cheapest (large
// reduces: the other reduces are not pipelined), and the calls it plans
// run right. BRAID_DEBUG=info logs each packing once.
func TestTopologyPlansTreepack(t *testing.T) {
	t.Setenv("BRAID_TOPO", "dgx1-v100")
	t.Setenv("BRAID_DEBUG", "info")
	log := &syncBuffer{}
	opts := &braid.Options{Log: log}
	c := localComms(t, 4, opts)[0]
	chosen := map[string]bool{}
	for _, coll := range []string{"bcast", "reduce", "allreduce"} {
		for _, count := range []int{1 << 16, 1 << 20, 1 << 24} {
			algo, reason, err := c.Explain(coll, count, braid.Float32, 1)
			if err != nil {
				t.Fatalf("Explain(%s, %d): %v", coll, count, err)
			}
			cs := costs(t, reason)
			tp, ok := cs["treepack"]
			if !ok {
				t.Errorf("Explain(%s, %d): treepack is not among the candidates: %s", coll, count, reason)
				continue
			}
			cheapest := math.Inf(1)
			for name, v := range cs {
				if name != "treepack" {
					cheapest = min(cheapest, v)
				}
			}
			base, _, _ := strings.Cut(algo, ":")
			if tp < cheapest && base != "treepack" {
				t.Errorf("Explain(%s, %d) = %s, but the model says treepack is the cheapest: %s", coll, count, algo, reason)
			}
			if base == "treepack" {
				chosen[coll] = true
			}
		}
	}
	if !chosen["reduce"] {
		t.Errorf("the planner chose treepack for no large reduce on a DGX-1")
	}
	for _, want := range []string{
		// Blink's hybrid (MLSys 2020, §3.4): the NVLink trees and the PCIe
		// trees, the bytes split by eq. 8 (in proportion to the rates).
		"bcast root 1 on dgx1-v100 (gpu0 gpu1 gpu2 gpu3): packed 4 trees over nvlink+pcie links, rate 115.8 GB/s: NVLink trees 100 GB/s of an optimum of 100 GB/s, PCIe trees 15.75 GB/s carrying 13.6% of the bytes",
		"reduce root 1 on dgx1-v100 (gpu0 gpu1 gpu2 gpu3): packed 4 trees over nvlink+pcie links, rate 115.8 GB/s: NVLink trees 100 GB/s",
		"allreduce on dgx1-v100 (gpu0 gpu1 gpu2 gpu3): packed 4 trees over nvlink+pcie links, rate 85.5 GB/s: NVLink trees 75 GB/s",
	} {
		if n := strings.Count(log.String(), want); n != 1 {
			t.Errorf("info log has %q %d times, want once:\n%s", want, n, log)
		}
	}

	// The calls run as planned, unforced, and give the right result.
	log = &syncBuffer{}
	const count = 1<<20 + 3
	errs := onRanks(t, 4, &braid.Options{Log: log}, func(c *braid.Comm) error {
		ctx := apiCtx(t)
		b := make([]float32, count)
		if c.Rank() == 1 {
			for i := range b {
				b[i] = float32(i % 1000)
			}
		}
		if err := c.Bcast(ctx, b, 1); err != nil {
			return err
		}
		for i, v := range b {
			if v != float32(i%1000) {
				return fmt.Errorf("bcast: element %d is %g, want %d", i, v, i%1000)
			}
		}
		in := make([]float32, count)
		for i := range in {
			in[i] = float32(c.Rank() + i%7)
		}
		out := make([]float32, count)
		if err := c.Reduce(ctx, in, out, braid.Sum, 1); err != nil {
			return err
		}
		if c.Rank() == 1 {
			for i, v := range out {
				if want := float32(6 + 4*(i%7)); v != want {
					return fmt.Errorf("reduce: element %d is %g, want %g", i, v, want)
				}
			}
		}
		return nil
	})
	apiNoErrors(t, errs)
	if !regexp.MustCompile(`reduce comm \S+ n=4 count=1048579 \S+ B\) root=1: treepack`).MatchString(log.String()) {
		t.Errorf("the large reduce did not run treepack:\n%s", log)
	}
}

// TestTopologyDevicesAndSplit places 4 ranks on GPUs 1, 4, 5 and 6 of a
// DGX-1 V100, which no NVLink ring spans (Blink, MLSys 2020, §5.2.1), and
// splits 8 ranks on a whole DGX-1 into two communicators of the GPUs of one
// parity, in reverse order: each packs its trees among its members' GPUs,
// and the forced tree-packing collectives give the right results.
func TestTopologyDevicesAndSplit(t *testing.T) {
	t.Setenv("BRAID_TOPO", "")
	dgx := topo.DGX1V100()
	gpus := dgx.GPUs()
	log := &syncBuffer{}
	opts := &braid.Options{Topology: dgx, Devices: []int{gpus[1], gpus[4], gpus[5], gpus[6]}, Debug: "info", Log: log,
		Algo: "bcast=treepack,reduce=treepack,allreduce=treepack"}
	errs := onRanks(t, 4, opts, func(c *braid.Comm) error { return treepackCalls(t, c, 1000003) })
	apiNoErrors(t, errs)
	for _, coll := range []string{"bcast root 1", "reduce root 1", "allreduce"} {
		if want := coll + " on dgx1-v100 (gpu1 gpu4 gpu5 gpu6): packed"; !strings.Contains(log.String(), want) {
			t.Errorf("info log lacks %q:\n%s", want, log)
		}
	}

	log = &syncBuffer{}
	opts = &braid.Options{Topology: dgx, Debug: "info", Log: log, Algo: opts.Algo}
	errs = onRanks(t, 8, opts, func(c *braid.Comm) error {
		sub, err := c.Split(apiCtx(t), c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		return treepackCalls(t, sub, 10007)
	})
	apiNoErrors(t, errs)
	for _, members := range []string{"gpu6 gpu4 gpu2 gpu0", "gpu7 gpu5 gpu3 gpu1"} {
		if want := "allreduce on dgx1-v100 (" + members + "): packed"; !strings.Contains(log.String(), want) {
			t.Errorf("info log lacks %q:\n%s", want, log)
		}
	}
}

// treepackCalls runs a broadcast and a reduce rooted at rank 1 and an
// allreduce of count int32 elements on c, and checks them.
func treepackCalls(t *testing.T, c *braid.Comm, count int) error {
	ctx := apiCtx(t)
	n := c.Size()
	b := make([]int32, count)
	if c.Rank() == 1 {
		for i := range b {
			b[i] = int32(i)
		}
	}
	if err := c.Bcast(ctx, b, 1); err != nil {
		return err
	}
	for i, v := range b {
		if v != int32(i) {
			return fmt.Errorf("bcast: element %d is %d", i, v)
		}
	}
	in := make([]int32, count)
	for i := range in {
		in[i] = int32(c.Rank()*count + i)
	}
	out := make([]int32, count)
	if err := c.Reduce(ctx, in, out, braid.Sum, 1); err != nil {
		return err
	}
	// Σ_r (r·count + i) = count·n(n−1)/2 + n·i.
	if c.Rank() == 1 {
		for i, v := range out {
			if want := int32(count*n*(n-1)/2 + n*i); v != want {
				return fmt.Errorf("reduce: element %d is %d, want %d", i, v, want)
			}
		}
	}
	if err := c.Allreduce(ctx, in, out, braid.Max); err != nil {
		return err
	}
	for i, v := range out {
		if want := int32((n-1)*count + i); v != want {
			return fmt.Errorf("allreduce: element %d is %d, want %d", i, v, want)
		}
	}
	return nil
}

// TestTopologyOptions checks BRAID_TOPO's spellings (a preset, a JSON
// file) and the errors for a topology that cannot be read or does not
// fit the job.
func TestTopologyOptions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "dgx1.json")
	if err := topo.Save(file, topo.DGX1V100()); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"dgx1-v100", "2xdgx1-v100", file} {
		t.Setenv("BRAID_TOPO", spec)
		c := localComms(t, 2, nil)[0]
		if _, reason, err := c.Explain("allreduce", 1<<20, braid.Float32, 0); err != nil || !strings.Contains(reason, "treepack") {
			t.Errorf("BRAID_TOPO=%s: treepack is not a candidate: %q, %v", spec, reason, err)
		}
	}
	for _, tc := range []struct {
		env  string
		n    int
		opts braid.Options
		want string
	}{
		{"nosuch-machine", 2, braid.Options{}, `BRAID_TOPO: "nosuch-machine" is neither a preset`},
		{bad, 2, braid.Options{}, "BRAID_TOPO"},
		{"dgx1-v100", 9, braid.Options{}, "topology dgx1-v100 has 8 GPUs for 9 ranks"},
		{"", 2, braid.Options{Devices: []int{0, 1}}, "there is none"},
		{"", 2, braid.Options{Topology: topo.DGX1V100(), Devices: []int{0}}, "places 1 ranks, the job has 2"},
		{"", 2, braid.Options{Topology: topo.DGX1V100(), Devices: []int{0, 999}}, "puts rank 1 on device 999"},
		{"", 2, braid.Options{Topology: topo.DGX1V100(), Devices: []int{3, 3}}, "puts ranks 0 and 1 both on device"},
	} {
		t.Setenv("BRAID_TOPO", tc.env)
		comms, err := braid.NewLocal(tc.n, &tc.opts)
		if braid.KindOf(err) != braid.InvalidArgument || comms != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BRAID_TOPO=%q, %d ranks, %+v: %v; want invalid argument with %q", tc.env, tc.n, tc.opts, err, tc.want)
		}
	}
}

// TestNoTopologyNoTreepack checks that without a topology the tree-packing
// algorithm is never a candidate (its Supports needs trees), and that
// forcing it says how to get trees.
func TestNoTopologyNoTreepack(t *testing.T) {
	t.Setenv("BRAID_TOPO", "")
	c := localComms(t, 4, nil)[0]
	for _, coll := range []string{"bcast", "reduce", "allreduce"} {
		algo, reason, err := c.Explain(coll, 1<<24, braid.Float32, 0)
		if err != nil || strings.HasPrefix(algo, "treepack") || strings.Contains(reason, "treepack") {
			t.Errorf("Explain(%s) without a topology = %q, %q, %v", coll, algo, reason, err)
		}
	}
	c = localComms(t, 4, &braid.Options{Algo: "reduce=treepack"})[0]
	_, _, err := c.Explain("reduce", 100, braid.Float32, 0)
	if braid.KindOf(err) != braid.Unsupported || !strings.Contains(err.Error(), "set Options.Topology or BRAID_TOPO") {
		t.Errorf("forced treepack without a topology: %v", err)
	}
}
