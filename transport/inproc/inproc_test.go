package inproc_test

import (
	"context"
	"testing"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/inproc"
	"github.com/braid-ccl/braid/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int, hooks transporttest.Hooks) []transport.Mesh {
		meshes, err := transporttest.Connect(context.Background(), inproc.New(n), n, hooks)
		if err != nil {
			t.Fatal(err)
		}
		return meshes
	})
}
