package task

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync/atomic"
)

// Status describes a received or probed message.
type Status struct {
	From TID      // the sender
	Tag  int      // the message tag
	Len  int      // the encoded body's size in bytes
	Enc  Encoding // how the body is encoded
}

// Message is a received message with its encoded body.
type Message struct {
	From TID
	Tag  int
	Payload
}

// Status returns the message's status.
func (m *Message) Status() Status {
	return Status{From: m.From, Tag: m.Tag, Len: len(m.Data), Enc: m.Enc}
}

// NotifyKind is what a Notify registration watches for. Wire values: append
// only.
type NotifyKind uint8

// Notification kinds.
const (
	// TaskExit: the listed tasks exit, are killed, or are lost with their
	// host.
	TaskExit NotifyKind = 1
	// HostDelete: the listed tasks' hosts (or, with no tasks listed, any
	// host) leave the virtual machine.
	HostDelete NotifyKind = 2
	// HostAdd: a host joins the virtual machine.
	HostAdd NotifyKind = 3
)

func (k NotifyKind) String() string {
	switch k {
	case TaskExit:
		return "task-exit"
	case HostDelete:
		return "host-delete"
	case HostAdd:
		return "host-add"
	}
	return fmt.Sprintf("notify(%d)", uint8(k))
}

// Host describes a host of the virtual machine.
type Host struct {
	ID    HostID
	Name  string
	Cores int
	Speed float64
}

// Hosts lists the virtual machine's hosts, by ID (PVM's pvm_config).
func (c *Ctx) Hosts() ([]Host, error) {
	c.enter()
	defer c.leave()
	hs, err := c.ep.Hosts(c.ep.Context())
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	return hs, nil
}

// Notice is the body of a notification message. For TaskExit, the message's
// source is the exited task, so Recv(tid, tag, &n) waits for that task.
type Notice struct {
	Kind   NotifyKind `msgpack:"k"`
	TID    TID        `msgpack:"t,omitempty"` // the exited task (TaskExit)
	Host   HostID     `msgpack:"h,omitempty"` // the host added or deleted
	Status int        `msgpack:"s,omitempty"` // exit status (TaskExit)
	Err    string     `msgpack:"e,omitempty"` // why the task ended, if not cleanly
	Name   string     `msgpack:"n,omitempty"` // the host's name (host notices)
}

// SpawnRequest asks the runtime to start Count tasks of a registered type,
// each with its state decoded from State.
type SpawnRequest struct {
	Type  string
	State []byte
	Count int
	// Host places the tasks on the named host; empty means anywhere (the
	// runtime's placement policy decides).
	Host string
	// here asks for the spawning task's own host; Ctx.Spawn resolves it.
	here bool
	// comm and team ask Ctx.Spawn for a communicator (WithComm, Team).
	comm *Comm
	team bool
}

// SpawnOption adjusts a spawn.
type SpawnOption func(*SpawnRequest)

// OnHost places spawned tasks on the named host.
func OnHost(name string) SpawnOption { return func(r *SpawnRequest) { r.Host = name } }

// Anywhere lets the runtime's placement policy choose the hosts (the
// default).
func Anywhere() SpawnOption { return func(r *SpawnRequest) { r.Host, r.here = "", false } }

// Here places spawned tasks on the spawning task's own host.
func Here() SpawnOption { return func(r *SpawnRequest) { r.Host, r.here = "", true } }

// WithComm makes *m, which must be a field of the spawning task's struct,
// a communicator of the caller (rank 0) and the new tasks (ranks 1..n, in
// spawn order); n may then be 0, for a communicator of the caller alone.
// Each new task gets its copy of the communicator by calling JoinComm.
func WithComm(m *Comm) SpawnOption { return func(r *SpawnRequest) { r.comm, r.team = m, false } }

// Team makes the new tasks a communicator of their own that the caller is
// not a member of (MPI_Comm_spawn's children): ranks 0..n-1 in spawn
// order, the order of the TIDs Spawn returns. Each gets it by calling
// JoinComm; its TIDs are the tasks' siblings (pvm_siblings), its Rank the
// task's index among them. It is the form for a root that starts a job's
// workers and only watches them.
func Team() SpawnOption { return func(r *SpawnRequest) { r.comm, r.team = nil, true } }

