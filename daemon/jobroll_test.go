package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// watchRoot spawns N workers, watches their exits as the NPB root does,
// and fails as soon as one of them fails; it ends when they all exit
// cleanly (each when told, tag 5).
type watchRoot struct {
	N       int
	Workers []task.TID
	Exited  int
}

// watchWorker waits at a safe point until told to arm (tag 6), then in a
// receive that is not one until told to end (tag 5): an armed worker holds
// a job checkpoint up until its pause budget runs out.
type watchWorker struct{ Armed bool }

// watchReady hears when a watchRoot has spawned and registered.
var watchReady = make(chan task.TID, 4)

func init() {
	task.Register("daemon.test.watchroot", &watchRoot{})
	task.Register("daemon.test.watchworker", &watchWorker{})
}

func (r *watchRoot) Run(c *task.Ctx) error {
	if r.Workers == nil {
		tids, err := c.Spawn(&watchWorker{}, r.N)
		if err != nil {
			return err
		}
		if err := c.Notify(task.TaskExit, 7, tids...); err != nil {
			return err
		}
		r.Workers = tids
		watchReady <- c.MyTID()
	}
	for r.Exited < r.N {
		var n task.Notice
		if _, err := c.Recv(task.AnyTask, 7, &n, task.Safe()); err != nil {
			return err
		}
		if n.Status != 0 || n.Err != "" {
			return fmt.Errorf("worker %v failed (status %d): %s", n.TID, n.Status, n.Err)
		}
		r.Exited++
	}
	c.Printf("all %d workers done\n", r.N)
	return nil
}

func (w *watchWorker) Run(c *task.Ctx) error {
	if !w.Armed {
		if _, err := c.Recv(task.AnyTask, 6, nil, task.Safe()); err != nil {
			return err
		}
		w.Armed = true
	}
	_, err := c.Recv(task.AnyTask, 5, nil)
	return err
}

