package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// BulkConn is a Conn that offers a bulk lane: byte streams to the same
// peer by another path, for large payloads. Over QUIC the lane is TCP,
// negotiated over the QUIC connection, authenticated by a TLS 1.3
// handshake with the same certificates and sealed under keys exported
// from it (sealedConn): one QUIC connection is CPU-bound in its per-packet
// work (packets of at most ~1450 bytes), while the lane moves records of
// up to 256 KiB and leaves segmentation to the kernel. On transport.Mem the
// lane is a second kind of in-memory stream, so tests exercise it.
type BulkConn interface {
	Conn
	// OpenBulk opens a stream on the bulk lane; ErrNoBulk when the peer
	// offers none.
	OpenBulk(ctx context.Context) (Stream, error)
	// AcceptBulk waits for the peer to open a bulk stream.
	AcceptBulk(ctx context.Context) (Stream, error)
}

// ErrNoBulk is returned by OpenBulk when the peer offers no bulk lane.
var ErrNoBulk = errors.New("the peer offers no bulk lane")

// The offer a QUIC endpoint makes on a unidirectional stream right after a
// connection is set up: a magic byte, the TCP port its bulk listener
// accepts on (the IP is the one the QUIC connection reached), and a random
// token that names this connection to that listener. A bulk stream opens
// with the token after its TLS handshake; the listener attaches it to the
// QUIC connection the token names if both carry the same certificate.
const (
	offerMagic = 0xb1
	tokenBytes = 32
	offerBytes = 1 + 2 + tokenBytes
)

type token [tokenBytes]byte

// Bounds on what a bulk listener holds: handshakes under way, and bulk
// streams per QUIC connection (the daemon keeps one each way).
const (
	maxBulkHandshakes = 64
	maxBulkStreams    = 16
)

// bulkListener is a QUIC endpoint's TCP listener for bulk streams.
type bulkListener struct {
	ln       net.Listener
	tls      *tls.Config
	handshak time.Duration
	refused  func(addr, why string) // Config.Refused
	pending  atomic.Int64           // handshakes under way

	mu    sync.Mutex
	conns map[token]*quicConn
	wg    sync.WaitGroup
	done  chan struct{}
}

// listenBulk opens the TCP listener beside a QUIC endpoint on udp's IP.
func listenBulk(udp *net.UDPAddr, id *pki.Credential, handshake time.Duration, refused func(addr, why string)) (*bulkListener, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: udp.IP, Zone: udp.Zone})
	if err != nil {
		return nil, fmt.Errorf("bulk lane: %w", err)
	}
	// No session tickets: the server would send them after its
	// handshake, where the client reads sealed records only.
	conf := id.ServerConfig()
	conf.SessionTicketsDisabled = true
	b := &bulkListener{ln: ln, tls: conf, handshak: handshake, refused: refused,
		conns: map[token]*quicConn{}, done: make(chan struct{})}
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

func (b *bulkListener) port() int { return b.ln.Addr().(*net.TCPAddr).Port }

func (b *bulkListener) close() {
	select {
	case <-b.done:
		return
	default:
	}
	close(b.done)
	_ = b.ln.Close()
	b.wg.Wait()
}

// register gives c a fresh token; unregister forgets it.
func (b *bulkListener) register(c *quicConn) (token, error) {
	var t token
	if _, err := rand.Read(t[:]); err != nil {
		return t, err
	}
	b.mu.Lock()
	b.conns[t] = c
	b.mu.Unlock()
	return t, nil
}

func (b *bulkListener) unregister(t token) {
	b.mu.Lock()
	delete(b.conns, t)
	b.mu.Unlock()
}

func (b *bulkListener) acceptLoop() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if b.pending.Add(1) > maxBulkHandshakes {
			b.pending.Add(-1)
			b.refuse(c, fmt.Errorf("bulk lane: %d handshakes under way", maxBulkHandshakes))
			continue
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			err := b.serve(c)
			b.pending.Add(-1)
			if err != nil {
				b.refuse(c, fmt.Errorf("bulk lane: %w", err))
			}
		}()
	}
}

// refuse closes c and tells Config.Refused why.
func (b *bulkListener) refuse(c net.Conn, err error) {
	_ = c.Close()
	if b.refused != nil {
		b.refused(c.RemoteAddr().String(), err.Error())
	}
}

// serve authenticates one incoming bulk stream and hands it to its QUIC
// connection.
func (b *bulkListener) serve(c net.Conn) error {
	setNoDelay(c)
	_ = c.SetDeadline(time.Now().Add(b.handshak))
	tc := tls.Server(&recordBounded{Conn: c}, b.tls)
	if err := tc.Handshake(); err != nil {
		return err
	}
	who, err := pki.PeerOf(tc.ConnectionState())
	if err != nil {
		return err
	}
	var t token
	if _, err := io.ReadFull(tc, t[:]); err != nil {
		return err
	}
	b.mu.Lock()
	qc := b.conns[t]
	b.mu.Unlock()
	if qc == nil || qc.peer != who {
		return errors.New("bulk stream for no connection of its certificate")
	}
	sc, err := newSealedConn(c, tc, false)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Time{})
	s := &bulkStream{c: sc, side: qc.bulk}
	if !qc.bulk.deliver(s) {
		return errors.New("bulk streams not accepted")
	}
	return nil
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// bulkStream is a bulk stream: sealed records on TCP after a TLS
// handshake (see sealedConn). Close closes both directions.
type bulkStream struct {
	c    *sealedConn
	side *bulkSide
}

