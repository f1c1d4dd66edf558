package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// stask is one incarnation of a task: a program's Task value run by its
// own goroutine, which runs only while it holds the baton. The loop hands
// the baton over with an answer on baton; every Endpoint call the task
// makes does its work with the baton held and hands it back (yield):
// exactly one goroutine runs at a time, so the run is deterministic.
// A restore after a move or a resume is a new incarnation.
type stask struct {
	w           *world
	tid, parent task.TID
	siblings    []task.TID // the tasks its spawn started (nil: itself alone)
	typ         string
	job         uint64
	inc         int // incarnation: 1 for the first
	host        *shost
	t           task.Task
	arrived     move.ID // the move that restored it here (0: none)

	mb    []routing.Envelope // its mailbox, in arrival order
	baton chan answer
	ctx   context.Context
	stop  context.CancelFunc

	// started: its goroutine runs Run; ended: Run has returned.
	started, ended bool
	// park is what it waits for, while it waits; scheduled: a run of it
	// is in the event queue.
	park      *parkReq
	scheduled bool
	runLine   string // the trace's line of a run of it
	moveReq   *moveReq
	pause     *pauseRec // a job checkpoint's pause, while one holds it
	killed    bool
	quiet     bool // killed for its job's rollback: its end is no exit
	// lastSafe is when it last reached a safe point, safeEvery the
	// longest interval between two it has shown (the pause budget).
	lastSafe, safeEvery time.Duration
	suspended           bool // captured for a move: its goroutine ends, the task does not
	exitSet             bool
	status              int
	result              task.Payload
	runErr              error
}

// answer is what the loop hands a task with the baton.
type answer struct {
	msg routing.Envelope
	ok  bool
	err error
}

// parkKind is what a parked task waits for.
type parkKind uint8

const (
	parkRecv    parkKind = iota + 1 // a matching message
	parkSafe                        // a matching message, or a move request
	parkBarrier                     // the group's barrier
	parkPause                       // a job checkpoint's pause to end
	parkMaster                      // an answer from a crashed master (never)
)

type parkReq struct {
	kind parkKind
	from task.TID
	tag  int
	// match, when set, must accept a message's status too (RecvFunc): it
	// runs on the task's goroutine with the baton held, or on the loop's
	// while the task is parked, never on both at once.
	match    func(task.Status) bool
	group    string
	released bool
}

// moveReq asks a running task to suspend at its next safe point.
type moveReq struct {
	move  move.ID
	dest  routing.Route
	reply func(o move.Outcome, err error)
}

// errKilledEnd is the answer a task's goroutine gets when the run ends.
var errKilledEnd = fmt.Errorf("the simulation ended: %w", task.ErrKilled)

// newTask makes an incarnation of tid on h, not yet running.
func (w *world) newTask(h *shost, tid, parent task.TID, typ string, job uint64, t task.Task, inc int) *stask {
	st := &stask{w: w, tid: tid, parent: parent, typ: typ, job: job, host: h, t: t, inc: inc, baton: make(chan answer),
		runLine: fmt.Sprintf("run %v#%d on %v", tid, inc, h.name)}
	st.ctx, st.stop = context.WithCancel(context.Background())
	st.lastSafe = w.now
	w.tasks = append(w.tasks, st)
	return st
}

// start runs st's goroutine and schedules its first run.
func (st *stask) start() {
	st.started = true
	go st.main()
	st.schedule(st.w.dur(time.Microsecond, 20*time.Microsecond), answer{})
}

// main is the task goroutine: it waits for the baton, runs the program
// and hands the baton back for the last time when Run returns (or the
// goroutine exits through Ctx.Exit).
func (st *stask) main() {
	<-st.baton
	defer func() {
		if r := recover(); r != nil {
			st.runErr = fmt.Errorf("task %v panicked: %v", st.tid, r)
		}
		st.ended = true
		st.w.yield <- st
	}()
	st.runErr = st.t.Run(task.NewCtx((*endpoint)(st), st.t))
}

// schedule runs st after d with a.
func (st *stask) schedule(d time.Duration, a answer) {
	if st.scheduled {
		return
	}
	st.scheduled = true
	st.w.after(d, st.host, st.runLine, func() {
		st.scheduled = false
		st.w.runTask(st, a)
	})
}

// runTask hands st the baton with a and waits until it hands it back,
// then deals with its end if Run returned.
func (w *world) runTask(st *stask, a answer) {
	if st.ended {
		return
	}
	st.baton <- a
	<-w.yield
	if st.ended {
		st.host.taskEnded(st)
	}
}

