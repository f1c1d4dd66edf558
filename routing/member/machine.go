package member

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Machine is the master's membership machine: the failure detector and
// the admission bucket behind one seam, Step, with the policy that turns
// their answers into what the driver does (admit a host or tell it to
// retry, show a suspicion or clear it, delete a dead host, report the
// observer's health, take back a host deleted for its silence). Like the
// rest of the package it performs no I/O and reads no clock, and it is not
// safe for concurrent use.
type Machine struct {
	det    *Detector
	bucket *Bucket
	health int // the health last reported (Health effect)
	// gone are the hosts deleted that may register again (for their
	// silence, or while rejoining), with their names, oldest first in
	// order; an operator's deletion is final.
	gone  map[task.HostID]string
	order []task.HostID
}

// MaxGone bounds how many deleted hosts the machine remembers for their
// return; past it, the oldest is forgotten.
const MaxGone = 4096

// NewMachine returns a machine whose detector is tuned by cfg and whose
// bucket admits rate registrations a second, burst at once (rate <= 0:
// every registration).
func NewMachine(cfg Config, rate float64, burst int) (*Machine, error) {
	det, err := NewDetector(cfg)
	if err != nil {
		return nil, err
	}
	return &Machine{det: det, bucket: NewBucket(max(rate, 0), burst), gone: map[task.HostID]string{}}, nil
}

// EventKind is the kind of an Event.
type EventKind uint8

// Membership events. Each names the fields of Event it reads.
const (
	// Join: Host asks to register. Member says it is a member already,
	// registering again (its old connection lost): a member told to wait
	// counts as heard from, so it is not deleted for the silence the
	// master asks of it.
	Join EventKind = iota + 1
	// Watch: Host was registered at now; its silence counts from now.
	Watch
	// Forget: Host, named Name, was deleted; it is watched no more. It
	// may register again if Silent (deleted for its silence: the
	// machine's Delete) or Rejoining (deleted while it rejoined).
	Forget
	// Heard: Host was last heard from At.
	Heard
	// Tick: judge every watched host at now. The driver ticks every
	// heartbeat, after feeding what it heard since the last one.
	Tick
	// Return: Host, which the master does not count as a member, registers
	// again under Name. One deleted for its silence under that name is
	// taken back (Readmit); one deleted under another name is refused; of
	// any other the machine knows nothing (no effect).
	Return
)

