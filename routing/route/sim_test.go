package route_test

import (
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// This file is the simulation of routes on demand: moves decided by the
// real move.Machine and carried out by each host's real move.Host, the
// daemons' sending and receiving sides the real routing.Outbox and
// routing.Inbox, and each host's routes a route.Cache. The master tells a
// move's route only to the task's origin, its old host and its new host;
// every other sender learns it from refusals and from the origin. The
// network loses, duplicates, delays and reorders frames (the master's
// over reliable streams are delayed and reordered only), cuts pairs of
// hosts apart for a while, and takes hosts down for a while (every frame
// to or from a host that is down is lost, and it takes no step; it comes
// back with its state, as a daemon whose connections dropped). Each host
// performs its Host's effects as the daemon's handlers do
// (daemon/migrate.go). After every step the simulation checks that each
// task runs on at most one host and exists (running, or suspended by a
// move) on one, that every pair's deliveries are in order with none
// twice, and that no host's route epoch for a task goes back; at the end,
// that every message sent was delivered, including one sent by every
// task to every task after the last move (every sender reaches every
// moved task).

var simSeeds = flag.Int("seeds", 100, "how many seeds TestRoutesOnDemand runs (go test ./routing/route -run TestRoutesOnDemand -seeds 5000)")

var simTrace = flag.Bool("simtrace", false, "log every event of the simulation (with -seeds 1 -seed0 N)")

var simSeed0 = flag.Uint64("seed0", 0, "the first seed TestRoutesOnDemand runs")

var cacheConfig = route.Config{Retry: 40 * time.Millisecond}

var simMaxRoutes = flag.Int("maxroutes", 0, "each host's route.Config.MaxRoutes in TestRoutesOnDemand (0: the default)")

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
	routes *route.Cache
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

// Frame kinds of the route queries, beside routing's: the daemon will
// give them frame kinds of their own (see the routing package doc).
const (
	kindAsk    routing.Kind = 100 // a query for a route, to the task's origin
	kindAnswer routing.Kind = 101 // the origin's answer
)

type mFrame struct {
	from, to task.HostID
	kind     routing.Kind
	env      routing.Envelope
	ack      routing.Ack
	ref      routing.Refusal // KindRefuse; kindAsk and kindAnswer: the TID and the route
	route    *routing.Entry  // from the master: a move's route
}

// mode is how the master spreads a move's route.
type mode uint8

const (
	onDemand  mode = iota // to the task's origin, old and new host; the rest ask
	broadcast             // to every host, as the daemon does today
)

// cost counts what frames of routing (not the moves' calls, which are the
// same in both modes) the master sends and the hosts handle.
type cost struct {
	masterFrames, masterBytes int
	hostFrames, hostBytes     map[task.HostID]int
}

// Wire sizes of routing's frames: a frame header (u32 length, u8 kind)
// and the binary body (routing.AppendRefusal's 21 bytes for a route).
const (
	frameHeader = 5
	routeBytes  = frameHeader + 21 // a route from the master, a refusal, an answer
	askBytes    = frameHeader + 8  // a query: the TID
)

type mNet struct {
	t       *testing.T
	rng     *rand.Rand
	mode    mode
	now     time.Time
	hosts   map[task.HostID]*mHost
	list    []*mHost // the hosts in ID order, so that a seed replays exactly
	flight  []mFrame
	master  *routing.Table
	m       *move.Machine
	calls   []move.Action // steps the machine asked for, not yet done
	moving  map[task.TID]bool
	from    map[move.ID]task.HostID // each move's origin
	to      map[move.ID]task.HostID // each move's destination
	got     map[routing.Pair][]uint64
	sent    map[routing.Pair]uint64
	tasks   []task.TID
	aborted int
	done    int
	asks    int

	// Faults: hosts down, pairs cut apart, each until a step; lossless
	// turns off the random loss and duplication of frames.
	faults    bool
	lossless  bool
	down      map[task.HostID]int
	dead      map[task.HostID]bool // deleted (for good, unless it comes back)
	crashes   int
	backAt    map[task.HostID]uint64 // hosts deleted then back: the master's epoch clock at the return
	revived   int                    // hosts deleted that came back
	ontoBack  int                    // moves begun onto a host that came back
	reviveAt  int                    // the step the host deleted comes back at (0: never)
	maxRoutes int
	cut       map[[2]task.HostID]int
	steps     int

	check   bool                                // check the invariants after every step
	epochs  map[task.HostID]map[task.TID]uint64 // the last route epoch each host held
	forgets int                                 // routes the caches forgot for their bound
	ended   map[task.TID]bool                   // tasks that have ended (simSpec.ends)
	dropped int                                 // messages dropped for ended tasks (route.DoEnded)
	trace   hash.Hash64
	cost    cost
}

func newMNet(t *testing.T, seed uint64, hosts int, md mode) *mNet {
	return newMNetBounded(t, seed, hosts, md, *simMaxRoutes)
}

// newMNetBounded is newMNet with each cache's Config.MaxRoutes maxRoutes.
func newMNetBounded(t *testing.T, seed uint64, hosts int, md mode, maxRoutes int) *mNet {
	n := &mNet{t: t, rng: rand.New(rand.NewPCG(seed, 0xd5e)), mode: md, now: time.Unix(0, 0),
		hosts: map[task.HostID]*mHost{}, master: routing.NewTable(), m: move.New(0, 0), moving: map[task.TID]bool{},
		from: map[move.ID]task.HostID{}, to: map[move.ID]task.HostID{}, got: map[routing.Pair][]uint64{}, sent: map[routing.Pair]uint64{},
		down: map[task.HostID]int{}, dead: map[task.HostID]bool{}, backAt: map[task.HostID]uint64{}, maxRoutes: maxRoutes, cut: map[[2]task.HostID]int{}, epochs: map[task.HostID]map[task.TID]uint64{}, ended: map[task.TID]bool{},
		trace: fnv.New64a(), cost: cost{hostFrames: map[task.HostID]int{}, hostBytes: map[task.HostID]int{}}}
	for i := 1; i <= hosts; i++ {
		id := task.HostID(i)
		h := n.newHost(id)
		n.hosts[id] = h
		n.list = append(n.list, h)
	}
	return n
}

// newHost is host id as it starts: no task, an empty outbox and inbox,
// and a cache that knows no route.
func (n *mNet) newHost(id task.HostID) *mHost {
	return &mHost{id: id, out: routing.NewOutbox(), in: routing.NewInbox(), routes: route.New(id, route.Config{Retry: cacheConfig.Retry, MaxRoutes: n.maxRoutes}),
		moves: move.NewHost(), tasks: map[task.TID]move.ID{}, buf: map[task.TID][]buffered{},
		kept: map[task.TID]moveState{}, ckpts: map[task.TID]received{}}
}

// event adds a line to the trace, whose hash two runs of a seed compare.
func (n *mNet) event(format string, args ...any) {
	if *simTrace {
		n.t.Logf("%d "+format, append([]any{n.steps}, args...)...)
	}
	fmt.Fprintf(n.trace, "%d ", n.steps)
	fmt.Fprintf(n.trace, format, args...)
	n.trace.Write([]byte{'\n'})
}

// frame puts f in flight, counting what routing's frames cost.
func (n *mNet) frame(f mFrame) {
	switch {
	case f.route != nil:
		n.cost.masterFrames++
		n.cost.masterBytes += routeBytes
	case f.kind == kindAsk:
		n.asks++
	}
	n.flight = append(n.flight, f)
}

// handled counts a frame of routing that host h takes in.
func (n *mNet) handled(h task.HostID, f mFrame) {
	switch {
	case f.route != nil, f.kind == KindRefuse, f.kind == kindAnswer:
		n.cost.hostFrames[h]++
		n.cost.hostBytes[h] += routeBytes
	case f.kind == kindAsk:
		n.cost.hostFrames[h]++
		n.cost.hostBytes[h] += askBytes
	}
}

// KindRefuse is routing's, named short for the switch above.
const KindRefuse = routing.KindRefuse

// up reports whether host h is up.
func (n *mNet) up(h task.HostID) bool { return !n.dead[h] && n.down[h] <= n.steps }

// through reports whether a frame from a to b gets through now.
func (n *mNet) through(a, b task.HostID) bool {
	if a > b {
		a, b = b, a
	}
	return n.up(a) && n.up(b) && n.cut[[2]task.HostID{a, b}] <= n.steps
}

func (n *mNet) hostOf(tid task.TID) *mHost {
	for _, h := range n.list {
		if h.presence(tid) == hosted {
			return h
		}
	}
	return nil
}

// deliver is e delivered to its task: it must be the next of its pair.
func (n *mNet) deliver(e routing.Envelope) {
	p := routing.Pair{From: e.From, To: e.To}
	if n.ended[e.To] {
		n.t.Fatalf("%v→%v %d delivered after %v ended", e.From, e.To, e.Seq, e.To)
	}
	if want := uint64(len(n.got[p]) + 1); e.Seq != want {
		n.t.Fatalf("%v→%v: delivered seq %d, want %d (in order, exactly once)", e.From, e.To, e.Seq, want)
	}
	n.got[p] = append(n.got[p], e.Seq)
	n.event("deliver %v→%v %d", e.From, e.To, e.Seq)
}

// send is task s, hosted on h, sending to t.
func (n *mNet) send(h *mHost, s, t task.TID) {
	e := routing.Envelope{From: s, To: t, Seq: h.out.Seq(s, t), Tag: 1}
	n.sent[routing.Pair{From: s, To: t}]++
	n.event("send %v→%v %d at %v", s, t, e.Seq, h.id)
	switch h.presence(t) {
	case hosted:
		h.in.Accept(e, n.deliver)
		return
	case leaving:
		if r := h.dest(t); h.routes.Lookup(t).Epoch < r.Epoch {
			r.InTransit = true
			h.out.Push(e, r, n.now) // held until the master's route
			return
		}
		if r := h.routes.Lookup(t); r.Host == h.id {
			// The way back of an abort is known before the task resumes
			// here: held until it does.
			r.InTransit = true
			h.out.Push(e, r, n.now)
			return
		}
		// The master's route has come: send along it.
	case arriving:
		if r := h.routes.Lookup(t); r.Host == h.id {
			h.out.Push(e, routing.Route{Host: h.id, Epoch: r.Epoch, InTransit: true}, n.now)
			return
		}
		// Not announced yet: the task still runs at its origin.
	}
	r := h.routes.Lookup(t)
	if q, _, ok := h.out.Route(t); ok && q.Epoch > r.Epoch && q.Host != h.id {
		r = q // the outbox's route, newer than a cache that forgot it (as the daemon's send)
	}
	if r.Host == h.id && n.ended[t] {
		n.event("dropped: %v has ended here", t) // as the daemon's send to a task that exited here
		return
	}
	if r.Host == h.id {
		n.t.Fatalf("%v routes %v to itself, where it is not", h.id, t)
	}
	if h.routes.Gone(r) {
		// The route leads to a deleted host: hold, and ask.
		r.InTransit = true
		h.out.Push(e, r, n.now)
		n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvHeld, TID: t, Using: r}))
		return
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
		rf := routing.Refusal{To: e.To, Route: r}
		if from == h.id {
			n.refused(h, h.id, rf)
			return
		}
		n.frame(mFrame{from: h.id, to: from, kind: routing.KindRefuse, ref: rf})
	}
	switch h.presence(e.To) {
	case hosted:
		ack(h.in.Accept(e, n.deliver))
	case leaving:
		r := h.dest(e.To)
		cur := h.routes.Lookup(e.To)
		if cur.Epoch > r.Epoch && cur.Host == h.id {
			// The way back of an abort, known before the task resumes
			// here: kept, unacknowledged, until it does.
			h.buf[e.To] = append(h.buf[e.To], buffered{from: from, env: e})
			return
		}
		if n.mode == onDemand && cur.Epoch >= r.Epoch && cur.Host != h.id {
			// The master has set the route: the destination keeps what
			// comes for the task, so the sender need not wait and ask.
			refuse(cur)
			return
		}
		r.InTransit = true
		refuse(r)
	case arriving:
		h.buf[e.To] = append(h.buf[e.To], buffered{from: from, env: e})
	default:
		for _, x := range h.routes.Step(n.now, route.Event{Kind: route.EvMiss, TID: e.To, Peer: from}) {
			refuse(x.Route)
		}
	}
}

