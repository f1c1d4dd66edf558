package daemon

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
)

// maxStreamHeader bounds the opening frame of a checkpoint stream.
const maxStreamHeader = 1 << 10

// bulkLane carries a peer's messages on the transport's bulk lane
// (transport.BulkConn: TCP, sealed) once it is open. Large messages
// (Config.BulkThreshold and up) open it and wait for it; with
// Config.BulkSmall smaller ones take it when it is open, and QUIC until
// then (on the daemon that dialled the connection the first of them
// opens it), so that the round trip of a small message costs a write and
// a read on TCP rather than quic-go's hand-offs between goroutines.
//
// One goroutine at a time writes (running): in a conversation (see
// conversing) a task sending a small message writes it itself, as on
// QUIC (see peer.push); otherwise the lane's own goroutine writes what
// piles up, small messages batched into frames of up to maxBatch bytes,
// each large one a frame of its own written from where its body lies.
// One TCP connection carries both directions: a daemon that opens the
// lane announces it with an empty message frame, and the peer writes its
// own messages on that stream (adopt) rather than opening another, so
// that the kernel's acknowledgements ride on the answers' segments; a
// lane opened by both at once is two streams, each written by its opener.
// Per-pair order and exactly-once delivery do not depend on the lane: the
// receiving daemon delivers by sequence number whichever lane a message
// came by, and a message lost with a broken lane is still in the outbox,
// sent again over QUIC at once.
type bulkLane struct {
	p  *peer
	bc transport.BulkConn

	mu      sync.Mutex
	q       []routing.Envelope // waiting for the writer
	running bool               // a goroutine writes (or opens the stream)
	open    bool               // st is open: small messages take the lane
	downAt  time.Time          // when the lane last failed (zero: never)
	adopted transport.Stream   // a lane stream the peer opened, for the writer to take (nil: none)

	// st is the lane's stream, and buf and spare the writer's buffers,
	// used by the running writer alone; the transport closes st with the
	// connection.
	st        transport.Stream
	buf       []byte
	spare     []routing.Envelope
	lastWrite atomic.Int64 // unix nanoseconds of the end of the last write
}

// newBulkLane returns the peer's lane, or nil when its connection offers
// none.
func newBulkLane(p *peer) *bulkLane {
	bc, ok := p.conn.(transport.BulkConn)
	if !ok || p.d.cfg.BulkThreshold < 0 {
		return nil
	}
	return &bulkLane{p: p, bc: bc}
}

// take queues e for the lane and reports true, or reports false when the
// lane is down, or for a message under BulkThreshold without
// Config.BulkSmall or before the lane is open (the caller sends e over
// QUIC; the lane opens meanwhile). inline says the
// caller is the sending task's goroutine, which may write a small
// message itself.
func (b *bulkLane) take(e *routing.Envelope, inline bool) bool {
	small := len(e.Body.Data) < b.p.d.cfg.BulkThreshold
	if small && !b.p.d.cfg.BulkSmall {
		return false
	}
	b.mu.Lock()
	if !b.downAt.IsZero() && time.Since(b.downAt) < b.p.d.cfg.BulkRetry {
		b.mu.Unlock()
		return false
	}
	if small && !b.open {
		// The daemon that dialled the connection opens the lane for small
		// messages, the other adopts it: one TCP connection both ways.
		if !b.running && b.p.dialr {
			b.running = true
			b.p.d.goFunc(b.write) // opens the stream
		}
		b.mu.Unlock()
		return false
	}
	b.q = append(b.q, *e)
	if b.running {
		b.mu.Unlock()
		return true
	}
	b.running = true
	b.mu.Unlock()
	if small && inline && b.conversing() {
		b.write()
	} else {
		b.p.d.goFunc(b.write)
	}
	return true
}

// conversing reports whether the peer has sent something since the lane's
// last write, or the lane has paused: then a small message's sender
// writes it at once; in a one-way stream the lane's goroutine batches.
func (b *bulkLane) conversing() bool {
	last := b.lastWrite.Load()
	return b.p.lastHeard.Load() > last || time.Duration(time.Now().UnixNano()-last) >= streaming
}

