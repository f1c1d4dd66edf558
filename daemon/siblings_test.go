package daemon

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// sibTask reports its siblings (tag sibAsk) until told to end (tag
// sibEnd). With N > 0 it first spawns N sibTasks, telling the test their
// TIDs, and at the end tells them to end too.
type sibTask struct {
	N       int
	Workers []task.TID
}

// sibReport is what a sibTask says when asked.
type sibReport struct {
	TID  task.TID
	Host string
	Sibs []task.TID
	Me   int
}

const (
	sibAsk = 1
	sibEnd = 2
)

var (
	sibSpawned = make(chan []task.TID, 1)
	sibReports = make(chan sibReport, 1)
)

func init() { task.Register("daemon.test.sib", &sibTask{}) }

func (s *sibTask) Run(c *task.Ctx) error {
	if s.N > 0 && s.Workers == nil {
		tids, err := c.Spawn(&sibTask{}, s.N)
		if err != nil {
			return err
		}
		s.Workers = tids
		sibSpawned <- tids
	}
	for {
		msg, err := c.Recv(task.AnyTask, task.AnyTag, nil, task.Safe())
		if err != nil {
			return err
		}
		if msg.Tag == sibEnd {
			if len(s.Workers) > 0 {
				return c.Mcast(s.Workers, sibEnd, nil)
			}
			return nil
		}
		tids, me := c.Siblings()
		sibReports <- sibReport{TID: c.MyTID(), Host: c.HostName(), Sibs: tids, Me: me}
	}
}

// sibAsker asks the tasks of a test's virtual machine for their siblings.
type sibAsker struct {
	t   *testing.T
	ctx context.Context
	m   *Daemon
}

// tell sends tag to tid from a task of its own.
func (a sibAsker) tell(tid task.TID, tag int) {
	a.t.Helper()
	if _, err := a.m.SpawnTask(fn(a.t, func(c *task.Ctx, _ int) error { return c.Send(tid, tag, nil) })); err != nil {
		a.t.Fatal(err)
	}
}

// ask returns tid's report.
func (a sibAsker) ask(tid task.TID) sibReport {
	a.t.Helper()
	a.tell(tid, sibAsk)
	select {
	case r := <-sibReports:
		if r.TID != tid {
			a.t.Fatalf("asked %v, %v answered", tid, r.TID)
		}
		return r
	case <-a.ctx.Done():
		a.t.Fatalf("%v did not answer", tid)
	}
	return sibReport{}
}

// check asks every task of tids for its siblings: tids, and its index in
// them. It returns the hosts they answered from.
func (a sibAsker) check(when string, tids []task.TID) map[task.TID]string {
	a.t.Helper()
	hosts := map[task.TID]string{}
	for i, tid := range tids {
		r := a.ask(tid)
		if !slices.Equal(r.Sibs, tids) || r.Me != i {
			a.t.Fatalf("%s: %v on %s has siblings %v, index %d; want %v, %d", when, tid, r.Host, r.Sibs, r.Me, tids, i)
		}
		hosts[tid] = r.Host
	}
	return hosts
}

