package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// simHost is one daemon in the simulated network: the tasks it hosts and
// its reliable-delivery state.
type simHost struct {
	id     task.HostID
	out    *Outbox
	in     *Inbox
	routes *Table
	hosts  map[task.TID]bool // receivers hosted here
	// local holds the counters of pairs delivered here, as a daemon's
	// senders keep them for Local.
	local map[Pair][2]*Counter
	fast  int // messages numbered by Local
}

type simFrame struct {
	from, to task.HostID
	kind     Kind
	env      Envelope
	ack      Ack
	ref      Refusal
}

type simNet struct {
	t        *testing.T
	rng      *rand.Rand
	now      time.Time
	hosts    map[task.HostID]*simHost
	flight   []simFrame
	got      map[Pair][]uint64 // delivered seqs per pair, in delivery order
	loss     float64
	dup      float64
	epoch    map[task.TID]uint64
	resent   int
	refusals int
}

func newSimNet(t *testing.T, seed uint64, nhosts int, loss, dup float64) *simNet {
	n := &simNet{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), now: time.Unix(0, 0),
		hosts: map[task.HostID]*simHost{}, got: map[Pair][]uint64{}, loss: loss, dup: dup,
		epoch: map[task.TID]uint64{}}
	for i := 1; i <= nhosts; i++ {
		id := task.HostID(i)
		n.hosts[id] = &simHost{id: id, out: NewOutbox(), in: NewInbox(), routes: NewTable(), hosts: map[task.TID]bool{},
			local: map[Pair][2]*Counter{}}
	}
	return n
}

func (n *simNet) send(from task.HostID, to task.HostID, f simFrame) {
	f.from, f.to = from, to
	n.flight = append(n.flight, f)
}

// sendMsg is a task on host h sending to receiver to. A message to a
// receiver hosted here is numbered by Local when the pair's counters allow
// it, else by Seq and Accept, as the daemon does.
func (n *simNet) sendMsg(h *simHost, from, to task.TID) {
	r := h.routes.Lookup(to)
	if r.Host == h.id && h.hosts[to] {
		if c, ok := h.local[Pair{from, to}]; ok {
			if seq, ok := Local(c[0], c[1]); ok {
				h.fast++
				n.deliver(Envelope{From: from, To: to, Seq: seq, Tag: 1})
				return
			}
		}
		e := Envelope{From: from, To: to, Seq: h.out.Seq(from, to), Tag: 1}
		h.in.Accept(e, n.deliver) // local: straight into the mailbox
		h.local[Pair{from, to}] = [2]*Counter{h.out.Counter(from, to), h.in.Counter(to, from)}
		return
	}
	e := Envelope{From: from, To: to, Seq: h.out.Seq(from, to), Tag: 1}
	if h.out.Push(e, r, n.now) {
		n.send(h.id, r.Host, simFrame{kind: KindMsgs, env: e})
	}
}

func (n *simNet) deliver(e Envelope) {
	p := Pair{e.From, e.To}
	n.got[p] = append(n.got[p], e.Seq)
}

// step delivers (or drops, or duplicates) one frame in flight, chosen at
// random, so frames overtake each other.
func (n *simNet) step() {
	n.now = n.now.Add(time.Millisecond)
	if len(n.flight) == 0 {
		return
	}
	i := n.rng.IntN(len(n.flight))
	f := n.flight[i]
	n.flight[i] = n.flight[len(n.flight)-1]
	n.flight = n.flight[:len(n.flight)-1]
	if n.rng.Float64() < n.loss {
		return
	}
	if n.rng.Float64() < n.dup {
		n.flight = append(n.flight, f)
	}
	h := n.hosts[f.to]
	switch f.kind {
	case KindMsgs:
		if !h.hosts[f.env.To] {
			n.refusals++
			n.send(h.id, f.from, simFrame{kind: KindRefuse, ref: Refusal{To: f.env.To, Route: h.routes.Lookup(f.env.To)}})
			return
		}
		a := h.in.Accept(f.env, n.deliver)
		n.send(h.id, f.from, simFrame{kind: KindAcks, ack: a})
	case KindAcks:
		h.out.Ack(f.ack)
	case KindRefuse:
		host, envs := h.out.Refused(f.ref, f.from, n.now)
		n.resend(h, host, envs)
	}
}

func (n *simNet) resend(h *simHost, to task.HostID, envs []Envelope) {
	for _, e := range envs {
		n.resent++
		n.send(h.id, to, simFrame{kind: KindMsgs, env: e})
	}
}

// tick retransmits what is overdue.
func (n *simNet) tick(rto time.Duration) {
	for _, h := range n.hosts {
		for to, envs := range h.out.Due(n.now, rto) {
			n.resend(h, to, envs)
		}
	}
}

// move migrates receiver r to host dst: its inbox state goes along, the new
// route is known at once by the two hosts involved and reaches the others
// later (when broadcast is called).
func (n *simNet) move(r task.TID, dst task.HostID) Entry {
	var src *simHost
	for _, h := range n.hosts {
		if h.hosts[r] {
			src = h
		}
	}
	if src.id == dst {
		return Entry{}
	}
	exp, early := src.in.ReceiverState(r)
	src.in.Forget(r)
	delete(src.hosts, r)
	d := n.hosts[dst]
	d.in.SetReceiverState(r, exp, early)
	d.hosts[r] = true
	n.epoch[r]++
	e := Entry{TID: r, Route: Route{Host: dst, Epoch: n.epoch[r]}}
	src.routes.Update(r, e.Route)
	d.routes.Update(r, e.Route)
	return e
}

