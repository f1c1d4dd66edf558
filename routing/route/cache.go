package route

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// Config is what a Cache needs of the daemon's configuration.
type Config struct {
	// Retry is how long an unanswered (or unhelpful) query to a task's
	// origin waits before it is asked again.
	Retry time.Duration
	// MaxRoutes bounds the routes the cache has learnt (DefaultMaxRoutes
	// when 0): past it, the least recently used of those it may forget
	// go (DoForget). It may forget a route that is not its authority's,
	// does not name this host and has no query open: a sender that goes
	// by an older route is refused and learns it again. MaxRoutes bounds
	// the ended tasks the cache remembers, too.
	MaxRoutes int
}

// DefaultMaxRoutes is Config.MaxRoutes when it is 0.
const DefaultMaxRoutes = 1 << 16

// maxRoutes is cfg's bound.
func (cfg Config) maxRoutes() int {
	if cfg.MaxRoutes <= 0 {
		return DefaultMaxRoutes
	}
	return cfg.MaxRoutes
}

// Cache is one host's routes: the authoritative route of every task whose
// origin it is (the host in the task's TID), and the routes it has learnt
// of other tasks, from the master (as a move's origin, old or new host),
// from refusals and from origins' answers, at most Config.MaxRoutes of
// those it may forget. It also holds the queries it has outstanding at
// origins, and the ends of tasks it has heard of (EvEnded), at most
// Config.MaxRoutes. It is pure and not safe for concurrent use.
type Cache struct {
	self   task.HostID
	cfg    Config
	routes map[task.TID]entry
	use    uint64 // counts the uses of entries: entry.used orders them
	asks   map[task.TID]*ask
	lost   map[task.HostID]bool // hosts deleted from the virtual machine
	// back holds the hosts deleted that came back (EvHostUp), each with
	// the epoch clock at its return: a route naming it at an epoch up to
	// that one (but 0) is of the incarnation deleted.
	back map[task.HostID]uint64
	// ended holds the ended tasks this host has heard of, each with the
	// epoch of the route it ended on; endedOrder lists them oldest first
	// (with those since dropped from ended, skipped), to forget the
	// oldest past Config.MaxRoutes.
	ended      map[task.TID]uint64
	endedOrder []task.TID
}

// entry is a route the cache holds, and when it was last used (a count of
// uses, for forgetting the least recently used).
type entry struct {
	r    routing.Route
	used uint64
}

// ask is a query outstanding at a task's origin: the sender's messages are
// stuck on route stuck (held, or refused by a host that knows nothing
// newer) until a route that supersedes it is learnt.
type ask struct {
	stuck routing.Route
	due   time.Time
}

// New returns the route cache of host self: it knows no route, so every
// task lives at its origin, at epoch 0.
func New(self task.HostID, cfg Config) *Cache {
	return &Cache{self: self, cfg: cfg, routes: map[task.TID]entry{}, asks: map[task.TID]*ask{}, lost: map[task.HostID]bool{}, back: map[task.HostID]uint64{}, ended: map[task.TID]uint64{}}
}

// Lookup returns the newest route the cache knows for tid: its entry, or
// the origin at epoch 0.
func (c *Cache) Lookup(tid task.TID) routing.Route {
	if e, ok := c.routes[tid]; ok {
		return e.r
	}
	return routing.Route{Host: tid.Host()}
}

// Ended reports whether the cache has heard that tid ended (EvEnded, an
// answer or refusal saying so) and knows no route of it since, and the
// epoch of the route it ended on.
func (c *Cache) Ended(tid task.TID) (uint64, bool) {
	e, ok := c.ended[tid]
	return e, ok
}

// EndedLen is the number of ended tasks the cache remembers.
func (c *Cache) EndedLen() int { return len(c.ended) }

// Authority reports whether this host is tid's origin, the authority for
// its route.
func (c *Cache) Authority(tid task.TID) bool { return tid.Host() == c.self }

// Asked is the host a query for tid goes to: its origin, or the master
// (host 0, which holds every route) once the origin has been deleted,
// even after it came back (EvHostUp): its new incarnation does not know
// the routes of the tasks it was the origin of before, nor their ends.
func (c *Cache) Asked(tid task.TID) task.HostID {
	if _, back := c.back[tid.Host()]; c.lost[tid.Host()] || back {
		return 0
	}
	return tid.Host()
}

