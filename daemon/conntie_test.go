package daemon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// TestCallsSurviveAConnectionTie: two daemons that dial each other at once
// keep one connection of the two (attach: the one dialled by the smaller
// host ID) and retire the other; the calls under way on the one retired,
// in either direction, are answered on it and run once. Before, the
// retired connection was closed at once and its calls failed with
// "connection lost" (or their replies were lost), though the call may
// have run: the simulation's job after a host joined failed so when the
// master dialled the new host while the host's own connection carried a
// spawn's start.
func TestCallsSurviveAConnectionTie(t *testing.T) {
	// The tie of the join: a host's connection to the master (dialled by
	// the host) carries a call each way, each waiting on a task, when the
	// master dials the host; the master's connection wins on both sides.
	t.Run("Replaced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vm := startMemVM(t, 2, &faults{}, Config{})
			m, h := vm.Daemons[0], vm.Daemons[1]
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			blocker, free := blockingTask(t)
			onM, err := m.SpawnTask(&fnTask{Fn: blocker.Fn})
			if err != nil {
				t.Fatal(err)
			}
			onH, err := h.SpawnTask(&fnTask{Fn: blocker.Fn})
			if err != nil {
				t.Fatal(err)
			}
			joined := currentPeer(m, h.HostID())
			if joined == nil || joined.dialr {
				t.Fatalf("the master's connection to %s: %v, want the one the host dialled", h.Name(), joined)
			}
			waits := make(chan error, 2)
			go func() { waits <- m.callHost(ctx, h.HostID(), mWait, tidArgs{TID: onH}, &TaskInfo{}) }()
			go func() { waits <- h.callHost(ctx, MasterID, mWait, tidArgs{TID: onM}, &TaskInfo{}) }()
			synctest.Wait()
			if _, err := m.dial(ctx, h.HostID(), h.self.Addr); err != nil {
				t.Fatalf("the master dials %s: %v", h.Name(), err)
			}
			synctest.Wait()
			if p := currentPeer(m, h.HostID()); p == joined || !p.dialr {
				t.Fatal("the master's own connection did not win the tie")
			}
			free()
			for range 2 {
				if err := <-waits; err != nil {
					t.Errorf("a call under way on the connection that lost: %v", err)
				}
			}
			if !joined.retired() {
				t.Fatal("the join's connection was not retired")
			}
			// A call made on the retired connection after its retirement
			// goes on the one that won.
			if err := m.callPeer(ctx, joined, mSendCheck, struct{}{}, nil); err != nil {
				t.Errorf("a call made on the retired connection: %v", err)
			}
			synctest.Wait()
			checkRetiredGone(t, joined, m, h)
		})
	})

	// An event sent on a connection once it is retired goes on the one
	// that won, in order with the events sent there after it. Before, it
	// went on the retired connection, read apart from the winner: a host's
	// load report held there reached the master after a later one and
	// left the master's record of the host's jobs stale.
	t.Run("EventsFollow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &holdFrame{}
			vm := startMemVMWith(t, 2, s, Config{})
			m, h := vm.Daemons[0], vm.Daemons[1]
			synctest.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			blocker, free := blockingTask(t)
			onM, err := m.SpawnTask(&fnTask{Fn: blocker.Fn})
			if err != nil {
				t.Fatal(err)
			}
			joined := currentPeer(h, MasterID)
			// A call under way keeps the join's connection open once
			// retired.
			waited := make(chan error, 1)
			go func() { waited <- h.callHost(ctx, MasterID, mWait, tidArgs{TID: onM}, &TaskInfo{}) }()
			synctest.Wait()
			if _, err := m.dial(ctx, h.HostID(), h.self.Addr); err != nil {
				t.Fatalf("the master dials %s: %v", h.Name(), err)
			}
			synctest.Wait()
			if p := currentPeer(h, MasterID); p == joined || !joined.retired() {
				t.Fatal("the join's connection was not retired")
			}
			report := func(job uint64) *event {
				info := h.selfInfo()
				return &event{Kind: evLoad, Load: &info, Jobs: []uint64{job}}
			}
			const stale, fresh = 4242, 4243
			b, err := encodeMsg(report(stale))
			if err != nil {
				t.Fatal(err)
			}
			s.hold(routing.KindEvent, h, m, 100*time.Millisecond)
			joined.frame(routing.KindEvent, b)
			if err := h.sendEvent(ctx, MasterID, report(fresh)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the held report is delivered
			synctest.Wait()
			if m.reg.runs(h.HostID(), stale) {
				t.Error("the report sent on the retired connection overtook the later one: the master keeps its stale jobs")
			}
			free()
			if err := <-waited; err != nil {
				t.Errorf("the call under way on the retired connection: %v", err)
			}
			synctest.Wait()
			checkRetiredGone(t, joined, m, h)
		})
	})

	// A call that has not yet reached its host when its connection loses
	// the tie reaches it on that connection, runs once and is answered:
	// the master's start of a task on a host, held on the join's
	// connection while the master dials the host.
	t.Run("RunsOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &holdFrame{}
			vm := startMemVMWith(t, 2, s, Config{})
			m, h := vm.Daemons[0], vm.Daemons[1]
			synctest.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			waiter := fn(t, func(c *task.Ctx, _ int) error {
				_, err := c.Recv(task.AnyTask, 1, nil, task.Safe())
				return err
			})
			joined := currentPeer(m, h.HostID())
			s.hold(routing.KindCall, m, h, 100*time.Millisecond)
			started := make(chan error, 1)
			var got tidsReply
			go func() {
				started <- m.callHost(ctx, h.HostID(), mStart, spawnArgs{Req: task.SpawnRequest{Type: "daemon.test.fn", State: mustState(t, waiter), Count: 1}}, &got)
			}()
			synctest.Wait() // the start is held on its way
			select {
			case err := <-started:
				t.Fatalf("the start was not held: %v", err)
			default:
			}
			if _, err := m.dial(ctx, h.HostID(), h.self.Addr); err != nil {
				t.Fatalf("the master dials %s: %v", h.Name(), err)
			}
			if p := currentPeer(m, h.HostID()); p == joined {
				t.Fatal("the master's own connection did not win the tie")
			}
			if err := <-started; err != nil {
				t.Fatalf("the start held on the connection that lost: %v", err)
			}
			var on []task.TID
			for _, ti := range h.Tasks(true) {
				if ti.Type == "daemon.test.fn" {
					on = append(on, ti.TID)
				}
			}
			if len(got.TIDs) != 1 || len(on) != 1 || on[0] != got.TIDs[0] {
				t.Fatalf("the start answered %v; %s runs %v: want one task, the one answered", got.TIDs, h.Name(), on)
			}
			synctest.Wait()
			checkRetiredGone(t, joined, m, h)
		})
	})

	// Both hosts dial at once, and one side attaches the connection that
	// loses before the one that wins: h2 sends a call on h3's connection,
	// which h3 itself takes only after h2's (its answer to h3's hello is
	// held back), and so retires at once; h3 must still read it.
	t.Run("LostAtOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := &holdFrame{}
			vm := startMemVMWith(t, 3, s, Config{})
			h2, h3 := vm.Daemons[1], vm.Daemons[2]
			synctest.Wait() // h2 and h3 heard of each other
			if currentPeer(h2, h3.HostID()) != nil || currentPeer(h3, h2.HostID()) != nil {
				t.Fatal("h2 and h3 are connected already")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s.hold(routing.KindHello, h2, h3, 100*time.Millisecond)
			dialled := make(chan error, 2)
			go func() { _, err := h3.dial(ctx, h2.HostID(), h2.self.Addr); dialled <- err }()
			synctest.Wait() // h2 took h3's connection; its answer is on the way
			lost := currentPeer(h2, h3.HostID())
			if lost == nil || lost.dialr {
				t.Fatalf("h2 did not take h3's connection: %v", lost != nil)
			}
			called := make(chan error, 1)
			go func() { called <- h2.callHost(ctx, h3.HostID(), mSendCheck, struct{}{}, nil) }()
			synctest.Wait() // the call is queued behind the answer
			go func() { _, err := h2.dial(ctx, h3.HostID(), h3.self.Addr); dialled <- err }()
			synctest.Wait() // h2's connection won on both sides; h3's answer is still held
			time.Sleep(200 * time.Millisecond)
			for range 2 {
				if err := <-dialled; err != nil {
					t.Fatalf("dial: %v", err)
				}
			}
			if err := <-called; err != nil {
				t.Fatalf("the call on the connection that lost: %v", err)
			}
			if !lost.retired() {
				t.Fatal("h2 did not retire h3's connection")
			}
			synctest.Wait()
			if p := currentPeer(h3, h2.HostID()); p == nil || p.dialr {
				t.Fatal("h3 does not keep h2's connection")
			}
			checkRetiredGone(t, lost, h2, h3)
		})
	})
}

