package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/host"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// shost is one simulated daemon: the real host node (routing/host) and,
// around it, the shell's part the daemon's is — its task table, the
// tasks suspended here while they move away (leaving) and prepared here
// to arrive (arriving) — performed the way daemon/remote.go and
// daemon/migrate.go perform them.
type shost struct {
	w    *world
	id   task.HostID
	name string
	node *host.Node
	// cache is the host's route cache on demand (Config.Routes); nil
	// when the master broadcasts every route. The node's table follows
	// it.
	cache *route.Cache

	tasks    map[task.TID]*stask
	leaving  map[task.TID]*leaving
	arriving map[task.TID]*arriving
	gone     map[task.TID]bool

	rtoArmed    bool
	frozenUntil time.Duration
	crashed     bool
	// inc is the host's incarnation: 1, and one more at each restart
	// (a restart replaces the shost; the old one stays crashed).
	inc int
	// epochs is the largest route epoch this host's table has held per
	// task (the epochs-monotone invariant).
	epochs map[task.TID]uint64
}

// captured is what a task's move or job checkpoint carries besides its
// program state: a checkpoint's meta (package ckpt), the fields the
// simulation keeps filled as metaOf fills them, and the incarnation it
// ends (its restore is the next).
type captured struct {
	ckpt.Meta
	inc int
}

// metaOf is what a checkpoint of st carries besides its program state,
// at route epoch epoch (daemon/jobckpt.go's metaLocked): who it is, its
// mailbox and reliable delivery's state here. Groups and watches stay
// with the master's registry.
func (h *shost) metaOf(st *stask, epoch uint64) captured {
	m := captured{Meta: ckpt.Meta{Type: st.typ, TID: st.tid, Parent: st.parent, Job: st.job, Epoch: epoch,
		Mailbox: slices.Clone(st.mb), OutSeq: h.node.Outbox().SenderState(st.tid), Siblings: st.siblings}, inc: st.inc}
	m.InSeq, m.Early = h.node.Inbox().ReceiverState(st.tid)
	return m
}

// leaving is a task suspended here (the origin) while it moves.
type leaving struct {
	meta    captured
	t       task.Task // the program's state, as it was at the safe point
	move    move.ID
	dest    routing.Route
	held    []heldMsg
	waiters []func() // resumes waiting for the checkpoint's write

	// state is t encoded, once (encoded): the checkpoint carries it, and
	// a resume decodes its copy of the task from it.
	state   []byte
	encErr  error
	encDone bool
}

// encoded is the departing task's state, encoded with msgpack as a
// checkpoint's is, on the first call only.
func (l *leaving) encoded() ([]byte, error) {
	if !l.encDone {
		_, l.state, l.encErr = task.EncodeState(l.t)
		l.encDone = true
	}
	return l.state, l.encErr
}

// arriving is a task prepared here (the destination) for a move.
type arriving struct {
	typ   string
	move  move.ID
	job   uint64
	epoch uint64
	from  task.HostID
	held  []heldMsg
	// ckpt is the checkpoint, once its stream has come: the program's
	// state encoded by the origin, and what moves with it.
	ckpt      *captured
	ckptState []byte
}

type heldMsg struct {
	host task.HostID // the daemon to acknowledge to
	env  routing.Envelope
}

func newHost(w *world, id task.HostID) *shost {
	h := &shost{
		w: w, id: id, name: nodeName(id), node: host.New(),
		tasks: map[task.TID]*stask{}, leaving: map[task.TID]*leaving{}, arriving: map[task.TID]*arriving{},
		gone: map[task.TID]bool{}, epochs: map[task.TID]uint64{}, inc: 1,
	}
	if w.demand() {
		h.cache = route.New(id, route.Config{Retry: rto})
	}
	return h
}

