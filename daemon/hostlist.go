package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/hostlist"
	"github.com/dpvm/dpvm/task"
)

// The host list goes out as deltas (routing/hostlist). The master keeps
// its list (network.list) of the hosts it has announced, each change
// numbered with the list's next version; a joining host gets the whole
// list once, with its version, in the answer to its registration
// (hello.HostList), and every other host gets only the change, in an
// evHosts event. A host applies the deltas in version order: one it
// already holds changes nothing, and one past a gap is held while the
// host asks for the whole list again (evHostsAsk; the master answers
// with evHostList). The master's hellos carry its list's version
// (hello.HostsV), so a host that reconnects behind the master asks as
// well. The master sends its deltas and whole lists under sendMu, in
// version order, on the connection the host reads them from in that
// order.

// maxDeltasPerEvent bounds the deltas of one evHosts event (a frame's
// size): about 40 bytes each.
const maxDeltasPerEvent = 1024

// entryOf is h as the host list carries it.
func entryOf(h HostInfo) hostlist.Entry {
	return hostlist.Entry{ID: h.ID, Name: h.Name, Addr: h.Addr, Cores: h.Cores, Speed: h.Speed, MemMiB: h.MemMiB, Master: h.Master}
}

// infoOf is a host list's entry as this host describes it: every host of
// the virtual machine runs the master's build, which is this one's.
func infoOf(e hostlist.Entry) HostInfo {
	return HostInfo{ID: e.ID, Name: e.Name, Addr: e.Addr, Cores: e.Cores, Speed: e.Speed, MemMiB: e.MemMiB, Master: e.Master, Build: ThisBuild()}
}

// queueDelta queues a change of the master's list for flushHosts (n.mu
// held).
func (n *network) queueDelta(dl hostlist.Delta, _ []hostlist.Change, ok bool) {
	if ok {
		n.deltas = append(n.deltas, dl)
	}
}

// listHost puts info on the master's list; the hosts hear of it at the
// next flushHosts.
func (d *Daemon) listHost(info HostInfo) {
	n := d.nw
	n.mu.Lock()
	n.queueDelta(n.list.Add(entryOf(info)))
	n.mu.Unlock()
}

// announceHost puts info on the master's list and tells the hosts.
func (d *Daemon) announceHost(info HostInfo) {
	d.listHost(info)
	d.flushHosts()
}

// flushHosts sends the master's queued deltas to every connected host,
// in version order (a host that joined after one was queued holds it in
// its whole list, and ignores it).
func (d *Daemon) flushHosts() {
	n := d.nw
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	n.mu.Lock()
	q := n.deltas
	n.deltas = nil
	ps := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		ps = append(ps, p)
	}
	n.mu.Unlock()
	for len(q) > 0 {
		k := min(len(q), maxDeltasPerEvent)
		b, err := encodeMsg(&event{Kind: evHosts, Deltas: hostlist.AppendDeltas(nil, q[:k])})
		if err != nil {
			d.log.Error("encode event", "error", err)
			return
		}
		q = q[k:]
		for _, p := range ps {
			p.frame(routing.KindEvent, b)
		}
	}
}

// snapshot is the master's whole list, encoded, its own entry as self
// (n.mu held).
func (n *network) snapshot(self HostInfo) []byte {
	v, es := n.list.Snapshot()
	for i := range es {
		if es[i].ID == MasterID {
			es[i] = entryOf(self)
		}
	}
	return hostlist.AppendSnapshot(nil, v, es)
}

// listVersion is the version of this daemon's host list.
func (d *Daemon) listVersion() uint64 {
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.list.Version()
}

// sendHostList answers a host's ask for the whole list (master), at most
// once a heartbeat per host: the list grows with the hosts.
func (d *Daemon) sendHostList(p *peer) {
	self := d.selfInfo()
	n := d.nw
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	now := time.Now()
	n.mu.Lock()
	if last, ok := n.listSent[p.info.ID]; ok && now.Sub(last) < d.cfg.Heartbeat {
		n.mu.Unlock()
		return
	}
	n.listSent[p.info.ID] = now
	b := n.snapshot(self)
	n.mu.Unlock()
	e, err := encodeMsg(&event{Kind: evHostList, HostList: b})
	if err != nil {
		d.log.Error("encode event", "error", err)
		return
	}
	p.frame(routing.KindEvent, e)
	n.listsAsked.Add(1)
}

