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
// The messages sit in two queues: in, where senders append (under mu), and
// own, which receivers work through (under rmu) and refill by taking the
// whole of in at once when nothing in own matches. Every message in own is
// older than every message in in. A receiver thus takes mu once per batch,
// not once per message, and senders and receivers seldom meet on a lock.
//
// Its memory (payload plus msgOverhead per message) is what has been
// charged on the way in (inMem, written by senders under mu) less what has
// been charged on the way out (outMem, written by receivers under rmu):
// each side writes only its own counter, so a message costs no atomic
// read-modify-write on a line both sides write. The daemon's gauge of all
// its mailboxes (total, nil: none) follows each mailbox in steps of
// totalStep. Local senders wait on them (Daemon.send) while they are over
// their limits.
type mailbox struct {
	rmu     sync.Mutex
	own     []envelope // own[ownHead:], oldest first
	ownHead int
	outN    int   // messages taken (under rmu)
	outB    int64 // their payload bytes
	outMem  atomic.Int64
	outLag  int64 // charged out since the last report (under rmu)

	_  [64]byte // senders' fields on other cache lines than the receiver's
	mu sync.Mutex
	in []envelope // the newer messages, oldest first
	// inN and inB count the messages ever queued and their payload bytes
	// (under mu).
	inN     int
	inB     int64
	inMem   atomic.Int64
	inLag   int64 // charged in since the last report (under mu)
	// outSeen is outMem as a sender last read it: a sender reads outMem,
	// a line the receivers write, only when inMem - outSeen says the
	// mailbox may be full (outSeen <= outMem, so it never says less).
	outSeen atomic.Int64
	waiters []*waiter
	spare   *waiter // a finished waiter, its channel empty, for the next wait
	closed  bool

	_     [64]byte
	room_ waitFall // senders waiting for the mailbox to shrink
	total *gauge
	step  atomic.Int64 // the mailbox's share of total, in totalSteps
}

// mem is the memory the mailbox holds.
func (m *mailbox) mem() int64 { return m.inMem.Load() - m.outMem.Load() }

// totalStep is the granularity of a mailbox's share of the daemon's gauge:
// a message changes the shared count only when its mailbox crosses a
// multiple of it, so tasks on many cores do not all write one counter.
const totalStep = 64 << 10

// room returns a channel to wait on while the mailbox holds high bytes or
// more, or the daemon's mailboxes together budget or more (a limit <= 0:
// none); nil when there is room. The channel is closed when memory is
// freed.
func (m *mailbox) room(high, budget int64) <-chan struct{} {
	if in := m.inMem.Load(); high > 0 && in-m.outSeen.Load() >= high {
		out := m.outMem.Load()
		m.outSeen.Store(out)
		if in-out < high {
			return m.roomTotal(budget)
		}
		if ch := m.room_.wait(func() bool { return m.mem() >= high }); ch != nil {
			return ch
		}
	}
	return m.roomTotal(budget)
}

func (m *mailbox) roomTotal(budget int64) <-chan struct{} {
	if m.total != nil {
		return m.total.over(budget)
	}
	return nil
}

// reportEvery is how many bytes a side of a mailbox charges before it
// brings the daemon's gauge up to date: the gauge lags each mailbox by
// less than that, in each direction.
const reportEvery = totalStep / 4

// report brings the mailbox's share of the daemon's gauge to its memory,
// rounded up to a step.
func (m *mailbox) report() {
	if m.total == nil {
		return
	}
	for {
		s := (max(m.mem(), 0) + totalStep - 1) / totalStep
		old := m.step.Load()
		if old == s {
			return
		}
		if m.step.CompareAndSwap(old, s) {
			if s > old {
				m.total.add((s - old) * totalStep)
			} else {
				m.total.sub((old - s) * totalStep)
			}
			// The memory may have moved meanwhile: look again.
		}
	}
}