// refused is a refusal from host from reaching h.
func (n *mNet) refused(h *mHost, from task.HostID, rf routing.Refusal) {
	using, _, ok := h.out.Route(rf.To)
	if !ok {
		return // nothing is queued for the task any more
	}
	n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvRefused, TID: rf.To, Peer: from, Route: rf.Route, Using: using}))
}

// perform carries out h's cache's effects.
func (n *mNet) perform(h *mHost, fx []route.Effect) {
	for _, x := range fx {
		n.event("%v: %v", h.id, x)
		switch x.Kind {
		case route.DoReroute:
			n.reroute(h, x.TID)
		case route.DoRefusal:
			host, envs := h.out.Refused(routing.Refusal{To: x.TID, Route: x.Route}, x.Host, n.now)
			n.transmit(h, host, envs)
		case route.DoAsk:
			n.frame(mFrame{from: h.id, to: x.Host, kind: kindAsk, ref: routing.Refusal{To: x.TID}})
		case route.DoAnswer:
			n.frame(mFrame{from: h.id, to: x.Host, kind: kindAnswer, ref: routing.Refusal{To: x.TID, Route: x.Route}})
		case route.DoRefuse:
			n.frame(mFrame{from: h.id, to: x.Host, kind: routing.KindRefuse, ref: routing.Refusal{To: x.TID, Route: x.Route}})
		case route.DoForget:
			n.forgot(h, x.TID)
		case route.DoEnded:
			if m := n.epochs[h.id]; m != nil {
				delete(m, x.TID) // its route goes: the epoch may go back
			}
			if r, _, ok := h.out.Route(x.TID); ok && r.Epoch <= x.Route.Epoch {
				n.dropped += h.out.DropReceiver(x.TID)
			}
		}
	}
}

