package master

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// ErrUnknownJob: an event named a job the node has no coordinator for.
var ErrUnknownJob = errors.New("master: no such job")

// ErrBadSet: a restarted job's set does not pair each task with a host.
var ErrBadSet = errors.New("master: malformed checkpoint set")

// ErrLost: a watched task was lost with its host (FxNotify's Err).
var ErrLost = errors.New("lost with its host")

// Config bounds the node. Timeouts must be valid for a move to start
// (move.Timeouts); the zero values of the others mean their defaults.
type Config struct {
	// Timeouts bound a move's steps; a checkpoint's calls take theirs
	// from them too: pause Budget+Step, quiet and resume Step, write
	// Transfer, kill 2×Step.
	Timeouts move.Timeouts
	// TickEvery is how often the move machine is ticked while moves are
	// under way (default 100 ms).
	TickEvery time.Duration
	// ResumeAttempts bounds how many times a round's resume is asked of
	// a host (default 5): a host whose call failed may never have heard
	// it, and a task left paused would never run again.
	ResumeAttempts int
	// Demand: routes on demand. A move's route goes to the task's origin,
	// old and new host, a restored task's to its origin and the hosts its
	// job is restored on, and a lost host is announced to every host
	// left. Without it every route goes to every host.
	Demand bool
	// MaxGroups, MaxGroupName and MaxGroupMembers bound the groups: how
	// many exist at once, a name's length in bytes, and the instances of
	// one group (0: no bound). A join or rejoin past one is refused with
	// ErrLimit.
	MaxGroups, MaxGroupName, MaxGroupMembers int
	// MaxWatchers bounds the watches on one task (0: no bound); a watch
	// past it is refused with ErrLimit.
	MaxWatchers int
}

func (c Config) withDefaults() Config {
	if c.TickEvery <= 0 {
		c.TickEvery = 100 * time.Millisecond
	}
	if c.ResumeAttempts <= 0 {
		c.ResumeAttempts = 5
	}
	return c
}

// Task is the registry's record of a task.
type Task struct {
	TID, Parent task.TID
	Type        string
	Job         uint64
	// Exited: it ended (or its incarnation was undone by a rollback).
	Exited bool
	// Killed: a kill was asked and it has not ended since.
	Killed bool
}

// Entry is one task's checkpoint in a set: the task and the host that
// wrote it (or, in a restore, the host it is placed on).
type Entry struct {
	TID  task.TID
	Host task.HostID
}

// watch is a task to be told of another's end, with the tag to use.
type watch struct {
	who task.TID
	tag int
}

// run is the node's record of a move: what a step's call carries besides
// the machine's action.
type run struct {
	typ      string
	job      uint64
	from, to task.HostID
}

// job is a job's coordinator and the sets it has written.
type job struct {
	mc      *jobck.Machine
	every   time.Duration      // the checkpoint period (0: none)
	timed   bool               // a checkpoint timer is set
	sets    map[uint64][]Entry // complete sets, entries in TID order
	pending map[uint64][]Entry // sets being written
	lostIn  task.HostID        // a host lost while a checkpoint round ran
	// groups is each complete set's group memberships, as they were at
	// its commit.
	groups map[uint64]map[string][]task.TID
	// The restore under way: where each task of the set goes, and at
	// which epoch.
	place []Entry
	epoch uint64
	// restored are the tasks of the set a restarted job started from
	// that the registry does not hold: the job's too.
	restored []task.TID
}

// Node is a virtual machine's master node. It is not safe for concurrent
// use.
type Node struct {
	cfg    Config
	hosts  []task.HostID // every host, in ID order
	lost   map[task.HostID]bool
	alive  []task.HostID // the hosts not lost (nil: to be listed)
	moves  *move.Machine
	routes *routing.Table

	tasks     map[task.TID]*Task
	order     []task.TID // every task registered, in order
	nextLocal map[task.HostID]uint32
	nextHost  int

	runs    map[move.ID]*run
	ticking bool
	jobs    map[uint64]*job

	groups  *groups              // groups and their barriers (groups.go)
	watches map[task.TID][]watch // who is told of each task's end

	out []Effect // the effects of the Step under way
}

// New returns a node for a virtual machine of hosts, with no task, no
// move and no job.
func New(cfg Config, hosts []task.HostID) *Node {
	n := &Node{
		cfg: cfg.withDefaults(), hosts: slices.Sorted(slices.Values(hosts)), lost: map[task.HostID]bool{},
		moves: move.New(0, 0), routes: routing.NewTable(),
		tasks: map[task.TID]*Task{}, nextLocal: map[task.HostID]uint32{},
		runs: map[move.ID]*run{}, jobs: map[uint64]*job{},
		watches: map[task.TID][]watch{},
	}
	n.groups = newGroups(n.cfg)
	return n
}

// Routes is the master's route table. The shell reads it; the node writes
// it.
func (n *Node) Routes() *routing.Table { return n.routes }

// Moves lists the moves under way, in ID order.
func (n *Node) Moves() []move.Move { return n.moves.Moves() }

// Epoch is the epoch clock: the largest epoch handed out or observed.
func (n *Node) Epoch() uint64 { return n.moves.Epoch() }

// Moving reports tid's move under way, if any.
func (n *Node) Moving(tid task.TID) (move.Move, bool) { return n.moves.Moving(tid) }

// Task is tid's record (nil: none). Read-only for the shell.
func (n *Node) Task(tid task.TID) *Task { return n.tasks[tid] }

// Order is every task registered, in order. Read-only for the shell.
func (n *Node) Order() []task.TID { return n.order }

// Members is group's members by instance (0: a free instance), a copy;
// task.ErrNoSuchGroup if it has none.
func (n *Node) Members(group string) ([]task.TID, error) { return n.groups.members(group) }

// Memberships lists the groups tid belongs to, with its instance in each,
// by group name.
func (n *Node) Memberships(tid task.TID) []Membership { return n.groups.memberships(tid) }

// GroupTasks lists every task that is a member of some group, each once.
func (n *Node) GroupTasks() []task.TID { return n.groups.all() }

// Arrived is how many members wait at group's open barrier (0: none is
// open).
func (n *Node) Arrived(group string) int {
	if gr := n.groups.m[group]; gr != nil && gr.barrier != nil {
		return len(gr.barrier.arrived)
	}
	return 0
}

// Lost reports whether host h is deemed lost.
func (n *Node) Lost(h task.HostID) bool { return n.lost[h] }