// stepMove feeds the host half of moves through the node's one seam,
// with what the task table knows of the task (as daemon/hosting.go's
// stepMove and localLocked do).
func (h *shost) stepMove(e move.HostEvent) []move.HostEffect {
	if e.TID != 0 && e.Kind != move.EvSafePoint {
		l := move.Local{Route: e.Local.Route}
		if st := h.tasks[e.TID]; st != nil {
			l.Running, l.Type, l.Job, l.Arrived, l.Quiet = true, st.typ, st.job, st.arrived, st.quiet
		}
		if a := h.arriving[e.TID]; a != nil && a.move == 0 {
			l.Restoring = true
		}
		e.Local = l
	}
	fx := host.MoveEffects(h.node.Step(h.w.clock(), host.Event{Kind: host.EvMove, Move: e}))
	return fx
}

// answerOf is a step's answer among its effects: the last one, DoOK if
// none (daemon/hosting.go's stepAnswer).
func answerOf(fx []move.HostEffect) move.HostEffect {
	if len(fx) == 0 {
		return move.HostEffect{Kind: move.DoOK}
	}
	return fx[len(fx)-1]
}

// placeOf is where a message for to goes from here (daemon/remote.go's
// placeOf).
func (h *shost) placeOf(to task.TID) (routing.Route, *stask) {
	r := h.node.Routes().Lookup(to)
	st := h.tasks[to]
	if st == nil {
		l, arr := h.leaving[to], h.arriving[to]
		switch {
		case l != nil && r.Epoch < l.dest.Epoch:
			r = l.dest
			r.InTransit = true
		case l != nil && r.Host == h.id:
			r.InTransit = true
		case arr != nil && r.Host == h.id:
			r = routing.Route{Host: h.id, Epoch: r.Epoch, InTransit: true}
		}
	}
	return r, st
}

// sendMsg is a task's send (daemon/remote.go's sendMsg, without the
// window and the mailbox's back-pressure).
func (h *shost) sendMsg(from, to task.TID, tag int, p task.Payload) {
	r, st := h.placeOf(to)
	if r.Host == h.id && !r.InTransit {
		if st == nil {
			h.w.note(fmt.Sprintf("%v: send %v→%v dropped: exited", h.name, from, to))
			return
		}
		e := routing.Envelope{From: from, To: to, Seq: h.node.Outbox().Seq(from, to), Tag: int32(tag), Body: p}
		h.node.Inbox().Accept(e, func(x routing.Envelope) { h.put(st, x) })
		return
	}
	e := routing.Envelope{From: from, To: to, Seq: h.node.Outbox().Seq(from, to), Tag: int32(tag), Body: p}
	if h.cache != nil && !r.InTransit && h.cache.Gone(r) {
		// On demand, a route to a deleted host (or to the incarnation of
		// a host back that was deleted) leads nowhere: hold the message
		// and ask.
		r.InTransit = true
		h.node.Outbox().Push(e, r, h.w.clock())
		h.cacheStep(route.Event{Kind: route.EvHeld, TID: to, Using: r})
		return
	}
	if h.node.Outbox().Push(e, r, h.w.clock()) {
		h.transmit(r.Host, []routing.Envelope{e})
	}
	h.armRTO()
}

// put delivers e into st's mailbox, checking the pair's order.
func (h *shost) put(st *stask, e routing.Envelope) {
	if h.crashed || h.w.host(h.id) != h || st.host != h || h.tasks[st.tid] != st {
		// A frame for a host's old incarnation, or for a task's, reached
		// a mailbox.
		h.w.fail(fmt.Errorf("%w: %v (incarnation %d) delivered %s to %v's incarnation %d on %v (incarnation %d)",
			ErrInvariant, h.name, h.inc, envLine(e), st.tid, st.inc, st.host.name, st.host.inc))
		return
	}
	if e.Seq != 0 {
		k := [2]task.TID{e.From, e.To}
		if last := h.w.pairs[k]; e.Seq != last+1 {
			h.w.fail(fmt.Errorf("%w: %v delivered message %d of %v→%v after message %d (per-pair FIFO, exactly once)", ErrInvariant, h.name, e.Seq, e.From, e.To, last))
		}
		h.w.pairs[k] = e.Seq
	}
	st.deliver(e)
}

