package daemon

import (
	"cmp"
	"slices"
	"sync"
	"time"

	mnode "github.com/dpvm/dpvm/routing/master"
	"github.com/dpvm/dpvm/task"
)

// masterNode is the master node (routing/master.Node, pure) and the one
// lock it is stepped under, mn.mu, with the shell's records of the parts
// that run through it: the group server (groups.go: who waits in a
// barrier) and moves (mover.go: each move's run, the tasks' facts). The
// watches on a task's loss with its host are the node's alone (master.go:
// registerExitWatch, taskLossNotices), and so are the retries of a job
// round's failed resumes (jobs.go: resumeHosts). The master's other parts
// (jobs' coordinators, the registry, routes of spawns and restores) still
// drive their machines under their own locks (doc.go).
// mn.mu is a leaf: nothing that locks is called, and no call to another
// daemon made, with it held.
type masterNode struct {
	mu     sync.Mutex
	node   *mnode.Node
	groups *groups // the group server's shell
	// timers are the node's timers (FxTimer) not yet due, by name, each
	// at its time: every step records those it sets (stepAt), so none is
	// lost whichever part stepped the node, and runTimers feeds each
	// back when due. wake tells runTimers that one was set.
	timers map[mnode.Timer]time.Time
	wake   chan struct{}
}

// masterNodeConfig is the master node's configuration from the daemon's:
// the moves' timeouts (moveTimeouts), the heartbeat as the move
// machine's tick, routes on demand, and the group server's bounds.
func masterNodeConfig(cfg Config) mnode.Config {
	c := groupLimits{groups: cfg.MaxGroups, name: cfg.MaxGroupName, members: cfg.MaxGroupMembers}.config()
	c.Timeouts = moveTimeoutsOf(cfg)
	c.TickEvery = cfg.Heartbeat
	c.Demand = cfg.Routes == RoutesDemand
	c.MaxWatchers = cfg.MaxWatchers
	return c
}

// newMasterNode is a master node configured by cfg, with no task, group
// or job; its hosts are not listed to it (the parts that place tasks do
// not run through it yet).
func newMasterNode(cfg mnode.Config) *masterNode {
	mn := &masterNode{node: mnode.New(cfg, nil), timers: map[mnode.Timer]time.Time{}, wake: make(chan struct{}, 1)}
	mn.groups = &groups{mn: mn, waits: map[task.TID]*barrierWait{}}
	return mn
}

// step feeds the node one event at the current time under its lock.
func (mn *masterNode) step(e mnode.Event) []mnode.Effect {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	return mn.stepLocked(e)
}

// stepLocked feeds the node one event at the current time (mn.mu held).
func (mn *masterNode) stepLocked(e mnode.Event) []mnode.Effect { return mn.stepAt(time.Now(), e) }

// stepAt feeds the node one event at now (mn.mu held) and records the
// timers it sets (FxTimer; a timer set again is moved to its new time),
// which the timer loop performs (runTimers). The caller performs the
// other effects.
func (mn *masterNode) stepAt(now time.Time, e mnode.Event) []mnode.Effect {
	fx := mn.node.Step(now, e)
	for _, x := range fx {
		if x.Kind == mnode.FxTimer {
			mn.timers[x.Timer] = x.At
			select {
			case mn.wake <- struct{}{}:
			default:
			}
		}
	}
	return fx
}

// dueLocked removes and returns the timers due at now, earliest first
// (mn.mu held), and the time of the earliest left (zero: none).
func (mn *masterNode) dueLocked(now time.Time) (due []mnode.Timer, next time.Time) {
	for t, at := range mn.timers {
		if !at.After(now) {
			due = append(due, t)
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	slices.SortFunc(due, func(a, b mnode.Timer) int {
		if c := mn.timers[a].Compare(mn.timers[b]); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Job, b.Job))
	})
	for _, t := range due {
		delete(mn.timers, t)
	}
	return due, next
}

// runTimers is the master's one timer loop (a tracked goroutine, until
// the daemon stops): it sleeps until the master node's earliest timer
// is due or a new one is set, and feeds each timer due back to the node
// (EvTimer), performing what follows (perform). The times are the
// node's, from its Config (a move's tick every Config.Heartbeat). The
// timer is not drained: since Go 1.23 a Reset discards a value not read.
func (d *Daemon) runTimers() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		d.mn.mu.Lock()
		due, next := d.mn.dueLocked(time.Now())
		d.mn.mu.Unlock()
		for _, tm := range due {
			d.perform(d.mn.step(mnode.Event{Kind: mnode.EvTimer, Timer: tm}))
		}
		if len(due) > 0 {
			continue
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			t.Reset(time.Until(next))
			fire = t.C
		}
		select {
		case <-d.ctx.Done():
			return
		case <-d.mn.wake:
		case <-fire:
		}
	}
}
