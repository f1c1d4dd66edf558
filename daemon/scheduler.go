package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/sched"
	"github.com/dpvm/dpvm/task"
)

// SchedConfig turns on the master's Dynamic-SED global scheduler.
type SchedConfig struct {
	// Period is δT, how often the master checks every process (0: the
	// scheduler is off). The paper's is 3 minutes; tests use 100 ms.
	Period time.Duration
	// Via is how the scheduler's migrations move checkpoints (default
	// direct).
	Via Via
	// Classes and Params configure the policy (defaults: the paper's).
	Classes []sched.Class
	Params  *sched.Params
}

// SchedStatus is what the master's scheduler saw and decided at its last
// check (`dpvm sched status`).
type SchedStatus struct {
	Enabled bool          `json:"enabled" msgpack:"on"`
	Period  time.Duration `json:"period_ns" msgpack:"p"`
	Checks  int           `json:"checks" msgpack:"n"`
	// Listings counts the checks that listed processes (those of the
	// hosts where something started, ended or moved, and of a tenth of
	// the others: ListedHosts); the others found nothing changed and
	// every process of the last listing idle (not counting, not a
	// candidate), and kept that listing.
	Listings     int             `json:"listings" msgpack:"ls"`
	At           time.Time       `json:"at" msgpack:"t"`
	Classes      []sched.Class   `json:"classes" msgpack:"c"`
	Availability []int           `json:"availability" msgpack:"a"`
	Hosts        []HostStatus    `json:"hosts" msgpack:"h"`
	Processes    []ProcessStatus `json:"processes" msgpack:"ps"`
	Migrations   int             `json:"migrations" msgpack:"m"` // made since the start
	Failed       int             `json:"failed" msgpack:"f"`
	// ListSeconds is how long the last listing of every host's processes
	// took, and StepSeconds the policy's check on it (the scheduler's
	// sched.Incremental brought up to date and checked): the cost of a
	// check that lists, on the master.
	ListSeconds float64 `json:"list_seconds" msgpack:"lt"`
	StepSeconds float64 `json:"step_seconds" msgpack:"st"`
	// ListedHosts is how many hosts the last listing called: those whose
	// processes changed, and a tenth of the others, whose listings were
	// the oldest.
	ListedHosts int `json:"listed_hosts" msgpack:"lh"`
}

// HostStatus is one host as the scheduler saw it at its last check.
type HostStatus struct {
	Name  string  `json:"name" msgpack:"n"`
	Alpha float64 `json:"alpha" msgpack:"a"`
	Load  float64 `json:"load" msgpack:"l"`
	Delay float64 `json:"delay" msgpack:"d"` // α(1 + load)
	// MemFreeMiB is the host's free memory; absent (0) when unknown.
	MemFreeMiB float64 `json:"mem_free_mib,omitempty" msgpack:"f,omitempty"`
	Users      int     `json:"users" msgpack:"u"`
	MaxUsers   int     `json:"max_users" msgpack:"mu"`
}

func hostStatus(hs []sched.Host) []HostStatus {
	out := make([]HostStatus, len(hs))
	for i, h := range hs {
		out[i] = HostStatus{Name: h.Name, Alpha: h.Alpha, Load: h.Load, Delay: h.Delay(), Users: h.Users, MaxUsers: h.MaxUsers}
		if !math.IsInf(h.MemFree, 0) {
			out[i].MemFreeMiB = h.MemFree
		}
	}
	return out
}

// ProcessStatus is one process at the scheduler's last check.
type ProcessStatus struct {
	TID       task.TID `json:"tid" msgpack:"t"`
	Host      string   `json:"host" msgpack:"h"`
	Class     int      `json:"class" msgpack:"c"` // the delay class it was started in (0: slower than every class)
	MemMiB    float64  `json:"mem_mib" msgpack:"m"`
	Counter   int      `json:"counter" msgpack:"n"`
	Limit     int      `json:"limit" msgpack:"l"`
	Candidate string   `json:"candidate,omitempty" msgpack:"r,omitempty"` // why it is a migration candidate
	Decision  string   `json:"decision,omitempty" msgpack:"d,omitempty"`
}

