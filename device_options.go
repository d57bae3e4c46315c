package braid

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-ccl/braid/gpu"
	"github.com/braid-ccl/braid/gpu/fused"
	"github.com/braid-ccl/braid/gpu/multipath"
	"github.com/braid-ccl/braid/internal/size"
	"github.com/braid-ccl/braid/plan"
)

// DeviceOptions tunes a DeviceComm. The zero value lets the planner
// choose: for every call it costs the fused kernels that can run it and
// the schedules (plan.DeviceModel), and runs the cheapest, unless Algo,
// BRAID_ALGO or Table names one; BRAID_DEBUG=info logs each decision with
// its alternatives' costs.
type DeviceOptions struct {
	// Algo forces the algorithm of a collective, by the collective's name,
	// as BRAID_ALGO's entries do (and before them): {"allreduce": "ring",
	// "bcast": "chain:seg=4M"}. The fused kernels are named
	// "gpu_oneshot" (allreduce, one-shot; algo.GPUOneShot where the
	// kernels are off), "direct" (allreduce, the two-shot kernel; the
	// direct program where it is off) and "fused" (bcast, allgather,
	// reducescatter). A forced fused kernel runs wherever it fits, past
	// the caps below; one that cannot run the call is an InvalidArgument.
	Algo map[string]string
	// OneShotMax caps the allreduces, in bytes, that the planner may run
	// one-shot (every rank pushes its input to every peer and reduces all
	// inputs, in one kernel) on its own; 0 means DefaultOneShotMax(Size()),
	// negative never.
	OneShotMax int
	// DirectMax caps the allreduces, in bytes, that the planner may run
	// as the fused two-shot kernel ("direct": a reduce-scatter and an
	// allgather that move the vector through the slots in rounds); 0
	// means DefaultDirectMax(Size()), negative never (and "direct", when
	// named, then runs as a program).
	DirectMax int
	// FusedMax caps the broadcasts, and the blocks of allgathers and
	// reduce-scatters, in bytes, that the planner may run as fused kernels
	// (pushes into the peers' registered regions, device-side flags, in
	// rounds through the slots); 0 means DefaultFusedMax(collective,
	// Size(), whether the host path is on), negative never.
	FusedMax int
	// LLMax is the largest one-shot allreduce, in bytes, whose data
	// travels in low-latency lines: every 16-byte store carries 8 bytes
	// and the call's number, so a peer needs no separate flag and the
	// sender no fence (half the time on small vectors, twice the bytes on
	// the links). Vectors in whole 8-byte words qualify (a rank whose
	// buffers are not 8-byte aligned runs the kernel on aligned scratch).
	// It is also the largest block of a fused reduce-scatter or allgather
	// that runs in lines (whose lines out of a GPU are as many as the
	// one-shot's of a vector of that size).
	// 0 means BRAID_GPU_LL_MAX where set, else fused.DefaultLLBytes(Size());
	// negative never.
	LLMax int
	// HostShare is the percentage of every round of a fused two-shot
	// allreduce, broadcast, or pipelined reduce-scatter or allgather, on
	// more than 2 GPUs (on 2 GPUs a broadcast above 1 MiB only), that
	// travels through pinned host memory, across PCIe, beside NVLink (the
	// multi-path copy of Temuçin's MASc thesis, Queen's University 2021,
	// inside the kernel; at most 50). 0 means BRAID_GPU_HOST_SHARE where set, else by size as
	// the multi-path table says where there is one (MultiPathTable), else
	// by kind and size (fused.DefaultHostShare: on four H200s 8–11 % of
	// allreduces from 16 MiB, 8–11 % of broadcasts from 64 MiB, on two
	// H200s too, 8 % of reduce-scatters from 256 MiB blocks, none of
	// allgathers); negative never, which also leaves a broadcast above
	// 64 MiB on 2 GPUs to the copy engine's push (DefaultFusedMax). The
	// host region takes 16 MiB of /dev/shm, pinned.
	HostShare int
	// SlotBytes is the size of each of the 2·Size() slots of the region
	// that every rank registers when the DeviceComm is made: the memory
	// peers push into, which the fused kernels cycle through a round at a
	// time. 0 means fused.DefaultSlotBytes(Size()) (a 64 MiB region); it is
	// raised to OneShotMax.
	SlotBytes int
	// Groups[r] is the group of rank r's GPU (a socket, an NVLink clique)
	// for the hierarchical algorithms, "hierpipe" (the 3-stage pipelined
	// allreduce of Temuçin's MASc thesis, Queen's University 2021) and
	// "hier": they reduce within groups, then across. Nil puts every GPU in
	// one group; otherwise it has Size() entries.
	Groups []int
	// Segment is the bytes one message of a pipelined algorithm carries
	// (the ring's "segring", the broadcast chain); 0 chooses by size (see
	// DeviceSegment).
	Segment int
	// StreamOrdered makes calls return once they are queued, as NCCL's do,
	// instead of once their result is in place. The calls run in order on
	// Stream(): their buffers must be ready when the stream reaches them
	// (work that writes them is on Stream(), or on a stream Stream() waits
	// for), and hold the result once Synchronize returns or for work
	// queued on Stream() after the call. A call's error, a peer's death
	// say, is returned by a later call or by Synchronize.
	StreamOrdered bool

	// Tuning of the fused kernels, for experiments; the zero values
	// choose by kind and size. Each has a BRAID_GPU_* variable, read once
	// by NewDeviceComm for a field left at zero (deviceEnv lists them); a
	// value the field does not take, set or read, fails NewDeviceComm
	// with an InvalidArgument error naming it. Every rank must pass the
	// same values (NewDeviceComm compares them): ranks that cut a vector
	// differently would run kernels that never meet.

	// LL2Max is the largest one-shot allreduce, in bytes, that runs as a
	// two-shot in low-latency lines once above LLMax (BRAID_GPU_LL2_MAX;
	// 0 there: none); 0 means fused.DefaultLL2Bytes(Size()), negative never.
	LL2Max int
	// LLBlocks is the grid of a call in low-latency lines, 1 to 256
	// (BRAID_GPU_LL_BLOCKS); 0 means a thread per 8-byte word.
	LLBlocks int
	// Blocks is the most blocks a pipelined fused kernel runs with, 1 to
	// 256 (BRAID_GPU_BLOCKS); 0 means by kind and size.
	Blocks int
	// Threads is the block size of a pipelined fused kernel, a multiple
	// of 32 from 32 to 512 (BRAID_GPU_THREADS); 0 means by kind and size.
	Threads int
	// MinRounds is the fewest rounds a pipelined fused kernel cuts a
	// vector into, where areas of 1 KiB a block allow
	// (BRAID_GPU_ROUNDS); 0 means fused.DefaultMinRounds.
	MinRounds int
	// BcastRamp is how many halvings a fused broadcast on more than 2
	// GPUs cuts its last full round into, 1 to fused.MaxRamp
	// (BRAID_GPU_BCAST_RAMP, 0 to fused.MaxRamp); 0 means by size
	// (fused.DefaultBcastRamp), negative none.
	BcastRamp int
	// Pull moves the data of programs by pull, receivers reading the
	// senders' memory, instead of push (BRAID_GPU_PULL=1).
	Pull bool
	// Stats prints, when the communicator closes, where the time of its
	// synchronous program calls went (BRAID_GPU_STATS=1).
	Stats bool
	// Resident, where positive, runs small synchronous allreduces (those
	// in low-latency lines, up to ResidentMax bytes) on a kernel that
	// stays on the GPU between calls: a call then writes its arguments to
	// mapped host memory that the kernel polls, and costs no kernel launch
	// (BRAID_GPU_RESIDENT, a duration such as 200us; 0 there: off). The
	// kernel holds one SM while it waits, and ends after Resident without
	// such a call: a synchronisation of the whole device
	// (cudaDeviceSynchronize, torch.cuda.synchronize) waits until then.
	// Off where ranks share a GPU, for stream-ordered calls, and in
	// captures. 0 means off.
	Resident time.Duration
	// ResidentMax is the largest allreduce, in bytes, that the resident
	// kernel runs (BRAID_GPU_RESIDENT_MAX); 0 means
	// gpu.DefaultResidentMax.
	ResidentMax int

	// Table, where not nil, is a tuning table for calls on device buffers
	// (format: package plan): its entries name a schedule, or a fused
	// kernel ("gpu_oneshot" and "direct" for allreduce, "fused" for bcast,
	// allgather and reducescatter), as BRAID_ALGO names them, and win over
	// the model and over the caps' defaults (DefaultOneShotMax,
	// DefaultFusedMax), which a table measured on the machine supersedes;
	// a cap set here (OneShotMax, DirectMax, FusedMax) still holds, and
	// Algo and BRAID_ALGO win over the table. Nil reads the table Tuning
	// names.
	Table *plan.Table
	// Tuning names the device tuning table where Table is nil: a file
	// that braid tune --device cuda wrote, whose machine line records the
	// GPUs it was measured on; "none" for no table; "" for
	// BRAID_GPU_TUNING, then the file braid tune --device cuda caches
	// (DefaultDeviceTuningFile), if it exists. NewDeviceComm reads it
	// once. A table that cannot be read, names an algorithm Braid does
	// not have, records no GPUs (a host table) or other GPUs than this
	// machine's fails NewDeviceComm with an InvalidArgument naming the
	// field or the variable; the cached one is left out instead, with a
	// line on Options.Log.
	Tuning string
	// MultiPathTable, where not nil, gives the share of every round of a
	// fused two-shot allreduce or broadcast on more than 2 GPUs that
	// travels through host memory, by the call's size (the table's host
	// share at the call's bytes, as a percentage, at most 50; none where
	// it says "direct"), in place of fused.DefaultHostShare; HostShare,
	// where set, wins over it. Nil reads the table MultiPath names.
	MultiPathTable *multipath.Table
	// MultiPath names the multi-path table where MultiPathTable is nil: a
	// file that braid tune --device cuda --multipath wrote (format:
	// multipath.Table), "none" or "" for BRAID_GPU_MULTIPATH; unset,
	// none. NewDeviceComm reads it once; one that cannot be read fails it
	// with an InvalidArgument naming the field or the variable.
	MultiPath string
	// Model, where not nil, replaces plan.DefaultDeviceModel, the costs
	// the planner compares fused kernels and schedules with.
	Model *plan.DeviceModel

	// firstSeq is the fused kernels' first sequence number (tests: near
	// gpu.SeqLimit, to cross the reset); 0 means 1.
	firstSeq uint32
}

