// Package transport carries bytes between dpvm daemons and clients. Every
// connection is QUIC with mutual TLS under the cluster CA (package pki):
// one connection per pair of endpoints, multiplexing long-lived streams.
// Beside it, connections offer a bulk lane for large payloads (BulkConn:
// TCP, negotiated over the QUIC connection, authenticated by a TLS 1.3
// handshake with the same certificates and sealed under its keys).
//
// The daemon sees connections through the small Conn and Stream
// interfaces defined here, so the protocol code does not depend on
// quic-go's concrete types.
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/dpvm/dpvm/daemon/pki"
)

// Stream is a bidirectional byte stream within a connection. Close closes
// the sending direction.
type Stream interface {
	io.Reader
	io.Writer
	Close() error
}

// Conn is a connection to one peer.
type Conn interface {
	// OpenStream opens a new stream to the peer.
	OpenStream(ctx context.Context) (Stream, error)
	// AcceptStream waits for the peer to open a stream.
	AcceptStream(ctx context.Context) (Stream, error)
	// Peer is who the peer's verified certificate says it is.
	Peer() pki.Peer
	// RemoteAddr is the peer's network address.
	RemoteAddr() string
	// Close ends the connection, telling the peer why.
	Close(reason string) error
	// Done is closed when the connection has ended, for any reason.
	Done() <-chan struct{}
}

// Endpoint is one daemon's or client's end of a transport: it accepts
// connections (if it listens) and dials others.
type Endpoint interface {
	// Addr is the address peers dial to reach this endpoint.
	Addr() string
	// Accept waits for the next incoming connection; ErrClosed after Close.
	Accept(ctx context.Context) (Conn, error)
	// Dial connects to the endpoint at addr.
	Dial(ctx context.Context, addr string) (Conn, error)
	// Close stops listening and closes every connection, telling peers.
	Close() error
	// Abort stops at once without telling any peer, as a crash would.
	Abort()
}

// Network makes endpoints. QUICNetwork (UDP sockets, the default) is the
// real one; Mem is an in-memory network for deterministic tests.
type Network interface {
	// Listen makes an endpoint that accepts connections at addr.
	Listen(addr string, id *pki.Credential, cfg Config) (Endpoint, error)
	// Dialer makes an endpoint that only dials, suited to reaching peer.
	Dialer(peer string, id *pki.Credential, cfg Config) (Endpoint, error)
}

// QUICNetwork is the real network: QUIC over UDP.
type QUICNetwork struct{}

// Listen opens a listening QUIC endpoint on addr.
func (QUICNetwork) Listen(addr string, id *pki.Credential, cfg Config) (Endpoint, error) {
	return Listen(addr, id, cfg)
}

// Dialer opens a dialing-only QUIC endpoint on a local address suited to
// reaching peer.
func (QUICNetwork) Dialer(peer string, id *pki.Credential, cfg Config) (Endpoint, error) {
	return Dialer(LocalFor(peer), id, cfg)
}

// Config tunes the QUIC transport. The zero value is usable.
type Config struct {
	// IdleTimeout closes a connection that has been silent this long
	// (default 30s; daemons send heartbeats well within it).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds connection set-up (default 5s).
	HandshakeTimeout time.Duration
	// StreamWindow and ConnWindow are the largest flow-control windows
	// (defaults 16 MiB and 32 MiB).
	StreamWindow, ConnWindow uint64
	// NoBulk turns the bulk lane off (BulkConn): a listening endpoint
	// then opens no TCP listener and offers none to its peers.
	NoBulk bool
	// MaxConns bounds the connections a listening endpoint holds at once,
	// those still in their handshake included (default DefaultMaxConns):
	// one more is refused before its handshake.
	MaxConns int
	// RetryAbove is how many handshakes may be under way before a new
	// connection attempt must first prove it owns its source address, a
	// QUIC Retry round trip that makes spoofed floods cost nothing but a
	// packet (default 64; negative: always).
	RetryAbove int
	// Refused, if set, hears of each incoming connection that ended
	// before it was accepted (its handshake failed: a certificate of
	// another CA, or none; or it timed out) and of each refused past
	// MaxConns, with the peer's address and why. It must not block.
	Refused func(addr, why string)
}

// DefaultMaxConns is Config.MaxConns's default.
const DefaultMaxConns = 4096

func (c Config) quic() *quic.Config {
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = 16 << 20
	}
	if c.ConnWindow == 0 {
		c.ConnWindow = 32 << 20
	}
	return &quic.Config{
		HandshakeIdleTimeout: c.HandshakeTimeout,
		MaxIdleTimeout:       c.IdleTimeout,
		// Start with large windows: checkpoints travel on fresh streams,
		// and growing the window from 1 MiB cost a 16 MiB move ~25%.
		InitialStreamReceiveWindow:     c.StreamWindow,
		MaxStreamReceiveWindow:         c.StreamWindow,
		InitialConnectionReceiveWindow: c.ConnWindow,
		MaxConnectionReceiveWindow:     c.ConnWindow,
		MaxIncomingStreams:             1 << 12,
		MaxIncomingUniStreams:          1, // the peer's bulk lane offer
		KeepAlivePeriod:                c.IdleTimeout / 3,
	}
}

