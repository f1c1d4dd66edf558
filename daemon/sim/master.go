package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// master is the simulated master: the registry of tasks, groups and
// barriers, placement, the authoritative route table and the real move
// machine (routing/move), driven as daemon/migrate.go drives it: each
// Call action is a control call to a host, bounded by its timeout, whose
// outcome is fed back as a Result; routes are set and broadcast; a Tick
// runs while moves are under way.
type master struct {
	w      *world
	moves  *move.Machine
	routes *routing.Table

	tasks     map[task.TID]*mtask
	order     []task.TID // every task spawned, in order
	nextHost  int
	nextLocal map[task.HostID]uint32

	groups   map[string][]task.TID // by instance; a free one holds 0
	barriers map[string][]*stask
	watches  map[task.TID][]watch

	ck    *ckState
	lost  map[task.HostID]bool // hosts deemed lost
	alive []task.HostID        // the hosts not lost, in ID order (aliveHosts; nil: to be listed)

	runs    map[move.ID]*moveRun
	calls   map[uint64]bool // control calls awaiting their answer
	callSeq uint64
	ticking bool
}

// mtask is the master's record of a task.
type mtask struct {
	tid, parent task.TID
	typ         string
	job         uint64
	st          *stask // its incarnation in service (or last in service)
	exited      bool
	killed      bool
}

type watch struct {
	who task.TID
	tag int
}

// moveRun is the driver's record of one move (daemon/migrate.go's
// moveRun).
type moveRun struct {
	typ  string
	job  uint64
	from task.HostID
	to   task.HostID
	done func(error)
}

// job is the one job a run has.
const job = 1

func newMaster(w *world) *master {
	return &master{
		w: w, moves: move.New(0, 0), routes: routing.NewTable(),
		tasks: map[task.TID]*mtask{}, nextLocal: map[task.HostID]uint32{},
		groups: map[string][]task.TID{}, barriers: map[string][]*stask{}, watches: map[task.TID][]watch{},
		runs: map[move.ID]*moveRun{}, calls: map[uint64]bool{}, lost: map[task.HostID]bool{},
	}
}

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
	tid := w.master.newTID(h.id)
	w.rootTID = tid
	st := w.newTask(h, tid, 0, typ, job, root, 1)
	w.master.register(st)
	w.note(fmt.Sprintf("start root %v %s on %v", tid, typ, h.name))
	h.startTask(st)
}

func (m *master) newTID(h task.HostID) task.TID {
	m.nextLocal[h]++
	return task.NewTID(h, m.nextLocal[h])
}

func (m *master) register(st *stask) {
	m.tasks[st.tid] = &mtask{tid: st.tid, parent: st.parent, typ: st.typ, job: st.job, st: st}
	m.order = append(m.order, st.tid)
}