// Alive lists the hosts not deemed lost, in ID order. The list is kept
// until a host is lost (a spawn places each task with it); it is clipped,
// so that a caller's append copies it.
func (n *Node) Alive() []task.HostID {
	if n.alive == nil {
		for _, h := range n.hosts {
			if !n.lost[h] {
				n.alive = append(n.alive, h)
			}
		}
	}
	return slices.Clip(n.alive)
}

// JobState is job's coordinator's state (Idle for an unknown job).
func (n *Node) JobState(j uint64) jobck.State {
	if jb := n.jobs[j]; jb != nil {
		return jb.mc.State()
	}
	return jobck.Idle
}

// Round is job's coordinator's round under way (zero: none).
func (n *Node) Round(j uint64) jobck.Round {
	if jb := n.jobs[j]; jb != nil {
		return jb.mc.Round()
	}
	return jobck.Round{}
}

// RollingBack reports whether job's rollback is under way.
func (n *Node) RollingBack(j uint64) bool {
	s := n.JobState(j)
	return s == jobck.Killing || s == jobck.Restoring
}

// Sets is how many complete checkpoint sets job has.
func (n *Node) Sets(j uint64) int {
	if jb := n.jobs[j]; jb != nil {
		return len(jb.sets)
	}
	return 0
}

// EventKind is the kind of an Event.
type EventKind uint8

// Events. Each names the fields of Event it reads.
const (
	// EvSpawn: start Count tasks of Type for Parent in Job, on Host or,
	// with Host 0, placed round robin over the hosts not lost. Each gets
	// a TID and an FxStart.
	EvSpawn EventKind = iota + 1
	// EvExited: TID ended (FxExited if it had not); it leaves every
	// group, whether the registry holds it or not (a shell that keeps
	// its own registry feeds the ends of tasks the node never placed).
	EvExited
	// EvKill: end TID (FxKill; FxRefuse for an unknown task).
	EvKill
	// EvLocated: TID is in service again (a restore): a task killed
	// while it moved ends at once (FxKill).
	EvLocated
	// EvMove: move TID to Host (FxMoveStarted and the machine's first
	// actions; FxRefuse if it cannot start). For a task the registry does
	// not hold (a shell that keeps its own registry and routes), the
	// event names what the move starts from: the route (From, Epoch) and
	// the task's Type and Job.
	EvMove
	// EvMoveResult: the outcome (Outcome, Err) of step Step of Move.
	EvMoveResult
	// EvHostLost: Host is deemed lost.
	EvHostLost
	// EvJobStart: Job's coordinator starts, configured by Jobck. With
	// Round.Seq set, the job is restarted from its complete set Round.Seq:
	// the set's entries are TIDs[i] written on Hosts[i] (as long as each
	// other), its group memberships Groups; the job's rounds number on
	// from it, a rollback goes back to it, and its tasks are the job's
	// (the calls that name the job's tasks name them) though the registry
	// does not hold them. A restart whose entries do not pair is refused
	// (FxRefuse, ErrBadSet) and starts nothing.
	EvJobStart
	// EvJobEvery: Job is checkpointed every Every from now (0: no more);
	// a timer already set keeps running, at the new period.
	EvJobEvery
	// EvCk: Ck is an event of Job's coordinator (a host's answer to a
	// step, a checkpoint asked for, the job ended). For an EvWritten
	// answer, TIDs are the tasks whose checkpoints Ck.Host wrote; for
	// EvCheckpoint, Hosts default to those not lost and Floor is raised
	// to the node's newest set.
	EvCk
	// EvStaged: the tasks of Job's restore (FxRestore) are staged on the
	// hosts, or not (Err).
	EvStaged
	// EvResumed: Job's resume of Round at Host, attempt Attempt, was
	// answered (or not: Err).
	EvResumed
	// EvTimer: Timer is due.
	EvTimer
	// EvJoin: TID joins Group at its lowest free instance (FxAnswer with
	// the instance in Count; Err, and Count -1, for a member already, a
	// TID that names no task, or past a bound: ErrLimit).
	EvJoin
	// EvLeave: TID leaves Group (FxAnswer; Err task.ErrNoSuchGroup or
	// task.ErrNotInGroup).
	EvLeave
	// EvBarrier: TID, a member of Group, arrives at its barrier of Count
	// (0 or less: every member now). When it is the Count-th, FxRelease
	// names the others that waited, in their order of arrival, and TID
	// passes; before, nothing (TID waits); FxAnswer with Err refuses it
	// (no such group, not a member, a count other than the barrier's, or
	// waiting already). A member that leaves takes its arrival back.
	EvBarrier
	// EvWatch: Who is to be told, with Tag, of TID's end (FxNotify at
	// once if it has ended). Of a task the registry does not hold (a
	// shell that keeps its own registry, and tells a task's ordinary end
	// at its host), the node tells only its loss (EvTasksLost): Host is
	// where the shell's table places it, and with Host 0 (the shell
	// knows no live host of it) or a host lost, Who is told at once that
	// there is no such task (FxNotify, Err task.ErrNoSuchTask). A watch
	// past Config.MaxWatchers is refused (FxRefuse, ErrLimit); one
	// recorded has no effect.
	EvWatch
	// EvWithdraw: TID takes back its arrival at Group's barrier (its
	// wait was given up): FxAnswer, with Err ErrNotWaiting if it waits
	// in no barrier of the group (its barrier completed first).
	EvWithdraw
	// EvRejoin: TID is instance Count of Group again (a task restored
	// from a checkpoint): FxAnswer (Err if another task holds it, or
	// past a bound); an instance TID holds besides is freed.
	EvRejoin
	// EvHold: a kill of Job is under way: no move of its tasks starts
	// until the matching EvRelease (holds nest).
	EvHold
	// EvRelease: one EvHold of Job is over.
	EvRelease
	// EvDropJob: every move of Job's tasks ends, aborted with Err (the
	// job rolls back).
	EvDropJob
	// EvMoveReport: Host, registering again with a recovered master,
	// reports the moves it is the origin of that a previous master left
	// half done (Orphans) and the tasks it runs (TIDs); the epoch clock
	// is raised to Epoch and move IDs to MoveFloor. The moves are kept
	// until both their hosts are back (EvResolve).
	EvMoveReport
	// EvResolve: Hosts are in the virtual machine: every reported move
	// whose two hosts are among them is adopted and settled (the move
	// machine's actions follow).
	EvResolve
	// EvHostUp: Host is in the virtual machine (again): it is no longer
	// deemed lost, hears routes on demand, and placement, moves and job
	// checkpoints count it again (a host deemed lost that rejoined empty
	// under its old ID, as daemon/membership.go's readmit takes it back).
	EvHostUp
	// EvNextEpoch: the epoch clock is raised to Epoch and the epoch after
	// it handed out (FxAnswer with Epoch): a route the shell sets itself.
	EvNextEpoch
	// EvTasksLost: TIDs, tasks the registry does not hold that the
	// shell's table placed at Host, were lost with it (and not restored
	// elsewhere): the watchers of each are told (FxNotify, Err ErrLost)
	// and its watches dropped. TIDs watched by no one, and the
	// registry's tasks (whose end is an EvExited), are passed over
	// (Watched lists the tasks watched).
	EvTasksLost
	// EvUnwatch: the watches on TID are dropped, untold: a task the
	// registry does not hold ended where it ran, which told its watchers.
	EvUnwatch
)

