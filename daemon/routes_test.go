package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
)

// TestMemNetMigrationOnDemand is TestMemNetMigrationUnderFaults with
// routes on demand: senders on every host stream numbered messages to
// movers migrated among four hosts while frames are lost, delayed and
// swapped and connections break; the master tells each move's route to
// the task's origin, old and new host only, and the senders learn it from
// refusals and the origins. Every mover gets every message once, in
// order.
func TestMemNetMigrationOnDemand(t *testing.T) {
	for seed := range memSeeds(t, 3) {
		f := &faults{seed: uint64(seed), drop: 100, hold: 100, delay: 300, cut: 1000}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			vm := startMemVM(t, 4, f, Config{SharedDir: t.TempDir(), MoveTimeout: 5 * time.Second, Routes: RoutesDemand})
			moves, aborts := migrateUnderTraffic(t, vm, uint64(seed), 3, 400, 12)
			var asks, answers int64
			for _, d := range vm.Daemons {
				asks += d.rstats.asks.Load()
				answers += d.rstats.answers.Load()
			}
			told := vm.Master().rstats.told.Load()
			t.Logf("%v; %d moves committed, %d aborted; %d routes told, %d queries, %d answers", f, moves, aborts, told, asks, answers)
			// Each route a move sets goes to at most three hosts (the
			// origin, the old and the new host; the master is one of
			// them when it hosts the task): at most two routes per move
			// (the way there, the way back).
			if told == 0 || told > 3*2*int64(moves+aborts) {
				t.Errorf("%d routes told for %d moves", told, moves+aborts)
			}
		})
	}
}

// relayTask sends its receiver To a burst of numbers, counting on from
// Sent, each time its parent says how many (tag 5), and ends on tag 2.
// It waits at a safe point, so it can be moved between bursts.
type relayTask struct {
	To   task.TID
	Sent int
}

func init() { task.Register("daemon.test.relay", &relayTask{}) }

func (r *relayTask) Run(c *task.Ctx) error {
	for {
		var n int
		st, err := c.Recv(c.Parent(), task.AnyTag, &n, task.Safe())
		if err != nil {
			return err
		}
		if st.Tag == 2 {
			return nil
		}
		for range n {
			if err := c.Send(r.To, 1, r.Sent); err != nil {
				return err
			}
			r.Sent++
		}
		if err := c.Send(c.Parent(), 4, nil); err != nil {
			return err
		}
	}
}

// TestMovedSenderOnDemand: with routes on demand, a sender moves between
// hosts the master tells (its origin h2, then h4, then h1) while its
// receiver lives on h3, which no move concerns: h3 learns that the
// sender's messages may come from its new host by asking the sender's
// origin, and gets every number once, in order.
func TestMovedSenderOnDemand(t *testing.T) {
	vm := startMemVM(t, 4, &faults{}, Config{SharedDir: t.TempDir(), Routes: RoutesDemand})
	m := vm.Master()
	const burst = 50
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		rcv, err := c.Spawn(&movingTask{}, 1, task.OnHost("h3"))
		if err != nil {
			return err
		}
		rl, err := c.Spawn(&relayTask{To: rcv[0]}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		bursts := 0
		for _, to := range []string{"", "h4", "h1", "h2"} {
			if to != "" {
				if _, err := m.Migrate(ctx, rl[0], to, Direct); err != nil {
					return fmt.Errorf("move to %s: %w", to, err)
				}
			}
			if err := c.Send(rl[0], 5, burst); err != nil {
				return err
			}
			if _, err := c.Recv(rl[0], 4, nil); err != nil {
				return err
			}
			bursts++
		}
		if err := c.Send(rl[0], 2, 0); err != nil {
			return err
		}
		return stopMover(c, rcv[0], bursts*burst)
	})
	if n := vm.Daemons[2].rstats.asks.Load(); n == 0 {
		t.Errorf("h3 asked no route: its knowledge of the sender came from elsewhere")
	}
}

