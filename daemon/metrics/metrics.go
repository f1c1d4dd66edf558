package metrics

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every dpvm metric.
const Namespace = "dpvm"

// Outcomes of moves, job checkpoints and rollbacks (label "outcome").
const (
	// OutcomeCommitted: the move committed; the task runs at its
	// destination.
	OutcomeCommitted = "committed"
	// OutcomeAborted: the task was frozen, then the move aborted and the
	// task runs at its origin again.
	OutcomeAborted = "aborted"
	// OutcomeFailed: the move was refused before the task froze (no safe
	// point in time, unknown host, already moving…), or a checkpoint or
	// rollback failed.
	OutcomeFailed = "failed"
	// OutcomeOK: a job checkpoint or rollback completed.
	OutcomeOK = "ok"
)

// Metrics is one daemon's metrics, in a registry of their own. The zero
// value is not usable; call New. A nil *Metrics is valid and records
// nothing.
type Metrics struct {
	reg    *prometheus.Registry
	events *Events
	opts   Options

	mu     sync.Mutex
	peers  map[string]*Peer // by peer host name; entries are never removed while the host is in the VM
	source func() Snapshot  // the daemon's state, read at scrape time (nil: none yet)

	moves         *prometheus.CounterVec
	freeze        *prometheus.HistogramVec
	moveSeconds   *prometheus.HistogramVec
	ckptBytes     *prometheus.HistogramVec
	transfer      *prometheus.HistogramVec
	transfers     *prometheus.CounterVec
	jobCkpts      *prometheus.CounterVec
	jobCkptSecs   prometheus.Histogram
	rollbacks     *prometheus.CounterVec
	rollbackSecs  prometheus.Histogram
	schedChecks   prometheus.Counter
	schedListings prometheus.Counter
	schedDecide   *prometheus.CounterVec
	forged        *prometheus.CounterVec
}

// Options tunes New. The zero value is the default.
type Options struct {
	// NoRuntime leaves out the Go runtime and process collectors (tests
	// that want a small exposition).
	NoRuntime bool
	// Events is how many move events the event log keeps (default 256).
	Events int
}

// New returns a daemon's metrics, registered in a fresh registry with the
// Go runtime and process collectors.
func New(o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), peers: map[string]*Peer{}, events: NewEvents(o.Events), opts: o}
	secs := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	size := prometheus.ExponentialBuckets(1<<10, 4, 12) // 1 KiB … 4 GiB
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "moves_total",
		Help: "Task moves this master ran, by mode (direct, indirect) and outcome (committed, aborted, failed)."},
		[]string{"mode", "outcome"})
	m.freeze = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "move_freeze_seconds",
		Help: "How long a moved task was stopped: from its suspension at a safe point until it ran again (committed) or resumed at its origin (aborted).", Buckets: secs},
		[]string{"mode"})
	m.moveSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "move_duration_seconds",
		Help: "A committed move from the request to the commit.", Buckets: secs}, []string{"mode"})
	m.ckptBytes = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "move_checkpoint_bytes",
		Help: "Size of the checkpoint of a committed move.", Buckets: size}, []string{"mode"})
	m.transfer = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "move_transfer_seconds",
		Help: "Writing a moving task's checkpoint at its origin: to the destination's stream (direct) or the shared directory (indirect).", Buckets: secs},
		[]string{"mode"})
	m.transfers = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "move_transfers_total",
		Help: "Checkpoint transfers this daemon made as a move's origin, by mode and outcome (ok, failed)."}, []string{"mode", "outcome"})
	m.jobCkpts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "job_checkpoints_total",
		Help: "Coordinated job checkpoints this master took, by outcome (ok, failed)."}, []string{"outcome"})
	m.jobCkptSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "job_checkpoint_duration_seconds",
		Help: "A completed coordinated job checkpoint, from the request to the manifest.", Buckets: secs})
	m.rollbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "job_rollbacks_total",
		Help: "Jobs this master rolled back to a checkpoint after losing a host, by outcome (ok, failed)."}, []string{"outcome"})
	m.rollbackSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "job_rollback_duration_seconds",
		Help: "A completed rollback, from the decision until every task runs again.", Buckets: secs})
	m.schedChecks = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "sched_checks_total",
		Help: "Dynamic-SED check periods the master ran."})
	m.schedListings = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "sched_listings_total",
		Help: "Checks that listed every host's processes (the others could decide nothing and skipped it)."})
	m.schedDecide = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "sched_decisions_total",
		Help: "Per-process outcomes of the scheduler's checks that listed: reason it is a candidate (delay, memory, users, or a '+' combination) and action (candidate: counted, not yet selected; migrate; stay: selected, nowhere better)."},
		[]string{"reason", "action"})
	m.forged = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "forged_claims_total",
		Help: "Claims about tasks refused because the daemon that sent them does not host the task, by kind (source, receiver, notice, act, exit) and peer host."},
		[]string{"kind", "peer"})
	m.reg.MustRegister(m.forged, m.moves, m.freeze, m.moveSeconds, m.ckptBytes, m.transfer, m.transfers,
		m.jobCkpts, m.jobCkptSecs, m.rollbacks, m.rollbackSecs, m.schedChecks, m.schedListings, m.schedDecide,
		stateCollector{m})
	if !o.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// ClaimRefused counts a claim about a task that peer, a daemon, does not