// spawn places and starts req's tasks (round robin over the hosts, or
// on the host named).
func (m *master) spawn(parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	var at *shost
	if req.Host != "" {
		if at = m.w.hostByName(req.Host); at == nil {
			return nil, fmt.Errorf("no host %q: %w", req.Host, task.ErrNoSuchTask)
		}
	}
	var tids []task.TID
	var started []*stask
	defer func() { // the spawn's tasks run once the spawner yields
		for _, st := range started {
			st.siblings = tids
		}
	}()
	for range req.Count {
		t, err := task.New(req.Type, req.State)
		if err != nil {
			return tids, err
		}
		h := at
		if h == nil {
			alive := m.aliveHosts()
			h = m.w.host(alive[m.nextHost%len(alive)])
			m.nextHost++
		}
		tid := m.newTID(h.id)
		st := m.w.newTask(h, tid, parent, req.Type, job, t, 1)
		m.register(st)
		m.w.note(fmt.Sprintf("spawn %v %s on %v", tid, req.Type, h.name))
		h.startTask(st)
		tids = append(tids, tid)
		started = append(started, st)
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
	if p := m.tasks[parent]; p != nil && p.st != nil {
		mt.out(KindSpawn, p.st.host.id, mt.wire.TIDsReply(tids), now)
	}
}

// located records st as tid's incarnation in service (a restore); a task
// killed while it moved ends at once.
func (m *master) located(tid task.TID, st *stask) {
	mt := m.tasks[tid]
	if mt == nil {
		return
	}
	mt.st = st
	if mt.killed {
		st.killed = true
		st.stop()
	}
}

// kill ends tid.
func (m *master) kill(tid task.TID) error {
	mt := m.tasks[tid]
	if mt == nil {
		return fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
	}
	if mt.exited {
		return nil
	}
	mt.killed = true
	m.w.note(fmt.Sprintf("kill %v", tid))
	if st := mt.st; st != nil && !st.ended {
		st.killed = true
		st.stop()
		if st.park != nil {
			st.wake(answer{err: fmt.Errorf("%v: %w", tid, task.ErrKilled)})
		}
	}
	return nil
}

// exited records that st ended: watchers are told, its groups let go of
// it, and the root's end ends the run.
func (m *master) exited(st *stask) {
	mt := m.tasks[st.tid]
	if mt == nil || mt.exited {
		return
	}
	mt.exited = true
	status := st.exitStatus()
	m.w.note(fmt.Sprintf("exit %v status %d", st.tid, status))
	for _, g := range slices.Sorted(maps.Keys(m.groups)) {
		for i, t := range m.groups[g] {
			if t == st.tid {
				m.groups[g][i] = 0
			}
		}
	}
	for _, wt := range m.watches[st.tid] {
		n := task.Notice{Kind: task.TaskExit, TID: st.tid, Status: status}
		if st.runErr != nil && status != 0 {
			n.Err = st.runErr.Error()
		}
		p, err := task.Encode(n)
		if err != nil {
			m.w.fail(err)
			return
		}
		m.notice(routing.Envelope{From: st.tid, To: wt.who, Tag: int32(wt.tag), Body: p})
	}
	delete(m.watches, st.tid)
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
		mt := m.tasks[e.To]
		switch {
		case mt == nil || mt.exited:
		case mt.st == nil || mt.st.suspended || mt.st.ended:
			m.notice(e)
		default:
			mt.st.deliver(e)
		}
	})
}

func (m *master) watch(tid, who task.TID, tag int) {
	if mt := m.tasks[tid]; mt != nil && mt.exited {
		p, err := task.Encode(task.Notice{Kind: task.TaskExit, TID: tid, Status: mt.st.exitStatus()})
		if err == nil {
			m.notice(routing.Envelope{From: tid, To: who, Tag: int32(tag), Body: p})
		}
		return
	}
	m.watches[tid] = append(m.watches[tid], watch{who: who, tag: tag})
}

// join adds tid to group at its lowest free instance.
func (m *master) join(group string, tid task.TID) int {
	g := m.groups[group]
	for i, t := range g {
		if t == tid {
			return i
		}
	}
	for i, t := range g {
		if t == 0 {
			g[i] = tid
			return i
		}
	}
	m.groups[group] = append(g, tid)
	return len(g)
}

func (m *master) leave(group string, tid task.TID) error {
	for i, t := range m.groups[group] {
		if t == tid {
			m.groups[group][i] = 0
			return nil
		}
	}
	return fmt.Errorf("%v is not in group %q", tid, group)
}

func (m *master) members(group string) []task.TID {
	return slices.Clone(m.groups[group])
}

// barrier records st's arrival at group's barrier of count; it reports
// whether the barrier is complete (the others waiting are released).
func (m *master) barrier(group string, count int, st *stask) bool {
	b := append(m.barriers[group], st)
	if len(b) < count {
		m.barriers[group] = b
		return false
	}
	delete(m.barriers, group)
	for _, o := range b {
		if o != st && o.park != nil && o.park.kind == parkBarrier {
			o.wake(answer{})
		}
	}
	return true
}

