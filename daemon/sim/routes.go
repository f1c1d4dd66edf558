package sim

import (
	"errors"
	"fmt"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/host"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// Routes is how the master spreads a move's route (Config.Routes).
type Routes uint8

const (
	// RoutesDemand: routes on demand (routing/route), the default, as
	// the daemon's. The master tells a move's route to the task's
	// origin, its old host and its new host only; each host keeps a
	// route.Cache; other senders learn the route from a refusal, which
	// names the newest route the refuser knows, or by asking the task's
	// origin (the master, for a deleted origin).
	RoutesDemand Routes = iota
	// RoutesBroadcast: the master sends every route it sets to every
	// host (the daemon's --routes broadcast).
	RoutesBroadcast
)

// String is the protocol's name, as ParseRoutes takes it.
func (r Routes) String() string {
	if r == RoutesBroadcast {
		return "broadcast"
	}
	return "demand"
}

// ErrBadRoutes: a route protocol's name is neither broadcast nor demand.
var ErrBadRoutes = errors.New("unknown route protocol")

// ParseRoutes reads a protocol's name: broadcast or demand.
func ParseRoutes(s string) (Routes, error) {
	switch s {
	case "demand", "":
		return RoutesDemand, nil
	case "broadcast":
		return RoutesBroadcast, nil
	}
	return 0, fmt.Errorf("%q (want broadcast or demand): %w", s, ErrBadRoutes)
}

// Kinds a scale run counts on demand.
const (
	KindRouteAsk    = "route.ask"    // a host's query for a task's route (in), for a deleted origin's task
	KindRouteAnswer = "route.answer" // the master's answer (out)
	KindHostLost    = "event.host-del"
)

// Binary sizes of the query and answer frames: routing's 5-byte frame
// header, then a TID (route.AppendAsk), or a TID and its route
// (routing.AppendRefusal).
const (
	askFrameBytes    = 5 + route.AskSize
	answerFrameBytes = 5 + routing.RefusalSize
)

// demand reports whether the run's routes are on demand.
func (w *world) demand() bool { return w.cfg.Routes == RoutesDemand }

// cacheStep feeds h's route cache an event and performs its effects; the
// node's table follows the cache (the invariants and the shell read it).
func (h *shost) cacheStep(e route.Event) {
	fx := h.cache.Step(h.w.clock(), e)
	if e.TID != 0 {
		h.node.Routes().Update(e.TID, h.cache.Lookup(e.TID))
	}
	for _, x := range fx {
		switch x.Kind {
		case route.DoReroute:
			h.node.Routes().Update(x.TID, x.Route)
			h.reroute(x.TID)
		case route.DoRefusal:
			if to, envs := h.node.Outbox().Refused(routing.Refusal{To: x.TID, Route: x.Route}, x.Host, h.w.clock()); len(envs) > 0 {
				h.transmit(to, envs)
			}
		case route.DoRefuse:
			h.refuse(x.Host, routing.Refusal{To: x.TID, Route: x.Route})
		case route.DoAsk:
			h.ask(x.Host, x.TID)
		case route.DoAnswer:
			h.answer(x.Host, x.TID, x.Route)
		}
	}
	h.armRTO()
}

// reroute makes the outbox follow the newest route known for tid, but not
// to this host while the task arrives here (what is held for it is
// released when it is restored).
func (h *shost) reroute(tid task.TID) {
	r := h.node.Routes().Lookup(tid)
	if h.arriving[tid] != nil && r.Host == h.id {
		return
	}
	if to, envs := h.node.Outbox().Reroute(tid, r, h.w.clock()); len(envs) > 0 {
		h.transmit(to, envs)
	}
}

// ask sends a query for tid's route to host to (0: the master).
func (h *shost) ask(to task.HostID, tid task.TID) {
	line := fmt.Sprintf("route ask %v", tid)
	if to == masterNode {
		m := h.w.master
		if mt := h.w.meter; mt != nil {
			mt.in(KindRouteAsk, 1, askFrameBytes)
		}
		h.w.send(h.id, masterNode, classData, line, func() { m.answerAsk(h, tid) })
		return
	}
	dst := h.w.host(to)
	h.w.send(h.id, to, classData, line, func() {
		dst.cacheStep(route.Event{Kind: route.EvAsk, TID: tid, Peer: h.id})
	})
}

// answer tells host to that tid's route is r.
func (h *shost) answer(to task.HostID, tid task.TID, r routing.Route) {
	dst := h.w.host(to)
	h.w.send(h.id, to, classData, fmt.Sprintf("route answer %v %v e%d", tid, nodeName(r.Host), r.Epoch), func() {
		dst.cacheStep(route.Event{Kind: route.EvAnswer, TID: tid, Route: r})
	})
}

// answerAsk is the master answering a host's query for the route of a
// task whose origin it deleted: its table holds every route.
func (m *master) answerAsk(h *shost, tid task.TID) {
	if m.down {
		return
	}
	r := m.node.Routes().Lookup(tid)
	if mt := m.w.meter; mt != nil {
		mt.out(KindRouteAnswer, h.id, answerFrameBytes, m.w.now)
	}
	m.w.send(masterNode, h.id, classData, fmt.Sprintf("route answer %v %v e%d", tid, nodeName(r.Host), r.Epoch), func() {
		h.cacheStep(route.Event{Kind: route.EvAnswer, TID: tid, Route: r})
	})
}

// tellLost tells hosts (on demand: every host left) that host id is
// deleted (the daemon's host-del event): queries for its tasks go to the
// master.
func (m *master) tellLost(id task.HostID, hosts []task.HostID) {
	for _, to := range hosts {
		h := m.w.host(to)
		m.w.send(masterNode, to, classRoute, "host lost "+nodeName(id), func() { h.hostLost(id) })
	}
}

// hostLost is a host hearing that host id is deleted: its cache sends
// queries for id's tasks to the master, and what the outbox holds or
// sends to id is asked for afresh.
func (h *shost) hostLost(id task.HostID) {
	h.cacheStep(route.Event{Kind: route.EvHostLost, Peer: id})
	for _, tid := range h.w.master.order() {
		if r, _, ok := h.node.Outbox().Route(tid); ok && r.Host == id {
			h.cacheStep(route.Event{Kind: route.EvHeld, TID: tid, Using: r})
		}
	}
}

// tellBack tells every other host (on demand) that host id, deleted, is
// back (the daemon's host list delta that adds it again), with the
// master's epoch clock at its return: every route the master sets naming
// it from now on is newer, and those before are its old incarnation's.
func (m *master) tellBack(id task.HostID, floor uint64) {
	for _, to := range m.node.Alive() {
		if to == id {
			continue
		}
		h := m.w.host(to)
		m.w.send(masterNode, to, classRoute, fmt.Sprintf("host back %s above e%d", nodeName(id), floor), func() {
			h.cacheStep(route.Event{Kind: route.EvHostUp, Peer: id, Route: routing.Route{Epoch: floor}})
		})
	}
}

// resync sends host id, readmitted, the master's routes as they are now,
// as the daemon's answer to its registration carries the master's table:
// what moved or was restored (a rollback) while it was deleted, whose
// routes went to no incarnation of it, the tasks it is the origin of
// among them (on demand).
func (m *master) resync(id task.HostID) {
	var es []routing.Entry
	for _, tid := range m.order() {
		if r := m.node.Routes().Lookup(tid); r.Host != 0 && r.Host != id {
			es = append(es, routing.Entry{TID: tid, Route: r})
		}
	}
	h := m.w.host(id)
	m.w.send(masterNode, id, classRoute, fmt.Sprintf("routes to %s (%d)", nodeName(id), len(es)), func() {
		for _, e := range es {
			h.node.Step(h.w.clock(), host.Event{Kind: host.EvRoute, TID: e.TID, Route: e.Route})
			h.cacheStep(route.Event{Kind: route.EvSet, TID: e.TID, Route: e.Route})
		}
	})
}
