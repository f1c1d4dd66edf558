package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/task"
)

// msgClass is what a message between daemons carries, for the faults
// that apply to it.
type msgClass uint8

const (
	// classData: messages, acknowledgements, refusals (reliable delivery
	// copes with loss, duplication and reordering).
	classData msgClass = iota
	// classCall: a move's control call or its answer (lost: the caller's
	// timeout; never duplicated, as a call over a stream is not).
	classCall
	// classRoute: the master's route broadcasts and a checkpoint's
	// stream: delayed, never lost (they travel on streams a lost
	// connection replays).
	classRoute
)

// netState is the network's faults, drawn from the seed.
type netState struct {
	loss, dup, delayP float64
	reorder           bool
	last              map[[2]task.HostID]time.Duration // per link, the last delivery (FIFO without reorder)
	// lastCtl is, per link, the last delivery of a call, an answer or a
	// route (FIFO with reorder too).
	lastCtl map[[2]task.HostID]time.Duration
	// lastAny is, per link, the last delivery of anything sent on it, its
	// duplicates included: a ping (flush) arrives after it.
	lastAny map[[2]task.HostID]time.Duration
	cuts    []cut
}

// cut is a partition between hosts a and b from from until until.
type cut struct {
	a, b        task.HostID
	from, until time.Duration
}

// master is node 0 of the network.
const masterNode task.HostID = 0

func nodeName(id task.HostID) string {
	if id == masterNode {
		return "master"
	}
	return "h" + strconv.FormatUint(uint64(id), 10)
}

// nodeName is node id's name, made once for the hosts of the run.
func (w *world) nodeName(id task.HostID) string {
	if h := w.host(id); h != nil {
		return h.name
	}
	return nodeName(id)
}

// planFaults draws the run's faults from the seed.
func (w *world) planFaults() {
	f, n := w.cfg.Faults, &w.net
	pick := func(xs ...float64) float64 { return xs[w.rng.IntN(len(xs))] }
	if f&FaultLoss != 0 {
		n.loss = pick(0.01, 0.05, 0.15)
		w.take(fmt.Sprintf("loss %.2f", n.loss))
	}
	if f&FaultDup != 0 {
		n.dup = pick(0.01, 0.05, 0.15)
		w.take(fmt.Sprintf("dup %.2f", n.dup))
	}
	if f&FaultReorder != 0 && w.chance(0.7) {
		n.reorder = true
		w.take("reorder")
	}
	if f&FaultDelay != 0 {
		n.delayP = pick(0.01, 0.05)
		w.take(fmt.Sprintf("delay %.2f", n.delayP))
	}
	hz := w.cfg.Horizon
	if f&FaultPartition != 0 && len(w.hosts) > 1 {
		for range w.rng.IntN(3) {
			a := task.HostID(1 + w.rng.IntN(len(w.hosts)))
			b := task.HostID(1 + w.rng.IntN(len(w.hosts)-1))
			if b >= a {
				b++
			}
			from := w.dur(0, hz)
			c := cut{a: a, b: b, from: from, until: from + w.dur(10*time.Millisecond, 500*time.Millisecond)}
			n.cuts = append(n.cuts, c)
			w.at(c.from, nil, fmt.Sprintf("partition %v|%v until %v", nodeName(a), nodeName(b), c.until), func() {
				w.take(fmt.Sprintf("partition %v|%v for %v", nodeName(c.a), nodeName(c.b), c.until-c.from))
			})
		}
	}
	if f&FaultFreeze != 0 {
		for range w.rng.IntN(3) {
			h := w.hosts[w.rng.IntN(len(w.hosts))]
			from, d := w.dur(0, hz), w.dur(10*time.Millisecond, 500*time.Millisecond)
			w.at(from, nil, fmt.Sprintf("freeze %v for %v", h.name, d), func() {
				w.take(fmt.Sprintf("freeze %v for %v", h.name, d))
				h.frozenUntil = max(h.frozenUntil, w.now+d)
			})
		}
	}
	if f&FaultMove != 0 {
		for range 1 + w.rng.IntN(6) {
			w.at(w.dur(0, hz), nil, "move a task", w.master.randomMove)
		}
	}
	if f&FaultCheckpoint != 0 {
		every := w.dur(hz/5, hz/2)
		w.take(fmt.Sprintf("checkpoint every %v", every))
		w.master.planCheckpoints(max(every, time.Microsecond))
	}
	if f&FaultCrash != 0 && len(w.hosts) > 1 {
		h := w.hosts[w.rng.IntN(len(w.hosts))]
		w.at(w.dur(hz/4, hz), nil, "crash "+h.name, func() { w.crash(h, false) })
	}
	if f&FaultRestart != 0 && len(w.hosts) > 1 {
		id := task.HostID(1 + w.rng.IntN(len(w.hosts)))
		w.at(w.dur(hz/4, hz), nil, "crash "+nodeName(id)+" to restart", func() { w.crash(w.host(id), true) })
	}
	if f&FaultMaster != 0 {
		w.at(w.dur(hz/4, hz), nil, "crash master", w.crashMaster)
	}
}