// forgot is h's cache forgetting tid's route for its bound: its epoch may
// go back to the origin's.
func (n *mNet) forgot(h *mHost, tid task.TID) {
	n.forgets++
	if m := n.epochs[h.id]; m != nil {
		delete(m, tid)
	}
}

// learn is h learning a route as a party to a move.
func (n *mNet) learn(h *mHost, tid task.TID, r routing.Route) {
	for _, x := range h.routes.Step(n.now, route.Event{Kind: route.EvSet, TID: tid, Route: r, Absent: h.presence(tid) == absent}) {
		if x.Kind == route.DoForget {
			n.forgot(h, x.TID)
		}
	}
}

// reroute makes h's outbox follow the newest route it knows for tid, but
// not to itself while the task is arriving (what is held is released when
// it is restored here).
func (n *mNet) reroute(h *mHost, tid task.TID) {
	r := h.routes.Lookup(tid)
	if h.presence(tid) == arriving && r.Host == h.id {
		return
	}
	host, envs := h.out.Reroute(tid, r, n.now)
	n.transmit(h, host, envs)
}

// applyRoute is a daemon applying a route it learns from the master, or
// from an origin's answer: its outbox follows the newest route it knows,
// even when the cache knew it already (from a refusal).
func (n *mNet) applyRoute(h *mHost, kind route.EventKind, en routing.Entry) {
	for _, x := range h.routes.Step(n.now, route.Event{Kind: kind, TID: en.TID, Route: en.Route, Absent: h.presence(en.TID) == absent}) {
		if x.Kind == route.DoForget || x.Kind == route.DoEnded {
			n.perform(h, []route.Effect{x})
		}
	}
	if _, ended := h.routes.Ended(en.TID); ended {
		return // an answer that it has ended: nothing to follow
	}
	n.reroute(h, en.TID)
}