func (s *bulkStream) Read(p []byte) (int, error)  { return s.c.Read(p) }
func (s *bulkStream) Write(p []byte) (int, error) { return s.c.Write(p) }
func (s *bulkStream) Close() error {
	s.side.forget(s)
	return s.c.Close()
}

// bulkSide is a connection's state of the bulk lane: the peer's offer and
// the streams it opened, waiting to be accepted.
type bulkSide struct {
	offered chan struct{} // closed when the peer's offer is known (or none will come)
	port    int           // the peer's bulk port (0: none)
	token   token         // what names this connection to the peer's listener
	mine    *token        // our token at our listener (nil: we offer none)

	mu     sync.Mutex
	accept chan Stream
	open   []Stream // streams delivered or opened, closed with the connection
	ended  bool
}

func newBulkSide() *bulkSide {
	return &bulkSide{offered: make(chan struct{}), accept: make(chan Stream, 16)}
}

// deliver queues an incoming stream for AcceptBulk; a connection holds at
// most maxBulkStreams.
func (b *bulkSide) deliver(s Stream) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended || len(b.open) >= maxBulkStreams {
		return false
	}
	select {
	case b.accept <- s:
		b.open = append(b.open, s)
		return true
	default:
		return false
	}
}

func (b *bulkSide) opened(s Stream) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return false
	}
	b.open = append(b.open, s)
	return true
}

// forget drops a closed stream from the connection's.
func (b *bulkSide) forget(s Stream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.open {
		if x == s {
			b.open = append(b.open[:i], b.open[i+1:]...)
			return
		}
	}
}

// end closes every bulk stream of the connection.
func (b *bulkSide) end() {
	b.mu.Lock()
	b.ended = true
	open := b.open
	b.open = nil
	b.mu.Unlock()
	for _, s := range open {
		_ = s.Close() // forget finds nothing: open is already empty
	}
}

// startBulk makes the offer to the peer (of no lane, if q does not listen
// for bulk streams) and reads the peer's, for a connection just set up.
func (q *QUIC) startBulk(c *quicConn) {
	c.bulk = newBulkSide()
	port, t := 0, token{}
	if q.bulk != nil {
		if tk, err := q.bulk.register(c); err == nil {
			c.bulk.mine = &tk
			port, t = q.bulk.port(), tk
		}
	}
	// Port 0 offers no lane: the peer knows at once.
	go c.sendOffer(port, t)
	go c.readOffer()
	go func() {
		<-c.c.Context().Done()
		if q.bulk != nil && c.bulk.mine != nil {
			q.bulk.unregister(*c.bulk.mine)
		}
		c.bulk.end()
	}()
}

func (c *quicConn) sendOffer(port int, t token) {
	ctx, cancel := context.WithTimeout(c.c.Context(), 10*time.Second)
	defer cancel()
	s, err := c.c.OpenUniStreamSync(ctx)
	if err != nil {
		return
	}
	b := make([]byte, 0, offerBytes)
	b = append(b, offerMagic)
	b = binary.LittleEndian.AppendUint16(b, uint16(port))
	b = append(b, t[:]...)
	if _, err := s.Write(b); err == nil {
		_ = s.Close()
	}
}

// readOffer reads the peer's offer: the first unidirectional stream it
// opens, of a fixed size. A connection whose peer offers nothing (a
// client, or a peer that does not listen) has no bulk lane.
func (c *quicConn) readOffer() {
	defer close(c.bulk.offered)
	s, err := c.c.AcceptUniStream(c.c.Context())
	if err != nil {
		return
	}
	var b [offerBytes + 1]byte
	n, err := io.ReadFull(io.LimitReader(s, offerBytes+1), b[:])
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != offerBytes || b[0] != offerMagic {
		s.CancelRead(1)
		return
	}
	c.bulk.port = int(binary.LittleEndian.Uint16(b[1:]))
	copy(c.bulk.token[:], b[3:offerBytes])
}

// OpenBulk dials the peer's bulk listener, checks that it holds the same
// certificate as the QUIC connection, and names the connection with the
// peer's token.
func (c *quicConn) OpenBulk(ctx context.Context) (Stream, error) {
	select {
	case <-c.bulk.offered:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.bulk.port == 0 {
		return nil, ErrNoBulk
	}
	ra, ok := c.c.RemoteAddr().(*net.UDPAddr)
	if !ok {
		return nil, ErrNoBulk
	}
	addr := &net.TCPAddr{IP: ra.IP, Port: c.bulk.port, Zone: ra.Zone}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("bulk lane to %s: %w", addr, err)
	}
	setNoDelay(nc)
	tc := tls.Client(&recordBounded{Conn: nc}, c.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("bulk lane to %s: %w", addr, err)
	}
	who, err := pki.PeerOf(tc.ConnectionState())
	if err != nil || who != c.peer {
		_ = nc.Close()
		return nil, fmt.Errorf("bulk lane to %s: its certificate (%v) is not the connection's (%v)", addr, who, c.peer)
	}
	if _, err := tc.Write(c.bulk.token[:]); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("bulk lane to %s: %w", addr, err)
	}
	sc, err := newSealedConn(nc, tc, true)
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("bulk lane to %s: %w", addr, err)
	}
	s := &bulkStream{c: sc, side: c.bulk}
	if !c.bulk.opened(s) {
		_ = s.Close()
		return nil, ErrConnLost
	}
	return s, nil
}

// AcceptBulk waits for the peer to open a bulk stream.
func (c *quicConn) AcceptBulk(ctx context.Context) (Stream, error) {
	select {
	case s := <-c.bulk.accept:
		return s, nil
	case <-c.c.Context().Done():
		return nil, ErrConnLost
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var _ BulkConn = (*quicConn)(nil)
