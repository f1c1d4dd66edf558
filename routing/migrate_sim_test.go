package routing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// This file checks the migration protocol of DESIGN §5 as the daemons carry
// it out, on a simulated network that loses, duplicates and reorders
// frames, with broadcasts that reach each daemon after its own delay:
//
//  1. the destination B prepares: messages for T are buffered there,
//     unacknowledged, until T is restored;
//  2. the origin A suspends T at a safe point: T's state, its receiving
//     sequence state (from A's inbox) and its sending sequence state (from
//     A's outbox) leave with it, and A refuses further messages for T with
//     the route (B, e+1) marked in transit, so senders hold them;
//  3. the master broadcasts (T, B, e+1): daemons resend what they hold to B;
//  4. B restores T, then takes its buffered messages through its inbox in
//     sequence order and acknowledges them — or the move aborts: the
//     master broadcasts (T, A, e+2), A restores T from what it kept, and B
//     refuses what it buffered, naming the new route.
//
// The invariant, checked on every seed: every message sent is delivered
// exactly once, in per-pair order.

type presence uint8

const (
	absent presence = iota
	hosted
	leaving  // suspended here, moving away
	arriving // prepared here, not yet restored
)

type buffered struct {
	from task.HostID // the daemon to acknowledge to
	env  Envelope
}

type mHost struct {
	id     task.HostID
	out    *Outbox
	in     *Inbox
	routes *Table
	tasks  map[task.TID]presence
	dest   map[task.TID]Route      // leaving: where to
	buf    map[task.TID][]buffered // arriving: held messages
	kept   map[task.TID]moveState  // leaving: what A keeps for an abort
}

type moveState struct {
	inSeq  map[task.TID]uint64
	early  []Envelope
	outSeq map[task.TID]uint64
}

type mFrame struct {
	from, to task.HostID
	kind     Kind
	env      Envelope
	ack      Ack
	ref      Refusal
	route    *Entry // a broadcast
}

type move struct {
	tid      task.TID
	from, to task.HostID
	epoch    uint64
	stage    int // 1 prepared+suspended, 2 broadcast, done when removed
	state    moveState
}

type mNet struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	hosts   map[task.HostID]*mHost
	flight  []mFrame
	master  *Table
	moves   map[task.TID]*move
	got     map[Pair][]uint64
	sent    map[Pair]uint64
	aborted int
	done    int
}

func newMNet(t *testing.T, seed uint64) *mNet {
	n := &mNet{t: t, rng: rand.New(rand.NewPCG(seed, 0xd5e)), now: time.Unix(0, 0),
		hosts: map[task.HostID]*mHost{}, master: NewTable(), moves: map[task.TID]*move{},
		got: map[Pair][]uint64{}, sent: map[Pair]uint64{}}
	for i := 1; i <= 3; i++ {
		id := task.HostID(i)
		n.hosts[id] = &mHost{id: id, out: NewOutbox(), in: NewInbox(), routes: NewTable(),
			tasks: map[task.TID]presence{}, dest: map[task.TID]Route{}, buf: map[task.TID][]buffered{},
			kept: map[task.TID]moveState{}}
	}
	return n
}

func (n *mNet) frame(f mFrame) { n.flight = append(n.flight, f) }

func (n *mNet) hostOf(tid task.TID) *mHost {
	for _, h := range n.hosts {
		if h.tasks[tid] == hosted {
			return h
		}
	}
	return nil
}

func (n *mNet) deliver(e Envelope) {
	p := Pair{e.From, e.To}
	n.got[p] = append(n.got[p], e.Seq)
}

// send is task s, hosted on h, sending to t.
func (n *mNet) send(h *mHost, s, t task.TID) {
	e := Envelope{From: s, To: t, Seq: h.out.Seq(s, t), Tag: 1}
	n.sent[Pair{s, t}]++
	switch h.tasks[t] {
	case hosted:
		h.in.Accept(e, n.deliver)
		return
	case leaving:
		if r := h.dest[t]; h.routes.Lookup(t).Epoch < r.Epoch {
			r.InTransit = true
			h.out.Push(e, r, n.now) // held until the broadcast
			return
		}
		// The broadcast has come: send along the new route.
	case arriving:
		if r := h.routes.Lookup(t); r.Host == h.id {
			h.out.Push(e, Route{Host: h.id, Epoch: r.Epoch, InTransit: true}, n.now)
			return
		}
		// Not announced yet: the task still runs at its origin.
	}
	r := h.routes.Lookup(t)
	if r.Host == h.id {
		n.t.Fatalf("%v routes %v to itself, where it is not", h.id, t)
	}
	if h.out.Push(e, r, n.now) {
		n.frame(mFrame{from: h.id, to: r.Host, kind: KindMsgs, env: e})
	}
}