// deviceEnv are the BRAID_GPU_* variables: each sets a DeviceOptions
// field that the caller left at zero. parse reads the variable's value
// into the field's form (what a zero in the variable means becomes the
// field's negative "never"), or says what the variable takes.
var deviceEnv = []struct {
	name, field string
	get         func(o *DeviceOptions) *int
	parse       func(v string) (int, error)
}{
	{"BRAID_GPU_LL_MAX", "LLMax", func(o *DeviceOptions) *int { return &o.LLMax }, envBytes},
	{"BRAID_GPU_LL2_MAX", "LL2Max", func(o *DeviceOptions) *int { return &o.LL2Max }, envBytes},
	{"BRAID_GPU_LL_BLOCKS", "LLBlocks", func(o *DeviceOptions) *int { return &o.LLBlocks }, envRange(1, fused.MaxBlocks, 1)},
	{"BRAID_GPU_BLOCKS", "Blocks", func(o *DeviceOptions) *int { return &o.Blocks }, envRange(1, fused.MaxBlocks, 1)},
	{"BRAID_GPU_THREADS", "Threads", func(o *DeviceOptions) *int { return &o.Threads }, envRange(32, 512, 32)},
	{"BRAID_GPU_ROUNDS", "MinRounds", func(o *DeviceOptions) *int { return &o.MinRounds }, envRange(1, 1<<20, 1)},
	{"BRAID_GPU_BCAST_RAMP", "BcastRamp", func(o *DeviceOptions) *int { return &o.BcastRamp }, envZeroNever(envRange(0, fused.MaxRamp, 1))},
	{"BRAID_GPU_HOST_SHARE", "HostShare", func(o *DeviceOptions) *int { return &o.HostShare }, envZeroNever(envRange(0, 50, 1))},
	{"BRAID_GPU_RESIDENT_MAX", "ResidentMax", func(o *DeviceOptions) *int { return &o.ResidentMax }, envBytesIn(8, fused.LLMax, 8)},
}

