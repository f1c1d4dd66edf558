package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Via is how a migrating task's checkpoint travels.
type Via string

// Migration modes.
const (
	// Direct streams the checkpoint from the origin daemon to the
	// destination over a QUIC stream, encoding and transfer overlapped.
	Direct Via = "direct"
	// Indirect writes the checkpoint to the shared directory, from which
	// the destination reads it.
	Indirect Via = "indirect"
)

// ParseVia parses "direct" or "indirect" ("" is direct).
func ParseVia(s string) (Via, error) {
	switch Via(s) {
	case "", Direct:
		return Direct, nil
	case Indirect:
		return Indirect, nil
	}
	return "", fmt.Errorf("migration mode %q: want direct or indirect", s)
}

// Migration errors. ErrMoving and ErrAborted are the move machine's
// (routing/move), so that errors.Is matches them wherever they arose.
var (
	// ErrNoSafePoint: the task did not reach a safe point in time; it goes
	// on running where it was.
	ErrNoSafePoint = errors.New("task reached no safe point in time")
	// ErrMoving: the task is already being moved.
	ErrMoving = move.ErrMoving
	// ErrAborted: the move was undone; the task runs at its origin again.
	ErrAborted = move.ErrAborted
	// ErrNoSharedDir: indirect migration needs a shared directory.
	ErrNoSharedDir = errors.New("no shared directory configured (--shared-dir)")
	// ErrKilling: the task's job is being killed; it is not moved.
	ErrKilling = errors.New("the task's job is being killed")
)

// MigrateResult describes a completed migration.
type MigrateResult struct {
	TID   task.TID    `msgpack:"t" json:"tid"`
	From  task.HostID `msgpack:"f" json:"from"`
	To    task.HostID `msgpack:"o" json:"to"`
	Via   Via         `msgpack:"v" json:"via"`
	Epoch uint64      `msgpack:"e" json:"epoch"`
	// Seconds is the whole move, from the request to the commit.
	Seconds float64 `msgpack:"s" json:"seconds"`
	// FreezeMS is how long the task was stopped: from its suspension at a
	// safe point until it ran again at the destination.
	FreezeMS float64 `msgpack:"z" json:"freeze_ms"`
	// CheckpointBytes is the checkpoint's size.
	CheckpointBytes int64 `msgpack:"b" json:"checkpoint_bytes"`
	// Move is the move's identifier, as the master's, the origin's and
	// the destination's logs, the metrics' events and the status page
	// name it ("" when the move never started).
	Move string `msgpack:"id,omitempty" json:"move_id,omitempty"`
}

// moveRequest asks a running task to suspend at its next safe point.
type moveRequest struct {
	move  move.ID
	to    task.HostID
	epoch uint64
	done  chan error // nil once suspended
}

// leaving is a task suspended on this daemon (the origin) while it moves:
// what an abort needs to resume it here, kept while the host move machine
// holds its departure. Its fields are guarded by d.ht.mu.
type leaving struct {
	h        *hosted
	move     move.ID // the move it is suspended for (the departure's)
	meta     ckpt.Meta
	dest     routing.Route
	file     string        // indirect: the checkpoint file to remove on commit
	resolved chan struct{} // closed on commit or abort
	// sending is set while its checkpoint is written, and closed when the
	// write is over: a resume the machine tells to wait waits for it, so
	// that the task never runs while its state is encoded.
	sending chan struct{}
	// held are messages kept for it, unacknowledged, once its move has
	// aborted and before it resumes here (see comingBack).
	held []heldMsg
}

// arriving is a task prepared on this daemon (the destination): messages
// for it are held, unacknowledged, until it is restored. For a move, it is
// kept while the host move machine holds its arrival; with move 0, it is a
// job restore's staged task (jobs.go), which the machine does not hold.
type arriving struct {
	typ   string
	move  move.ID // the move that prepared it (0: a job restart)
	job   uint64  // the task's job (0: none, or not told)
	epoch uint64
	from  task.HostID
	held  []heldMsg
	// received is filled by a direct transfer.
	received chan transferred
}

type heldMsg struct {
	host task.HostID // the daemon to acknowledge to
	env  routing.Envelope
}

type transferred struct {
	meta *ckpt.Meta
	t    task.Task
	err  error
}

// Control request bodies for migration. Every step names its move; a host
// refuses a step of a move it has cancelled or resumed a task for, or of a
// move other than the one a task is suspended or prepared for.
type (
	migrateArgs struct {
		TID     task.TID      `msgpack:"t"`
		To      string        `msgpack:"o"`
		Via     Via           `msgpack:"v"`
		Timeout time.Duration `msgpack:"w,omitempty"`
		// By is, in a host's call, the task acting: one the host runs,
		// whose owner must own TID (checkActing).
		By task.TID `msgpack:"b,omitempty"`
	}
	migStep struct {
		TID     task.TID      `msgpack:"t"`
		Move    move.ID       `msgpack:"m,omitempty"`
		Type    string        `msgpack:"y,omitempty"`
		Job     uint64        `msgpack:"j,omitempty"` // prepare, suspend: the task's job
		Host    task.HostID   `msgpack:"h,omitempty"` // the other end
		Epoch   uint64        `msgpack:"e,omitempty"`
		Via     Via           `msgpack:"v,omitempty"`
		Name    string        `msgpack:"n,omitempty"` // indirect: file name
		Route   routing.Route `msgpack:"r"`           // cancel, resume: the way back
		Timeout time.Duration `msgpack:"w,omitempty"`
	}
	migReply struct {
		Type  string `msgpack:"y,omitempty"`
		Job   uint64 `msgpack:"j,omitempty"` // info: the task's job
		Bytes int64  `msgpack:"b,omitempty"`
		// Installed (cancel): the destination already runs the task.
		Installed bool `msgpack:"i,omitempty"`
	}
	streamHeader struct {
		TID   task.TID `msgpack:"t"`
		Epoch uint64   `msgpack:"e"`
		Move  move.ID  `msgpack:"m,omitempty"`
	}
)

