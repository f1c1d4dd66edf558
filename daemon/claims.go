package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// A host speaks only for what it hosts: every claim a daemon's frame makes
// about a task (a message's sender, an acknowledgement's or a refusal's
// receiver, an exit, an output line, a barrier arrival, a group, spawn,
// notify, kill or migrate call) is judged by routing.Judge against the identity of the
// connection that carried it (the host its certificate names, checked at
// the handshake) and this daemon's route table. A refused claim is
// dropped (a message or an acknowledgement is not taken, an event is
// ignored, a call fails with ErrForged), logged (rate-limited) and counted
// (dpvm_forged_claims_total); a connection that sends Config.MaxForgeries
// frames with refused claims within Config.ForgeryWindow is closed.

// ErrForged is a call or frame refused because it claims a task its host
// does not hold.
var ErrForged = fmt.Errorf("%w: a host speaks only for the tasks it hosts", ErrForbidden)

// Defaults of Config.MaxForgeries and Config.ForgeryWindow.
const (
	DefaultMaxForgeries  = 64
	DefaultForgeryWindow = 10 * time.Second
)

// forgeCount counts a connection's frames with refused claims in the
// current window.
type forgeCount struct {
	mu    sync.Mutex
	start time.Time
	n     int
}

// add counts one frame at now and reports whether the connection has
// reached max within window.
func (f *forgeCount) add(now time.Time, max int, window time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.start) >= window {
		f.start, f.n = now, 0
	}
	f.n++
	return f.n >= max
}

// judged reports whether p's claims are judged: a daemon's are. A client
// makes none (it may send only calls, which act for no task).
func judged(p *peer) bool { return p != nil && p.role == pki.RoleDaemon }

// judgeLocked judges p's claim of kind k about tid (d.rt.mu held).
func (d *Daemon) judgeLocked(p *peer, k routing.ClaimKind, tid task.TID) routing.Verdict {
	return d.rt.routes.Judge(routing.Claim{Kind: k, Task: tid, By: p.info.ID}, MasterID)
}

// judge is judgeLocked, taking d.rt.mu.
func (d *Daemon) judge(p *peer, k routing.ClaimKind, tid task.TID) routing.Verdict {
	d.rt.mu.Lock()
	defer d.rt.mu.Unlock()
	return d.judgeLocked(p, k, tid)
}

// refusal is why a claim was refused where routing.Judge did not refuse
// it (forged logs either).
type refusal string

func (r refusal) String() string { return string(r) }

// Refusals of a host's kill or migrate (hostCallClaim, checkActing).
const (
	refuseNotOwner  refusal = "the acting task's owner does not own the task"
	refuseNotMaster refusal = "a host's kill goes through the master"
)

// forged records a frame from p whose claims were refused: n of them,
// the first of kind k about tid, with verdict v (a routing.Verdict or a
// refusal), in a frame carrying what. It logs (rate-limited) and counts
// them, and returns an error wrapping ErrForged once p has sent
// Config.MaxForgeries such frames within Config.ForgeryWindow: the caller
// closes the connection.
func (d *Daemon) forged(p *peer, what string, k routing.ClaimKind, tid task.TID, v fmt.Stringer, n int) error {
	now := d.noteRefused(p, what, k, tid, v, n)
	if p.forgeries.add(now, d.cfg.MaxForgeries, d.cfg.ForgeryWindow) {
		return fmt.Errorf("%s: %d frames with claims about tasks it does not host within %v: %w",
			p.name(), d.cfg.MaxForgeries, d.cfg.ForgeryWindow, ErrForged)
	}
	return nil
}

