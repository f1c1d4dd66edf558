package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/task"
)

// Job checkpoints (DESIGN §7). A coordinated checkpoint of a job is taken
// in four steps, each a call from the master to every host, as the job's
// coordinator (routing/jobck, driven in jobs.go) says; every step names
// its round, and a host refuses a write for a round its tasks were not
// paused for:
//
//  1. pause: every task of the job stops at its next safe point and waits
//     there; its mailbox keeps receiving. A task that reaches no safe point
//     within the budget fails the checkpoint, and every paused task goes
//     on. The reply carries the longest interval between safe points seen
//     of the job's tasks here, which sets the next round's budget.
//  2. quiet: the master waits until no host holds an unacknowledged message
//     from a task of the job. With every task paused nothing new is sent,
//     so every message in flight ends in its receiver's mailbox: the cut is
//     consistent, and no message is in the wire.
//  3. write: each host writes a checkpoint of each of its paused tasks into
//     the set's directory under the shared directory (state, mailbox,
//     sequence state, registrations, group memberships), and the master
//     writes the manifest last, which completes the set.
//  4. resume: the tasks go on from their safe points.
//
// The host half of job checkpoints (routing/jobck.Host, ht.ckpts) decides
// every step here: the handlers below feed it under ht.mu with what the
// task table knows of the job's tasks, and perform its effects (hold a
// task, release it, write its checkpoint, wait for a write under way).

// ErrNoJob is returned for a job that does not run (or has no task left).
var ErrNoJob = errors.New("no such job")

// pauseReq is the shell's record of a task's pause for a job checkpoint,
// made and dropped as the host half of job checkpoints (ht.ckpts) says:
// the channels the task and the pause step block on. The task's goroutine
// finds it through hosted.pause without a lock.
type pauseReq struct {
	id     uint64 // the machine's name for the pause
	h      *hosted
	paused chan struct{} // closed when the task has stopped at a safe point
	once   sync.Once
	resume chan struct{} // closed to let it go on
	// writing (ht.mu) is closed when the write of the task's checkpoint
	// under way ends: a release, or the same write again, waits for it.
	writing chan struct{}
}

// safeSeen records that the task is at a safe point at now.
func (h *hosted) safeSeen(now time.Time) {
	t := now.UnixNano()
	h.warned.Store(false)
	if last := h.safeAt.Swap(t); last != 0 && t > last {
		h.safeEvery.Store(max(t-last, h.safeEvery.Load()*7/8))
	}
}

// safeInterval is the longest interval between the task's safe points it
// has seen, counting the time since its last one unless it is at one now.
func (h *hosted) safeInterval(now time.Time, atOne bool) time.Duration {
	every := h.safeEvery.Load()
	if last := h.safeAt.Load(); !atOne && last != 0 {
		every = max(every, now.UnixNano()-last)
	}
	return time.Duration(every)
}

func (p *pauseReq) arrived() { p.once.Do(func() { close(p.paused) }) }

// atSafePoint reports whether the task has stopped at its safe point.
func (p *pauseReq) atSafePoint() bool {
	select {
	case <-p.paused:
		return true
	default:
		return false
	}
}

// pauseHere is called by the task's own goroutine at a safe point while a
// pause is pending: it waits there until released or killed.
func (h *hosted) pauseHere(p *pauseReq) error {
	p.arrived()
	select {
	case <-p.resume:
		return nil
	case <-h.ctx.Done():
		return task.ErrKilled
	}
}

// Control request bodies for job checkpoints.
type (
	ckStep struct {
		Job uint64 `msgpack:"j"`
		// Round names the coordinator's round the step belongs to.
		Round   jobck.Round   `msgpack:"rd,omitempty"`
		Timeout time.Duration `msgpack:"to,omitempty"`
		Dir     string        `msgpack:"d,omitempty"`
		// Groups are the group memberships of the job's tasks (write).
		Groups map[task.TID][]ckpt.Membership `msgpack:"g,omitempty"`
		// TIDs are every task the job has had (quiet): the unacknowledged
		// messages here of each are counted, of tasks that moved away or
		// ended too.
		TIDs []task.TID `msgpack:"ts,omitempty"`
	}
	ckReply struct {
		TIDs    []task.TID     `msgpack:"t,omitempty"` // the job's tasks here
		Pending int            `msgpack:"p,omitempty"` // unacknowledged messages from them
		Running int            `msgpack:"r,omitempty"` // job tasks here not paused
		Files   []jobset.Entry `msgpack:"f,omitempty"` // the tasks' checkpoints written (Host filled by the master)
		// Late are the tasks that reached no safe point within the pause
		// budget (pause); SafeEvery the longest interval between safe
		// points seen of the job's tasks here.
		Late      []task.TID    `msgpack:"l,omitempty"`
		SafeEvery time.Duration `msgpack:"se,omitempty"`
	}
)

