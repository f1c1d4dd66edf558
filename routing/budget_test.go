package routing

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// countBudget records what a reader takes and gives back.
type countBudget struct {
	held, peak, acquires int
	refuse               error
}

func (b *countBudget) Acquire(n int) error {
	if b.refuse != nil {
		return b.refuse
	}
	b.acquires++
	b.held += n
	b.peak = max(b.peak, b.held)
	return nil
}

func (b *countBudget) Release(n int) { b.held -= n }

// TestReaderBudget: a reader with a budget accounts each large frame's
// body from before it is allocated until the next frame (or Free), reads
// small frames without it, gives back what a broken frame took, and fails
// when the budget refuses.
func TestReaderBudget(t *testing.T) {
	big := bytes.Repeat([]byte{1}, BudgetFrom+7)
	var stream []byte
	stream = AppendFrame(stream, KindCall, big)
	stream = AppendFrame(stream, KindCall, []byte{2})
	stream = AppendFrame(stream, KindCall, big)
	b := &countBudget{}
	r := NewReader(bytes.NewReader(stream), 0)
	r.SetBudget(b)
	if f, err := r.Next(); err != nil || len(f.Body) != len(big) || b.held != len(big) {
		t.Fatalf("a large frame: %d bytes, %v; budget holds %d", len(f.Body), err, b.held)
	}
	if f, err := r.Next(); err != nil || len(f.Body) != 1 || b.held != 0 {
		t.Fatalf("a small frame: %v; budget holds %d, want 0", err, b.held)
	}
	if _, err := r.Next(); err != nil || b.held != len(big) {
		t.Fatalf("a second large frame: %v; budget holds %d", err, b.held)
	}
	r.Free()
	if b.held != 0 || b.acquires != 2 || b.peak != len(big) {
		t.Fatalf("after Free: held %d, %d acquires, peak %d", b.held, b.acquires, b.peak)
	}
	r.Free() // twice: nothing more
	if b.held != 0 {
		t.Fatalf("a second Free gave back more: %d", b.held)
	}

	// A frame cut short gives back what it took.
	cut := AppendFrame(nil, KindCall, big)[:BudgetFrom]
	r = NewReader(bytes.NewReader(cut), 0)
	r.SetBudget(b)
	if _, err := r.Next(); !errors.Is(err, ErrMalformed) || b.held != 0 {
		t.Fatalf("a cut frame: %v; budget holds %d", err, b.held)
	}

	// A budget that refuses fails the frame before its body is read.
	refused := errors.New("no room")
	b = &countBudget{refuse: refused}
	r = NewReader(bytes.NewReader(AppendFrame(nil, KindCall, big)), 0)
	r.SetBudget(b)
	if _, err := r.Next(); !errors.Is(err, refused) {
		t.Fatalf("a refused frame: %v", err)
	}
	// Without a budget, nothing changes.
	r = NewReader(bytes.NewReader(AppendFrame(nil, KindCall, big)), 0)
	if f, err := r.Next(); err != nil || len(f.Body) != len(big) {
		t.Fatalf("without a budget: %v", err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestReaderBudgetAllocatesOnce: a large frame whose bytes the budget
// holds is read into one buffer of its size, not grown to up to twice it
// as the bytes arrive (growing stays for a reader without a budget, whose
// length claims nothing has accounted).
func TestReaderBudgetAllocatesOnce(t *testing.T) {
	big := bytes.Repeat([]byte{3}, 5*BudgetFrom+7)
	stream := AppendFrame(nil, KindCall, big)
	r := NewReader(bytes.NewReader(stream), 0)
	r.SetBudget(&countBudget{})
	f, err := r.Next()
	if err != nil || !bytes.Equal(f.Body, big) {
		t.Fatalf("a large frame: %d bytes, %v", len(f.Body), err)
	}
	if c := cap(f.Body); c != len(big) {
		t.Fatalf("a budgeted body of %d bytes read into a buffer of %d", len(big), c)
	}
}