// noteRefused logs (rate-limited) and counts n refused claims from p, as
// forged does, without counting the frame towards closing p's connection,
// and returns the time it noted them at.
func (d *Daemon) noteRefused(p *peer, what string, k routing.ClaimKind, tid task.TID, v fmt.Stringer, n int) time.Time {
	for range n {
		d.met.ClaimRefused(k.String(), p.info.Name)
	}
	now := time.Now()
	ok, suppressed := d.forgeLog.allow(now)
	if suppressed > 0 {
		d.log.Warn("refused claims not logged", "count", suppressed, "window", refusalWindow)
	}
	if ok {
		d.log.Warn("refused a claim about a task", "peer", p.info.ID, "peer_name", p.info.Name, "serial", p.cert.Serial,
			"frame", what, "claim", k.String(), "tid", tid, "verdict", v.String(), "claims", n)
	}
	return now
}

// refuseClaim judges p's claim and, if refused, records it (forged) and
// returns why: ErrForged, and the connection is closed when p has sent
// too many. It is for claims that fail alone (an event, a call).
func (d *Daemon) refuseClaim(p *peer, what string, k routing.ClaimKind, tid task.TID) error {
	if !judged(p) {
		return nil
	}
	v := d.judge(p, k, tid)
	if v == routing.Allow {
		return nil
	}
	if err := d.forged(p, what, k, tid, v, 1); err != nil {
		p.close(err)
		return err
	}
	return fmt.Errorf("%s for %v from %s: %s: %w", what, tid, p.name(), v, ErrForged)
}

// hostCallClaim judges the task a daemon's call acts for: the member of a
// group call, the parent of a spawn, the watcher of a notify call, the
// task killing or moving another (By: checkActing then checks that its
// owner owns the other). A host's kill goes to the master, which judges
// it and forwards it to the task's host: a host refuses a kill from
// another host but the master. Halting the machine, deleting a host,
// injecting load, killing or checkpointing a job and running a program
// are a person's calls, refused from a daemon but the master (authorize
// leaves them open to daemons). Other calls that act for no task pass.
func (d *Daemon) hostCallClaim(p *peer, method string, body []byte) error {
	if !judged(p) {
		return nil
	}
	var tid task.TID
	switch method {
	case mHalt, mDelete, mInject, mKillJob, mCheckpoint, mRun:
		// A person's calls (admin or user): no daemon makes them.
		if p.cert.Master {
			return nil
		}
		return fmt.Errorf("method %q is a person's to call, not host %s's: %w", method, p.cert.Name, ErrForbidden)
	case mJoin, mLeave, mBarrier, mLeaveAll:
		var a groupArgs
		if err := decodeMsg(body, &a); err != nil {
			return err
		}
		tid = a.TID
	case mSpawn:
		var a spawnArgs
		if err := decodeMsg(body, &a); err != nil {
			return err
		}
		return d.spawnClaim(p, &a)
	case mNotify:
		var a notifyArgs
		if err := decodeMsg(body, &a); err != nil {
			return err
		}
		tid = a.Watcher
	case mKill:
		if p.cert.Master {
			return nil // the master forwards a kill it judged
		}
		var a tidArgs
		if err := decodeMsg(body, &a); err != nil {
			return err
		}
		if !d.isMaster() {
			if err := d.forged(p, "call kill", routing.ClaimAct, a.By, refuseNotMaster, 1); err != nil {
				p.close(err)
				return err
			}
			return fmt.Errorf("kill of %v from %s: %s: %w", a.TID, p.name(), refuseNotMaster, ErrForged)
		}
		tid = a.By
	case mMigrate:
		var a migrateArgs
		if err := decodeMsg(body, &a); err != nil {
			return err
		}
		tid = a.By
	default:
		return nil
	}
	return d.refuseClaim(p, "call "+method, routing.ClaimAct, tid)
}