// TestRouteFramesChecked: route answers and queries are checked against
// the connection's host: an answer about a task's route is taken only
// from its origin host or the master (nothing of a frame with another is
// taken), a host answers queries only for the tasks it is the origin of,
// malformed bodies are refused, and a daemon whose routes are broadcast
// takes neither frame.
func TestRouteFramesChecked(t *testing.T) {
	vm := startMemVM(t, 3, &faults{}, Config{Routes: RoutesDemand})
	h2 := vm.Daemons[1]
	p3 := &peer{role: pki.RoleDaemon, info: HostInfo{ID: 3, Name: "h3"}}
	mine, theirs := task.NewTID(3, 9), task.NewTID(2, 7)
	ans := func(rfs ...routing.Refusal) routing.Frame {
		var b []byte
		for _, rf := range rfs {
			b = routing.AppendRefusal(b, rf)
		}
		return routing.Frame{Kind: routing.KindRouteAnswer, Body: b}
	}
	good := routing.Refusal{To: mine, Route: routing.Route{Host: 1, Epoch: 5}}
	if err := h2.dispatch(p3, ans(good, routing.Refusal{To: theirs, Route: routing.Route{Host: 3, Epoch: 9}})); !errors.Is(err, errForgedAnswer) {
		t.Errorf("h3 answering for h2's task: %v", err)
	}
	if r := h2.rt.lookup(mine); r.Epoch != 0 {
		t.Errorf("a refused frame's other answer was taken: %v", r)
	}
	if err := h2.dispatch(p3, ans(good, routing.Refusal{To: mine, Route: routing.Route{Host: 2}})); err != nil {
		t.Errorf("h3 answering for its own task: %v", err)
	}
	if r := h2.rt.lookup(mine); r != good.Route {
		t.Errorf("after h3's answer, h2's route for %v is %v, want %v", mine, r, good.Route)
	}
	if past := h2.rt.node.Routes().Past(mine); len(past) == 0 || past[len(past)-1] != 2 {
		t.Errorf("the past h3 told of %v: %v, want h2 in it", mine, past)
	}
	pm := &peer{role: pki.RoleDaemon, info: HostInfo{ID: MasterID, Name: "h1"}}
	if err := h2.dispatch(pm, ans(routing.Refusal{To: task.NewTID(3, 4), Route: routing.Route{Host: 2, Epoch: 3}})); err != nil {
		t.Errorf("the master answering: %v", err)
	}
	if err := h2.dispatch(p3, routing.Frame{Kind: routing.KindRouteAnswer, Body: make([]byte, 20)}); !errors.Is(err, routing.ErrMalformed) {
		t.Errorf("a 20-byte answer: %v", err)
	}
	ask := func(tids ...task.TID) routing.Frame {
		var b []byte
		for _, tid := range tids {
			b = route.AppendAsk(b, tid)
		}
		return routing.Frame{Kind: routing.KindRouteAsk, Body: b}
	}
	if err := h2.dispatch(p3, ask(theirs)); err != nil {
		t.Errorf("a query for h2's own task: %v", err)
	}
	if err := h2.dispatch(p3, ask(theirs, mine)); !errors.Is(err, routing.ErrMalformed) {
		t.Errorf("a query to h2 for h3's task: %v", err)
	}
	if err := h2.dispatch(p3, routing.Frame{Kind: routing.KindRouteAsk, Body: make([]byte, 9)}); !errors.Is(err, routing.ErrMalformed) {
		t.Errorf("a 9-byte query: %v", err)
	}
	if err := vm.Master().dispatch(p3, ask(theirs, mine)); err != nil {
		t.Errorf("a query to the master: %v", err)
	}

	bc := startMemVM(t, 2, &faults{}, Config{Routes: RoutesBroadcast})
	for _, f := range []routing.Frame{ask(theirs), ans(good)} {
		if err := bc.Daemons[1].dispatch(p3, f); !errors.Is(err, routing.ErrMalformed) {
			t.Errorf("%v frame under the broadcast: %v", f.Kind, err)
		}
	}
	if err := checkRoutes("rumour"); !errors.Is(err, ErrRoutes) {
		t.Errorf("routes rumour: %v", err)
	}
	if _, err := Start(context.Background(), Config{Listen: "x", Master: true, Routes: "rumour"}); !errors.Is(err, ErrRoutes) {
		t.Errorf("start with routes rumour: %v", err)
	}
}

// FuzzRouteAnswerFrames gives a host of a virtual machine with routes on
// demand arbitrary KindRouteAnswer bodies as if host 3 had sent them: a
// body is taken only if it is whole records, each about a task of host
// 3, and nothing panics.
func FuzzRouteAnswerFrames(f *testing.F) {
	f.Add(routing.AppendRefusal(nil, routing.Refusal{To: task.NewTID(3, 1), Route: routing.Route{Host: 2, Epoch: 4}}))
	f.Add(routing.AppendRefusal(nil, routing.Refusal{To: task.NewTID(2, 1), Route: routing.Route{Host: 3, Epoch: 4}}))
	f.Add(make([]byte, 22))
	vm := startMemVM(f, 3, &faults{}, Config{Routes: RoutesDemand})
	h2 := vm.Daemons[1]
	p := &peer{role: pki.RoleDaemon, info: HostInfo{ID: 3, Name: "h3"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := h2.receiveRouteAnswers(p, body)
		ok := true
		derr := routing.DecodeRefusals(body, func(rf routing.Refusal) { ok = ok && rf.To.Host() == 3 })
		if want := derr == nil && ok; want != (err == nil) {
			t.Fatalf("body %x: taken %v, want %v (%v)", body, err == nil, want, err)
		}
	})
}

// TestForgedSourceOnDemand: with routes on demand, a host that is not a
// task's origin refuses a message "from" the task sent by a host it does
// not know the task on, asks the origin (again at a resend an RTO later),
// and does not count the frames against the connection; once the
// origin's answer has come, such frames count as anywhere, and enough of
// them close the connection.
func TestForgedSourceOnDemand(t *testing.T) {
	vm := startMemVM(t, 4, &faults{}, Config{Routes: RoutesDemand, MaxForgeries: 2})
	h3 := vm.Daemons[2]
	p4 := &peer{role: pki.RoleDaemon, info: HostInfo{ID: 4, Name: "h4"}}
	from, to := task.NewTID(2, 1), task.NewTID(3, 1) // h2's first task, never moved
	body := routing.AppendEnvelope(nil, &routing.Envelope{From: from, To: to, Seq: 1, Tag: 1})
	if err := h3.receiveMsgs(p4, body, false); err != nil {
		t.Fatalf("the first refused frame: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h3.rt.mu.Lock()
		_, ok := h3.routes.answered[from]
		h3.rt.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("h2 did not answer h3's query for %v", from)
		}
		time.Sleep(5 * time.Millisecond)
		// The sender's resend: h3 asks again once an RTO has passed (a
		// query lost, or not sent while h3 did not know h2 yet), and
		// until the answer has come the frame is not counted against
		// the connection.
		if err := h3.receiveMsgs(p4, body, false); err != nil {
			t.Fatalf("a refused frame before the origin's answer: %v", err)
		}
	}
	var err error
	for i := 0; i < 2 && err == nil; i++ {
		err = h3.receiveMsgs(p4, body, false)
	}
	if !errors.Is(err, ErrForged) {
		t.Errorf("forged frames after the origin's answer: %v, want %v", err, ErrForged)
	}
}
