package ddp

import (
	"context"
	"fmt"

	"github.com/braid-ccl/braid"
)

// Broadcast copies the parameters of root to every rank, so that all
// ranks start training from the same model (as Horovod's
// broadcast_parameters and PyTorch DDP's constructor do). Every rank
// passes its buffers in the same order, of the same lengths and element
// types: []float32, []float64, []braid.Half, []braid.BF16 or braid.Raw.
// Parameters of one element type travel together, in broadcasts of at
// most DefaultFusionThreshold bytes.
func Broadcast(ctx context.Context, c *braid.Comm, params []any, root int) error {
	type part struct {
		b []byte
		d braid.DType
	}
	parts := make([]part, len(params))
	for i, p := range params {
		b, d, err := view(p)
		if err != nil {
			return fmt.Errorf("ddp: rank %d: parameter %d: %w", c.Rank(), i, err)
		}
		parts[i] = part{b, d}
	}
	if c.Size() == 1 {
		return nil
	}
	for start := 0; start < len(parts); {
		// The run of parameters of one element type that fits the buffer.
		d, size, end := parts[start].d, 0, start
		for end < len(parts) && parts[end].d == d && (end == start || size+len(parts[end].b) <= DefaultFusionThreshold) {
			size += len(parts[end].b)
			end++
		}
		if end-start == 1 {
			if err := c.Bcast(ctx, braid.Raw{Bytes: parts[start].b, Type: d}, root); err != nil {
				return err
			}
			start = end
			continue
		}
		buf := make([]byte, size)
		if c.Rank() == root {
			off := 0
			for _, p := range parts[start:end] {
				off += copy(buf[off:], p.b)
			}
		}
		if err := c.Bcast(ctx, braid.Raw{Bytes: buf, Type: d}, root); err != nil {
			return err
		}
		if c.Rank() != root {
			off := 0
			for _, p := range parts[start:end] {
				off += copy(p.b, buf[off:])
			}
		}
		start = end
	}
	return nil
}
