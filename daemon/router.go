package daemon

import (
	"sync"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/host"
	"github.com/dpvm/dpvm/task"
)

// router holds the daemon's host node (routing/host.Node: the route
// cache, at the master the routing table itself; reliable delivery's
// sending side, outbox: numbering, the window, what waits for an
// acknowledgement; its receiving side, inbox: what came in order, what
// came early; and the host halves of moves and job checkpoints) and the
// node's lock, mu. mu is the daemon's one protocol lock: hosting.mu is
// the same lock, so a critical section that must see a task's route
// together with its place here (a move's suspend and install, receiving
// a message for a task) takes it once. Every message a task sends takes
// it once.
//
// The methods below are the operations that need nothing else; each takes
// mu itself and calls nothing that locks.
type router struct {
	mu   sync.Mutex
	node *host.Node
	// routes, outbox and inbox are the node's parts, kept here for the
	// send path (mu held).
	routes *routing.Table
	outbox *routing.Outbox
	inbox  *routing.Inbox
	// freed is closed (and set to nil) when the outbox frees room in a
	// window (windowFreed); a sender that waits for room makes it
	// (freedChan).
	freed chan struct{}
	// lostFinal (the master's, on demand) holds the deleted hosts whose
	// losses are final: no rollback restores what they held
	// (routesLossFinal); each with the epoch up to which a route naming
	// it is of a lost incarnation (math.MaxUint64 until it comes back).
	lostFinal map[task.HostID]uint64
	// backAt (the master's, on demand) holds the hosts readmitted after
	// their deletion, each with the epoch clock at its return
	// (routesHostBackMaster).
	backAt map[task.HostID]uint64
}

func newRouter() *router {
	n := host.New()
	r := &router{node: n, routes: n.Routes(), outbox: n.Outbox(), inbox: n.Inbox()}
	// Whatever frees room (an acknowledgement, a drop, a new route) goes
	// through the outbox's accounting, which wakes the waiting senders:
	// no path that frees it has to remember to.
	r.outbox.OnFree(r.windowFreed)
	return r
}

// freedChan returns the channel closed when the outbox next frees room in
// a window. The caller holds mu.
func (r *router) freedChan() <-chan struct{} {
	if r.freed == nil {
		r.freed = make(chan struct{})
	}
	return r.freed
}

// windowFreed wakes the senders waiting for room in a window, if any
// wait: the outbox calls it (Outbox.OnFree), mu held.
func (r *router) windowFreed() {
	if r.freed != nil {
		close(r.freed)
		r.freed = nil
	}
}

// lookup is where the route cache says tid lives.
func (r *router) lookup(tid task.TID) routing.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes.Lookup(tid)
}

// lookupEnded is lookup, and for a task whose route the cache has
// forgotten (the master's: it ended) after it lived away from its origin
// host, the host it ended on (routing.Table.Past); 0 for any other.
func (r *router) lookupEnded(tid task.TID) (routing.Route, task.HostID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := r.routes.Lookup(tid)
	if rt.Epoch == 0 { // no entry: the origin host, or forgotten
		if p := r.routes.Past(tid); len(p) > 0 {
			return rt, p[0]
		}
	}
	return rt, 0
}

// update records route rt for tid, unless the cache holds a newer one,
// and reports whether it did.
func (r *router) update(tid task.TID, rt routing.Route) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes.Update(tid, rt)
}

// updateAll records every entry's route (as update does).
func (r *router) updateAll(es []routing.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range es {
		r.routes.Update(e.TID, e.Route)
	}
}

// entries lists the routes the cache holds.
func (r *router) entries() []routing.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes.Entries()
}

// forgetRoute drops tid's route (a task that has ended).
func (r *router) forgetRoute(tid task.TID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes.Forget(tid)
}

// maxEpoch is the largest of floor and the epochs of the tasks' routes.
func (r *router) maxEpoch(tids []task.TID, floor uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := floor
	for _, t := range tids {
		e = max(e, r.routes.Lookup(t).Epoch)
	}
	return e
}

// exited forgets a task that has ended here: what it was sent in order,
// and its numbering as a sender. Its unacknowledged messages stay until
// their receivers acknowledge them.
func (r *router) exited(tid task.TID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node.Step(time.Time{}, host.Event{Kind: host.EvExited, TID: tid})
}

// drop forgets everything of the tasks, as senders and as receivers:
// messages held or unacknowledged, numbering, what came early. Nothing
// of an old incarnation reaches a new one (a rollback, a task the master
// gave up).
func (r *router) drop(tids ...task.TID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node.Step(time.Time{}, host.Event{Kind: host.EvDrop, TIDs: tids})
}

// dropHost drops the messages held for tasks on host id (a host deleted)
// and returns those tasks.
func (r *router) dropHost(id task.HostID) []task.TID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outbox.DropHost(id)
}

// pendingFrom counts the messages the tasks sent that are not yet
// acknowledged (a task named twice counts once): one pass over the
// outbox's waiting messages under the lock, not one per task.
func (r *router) pendingFrom(tids []task.TID) int {
	senders := make(map[task.TID]struct{}, len(tids))
	for _, t := range tids {
		senders[t] = struct{}{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outbox.PendingFromAny(func(t task.TID) bool {
		_, ok := senders[t]
		return ok
	})
}