// Lost reports whether host h has been deleted (EvHostLost) and has not
// come back (EvHostUp).
func (c *Cache) Lost(h task.HostID) bool { return c.lost[h] }

// Gone reports whether route r leads nowhere: it names a host deleted
// that has not come back, or one that came back at an epoch of the
// incarnation deleted (a task's route from before the return; epoch 0,
// a task that never moved from its origin, excepted: the origin refuses
// what it lacks). A sender holds its messages and asks (EvHeld) instead
// of sending them by such a route.
func (c *Cache) Gone(r routing.Route) bool {
	if c.lost[r.Host] {
		return true
	}
	f, back := c.back[r.Host]
	return back && r.Epoch > 0 && r.Epoch <= f
}

// Len is the number of routes the cache holds.
func (c *Cache) Len() int { return len(c.routes) }

// Queries is the number of queries outstanding at origins.
func (c *Cache) Queries() int { return len(c.asks) }

// Asking reports whether a query for tid is outstanding.
func (c *Cache) Asking(tid task.TID) bool { _, ok := c.asks[tid]; return ok }

// Supersedes reports whether route r is newer than cur: a larger epoch,
// or the same epoch committing a move that was in transit. It is the
// order of routing.Table and routing.Outbox.
func Supersedes(r, cur routing.Route) bool {
	return r.Epoch > cur.Epoch ||
		(r.Epoch == cur.Epoch && cur.InTransit && !r.InTransit && r.Host == cur.Host)
}

// learn records r for tid if it is newer than what the cache holds (and
// than the route tid ended on, if it has), and reports whether it did. It
// settles a query that r answers. A new entry past Config.MaxRoutes makes
// the cache forget the least recently used it may (forgetOld).
func (c *Cache) learn(tid task.TID, r routing.Route, out *[]Effect) bool {
	if r.Host == 0 || !Supersedes(r, c.Lookup(tid)) {
		return false
	}
	if e, ok := c.ended[tid]; ok {
		if r.Epoch <= e {
			return false // a route of the incarnation that ended
		}
		delete(c.ended, tid) // restored (a job's rollback)
	}
	_, had := c.routes[tid]
	c.use++
	c.routes[tid] = entry{r: r, used: c.use}
	if a := c.asks[tid]; a != nil && Supersedes(r, a.stuck) {
		delete(c.asks, tid)
	}
	if !had && len(c.routes) > c.cfg.maxRoutes() {
		c.forgetOld(tid, out)
	}
	return true
}

// touch marks tid's entry used now.
func (c *Cache) touch(tid task.TID) {
	if e, ok := c.routes[tid]; ok {
		c.use++
		e.used = c.use
		c.routes[tid] = e
	}
}

// pinned reports whether the cache must keep tid's entry: it is this
// host's authority's, it names this host (the task lives here, or is on
// its way), or a query for tid is open.
func (c *Cache) pinned(tid task.TID, e entry) bool {
	return c.Authority(tid) || e.r.Host == c.self || c.asks[tid] != nil
}

// forgetOld forgets the least recently used entries the cache may, down
// to seven eighths of Config.MaxRoutes (so that it does not sort its
// entries at every new one), each with a DoForget, in TID order; keep
// (the entry just learnt) stays.
func (c *Cache) forgetOld(keep task.TID, out *[]Effect) {
	limit := c.cfg.maxRoutes()
	type cand struct {
		tid  task.TID
		used uint64
	}
	var cs []cand
	for tid, e := range c.routes {
		if tid != keep && !c.pinned(tid, e) {
			cs = append(cs, cand{tid, e.used})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Compare(a.used, b.used) })
	n := min(len(cs), len(c.routes)-limit+limit/8)
	gone := make([]Effect, 0, n)
	for _, x := range cs[:max(n, 0)] {
		gone = append(gone, Effect{Kind: DoForget, TID: x.tid, Route: c.routes[x.tid].r})
		delete(c.routes, x.tid)
	}
	slices.SortFunc(gone, func(a, b Effect) int { return cmp.Compare(a.TID, b.TID) })
	*out = append(*out, gone...)
}

