package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/task"
)

// JobOptions are what a job's starter asks of its checkpoints.
type JobOptions struct {
	// CheckpointEvery takes a coordinated checkpoint of the job this often
	// (0: only when asked, with `dpvm checkpoint`).
	CheckpointEvery time.Duration `msgpack:"e,omitempty" json:"checkpoint_every,omitempty"`
	// Keep is how many complete checkpoints are kept (default 2).
	Keep int `msgpack:"k,omitempty" json:"keep,omitempty"`
}

// jobState is the master's record of a job: a program's root task and
// everything spawned from it.
type jobState struct {
	id   uint64
	name string // its checkpoints' directory name; kept across restarts
	root task.TID
	typ  string
	opts JobOptions

	done      chan struct{} // closed when the job's root has ended
	forgotten chan struct{} // closed once the master has forgotten the job
	// attach hands the connection of a command that follows the job
	// again (its earlier one dropped) to the goroutine that kills the job
	// when its command goes away (runJob).
	attach chan *peer
	ended  sync.Once
	// killOnReturn is the root's choice (task.JobEnder) to kill the
	// job's other tasks when it returns rather than wait for them; set
	// before the job runs (jobRunning).
	killOnReturn bool
	// settled is closed once the job's end is decided (settleJob): its
	// root has ended and its other tasks too; final is then the root's
	// final state with the job's failed or killed tasks in JobFailures.
	settled chan struct{}
	final   TaskInfo
	// drivers counts the goroutines driving the job's machine. One is
	// added only under mu and before the job is over (done closed), so
	// that once forgotten is closed the count only falls.
	drivers sync.WaitGroup

	// mu guards the fields below. It is held only to step the machine and
	// read or change this bookkeeping, never across a call to a host.
	mu sync.Mutex
	// mc coordinates the job's checkpoints and rollbacks (routing/jobck);
	// the daemon drives it (driveJob).
	mc *jobck.Machine
	// ck is the driver's record of the checkpoint round under way, and
	// work that of the rollback under way: a rollback that abandons a
	// checkpoint round begins before the driver has carried out that
	// round's discard, which needs the round's set directory.
	ck, work *roundWork
	// waiters get the outcome of the checkpoint rounds they started, by
	// round.
	waiters map[jobck.Round]chan ckOutcome
	// rolling is closed when the rollback under way is over (nil: none).
	rolling chan struct{}
	// lost is why the job could not roll back after losing tasks;
	// ending, when not nil, is closed once such a job's other tasks are
	// killed and its command told why (endLostJob).
	lost       error
	ending     chan struct{}
	lostEnding bool // endLostJob has begun
	// prog is the job's checkpoint progress, for ps.
	prog ckProgress
	// seen are the job's tasks on each host as the latest checkpoint
	// round's pause answers named them, with those placed there since:
	// what a host lost with no checkpoint to go back to took with it.
	seen map[task.HostID][]task.TID
	// had is every task the job has had, those that moved or ended too:
	// a checkpoint's quiet step counts the unacknowledged messages of
	// each, wherever they wait. It grows by one TID per task the job
	// starts and goes with the job.
	had map[task.TID]struct{}
}

// placed records that the master started tids of the job on host h.
func (js *jobState) placed(h task.HostID, tids []task.TID) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.seen == nil {
		js.seen = map[task.HostID][]task.TID{}
	}
	js.seen[h] = append(js.seen[h], tids...)
	js.hadLocked(tids)
}

// hadLocked records tids among the tasks the job has had (js.mu held).
func (js *jobState) hadLocked(tids []task.TID) {
	if js.had == nil {
		js.had = map[task.TID]struct{}{}
	}
	for _, t := range tids {
		js.had[t] = struct{}{}
	}
}

// hadTasks records tids among the tasks the job has had.
func (js *jobState) hadTasks(tids ...task.TID) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.hadLocked(tids)
}

// allTasks is every task the job has had.
func (js *jobState) allTasks() []task.TID {
	js.mu.Lock()
	defer js.mu.Unlock()
	return slices.Collect(maps.Keys(js.had))
}

// roundWork is what the driver gathers during a round.
type roundWork struct {
	round         jobck.Round
	root          string // the checkpoint directory root
	setDir        string
	tids          []task.TID
	files         []jobset.Entry
	start, paused time.Time
	budget        time.Duration
	lostHost      task.HostID // a rollback's cause
	restoredTasks int
	restoredSeq   uint64
	late          []task.TID // tasks that reached no safe point within the budget (pause)
}

// ckProgress is a job's checkpoint progress: when the job started, when
// its newest complete set was written, and the newest failed round since.
type ckProgress struct {
	started, done time.Time
	failErr       string
	late          []task.TID
	budget        time.Duration
	warned        bool // the overdue warning was logged
}

// overduePeriods is how many checkpoint periods a job may go without a
// complete checkpoint before ps and the log warn of it.
const overduePeriods = 3

// JobCheckpointStatus is a job's checkpoint progress as ps shows it.
type JobCheckpointStatus struct {
	Job uint64 `json:"job" msgpack:"j"`
	// Every is the job's checkpoint period (0: only when asked).
	EverySeconds float64 `json:"checkpoint_every_s,omitempty" msgpack:"e,omitempty"`
	// Last is the newest complete checkpoint (0: none), AgeSeconds how
	// long ago it completed, or, with none, how long ago the job started.
	Last       uint64  `json:"last_checkpoint" msgpack:"l"`
	AgeSeconds float64 `json:"age_s" msgpack:"a"`
	// Failed is why the newest round since failed, if one did; HeldUpBy
	// the tasks that reached no safe point within the HeldUpSeconds it
	// allowed.
	Failed        string   `json:"failed,omitempty" msgpack:"f,omitempty"`
	HeldUpBy      []string `json:"held_up_by,omitempty" msgpack:"h,omitempty"`
	HeldUpSeconds float64  `json:"held_up_s,omitempty" msgpack:"hs,omitempty"`
	// Warning says the job has had no complete checkpoint for three
	// periods, and which tasks held it up.
	Warning string `json:"warning,omitempty" msgpack:"w,omitempty"`
}

// status is the progress of a job with newest set seq, checkpointed
// every every, at now.
func (p ckProgress) status(job, seq uint64, every time.Duration, now time.Time) JobCheckpointStatus {
	st := JobCheckpointStatus{Job: job, EverySeconds: every.Seconds(), Last: seq, Failed: p.failErr, HeldUpSeconds: p.budget.Seconds()}
	since := p.started
	if seq != 0 && !p.done.IsZero() {
		since = p.done
	}
	age := now.Sub(since)
	st.AgeSeconds = age.Seconds()
	for _, t := range p.late {
		st.HeldUpBy = append(st.HeldUpBy, t.String())
	}
	if len(st.HeldUpBy) == 0 {
		st.HeldUpSeconds = 0
	}
	if every > 0 && age > overduePeriods*every {
		what := "since it started"
		if seq != 0 {
			what = fmt.Sprintf("since checkpoint %d", seq)
		}
		st.Warning = fmt.Sprintf("job %d has had no complete checkpoint for %v (%d periods of %v) %s", job, age.Round(time.Millisecond), overduePeriods, every, what)
		switch {
		case len(st.HeldUpBy) > 0:
			st.Warning += fmt.Sprintf("; held up by %s, which reached no safe point within %v", strings.Join(st.HeldUpBy, ", "), p.budget)
		case st.Failed != "":
			st.Warning += "; the last round failed: " + st.Failed
		}
	}
	return st
}

// checkpointStatus is the job's checkpoint progress now.
func (js *jobState) checkpointStatus(now time.Time) JobCheckpointStatus {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.prog.status(js.id, js.mc.Seq(), js.opts.CheckpointEvery, now)
}

// JobStatuses lists the checkpoint progress of the jobs the master runs,
// in job order (master).
func (d *Daemon) JobStatuses() []JobCheckpointStatus {
	now := time.Now()
	var out []JobCheckpointStatus
	for _, js := range d.reg.all() {
		out = append(out, js.checkpointStatus(now))
	}
	slices.SortFunc(out, func(a, b JobCheckpointStatus) int { return cmp.Compare(a.Job, b.Job) })
	return out
}

type ckOutcome struct {
	res JobCheckpoint
	err error
}

