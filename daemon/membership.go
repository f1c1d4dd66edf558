package daemon

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing/member"
	"github.com/dpvm/dpvm/routing/swim"
	"github.com/dpvm/dpvm/task"
)

// Membership (daemon/README.md, "Membership and partitions"). The master
// drives routing/member's pure membership machine: it feeds it every
// registration (the machine's token bucket admits it or says how long the
// host is to wait), every host registered and deleted, and, every
// heartbeat, when each host was last heard from and a tick; it performs
// the effects (a suspicion is shown, a confirmed death deletes the host). A host cut off from a live
// master registers again with it when the network heals: if the master
// still counts it as a member, nothing changes; if the master deleted it,
// the host first stops every task it reports (all of them were given up at
// the deletion: lost, or rolled back elsewhere with their jobs) and only
// then is announced to the other hosts again, under its old host ID.

// ErrBusy: the master is admitting other hosts and asks this one to retry
// after a while (errors.As to *BusyError for how long).
var ErrBusy = errors.New("the master is busy admitting other hosts")

// BusyError is the master's answer to a registration over its admission
// rate: retry after RetryAfter.
type BusyError struct{ RetryAfter time.Duration }

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v; retry after %v", ErrBusy, e.RetryAfter)
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// membership is the master's view of its hosts' liveness, under
// network.mu.
type membership struct {
	m *member.Machine
	// pending are hosts registered again after their deletion, announced
	// to the others once they have stopped their lost tasks.
	pending map[task.HostID]bool
	// admitting counts, for each host the master still lists, the
	// registrations of it under way (from readmit until the accept path
	// has attached their connection): the master dials no connection to
	// it meanwhile, which would win the tie (attach keeps the one
	// dialled by the smaller ID) and leave the registration unanswered.
	admitting map[task.HostID]int
	// ref is the swim detector's referee (Config.Detector "swim"; nil
	// otherwise), and refOut its effects waiting for refFlush.
	ref    *swim.Referee
	refOut []swim.RefEffect
	// accused are the hosts the referee shows suspected or dead (being
	// checked): their liveness is "suspected".
	accused map[task.HostID]bool
}

// swimAccused says whether the swim referee shows h suspected or being
// checked (n.mu held).
func (n *network) swimAccused(h task.HostID) bool {
	return n.mem != nil && n.mem.accused[h]
}

// reasonSilent starts the reason of a deletion by the failure detector.
const reasonSilent = "no heartbeat for"

// livenessRejoining is the liveness of a host registered again after its
// deletion, not yet announced (HostInfo.Liveness).
const livenessRejoining = "rejoining"

// placeableLiveness says whether a rollback may restore tasks on a host of
// this liveness: "" (a daemon that is not the master) or alive.
func placeableLiveness(l string) bool { return l == "" || l == member.Alive.String() }

// Detection is how the master detects failed hosts: the configured bounds
// and where they stand now.
type Detection struct {
	// Detector is the failure detector (Config.Detector): DetectorSwim or
	// DetectorMaster.
	Detector     string        `msgpack:"det,omitempty" json:"detector,omitempty"`
	Heartbeat    time.Duration `msgpack:"hb" json:"heartbeat_ns"`
	SuspectAfter time.Duration `msgpack:"sa" json:"suspect_after_ns"`
	DeadAfter    time.Duration `msgpack:"da" json:"dead_after_ns"`
	// Health is the master's local health (0: it keeps up); DeadNow the
	// silence that confirms a suspected host dead now, DeadAfter widened
	// by it; MaxDead the most it can widen to.
	Health    int           `msgpack:"h" json:"health"`
	MaxHealth int           `msgpack:"mh" json:"max_health"`
	DeadNow   time.Duration `msgpack:"dn" json:"dead_now_ns"`
	MaxDead   time.Duration `msgpack:"md" json:"max_dead_ns"`
	// Suspected is how many hosts are suspected now.
	Suspected int `msgpack:"s" json:"suspected"`
}