// applyDeltas applies the master's deltas to this host's list, in
// order, and acts on what changed; a gap asks for the whole list.
func (d *Daemon) applyDeltas(ds []hostlist.Delta) error {
	return d.applyHosts(func(l *hostlist.List) ([]hostlist.Change, error) {
		var ch []hostlist.Change
		var errs []error
		for _, dl := range ds {
			c, err := l.Apply(dl)
			ch = append(ch, c...)
			if err != nil && !errors.Is(err, hostlist.ErrGap) {
				errs = append(errs, err)
			}
		}
		return ch, errors.Join(errs...)
	})
}

// resetHosts replaces this host's list by the master's whole list of
// version v.
func (d *Daemon) resetHosts(v uint64, es []hostlist.Entry) {
	_ = d.applyHosts(func(l *hostlist.List) ([]hostlist.Change, error) {
		return l.Reset(v, es), nil
	})
}

// applyHosts runs f on this host's list and acts on the changes it made,
// in order, one application at a time (applyMu: two connections to the
// master may be read at once while one retires); the list still behind
// asks for the whole list.
func (d *Daemon) applyHosts(f func(*hostlist.List) ([]hostlist.Change, error)) error {
	n := d.nw
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	n.mu.Lock()
	ch, err := f(n.list)
	n.mu.Unlock()
	for _, c := range ch {
		d.hostChange(c)
	}
	d.askHosts(false)
	return err
}

// hostChange acts on one change of this host's list: a host added or
// changed is known (and dialled when needed); one removed is forgotten
// (this host itself: it stops).
func (d *Daemon) hostChange(c hostlist.Change) {
	id := c.Entry.ID
	if c.Kind == hostlist.Removed {
		if id == d.cfg.HostID {
			d.stopAsync(fmt.Errorf("deleted from the virtual machine: %s", c.Reason))
			return
		}
		d.removeHost(id, c.Reason)
		return
	}
	if id == d.cfg.HostID {
		return // this host's own entry is its own
	}
	h := d.reachable(infoOf(c.Entry))
	n := d.nw
	n.mu.Lock()
	n.hosts[id] = &h
	n.mu.Unlock()
	if c.Kind == hostlist.Added {
		d.hostNotice(task.HostAdd, h)
	}
}

// hostsBehind records that the master's list is at version v (its
// hello's) and asks for it if this host's is older.
func (d *Daemon) hostsBehind(v uint64) {
	n := d.nw
	n.mu.Lock()
	n.wantV = max(n.wantV, v)
	n.mu.Unlock()
	d.askHosts(true)
}

// askHosts asks the master for its whole list when this host's has a
// gap or is older than the master has said, at most once a heartbeat
// unless now.
func (d *Daemon) askHosts(now bool) {
	if d.cfg.Master {
		return
	}
	n := d.nw
	n.mu.Lock()
	behind := n.list.Gap() || n.list.Version() < n.wantV
	due := now || time.Since(n.asked) >= d.cfg.Heartbeat
	m := n.master
	if behind && due && m != nil {
		n.asked = time.Now()
	}
	n.mu.Unlock()
	if !behind || !due || m == nil {
		return
	}
	b, err := encodeMsg(&event{Kind: evHostsAsk})
	if err != nil {
		d.log.Error("encode event", "error", err)
		return
	}
	d.log.Debug("host list behind the master's: asking for it whole")
	m.frame(routing.KindEvent, b)
}

// takeHosts takes the whole list, of version v, of a master this host
// registers with afresh (a recovering master, whose list and versions
// start anew, or one that deleted this host): the list is that master's,
// named id, and its hosts are added to those this host knows.
func (d *Daemon) takeHosts(id, v uint64, es []hostlist.Entry, hosts []HostInfo) {
	n := d.nw
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.listID = id
	n.list = hostlist.New()
	n.list.Reset(v, es)
	n.wantV = v
	for _, hi := range hosts {
		if hi.ID != d.cfg.HostID {
			hi = d.reachable(hi)
			n.hosts[hi.ID] = &hi
		}
	}
}

// reachable is a host of the master's list as this host dials it: the
// master at the address this host reached it by.
func (d *Daemon) reachable(h HostInfo) HostInfo {
	if h.ID == MasterID {
		h.Addr = d.cfg.Join
	}
	return h
}

// decodeHostList decodes a whole list from the master as HostInfos, and
// the list itself.
func decodeHostList(b []byte) (uint64, []hostlist.Entry, []HostInfo, error) {
	v, es, err := hostlist.DecodeSnapshot(b)
	if err != nil {
		return 0, nil, nil, err
	}
	hs := make([]HostInfo, len(es))
	for i, e := range es {
		hs[i] = infoOf(e)
	}
	return v, es, hs, nil
}
