package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/dpvm/dpvm/ckpt"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/task"
)

// groups is the group server's shell. The master node decides
// (routing/master: instance numbers, joins, leaves and rejoins, the
// groups a task that ends or is lost leaves, barrier counts, arrivals,
// withdrawals and releases), stepped under the master node's lock;
// groups performs: it answers the calls with the node's answers and
// wakes the waiters a release names. Its one record, waits (the tasks
// waiting in a barrier, each woken through its channel here or by a
// message to its host), is under the master node's lock too, so that a
// waiter is registered in the same critical section as its arrival and
// no release can pass it by.
type groups struct {
	mn    *masterNode
	waits map[task.TID]*barrierWait // under mn.mu
}

// barrierWait is a task waiting in a barrier: on this host (done, closed
// when the barrier releases it) or on another (host, told with one
// message per host).
type barrierWait struct {
	done chan struct{}
	host task.HostID
}

// groupLimits bound the group server (Config.MaxGroups, MaxGroupName,
// MaxGroupMembers).
type groupLimits struct{ groups, name, members int }

// newGroups is a group server bounded by lim, on a master node of its own
// (the daemon's is newMasterNode's).
func newGroups(lim groupLimits) *groups { return newMasterNode(lim.config()).groups }

// config is the master node's configuration for lim.
func (lim groupLimits) config() mnode.Config {
	return mnode.Config{MaxGroups: lim.groups, MaxGroupName: lim.name, MaxGroupMembers: lim.members}
}

// answer steps the node with e under its lock and returns its answer
// (FxAnswer).
func (g *groups) answer(e mnode.Event) (int, error) {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	for _, x := range g.mn.stepLocked(e) {
		if x.Kind == mnode.FxAnswer {
			return x.Count, x.Err
		}
	}
	return -1, fmt.Errorf("group server: no answer to %v", e)
}

// join makes tid a member of group name at the lowest free instance,
// which it returns.
func (g *groups) join(name string, tid task.TID) (int, error) {
	return g.answer(mnode.Event{Kind: mnode.EvJoin, Group: name, TID: tid})
}

// memberships lists the groups tid belongs to, with its instance in each,
// by group name.
func (g *groups) memberships(tid task.TID) []ckpt.Membership {
	g.mn.mu.Lock()
	ms := g.mn.node.Memberships(tid)
	g.mn.mu.Unlock()
	var out []ckpt.Membership
	for _, m := range ms {
		out = append(out, ckpt.Membership{Group: m.Group, Inst: m.Inst})
	}
	return out
}

// rejoin makes tid instance inst of the group again (a task restored from
// a job checkpoint), failing if another task holds that instance; an
// instance tid holds besides is freed.
func (g *groups) rejoin(name string, tid task.TID, inst int) error {
	_, err := g.answer(mnode.Event{Kind: mnode.EvRejoin, Group: name, TID: tid, Count: inst})
	return err
}

func (g *groups) leave(name string, tid task.TID) error {
	_, err := g.answer(mnode.Event{Kind: mnode.EvLeave, Group: name, TID: tid})
	return err
}

// leaveAll removes tid from every group (when it exits, or is lost with
// its host): the node takes back its arrival at any barrier, and the
// shell forgets its wait (a task that has ended is released by nobody).
func (g *groups) leaveAll(tid task.TID) {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	g.mn.stepLocked(mnode.Event{Kind: mnode.EvExited, TID: tid})
	delete(g.waits, tid)
}

func (g *groups) members(name string) ([]task.TID, error) {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	return g.mn.node.Members(name)
}

// arrivals is how many members have arrived at group name's open barrier.
func (g *groups) arrivals(name string) int {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	return g.mn.node.Arrived(name)
}

// arrive records the arrival of tid, waiting on another host (host), at
// the group's barrier of count (<= 0: all current members). When the
// arrival completes the barrier, it reports so, with the waiters on other
// hosts to be told (the caller sends the releases: releaseBarrier), tid
// among them: the local ones are woken here.
func (g *groups) arrive(name string, tid task.TID, host task.HostID, count int) (map[task.HostID][]task.TID, bool, error) {
	remote, done, _, err := g.enter(name, tid, host, count)
	return remote, done, err
}

