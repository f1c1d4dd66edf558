package jobck

import (
	"errors"
	"testing"
	"time"

	"github.com/dpvm/dpvm/task"
)

// TestBudget: the pause budget is Factor times the longest safe point
// interval of the latest round that reported one, within its bounds.
func TestBudget(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		reports []time.Duration
		want    time.Duration
	}{
		{"nothing seen: the minimum", Config{}, nil, 50 * time.Millisecond},
		{"fast tasks: the minimum", Config{}, []time.Duration{time.Millisecond, 5 * time.Millisecond}, 50 * time.Millisecond},
		{"CG class B, 0.7 s", Config{MinPause: 500 * time.Millisecond}, []time.Duration{700 * time.Millisecond, 300 * time.Millisecond}, 2100 * time.Millisecond},
		{"bounded above", Config{MaxPause: time.Second}, []time.Duration{700 * time.Millisecond}, time.Second},
		{"another factor", Config{Factor: 2}, []time.Duration{100 * time.Millisecond}, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := New(1, 0, c.cfg)
			now := base
			acts, err := m.Step(Event{Kind: EvCheckpoint, Now: now, Hosts: hostIDs(max(len(c.reports), 1))})
			if err != nil || len(acts) != 1 || acts[0].Kind != ActPause {
				t.Fatalf("start: %v %v", acts, err)
			}
			for i, r := range c.reports {
				if _, err := m.Step(Event{Kind: EvPaused, Now: now, Round: m.Round(), Host: task.HostID(i + 1), SafeEvery: r}); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.Budget(); got != c.want {
				t.Fatalf("budget %v, want %v", got, c.want)
			}
		})
	}
}

func hostIDs(n int) []task.HostID {
	hs := make([]task.HostID, n)
	for i := range hs {
		hs[i] = task.HostID(i + 1)
	}
	return hs
}

// TestSlowSafePointsGetCheckpoints: tasks that reach a safe point every
// 700 ms, more than the 500 ms the first round allows, fail that round
// only; the next rounds give them enough and complete.
func TestSlowSafePointsGetCheckpoints(t *testing.T) {
	const every = 700 * time.Millisecond
	m := New(9, 0, Config{MinPause: 500 * time.Millisecond, MaxPause: 5 * time.Second})
	now := base
	hosts := hostIDs(2)
	done, failed := 0, 0
	for round := 0; round < 4; round++ {
		acts, err := m.Step(Event{Kind: EvCheckpoint, Now: now, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		budget := acts[0].Budget
		r := m.Round()
		// Each host's tasks get to a safe point `every` after the pause
		// asks; a host whose budget is shorter gives up at the budget.
		var out []Action
		for _, h := range hosts {
			ev := Event{Kind: EvPaused, Round: r, Host: h, SafeEvery: every}
			if budget < every {
				ev.Now, ev.Err = now.Add(budget), errors.New("no safe point in time")
			} else {
				ev.Now = now.Add(every)
			}
			if out, err = m.Step(ev); err != nil {
				t.Fatal(err)
			}
		}
		for len(out) > 0 {
			a := out[0]
			out = out[1:]
			var next []Action
			switch a.Kind {
			case ActQuiet:
				for _, h := range a.Hosts {
					if next, err = m.Step(Event{Kind: EvQuiet, Now: now, Round: r, Host: h, Tasks: 2}); err != nil {
						t.Fatal(err)
					}
				}
			case ActWrite:
				for _, h := range a.Hosts {
					if next, err = m.Step(Event{Kind: EvWritten, Now: now, Round: r, Host: h, Tasks: 2}); err != nil {
						t.Fatal(err)
					}
				}
			case ActCommit:
				if next, err = m.Step(Event{Kind: EvCommitted, Now: now, Round: r}); err != nil {
					t.Fatal(err)
				}
			case ActDone:
				if a.Err != nil {
					failed++
				} else {
					done++
				}
			}
			out = append(out, next...)
		}
		now = now.Add(time.Second)
	}
	if failed != 1 || done != 3 || m.Seq() != 3 {
		t.Fatalf("%d rounds failed, %d completed, newest set %d; want 1, 3, 3", failed, done, m.Seq())
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Quieting.String(), "Quieting"},
		{State(99).String(), "State(99)"},
		{EvHostLost.String(), "host-lost"},
		{ActRolledBack.String(), "rolled-back"},
		{Rollback.String(), "rollback"},
		{Round{}.String(), "none"},
		{Round{Job: 2, Seq: 3, Try: 4, Kind: Checkpoint}.String(), "checkpoint j2 seq 3 try 4"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// TestRollbackAsksFailedKillsAgain: a host whose kill failed (its call
// timed out: it may still run the job's tasks) is asked again, alone, up
// to maxKills times in all, before the restore; once it answers, the
// restore starts on every host.
func TestRollbackAsksFailedKillsAgain(t *testing.T) {
	m := New(1, 3, Config{})
	now := base
	acts, err := m.Step(Event{Kind: EvHostLost, Now: now, Host: 4, Hosts: hostIDs(4)})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActKill || len(acts[0].Hosts) != 3 {
		t.Fatalf("host lost: %v %v", acts, err)
	}
	r := m.Round()
	timeout := errors.New("timed out")
	for _, h := range acts[0].Hosts {
		var e error
		if h == 2 {
			e = timeout
		}
		acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: h, Err: e})
		if err != nil {
			t.Fatal(err)
		}
	}
	for try := 2; try <= maxKills; try++ {
		if len(acts) != 1 || acts[0].Kind != ActKill || len(acts[0].Hosts) != 1 || acts[0].Hosts[0] != 2 {
			t.Fatalf("after a failed kill on h2 (try %d): %v, want the kill asked of h2 again", try, acts)
		}
		if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 2, Err: timeout}); err != nil {
			t.Fatal(err)
		}
	}
	if len(acts) != 1 || acts[0].Kind != ActRestore || len(acts[0].Hosts) != 3 {
		t.Fatalf("after %d failed kills: %v, want the restore on the 3 hosts", maxKills, acts)
	}

	// A kill that succeeds when asked again goes straight to the restore.
	m = New(1, 3, Config{})
	if acts, err = m.Step(Event{Kind: EvHostLost, Now: now, Host: 2, Hosts: hostIDs(2)}); err != nil || len(acts) != 1 || acts[0].Kind != ActKill {
		t.Fatalf("host lost: %v %v", acts, err)
	}
	r = m.Round()
	if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 1, Err: timeout}); err != nil || len(acts) != 1 || acts[0].Kind != ActKill {
		t.Fatalf("after a failed kill: %v %v", acts, err)
	}
	if acts, err = m.Step(Event{Kind: EvKilled, Now: now, Round: r, Host: 1}); err != nil || len(acts) != 1 || acts[0].Kind != ActRestore {
		t.Fatalf("after the kill asked again succeeded: %v %v", acts, err)
	}
}
