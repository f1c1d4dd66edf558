package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/host"
	"github.com/dpvm/dpvm/routing/jobck"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// Job checkpoints, host crashes and rollbacks. The master node decides
// (its job checkpoint coordinator, routing/jobck.Machine); the shell
// performs its effects as daemon/jobs.go's jobAction does: each call a
// control call to the hosts, each answer fed back as an event; the hosts serve the steps through the
// real host half (jobck.Host, behind the host node's seam) as
// daemon/jobckpt.go does. The shared directory is a map of sets in
// memory: a set is complete once its manifest is "written" (commit).

// detectAfter is how long the master takes to deem a crashed host lost.
const detectAfter = 300 * time.Millisecond

// ckptEntry is one task's checkpoint in a set: its program state
// (msgpack) and what goes with it.
type ckptEntry struct {
	host  task.HostID // where it was written
	meta  captured
	state []byte
}

// ckptSet is a checkpoint set: its entries in TID order (the node keeps
// the group memberships when it was committed).
type ckptSet struct {
	entries []ckptEntry
	// outLen is the length of the job's output at the set's cut: its
	// write begins with every task of the job held at a safe point, so
	// what they printed before is in no restored task's future, and what
	// they print after is.
	outLen int
}

// pauseRec is a task's pause for a job checkpoint (daemon/jobckpt.go's
// pauseReq): made and dropped as the host half says.
type pauseRec struct {
	id      uint64
	arrived bool // the task waits at its safe point
}

// ckState is the shell's side of the job's checkpoints: the shared
// directory's sets (the node knows their numbers and entries; this is
// their contents).
type ckState struct {
	sets    map[uint64]*ckptSet // complete sets
	pending map[uint64]*ckptSet // sets being written
}

// rollingBack reports whether the job's rollback is under way.
func (m *master) rollingBack() bool { return m.node.RollingBack(job) }

// planCheckpoints starts the job's periodic checkpoints.
func (m *master) planCheckpoints(every time.Duration) {
	m.do(m.step(mnode.Event{Kind: mnode.EvJobEvery, Job: job, Every: every}))
}

// crash stops host h: its tasks, its moves' halves and what it holds are
// gone; the master deems it lost after detectAfter. With restart, the
// host comes back (restart) a while after that.
func (w *world) crash(h *shost, restart bool) {
	if h.crashed || len(w.master.node.Alive()) < 2 {
		return
	}
	what := "crash " + h.name
	if restart {
		what += " to restart"
	}
	if w.master.node.Sets(job) == 0 && w.cfg.Faults&FaultCheckpoint != 0 {
		// Wait for a complete checkpoint, so that the crash tests the
		// rollback rather than the job's loss.
		w.after(10*time.Millisecond, nil, what+" (waits for a checkpoint)", func() { w.crash(h, restart) })
		return
	}
	w.take(what)
	h.crashed = true
	id := h.id
	w.after(detectAfter, nil, "lost "+h.name, func() { w.master.hostLost(id) })
	if restart {
		w.after(detectAfter+w.dur(10*time.Millisecond, 200*time.Millisecond), nil, "restart "+h.name, func() { w.restart(id) })
	}
}

// restart brings host id back after a crash, once the master has deemed
// it lost (daemon/membership.go's readmit of a deleted host): a new
// incarnation under the same ID, with no task, move or checkpoint half
// and an empty outbox and inbox. The old incarnation stays crashed, so
// that every event still bound for it (deliveries in flight, its timers,
// its tasks' turns) is dropped, as the old process's connections die
// with it; what is sent to the host from now on meets the new one. Its
// route table is the master's, which the daemon's join answer carries.
// The master counts it again (readmit).
func (w *world) restart(id task.HostID) {
	old := w.host(id)
	m := w.master
	if !old.crashed || !m.node.Lost(id) || m.w.rootDone {
		return
	}
	h := newHost(w, id)
	h.inc = old.inc + 1
	w.hosts[id-1] = h
	w.take(fmt.Sprintf("restart %v (incarnation %d)", h.name, h.inc))
	if h.cache != nil {
		// Its cache starts knowing which hosts are deleted, and which
		// came back (the host list the join answer carries).
		for _, o := range w.hosts {
			if o.id != id && m.node.Lost(o.id) {
				h.cache.Step(w.clock(), route.Event{Kind: route.EvHostLost, Peer: o.id})
			} else if f, ok := m.backAt[o.id]; ok && o.id != id {
				h.cache.Step(w.clock(), route.Event{Kind: route.EvHostUp, Peer: o.id, Route: routing.Route{Epoch: f}})
			}
		}
	}
	for _, tid := range m.order() {
		r := m.node.Routes().Lookup(tid)
		if r.Host == 0 {
			continue
		}
		if h.cache != nil {
			h.cache.Step(w.clock(), route.Event{Kind: route.EvSet, TID: tid, Route: r})
		}
		h.node.Step(w.clock(), host.Event{Kind: host.EvRoute, TID: tid, Route: r})
		h.epochs[tid] = r.Epoch
	}
	m.readmit(id)
}

