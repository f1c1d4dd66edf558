package daemon

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// hosting is a daemon's task hosting part: the tasks running here and the
// exited ones (`ps -a`), notify registrations, the host half of job
// checkpoints (routing/jobck.Host) with the shell's records of its pauses
// and staged tasks, and this host's two halves of a move — the host move
// machine (routing/move.Host), which decides every step, and what the
// shell keeps for its departures and arrivals: tasks suspended here while
// they move away, and tasks prepared here on their way in. One lock, mu,
// owns it all; where a critical section must also see the routes (a
// message received for a task, a move's suspend or install) it takes the
// router's lock first (see doc.go).
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
	// moves is the host half of moves: it decides every step of a move
	// here and holds, per task, the departure, the arrival and the floor
	// (the newest move this host cancelled or resumed the task for).
	moves *move.Host
	// What the shell keeps for moves, as moves' effects tell it: tasks
	// suspended here while they move away (a departure each), and tasks
	// prepared here that are on their way in (an arrival each, or, with
	// move 0, a job restore's staged task).
	moving   map[task.TID]*leaving
	incoming map[task.TID]*arriving
	// ckpts is the host half of job checkpoints: it decides every step
	// of a job's checkpoint or restart round here (pause, quiet, write,
	// resume, kill, stage, start, drop) and holds, per task, the pause
	// under way, per job the newest round resumed, and the staged tasks.
	ckpts *jobck.Host
	// pauses are the shell's records of the pauses ckpts holds, made and
	// dropped as its effects say (jobckpt.go).
	pauses map[task.TID]*pauseReq
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
		moves:     move.NewHost(),
		ckpts:     jobck.NewHost(),
		pauses:    map[task.TID]*pauseReq{},
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
	return ht.jobTasksLocked(job)
}

// jobTasksLocked lists this daemon's running tasks of job, in TID order
// (mu held).
func (ht *hosting) jobTasksLocked(job uint64) []*hosted {
	var hs []*hosted
	for _, h := range ht.tasks {
		if h.job == job && h.state == Running {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b *hosted) int { return cmp.Compare(a.tid, b.tid) })
	return hs
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

// stepMove feeds one event to the host half of moves (mu held), with
// what the task table knows of the task, and returns its effects; a
// step's answer is the last.
func (ht *hosting) stepMove(e move.HostEvent) []move.HostEffect {
	if e.TID != 0 && e.Kind != move.EvSafePoint {
		e.Local = ht.localLocked(e.TID, e.Local.Route)
	}
	return ht.moves.Step(time.Now(), e)
}

// localLocked is what the task table knows of tid (mu held); route is the
// epoch of the route the router holds for it.
func (ht *hosting) localLocked(tid task.TID, route uint64) move.Local {
	l := move.Local{Route: route}
	if h := ht.tasks[tid]; h != nil {
		l.Running, l.Type, l.Job, l.Arrived, l.Quiet = true, h.typ, h.job, h.arrived, h.quiet.Load()
	}
	if arr := ht.incoming[tid]; arr != nil && arr.move == 0 {
		l.Restoring = true
	}
	return l
}

// stepAnswer is a move step's answer among its effects: the last one.
func stepAnswer(fx []move.HostEffect) move.HostEffect {
	if len(fx) == 0 {
		return move.HostEffect{Kind: move.DoOK}
	}
	return fx[len(fx)-1]
}

// moveLost forgets what this host holds of tid caught in a move (mu
// held): the master gave the task up. It returns the departure's kept
// state the machine dropped, if any; the arrival goes (a move's, or a job
// restore's).
func (ht *hosting) moveLost(tid task.TID) *leaving {
	var left *leaving
	for _, x := range ht.stepMove(move.HostEvent{Kind: move.EvLost, TID: tid}) {
		if l := ht.moving[tid]; x.Kind == move.DoDropDeparture && l != nil {
			delete(ht.moving, tid)
			left = l
		}
	}
	delete(ht.incoming, tid)
	return left
}

// moveGone tells the host half of moves that tid has ended (mu held): its
// floor against late steps goes with it.
func (ht *hosting) moveGone(tid task.TID) {
	ht.moves.Step(time.Now(), move.HostEvent{Kind: move.EvGone, TID: tid})
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
