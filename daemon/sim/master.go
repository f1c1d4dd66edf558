package sim

import (
	"fmt"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// master is the simulated master: the real master node
// (routing/master.Node) in a shell that performs its effects as the
// daemon does: each call a control call to a host over the simulated
// net, bounded by its timeout, whose outcome (or timeout) is fed back as
// an event; routes sent; timers set; tasks' incarnations started and
// stopped. The node owns the registry of tasks, placement, groups,
// barriers and watches, the route table, the move machine and the job's
// checkpoint coordinator; the shell keeps the tasks' incarnations, the
// checkpoint sets' contents (the shared directory) and what waits for a
// move.
type master struct {
	w    *world
	node *mnode.Node

	incs map[task.TID]*stask // each task's incarnation in service (or last in service)

	ck      *ckState
	waiters map[move.ID]func(error) // a move's caller, told of its end
	calls   map[uint64]bool         // control calls awaiting their answer
	callSeq uint64
	// backAt holds, on demand, the hosts deleted that were readmitted,
	// each with the epoch clock at its return (route.EvHostUp), for the
	// caches of incarnations that start later.
	backAt map[task.HostID]uint64
	// down: the master crashed (FaultMaster); its node hears and does
	// nothing from then on.
	down bool
}

// job is the one job a run has.
const job = 1

// newMaster is w's master, with the master node for w's hosts.
func newMaster(w *world) *master {
	hosts := make([]task.HostID, len(w.hosts))
	for i, h := range w.hosts {
		hosts[i] = h.id
	}
	m := &master{
		w: w, node: mnode.New(mnode.Config{Timeouts: moveTimeouts, TickEvery: tickEvery, Demand: w.demand()}, hosts),
		incs:    map[task.TID]*stask{},
		waiters: map[move.ID]func(error){}, calls: map[uint64]bool{}, backAt: map[task.HostID]uint64{},
		ck: &ckState{sets: map[uint64]*ckptSet{}, pending: map[uint64]*ckptSet{}},
	}
	m.do(m.step(mnode.Event{Kind: mnode.EvJobStart, Job: job, Jobck: jobck.Config{EndLost: true}}))
	return m
}

// step feeds the master node one event at the current virtual time.
// A crashed master hears nothing and does nothing.
func (m *master) step(e mnode.Event) []mnode.Effect {
	if m.down {
		return nil
	}
	return m.node.Step(m.w.clock(), e)
}

// task is the registry's record of tid (nil: none).
func (m *master) task(tid task.TID) *mnode.Task { return m.node.Task(tid) }

// order is every task spawned, in order.
func (m *master) order() []task.TID { return m.node.Order() }

// rtt is a call's round trip to the master.
func (m *master) rtt() time.Duration { return m.w.dur(100*time.Microsecond, 400*time.Microsecond) }

// startRoot starts the program's root task on the first host.
func (w *world) startRoot(root task.Task) {
	typ, err := task.TypeName(root)
	if err != nil {
		w.fail(err)
		return
	}
	h := w.hosts[0]
	m := w.master
	fx := m.step(mnode.Event{Kind: mnode.EvSpawn, Job: job, Type: typ, Count: 1, Host: h.id})
	tid := fx[0].TID
	w.rootTID = tid
	st := w.newTask(h, tid, 0, typ, job, root, 1)
	m.incs[tid] = st
	w.note(fmt.Sprintf("start root %v %s on %v", tid, typ, h.name))
	h.startTask(st)
}

// spawn places and starts req's tasks (round robin over the hosts, or
// on the host named).
func (m *master) spawn(parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	var at task.HostID
	if req.Host != "" {
		h := m.w.hostByName(req.Host)
		if h == nil {
			return nil, fmt.Errorf("no host %q: %w", req.Host, task.ErrNoSuchTask)
		}
		at = h.id
	}
	ts := make([]task.Task, req.Count)
	for i := range ts {
		t, err := task.New(req.Type, req.State)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	var tids []task.TID
	var started []*stask
	for i, x := range m.step(mnode.Event{Kind: mnode.EvSpawn, Parent: parent, Job: job, Type: req.Type, Count: req.Count, Host: at}) {
		if x.Kind == mnode.FxRefuse {
			return tids, x.Err
		}
		h := m.w.host(x.Host)
		st := m.w.newTask(h, x.TID, parent, req.Type, job, ts[i], 1)
		m.incs[x.TID] = st
		m.w.note(fmt.Sprintf("spawn %v %s on %v", x.TID, req.Type, h.name))
		h.startTask(st)
		tids = append(tids, x.TID)
		started = append(started, st)
	}
	// The spawn's tasks run once the spawner yields.
	for _, st := range started {
		st.siblings = tids
	}
	m.meterSpawn(parent, req, started, tids)
	return tids, nil
}

// meterSpawn counts a spawn's messages to and from the master in a scale
// run, as daemon/master.go's spawn sends them: the spawner's call (from
// its host), a start call to each host the tasks were placed on with its
// answer, and the answer to the spawner. (A spawn spread over hosts also
// releases its tasks with a call to each host, mSiblings: the scale run's
// spawns start one task each, and the simulation does not count those.)
func (m *master) meterSpawn(parent task.TID, req task.SpawnRequest, started []*stask, tids []task.TID) {
	mt := m.w.meter
	if mt == nil {
		return
	}
	now := m.w.now
	mt.in(KindSpawn, 1, mt.wire.SpawnCall(parent, req.Type, len(req.State), req.Count))
	var hosts []task.HostID
	on := map[task.HostID][]task.TID{}
	for _, st := range started {
		if on[st.host.id] == nil {
			hosts = append(hosts, st.host.id)
		}
		on[st.host.id] = append(on[st.host.id], st.tid)
	}
	for _, h := range hosts {
		mt.out(KindStart, h, mt.wire.StartCall(parent, req.Type, len(req.State), len(on[h])), now)
		mt.in(KindStart, 1, mt.wire.TIDsReply(on[h]))
	}
	if p := m.incs[parent]; p != nil {
		mt.out(KindSpawn, p.host.id, mt.wire.TIDsReply(tids), now)
	}
}

// located records st as tid's incarnation in service (a restore); a task
// killed while it moved ends at once.
func (m *master) located(tid task.TID, st *stask) {
	if m.task(tid) == nil {
		return
	}
	m.incs[tid] = st
	for _, x := range m.step(mnode.Event{Kind: mnode.EvLocated, TID: tid}) {
		if x.Kind == mnode.FxKill {
			st.killed = true
			st.stop()
		}
	}
}

// kill ends tid.
func (m *master) kill(tid task.TID) error {
	for _, x := range m.step(mnode.Event{Kind: mnode.EvKill, TID: tid}) {
		switch x.Kind {
		case mnode.FxRefuse:
			return x.Err
		case mnode.FxKill:
			m.w.note(fmt.Sprintf("kill %v", tid))
			if st := m.incs[tid]; st != nil && !st.ended {
				st.killed = true
				st.stop()
				if st.park != nil {
					st.wake(answer{err: fmt.Errorf("%v: %w", tid, task.ErrKilled)})
				}
			}
		}
	}
	return nil
}

// exited records that st ended: watchers are told, its groups let go of
// it (the node), and the root's end ends the run.
func (m *master) exited(st *stask) {
	fx := m.step(mnode.Event{Kind: mnode.EvExited, TID: st.tid})
	if len(fx) == 0 {
		return // unknown, or ended already
	}
	status := st.exitStatus()
	m.w.note(fmt.Sprintf("exit %v status %d", st.tid, status))
	for _, x := range fx {
		if x.Kind != mnode.FxNotify {
			continue
		}
		n := task.Notice{Kind: task.TaskExit, TID: st.tid, Status: status}
		if st.runErr != nil && status != 0 {
			n.Err = st.runErr.Error()
		}
		p, err := task.Encode(n)
		if err != nil {
			m.w.fail(err)
			return
		}
		m.notice(routing.Envelope{From: st.tid, To: x.To, Tag: int32(x.Tag), Body: p})
	}
	if st.tid == m.w.rootTID {
		m.w.rootDone = true
		m.w.status = status
		m.w.rootErr = st.runErr
	}
}

// notice delivers an unsequenced notice to its receiver where it runs,
// once it is in service (a notice waits out a move).
func (m *master) notice(e routing.Envelope) {
	m.w.after(m.rtt(), nil, fmt.Sprintf("notice %v→%v tag %d", e.From, e.To, e.Tag), func() {
		mt, st := m.task(e.To), m.incs[e.To]
		switch {
		case mt == nil || mt.Exited:
		case st == nil || st.suspended || st.ended:
			m.notice(e)
		default:
			st.deliver(e)
		}
	})
}

func (m *master) watch(tid, who task.TID, tag int) {
	for _, x := range m.step(mnode.Event{Kind: mnode.EvWatch, TID: tid, Who: who, Tag: tag}) {
		if x.Kind != mnode.FxNotify {
			continue
		}
		n := task.Notice{Kind: task.TaskExit, TID: tid, Status: -1}
		if x.Err != nil {
			n.Err = x.Err.Error() // no such task
		} else {
			n.Status = m.incs[tid].exitStatus()
		}
		p, err := task.Encode(n)
		if err == nil {
			m.notice(routing.Envelope{From: tid, To: x.To, Tag: int32(x.Tag), Body: p})
		}
	}
}

// join adds tid to group at its lowest free instance.
func (m *master) join(group string, tid task.TID) (int, error) {
	x := m.step(mnode.Event{Kind: mnode.EvJoin, Group: group, TID: tid})[0]
	return x.Count, x.Err
}

func (m *master) leave(group string, tid task.TID) error {
	return m.step(mnode.Event{Kind: mnode.EvLeave, Group: group, TID: tid})[0].Err
}

func (m *master) members(group string) ([]task.TID, error) { return m.node.Members(group) }

// barrier records st's arrival at group's barrier of count; it reports
// whether the barrier is complete (the others waiting are released), or
// the node's refusal.
func (m *master) barrier(group string, count int, st *stask) (bool, error) {
	for _, x := range m.step(mnode.Event{Kind: mnode.EvBarrier, Group: group, Count: count, TID: st.tid}) {
		if x.Kind == mnode.FxAnswer {
			return false, x.Err
		}
		if x.Kind != mnode.FxRelease {
			continue
		}
		for _, tid := range x.TIDs {
			if o := m.incs[tid]; o != nil && o.park != nil && o.park.kind == parkBarrier {
				o.wake(answer{})
			}
		}
		return true, nil
	}
	return false, nil
}

// randomMove moves a live task, drawn from the seed, to another host.
func (m *master) randomMove() { m.randomMoveTo(0) }

// randomMoveTo moves a live task, drawn from the seed, to host to (0: to
// another host drawn from the seed).
func (m *master) randomMoveTo(to task.HostID) {
	var live []task.TID
	for _, tid := range m.order() {
		if mt := m.task(tid); !mt.Exited && !mt.Killed && !m.node.Lost(m.node.Routes().Lookup(tid).Host) {
			live = append(live, tid)
		}
	}
	alive := m.node.Alive()
	if len(live) == 0 || len(alive) < 2 || m.rollingBack() {
		return
	}
	tid := live[m.w.rng.IntN(len(live))]
	from := m.node.Routes().Lookup(tid).Host
	if to == from {
		return
	}
	for to == 0 || to == from {
		to = alive[m.w.rng.IntN(len(alive))]
	}
	if err := m.startMove(tid, to, nil); err != nil {
		m.w.note(fmt.Sprintf("move %v refused: %v", tid, err))
	}
}

// startMove starts a move of tid to host to; done (if not nil) is called
// with the move's outcome.
func (m *master) startMove(tid task.TID, to task.HostID, done func(error)) error {
	fx := m.step(mnode.Event{Kind: mnode.EvMove, TID: tid, Host: to})
	for _, x := range fx {
		switch x.Kind {
		case mnode.FxRefuse:
			return x.Err
		case mnode.FxMoveStarted:
			if done != nil {
				m.waiters[x.MoveID] = done
			}
		}
	}
	m.do(fx)
	return nil
}

// do performs the master node's effects, in order, and returns the
// first refusal among them (what it means is the caller's: the event
// it fed).
func (m *master) do(fx []mnode.Effect) error {
	var refused error
	for _, x := range fx {
		switch x.Kind {
		case mnode.FxRefuse:
			if refused == nil {
				refused = x.Err
			}
		case mnode.FxMoveStarted:
			m.w.take(fmt.Sprintf("move %v %v %v→%v", x.MoveID, x.TID, nodeName(x.From), nodeName(x.Host)))
		case mnode.FxMove:
			m.doMove(x)
		case mnode.FxRoute:
			m.sendRoute(x)
		case mnode.FxHostGone:
			m.w.take("host lost " + nodeName(x.Host))
			m.tellLost(x.Host, x.Hosts)
		case mnode.FxTimer:
			m.setTimer(x.Timer, x.At)
		default:
			m.doJob(x)
		}
	}
	return refused
}

// doMove performs an action of the move machine (daemon/migrate.go's
// perform).
func (m *master) doMove(x mnode.Effect) {
	a := x.Move
	switch a.Kind {
	case move.Call:
		m.call(a, x.From, x.Type, x.Job)
	case move.Finish:
		done := m.waiters[a.Move]
		delete(m.waiters, a.Move)
		if a.Err == nil {
			m.w.take(fmt.Sprintf("move %v %v done", a.Move, a.TID))
		} else {
			m.w.take(fmt.Sprintf("move %v %v ended: %v", a.Move, a.TID, a.Err))
		}
		if done != nil {
			done(a.Err)
		}
	case move.Reject:
		m.w.note(fmt.Sprintf("move machine rejected: %v", a.Err))
	}
}

// setTimer feeds timer t back to the node at at.
func (m *master) setTimer(t mnode.Timer, at time.Time) {
	what := "master tick"
	switch t.Kind {
	case mnode.TimerCheckpoint:
		what = "checkpoint timer"
	case mnode.TimerQuiet:
		what = "ck quiet tick"
	}
	m.w.at(at.Sub(base), nil, what, func() {
		m.do(m.step(mnode.Event{Kind: mnode.EvTimer, Timer: t}))
	})
}

// call performs a step of a move at its host, bounded by its timeout,
// and feeds the outcome back to the node.
func (m *master) call(a move.Action, from task.HostID, typ string, jb uint64) {
	m.callSeq++
	id := m.callSeq
	m.calls[id] = true
	h := m.w.host(a.Host)
	result := func(o move.Outcome, err error) {
		if !m.calls[id] {
			return // answered late: the call timed out
		}
		delete(m.calls, id)
		if a.Notify {
			return
		}
		line := fmt.Sprintf("result %v %v %v", a.Move, a.Step, o)
		if err != nil {
			line += ": " + err.Error()
		}
		m.w.note(line)
		m.do(m.step(mnode.Event{Kind: mnode.EvMoveResult, Move: a.Move, Step: a.Step, Outcome: o, Err: err}))
	}
	what := fmt.Sprintf("call %v %v %v", a.Move, a.Step, a.TID)
	kind := ""
	if mt := m.w.meter; mt != nil {
		kind = KindMoveCall + a.Step.String()
		mt.out(kind, a.Host, mt.wire.MoveCall(a.Step, a.Move, a.TID, a.Route, typ, from, jb), m.w.now)
	}
	m.w.send(masterNode, a.Host, classCall, what, func() {
		h.step(a, from, typ, jb, func(o move.Outcome, err error) {
			if mt := m.w.meter; mt != nil {
				n := 0
				if l := h.leaving[a.TID]; l != nil && a.Step == move.StepSend {
					n = len(l.state)
				}
				mt.in(kind, 1, mt.wire.MoveReply(a.Step, n))
			}
			m.w.send(a.Host, masterNode, classCall, fmt.Sprintf("answer %v %v %v", a.Move, a.Step, o), func() { result(o, err) })
		})
	})
	if !a.Notify {
		m.w.after(a.Timeout, nil, fmt.Sprintf("timeout %v %v", a.Move, a.Step), func() {
			result(move.Failed, fmt.Errorf("%v of %v at %v: no answer within %v", a.Step, a.Move, nodeName(a.Host), a.Timeout))
		})
	}
}

// sendRoute sends a route the node set: to every host (broadcast), or to
// the hosts it names (on demand).
func (m *master) sendRoute(x mnode.Effect) {
	tid, r := x.TID, x.Route
	what := fmt.Sprintf("route %v %v e%d t%v", tid, nodeName(r.Host), r.Epoch, r.InTransit)
	mt := m.w.meter
	if !x.All {
		for _, id := range x.Hosts {
			h := m.w.host(id)
			if mt != nil {
				mt.out(KindRoute, id, mt.wire.Route(tid, r), m.w.now)
			}
			m.w.send(masterNode, id, classRoute, what, func() { h.applyRoute(tid, r) })
		}
		return
	}
	size := 0
	if mt != nil {
		size = mt.wire.Route(tid, r)
	}
	for _, h := range m.w.hosts {
		if mt != nil {
			mt.out(KindRoute, h.id, size, m.w.now)
		}
		m.w.send(masterNode, h.id, classRoute, what, func() {
			h.applyRoute(tid, r)
		})
	}
}