// host, refused (kind: what it claimed, as routing.ClaimKind names it).
func (m *Metrics) ClaimRefused(kind, peer string) {
	if m == nil {
		return
	}
	m.forged.WithLabelValues(kind, peer).Inc()
}

// Fresh returns new metrics made with the same options as m (nil for a
// nil m): one for each daemon of a virtual machine started from one
// configuration.
func (m *Metrics) Fresh() *Metrics {
	if m == nil {
		return nil
	}
	return New(m.opts)
}

// Registry is where the metrics are registered: the one Handler serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Events is the log of recent moves (nil for a nil *Metrics).
func (m *Metrics) Events() *Events {
	if m == nil {
		return nil
	}
	return m.events
}

// SetSource installs the function read at every scrape for the daemon's
// state. The daemon calls it once it can answer.
func (m *Metrics) SetSource(f func() Snapshot) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.source = f
	m.mu.Unlock()
}

// Peer counts the messages exchanged with one peer host. Its methods are
// atomic additions, safe for concurrent use and on a nil *Peer.
//
// The sending side (the goroutine writing to the connection) and the
// receiving side (the connection's reader) write different cache lines, and a Peer fills whole
// lines of its own, so that neither side's additions evict the other's, nor
// another Peer's.
type Peer struct {
	sent, bytesSent       atomic.Uint64
	_                     [cacheLine - 16]byte
	received, bytesRecved atomic.Uint64
	_                     [cacheLine - 16]byte
}

// cacheLine is the cache line size Peer pads to.
const cacheLine = 64

// Sent counts msgs messages of bytes payload bytes sent to the peer. The
// daemon counts per write to the connection, not per message.
func (p *Peer) Sent(msgs, bytes int) {
	if p == nil || msgs == 0 {
		return
	}
	p.sent.Add(uint64(msgs))
	p.bytesSent.Add(uint64(bytes))
}

// Received counts msgs messages of bytes payload bytes received from the
// peer. The daemon counts per frame, not per message.
func (p *Peer) Received(msgs, bytes int) {
	if p == nil || msgs == 0 {
		return
	}
	p.received.Add(uint64(msgs))
	p.bytesRecved.Add(uint64(bytes))
}

// Peer returns the counters of the peer host named host, made on first
// use. The daemon looks them up once per connection, not per message. The
// label's cardinality is the number of hosts the virtual machine has had.
func (m *Metrics) Peer(host string) *Peer {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[host]
	if p == nil {
		p = &Peer{}
		m.peers[host] = p
	}
	return p
}

// ForgetPeer drops the counters of a host that has left the virtual
// machine, so that the label set stays bounded by its current size.
func (m *Metrics) ForgetPeer(host string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.peers, host)
	m.mu.Unlock()
}

