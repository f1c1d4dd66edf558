package swim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dpvm/dpvm/task"
)

// State is a member's liveness in one host's view.
type State uint8

// Member states. Append only: they are on the wire.
const (
	// Alive: no failed probe is known for its incarnation.
	Alive State = iota + 1
	// Suspect: a probe of it failed; it may still refute.
	Suspect
	// Dead: declared dead for its incarnation. Final for that
	// incarnation: only the host itself, after asking the master, comes
	// back with a larger one.
	Dead
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Update is one piece of gossip: Host is in State at incarnation Inc, as
// From says (the accuser of a suspicion or a death; Host itself for
// Alive).
type Update struct {
	State State
	Host  task.HostID
	Inc   uint32
	From  task.HostID
}

func (u Update) String() string {
	if u.State == Alive {
		return fmt.Sprintf("alive %v#%d", u.Host, u.Inc)
	}
	return fmt.Sprintf("%v %v#%d by %v", u.State, u.Host, u.Inc, u.From)
}

// MsgKind is the kind of a Msg between hosts.
type MsgKind uint8

// Message kinds. Append only: they are on the wire.
const (
	// Ping asks To to answer with an Ack of Seq.
	Ping MsgKind = iota + 1
	// Ack answers a Ping of Seq; an Ack relayed for a PingReq names the
	// probed host as Target.
	Ack
	// PingReq asks To to ping Target and relay its Ack as an Ack of Seq.
	PingReq
	// Nack tells a PingReq's sender that Target did not answer the relay
	// in time: the relay itself is alive and listening (Lifeguard).
	Nack
)

var msgNames = [...]string{"", "ping", "ack", "ping-req", "nack"}

func (k MsgKind) String() string {
	if k >= Ping && k <= Nack {
		return msgNames[k]
	}
	return "msg(" + strconv.Itoa(int(k)) + ")"
}

// Msg is a message between two hosts' machines. Every message carries its
// sender's incarnation and up to Config.MaxPiggyback updates.
type Msg struct {
	Kind     MsgKind
	From, To task.HostID
	// Inc is the sender's incarnation.
	Inc uint32
	Seq uint32
	// Target is the probed host of a PingReq, and of an Ack or Nack that
	// answers one.
	Target task.HostID
	Gossip []Update
}

func (m Msg) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %v→%v #%d s%d", m.Kind, m.From, m.To, m.Inc, m.Seq)
	if m.Target != 0 {
		fmt.Fprintf(&b, " target %v", m.Target)
	}
	for _, u := range m.Gossip {
		fmt.Fprintf(&b, " [%v]", u)
	}
	return b.String()
}

// Config tunes a Node and a Referee. The zero value of each field means
// its default; the defaults are those of hashicorp/memberlist's LAN
// configuration.
type Config struct {
	// ProbeInterval is the time between two probes of one host (default
	// 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its Ack before it
	// asks others to probe (default 500ms; less than ProbeInterval).
	ProbeTimeout time.Duration
	// IndirectChecks is how many others an indirect probe asks (default
	// 3).
	IndirectChecks int
	// SuspicionMult scales the least suspicion timeout:
	// SuspicionMult·max(1, log10 n)·ProbeInterval for n members (default
	// 4). SuspicionMult-2 independent suspicions bring the timeout down to
	// that least one.
	SuspicionMult int
	// SuspicionMaxMult is the ratio of the longest suspicion timeout (no
	// independent suspicion) to the least (default 6).
	SuspicionMaxMult int
	// MaxAwareness bounds the local health score: the probe interval and
	// timeout grow to at most (1+MaxAwareness) times their base (default
	// 8).
	MaxAwareness int
	// RetransmitMult: an update rides on RetransmitMult·⌈log10(n+1)⌉
	// messages (default 4).
	RetransmitMult int
	// MaxPiggyback bounds the updates on one message (default 8, at most
	// MaxGossip).
	MaxPiggyback int
	// DeadProbeEvery: one probe in DeadProbeEvery goes to a member this
	// host holds dead, to tell it so should it be alive and cut off
	// (default 8).
	DeadProbeEvery int
	// RejoinEvery is how often a host that learnt it was declared dead
	// asks the master again (default 5 probe intervals).
	RejoinEvery time.Duration
	// ReportEvery is how often a host reports again a death it declared
	// that the master has not confirmed (default 5 probe intervals).
	ReportEvery time.Duration
	// CheckTimeout is how long the master waits for the answer to its
	// check of an accused host (default 2 probe timeouts).
	CheckTimeout time.Duration
	// CheckTries is how many checks the master sends before it confirms
	// the death (default 3).
	CheckTries int
}

