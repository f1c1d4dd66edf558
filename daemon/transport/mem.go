package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
)

// Mem is an in-memory network for deterministic tests of the daemon
// (DESIGN §2): endpoints with addresses "mem:N", connections and streams
// made of buffers, authentication under the cluster CA as over QUIC, and
// faults injected by a Shaper — delay, loss and reordering of the units a
// stream carries, and broken connections.
//
// A stream's bytes are cut into units: one frame each when the network was
// given a frame function, one write each otherwise. The shaper decides each
// unit's fate from the unit alone (its connection, stream and index, and
// its bytes), so a shaper that derives its decisions from a seed and those
// numbers injects the same faults into the same traffic on every run, however
// the goroutines happen to interleave.
type Mem struct {
	shaper Shaper
	frame  func([]byte) int

	mu    sync.Mutex
	eps   map[string]*memEndpoint
	nEp   int
	nConn uint64
}

// Unit is a piece of one direction of a stream that a Shaper decides about.
type Unit struct {
	From, To string // the writing and the reading endpoint's addresses
	Conn     uint64 // the connection's number, in the order they were made
	Stream   int    // the stream's number within its connection, from 0
	Index    int    // the unit's number within this direction of the stream
	Data     []byte // the unit's bytes; read only
	Held     bool   // an earlier unit of this direction is being held back
	Bulk     bool   // the stream is on the bulk lane (OpenBulk)
}

// Decision is the fate of a unit. The zero Decision delivers it at once,
// after every unit before it.
type Decision struct {
	// Delay delivers the unit this much later. Units of one direction of a
	// stream still arrive in order (a later unit waits for an earlier,
	// delayed one), as over QUIC; only Hold reorders them.
	Delay time.Duration
	// Drop loses the unit.
	Drop bool
	// Hold keeps the unit back and delivers it right after the next unit
	// of the stream that is delivered: the two swap places.
	Hold bool
	// Flush delivers a held unit before this one rather than after.
	Flush bool
	// Raw stops cutting the stream into frames from the next byte on (the
	// rest of the stream is a byte stream, as after a header frame).
	Raw bool
	// Cut breaks the connection before the unit: both ends see it end,
	// and whatever was not yet delivered is lost.
	Cut bool
	// Reset breaks the unit's stream alone, before the unit, as a reset
	// TCP connection under a bulk lane would: reads and writes on both
	// ends fail with ErrStreamReset; the connection lives on.
	Reset bool
}

// ErrStreamReset is returned by reads and writes on a stream a Shaper
// reset.
var ErrStreamReset = errors.New("stream reset")

// Shaper decides the fate of every unit carried by a Mem network. It is
// called from many goroutines at once.
type Shaper interface {
	Shape(u Unit) Decision
}

// ErrConnLost is returned by reads and writes on a connection that ended.
// The in-memory network offers a bulk lane (BulkConn) on every
// connection: streams like the others, accepted apart.
var ErrConnLost = errors.New("connection lost")

// NewMem makes an in-memory network. shaper may be nil (no faults); frame,
// if not nil, returns the length of the first complete frame at the start
// of b, or 0 if b holds no complete frame yet, so that faults apply to
// whole frames.
func NewMem(shaper Shaper, frame func(b []byte) int) *Mem {
	return &Mem{shaper: shaper, frame: frame, eps: map[string]*memEndpoint{}}
}

// Listen makes an endpoint that accepts connections. An address ending in
// ":0" (or empty) gets a fresh "mem:N"; any other is used as given.
func (m *Mem) Listen(addr string, id *pki.Credential, _ Config) (Endpoint, error) {
	return m.endpoint(addr, id, true)
}

// Dialer makes an endpoint that only dials.
func (m *Mem) Dialer(_ string, id *pki.Credential, _ Config) (Endpoint, error) {
	return m.endpoint("", id, false)
}

func (m *Mem) endpoint(addr string, id *pki.Credential, listen bool) (*memEndpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if addr == "" || len(addr) >= 2 && addr[len(addr)-2:] == ":0" {
		m.nEp++
		addr = fmt.Sprintf("mem:%d", m.nEp)
	}
	if _, ok := m.eps[addr]; ok {
		return nil, fmt.Errorf("listen on %s: address in use", addr)
	}
	e := &memEndpoint{net: m, addr: addr, id: id, listen: listen,
		accept: make(chan *memConn, 64), closed: make(chan struct{}), conns: map[*memConn]bool{}}
	m.eps[addr] = e
	return e, nil
}