// String says it in one line, for conf and the log.
func (x Detection) String() string {
	if x.Detector == DetectorSwim {
		// The referee checks an accused host every heartbeat, as many
		// times as fit in DeadAfter; a stalled master's late checks do not
		// count, as many times again (swimConfig, routing/swim's Referee).
		s := fmt.Sprintf("the hosts probe each other every %v (swim); a host they accuse is checked by the master every %v and deleted after %v of unanswered checks (a stalled master's late checks do not count, up to %d of them)",
			x.Heartbeat, x.Heartbeat, x.DeadAfter, max(1, int(x.DeadAfter/max(x.Heartbeat, 1))))
		if x.Suspected > 0 {
			s += fmt.Sprintf("; %d suspected now", x.Suspected)
		}
		return s
	}
	s := fmt.Sprintf("a silent host is suspected after %v (or its own pace), confirmed dead after %v", x.SuspectAfter, x.DeadNow)
	if x.Health > 0 {
		s += fmt.Sprintf(" (widened from %v: the master is overloaded, health %d of %d)", x.DeadAfter, x.Health, x.MaxHealth)
	} else {
		s += fmt.Sprintf(" (up to %v while the master is overloaded)", x.MaxDead)
	}
	if x.Suspected > 0 {
		s += fmt.Sprintf("; %d suspected now", x.Suspected)
	}
	return s
}

// startMembership sets up the master's detector and admission.
func (d *Daemon) startMembership() error {
	c := d.cfg
	m, err := member.NewMachine(member.Config{Heartbeat: c.Heartbeat, SuspectAfter: c.SuspectAfter, DeadAfter: c.DeadAfter, MaxHealth: c.MaxHealth}, c.JoinRate, c.JoinBurst)
	if err != nil {
		return err
	}
	d.nw.mem = &membership{m: m, pending: map[task.HostID]bool{}, admitting: map[task.HostID]int{}, accused: map[task.HostID]bool{}}
	if d.swimOn() {
		if d.nw.mem.ref, err = swim.NewReferee(d.swimConfig()); err != nil {
			return err
		}
		sc := d.swimConfig()
		d.log.Info("failure detection by the hosts (swim): the master checks an accused host before it deletes it",
			"probe_interval", sc.ProbeInterval, "check_timeout", sc.CheckTimeout, "check_tries", sc.CheckTries)
	}
	x := d.Detection()
	d.log.Info("failure detection", "suspect_after", x.SuspectAfter, "dead_after", x.DeadAfter, "max_dead_after", x.MaxDead,
		"join_rate", c.JoinRate, "join_burst", c.JoinBurst)
	return nil
}

// Detection reports the master's failure detection; a daemon that is not
// the master reports its own DeadAfter alone (how long it waits for its
// master).
func (d *Daemon) Detection() Detection {
	x := Detection{Detector: d.cfg.Detector, Heartbeat: d.cfg.Heartbeat, DeadAfter: d.cfg.DeadAfter, DeadNow: d.cfg.DeadAfter, MaxDead: d.cfg.DeadAfter}
	if d.nw == nil || d.nw.mem == nil {
		return x
	}
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.mem.m
	c := m.Config()
	x.SuspectAfter, x.Health, x.MaxHealth = c.SuspectAfter, m.Health(), c.MaxHealth
	x.DeadNow = m.DeadTimeout()
	x.MaxDead = c.DeadAfter * time.Duration(1+c.MaxHealth)
	for id := range n.hosts {
		if m.State(id) == member.Suspected || n.swimAccused(id) {
			x.Suspected++
		}
	}
	return x
}

