package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/task"
)

// Placer chooses hosts for new tasks spawned "anywhere". The scheduler
// installs its own; the default is round-robin over the hosts, PVM's
// policy.
type Placer interface {
	// Place returns one host per task for n new tasks.
	Place(hosts []HostInfo, n int) ([]task.HostID, error)
}

// RoundRobin places tasks on the hosts in turn, continuing where the
// previous spawn stopped.
type RoundRobin struct{ next int }

// Place implements Placer.
func (r *RoundRobin) Place(hosts []HostInfo, n int) ([]task.HostID, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("place %d tasks: %w", n, task.ErrNoSuchHost)
	}
	out := make([]task.HostID, n)
	for i := range out {
		out[i] = hosts[r.next%len(hosts)].ID
		r.next++
	}
	return out, nil
}

// admit registers a joining daemon and assigns its host ID (master only).
func (d *Daemon) admit(h *hello, remote string) (HostInfo, error) {
	if why := h.Info.Build.differs(ThisBuild()); why != "" {
		return HostInfo{}, fmt.Errorf("the joining daemon runs another build than the master: %s", why)
	}
	d.learnOwnAddr(h)
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	name := h.Name
	if name == "" {
		name = n.nextHost.String()
	}
	var stale task.HostID
	for _, x := range n.hosts {
		if x.Name == name {
			if _, live := n.peers[x.ID]; live || x.ID == MasterID {
				return HostInfo{}, fmt.Errorf("a host named %q is already in the virtual machine", name)
			}
			// Registered, but its connection is gone: the same host (a
			// host's name is its certificate's) that gave up waiting for
			// the answer, or restarted. The new registration replaces it.
			stale = x.ID
		}
	}
	if stale != 0 {
		n.mu.Unlock()
		d.removeHost(stale, "replaced by a new registration of the same host")
		n.mu.Lock()
		if _, again := n.hosts[stale]; again {
			return HostInfo{}, fmt.Errorf("a host named %q is already in the virtual machine", name)
		}
	}
	if h.Addr == "" {
		return HostInfo{}, errors.New("joining daemon gave no address")
	}
	info := h.Info
	info.ID = n.nextHost
	info.Name = name
	info.Addr = reachableAddr(h, remote)
	info.Master = false
	n.nextHost++ // host IDs are never reused
	n.hosts[info.ID] = &info
	n.joined[info.ID] = time.Now()
	n.watchHost(info.ID, time.Now())
	return info, nil
}

// helloLists is what a host hears when it joins or registers again: the
// registered hosts and the routing table. They are taken once its
// connection is attached, not when it is admitted: every host or route
// announced from then on reaches it by broadcast, after its hello, and
// everything announced before is in the lists. (Taken at admission, a
// host admitted between the two was in neither and stayed unknown to it,
// and its connections were refused as from an unknown host.)
func (d *Daemon) helloLists() ([]byte, []routing.Entry) {
	self := d.selfInfo()
	routes := d.rt.entries()
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.snapshot(self), routes
}

