package move_test

import (
	"errors"
	"flag"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// This file checks that moves carried out by the move machine keep
// reliable delivery exact: the master's decisions are the real Machine's,
// each host's are the real Host's (the host half of moves), the daemons'
// sending and receiving sides are the real routing.Outbox and
// routing.Inbox, on a simulated network that loses, duplicates and
// reorders frames, with broadcasts that reach each daemon after its own
// delay. Each host feeds its Host every step and performs the effects it
// returns, as the daemon's handlers do (daemon/migrate.go):
//
//   - prepare (destination B): messages for T are buffered there,
//     unacknowledged, until T is restored;
//   - suspend (origin A): T's state, its receiving sequence state (from A's
//     inbox) and its sending sequence state (from A's outbox) leave with
//     it, and A refuses further messages for T with the route (B, e)
//     marked in transit, so senders hold them;
//   - the route (T, B, e) is set and broadcast: daemons resend what they
//     hold to B;
//   - restore (B): T is restored, then its buffered messages go through
//     B's inbox in sequence order and are acknowledged;
//   - or the move aborts: B drops the arrival and refuses what it
//     buffered, naming the way back (A, e'), A restores T from what it
//     kept, and the route back is broadcast.
//
// Steps fail at random (a failed prepare, no safe point, a failed
// transfer or restore), and the Host refuses what it must (a step of a
// move cancelled or resumed, a checkpoint of an arrival dropped). The invariant, checked on every seed: every
// message sent is delivered exactly once, in per-pair order.

var simSeeds = flag.Int("seeds", 400, "how many seeds TestMovesExactlyOnce runs (go test ./routing/move -run TestMovesExactlyOnce -seeds 5000)")

var simTimeouts = move.Timeouts{Step: time.Second, Suspend: time.Second, Transfer: time.Second, Retry: time.Second}

type presence uint8

const (
	absent presence = iota
	hosted
	leaving  // suspended here, moving away
	arriving // prepared here, not yet restored
)

type buffered struct {
	from task.HostID // the daemon to acknowledge to
	env  routing.Envelope
}

type mHost struct {
	id     task.HostID
	out    *routing.Outbox
	in     *routing.Inbox
	routes *routing.Table
	moves  *move.Host              // the host half of moves
	tasks  map[task.TID]move.ID    // running here, with the move that restored each (0: none)
	buf    map[task.TID][]buffered // arriving: held messages
	kept   map[task.TID]moveState  // leaving: what A keeps for an abort
	ckpts  map[task.TID]received   // arriving: the checkpoint received
}

// received is a checkpoint that reached a destination.
type received struct {
	move  move.ID
	epoch uint64
	st    moveState
}

// presence is where tid is at h: running, or caught in a move as the
// Host holds it.
func (h *mHost) presence(tid task.TID) presence {
	if _, ok := h.tasks[tid]; ok {
		return hosted
	}
	if _, ok := h.moves.Departure(tid); ok {
		return leaving
	}
	if _, ok := h.moves.Arrival(tid); ok {
		return arriving
	}
	return absent
}

// dest is where the task leaving h goes.
func (h *mHost) dest(tid task.TID) routing.Route {
	d, _ := h.moves.Departure(tid)
	return d.Dest
}

// step feeds h's Host an event, with what h's task table and routes know
// of the task, as the daemon's stepMove does.
func (n *mNet) hostStep(h *mHost, e move.HostEvent) []move.HostEffect {
	if e.Kind != move.EvSafePoint {
		arrived, running := h.tasks[e.TID]
		e.Local = move.Local{Running: running, Arrived: arrived, Route: h.routes.Lookup(e.TID).Epoch}
	}
	return h.moves.Step(n.now, e)
}

// last is a step's answer among its effects.
func last(fx []move.HostEffect) move.HostEffect {
	if len(fx) == 0 {
		return move.HostEffect{Kind: move.DoOK}
	}
	return fx[len(fx)-1]
}

// refusedSuspend is the master's reading of a refused suspend (the
// daemon's suspendRefused): the task was not suspended for the move.
func refusedSuspend(err error) bool {
	return errors.Is(err, move.ErrAborted) || errors.Is(err, task.ErrNoSuchTask)
}

type moveState struct {
	inSeq  map[task.TID]uint64
	early  []routing.Envelope
	outSeq map[task.TID]uint64
}

type mFrame struct {
	from, to task.HostID
	kind     routing.Kind
	env      routing.Envelope
	ack      routing.Ack
	ref      routing.Refusal
	route    *routing.Entry // a broadcast
}

type mNet struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	hosts   map[task.HostID]*mHost
	flight  []mFrame
	master  *routing.Table
	m       *move.Machine
	calls   []move.Action // steps the machine asked for, not yet done
	moving  map[task.TID]bool
	from    map[move.ID]task.HostID // each move's origin
	got     map[routing.Pair][]uint64
	sent    map[routing.Pair]uint64
	aborted int
	done    int
}