type memEndpoint struct {
	net    *Mem
	addr   string
	id     *pki.Credential
	listen bool
	accept chan *memConn
	closed chan struct{}
	once   sync.Once

	mu    sync.Mutex
	conns map[*memConn]bool
}

func (e *memEndpoint) Addr() string { return e.addr }

func (e *memEndpoint) Accept(ctx context.Context) (Conn, error) {
	if !e.listen {
		return nil, errors.New("transport is not listening")
	}
	select {
	case c := <-e.accept:
		return c, nil
	case <-e.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *memEndpoint) Dial(ctx context.Context, addr string) (Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	m := e.net
	m.mu.Lock()
	l, ok := m.eps[addr]
	if ok && !l.listen {
		ok = false
	}
	m.nConn++
	n := m.nConn
	m.mu.Unlock()
	select {
	case <-e.closed:
		return nil, fmt.Errorf("dial %s: %w", addr, ErrClosed)
	default:
	}
	if !ok {
		return nil, fmt.Errorf("dial %s: no endpoint listens there", addr)
	}
	now := time.Now()
	// Both ends verify the other's certificate, as mutual TLS does.
	serverSees, err := l.id.VerifyChain(e.id.Chain(), now)
	if err != nil {
		return nil, fmt.Errorf("dial %s: refused: %w", addr, err)
	}
	clientSees, err := e.id.VerifyChain(l.id.Chain(), now)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	lk := &link{net: m, n: n}
	client := newMemConn(lk, e, clientSees, l.addr)
	server := newMemConn(lk, l, serverSees, e.addr)
	lk.side = [2]*memConn{client, server}
	if !e.add(client) || !l.add(server) {
		lk.end(nil)
		return nil, fmt.Errorf("dial %s: %w", addr, ErrClosed)
	}
	select {
	case l.accept <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	lk.end(nil)
	return nil, fmt.Errorf("dial %s: not accepted", addr)
}

func (e *memEndpoint) add(c *memConn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.closed:
		return false
	default:
	}
	e.conns[c] = true
	return true
}

func (e *memEndpoint) stop() []*memConn {
	e.once.Do(func() { close(e.closed) })
	e.net.mu.Lock()
	if e.net.eps[e.addr] == e {
		delete(e.net.eps, e.addr)
	}
	e.net.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	var cs []*memConn
	for c := range e.conns {
		cs = append(cs, c)
	}
	e.conns = map[*memConn]bool{}
	return cs
}

func (e *memEndpoint) Close() error {
	for _, c := range e.stop() {
		c.link.end(nil)
	}
	return nil
}

func (e *memEndpoint) Abort() {
	for _, c := range e.stop() {
		c.link.end(c)
	}
}

// link joins the two ends of a connection.
type link struct {
	net  *Mem
	n    uint64
	side [2]*memConn

	mu      sync.Mutex
	streams int
	ended   bool
	silent  *memConn // after a crash: the end that is gone; the other hears silence
}

// end ends the connection. With crashed nil both ends see it end; with
// crashed set, only that end does, and the other hears nothing more.
func (lk *link) end(crashed *memConn) {
	lk.mu.Lock()
	if lk.ended {
		lk.mu.Unlock()
		return
	}
	if crashed == nil || lk.silent != nil {
		lk.ended = true
	} else {
		lk.silent = crashed
	}
	lk.mu.Unlock()
	for _, c := range lk.side {
		if crashed == nil || c == crashed {
			c.shut()
		}
	}
}

// alive says whether bytes still flow.
func (lk *link) alive() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return !lk.ended && lk.silent == nil
}

type memConn struct {
	link   *link
	ep     *memEndpoint
	peer   pki.Peer
	remote string
	accept chan *memStream
	bulk   chan *memStream // streams opened with OpenBulk
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	streams []*memStream
}

func newMemConn(lk *link, ep *memEndpoint, peer pki.Peer, remote string) *memConn {
	return &memConn{link: lk, ep: ep, peer: peer, remote: remote,
		accept: make(chan *memStream, 1<<12), bulk: make(chan *memStream, 1<<6), done: make(chan struct{})}
}

func (c *memConn) other() *memConn {
	if c.link.side[0] == c {
		return c.link.side[1]
	}
	return c.link.side[0]
}

