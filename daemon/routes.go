package daemon

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// Route protocols (Config.Routes).
const (
	// RoutesBroadcast: the master sends every route it sets to every
	// host.
	RoutesBroadcast = "broadcast"
	// RoutesDemand (the default): routes on demand (routing/route). The master tells a
	// move's route to the task's origin host, its old host and its new
	// host only; each host keeps a route.Cache; other senders learn the
	// route from a refusal, which names the newest route the refuser
	// knows, or by asking the task's origin (KindRouteAsk, answered by
	// KindRouteAnswer); the master answers for a deleted origin.
	RoutesDemand = "demand"
)

// ErrRoutes: Config.Routes names no route protocol.
var ErrRoutes = errors.New("unknown route protocol")

// checkRoutes checks Config.Routes.
func checkRoutes(s string) error {
	switch s {
	case "", RoutesBroadcast, RoutesDemand:
		return nil
	}
	return fmt.Errorf("%w %q: want %s or %s", ErrRoutes, s, RoutesBroadcast, RoutesDemand)
}

// helloRoutes is this daemon's route protocol as a hello names it: none
// for routes on demand (the default, and what a hello that names none
// means).
func (d *Daemon) helloRoutes() string {
	if d.cfg.Routes == RoutesDemand {
		return ""
	}
	return d.cfg.Routes
}

// onDemand reports whether this daemon's routes are on demand.
func (d *Daemon) onDemand() bool { return d.cfg.Routes == RoutesDemand }

// routeCache is a host's route cache on demand (nil otherwise: under the
// broadcast, and at the master, whose table holds every route). It is
// guarded by d.rt.mu, and the node's table follows it: what it learns is
// recorded there too, so that everything that reads the table (sends,
// claims, placement) sees it.
type routeCache struct {
	c *route.Cache
	// verified is when this host last asked each task's origin after
	// refusing a claim about the task (verifyRoutes), so that it asks
	// at most once per RTO; answered when an answer about the task last
	// came (its knowledge was then the origin's).
	verified, answered map[task.TID]time.Time
}

// maxVerified bounds routeCache.verified: past it, entries older than
// an RTO are dropped.
const maxVerified = 4096

// newRouteCache is host self's route cache under cfg (nil unless routes
// are on demand and this daemon is a host).
func newRouteCache(cfg Config, self task.HostID) *routeCache {
	if cfg.Routes != RoutesDemand || cfg.Master {
		return nil
	}
	return &routeCache{c: route.New(self, route.Config{Retry: cfg.RTO, MaxRoutes: cfg.MaxRoutes}), verified: map[task.TID]time.Time{}, answered: map[task.TID]time.Time{}}
}

// joinedRoutes starts a host's route cache once the master has assigned
// its ID (a rejoin starts a new one: what the old one knew is in the
// table).
func (d *Daemon) joinedRoutes(id task.HostID) {
	d.rt.mu.Lock()
	defer d.rt.mu.Unlock()
	d.routes = newRouteCache(d.cfg, id)
}

// routeStats counts the frames of routes on demand a daemon sent: route
// events told (the master), queries and answers.
type routeStats struct {
	told, asks, answers atomic.Int64
}

// routeWork is what the cache's effects ask of the network, performed
// once d.rt.mu is released: messages to resend, refusals, queries and
// answers to send, per host.
type routeWork struct {
	resend  map[task.HostID][]routing.Envelope
	refuse  map[task.HostID][]byte
	asks    map[task.HostID][]byte
	answers map[task.HostID][]byte
}

func (w *routeWork) add(m *map[task.HostID][]byte, h task.HostID, b func([]byte) []byte) {
	if *m == nil {
		*m = map[task.HostID][]byte{}
	}
	(*m)[h] = b((*m)[h])
}

