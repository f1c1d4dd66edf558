package daemon

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/dpvm/dpvm/routing/host"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// hosting is a daemon's task hosting part: the tasks running here and the
// exited ones (`ps -a`), notify registrations, the shell's records of the
// pauses and staged tasks of job checkpoints, and what the shell keeps for
// the departures and arrivals of moves: tasks suspended here while they
// move away, and tasks prepared here on their way in. The host halves of
// moves and job checkpoints, which decide every step, are parts of the
// host node (routing/host.Node), stepped through its seam (stepMove,
// ckpts.Step). mu is the host node's lock (router.mu): one lock owns the
// node and all of this, so a critical section that also sees the routes
// (a message received for a task, a move's suspend or install) takes it
// once (see doc.go).
type hosting struct {
	mu      *sync.Mutex
	tasks   map[task.TID]*hosted   // running tasks
	exited  []*hosted              // most recent last, at most Config.KeepExited
	gone    map[task.TID]*hosted   // exited tasks by TID (the same set)
	nextNum uint32                 // the last TID number handed out here
	ownNum  uint32                 // the last this host took itself, or a floor raised it to (numbered)
	watch   map[task.TID][]watcher // TaskExit registrations by watched task
	hostW   []hostWatcher          // HostAdd/HostDelete registrations
	halted  bool                   // the daemon is stopping: no task starts
	staged  map[task.TID]staged    // tasks read from a job checkpoint, waiting to start
	// node is the host node (router.node); its host half of moves decides
	// every step of a move here and holds, per task, the departure, the
	// arrival and the floor (the newest move this host cancelled or
	// resumed the task for).
	node *host.Node
	// What the shell keeps for moves, as moves' effects tell it: tasks
	// suspended here while they move away (a departure each), and tasks
	// prepared here that are on their way in (an arrival each, or, with
	// move 0, a job restore's staged task).
	moving   map[task.TID]*leaving
	incoming map[task.TID]*arriving
	// ckpts steps the node's host half of job checkpoints: it decides
	// every step of a job's checkpoint or restart round here (pause,
	// quiet, write, resume, kill, stage, start, drop) and holds, per
	// task, the pause under way, per job the newest round resumed, and
	// the staged tasks.
	ckpts ckptSeam
	// pauses are the shell's records of the pauses ckpts holds, made and
	// dropped as its effects say (jobckpt.go).
	pauses map[task.TID]*pauseReq
}

// newHosting makes the hosting part of rt's host node, under its lock.
func newHosting(rt *router) *hosting {
	return &hosting{
		mu:       &rt.mu,
		node:     rt.node,
		ckpts:    ckptSeam{rt.node},
		tasks:    map[task.TID]*hosted{},
		gone:     map[task.TID]*hosted{},
		watch:    map[task.TID][]watcher{},
		staged:   map[task.TID]staged{},
		moving:   map[task.TID]*leaving{},
		incoming: map[task.TID]*arriving{},
		pauses:   map[task.TID]*pauseReq{},
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

// newTIDs hands out the TIDs of n tasks of host, of the spawn set (nil:
// tasks started alone), in order, none handed out before: the numbers
// the master handed out for the set, or the host's own next
// (spawnSet.number).
func (ht *hosting) newTIDs(host task.HostID, n int, set *spawnSet) []task.TID {
	tids := make([]task.TID, n)
	ht.mu.Lock()
	for i := range tids {
		tids[i] = task.NewTID(host, set.number(ht))
	}
	ht.mu.Unlock()
	return tids
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
	return host.MoveEffects(ht.node.Step(time.Now(), host.Event{Kind: host.EvMove, Move: e}))
}

// ckptSeam steps the host node's host half of job checkpoints (the
// node's lock held).
type ckptSeam struct{ node *host.Node }

// Step feeds e to the host half of job checkpoints through the node's
// seam and returns its effects; a step's answer is the last.
func (c ckptSeam) Step(e jobck.HostEvent) []jobck.HostEffect {
	return host.CkptEffects(c.node.Step(time.Time{}, host.Event{Kind: host.EvCkpt, Ckpt: e}))
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

// taskEnded tells the host node that tid, of job, has ended here (mu held,
// the task out of the table): the host half of moves drops its floor
// against late steps (no step of a move of it can start anything now),
// that of job checkpoints the task's pause and, with the job's last task
// here, the job's newest resume. A part that holds none of these has
// nothing to forget and is not stepped: the exit of a task no move or
// checkpoint round has met costs no step, no allocation and no scan of
// the task table, and, on the task's goroutine, no stack deeper than its
// sends needed (the parts' Step frames are large).
func (ht *hosting) taskEnded(tid task.TID, job uint64) {
	ht.moveGone(tid)
	ck := ht.node.Ckpts()
	if _, paused := ck.Paused(tid); paused || ck.Resumed(job) != 0 {
		_, _ = ht.doCkpt(ht.ckpts.Step(jobck.HostEvent{Kind: jobck.HostGone, TID: tid, Job: job, JobLeft: !ht.hostsJob(job)}), nil)
	}
}

// moveGone tells the host half of moves that tid has ended (mu held): its
// floor against late steps goes with it. Without a floor kept there is
// nothing to forget, and no step (see taskEnded).
func (ht *hosting) moveGone(tid task.TID) {
	if _, ok := ht.node.Moves().Floor(tid); !ok {
		return
	}
	ht.node.Step(time.Now(), host.Event{Kind: host.EvMove, Move: move.HostEvent{Kind: move.EvGone, TID: tid}})
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