// end records that tid ended on a route of epoch e (unless the cache
// knows a newer route, or has a query stuck on one: a later incarnation,
// restored by a job's rollback): its entry and query go, the end is remembered (at most Config.MaxRoutes ends,
// the oldest forgotten first), and DoEnded tells the shell to drop what
// it holds for that incarnation.
func (c *Cache) end(tid task.TID, e uint64, out []Effect) []Effect {
	if a := c.asks[tid]; c.Lookup(tid).Epoch > e || a != nil && a.stuck.Epoch > e {
		return out
	}
	delete(c.routes, tid)
	delete(c.asks, tid)
	if old, ok := c.ended[tid]; !ok || old < e {
		if !ok {
			c.endedOrder = append(c.endedOrder, tid)
		}
		c.ended[tid] = e
	}
	for len(c.ended) > c.cfg.maxRoutes() {
		old := c.endedOrder[0]
		c.endedOrder = c.endedOrder[1:]
		delete(c.ended, old)
	}
	if len(c.endedOrder) > 2*len(c.ended)+16 {
		// Drop what a restore took out of ended, keeping the order.
		c.endedOrder = slices.DeleteFunc(c.endedOrder, func(t task.TID) bool { _, ok := c.ended[t]; return !ok })
	}
	return append(out, Effect{Kind: DoEnded, TID: tid, Route: routing.Route{Epoch: e}})
}

// EventKind is the kind of an Event.
type EventKind uint8

// Events of a Cache.
const (
	// EvSet: the master tells this host (tid's origin, old or new host)
	// of a move's route, Route.
	EvSet EventKind = iota + 1
	// EvAnswer: tid's origin answers a query with Route.
	EvAnswer
	// EvRefused: host Peer refused messages for tid, naming Route; Using
	// is the route the outbox sent them by (routing.Outbox.Route).
	EvRefused
	// EvMiss: messages for tid came from host Peer and tid is neither
	// here nor moving here or away: they are refused.
	EvMiss
	// EvAsk: host Peer asks this host, tid's origin, for tid's route.
	EvAsk
	// EvHeld: the outbox holds messages for tid on route Using (it learnt
	// an in-transit route, or a send found the task moving away from
	// here): its origin is asked when the move commits.
	EvHeld
	// EvForget: tid has exited, or this host no longer sends to it: its
	// route and query go (an origin keeps its authority's entry until
	// the task has exited).
	EvForget
	// EvTick: the clock; queries due are asked again.
	EvTick
	// EvHostLost: the master has deleted host Peer. Queries for the tasks
	// it was the origin of go to the master from now on, and those open
	// are asked there at once.
	EvHostLost
	// EvEnded: tid has ended on a route of epoch Route.Epoch: it exited
	// or was killed here, or the master says it ended elsewhere or was
	// lost for good with its host (no rollback restored it). Its route
	// goes, its end is remembered (an origin answers queries and a host
	// refuses messages with it: a route of host 0 at that epoch), and
	// DoEnded drops what is held for it. An answer of host 0 (from the
	// origin or the master), and a refusal of host 0 from the origin
	// naming an epoch no older than the route the messages went by, are
	// the same.
	EvEnded
	// EvSent: the shell sent a message to tid by the cache's route: its
	// entry is the last the cache forgets.
	EvSent
	// EvHostUp: host Peer, deleted, is in the virtual machine again (a
	// new incarnation under its old ID, as daemon/membership.go's readmit
	// takes it back), and Route.Epoch is the master's epoch clock at its
	// return: every route the master sets naming it from now on is newer.
	// A route naming it is valid again only past that epoch (or at epoch
	// 0: a task born there that never moved, which the host refuses if
	// it lacks it); an older one is of the incarnation deleted, and goes
	// on leading nowhere (Gone). Queries for the tasks it is the origin
	// of still go to the master. A query open on a route that is valid
	// again is settled: the messages go by it (DoReroute).
	EvHostUp
)