// stepCacheLocked feeds the cache an event and carries out its effects on
// the table and the outbox; what must go on the network is added to w
// (d.rt.mu held).
func (d *Daemon) stepCacheLocked(now time.Time, e route.Event, w *routeWork) {
	rc := d.routes
	d.syncCacheLocked(now, e.TID)
	fx := rc.c.Step(now, e)
	if e.TID != 0 {
		d.rt.routes.Update(e.TID, rc.c.Lookup(e.TID))
	}
	for _, x := range fx {
		switch x.Kind {
		case route.DoReroute:
			d.rt.routes.Update(x.TID, x.Route)
			r := d.rt.routes.Lookup(x.TID)
			if d.ht.incoming[x.TID] != nil && r.Host == d.cfg.HostID {
				continue // released when it is restored here
			}
			if h, envs := d.rt.outbox.Reroute(x.TID, r, now); len(envs) > 0 {
				w.addResend(h, envs)
			}
		case route.DoRefusal:
			if h, envs := d.rt.outbox.Refused(routing.Refusal{To: x.TID, Route: x.Route}, x.Host, now); len(envs) > 0 {
				w.addResend(h, envs)
			}
		case route.DoRefuse:
			w.add(&w.refuse, x.Host, func(b []byte) []byte {
				return routing.AppendRefusal(b, routing.Refusal{To: x.TID, Route: x.Route})
			})
		case route.DoAsk:
			to := x.Host
			if to == 0 {
				to = MasterID
			}
			w.add(&w.asks, to, func(b []byte) []byte { return route.AppendAsk(b, x.TID) })
		case route.DoAnswer:
			w.add(&w.answers, x.Host, func(b []byte) []byte { return d.appendAnswerLocked(b, x.TID, x.Route) })
		case route.DoForget, route.DoEnded:
			d.forgetLocked(x)
		}
	}
}

// forgetLocked performs the cache's DoForget and DoEnded (d.rt.mu held).
// The table forgets the route too (Evict: the cache's bound; Forget: the
// task ended), unless it holds a route the cache did not forget (one a
// move's own steps recorded) or the task is here, arriving or leaving.
// DoEnded drops the messages the outbox holds for the task by a route of
// the incarnation that ended: they were sent to a task that no longer
// exists (task.ErrNoSuchTask), and dropped as those to a task that has
// exited are.
func (d *Daemon) forgetLocked(x route.Effect) {
	cur := d.rt.routes.Lookup(x.TID)
	here := !d.absentLocked(x.TID)
	switch {
	case here || cur.Epoch == 0: // no entry, or the task is here
	case x.Kind == route.DoForget && cur == x.Route:
		d.rt.routes.Evict(x.TID)
	case x.Kind == route.DoEnded && cur.Epoch <= x.Route.Epoch:
		d.rt.routes.Forget(x.TID)
	}
	if x.Kind != route.DoEnded || here {
		return
	}
	if r, _, ok := d.rt.outbox.Route(x.TID); ok && r.Epoch <= x.Route.Epoch {
		desc := d.rt.outbox.Describe(x.TID)
		d.rt.outbox.DropReceiver(x.TID)
		d.log.Log(d.ctx, d.lossLevel(), "messages dropped: their receiver has ended", "tid", x.TID, "messages", desc, "error", task.ErrNoSuchTask)
	}
}

// syncCacheLocked brings the cache's route for tid up to the table's: a
// move's own steps (commit, resume, cancel), a restore and a join record
// routes in the table alone (d.rt.mu held). What the cache forgets to
// make room the table forgets too.
func (d *Daemon) syncCacheLocked(now time.Time, tid task.TID) {
	if tid != 0 {
		d.forgetEffectsLocked(d.routes.c.Step(now, route.Event{Kind: route.EvSet, TID: tid, Route: d.rt.routes.Lookup(tid), Absent: d.absentLocked(tid)}))
	}
}

// absentLocked reports whether tid is neither here nor arriving nor
// leaving here (d.rt.mu held): a route naming this host is then stale
// (route.Event.Absent).
func (d *Daemon) absentLocked(tid task.TID) bool {
	return d.ht.tasks[tid] == nil && d.ht.incoming[tid] == nil && d.ht.moving[tid] == nil
}

// forgetEffectsLocked performs the DoForget effects among fx (d.rt.mu
// held): the effects of a step whose other effects the caller needs not.
func (d *Daemon) forgetEffectsLocked(fx []route.Effect) {
	for _, x := range fx {
		if x.Kind == route.DoForget {
			d.forgetLocked(x)
		}
	}
}

func (w *routeWork) addResend(h task.HostID, envs []routing.Envelope) {
	if w.resend == nil {
		w.resend = map[task.HostID][]routing.Envelope{}
	}
	w.resend[h] = append(w.resend[h], envs...)
}