// Migration control methods.
const (
	mMigrate = "migrate"     // at the master: move a task
	mMigInfo = "mig.info"    // at the origin: the task's type and job
	mMigPrep = "mig.prepare" // at the destination
	mMigSusp = "mig.suspend" // at the origin: suspend at a safe point
	mMigSend = "mig.send"    // at the origin: write the checkpoint
	mMigLoad = "mig.restore" // at the destination: read it, restore, run
	mMigDone = "mig.commit"  // at the origin: forget the task
	mMigBack = "mig.resume"  // at the origin: abort, resume here
	mMigDrop = "mig.cancel"  // at the destination: abort
)

// stepMethods maps a move's steps to their control methods.
var stepMethods = map[move.Step]string{
	move.StepPrepare: mMigPrep,
	move.StepSuspend: mMigSusp,
	move.StepSend:    mMigSend,
	move.StepRestore: mMigLoad,
	move.StepCommit:  mMigDone,
	move.StepCancel:  mMigDrop,
	move.StepResume:  mMigBack,
}

// moveRun is the driver's record of one move of the master node (master,
// guarded by the node's lock, mn.mu): how it is carried and measured,
// and whom its end wakes. Its hosts, and its task's type and job, are
// the node's (Moving, and each step's effect).
type moveRun struct {
	via    Via
	res    MigrateResult
	start  time.Time
	frozen time.Time     // when the origin answered the suspend
	ended  chan struct{} // closed when the move has finished
	err    error         // why it did not happen (set before ended closes)
}

// moveTimeouts are the move machine's timeouts, from the configuration.
func (d *Daemon) moveTimeouts() move.Timeouts { return moveTimeoutsOf(d.cfg) }

// moveTimeoutsOf is cfg's move timeouts.
func moveTimeoutsOf(cfg Config) move.Timeouts {
	return move.Timeouts{Step: cfg.MoveStepTimeout, Suspend: cfg.MoveTimeout, Transfer: cfg.MoveTransferTimeout, Retry: cfg.Heartbeat}
}

// Migrate moves task tid to the host named to (master): the protocol of
// DESIGN §5, carried out by the move machine (routing/move) with this
// daemon as its driver. It returns when the task runs at the destination,
// or after an abort, when it runs at its origin again (the error then
// wraps ErrAborted). If ctx ends first, Migrate returns ctx's error and
// the move goes on to its end; if the daemon stops first, the hosts
// settle the move with a recovered master (see Recover).
func (d *Daemon) Migrate(ctx context.Context, tid task.TID, to string, via Via) (MigrateResult, error) {
	res := MigrateResult{TID: tid, Via: via}
	defer d.schedDirty() // moved, or perhaps half-way: the scheduler lists again
	start, frozen := time.Now(), time.Time{}
	fail := func(err error) (MigrateResult, error) {
		err = fmt.Errorf("migrate %v to %s: %w", tid, to, err)
		d.moveEnded(res, start, frozen, err)
		return res, err
	}
	if !d.isMaster() || d.nw == nil {
		return fail(errors.New("only the master of a multi-host virtual machine migrates"))
	}
	if via == Indirect && d.cfg.SharedDir == "" {
		return fail(ErrNoSharedDir)
	}
	b, err := d.hostByName(to)
	if err != nil {
		return fail(err)
	}
	cur := d.rt.lookup(tid)
	a := cur.Host
	res.From, res.To = a, b
	if !d.hostKnown(a) {
		return fail(task.ErrNoSuchTask)
	}
	if a == b {
		return fail(fmt.Errorf("it already runs on %v", b))
	}
	if d.mv.moving(tid) {
		return fail(ErrMoving)
	}
	// A task's type and job are asked of its host before its first move
	// and remembered: they never change while the task lives, and the
	// origin checks them when it suspends the task, so a move on a stale
	// record aborts there, before anything is captured.
	info, known := d.mv.factsOf(tid)
	if !known {
		if err := d.callHost(ctx, a, mMigInfo, migStep{TID: tid}, &info); err != nil {
			return fail(err)
		}
	}
	// The registry and the routes are this shell's: the move names the
	// route it starts from and the task's facts.
	d.mn.mu.Lock()
	fx := d.mn.stepAt(start, mnode.Event{Kind: mnode.EvMove, TID: tid, Host: b, From: a, Epoch: cur.Epoch, Type: info.Type, Job: info.Job})
	mv, ok := d.mn.node.Moving(tid)
	if err := nodeRefusal(fx); err != nil || !ok {
		d.mn.mu.Unlock()
		if errors.Is(err, move.ErrHeld) {
			err = fmt.Errorf("job %d is being killed: %w", info.Job, ErrKilling)
		}
		return fail(err)
	}
	id := mv.ID
	d.mv.rememberLocked(tid, info)
	res.Epoch, res.Move = mv.Epoch, id.String()
	run := &moveRun{via: via, res: res, start: start, ended: make(chan struct{})}
	d.mv.runs[id] = run
	d.mn.mu.Unlock()
	if next, ok := d.performFor(fx, id); ok {
		d.callStep(ctx, next)
	}
	select {
	case <-run.ended:
	case <-ctx.Done():
		return fail(fmt.Errorf("move %v goes on: %w", id, ctx.Err()))
	case <-d.ctx.Done():
		// The hosts settle the move with a recovered master.
		return fail(fmt.Errorf("move %v: the master stopped: %w", id, task.ErrHalted))
	}
	d.mn.mu.Lock()
	res, err, frozen = run.res, run.err, run.frozen
	d.mn.mu.Unlock()
	if err != nil {
		d.mv.forgetFacts(tid) // the next move asks again
		return fail(err)
	}
	d.log.Info("migrated", "move", id, "tid", tid, "from", a, "to", b, "via", via, "bytes", res.CheckpointBytes,
		"seconds", res.Seconds, "freeze_ms", res.FreezeMS)
	d.moveEnded(res, start, frozen, nil)
	return res, nil
}