// step feeds the job's machine an event and keeps the bookkeeping that
// must change with it atomically: the rollback channel waitJob follows.
func (js *jobState) step(ev jobck.Event) ([]jobck.Action, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	acts, err := js.mc.Step(ev)
	if r := js.mc.Round(); r.Kind == jobck.Rollback && (js.work == nil || js.work.round != r) {
		// Another rollback follows the one that ended: same cause.
		w := &roundWork{round: r, start: ev.Now}
		if js.work != nil {
			w.lostHost = js.work.lostHost
		}
		js.work = w
	}
	switch st := js.mc.State(); {
	case (st == jobck.Killing || st == jobck.Restoring) && js.rolling == nil:
		js.rolling = make(chan struct{})
	case st != jobck.Killing && st != jobck.Restoring && js.rolling != nil:
		close(js.rolling)
		js.rolling = nil
	}
	return acts, err
}

// rollingBack returns a channel closed when the job's rollback is over, or
// nil when none is under way, the number of rollbacks so far, and why the
// job is lost (it could not roll back).
func (js *jobState) rollingBack() (chan struct{}, int, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.rolling, js.mc.Rollbacks(), js.lost
}

// mayRollBack reports whether a job whose root cannot be reached may
// still roll back (or be found lost) and its root be reached again: the
// root's host is still a member (rootHere), the job has a complete
// checkpoint, or it asked for periodic ones (a loss without one ends it,
// and says why). Otherwise the root is lost for good.
func (js *jobState) mayRollBack(rootHere bool) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	return rootHere || js.mc.Seq() > 0 || js.opts.CheckpointEvery > 0
}

// seq is the newest complete checkpoint of the job.
func (js *jobState) seq() uint64 {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.mc.Seq()
}

// ErrJobLost: a job lost tasks with a host and could not roll back.
var ErrJobLost = errors.New("job lost")

// waitJob waits for the job's root task to exit, following it through
// rollbacks: its old incarnation is killed and a new one restored, and an
// exit of the old one is not the job's. A wait that fails because the
// root's host cannot be reached (its connection dropped: the host is
// about to be deleted, and the job rolled back, or it comes back) is
// asked again every heartbeat, until the job rolls back, is lost, or the
// root is reached again, for at most the time the master takes to delete
// a silent host and roll a job back; at once when the job cannot roll
// back (mayRollBack).
func (d *Daemon) waitJob(ctx context.Context, js *jobState) (TaskInfo, error) {
	var unreached time.Time // when the root was first found unreachable (zero: it was not)
	for {
		_, gen, _ := js.rollingBack()
		info, err := d.Wait(ctx, js.root)
		ch, now, lost := js.rollingBack()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return info, fmt.Errorf("wait for job %d: %w", js.id, ctx.Err())
			}
			unreached = time.Time{}
			continue
		}
		if now != gen {
			unreached = time.Time{}
			continue
		}
		if lost != nil {
			js.mu.Lock()
			ending := js.ending
			js.mu.Unlock()
			if ending != nil {
				// The command hears why before the job's end.
				select {
				case <-ending:
				case <-ctx.Done():
				}
				_, _, lost = js.rollingBack()
			}
			return info, fmt.Errorf("job %d: %w", js.id, lost)
		}
		if err != nil && ctx.Err() == nil && d.ctx.Err() == nil && !js.over() && js.mayRollBack(d.hostKnown(d.routeHost(js.root))) {
			if unreached.IsZero() {
				unreached = time.Now()
				d.log.Info("job's root unreachable; following the job", "job", js.id, "root", js.root, "error", err)
			}
			if time.Since(unreached) < d.Detection().MaxDead+4*d.cfg.MoveTimeout {
				select {
				case <-time.After(d.cfg.Heartbeat):
				case <-ctx.Done():
					return info, fmt.Errorf("wait for job %d: %w", js.id, ctx.Err())
				}
				continue
			}
		}
		return info, err
	}
}

// JobCheckpoint describes a completed job checkpoint.
type JobCheckpoint struct {
	Job     uint64  `json:"job" msgpack:"j"`
	Name    string  `json:"name" msgpack:"n"`
	Seq     uint64  `json:"seq" msgpack:"s"`
	Dir     string  `json:"dir" msgpack:"d"`
	Tasks   int     `json:"tasks" msgpack:"t"`
	Bytes   int64   `json:"bytes" msgpack:"b"`
	Seconds float64 `json:"seconds" msgpack:"sec"`
	// PausedMS is how long the job's tasks were held at their safe points.
	PausedMS float64 `json:"paused_ms" msgpack:"p"`
}

// newJob registers a job (master). How it ends (killOnReturn) and whose
// it is are its caller's to set before it runs: newRootJob for a new job,
// RestartJob for one restarted from a checkpoint set.
func (d *Daemon) newJob(name, typ string, opts JobOptions) *jobState {
	js := &jobState{id: d.reg.newID(), name: name, typ: typ, opts: opts, done: make(chan struct{}), forgotten: make(chan struct{}),
		attach: make(chan *peer, 1), settled: make(chan struct{})}
	if js.name == "" {
		js.name = d.freshJobName(js.id)
	}
	if js.opts.Keep <= 0 {
		js.opts.Keep = 2
	}
	js.mc = jobck.New(js.id, 0, d.jobckConfig(opts))
	js.waiters = map[jobck.Round]chan ckOutcome{}
	js.prog.started = time.Now()
	d.reg.add(js)
	return js
}

// jobckConfig bounds a job's checkpoint rounds: a periodic job's tasks are
// given at least half the period (within [50 ms, MoveTimeout]) to reach
// their safe points, another's MoveTimeout; the budget grows with the
// interval between the tasks' safe points up to Config.PauseMax.
func (d *Daemon) jobckConfig(opts JobOptions) jobck.Config {
	lo := d.cfg.MoveTimeout
	if opts.CheckpointEvery > 0 {
		lo = min(max(opts.CheckpointEvery/2, 50*time.Millisecond), d.cfg.MoveTimeout)
	}
	return jobck.Config{MinPause: lo, MaxPause: max(d.cfg.PauseMax, lo), QuietTimeout: d.cfg.MoveTimeout,
		EndLost: opts.CheckpointEvery > 0}
}

// StartJob starts root as the root task of a new job on this daemon (the
// master of a virtual machine), with the job's checkpoints as opts asks.
// The job ends when its root task does.
func (d *Daemon) StartJob(ctx context.Context, root task.Task, opts JobOptions) (uint64, task.TID, error) {
	js, err := d.startJob(ctx, root, opts)
	if err != nil {
		return 0, 0, err
	}
	return js.id, js.root, nil
}

// startJob is StartJob, returning the job's record.
func (d *Daemon) startJob(ctx context.Context, root task.Task, opts JobOptions) (*jobState, error) {
	typ, state, err := task.EncodeState(root)
	if err != nil {
		return nil, err
	}
	req := task.SpawnRequest{Type: typ, State: state, Count: 1}
	js := d.newRootJob(ctx, req, opts)
	tids, err := d.startLocal(ctx, 0, js.id, req)
	if err != nil {
		d.endJob(js)
		return nil, err
	}
	d.owners.addJobTasks(js.id, tids)
	d.jobRunning(js, tids[0])
	return js, nil
}

// runEmbeddedJob starts root as the root task of a new job and waits until the
// job is over (master); notes, if not nil, hears what befalls the job. It
// returns the root's final state, following the job's rollbacks, once the
// job is forgotten: no checkpoint round of it is still under way when the
// caller goes on to stop the machine.
func (d *Daemon) runEmbeddedJob(ctx context.Context, root task.Task, opts JobOptions, notes func(JobNote)) (TaskInfo, error) {
	js, err := d.startJob(ctx, root, opts)
	if err != nil {
		return TaskInfo{}, err
	}
	if notes != nil {
		d.reg.setNotes(js.id, notes)
	}
	info, err := d.waitJobEnd(ctx, js)
	if err != nil {
		return info, err
	}
	over := make(chan struct{})
	d.goFunc(func() {
		<-js.forgotten
		js.drivers.Wait()
		close(over)
	})
	select {
	case <-over:
		return info, nil
	case <-ctx.Done():
		return info, fmt.Errorf("wait for job %d to end: %w", js.id, ctx.Err())
	}
}

// over reports whether the job's root has ended.
func (js *jobState) over() bool {
	select {
	case <-js.done:
		return true
	default:
		return false
	}
}

// admitCallerJobs reserves n new jobs against the quota of the person the
// control call of ctx came from (master; none for a call of no person):
// release(k) gives k of the reservation back (owners.admitJobs).
func (d *Daemon) admitCallerJobs(ctx context.Context, n int) (release func(k int), err error) {
	if c, ok := callerOwner(ctx); ok {
		return d.owners.admitJobs(c, n, d.quota())
	}
	return func(int) {}, nil
}