// deviceFlags are the BRAID_GPU_* variables of DeviceOptions' switches:
// "1" sets the field, "0" leaves it.
var deviceFlags = []struct {
	name, field string
	get         func(o *DeviceOptions) *bool
}{
	{"BRAID_GPU_PULL", "Pull", func(o *DeviceOptions) *bool { return &o.Pull }},
	{"BRAID_GPU_STATS", "Stats", func(o *DeviceOptions) *bool { return &o.Stats }},
}

// envBytes reads a size in bytes (4096, 256K); 0 means never (-1).
func envBytes(v string) (int, error) {
	b, err := size.Parse(v)
	if err != nil || b < 0 || b > math.MaxInt32 {
		return 0, errors.New("want a size in bytes (256K, 1M; 0 for none)")
	}
	if b == 0 {
		return -1, nil
	}
	return int(b), nil
}

// envBytesIn reads a size in bytes (4096, 16K) from lo to hi, a multiple
// of step.
func envBytesIn(lo, hi, step int) func(string) (int, error) {
	return func(v string) (int, error) {
		b, err := size.Parse(v)
		if err != nil || b < int64(lo) || b > int64(hi) || b%int64(step) != 0 {
			return 0, fmt.Errorf("want a size in bytes (16K, 64K) from %d to %d, a multiple of %d", lo, hi, step)
		}
		return int(b), nil
	}
}

