package daemon

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dpvm/dpvm/routing"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// TestRouterParts checks the router's own operations: routes only move
// forward, a task that exits keeps its unacknowledged messages but not its
// numbering, and drop forgets a task on both sides.
func TestRouterParts(t *testing.T) {
	r := newRouter()
	a, b, c := task.NewTID(1, 1), task.NewTID(2, 1), task.NewTID(3, 1)
	if !r.update(b, routing.Route{Host: 2, Epoch: 2}) {
		t.Fatal("a first route was refused")
	}
	if r.update(b, routing.Route{Host: 3, Epoch: 1}) {
		t.Fatal("an older route replaced a newer one")
	}
	r.updateAll([]routing.Entry{{TID: c, Route: routing.Route{Host: 3, Epoch: 5}}})
	if got := r.lookup(b); got.Host != 2 || got.Epoch != 2 {
		t.Fatalf("route of %v: %+v", b, got)
	}
	if got := r.maxEpoch([]task.TID{b, c}, 3); got != 5 {
		t.Fatalf("max epoch %d, want 5", got)
	}
	if got := r.maxEpoch([]task.TID{b}, 7); got != 7 {
		t.Fatalf("max epoch %d, want the floor 7", got)
	}
	if got := len(r.entries()); got != 2 {
		t.Fatalf("%d entries, want 2", got)
	}

	send := func(from, to task.TID, host task.HostID) {
		r.mu.Lock()
		defer r.mu.Unlock()
		e := routing.Envelope{From: from, To: to, Seq: r.outbox.Seq(from, to), Body: task.Payload{Data: []byte("x")}}
		r.outbox.Push(e, routing.Route{Host: host, Epoch: 2}, time.Unix(0, 0))
	}
	send(a, b, 2)
	send(a, c, 3)
	send(c, b, 2)
	if got := r.pendingFrom([]task.TID{a, c}); got != 3 {
		t.Fatalf("pending %d, want 3", got)
	}
	r.exited(a)
	if got := r.pendingFrom([]task.TID{a}); got != 2 {
		t.Fatalf("an exited sender's messages went before their acknowledgement: %d pending, want 2", got)
	}
	r.mu.Lock()
	seqs := r.outbox.SenderState(a)
	r.mu.Unlock()
	if len(seqs) != 0 {
		t.Fatalf("an exited sender kept its numbering: %v", seqs)
	}
	if got := r.dropHost(3); !slices.Equal(got, []task.TID{c}) {
		t.Fatalf("dropHost(3) = %v, want [%v]", got, c)
	}
	r.drop(b)
	if got := r.pendingFrom([]task.TID{a, c}); got != 0 {
		t.Fatalf("messages for a dropped task stayed: %d", got)
	}
	r.forgetRoute(b)
	if got := r.lookup(b); got.Epoch != 0 {
		t.Fatalf("a forgotten route stayed: %+v", got)
	}
}

// TestOneNodeLock checks that the host node and the task table are one
// piece of state behind one lock: hosting's lock is the router's, and the
// host halves of moves and job checkpoints are the node's parts, so the
// critical sections that see routes and tasks together take one lock.
func TestOneNodeLock(t *testing.T) {
	d, _ := newTestDaemon(t)
	if d.ht.mu != &d.rt.mu {
		t.Fatal("hosting's lock is not the router's")
	}
	if d.ht.node != d.rt.node || d.ht.ckpts.node != d.rt.node {
		t.Fatal("hosting steps another host node than the router's")
	}
	if d.rt.routes != d.rt.node.Routes() || d.rt.outbox != d.rt.node.Outbox() || d.rt.inbox != d.rt.node.Inbox() {
		t.Fatal("the router's parts are not its node's")
	}
	// A step through hosting's seam lands in the node's move half.
	tid := task.NewTID(d.cfg.HostID, 99)
	d.rt.mu.Lock()
	d.ht.stepMove(move.HostEvent{Kind: move.EvPrepare, TID: tid, Move: 3, Route: routing.Route{Host: d.cfg.HostID, Epoch: 1}})
	_, ok := d.rt.node.Moves().Arrival(tid)
	d.rt.mu.Unlock()
	if !ok {
		t.Fatal("a prepare step through hosting left no arrival in the node")
	}
}

