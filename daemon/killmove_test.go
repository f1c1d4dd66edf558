package daemon

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// slowTransfer delays every checkpoint stream by delay, and closes sent
// when the first one starts.
type slowTransfer struct {
	delay time.Duration
	once  sync.Once
	sent  chan struct{}
}

func (s *slowTransfer) Shape(u transport.Unit) transport.Decision {
	if u.Index == 0 && len(u.Data) > 4 && routing.Kind(u.Data[4]) == routing.KindStream {
		s.once.Do(func() { close(s.sent) })
		return transport.Decision{Raw: true, Delay: s.delay}
	}
	return transport.Decision{}
}

// midMoveVM starts a machine of three daemons on transport.Mem whose
// checkpoints take 300 ms to travel, so that a task moving is caught in
// the move (on no host's task list) for that long after s.sent closes.
func midMoveVM(t *testing.T) (*LocalVM, *slowTransfer) {
	s := &slowTransfer{delay: 300 * time.Millisecond, sent: make(chan struct{})}
	return startMemVMWith(t, 3, s, Config{MoveTransferTimeout: 5 * time.Second}), s
}

// TestKillCatchesATaskMidMove: a job killed, or a task killed, while one
// of its tasks is suspended for a move (its checkpoint on the way) does
// not survive the kill: the kill waits for the move to end, and no move of
// a job being killed starts. Before, the task was on no host's task list
// while it moved, the kill missed it, and the move brought it back to
// life at its destination.
func TestKillCatchesATaskMidMove(t *testing.T) {
	for _, byJob := range []bool{true, false} {
		name := "KillTask"
		if byJob {
			name = "KillJob"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vm, s := midMoveVM(t)
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				job, root, err := m.StartJob(ctx, &cargo{Data: make([]byte, 4<<10)}, JobOptions{})
				if err != nil {
					t.Fatal(err)
				}
				from := m.routeHost(root)
				var to *Daemon
				for _, d := range vm.Daemons {
					if d.HostID() != from {
						to = d
						break
					}
				}
				moved := make(chan error, 1)
				go func() {
					_, err := m.Migrate(ctx, root, to.Name(), Direct)
					moved <- err
				}()
				// Wait until the checkpoint is on its way: the task is in
				// no host's task list.
				<-s.sent
				for _, d := range vm.Daemons {
					if runsOn(d, root) {
						t.Fatalf("%v still runs on %s while its checkpoint travels", root, d.Name())
					}
				}
				if byJob {
					n, err := m.KillJob(ctx, job)
					if err != nil || n != 1 {
						t.Fatalf("KillJob: %d killed, %v; want 1", n, err)
					}
				} else if err := m.KillTask(ctx, root); err != nil {
					t.Fatalf("KillTask: %v", err)
				}
				if err := <-moved; err != nil {
					t.Logf("the move: %v", err)
				}
				if _, err := m.Migrate(ctx, root, m.hostName(from), Direct); err == nil {
					t.Errorf("%v moved after it was killed", root)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				for _, d := range vm.Daemons {
					if runsOn(d, root) {
						t.Fatalf("%v runs on %s after it was killed", root, d.Name())
					}
				}
			})
		})
	}
}

// TestStoppedTaskRefusedWithItsNewRoute: a host where a task was stopped
// (killed for its job's rollback, or given up with the host) and that has
// since learnt the task's route to another host (its restored
// incarnation) refuses a late message for it naming that route, not as
// for a task that has exited: the sender follows the task instead of
// dropping everything it holds for it.
func TestStoppedTaskRefusedWithItsNewRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 3, &streamShaper{}, Config{})
		m, h2, h3 := vm.Daemons[0], vm.Daemons[1], vm.Daemons[2]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		x := spawnOn(t, m, h2.Name(), &cargo{})
		if err := h2.Kill(x); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// h2 learns that x lives on at h3 (a restore's route); the master
		// and its tasks still send to h2.
		restored := routing.Route{Host: h3.HostID(), Epoch: 99}
		h2.applyRoutes([]routing.Entry{{TID: x, Route: restored}})
		m.rt.mu.Lock()
		m.rt.routes.Update(x, routing.Route{Host: h2.HostID(), Epoch: 1})
		m.rt.mu.Unlock()
		s, err := m.SpawnTask(fn(t, func(c *task.Ctx, _ int) error {
			return c.Send(x, 1, "late")
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Wait(ctx, s); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		m.rt.mu.Lock()
		r := m.rt.routes.Lookup(x)
		pending := m.rt.outbox.Pending(x)
		m.rt.mu.Unlock()
		if pending == 0 {
			t.Errorf("the sender dropped its message for %v after h2's refusal", x)
		}
		if r != restored {
			t.Fatalf("the sender's route for %v is %+v after h2's refusal, want %+v", x, r, restored)
		}
	})
}

// TestNoCheckpointWithoutALostHostsTasks: between a host's deletion and
// its jobs' coordinators hearing of it, a checkpoint round of a job with
// tasks there neither starts nor commits: on the hosts left it would miss
// those tasks, and a rollback would go back to a set without them (the
// simulation's seed 3937: a ring restored without one of its workers
// never ended).
func TestNoCheckpointWithoutALostHostsTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		vm := startMemVMWith(t, 2, &streamShaper{}, Config{SharedDir: dir})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		job, _, err := m.StartJob(ctx, &cargo{}, JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const gone = task.HostID(99) // deleted; its jobs not yet told
		m.reg.jobsOn(gone, []uint64{job}, false)
		if _, err := m.CheckpointJob(ctx, job, ""); err == nil {
			t.Fatal("a checkpoint round ran while a deleted host held tasks of the job")
		}
		m.reg.forgetHost(gone)
		if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
			t.Fatalf("once the loss is handled: %v", err)
		}
	})
}

// TestWatchCatchesATaskMidMove: an exit watch registered while the task
// is caught in a move (suspended, its checkpoint on the way) waits for the
// move and is registered where the task ends up: the watcher hears of the
// task's real exit, and of nothing before. Before, the origin, which no
// longer listed the task, answered at once that there was no such task
// (NPB's kernels under migration saw a worker reported gone while it
// moved).
func TestWatchCatchesATaskMidMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm, s := midMoveVM(t)
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		obs, notices := spawnNoticeObserver(t, m, "h1", 7, 4)
		tid := spawnOn(t, m, "h2", &cargo{Data: make([]byte, 4<<10)})
		moved := make(chan error, 1)
		go func() {
			_, err := m.Migrate(ctx, tid, "h3", Direct)
			moved <- err
		}()
		<-s.sent
		if err := m.registerExitWatch(ctx, notifyArgs{Kind: task.TaskExit, Watcher: obs, Tag: 7, TIDs: []task.TID{tid}}); err != nil {
			t.Fatalf("watch a task mid-move: %v", err)
		}
		if err := <-moved; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case n := <-notices:
			t.Fatalf("told %+v while %v lives on", n, tid)
		default:
		}
		if err := m.KillTask(ctx, tid); err != nil {
			t.Fatal(err)
		}
		n := nextNotice(t, notices)
		if n.TID != tid || n.Err == "no such task" {
			t.Fatalf("after the kill: %+v", n)
		}
	})
}
