package daemon

import (
	"sync"

	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// hosting is a daemon's task hosting part: the tasks running here and the
// exited ones (`ps -a`), notify registrations, tasks staged from a job
// checkpoint, and this host's two halves of a move — tasks suspended here
// while they move away, and tasks prepared here on their way in. One
// lock, mu, owns it all; where a critical section must also see the
// routes (a message received for a task, a move's suspend or install) it
// takes the router's lock first (see doc.go).
type hosting struct {
	mu      sync.Mutex
	tasks   map[task.TID]*hosted   // running tasks
	exited  []*hosted              // most recent last, at most Config.KeepExited
	gone    map[task.TID]*hosted   // exited tasks by TID (the same set)
	nextNum uint32                 // the last TID number handed out here
	watch   map[task.TID][]watcher // TaskExit registrations by watched task
	hostW   []hostWatcher          // HostAdd/HostDelete registrations
	// lossWatch (master) holds TaskExit registrations so they fire when a
	// task is lost with its host.
	lossWatch map[task.TID][]watcher
	halted    bool                // the daemon is stopping: no task starts
	staged    map[task.TID]staged // tasks read from a job checkpoint, waiting to start
	// Migration: tasks suspended here while they move away, and tasks
	// prepared here that are on their way in.
	moving   map[task.TID]*leaving
	incoming map[task.TID]*arriving
	// moveFloor is, per task, the newest move this host cancelled or
	// resumed it for: steps of that move and older ones are refused.
	moveFloor map[task.TID]move.ID
	// ckResumed is, per job with tasks here, the newest checkpoint round
	// (its try) the master resumed: a pause of that round or an older one
	// is refused. It goes with the job's last task here.
	ckResumed map[uint64]uint64
}

func newHosting() *hosting {
	return &hosting{
		tasks:     map[task.TID]*hosted{},
		gone:      map[task.TID]*hosted{},
		watch:     map[task.TID][]watcher{},
		lossWatch: map[task.TID][]watcher{},
		staged:    map[task.TID]staged{},
		moving:    map[task.TID]*leaving{},
		incoming:  map[task.TID]*arriving{},
		moveFloor: map[task.TID]move.ID{},
		ckResumed: map[uint64]uint64{},
	}
}

// task is the task tid running here, or nil.
func (ht *hosting) task(tid task.TID) *hosted {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	return ht.tasks[tid]
}

// count is how many tasks run here.
func (ht *hosting) count() int {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	return len(ht.tasks)
}