// spawnClaim judges a daemon's spawn: a task's, whose parent must run on
// p and whose tasks go into the parent's job (as the master knows it,
// when it started the parent), or a root (no parent), outside any job.
func (d *Daemon) spawnClaim(p *peer, a *spawnArgs) error {
	if a.Parent.IsZero() {
		if a.Job == 0 || p.cert.Master {
			return nil // a root: a person's spawn, not a task's
		}
		if err := d.forged(p, fmt.Sprintf("call spawn into job %d", a.Job), routing.ClaimAct, 0, routing.RefuseNoTask, 1); err != nil {
			p.close(err)
			return err
		}
		return fmt.Errorf("spawn into job %d from %s for no task: %w", a.Job, p.name(), ErrForged)
	}
	if err := d.refuseClaim(p, "call spawn", routing.ClaimAct, a.Parent); err != nil {
		return err
	}
	job, known := d.owners.jobOf(a.Parent)
	if a.MinSize > 0 || a.MaxSize > 0 || (known && job == a.Job) || (!known && d.unknownMaySpeak(p, a.Job, a.Parent)) {
		return nil
	}
	if err := d.forged(p, fmt.Sprintf("call spawn into job %d", a.Job), routing.ClaimAct, a.Parent, routing.RefuseElsewhere, 1); err != nil {
		p.close(err)
		return err
	}
	if !known {
		return fmt.Errorf("spawn into job %d from %s for %v, not a task of it the master started: %w", a.Job, p.name(), a.Parent, ErrForged)
	}
	if job == 0 {
		return fmt.Errorf("spawn into job %d from %s for %v, a task outside any job: %w", a.Job, p.name(), a.Parent, ErrForged)
	}
	return fmt.Errorf("spawn into job %d from %s for %v, a task of job %d: %w", a.Job, p.name(), a.Parent, job, ErrForged)
}

// unknownMaySpeak reports whether tid, a task of p that the master does
// not know, may speak (write output, spawn) for job: one of job's, which
// the master has registered, only while a start of job's tasks on p is
// under way (its answer, which names the tasks, is not in yet), and only
// as one of the TIDs the master numbered that start's tasks with
// (registry.startedAs): a TID of p's own host ID is routed to p until a
// route says otherwise, so p could otherwise make one up and, with a load
// report naming job, speak for it. The master records the job of every
// task it starts or restores before the task can speak after its start's
// answer (placeAndStart, restoreSet); a moved task keeps its TID and its
// record. A job the master has not registered — one running when it was
// recovered (Config.Recover), whose tasks it never started, or one that
// has ended — and job 0 keep the looser rule: a task the master does not
// know may speak for them (outputClaim still asks that p be recorded with
// tasks of the job: its load reports, its own word).
func (d *Daemon) unknownMaySpeak(p *peer, job uint64, tid task.TID) bool {
	if job == 0 || d.reg.get(job) == nil {
		return true
	}
	return d.reg.startedAs(p.info.ID, job, tid)
}

// outputClaim judges an output event from p: the writing task must run on
// p; a task the master started must be of the job the line is for, and
// one it does not know must be of a start under way there
// (unknownMaySpeak); and p must be recorded with tasks of that job (or
// tasks of it being started there; p's load reports, which say what jobs
// it runs, are its own word).
func (d *Daemon) outputClaim(p *peer, e *event) error {
	if err := d.refuseClaim(p, "output event", routing.ClaimAct, e.TID); err != nil || !judged(p) || e.Job == 0 {
		return err
	}
	job, known := d.owners.jobOf(e.TID)
	if ((known && job == e.Job) || (!known && d.unknownMaySpeak(p, e.Job, e.TID))) && d.reg.runs(p.info.ID, e.Job) {
		return nil
	}
	if err := d.forged(p, fmt.Sprintf("output event for job %d", e.Job), routing.ClaimAct, e.TID, routing.RefuseElsewhere, 1); err != nil {
		p.close(err)
		return err
	}
	if known && job != e.Job {
		return fmt.Errorf("output of job %d from %s for %v, a task of job %d: %w", e.Job, p.name(), e.TID, job, ErrForged)
	}
	if !known && d.reg.runs(p.info.ID, e.Job) {
		return fmt.Errorf("output of job %d from %s for %v, not a task of it the master started: %w", e.Job, p.name(), e.TID, ErrForged)
	}
	return fmt.Errorf("output of job %d from %s, which runs none of its tasks: %w", e.Job, p.name(), ErrForged)
}

