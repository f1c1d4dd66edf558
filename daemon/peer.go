package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
)

// maxBatch is the largest message batch frame the writer builds; larger
// messages travel in a frame of their own.
const maxBatch = 64 << 10

// peer is a connection to another daemon or a client, with one long-lived
// stream carrying frames both ways. Writes are buffered and flushed by the
// peer's writer goroutine, so concurrent senders' small messages are batched
// into few frames and stream writes.
type peer struct {
	d     *Daemon
	info  HostInfo // for daemons; Name only for clients
	role  pki.Role
	cert  pki.Peer // whom the connection's certificate names
	conn  transport.Conn
	st    transport.Stream
	rb    *connBudget   // the reader's share of the frame budget (nil: none); the reader's alone
	dialr bool          // we dialled this connection
	ctr   *metrics.Peer // message counters of the peer host (nil: none kept); set before the peer is attached
	bulk  *bulkLane     // large messages' lane (nil: none)
	ckpt  ckptLane      // a bulk stream kept for the next direct checkpoint

	wmu     sync.Mutex
	buf     []byte // frames waiting for the writer
	spare   []byte
	msgsOff int // offset of an open message batch frame in buf, or -1
	// nSent and bSent count the messages in buf and their payload bytes,
	// for ctr: counted once per write, not per message.
	nSent, bSent int
	kick         chan struct{}
	writing      bool // a goroutine is writing to the stream
	draining     bool // flush, then close the sending side
	// acks waiting to go out with the next write (or after ackDelay).
	acks     map[routing.Pair]uint64
	ackTimer *time.Timer // signals the writer; made once
	ackArmed bool        // ackTimer is running
	// retire is the connection's part in a tie between two connections
	// to its host (retire.go).
	retire retirement
	// finned is closed once the writer has closed the sending side at
	// the end of a drain.
	finned chan struct{}
	closed chan struct{}
	once   sync.Once
	err    error
	// ctx is the daemon's, ended when the connection is: the calls of a
	// client run under it, so that work done for a client stops when it
	// goes.
	ctx    context.Context
	cancel context.CancelFunc
	// running are the cancels of a client's calls under way, by call ID:
	// the client cancels one with a call.cancel call.
	runMu   sync.Mutex
	running map[uint64]context.CancelFunc

	// forgeries counts the frames with claims refused (claims.go).
	forgeries forgeCount

	lastHeard atomic.Int64 // unix nanoseconds of the last frame received
	lastWrite atomic.Int64 // unix nanoseconds of the end of the last write
}

func newPeer(d *Daemon, conn transport.Conn, st transport.Stream, dialed bool) *peer {
	p := &peer{d: d, conn: conn, st: st, dialr: dialed, role: conn.Peer().Role, cert: conn.Peer(),
		msgsOff: -1, kick: make(chan struct{}, 1), finned: make(chan struct{}), closed: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(d.ctx)
	p.lastHeard.Store(time.Now().UnixNano())
	if p.role == pki.RoleDaemon {
		p.bulk = newBulkLane(p)
	}
	return p
}

// callCtx is the context a client's call id runs under: the
// connection's, ended also by the client's call.cancel naming id; done
// forgets it when the call is over.
func (p *peer) callCtx(id uint64) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancel(p.ctx)
	p.runMu.Lock()
	if p.running == nil {
		p.running = map[uint64]context.CancelFunc{}
	}
	p.running[id] = cancel
	p.runMu.Unlock()
	return ctx, func() {
		p.runMu.Lock()
		delete(p.running, id)
		p.runMu.Unlock()
		cancel()
	}
}

// cancelCall cancels the client's call id, if it is still under way.
func (p *peer) cancelCall(id uint64) {
	p.runMu.Lock()
	cancel := p.running[id]
	p.runMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// close ends the connection once, recording why.
func (p *peer) close(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.closed)
		p.cancel()
		reason := "closed"
		if err != nil {
			reason = err.Error()
		}
		_ = p.conn.Close(reason)
	})
}

// ackDelay bounds how long an acknowledgement waits for a frame to ride
// with: most go out with the answer the receiving task sends, in the same
// packet.
const ackDelay = time.Millisecond