// cutAt reports whether a and b are partitioned now.
func (n *netState) cutAt(a, b task.HostID, now time.Duration) bool {
	for _, c := range n.cuts {
		if now >= c.from && now < c.until && ((c.a == a && c.b == b) || (c.a == b && c.b == a)) {
			return true
		}
	}
	return false
}

// send carries a message of class c from node from to node to and runs
// deliver there, unless the network loses it; it may deliver it twice
// (classData). what describes it in the trace.
func (w *world) send(from, to task.HostID, c msgClass, what string, deliver func()) {
	n := &w.net
	if c != classRoute && from != to {
		if n.cutAt(from, to, w.now) {
			w.note("cut " + w.nodeName(from) + "→" + w.nodeName(to) + " " + what)
			return
		}
		if w.chance(n.loss) {
			w.note("lost " + w.nodeName(from) + "→" + w.nodeName(to) + " " + what)
			return
		}
	}
	d := w.dur(20*time.Microsecond, 200*time.Microsecond)
	if from == to {
		d = w.dur(time.Microsecond, 5*time.Microsecond)
	}
	if w.chance(n.delayP) {
		d += w.dur(10*time.Millisecond, 80*time.Millisecond)
	}
	t := w.now + d
	link := [2]task.HostID{from, to}
	switch {
	case !n.reorder:
		t = max(t, n.last[link]+1)
		n.last[link] = t
	case c != classData:
		// The daemon writes a connection's calls, answers and events
		// into one stream (peer.frame): they keep their order while
		// data messages overtake one another. The master's routes
		// reach a host before the go step of a restore that follows.
		t = max(t, n.lastCtl[link]+1)
		n.lastCtl[link] = t
	}
	dst := w.host(to)
	line := w.nodeName(from) + "→" + w.nodeName(to) + " " + what
	w.at(t, dst, line, deliver)
	n.lastAny[link] = max(n.lastAny[link], t)
	if c == classData && w.chance(n.dup) {
		td := t + w.dur(0, time.Millisecond)
		w.at(td, dst, "dup "+line, deliver)
		n.lastAny[link] = max(n.lastAny[link], td)
	}
}

// ping is daemon/jobs.go's killJob's round trip (mSendCheck) from host
// from to host to, over the connection the hosts' messages, refusals and
// acknowledgements travel on: the ping reaches to after everything from
// sent it before, and its answer reaches from after everything to sent
// from before answering (the refusals of what it received included).
// done runs at from when the answer arrives. Never lost: the daemon
// ignores a ping that fails, and the refusal it would have waited for
// is then lost with the connection. A frozen host answers once it
// thaws; a crashed one at once, as the daemon's ping fails.
func (w *world) ping(from, to task.HostID, done func()) {
	n := &w.net
	hop := func(a, b task.HostID) time.Duration {
		return max(w.now+w.dur(20*time.Microsecond, 200*time.Microsecond), n.lastAny[[2]task.HostID{a, b}]+1)
	}
	line := fmt.Sprintf("%v→%v ping", nodeName(from), nodeName(to))
	src := w.host(from) // the pong returns to this incarnation
	var arrive func()
	arrive = func() {
		if dst := w.host(to); !dst.crashed && dst.frozenUntil > w.now {
			w.at(dst.frozenUntil, nil, line+" (frozen)", arrive)
			return
		}
		w.at(hop(to, from), src, fmt.Sprintf("%v→%v pong", nodeName(to), nodeName(from)), done)
	}
	w.at(hop(from, to), nil, line, arrive)
}
