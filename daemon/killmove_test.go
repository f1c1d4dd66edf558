package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/task"
)

// slowTransfer delays every checkpoint stream by delay, and counts them.
type slowTransfer struct {
	delay   time.Duration
	streams atomic.Int64
}

func (s *slowTransfer) Shape(u transport.Unit) transport.Decision {
	if u.Index == 0 && len(u.Data) > 4 && routing.Kind(u.Data[4]) == routing.KindStream {
		s.streams.Add(1)
		return transport.Decision{Raw: true, Delay: s.delay}
	}
	return transport.Decision{}
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
				s := &slowTransfer{delay: 300 * time.Millisecond}
				vm := startMemVMWith(t, 3, s, Config{MoveTransferTimeout: 5 * time.Second})
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
				for s.streams.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
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
		m.rmu.Lock()
		m.routes.Update(x, routing.Route{Host: h2.HostID(), Epoch: 1})
		m.rmu.Unlock()
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
		m.rmu.Lock()
		r := m.routes.Lookup(x)
		pending := m.outbox.Pending(x)
		m.rmu.Unlock()
		if pending == 0 {
			t.Errorf("the sender dropped its message for %v after h2's refusal", x)
		}
		if r != restored {
			t.Fatalf("the sender's route for %v is %+v after h2's refusal, want %+v", x, r, restored)
		}
	})
}
