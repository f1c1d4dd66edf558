package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// sendWait says how a send waits for room in a local receiver's mailbox.
type sendWait int

const (
	// waitRoom waits while the receiver's mailbox (or all of this daemon's
	// mailboxes) are over their limits: a task's send.
	waitRoom sendWait = iota
	// noWait delivers at once: the daemon's own notices, which must not
	// block the goroutine that reports an exit.
	noWait
)

// errInterrupted is send's answer, with nothing sent, when intr received
// while it waited for room: a move or checkpoint wants the sender at a
// safe point.
var errInterrupted = errors.New("send interrupted for a safe point")

// send routes one message from a task to a task: into a local mailbox, or
// to the daemon the routing table names. Every message gets the next
// sequence number of its pair, so numbering survives moves. A message to a
// remote task is kept until its daemon acknowledges it; when more than
// Window bytes are unacknowledged for one receiver, send waits (a slow
// receiver slows its senders) until ctx is done. A message to a local task
// waits likewise while the receiver's mailbox holds MailboxHigh bytes or
// more, or this daemon's mailboxes MailboxBudget (unless w is noWait);
// when intr receives meanwhile, send returns errInterrupted, having sent
// nothing. src is the sending task when it is hosted here (nil for the
// daemon's notices): it keeps where its recent local receivers are.
func (d *Daemon) send(ctx context.Context, src *hosted, from, to task.TID, tag int, p task.Payload, w sendWait, intr <-chan struct{}) error {
	return d.sendMsg(ctx, src, from, to, tag, p, w, intr, false)
}