func (n *mNet) step() {
	n.steps++
	n.now = n.now.Add(time.Millisecond)
	if n.reviveAt != 0 && n.steps >= n.reviveAt {
		n.reviveAt = 0
		n.revive()
	}
	if n.faults {
		n.fault()
	}
	if len(n.flight) == 0 {
		return
	}
	i := n.rng.IntN(len(n.flight))
	f := n.flight[i]
	if f.route != nil && !n.dead[f.to] && !n.up(f.to) {
		return // the master's stream waits for the host to come back
	}
	n.flight[i] = n.flight[len(n.flight)-1]
	n.flight = n.flight[:len(n.flight)-1]
	if f.route != nil && n.dead[f.to] {
		return
	}
	if f.route == nil { // the master's routes go over reliable streams; the rest may be lost or repeated
		if !n.through(f.from, f.to) || !n.lossless && n.rng.Float64() < 0.08 {
			n.event("lost %v→%v kind %v", f.from, f.to, f.kind)
			return
		}
		if !n.lossless && n.rng.Float64() < 0.04 {
			n.flight = append(n.flight, f)
		}
	}
	if f.to == 0 { // a query to the master, which holds every route
		n.event("frame %v→master %v", f.from, f.ref)
		r := n.master.Lookup(f.ref.To)
		if e, ok := n.master.Ended(f.ref.To); ok {
			r = routing.Route{Epoch: e} // it has ended (host 0)
		} else if f, back := n.backAt[r.Host]; n.dead[r.Host] || back && r.Epoch > 0 && r.Epoch <= f {
			// Its host was deleted, and nothing is restored here: it is
			// lost for good (the daemon's routesLossFinal).
			r = routing.Route{Epoch: r.Epoch}
		}
		n.frame(mFrame{from: 0, to: f.from, kind: kindAnswer, ref: routing.Refusal{To: f.ref.To, Route: r}})
		n.cost.masterFrames++
		n.cost.masterBytes += routeBytes
		return
	}
	h := n.hosts[f.to]
	n.handled(h.id, f)
	n.event("frame %v→%v kind %v %v %v %v", f.from, f.to, f.kind, f.env.Seq, f.ack.Seq, f.ref)
	switch {
	case f.route != nil && f.route.Route.Host == 0:
		n.applyRoute(h, route.EvAnswer, *f.route) // the master tells the origin of an end
	case f.route != nil:
		n.applyRoute(h, route.EvSet, *f.route)
	case f.kind == routing.KindMsgs:
		n.arrive(h, f.from, f.env)
	case f.kind == routing.KindAcks:
		h.out.Ack(f.ack)
	case f.kind == routing.KindRefuse:
		n.refused(h, f.from, f.ref)
	case f.kind == kindAsk:
		n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvAsk, TID: f.ref.To, Peer: f.from}))
	case f.kind == kindAnswer:
		n.applyRoute(h, route.EvAnswer, routing.Entry{TID: f.ref.To, Route: f.ref.Route})
	}
}