// ack queues a cumulative acknowledgement; it goes out with the next frame
// written to the peer, or after ackDelay.
func (p *peer) ack(a routing.Ack) {
	p.wmu.Lock()
	if p.acks == nil {
		p.acks = map[routing.Pair]uint64{}
	}
	k := routing.Pair{From: a.From, To: a.To}
	if a.Seq > p.acks[k] {
		p.acks[k] = a.Seq
	}
	if !p.ackArmed {
		// One timer per peer, re-armed: a message answered at once costs
		// no timer of its own.
		if p.ackTimer == nil {
			p.ackTimer = time.AfterFunc(ackDelay, p.signal)
		} else {
			p.ackTimer.Reset(ackDelay)
		}
		p.ackArmed = true
	}
	p.wmu.Unlock()
}

// frame queues a whole frame of kind k. On a retired connection (it lost
// a tie, attach) it goes on the connection that replaced it, as a call
// does (callPeer): an event sent after the retirement must not travel
// beside a later one on the winner, read by another reader and perhaps
// overtaken (an output and its task's exit, two load reports). A reply or
// a pong answers on the connection its call or ping came on; a retired
// connection with no successor now still carries the frame.
func (p *peer) frame(k routing.Kind, body []byte) {
	p.wmu.Lock()
	if p.retire.retired && k != routing.KindReply && k != routing.KindPong {
		p.wmu.Unlock()
		if q := p.d.nw.successor(p); q != nil {
			q.frame(k, body)
			return
		}
		p.wmu.Lock()
	}
	p.buf = routing.AppendFrame(p.buf, k, body)
	p.msgsOff = -1
	p.wmu.Unlock()
	// Control frames (calls, replies, events) go through the writer
	// goroutine: a write to a dead or stalled peer can block until the
	// connection times out, and callers such as a broadcast must not.
	p.signal()
}

// streaming is how soon after the last write a new frame counts as part of
// a stream.
const streaming = 50 * time.Microsecond

// push gets a queued message going. In a conversation — the peer has sent
// something since our last write, or we paused — the sending task's
// goroutine writes it itself, saving a hand-off to the writer goroutine
// (latency; a task sending to a stalled peer waits, which is the
// backpressure it would get anyway). In a one-way stream of messages it
// leaves them to the writer, which batches what piles up while it writes
// (throughput).
func (p *peer) push() {
	last := p.lastWrite.Load()
	if p.lastHeard.Load() <= last && time.Duration(time.Now().UnixNano()-last) < streaming {
		p.signal()
		return
	}
	_ = p.flush()
}

// envelope queues a message, batching it into the open message frame when
// there is room. inline says the caller is a task's goroutine, which may
// write the frame itself (see push); daemon-internal callers (resends from
// a connection's reader, for one) leave writing to the writer goroutine, so
// that two daemons' readers never wait on each other's full windows.
func (p *peer) envelope(e *routing.Envelope, inline bool) {
	p.wmu.Lock()
	if p.msgsOff < 0 || len(p.buf)-p.msgsOff+routing.EnvelopeSize(e) > maxBatch {
		p.buf, p.msgsOff = routing.BeginFrame(p.buf, routing.KindMsgs)
	}
	p.buf = routing.AppendEnvelope(p.buf, e)
	p.nSent++
	p.bSent += len(e.Body.Data)
	routing.EndFrame(p.buf, p.msgsOff)
	if len(p.buf)-p.msgsOff >= maxBatch {
		p.msgsOff = -1
	}
	p.wmu.Unlock()
	if inline {
		p.push()
	} else {
		p.signal()
	}
}

func (p *peer) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// flush writes what is queued (and the pending acknowledgements) to the
// stream, unless another goroutine is already writing — that one writes
// what is queued meanwhile before it lets go. Senders call it directly, so
// a message usually goes out from its sender's goroutine without a hand-off;
// while a write is in progress, later messages pile up and go out together.
func (p *peer) flush() error {
	p.wmu.Lock()
	if p.writing {
		p.wmu.Unlock()
		return nil
	}
	p.writing = true
	for {
		out := p.buf
		p.buf, p.spare = p.spare[:0], nil
		p.msgsOff = -1
		nSent, bSent := p.nSent, p.bSent
		p.nSent, p.bSent = 0, 0
		if len(p.acks) > 0 {
			var off int
			out, off = routing.BeginFrame(out, routing.KindAcks)
			for k, seq := range p.acks {
				out = routing.AppendAck(out, routing.Ack{From: k.From, To: k.To, Seq: seq})
			}
			routing.EndFrame(out, off)
			clear(p.acks)
		}
		if p.ackArmed {
			p.ackTimer.Stop()
			p.ackArmed = false
		}
		if len(out) == 0 {
			p.writing = false
			p.wmu.Unlock()
			return nil
		}
		p.wmu.Unlock()
		p.ctr.Sent(nSent, bSent)
		_, err := p.st.Write(out)
		p.lastWrite.Store(time.Now().UnixNano())
		p.wmu.Lock()
		if cap(out) <= 4<<20 {
			p.spare = out[:0]
		}
		if err != nil {
			p.writing = false
			p.wmu.Unlock()
			err = fmt.Errorf("write to %s: %w", p.name(), err)
			p.close(err)
			return err
		}
	}
}