// schedState is the master scheduler's memory between checks.
type schedState struct {
	// mu guards the state below but for the atomics and the fields the
	// scheduler's loop owns.
	mu sync.Mutex
	// placeMu serialises the Placer: one spawn is placed at a time.
	placeMu  sync.Mutex
	counters map[task.TID]int
	backoff  map[task.TID]time.Time
	status   SchedStatus
	// class is the delay class each task was started in (under mu):
	// its expected delay, which condition 1 of Definition 1 holds it to
	// wherever it has moved since.
	class map[task.TID]int
	// dirty is set whenever the processes may have changed since the last
	// full check (a task started, ended or moved anywhere): the next check
	// lists them again.
	dirty atomic.Bool
	// procs are the processes of the last listing (nil before the first),
	// tids their TIDs by name.
	procs []sched.Process
	tids  map[string]task.TID
	// inc is the cluster as the policy sees it, kept from one check to
	// the next: each check gives it the hosts' figures and the listed
	// processes that changed, and its Check judges only what changed
	// (sched.Incremental). It holds the selection counters. Owned by the
	// scheduler's loop; nil before the first check that lists.
	inc *sched.Incremental
	// all is set when the next check that lists must list every host;
	// otherwise it lists the hosts in dirtyHosts (under mu), whose
	// processes changed, and refreshes the oldest of the others (see
	// listProcesses). listings are the hosts' last listings and rounds
	// counts the checks that listed (both owned by the scheduler's loop).
	all        atomic.Bool
	placing    atomic.Int32 // spawns being placed (see placing)
	dirtyHosts map[task.HostID]bool
	listings   map[task.HostID]hostListing
	rounds     int
}

// hostListing is one host's processes at the scheduler's last listing of
// that host, and the listing round it was taken in.
type hostListing struct {
	tasks []TaskInfo
	round int
}

// listEvery is how many listing checks a host's listing is used for at
// most: each check refreshes the oldest 1/listEvery of the hosts besides
// those whose processes changed, so that the tasks' memory figures are
// never older than listEvery checks and a check calls a tenth of the
// hosts, not all of them.
const listEvery = 10

// listParallel is how many hosts a check lists at once.
const listParallel = 16

// placing marks a spawn being placed (master) until the function it
// returns is called: the scheduler's checks wait for it, since until every
// host has started its share of the spawn the hosts placed last look idle
// and those placed first busy, and moving tasks between them would only
// undo the placement.
func (d *Daemon) placing() func() {
	d.sched.placing.Add(1)
	return func() { d.sched.placing.Add(-1) }
}

// schedDirty makes the next check list every host's processes (master).
func (d *Daemon) schedDirty() {
	d.sched.all.Store(true)
	d.sched.dirty.Store(true)
}

// schedDirtyHost makes the next check list host h's processes (master):
// a task started or ended there.
func (d *Daemon) schedDirtyHost(h task.HostID) {
	d.sched.mu.Lock()
	if d.sched.dirtyHosts == nil {
		d.sched.dirtyHosts = map[task.HostID]bool{}
	}
	d.sched.dirtyHosts[h] = true
	d.sched.mu.Unlock()
	d.sched.dirty.Store(true)
}

