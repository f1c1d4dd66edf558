package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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

// ErrNoJob is returned for a job that does not run (or has no task left).
var ErrNoJob = errors.New("no such job")

// pauseReq holds a task at its safe point during a job checkpoint.
type pauseReq struct {
	paused chan struct{} // closed when the task has stopped at a safe point
	once   sync.Once
	resume chan struct{} // closed to let it go on
	try    atomic.Uint64 // the newest round that asked for it
	// mu orders writing the task's checkpoint and releasing it: a
	// release (a resume, a kill) waits for a write under way, and a write
	// after the release is refused, so the state is never encoded while
	// the task runs. It is held across the write to the shared directory,
	// never across a call to another daemon.
	mu       sync.Mutex
	released bool
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
func (p *pauseReq) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.released {
		p.released = true
		close(p.resume)
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

// resumeJobStep resumes the job's tasks here at the end of a round.
func (d *Daemon) resumeJobStep(a ckStep) {
	if a.Round.Try != 0 {
		// A pause of this round or an older one that comes after
		// (stalled on its way) would hold the tasks for good.
		d.ht.mu.Lock()
		d.ht.ckResumed[a.Job] = max(d.ht.ckResumed[a.Job], a.Round.Try)
		d.ht.mu.Unlock()
	}
	d.resumeJob(a.Job, a.Round.Try)
}

// pauseJob stops every local task of the job at its next safe point. If
// some do not get there within the timeout, every task of the job here
// goes on and the reply names the late ones; a task moving fails the call.
func (d *Daemon) pauseJob(ctx context.Context, a ckStep) (ckReply, error) {
	d.ht.mu.Lock()
	if a.Round.Try != 0 && a.Round.Try <= d.ht.ckResumed[a.Job] {
		d.ht.mu.Unlock()
		return ckReply{}, fmt.Errorf("pause of %v after its resume: %w", a.Round, ErrAborted)
	}
	for _, l := range d.ht.moving {
		if l.h.job == a.Job {
			d.ht.mu.Unlock()
			return ckReply{}, fmt.Errorf("%v of job %d: %w", l.h.tid, a.Job, ErrMoving)
		}
	}
	d.ht.mu.Unlock()
	hs := d.ht.jobTasks(a.Job)
	var rep ckReply
	var reqs []*pauseReq
	for _, h := range hs {
		p := h.pause.Load()
		for p == nil { // another step may resume it meanwhile: ask again
			p = &pauseReq{paused: make(chan struct{}), resume: make(chan struct{})}
			if !h.pause.CompareAndSwap(nil, p) {
				p = h.pause.Load()
			}
		}
		p.try.Store(max(p.try.Load(), a.Round.Try))
		if h.moveReq.Load() != nil {
			d.resumeJob(a.Job, a.Round.Try)
			return rep, fmt.Errorf("%v of job %d: %w", h.tid, a.Job, ErrMoving)
		}
		select { // wake the task if it waits in RecvSafe
		case h.moveKick <- struct{}{}:
		default:
		}
		reqs = append(reqs, p)
		rep.TIDs = append(rep.TIDs, h.tid)
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = d.cfg.MoveTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	expired := false
	for i, p := range reqs {
		arrived := true
		if !expired {
			select {
			case <-p.paused:
			case <-hs[i].done: // it exited meanwhile: nothing to save
			case <-t.C:
				expired, arrived = true, false
			case <-ctx.Done():
				d.resumeJob(a.Job, a.Round.Try)
				return rep, ctx.Err()
			}
		} else {
			select {
			case <-p.paused:
			case <-hs[i].done:
			default:
				arrived = false
			}
		}
		if !arrived {
			hs[i].warnNoSafePoint("job checkpoint", timeout)
			rep.Late = append(rep.Late, hs[i].tid)
		}
		rep.SafeEvery = max(rep.SafeEvery, hs[i].safeInterval(time.Now(), arrived))
	}
	if len(rep.Late) > 0 {
		d.resumeJob(a.Job, a.Round.Try)
	}
	return rep, nil
}

// quietJob reports the job's tasks here that are not paused (spawned
// since the pause) and the messages from its tasks not yet acknowledged.
func (d *Daemon) quietJob(a ckStep) ckReply {
	var rep ckReply
	for _, h := range d.ht.jobTasks(a.Job) {
		rep.TIDs = append(rep.TIDs, h.tid)
		p := h.pause.Load()
		if p == nil {
			rep.Running++
			continue
		}
		select {
		case <-p.paused:
		default:
			rep.Running++
		}
	}
	rep.Pending += d.rt.pendingFrom(rep.TIDs)
	return rep
}

// writeJob writes a checkpoint of each paused local task of the job into
// the directory a.Dir (a set of the shared directory).
func (d *Daemon) writeJob(a ckStep) (ckReply, error) {
	var rep ckReply
	dir := ckpt.Dir{Path: a.Dir}
	key, keyID := d.keyID(labelCkpt)
	for _, h := range d.ht.jobTasks(a.Job) {
		p := h.pause.Load()
		if p == nil {
			return rep, fmt.Errorf("%v of job %d is not paused", h.tid, a.Job)
		}
		if got := p.try.Load(); got != a.Round.Try {
			return rep, fmt.Errorf("%v of job %d paused for round %d, not %v: %w", h.tid, a.Job, got, a.Round, jobck.ErrStale)
		}
		select {
		case <-p.paused:
		default:
			return rep, fmt.Errorf("%v of job %d has not reached its safe point", h.tid, a.Job)
		}
		e, err := d.writePaused(dir, key, keyID, h, p, a)
		if err != nil {
			return rep, err
		}
		rep.Files = append(rep.Files, e)
	}
	return rep, nil
}

// writePaused writes the checkpoint of h, paused by p, into dir, unless p
// has been released meanwhile (a resume or a kill that came before this
// step, stalled on its way).
func (d *Daemon) writePaused(dir ckpt.Dir, key []byte, keyID [8]byte, h *hosted, p *pauseReq, a ckStep) (jobset.Entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := jobset.Entry{TID: h.tid.String(), Type: h.typ, File: ckptFileName(h.tid)}
	if p.released {
		return e, fmt.Errorf("%v of job %d was resumed before round %v wrote it: %w", h.tid, a.Job, a.Round, jobck.ErrStale)
	}
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

// ckptFileName is the file of a task's checkpoint in a set.
func ckptFileName(tid task.TID) string { return fmt.Sprintf("task-%d-%d.ckpt", tid.Host(), tid.Num()) }

// captureMeta describes a paused task for its checkpoint, leaving it as
// it is: a copy of its mailbox, its sequence state and registrations.
func (d *Daemon) captureMeta(h *hosted) ckpt.Meta {
	d.rt.mu.Lock()
	d.ht.mu.Lock()
	defer d.rt.mu.Unlock()
	defer d.ht.mu.Unlock()
	return d.metaLocked(h, h.mb.snapshot())
}

// metaLocked describes task h for a checkpoint with the given mailbox:
// its identity, group memberships as this host knows them, sequence state
// and notify registrations (rt.mu and ht.mu held). A move then takes the task
// out of service; a job checkpoint leaves it be.
func (d *Daemon) metaLocked(h *hosted, mailbox []envelope) ckpt.Meta {
	m := ckpt.Meta{Type: h.typ, TID: h.tid, Parent: h.parent, Job: h.job, Created: time.Now(), Groups: h.memberships()}
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

// resumeJob lets the job's tasks paused here for round try or an older
// one go on (try 0: whatever round): a late resume of an abandoned round
// leaves a newer round's pause be.
func (d *Daemon) resumeJob(job, try uint64) {
	for _, h := range d.ht.jobTasks(job) {
		p := h.pause.Load()
		if p == nil || (try != 0 && p.try.Load() > try) {
			continue
		}
		if h.pause.CompareAndSwap(p, nil) {
			p.release()
		}
	}
}
