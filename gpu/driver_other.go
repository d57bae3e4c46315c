//go:build !linux

package gpu

import (
	"fmt"

	"github.com/braid-ccl/braid/cuda"
)

func noDriver() error { return fmt.Errorf("gpu: %w", cuda.ErrNoDriver) }

func addressRange(p cuda.DevicePtr) (cuda.DevicePtr, int, error) { return 0, 0, noDriver() }

func bufferID(p cuda.DevicePtr) (uint64, error) { return 0, noDriver() }

// PointerDevice returns the ordinal of the GPU whose memory p points into.
func PointerDevice(p cuda.DevicePtr) (cuda.Device, error) { return 0, noDriver() }

func loadExtra() error { return noDriver() }