// checkActing checks that task by may kill or move target (master): its
// owner — the person who started its job, or who spawned it outside any
// job — must own target, under the rule a person's kill or migrate is
// held to (checkTaskOwner), unless an admin. p is the host whose task by
// is (hostCallClaim judged that it runs there), nil for a task of this
// daemon; a client's calls are held to their own rule (checkRule) and a
// zero by names no task acting (a person's call, the master's). A host's
// refused call is logged and counted as a forgery is, but not towards
// closing its connection: an honest host relays whatever kill its task
// asks for, and a task's want of rights is not its host's lie (a task
// could otherwise have its host cut off from the master).
//
// A task whose owner the master does not know may act on any task whose
// owner it does not know either, as before owners were recorded: a task
// of a job whose owner is not on record (one running before a master
// recovery, or started by a program in-process, without a certificate),
// one spawned outside jobs by no person, or one whose spawn's answer is
// not in yet. On a task whose owner is on record it may act only as one
// of the tasks of a start of that task's job on its host under way, with
// a TID the master numbered it with (its own spawn's answer may not be in
// yet: unknownMaySpeak's window); otherwise it is refused, and a TID the
// master never started (made up by its host) is counted against the host
// as a forgery.
func (d *Daemon) checkActing(ctx context.Context, p *peer, method string, by, target task.TID) error {
	if by.IsZero() || by == target || !d.isMaster() || (p != nil && (!judged(p) || p.cert.Master)) {
		return nil
	}
	who, ok := d.taskOwner(by)
	if !ok {
		return d.checkOwnerless(p, method, by, target)
	}
	if who.admin {
		return nil
	}
	err := d.checkTaskOwner(ctx, who.name, target)
	if err == nil || !errors.Is(err, ErrForbidden) {
		return err
	}
	err = fmt.Errorf("%s of %v by %v (a task of %s's): %w", method, target, by, who.name, err)
	if p == nil {
		return err
	}
	d.noteRefused(p, "call "+method, routing.ClaimAct, by, refuseNotOwner, 1)
	return err
}

// taskOwner is the owner of live task t as the master records it: the
// person who spawned it outside any job, or its job's owner.
func (d *Daemon) taskOwner(t task.TID) (owner, bool) {
	if o, ok := d.owners.task(t); ok {
		return o, true
	}
	if job, known := d.owners.jobOf(t); known && job != 0 {
		return d.owners.job(job)
	}
	return owner{}, false
}

// checkOwnerless is checkActing for a task by whose owner the master does
// not know: it may act on target unless target's owner is on record and
// by is not one of the tasks of a start of target's job on its host
// under way (unknownMaySpeak's window).
func (d *Daemon) checkOwnerless(p *peer, method string, by, target task.TID) error {
	if _, owned := d.taskOwner(target); !owned {
		return nil
	}
	job, _ := d.owners.jobOf(target)
	if p == nil || (job != 0 && d.reg.startedAs(p.info.ID, job, by)) {
		return nil
	}
	err := fmt.Errorf("%s of %v by %v, a task of no owner on record: %w", method, target, by, ErrForbidden)
	if _, known := d.owners.jobOf(by); known || d.cfg.Recover {
		d.noteRefused(p, "call "+method, routing.ClaimAct, by, refuseNotOwner, 1)
		return err
	}
	// A task the master never started (a recovering master knows only
	// what the hosts brought back): its host made it up.
	if ferr := d.forged(p, "call "+method, routing.ClaimAct, by, routing.RefuseElsewhere, 1); ferr != nil {
		p.close(ferr)
	}
	return err
}
