package route

import (
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// FuzzCache feeds one host's cache any sequence of events (over three
// tasks of two origins, four hosts and small epochs, so that they meet)
// and checks its rules after each: a task's route epoch never goes back
// (until the task ends or its route is forgotten) and never names no
// host; queries go only to the task's origin and never from the origin
// itself; a refusal never names this host; an answer is the route the
// cache holds, or the end it remembers; a route forgotten for the bound
// is none the cache must keep; a new entry past Config.MaxRoutes makes
// room unless all the others must be kept; the ends remembered stay
// within the bound; an ended task has no route and no query; a route
// naming a host deleted leads nowhere (Gone) until it is back
// (EvHostUp), and then only if it is past the epoch of its return (or at
// epoch 0), and queries for its tasks go to the master.
//
//	go test ./routing/route -run '^$' -fuzz FuzzCache -fuzztime 20s
func FuzzCache(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 2, 0, 1, 3, 1, 4, 7, 0, 2, 0, 3, 5})
	f.Add([]byte{2, 1, 9, 1, 6, 1, 0, 0, 7, 0, 0, 0, 7, 0, 0, 0, 1, 1, 9, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		const self = task.HostID(2)
		cfg := Config{Retry: time.Second, MaxRoutes: 2}
		c := New(self, cfg)
		tids := []task.TID{task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(3, 1)}
		last := map[task.TID]uint64{}
		lost := map[task.HostID]bool{}    // deleted and not back
		back := map[task.HostID]uint64{}  // back, above this epoch
		deleted := map[task.HostID]bool{} // deleted at some point
		now := time.Unix(0, 0)
		route := func(x, y byte) routing.Route {
			return routing.Route{Host: task.HostID(x % 5), Epoch: uint64(y % 8), InTransit: y&8 != 0}
		}
		for ; len(b) >= 4; b = b[4:] {
			tid := tids[int(b[1])%len(tids)]
			e := Event{Kind: EventKind(1 + b[0]%12), TID: tid, Route: route(b[2], b[3]), Using: route(b[3], b[2]>>3), Peer: task.HostID(1 + b[2]%4)}
			if e.Kind == EvTick {
				now = now.Add(time.Duration(b[3]) * 100 * time.Millisecond)
			}
			if e.Kind == EvForget {
				delete(last, tid) // the shell forgets it: its route goes
			}
			switch e.Kind {
			case EvHostLost:
				lost[e.Peer], deleted[e.Peer] = true, true
			case EvHostUp:
				if f, ok := back[e.Peer]; !ok || f < e.Route.Epoch || lost[e.Peer] {
					back[e.Peer] = max(f, e.Route.Epoch)
				}
				delete(lost, e.Peer)
				deleted[e.Peer] = true // (a cache may hear of a return alone)
			}
			before := c.Len()
			pinned := map[task.TID]bool{}
			for tid, en := range c.routes {
				pinned[tid] = c.pinned(tid, en)
			}
			for _, x := range c.Step(now, e) {
				switch x.Kind {
				case DoForget:
					if pinned[x.TID] {
						t.Fatalf("%v: %v: forgets a route it must keep", e, x)
					}
					delete(last, x.TID)
				case DoEnded:
					delete(last, x.TID)
				case DoAsk:
					if x.Host != c.Asked(x.TID) || c.Authority(x.TID) {
						t.Fatalf("%v: %v: a query goes to the task's origin, from another host", e, x)
					}
				case DoRefuse:
					if x.Route.Host == self {
						t.Fatalf("%v: %v: a refusal names the refuser", e, x)
					}
				case DoAnswer:
					if ep, ok := c.Ended(x.TID); ok && x.Route != (routing.Route{Epoch: ep}) {
						t.Fatalf("%v: %v: answers other than the end it remembers (e%d)", e, x, ep)
					}
					if _, ok := c.Ended(x.TID); !ok && x.Route != c.Lookup(x.TID) {
						t.Fatalf("%v: %v: answers what it does not hold (%v)", e, x, c.Lookup(x.TID))
					}
				}
			}
			if c.Len() > before && c.Len() > cfg.MaxRoutes {
				n := 0
				for tid, en := range c.routes {
					if !c.pinned(tid, en) {
						n++
					}
				}
				if n > 1 {
					t.Fatalf("after %v: %d routes, %d of them it may forget, past a bound of %d", e, c.Len(), n, cfg.MaxRoutes)
				}
			}
			if c.EndedLen() > cfg.MaxRoutes {
				t.Fatalf("after %v: %d ends remembered, past a bound of %d", e, c.EndedLen(), cfg.MaxRoutes)
			}
			for h := task.HostID(1); h <= 4; h++ {
				for ep := uint64(0); ep < 8; ep++ {
					r := routing.Route{Host: h, Epoch: ep}
					f, ok := back[h]
					if want := lost[h] || ok && ep > 0 && ep <= f; c.Gone(r) != want {
						t.Fatalf("after %v: Gone(%v) = %v, want %v", e, r, !want, want)
					}
				}
			}
			for _, id := range tids {
				if want := task.HostID(0); !deleted[id.Host()] && c.Asked(id) != id.Host() || deleted[id.Host()] && c.Asked(id) != want {
					t.Fatalf("after %v: %v asked at %v", e, id, c.Asked(id))
				}
				if _, ok := c.Ended(id); ok && (c.Asking(id) || c.Lookup(id) != routing.Route{Host: id.Host()}) {
					t.Fatalf("after %v: %v ended, with route %v, asking %v", e, id, c.Lookup(id), c.Asking(id))
				}
				r := c.Lookup(id)
				if r.Host == 0 || r.Epoch < last[id] {
					t.Fatalf("after %v: %v's route %+v (epoch was %d)", e, id, r, last[id])
				}
				last[id] = r.Epoch
			}
		}
	})
}
