package daemon

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
	"github.com/vmihailenco/msgpack/v5"
)

// gated is a task whose state's encoding waits at gates while they are
// set: a test holds a checkpoint half written. It adds what it receives
// and waits in a Recv with task.Safe, so it can be moved at any time.
type gated struct {
	Gate gate
	Sum  int
}

type gate struct{}

// gates, when set, make a gate's encoding signal in and wait for out.
var gates *gatePair

type gatePair struct{ in, out chan struct{} }

func (gate) EncodeMsgpack(e *msgpack.Encoder) error {
	if g := gates; g != nil {
		g.in <- struct{}{}
		<-g.out
	}
	return e.EncodeNil()
}

func (*gate) DecodeMsgpack(d *msgpack.Decoder) error { return d.Skip() }

func init() { task.Register("daemon.test.gated", &gated{}) }

func (g *gated) Run(c *task.Ctx) error {
	for {
		var n int
		if _, err := c.Recv(task.AnyTask, task.AnyTag, &n, task.Safe()); err != nil {
			return err
		}
		g.Sum += n
	}
}

// haltInBubble halts d before a synctest bubble ends.
func haltInBubble(t *testing.T, d *Daemon) {
	t.Cleanup(func() {
		if err := d.Halt(context.Background()); err != nil {
			t.Errorf("halt: %v", err)
		}
	})
}

// TestLateRestoreAfterCancelIsRefused: the destination is told to drop an
// arrival (the master aborted the move) while its restore still waits for
// the checkpoint; the checkpoint then arrives. The restore must fail and
// the task must not run here: the origin resumes it.
func TestLateRestoreAfterCancelIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{})
		haltInBubble(t, d)
		tid := task.NewTID(2, 1)
		step := migStep{TID: tid, Move: 7, Type: "daemon.test.gated", Host: 2, Epoch: 1, Via: Direct, Timeout: time.Minute}
		if err := d.prepareArrival(step); err != nil {
			t.Fatal(err)
		}
		d.ht.mu.Lock()
		arr := d.ht.incoming[tid]
		d.ht.mu.Unlock()
		restored := make(chan error, 1)
		go func() { restored <- d.restoreArrival(context.Background(), step) }()
		synctest.Wait() // the restore waits for the checkpoint
		if d.cancelArrival(migStep{TID: tid, Move: 7, Route: routing.Route{Host: 2, Epoch: 2}}) {
			t.Fatal("cancel found the task installed before its checkpoint came")
		}
		arr.received <- transferred{meta: &ckpt.Meta{TID: tid, Type: "daemon.test.gated", Epoch: 1}, t: &gated{}}
		if err := <-restored; err == nil {
			t.Error("a restore finished after its move was cancelled")
		}
		h := d.ht.task(tid)
		if h != nil {
			t.Fatalf("%v runs at the destination after the move was cancelled (and at its origin again)", tid)
		}
	})
}

