package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/task"
)

// hosted implements task.Endpoint: the calls a task's Ctx makes.
var (
	_ task.Endpoint     = (*hosted)(nil)
	_ task.FuncReceiver = (*hosted)(nil)
)

func (h *hosted) Self() task.TID                                   { return h.tid }
func (h *hosted) Parent() task.TID                                 { return h.parent }
func (h *hosted) Siblings() []task.TID                             { return h.siblings() }
func (h *hosted) HostName() string                                 { return h.d.cfg.Name }
func (h *hosted) Context() context.Context                         { return h.ctx }
func (h *hosted) Output() io.Writer                                { return jobWriter{h.d, h.job, h.tid} }
func (h *hosted) Logger() *slog.Logger                             { return h.d.taskLog(h) }
func (h *hosted) Exit(status int)                                  { h.exitStatus, h.exitCalled = status, true }
func (h *hosted) alive() error                                     { return h.ctxErr(h.ctx) }
func (h *hosted) dead() <-chan struct{}                            { return h.ctx.Done() }
func (h *hosted) Probe(from task.TID, tag int) (task.Status, bool) { return h.mb.probe(from, tag) }

// ctxErr returns ErrKilled once the task is dead, else ctx's error.
func (h *hosted) ctxErr(ctx context.Context) error {
	if h.ctx.Err() != nil {
		return task.ErrKilled
	}
	if ctx != nil {
		return ctx.Err()
	}
	return nil
}

func (h *hosted) Send(ctx context.Context, to task.TID, tag int, p task.Payload) error {
	return h.sendFrom(ctx, to, tag, p, false)
}

// SendInPlace is Send for a payload whose bytes are the sending task's
// memory, given up to the receiver (task.InPlaceSender): a receiver hosted
// here gets the bytes themselves, one elsewhere a copy.
func (h *hosted) SendInPlace(ctx context.Context, to task.TID, tag int, p task.Payload) error {
	return h.sendFrom(ctx, to, tag, p, true)
}

// sendFrom sends p from the task to to, waiting for room; lent says p's
// bytes are the task's memory (see Daemon.sendMsg).
func (h *hosted) sendFrom(ctx context.Context, to task.TID, tag int, p task.Payload, lent bool) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	if h.d.cfg.Emulate {
		h.charge()
	}
	if err := h.d.sendMsg(ctx, h, h.tid, to, tag, p, waitRoom, nil, lent); err != nil {
		if h.ctx.Err() != nil {
			return task.ErrKilled
		}
		return err
	}
	return nil
}