// QUIC is one endpoint's QUIC transport: a single UDP socket that listens
// (if asked to) and dials.
type QUIC struct {
	udp    *net.UDPConn
	tr     *quic.Transport
	ln     *quic.Listener
	id     *pki.Credential
	conf   *quic.Config
	client *tls.Config
	bulk   *bulkListener // nil: no bulk lane offered
	cnt    connCounter
}

// connCounter counts a listener's connections: all it holds, and those
// still in their handshake (not yet accepted).
type connCounter struct {
	live, pending atomic.Int64
	max, retry    int64
	refused       func(addr, why string) // Config.Refused
}

// connState is one incoming connection's place in the counts.
type connState struct {
	handshaken sync.Once
	accepted   atomic.Bool
}

type connStateKey struct{}

// admit counts a connection attempt, refusing one past the bound. The
// counts drop when the connection ends (or its handshake fails).
func (c *connCounter) admit(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	if c.live.Add(1) > c.max {
		c.live.Add(-1)
		err := fmt.Errorf("%d connections held, at most %d", c.max, c.max)
		c.refuse(ci, err)
		return ctx, err
	}
	c.pending.Add(1)
	st := &connState{}
	context.AfterFunc(ctx, func() {
		c.handshakeOver(st)
		c.live.Add(-1)
		if !st.accepted.Load() {
			c.refuse(ci, fmt.Errorf("handshake: %w", context.Cause(ctx)))
		}
	})
	return context.WithValue(ctx, connStateKey{}, st), nil
}

// accepted takes a connection out of the handshake count.
func (c *connCounter) accepted(ctx context.Context) {
	if st, ok := ctx.Value(connStateKey{}).(*connState); ok {
		st.accepted.Store(true)
		c.handshakeOver(st)
	}
}

// refuse tells Config.Refused of a connection that did not make it.
func (c *connCounter) refuse(ci *quic.ClientInfo, err error) {
	if c.refused == nil {
		return
	}
	addr := "unknown"
	if ci != nil && ci.RemoteAddr != nil {
		addr = ci.RemoteAddr.String()
	}
	c.refused(addr, err.Error())
}

// handshakeOver takes st out of the handshake count, once.
func (c *connCounter) handshakeOver(st *connState) {
	st.handshaken.Do(func() { c.pending.Add(-1) })
}

// busy says whether new attempts must prove their source address first.
func (c *connCounter) busy(net.Addr) bool { return c.retry < 0 || c.pending.Load() > c.retry }

// Listen opens a UDP socket on addr ("127.0.0.1:0" for any port) and
// accepts connections from holders of certificates of the cluster CA.
func Listen(addr string, id *pki.Credential, cfg Config) (*QUIC, error) {
	q, err := open(addr, id, cfg)
	if err != nil {
		return nil, err
	}
	q.cnt.max, q.cnt.retry, q.cnt.refused = int64(cfg.MaxConns), int64(cfg.RetryAbove), cfg.Refused
	if q.cnt.max <= 0 {
		q.cnt.max = DefaultMaxConns
	}
	if cfg.RetryAbove == 0 {
		q.cnt.retry = 64
	}
	q.tr.ConnContext = q.cnt.admit
	q.tr.VerifySourceAddress = q.cnt.busy
	q.ln, err = q.tr.Listen(id.ServerConfig(), q.conf)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if !cfg.NoBulk {
		// A lane that cannot be opened is not fatal: connections then
		// carry everything over QUIC.
		if b, err := listenBulk(q.udp.LocalAddr().(*net.UDPAddr), id, q.conf.HandshakeIdleTimeout, cfg.Refused); err == nil {
			q.bulk = b
		}
	}
	return q, nil
}

// Dialer opens a UDP socket on local for dialing only (clients). LocalFor
// picks a suitable local address for reaching a given peer.
func Dialer(local string, id *pki.Credential, cfg Config) (*QUIC, error) {
	return open(local, id, cfg)
}

// LocalFor is the local address to dial peer from: the loopback interface
// of the same family for a loopback peer, any interface otherwise.
func LocalFor(peer string) string {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return ":0"
	}
	ip := net.ParseIP(host)
	switch {
	case host == "localhost" || (ip != nil && ip.To4() != nil && ip.IsLoopback()):
		return "127.0.0.1:0"
	case ip != nil && ip.IsLoopback():
		return "[::1]:0"
	}
	return ":0"
}

