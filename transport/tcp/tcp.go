package tcp

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/braid-ccl/braid/transport"
)

// DefaultStreams is the number of connections per peer when
// Options.Streams is zero.
const DefaultStreams = 2

// DefaultStripeSize is the message length from which messages are split
// across a peer's connections when Options.StripeSize is zero.
const DefaultStripeSize = 1 << 20

// Options configures the TCP transport. The zero value lets Braid choose.
type Options struct {
	// Streams is the number of TCP connections per pair of ranks (at most
	// 64); messages of at least StripeSize bytes are split across them.
	// The lower rank of a pair dials, and its value decides. Zero means
	// DefaultStreams.
	Streams int

	// StripeSize is the message length from which messages are striped
	// across the Streams connections. Zero means DefaultStripeSize.
	StripeSize int

	// ListenAddr is the address to listen on, "host:port". Empty means
	// ":0": every interface, a port chosen by the system.
	ListenAddr string

	// Interfaces chooses the interface to listen on and to advertise,
	// when ListenAddr is empty: a list of interface names as
	// NCCL_SOCKET_IFNAME takes them (ParseIfaceSpec: "eth0", "eth,ib",
	// "^docker,lo", "=eth0"). The first interface that is up and matches
	// gives the address, IPv4 before IPv6. BRAID_SOCKET_IFNAME sets it.
	Interfaces string

	// AdvertiseHost is the host name or address published for peers to
	// dial (BRAID_ADVERTISE_ADDR), for example a NAT's address. Empty
	// means the address Interfaces selects, else the ListenAddr host if
	// it names one, else an address the machine's host name resolves to
	// that an interface here holds, else the first address of an
	// interface that is up and is neither loopback nor a docker or
	// libvirt bridge, else 127.0.0.1.
	AdvertiseHost string

	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF on every connection. Zero
	// leaves the kernel's automatic tuning, which on Linux grows further
	// than an explicit size may (net.core.rmem_max caps those).
	SocketBuffer int

	// HandshakeTimeout bounds one connection's authentication. Zero means
	// 10 s.
	HandshakeTimeout time.Duration

	// Logger receives refused connections and protocol errors. Nil means
	// log.Default().
	Logger *log.Logger
}

func (o *Options) streams() int {
	switch {
	case o.Streams <= 0:
		return DefaultStreams
	case o.Streams > maxStreams:
		return maxStreams
	}
	return o.Streams
}

func (o *Options) stripeMin() int {
	if o.StripeSize <= 0 {
		return DefaultStripeSize
	}
	return o.StripeSize
}

func (o *Options) logger() *log.Logger {
	if o.Logger == nil {
		return log.Default()
	}
	return o.Logger
}

func (o *Options) handshakeTimeout() time.Duration {
	if o.HandshakeTimeout <= 0 {
		return 10 * time.Second
	}
	return o.HandshakeTimeout
}

// Transport is the TCP transport. It connects any two ranks.
type Transport struct {
	opts Options
}

// New returns a TCP transport with opts.
func New(opts Options) *Transport { return &Transport{opts: opts} }

var _ transport.Transport = (*Transport)(nil)

// Name returns "tcp".
func (t *Transport) Name() string { return "tcp" }

// CanConnect reports true: TCP reaches every rank.
func (t *Transport) CanConnect(a, b transport.Endpoint) bool { return true }

// AddrKey returns the store key under which rank publishes its address.
func AddrKey(prefix string, rank int) string {
	return prefix + "/addr/" + strconv.Itoa(rank)
}

// Connect listens, publishes "host:port" under AddrKey(cfg.Prefix, rank)
// in cfg.Store, and connects to every rank in cfg.Peers: the lower rank of
// each pair dials Streams connections to the higher one, and both sides
// prove that they hold cfg.Secret. It returns when every connection is up,
// or with an error (naming the ranks still missing) when ctx ends. The
// listener is closed when Connect returns; connections that fail the
// handshake are logged and closed without disturbing the others.
func (t *Transport) Connect(ctx context.Context, cfg transport.Config) (transport.Mesh, error) {
	self := cfg.Self.Rank
	if cfg.World <= 0 || self < 0 || self >= cfg.World {
		return nil, fmt.Errorf("tcp: rank %d of a world of %d", self, cfg.World)
	}
	m := newMesh(&cfg, &t.opts)
	if len(cfg.Peers) == 0 {
		return m, nil
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("tcp: rank %d: no store to exchange addresses", self)
	}
	seen := make(map[int]bool)
	for _, e := range cfg.Peers {
		if e.Rank < 0 || e.Rank >= cfg.World || e.Rank == self || seen[e.Rank] {
			return nil, fmt.Errorf("tcp: rank %d: bad peer rank %d in a world of %d", self, e.Rank, cfg.World)
		}
		seen[e.Rank] = true
	}

	lc := net.ListenConfig{}
	listen, host := t.opts.ListenAddr, t.opts.AdvertiseHost
	if listen == "" && t.opts.Interfaces != "" {
		ip, _, err := InterfaceAddr(t.opts.Interfaces)
		if err != nil {
			return nil, fmt.Errorf("tcp: rank %d: BRAID_SOCKET_IFNAME (Options.Interfaces): %w", self, err)
		}
		listen = net.JoinHostPort(ip.String(), "0")
	}
	if listen == "" {
		listen = ":0"
	}
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listening on %s: %w", self, listen, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if host == "" {
		host = defaultHost(ctx, listen)
	}
	addr := net.JoinHostPort(host, port)
	if err := cfg.Store.Set(ctx, AddrKey(cfg.Prefix, self), []byte(addr)); err != nil {
		ln.Close()
		return nil, fmt.Errorf("tcp: rank %d: publishing address: %w", self, err)
	}
	c := &connector{t: t, m: m, cfg: &cfg, ln: ln, addr: addr, conns: make(map[net.Conn]bool), claimed: make(map[[2]int]bool)}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	m.start()
	return m, nil
}
