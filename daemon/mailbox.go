package daemon

import (
	"context"
	"sync"

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
type mailbox struct {
	mu      sync.Mutex
	q       []envelope // q[head:] are the messages, oldest first
	head    int
	bytes   int
	waiters []*waiter
	spare   *waiter // a finished waiter, its channel empty, for the next wait
	closed  bool
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
	m.mu.Unlock()
}

// drain removes and returns every queued message, oldest first.
func (m *mailbox) drain() []envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]envelope(nil), m.q[m.head:]...)
	clear(m.q)
	m.q, m.head, m.bytes = m.q[:0], 0, 0
	return out
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