func (n *simNet) broadcast(e Entry) {
	for _, h := range n.hosts {
		if h.routes.Update(e.TID, e.Route) {
			host, envs := h.out.Reroute(e.TID, e.Route, n.now)
			n.resend(h, host, envs)
		}
	}
}

// TestReliableDeliveryUnderFaults sends numbered messages between tasks on
// three hosts over a network that drops, duplicates and reorders frames
// while receivers move between hosts, and checks every pair's messages are
// delivered exactly once, in order. Many seeds.
func TestReliableDeliveryUnderFaults(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	var refusals, resent, fast int
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			n := runFaultySim(t, seed)
			refusals += n.refusals
			resent += n.resent
			for _, h := range n.hosts {
				fast += h.fast
			}
		})
	}
	// The scenarios must exercise the refusal and resend paths, and local
	// numbering by Local.
	if refusals == 0 || resent == 0 || fast == 0 {
		t.Fatalf("%d refusals, %d resends and %d messages numbered by Local over all seeds", refusals, resent, fast)
	}
	t.Logf("%d seeds: %d refusals, %d resends, %d messages numbered by Local", seeds, refusals, resent, fast)
}

func runFaultySim(t *testing.T, seed uint64) *simNet {
	n := newSimNet(t, seed, 3, 0.1, 0.05)
	senders := []task.TID{task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(3, 1)}
	receivers := []task.TID{task.NewTID(1, 2), task.NewTID(2, 2), task.NewTID(3, 2)}
	for _, r := range receivers {
		n.hosts[r.Host()].hosts[r] = true
	}
	sent := map[Pair]uint64{}
	var pendingBroadcasts []Entry
	const perPair = 40
	for round := 0; round < perPair*len(senders)*len(receivers) || len(n.flight) > 0 || n.pendingAny() || len(pendingBroadcasts) > 0; round++ {
		if round > 200000 {
			t.Fatalf("no progress: %d frames in flight", len(n.flight))
		}
		switch x := n.rng.IntN(100); {
		case x < 40 && round < perPair*len(senders)*len(receivers)*2:
			s := senders[n.rng.IntN(len(senders))]
			r := receivers[n.rng.IntN(len(receivers))]
			if sent[Pair{s, r}] < perPair {
				sent[Pair{s, r}]++
				n.sendMsg(n.hosts[s.Host()], s, r)
			}
		case x < 42 && round < perPair*len(senders)*len(receivers):
			r := receivers[n.rng.IntN(len(receivers))]
			if e := n.move(r, task.HostID(1+n.rng.IntN(3))); e.TID != 0 {
				pendingBroadcasts = append(pendingBroadcasts, e)
			}
		case x < 47 && len(pendingBroadcasts) > 0:
			n.broadcast(pendingBroadcasts[0])
			pendingBroadcasts = pendingBroadcasts[1:]
		case x < 50:
			n.tick(20 * time.Millisecond)
		default:
			n.step()
		}
	}
	for p, want := range sent {
		got := n.got[p]
		if uint64(len(got)) != want {
			t.Fatalf("%v→%v: %d delivered, %d sent (seqs %v)", p.From, p.To, len(got), want, got)
		}
		for i, s := range got {
			if s != uint64(i+1) {
				t.Fatalf("%v→%v: delivery %d has seq %d: %v", p.From, p.To, i, s, got)
			}
		}
	}
	for _, h := range n.hosts {
		if h.out.Bytes() != 0 || h.in.Early() != 0 {
			t.Fatalf("host %v left %d bytes unacknowledged, %d early", h.id, h.out.Bytes(), h.in.Early())
		}
	}
	return n
}

func (n *simNet) pendingAny() bool {
	for _, h := range n.hosts {
		if h.out.Bytes() > 0 {
			return true
		}
	}
	return false
}

func TestTableEpochs(t *testing.T) {
	tb := NewTable()
	tid := task.NewTID(2, 7)
	if r := tb.Lookup(tid); r.Host != 2 || r.Epoch != 0 {
		t.Fatalf("default route %+v", r)
	}
	steps := []struct {
		r     Route
		apply bool
	}{
		{Route{Host: 3, Epoch: 1, InTransit: true}, true},
		{Route{Host: 1, Epoch: 1}, false},                  // same epoch, other host
		{Route{Host: 3, Epoch: 1}, true},                   // commit
		{Route{Host: 3, Epoch: 1}, false},                  // again
		{Route{Host: 2, Epoch: 0}, false},                  // older
		{Route{Host: 1, Epoch: 3}, true},                   // newer
		{Route{Host: 2, Epoch: 2, InTransit: true}, false}, // older
	}
	for i, s := range steps {
		v := tb.Version()
		if got := tb.Update(tid, s.r); got != s.apply {
			t.Fatalf("step %d: Update(%+v) = %v, want %v", i, s.r, got, s.apply)
		}
		if changed := tb.Version() != v; changed != s.apply {
			t.Fatalf("step %d: version changed %v, the route applied %v", i, changed, s.apply)
		}
	}
	if r := tb.Lookup(tid); r.Host != 1 || r.Epoch != 3 || tb.Len() != 1 {
		t.Fatalf("final route %+v", r)
	}
	v := tb.Version()
	tb.Forget(tid)
	if tb.Len() != 0 || tb.Version() == v {
		t.Fatalf("Forget left the entry (%d) or the version (%d)", tb.Len(), tb.Version())
	}
}