// Endpoint is what a Ctx needs from the daemon hosting its task. Package
// daemon implements it; tests may implement it too. Methods taking a
// context return ErrKilled (wrapped) once the task is killed, and the
// context's error when it is cancelled.
type Endpoint interface {
	// Self and Parent are the task's and its spawner's TIDs.
	Self() TID
	Parent() TID
	// Siblings are the tasks the spawn that started the task started, in
	// spawn order, the task among them (the task alone for one started
	// on its own). The caller must not modify the slice.
	Siblings() []TID
	// HostName is the name of the host the task runs on now.
	HostName() string
	// Context is cancelled when the task is killed or the VM halts.
	Context() context.Context

	// Send delivers p to task to.
	Send(ctx context.Context, to TID, tag int, p Payload) error
	// Mcast delivers p to every task in to, in order per receiver.
	Mcast(ctx context.Context, to []TID, tag int, p Payload) error
	// Recv removes and returns the first message in the mailbox matching
	// from and tag (wildcards allowed). With wait false it returns
	// ok == false at once when none matches.
	Recv(ctx context.Context, from TID, tag int, wait bool) (m Message, ok bool, err error)
	// RecvSafe is a blocking Recv that also returns, with ok == false and
	// no error, when the runtime wants the task at a safe point (a move
	// is pending).
	RecvSafe(ctx context.Context, from TID, tag int) (m Message, ok bool, err error)
	// Probe reports the first matching message without removing it.
	Probe(from TID, tag int) (Status, bool)
	// Hosts lists the virtual machine's hosts.
	Hosts(ctx context.Context) ([]Host, error)

	Spawn(ctx context.Context, req SpawnRequest) ([]TID, error)
	Kill(ctx context.Context, tid TID) error
	// Exit records the status of a task ending through Ctx.Exit.
	Exit(status int)
	Notify(ctx context.Context, kind NotifyKind, tag int, tids []TID) error

	// Join adds the task to group and returns its instance number, the
	// lowest free one.
	Join(ctx context.Context, group string) (int, error)
	Leave(ctx context.Context, group string) error
	// Members lists the group's members indexed by instance number; a
	// free instance holds the zero TID.
	Members(ctx context.Context, group string) ([]TID, error)
	// Barrier blocks until count members of group have called it.
	Barrier(ctx context.Context, group string, count int) error

	// SafePoint is called outside critical sections; it returns
	// ErrSuspended when the runtime has checkpointed the task.
	SafePoint(t Task) error
	// Migrate asks the runtime to move task tid to host, its checkpoint
	// travelling via "direct" or "indirect".
	Migrate(ctx context.Context, tid TID, host, via string) error

	// Output is where the task's printed output goes (the job's console).
	Output() io.Writer
	Logger() *slog.Logger
}

// Ctx is a task's handle on the runtime. The runtime creates one per task
// and passes it to Run. Its methods may be called from the task's own
// goroutine and from goroutines it starts; Recv calls made concurrently with
// different patterns each get their own messages.
type Ctx struct {
	ep       Endpoint
	task     Task
	critical atomic.Int32
	comms    []*Comm // communicators used, whose kept results SafePoint drops
	// ep's optional interfaces, nil where it lacks them: looked up once
	// here rather than on every Send and Recv.
	fr  FuncReceiver
	ips InPlaceSender
	ss  SafeSender
	sa  StopAsker
}

// NewCtx returns the Ctx for task t hosted through ep. It is for runtimes;
// programs receive their Ctx in Run.
func NewCtx(ep Endpoint, t Task) *Ctx {
	c := &Ctx{ep: ep, task: t}
	c.fr, _ = ep.(FuncReceiver)
	c.ips, _ = ep.(InPlaceSender)
	c.ss, _ = ep.(SafeSender)
	c.sa, _ = ep.(StopAsker)
	return c
}

// MyTID is the calling task's TID.
func (c *Ctx) MyTID() TID { return c.ep.Self() }

// Parent is the TID of the task that spawned this one, or the zero TID for a
// task started by the runtime (a program's root task).
func (c *Ctx) Parent() TID { return c.ep.Parent() }

