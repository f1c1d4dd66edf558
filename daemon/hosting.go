package daemon

import (
	"cmp"
	"fmt"
	"slices"
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

// hostsJob reports whether a task of job runs here (mu held).
func (ht *hosting) hostsJob(job uint64) bool {
	for _, h := range ht.tasks {
		if h.job == job {
			return true
		}
	}
	return false
}

// jobTasks lists this daemon's running tasks of job.
func (ht *hosting) jobTasks(job uint64) []*hosted {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	var hs []*hosted
	for _, h := range ht.tasks {
		if h.job == job && h.state == Running {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b *hosted) int { return cmp.Compare(a.tid, b.tid) })
	return hs
}

// dropStagedLocked forgets the tasks of job staged here (mu held).
func (ht *hosting) dropStagedLocked(job uint64) {
	for tid, s := range ht.staged {
		if s.meta.Job == job {
			delete(ht.staged, tid)
			delete(ht.incoming, tid)
		}
	}
}

// localJobs lists the jobs this daemon runs tasks of.
func (ht *hosting) localJobs() []uint64 {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	seen := map[uint64]bool{}
	var out []uint64
	for _, h := range ht.tasks {
		if h.job != 0 && !seen[h.job] {
			seen[h.job] = true
			out = append(out, h.job)
		}
	}
	return out
}

// staleMove reports whether a step of move id for tid comes after this
// host cancelled or resumed tid for that move or a newer one (mu held).
func (ht *hosting) staleMove(tid task.TID, id move.ID) bool {
	return id != 0 && id <= ht.moveFloor[tid]
}

// departure returns the task suspended here for move id, marked as
// sending its checkpoint, or an error if there is none or it is resolved
// (mu held).
func (ht *hosting) departure(tid task.TID, id move.ID) (*leaving, error) {
	l := ht.moving[tid]
	if l == nil || l.over || (id != 0 && l.move != id) {
		return nil, fmt.Errorf("%v is not suspended here for %v", tid, id)
	}
	if l.sending != nil {
		return nil, fmt.Errorf("the checkpoint of %v is being sent", tid)
	}
	l.sending = make(chan struct{})
	return l, nil
}

// remember records a task's group membership (inst < 0: it left).
func (ht *hosting) remember(h *hosted, group string, inst int) {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	if inst < 0 {
		delete(h.groups, group)
		return
	}
	if h.groups == nil {
		h.groups = map[string]int{}
	}
	h.groups[group] = inst
}