// newRootJob registers a new job whose root is started from req (master):
// the root's state says how the job ends (task.JobEnder), and the person
// the control call of ctx came from, if any, owns it.
func (d *Daemon) newRootJob(ctx context.Context, req task.SpawnRequest, opts JobOptions) *jobState {
	js := d.newJob("", req.Type, opts)
	js.killOnReturn = killsOnReturn(req.Type, req.State)
	d.ownJob(ctx, js.id)
	return js
}

// spawnRoots places and starts req.Count tasks, each the root of a job of
// its own (master).
func (d *Daemon) spawnRoots(ctx context.Context, req task.SpawnRequest, opts JobOptions) ([]task.TID, error) {
	if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
		return nil, err
	}
	release, err := d.admitCallerJobs(ctx, req.Count)
	if err != nil {
		return nil, err
	}
	defer release(req.Count) // what is left of the reservation
	tids := make([]task.TID, 0, prealloc(req.Count))
	for range req.Count {
		if err := ctx.Err(); err != nil {
			// The caller is gone: the jobs started so far go on.
			return tids, fmt.Errorf("spawn %d jobs: stopped after %d: %w", req.Count, len(tids), err)
		}
		js := d.newRootJob(ctx, req, opts)
		release(1)
		r := req
		r.Count = 1
		got, err := d.spawnAnywhere(ctx, 0, js.id, r)
		if err != nil || len(got) == 0 {
			d.endJob(js)
			if err != nil && req.Count > 1 {
				err = fmt.Errorf("spawn %d jobs: stopped after %d: %w", req.Count, len(tids), err)
			}
			return tids, err
		}
		d.jobRunning(js, got[0])
		tids = append(tids, js.root)
	}
	return tids, nil
}

// freshJobName names job id's checkpoints: "j<id>", or "j<id>-<k>" with
// the first k free when an earlier machine sharing the directory left
// checkpoints under that name.
func (d *Daemon) freshJobName(id uint64) string {
	name := fmt.Sprintf("j%d", id)
	if d.cfg.SharedDir == "" {
		return name
	}
	for k := 2; ; k++ {
		dir, err := jobset.JobDir(d.cfg.SharedDir, name)
		if err != nil {
			return name
		}
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("j%d-%d", id, k)
	}
}

// endJob forgets a job whose root task has ended (master). A checkpoint
// under way is abandoned (its tasks resume, its set is removed); none
// starts after.
func (d *Daemon) endJob(js *jobState) {
	js.ended.Do(func() {
		close(js.done)
		d.forgetJob(js)
	})
}

// forgetJob is the second half of endJob: the job's machine is told, a
// round under way is abandoned, and the registry forgets the job.
func (d *Daemon) forgetJob(js *jobState) {
	acts, _ := js.step(jobck.Event{Kind: jobck.EvEnded, Now: time.Now()})
	d.driveJob(js, acts)
	d.reg.remove(js.id)
	d.owners.jobOver(js.id)
	close(js.forgotten)
}

// jobRunning records that job js runs with root as its root task: its
// periodic checkpoints start, and it ends once its root has ended and
// its other tasks too (settleJob).
func (d *Daemon) jobRunning(js *jobState, root task.TID) {
	js.root = root
	js.hadTasks(root)
	if js.opts.CheckpointEvery > 0 {
		d.goFunc(func() { d.checkpointLoop(js) })
	}
	d.goFunc(func() {
		d.settleJob(js)
		d.endJob(js)
	})
}

// KillJob kills every task of job, the root first so that it spawns no
// more, and returns how many it killed (master). Tasks spawned while it
// works are found by looking again, a few times.
func (d *Daemon) KillJob(ctx context.Context, job uint64) (int, error) {
	if job == 0 {
		return 0, fmt.Errorf("kill job 0: %w", ErrNoJob)
	}
	// No move of the job's tasks starts from now on, and the moves under
	// way end first: a task caught in one is on no host's task list.
	defer d.mv.holdMoves(job)()
	d.settleMoves(ctx, func(_ task.TID, j uint64) bool { return j == job })
	killed := 0
	var errs []error
	for round := 0; round < 3; round++ {
		ts, err := d.AllTasks(ctx, false)
		if err != nil {
			errs = append(errs, err)
		}
		var victims []task.TID
		for _, t := range ts {
			if t.Job == job && t.State == Running {
				victims = append(victims, t.TID)
			}
		}
		if len(victims) == 0 {
			break
		}
		slices.SortFunc(victims, func(a, b task.TID) int { // the root first
			return cmp.Compare(boolInt(a != d.jobRoot(job)), boolInt(b != d.jobRoot(job)))
		})
		for _, t := range victims {
			if err := d.KillTask(ctx, t); err != nil && !errors.Is(err, task.ErrNoSuchTask) {
				errs = append(errs, err)
				continue
			}
			killed++
		}
	}
	if killed == 0 && len(errs) == 0 {
		if _, err := d.job(job); err != nil {
			return 0, fmt.Errorf("kill j%d: %w", job, err)
		}
	}
	return killed, errors.Join(errs...)
}

// jobRoot is job's root task, or 0 when the master does not know the job.
func (d *Daemon) jobRoot(job uint64) task.TID {
	if js := d.reg.get(job); js != nil {
		return js.root
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// job finds a registered job by its number (master).
func (d *Daemon) job(id uint64) (*jobState, error) {
	js := d.reg.get(id)
	if js == nil {
		return nil, fmt.Errorf("job %d: %w", id, ErrNoJob)
	}
	return js, nil
}

// checkpointLoop takes the job's periodic checkpoints until it ends. A
// failed checkpoint is logged; the job keeps its previous one.
func (d *Daemon) checkpointLoop(js *jobState) {
	d.every(js.opts.CheckpointEvery, js.done, func() bool {
		ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout+d.cfg.PauseMax+js.opts.CheckpointEvery)
		r, err := d.checkpointJob(ctx, js, "")
		cancel()
		if err != nil {
			if errors.Is(err, ErrNoJob) {
				return false
			}
			d.log.Warn("job checkpoint failed; the previous one stands", "job", js.id, "error", err)
			st := js.checkpointStatus(time.Now())
			js.mu.Lock()
			warn := st.Warning != "" && !js.prog.warned
			js.prog.warned = js.prog.warned || warn
			js.mu.Unlock()
			if warn {
				d.log.Warn(st.Warning, "job", js.id, "held_up_by", st.HeldUpBy)
			}
			return true
		}
		d.log.Info("job checkpointed", "job", js.id, "seq", r.Seq, "tasks", r.Tasks, "bytes", r.Bytes, "paused_ms", r.PausedMS)
		return true
	})
}

// CheckpointJob takes a coordinated checkpoint of job into the directory
// root, which every host must reach (master). Empty root is the shared
// directory.
func (d *Daemon) CheckpointJob(ctx context.Context, job uint64, root string) (JobCheckpoint, error) {
	js, err := d.job(job)
	if err != nil {
		return JobCheckpoint{}, err
	}
	return d.checkpointJob(ctx, js, root)
}

// checkpointJob runs a checkpoint round of js under root and returns its
// outcome. The round runs on if ctx ends first; the caller stops waiting.
func (d *Daemon) checkpointJob(ctx context.Context, js *jobState, root string) (res JobCheckpoint, err error) {
	res = JobCheckpoint{Job: js.id, Name: js.name}
	defer func(start time.Time) { d.jobCheckpointed(js.id, start, err) }(time.Now())
	if root == "" {
		root = d.cfg.SharedDir
	}
	if root == "" {
		return res, fmt.Errorf("checkpoint job %d: %w", js.id, ErrNoSharedDir)
	}
	floor, ferr := setFloor(root, js.name)
	if ferr != nil {
		return res, fmt.Errorf("checkpoint job %d: %w", js.id, ferr)
	}
	now := time.Now()
	js.mu.Lock()
	var acts []jobck.Action
	if js.over() {
		err = jobck.ErrEnded
	} else if lost := d.jobLostHost(js.id); lost != 0 {
		// Deleted, but the job's coordinator is not told yet: a round
		// on the hosts left would miss the tasks lost there.
		err = fmt.Errorf("%v: %w", lost, jobck.ErrBroken)
	} else {
		acts, err = js.mc.Step(jobck.Event{Kind: jobck.EvCheckpoint, Now: now, Hosts: d.hostIDs(), Floor: floor})
	}
	var ch chan ckOutcome
	if err == nil {
		r := js.mc.Round()
		js.ck = &roundWork{round: r, root: root, start: now}
		ch = make(chan ckOutcome, 1)
		js.waiters[r] = ch
		js.drivers.Add(1)
	}
	js.mu.Unlock()
	switch {
	case errors.Is(err, jobck.ErrEnded):
		return res, fmt.Errorf("checkpoint job %d: %w", js.id, ErrNoJob)
	case errors.Is(err, jobck.ErrBroken):
		return res, fmt.Errorf("checkpoint job %d: it lost tasks with a host and has not rolled back yet", js.id)
	case err != nil:
		return res, fmt.Errorf("checkpoint job %d: %w", js.id, err)
	}
	d.goFunc(func() {
		defer js.drivers.Done()
		d.driveJob(js, acts)
	})
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		return res, fmt.Errorf("checkpoint job %d: %w", js.id, ctx.Err())
	}
}