// listProcesses lists the processes of every host for a check (master):
// the master's own, those of every host whose processes changed since its
// last listing (all of them when schedDirty asked for it, or the first
// time), and those of the hosts listed longest ago, one in listEvery of
// the hosts; the other hosts' last listings stand. It returns the tasks,
// sorted by TID, and how many hosts it called.
func (d *Daemon) listProcesses(ctx context.Context, hosts []HostInfo) ([]TaskInfo, int, error) {
	st := d.sched
	all := st.all.Swap(false)
	d.sched.mu.Lock()
	dirty := st.dirtyHosts
	st.dirtyHosts = nil
	d.sched.mu.Unlock()
	if st.listings == nil {
		st.listings, all = map[task.HostID]hostListing{}, true
	}
	st.rounds++
	var todo, stale []task.HostID
	known := make(map[task.HostID]bool, len(hosts))
	for _, h := range hosts {
		if h.ID == d.cfg.HostID {
			continue
		}
		known[h.ID] = true
		if _, ok := st.listings[h.ID]; all || !ok || dirty[h.ID] {
			todo = append(todo, h.ID)
		} else {
			stale = append(stale, h.ID)
		}
	}
	for id := range st.listings {
		if !known[id] {
			delete(st.listings, id)
		}
	}
	// Refresh the oldest listings, a share of the hosts each check: in
	// turn, every host is listed at least once in listEvery checks.
	quota := min((len(known)+listEvery-1)/listEvery, len(stale))
	sort.SliceStable(stale, func(i, j int) bool { return st.listings[stale[i]].round < st.listings[stale[j]].round })
	todo = append(todo, stale[:quota]...)
	var (
		mu     sync.Mutex
		errs   []error
		failed []task.HostID
		wg     sync.WaitGroup
		sem    = make(chan struct{}, listParallel)
	)
	for _, id := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var rep psReply
			err := d.callHost(ctx, id, mPS, psArgs{}, &rep)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%v: %w", id, err))
				failed = append(failed, id)
				return
			}
			st.listings[id] = hostListing{tasks: rep.Tasks, round: st.rounds}
		})
	}
	wg.Wait()
	// A host that did not answer keeps its last listing, if any, and is
	// listed again at the next check.
	for _, id := range failed {
		d.schedDirtyHost(id)
	}
	out := d.Tasks(false)
	for _, l := range st.listings {
		out = append(out, l.tasks...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out, len(todo), errors.Join(errs...)
}

// tasksChanged is called when a task starts or arrives here: the master
// marks its scheduler's view stale, another daemon tells the master its
// new task count at once (coalesced), since until it does the master's
// checks may skip listing its processes.
func (d *Daemon) tasksChanged() {
	if d.cfg.Master {
		d.schedDirtyHost(d.cfg.HostID)
		return
	}
	select {
	case d.rep.kick <- struct{}{}:
	default:
	}
}

// reportOnKick sends a load report whenever tasksChanged asks (hosts).
func (d *Daemon) reportOnKick() {
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.rep.kick:
		}
		d.reportLoad()
	}
}

// startedInClass records the delay class tasks were started in (master).
func (d *Daemon) startedInClass(tids []task.TID, class int) {
	for _, t := range tids {
		d.schedDirtyHost(t.Host())
	}
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	for _, t := range tids {
		d.sched.class[t] = class
	}
}

// startedOn records the class of tasks placed on host h, in order: each
// expects the delay of h with the tasks placed before it (master).
func (d *Daemon) startedOn(h HostInfo, tids []task.TID) {
	d.schedDirtyHost(h.ID)
	snap := hostSnapshot([]HostInfo{h}, d.cfg.Sched)
	host := snap.Hosts[0]
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	for i, t := range tids {
		d.sched.class[t] = sched.ClassOf(snap.Classes, sched.DelayFactor(host.Alpha, host.Load+float64(i)))
	}
}

// classOf is the delay class task ti was started in. A task the master did
// not place (a task's spawn on its own host) is given, the first time the
// scheduler sees it, the class of its host's delay then, not counting
// itself.
func (d *Daemon) classOf(ti TaskInfo, snap *sched.Snapshot) int {
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	if c, ok := d.sched.class[ti.TID]; ok {
		return c
	}
	c := 0
	for _, h := range snap.Hosts {
		if h.Name == ti.Host {
			c = sched.ClassOf(snap.Classes, sched.DelayFactor(h.Alpha, max(h.Load-1, 0)))
		}
	}
	d.sched.class[ti.TID] = c
	return c
}

// forgetClass drops an ended task's class (master).
func (d *Daemon) forgetClass(tid task.TID) {
	d.sched.mu.Lock()
	delete(d.sched.class, tid)
	d.sched.mu.Unlock()
}