// Job checkpoint control methods (master to hosts).
const (
	mCkPause  = "ckpt.pause"
	mCkQuiet  = "ckpt.quiet"
	mCkWrite  = "ckpt.write"
	mCkResume = "ckpt.resume"
	mCkKill   = "ckpt.kill" // a job rolls back: end its tasks here quietly
)

// resumeJobStep resumes the job's tasks here at the end of a round; the
// host half of job checkpoints (jobck.Host) records the round resumed, so
// that a pause of it or an older one that comes after is refused.
func (d *Daemon) resumeJobStep(a ckStep) error {
	return d.stepCkpt(func() jobck.HostEvent {
		return jobck.HostEvent{Kind: jobck.HostResume, Job: a.Job, Round: a.Round}
	}, nil)
}

// stepCkpt feeds the host half of job checkpoints the event that event
// builds, under ht.mu, and performs its effects (doCkpt). Where the
// machine says to wait for a checkpoint write under way, it waits with
// ht.mu released and feeds the event again. It returns the step's
// refusal, if any.
func (d *Daemon) stepCkpt(event func() jobck.HostEvent, perform func(jobck.HostEffect)) error {
	d.ht.mu.Lock()
	for {
		wait, err := d.ht.doCkpt(d.ht.ckpts.Step(event()), perform)
		d.ht.mu.Unlock()
		if len(wait) == 0 {
			return err
		}
		for _, ch := range wait {
			<-ch // a write to the shared directory: it ends
		}
		d.ht.mu.Lock()
	}
}

// doCkpt performs the effects of the host half of job checkpoints that
// are the task table's (mu held): it makes and drops the tasks' pause
// records, wakes a task asked to pause, marks a write under way, and
// forgets staged tasks; perform, when set, gets every effect after that.
// It returns the writes under way to wait for and the step's refusal.
func (ht *hosting) doCkpt(fx []jobck.HostEffect, perform func(jobck.HostEffect)) (wait []chan struct{}, err error) {
	for _, x := range fx {
		p := ht.pauses[x.TID]
		switch x.Kind {
		case jobck.DoRefuse:
			err = x.Err
		case jobck.DoPause:
			h := ht.tasks[x.TID]
			if x.New && h != nil {
				p = &pauseReq{id: x.Pause, h: h, paused: make(chan struct{}), resume: make(chan struct{})}
				ht.pauses[x.TID] = p
				h.pause.Store(p)
			}
			if h != nil {
				select { // wake the task if it waits in RecvSafe
				case h.moveKick <- struct{}{}:
				default:
				}
			}
		case jobck.DoRelease:
			if p != nil && p.id == x.Pause {
				delete(ht.pauses, x.TID)
				p.h.pause.CompareAndSwap(p, nil)
				close(p.resume)
			}
		case jobck.DoWait:
			if p != nil && p.id == x.Pause && p.writing != nil {
				wait = append(wait, p.writing)
			}
		case jobck.DoWrite:
			if p != nil && p.id == x.Pause {
				p.writing = make(chan struct{})
			}
		case jobck.DoUnstage:
			delete(ht.staged, x.TID)
			delete(ht.incoming, x.TID)
		}
		if perform != nil {
			perform(x)
		}
	}
	return wait, err
}

// pauseFacts is what the task table knows of tid for the host half of
// job checkpoints (ht.mu held).
func (ht *hosting) pauseFacts(h *hosted) jobck.Local {
	l := jobck.Local{TID: h.tid, MoveAsked: h.moveReq.Load() != nil}
	if p := ht.pauses[h.tid]; p != nil && p.h == h {
		l.Arrived = p.atSafePoint()
	}
	return l
}

