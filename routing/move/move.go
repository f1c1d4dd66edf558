package move

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Errors of moves. The driver wraps them; callers test them with errors.Is.
var (
	// ErrMoving: the task is already being moved.
	ErrMoving = errors.New("task is already moving")
	// ErrSameHost: the task already runs on the destination.
	ErrSameHost = errors.New("task already runs on the destination")
	// ErrAborted: the move was undone; the task runs at its origin again.
	ErrAborted = errors.New("move aborted")
	// ErrLost: the task's origin host was lost during the move, before the
	// destination ran the task.
	ErrLost = errors.New("task lost with its origin host during the move")
	// ErrStale: a result for a move that does not wait for it (late,
	// duplicated, or of an aborted or superseded move).
	ErrStale = errors.New("stale move step")
	// ErrBadTimeouts: a move was started without its timeouts.
	ErrBadTimeouts = errors.New("move timeouts must be positive")
	// ErrHeld: the moves of the task's job are held (its kill is under
	// way: a move would take the task out of every host's task table,
	// where the kill would miss it).
	ErrHeld = errors.New("moves of the task's job are held")
	// ErrBadEvent: an event the machine does not know.
	ErrBadEvent = errors.New("unknown move event")
)

// ID identifies one move. IDs are never reused by a Machine; the driver
// seeds a recovered master's machine above the IDs hosts report.
type ID uint64

func (id ID) String() string { return "m" + strconv.FormatUint(uint64(id), 10) }

// State is where a move is.
type State uint8

// Move states.
const (
	// Preparing: the destination is asked to prepare an empty context.
	Preparing State = iota + 1
	// Freezing: the origin is asked to suspend the task at a safe point.
	Freezing
	// Transferring: the task is suspended and routed to the destination
	// (in transit); the origin writes its checkpoint.
	Transferring
	// Restoring: the destination reads the checkpoint and restores.
	Restoring
	// Committing: the destination runs the task; the origin is told to
	// forget it.
	Committing
	// Done: the task runs at the destination.
	Done
	// Cancelling: aborting; the destination is asked to drop the arrival.
	// The origin is not resumed before it answers.
	Cancelling
	// Resuming: aborting; the origin is asked to resume the task.
	Resuming
	// Aborted: the task runs at its origin again (or was lost with it).
	Aborted
)

var stateNames = [...]string{"", "Preparing", "Freezing", "Transferring", "Restoring", "Committing", "Done", "Cancelling", "Resuming", "Aborted"}

func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Step is one remote step of a move. Wire values: append only.
type Step uint8

// Move steps.
const (
	// StepPrepare (destination): make an empty context for the task.
	StepPrepare Step = iota + 1
	// StepSuspend (origin): suspend the task at its next safe point.
	StepSuspend
	// StepSend (origin): write the suspended task's checkpoint.
	StepSend
	// StepRestore (destination): read the checkpoint, restore, run.
	StepRestore
	// StepCommit (origin): forget the suspended task.
	StepCommit
	// StepCancel (destination): drop the arrival, unless it already runs
	// (then answer Installed).
	StepCancel
	// StepResume (origin): run the suspended task again.
	StepResume
)

var stepNames = [...]string{"", "prepare", "suspend", "send", "restore", "commit", "cancel", "resume"}

