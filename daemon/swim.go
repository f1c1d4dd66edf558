package daemon

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/swim"
	"github.com/dpvm/dpvm/task"
)

// The swim failure detector (Config.Detector "swim"; routing/swim's
// package documentation, "How the daemon will drive it"). Each host runs
// one swim.Node from one loop (swimLoop): probes travel as KindSwim frames
// on the connections between hosts, and what the node has to tell the
// master — suspicions, deaths, refutations, answers to its checks — goes
// as control calls (mSwimReport, mSwimCheckAck). The master runs a
// swim.Referee under network.mu beside routing/member's machine (which
// still admits registrations and remembers deleted hosts): it checks an
// accused host itself (mSwimCheck) and deletes it through removeHost, the
// path a heartbeat death takes under the master detector, when it does
// not answer. Hosts send the master no pings; their load reports go on at
// their own pace (Config.ReportEvery).

// Failure detectors (Config.Detector).
const (
	// DetectorMaster: every host pings the master each Heartbeat, and the
	// master's routing/member machine judges their silence.
	DetectorMaster = "master"
	// DetectorSwim: the hosts probe each other (routing/swim) and report
	// deaths; the master checks the accused before it deletes it.
	DetectorSwim = "swim"
)

// ErrDetector: a Config.Detector that names no failure detector.
var ErrDetector = errors.New("unknown failure detector")

// checkDetector refuses a detector name other than "", DetectorMaster and
// DetectorSwim.
func checkDetector(s string) error {
	switch s {
	case "", DetectorMaster, DetectorSwim:
		return nil
	}
	return fmt.Errorf("%w %q: want %s or %s", ErrDetector, s, DetectorMaster, DetectorSwim)
}

// helloDetector is this daemon's detector as its hello names it: "" for
// DetectorMaster, the hello of a daemon that predates the field (it runs
// the master detector).
func (d *Daemon) helloDetector() string {
	if d.cfg.Detector == DetectorMaster {
		return ""
	}
	return d.cfg.Detector
}

// reasonSwimDead starts the reason of a deletion by the swim detector.
const reasonSwimDead = "declared dead by its peers"

// swimInBuffer bounds the events waiting for a host's swim loop: past it
// a probe is dropped, as a lost datagram would be (the protocol retries).
const swimInBuffer = 256

// swimOn says whether this daemon runs the swim detector.
func (d *Daemon) swimOn() bool { return d.cfg.Detector == DetectorSwim }

// swimConfig is the swim machines' configuration from the daemon's:
// probes every Heartbeat, the master's checks one Heartbeat apart and as
// many as fit in DeadAfter, reports and rejoins again at the join retry's
// base.
func (d *Daemon) swimConfig() swim.Config {
	c := d.cfg
	sc := swim.Config{ProbeInterval: c.Heartbeat, ProbeTimeout: c.Heartbeat / 2, CheckTimeout: c.Heartbeat,
		RejoinEvery: c.JoinBackoffBase, ReportEvery: c.JoinBackoffBase}
	sc.CheckTries = max(1, int(c.DeadAfter/sc.CheckTimeout))
	return sc
}

// swimHost is a host's side of the swim detector: the events for its loop.
type swimHost struct {
	in chan swimIn
	// dialing are the hosts a probe is dialling a connection to (one at a
	// time each), under mu.
	mu      sync.Mutex
	dialing map[task.HostID]bool
	// reports holds, under mu, a key for each host a report call to the
	// master is under way about, and the report that waits for it (nil:
	// none): one call at a time each (see swimReport).
	reports map[task.HostID]*swimUpdate
	// reportCalls counts the report calls made to the master.
	reportCalls atomic.Int64
}

// swimIn is an event for a host's swim loop. deleted says the master
// deleted this host, which has just registered again: the node takes it
// as the master's news of its death without asking to register again
// (it just did), and EvRejoined follows.
type swimIn struct {
	ev      swim.Event
	deleted bool
}

// swimFeed hands ev to the host's swim loop; it drops ev when the loop is
// that far behind (the protocol takes a lost probe, and the master checks
// again).
func (d *Daemon) swimFeed(ev swim.Event) bool {
	return d.swimPut(swimIn{ev: ev})
}

// swimPut hands x to the host's swim loop, unless it is that far behind.
func (d *Daemon) swimPut(x swimIn) bool {
	if d.sw == nil {
		return false
	}
	ev := x.ev
	select {
	case d.sw.in <- x:
		return true
	default:
		d.log.Debug("swim: event dropped, the loop is behind", "event", ev.Kind)
		return false
	}
}

