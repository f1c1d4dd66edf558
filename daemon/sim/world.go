package sim

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dpvm/dpvm/routing/move"
	"github.com/dpvm/dpvm/task"
)

// Config is one run of the simulation.
type Config struct {
	// Seed decides every choice of the run: delays, faults, moves.
	Seed uint64
	// Hosts is the number of hosts (default 4).
	Hosts int
	// Faults are the kinds of fault the run may take.
	Faults Fault
	// Horizon is the stretch of virtual time in which faults and moves
	// are placed (default 1s): the length of the program's fault-free
	// run is a good choice (Check uses it).
	Horizon time.Duration
	// MaxTime bounds the run in virtual time (default 10 minutes): a
	// program still running then fails the seed.
	MaxTime time.Duration
	// MaxEvents bounds the run's events (default 5,000,000).
	MaxEvents int
	// Routes is how the master spreads a move's route: RoutesDemand
	// (the default) or RoutesBroadcast.
	Routes Routes
	// Trace, if set, gets every line of the trace as it is hashed.
	Trace io.Writer
}

func (c Config) withDefaults() Config {
	if c.Hosts <= 0 {
		c.Hosts = 4
	}
	if c.Horizon <= 0 {
		c.Horizon = time.Second
	}
	if c.MaxTime <= 0 {
		c.MaxTime = 10 * time.Minute
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = 5_000_000
	}
	return c
}

// Timing of the simulated virtual machine, in virtual time. The move
// timeouts are the move machine's; the resend timeout is reliable
// delivery's.
var (
	moveTimeouts = move.Timeouts{Step: time.Second, Suspend: 2 * time.Second, Transfer: 2 * time.Second, Retry: 200 * time.Millisecond}
	rto          = 50 * time.Millisecond
	tickEvery    = 100 * time.Millisecond
)

// Result is what one run came to.
type Result struct {
	Seed uint64
	// OK: the run broke no invariant, and its program ended.
	OK bool
	// Status is the root task's exit status; Err says why the run
	// failed (an invariant, the program's error, a stall), if it did.
	Status int
	Err    error
	// Output is the job's output as its incarnations that count printed
	// it: what the tasks printed after the cut of the set a rollback went
	// back to, and before that rollback, is taken out (Undone counts its
	// bytes). The real daemon prints those lines as they come, and again
	// as the restored tasks replay them (see README.md, "Output after a
	// rollback"); the result is the output without the undone stretches.
	Output []byte
	Undone int
	// Result is the run's result: the root's exit status and a hash of
	// its output lines, sorted (see Summary).
	Result string
	// TraceHash is the hex SHA-256 of every event of the run, in order:
	// the same seed gives the same hash on any machine.
	TraceHash string
	// Events and Time are the run's events and its virtual length.
	Events int
	Time   time.Duration
	// Taken lists the faults and moves the run took, in order.
	Taken []string
	// Tail is the last events of the trace (for a failure's report).
	Tail []string
	// LostWithMaster: the master crashed before the root ended, and the
	// job with it (FaultMaster): the documented outcome, which Check
	// accepts beside the fault-free result. Result then says so.
	LostWithMaster bool
}

// resultLostWithMaster is Result.Result for a job lost with its master.
const resultLostWithMaster = "job lost with its master"

// Summary is the result of a job with exit status status and output out:
// the status and the first 16 hex digits of the SHA-256 of the output's
// lines, sorted (tasks print in an order that depends on the schedule;
// what each prints does not).
func Summary(status int, out []byte) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(out) == 0 {
		lines = nil
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return fmt.Sprintf("exit %d, output %s", status, hex.EncodeToString(h.Sum(nil))[:16])
}

// ErrInvariant marks a broken invariant of the virtual machine.
var ErrInvariant = errors.New("invariant broken")

// ErrStalled: the program did not end (no event was left, or the run
// reached its bounds).
var ErrStalled = errors.New("program did not end")

// event is one scheduled step of the run.
type event struct {
	at   time.Duration
	seq  uint64
	what string
	host *shost // the host it happens at (nil: the master or the network)
	fn   func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return x
}

