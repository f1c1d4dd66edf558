package jobck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Errors of the machine: sentinels callers test with errors.Is.
var (
	// ErrStale refuses an event for a round that is not the current one
	// (or a reply from a host not asked, or asked and answered already).
	ErrStale = errors.New("jobck: stale step")
	// ErrBusy refuses a checkpoint while another round runs.
	ErrBusy = errors.New("jobck: a checkpoint or rollback of the job is under way")
	// ErrBroken refuses a checkpoint of a job that lost tasks with a host
	// and has not rolled back since.
	ErrBroken = errors.New("jobck: the job lost tasks with a host and has not rolled back")
	// ErrLost ends a checkpoint round during which a host was lost.
	ErrLost = errors.New("jobck: a host was lost during the checkpoint")
	// ErrQuietTimeout ends a checkpoint round whose messages did not settle
	// in time.
	ErrQuietTimeout = errors.New("jobck: messages of the job still unacknowledged")
	// ErrNoTasks ends a checkpoint round that found no task of the job.
	ErrNoTasks = errors.New("jobck: no task of the job")
	// ErrEnded ends the round of a job that has ended.
	ErrEnded = errors.New("jobck: the job has ended")
	// ErrNoHosts refuses a round with no host to ask.
	ErrNoHosts = errors.New("jobck: no host")
)

// State is where the machine is.
type State uint8

// States; append only (they appear in transcripts).
const (
	Idle State = iota
	Pausing
	Quieting
	Writing
	Committing
	Killing
	Restoring
)