// performRouteWork sends what w holds (d.rt.mu not held).
func (d *Daemon) performRouteWork(w *routeWork) {
	for _, h := range slices.Sorted(maps.Keys(w.resend)) {
		d.transmit(h, w.resend[h])
	}
	d.sendRouteFrames(routing.KindRefuse, w.refuse)
	d.sendRouteFrames(routing.KindRouteAsk, w.asks)
	d.sendRouteFrames(routing.KindRouteAnswer, w.answers)
}

// sendRouteFrames sends each host its batch of kind k (KindRefuse,
// KindRouteAsk or KindRouteAnswer), split into frames within the frame
// limit, each a whole number of the kind's records. Nothing goes to this
// daemon itself: its cache neither asks nor refuses it.
func (d *Daemon) sendRouteFrames(k routing.Kind, batches map[task.HostID][]byte) {
	size := routing.RefusalSize // KindRefuse, KindRouteAnswer
	if k == routing.KindRouteAsk {
		size = route.AskSize
	}
	most := max(size, (d.cfg.MaxFrame-64)/size*size)
	for _, h := range slices.Sorted(maps.Keys(batches)) {
		b := batches[h]
		if h == d.cfg.HostID || d.nw == nil {
			continue
		}
		p, err := d.peerFor(d.ctx, h)
		if err != nil {
			d.log.Debug("route frame not sent", "kind", k, "peer", h, "error", err)
			continue
		}
		for len(b) > 0 {
			n := min(len(b), most)
			p.frame(k, b[:n])
			b = b[n:]
			switch k {
			case routing.KindRouteAsk:
				d.rstats.asks.Add(1)
			case routing.KindRouteAnswer:
				d.rstats.answers.Add(1)
			}
		}
	}
}

// appendAnswerLocked appends the answer for tid's route r to b: the
// route (host 0: the task has ended), then the hosts the task lived on
// before it, newest first, each as a route of epoch 0 (at most
// routing.MaxPast; a route of epoch 0 names the origin, so these cannot
// be taken for one): a host that was not told of the task's moves then
// accepts what the task's old hosts resend for it (routing.Judge).
// d.rt.mu held.
func (d *Daemon) appendAnswerLocked(b []byte, tid task.TID, r routing.Route) []byte {
	b = routing.AppendRefusal(b, routing.Refusal{To: tid, Route: r})
	for _, h := range d.rt.routes.Past(tid) {
		if h != tid.Host() && h != r.Host {
			b = routing.AppendRefusal(b, routing.Refusal{To: tid, Route: routing.Route{Host: h}})
		}
	}
	return b
}

// pastRecord reports whether a record of a route answer names a host the
// task lived on before (epoch 0, a host other than the origin) rather
// than its route.
func pastRecord(rf routing.Refusal) bool {
	return rf.Route.Epoch == 0 && !rf.Route.InTransit && rf.Route.Host != 0 && rf.Route.Host != rf.To.Host()
}

// receiveRouteAsks answers a KindRouteAsk frame from p: a host answers
// for the tasks it is the origin of (an ask about another's is refused
// as malformed: the cache asks only origins), the master for any task.
func (d *Daemon) receiveRouteAsks(p *peer, body []byte) error {
	if !d.onDemand() || !judged(p) {
		return fmt.Errorf("%v frame from %s: %w", routing.KindRouteAsk, p.name(), routing.ErrMalformed)
	}
	// The master answers from its table, which holds every route; a host
	// from its table too, which holds what its cache knows and the routes
	// a move's own steps set (route.EvAsk's answer, and the task's past).
	var ans []byte
	var stray task.TID
	d.rt.mu.Lock()
	if !d.cfg.Master && d.routes == nil {
		d.rt.mu.Unlock()
		return fmt.Errorf("%v frame at a daemon without a route cache: %w", routing.KindRouteAsk, routing.ErrMalformed)
	}
	err := route.DecodeAsks(body, func(tid task.TID) {
		if !d.cfg.Master && tid.Host() != d.cfg.HostID {
			if stray == 0 {
				stray = tid
			}
			return
		}
		if e, ok := d.endedLocked(tid); ok {
			// Ended, or lost for good: the asker drops its messages.
			// The hosts it lived on still follow: what they resend of
			// what it sent is its own.
			ans = d.appendAnswerLocked(ans, tid, routing.Route{Epoch: e})
			return
		}
		ans = d.appendAnswerLocked(ans, tid, d.rt.routes.Lookup(tid))
	})
	d.rt.mu.Unlock()
	switch {
	case err != nil:
		return err
	case stray != 0:
		return fmt.Errorf("%v frame from %s asks for %v, whose origin is %v: %w", routing.KindRouteAsk, p.name(), stray, stray.Host(), routing.ErrMalformed)
	}
	d.sendRouteFrames(routing.KindRouteAnswer, map[task.HostID][]byte{p.info.ID: ans})
	return nil
}