// TestRunFollowsRollback: a job run by a client, whose root watches its
// workers' exits, loses a host running a worker while a checkpoint is
// under way (an armed worker holds it). The master abandons the checkpoint
// and rolls the job back to the one before; the worker's loss is not told
// to the root as a failure, the client hears that the job rolled back and
// to which checkpoint, keeps receiving its output, and gets the job's real
// result.
func TestRunFollowsRollback(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, MoveTimeout: 3 * time.Second})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := adminClient(t, ctx, vm)
	var mu sync.Mutex
	var notes []JobNote
	cl.OnJobNote(func(n JobNote) {
		mu.Lock()
		notes = append(notes, n)
		mu.Unlock()
	})
	out := &syncBuffer{}
	type result struct {
		info TaskInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		info, err := cl.Run(ctx, "daemon.test.watchroot", mustState(t, &watchRoot{N: 3}), out)
		done <- result{info, err}
	}()
	root := <-watchReady
	var job uint64
	var lost *Daemon
	var workers []task.TID
	armed := task.TID(0)
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.TID == root {
			job = ti.Job
		}
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			workers = append(workers, ti.TID)
			if ti.Host == m.Name() {
				armed = ti.TID
			}
			if ti.Host != m.Name() && lost == nil {
				for _, d := range vm.Daemons {
					if d.Name() == ti.Host {
						lost = d
					}
				}
			}
		}
	}
	if job == 0 || len(workers) != 3 || lost == nil || armed == 0 {
		t.Fatalf("job %d, workers %v, a host to lose %v, a worker on the master %v", job, workers, lost, armed)
	}
	ck, err := m.CheckpointJob(ctx, job, "")
	if err != nil {
		t.Fatal(err)
	}
	tell := func(to task.TID, tag int) {
		t.Helper()
		if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(to, tag, nil) })); err != nil {
			t.Fatal(err)
		}
	}
	tell(armed, 6)
	second := make(chan error, 1)
	go func() {
		_, err := m.CheckpointJob(ctx, job, "")
		second <- err
	}()
	for { // the second checkpoint waits for the armed worker
		if p := m.jobTask(armed); p != nil && p.pause.Load() != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	lost.crash()
	if err := <-second; err == nil {
		t.Fatal("a checkpoint spanning the loss of a host completed")
	}
	deadline := time.Now().Add(30 * time.Second)
	for m.Rollbacks() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, w := range workers { // restored unarmed
		tell(w, 6)
		tell(w, 5)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the run did not end")
	}
	if r.err != nil || r.info.Status != 0 {
		t.Fatalf("run: %+v %v\n%s", r.info, r.err, out)
	}
	if !strings.Contains(out.String(), "all 3 workers done") {
		t.Fatalf("output %q", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 1 || notes[0].Kind != NoteRolledBack || notes[0].Seq != ck.Seq || notes[0].Job != job || notes[0].Host != lost.cfg.HostID.String() || notes[0].Tasks != 4 {
		t.Fatalf("notes %+v, want one rollback of job %d to checkpoint %d after losing %v", notes, job, ck.Seq, lost.cfg.HostID)
	}
	if s := notes[0].String(); !strings.Contains(s, fmt.Sprintf("rolled back to checkpoint %d", ck.Seq)) {
		t.Fatalf("note %q", s)
	}
}

// TestKillJobDropsWhatItsTasksSent: when a job rolls back, a host ends the
// job's tasks and forgets every message they sent that is still
// unacknowledged or held, so none reaches the restored incarnations (whose
// sequence numbers start again from their checkpoint, and would accept
// it as new).
func TestKillJobDropsWhatItsTasksSent(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := m.newJob("drop", "daemon.test.watchworker", JobOptions{})
	tids, err := m.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: "daemon.test.watchworker", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	sender := tids[0]
	far := task.NewTID(2, 999) // a task of the job on h2, moving: messages for it are held
	m.rt.mu.Lock()
	e := routing.Envelope{From: sender, To: far, Seq: m.rt.outbox.Seq(sender, far), Tag: 2, Body: task.Payload{Data: []byte("token")}}
	m.rt.outbox.Push(e, routing.Route{Host: 2, Epoch: 3, InTransit: true}, time.Now())
	m.rt.mu.Unlock()
	m.killJob(ctx, ckStep{Job: js.id, Timeout: time.Second})
	m.rt.mu.Lock()
	left := m.rt.outbox.PendingFrom(sender)
	m.rt.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d messages of the killed %v kept", left, sender)
	}
}

// slowSafe reaches its first safe point after Offset of computing, then
// one every Every, N in all.
type slowSafe struct {
	Offset, Every time.Duration
	N, I          int
}

func init() { task.Register("daemon.test.slowsafe", &slowSafe{}) }

func (s *slowSafe) Run(c *task.Ctx) error {
	for s.I < s.N {
		d := s.Every
		if s.I == 0 {
			d = s.Offset
		}
		time.Sleep(d) // computing, in the test's virtual time
		s.I++
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return nil
}

// TestSlowSafePointsGetCheckpointed: a job checkpointed every second whose
// task reaches a safe point every second, 600 ms after each tick, gets its
// checkpoints: half the period (500 ms), what a round gave it before, is
// never enough, but the budget follows the interval the task shows.
// Virtual time (synctest): no figure depends on the machine's speed.
func TestSlowSafePointsGetCheckpointed(t *testing.T) {
	shared := t.TempDir()
	secret, err := pki.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		d := New(Config{Output: &syncBuffer{}, SharedDir: shared, Secret: secret})
		ctx := context.Background()
		_, _, err := d.StartJob(ctx, &slowSafe{Offset: 600 * time.Millisecond, Every: time.Second, N: 30}, JobOptions{CheckpointEvery: time.Second, Keep: 100})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		seqs, err := jobset.Sets(filepath.Join(shared, "job-j1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) < 5 {
			t.Errorf("%d checkpoints in 15 s of a job checkpointed every second: %v", len(seqs), seqs)
		}
		if err := d.Halt(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// jobTask is the task tid hosted here, or nil.
func (d *Daemon) jobTask(tid task.TID) *hosted {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	return d.ht.tasks[tid]
}

// TestRollbackRestoresWhereCheckpointed: a worker moved away from its
// origin before the checkpoint goes back, when its job rolls back, to the
// host it was checkpointed on, not to its origin; and the job finishes.
func TestRollbackRestoresWhereCheckpointed(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 4, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, root, err := m.StartJob(ctx, &watchRoot{N: 3}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-watchReady; got != root {
		t.Fatalf("ready %v, want %v", got, root)
	}
	hostOf := map[task.TID]string{}
	var workers []task.TID
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			workers = append(workers, ti.TID)
			hostOf[ti.TID] = ti.Host
		}
	}
	if len(workers) != 3 {
		t.Fatalf("workers %v", workers)
	}
	// Move the first worker to the host of the second; lose the third's.
	moved, to := workers[0], hostOf[workers[1]]
	if hostOf[workers[2]] == to || hostOf[workers[2]] == hostOf[moved] || hostOf[workers[2]] == m.Name() {
		t.Fatalf("placement %v does not fit the test", hostOf)
	}
	if _, err := m.Migrate(ctx, moved, to, Direct); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range vm.Daemons {
		if d.Name() == hostOf[workers[2]] {
			d.crash()
		}
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for m.Rollbacks() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts, err = m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.TID == moved && ti.Host != to {
			t.Fatalf("%v restored on %s, checkpointed on %s", moved, ti.Host, to)
		}
	}
	for _, w := range workers {
		for _, tag := range []int{6, 5} {
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(w, tag, nil) })); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := m.waitJob(ctx, js)
	if err != nil || info.Status != 0 {
		t.Fatalf("job after the rollback: %+v %v", info, err)
	}
}

// TestJobRollsBackWhileMessagesFly: a ring checkpointed while its token
// circulates loses a host and rolls back; it sums as an uninterrupted ring
// does, whatever was in flight when the host went: nothing the killed
// incarnations sent reaches the restored ones, and the root, restored
// waiting for its lap's token, does not send that token again (ringRoot's
// Sent field; without it the rolled-back ring summed differently in 5 runs
// of 6, as TestJobRollsBackWhenAHostIsLost once did).
func TestJobRollsBackWhileMessagesFly(t *testing.T) {
	shared := t.TempDir()
	out := &syncBuffer{}
	vm := startVM(t, 4, Config{SharedDir: shared, Output: out, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ring := &ringRoot{N: 6, Laps: 400}
	sum := func(root task.TID, job uint64) string {
		t.Helper()
		js, err := m.job(job)
		if err != nil {
			t.Fatal(err)
		}
		info, err := m.waitJob(ctx, js)
		if err != nil || info.Status != 0 {
			t.Fatalf("ring: %+v %v\n%s", info, err, out)
		}
		all := ringSum.FindAllStringSubmatch(out.String(), -1)
		if len(all) == 0 {
			t.Fatalf("no result: %q", out)
		}
		return all[len(all)-1][1]
	}
	job, root, err := m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	poke(t, m, root)
	want := sum(root, job)

	job, root, err = m.StartJob(ctx, ring, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRingMid(t)
	poke(t, m, root) // the token goes round again
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	vm.Daemons[1].crash() // h2 runs workers (placed round robin)
	if got := sum(root, job); got != want || m.Rollbacks() != 1 {
		t.Fatalf("rolled back ring sums %s after %d rollbacks, uninterrupted %s", got, m.Rollbacks(), want)
	}
}

// TestRollbackKillsATaskCaughtMidMove: a worker's move is held after its
// checkpoint has reached the destination (suspended at its origin, its
// arrival staged at the destination) while its job rolls back for a lost
// host. The rollback aborts the move and drops both copies with the job's
// tasks, so the checkpointed worker is restored beside nothing: after the
// rollback it is live on exactly one host, the held move's later steps
// are refused, and the job ends as it would have.
func TestRollbackKillsATaskCaughtMidMove(t *testing.T) {
	shared := t.TempDir()
	hook, hold, release := holdAt("migrate:sent")
	defer release()
	cfg := Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond, FaultHook: hook}
	vm := startVM(t, 4, cfg)
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, root, err := m.StartJob(ctx, &watchRoot{N: 3}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-watchReady; got != root {
		t.Fatalf("ready %v, want %v", got, root)
	}
	hostOf := map[task.TID]string{}
	var workers []task.TID
	ts, err := m.AllTasks(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Job == job && ti.TID != root {
			workers = append(workers, ti.TID)
			hostOf[ti.TID] = ti.Host
		}
	}
	if len(workers) != 3 {
		t.Fatalf("workers %v", workers)
	}
	moved, to, lost := workers[0], hostOf[workers[1]], hostOf[workers[2]]
	if lost == to || lost == hostOf[moved] || lost == m.Name() || to == hostOf[moved] {
		t.Fatalf("placement %v does not fit the test", hostOf)
	}
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	moveErr := make(chan error, 1)
	go func() {
		_, err := m.Migrate(ctx, moved, to, Direct)
		moveErr <- err
	}()
	select {
	case <-hold:
	case err := <-moveErr:
		t.Fatalf("the move ended before its checkpoint was sent: %v", err)
	}
	for _, d := range vm.Daemons {
		if d.Name() == lost {
			d.crash()
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for m.Rollbacks() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	select {
	case err := <-moveErr:
		if !errors.Is(err, ErrAborted) {
			t.Fatalf("the held move: %v, want it aborted", err)
		}
	case <-ctx.Done():
		t.Fatal("the held move never ended")
	}
	live := func() []string {
		var on []string
		for _, d := range vm.Daemons {
			if d.Name() == lost {
				continue
			}
			d.ht.mu.Lock()
			_, here := d.ht.tasks[moved]
			_, leaving := d.ht.moving[moved]
			_, arriving := d.ht.incoming[moved]
			d.ht.mu.Unlock()
			if here {
				on = append(on, d.Name())
			}
			if leaving || arriving {
				on = append(on, d.Name()+" (caught in the move)")
			}
		}
		return on
	}
	if on := live(); len(on) != 1 || on[0] != hostOf[moved] {
		t.Fatalf("%v after the rollback on %v, want on %s alone (where it was checkpointed)", moved, on, hostOf[moved])
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		for _, tag := range []int{6, 5} {
			if _, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error { return c.Send(w, tag, nil) })); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := m.waitJob(ctx, js)
	if err != nil || info.Status != 0 {
		t.Fatalf("job after the rollback: %+v %v", info, err)
	}
	if on := live(); len(on) != 0 {
		t.Fatalf("%v still on %v after its job ended", moved, on)
	}
}