// swimLoop drives this host's swim.Node: every event fed to it, a tick
// at the node's Next (and at least every Heartbeat, when the roster is
// brought up to date with the host list), and the effects performed.
func (d *Daemon) swimLoop() {
	h := fnv.New64a()
	h.Write([]byte(d.cfg.Name))
	node, err := swim.New(d.cfg.HostID, 0, d.swimConfig(), rand.New(rand.NewPCG(h.Sum64(), uint64(d.cfg.HostID))))
	if err != nil {
		d.log.Error("swim: cannot start the failure detector", "error", err)
		return
	}
	var roster []task.HostID
	var rosterAt time.Time
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		x := swimIn{ev: swim.Event{Kind: swim.EvTick}}
		select {
		case <-d.ctx.Done():
			return
		case x = <-d.sw.in:
		case <-t.C:
		}
		now := time.Now()
		var effs []swim.Effect
		if now.Sub(rosterAt) >= d.cfg.Heartbeat || roster == nil {
			rosterAt = now
			roster, effs = d.swimRoster(node, now, roster)
		}
		step := node.Step(now, x.ev)
		if x.deleted {
			// Registered again already: what it would ask is done.
			step = slices.DeleteFunc(step, func(e swim.Effect) bool { return e.Kind == swim.EffRejoin })
		}
		effs = append(effs, step...)
		d.swimPerform(effs)
		wait := d.cfg.Heartbeat
		if next := node.Next(); !next.IsZero() {
			wait = min(wait, max(0, time.Until(next)))
		}
		t.Reset(wait)
	}
}

// swimRoster brings the node's roster up to date with the host list
// (this host included, the master not: it is no member): a host the list
// dropped is forgotten, and a changed list starts a new rotation.
func (d *Daemon) swimRoster(node *swim.Node, now time.Time, was []task.HostID) ([]task.HostID, []swim.Effect) {
	n := d.nw
	n.mu.Lock()
	ids := make([]task.HostID, 0, len(n.hosts)+1)
	ids = append(ids, d.cfg.HostID)
	for id := range n.hosts {
		if id != MasterID && id != d.cfg.HostID {
			ids = append(ids, id)
		}
	}
	n.mu.Unlock()
	slices.Sort(ids)
	if slices.Equal(ids, was) {
		return was, nil
	}
	var effs []swim.Effect
	for _, id := range was {
		if _, in := slices.BinarySearch(ids, id); !in {
			effs = append(effs, node.Step(now, swim.Event{Kind: swim.EvForget, Host: id})...)
		}
	}
	effs = append(effs, node.Step(now, swim.Event{Kind: swim.EvJoin, Roster: ids})...)
	return ids, effs
}

// swimPerform performs a node's effects: probes go as KindSwim frames,
// reports and check answers as calls to the master (in the background:
// the node reports again until the master confirms), and a host that
// learns it was declared dead registers again (as after its master was
// lost: readmit says whether it is still a member, and it stops the tasks
// it lost before it rejoins).
func (d *Daemon) swimPerform(effs []swim.Effect) {
	for _, e := range effs {
		switch e.Kind {
		case swim.EffSend:
			b, err := swim.AppendMsg(nil, e.Msg)
			if err != nil {
				d.log.Error("swim: message not sent", "error", err)
				continue
			}
			d.swimSend(e.Msg.To, b)
		case swim.EffReport:
			u := e.Update
			d.swimReport(swimUpdate{State: uint8(u.State), Host: u.Host, Inc: u.Inc, From: u.From})
		case swim.EffCheckAck:
			a := swimCheckArgs{Seq: e.Seq, Inc: e.Inc}
			d.goFunc(func() { d.swimCall(mSwimCheckAck, a) })
		case swim.EffRejoin:
			if !d.orphan.Load() {
				d.log.Warn("swim: this host was declared dead; registering again with the master")
				d.masterLost(errors.New("this host was declared dead by the other hosts"))
			}
		}
	}
}

// swimReport tells the master u, one call at a time for each host a
// report is about: a report made while an earlier one about the same host
// is under way waits for it, taking the place of any that waited before
// (the node's newest word on a host says all its older ones did, and the
// node reports an unconfirmed death again until the master confirms it).
// A master slow to answer thus holds at most one call per host reported
// on, not one per report, which would pile up with every report made
// again while the master is behind.
func (d *Daemon) swimReport(u swimUpdate) {
	sw := d.sw
	sw.mu.Lock()
	if _, busy := sw.reports[u.Host]; busy {
		sw.reports[u.Host] = &u
		sw.mu.Unlock()
		return
	}
	if sw.reports == nil {
		sw.reports = map[task.HostID]*swimUpdate{}
	}
	sw.reports[u.Host] = nil
	sw.mu.Unlock()
	d.goFunc(func() {
		for next := &u; next != nil; {
			sw.reportCalls.Add(1)
			d.swimCall(mSwimReport, *next)
			sw.mu.Lock()
			if next = sw.reports[u.Host]; next == nil {
				delete(sw.reports, u.Host)
			} else {
				sw.reports[u.Host] = nil
			}
			sw.mu.Unlock()
		}
	})
}

