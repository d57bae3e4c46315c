package bootstrap_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/braid-ccl/braid/bootstrap"
)

// Rank 0 serves a TCP store; another rank dials it, waits for a key and
// counts itself in.
func ExampleServeTCPStore() {
	secret := bootstrap.NewSecret()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := bootstrap.ServeTCPStore(context.Background(), ln, secret, log.Printf)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := bootstrap.DialTCPStore(ctx, srv.Addr().String(), secret)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	go srv.Local().Set(ctx, "addr/0", []byte("10.0.0.1:5000")) // rank 0
	addr, err := s.Get(ctx, "addr/0")                          // waits for it
	if err != nil {
		log.Fatal(err)
	}
	n, err := s.Add(ctx, "arrived", 1)
	fmt.Println(string(addr), n, err)
	// Output: 10.0.0.1:5000 1 <nil>
}

// A rank started by torchrun finds its store one port above torchrun's.
func ExampleFromLookup() {
	env := map[string]string{
		"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
	}
	info, err := bootstrap.FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	fmt.Println(info, err)
	// Output: rank 1 of 4 (local 1 of 4), launcher torchrun, job "torchrun-127.0.0.1-29500", store "127.0.0.1:29501" <nil>
}