// readmit has the master count host id again (EvHostUp), and on demand
// tells the other hosts (route.EvHostUp), once the job's
// coordinator is idle: a rollback or checkpoint round under way keeps the
// hosts it started with (routing/jobck has no event for a host's
// return), and a rollback that placed tasks on the host without killing
// there would find them in the way.
func (m *master) readmit(id task.HostID) {
	if m.w.rootDone || m.w.host(id).crashed {
		return
	}
	if m.node.JobState(job) != jobck.Idle {
		m.w.after(10*time.Millisecond, nil, "readmit "+nodeName(id)+" (waits for the job's round)", func() { m.readmit(id) })
		return
	}
	m.w.take("readmit " + nodeName(id))
	m.do(m.step(mnode.Event{Kind: mnode.EvHostUp, Host: id}))
	if m.w.demand() {
		m.backAt[id] = m.node.Epoch()
		m.tellBack(id, m.backAt[id])
		m.resync(id)
	}
	if m.w.cfg.Faults&FaultMove != 0 {
		// Tasks moved onto the new incarnation at seeded moments.
		for range 1 + m.w.rng.IntN(3) {
			m.w.after(m.w.dur(0, m.w.cfg.Horizon), nil, "move a task to "+nodeName(id), func() { m.randomMoveTo(id) })
		}
	}
}

// hostLost is the master deeming host id lost: its moves end, and the
// job rolls back (or, with no checkpoint, ends), as the node says.
func (m *master) hostLost(id task.HostID) {
	if err := m.do(m.step(mnode.Event{Kind: mnode.EvHostLost, Host: id})); err != nil {
		m.w.fail(err)
	}
}

// ckCall performs a step at each of hosts, bounded by timeout, and feeds
// each answer (or its timeout) back with event.
func (m *master) ckCall(what string, hosts []task.HostID, timeout time.Duration,
	serve func(h *shost, reply func(ckReply, error)), event func(h task.HostID, r ckReply, err error) mnode.Event) {
	for _, id := range hosts {
		m.callSeq++
		cid := m.callSeq
		m.calls[cid] = true
		h := m.w.host(id)
		done := func(r ckReply, err error) {
			if !m.calls[cid] {
				return
			}
			delete(m.calls, cid)
			line := fmt.Sprintf("ck answer %s %v", what, h.name)
			if err != nil {
				line += ": " + err.Error()
			}
			m.w.note(line)
			if serr := m.do(m.step(event(id, r, err))); serr != nil {
				m.w.note(serr.Error())
			}
		}
		m.w.send(masterNode, id, classCall, "ck "+what, func() {
			serve(h, func(r ckReply, err error) {
				m.w.send(id, masterNode, classCall, "ck answer "+what, func() { done(r, err) })
			})
		})
		m.w.after(timeout, nil, fmt.Sprintf("ck timeout %s %v", what, h.name), func() {
			done(ckReply{}, fmt.Errorf("%s at %v: no answer within %v", what, h.name, timeout))
		})
	}
}

