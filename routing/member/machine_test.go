package member

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

func newMachine(t *testing.T, rate float64, burst int) *Machine {
	t.Helper()
	m, err := NewMachine(Config{Heartbeat: time.Second}, rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMachineAdmission: the bucket admits a burst, then tells hosts how
// long to wait; turning a host away strains the observer (its health
// rises at the next tick, and the machine reports it); a member told to
// wait counts as heard from.
func TestMachineAdmission(t *testing.T) {
	m := newMachine(t, 1, 2)
	now := t0
	m.Step(now, Event{Kind: Watch, Host: 5})
	for _, h := range []task.HostID{2, 3} {
		x := m.Step(now, Event{Kind: Join, Host: h})
		if len(x) != 1 || x[0].Kind != Admit || x[0].Host != h {
			t.Fatalf("join %v within the burst: %v, want admit", h, x)
		}
	}
	now = now.Add(900 * time.Millisecond)
	x := m.Step(now, Event{Kind: Join, Host: 5, Member: true})
	if len(x) != 1 || x[0].Kind != Busy || x[0].Host != 5 || x[0].RetryAfter <= 0 || x[0].RetryAfter > 100*time.Millisecond {
		t.Fatalf("join past the burst: %v, want busy for at most 100ms", x)
	}
	if s := m.Silent(5, now); s != 0 {
		t.Fatalf("a member told to wait is silent for %v, want 0", s)
	}
	x = m.Step(now.Add(time.Second), Event{Kind: Tick})
	if len(x) != 1 || x[0].Kind != Health || x[0].Was != 0 || x[0].Health != 1 || x[0].DeadAfter != 2*m.Config().DeadAfter {
		t.Fatalf("tick after a strain: %v, want health 0→1 with the death timeout doubled", x)
	}
	if m.Health() != 1 {
		t.Fatalf("health %d, want 1", m.Health())
	}
	x = m.Step(now.Add(2*time.Second), Event{Kind: Join, Host: 6})
	if len(x) != 1 || x[0].Kind != Admit {
		t.Fatalf("join after the refill: %v, want admit", x)
	}
}

// TestMachineVerdicts: a silent host is suspected, then deleted; a
// suspected host heard from again is cleared; a host that speaks yields
// nothing; a forgotten host is judged no more.
func TestMachineVerdicts(t *testing.T) {
	m := newMachine(t, 0, 1)
	now := t0
	for _, h := range []task.HostID{2, 3, 4, 5} {
		m.Step(now, Event{Kind: Watch, Host: h})
	}
	var got []Effect
	for i := range 8 {
		now = now.Add(time.Second)
		m.Step(now, Event{Kind: Heard, Host: 2, At: now.Add(-time.Millisecond)})
		if i < 3 || i > 5 {
			m.Step(now, Event{Kind: Heard, Host: 3, At: now.Add(-time.Millisecond)})
		}
		if i == 1 {
			m.Step(now, Event{Kind: Forget, Host: 5})
		}
		got = append(got, m.Step(now, Event{Kind: Tick})...)
	}
	var kinds []string
	for _, x := range got {
		if x.Host == 2 || x.Host == 5 {
			t.Fatalf("a host that speaks, or one forgotten, got %v", x)
		}
		kinds = append(kinds, x.String())
	}
	want := []string{
		"suspect h4 after 3s, dead after 5s",
		"delete h4 after 5s",
		"suspect h3 after 3.001s, dead after 5s",
		"clear h3 after 1ms",
	}
	if len(kinds) != len(want) {
		t.Fatalf("effects %q, want %q", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("effects %q, want %q", kinds, want)
		}
	}
	if m.State(4) != Dead || m.State(3) != Alive || m.State(5) != Dead {
		t.Fatalf("states h3 %v h4 %v h5 %v, want alive, dead and dead (not watched)", m.State(3), m.State(4), m.State(5))
	}
}

// TestMachineFollowsDetector: under seeded schedules of registrations,
// deletions, words heard and ticks (late ones too), the machine's effects
// are the detector's transitions, in order, and its health changes, each
// reported once with the death timeout of the tick.
func TestMachineFollowsDetector(t *testing.T) {
	seen := map[EffectKind]int{}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg := Config{Heartbeat: time.Second, MassMin: 2}
		m, err := NewMachine(cfg, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := NewDetector(cfg)
		now, health := t0, 0
		for range 200 {
			h := task.HostID(2 + rng.IntN(6))
			switch rng.IntN(6) {
			case 0:
				m.Step(now, Event{Kind: Watch, Host: h})
				d.Add(h, now)
			case 1:
				m.Step(now, Event{Kind: Forget, Host: h})
				d.Remove(h)
			case 2, 3:
				at := now.Add(-time.Duration(rng.IntN(900)) * time.Millisecond)
				m.Step(now, Event{Kind: Heard, Host: h, At: at})
				d.Heard(h, at)
			default:
				now = now.Add(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
				got := m.Step(now, Event{Kind: Tick})
				changes := d.Tick(now)
				var want []Effect
				if d.Health() != health {
					want = append(want, Effect{Kind: Health, Health: d.Health(), Was: health, DeadAfter: d.DeadTimeout()})
					health = d.Health()
				}
				for _, c := range changes {
					x := Effect{Host: c.Host, Silent: c.Silent}
					switch c.To {
					case Suspected:
						x.Kind, x.DeadAfter = Suspect, d.DeadTimeout()
					case Alive:
						x.Kind = Clear
					case Dead:
						x.Kind = Delete
					}
					want = append(want, x)
				}
				if len(got) != len(want) {
					t.Fatalf("seed %d at %v: effects %v, want %v", seed, now, got, want)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("seed %d at %v: effects %v, want %v", seed, now, got, want)
					}
					seen[got[i].Kind]++
				}
			}
		}
	}
	for _, k := range []EffectKind{Suspect, Clear, Delete, Health} {
		if seen[k] == 0 {
			t.Errorf("no %v effect in any schedule: %v", k, seen)
		}
	}
	t.Logf("effects: %v", seen)
}

// TestMachineReturn: a host deleted for its silence, or while it
// rejoined, may register again under its name and is watched again; an
// operator's deletion is final; another name is refused; registering
// anew forgets the deletion; at most MaxGone deletions are remembered,
// the oldest forgotten first.
func TestMachineReturn(t *testing.T) {
	m := newMachine(t, 0, 1)
	now := t0
	ret := func(h task.HostID, name string) []Effect {
		return m.Step(now, Event{Kind: Return, Host: h, Name: name})
	}
	m.Step(now, Event{Kind: Forget, Host: 2, Name: "h2", Silent: true})
	m.Step(now, Event{Kind: Forget, Host: 3, Name: "h3"})
	m.Step(now, Event{Kind: Forget, Host: 4, Name: "h4", Rejoining: true})
	if x := ret(2, "other"); len(x) != 1 || x[0].Kind != Refuse || x[0].Err == nil || x[0].Err.Error() != "host h2 was h2, not other" {
		t.Fatalf("return under another name: %v, want refused", x)
	}
	if x := ret(2, "h2"); len(x) != 1 || x[0].Kind != Readmit || x[0].Host != 2 {
		t.Fatalf("return of a host deleted for its silence: %v, want readmit", x)
	}
	if m.State(2) != Alive {
		t.Fatalf("readmitted host %v, want watched and alive", m.State(2))
	}
	if x := ret(2, "h2"); len(x) != 0 {
		t.Fatalf("a second return: %v, want nothing (it is watched again)", x)
	}
	if x := ret(3, "h3"); len(x) != 0 {
		t.Fatalf("return after an operator's deletion: %v, want nothing", x)
	}
	m.Step(now, Event{Kind: Watch, Host: 4})
	if x := ret(4, "h4"); len(x) != 0 {
		t.Fatalf("return of a host registered anew: %v, want nothing", x)
	}
	for i := range MaxGone + 1 {
		h := task.HostID(100 + i)
		m.Step(now, Event{Kind: Forget, Host: h, Name: h.String(), Silent: true})
	}
	if x := ret(100, task.HostID(100).String()); len(x) != 0 {
		t.Fatalf("return of the oldest past the bound: %v, want nothing", x)
	}
	if x := ret(101, task.HostID(101).String()); len(x) != 1 || x[0].Kind != Readmit {
		t.Fatalf("return of the next oldest: %v, want readmit", x)
	}
}