func TestOutboxHoldAndFlowAccounting(t *testing.T) {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	now := time.Unix(0, 0)
	r := Route{Host: 2}
	for i := 0; i < 3; i++ {
		e := Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1, Body: task.Payload{Data: make([]byte, 10)}}
		if !o.Push(e, r, now) {
			t.Fatal("message held without a refusal")
		}
	}
	if o.Pending(b) != 3*(envHeader+10) || o.Bytes() != o.Pending(b) {
		t.Fatalf("pending %d, total %d", o.Pending(b), o.Bytes())
	}
	// Refused with no newer route: held; new messages are held too.
	if h, envs := o.Refused(Refusal{To: b, Route: Route{Host: 2}}, 2, now); h != 0 || envs != nil {
		t.Fatalf("refusal without a newer route resent to %v: %d", h, len(envs))
	}
	if o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1}, r, now) {
		t.Fatal("message sent while held")
	}
	if got := o.Due(now.Add(time.Hour), time.Second); len(got) != 0 {
		t.Fatalf("held messages came due: %v", got)
	}
	// An in-transit route keeps holding; the committed one releases all.
	if h, _ := o.Reroute(b, Route{Host: 3, Epoch: 1, InTransit: true}, now); h != 0 {
		t.Fatal("released on an in-transit route")
	}
	h, envs := o.Reroute(b, Route{Host: 3, Epoch: 1}, now)
	if h != 3 || len(envs) != 4 {
		t.Fatalf("reroute sent %d to %v", len(envs), h)
	}
	for i, e := range envs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("resent out of order: %v", envs)
		}
	}
	if freed := o.Ack(Ack{From: a, To: b, Seq: 2}); freed != 2*(envHeader+10) {
		t.Fatalf("ack freed %d", freed)
	}
	if got := o.ForHost(3, now); len(got) != 2 || got[0].Seq != 3 {
		t.Fatalf("ForHost = %v", got)
	}
	o.Ack(Ack{From: a, To: b, Seq: 4})
	if o.Bytes() != 0 {
		t.Fatalf("%d bytes left after acking all", o.Bytes())
	}
	if st := o.SenderState(a); st[b] != 4 {
		t.Fatalf("sender state %v", st)
	}
	o.ForgetSender(a)
	if o.Seq(a, b) != 1 {
		t.Fatal("ForgetSender kept the numbering")
	}
}

// TestOutboxReusesEmptiedQueues: queues and FIFOs emptied by
// acknowledgements are reused for other receivers and senders and start
// clean: the new route, nothing held, only the new messages pending.
func TestOutboxReusesEmptiedQueues(t *testing.T) {
	o := NewOutbox()
	now := time.Unix(0, 0)
	a, b, c := task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(3, 1)
	for i := range 3 {
		e := Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: make([]byte, 5)}}
		o.Push(e, Route{Host: 2, Epoch: 7}, now)
		if i == 0 {
			// Held, then released: the reused queue must not stay held.
			o.Refused(Refusal{To: b, Route: Route{Host: 2, Epoch: 7}}, 2, now)
			o.Reroute(b, Route{Host: 2, Epoch: 8}, now)
		}
	}
	o.Ack(Ack{From: a, To: b, Seq: 3})
	if o.Bytes() != 0 || o.Pending(b) != 0 {
		t.Fatalf("%d bytes left", o.Bytes())
	}
	if _, _, ok := o.Route(b); ok {
		t.Fatal("an acknowledged receiver kept its queue")
	}
	e := Envelope{From: c, To: a, Seq: o.Seq(c, a), Body: task.Payload{Data: make([]byte, 9)}}
	if !o.Push(e, Route{Host: 1, Epoch: 1}, now) {
		t.Fatal("a message to a new receiver was held")
	}
	if r, held, ok := o.Route(a); !ok || held || r != (Route{Host: 1, Epoch: 1}) {
		t.Fatalf("route %v held %v ok %v", r, held, ok)
	}
	if o.Pending(a) != envHeader+9 || o.PendingFrom(a) != 0 || o.PendingFrom(c) != 1 {
		t.Fatalf("pending %d, from a %d, from c %d", o.Pending(a), o.PendingFrom(a), o.PendingFrom(c))
	}
	if got := o.ForHost(1, now); len(got) != 1 || got[0].From != c || got[0].Seq != 1 {
		t.Fatalf("ForHost = %v", got)
	}
}

