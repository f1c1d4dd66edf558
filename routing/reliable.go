package routing

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Outbox is a daemon's sending side of reliable delivery. It numbers each
// (sender, receiver) pair's messages, keeps every message sent to a remote
// task until its receiving daemon acknowledges it, holds messages for tasks
// whose daemon refused them until a newer route is known, and says what to
// retransmit. It is pure: time is a parameter and it performs no I/O. An
// Outbox is not safe for concurrent use.
type Outbox struct {
	next   map[task.TID]map[task.TID]*Counter // sender → receiver → last seq assigned
	queues map[task.TID]*outQueue             // by receiver
	bytes  int
	// Bytes by the host the queues are routed to. An entry stays at zero
	// until DropHost: in a conversation, deleting it at each
	// acknowledgement (an emptied map is reseeded) and adding it again at
	// the next send was a third of a message's accounting
	// (BenchmarkConversation).
	byHost map[task.HostID]int
	onFree func() // see OnFree

	// Emptied queues and pair FIFOs kept for reuse: in a conversation
	// (send, acknowledgement, send, …) each message would otherwise make
	// and drop a queue, its map and a FIFO.
	freeQ []*outQueue
	freeF []*fifo
}

// keepFree bounds the emptied queues and FIFOs an Outbox keeps, and
// keepMsgs the capacity of a kept FIFO's slice.
const (
	keepFree = 16
	keepMsgs = 256
)

// popFree takes the last kept item of a free list, or returns nil.
func popFree[T any](list *[]*T) *T {
	n := len(*list)
	if n == 0 {
		return nil
	}
	x := (*list)[n-1]
	(*list)[n-1] = nil
	*list = (*list)[:n-1]
	return x
}

type outQueue struct {
	pairs map[task.TID]*fifo // unacknowledged, by sender, each in the order sent
	n     int                // messages in all the pairs
	bytes int
	// route is where the messages were last sent; held means its daemon
	// refused them (or the task is in transit) and nothing is sent until a
	// route with a larger epoch arrives.
	route Route
	held  bool
	// resent: a stale refusal has already caused one resend along route;
	// later stale refusals leave the messages to Due, paced by the RTO,
	// instead of resending at once. A host that keeps refusing because it
	// knows less than we do (a task whose resume is late) would otherwise
	// be sent the whole queue again for each message it refuses, with no
	// pause between.
	resent bool
}

// fifo is one pair's unacknowledged messages, oldest first: acknowledgements
// are cumulative, so they pop from the front.
type fifo struct {
	msgs []outMsg
	head int
}

type outMsg struct {
	env    Envelope
	sentAt time.Time
	// timeouts counts the resends Due made since the message was last
	// sent otherwise: each doubles the wait for the next (MaxBackoff).
	timeouts uint8
}

// MaxBackoff bounds how many times Due doubles a message's wait: an
// unacknowledged message is resent after rto, 2·rto, 4·rto, then every
// 8·rto. A receiver that keeps a large message unacknowledged (its
// mailbox is full) is not sent it again faster than that; a lost message
// on a live connection is rare (QUIC does not lose), and the first resend
// keeps its pace. A large message starts further along (see PaceBytes).
const MaxBackoff = 3

// PaceBytes is the message size from which Due spaces resends more: a
// message of n bytes starts its backoff log2(n/PaceBytes) doublings along
// (a message of 8 MiB waits 2·rto before its first resend, one of 16 MiB
// 4·rto, one of 32 MiB or more 8·rto), so that a receiver that turns large
// messages away (Inbox.Admit) is not sent one faster than it could take
// it, while the longest wait stays 8·rto.
const PaceBytes = 4 << 20

// sizeShift is how many doublings along a message of n bytes starts its
// backoff (PaceBytes), at most MaxBackoff.
func sizeShift(n int) uint8 {
	var k uint8
	for n >= 2*PaceBytes && k < MaxBackoff {
		n /= 2
		k++
	}
	return k
}

// each calls fn on every message of q, pair by pair in sender order, each
// pair's in the order sent: a deterministic order.
func (q *outQueue) each(fn func(m *outMsg)) {
	for _, from := range sortedKeys(q.pairs) {
		f := q.pairs[from]
		for i := f.head; i < len(f.msgs); i++ {
			fn(&f.msgs[i])
		}
	}
}

