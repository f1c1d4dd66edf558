package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpvm/dpvm/daemon/load"
	"github.com/dpvm/dpvm/daemon/metrics"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/daemon/transport"
	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/routing/route"
	"github.com/dpvm/dpvm/task"
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
	// AuditLogger receives a line per control call a person makes (who,
	// role, method, outcome), whatever Logger's level (default: Logger).
	AuditLogger *slog.Logger
	// KeepExited is how many exited tasks `ps -a` remembers (default 4096).
	KeepExited int

	// Listen is the UDP address to listen on for other daemons and
	// clients. Empty: a standalone daemon without a network.
	Listen string
	// Advertise is the address other daemons dial to reach this one
	// (HOST:PORT; an IPv4 or IPv6 address or a DNS name, resolved when
	// dialled). Empty: a host is reached at the address its master saw
	// its connection come from, with its listening port; the master at the
	// address its hosts joined it by.
	Advertise string
	// Master makes this daemon the master of a new virtual machine
	// (host ID 1). Otherwise Join names the master to join.
	Master bool
	Join   string
	// Credential is this daemon's host certificate and key, under which
	// every connection is authenticated (required with Listen). The
	// daemon's name is the certificate's: Name, if given, must agree. The
	// master's certificate must be marked as the master's.
	Credential *pki.Credential
	// CredentialFile is the file Credential was read from (empty: none).
	// The daemon re-reads it when it changes (checked every heartbeat)
	// and on ReloadCredential: a renewed certificate for the same name
	// and role under the same CA is presented on new connections, without
	// a restart.
	CredentialFile string
	// Secret is the cluster secret that authenticates checkpoints and job
	// manifests (required for the master; a host is handed the master's
	// when it joins, unless given one).
	Secret *pki.Keyring
	// RevokedFile names the master's revocation list: certificate serials
	// refused at the handshake, re-read when the file changes, handed to
	// every host (empty: none).
	RevokedFile string
	// AllowDirs are directories besides SharedDir a client may name for a
	// checkpoint or a restart (their subdirectories too).
	AllowDirs []string
	// ExpiryWarning is how long before its certificate expires a daemon
	// starts warning, once a day (default 30 days).
	ExpiryWarning time.Duration
	// MasterGrace is how long a host daemon runs on without its master,
	// trying to register again with a master restarted at the same
	// address (see Recover), before it stops with ErrMasterLost (default
	// 1 minute; negative: stop at once).
	MasterGrace time.Duration
	// MasterNoTasks keeps placement off the master's host (tasks land
	// there only when asked for by name): a machine whose master hosts no
	// tasks loses none of them with it.
	MasterNoTasks bool
	// Recover makes a new master rebuild the machine from the hosts that
	// register again after their master was lost: their host IDs, tasks,
	// routes and group memberships.
	Recover bool
	// Transport tunes QUIC.
	Transport transport.Config
	// Network carries the connections (default QUIC over UDP); tests give
	// an in-memory network (transport.Mem) with injected faults.
	Network transport.Network
	// RTO is how long a message waits for its acknowledgement before it
	// is sent again (default the larger of 2s and two heartbeats). Over
	// QUIC only a broken connection loses messages.
	RTO time.Duration
	// Heartbeat is how often a daemon pings the master (default 1s; under
	// DetectorSwim, how often a host probes another instead);
	// DeadAfter is how long without a word before the master deletes a
	// host it suspects, or a host gives up on the master (default 5
	// heartbeats). The master widens DeadAfter up to (1+MaxHealth) times
	// while it is itself overloaded (package routing/member).
	Heartbeat, DeadAfter time.Duration
	// Detector is how failed hosts are detected: DetectorSwim ("swim",
	// the default: the hosts probe each other, routing/swim, and report
	// deaths to the master, which checks the accused before it deletes
	// it; hosts send the master no pings) or DetectorMaster ("master":
	// every host pings the master each Heartbeat and the master judges
	// their silence). Every daemon of a virtual machine must use the
	// same.
	Detector string
	// Routes is how a move's route reaches the hosts: RoutesDemand
	// ("demand", the default: to the task's origin host, its old host
	// and its new host; the others learn it from refusals and by asking
	// the origin, routing/route) or RoutesBroadcast ("broadcast": the
	// master sends it to every host). Every daemon of a virtual machine
	// must use the same.
	Routes string
	// MaxRoutes bounds each host's route cache on demand: the routes it
	// has learnt of other hosts' tasks, and the ended tasks it remembers
	// (routing/route Config.MaxRoutes; default route.DefaultMaxRoutes).
	MaxRoutes int
	// SuspectAfter is the least silence after which the master suspects
	// a host (shown by conf and the status page; default 2 heartbeats, at
	// most half of DeadAfter). A host whose own words come further apart
	// is suspected later, after its phi-accrual bound.
	SuspectAfter time.Duration
	// MaxHealth bounds how far an overloaded master widens its
	// timeouts: to at most (1+MaxHealth) times (default 4).
	MaxHealth int
	// JoinRate is how many registrations a second the master admits
	// (default 64; negative: no limit), JoinBurst how many at once
	// (default 32). A host that comes over the rate is told to retry
	// later, and does, with jittered exponential backoff.
	JoinRate  float64
	JoinBurst int
	// JoinTimeout bounds how long a daemon keeps trying to join a master
	// that answers "busy" or not in time (default 10 minutes).
	JoinTimeout time.Duration
	// JoinCallTimeout bounds one try to join or rejoin the master
	// (default the larger of 5s and ten heartbeats).
	JoinCallTimeout time.Duration
	// JoinBackoffBase and JoinBackoffMax space a host's tries at a busy
	// master: jittered exponential backoff from the base up to the most
	// (defaults 100ms and 10s), or as the master's answer asks.
	JoinBackoffBase, JoinBackoffMax time.Duration
	// HandshakeTimeout bounds a new connection's first exchange: the hello
	// a daemon or client sends and its answer, dialling a peer, and how
	// long a master keeps a "busy" answer's connection open for the host
	// to read it (default 10s).
	HandshakeTimeout time.Duration
	// StopTimeout bounds a daemon's shutdown: the wait for its tasks'
	// goroutines, and, for half of it, the flush of what each connection
	// still has to send (default 5s). A host the master deletes gets the
	// same half to read its notice.
	StopTimeout time.Duration
	// ReportEvery is how many heartbeats a host lets pass between load
	// reports whose figures have not changed (default 10): a heartbeat
	// carries a report only when the host's figures changed beyond
	// reportChanged's thresholds since the last one it sent, or every
	// ReportEvery beats, so that an idle virtual machine costs the master
	// a ping per host per heartbeat and little else.
	ReportEvery int
	// MaxSpawn is how many tasks one spawn may ask for (default
	// DefaultMaxSpawn); MaxTasks how many tasks this daemon hosts at most
	// (default DefaultMaxTasks). Larger requests fail with ErrLimit.
	MaxSpawn, MaxTasks int
	// MaxUserTasks and MaxUserJobs are how many live tasks and jobs one
	// user may hold in the virtual machine (the tasks outside jobs they
	// spawned and those of their jobs), and MaxJobTasks how many live
	// tasks one job may hold (defaults DefaultMaxUserTasks,
	// DefaultMaxUserJobs, DefaultMaxJobTasks); the master counts them. A
	// spawn or a job past them fails with ErrLimit. Admins are not held
	// to the users' bounds; their jobs are held to MaxJobTasks.
	MaxUserTasks, MaxUserJobs, MaxJobTasks int
	// MaxGroups is how many groups the master's group server holds at
	// once, MaxGroupName the longest group name in bytes, MaxGroupMembers
	// how many instances one group may have (defaults DefaultMaxGroups,
	// DefaultMaxGroupName, DefaultMaxGroupMembers). A join past them
	// fails with ErrLimit.
	MaxGroups, MaxGroupName, MaxGroupMembers int
	// MaxWatchers is how many notify registrations may watch one task,
	// and how many host event registrations one task may hold (default
	// DefaultMaxWatchers); MaxNotify how
	// many tasks one notify call may name (default DefaultMaxNotify).
	// More fail with ErrLimit.
	MaxWatchers, MaxNotify int
	// MaxConns is how many connections this daemon keeps at once, and
	// MaxConnsPerPeer how many made with one certificate (defaults
	// DefaultMaxConns, DefaultMaxConnsPerPeer): a connection past them is
	// closed at once and logged as refused. Over QUIC, MaxConns also
	// bounds connections still in their handshake (Transport.MaxConns).
	MaxConns, MaxConnsPerPeer int
	// MaxForgeries is how many frames making claims about tasks their
	// host does not hold (routing.Judge) a daemon connection may send
	// within ForgeryWindow before it is closed (defaults
	// DefaultMaxForgeries, DefaultForgeryWindow). Each such claim is
	// refused whatever the count; an honest host makes one only while a
	// route is on its way to this daemon, and its refused messages are
	// resent.
	MaxForgeries  int
	ForgeryWindow time.Duration
	// TrafficBudget is the memory this daemon gives to what the network
	// brings it, all connections together (default
	// DefaultTrafficBudget): FrameBudget, MailboxBudget and the QUIC
	// receive windows of MaxConns connections (Transport.ConnWindow
	// each). Those not set take a quarter, a half and a quarter of it:
	// a window is a quarter of TrafficBudget over MaxConns, within
	// MinConnWindow and MaxConnWindow, and MaxConns, when not set, is
	// lowered so that the windows fit. It is raised to the sum of its
	// parts where they are set larger or raised to their least (a
	// FrameBudget of twice MaxFrame, one window a connection).
	// Outside it: the arguments a handler decodes from a call (at most
	// its body again), the answers queued for a client that does not
	// read them, a daemon's call once decoded (see FrameBudget), and one
	// window for each connection this daemon dials (at most one a host).
	// It bounds live memory: Go's collector lets the heap grow past what
	// is live by GOGC percent between collections unless a memory limit
	// (GOMEMLIMIT) says otherwise.
	TrafficBudget int64
	// FrameBudget bounds the bytes of large frame bodies (of
	// routing.BudgetFrom or more) the readers of all connections hold at
	// once, from before a body is allocated until the frame has been
	// handled, and clients' calls until they are answered (a call's body
	// and callOverhead; a large call's body is its frame's buffer, not a
	// copy; a daemon's call is counted until it is decoded, as it may
	// wait for other daemons' frames); FrameBudgetPerCert bounds those of
	// the connections made with one certificate (defaults a quarter of
	// TrafficBudget,
	// DefaultFrameBudgetPerCert; neither below MaxFrame, FrameBudget not
	// below twice MaxFrame). Clients' calls take at most FrameBudget less
	// MaxFrame, so that a daemon's frame (a host's answer the call waits
	// for) always finds room. A frame that does not fit waits, and its
	// connection is not read meanwhile.
	FrameBudget, FrameBudgetPerCert int
	// MaxFrame is the largest frame accepted (default 64 MiB).
	MaxFrame int
	// BulkThreshold is the payload size from which a message to another
	// daemon goes on the transport's bulk lane (transport.BulkConn: TCP
	// beside QUIC, sealed under a TLS handshake's keys) when the peer
	// offers one (default 64 KiB; negative: never).
	BulkThreshold int
	// BulkSmall sends smaller messages on the bulk lane too once it is
	// open (the daemon that dialled the connection opens it for them),
	// where a round trip costs a write and a read on TCP instead of
	// quic-go's hand-offs between goroutines. Off by default: messages on
	// the lane may overtake the control frames sent after them on QUIC,
	// which makes a sender wait more often on a queue its outbox still
	// holds for a move whose commit it has learnt (TestLocalPairAcrossMoves
	// on a loaded machine hangs so, rarer without it).
	BulkSmall bool
	// BulkCheckpointMin is the estimated state size from which a direct
	// checkpoint travels on the bulk lane instead of a QUIC stream
	// (default 1 MiB). A lane stream costs a TCP and TLS handshake of
	// about a millisecond, paid ahead for a peer's checkpoints after its
	// first (a stream is kept for the next): below this size the QUIC
	// stream, which needs none and carries a small state about as fast,
	// moves the task sooner.
	BulkCheckpointMin int64
	// BulkOpenTimeout bounds opening a bulk lane (default 5s); past it
	// the messages go over QUIC.
	BulkOpenTimeout time.Duration
	// BulkRetry is how long a peer's bulk lane stays unused after it
	// failed to open or broke (default 1s): its messages go over QUIC
	// meanwhile.
	BulkRetry time.Duration
	// Window is how many bytes may be unacknowledged for one receiving
	// task before its senders wait (default 8 MiB).
	Window int
	// HostWindow is how many bytes may be unacknowledged for the tasks
	// of one other daemon together before senders to them wait (default
	// DefaultHostWindow; not below Window). A message is sent while less
	// is unacknowledged, whatever its size.
	HostWindow int
	// MailboxHigh is how many bytes a task's mailbox may hold before this
	// daemon stops acknowledging messages for it, so that remote senders
	// wait once their window is full (default 32 MiB). Acknowledgements
	// resume when the task has drained its mailbox below half of it.
	// A task on this daemon sending to a task whose mailbox holds
	// MailboxHigh bytes or more waits in Send until the receiver takes
	// messages (or the sender's context ends): messages count their
	// payload plus a fixed 64 bytes each.
	MailboxHigh int
	// MailboxBudget bounds the memory of all the mailboxes of this
	// daemon together, counted as for MailboxHigh (default half of
	// TrafficBudget, 1 GiB): a task
	// sending to another on this daemon waits while they hold as much.
	// Messages from other daemons, whatever their size and number, are
	// taken only while they fit (routing.Inbox.Admit): in order, into
	// mailboxes holding under three quarters of MailboxBudget, and of
	// MailboxHigh plus Window for their receiver; early (waiting for a
	// message before them), within the remaining quarter of each. A
	// message that does not fit is not acknowledged, and its sender
	// resends it (Config.RTO, spaced by size: routing.PaceBytes); one
	// larger than a bound is taken when what it does not fit under is
	// empty. A message's decoded copy is counted from when it is taken
	// until its task receives it; before, its frame is counted in
	// FrameBudget.
	MailboxBudget int64
	// Placer places tasks spawned anywhere (master; default round-robin).
	Placer Placer
	// SharedDir is the directory all hosts share for indirect migration
	// (and checkpoints); empty disables indirect migration.
	SharedDir string
	// MoveTimeout bounds the wait for a migrating task to reach a safe
	// point (default 10s); past it the move fails and the task runs on.
	MoveTimeout time.Duration
	// PauseMax bounds the time a job checkpoint gives the job's tasks to
	// reach their safe points (default MoveTimeout). Within it the budget
	// adapts to how often the tasks reach safe points (routing/jobck).
	PauseMax time.Duration
	// MoveStepTimeout bounds the answer to each control step of a move
	// (prepare, commit, and an abort's cancel and resume; default 10s).
	// A step of an abort that fails is tried again every Heartbeat.
	MoveStepTimeout time.Duration
	// MoveTransferTimeout bounds a move's checkpoint write at the origin
	// and its restore at the destination, each (default 1 minute); past it
	// the move aborts.
	MoveTransferTimeout time.Duration
	// Load is where the host's situation comes from for the scheduler
	// (default: a static source of no external load and unknown memory,
	// right for several daemons on one machine; `dpvm daemon` uses procfs).
	// Injected overlays (`dpvm load inject`) go on top of it.
	Load load.Source
	// Alpha is the host's speed factor α for the scheduler: 1 for the
	// reference machine, 2 for one twice as slow (default 1).
	Alpha float64
	// MaxUsers is how many interactive users the host tolerates before
	// its parallel tasks become migration candidates (default 0).
	MaxUsers int
	// Sched turns on the master's Dynamic-SED scheduler.
	Sched SchedConfig
	// Emulate makes this host's tasks really run slower to match emulated
	// figures, for experiments on one machine: Throttle times slower
	// (a declared speed factor), and again (1 + the emulated load) times
	// while load is injected or replayed. Tasks are slowed by pausing them
	// for the time they computed (waits for messages excluded) at their
	// safe points and before each message they send. Off by default.
	Emulate  bool
	Throttle float64
	// Fault injects a failure, for tests of failure handling:
	// "exit-on-restore" makes the process exit at once, as if killed, when
	// it is asked to restore a migrating task; "exit-on-second-ckpt-write"
	// when it is asked to write its tasks of a job checkpoint for the
	// second time (in the middle of a round, a set before it complete).
	Fault string
	// FaultHook, if set, is called at named points of the migration
	// protocol on the master ("migrate:sent", after the checkpoint has
	// left the origin; "migrate:restored", after the destination has
	// restored the task), so that tests can fail the master there; and
	// "join:admitted" or "rejoin:admitted", when a host joining or
	// registering again has been admitted and its connection is not yet
	// attached, so that tests can hold it there; on a host, once it has
	// registered again with the master and runs its new connection
	// ("rejoin:registered"), so that tests can lose that connection
	// there; and at each step of a
	// job checkpoint round, before the master asks the hosts
	// ("ckpt:pause", "ckpt:quiet", "ckpt:write", once the set's directory
	// is made, and "ckpt:commit"), and of a rollback, before the master
	// asks the hosts to restore the job ("ckpt:restore"), so that tests
	// can lose a host there; and on a host, once it has served a start of
	// tasks and before it answers ("start:served"), so that tests can
	// lose the answer.
	FaultHook func(point string)
	// Metrics, if set, receives the daemon's metrics and move events
	// (package metrics); nil: none are kept.
	Metrics *metrics.Metrics
	// Cores, Speed and MemMiB describe the host (defaults: the machine's
	// CPU count, 1, 0 for unknown).
	Cores  int
	Speed  float64
	MemMiB int64
}