// perform carries out the master node's effects for moves (master):
// routes are set and told at once, in order, to every host or to the
// hosts the node names (recorded in this daemon's own table as they go
// out); each call runs on its own tracked goroutine, bounded by the
// step's timeout, and its outcome goes back to the node; a finish wakes
// whoever waits for the move. No lock is held across a call. The node's
// timers (its move machine's tick while moves are under way) are the
// timer loop's (runTimers), and what it says of jobs and lost hosts is
// not the move part's: the shell's other parts decide those still.
func (d *Daemon) perform(fx []mnode.Effect) {
	if x, ok := d.performFor(fx, 0); ok {
		d.goFunc(func() { d.runSteps(x) })
	}
}

// performFor is perform, save for the next step of move id: a call of
// that move the machine waits for is not started but returned, for the
// caller to perform once the other actions are done. The goroutine that
// performed a move's step thus performs its next one, without a hand-off
// to a new goroutine: the machine waits for one step of a move at a time,
// so the move's steps run one after another on one goroutine, as its
// actions order them (a route set before the step that follows it).
func (d *Daemon) performFor(fx []mnode.Effect, id move.ID) (next mnode.Effect, ok bool) {
	for _, x := range fx {
		if x.Kind == mnode.FxRoute {
			d.sendMoveRoute(x)
			continue
		}
		if x.Kind != mnode.FxMove {
			continue // timers are the timer loop's (runTimers); the rest is other parts'
		}
		a := x.Move
		switch a.Kind {
		case move.Finish:
			d.mn.mu.Lock()
			run := d.mv.runs[a.Move]
			delete(d.mv.runs, a.Move)
			if run != nil {
				run.err = a.Err
				run.res.Seconds = time.Since(run.start).Seconds()
				close(run.ended)
			}
			d.mn.mu.Unlock()
			if a.Err != nil {
				d.log.Warn("move ended without moving the task", "move", a.Move, "tid", a.TID, "cause", a.Err)
			}
			d.schedDirty()
		case move.Reject:
			// A result the move no longer waits for (late, duplicated,
			// or of a move that ended meanwhile).
			d.log.Debug("move step answered late", "move", a.Move, "error", a.Err)
		case move.Call:
			if d.ctx.Err() != nil {
				continue // stopping: the hosts settle a half-done move with a recovered master
			}
			if !ok && !a.Notify && (id == 0 || a.Move == id) {
				next, ok = x, true
				continue
			}
			d.goFunc(func() { d.runSteps(x) })
		}
	}
	return next, ok
}

// callStep performs a step of a move at its host and reports the outcome
// to the machine (master), then the move's next step, if the machine asks
// for one, and so on. Migrate calls it on its own goroutine while its
// caller waits (handing the steps to a tracked goroutine and the outcome
// back would add two goroutine wake-ups to every move); once that
// caller's ctx ends, the steps left go on on a tracked goroutine, and the
// caller is free after the step under way (each is bounded by its own
// timeout). Elsewhere the steps run on a tracked goroutine (runSteps).
func (d *Daemon) callStep(ctx context.Context, x mnode.Effect) {
	for {
		next, ok := d.step(x)
		if !ok {
			return
		}
		if ctx.Err() != nil {
			d.goFunc(func() { d.runSteps(next) })
			return
		}
		x = next
	}
}

// runSteps is callStep on a tracked goroutine, with no caller to free:
// it performs the move's steps until the machine asks for none (each is
// bounded by its timeout under the daemon's context).
func (d *Daemon) runSteps(x mnode.Effect) {
	for {
		next, ok := d.step(x)
		if !ok {
			return
		}
		x = next
	}
}

// step performs one step of a move at its host (x, the node's call:
// the move's action, and the task's type, job and origin), reports the
// outcome to the node and performs the effects that follow, save the
// move's next step, which it returns (see performFor).
func (d *Daemon) step(x mnode.Effect) (next mnode.Effect, ok bool) {
	a := x.Move
	ctx, cancel := context.WithTimeout(d.ctx, a.Timeout)
	defer cancel()
	typ, from, job := x.Type, x.From, x.Job
	d.mn.mu.Lock()
	run := d.mv.runs[a.Move]
	var via Via
	if run != nil {
		via = run.via
	}
	d.mn.mu.Unlock()
	s := migStep{TID: a.TID, Move: a.Move, Epoch: a.Route.Epoch, Route: a.Route}
	switch a.Step {
	case move.StepPrepare:
		s.Type, s.Host, s.Job = typ, from, job
	case move.StepSuspend:
		s.Type, s.Job, s.Host, s.Timeout = typ, job, a.Route.Host, d.cfg.MoveTimeout
	case move.StepSend:
		s.Host, s.Via, s.Name = a.Route.Host, via, checkpointName(a.TID, a.Route.Epoch)
	case move.StepRestore:
		s.Host, s.Via, s.Name, s.Timeout = from, via, checkpointName(a.TID, a.Route.Epoch), a.Timeout
	}
	var rep migReply
	var settle func()
	if a.Step == move.StepRestore {
		// The task runs at its destination from the restore on: its
		// output may come before the answer is read.
		settle = d.reg.expect(a.Host, job)
	}
	err := d.callHost(ctx, a.Host, stepMethods[a.Step], s, &rep)
	if settle != nil {
		if err == nil && job != 0 {
			d.reg.jobsOn(a.Host, []uint64{job}, false)
		}
		settle()
	}
	o := move.OK
	switch {
	case err == nil && a.Step == move.StepCancel && rep.Installed:
		o = move.Installed
	case err == nil:
	case a.Step == move.StepSuspend && suspendRefused(err):
		o = move.Refused
	default:
		o = move.Failed
	}
	if a.Notify {
		if err != nil {
			d.log.Debug("move step", "move", a.Move, "step", a.Step, "host", a.Host, "error", err)
		}
		return mnode.Effect{}, false
	}
	if o == move.OK {
		switch a.Step {
		case move.StepSend:
			d.fault("migrate:sent")
		case move.StepRestore:
			d.fault("migrate:restored")
		}
	}
	now := time.Now()
	d.mn.mu.Lock()
	if run != nil && o == move.OK {
		switch a.Step {
		case move.StepSuspend:
			run.frozen = now
		case move.StepSend:
			run.res.CheckpointBytes = rep.Bytes
		case move.StepRestore:
			run.res.FreezeMS = float64(now.Sub(run.frozen).Microseconds()) / 1e3
		}
	}
	fx := d.mn.stepAt(now, mnode.Event{Kind: mnode.EvMoveResult, Move: a.Move, Step: a.Step, Outcome: o, Err: err})
	d.mn.mu.Unlock()
	return d.performFor(fx, a.Move)
}

