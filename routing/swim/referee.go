package swim

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/task"
)

// RefEventKind is the kind of a RefEvent.
type RefEventKind uint8

// Referee events. Each names the fields of RefEvent it reads.
const (
	// RefTick: time passed; the driver steps the referee at Next() at the
	// latest.
	RefTick RefEventKind = iota + 1
	// RefAdmit: Host is a member at incarnation Inc (registered, or taken
	// back after its deletion).
	RefAdmit
	// RefReport: member From reports Update (an EffReport).
	RefReport
	// RefCheckAck: Host answered check Seq at incarnation Inc.
	RefCheckAck
	// RefRemove: Host left or was deleted by other means.
	RefRemove
)

var refEventNames = [...]string{"", "tick", "admit", "report", "check-ack", "remove"}

func (k RefEventKind) String() string {
	if k >= RefTick && k <= RefRemove {
		return refEventNames[k]
	}
	return "ref-event(" + strconv.Itoa(int(k)) + ")"
}

// RefEvent is an input of a Referee.
type RefEvent struct {
	Kind   RefEventKind
	Host   task.HostID
	From   task.HostID
	Inc    uint32
	Seq    uint32
	Update Update
}

// RefEffectKind is the kind of a RefEffect.
type RefEffectKind uint8

// Referee effects. Each names the fields of RefEffect it sets.
const (
	// RefCheck: send Host a check Seq: it is accused at incarnation Inc.
	RefCheck RefEffectKind = iota + 1
	// RefDelete: Host is confirmed dead at incarnation Inc: the master's
	// lost-host path deletes it (its tasks are lost or rolled back); it
	// comes back only by registering again.
	RefDelete
	// RefGossip: tell host To that Update holds (a refutation the check
	// learnt, sent to the reporters of the death).
	RefGossip
	// RefShow: Host's liveness for operators is now State (alive,
	// suspect).
	RefShow
)

var refEffectNames = [...]string{"", "check", "delete", "gossip", "show"}

func (k RefEffectKind) String() string {
	if k >= RefCheck && k <= RefShow {
		return refEffectNames[k]
	}
	return "ref-effect(" + strconv.Itoa(int(k)) + ")"
}

// RefEffect is an output of a Referee, for the master to perform.
type RefEffect struct {
	Kind   RefEffectKind
	Host   task.HostID
	To     task.HostID
	Seq    uint32
	Inc    uint32
	State  State
	Update Update
}

func (e RefEffect) String() string {
	switch e.Kind {
	case RefCheck:
		return fmt.Sprintf("check %v s%d #%d", e.Host, e.Seq, e.Inc)
	case RefDelete:
		return fmt.Sprintf("delete %v#%d", e.Host, e.Inc)
	case RefGossip:
		return fmt.Sprintf("gossip %v [%v]", e.To, e.Update)
	case RefShow:
		return fmt.Sprintf("show %v %v", e.Host, e.State)
	}
	return e.Kind.String()
}

// Referee is the master's part: it hears the hosts' reports, shows
// suspicions, and confirms a reported death only after checking the
// accused itself (see the package documentation). It is not safe for
// concurrent use.
type Referee struct {
	cfg   Config
	hosts map[task.HostID]*refHost
	// gone: the hosts deleted, at the incarnation they died at, until
	// they are admitted again; a report of their death is answered with
	// its confirmation.
	gone map[task.HostID]uint32
	seq  uint32
}

type refHost struct {
	inc   uint32
	state State // Alive or Suspect: shown; a deleted host has no record
	check *check
	// recheck is when a suspicion shown with no death reported since is
	// checked by the master itself (zero: none shown, or checked
	// already): the accused's refutation, told to the master by one
	// report that may be lost, or the death, reported within the
	// longest suspicion timeout and a report period, would have come by
	// then. Without it, a lost refutation would leave the host shown
	// suspected for good.
	recheck time.Time
}

// check is the verification of a reported death.
type check struct {
	seq       uint32
	inc       uint32
	tries     int
	forgiven  int // late steps that did not count as tries (stalls)
	next      time.Time
	reporters []task.HostID
}

// NewReferee returns a referee that knows no member.
func NewReferee(cfg Config) (*Referee, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Referee{cfg: c, hosts: map[task.HostID]*refHost{}, gone: map[task.HostID]uint32{}}, nil
}

// Member reports whether h is a member, and its incarnation as last known.
func (r *Referee) Member(h task.HostID) (inc uint32, ok bool) {
	if x := r.hosts[h]; x != nil {
		return x.inc, true
	}
	return 0, false
}

// Next is the latest time at which the referee must be stepped (zero:
// nothing is pending).
func (r *Referee) Next() time.Time {
	var t time.Time
	for _, x := range r.hosts {
		if c := x.check; c != nil && (t.IsZero() || c.next.Before(t)) {
			t = c.next
		}
		if x.check == nil && !x.recheck.IsZero() && (t.IsZero() || x.recheck.Before(t)) {
			t = x.recheck
		}
	}
	return t
}

