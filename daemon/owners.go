package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// maxOwnedTasks bounds the tasks outside any job whose owner the master
// remembers; past it the oldest entries are forgotten (their tasks become
// an admin's to control, and leave their owner's count).
const maxOwnedTasks = 1 << 16

// maxEarlyExits bounds the ends of tasks the master remembers that it
// heard of before their spawn's answer (see owners.ended).
const maxEarlyExits = 1 << 12

// owner is a person as the master records them: the name on their
// certificate, and whether it is an admin's (not held to user quotas).
type owner struct {
	name  string
	admin bool
}

// owners is who started what, and what each holds (master): the person
// whose certificate started a job, or spawned tasks outside any job, and
// the live tasks the master started for each job and each person. A user
// may kill, migrate and checkpoint only what they own; an admin anything.
// The counts are what quotas are checked against (admit, admitJobs).
// Owners live in the master's memory, and in the manifests of job
// checkpoints: after a master recovery, only admins control the jobs that
// were running.
type owners struct {
	mu    sync.Mutex
	jobs  map[uint64]owner
	tasks map[task.TID]owner // tasks outside any job
	order []task.TID         // tasks in the order recorded, for forgetting

	jobTasks map[uint64]map[task.TID]struct{} // each job's live tasks the master started
	taskJob  map[task.TID]uint64              // and the other way round
	userJobs map[string]map[uint64]struct{}   // each person's live jobs
	loose    map[string]int                   // each person's live tasks outside jobs
	// Reservations of admitted spawns whose answers are not in yet.
	pendJob   map[uint64]int
	pendUser  map[string]int
	pendJobs  map[string]int
	early     map[task.TID]struct{} // ends heard before the spawn's answer
	earlyList []task.TID
}

func (o *owners) init() {
	if o.jobs == nil {
		o.jobs, o.tasks = map[uint64]owner{}, map[task.TID]owner{}
		o.jobTasks, o.taskJob = map[uint64]map[task.TID]struct{}{}, map[task.TID]uint64{}
		o.userJobs, o.loose = map[string]map[uint64]struct{}{}, map[string]int{}
		o.pendJob, o.pendUser, o.pendJobs = map[uint64]int{}, map[string]int{}, map[string]int{}
		o.early = map[task.TID]struct{}{}
	}
}

func (o *owners) setJob(job uint64, who owner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if prev, ok := o.jobs[job]; ok {
		delete(o.userJobs[prev.name], job)
	}
	o.jobs[job] = who
	if o.userJobs[who.name] == nil {
		o.userJobs[who.name] = map[uint64]struct{}{}
	}
	o.userJobs[who.name][job] = struct{}{}
}

func (o *owners) setTasks(tids []task.TID, who owner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	for _, t := range tids {
		if _, ok := o.tasks[t]; ok {
			continue
		}
		if _, gone := o.early[t]; gone {
			continue
		}
		if len(o.order) >= maxOwnedTasks {
			o.compactOrder()
		}
		o.tasks[t] = who
		o.loose[who.name]++
		o.order = append(o.order, t)
	}
}

// compactOrder drops the ended tasks from order, and forgets the oldest
// live ones while it still holds maxOwnedTasks/2 or more.
func (o *owners) compactOrder() {
	keep := o.order[:0]
	for _, t := range o.order {
		if _, ok := o.tasks[t]; ok {
			keep = append(keep, t)
		}
	}
	o.order = keep
	for len(o.order) >= maxOwnedTasks/2 {
		t := o.order[0]
		o.order = o.order[1:]
		o.dropLoose(t)
	}
	o.order = slices.Clip(o.order)
}

func (o *owners) dropLoose(t task.TID) bool {
	who, ok := o.tasks[t]
	if !ok {
		return false
	}
	delete(o.tasks, t)
	if o.loose[who.name]--; o.loose[who.name] <= 0 {
		delete(o.loose, who.name)
	}
	return true
}

func (o *owners) job(job uint64) (owner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.jobs[job]
	return w, ok
}

func (o *owners) task(t task.TID) (owner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.tasks[t]
	return w, ok
}

// jobOf is the job the master started live task t in (0 for a task it
// started outside any job), and whether it knows t at all: a task whose
// spawn's answer is not in yet, or one started before a master recovery,
// is unknown.
func (o *owners) jobOf(t task.TID) (job uint64, known bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if j, ok := o.taskJob[t]; ok {
		return j, true
	}
	_, ok := o.tasks[t]
	return 0, ok
}

// quota is the bounds owners.admit checks a spawn against.
type quota struct{ userTasks, userJobs, jobTasks int }

// userTasksLocked is how many live tasks who holds: outside jobs and in
// their jobs.
func (o *owners) userTasksLocked(name string) int {
	n := o.loose[name]
	for j := range o.userJobs[name] {
		n += len(o.jobTasks[j])
	}
	return n
}