// nodeRefusal returns the error of the master node's refusal of the event
// that gave fx (nil: it took the event).
func nodeRefusal(fx []mnode.Effect) error {
	for _, x := range fx {
		if x.Kind == mnode.FxRefuse {
			return x.Err
		}
	}
	return nil
}

// suspendRefused reports whether a suspend step's error is the origin's
// answer that it did not suspend the task for the move: no safe point in
// time, no such task there (nor suspended for the move: see
// suspendForMove), or the move (or the master's record of the task)
// stale. The move then ends with nothing to resume; any other failure (a
// timeout, a lost link) leaves it open whether the task was suspended,
// and the move is cancelled.
func suspendRefused(err error) bool {
	return errors.Is(err, ErrNoSafePoint) || errors.Is(err, task.ErrNoSuchTask) || errors.Is(err, ErrAborted)
}

// checkpointName is the shared directory's file name of a move's
// checkpoint.
func checkpointName(tid task.TID, epoch uint64) string {
	return fmt.Sprintf("%s-%d.ckpt", tid, epoch)
}

// sendMoveRoute performs a route the master node set for a move: recorded
// in this daemon's table (the master's host half learns it as it goes
// out) and told to every host, or on demand (Config.Routes) to the hosts
// the node names (the task's origin host, the move's old host and its
// new host, less the lost ones).
func (d *Daemon) sendMoveRoute(x mnode.Effect) {
	if x.All {
		d.setRoute(x.TID, x.Route)
		return
	}
	d.tellRoute([]routing.Entry{{TID: x.TID, Route: x.Route}}, x.Hosts)
}

// setRoute records a route in the master's table and broadcasts it.
func (d *Daemon) setRoute(tid task.TID, r routing.Route) {
	e := routing.Entry{TID: tid, Route: r}
	d.applyRoutes([]routing.Entry{e})
	d.broadcast(&event{Kind: evRoute, Routes: []routing.Entry{e}}, 0)
}

// prepareArrival readies this daemon (the destination) to receive a task.
func (d *Daemon) prepareArrival(a migStep) error {
	if _, err := task.New(a.Type, nil); err != nil {
		return err
	}
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvPrepare, TID: a.TID, Move: a.Move,
		Route: routing.Route{Host: d.cfg.HostID, Epoch: a.Epoch}, Peer: a.Host, Job: a.Job, Type: a.Type}))
	if x.Kind == move.DoRefuse {
		return x.Err
	}
	d.ht.incoming[a.TID] = &arriving{typ: a.Type, move: a.Move, job: a.Job, epoch: a.Epoch, from: a.Host, received: make(chan transferred, 1)}
	return nil
}

// suspendForMove asks a local task to suspend at its next safe point and
// waits until it has, or the timeout passes (then the request is
// withdrawn and the task runs on).
func (d *Daemon) suspendForMove(ctx context.Context, a migStep) error {
	// The machine compares the move with the route held here: one newer
	// than the move's means the task came back or was restored since.
	d.ht.mu.Lock() // the node's lock: the route and the task
	cur := d.rt.routes.Lookup(a.TID).Epoch
	h := d.ht.tasks[a.TID]
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvSuspend, TID: a.TID, Move: a.Move,
		Route: routing.Route{Host: a.Host, Epoch: a.Epoch}, Type: a.Type, Job: a.Job, Local: move.Local{Route: cur}}))
	d.ht.mu.Unlock()
	switch x.Kind {
	case move.DoRefuse:
		return x.Err
	case move.DoOK:
		return nil // suspended for this very move: the step is done
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = d.cfg.MoveTimeout
	}
	req := &moveRequest{move: a.Move, to: a.Host, epoch: a.Epoch, done: make(chan error, 1)}
	if !h.moveReq.CompareAndSwap(nil, req) {
		return fmt.Errorf("%v: %w", a.TID, ErrMoving)
	}
	select { // wake the task if it waits in RecvSafe
	case h.moveKick <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-req.done: // suspended, or it exited first (see finish)
		return err
	case <-t.C:
	case <-ctx.Done():
	}
	// Withdraw the request, unless the task took it meanwhile.
	if h.moveReq.CompareAndSwap(req, nil) {
		h.warnNoSafePoint("move", timeout)
		return fmt.Errorf("%v within %v: %w", a.TID, timeout, ErrNoSafePoint)
	}
	return <-req.done
}

