package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDriver is wrapped by every error that comes from the absence of a
// usable CUDA driver: libcuda.so.1 cannot be loaded, lacks a function this
// package needs, or cuInit finds no device. errors.Is(err, ErrNoDriver) tells
// a machine without GPUs apart from a failing GPU call.
var ErrNoDriver = errors.New("unsupported: no CUDA driver")

// ErrNoNVML is wrapped by every error that comes from the absence of NVML
// (libnvidia-ml.so.1).
var ErrNoNVML = errors.New("unsupported: no NVML library")

// ErrWorkerClosed is returned by a Worker's methods after Close.
var ErrWorkerClosed = errors.New("cuda: worker closed")

// Result is a CUresult, the status code every driver function returns. It is
// an error itself, so that errors.Is(err, cuda.ErrOutOfMemory) finds the code
// inside an *Error.
type Result int32

// A few of the driver's result codes, named as in cuda.h without the
// CUDA_ERROR_ prefix.
const (
	Success                        Result = 0
	ErrInvalidValue                Result = 1
	ErrOutOfMemory                 Result = 2
	ErrNotInitialized              Result = 3
	ErrDeinitialized               Result = 4
	ErrNoDevice                    Result = 100
	ErrInvalidDevice               Result = 101
	ErrInvalidImage                Result = 200
	ErrInvalidContext              Result = 201
	ErrAlreadyMapped               Result = 208
	ErrPeerAccessUnsupported       Result = 217
	ErrInvalidPTX                  Result = 218
	ErrUnsupportedPTXVersion       Result = 222
	ErrInvalidHandle               Result = 400
	ErrNotFound                    Result = 500
	ErrNotReady                    Result = 600
	ErrIllegalAddress              Result = 700
	ErrLaunchOutOfResources        Result = 701
	ErrPeerAccessAlreadyEnabled    Result = 704
	ErrPeerAccessNotEnabled        Result = 705
	ErrHostMemoryAlreadyRegistered Result = 712
	ErrHostMemoryNotRegistered     Result = 713
	ErrNotSupported                Result = 801
	ErrStreamCaptureUnsupported    Result = 900 // an operation a capturing stream cannot record
	ErrStreamCaptureInvalidated    Result = 901 // the capture failed earlier and can only be ended
	ErrStreamCaptureUnjoined       Result = 904 // a stream forked into the capture did not join back
	ErrStreamCaptureImplicit       Result = 906 // work on the legacy stream during a capture
	ErrStreamCaptureWrongThread    Result = 908 // ended on another thread than it began (thread-local mode)
)

// Error returns the driver's name and description of r, such as
// "CUDA_ERROR_OUT_OF_MEMORY: out of memory", or "CUDA error 2" when the
// driver is not loaded or does not know r.
func (r Result) Error() string {
	name, text := resultText(r)
	if name == "" {
		return fmt.Sprintf("CUDA error %d", int32(r))
	}
	if text == "" {
		return name
	}
	return name + ": " + text
}

// Error is a failed driver call: the function that failed and its result.
type Error struct {
	Func string // the driver function, "cuMemAlloc_v2"
	Code Result
}

func (e *Error) Error() string {
	return "cuda: " + e.Func + ": " + e.Code.Error()
}

// Unwrap returns the result code, so that errors.Is matches Result values.
func (e *Error) Unwrap() error { return e.Code }

// check turns a driver result into nil or an *Error naming fn.
func check(fn string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Func: fn, Code: r}
}

// NVMLError is a failed NVML call.
type NVMLError struct {
	Func string // "nvmlDeviceGetNvLinkState"
	Code int32  // nvmlReturn_t
	Text string // nvmlErrorString
}

func (e *NVMLError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("nvml: %s: error %d", e.Func, e.Code)
	}
	return fmt.Sprintf("nvml: %s: %s (%d)", e.Func, e.Text, e.Code)
}