// swimCall makes one call of the swim detector to the master, bounded by
// JoinCallTimeout (the node reports again until the master confirms).
func (d *Daemon) swimCall(method string, args any) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.JoinCallTimeout)
	defer cancel()
	if err := d.callMaster(ctx, method, args, nil); err != nil {
		d.log.Debug("swim: call to the master failed; the detector tries again", "method", method, "error", err)
	}
}

// swimSend sends a probe to host to on its connection, dialling one in
// the background if there is none (the probe goes once it is made).
func (d *Daemon) swimSend(to task.HostID, b []byte) {
	n := d.nw
	n.mu.Lock()
	p := n.peers[to]
	n.mu.Unlock()
	if p != nil {
		p.frame(routing.KindSwim, b)
		return
	}
	sw := d.sw
	sw.mu.Lock()
	if sw.dialing[to] {
		sw.mu.Unlock()
		return
	}
	sw.dialing[to] = true
	sw.mu.Unlock()
	d.goFunc(func() {
		defer func() {
			sw.mu.Lock()
			delete(sw.dialing, to)
			sw.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Heartbeat)
		defer cancel()
		if p, err := d.peerFor(ctx, to); err == nil {
			p.frame(routing.KindSwim, b)
		}
	})
}

// receiveSwim takes a KindSwim frame from p: a host speaks only for
// itself, to this host.
func (d *Daemon) receiveSwim(p *peer, body []byte) error {
	if d.sw == nil {
		return fmt.Errorf("%v frame at a daemon that runs no swim detector: %w", routing.KindSwim, routing.ErrMalformed)
	}
	if p.role != pki.RoleDaemon || p.info.ID == MasterID {
		return fmt.Errorf("%v frame from %s, which is no host", routing.KindSwim, p.name())
	}
	m, err := swim.ParseMsg(body, swim.MaxGossip)
	if err != nil {
		return fmt.Errorf("%v frame: %w", routing.KindSwim, err)
	}
	if m.From != p.info.ID || m.To != d.cfg.HostID {
		return fmt.Errorf("%v frame from %v to %v on %s's connection: %w", routing.KindSwim, m.From, m.To, p.name(), errForgedSwim)
	}
	d.swimFeed(swim.Event{Kind: swim.EvMsg, Msg: m})
	return nil
}

// errForgedSwim: a swim message that names another sender than its
// connection's host.
var errForgedSwim = errors.New("a host speaks only for itself")

// swimUpdate is an update of the swim detector on the wire of a call: a
// host's report to the master, or the master's gossip to a host.
type swimUpdate struct {
	State uint8       `msgpack:"s"`
	Host  task.HostID `msgpack:"h"`
	Inc   uint32      `msgpack:"i"`
	From  task.HostID `msgpack:"f"`
}

// update checks and converts u.
func (u *swimUpdate) update() (swim.Update, error) {
	s := swim.State(u.State)
	if s < swim.Alive || s > swim.Dead {
		return swim.Update{}, fmt.Errorf("%w: update of state %d", swim.ErrMsg, u.State)
	}
	return swim.Update{State: s, Host: u.Host, Inc: u.Inc, From: u.From}, nil
}

// swimCheckArgs is the master's check of an accused host, and the host's
// answer.
type swimCheckArgs struct {
	Seq uint32 `msgpack:"q"`
	Inc uint32 `msgpack:"i"`
}

// errNoSwim: a swim call at a daemon that does not run the swim detector.
var errNoSwim = errors.New("this daemon runs no swim failure detector")

// serveSwimReport takes a host's report (master): the reporter is the
// connection's host, whatever the update says.
func (d *Daemon) serveSwimReport(_ context.Context, p *peer, a *swimUpdate) (none, error) {
	if p == nil {
		return none{}, fmt.Errorf("%w: a swim report comes from a host", errNoSwim)
	}
	u, err := a.update()
	if err != nil {
		return none{}, err
	}
	if !d.refereeStep(swim.RefEvent{Kind: swim.RefReport, From: p.info.ID, Update: u}) {
		return none{}, errNoSwim
	}
	return none{}, nil
}

// serveSwimCheckAck takes an accused host's answer to the master's check
// (master): the host answers for itself alone.
func (d *Daemon) serveSwimCheckAck(_ context.Context, p *peer, a *swimCheckArgs) (none, error) {
	if p == nil {
		return none{}, fmt.Errorf("%w: a swim check's answer comes from a host", errNoSwim)
	}
	if !d.refereeStep(swim.RefEvent{Kind: swim.RefCheckAck, Host: p.info.ID, Seq: a.Seq, Inc: a.Inc}) {
		return none{}, errNoSwim
	}
	return none{}, nil
}