// resume asks host id to let the job's tasks go on after round r; the
// node hears of the answer or the timeout and asks again as it decides
// (daemon/jobs.go's resumeHosts).
func (m *master) resume(r jobck.Round, id task.HostID, attempt int, timeout time.Duration) {
	m.callSeq++
	cid := m.callSeq
	m.calls[cid] = true
	h := m.w.host(id)
	done := func(err error) {
		if !m.calls[cid] {
			return
		}
		delete(m.calls, cid)
		m.do(m.step(mnode.Event{Kind: mnode.EvResumed, Job: job, Round: r, Host: id, Attempt: attempt, Err: err}))
	}
	m.w.send(masterNode, id, classCall, "ck resume", func() {
		h.resumeJob(r)
		m.w.send(id, masterNode, classCall, "ck answer resume", func() { done(nil) })
	})
	m.w.after(timeout, nil, "ck timeout resume "+h.name, func() {
		done(fmt.Errorf("resume at %v: no answer within %v", h.name, timeout))
	})
}

// ckReply is a host's answer to a checkpoint step (daemon/jobckpt.go's
// ckReply).
type ckReply struct {
	tids      []task.TID
	pending   int
	running   int
	late      []task.TID
	safeEvery time.Duration
	files     []ckptEntry
}

// ckEvent is a host's answer to a checkpoint step as the node's event.
func ckEvent(k jobck.EventKind, r jobck.Round, h task.HostID, err error) mnode.Event {
	return mnode.Event{Kind: mnode.EvCk, Job: job, Ck: jobck.Event{Kind: k, Round: r, Host: h, Err: err}}
}

// doJob performs an effect of the node's job checkpoints (daemon/jobs.go's
// jobAction).
func (m *master) doJob(x mnode.Effect) {
	r := x.Round
	switch x.Kind {
	case mnode.FxJob:
		a := x.Ck
		m.w.note("ck action " + a.String())
		switch {
		case a.Kind == jobck.ActDone && a.Err != nil:
			m.w.note("checkpoint round failed: " + a.Err.Error())
		case a.Kind == jobck.ActRolledBack && a.Err == nil:
			m.w.take(fmt.Sprintf("rolled back to checkpoint %d", a.Round.Seq))
		}
	case mnode.FxRound:
		if x.Err != nil {
			m.w.note("checkpoint refused: " + x.Err.Error())
		} else {
			m.w.note("checkpoint round")
		}
	case mnode.FxCall:
		m.ckDo(x)
	case mnode.FxResume:
		if x.Attempt > 1 {
			m.w.note(fmt.Sprintf("ck resume %v again (attempt %d)", nodeName(x.Host), x.Attempt))
		}
		m.resume(r, x.Host, x.Attempt, x.Timeout)
	case mnode.FxCommit:
		set := m.ck.pending[r.Seq]
		delete(m.ck.pending, r.Seq)
		slices.SortFunc(set.entries, func(x, y ckptEntry) int { return cmp.Compare(x.meta.TID, y.meta.TID) })
		m.ck.sets[r.Seq] = set
		m.w.note(fmt.Sprintf("checkpoint %d complete: %d tasks", r.Seq, len(set.entries)))
		m.do(m.step(ckEvent(jobck.EvCommitted, r, 0, nil)))
	case mnode.FxDiscard:
		delete(m.ck.pending, r.Seq)
	case mnode.FxRestore:
		err := m.restore(r.Seq, x.Epoch, x.Entries)
		m.do(m.step(mnode.Event{Kind: mnode.EvStaged, Job: job, Round: r, Err: err}))
	case mnode.FxGo:
		m.startRestored(r.Seq, x.Epoch, x.Count, x.Hosts)
	case mnode.FxJobLost:
		m.jobLost(x.Err)
	}
}

