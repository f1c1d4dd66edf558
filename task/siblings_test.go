package task

import (
	"slices"
	"testing"
)

// TestSiblings: each task of a spawn gets the spawn's TIDs in order and its
// own index among them, in a slice of its own; a task its runtime lists no
// siblings for is its own only sibling.
func TestSiblings(t *testing.T) {
	w := newWorld(3, 0)
	for i, ep := range w.eps {
		c := NewCtx(ep, nil)
		tids, me := c.Siblings()
		if !slices.Equal(tids, w.tids()) || me != i {
			t.Fatalf("task %d: siblings %v, index %d; want %v, %d", i, tids, me, w.tids(), i)
		}
		tids[0] = 0
		if again, _ := c.Siblings(); !slices.Equal(again, w.tids()) {
			t.Fatalf("task %d: a caller's change reached the runtime's list: %v", i, again)
		}
	}
	c := NewCtx(aloneEP{}, nil)
	if tids, me := c.Siblings(); !slices.Equal(tids, []TID{aloneEP{}.Self()}) || me != 0 {
		t.Fatalf("a task started alone: siblings %v, index %d", tids, me)
	}
}

// aloneEP is a task's endpoint that knows no siblings.
type aloneEP struct{ Endpoint }

func (aloneEP) Self() TID       { return NewTID(2, 9) }
func (aloneEP) Siblings() []TID { return nil }
