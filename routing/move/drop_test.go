package move

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestDropEndsTheMove: a move dropped for its job's rollback while its
// checkpoint is sent ends aborted at once, with no resume or cancel step;
// the send's late answer is stale; the task may move again.
func TestDropEndsTheMove(t *testing.T) {
	now := time.Unix(0, 0)
	m := New(0, 0)
	tid := task.TID(1<<20 | 7)
	id, err := m.Start(Spec{TID: tid, From: 1, To: 2, Epoch: 1, Timeouts: testTimeouts}, now)
	if err != nil {
		t.Fatal(err)
	}
	m.Ready()
	for _, s := range []Step{StepPrepare, StepSuspend} {
		if err := m.Result(id, s, OK, nil, now); err != nil {
			t.Fatal(err)
		}
	}
	m.Ready()
	if got, ok := m.Drop(tid, errors.New("job 1 rolls back")); !ok || got != id {
		t.Fatalf("drop: %v %v, want %v true", got, ok, id)
	}
	acts := m.Ready()
	if len(acts) != 1 || acts[0].Kind != Finish || !errors.Is(acts[0].Err, ErrAborted) {
		t.Fatalf("actions after the drop: %v, want one aborted finish", acts)
	}
	if err := m.Result(id, StepSend, OK, nil, now); !errors.Is(err, ErrStale) {
		t.Fatalf("the send's late answer: %v, want stale", err)
	}
	if _, ok := m.Drop(tid, nil); ok {
		t.Fatal("dropped a move twice")
	}
	if _, ok := m.Moving(tid); ok {
		t.Fatal("still moving after the drop")
	}
	if _, err := m.Start(Spec{TID: tid, From: 1, To: 2, Epoch: m.Epoch(), Timeouts: testTimeouts}, now); err != nil {
		t.Fatalf("a new move after the drop: %v", err)
	}
}