// setFloor is the largest set number in job name's directory under root,
// complete or not (0: none): a new set of the job takes a number above it.
func setFloor(root, name string) (uint64, error) {
	jobDir, err := jobset.JobDir(root, name)
	if err != nil {
		return 0, err
	}
	seqs, err := jobset.Sets(jobDir)
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	return seqs[len(seqs)-1], nil
}

// driveJob carries out the job machine's actions, in order, with those
// that follow from the events they produce. Several drivers may run at
// once (a host lost during a checkpoint starts one); the machine refuses
// the steps of a round that is no longer current, and that driver stops.
func (d *Daemon) driveJob(js *jobState, acts []jobck.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = append(acts[1:], d.jobAction(js, a)...)
	}
}

// workFor returns the driver's record of round r, if it is the current
// checkpoint or rollback round.
func (js *jobState) workFor(r jobck.Round) *roundWork {
	js.mu.Lock()
	defer js.mu.Unlock()
	w := js.work
	if r.Kind == jobck.Checkpoint {
		w = js.ck
	}
	if w == nil || w.round != r {
		return nil
	}
	return w
}

// feed steps the machine with the hosts' answers to a call, in the hosts'
// order, and returns the actions that follow. A refused answer ends the
// feeding if its round was abandoned meanwhile; the answer of a host lost
// meanwhile, whose answer the round no longer awaits, is skipped.
func (d *Daemon) feed(js *jobState, evs []jobck.Event) []jobck.Action {
	var out []jobck.Action
	for _, ev := range evs {
		acts, err := js.step(ev)
		if err != nil {
			d.log.Debug("job step refused", "job", js.id, "event", ev.Kind, "error", err)
			js.mu.Lock()
			current := js.mc.Round() == ev.Round
			js.mu.Unlock()
			if current && ev.Host != 0 && errors.Is(err, jobck.ErrStale) {
				continue
			}
			return out
		}
		out = append(out, acts...)
	}
	return out
}

// jobAction carries out one action of the job's machine.
func (d *Daemon) jobAction(js *jobState, a jobck.Action) []jobck.Action {
	w := js.workFor(a.Round)
	step := ckStep{Job: js.id, Round: a.Round}
	switch a.Kind {
	case jobck.ActPause:
		if w == nil {
			return nil
		}
		d.fault("ckpt:pause")
		w.budget = a.Budget
		step.Timeout = a.Budget
		ctx, cancel := context.WithTimeout(d.ctx, a.Budget+d.cfg.MoveTimeout)
		defer cancel()
		reps, errs := d.eachHost(ctx, a.Hosts, mCkPause, step)
		evs := make([]jobck.Event, len(a.Hosts))
		now := time.Now()
		js.mu.Lock()
		if js.seen == nil {
			js.seen = map[task.HostID][]task.TID{}
		}
		for i, h := range a.Hosts {
			if errs[i] == nil {
				js.seen[h] = reps[i].TIDs
			}
			w.late = append(w.late, reps[i].Late...)
		}
		js.mu.Unlock()
		for i, h := range a.Hosts {
			err := errs[i]
			if err == nil && len(reps[i].Late) > 0 {
				err = fmt.Errorf("%v of job %d within %v: %w", reps[i].Late, js.id, a.Budget, ErrNoSafePoint)
			}
			evs[i] = jobck.Event{Kind: jobck.EvPaused, Now: now, Round: a.Round, Host: h, Err: err, SafeEvery: reps[i].SafeEvery}
		}
		if w.paused.IsZero() {
			w.paused = now
		}
		return d.feed(js, evs)
	case jobck.ActQuiet:
		if !a.At.IsZero() {
			t := time.NewTimer(time.Until(a.At))
			defer t.Stop()
			select {
			case <-t.C:
			case <-d.ctx.Done():
				return nil
			}
			return d.feed(js, []jobck.Event{{Kind: jobck.EvTick, Now: time.Now()}})
		}
		if w == nil {
			return nil
		}
		d.fault("ckpt:quiet")
		// Every task the job has had, moved and ended ones too: a task
		// that left a host leaves its unacknowledged messages in that
		// host's outbox, and a set that completed with one of them in
		// flight would hold it in no restored task.
		step.TIDs = js.allTasks()
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.MoveTimeout)
		defer cancel()
		reps, errs := d.eachHost(ctx, a.Hosts, mCkQuiet, step)
		evs := make([]jobck.Event, len(a.Hosts))
		now := time.Now()
		w.tids = w.tids[:0]
		for i, h := range a.Hosts {
			w.tids = append(w.tids, reps[i].TIDs...)
			evs[i] = jobck.Event{Kind: jobck.EvQuiet, Now: now, Round: a.Round, Host: h, Err: errs[i],
				Pending: reps[i].Pending, Running: reps[i].Running, Tasks: len(reps[i].TIDs)}
		}
		return d.feed(js, evs)
	case jobck.ActWrite:
		if w == nil {
			return nil
		}
		return d.feed(js, d.writeSet(js, w, a))
	case jobck.ActCommit:
		if w == nil {
			return nil
		}
		d.fault("ckpt:commit")
		if lost := d.jobLostHost(js.id); lost != 0 {
			// A host with tasks of the job was deleted during the round:
			// the set misses them and must not become the one a rollback
			// goes back to.
			return d.feed(js, []jobck.Event{{Kind: jobck.EvCommitted, Now: time.Now(), Round: a.Round,
				Err: fmt.Errorf("%v with tasks of the job was lost during the round: %w", lost, jobck.ErrLost)}})
		}
		js.mu.Lock()
		files := slices.Clone(w.files)
		js.mu.Unlock()
		owner, _ := d.owners.job(js.id)
		m := &jobset.Manifest{Job: js.name, Seq: a.Round.Seq, Created: time.Now().UTC(), Root: js.root.String(), Program: js.typ, Entries: files,
			Epoch: d.mv.epoch(), Owner: owner.name}
		key, keyID := d.keyID(labelManifest)
		m.KeyID = keyID
		jobDir := filepath.Dir(w.setDir)
		var named bool
		if prev, perr := jobset.Predecessor(jobDir, m.Seq, key, d.keyFor(labelManifest, "a manifest of "+jobDir, &named)); perr == nil {
			m.PrevSeq, m.PrevSHA256 = prev.Seq, prev.SHA256
		} else {
			d.log.Warn("job checkpoint: no link to the previous set", "job", js.id, "error", perr)
		}
		err := jobset.WriteManifest(w.setDir, m, key)
		if err == nil {
			d.noteSetSeq(js.name, m.Seq)
			if lerr := jobset.WriteLatestRecord(w.setDir); lerr != nil {
				d.log.Warn("job checkpoint: recording the newest set", "job", js.id, "error", lerr)
			}
			// Before the tasks go on: a job that ends right after keeps
			// only the sets it should.
			if _, perr := jobset.PruneWith(jobDir, js.opts.Keep, key, d.keyFor(labelManifest, "a manifest of "+jobDir, &named)); perr != nil {
				d.log.Warn("pruning old job checkpoints", "job", js.id, "error", perr)
			}
		}
		return d.feed(js, []jobck.Event{{Kind: jobck.EvCommitted, Now: time.Now(), Round: a.Round, Err: err}})
	case jobck.ActResume:
		d.resumeHosts(js.id, a.Hosts, a.Round)
	case jobck.ActDiscard:
		if w != nil {
			js.mu.Lock()
			dir := w.setDir
			js.mu.Unlock()
			if dir != "" {
				_ = os.RemoveAll(dir) // incomplete: the previous set stands
			}
		}
	case jobck.ActDone:
		d.checkpointDone(js, w, a)
	case jobck.ActKill:
		step.Timeout = d.cfg.MoveTimeout
		d.dropJobMoves(js.id)
		errs := d.killEverywhere(a.Hosts, step)
		evs := make([]jobck.Event, len(a.Hosts))
		for i, h := range a.Hosts {
			if errs[i] != nil {
				d.log.Error("job rollback: stopping the surviving tasks", "job", js.id, "on_host", h, "error", errs[i])
			}
			evs[i] = jobck.Event{Kind: jobck.EvKilled, Now: time.Now(), Round: a.Round, Host: h, Err: errs[i]}
		}
		return d.feed(js, evs)
	case jobck.ActRestore:
		err := d.restoreRound(js, a)
		return d.feed(js, []jobck.Event{{Kind: jobck.EvRestored, Now: time.Now(), Round: a.Round, Err: err}})
	case jobck.ActRolledBack:
		d.rolledBack(js, a)
	case jobck.ActUnrecoverable:
		if a.End {
			d.endLostJob(js, a.Host)
			return nil
		}
		// PVM's behaviour: the lost tasks are reported exited to their
		// watchers, and the job goes on without them as it can.
		d.log.Warn("job lost tasks with a host and has no checkpoint to roll back to", "job", js.id, "lost_host", a.Host)
	}
	return nil
}