// admissionWait asks the membership machine to admit h's registration:
// 0 if admitted now, otherwise how long the host is to wait (the machine
// counts a member told to wait as heard from).
func (d *Daemon) admissionWait(h *hello, now time.Time) time.Duration {
	n := d.nw
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mem == nil {
		return 0
	}
	cur := n.hosts[h.Host]
	isMember := h.Rejoin && cur != nil && cur.Name == h.Name && h.Host != MasterID
	var wait time.Duration
	for _, x := range n.mem.m.Step(now, member.Event{Kind: member.Join, Host: h.Host, Member: isMember}) {
		if x.Kind == member.Busy {
			wait = x.RetryAfter
		}
	}
	return wait
}

// watchHost starts watching a host just registered (n.mu held).
func (n *network) watchHost(id task.HostID, now time.Time) {
	if n.mem != nil {
		n.mem.m.Step(now, member.Event{Kind: member.Watch, Host: id})
		n.refStep(now, swim.RefEvent{Kind: swim.RefAdmit, Host: id})
	}
}

// forgetHost tells the membership machine that a host was deleted, and
// why: the machine remembers one deleted for its silence (or while it
// rejoined), so that it may come back (n.mu held).
func (n *network) forgetHost(hi *HostInfo, why string) {
	if n.mem == nil || hi == nil {
		return
	}
	rejoining := n.mem.pending[hi.ID]
	delete(n.mem.pending, hi.ID)
	now := time.Now()
	n.mem.m.Step(now, member.Event{Kind: member.Forget, Host: hi.ID, Name: hi.Name,
		Silent: strings.HasPrefix(why, reasonSilent) || strings.HasPrefix(why, reasonSwimDead), Rejoining: rejoining})
	n.refStep(now, swim.RefEvent{Kind: swim.RefRemove, Host: hi.ID})
}

// liveness fills in the hosts' liveness as the master sees it (n.mu held).
func (n *network) liveness(hs []HostInfo, now time.Time) {
	if n.mem == nil {
		return
	}
	for i := range hs {
		if hs[i].ID == MasterID {
			hs[i].Liveness = member.Alive.String()
			continue
		}
		st := n.mem.m.State(hs[i].ID)
		hs[i].Liveness = st.String()
		if n.mem.pending[hs[i].ID] {
			hs[i].Liveness = livenessRejoining
		}
		if n.swimAccused(hs[i].ID) {
			hs[i].Liveness = member.Suspected.String()
		}
		if st == member.Suspected {
			hs[i].SilentMS = n.mem.m.Silent(hs[i].ID, now).Milliseconds()
		}
	}
}

// checkHosts feeds the membership machine what was heard from each host
// since the last heartbeat and a tick (master), and performs the effects
// after releasing the lock: health changes and suspicions are logged (the
// liveness shown comes from the machine), a confirmed death deletes the
// host.
func (d *Daemon) checkHosts(now time.Time) {
	n := d.nw
	n.mu.Lock()
	if n.mem == nil {
		n.mu.Unlock()
		return
	}
	if n.mem.ref != nil {
		// The hosts watch each other: the master only ticks its referee,
		// whose checks fall due (refFlush performs them).
		n.refStep(now, swim.RefEvent{Kind: swim.RefTick})
		n.mu.Unlock()
		d.refFlush()
		return
	}
	m := n.mem.m
	for id, p := range n.peers {
		if id != MasterID {
			m.Step(now, member.Event{Kind: member.Heard, Host: id, At: time.Unix(0, p.lastHeard.Load())})
		}
	}
	effects := m.Step(now, member.Event{Kind: member.Tick})
	names := map[task.HostID]string{}
	for _, x := range effects {
		if hi := n.hosts[x.Host]; x.Host != 0 && hi != nil {
			names[x.Host] = hi.Name
		}
	}
	n.mu.Unlock()
	for _, x := range effects {
		silent := x.Silent.Round(time.Millisecond)
		switch x.Kind {
		case member.Health:
			lvl := "failure detection widened: the master is overloaded, or many hosts fell silent at once"
			if x.Health < x.Was {
				lvl = "failure detection narrowing again"
			}
			d.log.Warn(lvl, "health", x.Health, "dead_after", x.DeadAfter)
		case member.Suspect:
			d.log.Warn("host suspected", "peer", x.Host, "peer_name", names[x.Host], "silent", silent, "dead_after", x.DeadAfter)
		case member.Clear:
			d.log.Info("host no longer suspected", "peer", x.Host, "peer_name", names[x.Host], "silent", silent)
		case member.Delete:
			d.removeHost(x.Host, fmt.Sprintf("%s %v (suspected, then confirmed dead)", reasonSilent, silent))
		}
	}
}

