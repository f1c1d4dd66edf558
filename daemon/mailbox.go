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

// msgOverhead is what a queued message costs beyond its payload bytes (its
// place in the queue and the payload's slice, rounded up): a mailbox full
// of empty messages is bounded too.
const msgOverhead = 64

// charge is the memory a queued message is counted for.
func charge(e *envelope) int64 { return int64(len(e.body.Data)) + msgOverhead }

// waiter is a receiver blocked on a pattern. A matching put hands the
// message over through ch (buffered, so put never blocks).
type waiter struct {
	from task.TID
	tag  int
	ch   chan envelope
}

// mailbox holds a task's undelivered messages in arrival order and the
// receivers waiting for them. Messages match on (source, tag) with
// wildcards; the oldest matching message is delivered first, so messages
// from one sender are received in the order they were put.
//
// Its memory (payload plus msgOverhead per message) is mem, written under
// mu and read by senders without it; the daemon's gauge of all its
// mailboxes (total, nil: none) follows each mailbox in steps of
// totalStep. Local senders wait on them (Daemon.send) while they are over
// their limits.
type mailbox struct {
	mu      sync.Mutex
	q       []envelope // q[head:] are the messages, oldest first
	head    int
	bytes   int
	waiters []*waiter
	spare   *waiter // a finished waiter, its channel empty, for the next wait
	closed  bool

	mem   atomic.Int64 // written under mu
	lag   int64        // charged in or out since the last report (under mu)
	room_ waitFall     // senders waiting for the mailbox to shrink
	total *gauge
	step  atomic.Int64 // the mailbox's share of total, in totalSteps
}

// totalStep is the granularity of a mailbox's share of the daemon's gauge:
// a message changes the shared count only when its mailbox crosses a
// multiple of it, so tasks on many cores do not all write one counter.
const totalStep = 64 << 10

// reportEvery is how many bytes a mailbox charges, in or out, before it
// brings the daemon's gauge up to date: the gauge lags each mailbox by less
// than that.
const reportEvery = totalStep / 4

// room returns a channel to wait on while the mailbox holds high bytes or
// more, or the daemon's mailboxes together budget or more (a limit <= 0:
// none); nil when there is room. The channel is closed when memory is
// freed.
func (m *mailbox) room(high, budget int64) <-chan struct{} {
	if high > 0 && m.mem.Load() >= high {
		if ch := m.room_.wait(func() bool { return m.mem.Load() >= high }); ch != nil {
			return ch
		}
	}
	if m.total != nil {
		return m.total.over(budget)
	}
	return nil
}

// charged adds n (negative: frees) to the mailbox's memory, wakes the
// senders waiting for room when it falls, and reports to the daemon's
// gauge every reportEvery bytes. The caller holds mu.
func (m *mailbox) charged(n int64) {
	m.mem.Store(m.mem.Load() + n)
	if n < 0 {
		m.room_.fell()
		n = -n
	}
	if m.lag += n; m.lag >= reportEvery {
		m.lag = 0
		m.report()
	}
}

// report brings the mailbox's share of the daemon's gauge to its memory,
// rounded up to a step. The caller holds mu.
func (m *mailbox) report() {
	if m.total == nil {
		return
	}
	s := (m.mem.Load() + totalStep - 1) / totalStep
	if old := m.step.Swap(s); s > old {
		m.total.add((s - old) * totalStep)
	} else if s < old {
		m.total.sub((old - s) * totalStep)
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
		if e.matches(w.from, w.tag) {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			m.mu.Unlock()
			w.ch <- e
			return true
		}
	}
	m.q = append(m.q, e)
	m.bytes += len(e.body.Data)
	m.charged(charge(&e))
	m.mu.Unlock()
	return true
}

// take removes and returns the oldest message matching the pattern. The
// caller holds m.mu.
func (m *mailbox) take(from task.TID, tag int) (envelope, bool) {
	for i := m.head; i < len(m.q); i++ {
		if !m.q[i].matches(from, tag) {
			continue
		}
		e := m.q[i]
		if i == m.head {
			m.q[i] = envelope{}
			m.head++
		} else {
			copy(m.q[i:], m.q[i+1:])
			m.q[len(m.q)-1] = envelope{}
			m.q = m.q[:len(m.q)-1]
		}
		if m.head == len(m.q) {
			m.q, m.head = m.q[:0], 0
		} else if m.head > 64 && m.head > len(m.q)/2 {
			n := copy(m.q, m.q[m.head:])
			clear(m.q[n:])
			m.q, m.head = m.q[:n], 0
		}
		m.bytes -= len(e.body.Data)
		m.charged(-charge(&e))
		return e, true
	}
	return envelope{}, false
}

// get returns the oldest message matching the pattern. With wait false it
// returns ok == false when none is there; otherwise it blocks until one
// arrives, ctx or dead is done, or the mailbox is closed.
func (m *mailbox) get(ctx context.Context, dead <-chan struct{}, from task.TID, tag int, wait bool) (envelope, bool, error) {
	return m.getOr(ctx, dead, nil, from, tag, wait)
}

// getOr is get that also gives up, with ok == false and no error, when
// intr receives.
func (m *mailbox) getOr(ctx context.Context, dead, intr <-chan struct{}, from task.TID, tag int, wait bool) (envelope, bool, error) {
	m.mu.Lock()
	if e, ok := m.take(from, tag); ok {
		m.mu.Unlock()
		return e, true, nil
	}
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
	w.from, w.tag = from, tag
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
	m.spare = w
	m.mu.Unlock()
}

// probe reports the oldest message matching the pattern without removing
// it.
func (m *mailbox) probe(from task.TID, tag int) (task.Status, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := m.head; i < len(m.q); i++ {
		if e := &m.q[i]; e.matches(from, tag) {
			return task.Status{From: e.from, Tag: e.tag, Len: len(e.body.Data), Enc: e.body.Enc}, true
		}
	}
	return task.Status{}, false
}

// close discards the mailbox's messages and refuses new ones. Waiting
// receivers are woken by their task's dead channel.
func (m *mailbox) close() {
	m.mu.Lock()
	m.closed = true
	clear(m.q)
	m.q, m.head, m.bytes = nil, 0, 0
	m.emptied()
	m.mu.Unlock()
}

// drain removes and returns every queued message, oldest first.
func (m *mailbox) drain() []envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]envelope(nil), m.q[m.head:]...)
	clear(m.q)
	m.q, m.head, m.bytes = m.q[:0], 0, 0
	m.emptied()
	return out
}

// emptied records that the queue was emptied at once (mu held).
func (m *mailbox) emptied() {
	m.mem.Store(0)
	m.lag = 0
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]envelope(nil), m.q[m.head:]...)
}

// stats reports the number of queued messages and their size in bytes.
func (m *mailbox) stats() (n, bytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q) - m.head, m.bytes
}

// gauge counts bytes held and wakes those waiting for it to fall: the
// memory of one mailbox, or of all the mailboxes of a daemon. Adding and
// subtracting are one atomic operation each while nobody waits.
type gauge struct {
	n       atomic.Int64
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{} // closed at the next fall, while someone waits
}

// add raises the count by n and returns the new count.
func (g *gauge) add(n int64) int64 { return g.n.Add(n) }

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
