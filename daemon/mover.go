package daemon

import (
	"sync"
	"time"

	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// mover is the master's part for moves: the move machine (routing/move),
// which holds every move under way (and, at a recovered master, the moves
// its predecessor left half done until both their hosts are back), the
// kills under way and the virtual machine's epoch clock; and the driver's
// record of each move. One lock, mu, owns it all. It is held only while the machine takes an
// event or the records change, never across a call to a host, and never
// taken with the router's or the hosting lock held (see doc.go).
type mover struct {
	mu      sync.Mutex
	machine *move.Machine
	runs    map[move.ID]*moveRun
	// facts remembers the type and job of the tasks moved before: Migrate
	// asks the origin only before a task's first move.
	facts map[task.TID]migReply
}

// maxFacts bounds the tasks whose facts the mover remembers; past it, it
// starts afresh.
const maxFacts = 1 << 16

// factsOf returns what the mover remembers of tid's type and job.
func (m *mover) factsOf(tid task.TID) (migReply, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.facts[tid]
	return f, ok
}

// rememberLocked records tid's type and job (m.mu held).
func (m *mover) rememberLocked(tid task.TID, f migReply) {
	if m.facts == nil || len(m.facts) >= maxFacts {
		m.facts = map[task.TID]migReply{}
	}
	m.facts[tid] = f
}

// forgetFacts drops what the mover remembers of tid.
func (m *mover) forgetFacts(tid task.TID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.facts, tid)
}

// clearFacts drops what the mover remembers of every task.
func (m *mover) clearFacts() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.facts = nil
}

func newMover() *mover {
	return &mover{machine: move.New(0, 0), runs: map[move.ID]*moveRun{}}
}

// epoch is the virtual machine's route epoch clock now.
func (m *mover) epoch() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.machine.Epoch()
}

// nextEpoch raises the clock to at least floor and hands out the epoch
// after it.
func (m *mover) nextEpoch(floor uint64) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.machine.Observe(floor)
	return m.machine.NextEpoch()
}

// moving reports whether tid is in a move under way.
func (m *mover) moving(tid task.TID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.machine.Moving(tid)
	return ok
}

// holdMoves keeps moves of job's tasks from starting until the returned
// function is called (a kill of the job under way): the machine rejects
// them (move.ErrHeld). Holds nest. Neither event yields an action.
func (m *mover) holdMoves(job uint64) (release func()) {
	m.mu.Lock()
	m.machine.Step(time.Now(), move.Event{Kind: move.Hold, Job: job})
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.machine.Step(time.Now(), move.Event{Kind: move.Release, Job: job})
	}
}