var eventNames = [...]string{"", "spawn", "exited", "kill", "located", "move", "move-result", "host-lost",
	"job-start", "job-every", "ck", "staged", "resumed", "timer", "join", "leave", "barrier", "watch", "withdraw", "rejoin",
	"hold", "release", "drop-job", "move-report", "resolve", "host-up", "next-epoch", "tasks-lost", "unwatch"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one event of the master node. Kind says which fields count.
type Event struct {
	Kind   EventKind
	TID    task.TID
	Parent task.TID
	Job    uint64
	Type   string
	Count  int
	Host   task.HostID
	// Move result.
	Move    move.ID
	Step    move.Step
	Outcome move.Outcome
	Err     error
	// Jobs.
	Jobck   jobck.Config
	Every   time.Duration
	Ck      jobck.Event
	TIDs    []task.TID
	Round   jobck.Round
	Attempt int
	Timer   Timer
	// Groups (EvJobStart of a restarted job) are its set's memberships.
	Groups map[string][]task.TID
	// Groups and watches.
	Group string
	Who   task.TID
	Tag   int
	// Moves of tasks the registry does not hold (EvMove: the route it
	// starts from), a recovered master's reports (EvMoveReport) and the
	// epoch clock (EvNextEpoch).
	From      task.HostID
	Epoch     uint64
	Orphans   []move.Orphan
	MoveFloor move.ID
	Hosts     []task.HostID
}

func (e Event) String() string {
	s := e.Kind.String()
	switch e.Kind {
	case EvSpawn:
		s += fmt.Sprintf(" %d %s for %v job %d on %v", e.Count, e.Type, e.Parent, e.Job, e.Host)
	case EvExited, EvKill, EvLocated:
		s += " " + e.TID.String()
	case EvMove:
		s += fmt.Sprintf(" %v to %v", e.TID, e.Host)
		if e.From != 0 {
			s += fmt.Sprintf(" from %v e%d (%s job %d)", e.From, e.Epoch, e.Type, e.Job)
		}
	case EvHold, EvRelease, EvDropJob:
		s += fmt.Sprintf(" %d", e.Job)
	case EvMoveReport:
		s += fmt.Sprintf(" %v orphans %v running %v e%d %v", e.Host, e.Orphans, e.TIDs, e.Epoch, e.MoveFloor)
	case EvResolve:
		s += fmt.Sprintf(" %v", e.Hosts)
	case EvNextEpoch:
		s += fmt.Sprintf(" above e%d", e.Epoch)
	case EvMoveResult:
		s += fmt.Sprintf(" %v %v %v", e.Move, e.Step, e.Outcome)
	case EvHostLost, EvHostUp:
		s += " " + e.Host.String()
	case EvJobStart:
		s += fmt.Sprintf(" %d", e.Job)
		if e.Round.Seq != 0 {
			s += fmt.Sprintf(" from set %d %v on %v", e.Round.Seq, e.TIDs, e.Hosts)
		}
	case EvJobEvery:
		s += fmt.Sprintf(" %d every %v", e.Job, e.Every)
	case EvCk:
		s += fmt.Sprintf(" %d %v %v %v", e.Job, e.Ck.Kind, e.Ck.Round, e.Ck.Host)
	case EvStaged:
		s += fmt.Sprintf(" %d %v", e.Job, e.Round)
	case EvResumed:
		s += fmt.Sprintf(" %d %v %v attempt %d", e.Job, e.Round, e.Host, e.Attempt)
	case EvTimer:
		s += " " + e.Timer.String()
	case EvJoin, EvLeave, EvWithdraw:
		s += fmt.Sprintf(" %v %q", e.TID, e.Group)
	case EvRejoin:
		s += fmt.Sprintf(" %v %q as %d", e.TID, e.Group, e.Count)
	case EvBarrier:
		s += fmt.Sprintf(" %v %q of %d", e.TID, e.Group, e.Count)
	case EvWatch:
		s += fmt.Sprintf(" %v by %v tag %d", e.TID, e.Who, e.Tag)
		if e.Host != 0 {
			s += fmt.Sprintf(" at %v", e.Host)
		}
	case EvTasksLost:
		s += fmt.Sprintf(" %v %v", e.Host, e.TIDs)
	case EvUnwatch:
		s += " " + e.TID.String()
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// TimerKind is what a Timer is for.
type TimerKind uint8

// Timers.
const (
	// TimerMoves: tick the move machine (failed abort and commit steps
	// go again).
	TimerMoves TimerKind = iota + 1
	// TimerCheckpoint: Job's periodic checkpoint is due.
	TimerCheckpoint
	// TimerQuiet: Job's round asks its hosts again whether it is quiet.
	TimerQuiet
)

// Timer names a timer the node set (FxTimer) and is fed back (EvTimer).
type Timer struct {
	Kind TimerKind
	Job  uint64
}

func (t Timer) String() string {
	switch t.Kind {
	case TimerMoves:
		return "moves"
	case TimerCheckpoint:
		return fmt.Sprintf("checkpoint j%d", t.Job)
	case TimerQuiet:
		return fmt.Sprintf("quiet j%d", t.Job)
	}
	return fmt.Sprintf("timer(%d)", uint8(t.Kind))
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Effects. Each names the fields of Effect it sets.
const (
	// FxRefuse: the event was refused with Err; nothing changed.
	FxRefuse EffectKind = iota + 1
	// FxStart: start task TID of Type for Parent in Job on Host.
	FxStart
	// FxExited: TID has ended (its watchers are told, its groups let go).
	FxExited
	// FxKill: end TID's incarnation.
	FxKill
	// FxMoveStarted: Move of TID from From to Host has started.
	FxMoveStarted
	// FxMove: an action of the move machine (Move): a Call (whose task
	// is of Type in Job and comes From), a Finish or a Reject.
	FxMove
	// FxRoute: send TID's Route to Hosts, or to every host with All.
	// The node's table holds it already.
	FxRoute
	// FxHostGone: Host is deemed lost; tell Hosts (on demand: every host
	// left) that it is deleted.
	FxHostGone
	// FxJob: an action (Ck) of Job's coordinator, as it decided it: for
	// the shell's record. What it takes to carry it out follows it.
	FxJob
	// FxRound: Job's periodic checkpoint round began, or was refused
	// (Err).
	FxRound
	// FxCall: ask each of Hosts to do Call for Job's Round, within
	// Timeout (a pause within Budget; a quiet, write or kill of the
	// job's TIDs); each answer comes back as EvCk.
	FxCall
	// FxResume: ask Host to let Job's tasks go on after Round (attempt
	// Attempt) within Timeout; the answer comes back as EvResumed.
	FxResume
	// FxCommit: write the manifest of Job's set Round.Seq (Entries, in
	// TID order); the outcome comes back as EvCk (EvCommitted).
	FxCommit
	// FxDiscard: remove Job's incomplete set Round.Seq.
	FxDiscard
	// FxRestore: stage Job's set Round.Seq on the hosts, each entry on
	// its Entries' Host, at Epoch; the outcome comes back as EvStaged.
	FxRestore
	// FxGo: start the staged tasks of Job on Hosts (after their routes):
	// the set Round.Seq of Count tasks, at Epoch.
	FxGo
	// FxJobLost: Job is lost (Err): with Host set, it lost tasks with it
	// and had no set to go back to; else its rollback to Round.Seq
	// failed.
	FxJobLost
	// FxTimer: feed Timer back (EvTimer) at At.
	FxTimer
	// FxAnswer: the answer to a join (Count: the instance), a leave, a
	// withdrawal or a rejoin (Err), a barrier's refusal (Err), or the
	// epoch handed out (Epoch).
	FxAnswer
	// FxRelease: a barrier is complete; the tasks TIDs waited at it.
	FxRelease
	// FxNotify: tell To, with Tag, that TID has ended (Err: that it was
	// lost with its host, ErrLost, or names no task, task.ErrNoSuchTask).
	FxNotify
)

var effectNames = [...]string{"", "refuse", "start", "exited", "kill", "move-started", "move", "route", "host-gone",
	"job", "round", "call", "resume", "commit", "discard", "restore", "go", "job-lost", "timer",
	"answer", "release", "notify"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && k != 0 {
		return effectNames[k]
	}
	return fmt.Sprintf("effect(%d)", uint8(k))
}

// CallKind is a checkpoint step asked of hosts (FxCall).
type CallKind uint8

// Checkpoint calls.
const (
	CallPause CallKind = iota + 1
	CallQuiet
	CallWrite
	CallKill
)

var callNames = [...]string{"", "pause", "quiet", "write", "kill"}

func (k CallKind) String() string {
	if int(k) < len(callNames) && k != 0 {
		return callNames[k]
	}
	return fmt.Sprintf("call(%d)", uint8(k))
}

// Effect is something the master node wants done. Kind says which fields
// count.
type Effect struct {
	Kind   EffectKind
	TID    task.TID
	Parent task.TID
	Type   string
	Job    uint64
	Host   task.HostID
	From   task.HostID
	Hosts  []task.HostID
	All    bool
	Route  routing.Route
	Move   move.Action
	MoveID move.ID
	Ck     jobck.Action
	Call   CallKind
	Round  jobck.Round
	// Timeout bounds a call; Budget is a pause's.
	Timeout time.Duration
	Budget  time.Duration
	TIDs    []task.TID
	Entries []Entry
	Epoch   uint64
	Count   int
	Attempt int
	Timer   Timer
	At      time.Time
	// To and Tag (FxNotify) are who is told and with which tag.
	To  task.TID
	Tag int
	// Groups (FxCommit) are the group memberships the set records.
	Groups map[string][]task.TID
	Err    error
}

func (x Effect) String() string {
	s := x.Kind.String()
	switch x.Kind {
	case FxStart:
		s += fmt.Sprintf(" %v %s for %v job %d on %v", x.TID, x.Type, x.Parent, x.Job, x.Host)
	case FxExited, FxKill:
		s += " " + x.TID.String()
	case FxMoveStarted:
		s += fmt.Sprintf(" %v %v %v→%v", x.MoveID, x.TID, x.From, x.Host)
	case FxMove:
		s += " " + x.Move.String()
		if x.Move.Kind == move.Call {
			s += fmt.Sprintf(" (%s job %d from %v)", x.Type, x.Job, x.From)
		}
	case FxRoute:
		s += fmt.Sprintf(" %v %v e%d", x.TID, x.Route.Host, x.Route.Epoch)
		if x.Route.InTransit {
			s += " in transit"
		}
		if x.All {
			s += " to all"
		} else {
			s += fmt.Sprintf(" to %v", x.Hosts)
		}
	case FxHostGone:
		s += fmt.Sprintf(" %v tell %v", x.Host, x.Hosts)
	case FxJob:
		s += fmt.Sprintf(" %d %v", x.Job, x.Ck)
	case FxRound:
		s += fmt.Sprintf(" %d", x.Job)
	case FxCall:
		s += fmt.Sprintf(" %v %d [%v] %v in %v", x.Call, x.Job, x.Round, x.Hosts, x.Timeout)
		if x.Call == CallPause {
			s += fmt.Sprintf(" budget %v", x.Budget)
		}
		if x.Call == CallQuiet || x.Call == CallKill {
			s += fmt.Sprintf(" tids %v", x.TIDs)
		}
	case FxResume:
		s += fmt.Sprintf(" %d [%v] %v attempt %d in %v", x.Job, x.Round, x.Host, x.Attempt, x.Timeout)
	case FxCommit, FxDiscard:
		s += fmt.Sprintf(" %d seq %d %v", x.Job, x.Round.Seq, x.Entries)
		if len(x.Groups) > 0 {
			s += fmt.Sprintf(" groups %v", x.Groups)
		}
	case FxRestore:
		s += fmt.Sprintf(" %d seq %d e%d %v", x.Job, x.Round.Seq, x.Epoch, x.Entries)
	case FxGo:
		s += fmt.Sprintf(" %d seq %d e%d %d tasks on %v", x.Job, x.Round.Seq, x.Epoch, x.Count, x.Hosts)
	case FxJobLost:
		s += fmt.Sprintf(" %d %v", x.Job, x.Host)
	case FxTimer:
		s += fmt.Sprintf(" %v at %d", x.Timer, x.At.UnixMicro())
	case FxAnswer:
		s += fmt.Sprintf(" %d", x.Count)
		if x.Epoch != 0 {
			s += fmt.Sprintf(" e%d", x.Epoch)
		}
	case FxRelease:
		s += fmt.Sprintf(" %v", x.TIDs)
	case FxNotify:
		s += fmt.Sprintf(" %v to %v tag %d", x.TID, x.To, x.Tag)
	}
	if x.Err != nil {
		s += ": " + x.Err.Error()
	}
	return s
}

// Step feeds the node one event at time now and returns the effects the
// shell is to perform, in order. It is the node's one seam.
func (n *Node) Step(now time.Time, e Event) []Effect {
	n.out = nil
	switch e.Kind {
	case EvSpawn:
		n.spawn(e)
	case EvExited:
		n.exited(e.TID)
	case EvKill:
		switch t := n.tasks[e.TID]; {
		case t == nil:
			n.refuse(fmt.Errorf("%v: %w", e.TID, task.ErrNoSuchTask))
		case !t.Exited:
			t.Killed = true
			n.emit(Effect{Kind: FxKill, TID: e.TID})
		}
	case EvLocated:
		if t := n.tasks[e.TID]; t != nil && t.Killed {
			n.emit(Effect{Kind: FxKill, TID: e.TID})
		}
	case EvMove:
		n.startMove(now, e)
	case EvHold:
		n.moveStep(now, move.Event{Kind: move.Hold, Job: e.Job})
	case EvRelease:
		n.moveStep(now, move.Event{Kind: move.Release, Job: e.Job})
	case EvDropJob:
		n.moveStep(now, move.Event{Kind: move.DropJob, Job: e.Job, Err: e.Err})
	case EvMoveReport:
		n.moves.Observe(e.Epoch)
		n.moves.ObserveMove(e.MoveFloor)
		n.moveStep(now, move.Event{Kind: move.Report, Host: e.Host, Orphans: e.Orphans, Running: e.TIDs})
	case EvResolve:
		n.resolve(now, e.Hosts)
	case EvHostUp:
		if _, ok := slices.BinarySearch(n.hosts, e.Host); !ok && len(n.hosts) > 0 {
			n.hosts = append(n.hosts, e.Host)
			slices.Sort(n.hosts)
		}
		delete(n.lost, e.Host)
		n.alive = nil
	case EvNextEpoch:
		n.moves.Observe(e.Epoch)
		n.emit(Effect{Kind: FxAnswer, Epoch: n.moves.NextEpoch()})
	case EvMoveResult:
		n.moveStep(now, move.Event{Kind: move.Result, Move: e.Move, Step: e.Step, Outcome: e.Outcome, Err: e.Err})
	case EvHostLost:
		n.hostLost(now, e.Host)
	case EvJobStart:
		n.jobStart(e)
	case EvJobEvery:
		jb := n.jobs[e.Job]
		if jb == nil {
			n.refuse(fmt.Errorf("job %d: %w", e.Job, ErrUnknownJob))
			break
		}
		jb.every = e.Every
		if e.Every > 0 && !jb.timed {
			jb.timed = true
			n.emit(Effect{Kind: FxTimer, Timer: Timer{Kind: TimerCheckpoint, Job: e.Job}, At: now.Add(e.Every)})
		}
	case EvCk:
		n.ckEvent(now, e)
	case EvStaged:
		n.staged(now, e)
	case EvResumed:
		if e.Err != nil && e.Attempt < n.cfg.ResumeAttempts && !n.lost[e.Host] {
			n.emit(Effect{Kind: FxResume, Job: e.Job, Round: e.Round, Host: e.Host, Attempt: e.Attempt + 1, Timeout: n.cfg.Timeouts.Step})
		}
	case EvTimer:
		n.timer(now, e.Timer)
	case EvJoin:
		inst, err := n.groups.join(e.Group, e.TID)
		n.emit(Effect{Kind: FxAnswer, Count: inst, Err: err})
	case EvLeave:
		n.emit(Effect{Kind: FxAnswer, Err: n.groups.leave(e.Group, e.TID)})
	case EvRejoin:
		n.emit(Effect{Kind: FxAnswer, Count: e.Count, Err: n.groups.rejoin(e.Group, e.TID, e.Count)})
	case EvBarrier:
		others, done, err := n.groups.arrive(e.Group, e.TID, e.Count)
		switch {
		case err != nil:
			n.emit(Effect{Kind: FxAnswer, Err: err})
		case done:
			n.emit(Effect{Kind: FxRelease, TIDs: others})
		}
	case EvWithdraw:
		var err error
		if !n.groups.withdraw(e.Group, e.TID) {
			err = fmt.Errorf("%v in group %q: %w", e.TID, e.Group, ErrNotWaiting)
		}
		n.emit(Effect{Kind: FxAnswer, Err: err})
	case EvWatch:
		n.watch(e)
	case EvUnwatch:
		delete(n.watches, e.TID)
	case EvTasksLost:
		for _, tid := range e.TIDs {
			if n.tasks[tid] != nil {
				continue // the registry's: its end is an EvExited
			}
			for _, w := range n.watches[tid] {
				n.emit(Effect{Kind: FxNotify, TID: tid, To: w.who, Tag: w.tag, Err: ErrLost})
			}
			delete(n.watches, tid)
		}
	}
	out := n.out
	n.out = nil
	return out
}

func (n *Node) emit(x Effect)    { n.out = append(n.out, x) }
func (n *Node) refuse(err error) { n.emit(Effect{Kind: FxRefuse, Err: err}) }

// watch records e's watch on the end of e.TID, or tells it at once: a
// task of the registry that has ended, or one the registry does not hold
// that the shell places on no live host.
func (n *Node) watch(e Event) {
	t := n.tasks[e.TID]
	switch {
	case t != nil && t.Exited:
		n.emit(Effect{Kind: FxNotify, TID: e.TID, To: e.Who, Tag: e.Tag})
	case t == nil && (e.Host == 0 || n.lost[e.Host]):
		n.emit(Effect{Kind: FxNotify, TID: e.TID, To: e.Who, Tag: e.Tag, Err: task.ErrNoSuchTask})
	case n.cfg.MaxWatchers > 0 && len(n.watches[e.TID]) >= n.cfg.MaxWatchers:
		n.refuse(fmt.Errorf("notify on %v: %d registrations watch it, at most %d: %w", e.TID, n.cfg.MaxWatchers, n.cfg.MaxWatchers, ErrLimit))
	default:
		n.watches[e.TID] = append(n.watches[e.TID], watch{who: e.Who, tag: e.Tag})
	}
}

// Watched lists, in order, the tasks with watches on their end.
func (n *Node) Watched() []task.TID { return slices.Sorted(maps.Keys(n.watches)) }

// exited records that tid ended: its groups let go of it and its
// watchers are told.
func (n *Node) exited(tid task.TID) {
	n.groups.leaveAll(tid)
	t := n.tasks[tid]
	if t == nil || t.Exited {
		return
	}
	t.Exited = true
	n.emit(Effect{Kind: FxExited, TID: tid})
	for _, w := range n.watches[tid] {
		n.emit(Effect{Kind: FxNotify, TID: tid, To: w.who, Tag: w.tag})
	}
	delete(n.watches, tid)
}

// spawn registers and places e's tasks.
func (n *Node) spawn(e Event) {
	for range e.Count {
		h := e.Host
		if h == 0 {
			alive := n.Alive()
			if len(alive) == 0 {
				n.refuse(jobck.ErrNoHosts)
				return
			}
			h = alive[n.nextHost%len(alive)]
			n.nextHost++
		}
		n.nextLocal[h]++
		tid := task.NewTID(h, n.nextLocal[h])
		n.tasks[tid] = &Task{TID: tid, Parent: e.Parent, Type: e.Type, Job: e.Job}
		n.order = append(n.order, tid)
		n.emit(Effect{Kind: FxStart, TID: tid, Parent: e.Parent, Type: e.Type, Job: e.Job, Host: h})
	}
}

// startMove starts the move e asks for: of e.TID to e.Host.
func (n *Node) startMove(now time.Time, e Event) {
	tid, to := e.TID, e.Host
	t := n.tasks[tid]
	var r routing.Route
	switch {
	case t == nil && e.From != 0:
		// The shell keeps this task's record and route.
		t = &Task{TID: tid, Type: e.Type, Job: e.Job}
		r = routing.Route{Host: e.From, Epoch: e.Epoch}
	case t == nil || t.Exited:
		n.refuse(fmt.Errorf("%v: %w", tid, task.ErrNoSuchTask))
		return
	default:
		r = n.routes.Lookup(tid)
	}
	acts := n.moves.Step(now, move.Event{Kind: move.Start, Spec: move.Spec{
		TID: tid, From: r.Host, To: to, Epoch: r.Epoch, Job: t.Job, Timeouts: n.cfg.Timeouts,
	}})
	for _, a := range acts {
		if a.Kind == move.Reject {
			n.refuse(a.Err)
			return
		}
	}
	if len(acts) > 0 {
		n.runs[acts[0].Move] = &run{typ: t.Type, job: t.Job, from: r.Host, to: to}
		n.emit(Effect{Kind: FxMoveStarted, MoveID: acts[0].Move, TID: tid, From: r.Host, Host: to})
	}
	n.moveActions(now, acts)
}

// resolve settles the moves a previous master left half done whose two
// hosts are among hosts: each adopted move's record is made from the
// machine's (the task's type and job are the origin's to check).
func (n *Node) resolve(now time.Time, hosts []task.HostID) {
	acts := n.moves.Step(now, move.Event{Kind: move.Resolve, Hosts: hosts, Spec: move.Spec{Timeouts: n.cfg.Timeouts}})
	for _, a := range acts {
		if a.Kind != move.Call || n.runs[a.Move] != nil {
			continue
		}
		if mv, ok := n.moves.Moving(a.TID); ok && mv.ID == a.Move {
			r := &run{from: mv.From, to: mv.To, job: mv.Job}
			if t := n.tasks[a.TID]; t != nil {
				r.typ = t.Type
			}
			n.runs[a.Move] = r
		}
	}
	n.moveActions(now, acts)
}

// moveStep steps the move machine and translates its actions.
func (n *Node) moveStep(now time.Time, ev move.Event) {
	n.moveActions(now, n.moves.Step(now, ev))
}

// moveActions translates the move machine's actions into effects, and
// sets the tick's timer while moves are under way.
func (n *Node) moveActions(now time.Time, acts []move.Action) {
	for _, a := range acts {
		switch a.Kind {
		case move.Call:
			x := Effect{Kind: FxMove, Move: a, TID: a.TID, Host: a.Host}
			if r := n.runs[a.Move]; r != nil {
				x.Type, x.Job, x.From = r.typ, r.job, r.from
			}
			n.emit(x)
		case move.SetRoute:
			n.routes.Update(a.TID, a.Route)
			if !n.cfg.Demand {
				n.emit(Effect{Kind: FxRoute, TID: a.TID, Route: a.Route, All: true})
				break
			}
			to := []task.HostID{a.TID.Host(), a.Route.Host}
			if r := n.runs[a.Move]; r != nil {
				to = append(to, r.from, r.to)
			}
			n.emit(Effect{Kind: FxRoute, TID: a.TID, Route: a.Route, Hosts: n.tell(to)})
		case move.Finish:
			delete(n.runs, a.Move)
			n.emit(Effect{Kind: FxMove, Move: a, TID: a.TID})
		case move.Reject:
			n.emit(Effect{Kind: FxMove, Move: a})
		}
	}
	if !n.ticking && len(n.moves.Moves()) > 0 {
		n.ticking = true
		n.emit(Effect{Kind: FxTimer, Timer: Timer{Kind: TimerMoves}, At: now.Add(n.cfg.TickEvery)})
	}
}

// tell is the hosts of to that are to hear a route: once each, in ID
// order, known (when the node was given its hosts) and not lost.
func (n *Node) tell(to []task.HostID) []task.HostID {
	slices.Sort(to)
	to = slices.Compact(to)
	out := to[:0]
	for _, h := range to {
		if _, ok := slices.BinarySearch(n.hosts, h); (ok || len(n.hosts) == 0) && h != 0 && !n.lost[h] {
			out = append(out, h)
		}
	}
	return out
}

// hostLost deems host h lost: its moves end, and each job with tasks
// rolls back (or ends, or goes on without them) as its coordinator says.
func (n *Node) hostLost(now time.Time, h task.HostID) {
	n.lost[h] = true
	n.alive = nil
	gone := Effect{Kind: FxHostGone, Host: h}
	if n.cfg.Demand {
		for _, o := range n.hosts {
			if o != h && !n.lost[o] {
				gone.Hosts = append(gone.Hosts, o)
			}
		}
	}
	n.emit(gone)
	n.moveStep(now, move.Event{Kind: move.HostLost, Host: h})
	for _, j := range slices.Sorted(maps.Keys(n.jobs)) {
		jb := n.jobs[j]
		if jb.mc.State() != jobck.Idle && !n.RollingBack(j) {
			jb.lostIn = h
		}
		n.ckStep(now, j, jobck.Event{Kind: jobck.EvHostLost, Now: now, Host: h, Hosts: append(n.Alive(), h)}, true)
	}
}

// timer handles a timer that is due.
func (n *Node) timer(now time.Time, t Timer) {
	switch t.Kind {
	case TimerMoves:
		n.ticking = false
		n.moveStep(now, move.Event{Kind: move.Tick})
	case TimerCheckpoint:
		jb := n.jobs[t.Job]
		if jb == nil {
			return
		}
		if jb.every <= 0 {
			jb.timed = false
			return
		}
		if jb.mc.State() == jobck.Idle {
			acts, err := jb.mc.Step(jobck.Event{Kind: jobck.EvCheckpoint, Now: now, Hosts: n.Alive(), Floor: jb.floor()})
			n.emit(Effect{Kind: FxRound, Job: t.Job, Err: err})
			if err == nil {
				n.ckActions(now, t.Job, acts)
			}
		}
		n.emit(Effect{Kind: FxTimer, Timer: t, At: now.Add(jb.every)})
	case TimerQuiet:
		if n.jobs[t.Job] != nil {
			n.ckStep(now, t.Job, jobck.Event{Kind: jobck.EvTick, Now: now}, false)
		}
	}
}

// floor is the largest set number the job has, complete or being
// written.
func (jb *job) floor() uint64 {
	var f uint64
	for s := range jb.sets {
		f = max(f, s)
	}
	for s := range jb.pending {
		f = max(f, s)
	}
	return f
}

// ckEvent feeds a job's coordinator an event from the shell.
func (n *Node) ckEvent(now time.Time, e Event) {
	jb := n.jobs[e.Job]
	if jb == nil {
		n.refuse(fmt.Errorf("job %d: %w", e.Job, ErrUnknownJob))
		return
	}
	ev := e.Ck
	ev.Now = now
	switch ev.Kind {
	case jobck.EvCheckpoint:
		if ev.Hosts == nil {
			ev.Hosts = n.Alive()
		}
		ev.Floor = max(ev.Floor, jb.floor())
	case jobck.EvCommitted:
		if ev.Err != nil {
			delete(jb.groups, ev.Round.Seq)
		}
		if ev.Err == nil {
			if set, ok := jb.pending[ev.Round.Seq]; ok {
				delete(jb.pending, ev.Round.Seq)
				slices.SortFunc(set, func(x, y Entry) int { return cmp.Compare(x.TID, y.TID) })
				jb.sets[ev.Round.Seq] = set
			}
		}
	}
	acts, err := jb.mc.Step(ev)
	if err != nil && !errors.Is(err, jobck.ErrStale) {
		n.refuse(fmt.Errorf("job checkpoint machine: %w", err))
	}
	if err == nil && ev.Kind == jobck.EvWritten && ev.Err == nil {
		if set, ok := jb.pending[ev.Round.Seq]; ok {
			for _, tid := range e.TIDs {
				set = append(set, Entry{TID: tid, Host: ev.Host})
			}
			jb.pending[ev.Round.Seq] = set
		}
	}
	n.ckActions(now, e.Job, acts)
}

// ckStep steps job j's coordinator with an event of the node's own (a
// host lost, a timer, an outcome it decided); report says whether an
// error of the machine is the shell's to hear (FxRefuse).
func (n *Node) ckStep(now time.Time, j uint64, ev jobck.Event, report bool) {
	ev.Now = now
	acts, err := n.jobs[j].mc.Step(ev)
	if err != nil && report {
		n.refuse(fmt.Errorf("job checkpoint machine: %w", err))
	}
	n.ckActions(now, j, acts)
}

// ckActions translates job j's coordinator's actions into effects, each
// recorded (FxJob) before what carries it out.
func (n *Node) ckActions(now time.Time, j uint64, acts []jobck.Action) {
	jb := n.jobs[j]
	t := n.cfg.Timeouts
	for _, a := range acts {
		n.emit(Effect{Kind: FxJob, Job: j, Ck: a})
		r := a.Round
		switch a.Kind {
		case jobck.ActPause:
			n.emit(Effect{Kind: FxCall, Call: CallPause, Job: j, Round: r, Hosts: a.Hosts, Budget: a.Budget, Timeout: a.Budget + t.Step})
		case jobck.ActQuiet:
			if !a.At.IsZero() {
				n.emit(Effect{Kind: FxTimer, Timer: Timer{Kind: TimerQuiet, Job: j}, At: a.At})
				continue
			}
			// Every task the job has had, ended ones too: an ended task's
			// messages stay unacknowledged until received.
			n.emit(Effect{Kind: FxCall, Call: CallQuiet, Job: j, Round: r, Hosts: a.Hosts, Timeout: t.Step, TIDs: n.jobTIDs(j)})
		case jobck.ActWrite:
			jb.pending[r.Seq] = []Entry{}
			n.emit(Effect{Kind: FxCall, Call: CallWrite, Job: j, Round: r, Hosts: a.Hosts, Timeout: t.Transfer})
		case jobck.ActCommit:
			set, ok := jb.pending[r.Seq]
			switch {
			case jb.lostIn != 0:
				n.ckStep(now, j, jobck.Event{Kind: jobck.EvCommitted, Round: r,
					Err: fmt.Errorf("%v with tasks of the job was lost during the round: %w", jb.lostIn, jobck.ErrLost)}, false)
			case !ok:
				n.ckStep(now, j, jobck.Event{Kind: jobck.EvCommitted, Round: r, Err: fmt.Errorf("set %d: nothing written", r.Seq)}, false)
			default:
				slices.SortFunc(set, func(x, y Entry) int { return cmp.Compare(x.TID, y.TID) })
				jb.groups[r.Seq] = n.groups.snapshot()
				n.emit(Effect{Kind: FxCommit, Job: j, Round: r, Entries: slices.Clone(set), Groups: n.groups.snapshot()})
			}
		case jobck.ActResume:
			for _, h := range a.Hosts {
				n.emit(Effect{Kind: FxResume, Job: j, Round: r, Host: h, Attempt: 1, Timeout: t.Step})
			}
		case jobck.ActDiscard:
			delete(jb.pending, r.Seq)
			n.emit(Effect{Kind: FxDiscard, Job: j, Round: r})
		case jobck.ActDone:
			jb.lostIn = 0
		case jobck.ActKill:
			// The job's moves end first: nothing it kills comes back
			// with a move's resume.
			n.moveStep(now, move.Event{Kind: move.DropJob, Job: j, Err: errors.New("the job rolls back")})
			n.emit(Effect{Kind: FxCall, Call: CallKill, Job: j, Round: r, Hosts: a.Hosts, Timeout: 2 * t.Step, TIDs: n.jobTIDs(j)})
		case jobck.ActRestore:
			n.restore(now, j, r)
		case jobck.ActRolledBack:
			jb.lostIn = 0
			if a.Err != nil {
				n.emit(Effect{Kind: FxJobLost, Job: j, Round: r,
					Err: fmt.Errorf("rollback to checkpoint %d failed: %w", r.Seq, a.Err)})
			}
		case jobck.ActUnrecoverable:
			if a.End {
				n.emit(Effect{Kind: FxJobLost, Job: j, Host: a.Host,
					Err: fmt.Errorf("lost host %v with no complete checkpoint to roll back to", a.Host)})
			}
		}
	}
}

// jobTIDs is every task job j has had, in order: the registry's, then
// those of the set a restarted job started from that it does not hold.
func (n *Node) jobTIDs(j uint64) []task.TID {
	var out []task.TID
	for _, tid := range n.order {
		if n.tasks[tid].Job == j {
			out = append(out, tid)
		}
	}
	if jb := n.jobs[j]; jb != nil {
		for _, tid := range jb.restored {
			if n.tasks[tid] == nil {
				out = append(out, tid)
			}
		}
	}
	return out
}

// jobStart starts a job's coordinator (EvJobStart): a new job's, or, with
// Round.Seq set, a job's restarted from its complete set Round.Seq.
func (n *Node) jobStart(e Event) {
	if n.jobs[e.Job] != nil {
		return
	}
	seq := e.Round.Seq
	if seq == 0 {
		n.jobs[e.Job] = &job{mc: jobck.New(e.Job, 0, e.Jobck), sets: map[uint64][]Entry{}, pending: map[uint64][]Entry{},
			groups: map[uint64]map[string][]task.TID{}}
		return
	}
	if len(e.TIDs) != len(e.Hosts) || len(e.TIDs) == 0 {
		n.refuse(fmt.Errorf("restart of job %d from set %d: %d tasks on %d hosts: %w", e.Job, seq, len(e.TIDs), len(e.Hosts), ErrBadSet))
		return
	}
	set := make([]Entry, len(e.TIDs))
	for i, tid := range e.TIDs {
		set[i] = Entry{TID: tid, Host: e.Hosts[i]}
	}
	slices.SortFunc(set, func(x, y Entry) int { return cmp.Compare(x.TID, y.TID) })
	restored := make([]task.TID, len(set))
	for i, x := range set {
		restored[i] = x.TID
	}
	groups := map[string][]task.TID{}
	for name, members := range e.Groups {
		groups[name] = slices.Clone(members)
	}
	n.jobs[e.Job] = &job{mc: jobck.New(e.Job, seq, e.Jobck), sets: map[uint64][]Entry{seq: set}, pending: map[uint64][]Entry{},
		groups: map[uint64]map[string][]task.TID{seq: groups}, restored: restored}
}

// restore places job j's set r.Seq on the hosts left: each task on the
// host that wrote it, or, if that host is lost, round robin over the
// others; at an epoch above every one handed out.
func (n *Node) restore(now time.Time, j uint64, r jobck.Round) {
	set := n.jobs[j].sets[r.Seq]
	alive := n.Alive()
	var err error
	switch {
	case set == nil:
		err = fmt.Errorf("no checkpoint %d to go back to", r.Seq)
	case len(alive) == 0:
		err = jobck.ErrNoHosts
	}
	if err != nil {
		n.ckStep(now, j, jobck.Event{Kind: jobck.EvRestored, Round: r, Err: err}, false)
		return
	}
	epoch := n.moves.NextEpoch()
	place := make([]Entry, len(set))
	next := 0
	for i, e := range set {
		h := e.Host
		if n.lost[h] {
			h = alive[next%len(alive)]
			next++
		}
		place[i] = Entry{TID: e.TID, Host: h}
	}
	n.jobs[j].place, n.jobs[j].epoch = place, epoch
	n.emit(Effect{Kind: FxRestore, Job: j, Round: r, Epoch: epoch, Entries: place})
}

// staged goes on with job j's restore once its tasks are staged: their
// routes are set and sent, the registry goes back to the set, and the
// hosts start them.
func (n *Node) staged(now time.Time, e Event) {
	jb := n.jobs[e.Job]
	if jb == nil {
		n.refuse(fmt.Errorf("job %d: %w", e.Job, ErrUnknownJob))
		return
	}
	r := e.Round
	if jb.place == nil || r != jb.mc.Round() {
		n.refuse(fmt.Errorf("staged %v of job %d: no such restore under way: %w", r, e.Job, jobck.ErrStale))
		return
	}
	if e.Err != nil {
		jb.place = nil
		n.ckStep(now, e.Job, jobck.Event{Kind: jobck.EvRestored, Round: r, Err: e.Err}, false)
		return
	}
	set, epoch := jb.place, jb.epoch
	jb.place = nil
	// The groups go back to the set's; no barrier waits any more.
	n.groups.reset(jb.groups[r.Seq])
	place := map[task.HostID][]task.TID{}
	var order []task.HostID
	for _, x := range set {
		if place[x.Host] == nil {
			order = append(order, x.Host)
		}
		place[x.Host] = append(place[x.Host], x.TID)
	}
	slices.Sort(order)
	inSet := map[task.TID]bool{}
	for _, h := range order {
		for _, tid := range place[h] {
			rt := routing.Route{Host: h, Epoch: epoch}
			n.routes.Update(tid, rt)
			if n.cfg.Demand {
				// A restored task's route goes to its origin and to every
				// host the job is restored on: each knows its job's
				// routes before its restored tasks run.
				n.emit(Effect{Kind: FxRoute, TID: tid, Route: rt, Hosts: n.tell(append([]task.HostID{tid.Host()}, order...))})
			} else {
				n.emit(Effect{Kind: FxRoute, TID: tid, Route: rt, All: true})
			}
			if t := n.tasks[tid]; t != nil {
				t.Exited, t.Killed = false, false
			}
			inSet[tid] = true
		}
	}
	for _, tid := range n.order {
		if t := n.tasks[tid]; t.Job == e.Job && !inSet[tid] {
			// Spawned after the checkpoint: gone with the rollback (the
			// restored job spawns its own again).
			t.Exited = true
		}
	}
	n.emit(Effect{Kind: FxGo, Job: e.Job, Round: r, Epoch: epoch, Hosts: order, Count: len(set)})
	n.ckStep(now, e.Job, jobck.Event{Kind: jobck.EvRestored, Round: r}, false)
}