// endLostJob ends a job that asked for checkpoints and lost tasks with
// host h before it had one (master): why is recorded first, so that the
// command waiting for the job hears it rather than its root's end; then
// its other tasks are killed, and the command is told which host had
// which tasks.
func (d *Daemon) endLostJob(js *jobState, h task.HostID) {
	ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
	defer cancel()
	js.mu.Lock()
	took := slices.Clone(js.seen[h])
	ending := js.ending
	again := js.lostEnding
	js.lostEnding = true
	js.mu.Unlock()
	if again {
		return // another host lost since: the job is ending already
	}
	if ending != nil {
		defer close(ending)
	}
	ts, err := d.AllTasks(ctx, false)
	if err != nil {
		d.log.Warn("job lost: listing its tasks", "job", js.id, "error", err)
	}
	var others []string
	for _, t := range ts {
		if t.Job == js.id && t.State == Running {
			others = append(others, fmt.Sprintf("%v on %s", t.TID, t.Host))
		}
	}
	why := fmt.Sprintf("no complete checkpoint to roll back to; host %v took tasks %s with it; its other tasks are killed: %s",
		h, tidList(took, "(none placed there by the master)"), listOr(others, "none"))
	js.mu.Lock()
	js.lost = fmt.Errorf("%s: %w", why, ErrJobLost)
	js.mu.Unlock()
	d.log.Error("job lost tasks with a host and has no checkpoint to roll back to; it ends", "job", js.id, "lost_host", h,
		"lost_tasks", took, "killed", others)
	d.jobNote(JobNote{Job: js.id, Kind: NoteLost, Host: h.String(), Tasks: len(took), Err: why})
	if n, err := d.KillJob(ctx, js.id); err != nil {
		d.log.Warn("job lost: killing its other tasks", "job", js.id, "killed", n, "error", err)
	}
}

// tidList spells tids, or none when there are none.
func tidList(tids []task.TID, none string) string {
	s := make([]string, len(tids))
	for i, t := range tids {
		s[i] = t.String()
	}
	return listOr(s, none)
}

// listOr joins s with commas, or is none when s is empty.
func listOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}

// resumeHosts asks hosts to let the job's tasks go on after round r:
// each host's first attempt. Whether a host whose call failed (timed out:
// it may never have heard it) is asked again is the master node's
// decision (EvResumed: up to its Config.ResumeAttempts in all, never a
// host deemed lost), which performResumes carries out: a task left paused
// would never run again. A resume is idempotent, and a host refuses a
// pause of a round it has resumed, so a late one does no harm.
func (d *Daemon) resumeHosts(job uint64, hosts []task.HostID, r jobck.Round) {
	fx := make([]mnode.Effect, len(hosts))
	for i, h := range hosts {
		fx[i] = mnode.Effect{Kind: mnode.FxResume, Job: job, Round: r, Host: h, Attempt: 1, Timeout: moveTimeoutsOf(d.cfg).Step}
	}
	if again := d.performResumes(fx); len(again) > 0 {
		d.goFunc(func() {
			for len(again) > 0 && d.ctx.Err() == nil {
				again = d.performResumes(again)
			}
		})
	}
}

// performResumes performs the master node's resumes (FxResume), each
// host's call at once with mn.mu released, feeds each outcome back
// (EvResumed) and returns the resumes the node asks again.
func (d *Daemon) performResumes(fx []mnode.Effect) []mnode.Effect {
	errs := make([]error, len(fx))
	var wg sync.WaitGroup
	for i, x := range fx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.fault(fmt.Sprintf("ckpt:resume %d", x.Attempt))
			ctx, cancel := context.WithTimeout(d.ctx, x.Timeout)
			defer cancel()
			if err := d.callHost(ctx, x.Host, mCkResume, ckStep{Job: x.Job, Round: x.Round}, nil); err != nil {
				errs[i] = fmt.Errorf("%v (attempt %d): %w", x.Host, x.Attempt, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.log.Warn("job checkpoint: resume", "job", fx[0].Job, "error", err)
	}
	var again []mnode.Effect
	d.mn.mu.Lock()
	for i, x := range fx {
		for _, y := range d.mn.stepLocked(mnode.Event{Kind: mnode.EvResumed, Job: x.Job, Round: x.Round, Host: x.Host, Attempt: x.Attempt, Err: errs[i]}) {
			if y.Kind == mnode.FxResume {
				again = append(again, y)
			}
		}
	}
	d.mn.mu.Unlock()
	d.fault(fmt.Sprintf("ckpt:resumed %d", len(again)))
	return again
}

// writeSet asks the hosts to write their tasks' checkpoints into a new set
// and returns their answers as events.
func (d *Daemon) writeSet(js *jobState, w *roundWork, a jobck.Action) []jobck.Event {
	evs := make([]jobck.Event, len(a.Hosts))
	fail := func(err error) []jobck.Event {
		for i, h := range a.Hosts {
			evs[i] = jobck.Event{Kind: jobck.EvWritten, Now: time.Now(), Round: a.Round, Host: h, Err: err}
		}
		return evs
	}
	jobDir, err := jobset.JobDir(w.root, js.name)
	if err != nil {
		return fail(err)
	}
	setDir, err := jobset.NewSet(jobDir, a.Round.Seq)
	if err != nil {
		return fail(err)
	}
	// The round may have been abandoned meanwhile (a host lost), its
	// Discard carried out already: then the new set goes at once.
	js.mu.Lock()
	current := js.mc.Round() == a.Round
	if current {
		w.setDir = setDir
	}
	js.mu.Unlock()
	if !current {
		_ = os.RemoveAll(setDir)
		return fail(jobck.ErrStale)
	}
	d.fault("ckpt:write")
	step := ckStep{Job: js.id, Round: a.Round, Dir: setDir, Groups: map[task.TID][]ckpt.Membership{}}
	for _, t := range w.tids {
		if ms := d.groups.memberships(t); len(ms) > 0 {
			step.Groups[t] = ms
		}
	}
	ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
	defer cancel()
	reps, errs := d.eachHost(ctx, a.Hosts, mCkWrite, step)
	js.mu.Lock()
	defer js.mu.Unlock()
	for i, h := range a.Hosts {
		for _, e := range reps[i].Files {
			e.Host = h.String()
			w.files = append(w.files, e)
		}
		evs[i] = jobck.Event{Kind: jobck.EvWritten, Now: time.Now(), Round: a.Round, Host: h, Err: errs[i], Tasks: len(reps[i].Files)}
	}
	return evs
}

// checkpointDone reports the outcome of a checkpoint round to whoever
// started it.
func (d *Daemon) checkpointDone(js *jobState, w *roundWork, a jobck.Action) {
	res := JobCheckpoint{Job: js.id, Name: js.name, Seq: a.Round.Seq}
	err := a.Err
	if err != nil {
		if errors.Is(err, jobck.ErrNoTasks) || errors.Is(err, jobck.ErrEnded) {
			err = fmt.Errorf("%w: %w", ErrNoJob, err)
		}
		err = fmt.Errorf("checkpoint job %d: %w", js.id, err)
	}
	if w != nil && err == nil {
		js.mu.Lock()
		res.Dir, res.Tasks = w.setDir, a.Tasks
		for _, e := range w.files {
			res.Bytes += e.Bytes
		}
		js.mu.Unlock()
		res.Seconds = time.Since(w.start).Seconds()
		if !w.paused.IsZero() {
			res.PausedMS = float64(time.Since(w.paused).Microseconds()) / 1e3
		}
	}
	js.mu.Lock()
	ch := js.waiters[a.Round]
	delete(js.waiters, a.Round)
	if js.ck != nil && js.ck.round == a.Round {
		js.ck = nil
	}
	if err == nil {
		js.prog = ckProgress{started: js.prog.started, done: time.Now()}
	} else if !errors.Is(err, ErrNoJob) {
		js.prog.failErr, js.prog.late, js.prog.budget = a.Err.Error(), nil, 0
		if w != nil {
			js.prog.late, js.prog.budget = slices.Clone(w.late), w.budget
		}
	}
	js.mu.Unlock()
	if ch != nil {
		ch <- ckOutcome{res: res, err: err}
	}
}

// hostIDs lists the hosts of the virtual machine (master).
func (d *Daemon) hostIDs() []task.HostID {
	var ids []task.HostID
	for _, h := range d.Hosts() {
		ids = append(ids, h.ID)
	}
	return ids
}

// eachHost calls method on every host at once and returns their replies
// and errors in the hosts' order.
func (d *Daemon) eachHost(ctx context.Context, hosts []task.HostID, method string, args ckStep) ([]ckReply, []error) {
	reps := make([]ckReply, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.callHost(ctx, h, method, args, &reps[i]); err != nil {
				errs[i] = fmt.Errorf("%v: %w", h, err)
			}
		}()
	}
	wg.Wait()
	return reps, errs
}

