package host

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/routing"
	"github.com/dpvm/dpvm/routing/jobck"
	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Node is a daemon's host node: its route table (at the master, the
// routing table itself), reliable delivery's sending side (Outbox) and
// receiving side (Inbox), and the host halves of moves and of job
// checkpoints. It is not safe for concurrent use.
type Node struct {
	routes *routing.Table
	outbox *routing.Outbox
	inbox  *routing.Inbox
	moves  *move.Host
	ckpts  *jobck.Host
}

// New returns a node with no routes, no messages and no moves or
// checkpoint rounds under way.
func New() *Node {
	return &Node{
		routes: routing.NewTable(),
		outbox: routing.NewOutbox(),
		inbox:  routing.NewInbox(),
		moves:  move.NewHost(),
		ckpts:  jobck.NewHost(),
	}
}

// Routes is the node's route table.
func (n *Node) Routes() *routing.Table { return n.routes }

// Outbox is the node's sending side of reliable delivery.
func (n *Node) Outbox() *routing.Outbox { return n.outbox }

// Inbox is the node's receiving side of reliable delivery.
func (n *Node) Inbox() *routing.Inbox { return n.inbox }

// Moves is the node's host half of moves.
func (n *Node) Moves() *move.Host { return n.moves }

// Ckpts is the node's host half of job checkpoints.
func (n *Node) Ckpts() *jobck.Host { return n.ckpts }

// EventKind is the kind of an Event.
type EventKind uint8

// Events.
const (
	// EvMove is a step of a move or a point where one meets the task
	// (Event.Move), for the host half of moves.
	EvMove EventKind = iota + 1
	// EvCkpt is a step of a job checkpoint or restart round (Event.Ckpt),
	// for the host half of job checkpoints.
	EvCkpt
	// EvRoute: TID's route is Route (learnt from the master, a refusal or
	// a move). Older routes than the one held are ignored.
	EvRoute
	// EvExited: TID has ended here. What it was sent in order and its
	// numbering as a sender go; its unacknowledged messages stay until
	// their receivers acknowledge them.
	EvExited
	// EvDrop: everything of the TIDs goes, as senders and as receivers
	// (a rollback, a task the master gave up): nothing of an old
	// incarnation reaches a new one.
	EvDrop
)

var eventNames = [...]string{"", "move", "ckpt", "route", "exited", "drop"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one event of the host node. Kind says which fields count.
type Event struct {
	Kind  EventKind
	Move  move.HostEvent
	Ckpt  jobck.HostEvent
	TID   task.TID
	Route routing.Route
	TIDs  []task.TID
}

func (e Event) String() string {
	switch e.Kind {
	case EvMove:
		return "move " + e.Move.String()
	case EvCkpt:
		return "ckpt " + e.Ckpt.String()
	case EvRoute:
		return fmt.Sprintf("route %v %v e%d", e.TID, e.Route.Host, e.Route.Epoch)
	case EvExited:
		return fmt.Sprintf("exited %v", e.TID)
	case EvDrop:
		return fmt.Sprintf("drop %v", e.TIDs)
	}
	return e.Kind.String()
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Effects.
const (
	// FxMove is an effect of the host half of moves (Effect.Move).
	FxMove EffectKind = iota + 1
	// FxCkpt is an effect of the host half of job checkpoints
	// (Effect.Ckpt).
	FxCkpt
	// FxRouted (EvRoute): the table now holds Route for TID, newer than
	// what it held; messages held for TID may go along it.
	FxRouted
)

var effectNames = [...]string{"", "move", "ckpt", "routed"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && k != 0 {
		return effectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// Effect is something the host node wants done. Kind says which fields
// count.
type Effect struct {
	Kind  EffectKind
	Move  move.HostEffect
	Ckpt  jobck.HostEffect
	TID   task.TID
	Route routing.Route
}

func (x Effect) String() string {
	switch x.Kind {
	case FxMove:
		return "move " + x.Move.String()
	case FxCkpt:
		return "ckpt " + x.Ckpt.String()
	case FxRouted:
		return fmt.Sprintf("routed %v %v e%d", x.TID, x.Route.Host, x.Route.Epoch)
	}
	return x.Kind.String()
}

// Step feeds the node one event at time now and returns the effects the
// daemon is to perform, in order. It delegates the event to the part it
// concerns; a move's or a checkpoint step's answer is its last effect, as
// the part gives it.
func (n *Node) Step(now time.Time, e Event) []Effect {
	switch e.Kind {
	// The effects are filled in place, field by field: an Effect built
	// whole, or a copy of a part's effect, would be a temporary in Step's
	// frame, and a task's goroutine, which steps the node as it ends,
	// would need a larger stack for it.
	case EvMove:
		fx := n.moves.Step(now, e.Move)
		out := make([]Effect, len(fx))
		for i := range fx {
			out[i].Kind, out[i].TID = FxMove, fx[i].TID
			out[i].Move = fx[i]
		}
		return out
	case EvCkpt:
		fx := n.ckpts.Step(e.Ckpt)
		out := make([]Effect, len(fx))
		for i := range fx {
			out[i].Kind, out[i].TID = FxCkpt, fx[i].TID
			out[i].Ckpt = fx[i]
		}
		return out
	case EvRoute:
		if n.routes.Update(e.TID, e.Route) {
			return []Effect{{Kind: FxRouted, TID: e.TID, Route: e.Route}}
		}
	case EvExited:
		n.inbox.Forget(e.TID)
		n.outbox.ForgetSender(e.TID)
	case EvDrop:
		for _, tid := range e.TIDs {
			n.outbox.DropReceiver(tid)
			n.outbox.DropSender(tid)
			n.inbox.Forget(tid)
		}
	}
	return nil
}

// MoveEffects are the host half of moves' effects among fx, in order.
func MoveEffects(fx []Effect) []move.HostEffect {
	out := make([]move.HostEffect, 0, len(fx))
	for _, x := range fx {
		if x.Kind == FxMove {
			out = append(out, x.Move)
		}
	}
	return out
}

// CkptEffects are the host half of job checkpoints' effects among fx, in
// order.
func CkptEffects(fx []Effect) []jobck.HostEffect {
	out := make([]jobck.HostEffect, 0, len(fx))
	for _, x := range fx {
		if x.Kind == FxCkpt {
			out = append(out, x.Ckpt)
		}
	}
	return out
}