// TestRejoinTiesWithTheMastersDial: a host registering again with its
// master while the master dials it (the master still counts it as a
// member) ends with the master's connection on both sides, the
// registration's retired. Before, the host set the registration's
// connection over the master's, which the master had retired: the host
// spoke to its master on a connection the master gave up.
func TestRejoinTiesWithTheMastersDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &holdFrame{}
		vm := startMemVMWith(t, 2, s, Config{})
		m, h := vm.Daemons[0], vm.Daemons[1]
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		old := currentPeer(m, h.HostID())
		// The master's answer to the registration is held on its way,
		// while the master dials the host.
		s.hold(routing.KindHello, m, h, 100*time.Millisecond)
		h.orphaned(errors.New("test: the master's connection is given up"))
		var reg *peer
		for reg == nil || reg == old {
			if ctx.Err() != nil {
				t.Fatal("the host never registered again")
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			reg = currentPeer(m, h.HostID())
		}
		if reg.dialr {
			t.Fatal("the master's connection to the host is its own, not the registration")
		}
		if _, err := m.dial(ctx, h.HostID(), h.self.Addr); err != nil {
			t.Fatalf("the master dials %s: %v", h.Name(), err)
		}
		awaitRegistered(t, ctx, h) // the held answer delivered and taken
		won := currentPeer(m, h.HostID())
		if won == reg || !won.dialr || !reg.retired() {
			t.Fatal("the master's own connection did not win the tie at the master")
		}
		hp := hostsMaster(t, h)
		if hp.dialr {
			t.Fatal("the host's connection to the master is its registration, which the master retired; want the one the master dialled")
		}
		time.Sleep(time.Minute) // past any retired connection's handshake timeout
		synctest.Wait()
		checkRetiredGone(t, reg, m, h)
		if currentPeer(h, MasterID) != hp || h.orphan.Load() {
			t.Fatal("the host lost its master's connection after the tie")
		}
	})
}