// TestOutboxDropSender: a sender's messages go, held or unacknowledged, to
// every receiver, with its numbering; other senders' stay, and a held
// queue keeps holding.
func TestOutboxDropSender(t *testing.T) {
	o := NewOutbox()
	now := time.Unix(0, 0)
	a, b, c := task.NewTID(1, 1), task.NewTID(1, 2), task.NewTID(2, 1)
	x, y := task.NewTID(3, 1), task.NewTID(3, 2)
	for _, p := range [][2]task.TID{{a, x}, {a, x}, {a, y}, {b, x}, {c, y}} {
		o.Push(Envelope{From: p[0], To: p[1], Seq: o.Seq(p[0], p[1]), Body: task.Payload{Data: []byte("ab")}}, Route{Host: 3, Epoch: 1}, now)
	}
	o.Refused(Refusal{To: y, Route: Route{Host: 3, Epoch: 1}}, 3, now) // y moves away: held
	among := func(ts ...task.TID) func(task.TID) bool {
		return func(t task.TID) bool { return slices.Contains(ts, t) }
	}
	if n := o.PendingFromAny(among(a, c)); n != 4 {
		t.Fatalf("%d messages from a and c, held or unacknowledged; want 4", n)
	}
	before := o.Bytes()
	if n := o.DropSender(a); n != 3 {
		t.Fatalf("dropped %d of a's messages, want 3", n)
	}
	if o.PendingFrom(a) != 0 || o.PendingFrom(b) != 1 || o.PendingFrom(c) != 1 {
		t.Fatalf("left a %d, b %d, c %d", o.PendingFrom(a), o.PendingFrom(b), o.PendingFrom(c))
	}
	if n := o.PendingFromAny(among(a, b, c)); n != 2 {
		t.Fatalf("%d messages left from a, b and c; want 2", n)
	}
	if got, want := o.Bytes(), before-3*EnvelopeSize(&Envelope{Body: task.Payload{Data: []byte("ab")}}); got != want {
		t.Fatalf("%d bytes pending, want %d", got, want)
	}
	if _, held, ok := o.Route(y); !ok || !held {
		t.Fatalf("y's queue: held %v, there %v", held, ok)
	}
	if s := o.Seq(a, x); s != 1 {
		t.Fatalf("a's numbering restarts at %d, want 1 (its state is gone)", s)
	}
	o.DropSender(b)
	o.DropSender(c)
	if _, _, ok := o.Route(x); ok {
		t.Fatal("an emptied queue that was not held is kept")
	}
}

func ExampleOutbox() {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	e := Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1}
	fmt.Println(o.Push(e, Route{Host: 2}, time.Unix(0, 0)))
	o.Ack(Ack{From: a, To: b, Seq: 1})
	fmt.Println(o.Bytes())
	// Output:
	// true
	// 0
}

// TestRefusedCommitReleasesHeld: messages held for a move (an in-transit
// refusal) go out when a refusal names the committed route of that same
// move — a sender that learns the commit that way may never see it in a
// broadcast, which finds the route already known.
func TestRefusedCommitReleasesHeld(t *testing.T) {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	now := time.Unix(0, 0)
	o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1}, Route{Host: 2}, now)
	if h, envs := o.Refused(Refusal{To: b, Route: Route{Host: 3, Epoch: 5, InTransit: true}}, 2, now); h != 0 || len(envs) != 0 {
		t.Fatalf("an in-transit refusal resent %d messages to %v", len(envs), h)
	}
	h, envs := o.Refused(Refusal{To: b, Route: Route{Host: 3, Epoch: 5}}, 2, now)
	if h != 3 || len(envs) != 1 {
		t.Fatalf("the committed route released %d messages to %v, want 1 to h3", len(envs), h)
	}
}

// TestStaleRefusalResendsOncePerRoute: a host that keeps refusing because it
// knows less than the sender (a task whose resume is late) gets the queue
// once per route; later stale refusals leave the messages to Due, paced by
// the RTO. A newer route allows one more immediate resend.
func TestStaleRefusalResendsOncePerRoute(t *testing.T) {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	now := time.Unix(0, 0)
	for range 3 {
		o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1}, Route{Host: 2, Epoch: 5}, now)
	}
	stale := Refusal{To: b, Route: Route{Host: 3, Epoch: 4}}
	if h, envs := o.Refused(stale, 2, now); h != 2 || len(envs) != 3 {
		t.Fatalf("the first stale refusal resent %d messages to %v, want 3 to h2", len(envs), h)
	}
	for i := range 3 {
		if h, envs := o.Refused(stale, 2, now); h != 0 || len(envs) != 0 {
			t.Fatalf("stale refusal %d resent %d messages to %v at once", i+2, len(envs), h)
		}
	}
	if got := o.Due(now.Add(time.Second), time.Second); len(got[2]) != 3 {
		t.Fatalf("Due after the RTO = %v, want the 3 messages for h2", got)
	}
	if h, envs := o.Reroute(b, Route{Host: 2, Epoch: 6}, now); h != 2 || len(envs) != 3 {
		t.Fatalf("reroute resent %d to %v", len(envs), h)
	}
	if h, envs := o.Refused(Refusal{To: b, Route: Route{Host: 2, Epoch: 5}}, 2, now); h != 2 || len(envs) != 3 {
		t.Fatalf("the first stale refusal on the new route resent %d messages to %v, want 3 to h2", len(envs), h)
	}
}

