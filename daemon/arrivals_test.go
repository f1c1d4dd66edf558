package daemon

import (
	"errors"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// TestArrivalsBatching: the first arrival makes its task the sender, later
// ones queue behind it; an arrival still queued can be taken back, one in
// the batch being sent cannot (its withdrawal waits for the batch); an
// empty batch ends the sender's turn.
func TestArrivalsBatching(t *testing.T) {
	a := newArrivals()
	x, y, z := arrival{group: "g", count: 3, tid: 1}, arrival{group: "g", count: 3, tid: 2}, arrival{group: "h", count: 2, tid: 3}
	if !a.enqueue(x) {
		t.Fatal("the first arrival does not send")
	}
	if a.enqueue(y) {
		t.Fatal("a second sender while the first sends")
	}
	batch, flight := a.nextBatch()
	if len(batch) != 2 || batch[0] != x || batch[1] != y || flight == nil {
		t.Fatalf("batch %v, flight %v", batch, flight)
	}
	if a.enqueue(z) {
		t.Fatal("an arrival during a send became a sender")
	}
	if taken, _ := a.unqueue(z.tid); !taken {
		t.Fatal("a queued arrival was not taken back")
	}
	taken, wait := a.unqueue(y.tid)
	if taken || wait != flight {
		t.Fatalf("an arrival being sent: taken %v, wait %v (flight %v)", taken, wait, flight)
	}
	close(flight)
	if b, f := a.nextBatch(); b != nil || f != nil {
		t.Fatalf("after the queue emptied: %v, %v", b, f)
	}
	if taken, wait := a.unqueue(y.tid); taken || wait != nil {
		t.Fatalf("no batch under way: taken %v, wait %v", taken, wait)
	}
	if !a.enqueue(z) {
		t.Fatal("the sender's turn did not end with the empty batch")
	}
}

// TestArrivalsRelease: a release reaches each waiting task once, with the
// error given; forgotten tasks are not released and not reported to a
// recovered master.
func TestArrivalsRelease(t *testing.T) {
	a := newArrivals()
	c1 := a.waitIn(arrival{group: "g", count: 2, tid: 1})
	c2 := a.waitIn(arrival{group: "g", count: 2, tid: 2})
	c3 := a.waitIn(arrival{group: "h", count: 5, tid: 3})
	a.forget(3)
	if w := a.waiting(); len(w) != 2 {
		t.Fatalf("waiting %v, want tasks 1 and 2", w)
	}
	failed := errors.New("lost")
	a.release([]task.TID{1, 2, 3}, failed)
	a.release([]task.TID{1}, nil) // a late duplicate
	for i, c := range []chan error{c1, c2} {
		if err := <-c; !errors.Is(err, failed) {
			t.Errorf("task %d released with %v", i+1, err)
		}
		select {
		case err := <-c:
			t.Errorf("task %d released twice (%v)", i+1, err)
		default:
		}
	}
	select {
	case err := <-c3:
		t.Errorf("a forgotten task was released (%v)", err)
	default:
	}
	if w := a.waiting(); len(w) != 0 {
		t.Fatalf("waiting after the release: %v", w)
	}
}