// sendMsg is send. With lent, p's bytes are the sender's memory
// (task.InPlaceSender): a mailbox here takes them as they are, and a
// message that goes to the outbox instead (to another daemon, or held
// while its receiver moves), where it stays until acknowledged, gets a
// copy, made outside the lock, as Send's encoding would have made.
func (d *Daemon) sendMsg(ctx context.Context, src *hosted, from, to task.TID, tag int, p task.Payload, w sendWait, intr <-chan struct{}, lent bool) error {
	if to == 0 || to == task.AnyTask {
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	d.rt.mu.Lock()
	if src != nil && d.sendNear(src, to, tag, p, w) {
		d.rt.mu.Unlock()
		return nil
	}
	var (
		r routing.Route
		h *hosted
	)
	for {
		var wait <-chan struct{}
		if d.rt.outbox.Pending(to) >= d.cfg.Window {
			// Too much is unacknowledged for to: wait for acknowledgements.
			wait = d.rt.freedChan()
		} else {
			r, h = d.placeOf(to)
			switch {
			case r.Host != d.cfg.HostID && d.rt.outbox.PendingHost(r.Host) >= d.cfg.HostWindow:
				// Too much is unacknowledged for to's daemon: likewise.
				wait = d.rt.freedChan()
			case r.Host == d.cfg.HostID && !r.InTransit && h != nil && w == waitRoom:
				wait = h.mb.room(int64(d.cfg.MailboxHigh), d.cfg.MailboxBudget)
			}
		}
		if wait == nil {
			break
		}
		d.rt.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return task.ErrHalted
		case <-intr:
			return errInterrupted
		}
		d.rt.mu.Lock()
	}
	if r.Host == d.cfg.HostID && !r.InTransit {
		if h == nil {
			// Exited (or never started): dropped, as a message to a task
			// that has exited on another host is (its daemon refuses it
			// after Send has returned), so Send means the same wherever
			// the receiver ran.
			d.rt.mu.Unlock()
			return nil
		}
		e := routing.Envelope{From: from, To: to, Seq: d.rt.outbox.Seq(from, to), Tag: int32(tag), Body: p}
		ok := true
		d.rt.inbox.Accept(e, func(x routing.Envelope) {
			ok = ok && h.mb.putEnvelope(x)
		})
		if src != nil {
			src.near.keep(to, h.mb, d.rt.outbox.Counter(from, to), d.rt.inbox.Counter(to, from), d.rt.routes.Version())
		}
		d.rt.mu.Unlock()
		_ = ok // a receiver that exited meanwhile drops it, as above
		return nil
	}
	if d.nw == nil {
		d.rt.mu.Unlock()
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	if !r.InTransit && !d.hostKnown(r.Host) {
		if e, ended := d.routeEndedLocked(to); ended && r.Epoch <= e {
			// On demand, the task's origin or the master has said it
			// ended (lost for good with its host): as under the
			// broadcast, where its route names the deleted host.
			d.rt.mu.Unlock()
			return fmt.Errorf("%v on %v: %w", to, r.Host, task.ErrNoSuchTask)
		}
		if d.routes != nil && !lent && len(p.Data) <= d.cfg.MaxFrame-64 {
			// On demand, a route to a deleted host may be stale (the
			// task restored elsewhere, this host not told): hold the
			// message and ask.
			held := r
			held.InTransit = true
			e := routing.Envelope{From: from, To: to, Seq: d.rt.outbox.Seq(from, to), Tag: int32(tag), Body: p}
			d.rt.outbox.Push(e, held, time.Now())
			var w routeWork
			d.stepCacheLocked(time.Now(), route.Event{Kind: route.EvHeld, TID: to, Using: held}, &w)
			d.rt.mu.Unlock()
			d.performRouteWork(&w)
			return nil
		}
		d.rt.mu.Unlock()
		return fmt.Errorf("%v on %v: %w", to, r.Host, task.ErrNoSuchTask)
	}
	if len(p.Data) > d.cfg.MaxFrame-64 {
		d.rt.mu.Unlock()
		return fmt.Errorf("message of %d bytes to %v: larger than the %d-byte frame limit: %w", len(p.Data), to, d.cfg.MaxFrame, ErrLimit)
	}
	if lent {
		// Nothing is sent yet (no sequence number taken): start again
		// with a copy of the bytes, which are then the message's own.
		d.rt.mu.Unlock()
		p.Data = bytes.Clone(p.Data)
		return d.sendMsg(ctx, src, from, to, tag, p, w, intr, false)
	}
	e := routing.Envelope{From: from, To: to, Seq: d.rt.outbox.Seq(from, to), Tag: int32(tag), Body: p}
	now := time.Now()
	if d.routes != nil {
		d.routes.c.Step(now, route.Event{Kind: route.EvSent, TID: to}) // in use: the last the cache forgets
		if q, _, ok := d.rt.outbox.Route(to); ok && q.Epoch > r.Epoch && q.Host != d.cfg.HostID {
			// The outbox goes by a newer route than the cache, which
			// forgot it (route.Config.MaxRoutes): so does this message.
			r = q
		}
	}
	transmit := d.rt.outbox.Push(e, r, now)
	d.rt.mu.Unlock()
	if !transmit {
		return nil
	}
	peer, err := d.peerFor(ctx, r.Host)
	if err != nil {
		// Kept in the outbox: resent when the host is reachable, dropped
		// if it is deleted.
		d.log.Warn("message held", "to", to, "peer", r.Host, "error", err)
		return nil
	}
	peer.sendEnvelope(&e)
	return nil
}

// nearPeers is a task's record of the receivers it sent to on its own
// daemon, so that its next messages to them skip the lookups of send's
// general path (the routing table, the task table under d.ht.mu, and the
// pair's numbering in the outbox and inbox): the receiver's mailbox, the
// pair's counters and the routing table's version when it was recorded.
// It is guarded by d.rt.mu. Entries are placed by the receiver's TID, a
// later one replacing an earlier one in its place, and a stale one is
// dropped at the next send to its receiver. An entry keeps a mailbox
// alive, never a task's state: a receiver that moved away or exited
// costs at most its empty mailbox until then.
type nearPeers [nearSlots]nearPeer

// nearSlots is how many receivers a task's nearPeers holds.
const nearSlots = 4

type nearPeer struct {
	to      task.TID
	mb      *mailbox // the receiver's, not the receiver: its state is not kept alive
	out, in *routing.Counter
	version uint64
}

// keep records that to is hosted here with mailbox mb, with the pair's
// counters out and in, at the routing table's version.
func (n *nearPeers) keep(to task.TID, mb *mailbox, out, in *routing.Counter, version uint64) {
	n[uint32(to)%nearSlots] = nearPeer{to: to, mb: mb, out: out, in: in, version: version}
}

// sendNear delivers a message from src to to at once when src's record
// says to is hosted here and nothing of theirs is out of order: the route
// unchanged since it was recorded, the pair's counters still the boxes',
// nothing unacknowledged for to past the window, and room in to's mailbox
// (w == waitRoom). It reports false, having done nothing, otherwise: send
// takes its general path. The caller holds d.rt.mu.
//
// A receiver that leaves this daemon (suspended for a move, killed for a
// rollback) is forgotten by the inbox under d.rt.mu, which marks its counter
// gone; one that exits is forgotten likewise after its mailbox is closed,
// and a message put meanwhile is dropped, as the general path drops a
// message to a task that has exited.
func (d *Daemon) sendNear(src *hosted, to task.TID, tag int, p task.Payload, w sendWait) bool {
	n := &src.near[uint32(to)%nearSlots]
	if n.to != to {
		return false
	}
	if n.version != d.rt.routes.Version() || n.out.Gone() || n.in.Gone() {
		*n = nearPeer{} // stale: the general path records it again if it can
		return false
	}
	if d.rt.outbox.Pending(to) >= d.cfg.Window {
		return false
	}
	if w == waitRoom && n.mb.room(int64(d.cfg.MailboxHigh), d.cfg.MailboxBudget) != nil {
		return false
	}
	if _, ok := routing.Local(n.out, n.in); !ok {
		return false
	}
	n.mb.put(envelope{from: src.tid, tag: tag, body: p})
	return true
}

// placeOf is where a message to to goes now: its route, held (InTransit)
// while the task moves through this daemon, and the task if it is hosted
// here. The caller holds the node's lock (d.rt.mu, which is d.ht.mu).
func (d *Daemon) placeOf(to task.TID) (routing.Route, *hosted) {
	r := d.rt.routes.Lookup(to)
	h := d.ht.tasks[to]
	var l *leaving
	var arr *arriving
	if h == nil {
		l, arr = d.ht.moving[to], d.ht.incoming[to]
	}
	switch {
	case h == nil && l != nil && r.Epoch < l.dest.Epoch:
		// Suspended here, moving away, its new route not yet broadcast:
		// hold the message until it is.
		r = l.dest
		r.InTransit = true
	case h == nil && l != nil && r.Host == d.cfg.HostID:
		// Suspended here, its move aborted, the way back known: hold the
		// message until it resumes here.
		r.InTransit = true
	case h == nil && arr != nil && r.Host == d.cfg.HostID:
		// On its way here, and known to be (its new route is out): hold the
		// message until it is restored. Before that it still runs at its
		// origin, and messages go there.
		r = routing.Route{Host: d.cfg.HostID, Epoch: r.Epoch, InTransit: true}
	}
	return r, h
}

func (d *Daemon) hostKnown(h task.HostID) bool {
	if d.nw == nil {
		return h == d.cfg.HostID
	}
	d.nw.mu.Lock()
	defer d.nw.mu.Unlock()
	return d.nw.hosts[h] != nil
}

// receiveMsgs takes a batch of messages from another daemon into the
// mailboxes of the tasks hosted here, acknowledging what was accepted and
// refusing messages for tasks that are not here. With owned, body is
// given away: the messages keep slices of it instead of copies.
func (d *Daemon) receiveMsgs(p *peer, body []byte, owned bool) error {
	var refusals []byte
	var last []routing.Ack // the last message accepted of each pair, in order of first arrival
	d.rt.mu.Lock()
	var nRecv, bRecv int // for the metrics, counted per frame
	var deferred int64   // messages turned away for want of room
	// Claims refused: how many, and the first.
	var bad int
	var badKind routing.ClaimKind
	var badTID task.TID
	var badWhy routing.Verdict
	var badTIDs []task.TID // on demand: the tasks refused claims were about
	judging := judged(p)
	accept := func(e routing.Envelope) error {
		nRecv++
		bRecv += len(e.Body.Data)
		if judging {
			// A message speaks for its sender; a notice (unsequenced)
			// does too (an exit notice for a watch registered after the
			// exit), or is the master's, or is relayed by a host its
			// receiver lived on.
			k, who := routing.ClaimSource, e.From
			v := d.judgeLocked(p, k, who)
			if e.Seq == 0 && v != routing.Allow {
				k, who = routing.ClaimNotice, e.To
				v = d.judgeLocked(p, k, who)
			}
			if v != routing.Allow {
				if bad == 0 {
					badKind, badTID, badWhy = k, who, v
				}
				if d.routes != nil && (len(badTIDs) == 0 || badTIDs[len(badTIDs)-1] != who) {
					badTIDs = append(badTIDs, who)
				}
				bad++
				return nil // neither taken nor acknowledged
			}
		}
		h := d.ht.tasks[e.To]
		_, gone := d.ht.gone[e.To]
		l, arr := d.ht.moving[e.To], d.ht.incoming[e.To]
		back := h == nil && l != nil && d.comingBack(e.To, l)
		switch {
		case h == nil && arr != nil && d.routes != nil && arr.move != 0 && d.rt.routes.Lookup(e.To).Host != d.cfg.HostID:
			// On demand, a prepared arrival keeps only what was sent by
			// the move's route, which the master tells this host before
			// the restore. Before it, the task lives where this host's
			// route says, and the sender goes there (a prepare whose
			// cancel was lost keeps nothing for ever).
			if e.Seq != 0 {
				refusals = routing.AppendRefusal(refusals, routing.Refusal{To: e.To, Route: d.rt.routes.Lookup(e.To)})
			}
			return nil
		case h == nil && arr != nil:
			// On its way here: keep it, unacknowledged, until restored.
			arr.held = append(arr.held, heldMsg{host: p.info.ID, env: e})
			return nil
		case back:
			// Its move aborted and it resumes here: likewise.
			l.held = append(l.held, heldMsg{host: p.info.ID, env: e})
			return nil
		}
		if h == nil && l != nil {
			if e.Seq == 0 { // a notice: pass it on once the move is settled
				d.forwardLater(l, e)
				return nil
			}
			r := l.dest
			r.InTransit = true
			if cur := d.rt.routes.Lookup(e.To); d.routes != nil && cur.Epoch >= l.dest.Epoch && cur.Host != d.cfg.HostID {
				// On demand: the master has set the route, and the
				// destination keeps what comes for the task: the
				// sender need not wait and ask.
				r = cur
			}
			refusals = routing.AppendRefusal(refusals, routing.Refusal{To: e.To, Route: r})
			return nil
		}
		if h == nil {
			if e.Seq == 0 {
				return nil // a notice for a task that is gone
			}
			r := d.rt.routes.Lookup(e.To)
			if d.routes != nil && !(r.Host == d.cfg.HostID && gone) {
				// On demand: the newest route this host knows, or the
				// task's origin (route.EvMiss).
				now := time.Now()
				d.syncCacheLocked(now, e.To)
				for _, x := range d.routes.c.Step(now, route.Event{Kind: route.EvMiss, TID: e.To, Peer: p.info.ID}) {
					if x.Kind == route.DoRefuse {
						refusals = routing.AppendRefusal(refusals, routing.Refusal{To: e.To, Route: x.Route})
					}
				}
				return nil
			}
			if r.Host == d.cfg.HostID && (gone || !r.InTransit) {
				r = routing.Route{} // it has exited: the sender drops its messages
			}
			// Otherwise the route names another host: the task lives on
			// there (moved, or restored there by its job's rollback after
			// its incarnation here was stopped), and the sender follows.
			refusals = routing.AppendRefusal(refusals, routing.Refusal{To: e.To, Route: r})
			return nil
		}
		if e.Seq == 0 {
			h.mb.putEnvelope(e)
			return nil
		}
		// Bounded by bytes: a message that does not fit in the receiver's
		// mailbox or this daemon's mailboxes is turned away
		// unacknowledged, and its sender resends it (routing.Inbox.Admit).
		if !d.rt.inbox.Admit(e, h.mb.memory(), d.mbMem.n.Load(), d.recvLimits()) {
			deferred++
			return nil
		}
		a := d.rt.inbox.Accept(e, func(x routing.Envelope) {
			h.mb.putEnvelope(x)
		})
		last = lastOfPair(last, a)
		return nil
	}
	// Called directly, not through a function value, so that accept and
	// what it captures stay on the stack.
	var err error
	if owned {
		err = routing.DecodeEnvelopesOwned(body, accept)
	} else {
		err = routing.DecodeEnvelopes(body, accept)
	}
	d.rt.mu.Unlock()
	p.ctr.Received(nRecv, bRecv)
	if deferred > 0 {
		d.recvDeferred.Add(deferred)
	}
	if err != nil {
		return err
	}
	for _, a := range last {
		if d.withhold(a.To, p.info.ID, a) {
			continue
		}
		p.ack(a)
	}
	if len(refusals) > 0 {
		p.frame(routing.KindRefuse, refusals)
	}
	if bad > 0 {
		if d.refusedOnDemand(p, "messages", badKind, badTID, badWhy, bad, badTIDs) {
			return nil
		}
		return d.forged(p, "messages", badKind, badTID, badWhy, bad)
	}
	return nil
}

// recvLimits bounds the mailbox memory this daemon gives to messages from
// other daemons (routing.Inbox.Admit): MailboxHigh plus Window in one
// receiver's mailbox (a sender stops at Window unacknowledged and this
// daemon withholds acknowledgements past MailboxHigh, so one sending
// daemon alone never meets this bound; several, or one message larger
// than Window, do), and MailboxBudget in all of them together, counted
// as for MailboxHigh.
func (d *Daemon) recvLimits() routing.RecvLimits {
	return routing.RecvLimits{High: int64(d.cfg.MailboxHigh) + int64(d.cfg.Window), Budget: d.cfg.MailboxBudget}
}

// lastOfPair records a as its pair's latest acknowledgement in acks (a
// frame carries messages of few pairs: a linear search beats a map).
func lastOfPair(acks []routing.Ack, a routing.Ack) []routing.Ack {
	for i := range acks {
		if acks[i].From == a.From && acks[i].To == a.To {
			acks[i].Seq = max(acks[i].Seq, a.Seq)
			return acks
		}
	}
	return append(acks, a)
}

// receiveAcks applies a batch of acknowledgements from p: each speaks for
// its receiving task, which p must host (or have hosted).
func (d *Daemon) receiveAcks(p *peer, body []byte) error {
	d.rt.mu.Lock()
	bad := 0
	var first routing.Ack
	var why routing.Verdict
	judging := judged(p)
	err := routing.DecodeAcks(body, func(a routing.Ack) {
		if judging {
			if v := d.judgeLocked(p, routing.ClaimReceiver, a.To); v != routing.Allow {
				if bad == 0 {
					first, why = a, v
				}
				bad++
				return
			}
		}
		d.rt.outbox.Ack(a) // wakes the senders waiting for room (router.windowFreed)
	})
	d.rt.mu.Unlock()
	if err != nil {
		return err
	}
	if bad > 0 {
		return d.forged(p, "acknowledgements", routing.ClaimReceiver, first.To, why, bad)
	}
	return nil
}

func (d *Daemon) receiveRefusals(p *peer, body []byte) error {
	type resend struct {
		host task.HostID
		envs []routing.Envelope
	}
	var todo []resend
	now := time.Now()
	bad := 0
	var first routing.Refusal
	var why routing.Verdict
	judging := judged(p)
	var w routeWork
	d.rt.mu.Lock()
	err := routing.DecodeRefusals(body, func(rf routing.Refusal) {
		if judging {
			// A refusal speaks for its receiving task: only a host it
			// lives or lived on may say where it went.
			if v := d.judgeLocked(p, routing.ClaimReceiver, rf.To); v != routing.Allow {
				if bad == 0 {
					first, why = rf, v
				}
				bad++
				return
			}
		}
		if d.routes != nil {
			// On demand: the cache learns from the refusal, hands it to
			// the outbox, and asks the task's origin when the refusal
			// names nothing better.
			if using, _, ok := d.rt.outbox.Route(rf.To); ok {
				d.stepCacheLocked(now, route.Event{Kind: route.EvRefused, TID: rf.To, Peer: p.info.ID, Route: rf.Route, Using: using}, &w)
			}
			return
		}
		d.rt.routes.Update(rf.To, rf.Route)
		if rf.Route.Host == 0 {
			d.log.Debug("messages dropped: their receiver has exited", "tid", rf.To, "refused_by", p.name(), "messages", d.rt.outbox.Describe(rf.To))
		}
		if h, envs := d.rt.outbox.Refused(rf, p.info.ID, now); len(envs) > 0 {
			todo = append(todo, resend{h, envs})
		}
	})
	d.rt.mu.Unlock()
	for _, r := range todo {
		d.transmit(r.host, r.envs)
	}
	d.performRouteWork(&w)
	if err != nil {
		return err
	}
	if bad > 0 {
		return d.forged(p, "refusals", routing.ClaimReceiver, first.To, why, bad)
	}
	return nil
}

// transmit sends envelopes (resends) to host h.
func (d *Daemon) transmit(h task.HostID, envs []routing.Envelope) {
	if h == d.cfg.HostID {
		// The receiver is here now: accept them locally.
		d.rt.mu.Lock()
		for _, e := range envs {
			t := d.ht.tasks[e.To]
			if arr := d.ht.incoming[e.To]; t == nil && arr != nil {
				arr.held = append(arr.held, heldMsg{host: d.cfg.HostID, env: e})
			}
			if l := d.ht.moving[e.To]; t == nil && l != nil {
				l.held = append(l.held, heldMsg{host: d.cfg.HostID, env: e})
			}
			if t == nil {
				continue
			}
			a := d.rt.inbox.Accept(e, func(x routing.Envelope) {
				t.mb.putEnvelope(x)
			})
			d.rt.outbox.Ack(a)
		}
		d.rt.mu.Unlock()
		return
	}
	p, err := d.peerFor(d.ctx, h)
	if err != nil {
		d.log.Warn("resend", "peer", h, "error", err)
		return
	}
	for i := range envs {
		p.envelope(&envs[i], false)
	}
}

// resendTo resends, on a new connection to host h, everything
// unacknowledged that is routed there.
func (d *Daemon) resendTo(h task.HostID, p *peer) {
	d.rt.mu.Lock()
	envs := d.rt.outbox.ForHost(h, time.Now())
	d.rt.mu.Unlock()
	for i := range envs {
		p.envelope(&envs[i], false)
	}
}

// applyRoutes installs routes learnt from the master and resends what was
// held for the tasks they concern.
func (d *Daemon) applyRoutes(entries []routing.Entry) {
	type resend struct {
		host task.HostID
		envs []routing.Envelope
	}
	var todo []resend
	now := time.Now()
	d.rt.mu.Lock()
	for _, e := range entries {
		if d.routes != nil {
			// On demand: a route from the master (this host is the
			// task's origin, old or new host), or a move's own step.
			absent := d.absentLocked(e.TID)
			d.forgetEffectsLocked(d.routes.c.Step(now, route.Event{Kind: route.EvSet, TID: e.TID, Route: e.Route, Absent: absent}))
			if ended, ok := d.routes.c.Ended(e.TID); ok && e.Route.Epoch <= ended {
				continue // a route of an incarnation that has ended
			}
			if absent && e.Route.Host == d.cfg.HostID {
				continue // stale: the task is not here nor arriving (route.Event.Absent)
			}
		}
		// The outbox follows the newest route known, even when the table
		// knew it already (from a refusal): messages held for a move
		// whose commit was learnt that way go now.
		d.rt.routes.Update(e.TID, e.Route)
		r := d.rt.routes.Lookup(e.TID)
		if d.ht.incoming[e.TID] != nil && r.Host == d.cfg.HostID {
			continue // what is held here for it is released when it is restored
		}
		if h, envs := d.rt.outbox.Reroute(e.TID, r, now); len(envs) > 0 {
			todo = append(todo, resend{h, envs})
		}
	}
	d.rt.mu.Unlock()
	for _, r := range todo {
		d.transmit(r.host, r.envs)
	}
}

// sendSystem delivers an unsequenced system message (a notification) to
// to, wherever it lives.
func (d *Daemon) sendSystem(from, to task.TID, tag int, p task.Payload) error {
	d.rt.mu.Lock()
	r := d.rt.routes.Lookup(to)
	var (
		h *hosted
		l *leaving
	)
	if r.Host == d.cfg.HostID {
		h, l = d.ht.tasks[to], d.ht.moving[to]
	}
	d.rt.mu.Unlock()
	if r.Host == d.cfg.HostID {
		if h == nil || !h.mb.put(envelope{from: from, tag: tag, body: p}) {
			if l != nil {
				d.forwardLater(l, routing.Envelope{From: from, To: to, Tag: int32(tag), Body: p})
				return nil
			}
			return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
		}
		return nil
	}
	if d.nw == nil {
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	peer, err := d.peerFor(d.ctx, r.Host)
	if err != nil {
		return err
	}
	peer.envelope(&routing.Envelope{From: from, To: to, Tag: int32(tag), Body: p}, false)
	return nil
}

// withhold keeps a's acknowledgement back while the receiving task's
// mailbox is over MailboxHigh: its remote senders then stop once their
// window is full. It reports whether it did.
func (d *Daemon) withhold(to task.TID, host task.HostID, a routing.Ack) bool {
	h := d.ht.task(to)
	if h == nil {
		return false
	}
	if _, bytes := h.mb.stats(); bytes <= d.cfg.MailboxHigh {
		return false
	}
	h.defMu.Lock()
	if h.deferred == nil {
		h.deferred = map[routing.Pair]deferredAck{}
	}
	h.deferred[routing.Pair{From: a.From, To: a.To}] = deferredAck{host: host, ack: a}
	h.hasDef.Store(true)
	h.defMu.Unlock()
	return true
}

// releaseAcks sends the acknowledgements withheld for h once its mailbox
// has drained below half of MailboxHigh.
func (d *Daemon) releaseAcks(h *hosted) {
	h.defMu.Lock()
	if len(h.deferred) == 0 {
		h.defMu.Unlock()
		return
	}
	if _, bytes := h.mb.stats(); bytes > d.cfg.MailboxHigh/2 {
		h.defMu.Unlock()
		return
	}
	byHost := map[task.HostID][]byte{}
	for _, da := range h.deferred {
		byHost[da.host] = routing.AppendAck(byHost[da.host], da.ack)
	}
	h.deferred = nil
	h.hasDef.Store(false)
	h.defMu.Unlock()
	for host, b := range byHost {
		if p, err := d.peerFor(d.ctx, host); err == nil {
			p.frame(routing.KindAcks, b)
		}
	}
}

// forwardLater passes a notice for a task suspended here on once its move
// has committed or aborted.
func (d *Daemon) forwardLater(l *leaving, e routing.Envelope) {
	d.goFunc(func() {
		select {
		case <-l.resolved:
			if err := d.sendSystem(e.From, e.To, int(e.Tag), e.Body); err != nil {
				d.log.Debug("notice not delivered", "to", e.To, "error", err)
			}
		case <-d.ctx.Done():
		}
	})
}

// retransmit resends what has waited too long for an acknowledgement. Over
// QUIC nothing is lost while a connection lives, so this only matters when
// a message could not be handed to a connection (none could be made at the
// time) or one broke; the receiving side drops duplicates.
func (d *Daemon) retransmit(now time.Time) {
	rto := d.cfg.RTO
	var w routeWork
	d.rt.mu.Lock()
	due := d.rt.outbox.Due(now, rto)
	d.routesTickLocked(now, &w)
	d.rt.mu.Unlock()
	for h, envs := range due {
		d.transmit(h, envs)
	}
	d.performRouteWork(&w)
}

// comingBack reports whether task tid, suspended here for a move (l),
// resumes here: the master aborted the move, and the way back (a route to
// this host newer than the move's) is known before the resume step has
// come (the destination refuses naming it). Messages for it are then
// kept for it, as for an arriving task, instead of refused (the node's lock
// held).
func (d *Daemon) comingBack(tid task.TID, l *leaving) bool {
	r := d.rt.routes.Lookup(tid)
	return r.Host == d.cfg.HostID && r.Epoch > l.dest.Epoch
}