// ckDo performs a checkpoint step at the hosts (FxCall).
func (m *master) ckDo(x mnode.Effect) {
	r := x.Round
	switch x.Call {
	case mnode.CallPause:
		budget := x.Budget
		m.ckCall("pause", x.Hosts, x.Timeout, func(h *shost, reply func(ckReply, error)) {
			h.pauseJob(r, budget, reply)
		}, func(h task.HostID, rep ckReply, err error) mnode.Event {
			if err == nil && len(rep.late) > 0 {
				err = fmt.Errorf("%v of job %d within %v: %w", rep.late, job, budget, errNoSafePoint)
			}
			e := ckEvent(jobck.EvPaused, r, h, err)
			e.Ck.SafeEvery = rep.safeEvery
			return e
		})
	case mnode.CallQuiet:
		tids := x.TIDs
		m.ckCall("quiet", x.Hosts, x.Timeout, func(h *shost, reply func(ckReply, error)) {
			reply(h.quietJob(r, tids))
		}, func(h task.HostID, rep ckReply, err error) mnode.Event {
			e := ckEvent(jobck.EvQuiet, r, h, err)
			e.Ck.Pending, e.Ck.Running, e.Ck.Tasks = rep.pending, rep.running, len(rep.tids)
			return e
		})
	case mnode.CallWrite:
		set := &ckptSet{outLen: len(m.w.out)}
		m.ck.pending[r.Seq] = set
		m.ckCall("write", x.Hosts, x.Timeout, func(h *shost, reply func(ckReply, error)) {
			reply(h.writeJob(r))
		}, func(h task.HostID, rep ckReply, err error) mnode.Event {
			e := ckEvent(jobck.EvWritten, r, h, err)
			if err == nil {
				set.entries = append(set.entries, rep.files...)
				e.Ck.Tasks = len(rep.files)
				for _, f := range rep.files {
					e.TIDs = append(e.TIDs, f.meta.TID)
				}
			}
			return e
		})
	case mnode.CallKill:
		tids := x.TIDs
		m.ckCall("kill", x.Hosts, x.Timeout, func(h *shost, reply func(ckReply, error)) {
			h.killJob(tids, reply)
		}, func(h task.HostID, _ ckReply, err error) mnode.Event {
			return ckEvent(jobck.EvKilled, r, h, err)
		})
	}
}

// ErrJobLostWithMaster: the master crashed, and the job with it
// (FaultMaster; the daemon's ErrJobLostWithMaster).
var ErrJobLostWithMaster = errors.New("job lost with its master")

// crashMaster crashes the master: its node does nothing from now on
// (master.step), and the hosts learn it is gone after detectAfter.
func (w *world) crashMaster() {
	m := w.master
	if m.down {
		return
	}
	w.take("crash master")
	m.down = true
	w.after(detectAfter, nil, "master lost", w.lostWithMaster)
}

// lostWithMaster ends the job once its hosts learn the master is gone:
// a job cannot survive its master (daemon/README.md), and the recovered
// master's client kills the tasks the hosts bring back; none runs on.
func (w *world) lostWithMaster() {
	w.take("job lost with its master")
	for _, h := range w.hosts {
		for _, st := range h.jobTasks() {
			st.quiet = true
			st.killed = true
			st.stop()
		}
	}
	w.lostMaster = true
	w.rootDone = true
	w.status = 1
	w.rootErr = ErrJobLostWithMaster
}

// ErrJobLost: the job lost tasks with a host and could not roll back.
var ErrJobLost = errors.New("job lost")

func (m *master) jobLost(err error) {
	m.w.take("job lost: " + err.Error())
	m.w.rootDone = true
	m.w.status = 1
	m.w.rootErr = fmt.Errorf("%w: %w", ErrJobLost, err)
}

// restore stages set seq on the hosts as the node placed its tasks
// (daemon/jobs.go's restoreSet): every host stages its tasks or none
// does; the node then sets their routes and the hosts start them.
func (m *master) restore(seq, epoch uint64, place []mnode.Entry) error {
	set := m.ck.sets[seq]
	byTID := make(map[task.TID]ckptEntry, len(set.entries))
	for _, e := range set.entries {
		byTID[e.meta.TID] = e
	}
	byHost := map[task.HostID][]ckptEntry{}
	var order []task.HostID
	for _, p := range place {
		if byHost[p.Host] == nil {
			order = append(order, p.Host)
		}
		byHost[p.Host] = append(byHost[p.Host], byTID[p.TID])
	}
	slices.Sort(order)
	// Nothing of the old incarnations reaches the new ones: the pairs'
	// delivery record starts again from the checkpoint's.
	for k := range m.w.pairs {
		if mt := m.task(k[1]); mt != nil {
			delete(m.w.pairs, k)
		}
	}
	for _, e := range set.entries {
		for from, n := range e.meta.InSeq {
			if n > 1 {
				m.w.pairs[[2]task.TID{from, e.meta.TID}] = n - 1
			}
		}
	}
	for _, id := range order {
		if err := m.w.host(id).stage(byHost[id], epoch); err != nil {
			for _, s := range order {
				m.w.host(s).unstage()
			}
			return fmt.Errorf("on %v: %w", nodeName(id), err)
		}
	}
	return nil
}