func newMNet(t *testing.T, seed uint64) *mNet {
	n := &mNet{t: t, rng: rand.New(rand.NewPCG(seed, 0xd5e)), now: time.Unix(0, 0),
		hosts: map[task.HostID]*mHost{}, master: routing.NewTable(), m: move.New(0, 0), moving: map[task.TID]bool{},
		from: map[move.ID]task.HostID{}, got: map[routing.Pair][]uint64{}, sent: map[routing.Pair]uint64{}}
	for i := 1; i <= 3; i++ {
		id := task.HostID(i)
		n.hosts[id] = &mHost{id: id, out: routing.NewOutbox(), in: routing.NewInbox(), routes: routing.NewTable(),
			moves: move.NewHost(), tasks: map[task.TID]move.ID{}, buf: map[task.TID][]buffered{},
			kept: map[task.TID]moveState{}, ckpts: map[task.TID]received{}}
	}
	return n
}

// sorted lists the hosts in ID order, so that a seed replays exactly.
func (n *mNet) sorted() []*mHost {
	out := make([]*mHost, 0, len(n.hosts))
	for _, id := range slices.Sorted(maps.Keys(n.hosts)) {
		out = append(out, n.hosts[id])
	}
	return out
}

func (n *mNet) frame(f mFrame) { n.flight = append(n.flight, f) }

func (n *mNet) hostOf(tid task.TID) *mHost {
	for _, h := range n.sorted() {
		if h.presence(tid) == hosted {
			return h
		}
	}
	return nil
}

func (n *mNet) deliver(e routing.Envelope) {
	p := routing.Pair{From: e.From, To: e.To}
	n.got[p] = append(n.got[p], e.Seq)
}

// send is task s, hosted on h, sending to t.
func (n *mNet) send(h *mHost, s, t task.TID) {
	e := routing.Envelope{From: s, To: t, Seq: h.out.Seq(s, t), Tag: 1}
	n.sent[routing.Pair{From: s, To: t}]++
	switch h.presence(t) {
	case hosted:
		h.in.Accept(e, n.deliver)
		return
	case leaving:
		if r := h.dest(t); h.routes.Lookup(t).Epoch < r.Epoch {
			r.InTransit = true
			h.out.Push(e, r, n.now) // held until the broadcast
			return
		}
		if r := h.routes.Lookup(t); r.Host == h.id {
			// The way back of an abort is known before the task resumes
			// here: held until it does.
			r.InTransit = true
			h.out.Push(e, r, n.now)
			return
		}
		// The broadcast has come: send along the new route.
	case arriving:
		if r := h.routes.Lookup(t); r.Host == h.id {
			h.out.Push(e, routing.Route{Host: h.id, Epoch: r.Epoch, InTransit: true}, n.now)
			return
		}
		// Not announced yet: the task still runs at its origin.
	}
	r := h.routes.Lookup(t)
	if r.Host == h.id {
		n.t.Fatalf("%v routes %v to itself, where it is not", h.id, t)
	}
	if h.out.Push(e, r, n.now) {
		n.frame(mFrame{from: h.id, to: r.Host, kind: routing.KindMsgs, env: e})
	}
}

