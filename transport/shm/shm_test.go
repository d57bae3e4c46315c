package shm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(New()))
}

func TestConformanceNoCMA(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(NewWithOptions(Options{NoCMA: true})))
}

func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, transporttest.FactoryFor(NewWithOptions(Options{RingSize: 16 << 10, EagerLimit: 1000, Slots: 8})))
}

func TestNoFilesLeft(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meshes, err := transporttest.Connect(ctx, NewWithOptions(Options{Dir: dir}), 3, transporttest.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("segment files left after Connect: %v", files)
	}
	for _, m := range meshes {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestCanConnect(t *testing.T) {
	tr := New()
	if tr.Name() != "shm" {
		t.Errorf("Name() = %q", tr.Name())
	}
	a, b := transport.Endpoint{Rank: 0, Host: "h1"}, transport.Endpoint{Rank: 1, Host: "h1"}
	if !tr.CanConnect(a, b) {
		t.Error("CanConnect on one host = false")
	}
	b.Host = "h2"
	if tr.CanConnect(a, b) {
		t.Error("CanConnect across hosts = true")
	}
}

func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}