// suspend is called by the task's own goroutine at a safe point when a move
// is pending: it takes the task out of service and captures what moves
// with it. Messages for it are refused from now on (senders hold them).
func (d *Daemon) suspend(h *hosted, req *moveRequest) error {
	d.rt.mu.Lock() // the node's lock: the routes and the tasks
	// The machine refuses a task no longer in service here (it exited),
	// one whose job rolls back (killJob: it stays here to be killed rather
	// than leave a copy in a move), and a move aborted while the request
	// waited for this safe point (the task runs on here).
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvSafePoint, TID: h.tid, Move: req.move,
		Route: routing.Route{Host: req.to, Epoch: req.epoch},
		Local: move.Local{Running: d.ht.tasks[h.tid] == h, Type: h.typ, Job: h.job, Quiet: h.quiet.Load()}}))
	if x.Kind == move.DoRefuse {
		d.rt.mu.Unlock()
		req.done <- x.Err
		if errors.Is(x.Err, task.ErrNoSuchTask) {
			return task.ErrKilled
		}
		return nil
	}
	delete(d.ht.tasks, h.tid)
	m := d.metaLocked(h, h.mb.drain())
	m.Epoch = req.epoch
	d.rt.inbox.Forget(h.tid)
	d.rt.outbox.ForgetSender(h.tid)
	delete(d.ht.watch, h.tid)
	d.ht.hostW = slices.DeleteFunc(d.ht.hostW, func(w hostWatcher) bool { return w.who == h.tid })
	d.ht.moving[h.tid] = &leaving{h: h, move: req.move, meta: m, dest: x.Route, resolved: make(chan struct{})}
	h.moved = true
	h.mb.close()
	d.rt.mu.Unlock()
	h.cancel() // its goroutine ends now; calls it might still make fail
	close(h.done)
	d.log.Info("task suspended for a move", "move", req.move, "tid", h.tid, "to", req.to)
	req.done <- nil
	return task.ErrSuspended
}

// sendCheckpoint writes a suspended task's checkpoint to the destination
// (direct) or the shared directory (indirect) and returns its size. While
// it writes, the task cannot be resumed here.
func (d *Daemon) sendCheckpoint(ctx context.Context, a migStep) (int64, error) {
	d.ht.mu.Lock()
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvSend, TID: a.TID, Move: a.Move}))
	l := d.ht.moving[a.TID]
	if x.Kind == move.DoRefuse || l == nil {
		d.ht.mu.Unlock()
		if x.Kind != move.DoRefuse {
			return 0, fmt.Errorf("%v: no state kept for its departure", a.TID)
		}
		return 0, x.Err
	}
	l.sending = make(chan struct{})
	d.ht.mu.Unlock()
	defer func() {
		d.ht.mu.Lock()
		d.ht.stepMove(move.HostEvent{Kind: move.EvSent, TID: a.TID, Move: l.move})
		close(l.sending)
		l.sending = nil
		d.ht.mu.Unlock()
	}()
	key, keyID := d.keyID(labelCkpt)
	if a.Via == Indirect {
		if d.cfg.SharedDir == "" {
			return 0, ErrNoSharedDir
		}
		// At rest in a directory other hosts can write, the checkpoint
		// carries a MAC: GMAC tags computed on all cores (ckpt.AuthGMAC).
		// The file lives only until the destination has read it, so the
		// directory is not synced after the rename (Transient), and the
		// destination reads it while its fdatasync runs in the
		// background: neither the task's freeze nor the commit waits for
		// the disk. Nothing the move relies on needs the bytes on the disk
		// (the destination verifies what it reads; a lost file aborts the
		// move, and the task resumes here); a failed sync is logged.
		n, sync, err := ckpt.Dir{Path: d.cfg.SharedDir, Transient: true}.SaveThenSync(a.Name, func(w io.Writer) error {
			_, err := ckpt.WriteWith(w, key, &l.meta, l.h.t, ckpt.WriteOptions{Auth: ckpt.AuthGMAC, KeyID: keyID})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("write %s to the shared directory: %w", a.Name, err)
		}
		d.goFunc(func() {
			if err := sync(); err != nil {
				d.log.Warn("checkpoint file not synced", "tid", a.TID, "error", err)
			}
		})
		d.ht.mu.Lock()
		l.file = a.Name
		d.ht.mu.Unlock()
		return n, nil
	}
	p, err := d.peerFor(ctx, a.Host)
	if err != nil {
		return 0, err
	}
	st, bulk, err := d.checkpointStream(ctx, p, stateBytes(l.h.t))
	if err != nil {
		return 0, fmt.Errorf("open a stream to %v: %w", a.Host, err)
	}
	if bulk {
		// The next checkpoint to the peer gets a stream opened ahead, once
		// this one is written.
		defer d.spareCheckpointStream(p, p.conn.(transport.BulkConn))
	}
	hdr, err := encodeMsg(&streamHeader{TID: a.TID, Epoch: a.Epoch, Move: a.Move})
	if err != nil {
		return 0, err
	}
	if _, err := st.Write(routing.AppendFrame(nil, routing.KindStream, hdr)); err != nil {
		return 0, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	// The stream is authenticated and protected by the connection (mutual
	// TLS under the cluster CA, AEAD): the checkpoint carries no MAC of
	// its own, only a CRC-32C (ckpt.AuthChannel).
	n, err := ckpt.WriteWith(st, key, &l.meta, l.h.t, ckpt.WriteOptions{Auth: ckpt.AuthChannel})
	if err != nil {
		return n, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	if err := st.Close(); err != nil {
		return n, fmt.Errorf("send the checkpoint to %v: %w", a.Host, err)
	}
	return n, nil
}

// acceptStreams serves the extra streams a peer opens: direct checkpoint
// transfers.
func (d *Daemon) acceptStreams(p *peer) {
	for {
		st, err := p.conn.AcceptStream(d.ctx)
		if err != nil {
			return
		}
		d.goFunc(func() { d.receiveCheckpoint(p, st) })
	}
}

// checkpointStream opens the stream a direct checkpoint of a state of
// about size bytes travels on: for a large state, the bulk lane's when the
// peer offers one (the lane's TCP moves a checkpoint several times faster than
// a QUIC stream), else a QUIC stream (no handshake: a small state moves
// sooner on it, see Config.BulkCheckpointMin). On the lane it takes the
// stream kept for the peer's next checkpoint if there is one (its
// handshakes are done: see spareCheckpointStream); bulk says that the
// stream is the lane's.
func (d *Daemon) checkpointStream(ctx context.Context, p *peer, size int64) (st transport.Stream, bulk bool, err error) {
	if bc, ok := p.conn.(transport.BulkConn); ok && d.cfg.BulkThreshold >= 0 && size >= d.cfg.BulkCheckpointMin {
		if st := p.ckpt.take(); st != nil {
			return st, true, nil
		}
		octx, cancel := context.WithTimeout(ctx, d.cfg.BulkOpenTimeout)
		st, err := bc.OpenBulk(octx)
		cancel()
		if err == nil {
			return st, true, nil
		}
		if !errors.Is(err, transport.ErrNoBulk) {
			d.log.Info("checkpoint over QUIC: no bulk lane", "peer", p.name(), "error", err)
		}
	}
	st, err = p.conn.OpenStream(ctx)
	return st, false, err
}

// receiveCheckpoint reads a checkpoint sent directly by another daemon for
// a task prepared here, and hands it to the waiting restore.
func (d *Daemon) receiveCheckpoint(p *peer, st io.ReadWriteCloser) {
	defer st.Close()
	r := routing.NewReader(st, maxStreamHeader)
	f, err := r.Next()
	if err != nil || f.Kind != routing.KindStream {
		d.log.Warn("refused a stream", "peer", p.name(), "error", err)
		return
	}
	d.takeCheckpoint(p, st, f)
}

// takeCheckpoint reads the checkpoint that follows f, a stream's opening
// KindStream frame, and hands it to the waiting restore.
func (d *Daemon) takeCheckpoint(p *peer, st io.Reader, f routing.Frame) {
	var h streamHeader
	if err := decodeMsg(f.Body, &h); err != nil {
		return
	}
	d.ht.mu.Lock()
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvStream, TID: h.TID, Move: h.Move, Route: routing.Route{Epoch: h.Epoch}, Peer: p.info.ID}))
	arr := d.ht.incoming[h.TID]
	d.ht.mu.Unlock()
	if x.Kind != move.DoReceive || arr == nil {
		d.log.Warn("refused a checkpoint for a task not prepared here", "tid", h.TID, "move", h.Move, "peer", p.name())
		return
	}
	// The peer is an authenticated daemon of the cluster: its stream may
	// carry a checkpoint without a MAC, and its numeric blocks are
	// allocated in full as their headers arrive (up to MaxState) instead of
	// growing by doubling.
	meta, t, err := ckpt.ReadLimits(st, d.ckptKey(), ckpt.Limits{Channel: true, Prealloc: ckpt.DefaultMaxState})
	select {
	case arr.received <- transferred{meta: meta, t: t, err: err}:
	default:
	}
}

