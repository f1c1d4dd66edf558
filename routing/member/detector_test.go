package member

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim drives a detector on a virtual clock: ticks every heartbeat, and
// the hosts in speaking heard at each tick.
type sim struct {
	t      *testing.T
	d      *Detector
	now    time.Time
	log    []Change
	health int // the highest health seen
}

func newSim(t *testing.T, cfg Config, hosts ...task.HostID) *sim {
	t.Helper()
	d, err := NewDetector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, d: d, now: t0}
	for _, h := range hosts {
		d.Add(h, t0)
	}
	return s
}

// run advances n heartbeats; speaking hosts are heard just before each
// tick.
func (s *sim) run(n int, speaking ...task.HostID) {
	hb := s.d.Config().Heartbeat
	for range n {
		s.now = s.now.Add(hb)
		for _, h := range speaking {
			s.d.Heard(h, s.now.Add(-time.Millisecond))
		}
		for _, c := range s.d.Tick(s.now) {
			c.Silent = c.Silent.Round(time.Millisecond)
			s.log = append(s.log, c)
		}
		s.health = max(s.health, s.d.Health())
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Alive: "alive", Suspected: "suspected", Dead: "dead", 9: "State(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	d, err := NewDetector(Config{Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Config()
	if c.DeadAfter != 500*time.Millisecond || c.SuspectAfter != 200*time.Millisecond || c.Phi != 8 || c.Window != 32 || c.MaxHealth != 4 || c.MassMin != 3 {
		t.Errorf("defaults: %+v", c)
	}
	if _, err := NewDetector(Config{SuspectAfter: 3 * time.Second, DeadAfter: time.Second}); !errors.Is(err, ErrConfig) {
		t.Errorf("suspicion after death: %v, want ErrConfig", err)
	}
	d, _ = NewDetector(Config{Heartbeat: time.Second, DeadAfter: time.Second})
	if got := d.Config().SuspectAfter; got != 500*time.Millisecond {
		t.Errorf("SuspectAfter capped at half of DeadAfter: %v", got)
	}
}

// TestSteadyHostsStayAlive: hosts heard every heartbeat are never
// suspected, and a healthy observer's health stays 0.
func TestSteadyHostsStayAlive(t *testing.T) {
	s := newSim(t, Config{}, 2, 3, 4)
	s.run(100, 2, 3, 4)
	if len(s.log) != 0 || s.d.Health() != 0 {
		t.Fatalf("changes %v, health %d", s.log, s.d.Health())
	}
	for _, h := range []task.HostID{2, 3, 4} {
		if s.d.State(h) != Alive {
			t.Errorf("%v: %v", h, s.d.State(h))
		}
	}
	if s.d.State(9) != Dead || s.d.Silent(9, s.now) != 0 {
		t.Error("an unwatched host is dead and silent 0")
	}
}

// TestSilentHostSuspectedThenDead: a host that falls silent is suspected
// after SuspectAfter and confirmed dead after DeadAfter (within a
// heartbeat), never dead without suspicion first; the others stay alive.
func TestSilentHostSuspectedThenDead(t *testing.T) {
	s := newSim(t, Config{}, 2, 3, 4, 5)
	s.run(10, 2, 3, 4, 5)
	s.run(10, 2, 3, 4)
	if len(s.log) != 2 {
		t.Fatalf("changes %v, want suspicion then death of h5", s.log)
	}
	sus, dead := s.log[0], s.log[1]
	if sus.Host != 5 || sus.From != Alive || sus.To != Suspected || sus.Silent < 2*time.Second || sus.Silent > 3*time.Second+time.Millisecond {
		t.Errorf("suspicion: %v", sus)
	}
	if dead.Host != 5 || dead.From != Suspected || dead.To != Dead || dead.Silent < 5*time.Second || dead.Silent > 6*time.Second {
		t.Errorf("death: %v", dead)
	}
	if s.d.State(5) != Dead {
		t.Errorf("h5 %v", s.d.State(5))
	}
	s.d.Heard(5, s.now.Add(time.Second))
	s.run(3, 2, 3, 4)
	if s.d.State(5) != Dead || len(s.log) != 2 {
		t.Errorf("dead is final: %v, %v", s.d.State(5), s.log)
	}
}

// TestSuspicionCleared: a suspected host heard again is alive again, and
// is not deleted.
func TestSuspicionCleared(t *testing.T) {
	s := newSim(t, Config{}, 2, 3, 4, 5)
	s.run(10, 2, 3, 4, 5)
	s.run(3, 2, 3, 4)
	s.run(10, 2, 3, 4, 5)
	want := []Change{{Host: 5, From: Alive, To: Suspected, Silent: 3*time.Second + time.Millisecond}, {Host: 5, From: Suspected, To: Alive, Silent: time.Millisecond}}
	if len(s.log) != 2 || s.log[0] != want[0] || s.log[1] != want[1] {
		t.Fatalf("changes %v, want %v", s.log, want)
	}
}

// TestStalledObserverAccusesNobody: the observer stops for far longer
// than DeadAfter (its ticks and its reading stop); when it runs again and
// hears the hosts, nobody is deleted, and its health rose.
func TestStalledObserverAccusesNobody(t *testing.T) {
	s := newSim(t, Config{}, 2, 3, 4, 5)
	s.run(10, 2, 3, 4, 5)
	s.now = s.now.Add(30 * time.Second) // no tick, nothing read
	got := s.d.Tick(s.now)
	for _, c := range got {
		if c.To == Dead {
			t.Fatalf("stalled observer deleted %v", c)
		}
	}
	if s.d.Health() != 1 {
		t.Errorf("health %d after a stall, want 1", s.d.Health())
	}
	s.run(10, 2, 3, 4, 5)
	for _, h := range []task.HostID{2, 3, 4, 5} {
		if s.d.State(h) != Alive {
			t.Errorf("%v: %v", h, s.d.State(h))
		}
	}
	if s.d.Health() != 0 {
		t.Errorf("health %d, want back to 0", s.d.Health())
	}
}

// TestRepeatedStallsStillDetect: an observer stalled at every tick still
// confirms a really dead host, later than a healthy one but within
// (1+MaxHealth)·DeadAfter of its silence as credited.
func TestRepeatedStallsStillDetect(t *testing.T) {
	s := newSim(t, Config{}, 2, 3)
	s.run(5, 2, 3)
	var deadAt time.Duration
	start := s.now
	for i := 0; i < 200 && deadAt == 0; i++ {
		s.now = s.now.Add(2 * time.Second) // every tick a second late
		s.d.Heard(2, s.now.Add(-time.Millisecond))
		for _, c := range s.d.Tick(s.now) {
			if c.Host == 3 && c.To == Dead {
				deadAt = s.now.Sub(start)
			}
			if c.Host == 2 && c.To != Alive {
				t.Fatalf("a host heard at every tick: %v", c)
			}
		}
	}
	if deadAt == 0 {
		t.Fatal("a dead host was never confirmed under repeated stalls")
	}
	// Each 2 s tick credits 1 s: silence grows a second per tick, and the
	// death timeout is at most 5×5 s.
	if deadAt > 2*(25*time.Second+time.Second) {
		t.Errorf("confirmed after %v", deadAt)
	}
}

// TestMassSuspicionWidens: half of the hosts fall silent at once (a
// partition of the master from them, or the master's own trouble): health
// rises, and their deletion waits longer than DeadAfter, at most
// (1+MaxHealth)·DeadAfter.
func TestMassSuspicionWidens(t *testing.T) {
	all := []task.HostID{2, 3, 4, 5, 6, 7, 8, 9}
	s := newSim(t, Config{}, all...)
	s.run(10, all...)
	s.run(40, 2, 3, 4, 5)
	if s.health < 2 {
		t.Errorf("health rose to %d under mass suspicion, want at least 2", s.health)
	}
	if s.d.Health() != 0 {
		t.Errorf("health %d once the silent hosts are gone, want 0", s.d.Health())
	}
	dead := map[task.HostID]time.Duration{}
	for _, c := range s.log {
		if c.To == Dead {
			dead[c.Host] = c.Silent
		}
		if c.Host < 6 {
			t.Errorf("a host heard from changed: %v", c)
		}
	}
	for _, h := range []task.HostID{6, 7, 8, 9} {
		sil, ok := dead[h]
		if !ok {
			t.Errorf("%v never confirmed dead", h)
			continue
		}
		if sil <= 5*time.Second || sil > 26*time.Second {
			t.Errorf("%v dead after %v of silence, want in (DeadAfter, 5·DeadAfter]", h, sil)
		}
	}
}

// TestPhiAdaptsToSlowHost: a host whose words come every 3 s, irregularly,
// is suspected later than SuspectAfter, and not at all while it keeps its
// pace; one that speaks every heartbeat is suspected after its phi bound.
func TestPhiAdaptsToSlowHost(t *testing.T) {
	s := newSim(t, Config{DeadAfter: 20 * time.Second}, 2, 3)
	for i := range 100 {
		if i == 30 {
			s.log = nil // while it learns the pace, h2 may be suspected
		}
		s.run(1, 3)
		if i%3 == 2 {
			s.d.Heard(2, s.now.Add(-time.Duration(i%5)*100*time.Millisecond))
		}
	}
	if len(s.log) != 0 {
		t.Fatalf("a slow but steady host was suspected: %v", s.log)
	}
	if got := s.d.SuspectTimeout(2); got <= 3*time.Second || got > 20*time.Second {
		t.Errorf("slow host's suspicion timeout %v", got)
	}
	// One heartbeat apart, spread at least a quarter heartbeat: 1 s +
	// 0.25 s·√2·erfcinv(2e-8).
	if got := s.d.SuspectTimeout(3); got < 2300*time.Millisecond || got > 2500*time.Millisecond {
		t.Errorf("steady host's suspicion timeout %v, want about 2.4 s", got)
	}
	if got := s.d.DeadTimeout(); got != 20*time.Second {
		t.Errorf("dead timeout %v", got)
	}
}

// TestRemoveAndReAdd: a removed host is forgotten; added again, it starts
// afresh as alive.
func TestRemoveAndReAdd(t *testing.T) {
	s := newSim(t, Config{}, 2)
	s.run(10)
	if s.d.State(2) != Dead {
		t.Fatalf("h2 %v", s.d.State(2))
	}
	s.d.Remove(2)
	s.d.Add(2, s.now)
	s.log = nil
	s.run(1, 2)
	if s.d.State(2) != Alive || len(s.log) != 0 || s.d.Silent(2, s.now) != time.Millisecond {
		t.Errorf("re-added: %v %v %v", s.d.State(2), s.log, s.d.Silent(2, s.now))
	}
}

// TestStrainWidens: an observer strained by other work at every tick (a
// storm of registrations) widens its death timeout to the most, and lets
// it narrow again a tick at a time once the strain is over.
func TestStrainWidens(t *testing.T) {
	s := newSim(t, Config{}, 2)
	for range 10 {
		s.d.Strain()
		s.run(1, 2)
	}
	if s.d.Health() != 4 || s.d.DeadTimeout() != 25*time.Second {
		t.Fatalf("strained: health %d, dead timeout %v", s.d.Health(), s.d.DeadTimeout())
	}
	s.run(4, 2)
	if s.d.Health() != 4 {
		t.Fatalf("within DeadAfter of the strain: health %d, want 4", s.d.Health())
	}
	s.run(3, 2)
	if s.d.Health() != 1 {
		t.Fatalf("three ticks from DeadAfter without strain: health %d, want 1", s.d.Health())
	}
	if len(s.log) != 0 {
		t.Errorf("changes %v", s.log)
	}
}
