package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/routing"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Surviving the master (DESIGN §7). A host daemon that loses its master
// runs on: its tasks keep computing and exchanging messages with tasks on
// other hosts along the routes it knows (connections between hosts do not
// go through the master). What needs the master — spawning, groups,
// barriers, notify registration, migration — fails until a master is
// back. Meanwhile the host tries, every heartbeat, to register again with
// a master at the same address; a master started there with Recover (`dpvm
// daemon --master --recover`) takes each host back with its host ID, and
// rebuilds the registry, the routing table and the group server from what
// the hosts report: their tasks with their route epochs and group
// memberships, and their pending barrier arrivals. A migration the old
// master left half done is finished or undone from the two hosts' reports:
// if the destination runs the task, the origin commits; otherwise the
// destination drops it and the origin resumes it. A host that finds no
// master within MasterGrace stops, as before, with ErrMasterLost.

// rejoinTask is a task a host reports to a recovered master.
type rejoinTask struct {
	TID    task.TID          `msgpack:"t"`
	Job    uint64            `msgpack:"j,omitempty"`
	Epoch  uint64            `msgpack:"e,omitempty"` // its route's epoch
	Groups []ckpt.Membership `msgpack:"g,omitempty"`
}

// rejoinMove is a move a host reports as half done: suspended here (the
// origin) for Dest, or prepared here (the destination).
type rejoinMove struct {
	TID  task.TID      `msgpack:"t"`
	Dest routing.Route `msgpack:"d"`
	Move move.ID       `msgpack:"m,omitempty"`
}

// rejoinReport is what a host tells a recovered master about itself.
type rejoinReport struct {
	Tasks    []rejoinTask `msgpack:"t,omitempty"`
	Leaving  []rejoinMove `msgpack:"l,omitempty"` // suspended here for a move
	Arriving []task.TID   `msgpack:"a,omitempty"` // prepared here, not yet restored
	Arrivals []arrivalMsg `msgpack:"b,omitempty"` // barrier arrivals still waiting
	// MasterNum is the largest task number of the master's host ID this
	// host has heard of: the recovered master numbers its tasks above it.
	MasterNum uint32 `msgpack:"m,omitempty"`
	// MaxEpoch and MaxMove are the largest route epoch and move ID this
	// host knows of: the recovered master hands out larger ones, so that
	// epochs never go back and no step of a new move looks stale.
	MaxEpoch uint64  `msgpack:"e,omitempty"`
	MaxMove  move.ID `msgpack:"v,omitempty"`
}

type arrivalMsg struct {
	Group string   `msgpack:"g"`
	Count int      `msgpack:"c"`
	TID   task.TID `msgpack:"t"`
}