// restoreArrival reads a prepared task's checkpoint (waiting for a direct
// transfer, or from the shared directory), restores it and runs it —
// unless the move was cancelled meanwhile: install checks that the
// arrival is still the one prepared, in the critical section that puts
// the task into service.
func (d *Daemon) restoreArrival(ctx context.Context, a migStep) error {
	d.ht.mu.Lock()
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvRestore, TID: a.TID, Move: a.Move}))
	arr := d.ht.incoming[a.TID]
	d.ht.mu.Unlock()
	if x.Kind == move.DoRefuse {
		return x.Err
	}
	if arr == nil {
		return fmt.Errorf("%v: no state kept for its arrival", a.TID)
	}
	if d.cfg.Fault == "exit-on-restore" {
		d.log.Error("fault injected: exiting in the middle of a migration", "tid", a.TID)
		os.Exit(137)
	}
	var got transferred
	if a.Via == Indirect {
		dir := ckpt.Dir{Path: d.cfg.SharedDir}
		got.meta, got.t, got.err = d.readCkptFile(dir, a.Name)
		if errors.Is(got.err, os.ErrNotExist) {
			return fmt.Errorf("read %s from the shared directory: %w", a.Name, got.err)
		}
		if got.err == nil {
			// Deleted once read, outside the task's freeze.
			defer d.goFunc(func() { _ = dir.Remove(a.Name) })
		}
	} else {
		timeout := a.Timeout
		if timeout <= 0 {
			timeout = d.cfg.MoveTransferTimeout
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case got = <-arr.received:
		case <-t.C:
			return fmt.Errorf("no checkpoint arrived within %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if got.err != nil {
		return fmt.Errorf("checkpoint of %v: %w", a.TID, got.err)
	}
	if got.meta.TID != a.TID {
		return fmt.Errorf("checkpoint is of %v, want %v", got.meta.TID, a.TID)
	}
	// install has the machine check the checkpoint's epoch and type
	// against the arrival.
	if err := d.install(got.meta, got.t, arr, nil); err != nil {
		return fmt.Errorf("restore %v: %w", a.TID, err)
	}
	return nil
}

// install puts a task restored from meta and its state into service on
// this daemon: its mailbox, sequence state and registrations, then the
// messages held for it (through the inbox, in sequence order), then its
// goroutine. It takes the task out of the arriving (destination) or
// leaving (origin, after an abort) state in the same critical section in
// which it enters service, so that no message ever finds it in neither —
// such a message would be refused as for a task that has exited, and its
// sender would drop it. In that critical section it checks that arr (or
// left) is still this daemon's record of the task: if the move was
// cancelled meanwhile, nothing is installed and the error wraps
// ErrAborted. For a move's arrival or a resume the host move machine
// decides (and checks the arrival's epoch and type against m); a job
// restore's staged task is the shell's own.
func (d *Daemon) install(m *ckpt.Meta, t task.Task, arr *arriving, left *leaving) error {
	h := d.newHosted(m.TID, m.Parent, m.Job, m.Type, t)
	h.sibs = readySet(m.Siblings)
	for _, g := range m.Groups { // the host's record, for a recovered master
		if h.groups == nil {
			h.groups = map[string]int{}
		}
		h.groups[g.Group] = g.Inst
	}
	acks := map[task.HostID][]byte{}
	d.rt.mu.Lock() // the node's lock: the routes and the tasks
	refused := (arr != nil && d.ht.incoming[m.TID] != arr) || (left != nil && d.ht.moving[m.TID] != left)
	var err error
	switch {
	case refused:
	case arr != nil && arr.move != 0:
		x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvInstall, TID: m.TID, Move: arr.move, Route: routing.Route{Epoch: m.Epoch}, Type: m.Type}))
		refused, err = x.Kind == move.DoRefuse, x.Err
	case left != nil:
		x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvInstall, TID: m.TID, Move: left.move, Back: true}))
		refused, err = x.Kind == move.DoRefuse, x.Err
	}
	if refused {
		d.rt.mu.Unlock()
		h.cancel()
		if err == nil {
			err = fmt.Errorf("%v: its move was cancelled: %w", m.TID, ErrAborted)
		}
		return err
	}
	for _, e := range m.Mailbox {
		h.mb.putEnvelope(e)
	}
	d.rt.inbox.SetReceiverState(m.TID, m.InSeq, m.Early)
	d.rt.outbox.SetSenderState(m.TID, m.OutSeq)
	var held []heldMsg
	if arr != nil {
		held = arr.held
		h.arrived = arr.move
		delete(d.ht.incoming, m.TID)
	}
	if left != nil {
		held = append(held, left.held...)
		delete(d.ht.moving, m.TID)
	}
	d.ht.tasks[m.TID] = h
	for _, w := range m.Watchers {
		d.ht.watch[m.TID] = append(d.ht.watch[m.TID], watcher{who: w.Who, tag: w.Tag})
	}
	for _, w := range m.HostWatches {
		d.ht.hostW = append(d.ht.hostW, hostWatcher{watcher: watcher{who: m.TID, tag: w.Tag}, kind: w.Kind, host: w.Host})
	}
	d.wg.Add(1)
	d.tasksChanged()
	for _, x := range held {
		if x.env.Seq == 0 {
			h.mb.putEnvelope(x.env)
			continue
		}
		a := d.rt.inbox.Accept(x.env, func(e routing.Envelope) {
			h.mb.putEnvelope(e)
		})
		if x.host == d.cfg.HostID {
			d.rt.outbox.Ack(a)
		} else {
			acks[x.host] = routing.AppendAck(acks[x.host], a)
		}
	}
	// Messages this daemon's own tasks held for the task go in too.
	var local []routing.Envelope
	if r := d.rt.routes.Lookup(m.TID); r.Host == d.cfg.HostID {
		_, local = d.rt.outbox.Reroute(m.TID, r, time.Now())
	}
	for _, e := range local {
		a := d.rt.inbox.Accept(e, func(x routing.Envelope) {
			h.mb.putEnvelope(x)
		})
		d.rt.outbox.Ack(a)
	}
	d.rt.mu.Unlock()
	for host, b := range acks {
		if p, err := d.peerFor(d.ctx, host); err == nil {
			p.frame(routing.KindAcks, b)
		}
	}
	if arr != nil && arr.move != 0 {
		d.log.Info("task restored from a move", "move", arr.move, "tid", m.TID, "type", m.Type, "mailbox", len(m.Mailbox), "held", len(held))
	} else {
		d.log.Debug("task restored", "tid", m.TID, "type", m.Type, "mailbox", len(m.Mailbox), "held", len(held))
	}
	go d.run(h)
	return nil
}