// randomMove moves a live task, drawn from the seed, to another host.
func (m *master) randomMove() {
	var live []task.TID
	for _, tid := range m.order {
		if mt := m.tasks[tid]; !mt.exited && !mt.killed && !m.lost[m.routes.Lookup(tid).Host] {
			live = append(live, tid)
		}
	}
	alive := m.aliveHosts()
	if len(live) == 0 || len(alive) < 2 || m.rollingBack() {
		return
	}
	tid := live[m.w.rng.IntN(len(live))]
	from := m.routes.Lookup(tid).Host
	to := from
	for to == from {
		to = alive[m.w.rng.IntN(len(alive))]
	}
	if err := m.startMove(tid, to, nil); err != nil {
		m.w.note(fmt.Sprintf("move %v refused: %v", tid, err))
	}
}

// startMove starts a move of tid to host to; done (if not nil) is called
// with the move's outcome.
func (m *master) startMove(tid task.TID, to task.HostID, done func(error)) error {
	mt := m.tasks[tid]
	if mt == nil || mt.exited {
		return fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
	}
	r := m.routes.Lookup(tid)
	acts := m.moves.Step(m.w.clock(), move.Event{Kind: move.Start, Spec: move.Spec{
		TID: tid, From: r.Host, To: to, Epoch: r.Epoch, Job: mt.job, Timeouts: moveTimeouts,
	}})
	for _, a := range acts {
		if a.Kind == move.Reject {
			return a.Err
		}
	}
	if len(acts) > 0 {
		m.runs[acts[0].Move] = &moveRun{typ: mt.typ, job: mt.job, from: r.Host, to: to, done: done}
		m.w.take(fmt.Sprintf("move %v %v %v→%v", acts[0].Move, tid, nodeName(r.Host), nodeName(to)))
	}
	m.perform(acts)
	return nil
}

// perform carries out the move machine's actions (daemon/migrate.go's
// perform).
func (m *master) perform(acts []move.Action) {
	for _, a := range acts {
		switch a.Kind {
		case move.Call:
			m.call(a)
		case move.SetRoute:
			if !m.w.demand() {
				m.setRoute(a.TID, a.Route)
				break
			}
			// On demand: the task's origin, its old host and its new
			// host are told, no one else.
			m.routes.Update(a.TID, a.Route)
			to := []task.HostID{a.TID.Host(), a.Route.Host}
			if run := m.runs[a.Move]; run != nil {
				to = append(to, run.from, run.to)
			}
			m.tell(a.TID, a.Route, to...)
		case move.Finish:
			run := m.runs[a.Move]
			delete(m.runs, a.Move)
			if a.Err == nil {
				m.w.take(fmt.Sprintf("move %v %v done", a.Move, a.TID))
			} else {
				m.w.take(fmt.Sprintf("move %v %v ended: %v", a.Move, a.TID, a.Err))
			}
			if run != nil && run.done != nil {
				run.done(a.Err)
			}
		case move.Reject:
			m.w.note(fmt.Sprintf("move machine rejected: %v", a.Err))
		}
	}
	if !m.ticking && len(m.moves.Moves()) > 0 {
		m.ticking = true
		m.w.after(tickEvery, nil, "master tick", func() {
			m.ticking = false
			m.perform(m.moves.Step(m.w.clock(), move.Event{Kind: move.Tick}))
		})
	}
}

// call performs a step of a move at its host, bounded by its timeout,
// and feeds the outcome back to the machine.
func (m *master) call(a move.Action) {
	m.callSeq++
	id := m.callSeq
	m.calls[id] = true
	run := m.runs[a.Move]
	var typ string
	var jb uint64
	var from task.HostID
	if run != nil {
		typ, jb, from = run.typ, run.job, run.from
	}
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
		m.perform(m.moves.Step(m.w.clock(), move.Event{Kind: move.Result, Move: a.Move, Step: a.Step, Outcome: o, Err: err}))
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

// setRoute records a route in the master's table and broadcasts it.
func (m *master) setRoute(tid task.TID, r routing.Route) {
	m.routes.Update(tid, r)
	what := fmt.Sprintf("route %v %v e%d t%v", tid, nodeName(r.Host), r.Epoch, r.InTransit)
	mt := m.w.meter
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