// TestSiblingsSurviveMovesAndRollbacks: four tasks spawned together over
// three hosts each see the four TIDs in spawn order and their own index
// (pvm_siblings), the root that spawned them itself alone; and so still
// after one of them moves, and after their job, checkpointed, loses a
// host and rolls back, its tasks restored from their checkpoints.
func TestSiblingsSurviveMovesAndRollbacks(t *testing.T) {
	shared := t.TempDir()
	vm := startVM(t, 3, Config{SharedDir: shared, Heartbeat: 50 * time.Millisecond, DeadAfter: 500 * time.Millisecond})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := sibAsker{t, ctx, m}
	job, root, err := m.StartJob(ctx, &sibTask{N: 4}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var workers []task.TID
	select {
	case workers = <-sibSpawned:
	case <-ctx.Done():
		t.Fatal("the root did not spawn")
	}
	a.check("the root", []task.TID{root})
	hosts := a.check("spawned", workers)
	on := map[string]bool{}
	for _, h := range hosts {
		on[h] = true
	}
	if len(on) < 2 {
		t.Fatalf("the workers all run on one host: %v", hosts)
	}

	// Move the first worker to a host it is not on.
	moved := workers[0]
	to := ""
	for _, d := range vm.Daemons {
		if d.Name() != hosts[moved] {
			to = d.Name()
		}
	}
	if _, err := m.Migrate(ctx, moved, to, Direct); err != nil {
		t.Fatal(err)
	}
	if h := a.check("after a move", workers)[moved]; h != to {
		t.Fatalf("%v answered from %s after its move to %s", moved, h, to)
	}

	// Checkpoint the job, lose a host with a worker, and roll back.
	if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
		t.Fatal(err)
	}
	lose := ""
	for _, w := range workers[1:] {
		if h := hosts[w]; h != m.Name() && h != to {
			lose = h
		}
	}
	if lose == "" {
		t.Fatalf("no worker on a host to lose: %v, %v moved to %s", hosts, moved, to)
	}
	for _, d := range vm.Daemons {
		if d.Name() == lose {
			d.crash()
		}
	}
	for deadline := time.Now().Add(30 * time.Second); m.Rollbacks() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("no rollback after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.check("the root after a rollback", []task.TID{root})
	for w, h := range a.check("after a rollback", workers) {
		if h == lose {
			t.Fatalf("%v answered from %s, the host lost", w, h)
		}
	}
	js, err := m.job(job)
	if err != nil {
		t.Fatal(err)
	}
	a.tell(root, sibEnd)
	if info, err := m.waitJob(ctx, js); err != nil || info.Status != 0 {
		t.Fatalf("job: %+v %v", info, err)
	}
}

// TestSiblingsOfOneJob: the tasks of 'dpvm spawn -n 3', one job placed over
// two hosts, are each other's siblings, in spawn order.
func TestSiblingsOfOneJob(t *testing.T) {
	vm := startVM(t, 2, Config{})
	m := vm.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := sibAsker{t, ctx, m}
	tids, err := m.spawnOneJob(ctx, task.SpawnRequest{Type: "daemon.test.sib", State: mustState(t, &sibTask{}), Count: 3}, JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, h := range a.check("spawn -n 3", tids) {
		on[h] = true
	}
	if len(on) != 2 {
		t.Fatalf("the job's tasks run on %v, want both hosts", on)
	}
	for _, tid := range tids {
		a.tell(tid, sibEnd)
	}
	for _, tid := range tids {
		if info, err := m.Wait(ctx, tid); err != nil || info.Status != 0 {
			t.Fatalf("%v: %+v %v", tid, info, err)
		}
	}
}

// TestHeldSpawn: a task of a spawn that spans hosts does not run until the
// master sends the spawn's whole list, which must name every task of the
// spawn started here; one whose list never comes gives up after
// MasterGrace and ends without running.
func TestHeldSpawn(t *testing.T) {
	standalone := func(grace time.Duration) *Daemon {
		d := New(Config{Output: &syncBuffer{}, MasterGrace: grace})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := d.Halt(ctx); err != nil {
				t.Errorf("halt: %v", err)
			}
		})
		return d
	}
	d := standalone(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan []task.TID, 2)
	req := task.SpawnRequest{Type: "daemon.test.fn", State: mustState(t, fn(t, func(c *task.Ctx, _ int) error {
		tids, _ := c.Siblings()
		ran <- tids
		return nil
	})), Count: 2}
	held, err := d.startSpawn(ctx, 0, 0, req, true, 0)
	if err != nil || len(held) != 2 {
		t.Fatalf("held spawn: %v, %v", held, err)
	}
	other := task.NewTID(7, 1)
	if err := d.releaseSiblings([]task.TID{held[0], other}); err == nil {
		t.Fatal("a list leaving out a held task was taken")
	}
	select {
	case tids := <-ran:
		t.Fatalf("a held task ran, with siblings %v", tids)
	default:
	}
	all := []task.TID{other, held[0], held[1]}
	if err := d.releaseSiblings(all); err != nil {
		t.Fatal(err)
	}
	for range held {
		if tids := <-ran; !slices.Equal(tids, all) {
			t.Fatalf("siblings %v, want %v", tids, all)
		}
	}

	d = standalone(100 * time.Millisecond)
	lost, err := d.startSpawn(ctx, 0, 0, req, true, 0)
	if err != nil || len(lost) != 2 {
		t.Fatalf("held spawn: %v, %v", lost, err)
	}
	for _, tid := range lost {
		info, err := d.Wait(ctx, tid)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == 0 || !strings.Contains(info.Err, "did not complete the spawn") {
			t.Fatalf("%v, never released: %+v", tid, info)
		}
	}
	select {
	case tids := <-ran:
		t.Fatalf("a task never released ran, with siblings %v", tids)
	default:
	}
	if err := d.releaseSiblings(lost); err != nil {
		t.Fatalf("a late list, for tasks that have ended: %v", err)
	}
}