// envLine describes e in the trace: "FROM→TO #SEQ tag TAG".
func envLine(e routing.Envelope) string {
	return e.From.String() + "→" + e.To.String() + " #" + strconv.FormatUint(e.Seq, 10) + " tag " + strconv.Itoa(int(e.Tag))
}

// transmit sends envelopes to host to (daemon/remote.go's transmit).
func (h *shost) transmit(to task.HostID, envs []routing.Envelope) {
	if to == h.id {
		for _, e := range envs {
			st := h.tasks[e.To]
			if arr := h.arriving[e.To]; st == nil && arr != nil {
				arr.held = append(arr.held, heldMsg{host: h.id, env: e})
			}
			if l := h.leaving[e.To]; st == nil && l != nil {
				l.held = append(l.held, heldMsg{host: h.id, env: e})
			}
			if st == nil {
				continue
			}
			a := h.node.Inbox().Accept(e, func(x routing.Envelope) { h.put(st, x) })
			h.node.Outbox().Ack(a)
		}
		return
	}
	dst := h.w.host(to)
	if dst == nil {
		return
	}
	for _, e := range envs {
		h.w.send(h.id, to, classData, "msg "+envLine(e), func() { dst.receiveMsg(h.id, e) })
	}
}

// armRTO schedules the resend timer while anything is unacknowledged
// (on demand, or a query is outstanding: the timer asks again what is
// due).
func (h *shost) armRTO() {
	if h.rtoArmed || h.node.Outbox().Bytes() == 0 && (h.cache == nil || h.cache.Queries() == 0) {
		return
	}
	h.rtoArmed = true
	h.w.after(rto, h, h.name+" resend timer", func() {
		h.rtoArmed = false
		due := h.node.Outbox().Due(h.w.clock(), rto)
		for _, to := range slices.Sorted(maps.Keys(due)) {
			h.transmit(to, due[to])
		}
		if h.cache != nil {
			h.cacheStep(route.Event{Kind: route.EvTick})
		}
		h.armRTO()
	})
}

// receiveMsg takes a message from another daemon (daemon/remote.go's
// receiveMsgs, for one message).
func (h *shost) receiveMsg(from task.HostID, e routing.Envelope) {
	st := h.tasks[e.To]
	l, arr := h.leaving[e.To], h.arriving[e.To]
	back := st == nil && l != nil && h.comingBack(e.To, l)
	switch {
	case st == nil && arr != nil && h.cache != nil && arr.move != 0 && h.node.Routes().Lookup(e.To).Host != h.id:
		// On demand, a prepared arrival keeps only what was sent by the
		// move's route, which the master tells this host before the
		// restore. Before it, the task lives where this host's route
		// says: a sender with an older route is sent there (a prepare
		// whose cancel was lost must not keep messages for ever).
		h.refuse(from, routing.Refusal{To: e.To, Route: h.node.Routes().Lookup(e.To)})
		return
	case st == nil && arr != nil:
		arr.held = append(arr.held, heldMsg{host: from, env: e})
		return
	case back:
		l.held = append(l.held, heldMsg{host: from, env: e})
		return
	}
	if st == nil && l != nil {
		r := l.dest
		r.InTransit = true
		if cur := h.node.Routes().Lookup(e.To); h.cache != nil && cur.Epoch >= l.dest.Epoch && cur.Host != h.id {
			// On demand: the master has set the route; the destination
			// keeps what comes for the task, so the sender need not
			// wait and ask.
			r = cur
		}
		h.refuse(from, routing.Refusal{To: e.To, Route: r})
		return
	}
	if st == nil && h.cache != nil {
		if r := h.node.Routes().Lookup(e.To); r.Host == h.id && h.gone[e.To] {
			h.refuse(from, routing.Refusal{To: e.To}) // exited here
			return
		}
		h.cacheStep(route.Event{Kind: route.EvMiss, TID: e.To, Peer: from})
		return
	}
	if st == nil {
		r := h.node.Routes().Lookup(e.To)
		if r.Host == h.id && (h.gone[e.To] || !r.InTransit) {
			r = routing.Route{}
		}
		h.refuse(from, routing.Refusal{To: e.To, Route: r})
		return
	}
	a := h.node.Inbox().Accept(e, func(x routing.Envelope) { h.put(st, x) })
	h.ack(from, a)
}