// TestResumeWaitsForCheckpointSend: the origin is told to resume a task
// (the master aborted the move) while the task's checkpoint is still being
// written. The task must not run again before the write is over: it would
// change the state being encoded, and run twice if the checkpoint is
// restored.
func TestResumeWaitsForCheckpointSend(t *testing.T) {
	dir := t.TempDir()
	secret, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{SharedDir: dir, Secret: secret})
		haltInBubble(t, d)
		ctx := context.Background()
		tid, err := d.SpawnTask(&gated{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := d.suspendForMove(ctx, migStep{TID: tid, Move: 3, Host: 2, Epoch: 1, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		gates = &gatePair{in: make(chan struct{}), out: make(chan struct{})}
		sent := make(chan error, 1)
		go func() {
			_, err := d.sendCheckpoint(ctx, migStep{TID: tid, Move: 3, Host: 2, Epoch: 1, Via: Indirect, Name: "t.ckpt"})
			sent <- err
		}()
		select {
		case <-gates.in: // the checkpoint is half written
		case err := <-sent:
			t.Fatalf("the checkpoint was written without its gate: %v", err)
		}
		resumed := make(chan error, 1)
		go func() {
			resumed <- d.resumeDeparture(ctx, migStep{TID: tid, Move: 3, Route: routing.Route{Host: 1, Epoch: 2}})
		}()
		synctest.Wait()
		select {
		case err := <-resumed:
			d.ht.mu.Lock()
			running := d.ht.tasks[tid] != nil
			d.ht.mu.Unlock()
			t.Errorf("resume returned (%v, running %v) while the checkpoint was being written", err, running)
		default:
		}
		g := gates
		gates = nil
		g.out <- struct{}{}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if err := <-resumed; err != nil {
			t.Fatal(err)
		}
		// A send of the move after the resume is refused.
		if _, err := d.sendCheckpoint(ctx, migStep{TID: tid, Move: 3, Host: 2, Epoch: 1, Via: Indirect, Name: "u.ckpt"}); err == nil {
			t.Error("a checkpoint was sent after its move was resumed")
		}
		d.ht.mu.Lock()
		running := d.ht.tasks[tid] != nil
		d.ht.mu.Unlock()
		if !running {
			t.Fatalf("%v does not run at its origin after the resume", tid)
		}
	})
}

// TestEpochAboveForgottenRoutes: a task moves (its route epoch grows on
// the daemons), then exits, and the master forgets its route. An epoch
// the master hands out for it afterwards (a job restarting it from a
// checkpoint) must still be above every epoch any daemon held for it:
// a smaller one would leave senders that still hold it on the route to
// the host it exited on, which refuses their messages as for an exited
// task, and they would be dropped.
func TestEpochAboveForgottenRoutes(t *testing.T) {
	vm := startVM(t, 3, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mv task.TID
	held := uint64(0)
	runRoot(t, m, func(c *task.Ctx, _ int) error {
		tids, err := c.Spawn(&movingTask{}, 1, task.OnHost("h2"))
		if err != nil {
			return err
		}
		mv = tids[0]
		if _, err := m.Migrate(ctx, mv, "h3", Direct); err != nil {
			return err
		}
		for _, d := range vm.Daemons {
			held = max(held, d.routeEpoch(mv))
		}
		return stopMover(c, mv, 0)
	})
	if _, err := m.Wait(ctx, mv); err != nil {
		t.Fatal(err)
	}
	if held == 0 {
		t.Fatal("no daemon held a route for the moved task")
	}
	// The master forgets the route of a task that has exited.
	for m.routeEpoch(mv) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the master keeps the exited task's route")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := m.restartEpoch([]task.TID{mv}, 0); e <= held {
		t.Fatalf("restart epoch %d, not above the epoch %d a daemon holds", e, held)
	}
}

func (d *Daemon) routeEpoch(tid task.TID) uint64 {
	d.rt.mu.Lock()
	defer d.rt.mu.Unlock()
	return d.rt.routes.Lookup(tid).Epoch
}

// napper reaches a safe point once a (virtual) second.
type napper struct{ Naps int }

func init() { task.Register("daemon.test.napper", &napper{}) }

func (n *napper) Run(c *task.Ctx) error {
	for {
		time.Sleep(time.Second)
		n.Naps++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}

// TestSuspendAfterResumeIsRefused: the master's suspend call times out
// before the task reaches a safe point, so the move aborts and the
// origin's resume finds the task running. When the task then reaches its
// safe point, it must not suspend for the aborted move: nobody would
// ever resume it.
func TestSuspendAfterResumeIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tid := napperHere(t)
		ctx := context.Background()
		suspended := make(chan error, 1)
		go func() {
			suspended <- d.suspendForMove(ctx, migStep{TID: tid, Move: 5, Host: 2, Epoch: 1, Timeout: time.Minute})
		}()
		synctest.Wait() // the request waits for the safe point
		if err := d.resumeDeparture(ctx, migStep{TID: tid, Move: 5, Route: routing.Route{Host: 1, Epoch: 2}}); err != nil {
			t.Fatal(err)
		}
		if err := <-suspended; !errors.Is(err, ErrAborted) {
			t.Errorf("suspend for an aborted move: %v, want ErrAborted", err)
		}
		d.ht.mu.Lock()
		_, away := d.ht.moving[tid]
		_, here := d.ht.tasks[tid]
		d.ht.mu.Unlock()
		if away || !here {
			t.Fatalf("%v suspended for an aborted move (suspended %v, running %v)", tid, away, here)
		}
	})
}

// TestMoveFloorTrimmedOnExit: the floor a host keeps per task against late
// steps of cancelled moves goes when the task ends there, so the map does
// not grow with every task that was ever moved back.
func TestMoveFloorTrimmedOnExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tid := napperHere(t)
		ctx := context.Background()
		if err := d.suspendForMove(ctx, migStep{TID: tid, Move: 5, Host: 2, Epoch: 1, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := d.resumeDeparture(ctx, migStep{TID: tid, Move: 5, Route: routing.Route{Host: 1, Epoch: 2}}); err != nil {
			t.Fatal(err)
		}
		if floor := underMu(d, func() move.ID { f, _ := d.ht.node.Moves().Floor(tid); return f }); floor != 5 {
			t.Fatalf("floor of %v after the resume: %v, want move 5", tid, floor)
		}
		if err := d.Kill(tid); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Wait(ctx, tid); err != nil {
			t.Fatal(err)
		}
		if underMu(d, func() bool { _, kept := d.ht.node.Moves().Floor(tid); return kept }) {
			t.Fatalf("%v exited and its move floor is still kept", tid)
		}
	})
}