// errForgedAnswer: a route answer from a host that is neither the task's
// origin nor the master.
var errForgedAnswer = errors.New("a task's route is told by its origin host or the master")

// receiveRouteAnswers takes a KindRouteAnswer frame from p. Only a task's
// origin host, or the master, answers for its route: an answer about
// another host's task closes the connection (nothing of the frame is
// taken).
func (d *Daemon) receiveRouteAnswers(p *peer, body []byte) error {
	if !d.onDemand() || d.cfg.Master || !judged(p) {
		return fmt.Errorf("%v frame from %s: %w", routing.KindRouteAnswer, p.name(), routing.ErrMalformed)
	}
	var answers []routing.Refusal
	var forged task.TID
	bad := false
	err := routing.DecodeRefusals(body, func(rf routing.Refusal) {
		if (rf.To.Host() == 0 || p.info.ID != MasterID && rf.To.Host() != p.info.ID) && !bad {
			forged, bad = rf.To, true
		}
		answers = append(answers, rf)
	})
	switch {
	case err != nil:
		return fmt.Errorf("%v frame: %w", routing.KindRouteAnswer, err)
	case bad:
		return fmt.Errorf("%v frame from %s about %v: %w", routing.KindRouteAnswer, p.name(), forged, errForgedAnswer)
	}
	var w routeWork
	now := time.Now()
	d.rt.mu.Lock()
	for i := len(answers) - 1; i >= 0; i-- { // the past, oldest first
		if rf := answers[i]; pastRecord(rf) {
			d.rt.routes.AddPast(rf.To, rf.Route.Host)
		}
	}
	for _, rf := range answers {
		if d.routes != nil && !pastRecord(rf) {
			d.stepCacheLocked(now, route.Event{Kind: route.EvAnswer, TID: rf.To, Route: rf.Route}, &w)
			if _, ok := d.routes.verified[rf.To]; ok {
				d.routes.answered[rf.To] = now
			}
		}
	}
	d.rt.mu.Unlock()
	d.performRouteWork(&w)
	return nil
}

// verifyRoutes asks the origins of tids for their routes: this host
// refused claims about them (a message from a host it does not know the
// sender lives on), and on demand it may not have been told of the
// sender's move. The answer updates the table, so that the sender's
// resend is judged on the task's current route. Each task is asked at
// most once per RTO, and not at all at its origin (which the master tells
// of every move); a lost answer is asked again at the next refused
// resend.
func (d *Daemon) verifyRoutes(tids []task.TID) {
	var w routeWork
	now := time.Now()
	d.rt.mu.Lock()
	rc := d.routes
	if rc == nil {
		d.rt.mu.Unlock()
		return
	}
	if len(rc.verified) > maxVerified {
		for t, at := range rc.verified {
			if now.Sub(at) >= d.cfg.RTO {
				delete(rc.verified, t)
				delete(rc.answered, t)
			}
		}
	}
	for _, tid := range tids {
		if tid.Host() == d.cfg.HostID || tid.Host() == 0 {
			continue
		}
		if at, ok := rc.verified[tid]; ok && now.Sub(at) < d.cfg.RTO {
			continue
		}
		if len(rc.verified) > 2*maxVerified {
			break // a flood of claims about tasks: ask no more for now
		}
		rc.verified[tid] = now
		to := rc.c.Asked(tid)
		if to == 0 {
			to = MasterID
		}
		w.add(&w.asks, to, func(b []byte) []byte { return route.AppendAsk(b, tid) })
	}
	d.rt.mu.Unlock()
	d.sendRouteFrames(routing.KindRouteAsk, w.asks)
}