// admit reserves n tasks of job (0: none), spawned for who (nil: no
// person, or the job's owner), against the job's and the person's quotas,
// or refuses them with ErrLimit. The reservation stays until done: done
// records the tasks outside any job that started (or none), and gives
// the reservation back. Tasks of a job are recorded by their starter with
// addJobTasks as soon as they have started, before done: the record says
// which job a task speaks for (outputClaim), and is taken before the task
// can speak once its start's answer is in. Between the two, the quotas
// count those tasks twice (recorded and reserved): a spawn in the same
// job meanwhile errs on the side of ErrLimit.
func (o *owners) admit(who *owner, job uint64, n int, q quota) (done func(tids []task.TID), err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if job != 0 {
		if w, ok := o.jobs[job]; ok && who == nil {
			who = &w
		}
		if held := len(o.jobTasks[job]) + o.pendJob[job]; held+n > q.jobTasks {
			return nil, fmt.Errorf("spawn %d tasks in job %d, which holds %d: at most %d tasks in one job: %w", n, job, held, q.jobTasks, ErrLimit)
		}
	}
	var user string
	if who != nil && !who.admin {
		user = who.name
		if held := o.userTasksLocked(user) + o.pendUser[user]; held+n > q.userTasks {
			return nil, fmt.Errorf("spawn %d tasks for %s, who holds %d: at most %d tasks a user: %w", n, user, held, q.userTasks, ErrLimit)
		}
	}
	o.pendJob[job] += n
	o.pendUser[user] += n
	var loose *owner
	if job == 0 && who != nil {
		loose = who
	}
	return func(tids []task.TID) {
		o.mu.Lock()
		if o.pendJob[job] -= n; o.pendJob[job] <= 0 {
			delete(o.pendJob, job)
		}
		if o.pendUser[user] -= n; o.pendUser[user] <= 0 {
			delete(o.pendUser, user)
		}
		o.mu.Unlock()
		if loose != nil {
			o.setTasks(tids, *loose)
		}
	}, nil
}

func (o *owners) addJobTasksLocked(job uint64, tids []task.TID) {
	set := o.jobTasks[job]
	if set == nil {
		set = map[task.TID]struct{}{}
		o.jobTasks[job] = set
	}
	for _, t := range tids {
		if _, gone := o.early[t]; gone {
			continue
		}
		set[t] = struct{}{}
		o.taskJob[t] = job
	}
}

// addJobTasks records tasks the master started in job: a spawn's, as
// each host's answer names them (placeAndStart) or as they start here.
// A task whose end was heard first (ended) is not recorded.
func (o *owners) addJobTasks(job uint64, tids []task.TID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	o.addJobTasksLocked(job, tids)
}

// restoreJobTasks records the tasks a restore is about to start in job
// (restoreSet), before they run: they keep the TIDs of the tasks they
// were checkpointed from, whose ends, heard before (a rollback waits for
// them), do not concern them.
func (o *owners) restoreJobTasks(job uint64, tids []task.TID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	for _, t := range tids {
		delete(o.early, t) // left in earlyList, where it ages out
	}
	o.addJobTasksLocked(job, tids)
}