// master is the From of the updates the master sends.
const master task.HostID = 0

// maxRelays bounds the PingReqs a node serves at once: in a healthy
// cluster it serves about IndirectChecks a failure.
const maxRelays = 1024

// MaxGossip bounds the updates one message may carry on the wire.
const MaxGossip = 64

// ErrConfig: a Config that cannot work.
var ErrConfig = errors.New("swim: bad configuration")

func (c Config) withDefaults() (Config, error) {
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = c.ProbeInterval / 2
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		return c, fmt.Errorf("%w: probe timeout %v is not below the interval %v", ErrConfig, c.ProbeTimeout, c.ProbeInterval)
	}
	if c.IndirectChecks <= 0 {
		c.IndirectChecks = 3
	}
	if c.SuspicionMult <= 0 {
		c.SuspicionMult = 4
	}
	if c.SuspicionMaxMult <= 0 {
		c.SuspicionMaxMult = 6
	}
	if c.MaxAwareness <= 0 {
		c.MaxAwareness = 8
	}
	if c.RetransmitMult <= 0 {
		c.RetransmitMult = 4
	}
	if c.MaxPiggyback <= 0 {
		c.MaxPiggyback = 8
	}
	if c.MaxPiggyback > MaxGossip {
		return c, fmt.Errorf("%w: %d updates per message, at most %d", ErrConfig, c.MaxPiggyback, MaxGossip)
	}
	if c.DeadProbeEvery <= 0 {
		c.DeadProbeEvery = 8
	}
	if c.RejoinEvery <= 0 {
		c.RejoinEvery = 5 * c.ProbeInterval
	}
	if c.ReportEvery <= 0 {
		c.ReportEvery = 5 * c.ProbeInterval
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 2 * c.ProbeTimeout
	}
	if c.CheckTries <= 0 {
		c.CheckTries = 3
	}
	return c, nil
}

// mustDefaults is c with its defaults, for a c known to be valid.
func (c Config) mustDefaults() Config {
	d, err := c.withDefaults()
	if err != nil {
		panic(err)
	}
	return d
}

// EventKind is the kind of an Event.
type EventKind uint8

// Node events. Each names the fields of Event it reads.
const (
	// EvTick: time passed; the driver steps the node at Next() at the
	// latest.
	EvTick EventKind = iota + 1
	// EvMsg: Msg arrived from another host.
	EvMsg
	// EvJoin: the master's member list, Roster (sorted, read only: the
	// node keeps it and never writes to it; several nodes may share it),
	// every member alive at incarnation 0 unless gossip says otherwise.
	EvJoin
	// EvCheck: the master checks this host, accused at incarnation Inc;
	// the answer is an EffCheckAck of Seq.
	EvCheck
	// EvGossip: Update from the master (a refutation it learnt by a
	// check).
	EvGossip
	// EvRejoined: the master took this host back after it learnt it was
	// declared dead; it comes back with a new incarnation.
	EvRejoined
	// EvForget: the master dropped Host: it is no longer probed (a
	// tombstone keeps it dead).
	EvForget
)

var eventNames = [...]string{"", "tick", "msg", "join", "check", "gossip", "rejoined", "forget"}