// TestLocalCounters checks Local against Seq and Accept: it numbers a
// pair's messages as they do, refuses while one of the pair's messages is
// early or missing, and its counters are gone once their box lets the
// task's state go, while the checkpointed state stays what Seq and Accept
// alone would have made.
func TestLocalCounters(t *testing.T) {
	a, b := task.NewTID(1, 1), task.NewTID(1, 2)
	out, in := NewOutbox(), NewInbox()
	co, ci := out.Counter(a, b), in.Counter(b, a)
	if s := out.SenderState(a); s != nil {
		t.Fatalf("an unused counter shows in the sender's state: %v", s)
	}
	if s, _ := in.ReceiverState(b); s != nil {
		t.Fatalf("an unused counter shows in the receiver's state: %v", s)
	}
	for want := uint64(1); want <= 3; want++ {
		seq, ok := Local(co, ci)
		if !ok || seq != want {
			t.Fatalf("Local = %d, %v; want %d, true", seq, ok, want)
		}
	}
	// Seq and Accept take over where Local stopped, and the reverse.
	e := Envelope{From: a, To: b, Seq: out.Seq(a, b)}
	var got []uint64
	deliver := func(e Envelope) { got = append(got, e.Seq) }
	if ack := in.Accept(e, deliver); e.Seq != 4 || ack.Seq != 4 {
		t.Fatalf("Seq after Local: %d acknowledged %d, want 4", e.Seq, ack.Seq)
	}
	if seq, ok := Local(co, ci); !ok || seq != 5 {
		t.Fatalf("Local after Accept = %d, %v; want 5, true", seq, ok)
	}
	// A number taken without delivery (a message on its way) stops Local
	// until it is delivered; an early arrival too.
	e6 := Envelope{From: a, To: b, Seq: out.Seq(a, b)}
	if _, ok := Local(co, ci); ok {
		t.Fatal("Local numbered past a message not yet delivered")
	}
	e7 := Envelope{From: a, To: b, Seq: out.Seq(a, b)}
	in.Accept(e7, deliver)
	if _, ok := Local(co, ci); ok {
		t.Fatal("Local numbered with an early arrival waiting")
	}
	in.Accept(e6, deliver)
	if seq, ok := Local(co, ci); !ok || seq != 8 {
		t.Fatalf("Local once the gap filled = %d, %v; want 8, true", seq, ok)
	}
	if want := []uint64{4, 6, 7}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Accept delivered %v, want %v", got, want)
	}
	if s := out.SenderState(a); s[b] != 8 {
		t.Fatalf("sender state %v, want %v:8", s, b)
	}
	if s, early := in.ReceiverState(b); s[a] != 9 || len(early) != 0 {
		t.Fatalf("receiver state %v (%d early), want %v:9", s, len(early), a)
	}

	// Every way a box lets a task's state go marks its counters gone.
	for _, c := range []struct {
		name string
		drop func(o *Outbox, i *Inbox)
		out  bool // the outbox counter goes, else the inbox's
	}{
		{"ForgetSender", func(o *Outbox, _ *Inbox) { o.ForgetSender(a) }, true},
		{"DropSender", func(o *Outbox, _ *Inbox) { o.DropSender(a) }, true},
		{"SetSenderState", func(o *Outbox, _ *Inbox) { o.SetSenderState(a, map[task.TID]uint64{b: 1}) }, true},
		{"Forget", func(_ *Outbox, i *Inbox) { i.Forget(b) }, false},
		{"SetReceiverState", func(_ *Outbox, i *Inbox) { i.SetReceiverState(b, nil, nil) }, false},
	} {
		o, i := NewOutbox(), NewInbox()
		co, ci := o.Counter(a, b), i.Counter(b, a)
		if _, ok := Local(co, ci); !ok {
			t.Fatalf("%s: Local refused fresh counters", c.name)
		}
		c.drop(o, i)
		if co.Gone() != c.out || ci.Gone() == c.out {
			t.Fatalf("%s: outbox counter gone %v, inbox counter gone %v", c.name, co.Gone(), ci.Gone())
		}
		if _, ok := Local(co, ci); ok {
			t.Fatalf("%s: Local numbered with a counter gone", c.name)
		}
	}
}

// TestExitedRefusalOnlyFromTheRoute: "exited" (a refusal naming no route)
// drops the messages queued for the task only when it comes from the host
// they are routed to. From another host — one that held an incarnation of
// the task before it was restored elsewhere, and answers late — it would
// lose what is queued for the task where it lives now.
func TestExitedRefusalOnlyFromTheRoute(t *testing.T) {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(5, 3)
	now := time.Unix(0, 0)
	o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Tag: 1}, Route{Host: 2, Epoch: 14}, now)
	if h, envs := o.Refused(Refusal{To: b}, 5, now); h != 0 || len(envs) != 0 {
		t.Fatalf("an exited refusal from h5 resent %d messages to %v", len(envs), h)
	}
	if got := o.Pending(b); got == 0 {
		t.Fatal("an exited refusal from a host the messages are not routed to dropped them")
	}
	if got := o.Due(now.Add(time.Second), time.Second); len(got[2]) != 1 {
		t.Fatalf("Due after the RTO = %v, want the message for h2", got)
	}
	o.Refused(Refusal{To: b}, 2, now)
	if got := o.Pending(b); got != 0 {
		t.Fatalf("an exited refusal from the route's host left %d bytes queued", got)
	}
}