// readmit takes back, at a live master, a host that registers again after
// it lost its master: if the master still counts it as a member, with
// everything it had (its old connection is dropped for the new one); if
// the detector deleted it, under its old host ID but with none of its
// tasks: lost lists every task it reports, which it must stop before it is
// announced to the others (announce false). ok is false when the master
// knows nothing of the host (a recovering master then rebuilds it from its
// report).
func (d *Daemon) readmit(h *hello, remote string) (info HostInfo, lost []task.TID, announce, ok bool, err error) {
	n := d.nw
	n.mu.Lock()
	if n.mem == nil {
		n.mu.Unlock()
		return HostInfo{}, nil, false, false, nil
	}
	if cur := n.hosts[h.Host]; cur != nil {
		if cur.Name != h.Name {
			n.mu.Unlock()
			return HostInfo{}, nil, false, true, fmt.Errorf("host %v is %s, not %s", h.Host, cur.Name, h.Name)
		}
		old := n.peers[h.Host]
		delete(n.peers, h.Host)
		n.mem.admitting[h.Host]++ // until admitted (the accept path)
		cur.Addr = reachableAddr(h, remote)
		info = *cur
		n.mem.m.Step(time.Now(), member.Event{Kind: member.Watch, Host: h.Host})
		rejoining := n.mem.pending[h.Host]
		n.mu.Unlock()
		if old != nil {
			old.close(errors.New("the host registered again"))
		}
		if rejoining {
			// Taken back after its deletion, but the answer was lost or
			// came too late and it tries again: it is told again that its
			// tasks were given up, stops whatever it reports, and is
			// announced once it says so.
			lost = reportedTasks(h)
			d.log.Warn("host registered again while rejoining after its deletion: it stops the tasks it had, then rejoins empty", "peer", info.ID, "peer_name", info.Name, "tasks", len(lost))
			return info, lost, false, true, nil
		}
		d.log.Warn("host registered again; it was still a member: nothing lost", "peer", info.ID, "peer_name", info.Name)
		return info, nil, true, true, nil
	}
	now := time.Now()
	x := n.mem.m.Step(now, member.Event{Kind: member.Return, Host: h.Host, Name: h.Name})
	switch {
	case len(x) == 0: // not a host the machine deleted
		n.mu.Unlock()
		return HostInfo{}, nil, false, false, nil
	case x[0].Kind == member.Refuse:
		n.mu.Unlock()
		return HostInfo{}, nil, false, true, x[0].Err
	}
	// Readmit: under its old host ID, with none of its tasks; the machine
	// watches it from now on.
	info = h.Info
	info.ID, info.Name, info.Addr, info.Master = h.Host, h.Name, reachableAddr(h, remote), false
	info.Tasks, info.Load = 0, info.External
	n.hosts[info.ID] = &info
	n.joined[info.ID] = now
	n.mem.pending[info.ID] = true
	n.refStep(now, swim.RefEvent{Kind: swim.RefAdmit, Host: info.ID})
	// A connection to the host the master made meanwhile would win the
	// tie between two connections (attach keeps the one dialled by the
	// smaller ID) and this registration would never be answered.
	old := n.peers[h.Host]
	delete(n.peers, h.Host)
	n.mu.Unlock()
	if old != nil {
		old.close(errors.New("the host registered again"))
	}
	lost = reportedTasks(h)
	d.log.Warn("host registered again after its deletion: it stops the tasks it had, then rejoins empty", "peer", info.ID, "peer_name", info.Name, "tasks", len(lost))
	return info, lost, false, true, nil
}

