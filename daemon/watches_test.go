package daemon

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dpvm/dpvm/task"
)

// nextNotice is the next notice the observer passes on, or a failure if
// none comes within a minute (of the bubble's virtual time: the daemons'
// timers keep synctest from ever calling a missing notice a deadlock).
func nextNotice(t testing.TB, notices <-chan task.Notice) task.Notice {
	t.Helper()
	select {
	case n := <-notices:
		return n
	case <-time.After(time.Minute):
		t.Fatal("no notice within a minute")
		return task.Notice{}
	}
}

// spawnNoticeObserver starts on the named host a task that passes every
// notice it receives with the tag on to the channel returned (buffered
// with room for buf), until its context ends.
func spawnNoticeObserver(t testing.TB, m *Daemon, host string, tag, buf int) (task.TID, <-chan task.Notice) {
	t.Helper()
	notices := make(chan task.Notice, buf)
	obs := spawnOn(t, m, host, fn(t, func(c *task.Ctx, _ int) error {
		for {
			var n task.Notice
			if _, err := c.Recv(task.AnyTask, tag, &n); err != nil {
				return err
			}
			notices <- n
		}
	}))
	return obs, notices
}

// TestNotifyLossWatchesOnTheMasterNode: the master's watches on a task's
// loss are the master node's. A watch on a task placed on a known host is
// recorded (and registered at that host); one past MaxWatchers is refused
// with ErrLimit; one on a task no host holds is told at once that there is
// no such task. A task's end at its host drops its watch untold by the
// master (the host tells the real exit), and the loss of the host tells
// the watchers of the tasks still placed there, once.
func TestNotifyLossWatchesOnTheMasterNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vm := startMemVMWith(t, 2, &streamShaper{}, Config{MaxWatchers: 1})
		m := vm.Master()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		obs, notices := spawnNoticeObserver(t, m, "h1", 7, 8)
		kept := spawnOn(t, m, "h2", &cargo{})
		ended := spawnOn(t, m, "h2", &cargo{})
		watch := func(tid task.TID) error {
			return m.registerExitWatch(ctx, notifyArgs{Kind: task.TaskExit, Watcher: obs, Tag: 7, TIDs: []task.TID{tid}})
		}
		watched := func() []task.TID {
			m.mn.mu.Lock()
			defer m.mn.mu.Unlock()
			return m.mn.node.Watched()
		}
		for _, tid := range []task.TID{kept, ended} {
			if err := watch(tid); err != nil {
				t.Fatalf("watch %v: %v", tid, err)
			}
		}
		if err := watch(kept); !errors.Is(err, ErrLimit) {
			t.Fatalf("a second watch on %v, at most 1: %v", kept, err)
		}
		if w := watched(); !slices.Equal(w, []task.TID{kept, ended}) {
			t.Fatalf("watched %v, want [%v %v]", w, kept, ended)
		}
		nowhere := task.NewTID(77, 1)
		if err := watch(nowhere); err != nil {
			t.Fatalf("watch a task no host holds: %v", err)
		}
		if n := nextNotice(t, notices); n.TID != nowhere || n.Status != -1 || n.Err != "no such task" {
			t.Fatalf("told of %v: %+v", nowhere, n)
		}

		if err := m.KillTask(ctx, ended); err != nil {
			t.Fatal(err)
		}
		if n := nextNotice(t, notices); n.TID != ended || n.Err == "lost with its host" || n.Err == "no such task" {
			t.Fatalf("told of %v's end: %+v", ended, n)
		}
		synctest.Wait()
		if w := watched(); !slices.Equal(w, []task.TID{kept}) {
			t.Fatalf("watched after %v ended: %v, want [%v]", ended, w, kept)
		}

		// The shell's half of a host's loss, once its jobs have rolled
		// back: the watchers of the tasks still placed there are told.
		m.taskLossNotices(m.routeHost(kept))
		if n := nextNotice(t, notices); n.TID != kept || n.Status != -1 || n.Err != "lost with its host" {
			t.Fatalf("told of %v's loss: %+v", kept, n)
		}
		if w := watched(); len(w) != 0 {
			t.Fatalf("watched after the loss: %v", w)
		}
		m.taskLossNotices(m.routeHost(kept)) // told once
		synctest.Wait()
		select {
		case n := <-notices:
			t.Fatalf("told again: %+v", n)
		default:
		}
	})
}