// removeHost deletes a host from the virtual machine (master), or forgets
// it (other daemons, on the master's broadcast): its connection is closed,
// messages for it dropped, and notifications fire.
func (d *Daemon) removeHost(id task.HostID, why string) {
	if d.cfg.Master {
		d.movesHostLost(id)
		d.schedDirty()
	}
	n := d.nw
	n.mu.Lock()
	hi := n.hosts[id]
	delete(n.hosts, id)
	delete(n.joined, id)
	delete(n.listSent, id)
	if d.cfg.Master {
		// Numbered with the deletion itself: a registration again after
		// it is announced after it.
		n.queueDelta(n.list.Remove(id, why))
	}
	n.forgetHost(hi, why)
	p := n.peers[id]
	delete(n.peers, id)
	retiring := n.retiringTo(id)
	n.mu.Unlock()
	for _, q := range retiring {
		q.close(fmt.Errorf("host deleted: %s", why))
	}
	if hi == nil {
		return
	}
	if p != nil {
		p.close(fmt.Errorf("host deleted: %s", why))
	}
	var rolling []chan struct{}
	if d.cfg.Master {
		// The jobs that lost tasks first: dropping the messages for the
		// lost tasks tells their senders "no such task", and a job's root
		// may end on that; a job that cannot roll back must be marked
		// lost before, so that its end is its loss.
		rolling = d.rollBackJobsOf(id)
	}
	dropped := d.rt.dropHost(id)
	if len(dropped) > 0 {
		d.log.Log(d.ctx, d.lossLevel(), "messages for tasks lost with their host dropped", "lost_host", id, "tasks", dropped)
	}
	d.routesHostLost(id)
	lvl := slog.LevelWarn
	if why == reasonLeft {
		lvl = slog.LevelInfo
	}
	d.log.Log(d.ctx, lvl, "host deleted", "peer", id, "peer_name", hi.Name, "reason", why)
	if d.cfg.Master {
		d.flushHosts()
		d.lostFromGroups(id)
		// The exits of tasks lost with the host are told once the jobs
		// that lost them have rolled back: a task restored lives on, and
		// its loss is no failure of its job.
		d.goFunc(func() {
			for _, ch := range rolling {
				select {
				case <-ch:
				case <-d.ctx.Done():
					return
				}
			}
			d.taskLossNotices(id)
			d.routesLossFinal(id)
		})
	}
	d.hostNotice(task.HostDelete, *hi)
}

// taskLossNotices fires the exit notifications of tasks lost with host id
// (master): the master node tells the watchers of the watched tasks that
// the routing table still places there (a task its job restored lives
// on elsewhere).
func (d *Daemon) taskLossNotices(id task.HostID) {
	d.mn.mu.Lock()
	watched := d.mn.node.Watched()
	d.mn.mu.Unlock()
	lost := slices.DeleteFunc(watched, func(tid task.TID) bool { return d.routeHost(tid) != id })
	if len(lost) == 0 {
		return
	}
	d.performNotices(d.mn.step(mnode.Event{Kind: mnode.EvTasksLost, Host: id, TIDs: lost}))
}

// performNotices sends the exit notices among the master node's effects fx
// (no lock held): a task lost with its host, or none such.
func (d *Daemon) performNotices(fx []mnode.Effect) {
	for _, x := range fx {
		if x.Kind != mnode.FxNotify {
			continue
		}
		n := task.Notice{Kind: task.TaskExit, TID: x.TID, Status: -1}
		if x.Err != nil {
			n.Err = x.Err.Error()
		}
		d.notify(x.TID, watcher{who: x.To, tag: x.Tag}, n, false)
	}
}

// lostFromGroups removes the tasks lost with host id from their groups
// (master).
func (d *Daemon) lostFromGroups(id task.HostID) {
	for _, tid := range d.groups.all() {
		if d.routeHost(tid) == id {
			d.groups.leaveAll(tid)
		}
	}
}

// routeHost is where the routing table says tid lives.
func (d *Daemon) routeHost(tid task.TID) task.HostID {
	return d.rt.lookup(tid).Host
}

// hostNotice fires this daemon's HostAdd/HostDelete registrations for h.
func (d *Daemon) hostNotice(kind task.NotifyKind, h HostInfo) {
	d.ht.mu.Lock()
	var ws []watcher
	for _, w := range d.ht.hostW {
		if w.kind == kind && (w.host == 0 || w.host == h.ID) {
			ws = append(ws, w.watcher)
		}
	}
	d.ht.mu.Unlock()
	for _, w := range ws {
		d.notify(0, w, task.Notice{Kind: kind, Host: h.ID, Name: h.Name}, false)
	}
}

func (d *Daemon) isMaster() bool { return d.nw == nil || d.cfg.Master }

