package jobck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Host is the host half of job checkpoints: what one daemon decides about
// the steps of a job's checkpoint and restart rounds for its own tasks.
// It holds, per task, the pause under way (the newest round that asked for
// it, and whether its checkpoint is being written), per job the newest
// round the master resumed (a pause of that round or an older one, stalled
// on its way, is refused: it would hold the tasks for good), and the tasks
// a restart has staged here, waiting to start.
//
// Like Machine it performs no I/O, starts no goroutines, takes no locks
// and reads no clock. The daemon feeds each step (pause, quiet, write,
// resume, kill, stage, start, drop) and each point where a step's work
// meets a task (the pause's wait is over, a write ends, a task ends or is
// lost) through Step, with what its other parts know of the tasks
// ([Local]), and performs the effects it gets back: hold a task at its
// next safe point, release it, write its checkpoint, wait for a write
// under way, stage or start a restored task, or answer the step. A task's
// checkpoint write and its release are ordered here: a release waits for
// the write under way (DoWait), and a write after the release finds no
// pause and is refused, so a task's state is never encoded while it runs.
//
// It is not safe for concurrent use: the daemon steps it under the lock
// that owns the host's tasks.
type Host struct {
	pauses  map[task.TID]*Pause
	resumed map[uint64]uint64   // per job, the newest try resumed
	staged  map[task.TID]uint64 // per staged task, its job
	next    uint64              // the last pause ID handed out
}

// Pause is a task held at its safe point (or asked to stop at its next
// one) for a job checkpoint.
type Pause struct {
	// ID names this pause among the task's pauses.
	ID  uint64
	Job uint64
	// Try is the newest round that asked for it.
	Try uint64
	// Writing: its checkpoint is being written; it cannot be released
	// until the write is over.
	Writing bool
}

// NewHost returns the host half of job checkpoints with nothing under way.
func NewHost() *Host {
	return &Host{pauses: map[task.TID]*Pause{}, resumed: map[uint64]uint64{}, staged: map[task.TID]uint64{}}
}

// HostEventKind is the kind of a HostEvent.
type HostEventKind uint8

// Host events. Each names the fields of HostEvent it reads.
const (
	// HostPause (a pause step): hold Tasks, the job's tasks here, at
	// their next safe point for Round. Departing are the job's tasks
	// suspended here for a move.
	HostPause HostEventKind = iota + 1
	// HostPauseOver: the pause step of Round stopped waiting; Late are
	// the tasks that reached no safe point in time, and Err is set when
	// the step was cancelled. Either lets the job's tasks go on.
	HostPauseOver
	// HostQuiet (a quiet step): report which of Tasks are not held at a
	// safe point.
	HostQuiet
	// HostWrite (a write step, one task): write the checkpoint of
	// Local.TID, of Job, for Round.
	HostWrite
	// HostWriteOver: the write of pause Pause of TID is over, well or not.
	HostWriteOver
	// HostResume (a resume step): let the job's tasks held for Round.Try
	// or an older round go on (Try 0: whatever round).
	HostResume
	// HostKill (a kill step): the job rolls back; its tasks' pauses go.
	HostKill
	// HostLost: the master gave Tasks up (their host was deemed lost):
	// their pauses go.
	HostLost
	// HostGone: TID of Job ended here; JobLeft says no task of Job is
	// left here.
	HostGone
	// HostStage (a restart's load step): stage Tasks of Job, read from
	// its checkpoint, in place of what an earlier restart of Job staged.
	HostStage
	// HostStart (a restart's go step): start the job's staged tasks.
	HostStart
	// HostUnstage (a failed restart's drop step): forget them.
	HostUnstage
)

var hostEventNames = [...]string{"", "pause", "pause-over", "quiet", "write", "write-over", "resume", "kill", "lost", "gone", "stage", "start", "unstage"}

