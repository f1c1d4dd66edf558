package daemon

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// envelope is a message held in a mailbox.
type envelope struct {
	from task.TID
	tag  int
	body task.Payload
}

func (e *envelope) matches(from task.TID, tag int) bool {
	return (from == task.AnyTask || from == e.from) && (tag == task.AnyTag || tag == e.tag)
}

// matchesFn is matches that also asks fn, when given, about the message
// (task.FuncReceiver): fn runs under the mailbox's locks.
func (e *envelope) matchesFn(from task.TID, tag int, fn func(task.Status) bool) bool {
	return e.matches(from, tag) && (fn == nil || fn(task.Status{From: e.from, Tag: e.tag, Len: len(e.body.Data), Enc: e.body.Enc}))
}

// msgOverhead is what a queued message costs beyond its payload bytes (its
// place in the queue and the payload's slice, rounded up): a mailbox full
// of empty messages is bounded too. It is the inbox's (routing.MsgCost), so
// that a message's cost is the same early and in a mailbox.
const msgOverhead = routing.MsgOverhead

// charge is the memory a queued message is counted for.
func charge(e *envelope) int64 { return int64(len(e.body.Data)) + msgOverhead }

// waiter is a receiver blocked on a pattern. A matching put hands the
// message over through ch (buffered, so put never blocks).
type waiter struct {
	from task.TID
	tag  int
	fn   func(task.Status) bool // nil, or a further test the message must pass
	ch   chan envelope
}

// mailbox holds a task's undelivered messages in arrival order and the
// receivers waiting for them. Messages match on (source, tag) with
// wildcards; the oldest matching message is delivered first, so messages
// from one sender are received in the order they were put.
//
// It has two sides, each under its own lock and on its own cache lines,
// so that a sender and a receiver on two cores seldom touch the same
// memory: senders append to q under mu; receivers work through rq under
// rxMu and, when nothing there matches, take the whole of q into rq at
// once (lock order: rxMu, then mu). Every message in rq is older than
// every message in q.
//
// Its memory (payload plus msgOverhead per message) is in − taken: in is
// charged by senders under mu, taken by receivers under rxMu, each side
// writing only its own counter. Senders read taken only when in − the
// taken they last saw reaches their limit (room), so that a receiver's
// writes seldom meet a sender's reads. The daemon's gauge of all its
// mailboxes (total, nil: none) follows each mailbox in steps of
// totalStep. Local senders wait on them (Daemon.send) while they are over
// their limits.
type mailbox struct {
	// The receiving side, under rxMu.
	rxMu   sync.Mutex
	rq     []envelope // rq[rhead:] are the messages taken from q, oldest first
	rhead  int
	rbytes int          // payload bytes in rq
	taken  atomic.Int64 // memory taken out since the mailbox was made (written under rxMu)
	outLag int64        // charged out since the last report to the daemon's gauge

	_ [64]byte // keeps the two sides off each other's cache lines

	// The sending side, under mu.
	mu      sync.Mutex
	q       []envelope   // the messages put since receivers last took q, oldest first
	bytes   int          // payload bytes in q
	in      atomic.Int64 // memory put in since the mailbox was made (written under mu)
	inLag   int64        // charged in since the last report (under mu)
	outSeen atomic.Int64 // taken as a sender last read it: taken is at least this
	waiters []*waiter
	spare   *waiter // a finished waiter, its channel empty, for the next wait
	closed  bool

	room_ waitFall // senders waiting for the mailbox to shrink
	total *gauge
	step  atomic.Int64 // the mailbox's share of total, in totalSteps
}

// totalStep is the granularity of a mailbox's share of the daemon's gauge:
// a message changes the shared count only when its mailbox crosses a
// multiple of it, so tasks on many cores do not all write one counter.
const totalStep = 64 << 10

// reportEvery is how many bytes a side of a mailbox charges before it
// brings the daemon's gauge up to date: the gauge lags each mailbox by less
// than twice that.
const reportEvery = totalStep / 4