// enter is arrive, for a task of this host too (host 0): its wait is
// returned, to be awaited, unless the arrival completed the barrier.
func (g *groups) enter(name string, tid task.TID, host task.HostID, count int) (remote map[task.HostID][]task.TID, done bool, w *barrierWait, err error) {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	for _, x := range g.mn.stepLocked(mnode.Event{Kind: mnode.EvBarrier, Group: name, TID: tid, Count: count}) {
		switch x.Kind {
		case mnode.FxAnswer:
			return nil, false, nil, x.Err
		case mnode.FxRelease:
			remote = g.releaseLocked(x.TIDs)
			if host != 0 {
				if remote == nil {
					remote = map[task.HostID][]task.TID{}
				}
				remote[host] = append(remote[host], tid)
			}
			return remote, true, nil, nil
		}
	}
	w = &barrierWait{host: host}
	if host == 0 {
		w.done = make(chan struct{})
	}
	g.waits[tid] = w
	return nil, false, w, nil
}

// releaseLocked wakes the waiters a release names that wait here, and
// returns the others by host (mn.mu held).
func (g *groups) releaseLocked(tids []task.TID) map[task.HostID][]task.TID {
	var remote map[task.HostID][]task.TID
	for _, tid := range tids {
		w := g.waits[tid]
		if w == nil {
			continue
		}
		delete(g.waits, tid)
		if w.host == 0 {
			close(w.done)
			continue
		}
		if remote == nil {
			remote = map[task.HostID][]task.TID{}
		}
		remote[w.host] = append(remote[w.host], tid)
	}
	return remote
}

// withdraw takes back a remote member's arrival (its wait was cancelled,
// or it goes to a safe point) and reports whether it did: false when the
// member is in no barrier of the group now (the barrier it arrived at has
// completed, and its release has been sent).
func (g *groups) withdraw(name string, tid task.TID) bool {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	for _, x := range g.mn.stepLocked(mnode.Event{Kind: mnode.EvWithdraw, Group: name, TID: tid}) {
		if x.Kind == mnode.FxAnswer && x.Err == nil {
			delete(g.waits, tid)
			return true
		}
	}
	return false
}

// wait blocks tid in the group's barrier until count members have arrived.
// count <= 0 means all current members. release is called with the
// waiters on other hosts when this arrival completes the barrier. A
// signal on kick (nil: none) withdraws the arrival and returns
// errInterrupted, unless the barrier completed first (then it returns
// nil: tid passed).
func (g *groups) wait(ctx context.Context, dead, kick <-chan struct{}, name string, tid task.TID, count int, release func(map[task.HostID][]task.TID)) error {
	remote, done, w, err := g.enter(name, tid, 0, count)
	if err != nil {
		return err
	}
	if done {
		if release != nil {
			release(remote)
		}
		return nil
	}
	return g.await(ctx, dead, kick, name, w, tid)
}

// await waits for a barrier tid has arrived at (see wait for kick).
func (g *groups) await(ctx context.Context, dead, kick <-chan struct{}, name string, w *barrierWait, tid task.TID) error {
	var err error
	select {
	case <-w.done:
		return nil
	case <-kick:
		err = errInterrupted
	case <-ctx.Done():
		err = ctx.Err()
	case <-dead:
		err = task.ErrKilled
	}
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	select {
	case <-w.done: // released while we gave up: count it as passed
		return nil
	default:
	}
	// Not released: the arrival is taken back (if a leave has not taken
	// it already).
	g.mn.stepLocked(mnode.Event{Kind: mnode.EvWithdraw, Group: name, TID: tid})
	if g.waits[tid] == w {
		delete(g.waits, tid)
	}
	return err
}

// all lists every task that is a member of some group.
func (g *groups) all() []task.TID {
	g.mn.mu.Lock()
	defer g.mn.mu.Unlock()
	return g.mn.node.GroupTasks()
}

// releaseBarrier tells the hosts of a completed barrier's remote members to
// let them go: one message per host (master).
func (d *Daemon) releaseBarrier(remote map[task.HostID][]task.TID) {
	for h, tids := range remote {
		if len(tids) > 0 {
			d.sendRelease(h, "", tids, nil)
		}
	}
}

func (d *Daemon) sendRelease(h task.HostID, group string, tids []task.TID, failed error) {
	e := &event{Kind: evBarrierRelease, Group: group, TIDs: tids}
	if failed != nil {
		e.Reason, e.Code = failed.Error(), codeOf(failed)
	}
	if err := d.sendEvent(d.ctx, h, e); err != nil {
		d.log.Warn("barrier release", "peer", h, "error", err)
	}
}