// Restarting a job from a checkpoint.

// restoreArgs asks a host to stage (load) or start (go) restored tasks.
type restoreArgs struct {
	Job   uint64   `msgpack:"j"`
	Dir   string   `msgpack:"d"`
	Files []string `msgpack:"f"`
	// Want is what the manifest says of each of Files (same order): the
	// host checks each file against it as it loads it.
	Want  []ckWant `msgpack:"w,omitempty"`
	Epoch uint64   `msgpack:"e"`
	Floor uint32   `msgpack:"fl,omitempty"`
}

const (
	mCkLoad  = "ckpt.load"  // at a host: read and verify checkpoints, hold messages for their tasks
	mCkGo    = "ckpt.go"    // at a host: start the staged tasks
	mCkDrop  = "ckpt.drop"  // at a host: forget staged tasks (a failed restart)
	mCkFloor = "ckpt.floor" // at a host: never number a new task at or below Floor
)

// staged is a task read from a job checkpoint, waiting to start.
type staged struct {
	meta *ckpt.Meta
	t    task.Task
}

// raiseTIDFloor makes this host never number a new task at or below
// floor (a restart brings back tasks numbered up to it).
func (d *Daemon) raiseTIDFloor(floor uint32) {
	d.ht.mu.Lock()
	d.ht.nextNum = max(d.ht.nextNum, floor)
	d.ht.ownNum = max(d.ht.ownNum, floor)
	d.ht.mu.Unlock()
}

// loadStaged reads and verifies task checkpoints and readies this host to
// receive their tasks: messages for them are held from now on. It returns
// the tasks' group memberships.
func (d *Daemon) loadStaged(a restoreArgs) (ckStep, error) {
	var rep ckStep
	dir := ckpt.Dir{Path: a.Dir}
	var got []staged
	if len(a.Want) != len(a.Files) {
		return rep, fmt.Errorf("restore: %d files and %d manifest entries: %w", len(a.Files), len(a.Want), routing.ErrMalformed)
	}
	for i, name := range a.Files {
		m, t, err := d.readSetFile(dir, name, a.Want[i])
		if err != nil {
			return rep, fmt.Errorf("restore %s: %w", filepath.Join(a.Dir, name), err)
		}
		got = append(got, staged{meta: m, t: t})
	}
	rep.Groups = map[task.TID][]ckpt.Membership{}
	byTID := map[task.TID]staged{}
	err := d.stepCkpt(func() jobck.HostEvent {
		e := jobck.HostEvent{Kind: jobck.HostStage, Job: a.Job}
		for _, s := range got {
			tid := s.meta.TID
			arr := d.ht.incoming[tid]
			_, here := d.ht.tasks[tid]
			e.Tasks = append(e.Tasks, jobck.Local{TID: tid, Running: here,
				Moving: d.ht.moving[tid] != nil || (arr != nil && arr.move != 0), Arriving: arr != nil && arr.move == 0})
			byTID[tid] = s
		}
		return e
	}, func(x jobck.HostEffect) {
		if s, ok := byTID[x.TID]; ok && x.Kind == jobck.DoStage {
			s.meta.Job, s.meta.Epoch = a.Job, a.Epoch
			d.ht.incoming[x.TID] = &arriving{typ: s.meta.Type, epoch: a.Epoch, received: make(chan transferred, 1)}
			d.ht.staged[x.TID] = s
			if len(s.meta.Groups) > 0 {
				rep.Groups[x.TID] = s.meta.Groups
			}
		}
	})
	if err != nil {
		return ckStep{}, err
	}
	return rep, nil
}

// startStaged puts the staged tasks of a restart into service.
func (d *Daemon) startStaged(a restoreArgs) {
	var todo []staged
	var arrs []*arriving
	_ = d.stepCkpt(func() jobck.HostEvent { return jobck.HostEvent{Kind: jobck.HostStart, Job: a.Job} }, func(x jobck.HostEffect) {
		if s, ok := d.ht.staged[x.TID]; ok && x.Kind == jobck.DoStart {
			todo = append(todo, s)
			arrs = append(arrs, d.ht.incoming[x.TID])
			delete(d.ht.staged, x.TID)
		}
	})
	for i, s := range todo {
		if err := d.install(s.meta, s.t, arrs[i], nil); err != nil {
			d.log.Warn("restore: start a restored task", "tid", s.meta.TID, "error", err)
		}
	}
}

// dropStaged forgets the staged tasks of a failed restart.
func (d *Daemon) dropStaged(a restoreArgs) {
	_ = d.stepCkpt(func() jobck.HostEvent { return jobck.HostEvent{Kind: jobck.HostUnstage, Job: a.Job} }, nil)
}

// RestartJob starts a job again from the newest complete checkpoint under
// dir (a job's checkpoint directory, or one set in it), on the hosts there
// are now, and returns the new job and its root task (master). Every task
// keeps its TID; a task goes back to the host it was checkpointed on when
// that host is still here, and is placed as spawns are otherwise.
//
// The job's output goes to out(job) (out nil: the master's output).
func (d *Daemon) RestartJob(ctx context.Context, dir string, opts JobOptions, out func(job uint64) io.Writer) (*jobState, []error, error) {
	setDir, m, skipped, err := d.findSet(dir)
	if err != nil {
		return nil, skipped, fmt.Errorf("restart from %s: %w", dir, err)
	}
	root, err := task.ParseTID(m.Root)
	if err != nil {
		return nil, skipped, fmt.Errorf("restart from %s: root %q: %w", setDir, m.Root, err)
	}
	owner, err := d.restartOwner(ctx, setDir, m)
	if err != nil {
		return nil, skipped, err
	}
	release := func(int) {}
	if owner.name != "" {
		if release, err = d.owners.admitJobs(owner, 1, d.quota()); err != nil {
			return nil, skipped, fmt.Errorf("restart from %s: %w", setDir, err)
		}
	}
	d.checkSetSeq(m.Job, m.Seq, setDir)
	d.noteSetSeq(m.Job, m.Seq)
	js := d.newJob(m.Job, m.Program, opts)
	js.killOnReturn = d.restoredKillsOnReturn(setDir, m)
	if owner.name != "" {
		d.owners.setJob(js.id, owner)
	}
	release(1)
	d.mv.clearFacts() // its tasks come back under the new job
	js.mu.Lock()
	js.mc = jobck.New(js.id, m.Seq, d.jobckConfig(js.opts))
	js.mu.Unlock()
	if out != nil {
		d.reg.setOutput(js.id, out(js.id))
	}
	if err := d.restoreSet(ctx, js, setDir, m); err != nil {
		d.endJob(js)
		return nil, skipped, fmt.Errorf("restart from %s: %w", setDir, err)
	}
	d.log.Info("job restarted", "job", js.id, "name", js.name, "seq", m.Seq, "tasks", len(m.Entries), "root", root)
	d.jobRunning(js, root)
	return js, skipped, nil
}

// restartOwner is whose job a restart of set m makes: the owner its
// manifest names. A user may restart only a set of theirs; an admin any,
// a set of no one's becoming the admin's. A restart no person asked for
// (ctx carries no caller) keeps the manifest's owner.
func (d *Daemon) restartOwner(ctx context.Context, setDir string, m *jobset.Manifest) (owner, error) {
	c, ok := callerOf(ctx)
	switch {
	case !ok:
		return owner{name: m.Owner}, nil
	case c.Role == pki.RoleUser && m.Owner == "":
		return owner{}, fmt.Errorf("restart from %s: the checkpoint belongs to no user (an admin's to restart): %w", setDir, ErrForbidden)
	case c.Role == pki.RoleUser && m.Owner != c.Name:
		return owner{}, fmt.Errorf("restart from %s: the checkpoint is %s's: %w", setDir, m.Owner, ErrForbidden)
	case m.Owner == "" || m.Owner == c.Name:
		return owner{name: c.Name, admin: c.Role == pki.RoleAdmin}, nil
	}
	return owner{name: m.Owner}, nil
}

