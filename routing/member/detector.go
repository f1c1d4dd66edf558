package member

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dpvm/dpvm/task"
)

// State is a host's liveness as the detector sees it.
type State uint8

// Liveness states. Append only: they are shown to operators by name.
const (
	// Alive: heard from within the suspicion timeout.
	Alive State = iota
	// Suspected: silent past the suspicion timeout, not yet past the
	// death timeout; it may still be heard from again.
	Suspected
	// Dead: silent past the death timeout after being suspected. Final.
	Dead
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspected:
		return "suspected"
	case Dead:
		return "dead"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Config tunes a Detector. The zero value of each field means its default.
type Config struct {
	// Heartbeat is how often hosts speak and the observer ticks (default
	// 1s).
	Heartbeat time.Duration
	// SuspectAfter is the least silence that makes a host suspected
	// (default 2 heartbeats, at most half of DeadAfter).
	SuspectAfter time.Duration
	// DeadAfter is the silence that confirms a suspected host dead while
	// the observer is healthy (default 5 heartbeats).
	DeadAfter time.Duration
	// Phi is the phi-accrual threshold: a host is suspected once its
	// silence has probability 10^-Phi under a normal fit of its intervals
	// (default 8).
	Phi float64
	// Window is how many intervals per host the fit uses (default 32).
	Window int
	// MaxHealth bounds the observer's local health: timeouts grow to at
	// most (1+MaxHealth) times their base (default 4).
	MaxHealth int
	// MassMin is the least number of hosts suspected at once that counts
	// as a mass suspicion, when they are also a quarter of the hosts
	// (default 3).
	MassMin int
}

// ErrConfig: a Config that cannot work.
var ErrConfig = errors.New("member: bad configuration")

// withDefaults fills in the defaults and checks the result.
func (c Config) withDefaults() (Config, error) {
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 5 * c.Heartbeat
	}
	if c.SuspectAfter <= 0 {
		c.SuspectAfter = min(2*c.Heartbeat, c.DeadAfter/2)
	}
	if c.SuspectAfter > c.DeadAfter {
		return c, fmt.Errorf("%w: suspicion after %v is later than death after %v", ErrConfig, c.SuspectAfter, c.DeadAfter)
	}
	if c.Phi <= 0 {
		c.Phi = 8
	}
	if c.Window <= 0 {
		c.Window = 32
	}
	if c.MaxHealth <= 0 {
		c.MaxHealth = 4
	}
	if c.MassMin <= 0 {
		c.MassMin = 3
	}
	return c, nil
}

// Change is a host's transition at a tick: what the driver acts on (show a
// suspicion, clear it, delete a dead host).
type Change struct {
	Host     task.HostID
	From, To State
	// Silent is how long the host had been silent (credited for the
	// observer's stalls).
	Silent time.Duration
}

func (c Change) String() string {
	return fmt.Sprintf("%v %v→%v after %v", c.Host, c.From, c.To, c.Silent)
}

// Detector is the master's failure detector (see the package
// documentation). It is not safe for concurrent use.
type Detector struct {
	cfg      Config
	hosts    map[task.HostID]*watched
	health   int
	lastTick time.Time
	strained bool      // the observer said it was overloaded since the last tick
	strainAt time.Time // the last tick that found it strained
}

type watched struct {
	state State
	last  time.Time       // last heard, credited for the observer's stalls
	gaps  []time.Duration // the last Window intervals, oldest first
	// suspectedAt is the tick that suspected the host (zero: not).
	suspectedAt time.Time
}

// NewDetector returns a detector watching no host.
func NewDetector(cfg Config) (*Detector, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Detector{cfg: c, hosts: map[task.HostID]*watched{}}, nil
}

// Config returns the detector's configuration, defaults filled in.
func (d *Detector) Config() Config { return d.cfg }

// Add watches host h, admitted at now: its silence counts from now.
// Adding a watched host starts it afresh.
func (d *Detector) Add(h task.HostID, now time.Time) {
	d.hosts[h] = &watched{last: now}
}

// Remove stops watching h.
func (d *Detector) Remove(h task.HostID) { delete(d.hosts, h) }

// Heard records that h spoke at t. Times not after the last one recorded
// are ignored; an unwatched host too.
func (d *Detector) Heard(h task.HostID, t time.Time) {
	w := d.hosts[h]
	if w == nil || w.state == Dead || !t.After(w.last) {
		return
	}
	if len(w.gaps) == d.cfg.Window {
		copy(w.gaps, w.gaps[1:])
		w.gaps = w.gaps[:len(w.gaps)-1]
	}
	w.gaps = append(w.gaps, t.Sub(w.last))
	w.last = t
}