// remoteBarrier waits in a barrier of the master's group server for a task
// of this host: its arrival goes to the master as one message, and the
// master releases all of this host's waiting members with one message.
// A signal on kick (nil: none) withdraws the arrival, waiting for the
// master's word, and returns errInterrupted, unless the barrier completed
// first (then it returns nil: the task passed).
func (d *Daemon) remoteBarrier(ctx context.Context, h *hosted, group string, count int, kick <-chan struct{}) error {
	a := arrival{group: group, count: count, tid: h.tid}
	ch := d.arrivals.waitIn(a)
	d.arrive(a)
	var err error
	select {
	case err = <-ch:
		return err
	case <-kick:
		return d.withdrawArrival(ctx, h, group, ch)
	case <-ctx.Done():
		err = ctx.Err()
	case <-h.dead():
		err = task.ErrKilled
	case <-d.ctx.Done():
		err = task.ErrHalted
	}
	d.arrivals.forget(h.tid)
	if !d.unarrive(h.tid) {
		_ = d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrierCancel, Group: group, TIDs: []task.TID{h.tid}})
	}
	select {
	case rerr := <-ch: // released while giving up: it passed
		return rerr
	default:
	}
	return err
}

// withdrawArrival takes back a waiting task's arrival so that it can go to
// a safe point: errInterrupted when it did, the barrier's outcome (nil:
// passed) when the barrier completed first. An arrival not yet sent is
// taken from the queue; one sent is withdrawn at the master, which answers
// errBarrierWithdrawn on ch when it withdrew it and has otherwise already
// sent the release (events on a connection keep their order, so the
// release is then ahead of nothing the task waits for).
func (d *Daemon) withdrawArrival(ctx context.Context, h *hosted, group string, ch chan error) error {
	if d.unarrive(h.tid) {
		d.arrivals.forget(h.tid)
		select {
		case rerr := <-ch: // its send failed meanwhile
			return rerr
		default:
		}
		return errInterrupted
	}
	err := d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrierCancel, Group: group, TIDs: []task.TID{h.tid}})
	if err == nil {
		select {
		case err = <-ch:
			if errors.Is(err, errBarrierWithdrawn) {
				return errInterrupted
			}
			return err
		case <-ctx.Done():
			err = ctx.Err()
		case <-h.dead():
			err = task.ErrKilled
		case <-d.ctx.Done():
			err = task.ErrHalted
		}
	}
	d.arrivals.forget(h.tid)
	select {
	case rerr := <-ch:
		if !errors.Is(rerr, errBarrierWithdrawn) {
			return rerr
		}
	default:
	}
	return fmt.Errorf("withdraw from barrier %q: %w", group, err)
}

// arrive sends an arrival to the master. Arrivals that come while one is
// being sent wait for it and then go together, one event per barrier, so
// a host's members arriving at once cost one message, not one each: the
// first arriving task sends for everyone until nobody is left waiting.
func (d *Daemon) arrive(a arrival) {
	if !d.arrivals.enqueue(a) {
		return
	}
	// Let the members released with this one arrive too.
	runtime.Gosched()
	for {
		batch, flight := d.arrivals.nextBatch()
		if batch == nil {
			return
		}
		for len(batch) > 0 {
			g, c := batch[0].group, batch[0].count
			var tids []task.TID
			rest := batch[:0]
			for _, a := range batch {
				if a.group == g && a.count == c {
					tids = append(tids, a.tid)
				} else {
					rest = append(rest, a)
				}
			}
			batch = rest
			err := d.sendEvent(d.ctx, MasterID, &event{Kind: evBarrier, Group: g, TIDs: tids, Count: c})
			if err != nil {
				d.barrierReleased(tids, err.Error(), codeOf(err))
			}
		}
		close(flight)
	}
}

// unarrive takes back an arrival that has not been sent yet and reports
// whether it did. Otherwise the arrival has been sent, or is in the batch
// being sent, and the withdrawal must follow it to the master (it will: it
// waits until that whole batch has been sent).
func (d *Daemon) unarrive(tid task.TID) bool {
	taken, flight := d.arrivals.unqueue(tid)
	if taken {
		return true
	}
	if flight != nil {
		select {
		case <-flight:
		case <-d.ctx.Done():
		}
	}
	return false
}

// barrierReleased lets this host's members go.
func (d *Daemon) barrierReleased(tids []task.TID, why, code string) {
	var err error
	if why != "" {
		err = &remoteError{msg: why, sentinel: errorCodes[code]}
	}
	d.arrivals.release(tids, err)
}