// tailLen is how many of the last events a result keeps.
const tailLen = 40

// tailEvent is an event of the trace's tail: its time and its line.
type tailEvent struct {
	at   time.Duration
	line string
}

// world is one run: the master, the hosts, the tasks, the network and the
// event queue, all driven by one goroutine (run's caller). Task goroutines
// run only while the loop hands them the baton (see stask).
type world struct {
	cfg    Config
	rng    *rand.Rand
	now    time.Duration
	q      eventQueue
	seq    uint64
	events int

	trace hash.Hash
	line  []byte // the trace line being written (reused)
	// tail is a ring of the last tailLen events, next its next slot.
	tail  [tailLen]tailEvent
	next  int
	taken []string

	master *master
	hosts  []*shost // by HostID-1
	tasks  []*stask // every incarnation started, in order (to end them)

	// baton: a task goroutine hands control back to the loop on yield.
	yield chan *stask

	// out is the job's output, of the incarnations that count; undone
	// is what rollbacks took out of it, its bytes.
	out      []byte
	undone   int
	rootDone bool
	rootTID  task.TID
	status   int
	rootErr  error
	failure  error
	// lostMaster: the job was lost with its crashed master (FaultMaster).
	lostMaster bool

	net netState
	// meter counts the master's messages (a scale run's; nil otherwise).
	meter *meter
	// scale: a scale run, whose invariants are checked at the end of
	// each phase (checkScale) rather than after every event (check
	// costs as much as the tasks times the hosts).
	scale bool
	// pairs is, per (sender, receiver), the last sequence number
	// delivered into a mailbox (the FIFO and exactly-once invariant).
	pairs map[[2]task.TID]uint64
}

// newWorld is a virtual machine of cfg.Hosts hosts and its master, its
// choices drawn from cfg.Seed with salt (one per kind of run, so that a
// scale run and a program's run of one seed draw apart), no fault
// planned yet.
func newWorld(cfg Config, salt uint64) *world {
	w := &world{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^salt)),
		trace: sha256.New(),
		yield: make(chan *stask),
		pairs: map[[2]task.TID]uint64{},
	}
	n := &w.net
	n.last, n.lastCtl, n.lastAny = map[[2]task.HostID]time.Duration{}, map[[2]task.HostID]time.Duration{}, map[[2]task.HostID]time.Duration{}
	for i := range cfg.Hosts {
		w.hosts = append(w.hosts, newHost(w, task.HostID(i+1)))
	}
	w.master = newMaster(w)
	return w
}

// Run runs program root on a simulated virtual machine under cfg and
// returns what it came to. It is deterministic: the same Config and
// program give the same Result, TraceHash included.
func Run(cfg Config, root task.Task) Result {
	cfg = cfg.withDefaults()
	w := newWorld(cfg, 0x9e3779b97f4a7c15)
	w.planFaults()
	w.startRoot(root)
	w.loop()
	var stall string
	if !w.rootDone && w.failure == nil {
		stall = w.stalled()
	}
	w.endTasks()
	res := Result{
		Seed: cfg.Seed, Status: w.status, Output: w.out, Undone: w.undone, Events: w.events, Time: w.now,
		TraceHash: hex.EncodeToString(w.trace.Sum(nil)), Taken: w.taken, Tail: w.tailLines(),
	}
	res.Result = Summary(w.status, w.out)
	switch {
	case w.failure != nil:
		res.Err = w.failure
	case w.lostMaster:
		res.LostWithMaster, res.Result = true, resultLostWithMaster
	case !w.rootDone:
		res.Err = fmt.Errorf("%w within %v of virtual time and %d events: %s", ErrStalled, w.now, w.events, stall)
	case w.rootErr != nil:
		res.Err = fmt.Errorf("root task: %w", w.rootErr)
	}
	res.OK = res.Err == nil
	return res
}

// at schedules fn at virtual time t (not before now), described by what
// in the trace; h is the host it happens at, if any (a frozen host's
// events wait for it to thaw).
func (w *world) at(t time.Duration, h *shost, what string, fn func()) {
	w.seq++
	heap.Push(&w.q, &event{at: max(t, w.now), seq: w.seq, what: what, host: h, fn: fn})
}