// memory is the mailbox's memory: what it holds, payload plus msgOverhead
// per message. Read without the locks, while messages come and go, it is
// never less than what the mailbox held at some moment of the call (taken
// is read first, and both only grow).
func (m *mailbox) memory() int64 {
	taken := m.taken.Load()
	return m.in.Load() - taken
}

// room returns a channel to wait on while the mailbox holds high bytes or
// more, or the daemon's mailboxes together budget or more (a limit <= 0:
// none); nil when there is room. The channel is closed when memory is
// freed.
func (m *mailbox) room(high, budget int64) <-chan struct{} {
	if high > 0 && m.in.Load()-m.outSeen.Load() >= high {
		// Perhaps full: look at what receivers took. The waiter is
		// registered before memory is read again, and a receiver stores
		// what it took before it looks for waiters (chargedOut): either
		// this sees the take, or the receiver sees the waiter.
		m.outSeen.Store(m.taken.Load())
		if ch := m.room_.wait(func() bool { return m.memory() >= high }); ch != nil {
			return ch
		}
	}
	if m.total != nil {
		return m.total.over(budget)
	}
	return nil
}

// chargedIn adds n to the mailbox's memory and reports to the daemon's
// gauge every reportEvery bytes. The caller holds mu.
func (m *mailbox) chargedIn(n int64) {
	m.in.Store(m.in.Load() + n)
	if m.inLag += n; m.inLag >= reportEvery {
		m.inLag = 0
		m.report()
	}
}

// chargedOut takes n from the mailbox's memory, wakes the senders waiting
// for room, if any, and reports to the daemon's gauge every reportEvery
// bytes. The caller holds rxMu.
func (m *mailbox) chargedOut(n int64) {
	m.taken.Store(m.taken.Load() + n)
	m.room_.fell()
	if m.outLag += n; m.outLag >= reportEvery {
		m.outLag = 0
		m.report()
	}
}

// report brings the mailbox's share of the daemon's gauge to its memory,
// rounded up to a step. Either side may call it (holding its own lock):
// the share is swapped atomically, and the gauge follows the last swap.
//
// Each reporter reads the memory again after its swap and swaps again
// until what it swapped in is current: a reporter that read the memory
// before the other side changed it, and swapped after the other's report,
// would otherwise leave the gauge stale until the mailbox next changes,
// and a receiving daemon that turns messages away by the gauge
// (recvLimits) would wait for a fall that never comes.
func (m *mailbox) report() {
	if m.total == nil {
		return
	}
	for {
		s := (max(m.memory(), 0) + totalStep - 1) / totalStep
		if old := m.step.Swap(s); s > old {
			m.total.add((s - old) * totalStep)
		} else if s < old {
			m.total.sub((old - s) * totalStep)
		}
		if (max(m.memory(), 0)+totalStep-1)/totalStep == s {
			return
		}
	}
}

// put appends e, or hands it to the first waiter whose pattern matches. It
// reports false when the mailbox is closed (its task has exited).
func (m *mailbox) put(e envelope) bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	for i, w := range m.waiters {
		if e.matchesFn(w.from, w.tag, w.fn) {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			m.mu.Unlock()
			w.ch <- e
			return true
		}
	}
	m.q = append(m.q, e)
	m.bytes += len(e.body.Data)
	m.chargedIn(charge(&e))
	m.mu.Unlock()
	return true
}

// pull moves every message of q to the end of rq. The caller holds rxMu
// and mu.
func (m *mailbox) pull() {
	if len(m.q) == 0 {
		return
	}
	if m.rhead == len(m.rq) {
		// rq is empty: the two swap buffers, and senders go on appending
		// to the one receivers emptied.
		m.rq, m.q = m.q, m.rq[:0]
		m.rhead = 0
	} else {
		m.rq = append(m.rq, m.q...)
		clear(m.q)
		m.q = m.q[:0]
	}
	m.rbytes += m.bytes
	m.bytes = 0
}