// writeLoop flushes on demand (acknowledgement timers, frames queued
// without a flush) and finishes a drain, until the connection ends.
func (p *peer) writeLoop() {
	for {
		select {
		case <-p.kick:
		case <-p.closed:
			return
		}
		if err := p.flush(); err != nil {
			return
		}
		p.wmu.Lock()
		done := p.draining && !p.writing && len(p.buf) == 0 && len(p.acks) == 0
		p.wmu.Unlock()
		if done {
			_ = p.st.Close() // FIN: the peer hangs up when it has read everything
			close(p.finned)
			<-p.closed
			return
		}
	}
}

// sendCall queues a call frame with body b, unless the connection is
// retired: then it reports false and the call must go on the connection
// that replaced it. A call sent is counted until callEnded.
func (p *peer) sendCall(b []byte) bool {
	p.wmu.Lock()
	if !p.retire.startCall() {
		p.wmu.Unlock()
		return false
	}
	p.buf = routing.AppendFrame(p.buf, routing.KindCall, b)
	p.msgsOff = -1
	p.wmu.Unlock()
	p.signal()
	return true
}

// retireStep applies step to the connection's retirement state (under
// wmu) and drains the connection if step reports it may now close.
func (p *peer) retireStep(step func(*retirement) bool) {
	p.wmu.Lock()
	done := step(&p.retire)
	p.wmu.Unlock()
	if done {
		p.finish()
	}
}

// callEnded counts a call sent with sendCall as over.
func (p *peer) callEnded() { p.retireStep((*retirement).endCall) }

// serving counts a call received on the connection; served counts its
// reply as queued.
func (p *peer) serving() {
	p.wmu.Lock()
	p.retire.startServe()
	p.wmu.Unlock()
}

func (p *peer) served() { p.retireStep((*retirement).endServe) }

// retireConn retires the connection (it lost a tie, attach): it sends
// the retire frame after whatever is queued and carries no new call. If
// the peer has not retired it too within the handshake timeout, it is
// closed once no call is under way on it (retirement.giveUp).
func (p *peer) retireConn() {
	p.wmu.Lock()
	first, done := p.retire.retire()
	if first {
		p.buf = routing.AppendFrame(p.buf, routing.KindRetire, nil)
		p.msgsOff = -1
	}
	p.wmu.Unlock()
	p.signal()
	if done {
		p.finish()
	}
	if !first {
		return
	}
	p.d.goFunc(func() {
		t := time.NewTimer(p.d.cfg.HandshakeTimeout)
		defer t.Stop()
		select {
		case <-p.closed:
			return
		case <-t.C:
		}
		p.wmu.Lock()
		abandoned, done := p.retire.giveUp()
		p.wmu.Unlock()
		if abandoned {
			p.d.log.Debug("retired connection never retired by the peer: it closes once no call is under way on it", "peer", p.name())
		}
		if done {
			p.finish()
		}
	})
}

// peerRetired records the peer's retire frame.
func (p *peer) peerRetired() { p.retireStep((*retirement).peerRetire) }

// finished reports whether the connection is retired and neither side is
// owed anything on it.
func (p *peer) finished() bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.retire.finished
}

// retired reports whether this side retired the connection.
func (p *peer) retired() bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.retire.retired
}

// finish drains a retired connection that neither side owes a reply: what
// is queued goes out, then the sending side closes; the connection closes
// when the peer's end is read (readLoop), or after the handshake timeout.
func (p *peer) finish() {
	p.d.goFunc(func() { p.drain(p.d.cfg.HandshakeTimeout) })
}

// drain flushes what is queued, closes the sending side, and waits until
// the peer hangs up or timeout passes; then the connection is closed.
// Frames queued before drain (a last reply, a halt event) reach the peer.
func (p *peer) drain(timeout time.Duration) {
	p.wmu.Lock()
	p.draining = true
	p.wmu.Unlock()
	p.signal()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.closed:
	case <-t.C:
	}
	p.close(nil)
}

