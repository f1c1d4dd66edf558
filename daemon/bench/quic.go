package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/dpvm/dpvm/daemon/pki"
)

// The raw echo protocol: each message is a 5-byte header (a kind, then
// the body's length, little-endian) and the body, written with one Write.
const (
	rawPing    = 1 // echoed back as rawPong
	rawPong    = 2
	rawRate    = 3 // counted
	rawRateEnd = 4 // answered with rawRateFin carrying the count (8 bytes)
	rawRateFin = 5
	rawHeader  = 5
)

// rawConfig is the QUIC configuration of the baseline: the daemons'
// transport defaults (package daemon/transport), so that both sides of a
// comparison run with the same flow-control windows.
func rawConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           5 * time.Second,
		MaxIdleTimeout:                 30 * time.Second,
		InitialStreamReceiveWindow:     1 << 20,
		MaxStreamReceiveWindow:         16 << 20,
		InitialConnectionReceiveWindow: 2 << 20,
		MaxConnectionReceiveWindow:     32 << 20,
		KeepAlivePeriod:                10 * time.Second,
	}
}

// rawSocketBuffer is the UDP socket buffer size the daemons' transport
// asks for.
const rawSocketBuffer = 8 << 20

// QUICPair is the raw quic-go baseline: a client with one connection and
// one stream to an echo server, both in this process on 127.0.0.1, with
// the daemons' mutual TLS, windows and socket buffers, and no dpvm code
// on the path.
type QUICPair struct {
	udps    []*net.UDPConn
	trs     []*quic.Transport
	ln      *quic.Listener
	conn    *quic.Conn
	st      *quic.Stream
	in      []byte
	srvErr  chan error // the server's end
	srvConn chan *quic.Conn
	closeMu sync.Mutex
	closed  bool
}

// StartQUIC starts the echo server and connects to it.
func StartQUIC(ctx context.Context) (*QUICPair, error) {
	key, err := pki.NewCA(time.Now())
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	srvID, err := key.IssueHost("echo", false, time.Now(), 0)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cliID, err := key.IssueHost("pinger", false, time.Now(), 0)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	q := &QUICPair{srvErr: make(chan error, 1), srvConn: make(chan *quic.Conn, 1)}
	srvTr, err := q.transport()
	if err != nil {
		return nil, err
	}
	q.ln, err = srvTr.Listen(srvID.ServerConfig(), rawConfig())
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	go q.serve()
	cliTr, err := q.transport()
	if err != nil {
		q.Close()
		return nil, err
	}
	q.conn, err = cliTr.Dial(ctx, q.udps[0].LocalAddr(), cliID.ClientConfig(), rawConfig())
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("bench: dial the echo server: %w", err)
	}
	q.st, err = q.conn.OpenStreamSync(ctx)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("bench: open a stream: %w", err)
	}
	return q, nil
}

// transport opens a UDP socket on loopback and a quic-go transport on it.
func (q *QUICPair) transport() (*quic.Transport, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("bench: open a UDP socket: %w", err)
	}
	_ = udp.SetReadBuffer(rawSocketBuffer)
	_ = udp.SetWriteBuffer(rawSocketBuffer)
	tr := &quic.Transport{Conn: udp}
	q.udps = append(q.udps, udp)
	q.trs = append(q.trs, tr)
	return tr, nil
}

// serve accepts one connection and one stream and answers it until the
// stream ends.
func (q *QUICPair) serve() {
	err := func() error {
		conn, err := q.ln.Accept(context.Background())
		if err != nil {
			return err
		}
		q.srvConn <- conn
		st, err := conn.AcceptStream(context.Background())
		if err != nil {
			return err
		}
		return echoServe(st)
	}()
	q.srvErr <- err
}

// echoServe answers the raw protocol on rw until it ends.
func echoServe(rw io.ReadWriter) error {
	br := bufio.NewReaderSize(rw, 64<<10)
	buf := make([]byte, rawHeader+64<<10)
	var count uint64
	for {
		if _, err := io.ReadFull(br, buf[:rawHeader]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		kind, n := buf[0], int(binary.LittleEndian.Uint32(buf[1:rawHeader]))
		if n > MaxSize {
			return fmt.Errorf("raw echo: a %d-byte message", n)
		}
		if cap(buf) < rawHeader+n {
			buf = append(buf[:rawHeader], make([]byte, n)...)
		}
		body := buf[rawHeader : rawHeader+n]
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		switch kind {
		case rawPing:
			buf[0] = rawPong
			if _, err := rw.Write(buf[:rawHeader+n]); err != nil {
				return err
			}
		case rawRate:
			count++
		case rawRateEnd:
			out := make([]byte, rawHeader+8)
			out[0] = rawRateFin
			binary.LittleEndian.PutUint32(out[1:], 8)
			binary.LittleEndian.PutUint64(out[rawHeader:], count)
			count = 0
			if _, err := rw.Write(out); err != nil {
				return err
			}
		default:
			return fmt.Errorf("raw echo: unknown kind %d", kind)
		}
	}
}

// withDeadline makes ctx's end interrupt the stream's blocked calls; the
// returned function undoes it.
func (q *QUICPair) withDeadline(ctx context.Context) func() {
	if dl, ok := ctx.Deadline(); ok {
		_ = q.st.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = q.st.SetDeadline(time.Now()) })
	return func() {
		stop()
		_ = q.st.SetDeadline(time.Time{})
	}
}