func (h *hosted) Mcast(ctx context.Context, to []task.TID, tag int, p task.Payload) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	if h.d.cfg.Emulate {
		h.charge()
	}
	var errs []error
	for i, t := range to {
		body := p
		if i < len(to)-1 && p.Enc == task.EncBytes {
			// Receivers of a []byte own the bytes they get: copy for all
			// but the last, which gets the original once no copy is left
			// to make from it.
			body.Data = bytes.Clone(p.Data)
		}
		if err := h.d.send(ctx, h, h.tid, t, tag, body, waitRoom, nil); err != nil {
			if h.ctx.Err() != nil {
				return task.ErrKilled
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SendSafe is Send to one task that is a safe point while it waits for
// room in a receiver's mailbox on this daemon (task.SafeSender): it
// returns sent == false, having sent nothing, when a move or checkpoint of
// the sender is pending, so that the task goes to its safe point.
func (h *hosted) SendSafe(ctx context.Context, to task.TID, tag int, p task.Payload) (bool, error) {
	if err := h.ctxErr(ctx); err != nil {
		return false, err
	}
	if h.sizeWanted.Load() {
		h.measure()
	}
	if h.stopAsked() {
		return false, nil
	}
	if h.d.cfg.Emulate {
		h.charge()
	}
	h.safeWaitBegin()
	err := h.d.send(ctx, h, h.tid, to, tag, p, waitRoom, h.moveKick)
	h.safeWaitEnd()
	switch {
	case errors.Is(err, errInterrupted):
		return false, nil
	case err != nil && h.ctx.Err() != nil:
		return false, task.ErrKilled
	}
	return err == nil, err
}

func (h *hosted) Recv(ctx context.Context, from task.TID, tag int, wait bool) (task.Message, bool, error) {
	return h.RecvFunc(ctx, from, tag, nil, wait)
}

// RecvFunc is Recv taking only a message match accepts as well
// (task.FuncReceiver).
func (h *hosted) RecvFunc(ctx context.Context, from task.TID, tag int, match func(task.Status) bool, wait bool) (task.Message, bool, error) {
	if err := h.ctxErr(ctx); err != nil {
		return task.Message{}, false, err
	}
	if waited := h.waitStarted(); waited != nil {
		defer waited()
	}
	e, ok, err := h.mb.getOr(ctx, h.dead(), nil, from, tag, match, wait)
	if err != nil || !ok {
		if err != nil && h.ctx.Err() != nil {
			err = task.ErrKilled
		}
		return task.Message{}, false, err
	}
	if h.hasDeferred() {
		h.d.releaseAcks(h)
	}
	return task.Message{From: e.from, Tag: e.tag, Payload: e.body}, true, nil
}

func (h *hosted) RecvSafe(ctx context.Context, from task.TID, tag int) (task.Message, bool, error) {
	return h.RecvFuncSafe(ctx, from, tag, nil)
}

// RecvFuncSafe is RecvSafe taking only a message match accepts as well
// (task.FuncReceiver).
func (h *hosted) RecvFuncSafe(ctx context.Context, from task.TID, tag int, match func(task.Status) bool) (task.Message, bool, error) {
	if err := h.ctxErr(ctx); err != nil {
		return task.Message{}, false, err
	}
	if h.sizeWanted.Load() {
		h.measure()
	}
	if h.stopAsked() {
		return task.Message{}, false, nil
	}
	if waited := h.waitStarted(); waited != nil {
		defer waited()
	}
	h.safeWaitBegin()
	e, ok, err := h.mb.getOr(ctx, h.dead(), h.moveKick, from, tag, match, true)
	h.safeWaitEnd()
	if err != nil || !ok {
		if err != nil && h.ctx.Err() != nil {
			err = task.ErrKilled
		}
		return task.Message{}, false, err
	}
	if h.hasDeferred() {
		h.d.releaseAcks(h)
	}
	return task.Message{From: e.from, Tag: e.tag, Payload: e.body}, true, nil
}

func (h *hosted) Hosts(ctx context.Context) ([]task.Host, error) {
	if err := h.ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []task.Host
	for _, x := range h.d.Hosts() {
		out = append(out, task.Host{ID: x.ID, Name: x.Name, Cores: x.Cores, Speed: x.Speed})
	}
	return out, nil
}

func (h *hosted) Spawn(ctx context.Context, req task.SpawnRequest) ([]task.TID, error) {
	if err := h.ctxErr(ctx); err != nil {
		return nil, err
	}
	return h.d.spawn(ctx, h.tid, h.job, req)
}

// Kill asks the master to kill tid as an act of this task, which the
// master judges: this daemon must run the task, and the task's owner own
// tid (checkActing). A daemon without a network (a machine of one) kills
// at once.
func (h *hosted) Kill(ctx context.Context, tid task.TID) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	if h.d.nw == nil {
		return h.d.KillTask(ctx, tid)
	}
	return h.d.callMaster(ctx, mKill, tidArgs{TID: tid, By: h.tid}, nil)
}

func (h *hosted) Notify(ctx context.Context, kind task.NotifyKind, tag int, tids []task.TID) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	d := h.d
	if err := d.checkNotify(len(tids)); err != nil {
		return err
	}
	w := watcher{who: h.tid, tag: tag}
	switch kind {
	case task.TaskExit:
		a := notifyArgs{Kind: kind, Watcher: h.tid, Tag: tag, TIDs: tids}
		if d.isMaster() {
			if d.nw == nil {
				return d.watchLocal(a)
			}
			return d.registerExitWatch(ctx, a)
		}
		return d.callMaster(ctx, mNotify, a, nil)
	case task.HostDelete:
		var ws []hostWatcher
		if len(tids) == 0 {
			ws = append(ws, hostWatcher{watcher: w, kind: kind})
		}
		for _, t := range tids {
			ws = append(ws, hostWatcher{watcher: w, kind: kind, host: d.routeHost(t)})
		}
		return d.addHostWatchers(ws...)
	case task.HostAdd:
		return d.addHostWatchers(hostWatcher{watcher: w, kind: kind})
	default:
		return fmt.Errorf("unknown notify kind %v", kind)
	}
}

// groupName is the group server's name for a group a task names: its job's
// own group, unless the name asks for the VM-wide one (task.VMWide). So two
// runs of one program at once never share a group.
//
// The task's last name and its translation are kept: a task that syncs
// in one group over and over (a barrier per iteration) makes no garbage.
func (h *hosted) groupName(group string) string {
	if g := h.lastGroup.Load(); g != nil && g.group == group {
		return g.name
	}
	name := jobGroup(h.job, group)
	h.lastGroup.Store(&groupNames{group: group, name: name})
	return name
}

// groupNames is a group's name as a task gave it and the group server's.
type groupNames struct{ group, name string }

// jobGroup is the group server's name for group as named by a task of job.
func jobGroup(job uint64, group string) string {
	if strings.HasPrefix(group, task.VMWide) {
		return group
	}
	return "j" + strconv.FormatUint(job, 10) + ":" + group
}

func (h *hosted) Join(ctx context.Context, group string) (int, error) {
	if err := h.ctxErr(ctx); err != nil {
		return -1, err
	}
	group = h.groupName(group)
	if h.d.isMaster() {
		return h.d.groups.join(group, h.tid)
	}
	var rep intReply
	err := h.d.callMaster(ctx, mJoin, groupArgs{Group: group, TID: h.tid}, &rep)
	if err != nil {
		return -1, err
	}
	h.d.ht.remember(h, group, rep.N)
	return rep.N, nil
}

func (h *hosted) Leave(ctx context.Context, group string) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	group = h.groupName(group)
	if h.d.isMaster() {
		return h.d.groups.leave(group, h.tid)
	}
	err := h.d.callMaster(ctx, mLeave, groupArgs{Group: group, TID: h.tid}, nil)
	if err == nil {
		h.d.ht.remember(h, group, -1)
	}
	return err
}

