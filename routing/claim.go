package routing

import (
	"fmt"

	"github.com/dpvm/dpvm/task"
)

// A host speaks only for what it hosts. Every frame a daemon receives from
// another daemon claims something about tasks: a message comes from its
// sender task, an acknowledgement or a refusal speaks for the receiving
// task, an exit, an output line, a barrier arrival or a group call acts
// for a task. Judge decides whether the host that sent the frame (the
// name its certificate proves, never a field of the frame) may make the
// claim, from what the judging daemon knows of where the task lives.
//
// The rule is written for the honest races of a virtual machine whose
// tasks move:
//
//   - A task's old host keeps the messages the task sent from there until
//     they are acknowledged, and resends them after the task has moved
//     (the outbox is a host's, not a task's): a message may come from any
//     host the task is known to have lived on — its origin, its current
//     host, and the hosts it lived on before (Knowledge.Past).
//   - Acknowledgements and refusals likewise come from hosts the receiving
//     task lived on: a message accepted before a move is acknowledged by
//     the old host, one sent on an old route is refused by it.
//   - A notice (an unsequenced system message: a host's or a task's end)
//     speaks for its sender as a message does (a host tells a watcher
//     registered after its task's end at once), or it is the master's, or
//     it is relayed by a host the receiving task lived on (a host passes
//     on the notices for a task that moved away while they were on their
//     way): the daemon judges a notice as ClaimSource first, then as
//     ClaimNotice of its receiver.
//   - A task acts (an exit, an output line, a barrier arrival, a group or
//     spawn call) only where it runs: its current host, or the host it is
//     leaving while its move is under way or has just committed (a call
//     made before the task was suspended may be answered, and a
//     barrier's withdrawal sent, after the route changed). An exit is
//     accepted only from the current host, or from the host a task in
//     transit is leaving: an old host's word that the task ended would take
//     a task that lives on out of its groups.
//
// A refused claim is safe for an honest sender whose claim the judge could
// not yet check (a route still on its way): a message or an
// acknowledgement refused is not acknowledged, and reliable delivery
// resends it (the receiving side drops duplicates), by which time the
// route has arrived. The judge's knowledge is authoritative at the master
// (its table is where every route is decided, and a move's new route is
// set before its destination runs the task); elsewhere it is the route
// cache the master's broadcasts keep.
type ClaimKind uint8

// Claim kinds. Append only.
const (
	// ClaimSource: a message's sender task (new messages and resends).
	ClaimSource ClaimKind = iota + 1
	// ClaimReceiver: an acknowledgement's or a refusal's receiving task.
	ClaimReceiver
	// ClaimNotice: an unsequenced notice's receiving task (a relay).
	ClaimNotice
	// ClaimAct: an action of the task itself: an output line, a barrier
	// arrival or withdrawal, a group, spawn or notify call.
	ClaimAct
	// ClaimExit: the task has ended.
	ClaimExit
)

func (k ClaimKind) String() string {
	switch k {
	case ClaimSource:
		return "source"
	case ClaimReceiver:
		return "receiver"
	case ClaimNotice:
		return "notice"
	case ClaimAct:
		return "act"
	case ClaimExit:
		return "exit"
	}
	return fmt.Sprintf("claim(%d)", uint8(k))
}

// Claim is what a frame says about one task: that host By may speak for
// Task in the way Kind names.
type Claim struct {
	Kind ClaimKind
	Task task.TID
	By   task.HostID
}

// Knowledge is what the judging daemon knows of where a task lives.
type Knowledge struct {
	// Route is the newest route known (Table.Lookup): the task's origin
	// at epoch 0 when none is recorded.
	Route Route
	// Past lists hosts the task lived on before Route's, newest first, as
	// far as the judge has seen (Table.Past). Past[0] is the host a task
	// in transit is leaving.
	Past []task.HostID
	// Master is the master's host ID: notices are its to send.
	Master task.HostID
}

// Verdict is Judge's answer.
type Verdict uint8

// Verdicts.
const (
	// Allow: the host may make the claim.
	Allow Verdict = iota
	// RefuseNoTask: the claim names no task (the zero TID, AnyTask, or a
	// TID of no host).
	RefuseNoTask
	// RefuseElsewhere: the task lives, as far as the judge knows, on
	// another host, and has never lived on the claimant (or, for an act
	// or an exit, does not live there now).
	RefuseElsewhere
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case RefuseNoTask:
		return "no such task"
	case RefuseElsewhere:
		return "task hosted elsewhere"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Judge decides claim c from knowledge k (see ClaimKind for the rule). It
// is pure and allocates nothing.
func Judge(c Claim, k Knowledge) Verdict {
	if c.Task == 0 || c.Task == task.AnyTask || c.Task.Host() == 0 || c.By == 0 {
		return RefuseNoTask
	}
	switch c.Kind {
	case ClaimSource, ClaimReceiver:
		if c.By == k.Route.Host || c.By == c.Task.Host() || inPast(c.By, k.Past) {
			return Allow
		}
	case ClaimNotice:
		if c.By == k.Master || c.By == k.Route.Host || c.By == c.Task.Host() || inPast(c.By, k.Past) {
			return Allow
		}
	case ClaimAct:
		if c.By == k.Route.Host || (len(k.Past) > 0 && c.By == k.Past[0]) {
			return Allow
		}
	case ClaimExit:
		if c.By == k.Route.Host || (k.Route.InTransit && len(k.Past) > 0 && c.By == k.Past[0]) {
			return Allow
		}
	}
	return RefuseElsewhere
}

func inPast(h task.HostID, past []task.HostID) bool {
	for _, p := range past {
		if p == h {
			return true
		}
	}
	return false
}

// Judge decides claim c from what the table knows of c.Task (master is the
// master's host ID).
func (t *Table) Judge(c Claim, master task.HostID) Verdict {
	r := t.Lookup(c.Task)
	if c.By == r.Host && c.By != 0 && c.Task != task.AnyTask && c.Task.Host() != 0 {
		return Allow // every kind allows the current host: no need of the past
	}
	return Judge(c, Knowledge{Route: r, Past: t.past[c.Task], Master: master})
}