// comingBack: a task suspended here whose move aborted, the way back known
// before the resume step came (daemon/remote.go's comingBack).
func (h *shost) comingBack(tid task.TID, l *leaving) bool {
	r := h.node.Routes().Lookup(tid)
	return r.Host == h.id && r.Epoch > l.dest.Epoch
}

func (h *shost) ack(to task.HostID, a routing.Ack) {
	if to == h.id {
		h.node.Outbox().Ack(a)
		return
	}
	dst := h.w.host(to)
	h.w.send(h.id, to, classData, fmt.Sprintf("ack %v→%v #%d", a.From, a.To, a.Seq), func() { dst.node.Outbox().Ack(a) })
}

func (h *shost) refuse(to task.HostID, rf routing.Refusal) {
	dst := h.w.host(to)
	h.w.send(h.id, to, classData, fmt.Sprintf("refuse %v route %v e%d t%v", rf.To, nodeName(rf.Route.Host), rf.Route.Epoch, rf.Route.InTransit), func() {
		dst.receiveRefusal(h.id, rf)
	})
}

// receiveRefusal is daemon/remote.go's receiveRefusals, for one.
func (h *shost) receiveRefusal(from task.HostID, rf routing.Refusal) {
	if h.cache != nil {
		using, _, ok := h.node.Outbox().Route(rf.To)
		if !ok {
			return // nothing is queued for the task any more
		}
		h.cacheStep(route.Event{Kind: route.EvRefused, TID: rf.To, Peer: from, Route: rf.Route, Using: using})
		return
	}
	h.updateRoute(rf.To, rf.Route)
	if to, envs := h.node.Outbox().Refused(rf, from, h.w.clock()); len(envs) > 0 {
		h.transmit(to, envs)
	}
	h.armRTO()
}

// updateRoute applies a route to the host's table (and its cache: a
// route from a move's own steps, which the master set).
func (h *shost) updateRoute(tid task.TID, r routing.Route) bool {
	if h.cache != nil {
		h.cache.Step(h.w.clock(), route.Event{Kind: route.EvSet, TID: tid, Route: r})
	}
	return h.node.Routes().Update(tid, r)
}

// applyRoute installs a route from the master's broadcast and resends
// what was held for the task (daemon/remote.go's applyRoutes): the outbox
// follows the newest route known, even when the table knew it already.
func (h *shost) applyRoute(tid task.TID, r routing.Route) {
	if h.cache != nil {
		h.cache.Step(h.w.clock(), route.Event{Kind: route.EvSet, TID: tid, Route: r})
	}
	h.node.Step(h.w.clock(), host.Event{Kind: host.EvRoute, TID: tid, Route: r})
	r = h.node.Routes().Lookup(tid)
	if h.arriving[tid] != nil && r.Host == h.id {
		return // what is held here for it is released when it is restored
	}
	if to, envs := h.node.Outbox().Reroute(tid, r, h.w.clock()); len(envs) > 0 {
		h.transmit(to, envs)
	}
	h.armRTO()
}

// startTask puts a new task into service here.
func (h *shost) startTask(st *stask) {
	h.tasks[st.tid] = st
	st.start()
}

// taskEnded deals with st's goroutine's end: a task captured for a move
// lives on in its departure; otherwise it has exited here.
func (h *shost) taskEnded(st *stask) {
	if st.suspended {
		return
	}
	if h.tasks[st.tid] != st {
		return // no longer in service here (a stale incarnation)
	}
	delete(h.tasks, st.tid)
	h.gone[st.tid] = true
	h.node.Step(h.w.clock(), host.Event{Kind: host.EvExited, TID: st.tid})
	h.stepMove(move.HostEvent{Kind: move.EvGone, TID: st.tid})
	_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostGone, Job: st.job, TID: st.tid, JobLeft: len(h.tasks) == 0}), nil)
	if p := st.moveReq; p != nil {
		st.moveReq = nil
		err := fmt.Errorf("%v: %w", st.tid, task.ErrNoSuchTask)
		p.reply(suspendOutcome(err), err)
	}
	if st.quiet {
		return // killed for the job's rollback: no exit to tell
	}
	h.w.master.exited(st)
}