// TestDueBacksOff: a message left unacknowledged is resent after the RTO,
// then after twice, four and eight times as long, and no faster after
// that; sent again on a new route, it starts again at the RTO.
func TestDueBacksOff(t *testing.T) {
	o := NewOutbox()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	now := time.Unix(1000, 0)
	const rto = time.Second
	o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: make([]byte, 1<<20)}}, Route{Host: 2}, now)
	var resends []time.Duration
	for s := 1; s <= 60; s++ {
		at := now.Add(time.Duration(s) * rto)
		if got := o.Due(at, rto); len(got[2]) == 1 {
			resends = append(resends, at.Sub(now))
		}
	}
	want := []time.Duration{1 * rto, 3 * rto, 7 * rto, 15 * rto, 23 * rto, 31 * rto, 39 * rto, 47 * rto, 55 * rto}
	if !slices.Equal(resends, want) {
		t.Fatalf("resent after %v, want %v", resends, want)
	}
	later := now.Add(60 * rto)
	if h, envs := o.Reroute(b, Route{Host: 3, Epoch: 1}, later); h != 3 || len(envs) != 1 {
		t.Fatalf("reroute: %d to %v", len(envs), h)
	}
	if got := o.Due(later.Add(rto), rto); len(got[3]) != 1 {
		t.Fatalf("after a reroute, Due at the RTO = %v, want the message", got)
	}
}

// TestDuePacedBySize: a large unacknowledged message starts its backoff
// further along, by its size (PaceBytes), so it is not resent faster than
// a receiver that turns it away could take it; the longest wait stays
// 2^MaxBackoff·rto.
func TestDuePacedBySize(t *testing.T) {
	const rto = time.Second
	for _, c := range []struct {
		size int
		want []time.Duration
	}{
		{PaceBytes, []time.Duration{1 * rto, 3 * rto, 7 * rto, 15 * rto, 23 * rto}},
		{2 * PaceBytes, []time.Duration{2 * rto, 6 * rto, 14 * rto, 22 * rto}},
		{4 * PaceBytes, []time.Duration{4 * rto, 12 * rto, 20 * rto}},
		{60 << 20, []time.Duration{8 * rto, 16 * rto, 24 * rto}},
	} {
		o := NewOutbox()
		a, b := task.NewTID(1, 1), task.NewTID(2, 1)
		now := time.Unix(1000, 0)
		o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: make([]byte, c.size)}}, Route{Host: 2}, now)
		var resends []time.Duration
		for s := 1; s <= 25; s++ {
			at := now.Add(time.Duration(s) * rto)
			if got := o.Due(at, rto); len(got[2]) == 1 {
				resends = append(resends, at.Sub(now))
			}
		}
		if !slices.Equal(resends, c.want) {
			t.Errorf("a message of %d bytes resent after %v, want %v", c.size, resends, c.want)
		}
	}
}

