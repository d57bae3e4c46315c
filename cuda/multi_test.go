package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/braid-ccl/braid/internal/dtype"
)

// f32Bytes encodes values as float32 bytes.
func f32Bytes(n int, f func(i int) float32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return b
}

// TestPeer copies between two GPUs with the copy engines (CopyPeer, and
// CopyDtoD on unified addresses), orders work across them with an event of
// one waited for on a stream of the other, and runs the fused
// reduce-and-copy on GPU 0 with one input and one destination in GPU 1's
// memory.
func TestPeer(t *testing.T) {
	needDevices(t, 2)
	ctx := testCtx(t)
	w0, w1 := newWorker(t, 0), newWorker(t, 1)
	can01, err := Device(0).CanAccessPeer(1)
	if err != nil {
		t.Fatal(err)
	}
	can10, _ := Device(1).CanAccessPeer(0)
	rank, _ := Device(0).P2PAttribute(P2PPerformanceRank, 1)
	atomics, _ := Device(0).P2PAttribute(P2PNativeAtomicSupported, 1)
	t.Logf("peer access 0->1 %v, 1->0 %v, performance rank %d, native atomics %d", can01, can10, rank, atomics)
	if err := EnablePeers(ctx, w0, w1); err != nil {
		t.Fatal(err)
	}
	if err := EnablePeers(ctx, w0, w1); err != nil {
		t.Fatalf("enabling peers twice: %v", err)
	}
	s0, s1 := stream(t, w0), stream(t, w1)
	const n = 1<<20 + 3
	a := f32Bytes(n, func(i int) float32 { return float32(i%1000) * 0.25 })
	b := f32Bytes(n, func(i int) float32 { return float32(i%777) - 100 })
	p0, p1 := alloc(t, w0, 4*n), alloc(t, w1, 4*n)
	q0, q1 := alloc(t, w0, 4*n), alloc(t, w1, 4*n)
	upload(t, w0, s0, p0, a)
	upload(t, w1, s1, p1, b)

	// GPU 0 pushes a to GPU 1 with cuMemcpyPeerAsync.
	ctx0, ctx1 := w0.Context(), w1.Context()
	do(t, w0, func(c *Ctx) error { return c.CopyPeer(q1, ctx1, p0, ctx0, 4*n, s0) })
	if err := w0.Sync(ctx, s0); err != nil {
		t.Fatal(err)
	}
	if got := download(t, w1, s1, q1, 4*n); !bytes.Equal(got, a) {
		t.Fatal("peer copy 0->1 changed the data")
	}
	if !can01 || !can10 {
		t.Skip("no peer access between devices 0 and 1: direct access not tested")
	}
	// GPU 1 pushes b into GPU 0's q0 with a plain device-to-device copy on
	// unified addresses, after waiting for an event that GPU 0 records
	// once it has cleared q0.
	var ev Event
	do(t, w0, func(c *Ctx) (err error) {
		if ev, err = c.NewEvent(EventDisableTiming); err != nil {
			return err
		}
		if err := c.Memset32(q0, 0, n, s0); err != nil {
			return err
		}
		return c.Record(ev, s0)
	})
	do(t, w1, func(c *Ctx) error {
		if err := c.StreamWaitEvent(s1, ev); err != nil {
			return err
		}
		return c.CopyDtoD(q0, p1, 4*n, s1)
	})
	if err := w1.Sync(ctx, s1); err != nil {
		t.Fatal(err)
	}
	do(t, w0, func(c *Ctx) error { return c.DestroyEvent(ev) })
	if got := download(t, w0, s0, q0, 4*n); !bytes.Equal(got, b) {
		t.Fatal("device-to-device copy 1->0 changed the data")
	}
	// GPU 0 reduces its a with GPU 1's b, writing the sum to its own q0
	// and to GPU 1's q1: one step of a ring allreduce over NVLink.
	do(t, w0, func(c *Ctx) error {
		return c.Reduce(s0, Reduction{DType: dtype.Float32, Op: dtype.Sum, Dst: q0, Dst2: q1, A: p0, B: p1, Count: n})
	})
	if err := w0.Sync(ctx, s0); err != nil {
		t.Fatal(err)
	}
	want := f32Bytes(n, func(i int) float32 { return float32(i%1000)*0.25 + (float32(i%777) - 100) })
	if got := download(t, w0, s0, q0, 4*n); !bytes.Equal(got, want) {
		t.Error("peer reduction: local destination wrong")
	}
	if got := download(t, w1, s1, q1, 4*n); !bytes.Equal(got, want) {
		t.Error("peer reduction: remote destination wrong")
	}
}

const ipcEnv = "BRAID_CUDA_IPC_CHILD"