// refusedOnDemand handles claims of p's frame refused about tasks (the
// first about tid): on demand, at a host that is not tid's origin, the
// judge's knowledge may be stale (nobody told it of the move), so the
// origins are asked (verifyRoutes). Until the origin's answer about tid
// has come, the refusals are logged and counted, but not against p's
// connection (it reports true); once it has, they count against it as
// anywhere (false: the caller calls forged).
func (d *Daemon) refusedOnDemand(p *peer, what string, k routing.ClaimKind, tid task.TID, v routing.Verdict, n int, tids []task.TID) bool {
	if !d.onDemand() || tid.Host() == d.cfg.HostID || v != routing.RefuseElsewhere {
		return false
	}
	d.rt.mu.Lock()
	rc := d.routes
	var fresh bool
	if rc != nil {
		asked, ok := rc.verified[tid]
		at, got := rc.answered[tid]
		fresh = ok && got && !at.Before(asked)
	}
	d.rt.mu.Unlock()
	if rc == nil {
		return false
	}
	d.verifyRoutes(tids)
	if fresh {
		return false
	}
	d.noteRefused(p, what, k, tid, v, n)
	return true
}

// routesTickLocked asks again the queries that are due (the
// retransmission tick; d.rt.mu held).
func (d *Daemon) routesTickLocked(now time.Time, w *routeWork) {
	if d.routes != nil && d.routes.c.Queries() > 0 {
		d.stepCacheLocked(now, route.Event{Kind: route.EvTick}, w)
	}
}

// routesHostLost tells the cache that host id is deleted: queries for its
// tasks go to the master from now on.
func (d *Daemon) routesHostLost(id task.HostID) {
	if !d.onDemand() {
		return
	}
	var w routeWork
	d.rt.mu.Lock()
	delete(d.rt.backAt, id) // deleted again (the master's): a new return, a new epoch
	if d.routes != nil {
		now := time.Now()
		d.stepCacheLocked(now, route.Event{Kind: route.EvHostLost, Peer: id}, &w)
		for _, tid := range d.rt.outbox.Receivers() {
			if r, _, ok := d.rt.outbox.Route(tid); ok && r.Host == id {
				d.stepCacheLocked(now, route.Event{Kind: route.EvHeld, TID: tid, Using: r}, &w)
			}
		}
	}
	d.rt.mu.Unlock()
	d.performRouteWork(&w)
}

// routesHostBack tells the cache that host id, deleted, is back
// (readmitted under its old ID; the master's host-back event), with the
// master's epoch clock at its return: routes naming it set since are
// valid again, older ones stay of the incarnation deleted (route.EvHostUp).
func (d *Daemon) routesHostBack(id task.HostID, floor uint64) {
	if !d.onDemand() || id == d.cfg.HostID {
		return
	}
	var w routeWork
	d.rt.mu.Lock()
	if d.routes != nil {
		d.stepCacheLocked(time.Now(), route.Event{Kind: route.EvHostUp, Peer: id, Route: routing.Route{Epoch: floor}}, &w)
	}
	d.rt.mu.Unlock()
	d.performRouteWork(&w)
}

// routesHostBackMaster is the master, on demand, taking back host info
// after its deletion: it records its epoch clock now (every route it sets
// naming the host from now on is newer), so that only routes from before
// count as lost with the old incarnation (endedLocked), and tells every
// host (evHostBack), after the host list that names it again.
func (d *Daemon) routesHostBackMaster(info HostInfo) {
	if !d.onDemand() || d.nw == nil {
		return
	}
	floor := d.mv.epoch()
	d.rt.mu.Lock()
	if d.rt.backAt == nil {
		d.rt.backAt = map[task.HostID]uint64{}
	}
	d.rt.backAt[info.ID] = floor
	if _, ok := d.rt.lostFinal[info.ID]; ok {
		d.rt.lostFinal[info.ID] = floor
	}
	d.rt.mu.Unlock()
	// The master's peers never include itself, so every host but the
	// one back is every peer but that one.
	d.broadcast(&event{Kind: evHostBack, Host: &info, Epoch: floor}, info.ID)
}

// tellRoute is the master telling route e on demand: recorded in its own
// table, and sent to each of hosts (once each; the master itself and
// hosts not connected left out), not to every host.
func (d *Daemon) tellRoute(es []routing.Entry, hosts []task.HostID) {
	d.applyRoutes(es)
	if d.nw == nil {
		return
	}
	b, err := encodeMsg(&event{Kind: evRoute, Routes: es})
	if err != nil {
		d.log.Error("encode event", "error", err)
		return
	}
	hosts = slices.Clone(hosts)
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	n := d.nw
	var ps []*peer
	n.mu.Lock()
	for _, h := range hosts {
		if p := n.peers[h]; p != nil && h != d.cfg.HostID {
			ps = append(ps, p)
		}
	}
	n.mu.Unlock()
	for _, p := range ps {
		p.frame(routing.KindEvent, b)
	}
	d.rstats.told.Add(int64(len(ps)))
}