// currentPeer is d's connection to host h, if any.
func currentPeer(d *Daemon, h task.HostID) *peer {
	d.nw.mu.Lock()
	defer d.nw.mu.Unlock()
	return d.nw.peers[h]
}

// checkRetiredGone checks that the retired connection p is closed and
// that none of ds keeps a retired connection.
func checkRetiredGone(t *testing.T, p *peer, ds ...*Daemon) {
	t.Helper()
	select {
	case <-p.closed:
	default:
		t.Error("the retired connection is still open")
	}
	for _, d := range ds {
		d.nw.mu.Lock()
		n := len(d.nw.retiring)
		d.nw.mu.Unlock()
		if n > 0 {
			t.Errorf("%s keeps %d retired connections", d.Name(), n)
		}
	}
}

// holdFrame delays, once, the next frame of a kind from address from to
// address to by delay, once armed (hold).
type holdFrame struct {
	kind     atomic.Uint32
	from, to atomic.Value
	delay    atomic.Int64
}

// hold arms s: the next frame of kind k from daemon from to daemon to is
// delayed by delay.
func (s *holdFrame) hold(k routing.Kind, from, to *Daemon, delay time.Duration) {
	s.kind.Store(uint32(k))
	s.from.Store(from.self.Addr)
	s.to.Store(to.self.Addr)
	s.delay.Store(int64(delay))
}

func (s *holdFrame) Shape(u transport.Unit) transport.Decision {
	if len(u.Data) <= 4 || uint32(u.Data[4]) != s.kind.Load() {
		return transport.Decision{}
	}
	if from, _ := s.from.Load().(string); from != u.From {
		return transport.Decision{}
	}
	if to, _ := s.to.Load().(string); to != u.To {
		return transport.Decision{}
	}
	return transport.Decision{Delay: time.Duration(s.delay.Swap(0))}
}

