package metrics

import (
	"sync"
	"time"
)

// ring keeps the last cap(buf) items added, oldest first.
type ring[T any] struct {
	buf  []T
	next int // where the next item goes once buf is full
	seen uint64
}

func (r *ring[T]) add(x T) {
	r.seen++
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, x)
		return
	}
	r.buf[r.next] = x
	r.next = (r.next + 1) % len(r.buf)
}

func (r *ring[T]) items() []T {
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// Decision events and job events, besides moves.

// SchedEvent is a scheduler decision about one process: it was selected
// and migrated, or selected and stayed for want of a better host.
type SchedEvent struct {
	At   time.Time `json:"at"`
	TID  string    `json:"tid"`
	Host string    `json:"host"`
	// Reason is why it was a candidate ("delay", "memory", "users" or a
	// '+' combination); Decision the location policy's answer, with its
	// figures.
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
}

// JobEvent is a job checkpoint or rollback the master made.
type JobEvent struct {
	Job      uint64        `json:"job"`
	Kind     string        `json:"kind"` // "checkpoint" or "rollback"
	Outcome  string        `json:"outcome"`
	Duration time.Duration `json:"duration_ns"`
	Err      string        `json:"error,omitempty"`
	End      time.Time     `json:"end"`
}

// Events are bounded logs of the most recent moves, scheduler decisions
// and job checkpoints and rollbacks, oldest first: what a status page or
// `curl /events` shows, each move with its identifier so that it can be
// found in the logs of the daemons it touched. It is safe for concurrent
// use.
type Events struct {
	mu    sync.Mutex
	moves ring[Move]
	sched ring[SchedEvent]
	jobs  ring[JobEvent]
}

// NewEvents returns logs keeping the last n of each kind (default 256).
func NewEvents(n int) *Events {
	if n <= 0 {
		n = 256
	}
	return &Events{moves: ring[Move]{buf: make([]Move, 0, n)}, sched: ring[SchedEvent]{buf: make([]SchedEvent, 0, n)},
		jobs: ring[JobEvent]{buf: make([]JobEvent, 0, n)}}
}

// Add appends a move, dropping the oldest when the log is full.
func (e *Events) Add(mv Move) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.moves.add(mv)
	e.mu.Unlock()
}

// Moves returns the moves kept, oldest first, and how many were ever
// added (more than returned once the log has wrapped).
func (e *Events) Moves() ([]Move, uint64) {
	if e == nil {
		return nil, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moves.items(), e.moves.seen
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

// AddSched appends a scheduler decision.
func (e *Events) AddSched(s SchedEvent) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.sched.add(s)
	e.mu.Unlock()
}

// Sched returns the scheduler decisions kept, oldest first, and how many
// there were.
func (e *Events) Sched() ([]SchedEvent, uint64) {
	if e == nil {
		return nil, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sched.items(), e.sched.seen
}

// AddJob appends a job event.
func (e *Events) AddJob(j JobEvent) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.jobs.add(j)
	e.mu.Unlock()
}

// Jobs returns the job events kept, oldest first, and how many there were.
func (e *Events) Jobs() ([]JobEvent, uint64) {
	if e == nil {
		return nil, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.jobs.items(), e.jobs.seen
}