// Move describes one move, as the master saw it end.
type Move struct {
	// ID is the move's identifier, as in the logs of the daemons it
	// touched ("" where the daemon gives moves none).
	ID string `json:"move_id,omitempty"`
	// TID is the moved task; From and To are host names.
	TID  string `json:"tid"`
	From string `json:"from"`
	To   string `json:"to"`
	// Mode is "direct" or "indirect"; Outcome one of the Outcome
	// constants.
	Mode    string `json:"mode"`
	Outcome string `json:"outcome"`
	// Freeze is how long the task was stopped (zero when it never froze);
	// Duration the whole move.
	Freeze   time.Duration `json:"freeze_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Bytes is the checkpoint's size (0 when none was written).
	Bytes int64 `json:"checkpoint_bytes"`
	// Err says why a move did not commit.
	Err string `json:"error,omitempty"`
	// End is when the move ended.
	End time.Time `json:"end"`
}

// MoveEnded records a move the master ran: its count by mode and outcome,
// its freeze time, and for a committed one its duration and checkpoint
// size; and it adds the move to the event log.
func (m *Metrics) MoveEnded(mv Move) {
	if m == nil {
		return
	}
	m.moves.WithLabelValues(mv.Mode, mv.Outcome).Inc()
	if mv.Freeze > 0 {
		m.freeze.WithLabelValues(mv.Mode).Observe(mv.Freeze.Seconds())
	}
	if mv.Outcome == OutcomeCommitted {
		m.moveSeconds.WithLabelValues(mv.Mode).Observe(mv.Duration.Seconds())
		m.ckptBytes.WithLabelValues(mv.Mode).Observe(float64(mv.Bytes))
	}
	m.events.Add(mv)
}

// Transferred records a checkpoint transfer made at a move's origin: how
// long writing it took, and whether it succeeded.
func (m *Metrics) Transferred(mode string, took time.Duration, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.transfers.WithLabelValues(mode, OutcomeFailed).Inc()
		return
	}
	m.transfers.WithLabelValues(mode, OutcomeOK).Inc()
	m.transfer.WithLabelValues(mode).Observe(took.Seconds())
}

// JobCheckpointed records a coordinated checkpoint of job (master).
func (m *Metrics) JobCheckpointed(job uint64, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.events.AddJob(jobEvent(job, "checkpoint", took, err))
	if err != nil {
		m.jobCkpts.WithLabelValues(OutcomeFailed).Inc()
		return
	}
	m.jobCkpts.WithLabelValues(OutcomeOK).Inc()
	m.jobCkptSecs.Observe(took.Seconds())
}

// RolledBack records a rollback of job (master).
func (m *Metrics) RolledBack(job uint64, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.events.AddJob(jobEvent(job, "rollback", took, err))
	if err != nil {
		m.rollbacks.WithLabelValues(OutcomeFailed).Inc()
		return
	}
	m.rollbacks.WithLabelValues(OutcomeOK).Inc()
	m.rollbackSecs.Observe(took.Seconds())
}

func jobEvent(job uint64, kind string, took time.Duration, err error) JobEvent {
	j := JobEvent{Job: job, Kind: kind, Outcome: OutcomeOK, Duration: took, End: time.Now()}
	if err != nil {
		j.Outcome, j.Err = OutcomeFailed, err.Error()
	}
	return j
}

// Decision is one process's outcome in a scheduler check.
type Decision struct {
	// TID and Host name the process and where it ran.
	TID, Host string
	// Location is the location policy's answer for a selected process,
	// with its figures ("" when it was not selected).
	Location string
	// Reason is why it is a migration candidate ("delay", "memory",
	// "users", a '+' combination; "" when it is none).
	Reason string
	// Action is "candidate", "migrate" or "stay" ("" when the process is
	// no candidate: not counted).
	Action string
}

// SchedChecked records one scheduler check made at now (master): whether
// it listed the hosts' processes, and the decisions it made; the selected
// processes' go to the event log.
func (m *Metrics) SchedChecked(now time.Time, listed bool, decisions []Decision) {
	if m == nil {
		return
	}
	m.schedChecks.Inc()
	if !listed {
		return
	}
	m.schedListings.Inc()
	for _, d := range decisions {
		if d.Action == "" {
			continue
		}
		r := d.Reason
		if r == "" {
			r = "none"
		}
		m.schedDecide.WithLabelValues(r, d.Action).Inc()
		if d.Action != "candidate" {
			m.events.AddSched(SchedEvent{At: now, TID: d.TID, Host: d.Host, Reason: r, Decision: d.Location})
		}
	}
}

// sortedPeers returns the peers' names and counters in name order.
func (m *Metrics) sortedPeers() ([]string, []*Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.peers))
	for n := range m.peers {
		names = append(names, n)
	}
	sort.Strings(names)
	ps := make([]*Peer, len(names))
	for i, n := range names {
		ps[i] = m.peers[n]
	}
	return names, ps
}