// TestSuspendOlderThanRouteIsRefused: a suspend step whose move is older
// than the route this host holds for the task (the task came back, or its
// job was restored, since the move began) is refused even with no floor
// kept for the task, as after its earlier incarnation exited here.
func TestSuspendOlderThanRouteIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tid := napperHere(t)
		d.rt.mu.Lock()
		d.rt.routes.Update(tid, routing.Route{Host: 1, Epoch: 3})
		d.rt.mu.Unlock()
		err := d.suspendForMove(context.Background(), migStep{TID: tid, Move: 9, Host: 2, Epoch: 2, Timeout: time.Minute})
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("suspend for a move older than the route: %v, want ErrAborted", err)
		}
		if underMu(d, func() bool { _, away := d.ht.moving[tid]; return away }) {
			t.Fatalf("%v suspended for a move older than its route", tid)
		}
	})
}

// TestLatePauseAfterResumeIsRefused: a checkpoint round's pause that
// reaches a host after the master resumed that round (it was stalled on
// its way) must not pause the job's tasks: no resume would ever come for
// them, and the job would hang.
func TestLatePauseAfterResumeIsRefused(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{SharedDir: dir})
		haltInBubble(t, d)
		ctx := context.Background()
		job, root, err := d.StartJob(ctx, &napper{}, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		call := func(method string, try uint64) error {
			body, err := encodeMsg(ckStep{Job: job, Round: jobck.Round{Job: job, Seq: 1, Try: try, Kind: jobck.Checkpoint}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.safeHandle(ctx, nil, method, body)
			return err
		}
		if err := call(mCkResume, 3); err != nil {
			t.Fatal(err)
		}
		if err := call(mCkPause, 3); !errors.Is(err, ErrAborted) {
			t.Errorf("a pause of round 3 after its resume: %v, want ErrAborted", err)
		}
		h := d.ht.task(root)
		if h == nil || h.pause.Load() != nil {
			t.Fatalf("%v is left paused by a round already resumed", root)
		}
		// The next round pauses it.
		if err := call(mCkPause, 4); err != nil {
			t.Fatalf("pause of round 4: %v", err)
		}
		if h.pause.Load() == nil {
			t.Fatal("round 4 did not pause the task")
		}
		if err := call(mCkResume, 4); err != nil {
			t.Fatal(err)
		}
	})
}

// underMu returns what f returns, called with d.ht.mu held.
func underMu[T any](d *Daemon, f func() T) T {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	return f()
}

// napperHere starts a daemon, halted when the synctest bubble ends, and a
// napper on it.
func napperHere(t *testing.T) (*Daemon, task.TID) {
	t.Helper()
	d := New(Config{})
	haltInBubble(t, d)
	tid, err := d.SpawnTask(&napper{})
	if err != nil {
		t.Fatal(err)
	}
	return d, tid
}

// TestSuspendOnStaleRecordIsRefused: the master moves a task on what it
// remembers of the task's type and job; a suspend whose record does not
// match the task the origin runs is refused before anything is captured,
// and the task runs on.
func TestSuspendOnStaleRecordIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tid := napperHere(t)
		err := d.suspendForMove(context.Background(), migStep{TID: tid, Move: 3, Type: "daemon.test.napper", Job: 7, Host: 2, Epoch: 1, Timeout: time.Minute})
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("suspend on a stale record: %v, want ErrAborted", err)
		}
		if underMu(d, func() bool { _, away := d.ht.moving[tid]; return away }) || d.ht.task(tid) == nil {
			t.Fatalf("%v suspended on a stale record", tid)
		}
	})
}

