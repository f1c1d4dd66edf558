package daemon

import (
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// mover is the master's shell for moves. The master node decides
// (routing/master.Node, stepped under mn.mu: its move machine holds every
// move under way and, at a recovered master, the moves its predecessor
// left half done until both their hosts are back, the kills under way
// that hold a job's moves, and the virtual machine's epoch clock); the
// mover keeps, under the same lock, the driver's record of each move
// (runs: how it is carried, its measurements and whom its end wakes) and
// the facts asked of the tasks' hosts. mn.mu is held only while the node
// takes an event or the records change, never across a call to a host,
// and never taken with the router's or the hosting lock held (see
// doc.go).
type mover struct {
	mn   *masterNode
	runs map[move.ID]*moveRun
	// facts remembers the type and job of the tasks moved before: Migrate
	// asks the origin only before a task's first move.
	facts map[task.TID]migReply
}

// maxFacts bounds the tasks whose facts the mover remembers; past it, it
// starts afresh.
const maxFacts = 1 << 16

// factsOf returns what the mover remembers of tid's type and job.
func (m *mover) factsOf(tid task.TID) (migReply, bool) {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	f, ok := m.facts[tid]
	return f, ok
}

// rememberLocked records tid's type and job (mn.mu held).
func (m *mover) rememberLocked(tid task.TID, f migReply) {
	if m.facts == nil || len(m.facts) >= maxFacts {
		m.facts = map[task.TID]migReply{}
	}
	m.facts[tid] = f
}

// forgetFacts drops what the mover remembers of tid.
func (m *mover) forgetFacts(tid task.TID) {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	delete(m.facts, tid)
}

// clearFacts drops what the mover remembers of every task.
func (m *mover) clearFacts() {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	m.facts = nil
}

func newMover(mn *masterNode) *mover {
	return &mover{mn: mn, runs: map[move.ID]*moveRun{}}
}

// epoch is the virtual machine's route epoch clock now.
func (m *mover) epoch() uint64 {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	return m.mn.node.Epoch()
}

// nextEpoch raises the clock to at least floor and hands out the epoch
// after it.
func (m *mover) nextEpoch(floor uint64) uint64 {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	m.mn.stepLocked(mnode.Event{Kind: mnode.EvNextEpoch, Epoch: floor})
	return m.mn.node.Epoch() // the epoch just handed out
}

// moving reports whether tid is in a move under way.
func (m *mover) moving(tid task.TID) bool {
	m.mn.mu.Lock()
	defer m.mn.mu.Unlock()
	_, ok := m.mn.node.Moving(tid)
	return ok
}

// holdMoves keeps moves of job's tasks from starting until the returned
// function is called (a kill of the job under way): the node refuses
// them (move.ErrHeld). Holds nest. Neither event yields an effect.
func (m *mover) holdMoves(job uint64) (release func()) {
	m.mn.step(mnode.Event{Kind: mnode.EvHold, Job: job})
	return func() { m.mn.step(mnode.Event{Kind: mnode.EvRelease, Job: job}) }
}

// hostUp tells the master node that host h is in the virtual machine
// (again, after its deletion): it hears moves' routes on demand.
func (m *mover) hostUp(h task.HostID) { m.mn.step(mnode.Event{Kind: mnode.EvHostUp, Host: h}) }