// admitted ends a registration of host id that readmit counted in
// admitting (master).
func (n *network) admitted(id task.HostID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mem == nil || n.mem.admitting[id] == 0 {
		return
	}
	if n.mem.admitting[id]--; n.mem.admitting[id] == 0 {
		delete(n.mem.admitting, id)
	}
}

// reportedTasks lists every task a host registering again reports:
// running, suspended for a move, or arriving.
func reportedTasks(h *hello) []task.TID {
	var tids []task.TID
	if rep := h.Report; rep != nil {
		for _, t := range rep.Tasks {
			tids = append(tids, t.TID)
		}
		for _, m := range rep.Leaving {
			tids = append(tids, m.TID)
		}
		tids = append(tids, rep.Arriving...)
	}
	slices.Sort(tids)
	return slices.Compact(tids)
}

// rejoined announces a host registered again after its deletion, now that
// it has stopped its lost tasks (master).
func (d *Daemon) rejoined(id task.HostID) error {
	n := d.nw
	n.mu.Lock()
	var info HostInfo
	pending := n.mem != nil && n.mem.pending[id]
	if pending {
		delete(n.mem.pending, id)
		if hi := n.hosts[id]; hi != nil {
			info = *hi
		}
	}
	n.mu.Unlock()
	if !pending || info.ID == 0 {
		return fmt.Errorf("%s event from %v, which is not registering again", evRejoined, id)
	}
	d.announceHost(info)
	d.routesHostBackMaster(info)
	d.mv.hostUp(info.ID)
	d.hostNotice(task.HostAdd, info)
	d.schedDirty()
	d.log.Warn("host rejoined the virtual machine", "peer", id, "peer_name", info.Name)
	return nil
}

// dropLost stops, on a host registering again after the master deleted
// it, the tasks the master gave up (lost): quietly (their exits were
// told when they were lost), and with what they sent and were sent, so
// that nothing of theirs reaches a task restarted elsewhere. The host's
// connection to the master is not running yet: nothing of these tasks has
// gone out since the master answered.
func (d *Daemon) dropLost(lost []task.TID) {
	if len(lost) == 0 {
		return
	}
	var hs []*hosted
	var resolved []chan struct{}
	d.ht.mu.Lock()
	for _, tid := range lost {
		if h := d.ht.tasks[tid]; h != nil {
			hs = append(hs, h)
		}
		if l := d.ht.moveLost(tid); l != nil {
			resolved = append(resolved, l.resolved)
		}
	}
	d.ht.mu.Unlock()
	for _, ch := range resolved {
		close(ch)
	}
	for _, h := range hs {
		h.quiet.Store(true)
	}
	d.releasePauses(0, lost)
	for _, h := range hs {
		_ = d.Kill(h.tid)
	}
	t := time.NewTimer(d.cfg.MoveTimeout)
	defer t.Stop()
	for _, h := range hs {
		select {
		case <-h.whenEnded():
		case <-t.C:
		case <-d.ctx.Done():
		}
	}
	d.rt.drop(lost...)
	d.arrivals.forget(lost...)
	d.log.Warn("stopped the tasks the master gave up while this host was cut off", "tasks", len(lost))
}

// forgetAbsent forgets the hosts deleted while this host was cut off from
// the master: those missing from the master's list (hosts).
func (d *Daemon) forgetAbsent(hosts []HostInfo) {
	in := map[task.HostID]bool{d.cfg.HostID: true}
	for _, h := range hosts {
		in[h.ID] = true
	}
	n := d.nw
	n.mu.Lock()
	var gone []task.HostID
	for id := range n.hosts {
		if !in[id] {
			gone = append(gone, id)
		}
	}
	n.mu.Unlock()
	for _, id := range gone {
		d.removeHost(id, "deleted while this host was cut off from the master")
	}
}