// jobEvent is an event of kind k for the job's tasks here (ht.mu held).
func (ht *hosting) jobEvent(k jobck.HostEventKind, a ckStep) jobck.HostEvent {
	e := jobck.HostEvent{Kind: k, Job: a.Job, Round: a.Round}
	for _, h := range ht.jobTasksLocked(a.Job) {
		e.Tasks = append(e.Tasks, ht.pauseFacts(h))
	}
	return e
}

// pauseJob stops every local task of the job at its next safe point. If
// some do not get there within the timeout, every task of the job here
// goes on and the reply names the late ones; a task moving fails the call.
func (d *Daemon) pauseJob(ctx context.Context, a ckStep) (ckReply, error) {
	var rep ckReply
	var reqs []*pauseReq
	err := d.stepCkpt(func() jobck.HostEvent {
		e := d.ht.jobEvent(jobck.HostPause, a)
		for tid, l := range d.ht.moving {
			if l.h.job == a.Job {
				e.Departing = append(e.Departing, tid)
			}
		}
		return e
	}, func(x jobck.HostEffect) {
		if p := d.ht.pauses[x.TID]; x.Kind == jobck.DoPause && p != nil {
			reqs = append(reqs, p)
			rep.TIDs = append(rep.TIDs, x.TID)
		}
	})
	if err != nil {
		return rep, err
	}
	over := func(late []task.TID, err error) {
		_ = d.stepCkpt(func() jobck.HostEvent {
			return jobck.HostEvent{Kind: jobck.HostPauseOver, Job: a.Job, Round: a.Round, Late: late, Err: err}
		}, nil)
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = d.cfg.MoveTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	expired := false
	for _, p := range reqs {
		h := p.h
		arrived := true
		if !expired {
			select {
			case <-p.paused:
			case <-h.done: // it exited meanwhile: nothing to save
			case <-t.C:
				expired, arrived = true, false
			case <-ctx.Done():
				over(nil, ctx.Err())
				return rep, ctx.Err()
			}
		} else {
			select {
			case <-p.paused:
			case <-h.done:
			default:
				arrived = false
			}
		}
		if !arrived {
			h.warnNoSafePoint("job checkpoint", timeout)
			rep.Late = append(rep.Late, h.tid)
		}
		rep.SafeEvery = max(rep.SafeEvery, h.safeInterval(time.Now(), arrived))
	}
	over(rep.Late, nil)
	return rep, nil
}

// quietJob reports the job's tasks here that are not paused (spawned
// since the pause) and the messages not yet acknowledged here from the
// job's tasks: those here and every one the master names (a.TIDs, every
// task the job has had). A task that moved away or ended leaves its
// unacknowledged messages in this host's outbox; uncounted, a set could
// complete with one of them in flight, sent before the cut and received
// by no restored task.
func (d *Daemon) quietJob(a ckStep) (ckReply, error) {
	var rep ckReply
	err := d.stepCkpt(func() jobck.HostEvent { return d.ht.jobEvent(jobck.HostQuiet, a) }, func(x jobck.HostEffect) {
		if x.Kind == jobck.DoReport {
			rep.TIDs, rep.Running = x.TIDs, x.Running
		}
	})
	if err != nil {
		return rep, err
	}
	rep.Pending += d.rt.pendingFrom(append(slices.Clip(a.TIDs), rep.TIDs...))
	return rep, nil
}

// writeJob writes a checkpoint of each paused local task of the job into
// the directory a.Dir (a set of the shared directory).
func (d *Daemon) writeJob(a ckStep) (ckReply, error) {
	if d.cfg.Fault == "exit-on-second-ckpt-write" && d.ckWrites.Add(1) == 2 {
		d.log.Error("fault injected: exiting in the middle of a job checkpoint", "job", a.Job, "round", a.Round)
		os.Exit(137)
	}
	var rep ckReply
	dir := ckpt.Dir{Path: a.Dir}
	key, keyID := d.keyID(labelCkpt)
	for _, h := range d.ht.jobTasks(a.Job) {
		var p *pauseReq
		err := d.stepCkpt(func() jobck.HostEvent {
			return jobck.HostEvent{Kind: jobck.HostWrite, Job: a.Job, Round: a.Round, Local: d.ht.pauseFacts(h)}
		}, func(x jobck.HostEffect) {
			if x.Kind == jobck.DoWrite {
				p = d.ht.pauses[x.TID]
			}
		})
		if err == nil && p == nil {
			err = fmt.Errorf("%v of job %d: no pause kept for its write", h.tid, a.Job)
		}
		if err != nil {
			return rep, err
		}
		e, err := d.writePaused(dir, key, keyID, h, a)
		d.ht.mu.Lock()
		_, _ = d.ht.doCkpt(d.ht.ckpts.Step(jobck.HostEvent{Kind: jobck.HostWriteOver, Job: a.Job, TID: h.tid, Pause: p.id}), nil)
		close(p.writing)
		p.writing = nil
		d.ht.mu.Unlock()
		if err != nil {
			return rep, err
		}
		rep.Files = append(rep.Files, e)
	}
	return rep, nil
}

// writePaused writes the checkpoint of h into dir; the host half of job
// checkpoints holds its release until the write is over.
func (d *Daemon) writePaused(dir ckpt.Dir, key []byte, keyID [8]byte, h *hosted, a ckStep) (jobset.Entry, error) {
	e := jobset.Entry{TID: h.tid.String(), Type: h.typ, File: ckptFileName(h.tid)}
	m := d.captureMeta(h)
	m.Groups = a.Groups[h.tid]
	if _, err := dir.Save(e.File, func(w io.Writer) error {
		sum := jobset.NewSummer(w)
		_, err := ckpt.WriteWith(sum, key, &m, h.t, ckpt.WriteOptions{KeyID: keyID})
		sum.Fill(&e)
		return err
	}); err != nil {
		return e, fmt.Errorf("checkpoint %v: %w", h.tid, err)
	}
	return e, nil
}

// releasePauses lets the paused tasks of job (tids nil), or tids, go on
// for a kill: their job rolls back, or the master gave them up. A
// checkpoint write under way is waited for.
func (d *Daemon) releasePauses(job uint64, tids []task.TID) {
	_ = d.stepCkpt(func() jobck.HostEvent {
		if tids == nil {
			return jobck.HostEvent{Kind: jobck.HostKill, Job: job}
		}
		e := jobck.HostEvent{Kind: jobck.HostLost}
		for _, tid := range tids {
			e.Tasks = append(e.Tasks, jobck.Local{TID: tid})
		}
		return e
	}, nil)
}

// ckptFileName is the file of a task's checkpoint in a set.
func ckptFileName(tid task.TID) string { return fmt.Sprintf("task-%d-%d.ckpt", tid.Host(), tid.Num()) }

// captureMeta describes a paused task for its checkpoint, leaving it as
// it is: a copy of its mailbox, its sequence state and registrations.
func (d *Daemon) captureMeta(h *hosted) ckpt.Meta {
	d.rt.mu.Lock() // the node's lock: the inbox, the outbox and the tasks
	defer d.rt.mu.Unlock()
	return d.metaLocked(h, h.mb.snapshot())
}

// metaLocked describes task h for a checkpoint with the given mailbox:
// its identity, group memberships as this host knows them, sequence state
// and notify registrations (the node's lock held). A move then takes the task
// out of service; a job checkpoint leaves it be.
func (d *Daemon) metaLocked(h *hosted, mailbox []envelope) ckpt.Meta {
	m := ckpt.Meta{Type: h.typ, TID: h.tid, Parent: h.parent, Job: h.job, Created: time.Now(), Groups: h.memberships(), Siblings: h.sibs.list()}
	for _, e := range mailbox {
		m.Mailbox = append(m.Mailbox, routing.Envelope{From: e.from, To: h.tid, Tag: int32(e.tag), Body: e.body})
	}
	m.InSeq, m.Early = d.rt.inbox.ReceiverState(h.tid)
	m.OutSeq = d.rt.outbox.SenderState(h.tid)
	for _, w := range d.ht.watch[h.tid] {
		m.Watchers = append(m.Watchers, ckpt.Watcher{Who: w.who, Tag: w.tag})
	}
	for _, w := range d.ht.hostW {
		if w.who == h.tid {
			m.HostWatches = append(m.HostWatches, ckpt.HostWatch{Kind: w.kind, Host: w.host, Tag: w.tag})
		}
	}
	return m
}