// fault takes a host down, or cuts two hosts apart, now and then, for a
// while; at most one of each at a time.
func (n *mNet) fault() {
	if n.rng.IntN(400) != 0 {
		return
	}
	a := n.list[n.rng.IntN(len(n.list))].id
	span := 20 + n.rng.IntN(200)
	if n.rng.IntN(4) == 0 {
		for i := range n.list { // the first host from a that can go
			if n.crash(n.list[(int(a)-1+i)%len(n.list)].id) {
				break
			}
		}
		return
	}
	if n.dead[a] {
		return
	}
	if n.rng.IntN(2) == 0 {
		for _, until := range n.down {
			if until > n.steps {
				return
			}
		}
		n.down[a] = n.steps + span
		n.event("down %v for %d", a, span)
		return
	}
	b := n.list[n.rng.IntN(len(n.list))].id
	if a == b {
		return
	}
	for _, until := range n.cut {
		if until > n.steps {
			return
		}
	}
	n.cut[[2]task.HostID{min(a, b), max(a, b)}] = n.steps + span
	n.event("cut %v %v for %d", a, b, span)
}

// crash deletes host a for good, and reports whether it did: only if it has nothing that would be lost
// with it: no task running, leaving or arriving, nothing unacknowledged
// in its outbox, no move under way. (A host lost with a task, or with
// messages only it still holds, loses them; the job's rollback answers
// for those, not routing.) Every other host hears of it, as from the
// master, and what its outbox sends to it is asked for afresh.
func (n *mNet) crash(a task.HostID) bool {
	h := n.hosts[a]
	if n.crashes > 0 || len(n.moving) > 0 || len(n.calls) > 0 || h.out.Bytes() > 0 || len(h.buf) > 0 || len(h.kept) > 0 || len(h.ckpts) > 0 {
		return false
	}
	for _, tid := range n.tasks {
		if h.presence(tid) != absent {
			return false
		}
	}
	n.crashes++
	n.dead[a] = true
	if n.steps%2 == 0 {
		n.reviveAt = n.steps + 50 // back in a while; otherwise deleted for good
	}
	n.event("crash %v", a)
	n.drain(n.m.Step(n.now, move.Event{Kind: move.HostLost, Host: a}))
	for _, o := range n.list {
		if n.dead[o.id] {
			continue
		}
		n.perform(o, o.routes.Step(n.now, route.Event{Kind: route.EvHostLost, Peer: a}))
		for _, tid := range n.tasks {
			if r, _, ok := o.out.Route(tid); ok && r.Host == a {
				n.perform(o, o.routes.Step(n.now, route.Event{Kind: route.EvHeld, TID: tid, Using: r}))
			}
		}
	}
	return true
}

// revive brings the host deleted back, once, as daemon/membership.go's
// readmit takes a deleted host back under its old ID: a new incarnation,
// with no task, an empty outbox and inbox, and the routes of the
// master's table (the join answer's). What was in flight to or from the
// old one dies with its connections. Every other host hears of the
// return with the master's epoch clock (route.EvHostUp): routes naming
// the host past it are valid, older ones are the old incarnation's. From
// then on tasks are moved onto it like onto any host, and one is at once.
// It reports whether a host came back.
func (n *mNet) revive() bool {
	var a task.HostID
	for _, h := range n.list {
		if n.dead[h.id] {
			a = h.id
		}
	}
	if a == 0 || n.revived > 0 {
		return false
	}
	n.revived++
	delete(n.dead, a)
	floor := n.m.Epoch()
	n.backAt[a] = floor
	n.event("back %v above e%d", a, floor)
	n.flight = slices.DeleteFunc(n.flight, func(f mFrame) bool { return f.to == a || f.from == a })
	h := n.newHost(a)
	n.hosts[a] = h
	n.list[a-1] = h
	delete(n.epochs, a)
	for _, tid := range n.tasks {
		if r := n.master.Lookup(tid); r.Host != a {
			n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvSet, TID: tid, Route: r, Absent: true}))
		}
	}
	for _, o := range n.list {
		if o.id != a && !n.dead[o.id] {
			n.perform(o, o.routes.Step(n.now, route.Event{Kind: route.EvHostUp, Peer: a, Route: routing.Route{Epoch: floor}}))
		}
	}
	for _, tid := range n.tasks {
		if !n.ended[tid] && !n.moving[tid] && n.hostOf(tid) != nil {
			n.begin(tid, a)
			break
		}
	}
	return true
}