// commitDeparture forgets a task that now runs elsewhere (origin).
func (d *Daemon) commitDeparture(a migStep) {
	d.ht.mu.Lock()
	x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvCommit, TID: a.TID, Move: a.Move}))
	l := d.ht.moving[a.TID]
	if x.Kind != move.DoForget || l == nil {
		d.ht.mu.Unlock()
		return
	}
	delete(d.ht.moving, a.TID)
	d.ht.mu.Unlock()
	// The task runs at the destination: its route there applies here now,
	// whether or not the master's broadcast of it has come. Without it,
	// this host would take the task for one that exited here and drop its
	// own tasks' messages to it (daemon/sim found it: the broadcast can
	// come after the commit step).
	d.applyRoutes([]routing.Entry{{TID: a.TID, Route: x.Route}})
	if l.file != "" {
		_ = ckpt.Dir{Path: d.cfg.SharedDir}.Remove(l.file)
	}
	close(l.resolved)
}

// resumeDeparture aborts a move at the origin: the task runs here again,
// from the state it was suspended with, at route a.Route. A checkpoint
// being written is waited for first. From now on this host refuses every
// step of the move (and of older ones) for the task. A task that runs
// here already (resumed before, or never suspended) is left as it is.
func (d *Daemon) resumeDeparture(ctx context.Context, a migStep) error {
	tid := a.TID
	d.ht.mu.Lock()
	for {
		x := stepAnswer(d.ht.stepMove(move.HostEvent{Kind: move.EvResume, TID: tid, Move: a.Move, Route: a.Route}))
		l := d.ht.moving[tid]
		switch {
		case x.Kind == move.DoRefuse:
			d.ht.mu.Unlock()
			return x.Err
		case x.Kind == move.DoWait:
			if l == nil || l.sending == nil {
				d.ht.mu.Unlock()
				return fmt.Errorf("resume %v: no checkpoint write kept for its departure", tid)
			}
			ch := l.sending
			d.ht.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return fmt.Errorf("resume %v: its checkpoint is still being sent: %w", tid, ctx.Err())
			}
			d.ht.mu.Lock()
			continue
		case x.Kind != move.DoResume || l == nil:
			d.ht.mu.Unlock()
			return nil // resumed before, or never suspended
		}
		d.ht.mu.Unlock()
		if l.file != "" {
			_ = ckpt.Dir{Path: d.cfg.SharedDir}.Remove(l.file)
		}
		d.rt.update(tid, x.Route)
		m := l.meta
		// The task runs again from a decoded copy of its state, as after a
		// restore: the object Run left at the safe point may hold what a
		// checkpoint does not (a communicator's replay position, unexported),
		// and Run re-enters expecting what a checkpoint gives it. A state
		// that does not encode (the move may have aborted for it) resumes
		// as it is.
		t := l.h.t
		if typ, state, err := task.EncodeState(t); err == nil {
			if c, err := task.New(typ, state); err == nil {
				t = c
			}
		}
		err := d.install(&m, t, nil, l)
		close(l.resolved)
		return err
	}
}