// envRange reads an integer from lo to hi, a multiple of step.
func envRange(lo, hi, step int) func(string) (int, error) {
	return func(v string) (int, error) {
		x, err := strconv.Atoi(v)
		if err != nil || x < lo || x > hi || x%step != 0 {
			if step > 1 {
				return 0, fmt.Errorf("want a multiple of %d from %d to %d", step, lo, hi)
			}
			return 0, fmt.Errorf("want an integer from %d to %d", lo, hi)
		}
		return x, nil
	}
}

// envZeroNever makes a 0 that parse reads the field's "never" (-1).
func envZeroNever(parse func(string) (int, error)) func(string) (int, error) {
	return func(v string) (int, error) {
		x, err := parse(v)
		if err == nil && x == 0 {
			x = -1
		}
		return x, err
	}
}

// resolve fills the fields left at zero from the BRAID_GPU_* variables
// and checks every field, naming the variable or field at fault.
func (o *DeviceOptions) resolve(getenv func(string) string) error {
	for _, e := range deviceEnv {
		v := getenv(e.name)
		if v == "" || *e.get(o) != 0 {
			continue
		}
		x, err := e.parse(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", e.name, v, err)
		}
		*e.get(o) = x
	}
	for _, e := range deviceFlags {
		switch v := getenv(e.name); v {
		case "", "0":
		case "1":
			*e.get(o) = true
		default:
			return fmt.Errorf("%s=%q: want 1 or 0", e.name, v)
		}
	}
	if v := getenv("BRAID_GPU_RESIDENT"); v != "" && o.Resident == 0 {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return fmt.Errorf("BRAID_GPU_RESIDENT=%q: want a duration (200us, 1ms; 0 for off)", v)
		}
		o.Resident = d
	}
	if o.Resident < 0 {
		return fmt.Errorf("DeviceOptions.Resident = %v: want 0 (off) or a positive duration", o.Resident)
	}
	check := func(field string, v, lo, hi, step int) error {
		if v != 0 && (v < lo || v > hi || v%step != 0) {
			return fmt.Errorf("DeviceOptions.%s = %d: want 0 or a multiple of %d from %d to %d", field, v, step, lo, hi)
		}
		return nil
	}
	return errors.Join(
		check("LLBlocks", o.LLBlocks, 1, fused.MaxBlocks, 1),
		check("Blocks", o.Blocks, 1, fused.MaxBlocks, 1),
		check("Threads", o.Threads, 32, 512, 32),
		check("MinRounds", o.MinRounds, 1, 1<<20, 1),
		check("BcastRamp", max(o.BcastRamp, 0), 1, fused.MaxRamp, 1),
		check("HostShare", max(o.HostShare, 0), 1, 50, 1),
		check("ResidentMax", o.ResidentMax, 8, fused.LLMax, 8),
	)
}

// shared lists the settings every rank must pass alike, resolved (the
// tables read: loadTables), for
// gpu.Options.Shared: ranks that decide differently from them would run
// different kernels or schedules and wait for each other until the
// deadline.
func (o *DeviceOptions) shared() []gpu.Setting {
	var out []gpu.Setting
	add := func(name string, v any) { out = append(out, gpu.Setting{Name: name, Value: fmt.Sprint(v)}) }
	for _, e := range deviceEnv {
		add("DeviceOptions."+e.field+" ("+e.name+")", *e.get(o))
	}
	add("DeviceOptions.Pull (BRAID_GPU_PULL)", o.Pull)
	add("DeviceOptions.Resident (BRAID_GPU_RESIDENT)", o.Resident)
	algos := make([]string, 0, len(o.Algo))
	for k, v := range o.Algo {
		algos = append(algos, k+"="+v)
	}
	slices.Sort(algos)
	add("DeviceOptions.Algo", strings.Join(algos, ","))
	add("DeviceOptions.OneShotMax", o.OneShotMax)
	add("DeviceOptions.DirectMax", o.DirectMax)
	add("DeviceOptions.FusedMax", o.FusedMax)
	add("DeviceOptions.SlotBytes", o.SlotBytes)
	add("DeviceOptions.Segment", o.Segment)
	add("DeviceOptions.Groups", o.Groups)
	add("DeviceOptions.Table (BRAID_GPU_TUNING)", tableDigest(o.Table))
	add("DeviceOptions.MultiPathTable (BRAID_GPU_MULTIPATH)", tableDigest(o.MultiPathTable))
	if o.Model != nil {
		add("DeviceOptions.Model", digest(fmt.Sprintf("%+v", *o.Model)))
	}
	add("first sequence number", o.firstSeq)
	return out
}
