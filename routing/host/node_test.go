package host

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// TestStepDelegates feeds the same seeded sequences of move and job
// checkpoint events to a node and to the parts on their own: the node's
// effects are the parts' effects, in order, and its answers the same.
func TestStepDelegates(t *testing.T) {
	moveKinds := []move.HostEventKind{move.EvPrepare, move.EvSuspend, move.EvSafePoint, move.EvSent, move.EvStream,
		move.EvRestore, move.EvInstall, move.EvCommit, move.EvResume, move.EvCancel, move.EvLost, move.EvGone}
	ckptKinds := []jobck.HostEventKind{jobck.HostPause, jobck.HostQuiet, jobck.HostWrite, jobck.HostWriteOver,
		jobck.HostPauseOver, jobck.HostResume, jobck.HostGone}
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 31))
		n, mh, ch := New(), move.NewHost(), jobck.NewHost()
		now := time.Unix(0, 0).UTC()
		for i := 0; i < 200; i++ {
			now = now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			tid := task.NewTID(task.HostID(1+rng.IntN(2)), uint32(1+rng.IntN(3)))
			if rng.IntN(2) == 0 {
				e := move.HostEvent{Kind: moveKinds[rng.IntN(len(moveKinds))], TID: tid, Move: move.ID(1 + rng.IntN(4)),
					Route: routing.Route{Host: task.HostID(1 + rng.IntN(2)), Epoch: uint64(1 + rng.IntN(4))},
					Back:  rng.IntN(3) == 0, Local: move.Local{Running: rng.IntN(2) == 0, Route: uint64(rng.IntN(4))}}
				got := MoveEffects(n.Step(now, Event{Kind: EvMove, Move: e}))
				want := mh.Step(now, e)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("seed %d step %d %v: node %v, move.Host %v", seed, i, e, got, want)
				}
				continue
			}
			e := jobck.HostEvent{Kind: ckptKinds[rng.IntN(len(ckptKinds))], Job: uint64(1 + rng.IntN(2)), TID: tid,
				Round: jobck.Round{Try: uint64(1 + rng.IntN(3))}, Pause: uint64(rng.IntN(3)),
				Local: jobck.Local{TID: tid, Running: rng.IntN(2) == 0},
				Tasks: []jobck.Local{{TID: tid, Running: true}}, JobLeft: rng.IntN(2) == 0}
			got := CkptEffects(n.Step(now, Event{Kind: EvCkpt, Ckpt: e}))
			want := ch.Step(e)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d step %d %v: node %v, jobck.Host %v", seed, i, e, got, want)
			}
		}
		if a, b := fmt.Sprint(n.Moves().Counts()), fmt.Sprint(mh.Counts()); a != b {
			t.Fatalf("seed %d: node holds %s moves, move.Host %s", seed, a, b)
		}
	}
}

// TestStepRoutes checks the route events: a newer route is recorded and
// reported (FxRouted), an older one changes nothing.
func TestStepRoutes(t *testing.T) {
	n := New()
	tid := task.NewTID(1, 7)
	now := time.Unix(0, 0)
	fx := n.Step(now, Event{Kind: EvRoute, TID: tid, Route: routing.Route{Host: 2, Epoch: 3}})
	if len(fx) != 1 || fx[0].Kind != FxRouted || fx[0].Route.Host != 2 {
		t.Fatalf("newer route: effects %v", fx)
	}
	if r := n.Routes().Lookup(tid); r.Host != 2 || r.Epoch != 3 {
		t.Fatalf("route held %v, want h2 e3", r)
	}
	if fx := n.Step(now, Event{Kind: EvRoute, TID: tid, Route: routing.Route{Host: 3, Epoch: 2}}); len(fx) != 0 {
		t.Fatalf("older route: effects %v", fx)
	}
	if r := n.Routes().Lookup(tid); r.Host != 2 {
		t.Fatalf("an older route replaced the newer: %v", r)
	}
}

// TestStepExitedDrop checks that EvExited forgets a task's numbering as a
// sender but keeps its unacknowledged messages, and that EvDrop forgets
// them too.
func TestStepExitedDrop(t *testing.T) {
	n := New()
	a, b := task.NewTID(1, 1), task.NewTID(2, 1)
	now := time.Unix(0, 0)
	send := func() {
		o := n.Outbox()
		e := routing.Envelope{From: a, To: b, Seq: o.Seq(a, b), Body: task.Payload{Data: []byte("x")}}
		o.Push(e, routing.Route{Host: 2, Epoch: 1}, now)
	}
	send()
	send()
	n.Step(now, Event{Kind: EvExited, TID: a})
	if got := n.Outbox().PendingFrom(a); got != 2 {
		t.Fatalf("after exit: %d messages of a pending, want 2 (kept until acknowledged)", got)
	}
	if seq := n.Outbox().Seq(a, b); seq != 1 {
		t.Fatalf("after exit: next sequence number %d, want 1 (numbering forgotten)", seq)
	}
	n.Step(now, Event{Kind: EvDrop, TIDs: []task.TID{a}})
	if got := n.Outbox().PendingFrom(a); got != 0 {
		t.Fatalf("after drop: %d messages of a pending, want 0", got)
	}
}

// TestStrings checks that every event and effect kind has a name.
func TestStrings(t *testing.T) {
	var names []string
	for k := EvMove; k <= EvDrop; k++ {
		names = append(names, Event{Kind: k}.String())
	}
	for k := FxMove; k <= FxRouted; k++ {
		names = append(names, Effect{Kind: k}.String())
	}
	for _, s := range names {
		if s == "" || strings.HasPrefix(s, "event(") || strings.HasPrefix(s, "effect(") {
			t.Fatalf("unnamed: %q in %q", s, names)
		}
	}
	if s := EventKind(99).String(); s != "event(99)" {
		t.Fatalf("unknown kind: %q", s)
	}
}