// cancelArrival aborts a move at the destination: the arrival prepared for
// it is dropped and messages held for the task are refused, naming the way
// back. It reports whether the task already runs here, restored by that
// move (then nothing changes: the move happened). From now on this host
// refuses every step of the move (and of older ones) for the task.
func (d *Daemon) cancelArrival(a migStep) (installed bool) {
	tid, back := a.TID, a.Route
	// The arrival goes and the way back comes in one critical section
	// (under the node's lock, as receiveMsgs takes it): a message that
	// found neither would find this host's route to itself, the move's,
	// and be refused as for a task that has exited, and its sender would
	// drop every message it holds for the task.
	d.rt.mu.Lock()
	var arr *arriving // this move's arrival, if the machine drops it
	for _, x := range d.ht.stepMove(move.HostEvent{Kind: move.EvCancel, TID: tid, Move: a.Move, Route: back}) {
		switch x.Kind {
		case move.DoInstalled:
			d.rt.mu.Unlock()
			return true
		case move.DoDropArrival:
			arr = d.ht.incoming[tid]
			delete(d.ht.incoming, tid)
		case move.DoSetRoute:
			back = x.Route
		}
	}
	d.rt.routes.Update(tid, back)
	var held []heldMsg
	if arr != nil {
		held = arr.held
	}
	refusals := map[task.HostID][]byte{}
	for _, x := range held {
		if x.host == d.cfg.HostID {
			continue // still in this daemon's outbox: rerouted below
		}
		refusals[x.host] = routing.AppendRefusal(refusals[x.host], routing.Refusal{To: tid, Route: back})
	}
	h, envs := d.rt.outbox.Reroute(tid, back, time.Now())
	d.rt.mu.Unlock()
	for host, b := range refusals {
		if p, err := d.peerFor(d.ctx, host); err == nil {
			p.frame(routing.KindRefuse, b)
		}
	}
	if len(envs) > 0 {
		d.transmit(h, envs)
	}
	return false
}

// dropJobMoves ends the moves of job's tasks (master), before its hosts
// kill the job's tasks for a rollback: the hosts drop the suspended and
// the arriving copies with the tasks (see dropJobArrivals), so each move
// ends aborted without a resume, and a late answer of one of its steps is
// stale.
func (d *Daemon) dropJobMoves(job uint64) {
	d.perform(d.mn.step(mnode.Event{Kind: mnode.EvDropJob, Job: job, Err: fmt.Errorf("job %d rolls back", job)}))
}

// dropJobArrivals drops this host's copies of job's tasks caught in a
// move: a task suspended here (the origin) and an arrival prepared here
// (the destination). Every later step of those moves is refused (the
// task's move floor rises to them). It returns the tasks dropped.
func (d *Daemon) dropJobArrivals(job uint64) []task.TID {
	var tids []task.TID
	var left []*leaving
	d.ht.mu.Lock()
	for _, x := range d.ht.stepMove(move.HostEvent{Kind: move.EvDropJob, Job: job}) {
		switch x.Kind {
		case move.DoDropDeparture:
			if l := d.ht.moving[x.TID]; l != nil {
				delete(d.ht.moving, x.TID)
				left = append(left, l)
			}
		case move.DoDropArrival:
			delete(d.ht.incoming, x.TID)
		}
		tids = append(tids, x.TID)
	}
	d.ht.mu.Unlock()
	for _, l := range left {
		if l.file != "" {
			_ = ckpt.Dir{Path: d.cfg.SharedDir}.Remove(l.file)
		}
		close(l.resolved)
		d.log.Info("task caught in a move dropped with its job", "move", l.move, "tid", l.h.tid, "job", job)
	}
	return tids
}

// settleMoves waits until no move of a task that match selects is under
// way (master), for at most a move's longest course: a move ends
// committed or aborted within its steps' timeouts, and then its task runs
// on exactly one host, where a kill finds it. A task suspended or
// arriving for a move is in no host's task table, so a kill sent
// meanwhile would miss it and the move would bring it back to life.
func (d *Daemon) settleMoves(ctx context.Context, match func(tid task.TID, job uint64) bool) {
	d.mn.mu.Lock()
	var wait []chan struct{}
	for _, mv := range d.mn.node.Moves() {
		if run := d.mv.runs[mv.ID]; run != nil && match(mv.TID, mv.Job) {
			wait = append(wait, run.ended)
		}
	}
	d.mn.mu.Unlock()
	if len(wait) == 0 {
		return
	}
	t := time.NewTimer(d.moveTimeouts().Course())
	defer t.Stop()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-t.C:
			d.log.Warn("moves still under way before a kill", "moves", len(wait))
			return
		case <-ctx.Done():
			return
		case <-d.ctx.Done():
			return
		}
	}
}

// movesHostLost tells the move machine that host h was deleted (master),
// and waits, up to a move's longest step, for the moves to h to end: an
// aborted move's route back must be out before anyone drops the messages
// routed to the lost host, so that messages held for the task follow it
// back instead of being dropped with the host.
func (d *Daemon) movesHostLost(h task.HostID) {
	d.mn.mu.Lock()
	var wait []chan struct{}
	for _, mv := range d.mn.node.Moves() {
		if run := d.mv.runs[mv.ID]; run != nil && mv.To == h {
			wait = append(wait, run.ended)
		}
	}
	fx := d.mn.stepLocked(mnode.Event{Kind: mnode.EvHostLost, Host: h})
	d.mn.mu.Unlock()
	d.perform(fx)
	if len(wait) == 0 {
		return
	}
	t := time.NewTimer(d.moveTimeouts().Unwind())
	defer t.Stop()
	for _, ch := range wait {
		select {
		case <-ch:
		case <-t.C:
			d.log.Warn("moves to a lost host still under way", "host", h)
			return
		case <-d.ctx.Done():
			return
		}
	}
}
