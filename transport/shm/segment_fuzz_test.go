package shm

import (
	"encoding/binary"
	"testing"
)

// FuzzReadLayout feeds readLayout a segment header (a peer's file, which
// any process of the same user could have written) in a file of size
// bytes: a header it accepts must describe exactly the file, with the
// peer list, the slots and every ring inside it, and Connect's reads of
// them (peerRank, ring, slot) must stay in bounds.
func FuzzReadLayout(f *testing.F) {
	header := func(nPeers, nSlots, ringSize int) []byte {
		h := make([]byte, offPeers)
		binary.LittleEndian.PutUint64(h[offMagic:], magic)
		binary.LittleEndian.PutUint32(h[offVersion:], version)
		binary.LittleEndian.PutUint32(h[offNPeers:], uint32(nPeers))
		binary.LittleEndian.PutUint64(h[offRingSize:], uint64(ringSize))
		binary.LittleEndian.PutUint32(h[offNSlots:], uint32(nSlots))
		return h
	}
	for _, c := range [][3]int{{1, 8, 4096}, {3, 64, 8192}, {0, 1, 4096}, {7, 3, 65536}} {
		f.Add(header(c[0], c[1], c[2]), uint32(newLayout(c[0], c[1], c[2]).size))
	}
	f.Add(header(2, 8, 4096), uint32(4096))
	f.Add(header(1<<20, 1, 4096), uint32(1<<22))
	f.Add([]byte("BRAIDSHM"), uint32(8192))
	// A ring size whose product with the peers wraps around: the layout
	// came out at 8192 bytes and ring(0) sliced 2^62 bytes.
	f.Add(header(4, 1, 1<<62), uint32(8192))
	f.Fuzz(func(t *testing.T, hdr []byte, size uint32) {
		n := int(size % (8 << 20))
		mem := make([]byte, n)
		copy(mem, hdr)
		l, ok := readLayout(mem)
		if !ok {
			return
		}
		if l.size != len(mem) {
			t.Fatalf("accepted a layout of %d bytes in a file of %d", l.size, len(mem))
		}
		if offPeers+4*l.nPeers > l.slotsOff || l.slotsOff+8*l.nSlots*l.nPeers > l.ringsOff || l.ringsOff+l.nPeers*(ctrlSize+l.ringSize) > l.size {
			t.Fatalf("layout %+v overlaps or runs past the file", l)
		}
		s := &segment{mem: mem, l: l}
		for i := range l.nPeers {
			_ = s.peerRank(i)
			if i == 0 || i == l.nPeers-1 {
				r := s.ring(i)
				_ = r.Data[len(r.Data)-1]
				_ = s.u64(l.slot(i, l.nSlots-1))
			}
		}
	})
}
