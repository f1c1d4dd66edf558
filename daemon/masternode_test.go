package daemon

import (
	"testing"
	"time"

	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/task"
)

// TestMasterNodeTimersRecordedAtEveryStep: a move started on the master
// node sets its tick (FxTimer); the step records it, whichever part
// stepped the node, and wakes the timer loop; it is not due before its
// time, is due (once) at it, and nothing is left after.
func TestMasterNodeTimersRecordedAtEveryStep(t *testing.T) {
	cfg := Config{Heartbeat: 250 * time.Millisecond, MoveTimeout: time.Second, MoveStepTimeout: time.Second, MoveTransferTimeout: time.Second}
	mn := newMasterNode(masterNodeConfig(cfg))
	now := time.Unix(1_000_000, 0)
	tid := task.NewTID(1, 1)
	mn.mu.Lock()
	defer mn.mu.Unlock()
	fx := mn.stepAt(now, mnode.Event{Kind: mnode.EvMove, TID: tid, Host: 2, From: 1, Epoch: 1, Type: "w", Job: 1})
	var at time.Time
	for _, x := range fx {
		if x.Kind == mnode.FxTimer && x.Timer.Kind == mnode.TimerMoves {
			at = x.At
		}
	}
	if want := now.Add(cfg.Heartbeat); !at.Equal(want) {
		t.Fatalf("the move's tick at %v, want %v (the heartbeat from now): %v", at, want, fx)
	}
	select {
	case <-mn.wake:
	default:
		t.Fatal("the timer loop was not woken for the timer set")
	}
	if due, next := mn.dueLocked(at.Add(-time.Millisecond)); len(due) != 0 || !next.Equal(at) {
		t.Fatalf("before its time: due %v, next %v, want none due and the next at %v", due, next, at)
	}
	due, next := mn.dueLocked(at)
	if len(due) != 1 || due[0] != (mnode.Timer{Kind: mnode.TimerMoves}) || !next.IsZero() {
		t.Fatalf("at its time: due %v, next %v, want the move tick alone", due, next)
	}
	if due, _ := mn.dueLocked(at.Add(time.Hour)); len(due) != 0 {
		t.Fatalf("a timer due twice: %v", due)
	}
}