// tookOut charges n bytes out of the mailbox (rmu held) and wakes the
// senders waiting for room.
func (m *mailbox) tookOut(n int64) {
	m.outMem.Store(m.outMem.Load() + n)
	m.room_.fell()
	if m.outLag += n; m.outLag >= reportEvery {
		m.outLag = 0
		m.report()
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
	m.in = append(m.in, e)
	m.inN++
	m.inB += int64(len(e.body.Data))
	c := charge(&e)
	m.inMem.Store(m.inMem.Load() + c)
	m.inLag += c
	lag := m.inLag >= reportEvery
	if lag {
		m.inLag = 0
	}
	m.mu.Unlock()
	if lag {
		m.report()
	}
	return true
}

// takeOwn removes and returns the oldest message of own matching the
// pattern. The caller holds rmu.
func (m *mailbox) takeOwn(from task.TID, tag int, start int) (envelope, bool) {
	for i := max(start, m.ownHead); i < len(m.own); i++ {
		if !m.own[i].matches(from, tag) {
			continue
		}
		e := m.own[i]
		if i == m.ownHead {
			m.own[i] = envelope{}
			m.ownHead++
		} else {
			copy(m.own[i:], m.own[i+1:])
			m.own[len(m.own)-1] = envelope{}
			m.own = m.own[:len(m.own)-1]
		}
		if m.ownHead == len(m.own) {
			m.own, m.ownHead = m.own[:0], 0
		} else if m.ownHead > 64 && m.ownHead > len(m.own)/2 {
			n := copy(m.own, m.own[m.ownHead:])
			clear(m.own[n:])
			m.own, m.ownHead = m.own[:n], 0
		}
		m.outN++
		m.outB += int64(len(e.body.Data))
		m.tookOut(charge(&e))
		return e, true
	}
	return envelope{}, false
}

// refill moves the messages of in to the end of own and returns where they
// start in own. The caller holds rmu and mu.
func (m *mailbox) refill() int {
	if len(m.in) == 0 {
		return len(m.own)
	}
	if m.ownHead == len(m.own) {
		// own is empty: swap the two slices rather than copy.
		m.own, m.in = m.in, m.own[:0]
		m.ownHead = 0
		return 0
	}
	start := len(m.own)
	m.own = append(m.own, m.in...)
	clear(m.in)
	m.in = m.in[:0]
	return start
}

// take removes and returns the oldest message matching the pattern. The
// caller holds rmu; take locks mu when own has no match, and returns with
// mu held (locked reports it) when neither queue has one, so that the
// caller can register as a waiter before any put comes.
func (m *mailbox) take(from task.TID, tag int) (e envelope, ok, locked bool) {
	if e, ok := m.takeOwn(from, tag, 0); ok {
		return e, true, false
	}
	m.mu.Lock()
	start := m.refill()
	if e, ok := m.takeOwn(from, tag, start); ok {
		m.mu.Unlock()
		return e, true, false
	}
	return envelope{}, false, true
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
	m.rmu.Lock()
	e, ok, _ := m.take(from, tag)
	if ok {
		m.rmu.Unlock()
		return e, true, nil
	}
	// mu is held: nothing matches in either queue.
	m.rmu.Unlock()
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
	e = <-w.ch
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

// lockBoth locks the receivers' and the senders' sides, in that order.
func (m *mailbox) lockBoth() {
	m.rmu.Lock()
	m.mu.Lock()
}

func (m *mailbox) unlockBoth() {
	m.mu.Unlock()
	m.rmu.Unlock()
}

// probe reports the oldest message matching the pattern without removing
// it.
func (m *mailbox) probe(from task.TID, tag int) (task.Status, bool) {
	m.lockBoth()
	defer m.unlockBoth()
	for _, q := range [2][]envelope{m.own[m.ownHead:], m.in} {
		for i := range q {
			if e := &q[i]; e.matches(from, tag) {
				return task.Status{From: e.from, Tag: e.tag, Len: len(e.body.Data), Enc: e.body.Enc}, true
			}
		}
	}
	return task.Status{}, false
}

// clearLocked empties both queues, counting their messages as taken. The
// caller holds rmu and mu.
func (m *mailbox) clearLocked() {
	clear(m.own)
	clear(m.in)
	m.own, m.ownHead, m.in = m.own[:0], 0, m.in[:0]
	m.outN, m.outB = m.inN, m.inB
	m.outMem.Store(m.inMem.Load())
}

// close discards the mailbox's messages and refuses new ones. Waiting
// receivers are woken by their task's dead channel.
func (m *mailbox) close() {
	m.lockBoth()
	m.closed = true
	m.clearLocked()
	m.own, m.in = nil, nil
	m.unlockBoth()
	m.room_.fell()
	m.report()
}

// drain removes and returns every queued message, oldest first.
func (m *mailbox) drain() []envelope {
	m.lockBoth()
	out := append(append([]envelope(nil), m.own[m.ownHead:]...), m.in...)
	m.clearLocked()
	m.unlockBoth()
	m.room_.fell()
	m.report()
	return out
}

// putEnvelope queues a message that came as a routing envelope (see put).
func (m *mailbox) putEnvelope(e routing.Envelope) bool {
	return m.put(envelope{from: e.From, tag: int(e.Tag), body: e.Body})
}

// snapshot returns a copy of the queued messages, oldest first, leaving
// them queued.
func (m *mailbox) snapshot() []envelope {
	m.lockBoth()
	defer m.unlockBoth()
	return append(append([]envelope(nil), m.own[m.ownHead:]...), m.in...)
}

// stats reports the number of queued messages and their size in bytes.
func (m *mailbox) stats() (n, bytes int) {
	m.lockBoth()
	defer m.unlockBoth()
	return m.inN - m.outN, int(m.inB - m.outB)
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
