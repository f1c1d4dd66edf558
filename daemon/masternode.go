package daemon

import (
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
	mn := &masterNode{node: mnode.New(cfg, nil)}
	mn.groups = &groups{mn: mn, waits: map[task.TID]*barrierWait{}}
	return mn
}

// stepLocked feeds the node one event at the current time (mn.mu held).
func (mn *masterNode) stepLocked(e mnode.Event) []mnode.Effect { return mn.node.Step(time.Now(), e) }
