package move

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// startMove feeds a Start of s and returns the move's ID, from the
// prepare call the machine asks for, or the rejection's error.
func startMove(m *Machine, now time.Time, s Spec) (ID, error) {
	for _, a := range m.Step(now, Event{Kind: Start, Spec: s}) {
		switch a.Kind {
		case Reject:
			return 0, a.Err
		case Call:
			return a.Move, nil
		}
	}
	return 0, errors.New("start: neither a call nor a rejection")
}

// rejected returns the error of the rejection among acts (nil: none).
func rejected(acts []Action) error {
	for _, a := range acts {
		if a.Kind == Reject {
			return a.Err
		}
	}
	return nil
}

// TestDropEndsTheMove: a move dropped for its job's rollback while its
// checkpoint is sent ends aborted at once, with no resume or cancel step;
// the send's late answer is stale; the task may move again.
func TestDropEndsTheMove(t *testing.T) {
	now := time.Unix(0, 0)
	m := New(0, 0)
	tid := task.TID(1<<20 | 7)
	id, err := startMove(m, now, Spec{TID: tid, From: 1, To: 2, Epoch: 1, Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Step{StepPrepare, StepSuspend} {
		if err := rejected(m.Step(now, Event{Kind: Result, Move: id, Step: s, Outcome: OK})); err != nil {
			t.Fatal(err)
		}
	}
	acts := m.Step(now, Event{Kind: Drop, TID: tid, Err: errors.New("job 1 rolls back")})
	if len(acts) != 1 || acts[0].Kind != Finish || acts[0].Move != id || !errors.Is(acts[0].Err, ErrAborted) {
		t.Fatalf("actions after the drop: %v, want one aborted finish of %v", acts, id)
	}
	if err := rejected(m.Step(now, Event{Kind: Result, Move: id, Step: StepSend, Outcome: OK})); !errors.Is(err, ErrStale) {
		t.Fatalf("the send's late answer: %v, want stale", err)
	}
	if acts := m.Step(now, Event{Kind: Drop, TID: tid}); len(acts) != 0 {
		t.Fatalf("dropped a move twice: %v", acts)
	}
	if _, ok := m.Moving(tid); ok {
		t.Fatal("still moving after the drop")
	}
	if _, err := startMove(m, now, Spec{TID: tid, From: 1, To: 2, Epoch: m.Epoch(), Timeouts: testTimeouts}); err != nil {
		t.Fatalf("a new move after the drop: %v", err)
	}
}

// TestDropJob: a job's rollback ends the moves of its tasks, and only
// those.
func TestDropJob(t *testing.T) {
	now := time.Unix(0, 0)
	m := New(0, 0)
	a, b, c := task.TID(1<<20|1), task.TID(1<<20|2), task.TID(1<<20|3)
	ids := map[task.TID]ID{}
	for _, x := range []struct {
		tid task.TID
		job uint64
	}{{a, 7}, {b, 7}, {c, 8}} {
		id, err := startMove(m, now, Spec{TID: x.tid, From: 1, To: 2, Epoch: 1, Job: x.job, Timeouts: testTimeouts})
		if err != nil {
			t.Fatal(err)
		}
		ids[x.tid] = id
	}
	acts := m.Step(now, Event{Kind: DropJob, Job: 7, Err: errors.New("job 7 rolls back")})
	var ended []ID
	for _, x := range acts {
		if x.Kind != Finish || !errors.Is(x.Err, ErrAborted) {
			t.Fatalf("after the job's drop: %v, want aborted finishes only", x)
		}
		ended = append(ended, x.Move)
	}
	if len(ended) != 2 || ended[0] != ids[a] || ended[1] != ids[b] {
		t.Fatalf("ended %v, want %v and %v", ended, ids[a], ids[b])
	}
	if mv, ok := m.Moving(c); !ok || mv.ID != ids[c] || mv.Job != 8 {
		t.Fatalf("the other job's move: %+v %v", mv, ok)
	}
}

// TestHoldJob: no move of a held job's tasks starts until every hold is
// released; other jobs' tasks move meanwhile.
func TestHoldJob(t *testing.T) {
	now := time.Unix(0, 0)
	m := New(0, 0)
	tid, other := task.TID(1<<20|1), task.TID(1<<20|2)
	m.Step(now, Event{Kind: Hold, Job: 7})
	m.Step(now, Event{Kind: Hold, Job: 7})
	spec := Spec{TID: tid, From: 1, To: 2, Epoch: 1, Job: 7, Timeouts: testTimeouts}
	if _, err := startMove(m, now, spec); !errors.Is(err, ErrHeld) {
		t.Fatalf("a move of a held job: %v, want %v", err, ErrHeld)
	}
	if _, err := startMove(m, now, Spec{TID: other, From: 1, To: 2, Epoch: 1, Job: 8, Timeouts: testTimeouts}); err != nil {
		t.Fatalf("a move of another job: %v", err)
	}
	m.Step(now, Event{Kind: Release, Job: 7})
	if _, err := startMove(m, now, spec); !errors.Is(err, ErrHeld) {
		t.Fatalf("a move with one hold left: %v, want %v", err, ErrHeld)
	}
	m.Step(now, Event{Kind: Release, Job: 7})
	if _, err := startMove(m, now, spec); err != nil {
		t.Fatalf("a move after the holds: %v", err)
	}
}