func (k EventKind) String() string {
	if k >= EvTick && k <= EvForget {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is an input of a Node.
type Event struct {
	Kind   EventKind
	Msg    Msg
	Roster []task.HostID
	Seq    uint32
	Inc    uint32
	Host   task.HostID
	Update Update
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Node effects. Each names the fields of Effect it sets.
const (
	// EffSend: send Msg to Msg.To.
	EffSend EffectKind = iota + 1
	// EffReport: tell the master Update (a suspicion this host started, a
	// death it declared, or its own refutation).
	EffReport
	// EffCheckAck: answer the master's check Seq, at incarnation Inc.
	EffCheckAck
	// EffRejoin: this host learnt it was declared dead at incarnation Inc:
	// stop its tasks' work as the master's lost-host path says and register
	// again; step EvRejoined once the master has answered.
	EffRejoin
)

var effectNames = [...]string{"", "send", "report", "check-ack", "rejoin"}

func (k EffectKind) String() string {
	if k >= EffSend && k <= EffRejoin {
		return effectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// Effect is an output of a Node, for the driver to perform.
type Effect struct {
	Kind   EffectKind
	Msg    Msg
	Update Update
	Seq    uint32
	Inc    uint32
}

func (e Effect) String() string {
	switch e.Kind {
	case EffSend:
		return "send " + e.Msg.String()
	case EffReport:
		return "report " + e.Update.String()
	case EffCheckAck:
		return fmt.Sprintf("check-ack s%d #%d", e.Seq, e.Inc)
	case EffRejoin:
		return fmt.Sprintf("rejoin (dead at #%d)", e.Inc)
	}
	return e.Kind.String()
}

// member is a host's record of another whose state differs from the
// default (alive at incarnation 0).
type member struct {
	state State
	inc   uint32
	susp  *suspicion
	// forgotten: the master dropped it; a tombstone.
	forgotten bool
	// confirmed: held dead, and the master confirmed it (an update of the
	// death from the master). Until then the death is reported again at
	// reportAt.
	confirmed bool
	reportAt  time.Time
}

// suspicion is the timer of a suspected member (Lifeguard's dynamic
// suspicion: independent accusers shorten it).
type suspicion struct {
	start    time.Time
	min, max time.Duration
	k        int
	from     []task.HostID // distinct accusers, the first included
	// mine: this host accused it by its own failed probe; it confirms the
	// death on the Lifeguard timeout. Others wait twice the longest
	// timeout, as a backstop should every accuser fail too.
	mine bool
}

// deadline is when the suspicion becomes a death.
func (s *suspicion) deadline() time.Time {
	if !s.mine {
		return s.start.Add(2 * s.max)
	}
	t := s.min
	if n := len(s.from) - 1; s.k > 0 && n > 0 {
		frac := math.Log(float64(n)+1) / math.Log(float64(s.k)+1)
		t = max(s.min, s.max-time.Duration(frac*float64(s.max-s.min)))
	} else if s.k > 0 {
		t = s.max
	}
	return s.start.Add(t)
}

// probe is the probe in flight.
type probe struct {
	target     task.HostID
	inc        uint32 // the target's incarnation when it was probed
	seq        uint32
	direct     time.Time // the direct Ack's deadline
	end        time.Time // the indirect Acks' deadline
	indirect   bool
	dead       bool // a probe of a dead member: no suspicion follows
	nacks, ask int
}

// relay is a PingReq served: the Ping sent for it and who asked.
type relay struct {
	from          task.HostID
	seq           uint32
	target        task.HostID
	nackAt, until time.Time
	nacked        bool
}

type gossip struct {
	u    Update
	sent int
}

// Node is one host's failure detector (see the package documentation). It
// performs no I/O, reads no clock and draws from the rand source it was
// given only; it is not safe for concurrent use.
type Node struct {
	cfg       Config
	self      task.HostID
	inc       uint32
	rnd       *rand.Rand
	roster    []task.HostID // sorted; shared, never written
	diff      map[task.HostID]*member
	dead      []task.HostID // sorted: members held dead, not forgotten
	awareness int
	seq       uint32
	probe     *probe
	nextProbe time.Time
	// The probe rotation: roster[(off + i·stride) mod n] for i < n, a new
	// off and stride coprime to n for every pass.
	off, stride, step int
	rounds            int
	relays            map[uint32]*relay
	queue             []gossip
	due               time.Time // Next() after the last step
	started           bool
	rejoining         bool
	rejoinAt          time.Time
	deadInc           uint32
	out               []Effect
}

// New returns the detector of host self at incarnation inc, drawing its
// random choices from rnd (seeded by the driver). It knows no member until
// EvJoin.
func New(self task.HostID, inc uint32, cfg Config, rnd *rand.Rand) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if rnd == nil {
		return nil, fmt.Errorf("%w: no random source", ErrConfig)
	}
	return &Node{cfg: c, self: self, inc: inc, rnd: rnd, diff: map[task.HostID]*member{}, relays: map[uint32]*relay{}}, nil
}

// Config returns the node's configuration, defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// Self is the node's host.
func (n *Node) Self() task.HostID { return n.self }

// Incarnation is the node's own incarnation.
func (n *Node) Incarnation() uint32 { return n.inc }

// Awareness is the local health score: 0 when healthy, up to
// Config.MaxAwareness.
func (n *Node) Awareness() int { return n.awareness }

// Rejoining reports whether the node learnt it was declared dead and waits
// for EvRejoined.
func (n *Node) Rejoining() bool { return n.rejoining }

// State is h's state and incarnation in this node's view (ok false for a
// host it does not know).
func (n *Node) State(h task.HostID) (s State, inc uint32, ok bool) {
	if h == n.self {
		return Alive, n.inc, true
	}
	if m := n.diff[h]; m != nil {
		return m.state, m.inc, true
	}
	if _, found := slices.BinarySearch(n.roster, h); found {
		return Alive, 0, true
	}
	return 0, 0, false
}

// Members is the number of members known, this host included.
func (n *Node) Members() int {
	c := len(n.roster)
	if _, found := slices.BinarySearch(n.roster, n.self); !found {
		c++
	}
	return c
}

// scale is d scaled by the local health.
func (n *Node) scale(d time.Duration) time.Duration {
	return d * time.Duration(1+n.awareness)
}

func (n *Node) aware(delta int) {
	n.awareness = min(max(n.awareness+delta, 0), n.cfg.MaxAwareness)
}

// Next is the latest time at which the node must be stepped (EvTick).
func (n *Node) Next() time.Time {
	if !n.started {
		return time.Time{}
	}
	t := n.nextProbe
	if p := n.probe; p != nil {
		t = p.end
		if !p.indirect {
			t = p.direct
		}
	}
	early := func(x time.Time) {
		if x.Before(t) {
			t = x
		}
	}
	for _, r := range n.relays {
		if !r.nacked {
			early(r.nackAt)
		}
		early(r.until)
	}
	for _, m := range n.diff {
		if m.susp != nil {
			early(m.susp.deadline())
		}
		if !m.reportAt.IsZero() {
			early(m.reportAt)
		}
	}
	if n.rejoining {
		early(n.rejoinAt)
	}
	return t
}

// Step feeds ev to the node at now and returns the effects to perform, in
// order. The slice is the caller's.
func (n *Node) Step(now time.Time, ev Event) []Effect {
	n.out = nil
	if n.started {
		n.credit(now)
	}
	switch ev.Kind {
	case EvTick:
	case EvMsg:
		n.receive(now, ev.Msg)
	case EvJoin:
		n.roster = ev.Roster
		if !n.started {
			n.started = true
			n.nextProbe = now.Add(time.Duration(n.rnd.Int64N(int64(n.cfg.ProbeInterval))))
		}
		n.step = len(n.roster) // a new pass of the rotation
	case EvCheck:
		if ev.Inc >= n.inc && !n.rejoining {
			n.refute(ev.Inc)
		}
		n.out = append(n.out, Effect{Kind: EffCheckAck, Seq: ev.Seq, Inc: n.inc})
	case EvGossip:
		if u := ev.Update; u.Host == n.self && u.State == Dead && !n.rejoining {
			// The master deleted this host: whatever its incarnation
			// now, it rejoins.
			n.rejoin(now, u.Inc)
			break
		}
		n.apply(now, ev.Update)
	case EvRejoined:
		if n.rejoining {
			n.rejoining = false
			n.inc = max(n.inc, n.deadInc) + 1
			u := Update{State: Alive, Host: n.self, Inc: n.inc, From: n.self}
			n.enqueue(u)
			// The master took the host back at no incarnation of its
			// own: told the new one, it drops a suspicion of the old
			// one (a peer that could not reach the host while it
			// registered again), which no refutation would answer.
			n.out = append(n.out, Effect{Kind: EffReport, Update: u})
		}
	case EvForget:
		if ev.Host != n.self {
			m := n.get(ev.Host)
			m.forgotten, m.susp, m.reportAt = true, nil, time.Time{}
			if m.state != Dead {
				m.state = Dead
			}
			n.undead(ev.Host)
		}
	}
	if n.started {
		n.tick(now)
		n.due = n.Next()
	}
	return n.out
}

// credit shifts every deadline by the time the node was stalled — stepped
// more than half a probe interval after it asked to be — plus a probe
// timeout, and lowers its health: an overloaded host must not accuse
// those it failed to hear.
func (n *Node) credit(now time.Time) {
	lag := now.Sub(n.due)
	if n.due.IsZero() || lag <= n.cfg.ProbeInterval/2 {
		return
	}
	n.aware(1)
	// Plus a probe timeout: the answers queued behind the stall are read
	// before anything times out.
	lag += n.scale(n.cfg.ProbeTimeout)
	n.nextProbe = n.nextProbe.Add(lag)
	if p := n.probe; p != nil {
		p.direct, p.end = p.direct.Add(lag), p.end.Add(lag)
	}
	for _, r := range n.relays {
		r.nackAt, r.until = r.nackAt.Add(lag), r.until.Add(lag)
	}
	for _, m := range n.diff {
		if m.susp != nil {
			m.susp.start = m.susp.start.Add(lag)
		}
		if !m.reportAt.IsZero() {
			m.reportAt = m.reportAt.Add(lag)
		}
	}
	if n.rejoining {
		n.rejoinAt = n.rejoinAt.Add(lag)
	}
}

// tick runs what is due at now: the probe's deadlines, a new probe, the
// relays' nacks, the suspicions' deaths, a rejoin.
func (n *Node) tick(now time.Time) {
	if p := n.probe; p != nil {
		if !p.indirect && !now.Before(p.direct) {
			n.indirect(p)
		}
		if p.indirect && !now.Before(p.end) {
			n.probeFailed(now, p)
		}
	}
	if n.probe == nil && !now.Before(n.nextProbe) {
		n.startProbe(now)
	}
	if len(n.relays) > 0 {
		seqs := make([]uint32, 0, len(n.relays))
		for s := range n.relays {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		for _, s := range seqs {
			r := n.relays[s]
			if !r.nacked && !now.Before(r.nackAt) {
				r.nacked = true
				n.send(Msg{Kind: Nack, To: r.from, Seq: r.seq, Target: r.target})
			}
			if !now.Before(r.until) {
				delete(n.relays, s)
			}
		}
	}
	var due, report []task.HostID
	for h, m := range n.diff {
		if m.susp != nil && !now.Before(m.susp.deadline()) {
			due = append(due, h)
		}
		if !m.reportAt.IsZero() && !now.Before(m.reportAt) {
			report = append(report, h)
		}
	}
	slices.Sort(due)
	for _, h := range due {
		m := n.diff[h]
		u := Update{State: Dead, Host: h, Inc: m.inc, From: n.self}
		n.apply(now, u)
		n.out = append(n.out, Effect{Kind: EffReport, Update: u})
	}
	// Deaths the master has not confirmed: this host's own, reported
	// again; those it only heard of, reported after a backstop (their
	// reporters may have failed, or been cut off from the master).
	slices.Sort(report)
	for _, h := range report {
		m := n.diff[h]
		m.reportAt = now.Add(n.cfg.ReportEvery)
		n.out = append(n.out, Effect{Kind: EffReport, Update: Update{State: Dead, Host: h, Inc: m.inc, From: n.self}})
	}
	if n.rejoining && !now.Before(n.rejoinAt) {
		n.rejoinAt = now.Add(n.cfg.RejoinEvery)
		n.out = append(n.out, Effect{Kind: EffRejoin, Inc: n.deadInc})
	}
}

// startProbe probes the next member of the rotation (or, one round in
// DeadProbeEvery, a member held dead).
func (n *Node) startProbe(now time.Time) {
	interval := n.scale(n.cfg.ProbeInterval)
	n.nextProbe = now.Add(interval)
	n.rounds++
	var target task.HostID
	dead := false
	if len(n.dead) > 0 && n.rounds%n.cfg.DeadProbeEvery == 0 {
		target, dead = n.dead[n.rnd.IntN(len(n.dead))], true
	} else if target = n.nextTarget(); target == 0 {
		return
	}
	st, inc, _ := n.State(target)
	n.seq++
	n.probe = &probe{target: target, inc: inc, seq: n.seq, direct: now.Add(n.scale(n.cfg.ProbeTimeout)), end: now.Add(interval), dead: dead}
	msg := Msg{Kind: Ping, To: target, Seq: n.seq}
	if st != Alive {
		// Tell it first what this host holds of it: a suspected member
		// refutes at once, one held dead learns it must rejoin.
		msg.Gossip = []Update{{State: st, Host: target, Inc: inc, From: n.self}}
	}
	n.send(msg)
}

// nextTarget walks the rotation to the next member neither this host nor
// held dead (0 when there is none).
func (n *Node) nextTarget() task.HostID {
	l := len(n.roster)
	for range l {
		if n.step >= l {
			n.step = 0
			n.off = n.rnd.IntN(l)
			n.stride = 1 + n.rnd.IntN(l)
			for gcd(n.stride, l) != 1 {
				n.stride = 1 + n.stride%l
			}
		}
		h := n.roster[(n.off+n.step*n.stride)%l]
		n.step++
		if h == n.self {
			continue
		}
		if m := n.diff[h]; m != nil && m.state == Dead {
			continue
		}
		return h
	}
	return 0
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// indirect asks IndirectChecks random live members to probe p's target.
func (n *Node) indirect(p *probe) {
	p.indirect = true
	if p.dead {
		return
	}
	l := len(n.roster)
	var asked []task.HostID
	for try := 0; try < 4*n.cfg.IndirectChecks && len(asked) < n.cfg.IndirectChecks && l > 0; try++ {
		h := n.roster[n.rnd.IntN(l)]
		if h == n.self || h == p.target || slices.Contains(asked, h) {
			continue
		}
		if st, _, _ := n.State(h); st != Alive {
			continue
		}
		asked = append(asked, h)
		n.send(Msg{Kind: PingReq, To: h, Seq: p.seq, Target: p.target})
	}
	p.ask = len(asked)
}

// probeFailed: neither the target nor the relays answered. The target is
// suspected (unless it was probed as dead); the local health rises by the
// nacks that did not come — the relays are taken to be working, so their
// silence is this host's trouble — or by one without relays.
func (n *Node) probeFailed(now time.Time, p *probe) {
	n.probe = nil
	if p.dead {
		return
	}
	if p.ask > 0 {
		n.aware(p.ask - p.nacks)
	} else {
		n.aware(1)
	}
	if st, inc, _ := n.State(p.target); st != Dead && inc == p.inc {
		originator := st == Alive
		u := Update{State: Suspect, Host: p.target, Inc: inc, From: n.self}
		n.apply(now, u)
		if m := n.diff[p.target]; m != nil && m.susp != nil {
			m.susp.mine = true
		}
		if originator {
			n.out = append(n.out, Effect{Kind: EffReport, Update: u})
		}
	}
}

// receive handles a message from another host.
func (n *Node) receive(now time.Time, msg Msg) {
	if msg.From == n.self || msg.From == 0 {
		return
	}
	// The sender is heard from: learn it if new or newer.
	if _, inc, ok := n.State(msg.From); !ok || msg.Inc > inc {
		n.apply(now, Update{State: Alive, Host: msg.From, Inc: msg.Inc, From: msg.From})
	}
	for _, u := range msg.Gossip {
		if _, _, known := n.State(u.Host); known {
			// Gossip never adds a member: a host is learnt from the
			// master's list or from its own messages, whose sender its
			// connection's certificate vouches for.
			n.apply(now, u)
		}
	}
	// What this host holds of the sender if it is not alive here: it is
	// told so on the answer.
	var about []Update
	if st, inc, _ := n.State(msg.From); st != Alive && inc >= msg.Inc {
		about = []Update{{State: st, Host: msg.From, Inc: inc, From: n.self}}
	}
	switch msg.Kind {
	case Ping:
		n.send(Msg{Kind: Ack, To: msg.From, Seq: msg.Seq, Gossip: about})
	case PingReq:
		if msg.Target == n.self || msg.Target == 0 {
			n.send(Msg{Kind: Ack, To: msg.From, Seq: msg.Seq, Target: msg.Target, Gossip: about})
			return
		}
		if len(n.relays) >= maxRelays {
			// Asked for more than a host's share: refused, as if
			// the target were silent.
			n.send(Msg{Kind: Nack, To: msg.From, Seq: msg.Seq, Target: msg.Target})
			return
		}
		n.seq++
		n.relays[n.seq] = &relay{from: msg.From, seq: msg.Seq, target: msg.Target,
			nackAt: now.Add(n.cfg.ProbeTimeout * 4 / 5), until: now.Add(2 * n.cfg.ProbeInterval)}
		ping := Msg{Kind: Ping, To: msg.Target, Seq: n.seq}
		if st, inc, _ := n.State(msg.Target); st != Alive {
			ping.Gossip = []Update{{State: st, Host: msg.Target, Inc: inc, From: n.self}}
		}
		n.send(ping)
	case Ack:
		if r := n.relays[msg.Seq]; r != nil && msg.Target == 0 && msg.From == r.target {
			delete(n.relays, msg.Seq)
			n.send(Msg{Kind: Ack, To: r.from, Seq: r.seq, Target: r.target})
			return
		}
		p := n.probe
		if p == nil || p.seq != msg.Seq {
			return
		}
		if (msg.Target == 0 && msg.From == p.target) || msg.Target == p.target {
			n.probe = nil
			if !p.dead {
				n.aware(-1)
			}
		}
	case Nack:
		if p := n.probe; p != nil && p.seq == msg.Seq && msg.Target == p.target {
			p.nacks++
		}
	}
}

// rejoin: this host learnt it was declared dead at incarnation inc; it
// asks the master to take it back (and again every RejoinEvery).
func (n *Node) rejoin(now time.Time, inc uint32) {
	n.rejoining = true
	n.deadInc = inc
	n.rejoinAt = now.Add(n.cfg.RejoinEvery)
	n.out = append(n.out, Effect{Kind: EffRejoin, Inc: inc})
}

// refute answers a suspicion or check of this host at incarnation inc: a
// larger incarnation, gossiped and told to the master.
func (n *Node) refute(inc uint32) {
	n.inc = max(n.inc, inc) + 1
	u := Update{State: Alive, Host: n.self, Inc: n.inc, From: n.self}
	n.enqueue(u)
	n.aware(1)
	n.out = append(n.out, Effect{Kind: EffReport, Update: u})
}

// apply merges one update into the view, gossiping it on if it is news.
func (n *Node) apply(now time.Time, u Update) {
	if u.Host == 0 || u.State < Alive || u.State > Dead {
		return
	}
	if u.Host == n.self {
		switch {
		case u.State == Suspect && u.Inc >= n.inc && !n.rejoining:
			n.refute(u.Inc)
		case u.State == Dead && u.Inc >= n.inc && !n.rejoining:
			n.rejoin(now, u.Inc)
		}
		return
	}
	st, inc, known := n.State(u.Host)
	switch u.State {
	case Alive:
		if known && u.Inc <= inc {
			return
		}
		if !known {
			n.addRoster(u.Host)
		}
		m := n.get(u.Host)
		if m.forgotten {
			m.forgotten = false
		}
		m.state, m.inc, m.susp = Alive, u.Inc, nil
		m.confirmed, m.reportAt = false, time.Time{}
		n.undead(u.Host)
		n.tidy(u.Host)
	case Suspect:
		if !known || u.Inc < inc || (st == Dead && u.Inc <= inc) {
			return
		}
		m := n.get(u.Host)
		if st == Suspect && u.Inc == inc && m.susp != nil {
			if u.From == n.self {
				m.susp.mine = true
			}
			if slices.Contains(m.susp.from, u.From) || len(m.susp.from) > m.susp.k {
				// Counted already, or enough to reach the least
				// timeout: no news to gossip on.
				return
			}
			m.susp.from = append(m.susp.from, u.From)
		} else {
			m.state, m.inc = Suspect, u.Inc
			m.susp = n.newSuspicion(now, u.From)
			n.undead(u.Host)
		}
	case Dead:
		if known && u.Inc < inc {
			return
		}
		if !known {
			n.addRoster(u.Host)
		}
		m := n.get(u.Host)
		if st == Dead && u.Inc == inc {
			// Known; news only if the master confirms it now.
			if u.From != master || m.confirmed {
				return
			}
			m.confirmed, m.reportAt = true, time.Time{}
			break
		}
		m.state, m.inc, m.susp = Dead, u.Inc, nil
		m.confirmed = u.From == master
		switch {
		case m.confirmed || m.forgotten:
			m.reportAt = time.Time{}
		case u.From == n.self:
			m.reportAt = now.Add(n.cfg.ReportEvery)
		default:
			_, hi, _ := suspicionBounds(n.cfg, n.Members())
			m.reportAt = now.Add(2*hi + time.Duration(n.rnd.Int64N(int64(hi))))
		}
		if !m.forgotten {
			if i, found := slices.BinarySearch(n.dead, u.Host); !found {
				n.dead = slices.Insert(n.dead, i, u.Host)
			}
		}
	}
	n.enqueue(u)
}

func (n *Node) newSuspicion(now time.Time, from task.HostID) *suspicion {
	lo, hi, k := suspicionBounds(n.cfg, n.Members())
	return &suspicion{start: now, min: lo, max: hi, k: k, from: []task.HostID{from}, mine: from == n.self}
}

// suspicionBounds are the least and longest suspicion timeouts among
// members hosts, and the independent suspicions that bring the timeout
// down to the least (Lifeguard, as memberlist scales them).
func suspicionBounds(cfg Config, members int) (lo, hi time.Duration, k int) {
	lo = time.Duration(float64(cfg.SuspicionMult) * max(1, math.Log10(float64(members))) * float64(cfg.ProbeInterval))
	return lo, lo * time.Duration(cfg.SuspicionMaxMult), max(min(cfg.SuspicionMult-2, members-2), 0)
}

// get returns h's record, made from the default if it has none.
func (n *Node) get(h task.HostID) *member {
	m := n.diff[h]
	if m == nil {
		m = &member{state: Alive}
		n.diff[h] = m
	}
	return m
}

// tidy drops a record that says no more than the default.
func (n *Node) tidy(h task.HostID) {
	if m := n.diff[h]; m != nil && m.state == Alive && m.inc == 0 && !m.forgotten {
		delete(n.diff, h)
	}
}

func (n *Node) undead(h task.HostID) {
	if i, found := slices.BinarySearch(n.dead, h); found {
		n.dead = slices.Delete(n.dead, i, i+1)
	}
}

// addRoster adds h to the roster, copying it: the roster may be shared.
func (n *Node) addRoster(h task.HostID) {
	i, found := slices.BinarySearch(n.roster, h)
	if found {
		return
	}
	r := make([]task.HostID, 0, len(n.roster)+1)
	r = append(r, n.roster[:i]...)
	r = append(r, h)
	n.roster = append(r, n.roster[i:]...)
	n.step = len(n.roster) // a new pass, over the new roster
}

// enqueue puts u on the gossip queue, replacing older news of its host.
func (n *Node) enqueue(u Update) {
	for i := range n.queue {
		if n.queue[i].u.Host == u.Host {
			n.queue = slices.Delete(n.queue, i, i+1)
			break
		}
	}
	n.queue = append(n.queue, gossip{u: u})
}

// send stamps msg with this host's identity and piggybacks the gossip that
// was sent least, dropping each update after its retransmissions.
func (n *Node) send(msg Msg) {
	msg.From, msg.Inc = n.self, n.inc
	room := n.cfg.MaxPiggyback - len(msg.Gossip)
	if room > 0 && len(n.queue) > 0 {
		limit := n.cfg.RetransmitMult * int(math.Ceil(math.Log10(float64(n.Members()+1))))
		slices.SortStableFunc(n.queue, func(a, b gossip) int { return a.sent - b.sent })
		take := min(room, len(n.queue))
		for i := range take {
			if u := n.queue[i].u; (len(msg.Gossip) > 0 && msg.Gossip[0].Host == u.Host) || (u.Host == msg.To && u.State == Alive) {
				// Already said first, or the recipient's own liveness.
				continue
			}
			msg.Gossip = append(msg.Gossip, n.queue[i].u)
			n.queue[i].sent++
		}
		n.queue = slices.DeleteFunc(n.queue, func(g gossip) bool { return g.sent >= limit })
	}
	n.out = append(n.out, Effect{Kind: EffSend, Msg: msg})
}