func (n *mNet) tick() {
	n.event("tick")
	for _, h := range n.list {
		if !n.up(h.id) || h.out.Bytes() == 0 && h.routes.Queries() == 0 {
			continue // down, or nothing to resend or ask
		}
		due := h.out.Due(n.now, 30*time.Millisecond)
		for _, to := range slices.Sorted(maps.Keys(due)) {
			n.transmit(h, to, due[to])
		}
		n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvTick}))
	}
}

// tell sends a move's route from the master: in broadcast mode to every
// host; on demand to the task's origin, its old host and its new host.
func (n *mNet) tell(mv move.ID, en routing.Entry) {
	n.master.Update(en.TID, en.Route)
	var to []task.HostID
	if n.mode == broadcast {
		for _, h := range n.list {
			to = append(to, h.id)
		}
	} else {
		to = []task.HostID{en.TID.Host(), n.from[mv], n.to[mv]}
		slices.Sort(to)
		to = slices.Compact(to)
	}
	for _, id := range to {
		e := en
		n.frame(mFrame{from: 0, to: id, route: &e})
	}
}

// drain takes the machine's actions: routes are set and finishes counted
// at once, in order (as the daemon does); calls wait to be done.
func (n *mNet) drain(acts []move.Action) {
	for _, a := range acts {
		n.event("master: %v", a)
		switch a.Kind {
		case move.SetRoute:
			en := routing.Entry{TID: a.TID, Route: a.Route}
			if h := n.hosts[n.from[a.Move]]; h.presence(a.TID) == leaving {
				// The origin hears the new route before it is asked to
				// transfer the task (both come from the master, in
				// order); the others later.
				n.applyRoute(h, route.EvSet, en)
			}
			n.tell(a.Move, en)
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
	if a == nil || a.id == to || n.moving[tid] || n.dead[to] {
		return
	}
	acts := n.m.Step(n.now, move.Event{Kind: move.Start, Spec: move.Spec{TID: tid, From: a.id, To: to, Epoch: n.master.Lookup(tid).Epoch, Timeouts: simTimeouts}})
	if len(acts) == 0 || acts[0].Kind != move.Call {
		n.t.Fatalf("start: %v", acts)
	}
	id := acts[0].Move
	n.event("begin %v %v→%v", tid, a.id, to)
	if _, ok := n.backAt[to]; ok {
		n.ontoBack++
	}
	n.from[id] = a.id
	n.to[id] = to
	n.moving[tid] = true
	n.drain(acts)
}

// end is task tid ending (exiting) on its host, when it runs there and
// no move of it is under way, as the daemon's finish: the host's cache
// forgets its route (route.EvEnded at the route's epoch, when it moved),
// and the master forgets it and tells its origin, when it ended elsewhere,
// with an answer of host 0. What it sent is still delivered; what is sent
// to it after is dropped. It reports whether tid ended.
func (n *mNet) end(tid task.TID) bool {
	h := n.hostOf(tid)
	if h == nil || n.moving[tid] || n.ended[tid] || !n.up(h.id) {
		return false
	}
	n.event("end %v at %v", tid, h.id)
	delete(h.tasks, tid)
	n.ended[tid] = true
	if e := h.routes.Lookup(tid).Epoch; e > 0 {
		n.perform(h, h.routes.Step(n.now, route.Event{Kind: route.EvEnded, TID: tid, Route: routing.Route{Epoch: e}}))
	}
	last := n.master.Lookup(tid)
	n.master.Forget(tid)
	if o := tid.Host(); last.Host != o && !n.dead[o] {
		// Over the master's stream, as its routes: delayed, not lost.
		n.frame(mFrame{from: 0, to: o, route: &routing.Entry{TID: tid, Route: routing.Route{Epoch: last.Epoch}}})
	}
	return true
}

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
	if !n.up(c.Host) {
		return // a host that is down takes no step; the call waits
	}
	n.calls = append(n.calls[:i], n.calls[i+1:]...)
	n.event("step %v", c)
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
				n.learn(h, tid, x.Route)
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
			n.learn(h, tid, x.Route)
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
	acts := n.m.Step(n.now, move.Event{Kind: move.Result, Move: c.Move, Step: c.Step, Outcome: o})
	for _, a := range acts {
		if a.Kind == move.Reject {
			n.t.Fatal(a.Err)
		}
	}
	n.drain(acts)
}

// invariants checks, after a step, that every task runs on at most one
// host and exists on one (running, or suspended by its move), and that
// no host's route epoch for a task has gone back.
func (n *mNet) invariants() {
	for _, tid := range n.tasks {
		if n.ended[tid] {
			// Ended: it runs nowhere and is suspended nowhere (an arrival
			// prepared for a move that aborted may linger, never restored).
			for _, h := range n.list {
				if p := h.presence(tid); p == hosted || p == leaving {
					n.t.Fatalf("step %d: %v ended, and is %v on %v", n.steps, tid, p, h.id)
				}
			}
			continue
		}
		running, kept := 0, 0
		for _, h := range n.list {
			switch h.presence(tid) {
			case hosted:
				running++
			case leaving:
				kept++
			}
			e := h.routes.Lookup(tid).Epoch
			m := n.epochs[h.id]
			if m == nil {
				m = map[task.TID]uint64{}
				n.epochs[h.id] = m
			}
			if e < m[tid] {
				n.t.Fatalf("step %d: %v's route epoch for %v went back from %d to %d", n.steps, h.id, tid, m[tid], e)
			}
			m[tid] = e
		}
		if running > 1 || running+kept == 0 {
			n.t.Fatalf("step %d: %v runs on %d hosts and is suspended on %d", n.steps, tid, running, kept)
		}
	}
}

// simSpec is one simulation's shape.
type simSpec struct {
	hosts, tasksPerHost int
	sends, moves        int
	faults, check       bool
	mode                mode
	maxRoutes           int // each cache's Config.MaxRoutes (0: -maxroutes)
	ends                int // how many tasks end (not moving) while messages fly
}

// run runs the simulation of seed: random sends, moves, steps, ticks and
// frames until every message sent is delivered, then a send from every
// task to every task, run out the same way. It returns the net, whose
// trace hash and counts the caller reads.
func runSim(t *testing.T, seed uint64, sp simSpec) *mNet {
	maxRoutes := *simMaxRoutes
	if sp.maxRoutes != 0 {
		maxRoutes = sp.maxRoutes
	}
	n := newMNetBounded(t, seed, sp.hosts, sp.mode, maxRoutes)
	n.faults, n.check = sp.faults, sp.check
	for h := 1; h <= sp.hosts; h++ {
		for i := 1; i <= sp.tasksPerHost; i++ {
			tid := task.NewTID(task.HostID(h), uint32(i))
			n.hosts[task.HostID(h)].tasks[tid] = 0
			n.tasks = append(n.tasks, tid)
		}
	}
	sent, begun, ends := 0, 0, 0
	n.loop(seed, func() bool {
		switch x := n.rng.IntN(100); {
		case x < 35 && sent < sp.sends:
			s, r := n.tasks[n.rng.IntN(len(n.tasks))], n.tasks[n.rng.IntN(len(n.tasks))]
			if h := n.hostOf(s); h != nil && n.up(h.id) {
				n.send(h, s, r)
				sent++
			}
		case x < 38 && begun < sp.moves:
			n.begin(n.tasks[n.rng.IntN(len(n.tasks))], task.HostID(1+n.rng.IntN(sp.hosts)))
			begun++
		case x < 40 && ends < sp.ends:
			if n.end(n.tasks[n.rng.IntN(len(n.tasks))]) {
				ends++
			}
		default:
			return false
		}
		return true
	}, func() bool { return sent < sp.sends || begun < sp.moves })
	n.reachAll(seed)
	n.final(seed)
	return n
}

// eachSeed runs the simulation of sp for each of the -seeds seeds from
// -seed (at most 50 with -short) twice, fails the test if the two runs'
// traces or step counts differ, and hands the first run to count. It
// returns how many seeds it ran.
func eachSeed(t *testing.T, sp simSpec, count func(*mNet)) int {
	t.Helper()
	seeds := *simSeeds
	if testing.Short() {
		seeds = min(seeds, 50)
	}
	for seed := *simSeed0; seed < *simSeed0+uint64(seeds); seed++ {
		a := runSim(t, seed, sp)
		b := runSim(t, seed, sp)
		if a.trace.Sum64() != b.trace.Sum64() || a.steps != b.steps {
			t.Fatalf("seed %d: two runs differ: trace %x after %d steps, then %x after %d", seed, a.trace.Sum64(), a.steps, b.trace.Sum64(), b.steps)
		}
		count(a)
	}
	return seeds
}

// reachAll has every task send to every task once the moves are over,
// and runs until all is delivered: every sender reaches every moved task.
func (n *mNet) reachAll(seed uint64) {
	for _, s := range n.tasks {
		h := n.hostOf(s)
		if h == nil {
			continue // ended
		}
		for _, r := range n.tasks {
			n.send(h, s, r)
		}
	}
	n.loop(seed, func() bool { return false }, func() bool { return false })
}

// loop runs the simulation until nothing is left to do: act does the
// caller's actions (reporting whether it did one), more reports whether
// it has more to do.
func (n *mNet) loop(seed uint64, act func() bool, more func() bool) {
	for round := 0; ; round++ {
		if round > 400000 {
			for _, h := range n.list {
				for _, to := range n.tasks {
					if p := h.out.Pending(to); p > 0 {
						n.t.Logf("host %v holds %d bytes for %v: %s; its route %+v, asking %v; master %+v; dead %v", h.id, p, to, h.out.Describe(to), h.routes.Lookup(to), h.routes.Asking(to), n.master.Lookup(to), n.dead)
					}
				}
			}
			n.t.Fatalf("seed %d: no progress (%d frames in flight, %d steps open)", seed, len(n.flight), len(n.calls))
		}
		busy := more() || len(n.calls) > 0 || len(n.moving) > 0 || len(n.flight) > 0 || n.pending()
		if !busy {
			return
		}
		x := n.rng.IntN(100)
		switch {
		case x < 38 && act():
		case x < 44 && len(n.calls) > 0:
			n.doStep()
		case x < 48:
			n.tick()
		default:
			n.step()
		}
		if n.check {
			n.invariants()
		}
	}
}

// final checks that every message sent was delivered, in order, once.
func (n *mNet) final(seed uint64) {
	for _, p := range slices.SortedFunc(maps.Keys(n.sent), func(a, b routing.Pair) int {
		if a.From != b.From {
			return int(a.From>>1) - int(b.From>>1)
		}
		return int(a.To>>1) - int(b.To>>1)
	}) {
		want, got := n.sent[p], n.got[p]
		if n.ended[p.To] && uint64(len(got)) <= want {
			continue // what came after its end was dropped
		}
		if uint64(len(got)) != want {
			n.t.Fatalf("seed %d: %v→%v: %d delivered of %d sent: %v", seed, p.From, p.To, len(got), want, got)
		}
	}
}

func (n *mNet) pending() bool {
	for _, h := range n.list {
		if h.out.Bytes() > 0 {
			return true
		}
	}
	return false
}

var simSpecDefault = simSpec{hosts: 5, tasksPerHost: 2, sends: 300, moves: 12, faults: true, check: true, mode: onDemand}

// TestRoutesOnDemand runs routes on demand through seeded interleavings
// of sends, moves, failed steps, aborts, losses, duplicates, delays,
// reorderings, partitions and hosts down; each seed runs twice and the
// two traces must hash the same.
func TestRoutesOnDemand(t *testing.T) {
	var done, aborted, asks, crashes, revived, ontoBack int
	seeds := eachSeed(t, simSpecDefault, func(a *mNet) {
		done += a.done
		aborted += a.aborted
		asks += a.asks
		crashes += a.crashes
		revived += a.revived
		ontoBack += a.ontoBack
	})
	if done == 0 || aborted == 0 || asks == 0 || crashes == 0 || seeds >= 50 && (revived == 0 || ontoBack == 0) {
		t.Fatalf("the seeds made %d moves, %d aborts, %d queries, %d hosts deleted, %d back and %d moves onto one back: every path must be exercised", done, aborted, asks, crashes, revived, ontoBack)
	}
	t.Logf("%d seeds: %d moves committed, %d aborted, %d queries, %d hosts deleted, %d back, %d moves onto a host back", seeds, done, aborted, asks, crashes, revived, ontoBack)
}

// TestRoutesOnDemandBounded is TestRoutesOnDemand with each host's cache
// bounded to two routes it may forget (of ten tasks), so that routes are
// forgotten all the time: every invariant still holds, and every sender
// still reaches every moved task.
func TestRoutesOnDemandBounded(t *testing.T) {
	sp := simSpecDefault
	sp.maxRoutes = 2
	forgets, done := 0, 0
	seeds := eachSeed(t, sp, func(a *mNet) {
		forgets += a.forgets
		done += a.done
	})
	if forgets == 0 || done == 0 {
		t.Fatalf("%d routes forgotten, %d moves committed: the bound is not exercised", forgets, done)
	}
	t.Logf("%d seeds: %d moves committed, %d routes forgotten for the bound", seeds, done, forgets)
}

// TestRoutesOnDemandEnds is TestRoutesOnDemand with three of the ten tasks
// ending while messages fly, moved ones among them, and each cache
// bounded to four routes: what they sent is delivered, nothing reaches
// them after their end, and what is sent to them (every task sends to
// every task at the end) is dropped, not asked about for ever; every
// invariant holds for the others. (An origin remembers at most
// Config.MaxRoutes ends: a bound below the ends would have it forget
// them, and senders stuck on an ended task's last route ask for ever.)
func TestRoutesOnDemandEnds(t *testing.T) {
	sp := simSpecDefault
	sp.ends, sp.maxRoutes = 3, 4
	ends, dropped := 0, 0
	seeds := eachSeed(t, sp, func(a *mNet) {
		ends += len(a.ended)
		dropped += a.dropped
	})
	if ends == 0 || dropped == 0 {
		t.Fatalf("%d tasks ended, %d messages dropped by an end's answer: the ends are not exercised", ends, dropped)
	}
	t.Logf("%d seeds: %d tasks ended, %d messages dropped on an end's word", seeds, ends, dropped)
}