// endedLocked reports whether the task tid has ended, as the authority
// for its route knows (d.rt.mu held), and the epoch of the route it ended
// on: at its origin host, an end the cache remembers (the task exited
// here, or the master said it ended elsewhere); at the master, a task
// whose entry the table forgot when it ended (routing.Table.Ended), or
// whose route names a host deleted with no rollback to restore what it
// held (lost for good, routesLossFinal). A route newer than the end is a
// later incarnation's.
func (d *Daemon) endedLocked(tid task.TID) (uint64, bool) {
	r := d.rt.routes.Lookup(tid)
	if d.cfg.Master {
		if e, ok := d.rt.routes.Ended(tid); ok {
			return e, true // before the loss of its origin: the epoch it ended on
		}
		if f, ok := d.rt.lostFinal[r.Host]; ok && r.Epoch <= f && (r.Epoch > 0 || f == math.MaxUint64) {
			// Of the incarnation lost (a route from before its return,
			// epoch 0 aside: a task born on the new one).
			return r.Epoch, true
		}
		return 0, false
	}
	if d.routes == nil || !d.absentLocked(tid) {
		return 0, false
	}
	if e, ok := d.routes.c.Ended(tid); ok && r.Epoch <= e {
		return e, true
	}
	return 0, false
}

// routesEnded tells a host's route cache that task tid, hosted here, has
// ended (exited or killed) on its current route: the cache forgets its
// route, and at its origin answers queries with its end. A task that
// never moved needs nothing: no host holds a route of it, and its origin
// refuses what comes for it as exited.
func (d *Daemon) routesEnded(tid task.TID) {
	var w routeWork
	d.rt.mu.Lock()
	if r := d.rt.routes.Lookup(tid); d.routes != nil && r.Epoch > 0 {
		d.stepCacheLocked(time.Now(), route.Event{Kind: route.EvEnded, TID: tid, Route: routing.Route{Epoch: r.Epoch}}, &w)
	}
	d.rt.mu.Unlock()
	d.performRouteWork(&w)
}

// tellEnded is the master, on demand, telling the origin host of tasks
// that ended elsewhere (rs: each task's last route) of their ends, as
// route answers of host 0 at the route's epoch: the origin forgets their
// routes and answers queries with the end. A task that ended on its
// origin, or whose origin is the master or is not in the virtual
// machine, needs none.
func (d *Daemon) tellEnded(rs []routing.Entry) {
	if !d.onDemand() || d.nw == nil {
		return
	}
	by := map[task.HostID][]byte{}
	for _, e := range rs {
		o := e.TID.Host()
		if e.Route.Host == o || o == d.cfg.HostID || !d.hostKnown(o) {
			continue
		}
		by[o] = routing.AppendRefusal(by[o], routing.Refusal{To: e.TID, Route: routing.Route{Epoch: e.Route.Epoch}})
	}
	d.sendRouteFrames(routing.KindRouteAnswer, by)
}

// routesLossFinal is the master marking the losses of deleted host id
// final, once the jobs that lost tasks with it have rolled back (what a
// rollback restored has a route elsewhere): a query for a task whose
// route still names id is answered "ended", and the origin hosts of the
// tasks lost there that moved are told so (tellEnded).
func (d *Daemon) routesLossFinal(id task.HostID) {
	if !d.onDemand() {
		return
	}
	d.rt.mu.Lock()
	if d.rt.lostFinal == nil {
		d.rt.lostFinal = map[task.HostID]uint64{}
	}
	f, back := d.rt.backAt[id]
	if !back {
		f = math.MaxUint64
	}
	d.rt.lostFinal[id] = f
	var lost []routing.Entry
	for _, e := range d.rt.routes.Entries() {
		if e.Route.Host == id && e.Route.Epoch <= f {
			lost = append(lost, e)
		}
	}
	d.rt.mu.Unlock()
	d.tellEnded(lost)
}

// routeEndedLocked reports whether this host's route cache remembers that
// tid ended, and the epoch of the route it ended on (d.rt.mu held).
func (d *Daemon) routeEndedLocked(tid task.TID) (uint64, bool) {
	if d.routes == nil {
		return 0, false
	}
	return d.routes.c.Ended(tid)
}