func (h *hosted) Members(ctx context.Context, group string) ([]task.TID, error) {
	if err := h.ctxErr(ctx); err != nil {
		return nil, err
	}
	group = h.groupName(group)
	if h.d.isMaster() {
		return h.d.groups.members(group)
	}
	var rep tidsReply
	err := h.d.callMaster(ctx, mMembers, groupArgs{Group: group, TID: h.tid}, &rep)
	return rep.TIDs, err
}

func (h *hosted) Barrier(ctx context.Context, group string, count int) error {
	return h.barrier(ctx, group, count, nil)
}

// BarrierSafe is Barrier that is a safe point while it waits
// (task.SafeBarrierer): when a move or checkpoint of the task is pending it
// withdraws the task's arrival and returns passed == false, unless the
// barrier completed first.
func (h *hosted) BarrierSafe(ctx context.Context, group string, count int) (bool, error) {
	if err := h.ctxErr(ctx); err != nil {
		return false, err
	}
	if h.stopAsked() {
		return false, nil
	}
	h.safeWaitBegin()
	err := h.barrier(ctx, group, count, h.moveKick)
	h.safeWaitEnd()
	if errors.Is(err, errInterrupted) {
		return false, nil
	}
	return err == nil, err
}

// barrier waits in the group's barrier; a signal on kick (nil: none) takes
// the task out of it for a safe point (errInterrupted).
func (h *hosted) barrier(ctx context.Context, group string, count int, kick <-chan struct{}) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	group = h.groupName(group)
	if h.d.cfg.Emulate {
		h.charge()
		defer h.waitStarted()()
	}
	var err error
	if h.d.isMaster() {
		err = h.d.groups.wait(ctx, h.dead(), kick, group, h.tid, count, h.d.releaseBarrier)
	} else {
		err = h.d.remoteBarrier(ctx, h, group, count, kick)
	}
	if err != nil && h.ctx.Err() != nil {
		err = task.ErrKilled
	}
	return err
}

// SetResult records the task's result (task.ResultSetter).
func (h *hosted) SetResult(p task.Payload) {
	h.d.ht.mu.Lock()
	h.result = p
	h.d.ht.mu.Unlock()
}

// sinceSafePoint is how long the task has gone without a safe point at now:
// 0 while it waits in RecvSafe.
func (h *hosted) sinceSafePoint(now time.Time) time.Duration {
	if h.safeWait.Load() {
		return 0
	}
	at := h.started
	if ns := h.safeAt.Load(); ns != 0 {
		at = time.Unix(0, ns)
	}
	return now.Sub(at)
}

// warnNoSafePoint logs that the task kept a move or checkpoint waiting past
// its timeout, and how long it has gone without a safe point: once, until
// the task's next safe point (a task late for every round of a periodic
// checkpoint is named once, not every period).
func (h *hosted) warnNoSafePoint(what string, timeout time.Duration) {
	if h.warned.Swap(true) {
		return
	}
	h.d.log.Warn("task reached no safe point in time: it cannot be moved or checkpointed until it calls SafePoint or waits in RecvSafe or a collective",
		"tid", h.tid, "type", h.typ, "waiting", what, "timeout", timeout, "since_safe_point", h.sinceSafePoint(time.Now()).Round(time.Millisecond))
}