// after schedules fn d from now.
func (w *world) after(d time.Duration, h *shost, what string, fn func()) { w.at(w.now+d, h, what, fn) }

// note records a line in the trace (and its tail) at the current time:
// "NANOSECONDS LINE\n", hashed and written to Config.Trace. It formats
// nothing: an event's line is made when it is scheduled.
func (w *world) note(line string) {
	b := strconv.AppendInt(w.line[:0], int64(w.now), 10)
	b = append(b, ' ')
	b = append(b, line...)
	b = append(b, '\n')
	w.line = b
	w.trace.Write(b)
	if w.cfg.Trace != nil {
		_, _ = w.cfg.Trace.Write(b)
	}
	w.tail[w.next%tailLen] = tailEvent{at: w.now, line: line}
	w.next++
}

// tailLines is the trace's last events, oldest first, as note wrote them
// (without the newline).
func (w *world) tailLines() []string {
	var out []string
	for i := max(0, w.next-tailLen); i < w.next; i++ {
		e := w.tail[i%tailLen]
		out = append(out, strconv.FormatInt(int64(e.at), 10)+" "+e.line)
	}
	return out
}

// take records a fault or move the run takes.
func (w *world) take(line string) {
	w.taken = append(w.taken, fmt.Sprintf("%v %s", w.now, line))
	w.note("fault " + line)
}

// fail ends the run with err (the first failure wins).
func (w *world) fail(err error) {
	if w.failure == nil {
		w.failure = err
		w.note("FAIL " + err.Error())
	}
}

// loop runs events in order until the root task ends, a failure, or the
// bounds.
func (w *world) loop() {
	for len(w.q) > 0 && !w.rootDone && w.failure == nil {
		e := heap.Pop(&w.q).(*event)
		if e.host != nil && e.host.crashed {
			continue // a crashed host does nothing
		}
		if e.host != nil && e.host.frozenUntil > e.at {
			// A frozen host does nothing until it thaws.
			e.at = e.host.frozenUntil
			heap.Push(&w.q, e)
			continue
		}
		w.now = e.at
		if w.now > w.cfg.MaxTime || w.events >= w.cfg.MaxEvents {
			return
		}
		w.events++
		w.note(e.what)
		e.fn()
		if w.failure == nil && !w.scale {
			w.check()
		}
	}
}

// dur draws a duration uniformly in [lo, hi].
func (w *world) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

// chance draws true with probability p.
func (w *world) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

// host returns the host with id, or nil.
func (w *world) host(id task.HostID) *shost {
	if id < 1 || int(id) > len(w.hosts) {
		return nil
	}
	return w.hosts[id-1]
}

// hostByName returns the host named name, or nil.
func (w *world) hostByName(name string) *shost {
	for _, h := range w.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// stalled describes what the tasks still in service wait for, and what
// the hosts hold unacknowledged for them.
func (w *world) stalled() string {
	var parts []string
	for _, tid := range w.master.order() {
		if w.master.task(tid).Exited {
			continue
		}
		s := fmt.Sprintf("%v", tid)
		if st := w.master.incs[tid]; st != nil {
			switch p := st.park; {
			case st.suspended:
				s += " suspended"
			case p == nil:
				s += " runnable"
			case p.kind == parkBarrier:
				s += " waits at a barrier or a move"
			case p.kind == parkPause:
				s += " is held for a job checkpoint"
			case p.kind == parkMaster:
				s += " waits for the crashed master"
			default:
				s += fmt.Sprintf(" waits for tag %d from %v", p.tag, p.from)
			}
			s += fmt.Sprintf(" on %v with %d in its mailbox (#%d started %v ended %v scheduled %v)", st.host.name, len(st.mb), st.inc, st.started, st.ended, st.scheduled)
		}
		for _, h := range w.hosts {
			if h.node.Outbox().Pending(tid) > 0 {
				s += fmt.Sprintf("; %v holds for it: %s", h.name, h.node.Outbox().Describe(tid))
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