// yield hands the baton back to the loop after an Endpoint call that
// took cost, and waits for it: the task runs on after cost.
func (st *stask) yield(cost time.Duration) answer {
	st.schedule(cost, answer{})
	st.w.yield <- st
	return <-st.baton
}

// wait parks the task until p is met (the loop then schedules it with
// the answer) and hands the baton back.
func (st *stask) wait(p *parkReq) answer {
	st.park = p
	st.w.note(fmt.Sprintf("%v#%d waits: kind %d from %v tag %d", st.tid, st.inc, p.kind, p.from, p.tag))
	st.w.yield <- st
	return <-st.baton
}

// wake ends st's wait with a.
func (st *stask) wake(a answer) {
	st.park = nil
	st.schedule(st.w.dur(time.Microsecond, 10*time.Microsecond), a)
}

// endTasks ends every task goroutine still alive: a parked or scheduled
// one gets the baton with ErrKilled until Run returns.
func (w *world) endTasks() {
	for _, st := range w.tasks {
		st.killed = true
		st.stop()
		for n := 0; st.started && !st.ended; n++ {
			if n == 1000 {
				// A program that ignores ErrKilled keeps its goroutine;
				// nothing else can end it.
				break
			}
			st.park = nil
			st.baton <- answer{err: errKilledEnd}
			<-w.yield
		}
	}
}

// cost is the virtual time an Endpoint call takes.
func (st *stask) cost() time.Duration { return st.w.dur(time.Microsecond, 20*time.Microsecond) }

// endpoint is a task's task.Endpoint in the simulation.
type endpoint stask

var (
	_ task.Endpoint     = (*endpoint)(nil)
	_ task.FuncReceiver = (*endpoint)(nil)
)

func (ep *endpoint) st() *stask { return (*stask)(ep) }

// Self implements task.Endpoint.
func (ep *endpoint) Self() task.TID { return ep.tid }

// Parent implements task.Endpoint.
func (ep *endpoint) Parent() task.TID { return ep.parent }

// Siblings implements task.Endpoint.
func (ep *endpoint) Siblings() []task.TID { return ep.siblings }

// HostName implements task.Endpoint.
func (ep *endpoint) HostName() string { return ep.host.name }

// Context implements task.Endpoint: cancelled when the task is killed or
// the run ends. Deadlines on it are wall-clock time, which the
// simulation does not follow.
func (ep *endpoint) Context() context.Context { return ep.ctx }

// Output implements task.Endpoint: the job's output.
func (ep *endpoint) Output() io.Writer { return outWriter{ep.w} }

// Logger implements task.Endpoint: the simulation drops tasks' logs.
func (ep *endpoint) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// outWriter appends a task's prints to the job's output. What an
// incarnation killed for its job's rollback prints while it ends comes,
// as in the daemon, before the rollback's restore: with the output the
// rollback undoes.
type outWriter struct{ w *world }

func (o outWriter) Write(p []byte) (int, error) {
	o.w.out = append(o.w.out, p...)
	return len(p), nil
}

// SetResult implements task.ResultSetter.
func (ep *endpoint) SetResult(p task.Payload) { ep.result = p }

// check is the common start of a call: the task's error if it is killed.
func (ep *endpoint) check() error {
	if ep.killed {
		return errKilledEnd
	}
	return nil
}

// checkMaster is check for a call to the master: while the master is
// down (FaultMaster) the call is never answered, and the task waits
// until the run ends it.
func (ep *endpoint) checkMaster() error {
	if err := ep.check(); err != nil {
		return err
	}
	if ep.w.master.down {
		return ep.st().wait(&parkReq{kind: parkMaster}).err
	}
	return nil
}