var stateNames = [...]string{"Idle", "Pausing", "Quieting", "Writing", "Committing", "Killing", "Restoring"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Kind is what a round does.
type Kind uint8

// Round kinds.
const (
	Checkpoint Kind = iota + 1
	Rollback
)

func (k Kind) String() string {
	switch k {
	case Checkpoint:
		return "checkpoint"
	case Rollback:
		return "rollback"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Round is a round's identity: the job, the checkpoint set it writes or
// goes back to, and the job's round count.
type Round struct {
	Job  uint64 `msgpack:"j"`
	Seq  uint64 `msgpack:"s"`
	Try  uint64 `msgpack:"t"`
	Kind Kind   `msgpack:"k"`
}

// IsZero reports whether r names no round.
func (r Round) IsZero() bool { return r == Round{} }

func (r Round) String() string {
	if r.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%v j%d seq %d try %d", r.Kind, r.Job, r.Seq, r.Try)
}

// Config bounds the machine. The zero value means the defaults.
type Config struct {
	// MinPause and MaxPause bound the pause budget (defaults 50 ms and
	// 5 s); Factor is the multiple of the observed safe point interval it
	// asks for (default 3).
	MinPause, MaxPause time.Duration
	Factor             float64
	// QuietTimeout is how long a round waits for the job's messages to be
	// acknowledged (default 5 s); QuietPoll is the first wait between two
	// questions, doubling up to 20 ms (default 100 µs).
	QuietTimeout time.Duration
	QuietPoll    time.Duration
	// EndLost makes a job that loses tasks with a host and has no
	// checkpoint to go back to end at once (ActUnrecoverable with End
	// set): a job that asked for checkpoints counts on them. Without it
	// the job goes on without the lost tasks, as PVM's do.
	EndLost bool
}

func (c Config) withDefaults() Config {
	if c.MinPause <= 0 {
		c.MinPause = 50 * time.Millisecond
	}
	if c.MaxPause <= 0 {
		c.MaxPause = 5 * time.Second
	}
	c.MaxPause = max(c.MaxPause, c.MinPause)
	if c.Factor <= 1 {
		c.Factor = 3
	}
	if c.QuietTimeout <= 0 {
		c.QuietTimeout = 5 * time.Second
	}
	if c.QuietPoll <= 0 {
		c.QuietPoll = 100 * time.Microsecond
	}
	return c
}

// maxQuietPoll caps the wait between two quiet questions.
const maxQuietPoll = 20 * time.Millisecond

// EventKind says what an event reports.
type EventKind uint8

// Event kinds; append only.
const (
	// EvCheckpoint asks for a checkpoint of the job on Hosts.
	EvCheckpoint EventKind = iota + 1
	// EvPaused: Host paused the job's tasks (or failed to: Err), having
	// seen safe points every SafeEvery.
	EvPaused
	// EvQuiet: Host has Pending unacknowledged messages of the job and
	// Running tasks not paused; Tasks is how many tasks of the job it has.
	EvQuiet
	// EvWritten: Host wrote its tasks' checkpoints (Tasks of them).
	EvWritten
	// EvCommitted: the manifest is written (or not: Err).
	EvCommitted
	// EvHostLost: Host was lost; Hosts are the ones left.
	EvHostLost
	// EvKilled: Host ended the job's tasks.
	EvKilled
	// EvRestored: the set is restored on the hosts left (or not: Err).
	EvRestored
	// EvTick: time passes.
	EvTick
	// EvEnded: the job has ended.
	EvEnded
)

var eventNames = [...]string{"", "checkpoint", "paused", "quiet", "written", "committed", "host-lost", "killed", "restored", "tick", "ended"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is an input of the machine. Now is the current time; Round, for a
// reply, the round it answers.
type Event struct {
	Kind      EventKind
	Now       time.Time
	Round     Round
	Host      task.HostID
	Hosts     []task.HostID
	Err       error
	SafeEvery time.Duration
	Pending   int
	Running   int
	Tasks     int
	// Floor (EvCheckpoint) is the largest set number present in the
	// job's checkpoint directory, complete or not (0: none): the new set
	// takes a number above it, so that it never collides with what an
	// abandoned round, an earlier machine or a discard that did not
	// happen left on disk.
	Floor uint64
}

// ActionKind says what the driver is to do.
type ActionKind uint8

// Action kinds; append only.
const (
	// ActPause: ask Hosts to hold the job's tasks at safe points within
	// Budget; each answers with EvPaused.
	ActPause ActionKind = iota + 1
	// ActQuiet: at At, ask Hosts for pending messages and running tasks;
	// each answers with EvQuiet.
	ActQuiet
	// ActWrite: ask Hosts to write their tasks' checkpoints into set
	// Round.Seq; each answers with EvWritten.
	ActWrite
	// ActCommit: write the manifest of set Round.Seq; answer EvCommitted.
	ActCommit
	// ActResume: let the job's tasks on Hosts go on (no answer).
	ActResume
	// ActDiscard: remove the incomplete set Round.Seq (no answer).
	ActDiscard
	// ActDone: the checkpoint round is over, set Round.Seq complete or
	// not (Err).
	ActDone
	// ActKill: ask Hosts to end the job's tasks quietly and drop their
	// messages; each answers with EvKilled.
	ActKill
	// ActRestore: start set Round.Seq on Hosts; answer EvRestored.
	ActRestore
	// ActRolledBack: the rollback round is over, the job back at set
	// Round.Seq or lost (Err).
	ActRolledBack
	// ActUnrecoverable: the job lost tasks with Host and has no
	// checkpoint to go back to; with End set it is to end at once (its
	// other tasks killed), else it goes on without the lost tasks.
	ActUnrecoverable
)

var actionNames = [...]string{"", "pause", "quiet", "write", "commit", "resume", "discard", "done", "kill", "restore", "rolled-back", "unrecoverable"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k != 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is an output of the machine, for the driver to carry out.
type Action struct {
	Kind   ActionKind
	Round  Round
	Hosts  []task.HostID
	Host   task.HostID
	Budget time.Duration
	At     time.Time
	Err    error
	// Tasks is how many tasks the set holds (ActDone).
	Tasks int
	// End: the job is to end (ActUnrecoverable).
	End bool
}

func (a Action) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v [%v]", a.Kind, a.Round)
	if len(a.Hosts) > 0 {
		fmt.Fprintf(&b, " hosts=%v", hostList(a.Hosts))
	}
	if a.Host != 0 {
		fmt.Fprintf(&b, " host=%v", a.Host)
	}
	if a.Budget > 0 {
		fmt.Fprintf(&b, " budget=%v", a.Budget)
	}
	if !a.At.IsZero() {
		fmt.Fprintf(&b, " at=%d", a.At.UnixMicro())
	}
	if a.Kind == ActDone && a.Err == nil {
		fmt.Fprintf(&b, " tasks=%d", a.Tasks)
	}
	if a.End {
		b.WriteString(" end")
	}
	if a.Err != nil {
		fmt.Fprintf(&b, " err=%q", a.Err.Error())
	}
	return b.String()
}

func hostList(hs []task.HostID) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return strings.Join(s, ",")
}

// Machine coordinates one job's checkpoints and rollbacks. It is not safe
// for concurrent use: one driver feeds it.
type Machine struct {
	cfg   Config
	job   uint64
	state State
	round Round
	tries uint64
	seq   uint64 // the newest complete set (0: none)
	// top is the largest set number of a checkpoint round abandoned when
	// a host was lost or after its write step began: its writers may
	// still be at work on the set, so a later round never takes that
	// number again.
	top uint64
	gen int // rollbacks completed

	hosts   []task.HostID        // the round's hosts
	waiting map[task.HostID]bool // hosts asked in the current step, not yet answered
	// Quieting: the hosts to pause again, and the sums of the step.
	repause          []task.HostID
	runningOn        []task.HostID
	pending, running int
	tasks            int
	quietBy          time.Time
	poll             time.Duration
	quietAt          time.Time // when the next quiet question is due (zero: none)
	failed           error     // the first failure of the current step
	// Killing: the hosts whose kill failed in this step, and how many
	// times the kill has been asked in this round.
	killFailed []task.HostID
	kills      int
	// restores is how many restores of the current rollback have failed.
	restores int

	broken bool // lost tasks with a host and not rolled back since
	again  bool // a host was lost during a rollback: roll back once more
	ended  bool

	interval time.Duration // longest safe point interval of the latest round that reported one
	roundMax time.Duration // the current round's longest report
}

// New returns the machine of job, whose newest complete checkpoint is set
// seq (0: none).
func New(job, seq uint64, cfg Config) *Machine {
	return &Machine{cfg: cfg.withDefaults(), job: job, seq: seq}
}

// State is where the machine is.
func (m *Machine) State() State { return m.state }

// Round is the current round (zero when Idle).
func (m *Machine) Round() Round { return m.round }

// Seq is the newest complete checkpoint set.
func (m *Machine) Seq() uint64 { return m.seq }

// Next is the number the next checkpoint round's set takes, given the
// largest set number on disk (floor): one above the newest complete set,
// the set of a round abandoned when a host was lost, and floor.
func (m *Machine) Next(floor uint64) uint64 { return max(m.seq, m.top, floor) + 1 }

// Broken reports whether the job lost tasks with a host and has not rolled
// back since.
func (m *Machine) Broken() bool { return m.broken }

// Rollbacks is how many rollbacks have completed.
func (m *Machine) Rollbacks() int { return m.gen }

// Budget is the pause budget the next round asks for.
func (m *Machine) Budget() time.Duration {
	b := m.cfg.MinPause
	if m.interval > 0 {
		b = max(b, time.Duration(m.cfg.Factor*float64(m.interval)))
	}
	return min(b, m.cfg.MaxPause)
}

// Step feeds an event and returns the actions to carry out, in order. An
// event the machine refuses (stale, busy, broken) returns an error and
// changes nothing.
func (m *Machine) Step(ev Event) ([]Action, error) {
	switch ev.Kind {
	case EvCheckpoint:
		return m.startCheckpoint(ev)
	case EvHostLost:
		return m.hostLost(ev), nil
	case EvTick:
		return m.tick(ev.Now), nil
	case EvEnded:
		return m.end(), nil
	case EvPaused, EvQuiet, EvWritten, EvKilled:
		if err := m.reply(ev); err != nil {
			return nil, err
		}
	case EvCommitted, EvRestored:
		if ev.Round != m.round || m.round.IsZero() {
			return nil, fmt.Errorf("%v for %v (current %v): %w", ev.Kind, ev.Round, m.round, ErrStale)
		}
		if (ev.Kind == EvCommitted) != (m.state == Committing) || (ev.Kind == EvRestored) != (m.state == Restoring) {
			return nil, fmt.Errorf("%v in state %v: %w", ev.Kind, m.state, ErrStale)
		}
	default:
		return nil, fmt.Errorf("jobck: unknown event %v", ev.Kind)
	}
	return m.advance(ev), nil
}

// reply checks a host's answer belongs to the current step and records it.
func (m *Machine) reply(ev Event) error {
	if m.round.IsZero() || ev.Round != m.round {
		return fmt.Errorf("%v from %v for %v (current %v): %w", ev.Kind, ev.Host, ev.Round, m.round, ErrStale)
	}
	want := map[EventKind]State{EvPaused: Pausing, EvQuiet: Quieting, EvWritten: Writing, EvKilled: Killing}[ev.Kind]
	if ev.Kind == EvPaused && m.state == Quieting && len(m.repause) > 0 {
		want = Quieting
	}
	if m.state != want || !m.waiting[ev.Host] {
		return fmt.Errorf("%v from %v in state %v: %w", ev.Kind, ev.Host, m.state, ErrStale)
	}
	delete(m.waiting, ev.Host)
	if ev.Kind == EvKilled && ev.Err != nil {
		m.killFailed = append(m.killFailed, ev.Host)
	}
	if ev.Err != nil && m.failed == nil {
		m.failed = fmt.Errorf("%v: %w", ev.Host, ev.Err)
	}
	return nil
}

func (m *Machine) startCheckpoint(ev Event) ([]Action, error) {
	switch {
	case m.ended:
		return nil, ErrEnded
	case m.state != Idle:
		return nil, fmt.Errorf("%v: %w", m.round, ErrBusy)
	case m.broken:
		return nil, ErrBroken
	case len(ev.Hosts) == 0:
		return nil, ErrNoHosts
	}
	m.begin(Checkpoint, m.Next(ev.Floor), ev.Hosts)
	m.state = Pausing
	m.roundMax = 0
	return []Action{{Kind: ActPause, Round: m.round, Hosts: m.ask(m.hosts), Budget: m.Budget()}}, nil
}

// maxKills is how many times a rollback asks a host to kill the job's
// tasks before it restores regardless, and maxRestores how many times a
// rollback is tried before the job is given up.
const (
	maxKills    = 5
	maxRestores = 3
)

// begin starts a round of kind on hosts.
func (m *Machine) begin(k Kind, seq uint64, hosts []task.HostID) {
	m.tries++
	m.round = Round{Job: m.job, Seq: seq, Try: m.tries, Kind: k}
	m.hosts = slices.Sorted(slices.Values(hosts))
	m.hosts = slices.Compact(m.hosts)
	m.failed = nil
	m.quietAt = time.Time{}
}

// ask records that hosts are asked in the current step and returns them.
func (m *Machine) ask(hosts []task.HostID) []task.HostID {
	m.waiting = make(map[task.HostID]bool, len(hosts))
	for _, h := range hosts {
		m.waiting[h] = true
	}
	return slices.Clone(hosts)
}

// advance moves on once the current step has every answer.
func (m *Machine) advance(ev Event) []Action {
	switch ev.Kind {
	case EvPaused:
		m.roundMax = max(m.roundMax, ev.SafeEvery)
		if len(m.waiting) > 0 {
			return nil
		}
		if m.roundMax > 0 {
			m.interval = m.roundMax
		}
		if m.failed != nil {
			return m.abort(m.failed)
		}
		if m.state == Pausing {
			m.state = Quieting
			m.quietBy = ev.Now.Add(m.cfg.QuietTimeout)
			m.poll = m.cfg.QuietPoll
		}
		return m.quiet(ev.Now, ev.Now)
	case EvQuiet:
		m.pending += ev.Pending
		m.running += ev.Running
		m.tasks += ev.Tasks
		if ev.Running > 0 {
			m.runningOn = append(m.runningOn, ev.Host)
		}
		if len(m.waiting) > 0 {
			return nil
		}
		if m.failed != nil {
			return m.abort(m.failed)
		}
		switch {
		case m.pending == 0 && m.running == 0 && m.tasks == 0:
			return m.abort(ErrNoTasks)
		case m.pending == 0 && m.running == 0:
			m.state = Writing
			m.tasks = 0
			return []Action{{Kind: ActWrite, Round: m.round, Hosts: m.ask(m.hosts)}}
		case ev.Now.After(m.quietBy):
			return m.abort(fmt.Errorf("%d after %v: %w", m.pending, m.cfg.QuietTimeout, ErrQuietTimeout))
		}
		at := ev.Now.Add(m.poll)
		m.poll = min(2*m.poll, maxQuietPoll)
		return m.quiet(ev.Now, at)
	case EvWritten:
		m.tasks += ev.Tasks
		if len(m.waiting) > 0 {
			return nil
		}
		if m.failed != nil {
			return m.abort(m.failed)
		}
		m.state = Committing
		return []Action{{Kind: ActCommit, Round: m.round}}
	case EvCommitted:
		if ev.Err != nil {
			return m.abort(ev.Err)
		}
		r := m.round
		m.seq = r.Seq
		acts := []Action{
			{Kind: ActResume, Round: r, Hosts: slices.Clone(m.hosts)},
			{Kind: ActDone, Round: r, Tasks: m.tasks},
		}
		m.idle()
		return acts
	case EvKilled:
		if len(m.waiting) > 0 {
			return nil
		}
		// A host that did not answer (a call timed out, a host frozen for
		// a while) may have kept tasks of the job: it is asked again, up
		// to maxKills times in all; the kill is idempotent. After that the
		// restore finds any task still there and fails, and says so.
		if len(m.killFailed) > 0 && m.kills < maxKills {
			again := slices.Sorted(slices.Values(m.killFailed))
			m.killFailed, m.failed = nil, nil
			m.kills++
			return []Action{{Kind: ActKill, Round: m.round, Hosts: m.ask(again)}}
		}
		m.killFailed = nil
		m.state = Restoring
		return []Action{{Kind: ActRestore, Round: m.round, Hosts: slices.Clone(m.hosts)}}
	case EvRestored:
		r := m.round
		if ev.Err != nil && m.restores+1 < maxRestores && !m.ended {
			// A call that timed out (a host slow for a while) fails the
			// restore, which dropped what it staged: the rollback starts
			// again, killing what the restore may have started.
			m.restores++
			m.idle()
			return m.startRollback(m.hosts)
		}
		m.idle()
		m.restores = 0
		if ev.Err != nil {
			return []Action{{Kind: ActRolledBack, Round: r, Err: ev.Err}}
		}
		m.gen++
		acts := []Action{{Kind: ActRolledBack, Round: r}}
		if m.again && !m.ended {
			m.again = false
			return append(acts, m.startRollback(m.hosts)...)
		}
		m.broken = false
		return acts
	}
	return nil
}

// quiet re-pauses the hosts that reported running tasks, then asks every
// host again at at (after the re-pause answers, if any).
func (m *Machine) quiet(now, at time.Time) []Action {
	again := m.runningOn
	slices.Sort(again)
	m.pending, m.running, m.tasks, m.runningOn = 0, 0, 0, nil
	if len(again) > 0 {
		m.repause = again
		return []Action{{Kind: ActPause, Round: m.round, Hosts: m.ask(again), Budget: m.Budget()}}
	}
	m.repause = nil
	if at.After(now) {
		m.quietAt = at
		m.waiting = nil
		return []Action{{Kind: ActQuiet, Round: m.round, At: at}}
	}
	m.quietAt = time.Time{}
	return []Action{{Kind: ActQuiet, Round: m.round, Hosts: m.ask(m.hosts)}}
}

// abort ends a checkpoint round: the tasks go on and the set is removed.
func (m *Machine) abort(err error) []Action {
	r := m.round
	if r.Kind == Checkpoint && (m.state == Writing || m.state == Committing) {
		// Writers may have made the set's directory, and a commit that
		// failed here may have happened there: the number is never taken
		// again (Next).
		m.top = max(m.top, r.Seq)
	}
	acts := []Action{
		{Kind: ActResume, Round: r, Hosts: slices.Clone(m.hosts)},
		{Kind: ActDiscard, Round: r},
		{Kind: ActDone, Round: r, Err: err},
	}
	m.idle()
	return acts
}

func (m *Machine) idle() {
	m.state = Idle
	m.round = Round{}
	m.waiting = nil
	m.repause, m.runningOn = nil, nil
	m.quietAt = time.Time{}
	m.pending, m.running, m.tasks = 0, 0, 0
	m.failed = nil
}

// tick carries out a quiet question that has come due.
func (m *Machine) tick(now time.Time) []Action {
	if m.state != Quieting || m.quietAt.IsZero() || now.Before(m.quietAt) {
		return nil
	}
	m.quietAt = time.Time{}
	return []Action{{Kind: ActQuiet, Round: m.round, Hosts: m.ask(m.hosts)}}
}

// hostLost breaks the job: a checkpoint under way is abandoned, and the
// job rolls back to its newest set, or is reported unrecoverable.
func (m *Machine) hostLost(ev Event) []Action {
	if m.ended {
		return nil
	}
	m.broken = true
	var acts []Action
	switch m.state {
	case Killing, Restoring:
		// Roll back once more when this one is over, without the host.
		m.again = true
		m.hosts = slices.DeleteFunc(m.hosts, func(h task.HostID) bool { return h == ev.Host })
		if m.state == Killing && m.waiting[ev.Host] {
			delete(m.waiting, ev.Host)
			if len(m.waiting) == 0 {
				return m.advance(Event{Kind: EvKilled, Now: ev.Now, Round: m.round})
			}
		}
		return nil
	case Idle:
	default:
		m.top = max(m.top, m.round.Seq)
		acts = m.abort(fmt.Errorf("%v: %w", ev.Host, ErrLost))
	}
	if m.seq == 0 {
		return append(acts, Action{Kind: ActUnrecoverable, Host: ev.Host, End: m.cfg.EndLost})
	}
	hosts := slices.DeleteFunc(slices.Clone(ev.Hosts), func(h task.HostID) bool { return h == ev.Host })
	return append(acts, m.startRollback(hosts)...)
}

func (m *Machine) startRollback(hosts []task.HostID) []Action {
	m.begin(Rollback, m.seq, hosts)
	m.state = Killing
	m.killFailed, m.kills = nil, 1
	if len(m.hosts) == 0 {
		r := m.round
		m.idle()
		return []Action{{Kind: ActRolledBack, Round: r, Err: ErrNoHosts}}
	}
	return []Action{{Kind: ActKill, Round: m.round, Hosts: m.ask(m.hosts)}}
}

// end records that the job has ended: a checkpoint under way is abandoned
// and nothing starts after.
func (m *Machine) end() []Action {
	if m.ended {
		return nil
	}
	m.ended = true
	switch m.state {
	case Idle, Killing, Restoring:
		return nil
	}
	return m.abort(ErrEnded)
}