func (c *Config) setDefaults() {
	if c.HostID == 0 {
		c.HostID = 1
	}
	if c.Name == "" {
		c.Name = c.HostID.String()
	}
	if c.Output == nil && c.Join == "" {
		c.Output = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ExpiryWarning <= 0 {
		c.ExpiryWarning = 30 * 24 * time.Hour
	}
	if c.AuditLogger == nil {
		c.AuditLogger = c.Logger
	}
	if c.KeepExited <= 0 {
		c.KeepExited = 4096
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 5 * c.Heartbeat
	}
	if c.Detector == "" {
		c.Detector = DetectorSwim
	}
	if c.Routes == "" {
		c.Routes = RoutesDemand
	}
	if c.MaxRoutes <= 0 {
		c.MaxRoutes = route.DefaultMaxRoutes
	}
	if c.JoinRate == 0 {
		c.JoinRate = 64
	}
	if c.JoinBurst <= 0 {
		c.JoinBurst = 32
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 10 * time.Minute
	}
	if c.JoinCallTimeout <= 0 {
		c.JoinCallTimeout = max(10*c.Heartbeat, 5*time.Second)
	}
	if c.JoinBackoffBase <= 0 {
		c.JoinBackoffBase = 100 * time.Millisecond
	}
	if c.JoinBackoffMax <= 0 {
		c.JoinBackoffMax = max(10*time.Second, c.JoinBackoffBase)
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 5 * time.Second
	}
	if c.ReportEvery <= 0 {
		c.ReportEvery = 10
	}
	if c.MasterGrace == 0 {
		c.MasterGrace = time.Minute
	}
	if c.RTO <= 0 {
		c.RTO = max(2*time.Second, 2*c.Heartbeat)
	}
	if c.Network == nil {
		c.Network = transport.QUICNetwork{}
	}
	if c.MaxSpawn <= 0 {
		c.MaxSpawn = DefaultMaxSpawn
	}
	if c.MaxTasks <= 0 {
		c.MaxTasks = DefaultMaxTasks
	}
	if c.MaxUserTasks <= 0 {
		c.MaxUserTasks = DefaultMaxUserTasks
	}
	if c.MaxUserJobs <= 0 {
		c.MaxUserJobs = DefaultMaxUserJobs
	}
	if c.MaxJobTasks <= 0 {
		c.MaxJobTasks = DefaultMaxJobTasks
	}
	if c.MaxGroups <= 0 {
		c.MaxGroups = DefaultMaxGroups
	}
	if c.MaxGroupName <= 0 {
		c.MaxGroupName = DefaultMaxGroupName
	}
	if c.MaxGroupMembers <= 0 {
		c.MaxGroupMembers = DefaultMaxGroupMembers
	}
	if c.MaxWatchers <= 0 {
		c.MaxWatchers = DefaultMaxWatchers
	}
	if c.MaxNotify <= 0 {
		c.MaxNotify = DefaultMaxNotify
	}
	c.trafficParts()
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	if c.MaxForgeries <= 0 {
		c.MaxForgeries = DefaultMaxForgeries
	}
	if c.ForgeryWindow <= 0 {
		c.ForgeryWindow = DefaultForgeryWindow
	}
	if c.Transport.MaxConns <= 0 {
		c.Transport.MaxConns = c.MaxConns // QUIC refuses one more before its handshake
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = routing.DefaultMaxFrame
	}
	if c.FrameBudgetPerCert <= 0 {
		c.FrameBudgetPerCert = DefaultFrameBudgetPerCert
	}
	c.FrameBudgetPerCert = max(c.FrameBudgetPerCert, c.MaxFrame)
	// Clients' calls take at most FrameBudget less MaxFrame (budget.go):
	// at least one frame of each kind fits.
	c.FrameBudget = max(c.FrameBudget, c.FrameBudgetPerCert, 2*c.MaxFrame)
	if c.Window <= 0 {
		c.Window = 8 << 20
	}
	if c.HostWindow <= 0 {
		c.HostWindow = DefaultHostWindow
	}
	c.HostWindow = max(c.HostWindow, c.Window)
	if c.BulkThreshold == 0 {
		c.BulkThreshold = 64 << 10
	}
	if c.BulkCheckpointMin <= 0 {
		c.BulkCheckpointMin = 1 << 20
	}
	if c.BulkOpenTimeout <= 0 {
		c.BulkOpenTimeout = 5 * time.Second
	}
	if c.BulkRetry <= 0 {
		c.BulkRetry = time.Second
	}
	if c.MailboxHigh <= 0 {
		c.MailboxHigh = 32 << 20
	}
	// The parts of TrafficBudget raised to their least above: it is
	// their sum at least.
	c.TrafficBudget = max(c.TrafficBudget, int64(c.FrameBudget)+c.MailboxBudget+int64(c.MaxConns)*int64(c.Transport.ConnWindow))
	if c.Placer == nil {
		c.Placer = &RoundRobin{}
	}
	if c.MoveTimeout <= 0 {
		c.MoveTimeout = 10 * time.Second
	}
	if c.PauseMax <= 0 {
		c.PauseMax = c.MoveTimeout
	}
	if c.MoveStepTimeout <= 0 {
		c.MoveStepTimeout = 10 * time.Second
	}
	if c.MoveTransferTimeout <= 0 {
		c.MoveTransferTimeout = time.Minute
	}
	if c.Load == nil {
		c.Load = load.Static{}
	}
	if c.Alpha <= 0 {
		c.Alpha = 1
	}
	if c.Cores <= 0 {
		c.Cores = runtime.NumCPU()
	}
	if c.Speed <= 0 {
		c.Speed = 1
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

// UnmarshalText parses a state's name.
func (s *TaskState) UnmarshalText(b []byte) error {
	for x := Running; x <= Killed; x++ {
		if x.String() == string(b) {
			*s = x
			return nil
		}
	}
	return fmt.Errorf("unknown task state %q", b)
}

// TaskInfo describes a task for listings.
type TaskInfo struct {
	TID     task.TID  `json:"tid"`
	Parent  task.TID  `json:"parent"`
	Job     uint64    `json:"job,omitempty"` // the job it belongs to (0: none)
	Type    string    `json:"type"`
	Host    string    `json:"host"`
	State   TaskState `json:"state"`
	Status  int       `json:"status"`
	Err     string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	// Queued and QueuedBytes describe the task's undelivered messages.
	Queued      int `json:"queued"`
	QueuedBytes int `json:"queued_bytes"`
	// MemBytes estimates the memory the task's state holds, as measured
	// when it started and at a recent safe point.
	MemBytes int64 `json:"mem_bytes"`
	// SinceSafePointMS is how long, in milliseconds, the running task has
	// gone without a safe point (since it started on its host if it never
	// reached one); 0 while it waits in a receive that is a safe point. A
	// task that goes longer than the move timeout cannot be moved or
	// checkpointed meanwhile.
	SinceSafePointMS float64 `json:"since_safe_point_ms"`
	// Result is what the task recorded with Ctx.SetResult, encoded (empty:
	// nothing). For JSON, ResultValue decodes it.
	Result task.Payload `json:"-"`
	// JobFailures, in a job's end as a run reports it (the root's final
	// state), are the job's other tasks that failed or were killed with
	// it, in TID order; empty otherwise.
	JobFailures []TaskInfo `json:"job_failures,omitempty"`
}

// ResultValue decodes the task's result into a generic value (maps,
// slices, numbers, strings), ok false when it recorded none.
func (ti TaskInfo) ResultValue() (v any, ok bool, err error) {
	if len(ti.Result.Data) == 0 && ti.Result.Enc == task.EncMsgpack {
		return nil, false, nil
	}
	if err := ti.Result.Decode(&v); err != nil {
		return nil, true, fmt.Errorf("result of %v: %w", ti.TID, err)
	}
	return v, true, nil
}

// Daemon hosts tasks as goroutines, with a mailbox each, and routes
// messages among them. It is the driver of its parts, each with one
// owner (see the package documentation for what each owns, and the lock
// order): message routing (rt), task hosting (ht), groups and barrier
// arrivals, the network (nw), and at the master the job registry (reg),
// the moves (mv) and the scheduler (sched).
type Daemon struct {
	// Identity and configuration, fixed once the daemon runs (but for
	// the atomics).
	cfg Config
	log *slog.Logger // its "host" attribute is logName, read at each line
	// logName is the name the daemon logs under: set at construction and
	// again when the master assigns the host its ID, while network loops
	// may already be logging.
	logName atomic.Pointer[string]
	out     *lockedWriter
	self    HostInfo
	// ownAddr is the master's address as its hosts reach it, learnt from
	// the first host that joins when the master listens on a wildcard
	// address and was given no --advertise (see learnOwnAddr).
	ownAddr atomic.Pointer[string]
	met     *metrics.Metrics // nil: no metrics (see observe.go)
	// ckWrites counts the job checkpoint writes asked of this host, for
	// Config.Fault "exit-on-second-ckpt-write".
	ckWrites atomic.Int64

	// Lifecycle: every goroutine is tracked and ends when ctx does.
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // task goroutines
	bg       sync.WaitGroup // network loops and move steps (goFunc)
	whyMu    sync.Mutex     // taken last, after any other lock
	why      error          // the first reason given to stop
	stopOnce sync.Once
	done     chan struct{} // closed when the daemon has stopped
	stopErr  error

	// The parts every daemon has.
	rt *router  // message routing: routes, outbox, inbox (router.go)
	ht *hosting // task hosting: tasks, registrations, moves' halves here (hosting.go)
	// shared holds the read-only values its tasks share (task.Shared).
	shared sharedValues
	// starts are the starts this daemon served (starts.go); startIDs
	// numbers the master's starts, from a random base so that a master
	// started again gives no host an ID it remembers.
	starts   startRecords
	startIDs atomic.Uint64
	// mbMem is the memory of all the tasks' mailboxes (see mailbox.total).
	mbMem gauge
	// recvDeferred counts the messages from other daemons turned away
	// unacknowledged for want of room (recvLimits).
	recvDeferred atomic.Int64
	// mn is the master node and its lock (masternode.go); groups, the
	// group server's shell on it (groups.go), is mn.groups.
	mn     *masterNode
	groups *groups
	// arrivals is this host's side of the master's barriers (arrivals.go).
	arrivals *arrivals
	nw       *network    // peers and host registry, under nw.mu; nil for a standalone daemon
	orphan   atomic.Bool // a host that has lost its master and looks for one
	sw       *swimHost   // a host's swim detector (Config.Detector "swim"; nil otherwise)
	// routes is a host's route cache on demand (Config.Routes "demand";
	// nil otherwise), guarded by rt.mu (routes.go).
	routes *routeCache
	rstats routeStats // routes on demand's frames sent (routes.go)

	// Load: the injected overlays, the last sample, and (hosts) the
	// reports to the master.
	load    *load.Injected
	sampled atomic.Pointer[load.Sample] // the last sample, taken every heartbeat (nil before the first)
	// slowdown is the factor emulated tasks run slower by, from the last
	// sample (float64 bits; see hosted.charge): read at every message an
	// emulated task sends, so atomic.
	slowdown atomic.Uint64
	rep      reports

	// The master's parts.
	reg    *registry   // the job registry (registry.go)
	mv     *mover      // moves and the epoch clock (mover.go)
	sched  *schedState // the scheduler and placement (scheduler.go)
	owners owners      // who started which job

	// Trust: keys, revocations, credentials, refusals (auth.go, renew.go).
	secret     atomic.Pointer[pki.Keyring] // the cluster secret: Config.Secret, or the master's
	refusals   refusalLog
	forgeLog   refusalLog                  // refused claims about tasks (claims.go)
	frames     *frameBudget                // large frame bodies held by the connections' readers (budget.go)
	revoked    atomic.Pointer[pki.Revoked] // certificates refused at the handshake
	revokedAt  revokedStamp                // master: the revocation file as last read
	credAt     credStamp                   // the credential file as last read
	certEnds   certEnds                    // master: hosts whose certificate expired, being checked for a renewal
	conns      connCount                   // accepted connections, by certificate
	expiryWarn atomic.Int64                // unix nanoseconds of the last expiry warning
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

// New returns a standalone daemon hosting no tasks: a one-host virtual
// machine without a network. Start makes daemons that form a virtual
// machine of many hosts.
func New(cfg Config) *Daemon {
	cfg.Listen, cfg.Join, cfg.Master = "", "", false
	return newDaemon(cfg)
}

func newDaemon(cfg Config) *Daemon {
	if cfg.Join != "" && cfg.HostID == 0 && cfg.Name == "" {
		cfg.Name = "h0" // until the master assigns an ID
	}
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	rt := newRouter()
	d := &Daemon{
		cfg:      cfg,
		ctx:      ctx,
		cancel:   cancel,
		mn:       newMasterNode(masterNodeConfig(cfg)),
		reg:      newRegistry(),
		ht:       newHosting(rt),
		arrivals: newArrivals(),
		load:     load.NewInjected(cfg.Load),
		sched:    &schedState{counters: map[task.TID]int{}, backoff: map[task.TID]time.Time{}, class: map[task.TID]int{}},
		rt:       rt,
		done:     make(chan struct{}),
		rep:      reports{kick: make(chan struct{}, 1)},
		self:     HostInfo{ID: cfg.HostID, Name: cfg.Name, Cores: cfg.Cores, Speed: cfg.Speed, MemMiB: cfg.MemMiB, Build: ThisBuild()},
		met:      cfg.Metrics,
		frames:   newFrameBudget(cfg.FrameBudget, cfg.FrameBudgetPerCert, cfg.FrameBudget-cfg.MaxFrame),
	}
	d.groups = d.mn.groups
	d.mv = newMover(d.mn)
	d.startIDs.Store(rand.Uint64())
	d.setLogName(cfg.Name)
	d.log = cfg.Logger.With("host", logName{d})
	if cfg.Secret != nil {
		d.secret.Store(cfg.Secret)
	}
	d.met.SetSource(d.metricsSnapshot)
	d.setSlowdown(0) // the declared speed until a sample says more
	w := cfg.Output
	if w == nil {
		w = io.Discard
	}
	d.out = &lockedWriter{w: w}
	return d
}

// Start starts a daemon of a virtual machine: the master (cfg.Master) or a
// host joining the master at cfg.Join. It listens on cfg.Listen, with
// every connection authenticated by cfg.Credential. Without cfg.Listen it returns
// a standalone daemon, as New does.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Listen == "" {
		return New(cfg), nil
	}
	if cfg.Master == (cfg.Join != "") {
		return nil, errors.New("start daemon: give either Master or Join")
	}
	if err := checkDetector(cfg.Detector); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	if err := checkRoutes(cfg.Routes); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	if err := checkCredential(&cfg); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	if cfg.Master {
		cfg.HostID = MasterID
	} else {
		cfg.HostID = 0
	}
	d := newDaemon(cfg)
	if err := d.startNetwork(ctx); err != nil {
		d.cancel()
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	return d, nil
}

// Addr is the address the daemon listens on ("" for a standalone daemon).
func (d *Daemon) Addr() string { return d.self.Addr }

// Done is closed when the daemon has stopped: halted, deleted, or cut off
// from its master. Err then says why.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is why the daemon stopped (nil while it runs, or after a clean halt).
func (d *Daemon) Err() error {
	select {
	case <-d.done:
		if errors.Is(d.stopErr, task.ErrHalted) {
			return nil
		}
		return d.stopErr
	default:
		return nil
	}
}

// stop shuts the daemon down (see shutdown) with a bounded wait for task
// goroutines.
func (d *Daemon) stop(why error) {
	// The daemon's context ends as it stops: the wait keeps its values,
	// not its cancellation.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), d.cfg.StopTimeout)
	defer cancel()
	_ = d.shutdown(ctx, why)
}

// stopAsync records why the daemon stops (the first reason given wins) and
// shuts it down in the background, so the caller — a connection's reader —
// is not blocked by the shutdown it starts.
func (d *Daemon) stopAsync(why error) {
	d.stopping(why)
	go d.stop(why)
}

// stopping records why the daemon is about to stop (the first reason given
// wins), before it tells anyone: what it loses from then on is expected.
func (d *Daemon) stopping(why error) {
	d.whyMu.Lock()
	if d.why == nil {
		d.why = why
	}
	d.whyMu.Unlock()
}

// isStopping reports whether the daemon is stopping or has stopped.
func (d *Daemon) isStopping() bool {
	d.whyMu.Lock()
	defer d.whyMu.Unlock()
	return d.why != nil
}

// lossLevel is the level of a line about something lost: a warning, unless
// the daemon is stopping, when losing it is expected.
func (d *Daemon) lossLevel() slog.Level {
	if d.isStopping() {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// shutdown kills every task, waits for their goroutines until ctx is done,
// closes every connection and marks the daemon done with why, once.
func (d *Daemon) shutdown(ctx context.Context, why error) error {
	var err error
	d.stopOnce.Do(func() {
		d.whyMu.Lock()
		if d.why == nil {
			d.why = why
		}
		d.stopErr = d.why
		d.whyMu.Unlock()
		err = d.halt(ctx)
		if d.nw != nil {
			d.nw.mu.Lock()
			var ps []*peer
			for _, p := range d.nw.peers {
				ps = append(ps, p)
			}
			for p := range d.nw.clients {
				ps = append(ps, p)
			}
			ps = append(ps, d.nw.retiringTo(0)...)
			d.nw.mu.Unlock()
			var wg sync.WaitGroup
			for _, p := range ps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.drain(d.cfg.StopTimeout / 2)
				}()
			}
			wg.Wait()
			_ = d.nw.tr.Close()
			d.bg.Wait()
		}
		close(d.done)
	})
	return err
}

// HostID is the daemon's host ID.
func (d *Daemon) HostID() task.HostID { return d.cfg.HostID }

// Name is the daemon's host name.
func (d *Daemon) Name() string { return d.cfg.Name }

// newHosted makes the record of task t, started here or arriving, with
// its context, its channels and an empty mailbox.
func (d *Daemon) newHosted(tid, parent task.TID, job uint64, typ string, t task.Task) *hosted {
	ctx, cancel := context.WithCancel(d.ctx)
	return &hosted{d: d, tid: tid, parent: parent, job: job, typ: typ, t: t, ctx: ctx, cancel: cancel,
		started: time.Now(), done: make(chan struct{}), moveKick: make(chan struct{}, 1),
		mb: &mailbox{total: &d.mbMem}}
}

// hosted is a task on this daemon; it implements task.Endpoint.
type hosted struct {
	d      *Daemon
	tid    task.TID
	parent task.TID
	// sibs is the spawn that started the task (nil: started alone).
	sibs *spawnSet
	job  uint64 // the job whose output this task's output joins (0: the daemon's)
	typ  string
	t    task.Task
	// mb is allocated apart from the task's record, so that what keeps
	// the mailbox (a sender's nearPeers) does not keep the task's state.
	mb      *mailbox
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
	done    chan struct{} // closed when the task has exited

	// Set once, under d.ht.mu, when the task ends.
	state  TaskState
	status int
	err    string
	// exitStatus is recorded by Ctx.Exit before the goroutine ends.
	exitStatus int
	exitCalled bool

	// moveReq is set when the task is to suspend at its next safe point
	// for a move; moved once it has.
	moveReq  atomic.Pointer[moveRequest]
	moveKick chan struct{} // wakes a RecvSafe when a move is requested
	moved    bool
	// arrived is the move that restored the task here (0: none), so that a
	// late cancel of that move learns that it happened.
	arrived move.ID
	// meter is the task's account of emulated slowness (see charge).
	meter load.Meter
	// ended is set when the task's goroutine is over, its exit reported.
	endMu sync.Mutex
	ended bool
	endCh chan struct{}
	// groups are the task's memberships (hosts other than the master),
	// by group, under d.ht.mu: what it re-registers with a recovered master.
	groups map[string]int
	// quiet marks a task killed to roll its job back: its end notifies
	// nobody (the job restarts from a checkpoint).
	quiet atomic.Bool
	// pause holds the task at its next safe point for a job checkpoint.
	pause atomic.Pointer[pauseReq]
	// safeAt is when the task was last at a safe point (Unix ns), and
	// safeEvery the longest interval between two of its safe points,
	// decaying: the pause budget of its job's checkpoints follows it.
	safeAt, safeEvery atomic.Int64
	// The state's estimated size, and whether a fresh figure is wanted.
	memBytes   atomic.Int64
	sizeWanted atomic.Bool
	// safeWait is set while the task waits in RecvSafe, where it is
	// movable all along (safeAt above: 0 when it has passed no safe point
	// since it started here).
	safeWait atomic.Bool
	// warned is set when the task has been warned of for reaching no safe
	// point in time, and cleared at its next safe point: one warning per
	// late stretch, however many moves or checkpoint rounds wait on it.
	warned atomic.Bool
	// result is what the task recorded with SetResult (under d.ht.mu).
	result task.Payload

	// deferred holds acknowledgements withheld while the mailbox is over
	// MailboxHigh, by pair, with the host to send each to.
	defMu    sync.Mutex
	deferred map[routing.Pair]deferredAck
	hasDef   atomic.Bool // deferred is not empty: read on every receive without the lock

	// near records where the task's recent receivers on this daemon are
	// (under d.rt.mu; see sendNear).
	near nearPeers
	// lastGroup is the last group name the task used, translated (see
	// groupName).
	lastGroup atomic.Pointer[groupNames]
}

type deferredAck struct {
	host task.HostID
	ack  routing.Ack
}

// Spawn starts req.Count tasks of req.Type with parent as their parent (the
// zero TID for root tasks): on the host req.Host names, or where the
// master's placement puts them.
func (d *Daemon) Spawn(ctx context.Context, parent task.TID, req task.SpawnRequest) ([]task.TID, error) {
	if d.isMaster() {
		if d.nw == nil {
			return d.spawn(ctx, parent, 0, req)
		}
		return d.spawnAnywhere(ctx, parent, 0, req)
	}
	return d.spawn(ctx, parent, 0, req)
}

// startLocal starts tasks of job on this daemon: a spawn of this host's
// alone, whose tasks are each other's siblings.
func (d *Daemon) startLocal(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest) ([]task.TID, error) {
	return d.startSpawn(ctx, parent, job, req, false, 0)
}

// startTasks starts req.Count tasks of job on this daemon, of the spawn
// set, and returns their TIDs in spawn order (those started, when it
// fails). It makes every task from req.State first, so that a state that
// cannot be decoded starts none, then takes their TIDs at once; with
// complete set, the set's list is theirs before the first starts, and
// each task starts, list known, while the next is admitted.
func (d *Daemon) startTasks(ctx context.Context, parent task.TID, job uint64, req task.SpawnRequest, set *spawnSet, complete bool) ([]task.TID, error) {
	if err := checkSpawnCount(req.Count, d.cfg.MaxSpawn); err != nil {
		return nil, err
	}
	here := d.ht.count()
	if here+req.Count > d.cfg.MaxTasks {
		return nil, fmt.Errorf("spawn %d tasks on %s, which hosts %d: at most %d tasks on one daemon: %w",
			req.Count, d.cfg.Name, here, d.cfg.MaxTasks, ErrLimit)
	}
	ts := make([]task.Task, 0, prealloc(req.Count))
	for range req.Count {
		t, err := task.New(req.Type, req.State)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tids := d.ht.newTIDs(d.cfg.HostID, len(ts), set)
	if complete {
		set.complete(slices.Clone(tids)) // the list is the tasks', tids the caller's
	}
	for i, t := range ts {
		h, err := d.admitTask(tids[i], parent, job, req.Type, t, set)
		if err != nil {
			// The daemon halts: the tasks it started end with it.
			return tids[:i], err
		}
		go d.run(h)
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
	return d.start(0, 0, typ, t, nil)
}

// start starts task t here, one of the spawn set (nil: a task started
// alone).
func (d *Daemon) start(parent task.TID, job uint64, typ string, t task.Task, set *spawnSet) (task.TID, error) {
	h, err := d.admitTask(d.ht.newTIDs(d.cfg.HostID, 1, set)[0], parent, job, typ, t, set)
	if err != nil {
		return 0, err
	}
	go d.run(h)
	return h.tid, nil
}

// admitTask enters task t in the task table as tid (newTIDs'), one of the
// spawn set (nil: a task started alone): from then on messages to it wait
// in its mailbox. The caller starts its goroutine (go d.run), which d.wg
// counts already.
func (d *Daemon) admitTask(tid task.TID, parent task.TID, job uint64, typ string, t task.Task, set *spawnSet) (*hosted, error) {
	d.ht.mu.Lock()
	if d.ht.halted {
		d.ht.mu.Unlock()
		return nil, task.ErrHalted
	}
	h := d.newHosted(tid, parent, job, typ, t)
	h.sibs = set
	if set != nil {
		set.started(tid)
	}
	d.ht.tasks[tid] = h
	d.wg.Add(1)
	d.ht.mu.Unlock()
	d.tasksChanged()
	if d.log.Enabled(d.ctx, slog.LevelDebug) { // its arguments would cost a spawn three allocations per task
		d.log.Debug("task started", "tid", tid, "type", typ, "parent", parent)
	}
	return h, nil
}

// run is the task's goroutine.
func (d *Daemon) run(h *hosted) {
	defer d.wg.Done()
	defer h.markEnded() // after finish has reported the exit
	returned := false
	var err error
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprintf("panic: %v", r)
			d.log.Error("task panicked", "tid", h.tid, "type", h.typ, "panic", r, "stack", string(debug.Stack()))
			d.finish(h, Failed, 2, msg)
			return
		}
		if h.moved {
			// Suspended for a move: the task lives on elsewhere (or here
			// again after an abort), with a goroutine of its own.
			if !errors.Is(err, task.ErrSuspended) {
				d.log.Error("task went on after it was suspended for a move; its Run must return the error SafePoint returned",
					"tid", h.tid, "type", h.typ, "returned", err)
			}
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
	if err = d.awaitSiblings(h); err != nil {
		returned = true
		return
	}
	h.measure()
	err = h.t.Run(task.NewCtx(h, h.t))
	returned = true
}

// markEnded records that the task's goroutine is over.
func (h *hosted) markEnded() {
	h.endMu.Lock()
	h.ended = true
	if h.endCh != nil {
		close(h.endCh)
	}
	h.endMu.Unlock()
}

// whenEnded returns a channel closed once the task's goroutine is over and
// its exit has been reported (to the master, or handled here).
func (h *hosted) whenEnded() <-chan struct{} {
	h.endMu.Lock()
	defer h.endMu.Unlock()
	if h.endCh == nil {
		h.endCh = make(chan struct{})
		if h.ended {
			close(h.endCh)
		}
	}
	return h.endCh
}

// measure records the size of the task's state. Only the task's own
// goroutine reads its state, before it runs and at safe points, when the
// load monitor has asked (see Tasks).
func (h *hosted) measure() {
	h.sizeWanted.Store(false)
	h.memBytes.Store(stateBytes(h.t))
}

// finish records that h has ended, discards its mailbox, removes it from its
// groups and fires the notifications watching it. Only the first call for a
// task counts.
func (d *Daemon) finish(h *hosted, state TaskState, status int, msg string) {
	d.ht.mu.Lock()
	if cur, ok := d.ht.tasks[h.tid]; !ok || cur != h {
		d.ht.mu.Unlock()
		return
	}
	if req := h.moveReq.Swap(nil); req != nil {
		req.done <- fmt.Errorf("%v exited before reaching a safe point: %w", h.tid, task.ErrNoSuchTask)
	}
	delete(d.ht.tasks, h.tid)
	d.ht.taskEnded(h.tid, h.job)
	h.state, h.status, h.err = state, status, msg
	d.ht.gone[h.tid] = h
	d.ht.exited = append(d.ht.exited, h)
	if len(d.ht.exited) > d.cfg.KeepExited {
		old := d.ht.exited[0]
		d.ht.exited = d.ht.exited[1:]
		delete(d.ht.gone, old.tid)
	}
	ws := d.ht.watch[h.tid]
	delete(d.ht.watch, h.tid)
	d.ht.mu.Unlock()

	h.mb.close()
	h.cancel()
	close(h.done)
	if state == Exited && status == 0 {
		if d.log.Enabled(d.ctx, slog.LevelDebug) { // as in admitTask
			d.log.Debug("task exited", "tid", h.tid, "type", h.typ)
		}
	} else {
		d.log.Info("task ended", "tid", h.tid, "type", h.typ, "state", state, "status", status, "error", msg)
	}
	// The master learns of the exit first (it leaves its groups), so that
	// a watcher told of it finds the groups without it.
	switch {
	case d.isMaster():
		d.taskGone(h.tid)
	default:
		if err := d.sendEvent(d.ctx, MasterID, &event{Kind: evExited, TID: h.tid}); err != nil {
			d.log.Log(d.ctx, d.lossLevel(), "report exit", "tid", h.tid, "error", err)
		}
	}
	// Exit notices travel as the task's last messages to their watchers,
	// so they arrive after everything it sent.
	n := task.Notice{Kind: task.TaskExit, TID: h.tid, Status: status, Err: msg}
	for _, w := range ws {
		if !h.quiet.Load() {
			d.notify(h.tid, w, n, true)
		}
	}
	d.rt.exited(h.tid)
	d.routesEnded(h.tid)
}

// notify delivers a notice to w as a message from from: sequenced (from's
// last message to w) or as an unsequenced system message (for tasks that
// are gone, and host events).
func (d *Daemon) notify(from task.TID, w watcher, n task.Notice, sequenced bool) {
	p, err := task.Encode(n)
	if err != nil {
		d.log.Error("encode notice", "error", err)
		return
	}
	if sequenced {
		err = d.send(d.ctx, nil, from, w.who, w.tag, p, noWait, nil)
	} else {
		err = d.sendSystem(from, w.who, w.tag, p)
	}
	if err != nil {
		d.log.Debug("notice not delivered", "to", w.who, "error", err)
	}
}

// Kill ends task tid: its mailbox is discarded, its exit is notified at
// once, and its goroutine ends at its next IPC call or safe point.
func (d *Daemon) Kill(tid task.TID) error {
	h := d.ht.task(tid)
	if h == nil {
		return fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask)
	}
	d.finish(h, Killed, -1, "killed")
	return nil
}

// ErrNotExited is returned by Wait when its context ends first.
var ErrNotExited = errors.New("task has not exited")

// Wait blocks until task tid has exited and returns its final information.
// It follows the task when it migrates.
func (d *Daemon) Wait(ctx context.Context, tid task.TID) (TaskInfo, error) {
	for {
		d.ht.mu.Lock()
		h := d.ht.tasks[tid]
		if h == nil {
			h = d.ht.gone[tid]
		}
		l := d.ht.moving[tid]
		d.ht.mu.Unlock()
		var wait <-chan struct{}
		switch {
		case h != nil:
			wait = h.done
		case l != nil:
			wait = l.resolved // suspended here: wait for the move to commit or abort
		default:
			host := d.waitHost(tid)
			if host != d.cfg.HostID && d.nw != nil && d.hostKnown(host) {
				var info TaskInfo
				if err := d.callHost(ctx, host, mWait, tidArgs{TID: tid}, &info); err != nil {
					return info, fmt.Errorf("wait %v: %w", tid, err)
				}
				return info, nil
			}
			return TaskInfo{}, fmt.Errorf("wait %v: %w", tid, task.ErrNoSuchTask)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return TaskInfo{}, fmt.Errorf("wait %v: %w: %w", tid, ErrNotExited, ctx.Err())
		}
		if h == nil {
			continue
		}
		d.ht.mu.Lock()
		moved := h.moved
		info := d.infoLocked(h)
		d.ht.mu.Unlock()
		if !moved {
			return info, nil
		}
	}
}

// waitHost is the host a wait for tid, which is not here, asks: where
// the routing table places it, or, when that is its origin host and the
// origin cannot answer (this daemon, or a host gone), the host it ended
// on if the table remembers one. The master forgets the route of a task
// that has ended: a task that ended away from its origin — a job's root
// moved off the master, or restored elsewhere by a rollback after its
// origin host was lost — is then found where it ended, which keeps its
// final state (Config.KeepExited).
func (d *Daemon) waitHost(tid task.TID) task.HostID {
	rt, ended := d.rt.lookupEnded(tid)
	if ended != 0 && ended != d.cfg.HostID && (rt.Host == d.cfg.HostID || !d.hostKnown(rt.Host)) {
		return ended
	}
	return rt.Host
}

func (d *Daemon) infoLocked(h *hosted) TaskInfo {
	ti := TaskInfo{TID: h.tid, Parent: h.parent, Job: h.job, Type: h.typ, Host: d.cfg.Name,
		State: h.state, Status: h.status, Err: h.err, Started: h.started, Result: h.result}
	if h.state == Running {
		ti.Queued, ti.QueuedBytes = h.mb.stats()
		ti.MemBytes = h.memBytes.Load()
		h.sizeWanted.Store(true) // measured again at its next safe point
		ti.SinceSafePointMS = float64(h.sinceSafePoint(time.Now())) / float64(time.Millisecond)
	}
	return ti
}

// Tasks lists the running tasks, and with all the remembered exited ones
// too, in TID order.
func (d *Daemon) Tasks(all bool) []TaskInfo {
	d.ht.mu.Lock()
	defer d.ht.mu.Unlock()
	out := make([]TaskInfo, 0, len(d.ht.tasks))
	for _, h := range d.ht.tasks {
		out = append(out, d.infoLocked(h))
	}
	if all {
		for _, h := range d.ht.exited {
			out = append(out, d.infoLocked(h))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out
}

// Halt stops the daemon: it kills every task, waits until their goroutines
// have ended or ctx is done, and closes its connections. Tasks that compute
// without reaching an IPC call or safe point keep their goroutine until
// they do.
func (d *Daemon) Halt(ctx context.Context) error {
	return d.shutdown(ctx, task.ErrHalted)
}

// halt kills every task and waits for their goroutines.
func (d *Daemon) halt(ctx context.Context) error {
	d.ht.mu.Lock()
	d.ht.halted = true
	live := make([]*hosted, 0, len(d.ht.tasks))
	for _, h := range d.ht.tasks {
		live = append(live, h)
	}
	d.ht.mu.Unlock()
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

// jobWriter is a task's output: printed by the master on the console of
// whoever started the task's job (or the master's own output), wherever the
// task runs.
type jobWriter struct {
	d   *Daemon
	job uint64
	tid task.TID // the writing task: the master checks that the host runs it
}

func (w jobWriter) Write(p []byte) (int, error) {
	if w.d.isMaster() {
		return w.d.jobOut(w.job, p)
	}
	b := append([]byte(nil), p...)
	if err := w.d.sendEvent(w.d.ctx, MasterID, &event{Kind: evOutput, Job: w.job, TID: w.tid, Output: b}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// logName is the value of a daemon's "host" log attribute: its current
// name, resolved when a line is logged.
type logName struct{ d *Daemon }

// LogValue returns the daemon's name at the time of the log line.
func (n logName) LogValue() slog.Value { return slog.StringValue(*n.d.logName.Load()) }

// setLogName names the daemon in the log lines that follow.
func (d *Daemon) setLogName(name string) { d.logName.Store(&name) }
