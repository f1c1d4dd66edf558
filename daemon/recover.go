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
}

type arrivalMsg struct {
	Group string   `msgpack:"g"`
	Count int      `msgpack:"c"`
	TID   task.TID `msgpack:"t"`
}

// remember records a task's group membership (inst < 0: it left).
func (d *Daemon) remember(h *hosted, group string, inst int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if inst < 0 {
		delete(h.groups, group)
		return
	}
	if h.groups == nil {
		h.groups = map[string]int{}
	}
	h.groups[group] = inst
}

// memberships lists the task's group memberships this host knows of, by
// group name (d.mu held).
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
	d.rmu.Lock()
	d.mu.Lock()
	for _, h := range d.tasks {
		rt := rejoinTask{TID: h.tid, Job: h.job, Epoch: d.routes.Lookup(h.tid).Epoch, Groups: h.memberships()}
		r.Tasks = append(r.Tasks, rt)
		seen(h.tid)
		seen(h.parent)
	}
	for tid, l := range d.moving {
		r.Leaving = append(r.Leaving, rejoinMove{TID: tid, Dest: l.dest})
		seen(tid)
	}
	for tid := range d.incoming {
		if _, staged := d.staged[tid]; !staged {
			r.Arriving = append(r.Arriving, tid)
		}
	}
	for _, e := range d.routes.Entries() {
		seen(e.TID)
	}
	d.mu.Unlock()
	d.rmu.Unlock()
	d.bmu.Lock()
	for tid, a := range d.bpending {
		r.Arrivals = append(r.Arrivals, arrivalMsg{Group: a.group, Count: a.count, TID: tid})
	}
	d.bmu.Unlock()
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
		d.every(d.cfg.Heartbeat, nil, func() bool {
			ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.Heartbeat+time.Second)
			err := d.rejoin(ctx)
			cancel()
			if err == nil {
				d.orphan.Store(false)
				return false
			}
			d.log.Debug("register again", "error", err)
			if time.Now().After(deadline) {
				d.log.Error("no master came back; stopping", "grace", grace, "last", err)
				d.stopAsync(fmt.Errorf("%w: %v, and none came back within %v", ErrMasterLost, cause, grace))
				return false
			}
			return true
		})
	})
}

// rejoin registers this host again with a master at the master's address.
func (d *Daemon) rejoin(ctx context.Context) error {
	rep := d.report()
	g, err := greet(ctx, d.nw.tr, d.cfg.Join, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, Addr: d.self.Addr, Rejoin: true,
		Advertised: d.cfg.Advertise != "", Dialled: d.cfg.Join,
		Info: d.selfInfo(), Report: &rep}, d.cfg.MaxFrame)
	if err != nil {
		return err
	}
	conn, st, r, h := g.conn, g.st, g.r, g.reply
	if h.Host != MasterID || h.Assigned != d.cfg.HostID {
		conn.Close("bad handshake")
		return fmt.Errorf("unexpected answer (host %v, assigned %v): %w", h.Host, h.Assigned, ErrRefused)
	}
	n := d.nw
	n.mu.Lock()
	for i := range h.Hosts {
		hi := h.Hosts[i]
		if hi.ID == MasterID {
			hi.Addr = d.cfg.Join // reachable from here: we just reached it
		}
		if hi.ID != d.cfg.HostID {
			n.hosts[hi.ID] = &hi
		}
	}
	n.mu.Unlock()
	d.applyRoutes(h.Routes)
	p := newPeer(d, conn, st, true)
	p.info = h.Info
	n.mu.Lock()
	n.master = p
	n.peers[MasterID] = p
	n.mu.Unlock()
	d.startPeer(p, r)
	d.log.Warn("registered again with a recovered master", "master", d.cfg.Join, "tasks", len(rep.Tasks))
	// Barrier arrivals the old master took with it go again.
	for _, a := range rep.Arrivals {
		d.arrive(arrival{group: a.Group, count: a.Count, tid: a.TID})
	}
	d.reportLoad()
	return nil
}