// startRestored has hosts start the staged tasks of set seq, once their
// routes are sent (FxGo).
func (m *master) startRestored(seq, epoch uint64, count int, hosts []task.HostID) {
	for _, id := range hosts {
		// The go step travels after the routes' broadcast, as the
		// daemon's call does: on a link that keeps order, the host knows
		// the restored routes before its restored tasks run.
		h := m.w.host(id)
		m.w.send(masterNode, id, classRoute, "ck go", h.startStaged)
	}
	// The restored tasks print again what they printed after the cut:
	// the output of the incarnations the rollback undid is taken out.
	set := m.ck.sets[seq]
	if n := len(m.w.out) - set.outLen; n > 0 {
		m.w.undone += n
		m.w.out = m.w.out[:set.outLen]
		m.w.note(fmt.Sprintf("output after checkpoint %d undone: %d bytes", seq, n))
	}
	m.w.take(fmt.Sprintf("restored checkpoint %d: %d tasks at epoch %d", seq, count, epoch))
}

// stepCk feeds the host half of job checkpoints through the node's seam.
func (h *shost) stepCk(e jobck.HostEvent) []jobck.HostEffect {
	return host.CkptEffects(h.node.Step(h.w.clock(), host.Event{Kind: host.EvCkpt, Ckpt: e}))
}

// jobTasks are the job's tasks in service here, in TID order.
func (h *shost) jobTasks() []*stask {
	var out []*stask
	for _, tid := range slices.Sorted(maps.Keys(h.tasks)) {
		out = append(out, h.tasks[tid])
	}
	return out
}

func pauseFacts(st *stask) jobck.Local {
	return jobck.Local{TID: st.tid, MoveAsked: st.moveReq != nil, Arrived: st.pause != nil && st.pause.arrived}
}

// doCk performs the host half's effects that are the task table's
// (daemon/jobckpt.go's doCkpt); it returns the step's refusal.
func (h *shost) doCk(fx []jobck.HostEffect, perform func(jobck.HostEffect)) error {
	var err error
	for _, x := range fx {
		h.w.note(fmt.Sprintf("%v ck %v", h.name, x))
		st := h.tasks[x.TID]
		switch x.Kind {
		case jobck.DoRefuse:
			err = x.Err
		case jobck.DoPause:
			if st != nil {
				if x.New {
					st.pause = &pauseRec{id: x.Pause}
				}
				if st.park != nil && st.park.kind == parkSafe {
					st.wake(answer{}) // out of RecvSafe, to its safe point
				}
			}
		case jobck.DoRelease:
			if st != nil && st.pause != nil && st.pause.id == x.Pause {
				arrived := st.pause.arrived
				st.pause = nil
				if arrived && st.park != nil && st.park.kind == parkPause {
					st.wake(answer{})
				}
			}
		case jobck.DoUnstage:
			if a := h.arriving[x.TID]; a != nil && a.move == 0 {
				delete(h.arriving, x.TID)
			}
		}
		if perform != nil {
			perform(x)
		}
	}
	return err
}

func (h *shost) jobEvent(k jobck.HostEventKind, r jobck.Round) jobck.HostEvent {
	e := jobck.HostEvent{Kind: k, Job: job, Round: r}
	for _, st := range h.jobTasks() {
		e.Tasks = append(e.Tasks, pauseFacts(st))
	}
	return e
}