// State is h's liveness (Dead for a host not watched).
func (d *Detector) State(h task.HostID) State {
	if w := d.hosts[h]; w != nil {
		return w.state
	}
	return Dead
}

// Silent is how long h has been silent at now, credited for the
// observer's stalls (0 for a host not watched).
func (d *Detector) Silent(h task.HostID, now time.Time) time.Duration {
	if w := d.hosts[h]; w != nil {
		return max(0, now.Sub(w.last))
	}
	return 0
}

// Health is the observer's local health: 0 when it keeps up, up to
// Config.MaxHealth when it is overloaded.
func (d *Detector) Health() int { return d.health }

// DeadTimeout is the silence that confirms a suspected host dead now.
func (d *Detector) DeadTimeout() time.Duration {
	return d.cfg.DeadAfter * time.Duration(1+d.health)
}

// SuspectTimeout is the silence that makes h suspected now.
func (d *Detector) SuspectTimeout(h task.HostID) time.Duration {
	base := d.cfg.SuspectAfter
	if w := d.hosts[h]; w != nil {
		base = max(base, d.phiBound(w.gaps))
	}
	return min(base*time.Duration(1+d.health), d.DeadTimeout())
}

// phiBound is the silence whose probability, under a normal fit of gaps,
// is 10^-Phi. Few samples, or too little spread, fall back on the
// heartbeat: mean one heartbeat, spread at least a quarter of one.
func (d *Detector) phiBound(gaps []time.Duration) time.Duration {
	hb := float64(d.cfg.Heartbeat)
	mean, sd := hb, hb/4
	if len(gaps) >= 2 {
		var sum float64
		for _, g := range gaps {
			sum += float64(g)
		}
		mean = sum / float64(len(gaps))
		var sq float64
		for _, g := range gaps {
			sq += (float64(g) - mean) * (float64(g) - mean)
		}
		sd = max(math.Sqrt(sq/float64(len(gaps)-1)), hb/4)
	}
	// P(X > t) = erfc((t-mean)/(sd·√2))/2 = 10^-Phi.
	z := math.Erfcinv(2 * math.Pow(10, -d.cfg.Phi))
	return time.Duration(mean + sd*math.Sqrt2*z)
}

// Strain records that the observer is overloaded by other work (it turned
// registrations away, say): at the next tick its health rises as for a
// late tick, and it does not fall before DeadAfter has passed without
// strain (the hosts' words may still be queued behind that work).
func (d *Detector) Strain() { d.strained = true }

// Tick judges every watched host at now and returns the transitions, by
// host ID. The driver calls it every heartbeat.
func (d *Detector) Tick(now time.Time) []Change {
	late := false
	if !d.lastTick.IsZero() {
		if lag := now.Sub(d.lastTick) - d.cfg.Heartbeat; lag > d.cfg.Heartbeat/2 {
			// The observer was stalled: it did not listen for lag, so
			// nobody's silence counts that long.
			late = true
			for _, w := range d.hosts {
				if w.state != Dead {
					w.last = minTime(now, w.last.Add(lag))
				}
			}
		}
	}
	d.lastTick = now
	ids := make([]task.HostID, 0, len(d.hosts))
	for id := range d.hosts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []Change
	suspected := 0
	for _, id := range ids {
		w := d.hosts[id]
		if w.state == Dead {
			continue
		}
		silent := now.Sub(w.last)
		var to State
		switch {
		case w.state == Suspected && silent >= d.DeadTimeout() && w.suspectedAt.Before(now):
			to = Dead
		case silent >= d.SuspectTimeout(id):
			to = Suspected
		default:
			to = Alive
		}
		if to == Suspected {
			suspected++
		}
		if to == w.state {
			continue
		}
		out = append(out, Change{Host: id, From: w.state, To: to, Silent: max(0, silent)})
		w.state = to
		switch to {
		case Suspected:
			w.suspectedAt = now
		case Alive:
			w.suspectedAt = time.Time{}
		}
	}
	mass := suspected >= d.cfg.MassMin && 4*suspected >= len(d.hosts)
	if d.strained {
		d.strainAt = now
	}
	strained := d.strained || (!d.strainAt.IsZero() && now.Sub(d.strainAt) < d.cfg.DeadAfter)
	d.strained = false
	switch {
	case late || mass || strained:
		d.health = min(d.health+1, d.cfg.MaxHealth)
	case d.health > 0:
		d.health--
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