func open(addr string, id *pki.Credential, cfg Config) (*QUIC, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("open UDP socket on %s: %w", addr, err)
	}
	// Larger socket buffers help QUIC's throughput; failing to get them is
	// not fatal.
	_ = udp.SetReadBuffer(8 << 20)
	_ = udp.SetWriteBuffer(8 << 20)
	tr := &quic.Transport{Conn: udp}
	if id != nil {
		// Stateless resets keyed by the credential: a daemon restarted
		// with it at the same address (a recovering master) resets the
		// connections of its previous process as soon as their peers
		// send on them, instead of leaving them to time out.
		k, err := id.DerivedKey("quic stateless reset")
		if err != nil {
			_ = udp.Close()
			return nil, err
		}
		key := quic.StatelessResetKey(k)
		tr.StatelessResetKey = &key
	}
	q := &QUIC{udp: udp, tr: tr, id: id, conf: cfg.quic()}
	if id != nil {
		q.client = id.ClientConfig()
	}
	return q, nil
}

// Addr is the local UDP address.
func (q *QUIC) Addr() string { return q.udp.LocalAddr().String() }

// ErrClosed is returned by Accept after Close.
var ErrClosed = errors.New("transport closed")

// Accept waits for the next incoming connection.
func (q *QUIC) Accept(ctx context.Context) (Conn, error) {
	if q.ln == nil {
		return nil, errors.New("transport is not listening")
	}
	for {
		c, err := q.ln.Accept(ctx)
		if err != nil {
			if errors.Is(err, quic.ErrServerClosed) || errors.Is(err, quic.ErrTransportClosed) {
				return nil, ErrClosed
			}
			return nil, err
		}
		q.cnt.accepted(c.Context())
		qc, err := q.wrap(c)
		if err != nil {
			_ = c.CloseWithError(1, err.Error())
			continue
		}
		return qc, nil
	}
}

// Dial connects to the endpoint at addr.
func (q *QUIC) Dial(ctx context.Context, addr string) (Conn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c, err := q.tr.Dial(ctx, ua, q.client, q.conf)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	qc, err := q.wrap(c)
	if err != nil {
		_ = c.CloseWithError(1, err.Error())
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return qc, nil
}

// Close stops listening, closes every connection and the socket.
func (q *QUIC) Close() error {
	if q.ln != nil {
		_ = q.ln.Close()
	}
	if q.bulk != nil {
		q.bulk.close()
	}
	err := q.tr.Close()
	_ = q.udp.Close()
	return err
}

type quicConn struct {
	c      *quic.Conn
	peer   pki.Peer
	client *tls.Config
	bulk   *bulkSide
}

func (q *QUIC) wrap(c *quic.Conn) (*quicConn, error) {
	p, err := pki.PeerOf(c.ConnectionState().TLS)
	if err != nil {
		return nil, err
	}
	qc := &quicConn{c: c, peer: p, client: q.client}
	q.startBulk(qc)
	return qc, nil
}

func (c *quicConn) OpenStream(ctx context.Context) (Stream, error) {
	return c.c.OpenStreamSync(ctx)
}

func (c *quicConn) AcceptStream(ctx context.Context) (Stream, error) {
	return c.c.AcceptStream(ctx)
}

func (c *quicConn) Peer() pki.Peer            { return c.peer }
func (c *quicConn) RemoteAddr() string        { return c.c.RemoteAddr().String() }
func (c *quicConn) Done() <-chan struct{}     { return c.c.Context().Done() }
func (c *quicConn) Close(reason string) error { return c.c.CloseWithError(0, reason) }

// Stats are a connection's transport figures, as QUIC reports them. Counts
// are the connection's own, from zero when it was made.
type Stats struct {
	SmoothedRTT, MinRTT          time.Duration
	BytesSent, BytesReceived     uint64
	PacketsSent, PacketsReceived uint64
	PacketsLost                  uint64
	CongestionWindow             uint64
}

// StatsConn is a Conn that reports transport figures: QUIC connections do,
// the in-memory network's do not.
type StatsConn interface {
	Conn
	Stats() Stats
}

// Stats returns quic-go's figures for the connection.
func (c *quicConn) Stats() Stats {
	s := c.c.ConnectionStats()
	return Stats{SmoothedRTT: s.SmoothedRTT, MinRTT: s.MinRTT,
		BytesSent: s.BytesSent, BytesReceived: s.BytesReceived,
		PacketsSent: s.PacketsSent, PacketsReceived: s.PacketsReceived,
		PacketsLost: s.PacketsLost, CongestionWindow: s.CongestionWindow}
}

// Abort closes the socket without telling any peer, as a crash would: the
// peers notice only by silence. For tests of failure detection.
func (q *QUIC) Abort() {
	_ = q.udp.Close()
	_ = q.tr.Close()
	if q.bulk != nil {
		q.bulk.close()
	}
}

// Overloaded reports whether err is a peer turning a new connection away
// because it cannot take it now (QUIC's CONNECTION_REFUSED: its queue of
// connections to accept is full): worth trying again later.
func Overloaded(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused
}
