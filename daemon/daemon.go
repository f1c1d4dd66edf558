package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"time"

	"dpvm/task"
)

// Config configures a daemon. The zero value is a usable single host.
type Config struct {
	// HostID is this host's ID in the virtual machine (default 1).
	HostID task.HostID
	// Name is the host's name (default "h<HostID>").
	Name string
	// Output receives the tasks' printed output (default: discarded).
	Output io.Writer
	// Logger receives the daemon's logs (default: discarded).
	Logger *slog.Logger
	// KeepExited is how many exited tasks `ps -a` remembers (default 4096).
	KeepExited int
}

func (c *Config) setDefaults() {
	if c.HostID == 0 {
		c.HostID = 1
	}
	if c.Name == "" {
		c.Name = c.HostID.String()
	}
	if c.Output == nil {
		c.Output = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.KeepExited <= 0 {
		c.KeepExited = 4096
	}
}

// TaskState is a task's place in its life cycle.
type TaskState uint8

// Task states.
const (
	Running TaskState = iota
	Exited            // Run returned nil or an error, or the task called Exit
	Failed            // Run panicked
	Killed            // killed, or the VM halted
)

func (s TaskState) String() string {
	switch s {
	case Running:
		return "running"
	case Exited:
		return "exited"
	case Failed:
		return "failed"
	case Killed:
		return "killed"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText prints the state by name in JSON.
func (s TaskState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// TaskInfo describes a task for listings.
type TaskInfo struct {
	TID     task.TID  `json:"tid"`
	Parent  task.TID  `json:"parent"`
	Type    string    `json:"type"`
	Host    string    `json:"host"`
	State   TaskState `json:"state"`
	Status  int       `json:"status"`
	Err     string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	// Queued and QueuedBytes describe the task's undelivered messages.
	Queued      int `json:"queued"`
	QueuedBytes int `json:"queued_bytes"`
}

// Daemon hosts tasks as goroutines, with a mailbox each, and routes
// messages among them.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	out    *lockedWriter
	ctx    context.Context
	cancel context.CancelFunc
	groups *groups
	wg     sync.WaitGroup

	mu      sync.Mutex
	tasks   map[task.TID]*hosted // running tasks
	exited  []*hosted            // most recent last, at most cfg.KeepExited
	gone    map[task.TID]*hosted // exited tasks by TID (the same set)
	nextNum uint32
	watch   map[task.TID][]watcher // TaskExit registrations by watched task
	hostW   []hostWatcher          // HostAdd/HostDelete registrations
	halted  bool
}

type watcher struct {
	who task.TID
	tag int
}

type hostWatcher struct {
	watcher
	kind task.NotifyKind
	host task.HostID // 0: any
}

// New returns a daemon hosting no tasks.
func New(cfg Config) *Daemon {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Daemon{
		cfg:    cfg,
		log:    cfg.Logger.With("host", cfg.Name),
		out:    &lockedWriter{w: cfg.Output},
		ctx:    ctx,
		cancel: cancel,
		groups: newGroups(),
		tasks:  map[task.TID]*hosted{},
		gone:   map[task.TID]*hosted{},
		watch:  map[task.TID][]watcher{},
	}
}

// HostID is the daemon's host ID.
func (d *Daemon) HostID() task.HostID { return d.cfg.HostID }

// Name is the daemon's host name.
func (d *Daemon) Name() string { return d.cfg.Name }

// hosted is a task on this daemon; it implements task.Endpoint.
type hosted struct {
	d       *Daemon
	tid     task.TID
	parent  task.TID
	typ     string
	t       task.Task
	mb      mailbox
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
	done    chan struct{} // closed when the task has exited

	// Set once, under d.mu, when the task ends.
	state  TaskState
	status int
	err    string
	// exitStatus is recorded by Ctx.Exit before the goroutine ends.
	exitStatus int
	exitCalled bool
}

// Spawn starts req.Count tasks of req.Type on this daemon with parent as
// their parent (the zero TID for root tasks).
func (d *Daemon) Spawn(ctx context.Context, parent task.TID, req task.SpawnRequest) ([]task.TID, error) {
	if req.Host != "" && req.Host != d.cfg.Name && req.Host != d.cfg.HostID.String() {
		return nil, fmt.Errorf("host %q: %w", req.Host, task.ErrNoSuchHost)
	}
	if req.Count < 1 {
		return nil, fmt.Errorf("spawn %d tasks: count must be at least 1", req.Count)
	}
	tids := make([]task.TID, 0, req.Count)
	for range req.Count {
		if err := ctx.Err(); err != nil {
			return tids, err
		}
		t, err := task.New(req.Type, req.State)
		if err != nil {
			return tids, err
		}
		tid, err := d.start(parent, req.Type, t)
		if err != nil {
			return tids, err
		}
		tids = append(tids, tid)
	}
	return tids, nil
}

// SpawnTask starts t (a registered task type) as a root task and returns
// its TID. The task runs on t itself, not on a copy.
func (d *Daemon) SpawnTask(t task.Task) (task.TID, error) {
	typ, err := task.TypeName(t)
	if err != nil {
		return 0, err
	}
	return d.start(0, typ, t)
}

func (d *Daemon) start(parent task.TID, typ string, t task.Task) (task.TID, error) {
	d.mu.Lock()
	if d.halted {
		d.mu.Unlock()
		return 0, task.ErrHalted
	}
	d.nextNum++
	tid := task.NewTID(d.cfg.HostID, d.nextNum)
	ctx, cancel := context.WithCancel(d.ctx)
	h := &hosted{d: d, tid: tid, parent: parent, typ: typ, t: t, ctx: ctx, cancel: cancel,
		started: time.Now(), done: make(chan struct{})}
	d.tasks[tid] = h
	d.wg.Add(1)
	d.mu.Unlock()
	d.log.Debug("task started", "tid", tid, "type", typ, "parent", parent)
	go d.run(h)
	return tid, nil
}

// run is the task's goroutine.
func (d *Daemon) run(h *hosted) {
	defer d.wg.Done()
	returned := false
	var err error
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprintf("panic: %v", r)
			d.log.Error("task panicked", "tid", h.tid, "type", h.typ, "panic", r, "stack", string(debug.Stack()))
			d.finish(h, Failed, 2, msg)
			return
		}
		if !returned { // runtime.Goexit, through Ctx.Exit or t.FailNow-like calls
			st := 1
			if h.exitCalled {
				st = h.exitStatus
			}
			d.finish(h, Exited, st, "")
			return
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		d.finish(h, Exited, task.ExitStatus(err), msg)
	}()
	err = h.t.Run(task.NewCtx(h, h.t))
	returned = true
}

// finish records that h has ended, discards its mailbox, removes it from its
// groups and fires the notifications watching it. Only the first call for a
// task counts.
func (d *Daemon) finish(h *hosted, state TaskState, status int, msg string) {
	d.mu.Lock()
	if _, ok := d.tasks[h.tid]; !ok {
		d.mu.Unlock()
		return
	}
	delete(d.tasks, h.tid)
	h.state, h.status, h.err = state, status, msg
	d.gone[h.tid] = h
	d.exited = append(d.exited, h)
	if len(d.exited) > d.cfg.KeepExited {
		old := d.exited[0]
		d.exited = d.exited[1:]
		delete(d.gone, old.tid)
	}
	ws := d.watch[h.tid]
	delete(d.watch, h.tid)
	d.mu.Unlock()

	h.mb.close()
	h.cancel()
	d.groups.leaveAll(h.tid)
	close(h.done)
	if state == Exited && status == 0 {
		d.log.Debug("task exited", "tid", h.tid, "type", h.typ)
	} else {
		d.log.Info("task ended", "tid", h.tid, "type", h.typ, "state", state, "status", status, "error", msg)
	}
	n := task.Notice{Kind: task.TaskExit, TID: h.tid, Status: status, Err: msg}
	for _, w := range ws {
		d.notify(h.tid, w, n)
	}
}

// notify delivers a notice to w as a message from from.
func (d *Daemon) notify(from task.TID, w watcher, n task.Notice) {
	p, err := task.Encode(n)
	if err != nil {
		d.log.Error("encode notice", "error", err)
		return
	}
	if err := d.deliver(from, w.who, w.tag, p); err != nil {
		d.log.Debug("notice not delivered", "to", w.who, "error", err)
	}
}

// deliver puts a message into a local task's mailbox.
func (d *Daemon) deliver(from, to task.TID, tag int, p task.Payload) error {
	d.mu.Lock()
	h := d.tasks[to]
	d.mu.Unlock()
	if h == nil || !h.mb.put(envelope{from: from, tag: tag, body: p}) {
		return fmt.Errorf("%v: %w", to, task.ErrNoSuchTask)
	}
	return nil
}

// Kill ends task tid: its mailbox is discarded, its exit is notified at
// once, and its goroutine ends at its next IPC call or safe point.
func (d *Daemon) Kill(tid task.TID) error {
	d.mu.Lock()
	h := d.tasks[tid]
	d.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
	}
	d.finish(h, Killed, -1, "killed")
	return nil
}

// ErrNotExited is returned by Wait when its context ends first.
var ErrNotExited = errors.New("task has not exited")

// Wait blocks until task tid has exited and returns its final information.
func (d *Daemon) Wait(ctx context.Context, tid task.TID) (TaskInfo, error) {
	d.mu.Lock()
	h := d.tasks[tid]
	if h == nil {
		h = d.gone[tid]
	}
	d.mu.Unlock()
	if h == nil {
		return TaskInfo{}, fmt.Errorf("wait %v: %w", tid, task.ErrNoSuchTask)
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return TaskInfo{}, fmt.Errorf("wait %v: %w: %w", tid, ErrNotExited, ctx.Err())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.infoLocked(h), nil
}

func (d *Daemon) infoLocked(h *hosted) TaskInfo {
	ti := TaskInfo{TID: h.tid, Parent: h.parent, Type: h.typ, Host: d.cfg.Name,
		State: h.state, Status: h.status, Err: h.err, Started: h.started}
	if h.state == Running {
		ti.Queued, ti.QueuedBytes = h.mb.stats()
	}
	return ti
}

// Tasks lists the running tasks, and with all the remembered exited ones
// too, in TID order.
func (d *Daemon) Tasks(all bool) []TaskInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]TaskInfo, 0, len(d.tasks))
	for _, h := range d.tasks {
		out = append(out, d.infoLocked(h))
	}
	if all {
		for _, h := range d.exited {
			out = append(out, d.infoLocked(h))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out
}

// Halt kills every task and waits until their goroutines have ended or ctx
// is done. Tasks that compute without reaching an IPC call or safe point
// keep their goroutine until they do.
func (d *Daemon) Halt(ctx context.Context) error {
	d.mu.Lock()
	d.halted = true
	live := make([]*hosted, 0, len(d.tasks))
	for _, h := range d.tasks {
		live = append(live, h)
	}
	d.mu.Unlock()
	for _, h := range live {
		d.finish(h, Killed, -1, "virtual machine halted")
	}
	d.cancel()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("halt: tasks still running: %w", ctx.Err())
	}
}

// lockedWriter serialises writes from many tasks, so each Printf line stays
// whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