// admitJobs reserves n new jobs for who against their quota, or refuses
// them with ErrLimit; release(k) gives k of the reservation back, as each
// job is counted by setJob or is not started (beyond n, nothing).
func (o *owners) admitJobs(who owner, n int, q quota) (release func(k int), err error) {
	if who.admin {
		return func(int) {}, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if held := len(o.userJobs[who.name]) + o.pendJobs[who.name]; held+n > q.userJobs {
		return nil, fmt.Errorf("start %d jobs for %s, who runs %d: at most %d jobs a user: %w", n, who.name, held, q.userJobs, ErrLimit)
	}
	o.pendJobs[who.name] += n
	left := n
	return func(k int) {
		o.mu.Lock()
		k = min(k, left)
		left -= k
		if o.pendJobs[who.name] -= k; o.pendJobs[who.name] <= 0 {
			delete(o.pendJobs, who.name)
		}
		o.mu.Unlock()
	}, nil
}

// ended takes a task that ended out of the counts. One the master has not
// recorded yet (its spawn's answer is still on its way) is remembered, a
// bounded number, so that the answer does not count it.
func (o *owners) ended(t task.TID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if job, ok := o.taskJob[t]; ok {
		delete(o.taskJob, t)
		delete(o.jobTasks[job], t)
		return
	}
	if o.dropLoose(t) {
		return
	}
	if len(o.earlyList) >= maxEarlyExits {
		delete(o.early, o.earlyList[0])
		o.earlyList = o.earlyList[1:]
	}
	o.early[t] = struct{}{}
	o.earlyList = append(o.earlyList, t)
}

// jobOver forgets an ended job: its owner and its tasks' counts.
func (o *owners) jobOver(job uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if w, ok := o.jobs[job]; ok {
		delete(o.jobs, job)
		if delete(o.userJobs[w.name], job); len(o.userJobs[w.name]) == 0 {
			delete(o.userJobs, w.name)
		}
	}
	for t := range o.jobTasks[job] {
		delete(o.taskJob, t)
	}
	delete(o.jobTasks, job)
}

// held is how many live tasks and jobs name holds, as counted against
// their quotas.
func (o *owners) held(name string) (tasks, jobs int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.userTasksLocked(name), len(o.userJobs[name])
}

// quota is this daemon's configured bounds on what one person and one
// job hold.
func (d *Daemon) quota() quota {
	return quota{userTasks: d.cfg.MaxUserTasks, userJobs: d.cfg.MaxUserJobs, jobTasks: d.cfg.MaxJobTasks}
}

// callerOwner is the person a control call came from, as an owner.
func callerOwner(ctx context.Context) (owner, bool) {
	c, ok := callerOf(ctx)
	return owner{name: c.Name, admin: c.Role == pki.RoleAdmin}, ok
}

// admitSpawn reserves a spawn of n tasks under parent in job against the
// quotas (master): the job's, and its owner's; outside a job, the
// caller's, or the owner of the parent's. done records the tasks that
// started.
func (d *Daemon) admitSpawn(ctx context.Context, parent task.TID, job uint64, n int) (done func([]task.TID), err error) {
	var who *owner
	if job == 0 {
		if c, ok := callerOwner(ctx); ok {
			who = &c
		} else if w, ok := d.owners.task(parent); ok && !parent.IsZero() {
			who = &w
		}
	}
	return d.owners.admit(who, job, n, d.quota())
}

// callerKey carries the certificate of the person a control call came
// from in its context.
type callerKey struct{}

func withCaller(ctx context.Context, c pki.Peer) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf is the person a control call came from, if a person's.
func callerOf(ctx context.Context) (pki.Peer, bool) {
	c, ok := ctx.Value(callerKey{}).(pki.Peer)
	return c, ok && c.Role.Client()
}

// ownJob records the caller of ctx, if a person, as job's owner.
func (d *Daemon) ownJob(ctx context.Context, job uint64) {
	if c, ok := callerOwner(ctx); ok {
		d.owners.setJob(job, c)
	}
}

// taskJob is the job task tid belongs to, asked of its host.
func (d *Daemon) taskJob(ctx context.Context, tid task.TID) (uint64, error) {
	var rep psReply
	if err := d.callHost(ctx, d.routeHost(tid), mPS, psArgs{All: true}, &rep); err != nil {
		return 0, err
	}
	for _, t := range rep.Tasks {
		if t.TID == tid {
			return t.Job, nil
		}
	}
	return 0, fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
}

// checkTaskOwner says whether user may act on task tid: it is one they
// spawned outside any job, or one of a job they own (the job the master
// started it in, else the one its host says it is of).
func (d *Daemon) checkTaskOwner(ctx context.Context, user string, tid task.TID) error {
	if o, ok := d.owners.task(tid); ok {
		if o.name == user {
			return nil
		}
		return fmt.Errorf("%v is %s's: %w", tid, o.name, ErrForbidden)
	}
	job, known := d.owners.jobOf(tid)
	if !known {
		var err error
		if job, err = d.taskJob(ctx, tid); err != nil {
			return err
		}
	}
	return d.checkJobOwner(user, job, tid.String())
}

// checkJobOwner says whether user may act on job, or on a task of it
// (what, when not empty, names the task in the refusal).
func (d *Daemon) checkJobOwner(user string, job uint64, what string) error {
	o, ok := d.owners.job(job)
	switch {
	case what != "" && job == 0:
		return fmt.Errorf("%s belongs to no job and was not spawned by %s (an admin's to control): %w", what, user, ErrForbidden)
	case what != "" && !ok:
		return fmt.Errorf("%s is of job %d, which has no owner on record (an admin's to control): %w", what, job, ErrForbidden)
	case what != "" && o.name != user:
		return fmt.Errorf("%s is of job %d, %s's: %w", what, job, o.name, ErrForbidden)
	case !ok:
		return fmt.Errorf("job %d has no owner on record (an admin's to control): %w", job, ErrForbidden)
	case o.name != user:
		return fmt.Errorf("job %d is %s's: %w", job, o.name, ErrForbidden)
	}
	return nil
}

// ErrOutsideShared is a directory a client named for a checkpoint or a
// restart that lies outside the shared directory and Config.AllowDirs:
// daemons never write or read where any client says.
var ErrOutsideShared = errors.New("outside the shared directory")

// confineDir checks that dir, as a client names it, lies within the
// shared directory or one of Config.AllowDirs, symbolic links resolved.
func (d *Daemon) confineDir(dir string) error {
	if dir == "" {
		return nil
	}
	real, err := resolveDir(dir)
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	roots := append([]string{d.cfg.SharedDir}, d.cfg.AllowDirs...)
	for _, r := range roots {
		if r == "" {
			continue
		}
		rr, err := resolveDir(r)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rr, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil
		}
	}
	return fmt.Errorf("directory %s: %w (%s) or an allowed directory (--allow-dir)", dir, ErrOutsideShared, d.cfg.SharedDir)
}

// resolveDir makes dir absolute and resolves the symbolic links of its
// longest existing prefix.
func resolveDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}