func (k HostEventKind) String() string {
	if int(k) < len(hostEventNames) && k != 0 {
		return hostEventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Local is what the daemon's other parts know of a task when an event
// comes.
type Local struct {
	TID task.TID
	// Arrived: the task stopped at its safe point for the pause the
	// daemon holds for it.
	Arrived bool
	// MoveAsked: a move asked the task to suspend at its next safe point.
	MoveAsked bool
	// Running: a task of that TID runs here (HostStage).
	Running bool
	// Moving: a task of that TID is suspended here for a move or
	// prepared here for one (HostStage).
	Moving bool
	// Arriving: a restart's task of that TID is kept here to start
	// (HostStage).
	Arriving bool
}

// HostEvent is one event of the host half of job checkpoints.
type HostEvent struct {
	Kind  HostEventKind
	Job   uint64
	Round Round
	TID   task.TID
	// Pause (HostWriteOver) is the pause whose write ended.
	Pause     uint64
	Local     Local
	Tasks     []Local
	Departing []task.TID
	Late      []task.TID
	Err       error
	JobLeft   bool
}

func (e HostEvent) String() string {
	s := fmt.Sprintf("%v job %d", e.Kind, e.Job)
	switch e.Kind {
	case HostPause, HostQuiet, HostWrite, HostPauseOver, HostResume:
		s += fmt.Sprintf(" try %d", e.Round.Try)
	}
	switch e.Kind {
	case HostWrite:
		s += " " + localString(e.Local)
	case HostWriteOver:
		s = fmt.Sprintf("%v %v p%d", e.Kind, e.TID, e.Pause)
	case HostGone:
		s = fmt.Sprintf("%v %v job %d", e.Kind, e.TID, e.Job)
		if e.JobLeft {
			s += " job-left"
		}
	}
	if len(e.Tasks) > 0 {
		ls := make([]string, len(e.Tasks))
		for i, l := range e.Tasks {
			ls[i] = localString(l)
		}
		s += " [" + strings.Join(ls, " ") + "]"
	}
	if len(e.Departing) > 0 {
		s += fmt.Sprintf(" departing %v", e.Departing)
	}
	if len(e.Late) > 0 {
		s += fmt.Sprintf(" late %v", e.Late)
	}
	if e.Err != nil {
		s += fmt.Sprintf(": %v", e.Err)
	}
	return s
}

func localString(l Local) string {
	s := l.TID.String()
	for _, f := range []struct {
		on   bool
		name string
	}{{l.Arrived, "arrived"}, {l.MoveAsked, "move-asked"}, {l.Running, "running"}, {l.Moving, "moving"}, {l.Arriving, "arriving"}} {
		if f.on {
			s += "," + f.name
		}
	}
	return s
}

// HostEffectKind is the kind of a HostEffect.
type HostEffectKind uint8

// Host effects.
const (
	// DoRefuse: answer the step with Err.
	DoRefuse HostEffectKind = iota + 1
	// DoOK: answer the step OK (HostPause: wait until the tasks held
	// arrive at their safe points, then feed HostPauseOver).
	DoOK
	// DoReport (HostQuiet): answer with TIDs, the job's tasks here, and
	// Running, how many of them are not held at a safe point.
	DoReport
	// DoPause: hold TID at its next safe point for pause Pause, asked by
	// round Try, and wake it if it waits; New says the pause is new (the
	// daemon makes its record), else an earlier round's is taken on.
	DoPause
	// DoRelease: let TID go on from pause Pause; the pause is gone.
	DoRelease
	// DoWait: pause Pause of TID is being written; feed the event again
	// once HostWriteOver has come.
	DoWait
	// DoWrite: write TID's checkpoint, held by pause Pause; feed
	// HostWriteOver when done.
	DoWrite
	// DoStage: keep TID, read from its job's checkpoint, to start later,
	// and hold what arrives for it.
	DoStage
	// DoUnstage: forget the staged TID and what is held for it.
	DoUnstage
	// DoStart: put the staged TID into service.
	DoStart
)

var hostEffectNames = [...]string{"", "refuse", "ok", "report", "pause", "release", "wait", "write", "stage", "unstage", "start"}

func (k HostEffectKind) String() string {
	if int(k) < len(hostEffectNames) && k != 0 {
		return hostEffectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// HostEffect is something the host half of job checkpoints wants done.
type HostEffect struct {
	Kind  HostEffectKind
	TID   task.TID
	Pause uint64
	Try   uint64
	New   bool
	// Err (DoRefuse) is the step's answer.
	Err error
	// TIDs and Running (DoReport) are a quiet step's answer.
	TIDs    []task.TID
	Running int
}

func (x HostEffect) String() string {
	switch x.Kind {
	case DoRefuse:
		return fmt.Sprintf("refuse: %v", x.Err)
	case DoOK:
		return "ok"
	case DoReport:
		return fmt.Sprintf("report %v running %d", x.TIDs, x.Running)
	case DoPause:
		s := fmt.Sprintf("pause %v p%d try %d", x.TID, x.Pause, x.Try)
		if x.New {
			s += " new"
		}
		return s
	case DoRelease, DoWait, DoWrite:
		return fmt.Sprintf("%v %v p%d", x.Kind, x.TID, x.Pause)
	}
	return fmt.Sprintf("%v %v", x.Kind, x.TID)
}

// ErrHere: a restart would stage a task whose TID is in use here.
var ErrHere = errors.New("a task of that id is here already")

// Paused returns tid's pause, if any.
func (h *Host) Paused(tid task.TID) (Pause, bool) {
	p := h.pauses[tid]
	if p == nil {
		return Pause{}, false
	}
	return *p, true
}

// Resumed is the newest round (its try) the master resumed job with (0:
// none kept).
func (h *Host) Resumed(job uint64) uint64 { return h.resumed[job] }

// Staged reports whether tid is staged here, and for which job.
func (h *Host) Staged(tid task.TID) (job uint64, ok bool) {
	job, ok = h.staged[tid]
	return job, ok
}

// Counts is how many pauses, jobs with a resume kept and staged tasks
// the host holds.
func (h *Host) Counts() (pauses, resumed, staged int) {
	return len(h.pauses), len(h.resumed), len(h.staged)
}

// release lets go the pauses of job asked for try or an older round (try
// 0: whatever round), in TID order: one being written is waited for.
func (h *Host) release(job, try uint64) []HostEffect {
	var out []HostEffect
	for _, tid := range slices.Sorted(maps.Keys(h.pauses)) {
		if p := h.pauses[tid]; p.Job == job && (try == 0 || p.Try <= try) {
			out = append(out, h.let(tid))
		}
	}
	return out
}

// let releases tid's pause, or waits for its write.
func (h *Host) let(tid task.TID) HostEffect {
	p := h.pauses[tid]
	if p.Writing {
		return HostEffect{Kind: DoWait, TID: tid, Pause: p.ID, Try: p.Try}
	}
	delete(h.pauses, tid)
	return HostEffect{Kind: DoRelease, TID: tid, Pause: p.ID, Try: p.Try}
}

// Step feeds one event and returns the effects to perform, in order. The
// answer of a step is its last effect: DoRefuse (with the error), DoOK or
// DoReport. A step refused changes nothing but what its effects before
// the refusal say.
//
// Each event has a method of its own, so that Step's frame stays small: a
// task's goroutine feeds its end, and a control call's goroutine its step,
// each on a small stack, which one frame for every event's locals made
// grow (a copy of the stack) at every call.
func (h *Host) Step(e HostEvent) []HostEffect {
	switch e.Kind {
	case HostPause:
		return h.onPause(e)
	case HostPauseOver:
		return h.onPauseOver(e)
	case HostQuiet:
		return h.onQuiet(e)
	case HostWrite:
		return h.onWrite(e)
	case HostWriteOver:
		return h.onWriteOver(e)
	case HostResume:
		return h.onResume(e)
	case HostKill:
		return h.onKill(e)
	case HostLost:
		return h.onLost(e)
	case HostGone:
		return h.onGone(e)
	case HostStage:
		return h.onStage(e)
	case HostStart:
		return h.onStart(e)
	case HostUnstage:
		return h.onUnstage(e)
	}
	return refuseStep(e, nil, fmt.Errorf("%v: unknown host event", e.Kind))
}

// refuseStep appends the refusal of e, for err, to out.
func refuseStep(e HostEvent, out []HostEffect, err error) []HostEffect {
	return append(out, HostEffect{Kind: DoRefuse, TID: e.TID, Err: err})
}

// okStep appends the step's success to out.
func okStep(out []HostEffect) []HostEffect { return append(out, HostEffect{Kind: DoOK}) }

// onPause serves HostPause.
func (h *Host) onPause(e HostEvent) []HostEffect {
	try := e.Round.Try
	if try != 0 && try <= h.resumed[e.Job] {
		// It comes after its round's resume (stalled on its way):
		// taking it would hold the tasks for good.
		return refuseStep(e, nil, fmt.Errorf("pause of %v after its resume: %w", e.Round, move.ErrAborted))
	}
	if len(e.Departing) > 0 {
		return refuseStep(e, nil, fmt.Errorf("%v of job %d: %w", slices.Min(e.Departing), e.Job, move.ErrMoving))
	}
	for _, l := range e.Tasks {
		if l.MoveAsked {
			// It will suspend for a move at its next safe point:
			// the round fails, and the job's tasks go on.
			return refuseStep(e, h.release(e.Job, try), fmt.Errorf("%v of job %d: %w", l.TID, e.Job, move.ErrMoving))
		}
	}
	var out []HostEffect
	for _, l := range e.Tasks {
		p := h.pauses[l.TID]
		fresh := p == nil || p.Job != e.Job
		if fresh {
			h.next++
			p = &Pause{ID: h.next, Job: e.Job}
			h.pauses[l.TID] = p
		}
		p.Try = max(p.Try, try)
		out = append(out, HostEffect{Kind: DoPause, TID: l.TID, Pause: p.ID, Try: p.Try, New: fresh})
	}
	return okStep(out)
}

// onPauseOver serves HostPauseOver.
func (h *Host) onPauseOver(e HostEvent) []HostEffect {
	try := e.Round.Try
	if len(e.Late) == 0 && e.Err == nil {
		return okStep(nil)
	}
	// Some task reached no safe point in time, or the step was
	// cancelled: the round fails here, and the tasks go on.
	return okStep(h.release(e.Job, try))
}

// onQuiet serves HostQuiet.
func (h *Host) onQuiet(e HostEvent) []HostEffect {
	rep := HostEffect{Kind: DoReport}
	for _, l := range e.Tasks {
		rep.TIDs = append(rep.TIDs, l.TID)
		if p := h.pauses[l.TID]; p == nil || p.Job != e.Job || !l.Arrived {
			rep.Running++ // spawned since the pause, or not at its safe point yet
		}
	}
	return []HostEffect{rep}
}

// onWrite serves HostWrite.
func (h *Host) onWrite(e HostEvent) []HostEffect {
	try := e.Round.Try
	tid := e.Local.TID
	p := h.pauses[tid]
	switch {
	case p == nil || p.Job != e.Job:
		return refuseStep(e, nil, fmt.Errorf("%v of job %d is not paused", tid, e.Job))
	case p.Try != try:
		return refuseStep(e, nil, fmt.Errorf("%v of job %d paused for round %d, not %v: %w", tid, e.Job, p.Try, e.Round, ErrStale))
	case !e.Local.Arrived:
		return refuseStep(e, nil, fmt.Errorf("%v of job %d has not reached its safe point", tid, e.Job))
	case p.Writing:
		// The same step again: its write is under way.
		return []HostEffect{{Kind: DoWait, TID: tid, Pause: p.ID, Try: p.Try}}
	}
	p.Writing = true
	return []HostEffect{{Kind: DoWrite, TID: tid, Pause: p.ID, Try: p.Try}}
}

// onWriteOver serves HostWriteOver.
func (h *Host) onWriteOver(e HostEvent) []HostEffect {
	if p := h.pauses[e.TID]; p != nil && p.ID == e.Pause {
		p.Writing = false
	}
	return okStep(nil)
}

// onResume serves HostResume.
func (h *Host) onResume(e HostEvent) []HostEffect {
	try := e.Round.Try
	if try != 0 {
		h.resumed[e.Job] = max(h.resumed[e.Job], try)
	}
	return okStep(h.release(e.Job, try))
}

// onKill serves HostKill.
func (h *Host) onKill(e HostEvent) []HostEffect {
	return okStep(h.release(e.Job, 0))
}

// onLost serves HostLost.
func (h *Host) onLost(e HostEvent) []HostEffect {
	var out []HostEffect
	for _, l := range e.Tasks {
		if h.pauses[l.TID] != nil {
			out = append(out, h.let(l.TID))
		}
	}
	return okStep(out)
}

// onGone serves HostGone.
func (h *Host) onGone(e HostEvent) []HostEffect {
	// It will not run here again: its pause goes (a write under way
	// reads a task that no longer runs), and its job's resume goes
	// with the job's last task here.
	var out []HostEffect
	if p := h.pauses[e.TID]; p != nil {
		delete(h.pauses, e.TID)
		out = append(out, HostEffect{Kind: DoRelease, TID: e.TID, Pause: p.ID, Try: p.Try})
	}
	if e.JobLeft {
		delete(h.resumed, e.Job)
	}
	return okStep(out)
}

// onStage serves HostStage.
func (h *Host) onStage(e HostEvent) []HostEffect {
	// What an earlier restart of the job staged here and never
	// started (it failed, and its drop did not come: the master's
	// call timed out before this host answered) gives way to this
	// one.
	out := h.unstage(e.Job)
	dropped := map[task.TID]bool{}
	for _, x := range out {
		dropped[x.TID] = true
	}
	for _, l := range e.Tasks {
		if l.Running || l.Moving || (l.Arriving && !dropped[l.TID]) {
			return refuseStep(e, out, fmt.Errorf("restore %v: %w", l.TID, ErrHere))
		}
	}
	for _, l := range e.Tasks {
		h.staged[l.TID] = e.Job
		out = append(out, HostEffect{Kind: DoStage, TID: l.TID})
	}
	return okStep(out)
}

// onStart serves HostStart.
func (h *Host) onStart(e HostEvent) []HostEffect {
	var out []HostEffect
	for _, tid := range slices.Sorted(maps.Keys(h.staged)) {
		if h.staged[tid] == e.Job {
			delete(h.staged, tid)
			out = append(out, HostEffect{Kind: DoStart, TID: tid})
		}
	}
	return okStep(out)
}

// onUnstage serves HostUnstage.
func (h *Host) onUnstage(e HostEvent) []HostEffect {
	return okStep(h.unstage(e.Job))
}

// unstage forgets the tasks of job staged here.
func (h *Host) unstage(job uint64) []HostEffect {
	var out []HostEffect
	for _, tid := range slices.Sorted(maps.Keys(h.staged)) {
		if h.staged[tid] == job {
			delete(h.staged, tid)
			out = append(out, HostEffect{Kind: DoUnstage, TID: tid})
		}
	}
	return out
}