// pauseJob holds the job's tasks here at their next safe point, within
// budget (daemon/jobckpt.go's pauseJob).
func (h *shost) pauseJob(r jobck.Round, budget time.Duration, reply func(ckReply, error)) {
	var rep ckReply
	var held []*stask
	e := h.jobEvent(jobck.HostPause, r)
	e.Departing = append(e.Departing, slices.Sorted(maps.Keys(h.leaving))...)
	err := h.doCk(h.stepCk(e), func(x jobck.HostEffect) {
		if st := h.tasks[x.TID]; x.Kind == jobck.DoPause && st != nil && st.pause != nil {
			held = append(held, st)
			rep.tids = append(rep.tids, x.TID)
		}
	})
	if err != nil {
		reply(rep, err)
		return
	}
	deadline := h.w.now + budget
	var poll func()
	poll = func() {
		if h.w.now < deadline {
			for _, st := range held {
				if !st.ended && h.tasks[st.tid] == st && (st.pause == nil || !st.pause.arrived) {
					h.w.after(100*time.Microsecond, h, fmt.Sprintf("%v pause waits try %d", h.name, r.Try), poll)
					return
				}
			}
		}
		for _, st := range held {
			if st.ended || h.tasks[st.tid] != st {
				continue // it exited, or moved: nothing to save here
			}
			if st.pause == nil || !st.pause.arrived {
				rep.late = append(rep.late, st.tid)
			}
			rep.safeEvery = max(rep.safeEvery, st.safeEvery)
		}
		_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostPauseOver, Job: job, Round: r, Late: rep.late}), nil)
		reply(rep, nil)
	}
	poll()
}

// quietJob reports the job's tasks here not held and the messages from
// the job's tasks (jobTIDs, the master's registry: every task the job has
// had) not yet acknowledged here (daemon/jobckpt.go's quietJob): a task
// that moved away or exited leaves its unacknowledged messages in this
// host's outbox, and a set that completed with one of them in flight
// would hold it in no restored task.
func (h *shost) quietJob(r jobck.Round, jobTIDs []task.TID) (ckReply, error) {
	var rep ckReply
	err := h.doCk(h.stepCk(h.jobEvent(jobck.HostQuiet, r)), func(x jobck.HostEffect) {
		if x.Kind == jobck.DoReport {
			rep.tids, rep.running = x.TIDs, x.Running
		}
	})
	for _, tid := range jobTIDs {
		rep.pending += h.node.Outbox().PendingFrom(tid)
	}
	return rep, err
}

// writeJob writes the checkpoint of each paused task of the job here.
func (h *shost) writeJob(r jobck.Round) (ckReply, error) {
	var rep ckReply
	for _, st := range h.jobTasks() {
		var p uint64
		err := h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostWrite, Job: job, Round: r, Local: pauseFacts(st)}), func(x jobck.HostEffect) {
			if x.Kind == jobck.DoWrite {
				p = x.Pause
			}
		})
		if err != nil {
			return rep, err
		}
		_, state, encErr := task.EncodeState(st.t)
		m := h.metaOf(st, 0)
		_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostWriteOver, Job: job, TID: st.tid, Pause: p}), nil)
		if encErr != nil {
			return rep, fmt.Errorf("checkpoint of %v: %w", st.tid, encErr)
		}
		rep.files = append(rep.files, ckptEntry{host: h.id, meta: m, state: state})
	}
	return rep, nil
}

// resumeJob lets the job's tasks held here go on.
func (h *shost) resumeJob(r jobck.Round) {
	_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostResume, Job: job, Round: r}), nil)
}