// TestInboxAdmitByBytes: a receiver's mailbox and its daemon's mailboxes
// are bounded by bytes: a message in order that does not fit in the
// mailboxes' share (3/4) is turned away unacknowledged, and the pair's
// later messages with it, until it is resent and fits; a message larger
// than a bound is taken when what it does not fit under is empty; early
// arrivals have their own share (1/4), so they never hold back the
// message they wait for; duplicates are always taken; delivery stays
// exactly-once and in order.
func TestInboxAdmitByBytes(t *testing.T) {
	in := NewInbox()
	a, c, b := task.NewTID(1, 1), task.NewTID(3, 1), task.NewTID(2, 1)
	lim := RecvLimits{High: 1000, Budget: 2000} // mailboxes: 750 and 1500; early: 250 and 500
	env := func(from task.TID, seq uint64, size int) Envelope {
		return Envelope{From: from, To: b, Seq: seq, Body: task.Payload{Data: make([]byte, size-MsgOverhead)}}
	}
	msg := func(seq uint64, size int) Envelope { return env(a, seq, size) }
	var got []uint64
	deliver := func(e Envelope) { got = append(got, e.Seq) }

	if !in.Admit(msg(1, 400), 0, 0, lim) {
		t.Fatal("a message that fits was turned away")
	}
	in.Accept(msg(1, 400), deliver)
	// Over the mailbox's share: turned away, and the pair's next message
	// though it would fit, so that none waits as an early arrival.
	if in.Admit(msg(2, 400), 400, 400, lim) {
		t.Fatal("a message over the mailbox's bound was taken")
	}
	if in.Admit(msg(3, 64), 400, 400, lim) {
		t.Fatal("a message after one turned away was taken")
	}
	// Another pair to the same receiver is judged on its own.
	if !in.Admit(env(c, 1, 100), 400, 400, lim) {
		t.Fatal("another pair's message that fits was turned away")
	}
	// A duplicate is taken (and dropped by Accept).
	if !in.Admit(msg(1, 400), 700, 700, lim) {
		t.Fatal("a duplicate was turned away")
	}
	// The receiver took its messages: resent, 2 fits, then 3.
	if !in.Admit(msg(2, 400), 0, 0, lim) || !in.Admit(msg(3, 64), 400, 400, lim) {
		t.Fatal("resent messages that fit were turned away")
	}
	in.Accept(msg(2, 400), deliver)
	in.Accept(msg(3, 64), deliver)
	// Over the daemon's share though the mailbox has room.
	if in.Admit(msg(4, 200), 0, 1400, lim) {
		t.Fatal("a message over the daemon's budget was taken")
	}
	// Larger than the mailbox's share: taken when the mailbox is empty
	// and the daemon's mailboxes have room, not before.
	if in.Admit(msg(4, 900), 10, 10, lim) {
		t.Fatal("a message larger than the bound was taken into a mailbox that holds some")
	}
	if !in.Admit(msg(4, 900), 0, 600, lim) {
		t.Fatal("a message larger than the mailbox's bound was turned away from an empty mailbox")
	}
	in.Accept(msg(4, 900), deliver)
	// Larger than the budget: taken when all mailboxes are empty.
	big := RecvLimits{High: 10000, Budget: 2000}
	if in.Admit(msg(5, 3000), 0, 1, big) {
		t.Fatal("a message larger than the budget was taken while mailboxes hold some")
	}
	if !in.Admit(msg(5, 3000), 0, 0, big) {
		t.Fatal("a message larger than the budget was turned away with every mailbox empty")
	}
	in.Accept(msg(5, 3000), deliver)
	// A pair's mark clears once its turned-away message comes in order by
	// Accept alone.
	if in.Admit(msg(6, 500), 500, 500, lim) {
		t.Fatal("over the bound: taken")
	}
	in.Accept(msg(6, 500), deliver) // e.g. a local resend that bypasses Admit
	if !in.Admit(msg(7, 64), 0, 0, lim) {
		t.Fatal("the pair's mark outlived the message it was for")
	}
	in.Accept(msg(7, 64), deliver)
	if !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7}) || in.Early() != 0 {
		t.Fatalf("delivered %v with %d early, want 1..7 once each, in order, none early", got, in.Early())
	}

	// Early arrivals: a's 9 waits for its 8 within the early share; a's
	// 10 would pass it and is turned away; c's 3 (c expects 1) likewise.
	if !in.Admit(msg(9, 200), 0, 0, lim) {
		t.Fatal("an early arrival that fits was turned away")
	}
	in.Accept(msg(9, 200), deliver)
	if in.Admit(msg(10, 100), 0, 0, lim) {
		t.Fatal("an early arrival over the receiver's early share was taken")
	}
	if in.Admit(env(c, 3, 100), 0, 0, lim) {
		t.Fatal("another pair's early arrival over the receiver's early share was taken")
	}
	// The message 9 waits for is taken whatever the early arrivals hold,
	// when the mailboxes have room, and brings 9 with it.
	if in.Admit(msg(8, 700), 100, 100, lim) {
		t.Fatal("a message in order over the mailbox's share was taken")
	}
	if !in.Admit(msg(8, 700), 0, 0, lim) {
		t.Fatal("the gap's message was turned away with the mailboxes empty")
	}
	got = nil
	in.Accept(msg(8, 700), deliver)
	if !slices.Equal(got, []uint64{8, 9}) || in.Early() != 0 {
		t.Fatalf("delivered %v with %d early, want 8, 9", got, in.Early())
	}
	// Nothing is early now: the early share is free again.
	if !in.Admit(msg(11, 240), 0, 0, lim) {
		t.Fatal("delivered early arrivals still counted")
	}
}

// TestDueResendsAPairFromItsOldest: Due resends a pair's messages from the
// oldest on, up to PaceBytes a round (at least one message): a receiver
// that turned the oldest away would turn the later ones away too. Once
// the oldest is acknowledged, the next is due at once; small messages go
// together.
func TestDueResendsAPairFromItsOldest(t *testing.T) {
	o := NewOutbox()
	a, c, b := task.NewTID(1, 1), task.NewTID(1, 2), task.NewTID(2, 1)
	now := time.Unix(1000, 0)
	const rto = time.Second
	for range 4 {
		o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: make([]byte, 3<<20)}}, Route{Host: 2}, now)
	}
	for range 5 {
		o.Push(Envelope{From: c, To: b, Seq: o.Seq(c, b), Body: task.Payload{Data: make([]byte, 1<<10)}}, Route{Host: 2}, now)
	}
	seqs := func(envs []Envelope, from task.TID) []uint64 {
		var s []uint64
		for _, e := range envs {
			if e.From == from {
				s = append(s, e.Seq)
			}
		}
		return s
	}
	got := o.Due(now.Add(rto), rto)[2]
	if s := seqs(got, a); !slices.Equal(s, []uint64{1}) {
		t.Fatalf("large messages resent %v, want the oldest alone", s)
	}
	if s := seqs(got, c); !slices.Equal(s, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("small messages resent %v, want all five", s)
	}
	o.Ack(Ack{From: a, To: b, Seq: 1})
	o.Ack(Ack{From: c, To: b, Seq: 5})
	if s := seqs(o.Due(now.Add(rto), rto)[2], a); !slices.Equal(s, []uint64{2}) {
		t.Fatalf("after the oldest's acknowledgement, resent %v, want the next at once", s)
	}
}