// capture is the task's safe point meeting a move's suspend request
// (daemon/migrate.go's suspend): the host half decides; on DoCapture the
// task leaves service with its mailbox and delivery state, and its
// goroutine ends with ErrSuspended.
func (h *shost) capture(st *stask, req *moveReq) error {
	x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvSafePoint, TID: st.tid, Move: req.move, Route: req.dest,
		Local: move.Local{Running: h.tasks[st.tid] == st, Type: st.typ, Job: st.job, Quiet: st.quiet}}))
	if x.Kind == move.DoRefuse {
		req.reply(suspendOutcome(x.Err), x.Err)
		return x.Err
	}
	delete(h.tasks, st.tid)
	m := h.metaOf(st, req.dest.Epoch)
	h.node.Inbox().Forget(st.tid)
	h.node.Outbox().ForgetSender(st.tid)
	st.mb = nil
	st.suspended = true
	h.leaving[st.tid] = &leaving{meta: m, t: st.t, move: req.move, dest: x.Route}
	req.reply(move.OK, nil)
	return task.ErrSuspended
}

// install puts a task restored from m and t into service here
// (daemon/migrate.go's install): from its arrival arr, or back from its
// departure left.
func (h *shost) install(m captured, t task.Task, arr *arriving, left *leaving) error {
	tid := m.TID
	refused := (arr != nil && h.arriving[tid] != arr) || (left != nil && h.leaving[tid] != left)
	var err error
	switch {
	case refused:
	case arr != nil && arr.move != 0:
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvInstall, TID: tid, Move: arr.move, Route: routing.Route{Epoch: m.Epoch}, Type: m.Type}))
		refused, err = x.Kind == move.DoRefuse, x.Err
	case left != nil:
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvInstall, TID: tid, Move: left.move, Back: true}))
		refused, err = x.Kind == move.DoRefuse, x.Err
	}
	if refused {
		if err == nil {
			err = fmt.Errorf("%v: its move was cancelled: %w", tid, move.ErrAborted)
		}
		return err
	}
	st := h.w.newTask(h, tid, m.Parent, m.Type, m.Job, t, m.inc+1)
	st.siblings = m.Siblings
	st.mb = append(st.mb, m.Mailbox...)
	h.node.Inbox().SetReceiverState(tid, m.InSeq, m.Early)
	h.node.Outbox().SetSenderState(tid, m.OutSeq)
	var held []heldMsg
	if arr != nil {
		held = arr.held
		st.arrived = arr.move
		delete(h.arriving, tid)
	}
	if left != nil {
		held = append(held, left.held...)
		delete(h.leaving, tid)
	}
	h.tasks[tid] = st
	h.w.master.located(tid, st)
	for _, x := range held {
		a := h.node.Inbox().Accept(x.env, func(e routing.Envelope) { h.put(st, e) })
		h.ack(x.host, a)
	}
	if r := h.node.Routes().Lookup(tid); r.Host == h.id {
		_, local := h.node.Outbox().Reroute(tid, r, h.w.clock())
		for _, e := range local {
			a := h.node.Inbox().Accept(e, func(x routing.Envelope) { h.put(st, x) })
			h.node.Outbox().Ack(a)
		}
	}
	st.start()
	return nil
}

// errNoSafePoint: a suspend request withdrawn, no safe point having come
// in time.
var errNoSafePoint = errors.New("no safe point within the suspend timeout")