// killJob ends the job's tasks here quietly for a rollback
// (daemon/jobs.go's killJob): copies caught in a move go too, and nothing
// the old incarnations sent or were sent reaches the new ones: of every
// task of the job (jobTIDs, the master's registry), not only those here
// now. daemon/jobs.go's killJob drops the state of the tasks it hosts
// and of the copies caught in a move; a task that moved away left its
// unacknowledged messages in this host's outbox, which would be resent
// to its receiver's restored incarnation. It answers once every task has
// ended and a ping to every host has come back (see world.ping).
func (h *shost) killJob(jobTIDs []task.TID, reply func(ckReply, error)) {
	tasks := h.jobTasks()
	tids := slices.Clone(jobTIDs)
	for _, fx := range h.stepMove(move.HostEvent{Kind: move.EvDropJob, Job: job}) {
		switch fx.Kind {
		case move.DoDropDeparture:
			delete(h.leaving, fx.TID)
			tids = append(tids, fx.TID)
		case move.DoDropArrival:
			if a := h.arriving[fx.TID]; a != nil && a.move == fx.Move {
				delete(h.arriving, fx.TID)
			}
			tids = append(tids, fx.TID)
		}
	}
	_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostKill, Job: job}), nil)
	for _, st := range tasks {
		st.quiet = true
		st.killed = true
		st.stop()
		if st.park != nil {
			st.wake(answer{err: fmt.Errorf("%v: the job rolls back: %w", st.tid, task.ErrKilled)})
		}
		tids = append(tids, st.tid)
	}
	var wait func(n int)
	wait = func(n int) {
		for _, st := range tasks {
			if !st.ended && n < 100 {
				h.w.after(time.Millisecond, h, h.name+" kill waits", func() { wait(n + 1) })
				return
			}
		}
		h.node.Step(h.w.clock(), host.Event{Kind: host.EvDrop, TIDs: tids})
		var err error
		for _, st := range tasks {
			if !st.ended {
				err = fmt.Errorf("%v of job %d not ended yet", st.tid, job)
			}
		}
		// A ping to every host (itself included) before the answer: what
		// the old incarnations sent from here has arrived, and the
		// refusals it drew (its receivers killed too: "exited") are back
		// and find nothing to drop. Without it such a refusal, late, could
		// reach this host after the restore and drop what the restored
		// sender sent since: its receiver would wait for it forever.
		left := 0
		for _, o := range h.w.hosts {
			if !o.crashed {
				left++
			}
		}
		for _, o := range h.w.hosts {
			if o.crashed {
				continue
			}
			h.w.ping(h.id, o.id, func() {
				if left--; left == 0 {
					reply(ckReply{}, err)
				}
			})
		}
	}
	wait(0)
}

// stage keeps the set's tasks placed here, to start (daemon/jobs.go's
// loadStaged).
func (h *shost) stage(entries []ckptEntry, epoch uint64) error {
	e := jobck.HostEvent{Kind: jobck.HostStage, Job: job}
	for _, x := range entries {
		tid := x.meta.TID
		a := h.arriving[tid]
		e.Tasks = append(e.Tasks, jobck.Local{TID: tid, Running: h.tasks[tid] != nil,
			Moving: h.leaving[tid] != nil || (a != nil && a.move != 0), Arriving: a != nil && a.move == 0})
	}
	byTID := map[task.TID]ckptEntry{}
	for _, x := range entries {
		byTID[x.meta.TID] = x
	}
	return h.doCk(h.stepCk(e), func(fx jobck.HostEffect) {
		if fx.Kind != jobck.DoStage {
			return
		}
		x := byTID[fx.TID]
		meta := x.meta
		meta.Epoch = epoch
		h.arriving[fx.TID] = &arriving{typ: meta.Type, job: job, epoch: epoch, from: x.host, ckpt: &meta, ckptState: x.state}
	})
}

func (h *shost) unstage() {
	_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostUnstage, Job: job}), nil)
}

// startStaged starts the staged tasks (daemon/jobs.go's startStaged).
func (h *shost) startStaged() {
	_ = h.doCk(h.stepCk(jobck.HostEvent{Kind: jobck.HostStart, Job: job}), func(fx jobck.HostEffect) {
		if fx.Kind != jobck.DoStart {
			return
		}
		a := h.arriving[fx.TID]
		if a == nil || a.move != 0 || a.ckpt == nil {
			return
		}
		t, err := task.New(a.ckpt.Type, a.ckptState)
		if err != nil {
			h.w.fail(fmt.Errorf("restore %v: %w", fx.TID, err))
			return
		}
		if h.cache != nil {
			h.cache.Step(h.w.clock(), route.Event{Kind: route.EvSet, TID: fx.TID, Route: routing.Route{Host: h.id, Epoch: a.epoch}})
		}
		h.node.Step(h.w.clock(), host.Event{Kind: host.EvRoute, TID: fx.TID, Route: routing.Route{Host: h.id, Epoch: a.epoch}})
		if err := h.install(*a.ckpt, t, a, nil); err != nil {
			h.w.fail(fmt.Errorf("restore %v: %w", fx.TID, err))
		}
	})
}