// Step feeds ev to the referee at now and returns the effects to perform.
func (r *Referee) Step(now time.Time, ev RefEvent) []RefEffect {
	var out []RefEffect
	switch ev.Kind {
	case RefAdmit:
		r.hosts[ev.Host] = &refHost{inc: ev.Inc, state: Alive}
		delete(r.gone, ev.Host)
	case RefRemove:
		delete(r.hosts, ev.Host)
		delete(r.gone, ev.Host)
	case RefReport:
		out = r.report(now, ev.From, ev.Update, out)
	case RefCheckAck:
		x := r.hosts[ev.Host]
		if x == nil {
			break
		}
		if c := x.check; c != nil && c.seq == ev.Seq {
			x.check = nil
			x.inc = max(x.inc, ev.Inc)
			u := Update{State: Alive, Host: ev.Host, Inc: x.inc, From: ev.Host}
			for _, to := range c.reporters {
				if r.hosts[to] != nil {
					out = append(out, RefEffect{Kind: RefGossip, To: to, Update: u})
				}
			}
			out = r.show(ev.Host, x, Alive, out)
		}
	}
	var stale, due []task.HostID
	for h, x := range r.hosts {
		if x.check == nil && !x.recheck.IsZero() && !now.Before(x.recheck) {
			stale = append(stale, h)
		}
		if x.check != nil && !now.Before(x.check.next) {
			due = append(due, h)
		}
	}
	slices.Sort(stale)
	for _, h := range stale {
		// Shown suspected, and no death reported since: checked as a
		// reported death is, with no reporter to tell the outcome.
		x := r.hosts[h]
		x.recheck = time.Time{}
		r.seq++
		x.check = &check{seq: r.seq, inc: x.inc, tries: 1, next: now.Add(r.cfg.CheckTimeout)}
		out = append(out, RefEffect{Kind: RefCheck, Host: h, Seq: r.seq, Inc: x.inc})
	}
	slices.Sort(due)
	for _, h := range due {
		x := r.hosts[h]
		c := x.check
		if now.Sub(c.next) > r.cfg.CheckTimeout && c.forgiven < r.cfg.CheckTries {
			// Stepped more than a check's timeout after the try was due:
			// the master was stalled (overloaded), and the accused's
			// answer may be queued behind the stall. The try does not
			// count, at most CheckTries times a check, so that an
			// overloaded master deletes nobody for its own lateness and a
			// dead host is still deleted within about twice the window.
			c.forgiven++
			c.next = now.Add(r.cfg.CheckTimeout)
			out = append(out, RefEffect{Kind: RefCheck, Host: h, Seq: c.seq, Inc: c.inc})
			continue
		}
		if c.tries >= r.cfg.CheckTries {
			delete(r.hosts, h)
			r.gone[h] = c.inc
			dead := Update{State: Dead, Host: h, Inc: c.inc, From: master}
			out = append(out, RefEffect{Kind: RefDelete, Host: h, Inc: c.inc}, RefEffect{Kind: RefGossip, To: h, Update: dead})
			// The reporters learn the confirmation, and spread it: the
			// others stop waiting to report it themselves.
			for _, to := range c.reporters {
				if r.hosts[to] != nil {
					out = append(out, RefEffect{Kind: RefGossip, To: to, Update: dead})
				}
			}
			continue
		}
		c.tries++
		c.next = now.Add(r.cfg.CheckTimeout)
		out = append(out, RefEffect{Kind: RefCheck, Host: h, Seq: c.seq, Inc: c.inc})
	}
	return out
}

// report takes one host's report. Reports from non-members (a host cut
// off and deleted, which rejoins), about non-members, or of a suspicion or
// refutation of an older incarnation than known are dropped; a death of an
// older incarnation is checked at the known one.
func (r *Referee) report(now time.Time, from task.HostID, u Update, out []RefEffect) []RefEffect {
	if r.hosts[from] == nil {
		// Not a member: it was deleted, and learns it must rejoin.
		return append(out, RefEffect{Kind: RefGossip, To: from, Update: Update{State: Dead, Host: from, Inc: u.Inc, From: master}})
	}
	x := r.hosts[u.Host]
	if x == nil {
		if inc, ok := r.gone[u.Host]; ok && u.State == Dead && u.Inc <= inc {
			// Confirmed already: the reporter learns so.
			out = append(out, RefEffect{Kind: RefGossip, To: from, Update: Update{State: Dead, Host: u.Host, Inc: inc, From: master}})
		}
		return out
	}
	if u.Inc < x.inc {
		if u.State != Dead {
			return out
		}
		// A death at an older incarnation: the reporter missed the
		// accused's refutation, and still cannot reach it. The accused
		// may have failed since (before its refutation spread, every
		// report of its death would be of the older incarnation), so it
		// is checked at the incarnation the master knows: a live host
		// answers, and the reporter learns its refutation.
		u.Inc = x.inc
	}
	switch u.State {
	case Alive:
		if u.Host != from || u.Inc == x.inc && x.state == Alive {
			return out
		}
		x.inc = u.Inc
		if x.check != nil && x.check.inc < u.Inc {
			x.check = nil
		}
		return r.show(u.Host, x, Alive, out)
	case Suspect:
		x.inc = u.Inc
		if x.check == nil && x.state == Alive {
			_, hi, _ := suspicionBounds(r.cfg, len(r.hosts))
			x.recheck = now.Add(hi + r.cfg.ReportEvery)
		}
		return r.show(u.Host, x, Suspect, out)
	case Dead:
		x.inc = u.Inc
		if c := x.check; c != nil {
			if !slices.Contains(c.reporters, from) && len(c.reporters) < 4*r.cfg.IndirectChecks {
				c.reporters = append(c.reporters, from)
			}
			return out
		}
		r.seq++
		x.recheck = time.Time{}
		x.check = &check{seq: r.seq, inc: u.Inc, tries: 1, next: now.Add(r.cfg.CheckTimeout), reporters: []task.HostID{from}}
		out = r.show(u.Host, x, Suspect, out)
		return append(out, RefEffect{Kind: RefCheck, Host: u.Host, Seq: r.seq, Inc: u.Inc})
	}
	return out
}

func (r *Referee) show(h task.HostID, x *refHost, s State, out []RefEffect) []RefEffect {
	if s == Alive {
		x.recheck = time.Time{}
	}
	if x.state == s {
		return out
	}
	x.state = s
	return append(out, RefEffect{Kind: RefShow, Host: h, State: s})
}