// write opens the lane's stream if needed and writes the queued messages
// until the queue is empty. On failure the stream is dropped and the
// messages not known to be written go over QUIC.
func (b *bulkLane) write() {
	if b.st == nil {
		b.mu.Lock()
		st := b.adopted
		b.adopted = nil
		b.mu.Unlock()
		if st == nil {
			var err error
			if st, err = b.openStream(); err != nil {
				b.fail(err, nil)
				return
			}
		}
		b.st = st
		b.mu.Lock()
		b.open = true
		b.mu.Unlock()
	}
	for {
		b.mu.Lock()
		q := b.q
		if len(q) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.q = b.spare[:0]
		b.spare = nil
		b.mu.Unlock()
		err := b.writeAll(q)
		b.lastWrite.Store(time.Now().UnixNano())
		if err != nil {
			_ = b.st.Close()
			b.st = nil
			b.mu.Lock()
			b.open = false
			b.mu.Unlock()
			b.fail(err, q)
			return
		}
		clear(q)
		b.mu.Lock()
		b.spare = q[:0]
		b.mu.Unlock()
	}
}

// writeAll writes q on the stream: runs of small messages batched into
// frames, each large message as its frame's header and then its body.
func (b *bulkLane) writeAll(q []routing.Envelope) error {
	threshold := b.p.d.cfg.BulkThreshold
	buf, off, bytes := b.buf[:0], -1, 0
	defer func() { b.buf = buf[:0] }()
	for i := range q {
		e := &q[i]
		bytes += len(e.Body.Data)
		if len(e.Body.Data) >= threshold {
			buf = routing.AppendEnvelopeFrameHeader(buf, e)
			if _, err := b.st.Write(buf); err != nil {
				return err
			}
			if _, err := b.st.Write(e.Body.Data); err != nil {
				return err
			}
			buf, off = buf[:0], -1
			continue
		}
		if off < 0 || len(buf)-off+routing.EnvelopeSize(e) > maxBatch {
			if len(buf) >= maxBatch {
				if _, err := b.st.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
			buf, off = routing.BeginFrame(buf, routing.KindMsgs)
		}
		buf = routing.AppendEnvelope(buf, e)
		routing.EndFrame(buf, off)
	}
	if len(buf) > 0 {
		if _, err := b.st.Write(buf); err != nil {
			return err
		}
	}
	b.p.ctr.Sent(len(q), bytes)
	return nil
}

// openStream opens a stream on the lane, bounded by the handshake timeout,
// announces it to the peer with an empty message frame and reads what the
// peer writes back on it.
func (b *bulkLane) openStream() (transport.Stream, error) {
	d := b.p.d
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.BulkOpenTimeout)
	defer cancel()
	st, err := b.bc.OpenBulk(ctx)
	if err != nil {
		return nil, err
	}
	hello, off := routing.BeginFrame(b.buf[:0], routing.KindMsgs)
	routing.EndFrame(hello, off)
	if _, err := st.Write(hello); err != nil {
		_ = st.Close()
		return nil, err
	}
	d.goFunc(func() { d.readBulk(b.p, st, false) })
	return st, nil
}

// adopt offers st, a lane stream the peer opened, to the writer, unless
// the lane has a stream or one is offered already.
func (b *bulkLane) adopt(st transport.Stream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open || b.adopted != nil || (!b.downAt.IsZero() && time.Since(b.downAt) < b.p.d.cfg.BulkRetry) {
		return
	}
	b.adopted = st
	b.open = true
}

// fail marks the lane down and hands lost and everything queued after it
// to the QUIC connection.
func (b *bulkLane) fail(err error, lost []routing.Envelope) {
	b.mu.Lock()
	b.downAt = time.Now()
	rest := b.q
	b.q = nil
	b.running = false
	b.mu.Unlock()
	if !errors.Is(err, transport.ErrNoBulk) {
		b.p.d.log.Info("bulk lane down: its messages go over QUIC", "peer", b.p.name(), "error", err)
	}
	for i := range lost {
		b.p.envelope(&lost[i], false)
	}
	for i := range rest {
		b.p.envelope(&rest[i], false)
	}
}

// ckptLane keeps a bulk stream opened ahead for a peer's next direct
// checkpoint (see checkpointStream), so that a move does not wait for the
// lane's TCP and TLS handshakes. At most one is kept, and one opened at a
// time; it is opened once a checkpoint has gone on the lane, so peers that
// never receive a large one hold none. Its fields are guarded by mu.
type ckptLane struct {
	mu      sync.Mutex
	st      transport.Stream // ready for the next checkpoint (nil: none)
	opening bool             // a goroutine opens one
	downAt  time.Time        // when opening one last failed (zero: never)
}

