// Package inproc connects ranks that are goroutines of one process. It is the
// transport of Braid's unit tests and of braid.NewLocal: a send and its
// receive meet in a mailbox and the data is copied once, directly from the
// sender's buffer into the receiver's.
//
// Example:
//
//	meshes := inproc.NewWorld(4, nil) // meshes[r] is rank r's Mesh
//	c := meshes[0].Conn(1)
//	req, _ := c.Isend(tag, data)
package inproc