// SafePoint is where a pending move is carried out: the task is suspended
// and its state captured (the goroutine then ends). A killed task learns of
// it here.
func (h *hosted) SafePoint(task.Task) error {
	if err := h.alive(); err != nil {
		return err
	}
	h.safeSeen(time.Now())
	// A job checkpoint's pause goes before a move: the pause step took the
	// task as one of the job's here (a move asked first makes the step
	// refuse), and a task that left now would be written by no host, its
	// pause taken for an exit: the set would complete without it. The
	// move is carried out at the next safe point, after the round. A
	// round that let the task go may be followed at once by the next
	// round's pause, asked while the task was held: it is taken here too,
	// before the move (a round's release clears h.pause before it closes
	// resume, so a pause seen again is a new round's).
	for p, last := h.pause.Load(), (*pauseReq)(nil); p != nil && p != last; p, last = h.pause.Load(), p {
		if err := h.pauseHere(p); err != nil {
			return err
		}
	}
	if req := h.moveReq.Load(); req != nil && h.moveReq.CompareAndSwap(req, nil) {
		return h.d.suspend(h, req)
	}
	if h.sizeWanted.Load() {
		h.measure()
	}
	if h.d.cfg.Emulate {
		return h.throttle()
	}
	return nil
}

// throttle charges the task at a safe point (see charge), then carries out
// a kill or a move requested meanwhile.
func (h *hosted) throttle() error {
	h.charge()
	if err := h.alive(); err != nil {
		return err
	}
	if req := h.moveReq.Load(); req != nil && h.moveReq.CompareAndSwap(req, nil) {
		return h.d.suspend(h, req)
	}
	return nil
}

// charge pauses the task so that it computes as much slower as the host's
// emulated figures say (emulation on one machine; Config.Emulate): for the
// time it computed since it was last charged, not counting its waits for
// messages (load.Meter). It is charged at its safe points and before every
// message it sends or barrier it enters. The pause ends early for a kill
// or a pending move (the rest is owed; a move leaves the host anyway).
func (h *hosted) charge() {
	th := load.Throttle{Factor: math.Float64frombits(h.d.slowdown.Load())}
	now := time.Now()
	sleep := h.meter.Due(now, th)
	if sleep <= 0 {
		return
	}
	t := time.NewTimer(min(sleep, time.Second))
	select {
	case <-t.C:
	case <-h.ctx.Done():
	case <-h.moveKick:
		h.moveKick <- struct{}{} // leave it for the next safe point
	}
	t.Stop()
	end := time.Now()
	h.meter.Slept(th, sleep, end.Sub(now), end)
}

// setSlowdown sets the factor emulated tasks run slower by (Config.Emulate)
// for the emulated load of the latest sample: the declared speed's
// Throttle times 1 + the load.
func (d *Daemon) setSlowdown(emulatedLoad float64) {
	d.slowdown.Store(math.Float64bits(load.EmulatedFactor(max(d.cfg.Throttle, 1), emulatedLoad)))
}

// waitStarted, when tasks are slowed (Config.Emulate), returns a func that
// records the time since as waiting, which is not charged; otherwise nil.
func (h *hosted) waitStarted() func() {
	if !h.d.cfg.Emulate {
		return nil
	}
	t0 := time.Now()
	return func() { h.meter.Waited(time.Since(t0)) }
}

// Migrate asks the master to move tid to host, as an act of this task
// (checked as Kill's). A task moving itself is suspended at its next safe
// point after the call returns.
func (h *hosted) Migrate(ctx context.Context, tid task.TID, host, via string) error {
	if err := h.ctxErr(ctx); err != nil {
		return err
	}
	v, err := ParseVia(via)
	if err != nil {
		return err
	}
	args := migrateArgs{TID: tid, To: host, Via: v, By: h.tid}
	if tid == h.tid {
		// The move needs this task at a safe point: ask, and let it go on
		// to one.
		h.d.goFunc(func() {
			var res MigrateResult
			if err := h.d.callMaster(h.d.ctx, mMigrate, args, &res); err != nil {
				h.d.log.Warn("self-migration", "tid", tid, "error", err)
			}
		})
		return nil
	}
	var res MigrateResult
	return h.d.callMaster(ctx, mMigrate, args, &res)
}

func (h *hosted) hasDeferred() bool { return h.hasDef.Load() }

// StopAsked implements task.StopAsker: whether a move or a job
// checkpoint's pause of the task waits for its next safe point.
func (h *hosted) StopAsked() bool { return h.stopAsked() }

// stopAsked reports whether a move or a job checkpoint's pause of the task
// is pending: a wait that is a safe point then returns at once, before it
// waits, so that the task goes to its safe point.
func (h *hosted) stopAsked() bool {
	return h.moveReq.Load() != nil || h.pause.Load() != nil
}

// safeWaitBegin marks the start of a wait that is a safe point (SendSafe,
// RecvFuncSafe, BarrierSafe): the task is at a safe point, and the time it
// waits does not count in the interval between its safe points;
// safeWaitEnd marks the wait's end.
func (h *hosted) safeWaitBegin() {
	h.safeSeen(time.Now())
	h.safeWait.Store(true)
}

// safeWaitEnd marks the end of a wait that safeWaitBegin began.
func (h *hosted) safeWaitEnd() {
	h.safeAt.Store(time.Now().UnixNano())
	h.safeWait.Store(false)
}