// admitAgain takes back a host that registers again after its master was
// lost (a recovered master): its host ID, tasks, routes, groups and
// barrier arrivals.
func (d *Daemon) admitAgain(h *hello, remote string) (HostInfo, []HostInfo, []routing.Entry, error) {
	if !d.cfg.Recover {
		return HostInfo{}, nil, nil, errors.New("this master was not started to recover a virtual machine (--recover)")
	}
	if h.Host <= MasterID || h.Addr == "" || h.Report == nil {
		return HostInfo{}, nil, nil, errors.New("a host registering again must give its host ID, address and tasks")
	}
	if why := h.Info.Build.differs(ThisBuild()); why != "" {
		return HostInfo{}, nil, nil, fmt.Errorf("the daemon registering again runs another build than the master: %s", why)
	}
	d.learnOwnAddr(h)
	n := d.nw
	n.mu.Lock()
	if _, ok := n.hosts[h.Host]; ok {
		n.mu.Unlock()
		return HostInfo{}, nil, nil, fmt.Errorf("host %v is already in the virtual machine", h.Host)
	}
	info := h.Info
	info.ID, info.Name, info.Addr, info.Master = h.Host, h.Name, reachableAddr(h, remote), false
	if info.Name == "" {
		info.Name = h.Host.String()
	}
	n.hosts[info.ID] = &info
	n.joined[info.ID] = time.Now()
	n.nextHost = max(n.nextHost, h.Host+1) // host IDs are never reused
	n.mu.Unlock()
	rep := h.Report
	d.mu.Lock()
	d.nextNum = max(d.nextNum, rep.MasterNum)
	d.mu.Unlock()
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
	d.jobsOn(h.Host, jobs, true)
	d.recovering(h.Host, rep)
	self := d.selfInfo()
	d.rmu.Lock()
	routes := d.routes.Entries()
	d.rmu.Unlock()
	n.mu.Lock()
	hosts := n.hostList(self)
	n.mu.Unlock()
	d.log.Warn("host registered again", "peer", info.ID, "peer_name", info.Name, "tasks", len(rep.Tasks))
	return info, hosts, routes, nil
}

// orphanMove is a move the old master left half done, as its origin
// reported it.
type orphanMove struct {
	origin task.HostID
	dest   routing.Route
}

// recovering records what a host registering again reports about moves
// (master), and resolves those whose two hosts are back.
func (d *Daemon) recovering(from task.HostID, rep *rejoinReport) {
	d.migMu.Lock()
	if d.orphanMoves == nil {
		d.orphanMoves = map[task.TID]orphanMove{}
		d.runningAt = map[task.TID]task.HostID{}
	}
	for _, m := range rep.Leaving {
		d.orphanMoves[m.TID] = orphanMove{origin: from, dest: m.Dest}
	}
	for _, t := range rep.Tasks {
		d.runningAt[t.TID] = from
	}
	d.migMu.Unlock()
	d.goFunc(d.resolveMoves)
}

// resolveMoves finishes or undoes the half-done moves whose two hosts are
// back (master): if the destination runs the task, the origin forgets it;
// otherwise the destination drops it and the origin resumes it.
func (d *Daemon) resolveMoves() {
	type move struct {
		tid task.TID
		m   orphanMove
		at  task.HostID
	}
	d.migMu.Lock()
	var todo []move
	for tid, m := range d.orphanMoves {
		if d.hostKnown(m.origin) && d.hostKnown(m.dest.Host) {
			todo = append(todo, move{tid: tid, m: m, at: d.runningAt[tid]})
			delete(d.orphanMoves, tid)
		}
	}
	d.migMu.Unlock()
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	for _, x := range todo {
		if x.at == x.m.dest.Host {
			if err := d.callHost(ctx, x.m.origin, mMigDone, migStep{TID: x.tid}, nil); err != nil {
				d.log.Warn("recover: commit a move", "tid", x.tid, "error", err)
			}
			d.log.Warn("recover: a move the old master left half done is committed", "tid", x.tid, "at", x.at)
			continue
		}
		back := routing.Route{Host: x.m.origin, Epoch: x.m.dest.Epoch + 1}
		_ = d.callHost(ctx, x.m.dest.Host, mMigDrop, migStep{TID: x.tid, Route: back}, nil)
		if err := d.callHost(ctx, x.m.origin, mMigBack, migStep{TID: x.tid, Route: back}, nil); err != nil {
			d.log.Warn("recover: undo a move", "tid", x.tid, "error", err)
			continue
		}
		d.setRoute(x.tid, back)
		d.log.Warn("recover: a move the old master left half done is undone", "tid", x.tid, "at", x.m.origin)
	}
}

// fault calls the configured fault hook at a named point.
func (d *Daemon) fault(point string) {
	if d.cfg.FaultHook != nil {
		d.cfg.FaultHook(point)
	}
}
