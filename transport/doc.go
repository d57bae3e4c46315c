// Package transport defines how Braid moves bytes between two ranks: the
// Transport, Mesh, Conn and Request interfaces that inproc (goroutine ranks),
// shm (processes on one host) and tcp (hosts) implement, and the errors they
// return.
//
// A Conn is a message channel to one peer with tag matching: Isend and Irecv
// start operations that complete later; Request.Test makes progress. Nothing
// in a Conn blocks for long, so one goroutine (the executor) can drive many
// sends and receives at once, as an MPI progress engine does.
//
// Example (inside a rank, with a Mesh already connected):
//
//	c := mesh.Conn(peer)
//	sreq, _ := c.Isend(tag, data)
//	rreq, _ := c.Irecv(tag, buf)
//	err := transport.Wait(ctx, nil, sreq, rreq)
package transport
