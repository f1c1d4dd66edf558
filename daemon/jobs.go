package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dpvm/dpvm/ckpt"
	"github.com/dpvm/dpvm/ckpt/jobset"
	"github.com/dpvm/dpvm/routing"
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

	ck   sync.Mutex // one checkpoint or restore of the job at a time
	seq  uint64     // the newest checkpoint's sequence number
	done chan struct{}

	ended sync.Once

	rmu     sync.Mutex
	rolling chan struct{} // while the job rolls back: closed when it is over
	gen     int           // rollbacks so far
	// broken is set when the job loses tasks with a host, until it has
	// rolled back; losses counts such events. No checkpoint may be taken
	// of a broken job, nor one that spans a loss.
	broken bool
	losses int
}

// damage returns whether the job is broken and how many losses it has had.
func (js *jobState) damage() (bool, int) {
	js.rmu.Lock()
	defer js.rmu.Unlock()
	return js.broken, js.losses
}

// rollingBack returns a channel closed when the job's rollback is over, or
// nil when none is under way, and the number of rollbacks so far.
func (js *jobState) rollingBack() (chan struct{}, int) {
	js.rmu.Lock()
	defer js.rmu.Unlock()
	return js.rolling, js.gen
}

// waitJob waits for the job's root task to exit, following it through
// rollbacks (its old incarnation is killed and a new one restored).
func (d *Daemon) waitJob(ctx context.Context, js *jobState) (TaskInfo, error) {
	for {
		_, gen := js.rollingBack()
		info, err := d.Wait(ctx, js.root)
		ch, now := js.rollingBack()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return info, fmt.Errorf("wait for job %d: %w", js.id, ctx.Err())
			}
			continue
		}
		if now != gen {
			continue
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

// newJob registers a job (master).
func (d *Daemon) newJob(name, typ string, opts JobOptions) *jobState {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextJob++
	js := &jobState{id: d.nextJob, name: name, typ: typ, opts: opts, done: make(chan struct{})}
	if js.name == "" {
		js.name = d.freshJobName(js.id)
	}
	if js.opts.Keep <= 0 {
		js.opts.Keep = 2
	}
	d.jobReg[js.id] = js
	return js
}

// StartJob starts root as the root task of a new job on this daemon (the
// master of a virtual machine), with the job's checkpoints as opts asks.
// The job ends when its root task does.
func (d *Daemon) StartJob(ctx context.Context, root task.Task, opts JobOptions) (uint64, task.TID, error) {
	typ, state, err := task.EncodeState(root)
	if err != nil {
		return 0, 0, err
	}
	js := d.newJob("", typ, opts)
	tids, err := d.startLocal(ctx, 0, js.id, task.SpawnRequest{Type: typ, State: state, Count: 1})
	if err != nil {
		d.endJob(js)
		return 0, 0, err
	}
	d.jobRunning(js, tids[0])
	return js.id, js.root, nil
}

// spawnRoots places and starts req.Count tasks, each the root of a job of
// its own (master).
func (d *Daemon) spawnRoots(ctx context.Context, req task.SpawnRequest, opts JobOptions) ([]task.TID, error) {
	if req.Count < 1 {
		return nil, fmt.Errorf("spawn %d tasks: count must be at least 1", req.Count)
	}
	var tids []task.TID
	for range req.Count {
		js := d.newJob("", req.Type, opts)
		r := req
		r.Count = 1
		got, err := d.spawnAnywhere(ctx, 0, js.id, r)
		if err != nil || len(got) == 0 {
			d.endJob(js)
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

// endJob forgets a job whose root task has ended (master).
// A checkpoint under way is waited for; none starts after.
func (d *Daemon) endJob(js *jobState) {
	js.ended.Do(func() {
		close(js.done)
		// Taking ck waits for a checkpoint under way; one that starts
		// after sees done closed. The order ck then mu is checkpointJob's.
		js.ck.Lock()
		d.mu.Lock()
		delete(d.jobReg, js.id)
		delete(d.jobs, js.id)
		d.mu.Unlock()
		js.ck.Unlock()
	})
}

// jobRunning records that job js runs with root as its root task: its
// periodic checkpoints start, and it ends when the root does.
func (d *Daemon) jobRunning(js *jobState, root task.TID) {
	js.root = root
	if js.opts.CheckpointEvery > 0 {
		d.goFunc(func() { d.checkpointLoop(js) })
	}
	d.goFunc(func() {
		_, _ = d.waitJob(d.ctx, js)
		d.endJob(js)
	})
}

// job finds a registered job by its number (master).
func (d *Daemon) job(id uint64) (*jobState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	js := d.jobReg[id]
	if js == nil {
		return nil, fmt.Errorf("job %d: %w", id, ErrNoJob)
	}
	return js, nil
}

// checkpointLoop takes the job's periodic checkpoints until it ends. A
// failed checkpoint is logged; the job keeps its previous one.
func (d *Daemon) checkpointLoop(js *jobState) {
	d.every(js.opts.CheckpointEvery, js.done, func() bool {
		ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.MoveTimeout+js.opts.CheckpointEvery)
		// A task blocked in a receive that is not a safe point holds the
		// others at theirs until the attempt gives up: give up soon, and
		// try again at the next period.
		hold := min(max(js.opts.CheckpointEvery/2, 50*time.Millisecond), d.cfg.MoveTimeout)
		r, err := d.checkpointJob(ctx, js, "", hold)
		cancel()
		if err != nil {
			if errors.Is(err, ErrNoJob) {
				return false
			}
			d.log.Warn("job checkpoint failed; the previous one stands", "job", js.id, "error", err)
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
	return d.checkpointJob(ctx, js, root, d.cfg.MoveTimeout)
}

// checkpointJob checkpoints js under root, giving its tasks hold to reach
// their safe points.
func (d *Daemon) checkpointJob(ctx context.Context, js *jobState, root string, hold time.Duration) (res JobCheckpoint, err error) {
	res = JobCheckpoint{Job: js.id, Name: js.name}
	defer func(start time.Time) { d.jobCheckpointed(js.id, start, err) }(time.Now())
	defer func() {
		if err != nil {
			err = fmt.Errorf("checkpoint job %d: %w", js.id, err)
		}
	}()
	if root == "" {
		root = d.cfg.SharedDir
	}
	if root == "" {
		return res, ErrNoSharedDir
	}
	js.ck.Lock()
	defer js.ck.Unlock()
	select {
	case <-js.done:
		return res, ErrNoJob
	default:
	}
	broken, losses := js.damage()
	if broken {
		return res, fmt.Errorf("it lost tasks with a host and has not rolled back yet")
	}
	start := time.Now()
	hosts := d.hostIDs()
	step := ckStep{Job: js.id, Timeout: hold}
	resume := func() {
		_, _ = d.allHosts(context.WithoutCancel(ctx), hosts, mCkResume, step)
	}
	// 1. Pause every task of the job at a safe point.
	if _, err := d.allHosts(ctx, hosts, mCkPause, step); err != nil {
		resume()
		return res, err
	}
	paused := time.Now()
	// 2. Wait until every message between them has been delivered. Tasks
	// spawned just before the pause, on a host already asked, are paused
	// in turn.
	var tids []task.TID
	deadline := time.Now().Add(d.cfg.MoveTimeout)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
		reps, err := d.allHosts(ctx, hosts, mCkQuiet, step)
		if err != nil {
			resume()
			return res, err
		}
		pending, running := 0, 0
		tids = tids[:0]
		for i, r := range reps {
			pending += r.Pending
			running += r.Running
			tids = append(tids, r.TIDs...)
			if r.Running > 0 {
				if _, err := d.allHosts(ctx, hosts[i:i+1], mCkPause, step); err != nil {
					resume()
					return res, err
				}
			}
		}
		if pending == 0 && running == 0 {
			break
		}
		if time.Now().After(deadline) {
			resume()
			return res, fmt.Errorf("%d messages of the job still unacknowledged after %v", pending, d.cfg.MoveTimeout)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			resume()
			return res, ctx.Err()
		}
	}
	if len(tids) == 0 {
		resume()
		return res, ErrNoJob
	}
	// 3. Write the tasks' checkpoints, then the manifest.
	jobDir, err := jobset.JobDir(root, js.name)
	if err != nil {
		resume()
		return res, err
	}
	setDir, err := jobset.NewSet(jobDir, js.seq+1)
	if err != nil {
		resume()
		return res, err
	}
	fail := func(err error) (JobCheckpoint, error) {
		resume()
		_ = os.RemoveAll(setDir) // incomplete: the previous set stands
		return res, err
	}
	step.Dir = setDir
	step.Groups = map[task.TID][]ckpt.Membership{}
	for _, t := range tids {
		if ms := d.groups.memberships(t); len(ms) > 0 {
			step.Groups[t] = ms
		}
	}
	reps, err := d.allHosts(ctx, hosts, mCkWrite, step)
	if err != nil {
		return fail(err)
	}
	m := &jobset.Manifest{Job: js.name, Seq: js.seq + 1, Created: time.Now().UTC(), Root: js.root.String(), Program: js.typ}
	for i, r := range reps {
		for _, e := range r.Files {
			e.Host = hosts[i].String()
			m.Entries = append(m.Entries, e)
			res.Bytes += e.Bytes
		}
	}
	if _, now := js.damage(); now != losses {
		return fail(errors.New("it lost tasks with a host meanwhile"))
	}
	if err := jobset.WriteManifest(setDir, m, d.manifestKey()); err != nil {
		return fail(err)
	}
	// 4. Go on.
	resume()
	res.PausedMS = float64(time.Since(paused).Microseconds()) / 1e3
	js.seq++
	res.Seq, res.Dir, res.Tasks = js.seq, setDir, len(m.Entries)
	res.Seconds = time.Since(start).Seconds()
	if _, err := jobset.Prune(jobDir, js.opts.Keep, d.manifestKey()); err != nil {
		d.log.Warn("pruning old job checkpoints", "job", js.id, "error", err)
	}
	return res, nil
}

// manifestKey authenticates job checkpoint manifests.
func (d *Daemon) manifestKey() []byte {
	if d.cfg.Key == nil {
		return nil
	}
	return d.cfg.Key.Secret("job-manifest")
}

// hostIDs lists the hosts of the virtual machine (master).
func (d *Daemon) hostIDs() []task.HostID {
	var ids []task.HostID
	for _, h := range d.Hosts() {
		ids = append(ids, h.ID)
	}
	return ids
}

// allHosts calls method on every host at once and returns their replies
// in the hosts' order; the first error wins.
func (d *Daemon) allHosts(ctx context.Context, hosts []task.HostID, method string, args ckStep) ([]ckReply, error) {
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
	return reps, errors.Join(errs...)
}

// Restarting a job from a checkpoint.

// restoreArgs asks a host to stage (load) or start (go) restored tasks.
type restoreArgs struct {
	Job   uint64   `msgpack:"j"`
	Dir   string   `msgpack:"d"`
	Files []string `msgpack:"f"`
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

// handleRestore serves the restart steps on a host.
func (d *Daemon) handleRestore(method string, body []byte) (any, error) {
	var a restoreArgs
	if err := decodeMsg(body, &a); err != nil {
		return nil, err
	}
	switch method {
	case mCkFloor:
		d.mu.Lock()
		d.nextNum = max(d.nextNum, a.Floor)
		d.mu.Unlock()
		return nil, nil
	case mCkLoad:
		return d.loadStaged(a)
	case mCkGo:
		d.startStaged(a)
		return nil, nil
	case mCkDrop:
		d.dropStaged(a)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown method %q", method)
}

// loadStaged reads and verifies task checkpoints and readies this host to
// receive their tasks: messages for them are held from now on. It returns
// the tasks' group memberships.
func (d *Daemon) loadStaged(a restoreArgs) (ckStep, error) {
	var rep ckStep
	dir := ckpt.Dir{Path: a.Dir}
	var got []staged
	for _, name := range a.Files {
		f, err := dir.Open(name)
		if err != nil {
			return rep, fmt.Errorf("restore %s: %w", filepath.Join(a.Dir, name), err)
		}
		m, t, err := ckpt.Read(f, d.ckptKey())
		f.Close()
		if err != nil {
			return rep, fmt.Errorf("restore %s: %w", filepath.Join(a.Dir, name), err)
		}
		got = append(got, staged{meta: m, t: t})
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range got {
		tid := s.meta.TID
		if _, here := d.tasks[tid]; here || d.incoming[tid] != nil || d.moving[tid] != nil {
			return rep, fmt.Errorf("restore %v: a task of that id is here already", tid)
		}
	}
	rep.Groups = map[task.TID][]ckpt.Membership{}
	for _, s := range got {
		s.meta.Job, s.meta.Epoch = a.Job, a.Epoch
		d.incoming[s.meta.TID] = &arriving{typ: s.meta.Type, epoch: a.Epoch, received: make(chan transferred, 1)}
		d.staged[s.meta.TID] = s
		if len(s.meta.Groups) > 0 {
			rep.Groups[s.meta.TID] = s.meta.Groups
		}
	}
	return rep, nil
}

// startStaged puts the staged tasks of a restart into service.
func (d *Daemon) startStaged(a restoreArgs) {
	d.mu.Lock()
	var todo []staged
	var arrs []*arriving
	for tid, s := range d.staged {
		if s.meta.Job == a.Job {
			todo = append(todo, s)
			arrs = append(arrs, d.incoming[tid])
			delete(d.staged, tid)
		}
	}
	d.mu.Unlock()
	for i, s := range todo {
		if err := d.install(s.meta, s.t, arrs[i], nil); err != nil {
			d.log.Warn("restore: start a restored task", "tid", s.meta.TID, "error", err)
		}
	}
}

// dropStaged forgets the staged tasks of a failed restart.
func (d *Daemon) dropStaged(a restoreArgs) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for tid, s := range d.staged {
		if s.meta.Job == a.Job {
			delete(d.staged, tid)
			delete(d.incoming, tid)
		}
	}
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
	js := d.newJob(m.Job, m.Program, opts)
	js.seq = m.Seq
	if out != nil {
		d.mu.Lock()
		d.jobs[js.id] = out(js.id)
		d.mu.Unlock()
	}
	if err := d.restoreSet(ctx, js, setDir, m); err != nil {
		d.endJob(js)
		return nil, skipped, fmt.Errorf("restart from %s: %w", setDir, err)
	}
	d.log.Info("job restarted", "job", js.id, "name", js.name, "seq", m.Seq, "tasks", len(m.Entries), "root", root)
	d.jobRunning(js, root)
	return js, skipped, nil
}

// restoreSet starts the tasks of a checkpoint set as job js, on the hosts
// there are now (master).
func (d *Daemon) restoreSet(ctx context.Context, js *jobState, setDir string, m *jobset.Manifest) error {
	// Where each task goes.
	hosts := d.placeable()
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
		if here[tid.Host()] {
			place[i] = tid.Host()
		} else {
			away = append(away, i)
		}
	}
	if len(away) > 0 {
		d.placeMu.Lock()
		ps, err := d.cfg.Placer.Place(hosts, len(away))
		d.placeMu.Unlock()
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
			d.mu.Lock()
			d.tidFloor[h] = max(d.tidFloor[h], n)
			d.mu.Unlock()
		}
	}
	// Stage everywhere, then route, then start: a task that starts first
	// finds the others' messages held, not refused.
	files := map[task.HostID][]string{}
	var order []task.HostID
	for i, e := range m.Entries {
		if files[place[i]] == nil {
			order = append(order, place[i])
		}
		files[place[i]] = append(files[place[i]], e.File)
	}
	epoch := d.restartEpoch(tids)
	var staged []task.HostID
	drop := func() {
		for _, h := range staged {
			_ = d.callHost(context.WithoutCancel(ctx), h, mCkDrop, restoreArgs{Job: js.id}, nil)
		}
	}
	groups := map[task.TID][]ckpt.Membership{}
	for _, h := range order {
		var rep ckStep
		if err := d.callHost(ctx, h, mCkLoad, restoreArgs{Job: js.id, Dir: setDir, Files: files[h], Epoch: epoch}, &rep); err != nil {
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
	d.applyRoutes(entries)
	d.broadcast(&event{Kind: evRoute, Routes: entries}, 0)
	for _, h := range order {
		if err := d.callHost(ctx, h, mCkGo, restoreArgs{Job: js.id}, nil); err != nil {
			d.log.Error("restore: start restored tasks", "peer", h, "error", err)
		}
		d.jobsOn(h, []uint64{js.id}, false) // after the answer, as a spawn's
	}
	return nil
}

// restartEpoch is a route epoch above any the tasks had: a new epoch of
// the move machine's clock, which is above every epoch handed out before,
// also those of routes the master has forgotten (exited tasks) and that
// other daemons still hold.
func (d *Daemon) restartEpoch(tids []task.TID) uint64 {
	d.rmu.Lock()
	var e uint64
	for _, t := range tids {
		e = max(e, d.routes.Lookup(t).Epoch)
	}
	d.rmu.Unlock()
	d.migMu.Lock()
	defer d.migMu.Unlock()
	d.moves.Observe(e)
	return d.moves.NextEpoch()
}

// findSet resolves dir to a verified checkpoint set: dir itself if it is
// one, else the newest complete one in it.
func (d *Daemon) findSet(dir string) (string, *jobset.Manifest, []error, error) {
	if _, err := os.Stat(filepath.Join(dir, jobset.ManifestName)); err == nil {
		m, err := jobset.ReadManifest(dir, d.manifestKey())
		if err == nil {
			err = jobset.Verify(dir, m)
		}
		return dir, m, nil, err
	}
	setDir, m, skipped, err := jobset.Latest(dir, d.manifestKey())
	return setDir, m, skipped, err
}

// Rolling a job back when a host is lost.

// localJobs lists the jobs this daemon runs tasks of.
func (d *Daemon) localJobs() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[uint64]bool{}
	var out []uint64
	for _, h := range d.tasks {
		if h.job != 0 && !seen[h.job] {
			seen[h.job] = true
			out = append(out, h.job)
		}
	}
	return out
}

// jobsOn records that host h runs tasks of jobs (master): as its report
// says (replace), or as a spawn placed them.
func (d *Daemon) jobsOn(h task.HostID, jobs []uint64, replace bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := d.hostJobs[h]
	if set == nil || replace {
		set = map[uint64]bool{}
		d.hostJobs[h] = set
	}
	for _, j := range jobs {
		set[j] = true
	}
}

// rollBackJobsOf rolls back every checkpointed job that had tasks on the
// lost host h (master). Jobs without a checkpoint get PVM's behaviour: the
// lost tasks are reported exited to whoever asked.
func (d *Daemon) rollBackJobsOf(h task.HostID) {
	d.whyMu.Lock()
	stopping := d.why != nil
	d.whyMu.Unlock()
	if stopping || d.ctx.Err() != nil {
		return // the machine is halting: its hosts leave with their jobs
	}
	d.mu.Lock()
	var jss []*jobState
	for j := range d.hostJobs[h] {
		if js := d.jobReg[j]; js != nil {
			jss = append(jss, js)
		}
	}
	delete(d.hostJobs, h)
	d.mu.Unlock()
	for _, js := range jss {
		js.rmu.Lock()
		js.broken = true
		js.losses++
		js.rmu.Unlock()
		d.goFunc(func() { d.rollBack(js, h) })
	}
}

// rollBack restarts job js from its newest complete checkpoint after it
// lost tasks with host h: its surviving tasks are killed without notices,
// and all of them start again from the checkpoint on the hosts left.
func (d *Daemon) rollBack(js *jobState, lost task.HostID) {
	js.ck.Lock()
	defer js.ck.Unlock()
	if js.seq == 0 {
		d.log.Warn("job lost tasks with a host and has no checkpoint to roll back to", "job", js.id, "lost_host", lost)
		return
	}
	root := d.cfg.SharedDir
	jobDir, err := jobset.JobDir(root, js.name)
	if err != nil {
		d.log.Error("job rollback", "job", js.id, "error", err)
		return
	}
	setDir, m, skipped, err := jobset.Latest(jobDir, d.manifestKey())
	for _, e := range skipped {
		d.log.Warn("job rollback: checkpoint skipped", "job", js.id, "error", e)
	}
	if err != nil {
		d.log.Error("job rollback: no checkpoint to go back to", "job", js.id, "error", err)
		return
	}
	ch := make(chan struct{})
	js.rmu.Lock()
	js.rolling = ch
	js.gen++
	js.rmu.Unlock()
	defer func() {
		js.rmu.Lock()
		js.rolling = nil
		js.rmu.Unlock()
		close(ch)
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(d.ctx, 4*d.cfg.MoveTimeout)
	defer cancel()
	if _, err := d.allHosts(ctx, d.hostIDs(), mCkKill, ckStep{Job: js.id, Timeout: d.cfg.MoveTimeout}); err != nil {
		d.log.Error("job rollback: stopping the surviving tasks", "job", js.id, "error", err)
	}
	if err := d.restoreSet(ctx, js, setDir, m); err != nil {
		d.log.Error("job rollback failed; the job is lost", "job", js.id, "set", setDir, "error", err)
		d.met.RolledBack(js.id, time.Since(start), err)
		return
	}
	js.seq = m.Seq
	js.rmu.Lock()
	js.broken = false
	js.rmu.Unlock()
	d.rollbacks.Add(1)
	d.met.RolledBack(js.id, time.Since(start), nil)
	d.log.Warn("job rolled back to its checkpoint after losing a host", "job", js.id, "lost_host", lost,
		"seq", m.Seq, "tasks", len(m.Entries), "seconds", time.Since(start).Seconds())
}

// killJob ends this host's tasks of a job that is rolling back, without
// notices, drops messages for them, and makes sure every frame sent
// before reaches its peer first (a host).
func (d *Daemon) killJob(ctx context.Context, a ckStep) {
	hs := d.jobTasks(a.Job)
	for _, h := range hs {
		h.quiet.Store(true)
		if p := h.pause.Swap(nil); p != nil {
			p.release()
		}
		_ = d.Kill(h.tid)
	}
	t := time.NewTimer(max(a.Timeout, time.Second))
	defer t.Stop()
	// Wait until each has ended and reported its exit to the master: the
	// report travels before this call's answer, so the master forgets the
	// old incarnations before it restores the new ones.
	for _, h := range hs {
		select {
		case <-h.whenEnded():
		case <-t.C:
		case <-ctx.Done():
		}
	}
	d.rmu.Lock()
	for _, h := range hs {
		d.outbox.DropReceiver(h.tid)
	}
	d.rmu.Unlock()
	for _, id := range d.peerHosts() {
		_ = d.callHost(ctx, id, mSendCheck, struct{}{}, nil)
	}
}

// peerHosts lists the other hosts this daemon knows.
func (d *Daemon) peerHosts() []task.HostID {
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
func (d *Daemon) Rollbacks() int64 { return d.rollbacks.Load() }