// TestPendingHost: the outbox counts what is unacknowledged or held by the
// host the receivers are routed to, following reroutes, acknowledgements
// and drops, and it always adds up to Bytes.
func TestPendingHost(t *testing.T) {
	o := NewOutbox()
	a, b, c, d := task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(2, 2), task.NewTID(3, 1)
	now := time.Unix(1000, 0)
	push := func(to task.TID, h task.HostID, size int) int {
		e := Envelope{From: a, To: to, Seq: o.Seq(a, to), Body: task.Payload{Data: make([]byte, size)}}
		o.Push(e, Route{Host: h}, now)
		return EnvelopeSize(&e)
	}
	check := func(what string, want map[task.HostID]int) {
		t.Helper()
		sum := 0
		for h, n := range want {
			if got := o.PendingHost(h); got != n {
				t.Fatalf("%s: host %v has %d bytes pending, want %d", what, h, got, n)
			}
			sum += n
		}
		if o.Bytes() != sum {
			t.Fatalf("%s: %d bytes in all, the hosts' add up to %d", what, o.Bytes(), sum)
		}
	}
	b1, b2, c1, d1 := push(b, 2, 100), push(b, 2, 200), push(c, 2, 300), push(d, 3, 400)
	check("pushed", map[task.HostID]int{2: b1 + b2 + c1, 3: d1})
	o.Ack(Ack{From: a, To: b, Seq: 1})
	check("acknowledged", map[task.HostID]int{2: b2 + c1, 3: d1})
	o.Reroute(c, Route{Host: 3, Epoch: 1}, now) // c moved to host 3
	check("rerouted", map[task.HostID]int{2: b2, 3: c1 + d1})
	o.DropSender(a)
	check("sender dropped", map[task.HostID]int{2: 0, 3: 0})
	push(b, 2, 10)
	o.DropHost(2)
	push(d, 3, 10)
	o.DropReceiver(d)
	check("dropped", map[task.HostID]int{2: 0, 3: 0})
}

// BenchmarkConversation is one message of a conversation between two
// daemons' tasks, both sides' per-message work: the sender's window checks
// (Pending, PendingHost), Push, the receiver's Admit and Accept, and the
// sender's Ack.
func BenchmarkConversation(b *testing.B) {
	o, in := NewOutbox(), NewInbox()
	r := Route{Host: 2, Epoch: 1}
	now := time.Unix(0, 0)
	body := task.Payload{Data: make([]byte, 64)}
	lim := RecvLimits{High: 1 << 30, Budget: 1 << 30}
	const from, to = task.TID(1<<32 | 1), task.TID(2<<32 | 1)
	b.ReportAllocs()
	for b.Loop() {
		if o.Pending(to) >= 1<<20 || o.PendingHost(r.Host) >= 1<<20 {
			b.Fatal("window full")
		}
		e := Envelope{From: from, To: to, Seq: o.Seq(from, to), Tag: 1, Body: body}
		o.Push(e, r, now)
		if !in.Admit(e, 0, 0, lim) {
			b.Fatal("turned away")
		}
		a := in.Accept(e, func(Envelope) {})
		o.Ack(a)
	}
}

// TestOutboxOnFree: every path by which bytes stop counting towards a
// receiver or a host calls OnFree's function (a sender waiting for room
// in its window is woken whichever path freed it), and sending or an
// acknowledgement that frees nothing does not.
func TestOutboxOnFree(t *testing.T) {
	a, b, c := task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(2, 2)
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		op    func(o *Outbox)
		frees bool
	}{
		{"Ack", func(o *Outbox) { o.Ack(Ack{From: a, To: b, Seq: 1}) }, true},
		{"Ack of nothing new", func(o *Outbox) { o.Ack(Ack{From: a, To: b, Seq: 0}) }, false},
		{"Push", func(o *Outbox) {
			o.Push(Envelope{From: a, To: c, Seq: o.Seq(a, c)}, Route{Host: 2}, now)
		}, false},
		{"Reroute to another host", func(o *Outbox) { o.Reroute(b, Route{Host: 3, Epoch: 1}, now) }, true},
		{"Refused: exited", func(o *Outbox) { o.Refused(Refusal{To: b}, 2, now) }, true},
		{"DropReceiver", func(o *Outbox) { o.DropReceiver(b) }, true},
		{"DropSender", func(o *Outbox) { o.DropSender(a) }, true},
		{"DropHost", func(o *Outbox) { o.DropHost(2) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOutbox()
			o.Push(Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: make([]byte, 100)}}, Route{Host: 2}, now)
			calls := 0
			o.OnFree(func() { calls++ })
			before := o.PendingHost(2)
			tc.op(o)
			if freed := o.PendingHost(2) < before; freed != tc.frees {
				t.Fatalf("host 2's pending bytes went from %d to %d: the case does not test what it says", before, o.PendingHost(2))
			}
			if got := calls > 0; got != tc.frees {
				t.Fatalf("OnFree called %d times, want called: %v", calls, tc.frees)
			}
		})
	}
}