func (s Step) String() string {
	if int(s) < len(stepNames) && s != 0 {
		return stepNames[s]
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// Outcome is what a step's call came to, as the driver reports it.
type Outcome uint8

// Outcomes.
const (
	// OK: the host did the step.
	OK Outcome = iota
	// Failed: the step may or may not have taken effect (the call failed
	// or timed out, or the host answered with an error).
	Failed
	// Refused: the host answered that the step did not take effect and
	// will not (a suspend withdrawn because no safe point came in time).
	Refused
	// Installed: (StepCancel only) the destination already runs the task.
	Installed
)

var outcomeNames = [...]string{"ok", "failed", "refused", "installed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Kind is the kind of an Action.
type Kind uint8

// Action kinds.
const (
	// Call: perform Step at Host within Timeout and report with Result.
	Call Kind = iota + 1
	// SetRoute: record Route for TID in the master's table and broadcast
	// it.
	SetRoute
	// Finish: the move has ended; Err is nil when the task runs at the
	// destination.
	Finish
	// Reject: the event was refused with Err (a move that cannot start, a
	// stale result); nothing changed.
	Reject
)

var kindNames = [...]string{"", "call", "route", "finish", "reject"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Action is something the machine wants done.
type Action struct {
	Kind Kind
	Move ID
	TID  task.TID
	// Call: the step, the host to call, and how long to wait for it.
	Step    Step
	Host    task.HostID
	Timeout time.Duration
	// Route is, for a Call, the route the step concerns: the
	// destination's for the forward steps, the way back for StepCancel
	// and StepResume. For SetRoute, the route to set.
	Route routing.Route
	// Notify (Call) marks a step whose result the move does not wait for
	// (a destination told to drop an arrival after the move failed before
	// the task was suspended). The driver performs it and need not report.
	Notify bool
	// Err (Finish) says why the move did not happen.
	Err error
}

func (a Action) String() string {
	switch a.Kind {
	case Call:
		s := fmt.Sprintf("call %v %v %v at %v, route %v e%d, in %v", a.Move, a.Step, a.TID, a.Host, a.Route.Host, a.Route.Epoch, a.Timeout)
		if a.Notify {
			s += " notify"
		}
		return s
	case SetRoute:
		s := fmt.Sprintf("route %v %v → %v e%d", a.Move, a.TID, a.Route.Host, a.Route.Epoch)
		if a.Route.InTransit {
			s += " in transit"
		}
		return s
	case Finish:
		if a.Err == nil {
			return fmt.Sprintf("finish %v %v ok", a.Move, a.TID)
		}
		return fmt.Sprintf("finish %v %v: %v", a.Move, a.TID, a.Err)
	case Reject:
		return fmt.Sprintf("reject: %v", a.Err)
	}
	return a.Kind.String()
}

// EventKind is the kind of an Event of the Machine.
type EventKind uint8

// Machine events. Each names the fields of Event it reads.
const (
	// Start: begin a move of Spec; the destination is asked to prepare.
	// A task already moving, a move to where the task runs, and a task of
	// a held job (Hold) are rejected.
	Start EventKind = iota + 1
	// Result: the outcome (Outcome, Err) of Step of Move, a call the
	// machine asked for. One the move does not wait for is rejected with
	// ErrStale.
	Result
	// Tick: the clock moved; failed abort and commit steps whose retry
	// time has come are tried again. The driver ticks every heartbeat.
	Tick
	// HostLost: Host was deleted from the virtual machine.
	HostLost
	// Adopt: take over Move, which a previous master left half done, as
	// the hosts reported it: Spec.TID suspended at Spec.From for a move to
	// the destination route (Spec.To, Spec.Epoch); AtDest says whether the
	// destination runs it.
	Adopt
	// Drop: end TID's move under way, if any, as aborted with Err (its
	// job rolls back).
	Drop
	// DropJob: Drop every move of Job's tasks, with Err.
	DropJob
	// Hold: a kill of Job is under way; no move of its tasks starts until
	// the matching Release. Holds nest.
	Hold
	// Release: one Hold of Job is over.
	Release
	// Report: Host, registering again with a recovered master, reports
	// the moves it is the origin of that a previous master left half done
	// (Orphans) and the tasks it runs (Running). They are kept until both
	// hosts of a move are back (Resolve).
	Report
	// Resolve: Hosts are in the virtual machine now. Every reported move
	// whose origin and destination are among them is adopted (as Adopt,
	// with Spec.Timeouts), in task order: it commits if its destination
	// reported the task running, and aborts otherwise.
	Resolve
)

var eventNames = [...]string{"", "start", "result", "tick", "host-lost", "adopt", "drop", "drop-job", "hold", "release", "report", "resolve"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one event of the Machine.
type Event struct {
	Kind EventKind
	// Spec (Start, Adopt) is the move.
	Spec Spec
	// Move, Step, Outcome and Err (Result) are a call's outcome; Err is
	// also the cause of a Drop or DropJob.
	Move    ID
	Step    Step
	Outcome Outcome
	Err     error
	// Host (HostLost) is the host deleted.
	Host task.HostID
	// TID (Drop) is the task whose move ends.
	TID task.TID
	// Job (DropJob, Hold, Release) is the job.
	Job uint64
	// AtDest (Adopt): the destination runs the task.
	AtDest bool
	// Orphans and Running (Report) are what Host reports; Hosts
	// (Resolve) are the hosts of the virtual machine.
	Orphans []Orphan
	Running []task.TID
	Hosts   []task.HostID
}

// Orphan is a move a previous master left half done, as its origin
// reports it: its task is suspended there for Move to Dest.
type Orphan struct {
	Move ID
	TID  task.TID
	Dest routing.Route
}

func (e Event) String() string {
	switch e.Kind {
	case Start:
		return fmt.Sprintf("start %v %v→%v e%d job %d", e.Spec.TID, e.Spec.From, e.Spec.To, e.Spec.Epoch, e.Spec.Job)
	case Result:
		s := fmt.Sprintf("result %v %v %v", e.Move, e.Step, e.Outcome)
		if e.Err != nil {
			s += ": " + e.Err.Error()
		}
		return s
	case HostLost:
		return fmt.Sprintf("host-lost %v", e.Host)
	case Adopt:
		return fmt.Sprintf("adopt %v %v from %v to %v e%d at-dest %v", e.Move, e.Spec.TID, e.Spec.From, e.Spec.To, e.Spec.Epoch, e.AtDest)
	case Drop:
		return fmt.Sprintf("drop %v: %v", e.TID, e.Err)
	case DropJob:
		return fmt.Sprintf("drop-job %d: %v", e.Job, e.Err)
	case Hold, Release:
		return fmt.Sprintf("%v job %d", e.Kind, e.Job)
	case Report:
		return fmt.Sprintf("report %v: %d orphans, %d running", e.Host, len(e.Orphans), len(e.Running))
	case Resolve:
		return fmt.Sprintf("resolve %v", e.Hosts)
	}
	return e.Kind.String()
}

// Timeouts bound a move's steps. The driver takes them from its
// configuration; all must be positive.
type Timeouts struct {
	// Step bounds a control step's answer (prepare, commit, cancel,
	// resume).
	Step time.Duration
	// Suspend bounds the wait for the task's safe point (the origin
	// withdraws the request past it); the suspend call gets Suspend+Step.
	Suspend time.Duration
	// Transfer bounds the checkpoint's write at the origin and its
	// restore at the destination, each.
	Transfer time.Duration
	// Retry is how long an abort or commit step that failed waits before
	// it is tried again.
	Retry time.Duration
}

func (t Timeouts) valid() bool {
	return t.Step > 0 && t.Suspend > 0 && t.Transfer > 0 && t.Retry > 0
}

// Course is a move's longest course without a lost answer: its suspend,
// its transfer (the write and the restore are bounded each, but a restore
// of a written checkpoint is quick) and the control steps around them.
// A driver waiting for moves to settle (before a kill) waits this long at
// most.
func (t Timeouts) Course() time.Duration { return t.Suspend + t.Transfer + 4*t.Step }

// Unwind is the longest a move to a lost host takes to end: the transfer
// under way, then the resume at the origin and its answer. A driver
// waiting for those moves (before it drops what was routed to the host)
// waits this long at most.
func (t Timeouts) Unwind() time.Duration { return t.Transfer + 2*t.Step }

// Spec asks for a move.
type Spec struct {
	TID task.TID
	// From is where the task runs (the master's route), To where it goes.
	From, To task.HostID
	// Epoch is the task's current route epoch.
	Epoch uint64
	// Job is the task's job (0: none): DropJob and Hold act on it.
	Job      uint64
	Timeouts Timeouts
}

// Move is one move, as the machine tracks it. Read-only for the driver.
type Move struct {
	ID       ID
	TID      task.TID
	Job      uint64
	From, To task.HostID
	// Epoch is the route epoch at the destination; Back is the route
	// epoch of the way back (0 until an abort hands one out).
	Epoch, Back uint64
	State       State
	// Cause is why the move aborts.
	Cause error

	t       Timeouts
	prev    uint64    // the route epoch before the move
	pending Step      // the step whose result the move waits for (0: none)
	retryAt time.Time // when a failed abort or commit step goes again
	abort   bool      // abort once the pending suspend or send answers
	lost    bool      // the origin was lost: no resume
}

// Machine coordinates the moves of a virtual machine's tasks and holds its
// epoch clock. It is not safe for concurrent use.
type Machine struct {
	epoch  uint64
	lastID ID
	byTID  map[task.TID]*Move
	byID   map[ID]*Move
	held   map[uint64]int // Hold counts per job
	acts   []Action
	// A recovered master: the moves reported half done, by task, with
	// their origins, and where the reporting hosts run their tasks.
	orphans   map[task.TID]orphan
	runningAt map[task.TID]task.HostID
}

type orphan struct {
	Orphan
	from task.HostID
}

// New returns a machine whose epoch clock starts at epoch and whose move
// IDs start above lastID.
func New(epoch uint64, lastID ID) *Machine {
	return &Machine{epoch: epoch, lastID: lastID, byTID: map[task.TID]*Move{}, byID: map[ID]*Move{}, held: map[uint64]int{}}
}

// Step feeds one event to the machine at now and returns the actions it
// wants done, in order: the driver performs each once (a Call's outcome
// comes back as a Result event). It is the machine's one seam; the epoch
// clock (Observe, NextEpoch) and the queries are beside it.
func (m *Machine) Step(now time.Time, ev Event) []Action {
	var err error
	switch ev.Kind {
	case Start:
		err = m.start(ev.Spec)
	case Result:
		err = m.result(ev.Move, ev.Step, ev.Outcome, ev.Err, now)
	case Tick:
		m.tick(now)
	case HostLost:
		m.hostLost(ev.Host)
	case Adopt:
		err = m.adopt(ev.Move, ev.Spec, ev.AtDest)
	case Drop:
		m.drop(ev.TID, ev.Err)
	case DropJob:
		for _, mv := range m.Moves() {
			if ev.Job != 0 && mv.Job == ev.Job {
				m.drop(mv.TID, ev.Err)
			}
		}
	case Hold:
		m.held[ev.Job]++
	case Release:
		if m.held[ev.Job]--; m.held[ev.Job] <= 0 {
			delete(m.held, ev.Job)
		}
	case Report:
		if m.orphans == nil {
			m.orphans, m.runningAt = map[task.TID]orphan{}, map[task.TID]task.HostID{}
		}
		for _, o := range ev.Orphans {
			m.orphans[o.TID] = orphan{Orphan: o, from: ev.Host}
		}
		for _, tid := range ev.Running {
			m.runningAt[tid] = ev.Host
		}
	case Resolve:
		m.resolve(ev.Hosts, ev.Spec.Timeouts)
	default:
		err = fmt.Errorf("%v: %w", ev.Kind, ErrBadEvent)
	}
	if err != nil {
		m.acts = append(m.acts, Action{Kind: Reject, Move: ev.Move, TID: ev.Spec.TID, Err: err})
	}
	a := m.acts
	m.acts = nil
	return a
}

// Epoch is the largest epoch handed out or observed.
func (m *Machine) Epoch() uint64 { return m.epoch }

// Observe raises the epoch clock to e, an epoch seen elsewhere (a route
// applied, a host's report, a checkpoint).
func (m *Machine) Observe(e uint64) { m.epoch = max(m.epoch, e) }

// NextEpoch hands out a new epoch, larger than any handed out or observed.
func (m *Machine) NextEpoch() uint64 {
	m.epoch++
	return m.epoch
}

// Moving returns tid's move under way, if any.
func (m *Machine) Moving(tid task.TID) (Move, bool) {
	mv := m.byTID[tid]
	if mv == nil {
		return Move{}, false
	}
	return *mv, true
}

// Moves lists the moves under way in ID order.
func (m *Machine) Moves() []Move {
	out := make([]Move, 0, len(m.byID))
	for _, mv := range m.byID {
		out = append(out, *mv)
	}
	slices.SortFunc(out, func(a, b Move) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// start begins a move: the destination is asked to prepare. It refuses a
// task already moving, a move to where the task runs and a task of a held
// job.
func (m *Machine) start(s Spec) error {
	if !s.Timeouts.valid() {
		return ErrBadTimeouts
	}
	if m.byTID[s.TID] != nil {
		return fmt.Errorf("%v: %w", s.TID, ErrMoving)
	}
	if s.From == s.To {
		return fmt.Errorf("%v on %v: %w", s.TID, s.To, ErrSameHost)
	}
	if s.Job != 0 && m.held[s.Job] > 0 {
		return fmt.Errorf("job %d: %w", s.Job, ErrHeld)
	}
	m.Observe(s.Epoch)
	m.lastID++
	mv := &Move{ID: m.lastID, TID: s.TID, Job: s.Job, From: s.From, To: s.To, Epoch: m.NextEpoch(), State: Preparing, t: s.Timeouts, prev: s.Epoch}
	m.byTID[s.TID], m.byID[mv.ID] = mv, mv
	m.call(mv, StepPrepare, mv.To, mv.fwd(), mv.t.Step)
	return nil
}

// adopt takes over move id, which a previous master left half done, as
// the hosts reported it to a recovered master: the task s.TID was
// suspended at s.From for a move to the destination route (s.To,
// s.Epoch); atDest says whether the destination runs it. A move that
// reached the destination commits; any other aborts the usual way (the
// destination drops the arrival, then the origin resumes). The move keeps
// its ID, which the hosts know it by.
func (m *Machine) adopt(id ID, s Spec, atDest bool) error {
	if !s.Timeouts.valid() {
		return ErrBadTimeouts
	}
	tid := s.TID
	if m.byTID[tid] != nil || m.byID[id] != nil {
		return fmt.Errorf("%v (%v): %w", tid, id, ErrMoving)
	}
	m.Observe(s.Epoch)
	m.ObserveMove(id)
	mv := &Move{ID: id, TID: tid, Job: s.Job, From: s.From, To: s.To, Epoch: s.Epoch, t: s.Timeouts}
	m.byTID[tid], m.byID[mv.ID] = mv, mv
	if atDest {
		mv.State = Committing
		m.call(mv, StepCommit, mv.From, mv.fwd(), mv.t.Step)
		return nil
	}
	m.cancel(mv, errors.New("the previous master left it half done"))
	return nil
}

// resolve adopts the reported moves whose two hosts are among hosts, in
// task order; one that cannot be adopted (the task moves already) is
// rejected and forgotten.
func (m *Machine) resolve(hosts []task.HostID, t Timeouts) {
	var tids []task.TID
	for tid, o := range m.orphans {
		if slices.Contains(hosts, o.from) && slices.Contains(hosts, o.Dest.Host) {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	for _, tid := range tids {
		o := m.orphans[tid]
		delete(m.orphans, tid)
		s := Spec{TID: tid, From: o.from, To: o.Dest.Host, Epoch: o.Dest.Epoch, Timeouts: t}
		if err := m.adopt(o.Move, s, m.runningAt[tid] == o.Dest.Host); err != nil {
			m.acts = append(m.acts, Action{Kind: Reject, Move: o.Move, TID: tid, Err: err})
		}
	}
}

// ObserveMove raises the move IDs handed out above id, one a host knows
// (a recovered master learns them from the hosts' reports).
func (m *Machine) ObserveMove(id ID) { m.lastID = max(m.lastID, id) }

// result takes the outcome of a step the machine asked for. err is the
// step's error, the cause recorded when the move aborts. A result the
// move does not wait for is refused with ErrStale and changes nothing.
func (m *Machine) result(id ID, step Step, o Outcome, err error, now time.Time) error {
	mv := m.byID[id]
	if mv == nil || mv.pending != step || step == 0 {
		return fmt.Errorf("%v %v (%v): %w", id, step, o, ErrStale)
	}
	mv.pending = 0
	if err == nil && o != OK && o != Installed {
		err = fmt.Errorf("%v %v", step, o)
	}
	switch step {
	case StepPrepare:
		if o != OK {
			m.giveUp(mv, fmt.Errorf("prepare on %v: %w", mv.To, err))
			return nil
		}
		mv.State = Freezing
		m.call(mv, StepSuspend, mv.From, mv.fwd(), mv.t.Suspend+mv.t.Step)
	case StepSuspend:
		switch {
		case o == Refused:
			m.giveUp(mv, err)
		case o != OK:
			m.cancel(mv, fmt.Errorf("suspend on %v: %w", mv.From, err))
		case mv.lost:
			m.end(mv, Aborted, ErrLost)
			m.notify(mv, StepCancel, mv.To, mv.fwd())
		case mv.abort:
			m.cancel(mv, mv.Cause)
		default:
			mv.State = Transferring
			m.route(mv, mv.fwd())
			m.call(mv, StepSend, mv.From, mv.fwd(), mv.t.Transfer)
		}
	case StepSend:
		switch {
		case mv.lost:
			m.end(mv, Aborted, ErrLost)
			m.notify(mv, StepCancel, mv.To, mv.fwd())
		case o != OK:
			m.cancel(mv, fmt.Errorf("transfer: %w", err))
		case mv.abort:
			m.cancel(mv, mv.Cause)
		default:
			mv.State = Restoring
			m.call(mv, StepRestore, mv.To, mv.fwd(), mv.t.Transfer)
		}
	case StepRestore:
		switch {
		case o == OK && mv.lost:
			m.end(mv, Done, nil) // nothing left at the origin to commit
		case o == OK:
			mv.State = Committing
			m.call(mv, StepCommit, mv.From, mv.fwd(), mv.t.Step)
		case mv.lost:
			m.end(mv, Aborted, ErrLost)
			m.notify(mv, StepCancel, mv.To, mv.fwd())
		default:
			m.cancel(mv, fmt.Errorf("restore on %v: %w", mv.To, err))
		}
	case StepCommit:
		// The task runs at the destination; the move is done once the
		// origin has let go of its suspended copy (tried again until it
		// answers, or is lost).
		if o != OK {
			mv.retryAt = now.Add(mv.t.Retry)
			return nil
		}
		m.end(mv, Done, nil)
	case StepCancel:
		switch o {
		case OK:
			m.resume(mv)
		case Installed: // the destination restored it first: the move happened
			mv.Cause = nil
			mv.State = Committing
			m.call(mv, StepCommit, mv.From, mv.fwd(), mv.t.Step)
		default: // try again until it answers, or is lost
			mv.retryAt = now.Add(mv.t.Retry)
		}
	case StepResume:
		if o != OK {
			mv.retryAt = now.Add(mv.t.Retry)
			return nil
		}
		m.route(mv, mv.back())
		m.end(mv, Aborted, mv.Cause)
	}
	return nil
}

// hostLost takes the deletion of host h from the virtual machine: moves
// to it abort (the origin resumes without waiting for the lost
// destination), moves from it end with ErrLost unless the destination
// already restores the task.
func (m *Machine) hostLost(h task.HostID) {
	for _, mv := range m.Moves() {
		mv := m.byID[mv.ID]
		switch {
		case h == mv.To:
			m.destLost(mv)
		case h == mv.From:
			m.originLost(mv)
		}
	}
}

func (m *Machine) destLost(mv *Move) {
	cause := fmt.Errorf("destination %v lost", mv.To)
	if mv.lost { // and the origin before it: nothing runs the task
		m.end(mv, Aborted, ErrLost)
		return
	}
	switch mv.State {
	case Preparing:
		m.end(mv, Aborted, fmt.Errorf("%w: %w", ErrAborted, cause))
	case Freezing, Transferring:
		// Wait for the suspend or the send to answer, then resume.
		mv.abort, mv.Cause = true, fmt.Errorf("%w: %w", ErrAborted, cause)
		mv.To = 0
	case Restoring, Cancelling:
		// Whatever the lost host did, it runs nothing now.
		if mv.Cause == nil {
			mv.Cause = fmt.Errorf("%w: %w", ErrAborted, cause)
		}
		if mv.Back == 0 {
			mv.Back = m.NextEpoch()
		}
		mv.pending = 0
		m.resume(mv)
	case Committing:
		// It ran there; it is lost with that host. The origin forgets it.
	}
}

func (m *Machine) originLost(mv *Move) {
	switch mv.State {
	case Preparing:
		m.end(mv, Aborted, ErrLost)
		m.notify(mv, StepCancel, mv.To, mv.fwd())
	case Freezing, Transferring, Restoring:
		// A restore under way may still complete from what was sent.
		mv.lost = true
	case Cancelling, Resuming:
		m.end(mv, Aborted, ErrLost)
		if mv.State == Cancelling && mv.To != 0 {
			m.notify(mv, StepCancel, mv.To, mv.back())
		}
	case Committing:
		mv.pending = 0
		m.end(mv, Done, nil)
	}
}

// drop ends tid's move under way, if any, as aborted with cause: the
// task's job rolls back, and its hosts drop both the origin's suspended
// copy and the destination's arrival, so there is nothing to resume or
// commit. A result of a step the move waited for is refused as stale from
// now on.
func (m *Machine) drop(tid task.TID, cause error) {
	mv := m.byTID[tid]
	if mv == nil {
		return
	}
	if cause == nil {
		cause = errors.New("dropped")
	}
	if !errors.Is(cause, ErrAborted) {
		cause = fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	mv.Cause = cause
	m.end(mv, Aborted, cause)
}

// tick retries the abort and commit steps whose retry time has come.
func (m *Machine) tick(now time.Time) {
	for _, mv := range m.Moves() {
		mv := m.byID[mv.ID]
		if mv.pending != 0 || mv.retryAt.IsZero() || now.Before(mv.retryAt) {
			continue
		}
		mv.retryAt = time.Time{}
		switch mv.State {
		case Cancelling:
			m.call(mv, StepCancel, mv.To, mv.back(), mv.t.Step)
		case Resuming:
			m.call(mv, StepResume, mv.From, mv.back(), mv.t.Step)
		case Committing:
			m.call(mv, StepCommit, mv.From, mv.fwd(), mv.t.Step)
		}
	}
}

// giveUp ends a move whose task was never suspended: nothing changed
// but an arrival the destination may have prepared, which it is told to
// drop.
func (m *Machine) giveUp(mv *Move, cause error) {
	m.end(mv, Aborted, fmt.Errorf("%w: %w", ErrAborted, cause))
	m.notify(mv, StepCancel, mv.To, routing.Route{Host: mv.From, Epoch: mv.prev})
}

// cancel starts an abort: the way back gets a new epoch, and the
// destination is asked to drop the arrival before the origin resumes.
func (m *Machine) cancel(mv *Move, cause error) {
	if !errors.Is(cause, ErrAborted) {
		cause = fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	mv.Cause, mv.abort = cause, false
	if mv.lost { // nothing to resume
		m.end(mv, Aborted, ErrLost)
		m.notify(mv, StepCancel, mv.To, mv.fwd())
		return
	}
	if mv.Back == 0 {
		mv.Back = m.NextEpoch()
	}
	if mv.To == 0 { // the destination is lost
		m.resume(mv)
		return
	}
	mv.State = Cancelling
	m.call(mv, StepCancel, mv.To, mv.back(), mv.t.Step)
}

func (m *Machine) resume(mv *Move) {
	if mv.Back == 0 {
		mv.Back = m.NextEpoch()
	}
	mv.State = Resuming
	m.call(mv, StepResume, mv.From, mv.back(), mv.t.Step)
}

func (m *Machine) end(mv *Move, s State, err error) {
	mv.State, mv.pending, mv.retryAt = s, 0, time.Time{}
	delete(m.byTID, mv.TID)
	delete(m.byID, mv.ID)
	m.acts = append(m.acts, Action{Kind: Finish, Move: mv.ID, TID: mv.TID, Err: err})
}

func (m *Machine) call(mv *Move, s Step, h task.HostID, r routing.Route, d time.Duration) {
	mv.pending, mv.retryAt = s, time.Time{}
	m.acts = append(m.acts, Action{Kind: Call, Move: mv.ID, TID: mv.TID, Step: s, Host: h, Route: r, Timeout: d})
}

func (m *Machine) notify(mv *Move, s Step, h task.HostID, r routing.Route) {
	if h == 0 {
		return
	}
	m.acts = append(m.acts, Action{Kind: Call, Move: mv.ID, TID: mv.TID, Step: s, Host: h, Route: r, Timeout: mv.t.Step, Notify: true})
}

func (m *Machine) route(mv *Move, r routing.Route) {
	m.acts = append(m.acts, Action{Kind: SetRoute, Move: mv.ID, TID: mv.TID, Route: r})
}

func (mv *Move) fwd() routing.Route  { return routing.Route{Host: mv.To, Epoch: mv.Epoch} }
func (mv *Move) back() routing.Route { return routing.Route{Host: mv.From, Epoch: mv.Back} }