// take returns the stream kept for the next checkpoint, if any.
func (l *ckptLane) take() transport.Stream {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	l.st = nil
	return st
}

// spareCheckpointStream opens a bulk stream to p for its next direct
// checkpoint, unless one is kept or being opened, or opening one failed
// less than Config.BulkRetry ago. The goroutine that opens it watches it until
// it is taken and used, or ends: the receiving daemon never writes on a
// checkpoint stream, so a read returns only when the stream has ended (the
// peer closed it, the connection or this daemon stopped), and a stream
// that ends while it is kept is dropped.
func (d *Daemon) spareCheckpointStream(p *peer, bc transport.BulkConn) {
	l := &p.ckpt
	l.mu.Lock()
	if l.st != nil || l.opening || (!l.downAt.IsZero() && time.Since(l.downAt) < d.cfg.BulkRetry) {
		l.mu.Unlock()
		return
	}
	l.opening = true
	l.mu.Unlock()
	d.goFunc(func() {
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.BulkOpenTimeout)
		st, err := bc.OpenBulk(ctx)
		cancel()
		l.mu.Lock()
		l.opening = false
		if err != nil {
			l.downAt = time.Now()
			l.mu.Unlock()
			if !errors.Is(err, transport.ErrNoBulk) && d.ctx.Err() == nil {
				d.log.Debug("no spare checkpoint stream", "peer", p.name(), "error", err)
			}
			return
		}
		l.st = st
		l.mu.Unlock()
		stop := context.AfterFunc(d.ctx, func() { _ = st.Close() })
		defer stop()
		var b [1]byte
		_, _ = st.Read(b[:])
		l.mu.Lock()
		kept := l.st == st
		if kept {
			l.st = nil
		}
		l.mu.Unlock()
		if kept {
			_ = st.Close()
		}
	})
}

// sendEnvelope sends a task's message to the peer: on the bulk lane when
// the lane takes it (see bulkLane.take), else batched on the QUIC stream
// (see envelope).
func (p *peer) sendEnvelope(e *routing.Envelope) {
	if p.bulk != nil && p.bulk.take(e, true) {
		return
	}
	p.envelope(e, true)
}

// acceptBulk serves the bulk streams a peer opens: frames of messages
// only, read by a goroutine each.
func (d *Daemon) acceptBulk(p *peer) {
	bc, ok := p.conn.(transport.BulkConn)
	if !ok {
		return
	}
	for {
		st, err := bc.AcceptBulk(d.ctx)
		if err != nil {
			return
		}
		d.goFunc(func() { d.readBulk(p, st, true) })
	}
}

// readBulk reads message frames from a bulk stream until it ends, or a
// direct checkpoint when the stream opens with a KindStream frame. Any
// other frame, or a malformed one, closes the stream (the connection lives
// on: what was lost is sent again). A stream the peer opened (accepted)
// that opens with a message frame is a lane stream: the lane may write on
// it too (adopt).
func (d *Daemon) readBulk(p *peer, st transport.Stream, accepted bool) {
	defer st.Close()
	stop := context.AfterFunc(d.ctx, func() { _ = st.Close() })
	defer stop()
	for first := true; ; first = false {
		// Each frame in a buffer of its own, which its message keeps: a
		// large message is copied once, from the connection.
		f, err := routing.ReadFrameOwned(st, d.cfg.MaxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				d.log.Debug("bulk stream ended", "peer", p.name(), "error", err)
			}
			return
		}
		if first && f.Kind == routing.KindStream && len(f.Body) <= maxStreamHeader {
			d.takeCheckpoint(p, st, f)
			return
		}
		if f.Kind != routing.KindMsgs {
			d.log.Warn("closing a bulk stream", "peer", p.name(), "frame", f.Kind)
			return
		}
		if first && accepted && p.bulk != nil {
			p.bulk.adopt(st)
		}
		p.lastHeard.Store(time.Now().UnixNano())
		if err := d.receiveMsgs(p, f.Body, true); err != nil {
			d.log.Warn("closing a bulk stream", "peer", p.name(), "error", err)
			return
		}
	}
}