// step performs a move's step at this host (the daemon's control
// handlers in daemon/migrate.go) and answers it with reply.
func (h *shost) step(a move.Action, from task.HostID, typ string, job uint64, reply func(o move.Outcome, err error)) {
	tid := a.TID
	switch a.Step {
	case move.StepPrepare:
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvPrepare, TID: tid, Move: a.Move,
			Route: routing.Route{Host: h.id, Epoch: a.Route.Epoch}, Peer: from, Job: job, Type: typ}))
		if x.Kind == move.DoRefuse {
			reply(move.Failed, x.Err)
			return
		}
		h.arriving[tid] = &arriving{typ: typ, move: a.Move, job: job, epoch: a.Route.Epoch, from: from}
		reply(move.OK, nil)
	case move.StepSuspend:
		cur := h.node.Routes().Lookup(tid).Epoch
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvSuspend, TID: tid, Move: a.Move,
			Route: a.Route, Type: typ, Job: job, Local: move.Local{Route: cur}}))
		switch x.Kind {
		case move.DoRefuse:
			reply(suspendOutcome(x.Err), x.Err)
			return
		case move.DoOK:
			reply(move.OK, nil)
			return
		}
		st := h.tasks[tid]
		if st.moveReq != nil {
			reply(move.Failed, fmt.Errorf("%v: %w", tid, move.ErrMoving))
			return
		}
		req := &moveReq{move: a.Move, dest: a.Route}
		answered := false
		req.reply = func(o move.Outcome, err error) {
			if !answered {
				answered = true
				reply(o, err)
			}
		}
		st.moveReq = req
		if st.park != nil && st.park.kind == parkSafe {
			st.wake(answer{}) // out of RecvSafe, to its safe point
		}
		h.w.after(moveTimeouts.Suspend, h, fmt.Sprintf("%v suspend timeout %v %v", h.name, a.Move, tid), func() {
			if st.moveReq == req {
				st.moveReq = nil
				req.reply(move.Refused, fmt.Errorf("%v within %v: %w", tid, moveTimeouts.Suspend, errNoSafePoint))
			}
		})
	case move.StepSend:
		h.sendCheckpoint(a, reply)
	case move.StepRestore:
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvRestore, TID: tid, Move: a.Move}))
		arr := h.arriving[tid]
		switch {
		case x.Kind == move.DoRefuse:
			reply(move.Failed, x.Err)
			return
		case arr == nil || arr.ckpt == nil:
			reply(move.Failed, fmt.Errorf("%v: no checkpoint arrived", tid))
			return
		}
		t, err := task.New(arr.ckpt.Type, arr.ckptState)
		if err != nil {
			reply(move.Failed, fmt.Errorf("restore %v: %w", tid, err))
			return
		}
		if err := h.install(*arr.ckpt, t, arr, nil); err != nil {
			reply(move.Failed, fmt.Errorf("restore %v: %w", tid, err))
			return
		}
		reply(move.OK, nil)
	case move.StepCommit:
		x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvCommit, TID: tid, Move: a.Move}))
		if x.Kind == move.DoForget {
			delete(h.leaving, tid)
			// The task runs at the destination: the route there applies
			// here now, whether or not the master's broadcast of it has
			// come (without it, this host would take the task for one
			// that exited here and drop its tasks' messages to it).
			h.applyRoute(tid, x.Route)
		}
		reply(move.OK, nil)
	case move.StepResume:
		h.resume(a, reply)
	case move.StepCancel:
		h.cancel(a, reply)
	default:
		reply(move.Failed, fmt.Errorf("step %v: unknown", a.Step))
	}
}

// suspendOutcome is the outcome of a suspend answered with err
// (daemon/migrate.go's suspendRefused).
func suspendOutcome(err error) move.Outcome {
	if errors.Is(err, errNoSafePoint) || errors.Is(err, task.ErrNoSuchTask) || errors.Is(err, move.ErrAborted) {
		return move.Refused
	}
	return move.Failed
}