// find returns the index in rq of the oldest message from rq[i:] on that
// matches the pattern, or -1. The caller holds rxMu.
func (m *mailbox) find(i int, from task.TID, tag int, fn func(task.Status) bool) int {
	for ; i < len(m.rq); i++ {
		if m.rq[i].matchesFn(from, tag, fn) {
			return i
		}
	}
	return -1
}

// takeAt removes and returns rq[i]. The caller holds rxMu.
func (m *mailbox) takeAt(i int) envelope {
	e := m.rq[i]
	if i == m.rhead {
		m.rq[i] = envelope{}
		m.rhead++
	} else {
		copy(m.rq[i:], m.rq[i+1:])
		m.rq[len(m.rq)-1] = envelope{}
		m.rq = m.rq[:len(m.rq)-1]
	}
	if m.rhead == len(m.rq) {
		m.rq, m.rhead = m.rq[:0], 0
	} else if m.rhead > 64 && m.rhead > len(m.rq)/2 {
		n := copy(m.rq, m.rq[m.rhead:])
		clear(m.rq[n:])
		m.rq, m.rhead = m.rq[:n], 0
	}
	m.rbytes -= len(e.body.Data)
	m.chargedOut(charge(&e))
	return e
}

// get returns the oldest message matching the pattern. With wait false it
// returns ok == false when none is there; otherwise it blocks until one
// arrives, ctx or dead is done, or the mailbox is closed.
func (m *mailbox) get(ctx context.Context, dead <-chan struct{}, from task.TID, tag int, wait bool) (envelope, bool, error) {
	return m.getOr(ctx, dead, nil, from, tag, nil, wait)
}

// getOr is get that also gives up, with ok == false and no error, when
// intr receives, and takes only a message fn (when not nil) accepts.
func (m *mailbox) getOr(ctx context.Context, dead, intr <-chan struct{}, from task.TID, tag int, fn func(task.Status) bool, wait bool) (envelope, bool, error) {
	m.rxMu.Lock()
	if i := m.find(m.rhead, from, tag, fn); i >= 0 {
		e := m.takeAt(i)
		m.rxMu.Unlock()
		return e, true, nil
	}
	m.mu.Lock()
	seen := len(m.rq)
	m.pull()
	if i := m.find(seen, from, tag, fn); i >= 0 {
		m.mu.Unlock()
		e := m.takeAt(i)
		m.rxMu.Unlock()
		return e, true, nil
	}
	m.rxMu.Unlock()
	if m.closed {
		m.mu.Unlock()
		return envelope{}, false, task.ErrKilled
	}
	if !wait {
		m.mu.Unlock()
		return envelope{}, false, nil
	}
	w := m.spare
	if w == nil {
		w = &waiter{ch: make(chan envelope, 1)}
	}
	m.spare = nil
	w.from, w.tag, w.fn = from, tag, fn
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()

	var err error
	select {
	case e := <-w.ch:
		m.recycle(w)
		return e, true, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-dead:
		err = task.ErrKilled
	case <-intr:
	}
	m.mu.Lock()
	for i, x := range m.waiters {
		if x == w {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			m.spare = w
			m.mu.Unlock()
			return envelope{}, false, err
		}
	}
	m.mu.Unlock()
	// A put handed us a message while we were giving up: take it, so it is
	// not lost.
	e := <-w.ch
	m.recycle(w)
	return e, true, nil
}

// recycle keeps w, out of the waiters and its channel drained, for the
// next wait: a task blocking in receive after receive allocates nothing.
func (m *mailbox) recycle(w *waiter) {
	m.mu.Lock()
	w.fn = nil
	m.spare = w
	m.mu.Unlock()
}

// probe reports the oldest message matching the pattern without removing
// it.
func (m *mailbox) probe(from task.TID, tag int) (task.Status, bool) {
	m.rxMu.Lock()
	defer m.rxMu.Unlock()
	m.mu.Lock()
	m.pull()
	m.mu.Unlock()
	if i := m.find(m.rhead, from, tag, nil); i >= 0 {
		e := &m.rq[i]
		return task.Status{From: e.from, Tag: e.tag, Len: len(e.body.Data), Enc: e.body.Enc}, true
	}
	return task.Status{}, false
}