func sortedKeys[V any](m map[task.TID]V) []task.TID {
	keys := make([]task.TID, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// NewOutbox returns an empty outbox.
func NewOutbox() *Outbox {
	return &Outbox{next: map[task.TID]map[task.TID]*Counter{}, queues: map[task.TID]*outQueue{}, byHost: map[task.HostID]int{}}
}

// setRoute routes q by r, its bytes with it.
func (o *Outbox) setRoute(q *outQueue, r Route) {
	if q.bytes != 0 && q.route.Host != r.Host {
		o.hostBytes(q.route.Host, -q.bytes)
		o.hostBytes(r.Host, q.bytes)
	}
	q.route = r
}

// addBytes counts n bytes more (less when negative) in q.
func (o *Outbox) addBytes(q *outQueue, n int) {
	q.bytes += n
	o.bytes += n
	o.hostBytes(q.route.Host, n)
}

// hostBytes counts n bytes more (less when negative) towards h; less is
// room freed (OnFree).
func (o *Outbox) hostBytes(h task.HostID, n int) {
	o.byHost[h] += n
	if n < 0 && o.onFree != nil {
		o.onFree()
	}
}

// OnFree sets fn, called whenever bytes stop counting towards a receiver
// or a host (Pending, PendingHost): acknowledged, dropped, or routed to
// another host. A sender that waits for room in a window waits for it,
// whichever path freed the room. fn runs within the outbox's method, under
// its caller's lock, and must not call the outbox.
func (o *Outbox) OnFree(fn func()) { o.onFree = fn }

// Counter is one pair's sequence state as an Outbox or an Inbox holds it:
// for the Outbox, the last number assigned to the pair's messages; for the
// Inbox, the number it expects next and how many of the pair's messages
// wait for a gap to fill. A daemon that delivers many messages between two
// tasks it hosts keeps the pair's two counters (Outbox.Counter and
// Inbox.Counter) and numbers each message with Local, without the lookups
// of Seq and Accept. A counter stays its box's until the box forgets,
// drops or replaces the task's state; it is then marked gone, and a holder
// must ask the box again.
type Counter struct {
	n     uint64 // Outbox: the last number assigned; Inbox: the next expected (0 stands for 1)
	early int    // Inbox: the pair's early arrivals
	// Inbox: the first message of the pair Admit turned away (0: none);
	// later ones are turned away too until it is accepted, so that none
	// waits as an early arrival.
	deferred uint64
	gone     bool
}

// Gone reports whether the counter's box has let it go (see Counter).
func (c *Counter) Gone() bool { return c.gone }

// Local numbers the next message of a pair whose sender and receiver are
// hosted by one daemon, given the pair's Outbox counter out and Inbox
// counter in: when every message of the pair numbered so far has been
// delivered in order (none is early or missing), it advances both and
// returns the message's sequence number and true; the caller delivers the
// message at once. Otherwise it changes nothing and returns false: the
// message goes through Seq and Accept.
func Local(out, in *Counter) (uint64, bool) {
	if out.gone || in.gone || in.early != 0 || max(in.n, 1) != out.n+1 {
		return 0, false
	}
	out.n++
	in.n = out.n + 1
	return out.n, true
}

// pairCounter returns m[a][b], made (at zero) if missing.
func pairCounter(m map[task.TID]map[task.TID]*Counter, a, b task.TID) *Counter {
	byB := m[a]
	if byB == nil {
		byB = map[task.TID]*Counter{}
		m[a] = byB
	}
	c := byB[b]
	if c == nil {
		c = &Counter{}
		byB[b] = c
	}
	return c
}

// Counter returns the pair (from, to)'s counter, which Seq advances.
func (o *Outbox) Counter(from, to task.TID) *Counter { return pairCounter(o.next, from, to) }

// Seq assigns the next sequence number of the pair (from, to), starting at
// 1. Every message gets one, local or remote, so numbering continues when
// either task moves.
func (o *Outbox) Seq(from, to task.TID) uint64 {
	c := pairCounter(o.next, from, to)
	c.n++
	return c.n
}

// Push records e, about to be sent along route r at now, as unacknowledged.
// It reports whether to transmit it now: false when messages for e.To are
// held, in which case it goes out with the others once a newer route is
// known.
func (o *Outbox) Push(e Envelope, r Route, now time.Time) bool {
	q := o.queues[e.To]
	if q == nil {
		if q = popFree(&o.freeQ); q == nil {
			q = &outQueue{pairs: map[task.TID]*fifo{}}
		}
		o.setRoute(q, r)
		o.queues[e.To] = q
	}
	if !q.held && r.InTransit {
		q.held = true
	}
	if !q.held && r.Epoch > q.route.Epoch {
		o.setRoute(q, r)
		q.resent = false
	}
	n := EnvelopeSize(&e)
	f := q.pairs[e.From]
	if f == nil {
		if f = popFree(&o.freeF); f == nil {
			f = &fifo{}
		}
		q.pairs[e.From] = f
	}
	f.msgs = append(f.msgs, outMsg{env: e, sentAt: now})
	q.n++
	o.addBytes(q, n)
	return !q.held
}

// Receivers lists the tasks the outbox keeps messages for, in TID order.
func (o *Outbox) Receivers() []task.TID { return slices.Sorted(maps.Keys(o.queues)) }

// Route is where messages for to are currently sent, and whether they are
// held.
func (o *Outbox) Route(to task.TID) (Route, bool, bool) {
	q := o.queues[to]
	if q == nil {
		return Route{}, false, false
	}
	return q.route, q.held, true
}

// Ack removes the messages of a's pair up to and including a.Seq and
// returns how many bytes it freed.
func (o *Outbox) Ack(a Ack) int {
	q := o.queues[a.To]
	if q == nil {
		return 0
	}
	f := q.pairs[a.From]
	if f == nil {
		return 0
	}
	freed := 0
	for f.head < len(f.msgs) && f.msgs[f.head].env.Seq <= a.Seq {
		freed += EnvelopeSize(&f.msgs[f.head].env)
		f.msgs[f.head] = outMsg{}
		f.head++
		q.n--
	}
	switch {
	case f.head == len(f.msgs):
		delete(q.pairs, a.From)
		if len(o.freeF) < keepFree && cap(f.msgs) <= keepMsgs {
			f.msgs, f.head = f.msgs[:0], 0
			o.freeF = append(o.freeF, f)
		}
	case f.head > 256 && f.head > len(f.msgs)/2:
		k := copy(f.msgs, f.msgs[f.head:])
		clear(f.msgs[k:])
		f.msgs, f.head = f.msgs[:k], 0
	}
	o.addBytes(q, -freed)
	if q.n == 0 && !q.held {
		delete(o.queues, a.To)
		if len(o.freeQ) < keepFree && len(q.pairs) == 0 {
			*q = outQueue{pairs: q.pairs}
			o.freeQ = append(o.freeQ, q)
		}
	}
	return freed
}

// Refused handles a refusal from host from. If it names a route newer than
// the one the messages went by, they are resent there at once (returned,
// with the host to send them to). If it is stale — the refuser knew less
// than we do now, or is no longer where we send — they are resent along the
// current route (the receiving side drops duplicates), once per route: later
// stale refusals leave them to Due. A refusal naming no route (the task
// has exited) drops them, but only from the host they are routed to.
// Otherwise the task is moving away from the refuser and the messages are held until Reroute
// brings a newer route.
func (o *Outbox) Refused(rf Refusal, from task.HostID, now time.Time) (task.HostID, []Envelope) {
	q := o.queues[rf.To]
	if q == nil {
		return 0, nil
	}
	switch {
	case rf.Route.Host == 0 && from != q.route.Host:
		// "Exited", from a host the messages are no longer sent to: it
		// answers for an incarnation of the task that is gone from there
		// (a host deleted and back, refusing what was sent to it before
		// the task was restored elsewhere). The task lives on where the
		// route says; dropping would lose what is queued for it there.
		return 0, nil
	case rf.Route.Host == 0:
		o.DropReceiver(rf.To)
		return 0, nil
	case rf.Route.Epoch > q.route.Epoch,
		rf.Route.Epoch == q.route.Epoch && q.held && !rf.Route.InTransit && rf.Route.Host == q.route.Host:
		// A newer route, or the commit of the move the messages are held
		// for (a daemon that learns it from a refusal may never see it
		// again in a broadcast).
		return o.Reroute(rf.To, rf.Route, now)
	case rf.Route.Epoch < q.route.Epoch || from != q.route.Host:
		if q.held || q.resent {
			return 0, nil
		}
		q.resent = true
		return q.route.Host, q.all(now)
	}
	q.held = true
	return 0, nil
}

// all returns the queue's messages in order per pair, marking them sent at
// now.
func (q *outQueue) all(now time.Time) []Envelope {
	out := make([]Envelope, 0, q.n)
	q.each(func(m *outMsg) {
		m.sentAt, m.timeouts = now, 0
		out = append(out, m.env)
	})
	return out
}

// Reroute applies a route learnt for to (from the master's broadcast or a
// refusal). If it is newer than the route the held or unacknowledged
// messages went by, they are all returned, in order, to be resent to its
// host; an in-transit route holds them instead.
func (o *Outbox) Reroute(to task.TID, r Route, now time.Time) (task.HostID, []Envelope) {
	q := o.queues[to]
	if q == nil {
		return 0, nil
	}
	newer := r.Epoch > q.route.Epoch || (r.Epoch == q.route.Epoch && q.held && !r.InTransit)
	if !newer {
		return 0, nil
	}
	o.setRoute(q, r)
	q.resent = false
	if r.InTransit {
		q.held = true
		return 0, nil
	}
	q.held = false
	return r.Host, q.all(now)
}

// Due returns the unacknowledged messages, not held, whose wait is over,
// grouped by the host to resend them to, and marks them sent at now. A
// message waits rto after it was sent (longer when large: PaceBytes), and
// twice as long after each resend Due made (at most 2^MaxBackoff·rto), until
// it is acknowledged or sent again otherwise (a new route, a new
// connection). Each pair's messages are resent from its oldest on, in
// order, up to the first whose wait is not over and to PaceBytes in all
// (at least one message): a receiver that turned the oldest away
// (Inbox.Admit) turns the later ones away too, so they are not resent with
// it; once it is acknowledged the next is due at once. Over QUIC this
// matters only after a connection is lost; on a lossy transport it is
// what makes delivery reliable.
func (o *Outbox) Due(now time.Time, rto time.Duration) map[task.HostID][]Envelope {
	var out map[task.HostID][]Envelope
	for _, to := range sortedKeys(o.queues) {
		q := o.queues[to]
		if q.held {
			continue
		}
		for _, from := range sortedKeys(q.pairs) {
			f := q.pairs[from]
			sent := 0
			for i := f.head; i < len(f.msgs) && (sent == 0 || sent+len(f.msgs[i].env.Body.Data) <= PaceBytes); i++ {
				m := &f.msgs[i]
				k := min(m.timeouts+sizeShift(len(m.env.Body.Data)), MaxBackoff)
				if now.Sub(m.sentAt) < rto<<k {
					break
				}
				if out == nil {
					out = map[task.HostID][]Envelope{}
				}
				out[q.route.Host] = append(out[q.route.Host], m.env)
				sent += max(len(m.env.Body.Data), 1)
				m.sentAt = now
				if m.timeouts < MaxBackoff {
					m.timeouts++
				}
			}
		}
	}
	return out
}

// ForHost returns every unacknowledged message, not held, routed to host h,
// in order per receiver: what to resend when a connection to h is
// re-established.
func (o *Outbox) ForHost(h task.HostID, now time.Time) []Envelope {
	var out []Envelope
	for _, to := range sortedKeys(o.queues) {
		q := o.queues[to]
		if q.held || q.route.Host != h {
			continue
		}
		out = append(out, q.all(now)...)
	}
	return out
}

// DropReceiver discards the messages for to (it has exited or was lost) and
// returns how many there were.
func (o *Outbox) DropReceiver(to task.TID) int {
	q := o.queues[to]
	if q == nil {
		return 0
	}
	delete(o.queues, to)
	o.addBytes(q, -q.bytes)
	return q.n
}

// DropSender discards the messages from sender, unacknowledged or held,
// to every receiver, and its sequence state, and returns how many messages
// there were: the sender is gone and must not be heard from again (its job
// rolls back, and its restored incarnation numbers from its checkpoint).
func (o *Outbox) DropSender(from task.TID) int {
	n := 0
	for _, to := range sortedKeys(o.queues) {
		q := o.queues[to]
		f := q.pairs[from]
		if f == nil {
			continue
		}
		for i := f.head; i < len(f.msgs); i++ {
			o.addBytes(q, -EnvelopeSize(&f.msgs[i].env))
			q.n--
			n++
		}
		delete(q.pairs, from)
		if q.n == 0 && !q.held {
			delete(o.queues, to)
		}
	}
	o.ForgetSender(from)
	return n
}

// DropHost discards the messages routed to host h (it left the virtual
// machine) and returns the receivers they were for.
func (o *Outbox) DropHost(h task.HostID) []task.TID {
	var gone []task.TID
	for to, q := range o.queues {
		if q.route.Host == h && !q.held {
			gone = append(gone, to)
			o.addBytes(q, -q.bytes)
			delete(o.queues, to)
		}
	}
	if o.byHost[h] == 0 {
		delete(o.byHost, h)
	}
	return gone
}

// ForgetSender drops the sequence state of a sender that has exited.
func (o *Outbox) ForgetSender(from task.TID) {
	release(o.next[from])
	delete(o.next, from)
}

// release marks the counters of one task's state gone.
func release(m map[task.TID]*Counter) {
	for _, c := range m {
		c.gone = true
	}
}

// Pending is the number of bytes unacknowledged or held for to.
func (o *Outbox) Pending(to task.TID) int {
	if q := o.queues[to]; q != nil {
		return q.bytes
	}
	return 0
}

// PendingHost is the number of bytes unacknowledged or held for the
// receivers routed to host h: what a sending daemon has in flight to one
// receiving daemon, which a sender may bound.
func (o *Outbox) PendingHost(h task.HostID) int { return o.byHost[h] }

// PendingFrom is how many messages from sender are unacknowledged or held,
// to any receiver.
func (o *Outbox) PendingFrom(sender task.TID) int {
	n := 0
	for _, q := range o.queues {
		if f := q.pairs[sender]; f != nil {
			n += len(f.msgs) - f.head
		}
	}
	return n
}

// PendingFromAny is how many messages from the senders that in names are
// unacknowledged or held, to any receiver: one pass over the pairs with
// messages waiting, however many senders in names (PendingFrom for each
// would pass over every receiver's queue once per sender).
func (o *Outbox) PendingFromAny(in func(task.TID) bool) int {
	n := 0
	for _, q := range o.queues {
		for from, f := range q.pairs {
			if in(from) {
				n += len(f.msgs) - f.head
			}
		}
	}
	return n
}

// Bytes is the total unacknowledged or held.
func (o *Outbox) Bytes() int { return o.bytes }

// SenderState returns from's last assigned sequence number per receiver, to
// carry in its checkpoint.
func (o *Outbox) SenderState(from task.TID) map[task.TID]uint64 {
	return seqsOf(o.next[from])
}

// SetSenderState installs a restored sender's sequence state.
func (o *Outbox) SetSenderState(from task.TID, s map[task.TID]uint64) {
	o.ForgetSender(from)
	if len(s) > 0 {
		o.next[from] = countersOf(s)
	}
}

// seqsOf returns the numbers of one task's counters (nil for none); a
// counter made but never advanced is left out, as if it had not been made.
func seqsOf(m map[task.TID]*Counter) map[task.TID]uint64 {
	var s map[task.TID]uint64
	for k, c := range m {
		if c.n == 0 {
			continue
		}
		if s == nil {
			s = make(map[task.TID]uint64, len(m))
		}
		s[k] = c.n
	}
	return s
}

// countersOf returns new counters holding the numbers of s.
func countersOf(s map[task.TID]uint64) map[task.TID]*Counter {
	m := make(map[task.TID]*Counter, len(s))
	for k, n := range s {
		m[k] = &Counter{n: n}
	}
	return m
}

// Inbox is a daemon's receiving side of reliable delivery: per (sender,
// receiver) pair it delivers messages in sequence order exactly once,
// keeping early arrivals until the gap before them fills, and says what to
// acknowledge. Not safe for concurrent use.
type Inbox struct {
	expected map[task.TID]map[task.TID]*Counter            // receiver → sender → next seq
	early    map[task.TID]map[task.TID]map[uint64]Envelope // receiver → sender → seq → message
	earlyN   int
	// The memory of the early arrivals (MsgCost), by receiver and in all:
	// Admit counts it with the mailboxes'.
	earlyTo  map[task.TID]int64
	earlyAll int64
}

// MsgOverhead is what a message held by a receiving daemon (in a mailbox,
// or early in an Inbox) is counted for beyond its payload bytes: its
// place in a queue and its slice, rounded up. Many empty messages are
// bounded too.
const MsgOverhead = 64

// MsgCost is the memory e is counted for while a receiving daemon holds
// it.
func MsgCost(e *Envelope) int64 { return int64(len(e.Body.Data)) + MsgOverhead }

// early notes that the inbox holds n bytes more (less when negative) of
// early arrivals for to.
func (in *Inbox) earlyBytes(to task.TID, n int64) {
	in.earlyAll += n
	if in.earlyTo[to] += n; in.earlyTo[to] <= 0 {
		delete(in.earlyTo, to)
	}
}

// NewInbox returns an empty inbox.
func NewInbox() *Inbox {
	return &Inbox{expected: map[task.TID]map[task.TID]*Counter{}, early: map[task.TID]map[task.TID]map[uint64]Envelope{}, earlyTo: map[task.TID]int64{}}
}

// RecvLimits bounds the memory a receiving daemon gives to messages from
// other daemons (Inbox.Admit): High bytes for one receiver, Budget bytes
// for all of the daemon's receivers together (<= 0: no bound). Of each,
// a quarter (EarlyShare) is for early arrivals, which wait in the Inbox
// for a gap before them to fill, and the rest for messages in order,
// which wait in the receivers' mailboxes: an early arrival cannot take
// the room the message it waits for needs.
type RecvLimits struct {
	High, Budget int64
}

// EarlyShare is the part of each RecvLimits bound (1/EarlyShare) kept for
// early arrivals.
const EarlyShare = 4

// Admit decides whether e, a sequenced message from another daemon for a
// receiver hosted here whose mailbox holds held bytes while the daemon's
// mailboxes hold total, is taken (Accept) now or turned away
// unacknowledged: its sender keeps it and resends it (Outbox.Due), so a
// receiver's memory is bounded by bytes whatever the size and number of
// messages in flight to it. A message costs MsgCost bytes. A message in
// order is taken when it fits in the mailboxes' share of both bounds (held
// and total), or when what it does not fit under is empty (a message
// larger than a bound is taken alone, so that every message is eventually
// taken). An early arrival is taken when it fits, with the inbox's other
// early arrivals, in the early share of both bounds; when the message
// before it comes, they all move to the mailbox, which may then hold up
// to the early share more than its own (mailboxes and early arrivals
// together stay within the bounds). Duplicates are always taken (Accept
// drops them and acknowledges again). Once a message of a pair is turned
// away, the pair's later ones are too until it is taken: they would
// otherwise wait as early arrivals. Exactly-once and FIFO are Accept's,
// and unchanged.
func (in *Inbox) Admit(e Envelope, held, total int64, lim RecvLimits) bool {
	size := MsgCost(&e)
	c := pairCounter(in.expected, e.To, e.From)
	next := max(c.n, 1)
	if e.Seq < next {
		return true
	}
	if c.deferred != 0 && e.Seq > c.deferred {
		return false
	}
	var ok bool
	if e.Seq == next {
		fits := func(used, limit int64) bool {
			return limit <= 0 || used == 0 || used+size <= limit-limit/EarlyShare
		}
		ok = fits(held, lim.High) && fits(total, lim.Budget)
	} else {
		fits := func(used, limit int64) bool { return limit <= 0 || used+size <= limit/EarlyShare }
		ok = fits(in.earlyTo[e.To], lim.High) && fits(in.earlyAll, lim.Budget)
	}
	if ok {
		if c.deferred == e.Seq {
			c.deferred = 0
		}
		return true
	}
	if c.deferred == 0 || e.Seq < c.deferred {
		c.deferred = e.Seq
	}
	return false
}

// Counter returns the pair (from, to)'s counter, which Accept advances.
func (in *Inbox) Counter(to, from task.TID) *Counter { return pairCounter(in.expected, to, from) }

// Accept takes in e for a receiver hosted here and calls deliver for every
// message that is now in order (e and any early arrivals it unblocks). It
// returns the acknowledgement to send: everything of the pair up to the
// last message delivered in order. A duplicate is dropped and
// acknowledged again.
func (in *Inbox) Accept(e Envelope, deliver func(Envelope)) Ack {
	c := pairCounter(in.expected, e.To, e.From)
	next := max(c.n, 1)
	switch {
	case e.Seq < next: // duplicate
	case e.Seq > next: // early: keep it
		byFrom := in.early[e.To]
		if byFrom == nil {
			byFrom = map[task.TID]map[uint64]Envelope{}
			in.early[e.To] = byFrom
		}
		m := byFrom[e.From]
		if m == nil {
			m = map[uint64]Envelope{}
			byFrom[e.From] = m
		}
		if _, dup := m[e.Seq]; !dup {
			m[e.Seq] = e
			in.earlyN++
			in.earlyBytes(e.To, MsgCost(&e))
			c.early++
		}
	default:
		deliver(e)
		next++
		if in.earlyN == 0 {
			break // nothing is early: the common case, without a lookup
		}
		if m := in.early[e.To][e.From]; m != nil {
			for {
				x, ok := m[next]
				if !ok {
					break
				}
				delete(m, next)
				in.earlyN--
				in.earlyBytes(e.To, -MsgCost(&x))
				c.early--
				deliver(x)
				next++
			}
			if len(m) == 0 {
				delete(in.early[e.To], e.From)
			}
		}
	}
	c.n = next
	if c.deferred != 0 && next > c.deferred {
		c.deferred = 0 // what Admit turned away has come in order
	}
	return Ack{From: e.From, To: e.To, Seq: next - 1}
}

// Early is the number of messages waiting for a gap to fill.
func (in *Inbox) Early() int { return in.earlyN }

// Forget drops a receiver's state (it has exited).
func (in *Inbox) Forget(to task.TID) {
	for _, m := range in.early[to] {
		in.earlyN -= len(m)
	}
	in.earlyAll -= in.earlyTo[to]
	delete(in.earlyTo, to)
	delete(in.early, to)
	release(in.expected[to])
	delete(in.expected, to)
}

// ReceiverState returns the next sequence number to's inbox expects from
// each sender, and its early arrivals, to carry in its checkpoint.
func (in *Inbox) ReceiverState(to task.TID) (map[task.TID]uint64, []Envelope) {
	var early []Envelope
	for _, m := range in.early[to] {
		for _, e := range m {
			early = append(early, e)
		}
	}
	return seqsOf(in.expected[to]), early
}

// SetReceiverState installs a restored receiver's inbox state; its early
// arrivals are accepted again (none can be in order, or they would have
// been delivered).
func (in *Inbox) SetReceiverState(to task.TID, expected map[task.TID]uint64, early []Envelope) {
	in.Forget(to)
	if len(expected) > 0 {
		in.expected[to] = countersOf(expected)
	}
	for _, e := range early {
		in.Accept(e, func(Envelope) {})
	}
}

// Describe gives an account of what is queued for to, for diagnostics:
// per sender, the range of sequence numbers unacknowledged or held, and
// when the oldest was last sent.
func (o *Outbox) Describe(to task.TID) string {
	q := o.queues[to]
	if q == nil {
		return "nothing queued"
	}
	s := fmt.Sprintf("route %v epoch %d (in transit %v), held %v, resent %v:", q.route.Host, q.route.Epoch, q.route.InTransit, q.held, q.resent)
	for _, from := range sortedKeys(q.pairs) {
		f := q.pairs[from]
		if f.head == len(f.msgs) {
			continue
		}
		first, last := f.msgs[f.head], f.msgs[len(f.msgs)-1]
		s += fmt.Sprintf(" from %v seq %d–%d (%d), oldest sent %s;", from, first.env.Seq, last.env.Seq, len(f.msgs)-f.head, first.sentAt.Format("15:04:05.000"))
	}
	return s
}