// restoreSet starts the tasks of a checkpoint set as job js, on the hosts
// there are now (master).
func (d *Daemon) restoreSet(ctx context.Context, js *jobState, setDir string, m *jobset.Manifest) error {
	// Where each task goes.
	hosts := d.restorable()
	here := map[task.HostID]bool{}
	for _, h := range hosts {
		here[h.ID] = true
	}
	var away []int
	place := make([]task.HostID, len(m.Entries))
	tids := make([]task.TID, len(m.Entries))
	floor := map[task.HostID]uint32{}
	for i, e := range m.Entries {
		tid, err := task.ParseTID(e.TID)
		if err != nil {
			return fmt.Errorf("manifest entry %q: %w", e.TID, err)
		}
		tids[i] = tid
		floor[tid.Host()] = max(floor[tid.Host()], tid.Num())
		// Back where it was checkpointed (a moved task is not at its
		// origin), if that host is here.
		home := tid.Host()
		if h, err := task.ParseHostID(e.Host); err == nil {
			home = h
		}
		if here[home] {
			place[i] = home
		} else {
			away = append(away, i)
		}
	}
	if len(away) > 0 {
		d.sched.placeMu.Lock()
		ps, err := d.cfg.Placer.Place(hosts, len(away))
		d.sched.placeMu.Unlock()
		if err != nil {
			return err
		}
		for k, i := range away {
			place[i] = ps[k]
		}
	}
	// No new task may take a restored TID: raise the hosts' counters, and
	// remember the floor of host IDs not (yet) in the machine.
	for h, n := range floor {
		if here[h] {
			if err := d.callHost(ctx, h, mCkFloor, restoreArgs{Floor: n}, nil); err != nil {
				return err
			}
		} else {
			d.reg.raiseFloor(h, n)
		}
	}
	// Stage everywhere, then route, then start: a task that starts first
	// finds the others' messages held, not refused.
	files := map[task.HostID][]string{}
	wants := map[task.HostID][]ckWant{}
	var order []task.HostID
	for i, e := range m.Entries {
		if files[place[i]] == nil {
			order = append(order, place[i])
		}
		files[place[i]] = append(files[place[i]], e.File)
		wants[place[i]] = append(wants[place[i]], wantOf(e))
	}
	epoch := d.restartEpoch(tids, m.Epoch)
	var staged []task.HostID
	drop := func() {
		for _, h := range staged {
			_ = d.callHost(context.WithoutCancel(ctx), h, mCkDrop, restoreArgs{Job: js.id}, nil)
		}
	}
	groups := map[task.TID][]ckpt.Membership{}
	for _, h := range order {
		var rep ckStep
		if err := d.callHost(ctx, h, mCkLoad, restoreArgs{Job: js.id, Dir: setDir, Files: files[h], Want: wants[h], Epoch: epoch}, &rep); err != nil {
			staged = append(staged, h) // it may have staged them after the call timed out
			drop()
			return fmt.Errorf("on %v: %w", h, err)
		}
		staged = append(staged, h)
		for t, ms := range rep.Groups {
			groups[t] = ms
		}
	}
	for t, ms := range groups {
		for _, g := range ms {
			if err := d.groups.rejoin(g.Group, t, g.Inst); err != nil {
				drop()
				return err
			}
		}
	}
	entries := make([]routing.Entry, len(tids))
	for i, tid := range tids {
		entries[i] = routing.Entry{TID: tid, Route: routing.Route{Host: place[i], Epoch: epoch}}
	}
	if d.onDemand() {
		// On demand, each restored route goes to the task's origin and
		// to every host the job is restored on: each knows its job's
		// routes before its restored tasks start, as with the
		// broadcast, at a cost of the job's size.
		to := slices.Clone(order)
		for _, tid := range tids {
			to = append(to, tid.Host())
		}
		d.tellRoute(entries, to)
	} else {
		d.applyRoutes(entries)
		d.broadcast(&event{Kind: evRoute, Routes: entries}, 0)
	}
	// Recorded before they start: the master knows which job they speak
	// for (outputClaim), and counts them against the quotas again.
	d.owners.restoreJobTasks(js.id, tids)
	for _, h := range order {
		settle := d.reg.expect(h, js.id) // their output may come before the answer is read
		if err := d.callHost(ctx, h, mCkGo, restoreArgs{Job: js.id}, nil); err != nil {
			d.log.Error("restore: start restored tasks", "peer", h, "error", err)
		}
		d.reg.jobsOn(h, []uint64{js.id}, false) // after the answer, as a spawn's
		settle()
	}
	js.hadTasks(tids...)
	return nil
}

// restartEpoch is a route epoch above any the tasks had: a new epoch of
// the move machine's clock, which is above every epoch handed out before,
// also those of routes the master has forgotten (exited tasks) and that
// other daemons still hold, and above floor, the clock recorded in the
// checkpoint set's manifest (a master that has not seen the epochs of the
// one that took the set: recovered, or of another machine).
func (d *Daemon) restartEpoch(tids []task.TID, floor uint64) uint64 {
	return d.mv.nextEpoch(d.rt.maxEpoch(tids, floor))
}

// findSet resolves dir to a verified checkpoint set: dir itself if it is
// one, else the newest complete one in it.
func (d *Daemon) findSet(dir string) (string, *jobset.Manifest, []error, error) {
	if _, err := os.Stat(filepath.Join(dir, jobset.ManifestName)); err == nil {
		m, err := d.readManifest(dir)
		if err == nil {
			err = jobset.Verify(dir, m)
		}
		return dir, m, nil, err
	}
	setDir, m, skipped, err := d.latestSet(dir)
	return setDir, m, skipped, err
}

// Rolling a job back when a host is lost.

// jobLostHost returns a host that has tasks of job but is no longer in the
// virtual machine (deleted, its jobs' coordinators perhaps not told yet),
// or 0 (master).
func (d *Daemon) jobLostHost(job uint64) task.HostID {
	on := d.reg.hostsOf(job)
	if len(on) == 0 {
		return 0
	}
	n := d.nw
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range on {
		if h != d.cfg.HostID && n.hosts[h] == nil {
			return h
		}
	}
	return 0
}

// rollBackJobsOf tells the coordinator of every job that had tasks on the
// lost host h (master): a checkpointed job rolls back, its surviving tasks
// killed without notices and all of them started again from its newest
// checkpoint on the hosts left; a job without one is lost. It returns the
// channels closed when each rollback started is over.
func (d *Daemon) rollBackJobsOf(h task.HostID) []chan struct{} {
	d.whyMu.Lock()
	stopping := d.why != nil
	d.whyMu.Unlock()
	if stopping || d.ctx.Err() != nil {
		return nil // the machine is halting: its hosts leave with their jobs
	}
	jss := d.reg.jobsOf(h)
	// The host's record goes once every coordinator is told (below): until
	// then jobLostHost names it, so that no checkpoint round starts or
	// commits without the tasks lost there.
	defer d.reg.forgetHost(h)
	hosts := d.hostIDs()
	var rolling []chan struct{}
	for _, js := range jss {
		now := time.Now()
		js.mu.Lock()
		acts, err := js.mc.Step(jobck.Event{Kind: jobck.EvHostLost, Now: now, Host: h, Hosts: hosts})
		for _, a := range acts {
			if a.Kind == jobck.ActUnrecoverable && a.End && js.lost == nil {
				// Before the lost tasks' exits are told (the root may
				// end on one): the job's end is its loss.
				js.lost = fmt.Errorf("lost host %v with no complete checkpoint to roll back to: %w", h, ErrJobLost)
				js.ending = make(chan struct{})
			}
		}
		if st := js.mc.State(); st == jobck.Killing || st == jobck.Restoring {
			if js.rolling == nil {
				js.rolling = make(chan struct{})
			}
			rolling = append(rolling, js.rolling)
			if js.work == nil || js.work.round != js.mc.Round() {
				js.work = &roundWork{round: js.mc.Round(), start: now, lostHost: h}
			}
		}
		counted := err == nil && !js.over()
		if counted {
			js.drivers.Add(1)
		}
		js.mu.Unlock()
		if err != nil {
			d.log.Error("job rollback", "job", js.id, "error", err)
			continue
		}
		d.goFunc(func() {
			if counted {
				defer js.drivers.Done()
			}
			d.driveJob(js, acts)
		})
	}
	return rolling
}

