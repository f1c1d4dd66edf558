package move

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Host is the host half of moves: what one daemon decides about the moves
// of its tasks, as the origin (suspend, capture, send, commit, resume) and
// as the destination (prepare, receive, restore, install, cancel). It
// holds, per task, the departure (the task suspended here while it moves
// away, and the move it is suspended for), the arrival (prepared here for
// a move) and the floor (the newest move this host cancelled or resumed
// the task for: steps of that move and older ones are refused).
//
// Like Machine it performs no I/O, starts no goroutines, takes no locks
// and reads no clock. The daemon feeds each step, and each point where a
// step's work meets the task (a safe point, an install), through Step,
// with what its other parts know of the task (Local), and performs the
// effects it gets back: suspend the task, capture its state, write or read
// its checkpoint, put it into service, drop an arrival, set a route, or
// answer the step. Arrivals of a job's restore are not moves: the daemon
// keeps them itself and tells Host of one through Local.Restoring.
//
// It is not safe for concurrent use: the daemon steps it under the lock
// that owns the host's tasks.
type Host struct {
	deps  map[task.TID]*Departure
	arrs  map[task.TID]*Arrival
	floor map[task.TID]ID
}

// Departure is a task suspended at its origin while it moves.
type Departure struct {
	Move ID
	// Dest is the destination's route for the move.
	Dest routing.Route
	// Job is the task's job (0: none).
	Job uint64
	// Sending: its checkpoint is being written; it cannot be resumed
	// until the write is over.
	Sending bool
	// Over: a resume has taken it; no step of its move is served any
	// more, and it goes once the task runs here again.
	Over bool
	// Since is when it was captured.
	Since time.Time
}

// Arrival is a task prepared at its destination for a move.
type Arrival struct {
	Move ID
	// Epoch is the route epoch of the task at this host; From is its
	// origin.
	Epoch uint64
	From  task.HostID
	Job   uint64
	Type  string
	// Since is when it was prepared.
	Since time.Time
}

// NewHost returns the host half of moves with nothing under way.
func NewHost() *Host {
	return &Host{deps: map[task.TID]*Departure{}, arrs: map[task.TID]*Arrival{}, floor: map[task.TID]ID{}}
}

// HostEventKind is the kind of a HostEvent.
type HostEventKind uint8

// Host events. Each names the fields of HostEvent it reads.
const (
	// EvPrepare (destination, a prepare step): make an arrival for Move,
	// at Route (this host's route for the task), from Peer, of Job and
	// Type.
	EvPrepare HostEventKind = iota + 1
	// EvSuspend (origin, a suspend step): ask the task to suspend at its
	// next safe point for Move, to Route (the destination's). Type and
	// Job, when Type is set, are the master's record of the task.
	EvSuspend
	// EvSafePoint (origin): the task, at a safe point, takes the suspend
	// request of Move to Route.
	EvSafePoint
	// EvSend (origin, a send step): the checkpoint of Move is to be
	// written.
	EvSend
	// EvSent (origin): the checkpoint's write for Move is over, well or
	// not.
	EvSent
	// EvStream (destination): a direct checkpoint arrives from Peer for
	// Move, at Route.Epoch.
	EvStream
	// EvRestore (destination, a restore step): read Move's checkpoint.
	EvRestore
	// EvInstall: the task is about to be put into service here, from the
	// arrival of Move (its checkpoint at Route.Epoch, of Type), or, with
	// Back set, from its departure after a resume.
	EvInstall
	// EvCommit (origin, a commit step): forget the departure of Move.
	EvCommit
	// EvResume (origin, a resume step): run the task again here, at
	// Route (the way back).
	EvResume
	// EvCancel (destination, a cancel step): drop the arrival of Move;
	// Route is the way back.
	EvCancel
	// EvDropJob: Job rolls back; its tasks' departures and arrivals are
	// dropped, and every later step of their moves refused.
	EvDropJob
	// EvLost: the master gave the task up (its host was deemed lost); its
	// departure and arrival here go.
	EvLost
	// EvGone: the task ended (here, or anywhere as the master learns);
	// its floor goes with it.
	EvGone
)

var hostEventNames = [...]string{"", "prepare", "suspend", "safe-point", "send", "sent", "stream", "restore", "install", "commit", "resume", "cancel", "drop-job", "lost", "gone"}

