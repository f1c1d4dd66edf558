package member

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dpvm/dpvm/task"
)

// Machine is the master's membership machine: the failure detector and
// the admission bucket behind one seam, Step, with the policy that turns
// their answers into what the driver does (admit a host or tell it to
// retry, show a suspicion or clear it, delete a dead host, report the
// observer's health). Like the rest of the package it performs no I/O and
// reads no clock, and it is not safe for concurrent use.
type Machine struct {
	det    *Detector
	bucket *Bucket
	health int // the health last reported (Health effect)
}

// NewMachine returns a machine whose detector is tuned by cfg and whose
// bucket admits rate registrations a second, burst at once (rate <= 0:
// every registration).
func NewMachine(cfg Config, rate float64, burst int) (*Machine, error) {
	det, err := NewDetector(cfg)
	if err != nil {
		return nil, err
	}
	return &Machine{det: det, bucket: NewBucket(max(rate, 0), burst)}, nil
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
	// Forget: Host was deleted; it is watched no more.
	Forget
	// Heard: Host was last heard from At.
	Heard
	// Tick: judge every watched host at now. The driver ticks every
	// heartbeat, after feeding what it heard since the last one.
	Tick
)

var eventNames = [...]string{"", "join", "watch", "forget", "heard", "tick"}

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
	// At (Heard) is when the host was last heard from.
	At time.Time
	// Member (Join): the host is a member registering again.
	Member bool
}

func (e Event) String() string {
	switch e.Kind {
	case Join:
		if e.Member {
			return fmt.Sprintf("join %v member", e.Host)
		}
		return fmt.Sprintf("join %v", e.Host)
	case Watch, Forget:
		return fmt.Sprintf("%v %v", e.Kind, e.Host)
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
)

var effectNames = [...]string{"", "admit", "busy", "suspect", "clear", "delete", "health"}

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
}

func (e Effect) String() string {
	switch e.Kind {
	case Admit:
		return fmt.Sprintf("admit %v", e.Host)
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
	case Forget:
		m.det.Remove(ev.Host)
	case Heard:
		m.det.Heard(ev.Host, ev.At)
	case Tick:
		return m.tick(now)
	}
	return nil
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
