package tcp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/braid-ccl/braid/transport"
	"github.com/braid-ccl/braid/transport/tcp"
	"github.com/braid-ccl/braid/transport/transporttest"
)

// Two ranks, here goroutines of one process, connect over loopback and
// swap a message.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := &transporttest.MemKV{} // ranks of a real job share a bootstrap store
	tr := tcp.New(tcp.Options{ListenAddr: "127.0.0.1:0"})
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			mesh, err := tr.Connect(ctx, transport.Config{
				Self:   transport.Endpoint{Rank: rank},
				Peers:  []transport.Endpoint{{Rank: 1 - rank}},
				World:  2,
				Store:  store,
				Prefix: "example/tcp",
				Secret: []byte("job secret"),
			})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer mesh.Close()
			c := mesh.Conn(1 - rank)
			tag := transport.Tag{Comm: 1, Seq: 1}
			buf := make([]byte, 5)
			s, _ := c.Isend(tag, []byte(fmt.Sprintf("hi %d!", rank)))
			r, _ := c.Irecv(tag, buf)
			if err := transport.Wait(ctx, nil, s, r); err != nil {
				fmt.Println(err)
				return
			}
			if rank == 0 {
				fmt.Printf("rank 0 got %q\n", buf)
			}
		})
	}
	wg.Wait()
	// Output: rank 0 got "hi 1!"
}