// transmit sends envelopes from h to host to, or takes them in locally.
func (n *mNet) transmit(h *mHost, to task.HostID, envs []Envelope) {
	for _, e := range envs {
		if to == h.id {
			n.arrive(h, h.id, e)
			continue
		}
		n.frame(mFrame{from: h.id, to: to, kind: KindMsgs, env: e})
	}
}

// arrive is message e reaching host h from host from.
func (n *mNet) arrive(h *mHost, from task.HostID, e Envelope) {
	ack := func(a Ack) {
		if from == h.id {
			h.out.Ack(a)
		} else {
			n.frame(mFrame{from: h.id, to: from, kind: KindAcks, ack: a})
		}
	}
	refuse := func(r Route) {
		if from == h.id {
			host, envs := h.out.Refused(Refusal{To: e.To, Route: r}, h.id, n.now)
			n.transmit(h, host, envs)
			return
		}
		n.frame(mFrame{from: h.id, to: from, kind: KindRefuse, ref: Refusal{To: e.To, Route: r}})
	}
	switch h.tasks[e.To] {
	case hosted:
		ack(h.in.Accept(e, n.deliver))
	case leaving:
		r := h.dest[e.To]
		r.InTransit = true
		refuse(r)
	case arriving:
		h.buf[e.To] = append(h.buf[e.To], buffered{from: from, env: e})
	default:
		refuse(h.routes.Lookup(e.To))
	}
}

func (n *mNet) applyRoute(h *mHost, en Entry) {
	if !h.routes.Update(en.TID, en.Route) {
		return
	}
	if h.tasks[en.TID] == arriving && en.Route.Host == h.id {
		return // released when the task is restored here
	}
	host, envs := h.out.Reroute(en.TID, en.Route, n.now)
	n.transmit(h, host, envs)
}

func (n *mNet) step() {
	n.now = n.now.Add(time.Millisecond)
	if len(n.flight) == 0 {
		return
	}
	i := n.rng.IntN(len(n.flight))
	f := n.flight[i]
	n.flight[i] = n.flight[len(n.flight)-1]
	n.flight = n.flight[:len(n.flight)-1]
	if f.route == nil { // broadcasts go over reliable streams; the rest may be lost or repeated
		if n.rng.Float64() < 0.08 {
			return
		}
		if n.rng.Float64() < 0.04 {
			n.flight = append(n.flight, f)
		}
	}
	h := n.hosts[f.to]
	switch {
	case f.route != nil:
		n.applyRoute(h, *f.route)
	case f.kind == KindMsgs:
		n.arrive(h, f.from, f.env)
	case f.kind == KindAcks:
		h.out.Ack(f.ack)
	case f.kind == KindRefuse:
		host, envs := h.out.Refused(f.ref, f.from, n.now)
		n.transmit(h, host, envs)
	}
}

func (n *mNet) tick() {
	for _, h := range n.hosts {
		for to, envs := range h.out.Due(n.now, 30*time.Millisecond) {
			n.transmit(h, to, envs)
		}
	}
}

func (n *mNet) broadcast(en Entry) {
	n.master.Update(en.TID, en.Route)
	for id := range n.hosts {
		e := en
		n.frame(mFrame{from: 0, to: id, route: &e})
	}
}

// begin prepares B and suspends T at A (steps 1 and 2).
func (n *mNet) begin(tid task.TID, to task.HostID) {
	a := n.hostOf(tid)
	if a == nil || a.id == to || n.moves[tid] != nil {
		return
	}
	b := n.hosts[to]
	e := n.master.Lookup(tid).Epoch + 1
	b.tasks[tid] = arriving
	inSeq, early := a.in.ReceiverState(tid)
	st := moveState{inSeq: inSeq, early: early, outSeq: a.out.SenderState(tid)}
	a.in.Forget(tid)
	a.out.ForgetSender(tid)
	a.tasks[tid] = leaving
	a.dest[tid] = Route{Host: to, Epoch: e}
	a.kept[tid] = st
	n.moves[tid] = &move{tid: tid, from: a.id, to: to, epoch: e, stage: 1, state: st}
}

// restore installs a moving task's state on host h and releases what was
// held for it there.
func (n *mNet) restore(h *mHost, tid task.TID, st moveState) {
	h.in.SetReceiverState(tid, st.inSeq, st.early)
	h.out.SetSenderState(tid, st.outSeq)
	h.tasks[tid] = hosted
	bufs := h.buf[tid]
	delete(h.buf, tid)
	for _, b := range bufs {
		n.arrive(h, b.from, b.env)
	}
	r := h.routes.Lookup(tid)
	if r.Host == h.id {
		host, envs := h.out.Reroute(tid, r, n.now)
		n.transmit(h, host, envs)
	}
}