func (c *memConn) shut() {
	c.once.Do(func() {
		close(c.done)
		c.ep.mu.Lock()
		delete(c.ep.conns, c)
		c.ep.mu.Unlock()
		c.mu.Lock()
		ss := c.streams
		c.mu.Unlock()
		for _, s := range ss {
			s.in.fail(ErrConnLost)
			s.out.stop()
		}
	})
}

func (c *memConn) OpenStream(ctx context.Context) (Stream, error) {
	return c.open(ctx, false)
}

// OpenBulk opens a stream on the bulk lane: the peer accepts it with
// AcceptBulk.
func (c *memConn) OpenBulk(ctx context.Context) (Stream, error) {
	return c.open(ctx, true)
}

// AcceptBulk waits for the peer to open a bulk stream.
func (c *memConn) AcceptBulk(ctx context.Context) (Stream, error) {
	select {
	case s := <-c.bulk:
		return s, nil
	case <-c.done:
		return nil, ErrConnLost
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

var _ BulkConn = (*memConn)(nil)

func (c *memConn) open(ctx context.Context, bulk bool) (Stream, error) {
	lk := c.link
	lk.mu.Lock()
	if lk.ended || lk.silent == c {
		lk.mu.Unlock()
		return nil, ErrConnLost
	}
	n := lk.streams
	lk.streams++
	silent := lk.silent != nil
	lk.mu.Unlock()
	o := c.other()
	ab, ba := &pipe{}, &pipe{}
	mine := &memStream{conn: c, in: ba}
	theirs := &memStream{conn: o, in: ab}
	mine.out = newSender(c, o, n, ab)
	theirs.out = newSender(o, c, n, ba)
	mine.out.bulk, theirs.out.bulk = bulk, bulk
	reset := func() {
		for _, s := range [2]*memStream{mine, theirs} {
			s.in.fail(ErrStreamReset)
			s.out.mu.Lock()
			s.out.wasReset = true
			s.out.mu.Unlock()
			s.out.stop()
		}
	}
	mine.out.reset, theirs.out.reset = reset, reset
	if !c.addStream(mine) {
		return nil, ErrConnLost
	}
	if silent {
		return mine, nil // opened into the void: nothing will answer
	}
	if !o.addStream(theirs) {
		return nil, ErrConnLost
	}
	accept := o.accept
	if bulk {
		accept = o.bulk
	}
	select {
	case accept <- theirs:
		return mine, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrConnLost
	}
}

func (c *memConn) addStream(s *memStream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return false
	default:
	}
	c.streams = append(c.streams, s)
	return true
}

func (c *memConn) AcceptStream(ctx context.Context) (Stream, error) {
	select {
	case s := <-c.accept:
		return s, nil
	case <-c.done:
		return nil, ErrConnLost
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *memConn) Peer() pki.Peer        { return c.peer }
func (c *memConn) RemoteAddr() string    { return c.remote }
func (c *memConn) Done() <-chan struct{} { return c.done }
func (c *memConn) Close(string) error {
	c.link.end(nil)
	return nil
}

// memStream is one end of a stream.
type memStream struct {
	conn *memConn
	in   *pipe
	out  *sender
}

func (s *memStream) Read(p []byte) (int, error)  { return s.in.read(p) }
func (s *memStream) Write(p []byte) (int, error) { return s.out.write(p) }
func (s *memStream) Close() error                { return s.out.close() }

// pipe is one direction's receive buffer.
type pipe struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	eof  bool
	err  error
}

func (p *pipe) init() {
	if p.cond == nil {
		p.cond = sync.NewCond(&p.mu)
	}
}

func (p *pipe) put(b []byte, eof bool) {
	p.mu.Lock()
	p.init()
	if p.err == nil && !p.eof {
		p.buf = append(p.buf, b...)
		p.eof = eof
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *pipe) fail(err error) {
	p.mu.Lock()
	p.init()
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *pipe) read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	for len(p.buf) == 0 && !p.eof && p.err == nil {
		p.cond.Wait()
	}
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		if len(p.buf) == 0 {
			p.buf = nil
		}
		return n, nil
	}
	if p.err != nil {
		return 0, p.err
	}
	return 0, io.EOF
}