// restoreRound starts the job again from its newest complete checkpoint
// on the hosts there are now (master).
func (d *Daemon) restoreRound(js *jobState, a jobck.Action) error {
	jobDir, err := jobset.JobDir(d.cfg.SharedDir, js.name)
	if err != nil {
		return err
	}
	setDir, m, skipped, err := d.latestSet(jobDir)
	for _, e := range skipped {
		d.log.Warn("job rollback: checkpoint skipped", "job", js.id, "error", e)
	}
	if err != nil {
		return fmt.Errorf("no checkpoint to go back to: %w", err)
	}
	d.noteSetSeq(js.name, js.seq())
	d.checkSetSeq(js.name, m.Seq, setDir)
	d.fault("ckpt:restore")
	ctx, cancel := context.WithTimeout(d.ctx, 4*d.cfg.MoveTimeout)
	defer cancel()
	if err := d.restoreSet(ctx, js, setDir, m); err != nil {
		return fmt.Errorf("restore %s: %w", setDir, err)
	}
	if w := js.workFor(a.Round); w != nil {
		w.restoredTasks, w.restoredSeq, w.setDir = len(m.Entries), m.Seq, setDir
	}
	return nil
}

// rolledBack reports the end of a rollback round: to the log, and to the
// client that runs the job, which says so to its user.
func (d *Daemon) rolledBack(js *jobState, a jobck.Action) {
	w := js.workFor(a.Round)
	js.mu.Lock()
	if w != nil && js.work == w {
		js.work = nil
	} else if w == nil && js.work != nil {
		// Another rollback has begun already: it carries the cause.
		w = &roundWork{lostHost: js.work.lostHost, start: js.work.start}
	}
	js.mu.Unlock()
	var host task.HostID
	seq, tasks := a.Round.Seq, 0
	var secs float64
	if w != nil {
		host, tasks, secs = w.lostHost, w.restoredTasks, time.Since(w.start).Seconds()
		if w.restoredSeq != 0 {
			seq = w.restoredSeq
		}
	}
	note := JobNote{Job: js.id, Kind: NoteRolledBack, Seq: seq, Host: host.String(), Tasks: tasks}
	if a.Err != nil {
		js.mu.Lock()
		js.lost = fmt.Errorf("rollback to checkpoint %d failed: %w: %w", seq, a.Err, ErrJobLost)
		js.mu.Unlock()
		note.Kind, note.Err = NoteLost, a.Err.Error()
		d.log.Error("job rollback failed; the job is lost", "job", js.id, "seq", seq, "error", a.Err)
		d.met.RolledBack(js.id, time.Duration(secs*float64(time.Second)), a.Err)
	} else {
		d.reg.rollbacks.Add(1)
		d.met.RolledBack(js.id, time.Duration(secs*float64(time.Second)), nil)
		d.log.Warn("job rolled back to its checkpoint after losing a host", "job", js.id, "lost_host", host,
			"seq", seq, "tasks", tasks, "seconds", secs)
	}
	d.jobNote(note)
}

// killJob ends this host's tasks of a job that is rolling back, without
// notices, drops messages for them, and makes sure every frame sent
// before reaches its peer first (a host).
func (d *Daemon) killJob(ctx context.Context, a ckStep) error {
	hs := d.ht.jobTasks(a.Job)
	for _, h := range hs {
		h.quiet.Store(true) // from now on it does not suspend for a move
	}
	// Copies caught in a move go too: a suspended one would otherwise be
	// resumed, or an arrival restored, beside the job's restored tasks.
	caught := d.dropJobArrivals(a.Job)
	d.releasePauses(a.Job, nil)
	for _, h := range hs {
		_ = d.Kill(h.tid)
	}
	t := time.NewTimer(max(a.Timeout, time.Second))
	defer t.Stop()
	// Wait until each has ended and reported its exit to the master: the
	// report travels before this call's answer, so the master forgets the
	// old incarnations before it restores the new ones. One that has not
	// ended in time fails the call: the master asks again rather than
	// restore the task beside it.
	var late []task.TID
	for _, h := range hs {
		select {
		case <-h.whenEnded():
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		late = append(late, h.tid)
	}
	// Nothing the old incarnations sent or were sent may reach the new
	// ones: drop it, held or unacknowledged, with their numbering.
	for _, h := range hs {
		d.rt.drop(h.tid)
	}
	d.rt.drop(caught...)
	for _, id := range d.peerHosts() {
		_ = d.callHost(ctx, id, mSendCheck, struct{}{}, nil)
	}
	if len(late) > 0 {
		return fmt.Errorf("%v of job %d not ended yet", late, a.Job)
	}
	return nil
}

// killEverywhere asks every host to end the job's tasks for a rollback.
// A host that does not answer but is still a member — cut off for a
// while, suspected, registering again — is asked again every heartbeat
// until it answers or is deleted (then its answer no longer matters),
// for at most the longest time the master takes to delete a silent host:
// restoring the job while such a host may still run its tasks would run
// them twice.
func (d *Daemon) killEverywhere(hosts []task.HostID, step ckStep) []error {
	ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
	_, errs := d.eachHost(ctx, hosts, mCkKill, step)
	cancel()
	deadline := time.Now().Add(d.Detection().MaxDead)
	for {
		var again []int
		for i, h := range hosts {
			if errs[i] != nil && d.hostKnown(h) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || time.Now().After(deadline) || d.ctx.Err() != nil {
			return errs
		}
		select {
		case <-time.After(d.cfg.Heartbeat):
		case <-d.ctx.Done():
			return errs
		}
		retry := make([]task.HostID, len(again))
		for k, i := range again {
			retry[k] = hosts[i]
		}
		ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout)
		_, rerrs := d.eachHost(ctx, retry, mCkKill, step)
		cancel()
		for k, i := range again {
			errs[i] = rerrs[k]
		}
	}
}

// peerHosts lists the other hosts this daemon knows (none standalone).
func (d *Daemon) peerHosts() []task.HostID {
	if d.nw == nil {
		return nil // a standalone daemon
	}
	d.nw.mu.Lock()
	defer d.nw.mu.Unlock()
	var ids []task.HostID
	for id := range d.nw.hosts {
		if id != d.cfg.HostID {
			ids = append(ids, id)
		}
	}
	return ids
}

// Rollbacks is how many job rollbacks the master has made.
func (d *Daemon) Rollbacks() int64 { return d.reg.rollbacks.Load() }

// JobNote tells the client that runs a job what befell it: a rollback,
// and to which checkpoint, or its loss.
type JobNote struct {
	Job  uint64 `json:"job" msgpack:"j"`
	Kind string `json:"kind" msgpack:"k"` // NoteRolledBack or NoteLost
	// Seq is the checkpoint the job went back to (or tried to).
	Seq uint64 `json:"seq" msgpack:"s"`
	// Host is the lost host that made the job roll back.
	Host  string `json:"host,omitempty" msgpack:"h,omitempty"`
	Tasks int    `json:"tasks,omitempty" msgpack:"t,omitempty"`
	Err   string `json:"error,omitempty" msgpack:"e,omitempty"`
}

// Kinds of JobNote. NoteStarted tells the client the number of the job
// it started (Client keeps it to follow the job when its connection
// drops; it does not pass it on).
const (
	NoteRolledBack = "rolled-back"
	NoteLost       = "lost"
	NoteStarted    = "started"
)

func (n JobNote) String() string {
	switch n.Kind {
	case NoteRolledBack:
		return fmt.Sprintf("job %d lost host %s and rolled back to checkpoint %d (%d tasks)", n.Job, n.Host, n.Seq, n.Tasks)
	case NoteLost:
		if n.Seq == 0 {
			return fmt.Sprintf("job %d lost host %s and ends: %s", n.Job, n.Host, n.Err)
		}
		return fmt.Sprintf("job %d lost host %s and could not roll back to checkpoint %d: %s", n.Job, n.Host, n.Seq, n.Err)
	}
	return fmt.Sprintf("job %d: %s", n.Job, n.Kind)
}

// jobNote sends a note to the client that runs the job, if one does, or
// to the embedded run's listener.
func (d *Daemon) jobNote(n JobNote) {
	if fn := d.reg.notes(n.Job); fn != nil {
		fn(n)
	}
	w := d.reg.output(n.Job)
	co, ok := w.(*clientOutput)
	if !ok {
		return
	}
	noteTo(co.p, n)
}

// noteTo sends a job note to a client.
func noteTo(p *peer, n JobNote) {
	b, err := encodeMsg(&event{Kind: evJobNote, Job: n.Job, Note: &n})
	if err != nil {
		p.d.log.Error("encode job note", "error", err)
		return
	}
	p.frame(routing.KindEvent, b)
}
