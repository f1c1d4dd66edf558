package daemon

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
)

// maxStreamHeader bounds the opening frame of a checkpoint stream.
const maxStreamHeader = 1 << 10

// bulkLane carries a peer's large messages (Config.BulkThreshold and up)
// on the transport's bulk lane (transport.BulkConn), one frame per
// message, written by the lane's own goroutine, which owns the stream.
// Per-pair order and exactly-once delivery do not depend on the lane: the
// receiving daemon delivers by sequence number whichever lane a message
// came by, and a message lost with a broken lane is still in the outbox,
// sent again over QUIC at once.
type bulkLane struct {
	p  *peer
	bc transport.BulkConn

	mu      sync.Mutex
	q       []routing.Envelope // waiting for the writer
	running bool               // the writer goroutine runs
	downAt  time.Time          // when the lane last failed (zero: never)

	// st is the lane's stream, used by the writer goroutine alone (there
	// is one at a time: running); the transport closes it with the
	// connection.
	st  transport.Stream
	hdr []byte
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
// lane is down (the caller sends e over QUIC).
func (b *bulkLane) take(e *routing.Envelope) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.downAt.IsZero() && time.Since(b.downAt) < b.p.d.cfg.BulkRetry {
		return false
	}
	b.q = append(b.q, *e)
	if !b.running {
		b.running = true
		b.p.d.goFunc(b.write)
	}
	return true
}

// write sends the queued messages on the lane's stream, opening it when
// needed, until the queue is empty. On failure the stream is dropped and
// the messages not known to be written go over QUIC.
func (b *bulkLane) write() {
	for {
		b.mu.Lock()
		if len(b.q) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		e := b.q[0]
		b.q[0] = routing.Envelope{}
		b.q = b.q[1:]
		b.mu.Unlock()
		if b.st == nil {
			st, err := b.open()
			if err != nil {
				b.fail(err, &e)
				return
			}
			b.st = st
		}
		b.hdr = routing.AppendEnvelopeFrameHeader(b.hdr[:0], &e)
		_, err := b.st.Write(b.hdr)
		if err == nil {
			_, err = b.st.Write(e.Body.Data)
		}
		if err != nil {
			_ = b.st.Close()
			b.st = nil
			b.fail(err, &e)
			return
		}
		b.p.ctr.Sent(1, len(e.Body.Data))
	}
}

// open opens a stream on the lane, bounded by the handshake timeout.
func (b *bulkLane) open() (transport.Stream, error) {
	d := b.p.d
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.BulkOpenTimeout)
	defer cancel()
	return b.bc.OpenBulk(ctx)
}

// fail marks the lane down and hands e and everything queued after it to
// the QUIC connection.
func (b *bulkLane) fail(err error, e *routing.Envelope) {
	b.mu.Lock()
	b.downAt = time.Now()
	rest := b.q
	b.q = nil
	b.running = false
	b.mu.Unlock()
	if !errors.Is(err, transport.ErrNoBulk) {
		b.p.d.log.Info("bulk lane down: its messages go over QUIC", "peer", b.p.name(), "error", err)
	}
	b.p.envelope(e, false)
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

// sendEnvelope sends a task's message to the peer: on the bulk lane when it
// is large and the lane is up, else batched on the QUIC stream (see
// envelope).
func (p *peer) sendEnvelope(e *routing.Envelope) {
	if p.bulk != nil && len(e.Body.Data) >= p.d.cfg.BulkThreshold && p.bulk.take(e) {
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
		d.goFunc(func() { d.readBulk(p, st) })
	}
}

// readBulk reads message frames from a bulk stream until it ends, or a
// direct checkpoint when the stream opens with a KindStream frame. Any
// other frame, or a malformed one, closes the stream (the connection lives
// on: what was lost is sent again).
func (d *Daemon) readBulk(p *peer, st transport.Stream) {
	defer st.Close()
	stop := context.AfterFunc(d.ctx, func() { _ = st.Close() })
	defer stop()
	budget := d.budgetFor(p.conn)
	for first := true; ; first = false {
		// Each frame in a buffer of its own, which its message keeps: a
		// large message is copied once, from the connection. A large
		// body is counted in the frame budget until handled, as on the
		// connection's streams.
		f, held, err := routing.ReadFrameOwnedBudget(st, d.cfg.MaxFrame, budget)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				d.log.Debug("bulk stream ended", "peer", p.name(), "error", err)
			}
			return
		}
		if first && f.Kind == routing.KindStream && len(f.Body) <= maxStreamHeader {
			d.takeCheckpoint(p, st, f) // a small header: nothing held
			return
		}
		if f.Kind != routing.KindMsgs {
			budget.Release(held)
			d.log.Warn("closing a bulk stream", "peer", p.name(), "frame", f.Kind)
			return
		}
		p.lastHeard.Store(time.Now().UnixNano())
		err = d.receiveMsgs(p, f.Body, true)
		budget.Release(held)
		if err != nil {
			d.log.Warn("closing a bulk stream", "peer", p.name(), "error", err)
			return
		}
	}
}