// serveSwimCheck takes the master's check of this host (host).
func (d *Daemon) serveSwimCheck(_ context.Context, _ *peer, a *swimCheckArgs) (none, error) {
	if d.sw == nil {
		return none{}, errNoSwim
	}
	d.swimFeed(swim.Event{Kind: swim.EvCheck, Seq: a.Seq, Inc: a.Inc})
	return none{}, nil
}

// serveSwimGossip takes news from the master (host): a confirmed death, or
// an accused host's answer to its check.
func (d *Daemon) serveSwimGossip(_ context.Context, _ *peer, a *swimUpdate) (none, error) {
	if d.sw == nil {
		return none{}, errNoSwim
	}
	u, err := a.update()
	if err != nil {
		return none{}, err
	}
	d.swimFeed(swim.Event{Kind: swim.EvGossip, Update: u})
	return none{}, nil
}

// swimDeleted tells the host's swim node that the master had deleted this
// host, which has just registered again (swimRejoined follows): its
// incarnation rises above the one it died at, and the others, which may
// still hold it dead, hear it alive.
func (d *Daemon) swimDeleted() {
	d.swimPut(swimIn{ev: swim.Event{Kind: swim.EvGossip, Update: swim.Update{State: swim.Dead, Host: d.cfg.HostID}}, deleted: true})
}

// swimRejoined tells the host's swim node that it is registered again
// (after its master was lost, or its deletion).
func (d *Daemon) swimRejoined() {
	d.swimFeed(swim.Event{Kind: swim.EvRejoined})
}

// refStep steps the master's referee, if it runs one, and queues its
// effects for refFlush (n.mu held).
func (n *network) refStep(now time.Time, ev swim.RefEvent) bool {
	if n.mem == nil || n.mem.ref == nil {
		return false
	}
	if ev.Kind == swim.RefAdmit || ev.Kind == swim.RefRemove {
		delete(n.mem.accused, ev.Host)
	}
	effs := n.mem.ref.Step(now, ev)
	for _, e := range effs {
		switch {
		case e.Kind == swim.RefShow && e.State == swim.Alive, e.Kind == swim.RefDelete:
			delete(n.mem.accused, e.Host)
		case e.Kind == swim.RefShow:
			n.mem.accused[e.Host] = true
		}
	}
	n.mem.refOut = append(n.mem.refOut, effs...)
	return true
}

// refereeStep steps the master's referee and performs its effects; false
// when the master runs no referee.
func (d *Daemon) refereeStep(ev swim.RefEvent) bool {
	n := d.nw
	if n == nil {
		return false
	}
	n.mu.Lock()
	ok := n.refStep(time.Now(), ev)
	n.mu.Unlock()
	if ok {
		d.refFlush()
	}
	return ok
}

// refFlush performs the referee's queued effects (master, n.mu not held):
// checks and gossip go as calls to the hosts in the background, a
// confirmed death deletes the host.
func (d *Daemon) refFlush() {
	n := d.nw
	n.mu.Lock()
	if n.mem == nil {
		n.mu.Unlock()
		return
	}
	effs := n.mem.refOut
	n.mem.refOut = nil
	names := map[task.HostID]string{}
	for _, e := range effs {
		if hi := n.hosts[e.Host]; hi != nil {
			names[e.Host] = hi.Name
		}
	}
	n.mu.Unlock()
	for _, e := range effs {
		switch e.Kind {
		case swim.RefCheck:
			h, a := e.Host, swimCheckArgs{Seq: e.Seq, Inc: e.Inc}
			n.swimChecks.Add(1)
			d.goFunc(func() { d.refCall(h, mSwimCheck, a) })
		case swim.RefGossip:
			to, u := e.To, e.Update
			d.goFunc(func() {
				d.refCall(to, mSwimGossip, swimUpdate{State: uint8(u.State), Host: u.Host, Inc: u.Inc, From: u.From})
			})
		case swim.RefDelete:
			d.removeHost(e.Host, fmt.Sprintf("%s (incarnation %d), and no answer to the master's checks", reasonSwimDead, e.Inc))
		case swim.RefShow:
			switch e.State {
			case swim.Alive:
				d.log.Info("host no longer suspected", "peer", e.Host, "peer_name", names[e.Host])
			default:
				d.log.Warn("host "+e.State.String()+" by its peers", "peer", e.Host, "peer_name", names[e.Host], "incarnation", e.Inc)
			}
		}
	}
}

// refCall makes one call of the referee to a host, bounded by a check's
// timeout: an answer later than that counts for nothing.
func (d *Daemon) refCall(h task.HostID, method string, args any) {
	ctx, cancel := context.WithTimeout(d.ctx, d.swimConfig().CheckTimeout)
	defer cancel()
	if err := d.callHost(ctx, h, method, args, nil); err != nil {
		d.log.Debug("swim: call to a host failed", "peer", h, "method", method, "error", err)
	}
}
