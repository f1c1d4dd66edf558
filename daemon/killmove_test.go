package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
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