var eventNames = [...]string{"", "join", "watch", "forget", "heard", "tick", "return"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one event of the membership machine.
type Event struct {
	Kind EventKind
	Host task.HostID
	// Name (Forget, Return) is the host's name.
	Name string
	// At (Heard) is when the host was last heard from.
	At time.Time
	// Member (Join): the host is a member registering again.
	Member bool
	// Silent and Rejoining (Forget): why the host was deleted.
	Silent, Rejoining bool
}

func (e Event) String() string {
	switch e.Kind {
	case Join:
		if e.Member {
			return fmt.Sprintf("join %v member", e.Host)
		}
		return fmt.Sprintf("join %v", e.Host)
	case Watch:
		return fmt.Sprintf("%v %v", e.Kind, e.Host)
	case Forget:
		return fmt.Sprintf("forget %v %s silent %v rejoining %v", e.Host, e.Name, e.Silent, e.Rejoining)
	case Return:
		return fmt.Sprintf("return %v %s", e.Host, e.Name)
	case Heard:
		return fmt.Sprintf("heard %v at %v", e.Host, e.At.Format(time.RFC3339Nano))
	}
	return e.Kind.String()
}

// EffectKind is the kind of an Effect.
type EffectKind uint8

// Membership effects.
const (
	// Admit: register Host now.
	Admit EffectKind = iota + 1
	// Busy: tell Host to retry after RetryAfter; it is not registered.
	Busy
	// Suspect: Host is suspected, silent for Silent; it is deleted once
	// silent for DeadAfter. Show the suspicion.
	Suspect
	// Clear: Host, suspected, was heard from again after Silent.
	Clear
	// Delete: Host is confirmed dead after Silent: delete it from the
	// virtual machine.
	Delete
	// Health: the observer's local health went from Was to Health; a
	// suspected host is confirmed dead after DeadAfter now.
	Health
	// Readmit: take Host back under its old ID with none of its tasks (all
	// were given up at its deletion); it is watched from now on.
	Readmit
	// Refuse: refuse Host's registration with Err.
	Refuse
)

var effectNames = [...]string{"", "admit", "busy", "suspect", "clear", "delete", "health", "readmit", "refuse"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && k != 0 {
		return effectNames[k]
	}
	return "effect(" + strconv.Itoa(int(k)) + ")"
}

// Effect is something the membership machine wants done.
type Effect struct {
	Kind EffectKind
	Host task.HostID
	// RetryAfter (Busy) is how long the host is to wait.
	RetryAfter time.Duration
	// Silent (Suspect, Clear, Delete) is how long the host had been
	// silent, credited for the observer's stalls.
	Silent time.Duration
	// DeadAfter (Suspect, Health) is the silence that confirms a
	// suspected host dead now.
	DeadAfter time.Duration
	// Health and Was (Health) are the observer's local health now and
	// before.
	Health, Was int
	// Err (Refuse) says why.
	Err error
}

func (e Effect) String() string {
	switch e.Kind {
	case Admit, Readmit:
		return fmt.Sprintf("%v %v", e.Kind, e.Host)
	case Refuse:
		return fmt.Sprintf("refuse %v: %v", e.Host, e.Err)
	case Busy:
		return fmt.Sprintf("busy %v, retry after %v", e.Host, e.RetryAfter)
	case Suspect:
		return fmt.Sprintf("suspect %v after %v, dead after %v", e.Host, e.Silent, e.DeadAfter)
	case Clear, Delete:
		return fmt.Sprintf("%v %v after %v", e.Kind, e.Host, e.Silent)
	case Health:
		return fmt.Sprintf("health %d→%d, dead after %v", e.Was, e.Health, e.DeadAfter)
	}
	return e.Kind.String()
}

// Step feeds one event to the machine at now and returns the effects it
// wants done, in order.
func (m *Machine) Step(now time.Time, ev Event) []Effect {
	switch ev.Kind {
	case Join:
		wait := m.bucket.Take(now)
		if wait <= 0 {
			return []Effect{{Kind: Admit, Host: ev.Host}}
		}
		// Registrations beyond the rate: the master is under a storm, and
		// its hosts' words may reach it late.
		m.det.Strain()
		if ev.Member {
			m.det.Heard(ev.Host, now)
		}
		return []Effect{{Kind: Busy, Host: ev.Host, RetryAfter: wait}}
	case Watch:
		m.det.Add(ev.Host, now)
		m.unforget(ev.Host)
	case Forget:
		m.det.Remove(ev.Host)
		if ev.Silent || ev.Rejoining {
			m.remember(ev.Host, ev.Name)
		}
	case Return:
		name, ok := m.gone[ev.Host]
		switch {
		case !ok:
			return nil
		case name != ev.Name:
			return []Effect{{Kind: Refuse, Host: ev.Host, Err: fmt.Errorf("host %v was %s, not %s", ev.Host, name, ev.Name)}}
		}
		m.det.Add(ev.Host, now)
		m.unforget(ev.Host)
		return []Effect{{Kind: Readmit, Host: ev.Host}}
	case Heard:
		m.det.Heard(ev.Host, ev.At)
	case Tick:
		return m.tick(now)
	}
	return nil
}

// remember keeps h, deleted, for its return; past MaxGone the oldest goes.
func (m *Machine) remember(h task.HostID, name string) {
	m.unforget(h)
	if len(m.order) >= MaxGone {
		delete(m.gone, m.order[0])
		m.order = m.order[1:]
	}
	m.gone[h] = name
	m.order = append(m.order, h)
}

// unforget drops h from the deleted hosts remembered.
func (m *Machine) unforget(h task.HostID) {
	if _, ok := m.gone[h]; !ok {
		return
	}
	delete(m.gone, h)
	if i := slices.Index(m.order, h); i >= 0 {
		m.order = slices.Delete(m.order, i, i+1)
	}
}

// tick judges the hosts: a health that changed is reported first, then
// each host's transition, by host ID.
func (m *Machine) tick(now time.Time) []Effect {
	changes := m.det.Tick(now)
	dead := m.det.DeadTimeout()
	var out []Effect
	if h := m.det.Health(); h != m.health {
		out = append(out, Effect{Kind: Health, Health: h, Was: m.health, DeadAfter: dead})
		m.health = h
	}
	for _, c := range changes {
		switch c.To {
		case Suspected:
			out = append(out, Effect{Kind: Suspect, Host: c.Host, Silent: c.Silent, DeadAfter: dead})
		case Alive:
			out = append(out, Effect{Kind: Clear, Host: c.Host, Silent: c.Silent})
		case Dead:
			out = append(out, Effect{Kind: Delete, Host: c.Host, Silent: c.Silent})
		}
	}
	return out
}

// Config returns the detector's configuration, defaults filled in.
func (m *Machine) Config() Config { return m.det.Config() }

// State is h's liveness (Dead for a host not watched).
func (m *Machine) State(h task.HostID) State { return m.det.State(h) }

// Silent is how long h has been silent at now, credited for the
// observer's stalls (0 for a host not watched).
func (m *Machine) Silent(h task.HostID, now time.Time) time.Duration { return m.det.Silent(h, now) }

// Health is the observer's local health (see Detector.Health).
func (m *Machine) Health() int { return m.det.Health() }

// DeadTimeout is the silence that confirms a suspected host dead now.
func (m *Machine) DeadTimeout() time.Duration { return m.det.DeadTimeout() }
