// Package tcp is Braid's transport between hosts: TCP connections, one or
// more per pair of ranks, with tag matching, striping of large messages,
// authentication with the job's secret, and prompt failure when a peer
// dies. It also connects processes of one host when asked (it listens on
// loopback in tests).
//
// # Connecting
//
// Connect listens (Options.ListenAddr, or the interface that
// Options.Interfaces names, every interface by default),
// publishes "host:port" under AddrKey(cfg.Prefix, rank) in cfg.Store and
// reads the addresses of the ranks it dials: the lower rank of each pair
// dials Options.Streams connections to the higher one. A handshake on each
// connection proves on both sides that they hold cfg.Secret
// (HMAC-SHA256 challenge and response; the secret never travels); a
// connection that fails it is logged and closed and does not disturb the
// job. The listener closes when Connect returns.
//
// # Wire format
//
// Every frame is a 44-byte header (magic, version, type, the Tag, a message
// id, the message length, the frame's offset and length) and a payload,
// written with writev. Types: data, abort (the payload is the reason) and
// close. A message of at least Options.StripeSize bytes is split into one
// frame per connection, which the receiver places by offset; others are one
// frame on the connection that their tag hashes to, so that messages with
// the same tag stay in order.
//
// # Progress
//
// Sockets are non-blocking and every read and write is one non-blocking
// system call, made by whoever owns that side of the connection at the
// moment: Isend writes a message up to 64 KiB itself when the connection is
// free; Request.Test reads and writes what the sockets take without
// blocking; and each connection has a reader and a writer goroutine that
// park in the netpoller while there is nothing to do, so that messages
// also move while nobody polls, and Done channels close on their own.
// Payloads are read straight into a posted receive's buffer; a message
// that arrives first waits in pooled chunks until its Irecv (and the
// Config.Unexpected hook hears of it). The chunks are made as its bytes
// arrive, not at the length its frames announce, so that a corrupt or
// hostile length costs what was sent; a connection that ends inside a
// frame fails naming the peer and how far the frame got.
//
// # Failures
//
// End of file or an error on a connection makes the peer lost at once:
// Config.Lost is called, and pending and later requests to it fail with
// transport.ErrPeerLost naming the peer's rank and address. Messages that
// arrived in full before can still be received. Mesh.Abort sends an abort
// frame to every peer without blocking (their requests fail with
// transport.ErrAborted); Mesh.Close fails pending requests with
// transport.ErrClosed and waits for the mesh's goroutines. A frame that does
// not parse loses the peer with a log line. Connections use TCP keepalive
// (15 s idle, then 3 probes 5 s apart) to notice a peer whose machine
// disappeared.
//
// # Example
//
// Every rank runs, with its own rank and a KV store that all reach:
//
//	tr := tcp.New(tcp.Options{})
//	mesh, err := tr.Connect(ctx, transport.Config{
//		Self:   transport.Endpoint{Rank: rank},
//		Peers:  peers, // every other rank
//		World:  world,
//		Store:  store,
//		Prefix: "job42/tcp",
//		Secret: secret,
//		Lost:   func(peer int, err error) { log.Print(err) },
//	})
//	if err != nil {
//		return err
//	}
//	defer mesh.Close()
//	c := mesh.Conn(peer)
//	s, _ := c.Isend(transport.Tag{Comm: 1, Seq: 1}, data)
//	r, _ := c.Irecv(transport.Tag{Comm: 1, Seq: 1}, buf)
//	err = transport.Wait(ctx, nil, s, r)
package tcp