// TestMoveRemembersTaskFacts: the master asks a task's type and job only
// before its first move. A remembered task that exited since fails its
// next move with ErrNoSuchTask and leaves nothing prepared at the
// destination; a stale record aborts at the origin's suspend, the task
// runs on there, and the next move, asking afresh, goes through.
func TestMoveRemembersTaskFacts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 3, nil, Config{})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tid := spawnOn(t, m, "h2", &cargo{Data: []byte("x")})
		if _, err := m.Migrate(ctx, tid, "h3", Direct); err != nil {
			t.Fatal(err)
		}
		f, ok := m.mv.factsOf(tid)
		if !ok || f.Type != "daemon.test.cargo" || f.Job != 0 {
			t.Fatalf("after a move the master remembers %+v (%v)", f, ok)
		}

		// A stale record: the origin refuses to suspend the task.
		m.mn.mu.Lock()
		m.mv.rememberLocked(tid, migReply{Type: f.Type, Job: 99})
		m.mn.mu.Unlock()
		if _, err := m.Migrate(ctx, tid, "h2", Direct); !errors.Is(err, ErrAborted) {
			t.Fatalf("move on a stale record: %v, want ErrAborted", err)
		}
		synctest.Wait()
		if !runsOn(vm.Daemons[2], tid) || runsOn(vm.Daemons[1], tid) {
			t.Fatalf("%v does not run on h3 alone after the aborted move", tid)
		}
		if _, ok := m.mv.factsOf(tid); ok {
			t.Fatal("the stale record is kept after the move failed")
		}
		if _, err := m.Migrate(ctx, tid, "h2", Direct); err != nil {
			t.Fatalf("move after asking afresh: %v", err)
		}

		// The task exits: its next move fails, nothing is left prepared.
		if err := m.KillTask(ctx, tid); err != nil {
			t.Fatal(err)
		}
		if _, ok := m.mv.factsOf(tid); !ok {
			t.Fatal("the record went with the kill: the next move would not use it")
		}
		if _, err := m.Migrate(ctx, tid, "h3", Direct); !errors.Is(err, task.ErrNoSuchTask) {
			t.Fatalf("move of an exited task: %v, want ErrNoSuchTask", err)
		}
		synctest.Wait()
		for _, d := range vm.Daemons {
			if n := underMu(d, func() int { return len(d.ht.incoming) + len(d.ht.moving) }); n != 0 {
				t.Errorf("%s keeps %d arrivals or departures after the failed move", d.Name(), n)
			}
		}
	})
}

// TestMoveOutlivesItsCaller: Migrate drives the move's steps on its
// caller's goroutine; when the caller gives up mid-move (its context
// ends while the checkpoint travels), Migrate returns after the step
// under way and the move goes on to its end without it: the task runs at
// the destination alone, and the master holds no move of it.
func TestMoveOutlivesItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm, s := midMoveVM(t)
		m := vm.Master()
		tid := spawnOn(t, m, "h2", &cargo{Data: make([]byte, 4<<10)})
		ctx, giveUp := context.WithCancel(context.Background())
		moved := make(chan error, 1)
		go func() {
			_, err := m.Migrate(ctx, tid, "h3", Direct)
			moved <- err
		}()
		<-s.sent
		giveUp()
		if err := <-moved; !errors.Is(err, context.Canceled) {
			t.Fatalf("Migrate after its caller gave up: %v, want context.Canceled", err)
		}
		// The checkpoint's travel (virtual time), then the move's last
		// steps on a tracked goroutine.
		time.Sleep(s.delay)
		synctest.Wait()
		if !runsOn(vm.Daemons[2], tid) || runsOn(vm.Daemons[1], tid) {
			t.Fatalf("%v does not run on h3 alone once the move is over", tid)
		}
		if m.mv.moving(tid) {
			t.Fatalf("the master still holds a move of %v", tid)
		}
	})
}

// TestSuspendRepeatedForItsMove: a suspend step for the move a task is
// already suspended for succeeds, so a repeated step is not taken for a
// refusal (which would end the move with the task suspended and nobody to
// resume it); one for another move is refused as for no such task.
func TestSuspendRepeatedForItsMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, tid := napperHere(t)
		ctx := context.Background()
		step := migStep{TID: tid, Move: 5, Host: 2, Epoch: 1, Timeout: time.Minute}
		if err := d.suspendForMove(ctx, step); err != nil {
			t.Fatal(err)
		}
		if err := d.suspendForMove(ctx, step); err != nil {
			t.Fatalf("suspend repeated for its move: %v, want success", err)
		}
		step.Move = 6
		if err := d.suspendForMove(ctx, step); !errors.Is(err, task.ErrNoSuchTask) {
			t.Fatalf("suspend for another move: %v, want ErrNoSuchTask", err)
		}
		if err := d.resumeDeparture(ctx, migStep{TID: tid, Move: 5, Route: routing.Route{Host: 1, Epoch: 2}}); err != nil {
			t.Fatal(err)
		}
	})
}