func (c SchedConfig) classes() []sched.Class {
	if len(c.Classes) > 0 {
		return c.Classes
	}
	return sched.DefaultClasses()
}

func (c SchedConfig) params() sched.Params {
	if c.Params != nil {
		return *c.Params
	}
	return sched.DefaultParams()
}

// sample reads this host's situation: the load source (with any injected
// overlay) plus the daemon's own tasks.
func (d *Daemon) sample(now time.Time) load.Sample {
	s, err := d.load.Sample(now)
	if err != nil {
		d.log.Warn("load sample", "error", err)
		s = load.Sample{Time: now}
	}
	d.ht.mu.Lock()
	s.Tasks = len(d.ht.tasks)
	d.ht.mu.Unlock()
	return s
}

// InjectLoad sets (or, with clear, removes) an overlay on this host's load
// figures: emulated interactive users, load or free memory, as `dpvm load
// inject` asks.
func (d *Daemon) InjectLoad(o load.Overlay, clear bool) error {
	now := time.Now()
	if clear {
		d.load.Clear(now)
	} else if err := d.load.Set(now, o); err != nil {
		return err
	}
	d.log.Info("load injected (emulation)", "overlay", o.String(), "clear", clear)
	// Take it into account now, here and at the master.
	d.refreshSample(now)
	d.reportLoad()
	return nil
}

// reports is a host's side of its load reports to the master.
type reports struct {
	// kick asks for a report now (see tasksChanged).
	kick chan struct{}
	// mu orders the reports and guards last, the last report sent, and
	// beats, the heartbeats since: a heartbeat sends a report only when
	// the figures changed or ReportEvery beats have passed. It is taken
	// before the router's and the hosting lock (a report reads the tasks).
	mu    sync.Mutex
	last  loadReport
	beats int
}

// loadReport is what a host's load report says, as compared between
// reports.
type loadReport struct {
	info HostInfo
	jobs []uint64 // sorted
	sent bool
}

// Thresholds of a change worth a load report between the periodic ones:
// an external load that moved by a quarter of a runnable process, or free
// memory that moved by 32 MiB. Every other figure (the task count, users,
// speed, the load source, the jobs) is reported on any change.
const (
	reportExternal = 0.25
	reportMemMiB   = 32
)

// reportDue says whether a heartbeat sends the report now, beats
// heartbeats after the report last: when the figures changed, or every
// beats.
func reportDue(last, now loadReport, beats, every int) bool {
	return beats >= every || reportChanged(last, now)
}