// sendCheckpoint writes a suspended task's checkpoint to the destination
// on a stream (daemon/migrate.go's sendCheckpoint, direct): the program's
// state is encoded with msgpack as a real checkpoint's is.
func (h *shost) sendCheckpoint(a move.Action, reply func(o move.Outcome, err error)) {
	tid := a.TID
	x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvSend, TID: tid, Move: a.Move}))
	l := h.leaving[tid]
	if x.Kind == move.DoRefuse || l == nil {
		err := x.Err
		if err == nil {
			err = fmt.Errorf("%v: no state kept for its departure", tid)
		}
		reply(move.Failed, err)
		return
	}
	sent := func(err error) {
		h.stepMove(move.HostEvent{Kind: move.EvSent, TID: tid, Move: l.move})
		ws := l.waiters
		l.waiters = nil
		for _, fn := range ws {
			fn()
		}
		if err != nil {
			reply(move.Failed, err)
			return
		}
		reply(move.OK, nil)
	}
	state, err := l.encoded()
	if err != nil {
		sent(fmt.Errorf("checkpoint of %v: %w", tid, err))
		return
	}
	dst := h.w.host(x.Route.Host)
	meta := l.meta
	h.w.send(h.id, dst.id, classRoute, fmt.Sprintf("checkpoint %v %v (%d B)", tid, a.Move, len(state)), func() {
		y := answerOf(dst.stepMove(move.HostEvent{Kind: move.EvStream, TID: tid, Move: a.Move, Route: routing.Route{Epoch: x.Route.Epoch}, Peer: h.id}))
		var err error
		if y.Kind == move.DoRefuse {
			err = y.Err
		} else if arr := dst.arriving[tid]; arr != nil {
			arr.ckpt, arr.ckptState = &meta, state
		}
		h.w.send(dst.id, h.id, classRoute, fmt.Sprintf("checkpoint %v %v written", tid, a.Move), func() { sent(err) })
	})
}

// resume aborts a move at the origin (daemon/migrate.go's
// resumeDeparture): the task runs here again from the state it was
// suspended with.
func (h *shost) resume(a move.Action, reply func(o move.Outcome, err error)) {
	tid := a.TID
	x := answerOf(h.stepMove(move.HostEvent{Kind: move.EvResume, TID: tid, Move: a.Move, Route: a.Route}))
	l := h.leaving[tid]
	switch {
	case x.Kind == move.DoRefuse:
		reply(move.Failed, x.Err)
		return
	case x.Kind == move.DoWait:
		if l == nil {
			reply(move.Failed, fmt.Errorf("resume %v: no checkpoint write kept for its departure", tid))
			return
		}
		l.waiters = append(l.waiters, func() { h.resume(a, reply) })
		return
	case x.Kind != move.DoResume || l == nil:
		reply(move.OK, nil)
		return
	}
	h.updateRoute(tid, x.Route)
	m := l.meta
	// The task runs again from a decoded copy of its state, as after a
	// restore: the object Run left at the safe point may hold what its
	// checkpoint does not (a communicator's replay position), and Run
	// re-enters expecting what a checkpoint gives it. The copy comes from
	// the bytes the checkpoint's send encoded, if it came. A state that
	// does not encode (the move may have failed for it) resumes as it
	// is, as in daemon/migrate.go's resumeDeparture.
	t := l.t
	if state, err := l.encoded(); err == nil {
		if c, err := task.New(m.Type, state); err == nil {
			t = c
		}
	}
	if err := h.install(m, t, nil, l); err != nil {
		reply(move.Failed, err)
		return
	}
	reply(move.OK, nil)
}

// cancel aborts a move at the destination (daemon/migrate.go's
// cancelArrival).
func (h *shost) cancel(a move.Action, reply func(o move.Outcome, err error)) {
	tid, back := a.TID, a.Route
	var arr *arriving
	for _, x := range h.stepMove(move.HostEvent{Kind: move.EvCancel, TID: tid, Move: a.Move, Route: back}) {
		switch x.Kind {
		case move.DoInstalled:
			reply(move.Installed, nil)
			return
		case move.DoDropArrival:
			arr = h.arriving[tid]
			delete(h.arriving, tid)
		case move.DoSetRoute:
			back = x.Route
		}
	}
	h.updateRoute(tid, back)
	if arr != nil {
		for _, x := range arr.held {
			if x.host != h.id {
				h.refuse(x.host, routing.Refusal{To: tid, Route: back})
			}
		}
	}
	if to, envs := h.node.Outbox().Reroute(tid, back, h.w.clock()); len(envs) > 0 {
		h.transmit(to, envs)
	}
	h.armRTO()
	reply(move.OK, nil)
}
