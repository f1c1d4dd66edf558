package route

import (
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// TestCacheForgetsEndedTasks: an origin told of 10,000 of its tasks' moves
// and then of their ends holds no route afterwards, and remembers at most
// Config.MaxRoutes ends; a sender that learnt the routes of 10,000 tasks
// holds at most Config.MaxRoutes of them, and each one it forgot costs a
// refusal that names it again.
func TestCacheForgetsEndedTasks(t *testing.T) {
	const n, bound = 10000, 64
	cfg := Config{Retry: time.Second, MaxRoutes: bound}
	now := time.Unix(0, 0)
	origin := New(1, cfg)
	for i := range n {
		tid := task.NewTID(1, uint32(i+1))
		origin.Step(now, Event{Kind: EvSet, TID: tid, Route: routing.Route{Host: 2, Epoch: 1}})
		if got := origin.Lookup(tid); got != (routing.Route{Host: 2, Epoch: 1}) {
			t.Fatalf("the origin lost the route of its live task %v: %v", tid, got)
		}
		fx := origin.Step(now, Event{Kind: EvEnded, TID: tid, Route: routing.Route{Epoch: 1}})
		if len(fx) != 1 || fx[0].Kind != DoEnded {
			t.Fatalf("end of %v: %v", tid, fx)
		}
	}
	if origin.Len() != 0 || origin.EndedLen() != bound {
		t.Errorf("origin after %d ends: %d routes, %d ends, want 0 and %d", n, origin.Len(), origin.EndedLen(), bound)
	}
	last := task.NewTID(1, n)
	if fx := origin.Step(now, Event{Kind: EvAsk, TID: last, Peer: 3}); len(fx) != 1 || fx[0].Route != (routing.Route{Epoch: 1}) {
		t.Errorf("query for %v, which ended last: %v, want an answer of host 0 at e1", last, fx)
	}

	sender := New(3, cfg)
	forgot := 0
	for i := range n {
		tid := task.NewTID(1, uint32(i+1))
		for _, x := range sender.Step(now, Event{Kind: EvRefused, TID: tid, Peer: 1, Route: routing.Route{Host: 2, Epoch: 1}, Using: routing.Route{Host: 1}}) {
			if x.Kind == DoForget {
				forgot++
			}
		}
		if i%3 == 0 {
			sender.Step(now, Event{Kind: EvSent, TID: task.NewTID(1, 1)}) // one task in constant use
		}
		if sender.Len() > bound {
			t.Fatalf("after %d routes learnt the sender holds %d, past %d", i+1, sender.Len(), bound)
		}
	}
	if sender.Lookup(task.NewTID(1, 1)).Epoch != 1 {
		t.Errorf("the route in constant use was forgotten")
	}
	if forgot != n-sender.Len() {
		t.Errorf("%d routes forgotten, %d held, of %d learnt", forgot, sender.Len(), n)
	}
}