// Siblings returns the TIDs of the tasks started together with the caller
// by one spawn, in spawn order (the order Spawn returned them in), and the
// caller's index among them: PVM's pvm_siblings. A task started on its own
// (a program's root) is its only sibling, at index 0. The tasks of a job
// started by `dpvm spawn -n N` are siblings. The list never changes: it
// travels with the task when it moves and in its checkpoints. The slice is
// the caller's own.
func (c *Ctx) Siblings() (tids []TID, me int) {
	tids = slices.Clone(c.ep.Siblings())
	me = slices.Index(tids, c.MyTID())
	if me < 0 {
		return []TID{c.MyTID()}, 0
	}
	return tids, me
}

// HostName is the name of the host the task runs on now; it changes when the
// task migrates.
func (c *Ctx) HostName() string { return c.ep.HostName() }

// Context is cancelled when the task is killed or the virtual machine halts.
// Pass it to long operations that take a context.
func (c *Ctx) Context() context.Context { return c.ep.Context() }

// Log returns the task's logger.
func (c *Ctx) Log() *slog.Logger { return c.ep.Logger() }

// Output is the job's output: what a task writes there appears on the
// console of whoever started the program.
func (c *Ctx) Output() io.Writer { return c.ep.Output() }

// Printf writes a formatted line to the job's output. A newline is added if
// format does not end with one.
func (c *Ctx) Printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if len(s) == 0 || s[len(s)-1] != '\n' {
		s += "\n"
	}
	_, _ = io.WriteString(c.ep.Output(), s)
}

// enter and leave bracket a critical section.
func (c *Ctx) enter() { c.critical.Add(1) }
func (c *Ctx) leave() { c.critical.Add(-1) }

// Critical runs f as a critical section: no checkpoint is taken while it
// runs (SafePoint calls inside it do nothing). Every IPC call is already
// one; use Critical for larger units that must not be split, such as a
// sequence of sends that only makes sense together.
func (c *Ctx) Critical(f func() error) error {
	c.enter()
	defer c.leave()
	return f()
}

// SafePoint marks a point where the task may be checkpointed: its state is
// fully described by its fields. When the runtime has a checkpoint or
// migration pending, SafePoint takes it and returns ErrSuspended, which Run
// must return at once, unchanged; the runtime calls Run again on the
// restored state (possibly on another host). It returns ErrKilled when the
// task has been killed. Inside a critical section it does nothing, and so
// while a receive request is outstanding on a communicator (see
// Comm.Irecv).
//
// Tasks that compute for long between messages should call SafePoint
// regularly (at least once per iteration): a task that never reaches one
// cannot move, and a killed task ends only at its next SafePoint or IPC
// call.
func (c *Ctx) SafePoint() error {
	if !c.mayStop() {
		return nil
	}
	for _, m := range c.comms {
		m.resetStep()
	}
	return c.ep.SafePoint(c.task)
}

// mayStop reports whether SafePoint is a safe point now: it is not inside
// a critical section, nor while a receive request is outstanding on one of
// the task's communicators (see Comm.Irecv). A wait that ends by calling
// SafePoint (Safe) asks it first, so that it does not loop on a safe point
// that never comes.
func (c *Ctx) mayStop() bool {
	if c.critical.Load() > 0 {
		return false
	}
	for _, m := range c.comms {
		if m.pendingRecv() {
			return false
		}
	}
	return true
}

// MaxResult bounds the encoded size of a task's result.
const MaxResult = 1 << 20

// ResultSetter is implemented by endpoints that carry a task's result (the
// daemon's does): SetResult records the encoded value.
type ResultSetter interface {
	SetResult(p Payload)
}

// SetResult records v, encoded, as the task's result: for a program's root
// task, the job's structured result, which 'dpvm run --json' prints and the
// Go API (daemon.RunOptions.Result, the TaskInfo of the root) hands back
// beside the output lines. Call it just before Run returns, with no safe
// point after it: a result is not part of a checkpoint. A later call
// replaces the value.
func (c *Ctx) SetResult(v any) error {
	p, err := Encode(v)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	if len(p.Data) > MaxResult {
		return fmt.Errorf("result of %d bytes: at most %d: %w", len(p.Data), MaxResult, ErrEncode)
	}
	rs, ok := c.ep.(ResultSetter)
	if !ok {
		return fmt.Errorf("result: this runtime does not carry results")
	}
	rs.SetResult(p)
	return nil
}

