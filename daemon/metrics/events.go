package metrics

import "sync"

// Events is a bounded log of the most recent moves, oldest first: what a
// status page or `curl /events` shows, each with the move's identifier so
// that it can be found in the logs of the daemons it touched. It is safe
// for concurrent use.
type Events struct {
	mu   sync.Mutex
	buf  []Move
	next int // where the next move goes once buf is full
	full bool
	seen uint64
}

// NewEvents returns a log keeping the last n moves (default 256).
func NewEvents(n int) *Events {
	if n <= 0 {
		n = 256
	}
	return &Events{buf: make([]Move, 0, n)}
}

// Add appends a move, dropping the oldest when the log is full.
func (e *Events) Add(mv Move) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen++
	if !e.full {
		e.buf = append(e.buf, mv)
		e.full = len(e.buf) == cap(e.buf)
		return
	}
	e.buf[e.next] = mv
	e.next = (e.next + 1) % len(e.buf)
}

// Moves returns the moves kept, oldest first, and how many were ever
// added (more than returned once the log has wrapped).
func (e *Events) Moves() ([]Move, uint64) {
	if e == nil {
		return nil, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Move, 0, len(e.buf))
	out = append(out, e.buf[e.next:]...)
	out = append(out, e.buf[:e.next]...)
	return out, e.seen
}

// Find returns the kept moves with identifier id.
func (e *Events) Find(id string) []Move {
	all, _ := e.Moves()
	var out []Move
	for _, mv := range all {
		if mv.ID == id {
			out = append(out, mv)
		}
	}
	return out
}