func (p *peer) name() string {
	if p.info.Name != "" {
		return p.info.Name
	}
	return p.conn.RemoteAddr()
}

// readLoop reads and dispatches frames until the connection ends. Any
// malformed or forbidden frame closes the connection.
func (p *peer) readLoop(r *routing.Reader) {
	defer p.d.peerGone(p)
	defer r.Free()
	for {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			select {
			case <-p.closed:
				return
			default:
			}
			switch {
			case err != nil && p.finished():
				// A retired connection both sides were done with: the
				// peer closed it before its end was read.
				p.d.log.Debug("retired connection ended", "peer", p.name(), "error", err)
			case err != nil:
				p.d.log.Info("connection ended", "peer", p.name(), "error", err)
			case p.retired():
				p.finishRead()
			}
			p.close(err)
			return
		}
		p.lastHeard.Store(time.Now().UnixNano())
		if err := p.d.dispatch(p, f); err != nil {
			p.d.log.Warn("closing connection", "peer", p.name(), "frame", f.Kind, "error", err)
			p.close(err)
			return
		}
	}
}

// finishRead, on a retired connection whose peer closed its sending side
// (the peer owes nothing more and is owed nothing), lets what this side
// queued meanwhile (an event, an acknowledgement) go out before the
// connection closes.
func (p *peer) finishRead() {
	p.wmu.Lock()
	p.draining = true
	p.wmu.Unlock()
	p.signal()
	t := time.NewTimer(p.d.cfg.HandshakeTimeout)
	defer t.Stop()
	select {
	case <-p.finned:
	case <-p.closed:
	case <-t.C:
	}
}

// readHello reads the first frame of a connection, which must be a hello.
func readHello(ctx context.Context, r *routing.Reader) (*hello, error) {
	type res struct {
		h   *hello
		err error
	}
	ch := make(chan res, 1)
	go func() {
		f, err := r.Next()
		if err != nil {
			ch <- res{nil, fmt.Errorf("handshake: %w", err)}
			return
		}
		if f.Kind != routing.KindHello {
			ch <- res{nil, fmt.Errorf("handshake: got a %v frame, want hello: %w", f.Kind, routing.ErrMalformed)}
			return
		}
		var h hello
		if err := decodeMsg(f.Body, &h); err != nil {
			ch <- res{nil, fmt.Errorf("handshake: %w", err)}
			return
		}
		ch <- res{&h, nil}
	}()
	select {
	case x := <-ch:
		return x.h, x.err
	case <-ctx.Done():
		return nil, fmt.Errorf("handshake: %w", ctx.Err())
	}
}

// greeting is an outgoing connection after its hello exchange: the
// connection, its first stream, the reader of that stream and the answer.
type greeting struct {
	conn  transport.Conn
	st    transport.Stream
	r     *routing.Reader
	reply *hello
}

// greet dials addr, sends h on the connection's first stream and reads
// the answer; an answer that refuses (carries Err) is ErrRefused. On any
// error the connection is closed. The caller checks the rest of the
// answer, and closes the connection if it does not fit.
func greet(ctx context.Context, tr transport.Endpoint, addr string, h *hello, maxFrame int) (*greeting, error) {
	conn, err := tr.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	st, err := conn.OpenStream(ctx)
	if err != nil {
		conn.Close("handshake failed")
		return nil, err
	}
	if err := writeHello(st, h); err != nil {
		conn.Close("handshake failed")
		return nil, err
	}
	r := routing.NewReader(st, maxFrame)
	reply, err := readHello(ctx, r)
	if err != nil {
		conn.Close("handshake failed")
		if ctx.Err() == nil {
			err = &handshakeCut{err}
		}
		return nil, err
	}
	if reply.Err != "" {
		conn.Close("refused")
		if err := replyBusy(reply); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrRefused, reply.Err)
	}
	return &greeting{conn: conn, st: st, r: r, reply: reply}, nil
}

// writeHello sends a hello frame directly (before the writer runs).
func writeHello(st transport.Stream, h *hello) error {
	h.Version = ProtocolVersion
	b, err := encodeMsg(h)
	if err != nil {
		return err
	}
	if _, err := st.Write(routing.AppendFrame(nil, routing.KindHello, b)); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	return nil
}