// TestIPC shares device memory and an event with a child process (this
// test binary run again): the child opens both on GPU 1 (GPU 0 if there is
// one), waits for the event, checks the data, and writes a reduction of
// the parent's buffer into the parent's buffer.
func TestIPC(t *testing.T) {
	needDevices(t, 1)
	ctx := testCtx(t)
	w := newWorker(t, 0)
	s := stream(t, w)
	const n = 1 << 20 // int32 elements in each half
	buf := alloc(t, w, 8*n)
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i*7+1))
	}
	var ev Event
	var mh IPCMemHandle
	var eh IPCEventHandle
	do(t, w, func(c *Ctx) (err error) {
		if ev, err = c.NewEvent(EventInterprocess | EventDisableTiming); err != nil {
			return err
		}
		if err := c.Memset32(buf, 0, 2*n, s); err != nil {
			return err
		}
		if err := c.CopyHtoD(buf, data, s); err != nil {
			return err
		}
		if err := c.Record(ev, s); err != nil {
			return err
		}
		if mh, err = c.IPCGetMemHandle(buf); err != nil {
			return err
		}
		eh, err = c.IPCGetEventHandle(ev)
		return err
	})
	defer w.Do(context.Background(), func(c *Ctx) error { return c.DestroyEvent(ev) })
	cnt, _ := DeviceCount()
	childDev := min(1, cnt-1)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self, "-test.run=^TestIPCChild$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%s:%d:%d", ipcEnv, hex.EncodeToString(mh[:]), hex.EncodeToString(eh[:]), childDev, n))
	out, err := cmd.CombinedOutput()
	t.Logf("child on device %d:\n%s", childDev, out)
	if err != nil || !strings.Contains(string(out), "IPC child: ok") {
		t.Fatalf("child failed: %v", err)
	}
	got := download(t, w, s, buf.Add(4*n), 4*n)
	for i := range n {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != 2*uint32(i*7+1) {
			t.Fatalf("element %d of the child's reduction: %d, want %d", i, v, 2*(i*7+1))
		}
	}
}

// TestIPCChild is the child side of TestIPC; it runs only when TestIPC
// starts it.
func TestIPCChild(t *testing.T) {
	arg := os.Getenv(ipcEnv)
	if arg == "" {
		t.Skip("runs only as TestIPC's child process")
	}
	if err := ipcChild(arg); err != nil {
		t.Fatal(err)
	}
	fmt.Println("IPC child: ok")
}

func ipcChild(arg string) error {
	parts := strings.Split(arg, ":")
	if len(parts) != 4 {
		return fmt.Errorf("bad %s %q", ipcEnv, arg)
	}
	var mh IPCMemHandle
	var eh IPCEventHandle
	m, err1 := hex.DecodeString(parts[0])
	e, err2 := hex.DecodeString(parts[1])
	dev, err3 := strconv.Atoi(parts[2])
	n, err4 := strconv.Atoi(parts[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(m) != len(mh) || len(e) != len(eh) {
		return fmt.Errorf("bad %s %q: %v", ipcEnv, arg, err)
	}
	copy(mh[:], m)
	copy(eh[:], e)
	w, err := NewWorker(Device(dev), WorkerOptions{})
	if err != nil {
		return err
	}
	defer w.Close()
	got := make([]byte, 4*n)
	return w.Do(context.Background(), func(c *Ctx) error {
		s, err := c.NewStream(0)
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		p, err := c.IPCOpenMemHandle(mh)
		if err != nil {
			return err
		}
		defer c.IPCCloseMemHandle(p)
		ev, err := c.IPCOpenEventHandle(eh)
		if err != nil {
			return err
		}
		defer c.DestroyEvent(ev)
		if err := c.StreamWaitEvent(s, ev); err != nil {
			return err
		}
		if err := c.CopyDtoH(got, p, s); err != nil {
			return err
		}
		if err := c.Reduce(s, Reduction{DType: dtype.Int32, Op: dtype.Sum, Dst: p.Add(4 * n), A: p, B: p, Count: n}); err != nil {
			return err
		}
		if err := c.StreamSynchronize(s); err != nil {
			return err
		}
		for i := range n {
			if v := binary.LittleEndian.Uint32(got[4*i:]); v != uint32(i*7+1) {
				return fmt.Errorf("element %d read through IPC: %d, want %d", i, v, i*7+1)
			}
		}
		return nil
	})
}

// TestTopology discovers the GPUs and their links through NVML and checks
// that the picture agrees with the driver API.
func TestTopology(t *testing.T) {
	needDevices(t, 1)
	topo, err := DiscoverGPUTopology()
	if errors.Is(err, ErrNoNVML) {
		t.Skip("no NVML: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", topo)
	cnt, _ := DeviceCount()
	mapped := 0
	for _, g := range topo.GPUs {
		if g.CUDA < 0 {
			continue
		}
		mapped++
		id, err := Device(g.CUDA).PCIBusID()
		if err != nil || NormalizeBusID(id) != g.BusID {
			t.Errorf("NVML GPU %d (%s) mapped to CUDA device %d at %s", g.Index, g.BusID, g.CUDA, id)
		}
		for _, l := range g.Links {
			t.Logf("GPU %d link %d -> %s %s (gpu %d)", g.Index, l.Index, l.Remote, l.RemoteBusID, l.RemoteGPU)
		}
	}
	if mapped != cnt {
		t.Errorf("%d of %d CUDA devices found among NVML's GPUs", mapped, cnt)
	}
	for _, p := range topo.Pairs {
		t.Logf("GPU %d - GPU %d: %d NVLinks (switch %v), p2p read %v write %v nvlink %v atomics %v, ancestor %v",
			p.A, p.B, p.NVLinks, p.ViaSwitch, p.P2PRead, p.P2PWrite, p.P2PNVLink, p.P2PAtomics, p.Ancestor)
		if p.P2PNVLink == P2POK && p.NVLinks == 0 {
			t.Errorf("GPU %d - GPU %d: NVML reports NVLink peer-to-peer but no links were counted", p.A, p.B)
		}
	}
}
