// Package dtype defines the element types and reduction operators that Braid's
// collectives accept. The root package re-exports them as braid.DType and
// braid.Op; lower layers (reduction kernels, executor) use them from here so
// that they need not import the API package.
package dtype
