package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// releasedRoot reaches a safe point every millisecond until rootRelease is
// set, then ends with Mark as its result: restored once released, it
// ends at once.
type releasedRoot struct{ Mark int }

// rootRelease lets every releasedRoot end.
var rootRelease atomic.Bool

func init() { task.Register("daemon.test.releasedroot", &releasedRoot{}) }

func (r *releasedRoot) Run(c *task.Ctx) error {
	for !rootRelease.Load() {
		time.Sleep(time.Millisecond)
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return c.SetResult(r.Mark)
}

// TestWaitFollowsARestoredRootToItsEnd: a job's root lives on h2 (spawned
// there, so h2 is its origin host, or started on the master and moved
// there), the job takes a checkpoint and h2 crashes. The job rolls back
// with its root restored on h3 (the master hosts no tasks), where it ends
// at once. A wait for the root asked after that end, which the job's
// command asks when its wait was cut off with h2 and it learns of the
// rollback late, must get the root's end from h3, and the job's waiters
// the root's result. Before, the master's route of the ended root was
// forgotten, the route led to the lost origin host or to the master
// itself, and the wait failed with "wait t2:1: no such task" after
// retrying for as long as the master takes to delete a silent host (the
// failure of TestSurviveKillOfProcesses when it killed the root's host).
func TestWaitFollowsARestoredRootToItsEnd(t *testing.T) {
	for _, c := range []struct {
		name  string
		moved bool // started on the master and moved to h2, not spawned there
	}{{"origin lost", false}, {"origin the master", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := simDir(t)
			synctest.Test(t, func(t *testing.T) {
				rootRelease.Store(false)
				defer rootRelease.Store(false)
				vm := startMemVM(t, 3, &faults{}, Config{SharedDir: dir, MasterNoTasks: true, DeadAfter: 500 * time.Millisecond})
				m := vm.Master()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				opts := JobOptions{Keep: 2}
				var root task.TID
				if c.moved {
					_, tid, err := m.StartJob(ctx, &releasedRoot{Mark: 37}, opts)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := m.Migrate(ctx, tid, "h2", Direct); err != nil {
						t.Fatal(err)
					}
					root = tid
				} else {
					tids, err := m.spawnRoots(ctx, task.SpawnRequest{Type: "daemon.test.releasedroot", State: mustState(t, &releasedRoot{Mark: 37}), Count: 1, Host: "h2"}, opts)
					if err != nil || len(tids) != 1 {
						t.Fatal(tids, err)
					}
					root = tids[0]
				}
				var job uint64
				for _, ti := range daemonNamed(t, vm, "h2").Tasks(false) {
					if ti.TID == root {
						job = ti.Job
					}
				}
				if job == 0 {
					t.Fatalf("root %v not on h2", root)
				}
				js, err := m.job(job)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.CheckpointJob(ctx, job, ""); err != nil {
					t.Fatal(err)
				}
				done := make(chan runOutcome, 1)
				go func() {
					info, err := m.waitJob(ctx, js)
					done <- runOutcome{info, err}
				}()
				synctest.Wait() // the wait is asked of h2
				daemonNamed(t, vm, "h2").crash()
				rootRelease.Store(true) // the restored root ends at once
				h3 := daemonNamed(t, vm, "h3")
				for ended := false; !ended; {
					for _, ti := range h3.Tasks(true) {
						ended = ended || ti.TID == root && ti.State == Exited
					}
					if ctx.Err() != nil {
						t.Fatalf("root %v did not end on h3: %+v", root, h3.Tasks(true))
					}
					time.Sleep(time.Millisecond)
				}
				if m.Rollbacks() != 1 {
					t.Fatalf("%d rollbacks, want 1", m.Rollbacks())
				}
				check := func(what string, info TaskInfo, err error) {
					t.Helper()
					var mark int
					if err == nil {
						err = info.Result.Decode(&mark)
					}
					if err != nil || info.TID != root || info.State != Exited || info.Status != 0 || info.Host != "h3" || mark != 37 {
						t.Fatalf("%s: %+v (result %d), %v; want root %v exited on h3 with result 37", what, info, mark, err, root)
					}
				}
				info, err := m.Wait(ctx, root)
				check("a wait after the root's end", info, err)
				r := <-done
				check("the job's wait", r.info, r.err)
			})
		})
	}
}