// reportChanged says whether a report of now is worth sending after last.
func reportChanged(last, now loadReport) bool {
	a, b := last.info, now.info
	return !last.sent || a.Tasks != b.Tasks || math.Abs(a.External-b.External) >= reportExternal ||
		abs64(a.MemFreeMiB-b.MemFreeMiB) >= reportMemMiB || (a.MemFreeMiB == 0) != (b.MemFreeMiB == 0) ||
		a.Users != b.Users || a.Alpha != b.Alpha || a.MaxUsers != b.MaxUsers ||
		a.Emulated != b.Emulated || a.LoadSource != b.LoadSource || !slices.Equal(last.jobs, now.jobs)
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// reportLoad sends this host's figures to the master now (hosts).
func (d *Daemon) reportLoad() { d.sendReport(true) }

// sendReport sends this host's figures to the master (hosts): always when
// forced, otherwise (a heartbeat) only when they changed since the last
// report or ReportEvery heartbeats have passed.
func (d *Daemon) sendReport(force bool) {
	if d.nw == nil || d.cfg.Master {
		return
	}
	d.rep.mu.Lock()
	d.rep.beats++
	due := force || reportDue(d.rep.last, d.takeReport(), d.rep.beats, d.cfg.ReportEvery)
	d.rep.mu.Unlock()
	if !due {
		return
	}
	// The connection is found (perhaps dialled) outside rep.mu, and only
	// when a report is due, so that a heartbeat never waits on a dial that
	// is not needed.
	p, err := d.peerFor(d.ctx, MasterID)
	// The master replaces its record of the jobs this host runs with each
	// report's, so reports must reach it in the order they were taken: the
	// newest is taken and queued (p.frame does not block) under rep.mu.
	d.rep.mu.Lock()
	defer d.rep.mu.Unlock()
	r := d.takeReport()
	d.rep.last, d.rep.beats = r, 0 // tried or sent: the next is due as after a report sent
	if err != nil {
		d.log.Debug("load report", "error", err)
		return
	}
	b, err := encodeMsg(&event{Kind: evLoad, Load: &r.info, Jobs: r.jobs})
	if err != nil {
		d.log.Error("encode load report", "error", err)
		return
	}
	p.frame(routing.KindEvent, b)
}

// takeReport takes this host's figures now, for a load report.
func (d *Daemon) takeReport() loadReport {
	r := loadReport{info: d.selfInfo(), jobs: d.ht.localJobs(), sent: true}
	slices.Sort(r.jobs)
	return r
}

// injectAt applies an overlay on host h (master: forwards to the host).
func (d *Daemon) injectAt(ctx context.Context, h string, o load.Overlay, clear bool) error {
	id, err := d.hostByName(h)
	if err != nil {
		return err
	}
	return d.callHost(ctx, id, mInjectHere, injectArgs{Overlay: o, Clear: clear}, nil)
}

// schedLoop runs the Dynamic-SED check every period (master).
func (d *Daemon) schedLoop() {
	d.every(d.cfg.Sched.Period, nil, func() bool {
		d.schedCheck(time.Now())
		return true
	})
}

// schedCheck is one check period: build the snapshot, run the policy,
// carry out its migrations one after the other, and log every decision
// with its reason.
func (d *Daemon) schedCheck(now time.Time) {
	ctx, cancel := context.WithTimeout(d.ctx, 2*d.cfg.Sched.Period+d.cfg.MoveTimeout)
	defer cancel()
	cfg := d.cfg.Sched
	hosts := d.Hosts()
	snap := hostSnapshot(hosts, cfg)
	st := d.sched
	if st.placing.Load() > 0 {
		return // a spawn is being placed: the next check sees it done
	}
	if d.quietCheck(now, hosts, snap) {
		return
	}
	listStart := time.Now()
	tasks, called, err := d.listProcesses(ctx, hosts)
	if err != nil {
		d.log.Warn("scheduler: task list incomplete", "error", err)
	}
	listed := time.Since(listStart)
	byTID := map[string]task.TID{}
	for _, ti := range tasks {
		if ti.State != Running {
			continue
		}
		if until, ok := st.backoff[ti.TID]; ok && now.Before(until) {
			continue
		}
		byTID[ti.TID.String()] = ti.TID
		snap.Processes = append(snap.Processes, sched.Process{TID: ti.TID.String(), Host: ti.Host,
			Class: d.classOf(ti, snap), Mem: float64(ti.MemBytes) / (1 << 20), Counter: d.schedCounter(ti.TID.String())})
	}
	// A host's reported load may trail the task count the lists show: the
	// policy needs the listed processes counted.
	perHost := map[string]int{}
	for _, p := range snap.Processes {
		perHost[p.Host]++
	}
	for i := range snap.Hosts {
		snap.Hosts[i].Load = math.Max(snap.Hosts[i].Load, float64(perHost[snap.Hosts[i].Name]))
	}
	st.procs, st.tids = slices.Clone(snap.Processes), byTID
	if st.procs == nil {
		st.procs = []sched.Process{}
	}
	stepStart := time.Now()
	res, err := d.schedStep(snap)
	if err != nil {
		d.log.Error("scheduler: step", "error", err)
		return
	}
	stepped := time.Since(stepStart)
	status := SchedStatus{Enabled: true, Period: cfg.Period, Checks: st.status.Checks + 1, Listings: st.status.Listings + 1,
		At: now, Classes: snap.Classes, Availability: sched.Availability(snap), Hosts: hostStatus(snap.Hosts),
		Migrations: st.status.Migrations, Failed: st.status.Failed,
		ListSeconds: listed.Seconds(), StepSeconds: stepped.Seconds(), ListedHosts: called}
	status.Processes = d.schedProcessStatus(snap, res, byTID)
	if len(res.Stay) > 0 {
		// One line per check, not one per process: with every process of
		// a large machine selected, a line each would be the master's
		// main work. Each is at debug level.
		d.log.Info("scheduler: selected, nowhere better to go: stay", "tasks", len(res.Stay), "first", res.Stay[0])
		for _, s := range res.Stay {
			d.log.Debug("scheduler: selected, nowhere better to go: stays", "tid", s)
		}
	}
	via := cfg.Via
	if via == "" {
		via = Direct
	}
	if len(res.Migrations) > 0 {
		d.schedDirty() // whatever the outcome, the processes moved or may have
	}
	for _, m := range res.Migrations {
		tid := byTID[m.TID]
		d.log.Info("scheduler: migrating", "tid", tid, "from", m.From, "to", m.To, "rule", m.Location.String())
		r, err := d.Migrate(ctx, tid, m.To, via)
		if err != nil {
			status.Failed++
			if errors.Is(err, ErrNoSafePoint) {
				// It cannot move now: leave it alone for a while.
				st.backoff[tid] = now.Add(10 * cfg.Period)
			}
			d.log.Warn("scheduler: migration failed", "tid", tid, "to", m.To, "error", err)
			continue
		}
		status.Migrations++
		d.log.Info("scheduler: migrated", "tid", tid, "from", m.From, "to", m.To, "seconds", r.Seconds, "freeze_ms", r.FreezeMS)
	}
	for tid, until := range st.backoff {
		if now.After(until) {
			delete(st.backoff, tid)
		}
	}
	d.sched.mu.Lock()
	st.status = status
	d.sched.mu.Unlock()
	d.schedObserved(now, true, status.Processes)
}

// schedCounter is the selection counter process tid has after the last
// check (0 for a process the scheduler has not judged).
func (d *Daemon) schedCounter(tid string) int {
	if d.sched.inc == nil {
		return 0
	}
	p, _ := d.sched.inc.Process(tid)
	return p.Counter
}

// schedStep runs the policy on the check's snapshot (its hosts' loads
// counting the listed processes): it brings the scheduler's incremental
// snapshot up to date with what changed since the last check (hosts
// joined, left or reporting new figures; processes started, moved,
// changed or ended) and makes its check, which decides what sched.Step
// decides on snap while judging only what changed.
func (d *Daemon) schedStep(snap *sched.Snapshot) (sched.CheckResult, error) {
	st := d.sched
	if st.inc == nil {
		inc, err := sched.NewIncremental(snap.Classes, snap.Params)
		if err != nil {
			return sched.CheckResult{}, err
		}
		st.inc = inc
	}
	inc := st.inc
	hosts := make(map[string]bool, len(snap.Hosts))
	for _, h := range snap.Hosts {
		hosts[h.Name] = true
		if err := inc.SetHost(h); err != nil {
			return sched.CheckResult{}, err
		}
	}
	// What inc holds beyond the check's hosts and processes has left or
	// ended: when the counts differ, find it.
	if n, _ := inc.Len(); n > len(hosts) {
		for _, h := range inc.Snapshot().Hosts {
			if !hosts[h.Name] {
				inc.RemoveHost(h.Name)
			}
		}
	}
	procs := make(map[string]bool, len(snap.Processes))
	for _, p := range snap.Processes {
		procs[p.TID] = true
		if err := inc.SetProcess(p); err != nil {
			return sched.CheckResult{}, err
		}
	}
	if _, n := inc.Len(); n > len(procs) {
		for _, p := range inc.Snapshot().Processes {
			if !procs[p.TID] {
				inc.RemoveProcess(p.TID)
			}
		}
	}
	return inc.Check(), nil
}

// schedProcessStatus lists every process of the check for the status, in
// TID order: those the check judged with its decision, the others with
// their last status and the counter they have now (their host and they
// are unchanged, so their reason, limit and decision stand).
func (d *Daemon) schedProcessStatus(snap *sched.Snapshot, res sched.CheckResult, byTID map[string]task.TID) []ProcessStatus {
	st := d.sched
	st.mu.Lock()
	prev := make(map[task.TID]ProcessStatus, len(st.status.Processes))
	for _, ps := range st.status.Processes {
		prev[ps.TID] = ps
	}
	st.mu.Unlock()
	judged := make(map[string]sched.Decision, len(res.Decisions))
	for _, dec := range res.Decisions {
		judged[dec.Process.TID] = dec
	}
	out := make([]ProcessStatus, 0, len(snap.Processes))
	for _, p := range snap.Processes {
		tid := byTID[p.TID]
		dec, ok := judged[p.TID]
		if !ok {
			ps := prev[tid]
			ps.TID, ps.Host, ps.Class, ps.MemMiB, ps.Counter = tid, p.Host, p.Class, p.Mem, d.schedCounter(p.TID)
			out = append(out, ps)
			continue
		}
		ps := ProcessStatus{TID: tid, Host: p.Host, Class: p.Class, MemMiB: p.Mem, Counter: dec.Counter, Limit: dec.Limit}
		if dec.Reason != 0 {
			ps.Candidate = dec.Reason.String()
		}
		if dec.Selected {
			ps.Decision = dec.Location.String()
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out
}

// quietCheck makes the check without listing any host's processes when
// that cannot change its outcome (master): nothing started, ended or moved
// since the last listing, no process is backed off, and on the hosts'
// current figures the processes of that listing are all idle (sched.Idle:
// counters at 0, none a migration candidate, each host's load taken as at
// least its processes then and the task count it last reported). Such a
// check decides nothing and changes no counter, so listing would only cost
// a call to every host each δT; skipping it lets δT be short at almost no
// cost while nothing needs the scheduler. It reports whether the check was
// made.
func (d *Daemon) quietCheck(now time.Time, hosts []HostInfo, snap *sched.Snapshot) bool {
	st := d.sched
	if st.dirty.Swap(false) || st.procs == nil || len(st.backoff) > 0 {
		return false
	}
	q := snap.Clone()
	listed := map[string]int{}
	for _, p := range st.procs {
		p.Counter = d.schedCounter(p.TID)
		q.Processes = append(q.Processes, p)
		listed[p.Host]++
	}
	for i, h := range hosts {
		q.Hosts[i].Load = math.Max(q.Hosts[i].Load, math.Max(float64(h.Tasks), float64(listed[h.Name])))
	}
	if !sched.Idle(q) {
		return false
	}
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	prev := st.status
	status := SchedStatus{Enabled: true, Period: d.cfg.Sched.Period, Checks: prev.Checks + 1, Listings: prev.Listings,
		At: now, Classes: q.Classes, Availability: sched.Availability(q), Hosts: hostStatus(q.Hosts),
		Migrations: prev.Migrations, Failed: prev.Failed, Processes: slices.Clone(prev.Processes)}
	limits := make(map[string]int, len(q.Hosts))
	for _, h := range q.Hosts {
		limits[h.Name] = sched.CounterLimit(q.Params, h)
	}
	for i := range status.Processes {
		p := &status.Processes[i]
		if l, ok := limits[p.Host]; ok {
			p.Limit = l
		}
	}
	st.status = status
	d.schedObserved(now, false, nil)
	return true
}

// SchedStatus returns the scheduler's last check (master).
func (d *Daemon) SchedStatus() SchedStatus {
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	s := d.sched.status
	s.Enabled = d.cfg.Sched.Period > 0
	s.Period = d.cfg.Sched.Period
	if len(s.Classes) == 0 {
		s.Classes = d.cfg.Sched.classes()
	}
	return s
}

// Request bodies for load injection.
type injectArgs struct {
	Host    string       `msgpack:"h,omitempty"`
	Overlay load.Overlay `msgpack:"o"`
	Clear   bool         `msgpack:"c,omitempty"`
}