// Send implements task.Endpoint.
func (ep *endpoint) Send(_ context.Context, to task.TID, tag int, p task.Payload) error {
	if err := ep.check(); err != nil {
		return err
	}
	if to == 0 || to == task.AnyTask {
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	if ep.w.host(to.Host()) == nil {
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	ep.host.sendMsg(ep.tid, to, tag, task.Payload{Enc: p.Enc, Data: append([]byte(nil), p.Data...)})
	a := ep.st().yield(ep.st().cost())
	return a.err
}

// Mcast implements task.Endpoint.
func (ep *endpoint) Mcast(ctx context.Context, to []task.TID, tag int, p task.Payload) error {
	for _, t := range to {
		if err := ep.Send(ctx, t, tag, p); err != nil {
			return err
		}
	}
	return nil
}

// take removes and returns the first message in the mailbox from from
// with tag tag (wildcards allowed) that match, when set, accepts.
func (st *stask) take(from task.TID, tag int, match func(task.Status) bool) (routing.Envelope, bool) {
	for i, e := range st.mb {
		if matches(e, from, tag, match) {
			st.mb = append(st.mb[:i], st.mb[i+1:]...)
			return e, true
		}
	}
	return routing.Envelope{}, false
}

// matches says whether e is from from with tag tag (wildcards allowed)
// and, when match is set, whether match accepts its status.
func matches(e routing.Envelope, from task.TID, tag int, match func(task.Status) bool) bool {
	if (from != task.AnyTask && e.From != from) || (tag != task.AnyTag && int(e.Tag) != tag) {
		return false
	}
	if match == nil {
		return true
	}
	m := message(e)
	return match(m.Status())
}

func message(e routing.Envelope) task.Message {
	return task.Message{From: e.From, Tag: int(e.Tag), Payload: e.Body}
}

// Recv implements task.Endpoint.
func (ep *endpoint) Recv(_ context.Context, from task.TID, tag int, wait bool) (task.Message, bool, error) {
	return ep.recv(from, tag, nil, wait, false)
}

// RecvSafe implements task.Endpoint: a wait that a move request ends.
func (ep *endpoint) RecvSafe(_ context.Context, from task.TID, tag int) (task.Message, bool, error) {
	return ep.recv(from, tag, nil, true, true)
}

// RecvFunc implements task.FuncReceiver: Recv taking only a message
// match accepts as well.
func (ep *endpoint) RecvFunc(_ context.Context, from task.TID, tag int, match func(task.Status) bool, wait bool) (task.Message, bool, error) {
	return ep.recv(from, tag, match, wait, false)
}

// RecvFuncSafe implements task.FuncReceiver: RecvSafe taking only a
// message match accepts as well.
func (ep *endpoint) RecvFuncSafe(_ context.Context, from task.TID, tag int, match func(task.Status) bool) (task.Message, bool, error) {
	return ep.recv(from, tag, match, true, true)
}

func (ep *endpoint) recv(from task.TID, tag int, match func(task.Status) bool, wait, safe bool) (task.Message, bool, error) {
	st := ep.st()
	if err := ep.check(); err != nil {
		return task.Message{}, false, err
	}
	if e, ok := st.take(from, tag, match); ok {
		a := st.yield(st.cost())
		return message(e), a.err == nil, a.err
	}
	if !wait {
		a := st.yield(st.cost())
		return task.Message{}, false, a.err
	}
	if safe && (st.moveReq != nil || st.pause != nil && !st.pause.arrived) {
		a := st.yield(st.cost())
		return task.Message{}, false, a.err
	}
	k := parkRecv
	if safe {
		k = parkSafe
	}
	a := st.wait(&parkReq{kind: k, from: from, tag: tag, match: match})
	if a.err != nil {
		return task.Message{}, false, a.err
	}
	if !a.ok {
		return task.Message{}, false, nil // a move request: to the safe point
	}
	return message(a.msg), true, nil
}

// Probe implements task.Endpoint.
func (ep *endpoint) Probe(from task.TID, tag int) (task.Status, bool) {
	for _, e := range ep.mb {
		if matches(e, from, tag, nil) {
			m := message(e)
			return m.Status(), true
		}
	}
	return task.Status{}, false
}

// deliver puts e into st's mailbox, or hands it to st if it waits for it.
func (st *stask) deliver(e routing.Envelope) {
	if p := st.park; p != nil && (p.kind == parkRecv || p.kind == parkSafe) && matches(e, p.from, p.tag, p.match) {
		st.wake(answer{msg: e, ok: true})
		return
	}
	st.mb = append(st.mb, e)
}

// Hosts implements task.Endpoint.
func (ep *endpoint) Hosts(context.Context) ([]task.Host, error) {
	if err := ep.check(); err != nil {
		return nil, err
	}
	var out []task.Host
	for _, h := range ep.w.hosts {
		out = append(out, task.Host{ID: h.id, Name: h.name, Cores: 1, Speed: 1})
	}
	a := ep.st().yield(ep.w.master.rtt())
	return out, a.err
}

// Spawn implements task.Endpoint: the master places the tasks and their
// hosts start them.
func (ep *endpoint) Spawn(_ context.Context, req task.SpawnRequest) ([]task.TID, error) {
	if err := ep.checkMaster(); err != nil {
		return nil, err
	}
	tids, err := ep.w.master.spawn(ep.tid, ep.job, req)
	a := ep.st().yield(ep.w.master.rtt())
	if err == nil {
		err = a.err
	}
	return tids, err
}

// Kill implements task.Endpoint.
func (ep *endpoint) Kill(_ context.Context, tid task.TID) error {
	if err := ep.checkMaster(); err != nil {
		return err
	}
	err := ep.w.master.kill(tid)
	a := ep.st().yield(ep.w.master.rtt())
	if err == nil {
		err = a.err
	}
	return err
}

// Exit implements task.Endpoint.
func (ep *endpoint) Exit(status int) { ep.exitSet, ep.status = true, status }

// Notify implements task.Endpoint: TaskExit notices are sent; host
// notices never fire (no host joins or leaves the simulated machine).
func (ep *endpoint) Notify(_ context.Context, kind task.NotifyKind, tag int, tids []task.TID) error {
	if err := ep.checkMaster(); err != nil {
		return err
	}
	if kind == task.TaskExit {
		for _, t := range tids {
			ep.w.master.watch(t, ep.tid, tag)
		}
	}
	a := ep.st().yield(ep.w.master.rtt())
	return a.err
}

// Join implements task.Endpoint.
func (ep *endpoint) Join(_ context.Context, group string) (int, error) {
	if err := ep.checkMaster(); err != nil {
		return 0, err
	}
	inst, err := ep.w.master.join(group, ep.tid)
	a := ep.st().yield(ep.w.master.rtt())
	if err == nil {
		err = a.err
	}
	return inst, err
}

// Leave implements task.Endpoint.
func (ep *endpoint) Leave(_ context.Context, group string) error {
	if err := ep.checkMaster(); err != nil {
		return err
	}
	err := ep.w.master.leave(group, ep.tid)
	a := ep.st().yield(ep.w.master.rtt())
	if err == nil {
		err = a.err
	}
	return err
}

// Members implements task.Endpoint.
func (ep *endpoint) Members(_ context.Context, group string) ([]task.TID, error) {
	if err := ep.checkMaster(); err != nil {
		return nil, err
	}
	m, err := ep.w.master.members(group)
	a := ep.st().yield(ep.w.master.rtt())
	if err == nil {
		err = a.err
	}
	return m, err
}

// Barrier implements task.Endpoint.
func (ep *endpoint) Barrier(_ context.Context, group string, count int) error {
	if err := ep.checkMaster(); err != nil {
		return err
	}
	st := ep.st()
	done, err := ep.w.master.barrier(group, count, st)
	if err != nil || done {
		if a := st.yield(ep.w.master.rtt()); err == nil {
			err = a.err
		}
		return err
	}
	return st.wait(&parkReq{kind: parkBarrier, group: group}).err
}

// SafePoint implements task.Endpoint: a move requested of the task
// captures it here (the host half of moves decides), and Run is to
// return ErrSuspended.
func (ep *endpoint) SafePoint(t task.Task) error {
	st := ep.st()
	if err := ep.check(); err != nil {
		return err
	}
	st.safeEvery = max(st.safeEvery, st.w.now-st.lastSafe)
	st.lastSafe = st.w.now
	// A job checkpoint's pause goes before a move: the pause step took
	// the task as one of the job's here (it was asked to move only
	// after), and a task that left now would be written by no host,
	// missing from a set that completes. The move waits for the round.
	// As in the daemon, a next round's pause asked while the task was held
	// is taken before the move.
	for p := st.pause; p != nil && !p.arrived; p = st.pause {
		// Held here for a job checkpoint until its round lets go.
		p.arrived = true
		if err := st.wait(&parkReq{kind: parkPause}).err; err != nil {
			return err
		}
		st.lastSafe = st.w.now
	}
	if req := st.moveReq; req != nil {
		st.moveReq = nil
		if err := st.host.capture(st, req); err != nil {
			if errors.Is(err, task.ErrSuspended) {
				return err
			}
			if errors.Is(err, task.ErrNoSuchTask) {
				return task.ErrKilled
			}
		}
	}
	return st.yield(st.cost()).err
}

// Migrate implements task.Endpoint: the master moves the task and the
// caller waits for the move's end.
func (ep *endpoint) Migrate(_ context.Context, tid task.TID, host, _ string) error {
	if err := ep.checkMaster(); err != nil {
		return err
	}
	h := ep.w.hostByName(host)
	if h == nil {
		return fmt.Errorf("migrate %v: no host %q", tid, host)
	}
	st := ep.st()
	done := &parkReq{kind: parkBarrier}
	var moveErr error
	if err := ep.w.master.startMove(tid, h.id, func(err error) {
		moveErr = err
		if st.park == done {
			st.wake(answer{})
		} else {
			done.released = true
		}
	}); err != nil {
		st.yield(ep.w.master.rtt())
		return err
	}
	if done.released {
		return moveErr
	}
	if a := st.wait(done); a.err != nil {
		return a.err
	}
	return moveErr
}

// exitStatus is the status the task ended with.
func (st *stask) exitStatus() int {
	if st.exitSet {
		return st.status
	}
	return task.ExitStatus(st.runErr)
}