// TestRegistryParts checks the job registry's records: numbers go up,
// a report replaces a host's jobs while a spawn adds to them, and the
// newest complete set of a name never goes back.
func TestRegistryParts(t *testing.T) {
	r := newRegistry()
	j1 := &jobState{id: r.newID()}
	j2 := &jobState{id: r.newID()}
	if j1.id != 1 || j2.id != 2 {
		t.Fatalf("job numbers %d, %d", j1.id, j2.id)
	}
	r.add(j1)
	r.add(j2)
	r.jobsOn(5, []uint64{1}, false)
	r.jobsOn(5, []uint64{2}, false)
	r.jobsOn(6, []uint64{2}, false)
	if got := len(r.jobsOf(5)); got != 2 {
		t.Fatalf("host 5 has %d jobs, want 2", got)
	}
	r.jobsOn(5, []uint64{2}, true)
	if got := r.jobsOf(5); len(got) != 1 || got[0] != j2 {
		t.Fatalf("a report did not replace host 5's jobs: %v", got)
	}
	on := r.hostsOf(2)
	slices.Sort(on)
	if !slices.Equal(on, []task.HostID{5, 6}) {
		t.Fatalf("job 2 on %v, want [5 6]", on)
	}
	r.forgetHost(5)
	if got := r.hostsOf(2); !slices.Equal(got, []task.HostID{6}) {
		t.Fatalf("job 2 on %v after host 5 went, want [6]", got)
	}
	r.remove(1)
	if r.get(1) != nil || r.get(2) != j2 {
		t.Fatal("remove forgot the wrong job")
	}
	r.noteSetSeq("ring", 4)
	r.noteSetSeq("ring", 2)
	if got := r.setSeq("ring"); got != 4 {
		t.Fatalf("newest set %d, want 4", got)
	}
	r.raiseFloor(9, 30)
	r.raiseFloor(9, 10)
	if got := r.floor(9); got != 30 {
		t.Fatalf("floor %d, want 30", got)
	}
}

// TestMoverHolds checks that kills of a job hold its moves until the last
// one ends.
func TestMoverHolds(t *testing.T) {
	m := newMover(newMasterNode(mnode.Config{Timeouts: move.Timeouts{Step: time.Second, Suspend: time.Second, Transfer: time.Second, Retry: time.Second}}))
	start := func() error {
		return nodeRefusal(m.mn.step(mnode.Event{Kind: mnode.EvMove, TID: task.NewTID(2, 1), From: 2, Host: 3, Type: "w", Job: 3}))
	}
	r1 := m.holdMoves(3)
	r2 := m.holdMoves(3)
	r1()
	if err := start(); !errors.Is(err, move.ErrHeld) {
		t.Fatalf("a move after one of two holds ended: %v, want %v", err, move.ErrHeld)
	}
	r2()
	if err := start(); err != nil {
		t.Fatalf("a move after its job's kills ended: %v", err)
	}
	if e := m.nextEpoch(40); e <= 40 || m.epoch() != e {
		t.Fatalf("next epoch %d above 40, clock %d", e, m.epoch())
	}
}

// TestGroupNameKept checks a task's group names: its job's own group, the
// VM-wide one when asked, and no garbage for a name used over and over.
func TestGroupNameKept(t *testing.T) {
	h := &hosted{job: 7}
	if got := h.groupName("g"); got != "j7:g" {
		t.Fatalf("groupName(g) = %q, want j7:g", got)
	}
	if n := testing.AllocsPerRun(100, func() { h.groupName("g") }); n != 0 {
		t.Fatalf("%v allocations for a name used again, want 0", n)
	}
	wide := task.VMWide + "all"
	if got := h.groupName(wide); got != wide {
		t.Fatalf("groupName(%q) = %q", wide, got)
	}
	if got := h.groupName("g"); got != "j7:g" {
		t.Fatalf("groupName(g) after another = %q, want j7:g", got)
	}
}