func rawMessage(kind byte, body []byte) []byte {
	b := make([]byte, rawHeader+len(body))
	b[0] = kind
	binary.LittleEndian.PutUint32(b[1:], uint32(len(body)))
	copy(b[rawHeader:], body)
	return b
}

// RoundTrips implements Pair.
func (q *QUICPair) RoundTrips(ctx context.Context, size, n int, maxTime time.Duration) ([]time.Duration, error) {
	if size < 1 || size > MaxSize || n < 0 {
		return nil, fmt.Errorf("%w: %d round trips of %d bytes", ErrOptions, n, size)
	}
	defer q.withDeadline(ctx)()
	out := rawMessage(rawPing, pattern(size))
	if cap(q.in) < len(out) {
		q.in = make([]byte, len(out))
	}
	in := q.in[:len(out)]
	rtts := make([]time.Duration, 0, n)
	var start time.Time
	for i := range n {
		stamp(out[rawHeader:], i)
		t0 := time.Now()
		if _, err := q.st.Write(out); err != nil {
			return rtts, fmt.Errorf("bench: raw write: %w", err)
		}
		if _, err := io.ReadFull(q.st, in); err != nil {
			return rtts, fmt.Errorf("bench: raw read: %w", err)
		}
		t1 := time.Now()
		if in[0] != rawPong || !bytes.Equal(in[1:], out[1:]) {
			return rtts, fmt.Errorf("round trip %d: %w", i, ErrEcho)
		}
		rtts = append(rtts, t1.Sub(t0))
		if i == 0 {
			start = t0
		}
		if maxTime > 0 && len(rtts) >= minTimed && t1.Sub(start) > maxTime {
			break
		}
	}
	return rtts, nil
}

// Stream implements Pair with one Write per message, pipelined, bounded by
// QUIC's flow control; window is not used.
func (q *QUICPair) Stream(ctx context.Context, n, _ int, maxTime time.Duration) (Stream, error) {
	if n < 1 {
		return Stream{}, fmt.Errorf("%w: stream of %d messages", ErrOptions, n)
	}
	defer q.withDeadline(ctx)()
	msg := rawMessage(rawRate, make([]byte, RateSize))
	t0 := time.Now()
	sent := 0
	for sent < n {
		if _, err := q.st.Write(msg); err != nil {
			return Stream{}, fmt.Errorf("bench: raw write: %w", err)
		}
		sent++
		if sent%1024 == 0 && time.Since(t0) > maxTime {
			break
		}
	}
	if _, err := q.st.Write(rawMessage(rawRateEnd, nil)); err != nil {
		return Stream{}, fmt.Errorf("bench: raw write: %w", err)
	}
	fin := make([]byte, rawHeader+8)
	if _, err := io.ReadFull(q.st, fin); err != nil {
		return Stream{}, fmt.Errorf("bench: raw read: %w", err)
	}
	st := Stream{Messages: sent, Elapsed: time.Since(t0)}
	if got := binary.LittleEndian.Uint64(fin[rawHeader:]); fin[0] != rawRateFin || got != uint64(sent) {
		return st, fmt.Errorf("receiver counted %d of %d messages: %w", got, sent, ErrEcho)
	}
	return st, nil
}

// Close ends the connection and the server and closes the sockets.
func (q *QUICPair) Close() error {
	q.closeMu.Lock()
	defer q.closeMu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	var err error
	if q.st != nil {
		_ = q.st.Close()
	}
	if q.conn != nil {
		_ = q.conn.CloseWithError(0, "done")
	}
	if q.ln != nil {
		_ = q.ln.Close()
		select {
		case err = <-q.srvErr:
		case <-time.After(5 * time.Second):
			err = errors.New("bench: the raw echo server did not stop")
		}
	}
	select {
	case c := <-q.srvConn:
		_ = c.CloseWithError(0, "done")
	default:
	}
	for _, tr := range q.trs {
		_ = tr.Close()
	}
	for _, u := range q.udps {
		_ = u.Close()
	}
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) || errors.Is(err, quic.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