func (k HostEventKind) String() string {
	if int(k) < len(hostEventNames) && k != 0 {
		return hostEventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Local is what the daemon's other parts know of a task when an event
// comes: its task table and its route cache.
type Local struct {
	// Running: the task runs here (for EvSafePoint: the task at the safe
	// point is still the one in service here).
	Running bool
	// Type and Job of the task running here.
	Type string
	Job  uint64
	// Arrived is the move that restored the running task here (0: none).
	Arrived ID
	// Route is the epoch of the route this host holds for the task.
	Route uint64
	// Restoring: a job's restore has staged the task here.
	Restoring bool
	// Quiet: the task's job rolls back and its kill is on its way; it is
	// not to leave.
	Quiet bool
}

// HostEvent is one event of the host half of moves.
type HostEvent struct {
	Kind  HostEventKind
	TID   task.TID
	Move  ID
	Route routing.Route
	Peer  task.HostID
	Job   uint64
	Type  string
	// Back (EvInstall): the task comes back from its departure.
	Back  bool
	Local Local
}

func (e HostEvent) String() string {
	s := fmt.Sprintf("%v %v %v", e.Kind, e.TID, e.Move)
	switch e.Kind {
	case EvPrepare, EvSuspend, EvSafePoint, EvStream, EvResume, EvCancel:
		s += fmt.Sprintf(" route %v e%d", e.Route.Host, e.Route.Epoch)
	case EvInstall:
		if e.Back {
			s += " back"
		} else {
			s += fmt.Sprintf(" e%d %s", e.Route.Epoch, e.Type)
		}
	case EvDropJob:
		s = fmt.Sprintf("%v job %d", e.Kind, e.Job)
	case EvLost, EvGone:
		s = fmt.Sprintf("%v %v", e.Kind, e.TID)
	}
	return s
}

// EffectKind is the kind of a HostEffect.
type EffectKind uint8

// Host effects.
const (
	// DoRefuse: answer the step (or end the work) with Err; nothing changed.
	DoRefuse EffectKind = iota + 1
	// DoOK: answer the step OK; there is nothing to do.
	DoOK
	// DoInstalled (EvCancel): answer that the task already runs here,
	// restored by the move: the move happened.
	DoInstalled
	// DoPrepare: keep what arrives for the task (its messages, its
	// checkpoint) for the arrival of Move.
	DoPrepare
	// DoAskSuspend: ask the task to suspend at its next safe point for
	// Move, to Route, and wait for it (or withdraw the request past the
	// suspend timeout).
	DoAskSuspend
	// DoCapture: take the task out of service and keep its state for Move,
	// to Route.
	DoCapture
	// DoSend: write the task's checkpoint; report EvSent when done.
	DoSend
	// DoReceive: take the direct checkpoint for the arrival of Move.
	DoReceive
	// DoRestore: read the arrival's checkpoint (at Route.Epoch) and install
	// it.
	DoRestore
	// DoInstall: put the task into service here (from its arrival of Move,
	// or back from its departure).
	DoInstall
	// DoForget: the departure of Move is over (committed); drop the kept
	// state and wake whoever waits for the move.
	DoForget
	// DoWait: the departure's checkpoint is being written; feed the event
	// again once EvSent has come.
	DoWait
	// DoResume: run the task again here from its departure of Move, at
	// Route (the way back); feed EvInstall with Back set as it enters
	// service.
	DoResume
	// DoDropArrival: the arrival of Move is gone; refuse what was held for
	// it.
	DoDropArrival
	// DoDropDeparture: the departure of Move is gone without a resume (its
	// job rolls back, or the master gave the task up).
	DoDropDeparture
	// DoSetRoute: the task's route is now Route: record it, and send what
	// is held for the task along it.
	DoSetRoute
)

var effectNames = [...]string{"", "refuse", "done", "installed", "prepare", "ask-suspend", "capture", "send", "receive", "restore", "install", "forget", "wait", "resume", "drop-arrival", "drop-departure", "route"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && k != 0 {
		return effectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// HostEffect is something the host half of moves wants done.
type HostEffect struct {
	Kind  EffectKind
	TID   task.TID
	Move  ID
	Route routing.Route
	// Err (DoRefuse) is the step's answer.
	Err error
}

func (e HostEffect) String() string {
	switch e.Kind {
	case DoRefuse:
		return fmt.Sprintf("refuse %v %v: %v", e.TID, e.Move, e.Err)
	case DoRestore:
		return fmt.Sprintf("%v %v %v e%d", e.Kind, e.TID, e.Move, e.Route.Epoch)
	case DoAskSuspend, DoCapture, DoResume, DoSetRoute:
		return fmt.Sprintf("%v %v %v route %v e%d", e.Kind, e.TID, e.Move, e.Route.Host, e.Route.Epoch)
	}
	return fmt.Sprintf("%v %v %v", e.Kind, e.TID, e.Move)
}

// Errors of the host half. The step answers also wrap ErrAborted (a step
// of a move cancelled or resumed here, or older than the route held),
// ErrMoving and task.ErrNoSuchTask.
var (
	// ErrNotHere: the step's move has no departure or arrival here.
	ErrNotHere = errors.New("no such move here")
	// ErrSending: the departure's checkpoint is being written.
	ErrSending = errors.New("checkpoint being written")
	// ErrBadCheckpoint: a checkpoint does not belong to the arrival.
	ErrBadCheckpoint = errors.New("checkpoint of another arrival")
)

// Departure returns tid's departure, if any.
func (h *Host) Departure(tid task.TID) (Departure, bool) {
	d := h.deps[tid]
	if d == nil {
		return Departure{}, false
	}
	return *d, true
}

// Arrival returns tid's arrival, if any.
func (h *Host) Arrival(tid task.TID) (Arrival, bool) {
	a := h.arrs[tid]
	if a == nil {
		return Arrival{}, false
	}
	return *a, true
}

// Floor is the newest move this host cancelled or resumed tid for (0:
// none kept).
func (h *Host) Floor(tid task.TID) (ID, bool) {
	f, ok := h.floor[tid]
	return f, ok
}

// MaxMove is the largest move ID this host knows of: floors, departures
// and arrivals (a recovered master hands out IDs above it).
func (h *Host) MaxMove() ID {
	var m ID
	for _, f := range h.floor {
		m = max(m, f)
	}
	for _, d := range h.deps {
		m = max(m, d.Move)
	}
	for _, a := range h.arrs {
		m = max(m, a.Move)
	}
	return m
}

// Counts is how many departures and arrivals are under way.
func (h *Host) Counts() (departures, arrivals int) { return len(h.deps), len(h.arrs) }

// stale reports whether a step of move id for tid comes after this host
// cancelled or resumed tid for that move or a newer one.
func (h *Host) stale(tid task.TID, id ID) bool { return id != 0 && id <= h.floor[tid] }

func (h *Host) raise(tid task.TID, id ID) {
	if id != 0 {
		h.floor[tid] = max(h.floor[tid], id)
	}
}

// Step feeds one event and returns the effects to perform, in order. The
// answer of a step is its last effect's: DoRefuse (with the error), or the
// work to do.
//
// Each event has a method of its own, so that Step's frame stays small: a
// task's goroutine feeds its safe point and its end, and a control call's
// goroutine its step, each on a small stack, which one frame for every
// event's locals made grow (a copy of the stack) at every call.
func (h *Host) Step(now time.Time, e HostEvent) []HostEffect {
	switch e.Kind {
	case EvPrepare:
		return h.onPrepare(now, e)
	case EvSuspend:
		return h.onSuspend(now, e)
	case EvSafePoint:
		return h.onSafePoint(now, e)
	case EvSend:
		return h.onSend(now, e)
	case EvSent:
		return h.onSent(now, e)
	case EvStream:
		return h.onStream(now, e)
	case EvRestore:
		return h.onRestore(now, e)
	case EvInstall:
		return h.onInstall(now, e)
	case EvCommit:
		return h.onCommit(now, e)
	case EvResume:
		return h.onResume(now, e)
	case EvCancel:
		return h.onCancel(now, e)
	case EvDropJob:
		return h.onDropJob(now, e)
	case EvLost:
		return h.onLost(now, e)
	case EvGone:
		return h.onGone(now, e)
	}
	return refuseEffect(e, fmt.Errorf("%v: unknown host event", e.Kind))
}

// oneEffect is the answer k, with route r, to e.
func oneEffect(e HostEvent, k EffectKind, r routing.Route) []HostEffect {
	return []HostEffect{{Kind: k, TID: e.TID, Move: e.Move, Route: r}}
}

// refuseEffect is the refusal of e, for err.
func refuseEffect(e HostEvent, err error) []HostEffect {
	return []HostEffect{{Kind: DoRefuse, TID: e.TID, Move: e.Move, Err: err}}
}

// onPrepare serves EvPrepare.
func (h *Host) onPrepare(now time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	switch {
	case h.stale(tid, e.Move):
		return refuseEffect(e, fmt.Errorf("prepare %v for %v: %w", tid, e.Move, ErrAborted))
	case e.Local.Running:
		return refuseEffect(e, fmt.Errorf("%v already runs here", tid))
	case h.arrs[tid] != nil || e.Local.Restoring:
		return refuseEffect(e, fmt.Errorf("%v: %w", tid, ErrMoving))
	}
	h.arrs[tid] = &Arrival{Move: e.Move, Epoch: e.Route.Epoch, From: e.Peer, Job: e.Job, Type: e.Type, Since: now}
	return oneEffect(e, DoPrepare, e.Route)
}

// onSuspend serves EvSuspend.
func (h *Host) onSuspend(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	// A route here newer than the move's means the task came back or
	// was restored since the move began (an abort, a job's rollback):
	// the step is late even where the task's floor has gone with an
	// earlier incarnation.
	if h.stale(tid, e.Move) || (e.Route.Epoch != 0 && e.Route.Epoch < e.Local.Route) {
		return refuseEffect(e, fmt.Errorf("suspend %v for %v: %w", tid, e.Move, ErrAborted))
	}
	if d := h.deps[tid]; !e.Local.Running && d != nil && !d.Over && e.Move != 0 && d.Move == e.Move {
		return oneEffect(e, DoOK, d.Dest) // suspended for this very move: the step is done
	}
	if !e.Local.Running {
		return refuseEffect(e, fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask))
	}
	if e.Type != "" && (e.Local.Type != e.Type || e.Local.Job != e.Job) {
		// The master moves the task on a stale record of it.
		return refuseEffect(e, fmt.Errorf("suspend %v for %v: it is a %s of job %d here, the move's record a %s of job %d: %w",
			tid, e.Move, e.Local.Type, e.Local.Job, e.Type, e.Job, ErrAborted))
	}
	return oneEffect(e, DoAskSuspend, e.Route)
}

// onSafePoint serves EvSafePoint.
func (h *Host) onSafePoint(now time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	switch {
	case !e.Local.Running:
		return refuseEffect(e, fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask))
	case e.Local.Quiet:
		// Its job rolls back and the kill is on its way: it stays
		// here to be killed rather than leave a copy in a move.
		return refuseEffect(e, fmt.Errorf("suspend %v for %v: its job rolls back: %w", tid, e.Move, ErrAborted))
	case h.stale(tid, e.Move):
		// The move was aborted (its resume came) while the request
		// waited for this safe point: the task runs on here.
		return refuseEffect(e, fmt.Errorf("suspend %v for %v: %w", tid, e.Move, ErrAborted))
	}
	h.deps[tid] = &Departure{Move: e.Move, Dest: e.Route, Job: e.Local.Job, Since: now}
	return oneEffect(e, DoCapture, e.Route)
}

// onSend serves EvSend.
func (h *Host) onSend(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	d := h.deps[tid]
	if d == nil || d.Over || (e.Move != 0 && d.Move != e.Move) {
		return refuseEffect(e, fmt.Errorf("%v is not suspended here for %v: %w", tid, e.Move, ErrNotHere))
	}
	if d.Sending {
		return refuseEffect(e, fmt.Errorf("%v: %w", tid, ErrSending))
	}
	d.Sending = true
	return oneEffect(e, DoSend, d.Dest)
}

// onSent serves EvSent.
func (h *Host) onSent(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	if d := h.deps[tid]; d != nil && d.Move == e.Move {
		d.Sending = false
	}
	return oneEffect(e, DoOK, routing.Route{})
}

// onStream serves EvStream.
func (h *Host) onStream(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	a := h.arrs[tid]
	if a == nil || a.Epoch != e.Route.Epoch || a.Move != e.Move || a.From != e.Peer {
		return refuseEffect(e, fmt.Errorf("%v is not prepared here for %v from %v: %w", tid, e.Move, e.Peer, ErrNotHere))
	}
	return oneEffect(e, DoReceive, routing.Route{Epoch: a.Epoch})
}

// onRestore serves EvRestore.
func (h *Host) onRestore(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	a := h.arrs[tid]
	if a == nil || (e.Move != 0 && a.Move != e.Move) {
		return refuseEffect(e, fmt.Errorf("%v is not prepared here for %v: %w", tid, e.Move, ErrNotHere))
	}
	return []HostEffect{{Kind: DoRestore, TID: tid, Move: a.Move, Route: routing.Route{Epoch: a.Epoch}}}
}

// onInstall serves EvInstall.
func (h *Host) onInstall(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	if e.Back {
		d := h.deps[tid]
		if d == nil || !d.Over || d.Move != e.Move {
			return refuseEffect(e, fmt.Errorf("%v: its move was cancelled: %w", tid, ErrAborted))
		}
		delete(h.deps, tid)
		return oneEffect(e, DoInstall, routing.Route{})
	}
	a := h.arrs[tid]
	if a == nil || a.Move != e.Move {
		return refuseEffect(e, fmt.Errorf("%v: its move was cancelled: %w", tid, ErrAborted))
	}
	if a.Epoch != e.Route.Epoch || a.Type != e.Type {
		return refuseEffect(e, fmt.Errorf("checkpoint of %v is of epoch %d (%s), want epoch %d (%s): %w",
			tid, e.Route.Epoch, e.Type, a.Epoch, a.Type, ErrBadCheckpoint))
	}
	delete(h.arrs, tid)
	return oneEffect(e, DoInstall, routing.Route{Epoch: a.Epoch})
}

// onCommit serves EvCommit.
func (h *Host) onCommit(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	d := h.deps[tid]
	if d == nil || d.Over || (e.Move != 0 && d.Move != e.Move) {
		return oneEffect(e, DoOK, routing.Route{})
	}
	delete(h.deps, tid)
	return []HostEffect{{Kind: DoForget, TID: tid, Move: d.Move, Route: d.Dest}}
}

// onResume serves EvResume.
func (h *Host) onResume(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	h.raise(tid, e.Move)
	d := h.deps[tid]
	if d == nil || d.Over || (e.Move != 0 && d.Move != e.Move) {
		if e.Local.Running || (d != nil && d.Over) {
			return oneEffect(e, DoOK, e.Route) // resumed before, or never suspended
		}
		return refuseEffect(e, fmt.Errorf("%v is not suspended here for %v: %w", tid, e.Move, ErrNotHere))
	}
	if d.Sending {
		return []HostEffect{{Kind: DoWait, TID: tid, Move: d.Move}}
	}
	d.Over = true
	return []HostEffect{{Kind: DoResume, TID: tid, Move: d.Move, Route: e.Route}}
}

// onCancel serves EvCancel.
func (h *Host) onCancel(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	h.raise(tid, e.Move)
	if e.Local.Running && e.Move != 0 && e.Local.Arrived == e.Move {
		return oneEffect(e, DoInstalled, routing.Route{})
	}
	var out []HostEffect
	if a := h.arrs[tid]; a != nil && a.Move == e.Move {
		delete(h.arrs, tid)
		out = append(out, HostEffect{Kind: DoDropArrival, TID: tid, Move: a.Move, Route: e.Route})
	}
	return append(out, HostEffect{Kind: DoSetRoute, TID: tid, Move: e.Move, Route: e.Route})
}

// onDropJob serves EvDropJob.
func (h *Host) onDropJob(_ time.Time, e HostEvent) []HostEffect {
	var out []HostEffect
	for _, t := range slices.Sorted(maps.Keys(h.deps)) {
		if d := h.deps[t]; d.Job == e.Job && !d.Over {
			delete(h.deps, t)
			h.raise(t, d.Move)
			out = append(out, HostEffect{Kind: DoDropDeparture, TID: t, Move: d.Move, Route: d.Dest})
		}
	}
	for _, t := range slices.Sorted(maps.Keys(h.arrs)) {
		if a := h.arrs[t]; a.Job == e.Job {
			delete(h.arrs, t)
			h.raise(t, a.Move)
			out = append(out, HostEffect{Kind: DoDropArrival, TID: t, Move: a.Move})
		}
	}
	slices.SortStableFunc(out, func(a, b HostEffect) int { return cmp.Compare(a.TID, b.TID) })
	return out
}

// onLost serves EvLost.
func (h *Host) onLost(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	var out []HostEffect
	if d := h.deps[tid]; d != nil && !d.Over {
		delete(h.deps, tid)
		out = append(out, HostEffect{Kind: DoDropDeparture, TID: tid, Move: d.Move, Route: d.Dest})
	}
	if a := h.arrs[tid]; a != nil {
		delete(h.arrs, tid)
		out = append(out, HostEffect{Kind: DoDropArrival, TID: tid, Move: a.Move})
	}
	return out
}

// onGone serves EvGone.
func (h *Host) onGone(_ time.Time, e HostEvent) []HostEffect {
	tid := e.TID
	// It will not run here again: no step of a move of it can start
	// anything, so the floor against late steps goes with it.
	delete(h.floor, tid)
	return nil
}
