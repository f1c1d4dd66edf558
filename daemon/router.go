package daemon

import (
	"sync"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// router is a daemon's message routing part: the route cache (at the
// master, the routing table itself), and reliable delivery's sending side
// (outbox: numbering, the window, what waits for an acknowledgement) and
// receiving side (inbox: what came in order, what came early), all pure
// state of package routing. One lock, mu, owns them all: every message a
// task sends takes it once, and the critical sections that must see a
// task's route together with its place here (a move's suspend and
// install, receiving a message for a task) take mu before the hosting
// lock (hosting.mu).
//
// The methods below are the operations that need nothing else; each takes
// mu itself and calls nothing that locks.
type router struct {
	mu     sync.Mutex
	routes *routing.Table
	outbox *routing.Outbox
	inbox  *routing.Inbox
	// acked is closed (and set to nil) when acknowledgements free room in
	// a window; a sender that waits for room makes it.
	acked chan struct{}
}

func newRouter() *router {
	return &router{routes: routing.NewTable(), outbox: routing.NewOutbox(), inbox: routing.NewInbox()}
}

// lookup is where the route cache says tid lives.
func (r *router) lookup(tid task.TID) routing.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes.Lookup(tid)
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
	r.inbox.Forget(tid)
	r.outbox.ForgetSender(tid)
}

// drop forgets everything of the tasks, as senders and as receivers:
// messages held or unacknowledged, numbering, what came early. Nothing
// of an old incarnation reaches a new one (a rollback, a task the master
// gave up).
func (r *router) drop(tids ...task.TID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tid := range tids {
		r.outbox.DropReceiver(tid)
		r.outbox.DropSender(tid)
		r.inbox.Forget(tid)
	}
}

// dropHost drops the messages held for tasks on host id (a host deleted)
// and returns those tasks.
func (r *router) dropHost(id task.HostID) []task.TID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outbox.DropHost(id)
}

// pendingFrom counts the messages the tasks sent that are not yet
// acknowledged.
func (r *router) pendingFrom(tids []task.TID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, tid := range tids {
		n += r.outbox.PendingFrom(tid)
	}
	return n
}
