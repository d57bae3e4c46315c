package reduce_test

import (
	"fmt"
	"unsafe"

	"github.com/braid-ccl/braid/internal/dtype"
	"github.com/braid-ccl/braid/internal/reduce"
)

// bytesOf views a []float32 as its bytes, as the executor does with user
// buffers; no copy is made.
func bytesOf(s []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*4)
}

// An average over three ranks: sum the contributions with the kernel For
// returns, then divide once with Divide.
func ExampleFor() {
	acc := []float32{1, 2, 3, 4}
	others := [][]float32{{10, 20, 30, 40}, {100, 200, 300, 400}}

	sum, err := reduce.For(dtype.Float32, dtype.Avg) // the sum kernel
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range others {
		sum(bytesOf(acc), bytesOf(o))
	}
	if err := reduce.Divide(dtype.Float32, bytesOf(acc), 1+len(others)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(acc)

	_, err = reduce.For(dtype.Float32, dtype.BXor)
	fmt.Println(err)
	// Output:
	// [37 74 111 148]
	// reduce: op bxor is not supported on dtype float32: bitwise ops are defined on integer types only
}

// For3 fuses the reduction with the copy to a third buffer, as a ring step
// that receives into a scratch buffer and forwards the sum does.
func ExampleFor3() {
	a := []float32{1.5, -2, 3}
	b := []float32{0.5, 2, -7}
	out := make([]float32, 3)
	max, _ := reduce.For3(dtype.Float32, dtype.Max)
	max(bytesOf(out), bytesOf(a), bytesOf(b))
	fmt.Println(out)
	// Output: [1.5 2 3]
}