// memberships lists the task's group memberships this host knows of, by
// group name (d.ht.mu held).
func (h *hosted) memberships() []ckpt.Membership {
	var out []ckpt.Membership
	for g, i := range h.groups {
		out = append(out, ckpt.Membership{Group: g, Inst: i})
	}
	slices.SortFunc(out, func(a, b ckpt.Membership) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// report describes this host for a recovered master.
func (d *Daemon) report() rejoinReport {
	var r rejoinReport
	seen := func(t task.TID) {
		if t.Host() == MasterID {
			r.MasterNum = max(r.MasterNum, t.Num())
		}
	}
	d.rt.mu.Lock() // the node's lock: the routes and the tasks
	for _, h := range d.ht.tasks {
		rt := rejoinTask{TID: h.tid, Job: h.job, Epoch: d.rt.routes.Lookup(h.tid).Epoch, Groups: h.memberships()}
		r.Tasks = append(r.Tasks, rt)
		seen(h.tid)
		seen(h.parent)
	}
	for tid, l := range d.ht.moving {
		r.Leaving = append(r.Leaving, rejoinMove{TID: tid, Dest: l.dest, Move: l.move})
		r.MaxEpoch = max(r.MaxEpoch, l.dest.Epoch)
		r.MaxMove = max(r.MaxMove, l.move)
		seen(tid)
	}
	for tid, a := range d.ht.incoming {
		if _, staged := d.ht.staged[tid]; !staged {
			r.Arriving = append(r.Arriving, tid)
		}
		r.MaxEpoch = max(r.MaxEpoch, a.epoch)
		r.MaxMove = max(r.MaxMove, a.move)
	}
	r.MaxMove = max(r.MaxMove, d.ht.node.Moves().MaxMove())
	for _, h := range d.ht.tasks {
		r.MaxMove = max(r.MaxMove, h.arrived)
	}
	for _, e := range d.rt.routes.Entries() {
		seen(e.TID)
		r.MaxEpoch = max(r.MaxEpoch, e.Route.Epoch)
	}
	d.rt.mu.Unlock()
	r.Arrivals = d.arrivals.waiting()
	slices.SortFunc(r.Tasks, func(a, b rejoinTask) int { return cmp.Compare(a.TID, b.TID) })
	return r
}

// orphaned starts a host's life without a master: it runs on and tries to
// register again until grace has passed.
func (d *Daemon) orphaned(cause error) {
	if !d.orphan.CompareAndSwap(false, true) {
		return // already looking for a master
	}
	n := d.nw
	n.mu.Lock()
	m := n.master
	n.master = nil
	if n.peers[MasterID] == m {
		delete(n.peers, MasterID)
	}
	n.mu.Unlock()
	if m != nil {
		m.close(fmt.Errorf("the master is lost: %w", cause))
	}
	grace := d.cfg.MasterGrace
	d.log.Warn("lost the master daemon; running on and registering again when a master is back", "cause", cause, "grace", grace)
	d.goFunc(func() {
		deadline := time.Now().Add(grace)
		rng := d.retryRand()
		var next time.Time // a busy master asked to wait until then
		var last error     // the last try's error, which next waits after
		attempt := 0
		d.every(d.cfg.Heartbeat, nil, func() bool {
			if now := time.Now(); now.Before(next) {
				return !now.After(deadline) || d.giveUp(cause, grace, last)
			}
			ctx, cancel := context.WithTimeout(d.ctx, d.cfg.JoinCallTimeout)
			err := d.rejoin(ctx)
			cancel()
			if err == nil {
				if lost := d.endOrphan(); lost != nil {
					// The master dropped the connection this host just
					// registered on (it deleted the host again, or took
					// a newer registration) while the host still looked
					// for a master, when a loss is not taken: look on.
					cause = lost
					deadline = time.Now().Add(grace)
					d.log.Warn("the master's connection ended as this host registered again; registering again", "cause", lost)
					return true
				}
				d.swimRejoined()
				return false
			}
			d.log.Debug("register again", "error", err)
			last = err
			if hint, again := retryJoin(err); again {
				// A master is there, under a storm: wait as it asks, and
				// give it the time.
				next = time.Now().Add(d.joinBackoff().Delay(attempt, hint, rng.Uint64()))
				attempt++
				if busy := (*BusyError)(nil); errors.As(err, &busy) && time.Now().Add(grace).After(deadline) {
					deadline = time.Now().Add(grace)
				}
			}
			if time.Now().After(deadline) {
				return d.giveUp(cause, grace, err)
			}
			return true
		})
	})
}

// endOrphan ends the host's search for a master once rejoin has
// registered it, unless the connection it registered on has ended
// meanwhile: orphaned ignores a loss while the host looks for a master,
// and the master may close the connection (delete the host again, or take
// a newer registration) as soon as it has answered. Under the swim
// detector nothing else would tell the host: it sends the master no pings,
// and a deleted host is no longer probed by the others. The check and the
// end are one step under n.mu, as is peerGone's removal of the connection:
// a loss after it finds the host no longer orphaned, and is taken. It
// returns why the connection ended, or nil once the search is over.
func (d *Daemon) endOrphan() error {
	n := d.nw
	n.mu.Lock()
	m := n.master
	if m != nil && n.peers[MasterID] == m {
		d.orphan.Store(false)
		n.mu.Unlock()
		return nil
	}
	n.master = nil
	n.mu.Unlock()
	cause := errors.New("the connection was closed")
	if m != nil {
		m.close(cause) // done already, unless something else took its place
		<-m.closed
		if m.err != nil {
			cause = m.err
		}
	}
	return cause
}

// giveUp stops a host that found no master within its grace; it returns
// false (for every's loop).
func (d *Daemon) giveUp(cause error, grace time.Duration, last error) bool {
	d.log.Error("no master came back; stopping", "grace", grace, "last", last)
	d.stopAsync(fmt.Errorf("%w: %v, and none came back within %v", ErrMasterLost, cause, grace))
	return false
}

// rejoin registers this host again with a master at the master's address:
// a master that still counts it as a member takes it back as it is; one
// that deleted it names the tasks it gave up (all the host had), which
// this host stops before its connection runs, and announces it once told
// so (evRejoined); a recovering master rebuilds it from its report.
func (d *Daemon) rejoin(ctx context.Context) error {
	d.ownNums()
	rep := d.report()
	g, err := greet(ctx, d.nw.tr, d.cfg.Join, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Addr: d.self.Addr, Rejoin: true,
		Advertised: d.cfg.Advertise != "", Dialled: d.cfg.Join, Detector: d.helloDetector(), RouteProto: d.helloRoutes(),
		Info: d.selfInfo(), Report: &rep}, d.cfg.MaxFrame)
	if err != nil {
		return err
	}
	conn, st, r, h := g.conn, g.st, g.r, g.reply
	if h.Host != MasterID || h.Assigned != d.cfg.HostID {
		conn.Close("bad handshake")
		return fmt.Errorf("unexpected answer (host %v, assigned %v): %w", h.Host, h.Assigned, ErrRefused)
	}
	v, es, hosts, err := decodeHostList(h.HostList)
	if err != nil {
		conn.Close("bad host list")
		return err
	}
	lost := map[task.TID]bool{}
	if h.Deleted {
		// Before the connection runs, so that nothing of these tasks
		// goes out once the others may hear from this host again.
		d.dropLost(h.Lost)
		for _, t := range h.Lost {
			lost[t] = true
		}
		d.forgetAbsent(hosts)
		d.swimDeleted()
	}
	n := d.nw
	n.mu.Lock()
	same := h.HostsID != 0 && h.HostsID == n.listID
	n.mu.Unlock()
	if same && !h.Deleted {
		// The master this host is a member of: its list goes on from
		// the one held, and the hosts that left meanwhile are forgotten.
		d.resetHosts(v, es)
	} else {
		d.takeHosts(h.HostsID, v, es, hosts)
	}
	d.applyRoutes(h.Routes)
	p := newPeer(d, conn, st, true)
	p.info = h.Info
	// Attached as any new connection: the master is a known host here
	// (before this registration as after it), so a connection it dialled
	// to this host meanwhile may be current already. The two tie, and the
	// master's wins on both sides; set over it, this one would be the
	// master's connection here while the master retired it. One that
	// loses is retired, and still read (retire.go); on a host attach
	// refuses none.
	d.attach(p, true)
	d.startPeer(p, r)
	d.fault("rejoin:registered")
	if h.Deleted {
		if b, err := encodeMsg(&event{Kind: evRejoined}); err == nil {
			p.frame(routing.KindEvent, b)
		}
		d.log.Warn("registered again with the master, which had deleted this host: its tasks were given up and are stopped", "master", d.cfg.Join, "stopped", len(h.Lost))
	} else {
		d.log.Warn("registered again with the master", "master", d.cfg.Join, "tasks", len(rep.Tasks))
	}
	// Barrier arrivals a recovered master lost with the old one go again;
	// a live master still has them.
	for _, a := range rep.Arrivals {
		if !lost[a.TID] {
			d.arrive(arrival{group: a.Group, count: a.Count, tid: a.TID})
		}
	}
	d.reportLoad()
	return nil
}

// admitAgain takes back a host that registers again after it lost its
// master. A master that knows the host, or deleted it, readmits it (see
// readmit: lost are the tasks it must stop, and it is announced once it
// has, unless announce). Otherwise a recovering master rebuilds it: its
// host ID, tasks, routes, groups and barrier arrivals.
func (d *Daemon) admitAgain(h *hello, remote string) (info HostInfo, lost []task.TID, announce bool, err error) {
	if h.Host <= MasterID || h.Addr == "" || h.Report == nil {
		return HostInfo{}, nil, false, errors.New("a host registering again must give its host ID, address and tasks")
	}
	if why := h.Info.Build.differs(ThisBuild()); why != "" {
		return HostInfo{}, nil, false, fmt.Errorf("the daemon registering again runs another build than the master: %s", why)
	}
	info, lost, announce, known, err := d.readmit(h, remote)
	if err != nil {
		return HostInfo{}, nil, false, err
	}
	if known {
		d.learnOwnAddr(h)
		return info, lost, announce, nil
	}
	if !d.cfg.Recover {
		return HostInfo{}, nil, false, errors.New("this master does not know the host, and was not started to recover a virtual machine (--recover)")
	}
	info, err = d.recoverHost(h, remote)
	return info, nil, true, err
}

// recoverHost rebuilds, at a recovering master, a host registering again
// from its report.
func (d *Daemon) recoverHost(h *hello, remote string) (HostInfo, error) {
	d.learnOwnAddr(h)
	n := d.nw
	n.mu.Lock()
	if _, ok := n.hosts[h.Host]; ok {
		n.mu.Unlock()
		return HostInfo{}, fmt.Errorf("host %v is already in the virtual machine", h.Host)
	}
	info := h.Info
	info.ID, info.Name, info.Addr, info.Master = h.Host, h.Name, reachableAddr(h, remote), false
	if info.Name == "" {
		info.Name = h.Host.String()
	}
	n.hosts[info.ID] = &info
	n.joined[info.ID] = time.Now()
	n.watchHost(info.ID, time.Now())
	n.nextHost = max(n.nextHost, h.Host+1) // host IDs are never reused
	n.mu.Unlock()
	rep := h.Report
	d.ht.mu.Lock()
	d.ht.nextNum = max(d.ht.nextNum, rep.MasterNum)
	d.ht.mu.Unlock()
	var entries []routing.Entry
	var jobs []uint64
	for _, t := range rep.Tasks {
		entries = append(entries, routing.Entry{TID: t.TID, Route: routing.Route{Host: h.Host, Epoch: t.Epoch}})
		for _, g := range t.Groups {
			if err := d.groups.rejoin(g.Group, t.TID, g.Inst); err != nil {
				d.log.Warn("recover: group membership", "tid", t.TID, "error", err)
			}
		}
		if t.Job != 0 {
			jobs = append(jobs, t.Job)
		}
	}
	d.applyRoutes(entries)
	d.reg.jobsOn(h.Host, jobs, true)
	d.recovering(h.Host, rep)
	d.log.Warn("host registered again", "peer", info.ID, "peer_name", info.Name, "tasks", len(rep.Tasks))
	return info, nil
}

// recovering tells the move machine what a host registering again
// reports about moves (master): the moves it is the origin of that the old
// master left half done, and the tasks it runs; they are resolved once
// both hosts of a move are back (resolveMoves).
func (d *Daemon) recovering(from task.HostID, rep *rejoinReport) {
	ev := mnode.Event{Kind: mnode.EvMoveReport, Host: from}
	for _, m := range rep.Leaving {
		ev.Orphans = append(ev.Orphans, move.Orphan{Move: m.Move, TID: m.TID, Dest: m.Dest})
	}
	for _, t := range rep.Tasks {
		ev.TIDs = append(ev.TIDs, t.TID)
	}
	top := rep.MaxEpoch
	for _, t := range rep.Tasks {
		top = max(top, t.Epoch)
	}
	ev.Epoch, ev.MoveFloor = top, rep.MaxMove
	d.mn.step(ev)
	d.goFunc(d.resolveMoves)
}

// resolveMoves tells the move machine which hosts are back (master): it
// adopts the half-done moves whose two hosts are (if the destination runs
// the task, the origin forgets it; otherwise the destination drops it and
// the origin resumes it), and the driver performs its actions.
func (d *Daemon) resolveMoves() {
	n := d.nw
	n.mu.Lock()
	hosts := make([]task.HostID, 0, len(n.hosts))
	for id := range n.hosts {
		hosts = append(hosts, id)
	}
	n.mu.Unlock()
	d.mn.mu.Lock()
	now := time.Now()
	fx := d.mn.stepAt(now, mnode.Event{Kind: mnode.EvResolve, Hosts: hosts})
	for _, x := range fx {
		if x.Kind != mnode.FxMove {
			continue
		}
		switch a := x.Move; {
		case a.Kind == move.Reject:
			d.log.Warn("recover: a move the old master left half done", "tid", a.TID, "move", a.Move, "error", a.Err)
		case a.Kind == move.Call && d.mv.runs[a.Move] == nil:
			d.mv.runs[a.Move] = &moveRun{start: now, ended: make(chan struct{})}
			d.log.Warn("recover: settling a move the old master left half done", "tid", a.TID, "move", a.Move, "step", a.Step)
		}
	}
	d.mn.mu.Unlock()
	d.perform(fx)
}

// fault calls the configured fault hook at a named point.
func (d *Daemon) fault(point string) {
	if d.cfg.FaultHook != nil {
		d.cfg.FaultHook(point)
	}
}