// close discards the mailbox's messages and refuses new ones. Waiting
// receivers are woken by their task's dead channel.
func (m *mailbox) close() {
	m.rxMu.Lock()
	m.mu.Lock()
	m.closed = true
	m.clearLocked()
	m.rq, m.q = nil, nil
	m.mu.Unlock()
	m.rxMu.Unlock()
}

// drain removes and returns every queued message, oldest first.
func (m *mailbox) drain() []envelope {
	m.rxMu.Lock()
	defer m.rxMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.queuedLocked()
	m.clearLocked()
	return out
}

// queuedLocked returns a copy of the queued messages, oldest first (rxMu
// and mu held).
func (m *mailbox) queuedLocked() []envelope {
	out := make([]envelope, 0, len(m.rq)-m.rhead+len(m.q))
	out = append(out, m.rq[m.rhead:]...)
	return append(out, m.q...)
}

// clearLocked empties both queues at once and the mailbox's memory with
// them (rxMu and mu held).
func (m *mailbox) clearLocked() {
	clear(m.rq)
	clear(m.q)
	m.rq, m.rhead, m.rbytes = m.rq[:0], 0, 0
	m.q, m.bytes = m.q[:0], 0
	in := m.in.Load()
	m.taken.Store(in)
	m.outSeen.Store(in)
	m.inLag, m.outLag = 0, 0
	m.room_.fell()
	m.report()
}

// putEnvelope queues a message that came as a routing envelope (see put).
func (m *mailbox) putEnvelope(e routing.Envelope) bool {
	return m.put(envelope{from: e.From, tag: int(e.Tag), body: e.Body})
}

// snapshot returns a copy of the queued messages, oldest first, leaving
// them queued.
func (m *mailbox) snapshot() []envelope {
	m.rxMu.Lock()
	defer m.rxMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queuedLocked()
}

// stats reports the number of queued messages and their size in bytes.
func (m *mailbox) stats() (n, bytes int) {
	m.rxMu.Lock()
	defer m.rxMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rq) - m.rhead + len(m.q), m.rbytes + m.bytes
}

// gauge counts bytes held and wakes those waiting for it to fall: the
// memory of one mailbox, or of all the mailboxes of a daemon. Adding and
// subtracting are one atomic operation each while nobody waits.
type gauge struct {
	n       atomic.Int64
	peak    atomic.Int64 // the highest count yet, for the tests and the threat model's figures
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{} // closed at the next fall, while someone waits
}

// add raises the count by n and returns the new count.
func (g *gauge) add(n int64) int64 {
	v := g.n.Add(n)
	for {
		p := g.peak.Load()
		if v <= p || g.peak.CompareAndSwap(p, v) {
			return v
		}
	}
}

// sub lowers the count by n, wakes the waiters, if any, and returns the
// new count.
func (g *gauge) sub(n int64) int64 {
	v := g.n.Add(-n)
	if g.waiting.Load() {
		g.mu.Lock()
		if g.ch != nil {
			close(g.ch)
			g.ch = nil
		}
		g.waiting.Store(false)
		g.mu.Unlock()
	}
	return v
}

// over returns a channel that is closed at the next fall of the count if
// the count is at least limit (> 0), else nil.
func (g *gauge) over(limit int64) <-chan struct{} {
	if limit <= 0 || g.n.Load() < limit {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	g.waiting.Store(true)
	if g.n.Load() < limit { // it fell before we were listening
		return nil
	}
	return g.ch
}

// waitFall lets goroutines wait for a count to fall: fell costs one atomic
// load while nobody waits.
type waitFall struct {
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

// wait returns a channel closed at the next fall while still() holds
// (checked again once the waiter is registered), else nil.
func (w *waitFall) wait(still func() bool) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	w.waiting.Store(true)
	if !still() {
		return nil
	}
	return w.ch
}

// fell wakes the waiters, if any.
func (w *waitFall) fell() {
	if !w.waiting.Load() {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.waiting.Store(false)
	w.mu.Unlock()
}