// handleEvent applies an event from p.
func (d *Daemon) handleEvent(p *peer, e *event) error {
	fromMaster := p.info.ID == MasterID && !d.cfg.Master
	switch e.Kind {
	case evHosts:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		ds, err := hostlist.DecodeDeltas(e.Deltas)
		if err != nil {
			return fmt.Errorf("%s event: %w", e.Kind, err)
		}
		return d.applyDeltas(ds)
	case evHostList:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		v, es, err := hostlist.DecodeSnapshot(e.HostList)
		if err != nil {
			return fmt.Errorf("%s event: %w", e.Kind, err)
		}
		d.resetHosts(v, es)
	case evHostsAsk:
		if !d.cfg.Master {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		d.sendHostList(p)
	case evHostDel:
		if !fromMaster || e.Host == nil {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		if e.Host.ID == d.cfg.HostID {
			d.stopAsync(fmt.Errorf("deleted from the virtual machine: %s", e.Reason))
			return nil
		}
		d.removeHost(e.Host.ID, e.Reason)
	case evRoute:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		d.applyRoutes(e.Routes)
	case evRevoked:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		rv, err := pki.NewRevoked(e.Serials)
		if err != nil {
			return fmt.Errorf("%s event: %w", e.Kind, err)
		}
		d.revoked.Store(rv)
		d.dropRevoked()
	case evHalt:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		d.stopAsync(fmt.Errorf("%w by the master: %s", task.ErrHalted, e.Reason))
	case evHostBack:
		if !fromMaster || e.Host == nil {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		d.routesHostBack(e.Host.ID, e.Epoch)
		return nil
	case evRejoined:
		if !d.cfg.Master {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		return d.rejoined(p.info.ID)
	case evExited:
		if !d.cfg.Master {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		if d.refuseClaim(p, "exited event", routing.ClaimExit, e.TID) != nil {
			return nil
		}
		d.taskGone(e.TID)
	case evOutput:
		if !d.cfg.Master {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		if d.outputClaim(p, e) != nil {
			return nil // refused (and counted); the connection is closed if it has sent too many
		}
		_, _ = d.jobOut(e.Job, e.Output)
	case evBarrier:
		if !d.cfg.Master || len(e.TIDs) == 0 {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		// Several of the host's members may arrive in one event.
		for _, tid := range e.TIDs {
			if d.refuseClaim(p, "barrier event", routing.ClaimAct, tid) != nil {
				continue
			}
			remote, done, err := d.groups.arrive(e.Group, tid, p.info.ID, e.Count)
			if err != nil {
				d.sendRelease(p.info.ID, e.Group, []task.TID{tid}, err)
			} else if done {
				d.releaseBarrier(remote)
			}
		}
	case evBarrierCancel:
		if !d.cfg.Master || len(e.TIDs) != 1 {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		if d.refuseClaim(p, "barrier-cancel event", routing.ClaimAct, e.TIDs[0]) != nil {
			return nil
		}
		if d.groups.withdraw(e.Group, e.TIDs[0]) {
			// The host waits for this word before its task leaves the
			// barrier for a safe point.
			d.sendRelease(p.info.ID, e.Group, e.TIDs, errBarrierWithdrawn)
		}
	case evBarrierRelease:
		if !fromMaster {
			return fmt.Errorf("%s event from %s", e.Kind, p.name())
		}
		d.barrierReleased(e.TIDs, e.Reason, e.Code)
	case evLoad:
		if !d.cfg.Master || e.Load == nil {
			return fmt.Errorf("%s event at a daemon that is not the master", e.Kind)
		}
		started := false
		d.nw.mu.Lock()
		if d.nw.mem != nil && d.nw.mem.pending[p.info.ID] {
			// A host registering again after its deletion stops every
			// task it had before it says so: a report it sent before
			// that is stale, naming jobs it no longer runs.
			d.nw.mu.Unlock()
			return nil
		}
		if h := d.nw.hosts[p.info.ID]; h != nil {
			l := e.Load
			started = l.Tasks > h.Tasks
			h.Load, h.Tasks, h.External, h.MemFreeMiB, h.Users = l.Load, l.Tasks, l.External, l.MemFreeMiB, l.Users
			h.Alpha, h.MaxUsers, h.Emulated, h.LoadSource = l.Alpha, l.MaxUsers, l.Emulated, l.LoadSource
		}
		d.nw.mu.Unlock()
		if started {
			d.schedDirtyHost(p.info.ID) // tasks started there since its last report
		}
		d.reg.jobsOn(p.info.ID, e.Jobs, true)
	default:
		return fmt.Errorf("unknown event %q", e.Kind)
	}
	return nil
}

// taskGone is the master's bookkeeping when a task ends anywhere.
func (d *Daemon) taskGone(tid task.TID) {
	last := d.rt.lookup(tid)
	d.owners.ended(tid)
	d.schedDirtyHost(d.routeHost(tid))
	d.groups.leaveAll(tid)
	d.mn.step(mnode.Event{Kind: mnode.EvUnwatch, TID: tid}) // told at its host
	d.ht.mu.Lock()
	d.ht.moveGone(tid) // the floor of an arrival cancelled here
	d.ht.mu.Unlock()
	d.rt.forgetRoute(tid)
	d.forgetClass(tid)
	d.tellEnded([]routing.Entry{{TID: tid, Route: last}})
}

// spawnAnywhere places and starts tasks (master), within the quotas of
// the job and of the person they are for (admitSpawn).
func (d *Daemon) spawnAnywhere(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
		return nil, err
	}
	done, err := d.admitSpawn(ctx, parent, job, req.Count)
	if err != nil {
		return nil, err
	}
	tids, err := d.placeAndStart(ctx, parent, job, req)
	done(tids)
	return tids, err
}

// placeAndStart places and starts admitted tasks (master).
func (d *Daemon) placeAndStart(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	defer d.placing()()
	if _, err := task.New(req.Type, nil); err != nil {
		return nil, err
	}
	var places []task.HostID
	if req.Host != "" {
		h, err := d.hostByName(req.Host)
		if err != nil {
			return nil, err
		}
		places = make([]task.HostID, req.Count)
		for i := range places {
			places[i] = h
		}
	} else {
		hosts := d.placeable()
		d.sched.placeMu.Lock()
		var err error
		places, err = d.cfg.Placer.Place(hosts, req.Count)
		d.sched.placeMu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	// Start the tasks host by host, keeping the spawn's order in the result.
	var hosts []task.HostID
	count := map[task.HostID]int{}
	for _, h := range places {
		if count[h] == 0 {
			hosts = append(hosts, h)
		}
		count[h]++
	}
	got := map[task.HostID][]task.TID{}
	var errs []error
	info := map[task.HostID]HostInfo{}
	for _, h := range d.Hosts() {
		info[h.ID] = h
	}
	for _, h := range hosts {
		r := req
		r.Count, r.Host = count[h], ""
		// Until the answer names them, the tasks may speak (output, a
		// spawn) for job as tasks of h that the master does not know,
		// with the numbers handed out for them (outputClaim); from the
		// answer on, the master knows them.
		rep, settle, err := d.startNumbered(ctx, h, spawnArgs{Parent: parent, Job: job, Req: r, Hold: len(hosts) > 1})
		if job != 0 && len(rep.TIDs) > 0 {
			d.owners.addJobTasks(job, rep.TIDs)
			// After the answer: a load report the host sent before it
			// started them has been applied by now, and will not
			// overwrite this.
			d.reg.jobsOn(h, []uint64{job}, false)
		}
		settle()
		got[h] = rep.TIDs
		d.startedOn(info[h], rep.TIDs)
		if js := d.reg.get(job); js != nil && job != 0 {
			js.placed(h, rep.TIDs)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("on %v: %w", h, err))
		}
	}
	var started []task.HostID
	for _, h := range hosts {
		if len(got[h]) > 0 {
			started = append(started, h)
		}
	}
	tids := make([]task.TID, 0, len(places))
	for _, h := range places {
		if len(got[h]) > 0 {
			tids = append(tids, got[h][0])
			got[h] = got[h][1:]
		}
	}
	if len(hosts) > 1 {
		d.releaseSpawn(started, tids)
	}
	return tids, errors.Join(errs...)
}

// spawn starts tasks for a local parent: on the master (or a standalone
// daemon) directly when asked to, within the quotas; otherwise through
// the master, which counts them against the quotas and places them.
func (d *Daemon) spawn(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	// Here when it names this host alone (resolveHost); otherwise the
	// master resolves it, and says why it cannot.
	here := false
	if req.Host != "" {
		if d.nw == nil {
			if _, err := resolveHost([]HostInfo{d.selfInfo()}, req.Host); err != nil {
				return nil, err
			}
			here = true
		} else if h, err := d.hostByName(req.Host); err == nil && h == d.cfg.HostID {
			here = true
		}
	}
	if d.nw == nil || (here && d.cfg.Master) {
		if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
			return nil, err
		}
		done, err := d.admitSpawn(ctx, parent, job, req.Count)
		if err != nil {
			return nil, err
		}
		tids, err := d.startLocal(ctx, parent, job, req)
		if job != 0 {
			d.owners.addJobTasks(job, tids)
		}
		done(tids)
		if js := d.reg.get(job); js != nil && job != 0 {
			js.placed(d.cfg.HostID, tids)
		}
		return tids, err
	}
	var rep tidsReply
	err := d.callMaster(ctx, mSpawn, spawnArgs{Parent: parent, Job: job, Req: req}, &rep)
	return rep.TIDs, err
}

// KillTask kills tid wherever it runs. On a host it kills only a task
// that runs here: kills are the master's to route (a host refuses
// another host's), and the master sends a kill again where its task
// went, should it have moved meanwhile.
func (d *Daemon) KillTask(ctx context.Context, tid task.TID) error {
	if !d.isMaster() {
		return d.Kill(tid)
	}
	// A kill follows its task: a move that begins after the moves were
	// settled can take the task from the host the kill goes to, which
	// then answers that it has no such task. The kill goes again, a few
	// times, to where the route points once that move is settled.
	const tries = 4
	for try := 1; ; try++ {
		d.settleMoves(ctx, func(t task.TID, _ uint64) bool { return t == tid })
		h := d.routeHost(tid)
		if h == d.cfg.HostID {
			return d.Kill(tid)
		}
		if d.nw == nil || !d.hostKnown(h) {
			return fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
		}
		err := d.callHost(ctx, h, mKill, tidArgs{TID: tid}, nil)
		if err == nil || !errors.Is(err, task.ErrNoSuchTask) || try == tries || ctx.Err() != nil {
			return err
		}
		d.settleMoves(ctx, func(t task.TID, _ uint64) bool { return t == tid })
		if d.routeHost(tid) == h {
			return err // it did not move: it has ended
		}
	}
}

// registerExitWatch records a TaskExit registration (master): for the loss
// of the task's host in the master node, and for its ordinary exit at its
// daemon. The node decides: a task on no host known here is told at once
// that there is no such task, a watch past Config.MaxWatchers is refused,
// and a watch recorded goes on to the task's host (watchAt).
func (d *Daemon) registerExitWatch(ctx context.Context, a notifyArgs) error {
	if err := d.checkNotify(len(a.TIDs)); err != nil {
		return err
	}
	var errs []error
	for _, t := range a.TIDs {
		h := d.routeHost(t)
		if !d.hostKnown(h) {
			h = 0 // nowhere
		}
		fx := d.mn.step(mnode.Event{Kind: mnode.EvWatch, TID: t, Who: a.Watcher, Tag: a.Tag, Host: h})
		if len(fx) > 0 {
			if x := fx[0]; x.Kind == mnode.FxRefuse {
				errs = append(errs, x.Err)
			}
			d.performNotices(fx)
			continue
		}
		if err := d.watchAt(ctx, t, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchAt registers a's watcher of t's exit at the host t runs on. A task
// caught in a move is on neither host's task list, and its watchers travel
// in its checkpoint only if they were there when it was taken: the host
// answers ErrMoving, and the registration waits for the move to end and
// goes to the host the task is on then (master).
func (d *Daemon) watchAt(ctx context.Context, t task.TID, a notifyArgs) error {
	one := notifyArgs{Kind: task.TaskExit, Watcher: a.Watcher, Tag: a.Tag, TIDs: []task.TID{t}}
	wait := time.Millisecond
	for {
		h := d.routeHost(t)
		err := d.callHost(ctx, h, mWatch, one, nil)
		if !errors.Is(err, ErrMoving) {
			return err
		}
		d.settleMoves(ctx, func(tid task.TID, _ uint64) bool { return tid == t })
		// The move may have ended at the master before the hosts heard:
		// try again shortly, then less and less often.
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("notify on %v: %w", t, ctx.Err())
		case <-d.ctx.Done():
			return task.ErrHalted
		}
		wait = min(2*wait, d.cfg.MoveStepTimeout)
	}
}

// watchLocal registers TaskExit watchers for tasks of this daemon; a task
// already gone is notified at once.
func (d *Daemon) watchLocal(a notifyArgs) error {
	if err := d.checkNotify(len(a.TIDs)); err != nil {
		return err
	}
	w := watcher{who: a.Watcher, tag: a.Tag}
	var errs []error
	for _, t := range a.TIDs {
		d.ht.mu.Lock()
		_, live := d.ht.tasks[t]
		full := live && len(d.ht.watch[t]) >= d.cfg.MaxWatchers
		if live && !full {
			d.ht.watch[t] = append(d.ht.watch[t], w)
		}
		old := d.ht.gone[t]
		moving := !live && (d.ht.moving[t] != nil || d.ht.incoming[t] != nil)
		d.ht.mu.Unlock()
		if moving {
			// Suspended here or arriving: not gone. The master asks
			// again where the task is once the move has ended.
			errs = append(errs, fmt.Errorf("notify on %v: %w", t, ErrMoving))
			continue
		}
		if full {
			errs = append(errs, fmt.Errorf("notify on %v: %d registrations watch it, at most %d: %w", t, d.cfg.MaxWatchers, d.cfg.MaxWatchers, ErrLimit))
			continue
		}
		if live {
			continue
		}
		n := task.Notice{Kind: task.TaskExit, TID: t, Status: -1, Err: "no such task"}
		if old != nil {
			d.ht.mu.Lock()
			n.Status, n.Err = old.status, old.err
			d.ht.mu.Unlock()
		}
		d.notify(t, w, n, false)
	}
	return errors.Join(errs...)
}

// AllTasks gathers the task lists of every host (master).
func (d *Daemon) AllTasks(ctx context.Context, all bool) ([]TaskInfo, error) {
	out := d.Tasks(all)
	if d.nw == nil {
		return out, nil
	}
	var errs []error
	for _, h := range d.Hosts() {
		if h.ID == d.cfg.HostID {
			continue
		}
		var rep psReply
		if err := d.callHost(ctx, h.ID, mPS, psArgs{All: all}, &rep); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
			continue
		}
		out = append(out, rep.Tasks...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out, errors.Join(errs...)
}

// DeleteHost removes a host from the virtual machine (master): the host's
// daemon is told to stop and everyone forgets it.
func (d *Daemon) DeleteHost(ctx context.Context, name string) error {
	id, err := d.hostByName(name)
	if err != nil {
		return err
	}
	if id == MasterID {
		return errors.New("the master cannot be deleted; halt the virtual machine instead")
	}
	const why = "deleted by an operator"
	d.nw.mu.Lock()
	hi := d.nw.hosts[id]
	p := d.nw.peers[id]
	d.nw.mu.Unlock()
	if hi != nil && p != nil {
		// Tell the host first; it stops and hangs up (or is cut off).
		if b, err := encodeMsg(&event{Kind: evHostDel, Host: hi, Reason: why}); err == nil {
			p.frame(routing.KindEvent, b)
		}
		p.drain(d.cfg.StopTimeout / 2)
	}
	d.removeHost(id, why)
	return nil
}

// HaltVM stops the whole virtual machine (master): every daemon is told to
// stop, then the master stops.
func (d *Daemon) HaltVM() {
	d.stopping(task.ErrHalted) // hosts hanging up from now on are no loss
	if d.nw != nil {
		d.broadcast(&event{Kind: evHalt, Reason: "halt requested"}, 0)
	}
	d.stop(task.ErrHalted)
}

// selfInfo is this host's information with its current load: its tasks
// now, the rest from the last sample.
func (d *Daemon) selfInfo() HostInfo {
	h := d.self
	if a := d.ownAddr.Load(); a != nil {
		h.Addr = *a
	}
	h.Tasks = d.ht.count()
	s := d.lastSample()
	h.Load = float64(h.Tasks) + s.External
	h.External = s.External
	h.MemFreeMiB = int64(s.MemFreeMiB)
	h.Users = s.Users
	h.Emulated, h.LoadSource = s.Emulated, s.Source
	h.Alpha, h.MaxUsers = d.cfg.Alpha, d.cfg.MaxUsers
	h.ID, h.Name = d.cfg.HostID, d.cfg.Name
	return h
}

// refreshSample takes a new load sample for selfInfo.
func (d *Daemon) refreshSample(now time.Time) {
	s := d.sample(now)
	d.sampled.Store(&s)
	d.setSlowdown(s.EmulatedLoad)
}

// lastSample is the last load sample taken (zero before the first).
func (d *Daemon) lastSample() load.Sample {
	if s := d.sampled.Load(); s != nil {
		return *s
	}
	return load.Sample{}
}

// jobOut writes output of job to its console (master).
func (d *Daemon) jobOut(job uint64, b []byte) (int, error) {
	w := d.reg.output(job)
	if w == nil {
		return d.out.Write(b)
	}
	return w.Write(b)
}

// runJob runs a program's root task for a client (master), or restarts a
// job from a checkpoint: a job whose output goes to the client, answered
// when the root task has exited. If the client goes away first, the root
// task is killed.
func (d *Daemon) runJob(ctx context.Context, client *peer, a runArgs) (TaskInfo, error) {
	if a.Attach != 0 {
		return d.attachJob(ctx, client, a.Attach)
	}
	var js *jobState
	if a.Restart != "" {
		var skipped []error
		var err error
		js, skipped, err = d.RestartJob(ctx, a.Restart, a.Opts, func(job uint64) io.Writer {
			return &clientOutput{p: client, job: job}
		})
		for _, e := range skipped {
			d.log.Warn("restart: checkpoint skipped", "error", e)
			fmt.Fprintf(&clientOutput{p: client}, "dpvm: restart: skipped %v\n", e)
		}
		if err != nil {
			return TaskInfo{}, err
		}
	} else {
		release, err := d.admitCallerJobs(ctx, 1)
		if err != nil {
			return TaskInfo{}, err
		}
		js = d.newRootJob(ctx, a.Req, a.Opts)
		release(1)
		d.reg.setOutput(js.id, &clientOutput{p: client, job: js.id})
		a.Req.Count = 1
		// The root runs on the master's host, but where the master hosts
		// no tasks: there it is placed as a spawn is (spawnAnywhere
		// admits it), so that the master's loss takes no task of the job
		// with it.
		var tids []task.TID
		if d.cfg.MasterNoTasks {
			tids, err = d.spawnAnywhere(ctx, 0, js.id, a.Req)
			if err == nil && len(tids) == 0 {
				err = fmt.Errorf("start the root of job %d: no task started", js.id)
			}
		} else {
			var done func([]task.TID)
			done, err = d.admitSpawn(ctx, 0, js.id, 1)
			if err != nil {
				d.endJob(js)
				return TaskInfo{}, err
			}
			tids, err = d.startLocal(ctx, 0, js.id, a.Req)
			d.owners.addJobTasks(js.id, tids)
			done(tids)
		}
		if err != nil {
			d.endJob(js)
			return TaskInfo{}, err
		}
		d.jobRunning(js, tids[0])
	}
	defer d.endJob(js)
	root := js.root
	d.log.Info("job started", "job", js.id, "root", root, "type", js.typ, "client", client.name())
	// The client learns the job's number: if its connection drops, it
	// connects again and follows the job (attachJob). So the job's wait
	// outlives this call's connection (wctx); a call its command
	// cancels (call.cancel, as an interrupted command sends) kills the
	// job at once.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	noteTo(client, JobNote{Job: js.id, Kind: NoteStarted})
	stop := context.AfterFunc(ctx, func() {
		select {
		case <-client.closed:
			return // the connection dropped: the follower below decides
		case <-wctx.Done():
			return // the job is over
		default:
		}
		kctx, kcancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
		n, err := d.KillJob(kctx, js.id)
		kcancel()
		d.log.Warn("job killed: its command cancelled it", "job", js.id, "tasks", n, "error", err)
	})
	defer stop()
	d.goFunc(func() {
		// The job follows its command: when the connection drops, the
		// command has as long as the master takes to delete a silent
		// host to come back and attach; then the job is killed.
		cur := client
		for {
			select {
			case p := <-js.attach:
				cur = p
				continue
			case <-cur.closed:
			case <-wctx.Done():
				return
			}
			t := time.NewTimer(d.Detection().MaxDead)
			select {
			case p := <-js.attach:
				t.Stop()
				cur = p
				continue
			case <-t.C:
				kctx, kcancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
				n, err := d.KillJob(kctx, js.id)
				kcancel()
				d.log.Warn("job killed: the command that ran it went away", "job", js.id, "tasks", n, "error", err)
			case <-wctx.Done():
				t.Stop()
			}
			return
		}
	})
	return d.waitJobEnd(wctx, js)
}

// attachJob follows the running job for a client that ran it and whose
// connection dropped (master): the job's output and notes come to client
// from now on, and the answer is the job's end, as runJob's.
func (d *Daemon) attachJob(ctx context.Context, client *peer, job uint64) (TaskInfo, error) {
	js, err := d.job(job)
	if err != nil {
		return TaskInfo{}, fmt.Errorf("attach: %w", err)
	}
	if d.reg.output(job) == nil {
		return TaskInfo{}, fmt.Errorf("attach to job %d: no command runs it: %w", job, ErrNoJob)
	}
	// The output comes here from now on (what the job printed while no
	// command was connected is lost); the goroutine that kills the job
	// when its command goes away watches this connection.
	d.reg.setOutput(job, &clientOutput{p: client, job: job})
	select {
	case js.attach <- client:
	default:
		return TaskInfo{}, fmt.Errorf("attach to job %d: another command is attaching", job)
	}
	d.log.Info("job attached", "job", job, "client", client.name())
	return d.waitJobEnd(ctx, js)
}

// clientOutput sends a job's output to the client that runs it.
type clientOutput struct {
	p   *peer
	job uint64
}

func (c *clientOutput) Write(b []byte) (int, error) {
	e, err := encodeMsg(&event{Kind: evOutput, Job: c.job, Output: b})
	if err != nil {
		return 0, err
	}
	c.p.frame(routing.KindEvent, e)
	return len(b), nil
}