// sender is one direction's sending side: it cuts the bytes into units,
// asks the shaper, and delivers them into the peer's pipe in order, each
// at its time.
type sender struct {
	from, to *memConn
	stream   int
	dst      *pipe
	bulk     bool   // a bulk lane stream
	reset    func() // breaks the stream, both ways
	wasReset bool   // stopped by a reset (not the connection's end)

	mu      sync.Mutex
	pending []byte // bytes not yet making a whole frame
	raw     bool
	index   int
	held    []byte
	closed  bool
	stopped bool
	queue   []delivery // waiting for their time, in order
	last    time.Time  // release time of the last queued delivery
	running bool
}

type delivery struct {
	at   time.Time
	data []byte
	eof  bool
}

func newSender(from, to *memConn, stream int, dst *pipe) *sender {
	return &sender{from: from, to: to, stream: stream, dst: dst}
}

func (s *sender) write(p []byte) (int, error) {
	if !s.from.link.alive() {
		select {
		case <-s.from.done:
			return 0, ErrConnLost
		default:
			return len(p), nil // the peer is gone without a word: bytes vanish
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("write on closed stream")
	}
	if s.stopped {
		if s.wasReset {
			return 0, ErrStreamReset
		}
		return 0, ErrConnLost
	}
	s.pending = append(s.pending, p...)
	for len(s.pending) > 0 {
		n := len(s.pending)
		if !s.raw && s.from.link.net.frame != nil {
			n = s.from.link.net.frame(s.pending)
			if n <= 0 || n > len(s.pending) {
				break
			}
		}
		unit := s.pending[:n:n]
		s.pending = s.pending[n:]
		if len(s.pending) == 0 {
			s.pending = nil
		}
		if !s.unit(unit) {
			if s.wasReset {
				return 0, ErrStreamReset
			}
			return 0, ErrConnLost
		}
	}
	return len(p), nil
}

// unit decides one unit's fate; it reports false if the connection broke.
func (s *sender) unit(b []byte) bool {
	d := Decision{}
	if sh := s.from.link.net.shaper; sh != nil {
		d = sh.Shape(Unit{From: s.from.ep.addr, To: s.to.ep.addr, Conn: s.from.link.n,
			Stream: s.stream, Index: s.index, Data: b, Held: s.held != nil, Bulk: s.bulk})
	}
	s.index++
	if d.Raw {
		s.raw = true
	}
	if d.Cut {
		s.mu.Unlock()
		s.from.link.end(nil)
		s.mu.Lock()
		return false
	}
	if d.Reset {
		s.mu.Unlock()
		s.reset()
		s.mu.Lock()
		return false
	}
	switch {
	case d.Drop:
	case d.Hold && s.held == nil:
		s.held = b
	default:
		if s.held != nil && d.Flush {
			s.enqueue(s.held, false, 0)
			s.held = nil
		}
		s.enqueue(b, false, d.Delay)
		if s.held != nil {
			s.enqueue(s.held, false, 0)
			s.held = nil
		}
	}
	return true
}

// enqueue schedules a delivery after delay, never before an earlier one.
func (s *sender) enqueue(b []byte, eof bool, delay time.Duration) {
	if delay <= 0 && len(s.queue) == 0 {
		s.dst.put(b, eof)
		return
	}
	at := time.Now().Add(delay)
	if at.Before(s.last) {
		at = s.last
	}
	s.last = at
	s.queue = append(s.queue, delivery{at: at, data: b, eof: eof})
	if !s.running {
		s.running = true
		go s.deliver()
	}
}

// deliver hands queued units to the peer at their times.
func (s *sender) deliver() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.stopped || len(s.queue) == 0 {
			s.running = false
			s.queue = nil
			s.mu.Unlock()
			return
		}
		d := s.queue[0]
		if wait := time.Until(d.at); wait > 0 {
			s.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-s.from.done:
			case <-s.to.done:
				s.stop() // the reader is gone: nothing more arrives
			}
			continue
		}
		s.queue = s.queue[1:]
		s.dst.put(d.data, d.eof)
		s.mu.Unlock()
	}
}

func (s *sender) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if len(s.pending) > 0 {
		s.enqueue(s.pending, false, 0) // an incomplete frame: deliver what there is
		s.pending = nil
	}
	if s.held != nil {
		s.enqueue(s.held, false, 0)
		s.held = nil
	}
	s.enqueue(nil, true, 0)
	return nil
}

// stop abandons undelivered units: the connection ended.
func (s *sender) stop() {
	s.mu.Lock()
	s.stopped = true
	s.queue = nil
	s.mu.Unlock()
}