// transmit sends envelopes from h to host to, or takes them in locally.
func (n *mNet) transmit(h *mHost, to task.HostID, envs []routing.Envelope) {
	for _, e := range envs {
		if to == h.id {
			n.arrive(h, h.id, e)
			continue
		}
		n.frame(mFrame{from: h.id, to: to, kind: routing.KindMsgs, env: e})
	}
}

// arrive is message e reaching host h from host from.
func (n *mNet) arrive(h *mHost, from task.HostID, e routing.Envelope) {
	ack := func(a routing.Ack) {
		if from == h.id {
			h.out.Ack(a)
		} else {
			n.frame(mFrame{from: h.id, to: from, kind: routing.KindAcks, ack: a})
		}
	}
	refuse := func(r routing.Route) {
		if r.Host == h.id && !r.InTransit {
			n.t.Fatalf("%v refuses %v→%v naming itself (%+v, presence %v)", h.id, e.From, e.To, r, h.presence(e.To))
		}
		if from == h.id {
			h.routes.Update(e.To, r)
			host, envs := h.out.Refused(routing.Refusal{To: e.To, Route: r}, h.id, n.now)
			n.transmit(h, host, envs)
			return
		}
		n.frame(mFrame{from: h.id, to: from, kind: routing.KindRefuse, ref: routing.Refusal{To: e.To, Route: r}})
	}
	switch h.presence(e.To) {
	case hosted:
		ack(h.in.Accept(e, n.deliver))
	case leaving:
		r := h.dest(e.To)
		if cur := h.routes.Lookup(e.To); cur.Epoch > r.Epoch && cur.Host == h.id {
			// The way back of an abort, known before the task resumes
			// here: kept, unacknowledged, until it does.
			h.buf[e.To] = append(h.buf[e.To], buffered{from: from, env: e})
			return
		}
		r.InTransit = true
		refuse(r)
	case arriving:
		h.buf[e.To] = append(h.buf[e.To], buffered{from: from, env: e})
	default:
		refuse(h.routes.Lookup(e.To))
	}
}

// applyRoute is a daemon applying a route it learns from the master: its
// outbox follows the newest route it knows, even when the table knew it
// already (from a refusal).
func (n *mNet) applyRoute(h *mHost, en routing.Entry) {
	h.routes.Update(en.TID, en.Route)
	r := h.routes.Lookup(en.TID)
	if h.presence(en.TID) == arriving && r.Host == h.id {
		return // released when the task is restored here
	}
	host, envs := h.out.Reroute(en.TID, r, n.now)
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
	case f.kind == routing.KindMsgs:
		n.arrive(h, f.from, f.env)
	case f.kind == routing.KindAcks:
		h.out.Ack(f.ack)
	case f.kind == routing.KindRefuse:
		h.routes.Update(f.ref.To, f.ref.Route) // as the daemon learns routes from refusals
		host, envs := h.out.Refused(f.ref, f.from, n.now)
		n.transmit(h, host, envs)
	}
}

func (n *mNet) tick() {
	for _, h := range n.sorted() {
		due := h.out.Due(n.now, 30*time.Millisecond)
		for _, to := range slices.Sorted(maps.Keys(due)) {
			n.transmit(h, to, due[to])
		}
	}
}

func (n *mNet) broadcast(en routing.Entry) {
	n.master.Update(en.TID, en.Route)
	for _, h := range n.sorted() {
		id := h.id
		e := en
		n.frame(mFrame{from: 0, to: id, route: &e})
	}
}

// drain takes the machine's actions: routes are set and finishes counted
// at once, in order (as the daemon does); calls wait to be done.
func (n *mNet) drain(acts []move.Action) {
	for _, a := range acts {
		switch a.Kind {
		case move.Reject:
			n.t.Fatalf("rejected: %v", a.Err)
		case move.SetRoute:
			en := routing.Entry{TID: a.TID, Route: a.Route}
			for _, h := range n.sorted() {
				if h.presence(a.TID) == leaving {
					// The origin hears the new route before it is asked to
					// transfer the task (both come from the master, in
					// order); the others later.
					n.applyRoute(h, en)
				}
			}
			n.broadcast(en)
		case move.Finish:
			delete(n.moving, a.TID)
			if a.Err == nil {
				n.done++
			} else if errors.Is(a.Err, move.ErrAborted) {
				n.aborted++
			} else {
				n.t.Fatalf("move %v of %v: %v", a.Move, a.TID, a.Err)
			}
		case move.Call:
			n.calls = append(n.calls, a)
		}
	}
}