// advance moves a migration on: broadcast, then commit or abort.
func (n *mNet) advance(m *move) {
	a, b := n.hosts[m.from], n.hosts[m.to]
	if m.stage == 1 {
		if n.rng.IntN(6) == 0 { // abort before the broadcast (e.g. a transfer failure)
			n.abort(m)
			return
		}
		// The origin hears the new route before it is asked to transfer the
		// task (both come from the master, in order); the others later.
		en := Entry{TID: m.tid, Route: Route{Host: m.to, Epoch: m.epoch}}
		n.applyRoute(a, en)
		n.broadcast(en)
		m.stage = 2
		return
	}
	if n.rng.IntN(5) == 0 { // abort after the broadcast (the destination failed to restore)
		n.abort(m)
		return
	}
	n.restore(b, m.tid, m.state)
	a.tasks[m.tid] = absent
	delete(a.dest, m.tid)
	delete(a.kept, m.tid)
	delete(n.moves, m.tid)
	n.done++
}

func (n *mNet) abort(m *move) {
	a, b := n.hosts[m.from], n.hosts[m.to]
	n.aborted++
	back := Route{Host: m.from, Epoch: m.epoch + 1}
	n.master.Update(m.tid, back)
	a.routes.Update(m.tid, back)
	delete(a.dest, m.tid)
	n.restore(a, m.tid, a.kept[m.tid])
	delete(a.kept, m.tid)
	// B refuses what it buffered, naming the way back.
	b.routes.Update(m.tid, back)
	b.tasks[m.tid] = absent
	bufs := b.buf[m.tid]
	delete(b.buf, m.tid)
	for _, x := range bufs {
		n.arrive(b, x.from, x.env)
	}
	host, envs := b.out.Reroute(m.tid, back, n.now)
	n.transmit(b, host, envs)
	n.broadcast(Entry{TID: m.tid, Route: back})
	delete(n.moves, m.tid)
}

func runMigrationSim(t *testing.T, seed uint64) *mNet {
	n := newMNet(t, seed)
	var tasks []task.TID
	for h := 1; h <= 3; h++ {
		for i := 1; i <= 2; i++ {
			tid := task.NewTID(task.HostID(h), uint32(i))
			n.hosts[task.HostID(h)].tasks[tid] = hosted
			tasks = append(tasks, tid)
		}
	}
	const sends, movesWanted = 400, 12
	sent, begun := 0, 0
	for round := 0; ; round++ {
		if round > 300000 {
			for _, h := range n.hosts {
				for to, q := range h.out.queues {
					t.Logf("host %v queue to %v: route %+v held %v msgs %d presence here %v master %+v", h.id, to, q.route, q.held, q.n, h.tasks[to], n.master.Lookup(to))
				}
			}
			t.Fatalf("seed %d: no progress (%d frames in flight, %d moves open, sent %d)", seed, len(n.flight), len(n.moves), sent)
		}
		busy := sent < sends || len(n.moves) > 0 || len(n.flight) > 0 || n.pending()
		if !busy {
			break
		}
		switch x := n.rng.IntN(100); {
		case x < 35 && sent < sends:
			s, r := tasks[n.rng.IntN(len(tasks))], tasks[n.rng.IntN(len(tasks))]
			if h := n.hostOf(s); h != nil {
				n.send(h, s, r)
				sent++
			}
		case x < 38 && begun < movesWanted:
			n.begin(tasks[n.rng.IntN(len(tasks))], task.HostID(1+n.rng.IntN(3)))
			begun++
		case x < 44 && len(n.moves) > 0:
			for _, m := range n.moves { // any one
				n.advance(m)
				break
			}
		case x < 48:
			n.tick()
		default:
			n.step()
		}
	}
	for p, want := range n.sent {
		got := n.got[p]
		if uint64(len(got)) != want {
			t.Fatalf("seed %d: %v→%v: %d delivered of %d sent: %v", seed, p.From, p.To, len(got), want, got)
		}
		for i, s := range got {
			if s != uint64(i+1) {
				t.Fatalf("seed %d: %v→%v: delivery %d has seq %d: %v", seed, p.From, p.To, i, s, got)
			}
		}
	}
	return n
}

func (n *mNet) pending() bool {
	for _, h := range n.hosts {
		if h.out.Bytes() > 0 {
			return true
		}
	}
	return false
}

// TestMigrationProtocolExactlyOnce runs the migration protocol through
// thousands of seeded interleavings of sends, moves, aborts, losses,
// duplicates and reorderings.
func TestMigrationProtocolExactlyOnce(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	var done, aborted int
	for seed := range uint64(seeds) {
		n := runMigrationSim(t, seed)
		done += n.done
		aborted += n.aborted
	}
	if done == 0 || aborted == 0 {
		t.Fatalf("the seeds made %d moves and %d aborts: both paths must be exercised", done, aborted)
	}
	t.Logf("%d seeds: %d moves committed, %d aborted", seeds, done, aborted)
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