// TestRetirement: a retired connection may close once both sides retired
// it and neither is owed a reply, whatever the order, and says so once.
func TestRetirement(t *testing.T) {
	var r retirement
	if !r.startCall() {
		t.Fatal("a call refused before the retirement")
	}
	r.startServe()
	if r.peerRetire() {
		t.Fatal("done before this side retired")
	}
	if first, done := r.retire(); !first || done {
		t.Fatalf("retire: first %v, done %v; want true, false", first, done)
	}
	if r.startCall() {
		t.Fatal("a new call taken on a retired connection")
	}
	if r.endServe() {
		t.Fatal("done with a call of this side's unanswered")
	}
	if !r.endCall() {
		t.Fatal("not done once both sides retired and no reply is owed")
	}
	if first, done := r.retire(); first || done {
		t.Fatalf("retire again: first %v, done %v; want false, false", first, done)
	}
	var q retirement
	q.retire()
	if !q.peerRetire() {
		t.Fatal("an idle connection retired by both sides is not done")
	}
	if abandoned, done := q.giveUp(); abandoned || done {
		t.Fatalf("give up after the peer retired it and done was said: abandoned %v, done %v; want false, false", abandoned, done)
	}

	// A peer that never retires the connection: this side gives up
	// waiting, and it may close once no call is under way on it.
	var a retirement
	a.startCall()
	a.startServe()
	a.retire()
	if abandoned, done := a.giveUp(); !abandoned || done {
		t.Fatalf("give up with calls under way: abandoned %v, done %v; want true, false", abandoned, done)
	}
	if a.endCall() {
		t.Fatal("done with a call of the peer's unanswered")
	}
	if !a.endServe() {
		t.Fatal("not done once given up and no reply is owed")
	}
	var g retirement
	g.giveUp()
	if g.startCall(); g.endCall() {
		t.Fatal("done though this side never retired it")
	}
}

// TestRejoinDropsTheMastersEarlierConnection: a connection the master
// dialled to a host that lost it, before the host registers again, is
// closed by the master when it takes the registration (readmit); the host
// ends on its registration's connection, whichever of the close and the
// answer it takes first.
func TestRejoinDropsTheMastersEarlierConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVM(t, 2, &faults{}, Config{})
		m, h := vm.Daemons[0], vm.Daemons[1]
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h.orphaned(errors.New("test: the master's connection is given up"))
		synctest.Wait()
		if _, err := m.dial(ctx, h.HostID(), h.self.Addr); err != nil {
			t.Fatalf("the master dials %s: %v", h.Name(), err)
		}
		synctest.Wait() // the host's side of the dial attaches it
		early := currentPeer(h, MasterID)
		if early == nil || early.dialr {
			t.Fatal("the host did not take the master's connection while it had none")
		}
		awaitRegistered(t, ctx, h)
		reg := currentPeer(m, h.HostID())
		if reg == nil || reg.dialr {
			t.Fatal("the master's connection to the host is not the registration")
		}
		hp := hostsMaster(t, h)
		if !hp.dialr || hp.retired() {
			t.Fatal("the host's connection to the master is not its registration")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if currentPeer(h, MasterID) != hp || currentPeer(m, h.HostID()) != reg || h.orphan.Load() {
			t.Fatal("the registration's connection did not last")
		}
	})
}

// blockingTask returns a task that runs until free is called, and free,
// which may be called more than once and is called when the test ends
// (before a machine started earlier in the test halts).
func blockingTask(t *testing.T) (blocker *fnTask, free func()) {
	release := make(chan struct{})
	free = sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	return fn(t, func(*task.Ctx, int) error { <-release; return nil }), free
}

// awaitRegistered waits until host h, looking for a master, has
// registered again, and for what that set going to settle.
func awaitRegistered(t *testing.T, ctx context.Context, h *Daemon) {
	t.Helper()
	for h.orphan.Load() {
		if ctx.Err() != nil {
			t.Fatal("the host never registered again")
		}
		time.Sleep(time.Millisecond)
	}
	synctest.Wait()
}

// hostsMaster is host h's current connection to the master, which must
// be the one h holds as its master's.
func hostsMaster(t *testing.T, h *Daemon) *peer {
	t.Helper()
	hp := currentPeer(h, MasterID)
	h.nw.mu.Lock()
	master := h.nw.master
	h.nw.mu.Unlock()
	switch {
	case hp == nil:
		t.Fatal("the host has no connection to the master")
	case master != hp:
		t.Fatal("the host's master connection is not its current connection to the master")
	}
	return hp
}