// begin asks the machine to move tid to host to.
func (n *mNet) begin(tid task.TID, to task.HostID) {
	a := n.hostOf(tid)
	if a == nil || a.id == to || n.moving[tid] {
		return
	}
	acts := n.m.Step(n.now, move.Event{Kind: move.Start, Spec: move.Spec{TID: tid, From: a.id, To: to, Epoch: n.master.Lookup(tid).Epoch, Timeouts: simTimeouts}})
	if len(acts) == 0 || acts[0].Kind != move.Call {
		n.t.Fatalf("start: %v", acts)
	}
	n.from[acts[0].Move] = a.id
	n.moving[tid] = true
	n.drain(acts)
}

// restore installs a moving task's state on host h (arrived with move
// id, or 0 when it comes back) and releases what was held for it there.
func (n *mNet) restore(h *mHost, tid task.TID, st moveState, id move.ID) {
	h.in.SetReceiverState(tid, st.inSeq, st.early)
	h.out.SetSenderState(tid, st.outSeq)
	h.tasks[tid] = id
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

// doStep does one step the machine asked for, at its host, as the
// daemon's handlers do: the host's Host decides, the host performs its
// effects. Some steps fail at random, without effect.
func (n *mNet) doStep() {
	i := n.rng.IntN(len(n.calls))
	c := n.calls[i]
	n.calls = append(n.calls[:i], n.calls[i+1:]...)
	h, tid := n.hosts[c.Host], c.TID
	o := move.OK
	fail := func(k int) bool {
		if n.rng.IntN(k) == 0 {
			o = move.Failed
			return true
		}
		return false
	}
	ev := func(k move.HostEventKind) move.HostEvent {
		return move.HostEvent{Kind: k, TID: tid, Move: c.Move, Route: c.Route}
	}
	switch c.Step {
	case move.StepPrepare:
		if fail(10) {
			break
		}
		e := ev(move.EvPrepare)
		e.Peer = n.from[c.Move]
		if last(n.hostStep(h, e)).Kind == move.DoRefuse {
			o = move.Failed
		}
	case move.StepSuspend:
		switch x := last(n.hostStep(h, ev(move.EvSuspend))); x.Kind {
		case move.DoRefuse:
			o = move.Failed
			if refusedSuspend(x.Err) {
				o = move.Refused
			}
		case move.DoAskSuspend:
			if n.rng.IntN(10) == 0 {
				o = move.Refused // no safe point in time: the request is withdrawn
				break
			}
			e := ev(move.EvSafePoint)
			e.Local = move.Local{Running: true, Route: h.routes.Lookup(tid).Epoch}
			x = last(n.hostStep(h, e))
			if x.Kind == move.DoRefuse {
				o = move.Refused
				break
			}
			inSeq, early := h.in.ReceiverState(tid)
			h.kept[tid] = moveState{inSeq: inSeq, early: early, outSeq: h.out.SenderState(tid)}
			h.in.Forget(tid)
			h.out.ForgetSender(tid)
			delete(h.tasks, tid)
		}
	case move.StepSend:
		if last(n.hostStep(h, ev(move.EvSend))).Kind == move.DoRefuse {
			o = move.Failed
			break
		}
		if !fail(8) {
			// The checkpoint reaches the destination, which takes it only
			// for the arrival the move prepared.
			dst := n.hosts[c.Route.Host]
			e := ev(move.EvStream)
			e.Peer = h.id
			if last(n.hostStep(dst, e)).Kind == move.DoReceive {
				dst.ckpts[tid] = received{move: c.Move, epoch: c.Route.Epoch, st: h.kept[tid]}
			}
		}
		n.hostStep(h, ev(move.EvSent))
	case move.StepRestore:
		x := last(n.hostStep(h, ev(move.EvRestore)))
		got, ok := h.ckpts[tid]
		if x.Kind == move.DoRefuse || !ok || got.move != x.Move || fail(6) {
			o = move.Failed // not prepared, no checkpoint came, or it did not read
			break
		}
		e := ev(move.EvInstall)
		e.Route.Epoch = got.epoch
		if last(n.hostStep(h, e)).Kind != move.DoInstall {
			o = move.Failed
			break
		}
		delete(h.ckpts, tid)
		n.restore(h, tid, got.st, c.Move)
	case move.StepCommit:
		if last(n.hostStep(h, ev(move.EvCommit))).Kind == move.DoForget {
			delete(h.kept, tid)
		}
	case move.StepCancel:
		// B drops the arrival prepared for this move, if any, and refuses
		// what it buffered, naming the way back.
		var bufs []buffered
		for _, x := range n.hostStep(h, ev(move.EvCancel)) {
			switch x.Kind {
			case move.DoInstalled:
				o = move.Installed
			case move.DoDropArrival:
				bufs = h.buf[tid]
				delete(h.buf, tid)
				delete(h.ckpts, tid)
			case move.DoSetRoute:
				h.routes.Update(tid, x.Route)
				for _, b := range bufs {
					n.arrive(h, b.from, b.env)
				}
				host, envs := h.out.Reroute(tid, x.Route, n.now)
				n.transmit(h, host, envs)
			}
		}
	case move.StepResume:
		x := last(n.hostStep(h, ev(move.EvResume)))
		switch x.Kind {
		case move.DoRefuse:
			o = move.Failed
		case move.DoResume:
			h.routes.Update(tid, x.Route)
			e := ev(move.EvInstall)
			e.Back = true
			if last(n.hostStep(h, e)).Kind != move.DoInstall {
				n.t.Fatalf("%v: resumed, then refused its install", tid)
			}
			n.restore(h, tid, h.kept[tid], 0)
			delete(h.kept, tid)
		}
	}
	if c.Notify {
		return
	}
	n.drain(n.m.Step(n.now, move.Event{Kind: move.Result, Move: c.Move, Step: c.Step, Outcome: o}))
}

func runMigrationSim(t *testing.T, seed uint64) *mNet {
	n := newMNet(t, seed)
	var tasks []task.TID
	for h := 1; h <= 3; h++ {
		for i := 1; i <= 2; i++ {
			tid := task.NewTID(task.HostID(h), uint32(i))
			n.hosts[task.HostID(h)].tasks[tid] = 0
			tasks = append(tasks, tid)
		}
	}
	const sends, movesWanted = 400, 12
	sent, begun := 0, 0
	for round := 0; ; round++ {
		if round > 300000 {
			for _, h := range n.sorted() {
				for _, to := range tasks {
					if p := h.out.Pending(to); p > 0 {
						t.Logf("host %v holds %d bytes for %v: its route %+v, presence %v; master %+v", h.id, p, to, h.routes.Lookup(to), h.tasks[to], n.master.Lookup(to))
					}
				}
			}
			t.Fatalf("seed %d: no progress (%d frames in flight, %d steps open, sent %d)", seed, len(n.flight), len(n.calls), sent)
		}
		busy := sent < sends || len(n.calls) > 0 || len(n.moving) > 0 || len(n.flight) > 0 || n.pending()
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
		case x < 44 && len(n.calls) > 0:
			n.doStep()
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
	for _, h := range n.sorted() {
		if h.out.Bytes() > 0 {
			return true
		}
	}
	return false
}

// TestMovesExactlyOnce runs moves driven by the machine through thousands
// of seeded interleavings of sends, steps, failed steps, aborts, losses,
// duplicates and reorderings.
func TestMovesExactlyOnce(t *testing.T) {
	seeds := *simSeeds
	if testing.Short() {
		seeds = min(seeds, 100)
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