// joinBackoff is how this host spaces its tries at a busy master
// (Config.JoinBackoffBase, JoinBackoffMax).
func (d *Daemon) joinBackoff() member.Backoff {
	return member.Backoff{Base: d.cfg.JoinBackoffBase, Max: d.cfg.JoinBackoffMax}
}

// retryRand is this daemon's source of jitter for retries: seeded by its
// name, so that hosts refused together spread out, and a test replays.
func (d *Daemon) retryRand() *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(d.cfg.Name))
	h.Write([]byte(d.self.Addr))
	return rand.New(rand.NewPCG(h.Sum64(), 0x9e3779b97f4a7c15))
}

// joinRetry runs try until it succeeds, fails for good, or JoinTimeout has
// passed: a busy master's answer, or no answer within one try's time, is
// tried again after the hint plus jittered exponential backoff.
func (d *Daemon) joinRetry(ctx context.Context, per time.Duration, try func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.JoinTimeout)
	defer cancel()
	rng := d.retryRand()
	for attempt := 0; ; attempt++ {
		tctx, tcancel := context.WithTimeout(ctx, per)
		err := try(tctx)
		timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		tcancel()
		if err == nil {
			return nil
		}
		hint, again := retryJoin(err)
		if !again && !timedOut {
			return err
		}
		wait := d.joinBackoff().Delay(attempt, hint, rng.Uint64())
		d.log.Warn("the master cannot take this host yet; trying again", "error", err, "in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w (interrupted while trying again)", err)
			}
			return fmt.Errorf("%w (gave up after %v)", err, d.cfg.JoinTimeout)
		}
	}
}

// answerBusy tells a host registering over the admission rate to retry
// after wait (see lastWord).
func (d *Daemon) answerBusy(ctx context.Context, conn transport.Conn, st transport.Stream, wait time.Duration) {
	d.lastWord(ctx, conn, st, &hello{Host: d.cfg.HostID, Name: d.cfg.Name, RetryAfter: wait, Err: (&BusyError{RetryAfter: wait}).Error()}, "busy")
}

// lastWord sends h, a handshake's answer that ends the connection (a
// refusal, a busy master's), and lets the peer hang up first, for at most
// HandshakeTimeout: closing the connection at once could overtake the
// answer (QUIC discards unsent stream data on close), and the peer, its
// connection lost before the answer, would take it for a cut and try
// again instead of giving up or waiting as told.
func (d *Daemon) lastWord(ctx context.Context, conn transport.Conn, st transport.Stream, h *hello, why string) {
	if err := writeHello(st, h); err == nil {
		t := time.NewTimer(d.cfg.HandshakeTimeout)
		select {
		case <-conn.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	conn.Close(why)
}

// retryJoin says whether a failed registration is tried again, and after
// what hint: a busy master's answer; a connection the master took and
// then lost before answering; a dial or handshake that timed out (a
// master under a storm answers late, or not at all).
func retryJoin(err error) (hint time.Duration, again bool) {
	var busy *BusyError
	var cut *handshakeCut
	var ne net.Error
	switch {
	case errors.Is(err, ErrRefused):
		return 0, false
	case errors.As(err, &busy):
		return busy.RetryAfter, true
	case errors.As(err, &cut), errors.As(err, &ne) && ne.Timeout(), transport.Overloaded(err):
		return 0, true
	}
	return 0, false
}

// handshakeCut is a handshake whose connection was made and then lost
// before the answer: the master is there, and a join tries again.
type handshakeCut struct{ err error }

func (e *handshakeCut) Error() string { return e.err.Error() }
func (e *handshakeCut) Unwrap() error { return e.err }

// replyBusy turns a refusal that carries RetryAfter into a *BusyError.
func replyBusy(h *hello) error {
	if h.RetryAfter > 0 {
		return &BusyError{RetryAfter: h.RetryAfter}
	}
	return nil
}