var eventNames = [...]string{"", "set", "answer", "refused", "miss", "ask", "held", "forget", "tick", "host-lost", "ended", "sent", "host-up"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one input of a Cache.
type Event struct {
	Kind  EventKind
	TID   task.TID
	Route routing.Route // EvSet, EvAnswer, EvRefused: the route named; EvEnded: its epoch
	Using routing.Route // EvRefused, EvHeld: the outbox's route for tid
	Peer  task.HostID   // EvRefused, EvMiss, EvAsk: the other host
	// Absent (EvSet): the shell says the task is neither here nor
	// arriving nor leaving here, so a route naming this host is stale (a
	// delayed route of a move that was cancelled or that it has left by
	// since, whose newer route the cache may have forgotten) and is not
	// taken.
	Absent bool
}

func (e Event) String() string {
	switch e.Kind {
	case EvTick:
		return "tick"
	case EvSet, EvAnswer:
		return fmt.Sprintf("%v %v %s", e.Kind, e.TID, fmtRoute(e.Route))
	case EvRefused:
		return fmt.Sprintf("%v %v by %v naming %s using %s", e.Kind, e.TID, e.Peer, fmtRoute(e.Route), fmtRoute(e.Using))
	case EvHeld:
		return fmt.Sprintf("%v %v using %s", e.Kind, e.TID, fmtRoute(e.Using))
	case EvMiss, EvAsk:
		return fmt.Sprintf("%v %v from %v", e.Kind, e.TID, e.Peer)
	case EvHostLost:
		return fmt.Sprintf("%v %v", e.Kind, e.Peer)
	case EvHostUp:
		return fmt.Sprintf("%v %v above e%d", e.Kind, e.Peer, e.Route.Epoch)
	case EvEnded:
		return fmt.Sprintf("%v %v e%d", e.Kind, e.TID, e.Route.Epoch)
	}
	return fmt.Sprintf("%v %v", e.Kind, e.TID)
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Effects of a Cache.
const (
	// DoReroute: a newer route is known; the shell calls
	// routing.Outbox.Reroute(TID, Route).
	DoReroute EffectKind = iota + 1
	// DoRefusal: the shell hands the refusal (TID, Route) from Host to
	// routing.Outbox.Refused.
	DoRefusal
	// DoRefuse: refuse the messages for TID from Host, naming Route (the
	// newest this host knows; Host 0 when TID has exited).
	DoRefuse
	// DoAsk: ask Host, TID's origin, for TID's route (Host 0: the
	// master, when the origin has been deleted).
	DoAsk
	// DoAnswer: tell Host that TID's route is Route (host 0: TID has
	// ended on a route of Route.Epoch).
	DoAnswer
	// DoForget: the cache has forgotten TID's route, Route
	// (Config.MaxRoutes); the shell forgets it too.
	DoForget
	// DoEnded: TID has ended on a route of epoch Route.Epoch; the shell
	// forgets its route and drops the messages it holds for it that went
	// by a route of that epoch or older, as those to a task that has
	// exited are (the send has returned; the drop is task.ErrNoSuchTask's
	// to report).
	DoEnded
)

var effectNames = [...]string{"", "reroute", "refusal", "refuse", "ask", "answer", "forget", "ended"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && k != 0 {
		return effectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// Effect is something a Cache wants done.
type Effect struct {
	Kind  EffectKind
	TID   task.TID
	Host  task.HostID
	Route routing.Route
}

func (e Effect) String() string {
	switch e.Kind {
	case DoReroute:
		return fmt.Sprintf("%v %v %s", e.Kind, e.TID, fmtRoute(e.Route))
	case DoAsk:
		if e.Host == 0 {
			return fmt.Sprintf("%v %v at the master", e.Kind, e.TID)
		}
		return fmt.Sprintf("%v %v at %v", e.Kind, e.TID, e.Host)
	case DoForget:
		return fmt.Sprintf("%v %v", e.Kind, e.TID)
	case DoEnded:
		return fmt.Sprintf("%v %v e%d", e.Kind, e.TID, e.Route.Epoch)
	}
	return fmt.Sprintf("%v %v %v %s", e.Kind, e.TID, e.Host, fmtRoute(e.Route))
}

func fmtRoute(r routing.Route) string {
	s := fmt.Sprintf("%v e%d", r.Host, r.Epoch)
	if r.Host == 0 {
		s = fmt.Sprintf("none e%d", r.Epoch)
	}
	if r.InTransit {
		s += " in transit"
	}
	return s
}

// Step feeds the cache one event at now and returns what it wants done,
// in order.
//
// The rules. A route replaces another only if it supersedes it, so a
// host's epochs never go back while it holds the task's entry. The master
// tells a move's route to the task's origin, old host and new host only
// (EvSet); everyone else learns it when it next sends. A host that is
// sent messages for a task it does not have refuses them naming the
// newest route it knows (EvMiss), or the task's origin at epoch 0 when it
// knows none, or host 0 when it knows the task has ended. A sender that
// is refused hands the refusal to its outbox (DoRefusal); when the route
// named does not supersede the one its messages went by, or is in
// transit, it has nothing better and asks the task's origin (DoAsk),
// once, then again every Config.Retry until it learns a route that
// supersedes the one it is stuck on, or that the task has ended. The
// origin answers with the newest committed route, which it always knows:
// the master tells it of every move before the move can commit, and of
// the end of a task that ended elsewhere or was lost for good (EvEnded);
// the origin then answers host 0 (ended), and the sender drops its
// messages (DoEnded). Routes learnt go, least recently used first, past
// Config.MaxRoutes (DoForget); an ended task's route goes at once.
func (c *Cache) Step(now time.Time, e Event) []Effect {
	var out []Effect
	switch e.Kind {
	case EvSet, EvAnswer:
		if e.Kind == EvAnswer && e.Route.Host == 0 {
			out = c.end(e.TID, e.Route.Epoch, out) // the origin (or the master) says it ended
			break
		}
		if e.Route.Host == c.self && (e.Kind == EvAnswer || e.Absent) {
			// Only the master, or the move's own steps, tell a host that
			// a task lives here, and only while it is arriving or here:
			// otherwise the route is stale (the cache may have
			// forgotten the newer route it knew).
			break
		}
		if c.learn(e.TID, e.Route, &out) {
			out = append(out, Effect{Kind: DoReroute, TID: e.TID, Route: c.Lookup(e.TID)})
		}
	case EvRefused:
		if e.Route.Host != c.self { // stale otherwise, as an answer
			c.learn(e.TID, e.Route, &out)
		}
		c.touch(e.TID)
		out = append(out, Effect{Kind: DoRefusal, TID: e.TID, Host: e.Peer, Route: e.Route})
		if e.Route.Host == 0 && e.Peer == e.Using.Host {
			// Exited there: the outbox drops its messages. (Not an end
			// the cache remembers: only the authority's word is.)
			delete(c.asks, e.TID)
			break
		}
		if e.Route.Host == 0 && e.Peer == e.TID.Host() && e.Route.Epoch >= e.Using.Epoch {
			// The origin, the authority, says it ended on a route no
			// older than the messages went by.
			out = c.end(e.TID, e.Route.Epoch, out)
			break
		}
		stuck := e.Using
		if Supersedes(e.Route, stuck) {
			stuck = e.Route
		}
		if cur := c.Lookup(e.TID); Supersedes(cur, stuck) && !cur.InTransit && !c.Gone(cur) {
			// The cache knows better than the refusal and the outbox.
			delete(c.asks, e.TID)
			out = append(out, Effect{Kind: DoReroute, TID: e.TID, Route: cur})
			break
		}
		if Supersedes(e.Route, e.Using) && !e.Route.InTransit && !c.Gone(e.Route) {
			break // the refusal itself names a better route
		}
		if e.Route == e.Using && e.Peer != e.Using.Host && !e.Using.InTransit {
			// A host the messages no longer go to names the route they
			// go by (they were sent by a route the cache had forgotten):
			// the outbox resends them along it; nothing is stuck.
			break
		}
		out = c.ask(now, e.TID, stuck, out)
	case EvHeld:
		c.touch(e.TID)
		out = c.ask(now, e.TID, e.Using, out)
	case EvMiss:
		c.touch(e.TID)
		r := c.Lookup(e.TID)
		ee, ended := c.ended[e.TID]
		switch {
		case ended:
			r = routing.Route{Epoch: ee} // it has ended
		case r.Host == c.self && c.Authority(e.TID) && r.Epoch == 0:
			r = routing.Route{} // born here, not here, never moved: exited
		case r.Host == c.self:
			// An entry naming this host for a task that is not here:
			// the task left by a move this host has not heard of yet.
			// Send the sender to the authority.
			r = routing.Route{Host: e.TID.Host()}
			if c.Authority(e.TID) {
				r = routing.Route{}
			}
		}
		out = append(out, Effect{Kind: DoRefuse, TID: e.TID, Host: e.Peer, Route: r})
	case EvAsk:
		r := c.Lookup(e.TID)
		if ee, ok := c.ended[e.TID]; ok {
			r = routing.Route{Epoch: ee}
		}
		out = append(out, Effect{Kind: DoAnswer, TID: e.TID, Host: e.Peer, Route: r})
	case EvForget:
		delete(c.asks, e.TID)
		delete(c.routes, e.TID)
	case EvEnded:
		out = c.end(e.TID, e.Route.Epoch, out)
	case EvSent:
		c.touch(e.TID)
	case EvHostLost:
		c.lost[e.Peer] = true
		for _, tid := range slices.Sorted(maps.Keys(c.asks)) {
			if tid.Host() == e.Peer {
				c.asks[tid].due = now.Add(c.cfg.Retry)
				out = append(out, Effect{Kind: DoAsk, TID: tid, Host: 0})
			}
		}
	case EvHostUp:
		if f, ok := c.back[e.Peer]; ok && f >= e.Route.Epoch && !c.lost[e.Peer] {
			break // a return told again
		}
		delete(c.lost, e.Peer)
		c.back[e.Peer] = max(c.back[e.Peer], e.Route.Epoch)
		for _, tid := range slices.Sorted(maps.Keys(c.asks)) {
			if cur := c.Lookup(tid); cur.Host == e.Peer && !cur.InTransit && !c.Gone(cur) && !Supersedes(c.asks[tid].stuck, cur) {
				// Stuck on a route to the host that is valid again.
				delete(c.asks, tid)
				out = append(out, Effect{Kind: DoReroute, TID: tid, Route: cur})
			}
		}
	case EvTick:
		for _, tid := range slices.Sorted(maps.Keys(c.asks)) {
			a := c.asks[tid]
			if now.Before(a.due) {
				continue
			}
			a.due = now.Add(c.cfg.Retry)
			out = append(out, Effect{Kind: DoAsk, TID: tid, Host: c.Asked(tid)})
		}
	}
	return out
}

// ask opens (or keeps) a query for tid, stuck on route stuck. A query
// already open is asked again only when due; one settled by what the
// cache knows now is not asked; for a task known to have ended on a
// route no older than stuck, the messages are dropped instead (DoEnded).
func (c *Cache) ask(now time.Time, tid task.TID, stuck routing.Route, out []Effect) []Effect {
	if ee, ok := c.ended[tid]; ok {
		if stuck.Epoch <= ee {
			delete(c.asks, tid)
			return append(out, Effect{Kind: DoEnded, TID: tid, Route: routing.Route{Epoch: ee}})
		}
		delete(c.ended, tid) // the messages went by a later incarnation's route
	}
	if cur := c.Lookup(tid); Supersedes(cur, stuck) && !cur.InTransit && !c.Gone(cur) {
		// The cache knows better than the outbox (and not a deleted host):
		// reroute.
		delete(c.asks, tid)
		return append(out, Effect{Kind: DoReroute, TID: tid, Route: cur})
	}
	if c.Authority(tid) {
		// This host is the authority: there is no one to ask. The master
		// tells it the committed route (EvSet).
		return out
	}
	if a := c.asks[tid]; a != nil {
		if Supersedes(stuck, a.stuck) {
			a.stuck = stuck
		}
		return out
	}
	c.asks[tid] = &ask{stuck: stuck, due: now.Add(c.cfg.Retry)}
	return append(out, Effect{Kind: DoAsk, TID: tid, Host: c.Asked(tid)})
}