// Spawn starts n tasks of proto's registered type, each with its state
// initialised from a copy of proto (pvm_spawn; proto's fields are what
// pvm_spawn's argv carries), and returns their TIDs. By default the
// runtime places them (Anywhere); OnHost names a host, Here picks the
// caller's. WithComm and Team make the new tasks a communicator, with or
// without the caller; the tasks then call JoinComm. On error Spawn returns
// the TIDs of the tasks that did start, except with WithComm or Team,
// where it kills them.
func (c *Ctx) Spawn(proto Task, n int, opts ...SpawnOption) ([]TID, error) {
	var req SpawnRequest
	for _, o := range opts {
		o(&req)
	}
	if n < 1 && !(n == 0 && req.comm != nil) {
		return nil, fmt.Errorf("spawn %d tasks: count must be at least 1", n)
	}
	if req.comm != nil {
		tids, err := c.spawnMembers([]TID{c.MyTID()}, proto, n, req)
		if err != nil {
			return nil, fmt.Errorf("spawn communicator: %w", err)
		}
		*req.comm = Comm{Rank: 0, TIDs: tids}
		c.track(req.comm)
		return tids[1:], nil
	}
	if req.team {
		tids, err := c.spawnMembers(nil, proto, n, req)
		if err != nil {
			return nil, fmt.Errorf("spawn team: %w", err)
		}
		return tids, nil
	}
	return c.spawn(proto, n, req)
}

// spawn starts the tasks req (with its placement options set) asks for.
func (c *Ctx) spawn(proto Task, n int, req SpawnRequest) ([]TID, error) {
	typ, state, err := EncodeState(proto)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	req.Type, req.State, req.Count = typ, state, n
	req.comm, req.team = nil, false
	if req.here {
		req.Host, req.here = c.ep.HostName(), false
	}
	c.enter()
	defer c.leave()
	tids, err := c.ep.Spawn(c.ep.Context(), req)
	if err != nil {
		return tids, fmt.Errorf("spawn %d %s: %w", n, typ, err)
	}
	return tids, nil
}

// Kill ends the task tid. Its mailbox is discarded and notifications of its
// exit fire at once; the task's goroutine ends at its next IPC call or
// SafePoint.
func (c *Ctx) Kill(tid TID) error {
	c.enter()
	defer c.leave()
	if err := c.ep.Kill(c.ep.Context(), tid); err != nil {
		return fmt.Errorf("kill %v: %w", tid, err)
	}
	return nil
}

// Exit ends the calling task at once with the given status, like returning
// Exit(status) from Run: deferred calls run, and the task's goroutine ends.
// It must be called from the task's own goroutine.
func (c *Ctx) Exit(status int) {
	c.ep.Exit(status)
	runtime.Goexit()
}

// Notify asks for a message with the given tag when something happens:
// TaskExit for each of tids (at once if one has already exited), HostDelete
// for the hosts of tids (or any host when tids is empty), HostAdd for any
// host joining. The message's body is a Notice.
func (c *Ctx) Notify(kind NotifyKind, tag int, tids ...TID) error {
	if err := checkTag(tag); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	switch kind {
	case TaskExit, HostDelete, HostAdd:
	default:
		return fmt.Errorf("notify: unknown kind %v", kind)
	}
	c.enter()
	defer c.leave()
	if err := c.ep.Notify(c.ep.Context(), kind, tag, tids); err != nil {
		return fmt.Errorf("notify %v: %w", kind, err)
	}
	return nil
}

// Migrate moves task tid to the named host, its checkpoint travelling
// "direct" (daemon to daemon) or "indirect" (through the shared
// directory); "" is direct. It returns once the task runs at the
// destination, or with an error after the move was abandoned and the task
// runs on where it was. A task may move itself: the call returns at once
// and the task is suspended at its next safe point.
func (c *Ctx) Migrate(tid TID, host, via string) error {
	c.enter()
	defer c.leave()
	if err := c.ep.Migrate(c.ep.Context(), tid, host, via); err != nil {
		return fmt.Errorf("migrate %v to %s: %w", tid, host, err)
	}
	return nil
}
